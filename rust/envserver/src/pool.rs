//! EnvPool: a session table of text envs, stepped in batches by the caller and helper threads.
//!
//! Contract (mirrored by the Python facade `agentgym.envs.EnvPool`):
//! - Session ids are never reused; `close` drops the env and frees its memory.
//! - A batch is validated before any work: an unknown/closed id, the same id twice, or lists of
//!   different lengths reject the whole batch with a [`PoolError`] and change nothing.
//! - Per-session problems (an over-long action, stepping a finished episode, a panic inside the
//!   env, a remote service the env relies on failing) become that session's `error` while the
//!   rest of the batch proceeds normally.
//! - With a horizon cap, a session that has taken `cap` steps since its reset without finishing
//!   returns `truncated = true`; it must be reset before stepping again.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Mutex, RwLock};

use crate::env::{CustomTask, EnvError, ExpertMove, Options, Prepared, SharedFactory, TextEnv};
use crate::fasthash::{IdMap, IdSet};
use crate::rng::Rng;
use crate::workers::Workers;

/// Actions longer than this many bytes are refused (per-session error) without calling the env.
pub const DEFAULT_MAX_ACTION_BYTES: usize = 4096;

/// Batch-level errors: the whole call is refused and nothing changed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PoolError {
    #[error("unknown session id {0} (never created, or already closed)")]
    UnknownSession(u64),
    #[error("session id {0} appears more than once in one batch")]
    DuplicateSession(u64),
    #[error("length mismatch: {what}")]
    LengthMismatch { what: String },
    #[error("task id {task_id} is out of range: env {env:?} has task ids 0..{num_tasks}")]
    TaskOutOfRange { env: String, task_id: i64, num_tasks: u64 },
    #[error("too many sessions: {open} open + {requested} requested > max_sessions {max}")]
    TooManySessions { open: usize, requested: usize, max: usize },
    #[error(transparent)]
    Env(#[from] EnvError),
}

/// The result of stepping one session.
#[derive(Debug, Clone, PartialEq)]
pub struct StepResult {
    pub observation: String,
    pub reward: f32,
    pub done: bool,
    pub truncated: bool,
    /// Set when the step could not be taken; the session's state is then unchanged
    /// (or marked failed, after a panic inside the env).
    pub error: Option<String>,
}

impl StepResult {
    fn failed(message: String) -> Self {
        Self { observation: String::new(), reward: 0.0, done: false, truncated: false, error: Some(message) }
    }
}

/// Where a session stands; local and remote sessions share it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Phase {
    /// Created, never reset.
    Fresh,
    Running,
    /// The episode ended (done or truncated); only a reset continues.
    Finished {
        truncated: bool,
    },
    /// The env (or its server) failed; the message is kept and the session only accepts reset
    /// or close.
    Failed(String),
}

impl Phase {
    /// The phase as `info()` names it.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Phase::Fresh => "fresh",
            Phase::Running => "running",
            Phase::Finished { truncated: false } => "done",
            Phase::Finished { truncated: true } => "truncated",
            Phase::Failed(_) => "failed",
        }
    }

    /// Why session `id` cannot step in this phase, if it cannot.
    pub(crate) fn step_refusal(&self, id: u64) -> Option<String> {
        match self {
            Phase::Fresh => Some(format!("session {id} has not been reset; call reset first")),
            Phase::Finished { truncated } => {
                let why = if *truncated { "was truncated at the horizon cap" } else { "is done" };
                Some(format!("session {id}: the episode {why}; call reset before stepping"))
            }
            Phase::Failed(msg) => Some(format!("session {id} failed earlier ({msg}); reset or close it")),
            Phase::Running => None,
        }
    }
}

/// A pool's horizon cap: how many steps a session may take after its reset (`None`: no cap).
#[derive(Debug, Default)]
pub(crate) struct HorizonCap(AtomicU32);

impl HorizonCap {
    pub(crate) fn set(&self, cap: Option<u32>) {
        self.0.store(cap.unwrap_or(0), Ordering::Relaxed);
    }

    pub(crate) fn get(&self) -> Option<u32> {
        match self.0.load(Ordering::Relaxed) {
            0 => None,
            cap => Some(cap),
        }
    }
}

struct Session {
    env: Box<dyn TextEnv>,
    phase: Phase,
    steps: u32,
    task_id: Option<u64>,
}

type SessionRef = Arc<Mutex<Session>>;

/// Per-pool counters, exposed for metrics.
#[derive(Debug, Default)]
pub struct PoolStats {
    pub steps: AtomicU64,
    pub resets: AtomicU64,
    pub step_errors: AtomicU64,
    pub env_panics: AtomicU64,
}

impl PoolStats {
    /// The counters as (name, value) pairs, in the names the Python `stats()` uses.
    pub fn counters(&self) -> [(&'static str, u64); 4] {
        [
            ("steps", self.steps.load(Ordering::Relaxed)),
            ("resets", self.resets.load(Ordering::Relaxed)),
            ("step_errors", self.step_errors.load(Ordering::Relaxed)),
            ("env_panics", self.env_panics.load(Ordering::Relaxed)),
        ]
    }
}

/// A multiplexer of env sessions of one kind.
pub struct EnvPool {
    factory: SharedFactory,
    sessions: RwLock<IdMap<SessionRef>>,
    next_id: AtomicU64,
    horizon: HorizonCap,
    /// Threads that step a batch: the caller plus `helpers`.
    threads: usize,
    /// `threads - 1` helper threads (none when stepping is single-threaded).
    helpers: Option<Workers>,
    /// Per [`Op`]: whether splitting batches over threads pays on this machine.
    tuners: [Tuner; 4],
    max_action_bytes: usize,
    max_sessions: usize,
    /// Sessions closed since freed memory was last handed back ([`RELEASE_AFTER_CLOSING`]).
    closed_since_release: AtomicUsize,
    pub stats: PoolStats,
}

/// Below these many items a batch runs on the calling thread alone: waking a helper costs
/// tens of microseconds (more on virtual machines), a step a few, a reset (level generation)
/// far more, making a session almost nothing.
const MIN_PARALLEL_STEPS: usize = 16;
const MIN_PARALLEL_RESETS: usize = 2;
const MIN_PARALLEL_CREATES: usize = 1024;

/// Closing this many sessions (in one call or over several) hands freed memory back to the
/// OS at once on every pool thread (~60 us with a sleeping helper, so not on every close).
const RELEASE_AFTER_CLOSING: usize = 256;

/// Which batched operation a [`Tuner`] times.
#[derive(Clone, Copy)]
enum Op {
    Create = 0,
    Reset = 1,
    Step = 2,
    Sample = 3,
}

/// Every this many eligible batches, the mode that currently looks slower gets a burst of
/// [`EXPLORE_BURST`] batches; [`EXPLORE_EVERY_CLEAR`] once it is slower by 30% or more.
const EXPLORE_EVERY: u64 = 32;
const EXPLORE_EVERY_CLEAR: u64 = 256;
const EXPLORE_BURST: u64 = 4;

/// Decides, per operation, whether a batch runs on several threads or on the caller alone,
/// from measured time per item of both modes (moving averages).
///
/// The first batch after a switch of mode is not timed: helpers that slept through a run of
/// serial batches start cold (on the development VM a BabyAI batch split over two cold
/// threads was no faster than one thread, over two warm ones 1.7x faster), and timing that
/// batch alone would keep the pool serial for ever. Rather than guess per machine and env
/// (a TextCraft step takes ~0.3 us, a BabyAI step ~5 us), the pool measures.
#[derive(Default)]
struct Tuner {
    /// f64 bits of the average ns per item; 0 while never measured.
    serial_ns: AtomicU64,
    parallel_ns: AtomicU64,
    batches: AtomicU64,
    /// The mode of the previous batch (1 = parallel).
    last_parallel: AtomicBool,
}

impl Tuner {
    /// The mode of the next batch, and whether to time it.
    fn choose(&self) -> (bool, bool) {
        let k = self.batches.fetch_add(1, Ordering::Relaxed);
        let (serial, parallel) = (self.serial_ns.load(Ordering::Relaxed), self.parallel_ns.load(Ordering::Relaxed));
        let mode = if serial == 0 {
            false // time each mode first, serial first
        } else if parallel == 0 {
            true
        } else {
            let (serial, parallel) = (f64::from_bits(serial), f64::from_bits(parallel));
            let faster = parallel < serial;
            let every =
                if serial.max(parallel) >= 1.3 * serial.min(parallel) { EXPLORE_EVERY_CLEAR } else { EXPLORE_EVERY };
            if k % every < EXPLORE_BURST {
                !faster
            } else {
                faster
            }
        };
        let timed = self.last_parallel.swap(mode, Ordering::Relaxed) == mode;
        (mode, timed)
    }

    fn record(&self, parallel: bool, ns_per_item: f64) {
        let slot = if parallel { &self.parallel_ns } else { &self.serial_ns };
        let old = slot.load(Ordering::Relaxed);
        // A batch can stall (the OS ran something else on a helper's core): such an outlier
        // counts as at most twice the average, so one stall does not flip the mode.
        let new = if old == 0 {
            ns_per_item
        } else {
            let old = f64::from_bits(old);
            0.75 * old + 0.25 * ns_per_item.min(2.0 * old)
        };
        slot.store(new.max(f64::MIN_POSITIVE).to_bits(), Ordering::Relaxed);
    }
}

impl EnvPool {
    /// A pool for env `name` (see [`crate::envs::ENV_NAMES`]) with `threads` workers
    /// (`None`: one per core).
    pub fn new(name: &str, options: &Options, threads: Option<usize>) -> Result<Self, PoolError> {
        let factory = crate::envs::factory(name, options)?;
        Ok(Self::with_factory(factory, threads))
    }

    /// A pool over an already-built factory.
    pub fn with_factory(factory: SharedFactory, threads: Option<usize>) -> Self {
        let threads =
            threads.filter(|&t| t > 0).unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        // The calling thread is one of the `threads`: it works on every batch it submits.
        // If the OS refuses threads, the pool still works, on the caller alone.
        let helpers = (threads > 1).then(|| Workers::new(threads, "envpool").ok()).flatten();
        let threads = helpers.as_ref().map_or(1, Workers::threads);
        Self {
            factory,
            sessions: RwLock::new(IdMap::default()),
            next_id: AtomicU64::new(1),
            horizon: HorizonCap::default(),
            threads,
            helpers,
            tuners: Default::default(),
            max_action_bytes: DEFAULT_MAX_ACTION_BYTES,
            max_sessions: usize::MAX,
            closed_since_release: AtomicUsize::new(0),
            stats: PoolStats::default(),
        }
    }

    /// Caps action length (bytes); longer actions get a per-session error.
    pub fn set_max_action_bytes(&mut self, n: usize) {
        self.max_action_bytes = n;
    }

    /// Caps the number of open sessions; `create` beyond it fails with `TooManySessions`.
    pub fn set_max_sessions(&mut self, n: usize) {
        self.max_sessions = n;
    }

    /// [`crate::env::EnvFactory::steps_are_cheap`] of this pool's env.
    pub fn steps_are_cheap(&self) -> bool {
        self.factory.steps_are_cheap()
    }

    pub fn env_name(&self) -> &str {
        self.factory.name()
    }

    pub fn num_tasks(&self) -> u64 {
        self.factory.num_tasks()
    }

    /// Refuses a task id the env cannot play: negative, or past `num_tasks` where the env does
    /// not wrap ids.
    pub fn check_task_id(&self, task_id: i64) -> Result<(), PoolError> {
        let num_tasks = self.num_tasks();
        if task_id < 0 || (task_id as u64 >= num_tasks && !self.factory.takes_ids_past_end()) {
            return Err(PoolError::TaskOutOfRange { env: self.env_name().to_string(), task_id, num_tasks });
        }
        Ok(())
    }

    pub fn num_threads(&self) -> usize {
        self.threads
    }

    /// Number of open sessions.
    pub fn len(&self) -> usize {
        self.sessions.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sets (or with `None` removes) the horizon cap for steps taken from now on.
    pub fn set_horizon(&self, cap: Option<u32>) {
        self.horizon.set(cap);
    }

    pub fn horizon(&self) -> Option<u32> {
        self.horizon.get()
    }

    /// Opens `n` sessions (not yet reset) and returns their ids.
    pub fn create(&self, n: usize) -> Result<Vec<u64>, PoolError> {
        let envs: Vec<Box<dyn TextEnv>> =
            self.run_batch(Op::Create, None, n, MIN_PARALLEL_CREATES, |_| self.factory.make());
        let mut table = self.sessions.write();
        if table.len() + n > self.max_sessions {
            return Err(PoolError::TooManySessions { open: table.len(), requested: n, max: self.max_sessions });
        }
        let first = self.next_id.fetch_add(n as u64, Ordering::Relaxed);
        let ids: Vec<u64> = (first..first + n as u64).collect();
        for (id, env) in ids.iter().zip(envs) {
            let session = Session { env, phase: Phase::Fresh, steps: 0, task_id: None };
            table.insert(*id, Arc::new(Mutex::new(session)));
        }
        Ok(ids)
    }

    /// Starts the episode `task` describes in session `id` (see [`TextEnv::reset_custom`]). An
    /// env that refuses the description answers `PoolError::Env` and the session is unchanged;
    /// a panic marks the session failed.
    pub fn reset_custom(&self, id: u64, task: &CustomTask) -> Result<String, PoolError> {
        let session = self.lookup(&[id])?.remove(0);
        let mut s = session.lock();
        let result = match catch_unwind(AssertUnwindSafe(|| s.env.reset_custom(task))) {
            Ok(Ok(obs)) => {
                s.phase = Phase::Running;
                s.steps = 0;
                s.task_id = None;
                Ok(obs)
            }
            Ok(Err(e)) => Err(PoolError::Env(e)),
            Err(panic) => {
                self.stats.env_panics.fetch_add(1, Ordering::Relaxed);
                let msg = format!("env panicked while starting a custom task: {}", panic_message(&panic));
                s.phase = Phase::Failed(msg.clone());
                Err(PoolError::Env(EnvError::Data(format!("session {id}: {msg}"))))
            }
        };
        self.stats.resets.fetch_add(1, Ordering::Relaxed);
        result
    }

    /// Starts episode `task_ids[i]` in session `ids[i]`. Per-session failures (a panic inside
    /// the env) come back as `Err(message)` in that slot; the session is then marked failed.
    pub fn reset(&self, ids: &[u64], task_ids: &[i64]) -> Result<Vec<Result<String, String>>, PoolError> {
        check_lengths(ids.len(), task_ids.len(), "task_ids")?;
        for &task_id in task_ids {
            self.check_task_id(task_id)?;
        }
        let sessions = self.lookup(ids)?;
        let out = self.run_batch(Op::Reset, Some(ids), ids.len(), MIN_PARALLEL_RESETS, |i| {
            reset_one(&sessions[i], ids[i], task_ids[i] as u64, &self.stats)
        });
        self.stats.resets.fetch_add(ids.len() as u64, Ordering::Relaxed);
        Ok(out)
    }

    /// Applies `actions[i]` to session `ids[i]`.
    pub fn step<S: AsRef<str> + Sync>(&self, ids: &[u64], actions: &[S]) -> Result<Vec<StepResult>, PoolError> {
        check_lengths(ids.len(), actions.len(), "actions")?;
        self.step_with(ids, |i| Ok(actions[i].as_ref()))
    }

    /// Like [`EnvPool::step`], where an action may already be known to be unusable (e.g. text
    /// that is not valid UTF-8): `Err(reason)` becomes that session's error and the env is not called.
    pub fn step_checked<S: AsRef<str> + Sync>(
        &self,
        ids: &[u64],
        actions: &[Result<S, String>],
    ) -> Result<Vec<StepResult>, PoolError> {
        check_lengths(ids.len(), actions.len(), "actions")?;
        self.step_with(ids, |i| actions[i].as_ref().map(AsRef::as_ref).map_err(String::as_str))
    }

    fn step_with<'a>(
        &self,
        ids: &[u64],
        action: impl Fn(usize) -> Result<&'a str, &'a str> + Sync + Send,
    ) -> Result<Vec<StepResult>, PoolError> {
        let sessions = self.lookup(ids)?;
        let cap = self.horizon();
        let prepared = self.prepare_step(ids.len(), &action);
        let prepared = prepared.as_deref();
        let out = self.run_batch(Op::Step, Some(ids), ids.len(), MIN_PARALLEL_STEPS, |i| match action(i) {
            Ok(a) => self.step_one(&sessions[i], ids[i], a, cap, prepared),
            Err(reason) => StepResult::failed(format!("session {}: {reason}; not sent to the env", ids[i])),
        });
        self.stats.steps.fetch_add(ids.len() as u64, Ordering::Relaxed);
        let errors = out.iter().filter(|r| r.error.is_some()).count();
        self.stats.step_errors.fetch_add(errors as u64, Ordering::Relaxed);
        Ok(out)
    }

    /// The factory's work shared by a whole step ([`crate::env::EnvFactory::prepare_step`]),
    /// given the actions that will be sent to envs. Sessions that cannot step are not filtered
    /// out (that would lock every session once more per batch): an answer prepared for one of
    /// them is only unused. A panic there is counted and the sessions step without it.
    fn prepare_step<'a>(&self, n: usize, action: &impl Fn(usize) -> Result<&'a str, &'a str>) -> Option<Box<Prepared>> {
        let actions: Vec<&str> =
            (0..n).filter_map(|i| action(i).ok()).filter(|a| a.len() <= self.max_action_bytes).collect();
        if actions.is_empty() {
            return None;
        }
        catch_unwind(AssertUnwindSafe(|| self.factory.prepare_step(&actions))).unwrap_or_else(|_| {
            self.stats.env_panics.fetch_add(1, Ordering::Relaxed);
            None
        })
    }

    /// Closes sessions, freeing their envs. Returns how many were closed (all of them, or the
    /// call fails before closing any).
    pub fn close(&self, ids: &[u64]) -> Result<usize, PoolError> {
        let mut table = self.sessions.write();
        check_ids(ids, |id| table.contains_key(&id))?;
        let dropped: Vec<SessionRef> = ids.iter().filter_map(|id| table.remove(id)).collect();
        drop(table);
        let n = dropped.len();
        // Envs are dropped here, outside the table lock.
        drop(dropped);
        let closed = self.closed_since_release.fetch_add(n, Ordering::Relaxed) + n;
        if closed >= RELEASE_AFTER_CLOSING {
            self.closed_since_release.store(0, Ordering::Relaxed);
            self.release_freed_memory();
        }
        Ok(n)
    }

    /// Hands freed memory back to the OS on every pool thread. The allocator purges freed
    /// pages only after a delay, at a thread's next allocation, and a session's memory lives
    /// in the pages of the threads that built it: without this, the memory of sessions closed
    /// by a process that then goes quiet would stay resident.
    fn release_freed_memory(&self) {
        let everywhere = self.helpers.as_ref().is_some_and(|h| h.run(&|_| crate::alloc::release_freed_memory()));
        if !everywhere {
            crate::alloc::release_freed_memory();
        }
    }

    /// Current observations (the last returned by reset/step; empty before the first reset).
    pub fn observations(&self, ids: &[u64]) -> Result<Vec<String>, PoolError> {
        self.read_each(ids, |s| if s.phase == Phase::Fresh { String::new() } else { s.env.observation() })
    }

    /// Each session's currently available actions, where the env lists them.
    pub fn available_actions(&self, ids: &[u64]) -> Result<Vec<Option<Vec<String>>>, PoolError> {
        self.read_each(ids, |s| if s.phase == Phase::Fresh { None } else { s.env.available_actions() })
    }

    /// One action drawn uniformly from each session's available actions (`None` where the
    /// env lists none, or before the first reset): a random policy without copying whole
    /// menus out. The draw for session `id` is a pure function of `(seed, id, menu)`.
    pub fn sample_actions(&self, ids: &[u64], seed: u64) -> Result<Vec<Option<String>>, PoolError> {
        let sessions = self.lookup(ids)?;
        Ok(self.run_batch(Op::Sample, Some(ids), ids.len(), MIN_PARALLEL_STEPS, |i| {
            let s = sessions[i].lock();
            if s.phase == Phase::Fresh {
                return None;
            }
            s.env.sample_action(&mut |n| Rng::derive(seed, ids[i]).index(n))
        }))
    }

    /// Each session's expert move (see [`TextEnv::expert`]), or why there is none: the env has
    /// no expert, the expert cannot act, or the session is not running. A panic inside the
    /// expert becomes that session's message.
    pub fn expert(&self, ids: &[u64]) -> Result<Vec<Result<ExpertMove, String>>, PoolError> {
        let sessions = self.lookup(ids)?;
        Ok(self.run_batch(Op::Sample, Some(ids), ids.len(), MIN_PARALLEL_STEPS, |i| {
            let s = sessions[i].lock();
            if let Some(why) = s.phase.step_refusal(ids[i]) {
                return Err(why);
            }
            match catch_unwind(AssertUnwindSafe(|| s.env.expert())) {
                Ok(found) => found.map_err(|e| e.to_string()),
                Err(_) => Err(format!("session {}: the expert panicked", ids[i])),
            }
        }))
    }

    /// Env-specific facts plus the pool's view of each session, as JSON objects.
    pub fn info(&self, ids: &[u64]) -> Result<Vec<serde_json::Value>, PoolError> {
        self.read_each(ids, |s| {
            let mut info = match s.env.info() {
                serde_json::Value::Object(map) => map,
                serde_json::Value::Null => serde_json::Map::new(),
                other => serde_json::Map::from_iter([("env".to_string(), other)]),
            };
            info.insert("pool_steps".into(), s.steps.into());
            info.insert("task_id".into(), s.task_id.map_or(serde_json::Value::Null, |t| t.into()));
            info.insert("phase".into(), s.phase.name().into());
            if let Phase::Failed(msg) = &s.phase {
                info.insert("error".into(), msg.clone().into());
            }
            info
        })
        .map(|v| v.into_iter().map(serde_json::Value::Object).collect())
    }

    /// Ids of all open sessions, ascending.
    pub fn ids(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self.sessions.read().keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    fn step_one(
        &self,
        session: &SessionRef,
        id: u64,
        action: &str,
        cap: Option<u32>,
        prepared: Option<&Prepared>,
    ) -> StepResult {
        let mut s = session.lock();
        if let Some(refusal) = s.phase.step_refusal(id) {
            return StepResult::failed(refusal);
        }
        if action.len() > self.max_action_bytes {
            return StepResult::failed(format!(
                "session {id}: action is {} bytes, over the {}-byte cap; not sent to the env",
                action.len(),
                self.max_action_bytes
            ));
        }
        let outcome = catch_unwind(AssertUnwindSafe(|| s.env.step_prepared(action, prepared)));
        match outcome {
            Ok(Err(message)) => StepResult::failed(format!("session {id}: {message}")),
            Ok(Ok(o)) => {
                s.steps += 1;
                let truncated = !o.done && cap.is_some_and(|c| s.steps >= c);
                if o.done || truncated {
                    s.phase = Phase::Finished { truncated };
                }
                StepResult { observation: o.observation, reward: o.reward, done: o.done, truncated, error: None }
            }
            Err(panic) => {
                self.stats.env_panics.fetch_add(1, Ordering::Relaxed);
                let msg = format!("env panicked while stepping: {}", panic_message(&panic));
                s.phase = Phase::Failed(msg.clone());
                StepResult::failed(format!("session {id}: {msg}"))
            }
        }
    }

    /// Clones the session handles for `ids`, validating them first (an unknown id, then a
    /// repeated one, is an error, as [`check_ids`] reports them).
    fn lookup(&self, ids: &[u64]) -> Result<Vec<SessionRef>, PoolError> {
        let table = self.sessions.read();
        let mut repeats = Repeats::new(ids.len());
        let mut sessions = Vec::with_capacity(ids.len());
        for (k, id) in ids.iter().enumerate() {
            sessions.push(table.get(id).cloned().ok_or(PoolError::UnknownSession(*id))?);
            if repeats.seen_before(ids, k) {
                return Err(PoolError::DuplicateSession(*id));
            }
        }
        Ok(sessions)
    }

    fn read_each<T: Send>(&self, ids: &[u64], f: impl Fn(&Session) -> T + Sync) -> Result<Vec<T>, PoolError> {
        let sessions = self.lookup(ids)?;
        Ok(sessions.iter().map(|s| f(&s.lock())).collect())
    }

    /// Runs `f(0..n)` and returns the results in order of index: on the caller alone, or for
    /// batches of `min_parallel` items or more split over threads when the op's [`Tuner`]
    /// has measured that splitting is faster here.
    fn run_batch<T: Send>(
        &self,
        op: Op,
        keys: Option<&[u64]>,
        n: usize,
        min_parallel: usize,
        f: impl Fn(usize) -> T + Sync + Send,
    ) -> Vec<T> {
        let Some(helpers) = self.helpers.as_ref().filter(|_| n >= min_parallel) else {
            return (0..n).map(f).collect();
        };
        let tuner = &self.tuners[op as usize];
        let (parallel, timed) = tuner.choose();
        let start = Instant::now();
        let (out, was_split) =
            if parallel { self.split(helpers, keys, n, f) } else { ((0..n).map(f).collect(), false) };
        // A batch that was to be split but ran on the caller alone (helpers busy with another
        // caller's batch) measures contention, not either mode: it is not recorded.
        if timed && parallel == was_split {
            tuner.record(parallel, start.elapsed().as_nanos() as f64 / n as f64);
        }
        out
    }

    /// `f(0..n)` on the caller and the helpers, results in order of index, and whether the
    /// helpers took part.
    ///
    /// Item `i` runs on thread `keys[i] % threads` (the caller is thread 0), so a session is
    /// stepped, reset and sampled by the same thread every time and its state stays in that
    /// core's cache: on the development VM, moving a BabyAI session's state between cores
    /// cost about as much as stepping it. When the helpers are busy with another caller's
    /// batch (or this is a forked child), the caller does the whole batch itself.
    fn split<T: Send>(
        &self,
        helpers: &Workers,
        keys: Option<&[u64]>,
        n: usize,
        f: impl Fn(usize) -> T + Sync,
    ) -> (Vec<T>, bool) {
        let threads = helpers.threads();
        let owner = |i: usize| keys.map_or(i, |k| k[i] as usize) % threads;
        let shares: Vec<Mutex<Vec<(usize, T)>>> = (0..threads).map(|_| Mutex::new(Vec::new())).collect();
        let work = |t: usize| {
            let mine: Vec<(usize, T)> = (0..n).filter(|&i| owner(i) == t).map(|i| (i, f(i))).collect();
            *shares[t].lock() = mine;
        };
        if !helpers.run(&work) {
            return ((0..n).map(&f).collect(), false);
        }
        let mut out: Vec<Option<T>> = (0..n).map(|_| None).collect();
        for (i, result) in shares.into_iter().flat_map(Mutex::into_inner) {
            out[i] = Some(result);
        }
        (out.into_iter().map(|r| r.expect("every index has an owner thread")).collect(), true)
    }
}

fn reset_one(session: &SessionRef, id: u64, task_id: u64, stats: &PoolStats) -> Result<String, String> {
    let mut s = session.lock();
    match catch_unwind(AssertUnwindSafe(|| s.env.reset(task_id))) {
        Ok(Ok(obs)) => {
            s.phase = Phase::Running;
            s.steps = 0;
            s.task_id = Some(task_id);
            Ok(obs)
        }
        Ok(Err(e)) => {
            s.phase = Phase::Failed(e.to_string());
            Err(format!("session {id}: reset to task {task_id} failed: {e}"))
        }
        Err(panic) => {
            stats.env_panics.fetch_add(1, Ordering::Relaxed);
            let msg = format!("env panicked while resetting to task {task_id}: {}", panic_message(&panic));
            s.phase = Phase::Failed(msg.clone());
            Err(format!("session {id}: {msg}"))
        }
    }
}

pub(crate) fn check_lengths(ids: usize, other: usize, what: &str) -> Result<(), PoolError> {
    if ids == other {
        return Ok(());
    }
    Err(PoolError::LengthMismatch { what: format!("{ids} ids but {other} {what}") })
}

/// Checks a batch's ids in order: the first that does not `exist` or repeats an earlier one
/// is the error.
pub(crate) fn check_ids(ids: &[u64], exists: impl Fn(u64) -> bool) -> Result<(), PoolError> {
    let mut repeats = Repeats::new(ids.len());
    for (k, &id) in ids.iter().enumerate() {
        if !exists(id) {
            return Err(PoolError::UnknownSession(id));
        }
        if repeats.seen_before(ids, k) {
            return Err(PoolError::DuplicateSession(id));
        }
    }
    Ok(())
}

/// Finds ids a batch repeats, visiting them in order: small batches compare pairwise
/// (nothing allocated), larger ones keep a set.
struct Repeats(Option<IdSet>);

/// Batches up to this size are checked without a set.
const SMALL_BATCH: usize = 16;

impl Repeats {
    fn new(n: usize) -> Self {
        Self((n > SMALL_BATCH).then(|| IdSet::with_capacity_and_hasher(n, Default::default())))
    }

    /// Whether `ids[k]` occurs in `ids[..k]` (called for k = 0, 1, 2, ... in turn).
    fn seen_before(&mut self, ids: &[u64], k: usize) -> bool {
        match &mut self.0 {
            None => ids[..k].contains(&ids[k]),
            Some(set) => !set.insert(ids[k]),
        }
    }
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic payload".to_string()
    }
}
