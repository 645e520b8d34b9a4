//! EnvPool behaviour on a scripted test env: ids, batches, errors, horizon, panics, memory.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use agentgym_envserver::env::{EnvError, EnvFactory, Prepared, StepOutcome, TextEnv};
use agentgym_envserver::{EnvPool, Options, PoolError};

/// Counts steps; "win" finishes with reward 1; "panic" panics; the observation echoes.
struct Script {
    task: u64,
    obs: String,
    _ballast: Vec<u8>,
}

impl TextEnv for Script {
    fn reset(&mut self, task_id: u64) -> Result<String, EnvError> {
        if task_id == 13 {
            panic!("unlucky task");
        }
        self.task = task_id;
        self.obs = format!("task {task_id}");
        Ok(self.obs.clone())
    }
    fn step(&mut self, action: &str) -> StepOutcome {
        if action == "panic" {
            panic!("scripted panic");
        }
        self.obs = format!("task {} did {action}", self.task);
        let done = action == "win";
        StepOutcome { observation: self.obs.clone(), reward: if done { 1.0 } else { 0.0 }, done }
    }
    fn observation(&self) -> String {
        self.obs.clone()
    }
}

struct ScriptFactory;

impl EnvFactory for ScriptFactory {
    fn name(&self) -> &str {
        "script"
    }
    fn num_tasks(&self) -> u64 {
        100
    }
    fn make(&self) -> Box<dyn TextEnv> {
        Box::new(Script { task: 0, obs: String::new(), _ballast: vec![0u8; 1024] })
    }
}

fn pool() -> EnvPool {
    EnvPool::with_factory(Arc::new(ScriptFactory), Some(2))
}

#[test]
fn ids_are_never_reused() {
    let p = pool();
    let a = p.create(3).unwrap();
    p.close(&a).unwrap();
    let b = p.create(3).unwrap();
    assert!(a.iter().all(|id| !b.contains(id)));
    assert_eq!(p.len(), 3);
}

#[test]
fn batch_step_in_order() {
    let p = pool();
    let ids = p.create(50).unwrap();
    let tasks: Vec<i64> = (20..70).collect();
    let obs = p.reset(&ids, &tasks).unwrap();
    assert_eq!(obs[7], Ok("task 27".to_string()));
    let actions: Vec<String> = (0..50).map(|i| format!("a{i}")).collect();
    let out = p.step(&ids, &actions).unwrap();
    for (i, r) in out.iter().enumerate() {
        assert_eq!(r.observation, format!("task {} did a{i}", i + 20));
        assert!(r.error.is_none());
    }
}

#[test]
fn unknown_duplicate_and_mismatched_batches_change_nothing() {
    let p = pool();
    let ids = p.create(2).unwrap();
    p.reset(&ids, &[1, 2]).unwrap();
    assert_eq!(p.step(&[ids[0], 999], &["x", "y"]), Err(PoolError::UnknownSession(999)));
    assert_eq!(p.step(&[ids[0], ids[0]], &["x", "y"]), Err(PoolError::DuplicateSession(ids[0])));
    assert!(matches!(p.step(&ids, &["x"]), Err(PoolError::LengthMismatch { .. })));
    // Nothing was stepped by the refused batches.
    assert_eq!(p.observations(&ids).unwrap(), vec!["task 1", "task 2"]);
    p.close(&ids[..1]).unwrap();
    assert_eq!(p.close(&ids), Err(PoolError::UnknownSession(ids[0])));
    assert_eq!(p.len(), 1, "a refused close closes nothing");
}

#[test]
fn task_ids_are_range_checked() {
    let p = pool();
    let ids = p.create(1).unwrap();
    assert!(matches!(p.reset(&ids, &[-1]), Err(PoolError::TaskOutOfRange { task_id: -1, .. })));
    assert!(matches!(p.reset(&ids, &[100]), Err(PoolError::TaskOutOfRange { task_id: 100, .. })));
}

/// The script env, declaring that it wraps task ids past the end (as TextCraft does).
struct WrappingFactory;

impl EnvFactory for WrappingFactory {
    fn name(&self) -> &str {
        "wrapping"
    }
    fn num_tasks(&self) -> u64 {
        100
    }
    fn takes_ids_past_end(&self) -> bool {
        true
    }
    fn make(&self) -> Box<dyn TextEnv> {
        ScriptFactory.make()
    }
}

#[test]
fn only_cpu_bound_envs_call_their_steps_cheap() {
    // TextCraft's (it needs a recipes folder) is checked beside its fixture, search's in its tests.
    assert!(EnvPool::new("babyai", &Options::new(), Some(1)).unwrap().steps_are_cheap());
    assert!(!EnvPool::with_factory(Arc::new(WrappingFactory), Some(1)).steps_are_cheap(), "the default");
}

#[test]
fn envs_that_wrap_get_ids_past_the_end() {
    let p = EnvPool::with_factory(Arc::new(WrappingFactory), Some(2));
    let ids = p.create(1).unwrap();
    assert_eq!(p.reset(&ids, &[250]).unwrap(), [Ok("task 250".to_string())], "the env reduces the id");
    assert!(p.check_task_id(i64::MAX).is_ok());
    assert!(matches!(p.reset(&ids, &[-1]), Err(PoolError::TaskOutOfRange { task_id: -1, .. })));
}

#[test]
fn per_session_errors_do_not_disturb_others() {
    let p = pool();
    let ids = p.create(3).unwrap();
    p.reset(&ids, &[0, 1, 2]).unwrap();
    let long = "x".repeat(5000);
    let out = p.step(&ids, &["panic", long.as_str(), "ok"]).unwrap();
    assert!(out[0].error.as_ref().unwrap().contains("scripted panic"));
    assert!(out[1].error.as_ref().unwrap().contains("5000 bytes"));
    assert_eq!(out[2].observation, "task 2 did ok");
    // The panicked session refuses steps until reset; the others go on.
    let out = p.step(&ids, &["a", "b", "c"]).unwrap();
    assert!(out[0].error.as_ref().unwrap().contains("failed earlier"));
    assert!(out[1].error.is_none());
    p.reset(&ids[..1], &[5]).unwrap();
    assert!(p.step(&ids[..1], &["a"]).unwrap()[0].error.is_none());
}

#[test]
fn panic_in_reset_is_a_per_session_error() {
    let p = pool();
    let ids = p.create(2).unwrap();
    let out = p.reset(&ids, &[13, 1]).unwrap();
    assert!(out[0].as_ref().unwrap_err().contains("unlucky task"));
    assert_eq!(out[1], Ok("task 1".into()));
}

#[test]
fn fresh_and_finished_sessions_refuse_steps() {
    let p = pool();
    let ids = p.create(1).unwrap();
    assert!(p.step(&ids, &["a"]).unwrap()[0].error.as_ref().unwrap().contains("not been reset"));
    p.reset(&ids, &[0]).unwrap();
    let r = &p.step(&ids, &["win"]).unwrap()[0];
    assert!(r.done && r.reward == 1.0 && !r.truncated);
    assert!(p.step(&ids, &["a"]).unwrap()[0].error.as_ref().unwrap().contains("is done"));
}

#[test]
fn horizon_cap_truncates() {
    let p = pool();
    p.set_horizon(Some(3));
    let ids = p.create(1).unwrap();
    p.reset(&ids, &[0]).unwrap();
    let flags: Vec<bool> = (0..3).map(|_| p.step(&ids, &["a"]).unwrap()[0].truncated).collect();
    assert_eq!(flags, vec![false, false, true]);
    assert!(p.step(&ids, &["a"]).unwrap()[0].error.as_ref().unwrap().contains("horizon cap"));
    p.set_horizon(None);
    p.reset(&ids, &[0]).unwrap();
    assert!((0..10).all(|_| !p.step(&ids, &["a"]).unwrap()[0].truncated));
}

#[test]
fn max_sessions_is_enforced() {
    let mut p = pool();
    p.set_max_sessions(4);
    p.create(3).unwrap();
    assert!(matches!(p.create(2), Err(PoolError::TooManySessions { .. })));
    assert_eq!(p.len(), 3);
}

#[test]
fn unknown_env_names_the_known_ones() {
    let err = EnvPool::new("nope", &Default::default(), Some(1)).err().unwrap();
    let msg = err.to_string();
    assert!(msg.contains("\"nope\"") && msg.contains("babyai") && msg.contains("textcraft"), "{msg}");
}

#[test]
fn info_reports_phase() {
    let p = pool();
    let ids = p.create(1).unwrap();
    assert_eq!(p.info(&ids).unwrap()[0]["phase"], "fresh");
    p.reset(&ids, &[4]).unwrap();
    let info = &p.info(&ids).unwrap()[0];
    assert_eq!(info["phase"], "running");
    assert_eq!(info["task_id"], 4);
}

#[test]
fn concurrent_callers_get_their_own_results_in_order() {
    // Three threads step their own sessions at once for many batches: the pool's tuner tries
    // both serial and split batches, and a caller that finds the helpers busy works alone.
    let p = EnvPool::with_factory(Arc::new(ScriptFactory), Some(3));
    std::thread::scope(|scope| {
        for caller in 0..3u64 {
            let p = &p;
            scope.spawn(move || {
                let ids = p.create(40).unwrap();
                let tasks: Vec<i64> = (0..40).map(|i| (i + 10 * caller as i64) % 13 + 20).collect();
                p.reset(&ids, &tasks).unwrap();
                for round in 0..150 {
                    let actions: Vec<String> = (0..40).map(|i| format!("c{caller}r{round}i{i}")).collect();
                    let out = p.step(&ids, &actions).unwrap();
                    for (i, r) in out.iter().enumerate() {
                        assert_eq!(r.observation, format!("task {} did {}", tasks[i], actions[i]));
                    }
                }
            });
        }
    });
    assert_eq!(p.stats.steps.load(std::sync::atomic::Ordering::Relaxed), 3 * 40 * 150);
}

#[test]
fn expert_moves_per_session_or_why_not() {
    // The scripted env has no expert; a fresh session is refused before the env is asked.
    let p = pool();
    let ids = p.create(2).unwrap();
    p.reset(&ids[..1], &[1]).unwrap();
    let out = p.expert(&ids).unwrap();
    assert!(out[0].as_ref().unwrap_err().contains("no expert"), "{out:?}");
    assert!(out[1].as_ref().unwrap_err().contains("reset"), "{out:?}");
    assert!(matches!(p.expert(&[999]), Err(PoolError::UnknownSession(999))));

    // BabyAI's bot: its moves are listed actions and play the episodes to success.
    let p = EnvPool::new("babyai", &Default::default(), Some(2)).unwrap();
    let ids = p.create(3).unwrap();
    p.reset(&ids, &[0, 6, 21]).unwrap();
    let mut done = [false; 3];
    for _ in 0..60 {
        let live: Vec<u64> = ids.iter().zip(done).filter(|(_, d)| !d).map(|(&id, _)| id).collect();
        if live.is_empty() {
            break;
        }
        let moves = p.expert(&live).unwrap();
        let menus = p.available_actions(&live).unwrap();
        let actions: Vec<String> = moves.into_iter().map(|m| m.unwrap().action).collect();
        for (a, menu) in actions.iter().zip(&menus) {
            assert!(menu.as_ref().unwrap().contains(a), "{a:?} not in {menu:?}");
        }
        for (id, r) in live.iter().zip(p.step(&live, &actions).unwrap()) {
            if r.done {
                assert!(r.reward > 0.0, "session {id}");
                done[ids.iter().position(|x| x == id).unwrap()] = true;
            }
        }
    }
    assert_eq!(done, [true; 3]);
}

/// Looks each action up in what the factory prepared for the batch: a prepared `Err` is a
/// per-session error, an action the factory did not prepare is echoed.
struct Lookup {
    obs: String,
}

impl TextEnv for Lookup {
    fn reset(&mut self, _task_id: u64) -> Result<String, EnvError> {
        self.obs = "start".into();
        Ok(self.obs.clone())
    }
    fn step(&mut self, action: &str) -> StepOutcome {
        self.step_prepared(action, None).unwrap()
    }
    fn step_prepared(&mut self, action: &str, prepared: Option<&Prepared>) -> Result<StepOutcome, String> {
        let table = prepared.and_then(|p| p.downcast_ref::<HashMap<String, Result<String, String>>>());
        let answer = table.and_then(|t| t.get(action).cloned()).unwrap_or_else(|| Ok(format!("unprepared {action}")));
        self.obs = answer?;
        Ok(StepOutcome { observation: self.obs.clone(), reward: 0.0, done: false })
    }
    fn observation(&self) -> String {
        self.obs.clone()
    }
}

/// Prepares an answer per distinct action ("down" fails), counting its calls.
#[derive(Default)]
struct LookupFactory {
    calls: Mutex<Vec<Vec<String>>>,
}

impl EnvFactory for LookupFactory {
    fn name(&self) -> &str {
        "lookup"
    }
    fn num_tasks(&self) -> u64 {
        1
    }
    fn make(&self) -> Box<dyn TextEnv> {
        Box::new(Lookup { obs: String::new() })
    }
    fn prepare_step(&self, actions: &[&str]) -> Option<Box<Prepared>> {
        self.calls.lock().unwrap().push(actions.iter().map(|a| a.to_string()).collect());
        let answer = |a: &str| if a == "down" { Err("service down".to_string()) } else { Ok(format!("prepared {a}")) };
        let table: HashMap<String, Result<String, String>> =
            actions.iter().map(|a| (a.to_string(), answer(a))).collect();
        Some(Box::new(table))
    }
}

#[test]
fn a_batch_is_prepared_once_and_a_prepared_error_leaves_the_session_unchanged() {
    let factory = Arc::new(LookupFactory::default());
    let mut pool = EnvPool::with_factory(factory.clone(), Some(2));
    pool.set_max_action_bytes(8);
    let ids = pool.create(40).unwrap();
    pool.reset(&ids, &vec![0; 40]).unwrap();
    let actions: Vec<&str> = (0..40).map(|i| ["a", "b", "down", "far too long"][i % 4]).collect();
    let out = pool.step(&ids, &actions).unwrap();
    let calls = factory.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 1, "one preparation per batch");
    assert_eq!(calls[0].len(), 30, "actions over the length cap are not prepared");
    for (i, r) in out.iter().enumerate() {
        match i % 4 {
            0 => assert_eq!(r.observation, "prepared a"),
            1 => assert_eq!(r.observation, "prepared b"),
            2 => assert_eq!(r.error.as_deref(), Some(format!("session {}: service down", ids[i]).as_str())),
            _ => assert!(r.error.as_ref().unwrap().contains("byte cap")),
        }
    }
    let info = pool.info(&ids[2..3]).unwrap().remove(0);
    assert_eq!((info["pool_steps"].as_u64(), info["phase"].as_str()), (Some(0), Some("running")));
    assert_eq!(pool.observations(&ids[2..3]).unwrap(), ["start"]);
}
