//! Pure-Rust step throughput of one env, without Python: a profiling target.
//!
//!     cargo run --release -p agentgym-envserver --features mimalloc --example steps -- babyai 64 3
//!
//! Arguments: env name, sessions, seconds, and optionally pool threads (0: one per core;
//! default: 1, then one per core). Each round steps every session once with a random
//! action from its available actions (BabyAI) or `inventory` (envs without a menu); finished
//! sessions reset to the next task id. Prints steps/s on one thread and on the pool.
//! `ROUNDS=N` runs exactly N rounds instead of a time budget: a fixed amount of work whose
//! instruction count `valgrind --tool=callgrind` reports the same on every run.

use std::time::{Duration, Instant};

use agentgym_envserver::rng::Rng;
use agentgym_envserver::EnvPool;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let env = args.first().map_or("babyai", String::as_str);
    let sessions: usize = args.get(1).map_or(64, |s| s.parse().expect("sessions: an integer"));
    let seconds: f64 = args.get(2).map_or(3.0, |s| s.parse().expect("seconds: a number"));
    let fixed = std::env::var("FIXED_ACTION").is_ok();
    let rounds: Option<usize> = std::env::var("ROUNDS").ok().map(|r| r.parse().expect("ROUNDS: an integer"));
    let mut options = agentgym_envserver::env::Options::new();
    if env == "textcraft" {
        let dir = std::env::var("TEXTCRAFT_RECIPES").expect("set TEXTCRAFT_RECIPES to a recipes directory");
        options.insert("recipes_dir".into(), dir);
    }
    let threads_list: Vec<usize> = match args.get(3) {
        Some(t) => vec![t.parse().expect("threads: an integer (0: one per core)")],
        None => vec![1, 0],
    };
    for threads in threads_list {
        let pool = EnvPool::new(env, &options, if threads == 0 { None } else { Some(threads) }).expect("pool");
        let ids = pool.create(sessions).expect("create");
        // Task ids 0, 1, 2, ... wrapping at the env's number of tasks.
        let num_tasks = pool.num_tasks() as i64;
        let mut next_task = 0i64;
        let mut take = |n: usize| -> Vec<i64> {
            let t: Vec<i64> = (next_task..next_task + n as i64).map(|t| t % num_tasks).collect();
            next_task += n as i64;
            t
        };
        pool.reset(&ids, &take(sessions)).expect("reset");
        let mut rng = Rng::new(0);
        let (mut steps, mut in_step, start) = (0usize, 0.0f64, Instant::now());
        let more = |steps: usize| match rounds {
            Some(r) => steps < r * sessions,
            None => start.elapsed() < Duration::from_secs_f64(seconds),
        };
        while more(steps) {
            let menus = if fixed { vec![None; ids.len()] } else { pool.available_actions(&ids).expect("menus") };
            let actions: Vec<String> = menus
                .into_iter()
                .map(|m| match m {
                    Some(m) if !m.is_empty() => rng.choice(&m).clone(),
                    _ if env == "babyai" => "turn left".to_string(),
                    _ => "inventory".to_string(),
                })
                .collect();
            let t0 = Instant::now();
            let out = pool.step(&ids, &actions).expect("step");
            in_step += t0.elapsed().as_secs_f64();
            steps += sessions;
            let done: Vec<u64> = ids.iter().zip(&out).filter(|(_, r)| r.done || r.truncated).map(|(&i, _)| i).collect();
            if !done.is_empty() {
                pool.reset(&done, &take(done.len())).expect("reset");
            }
        }
        let rate = steps as f64 / start.elapsed().as_secs_f64();
        let step_rate = steps as f64 / in_step;
        println!(
            "{env}: {sessions} sessions, {} threads: {rate:.0} steps/s ({step_rate:.0}/s inside EnvPool::step)",
            pool.num_threads()
        );
    }
}

// With `python` on, the library already sets mimalloc as the allocator.
#[cfg(not(feature = "python"))]
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;
