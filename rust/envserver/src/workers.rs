//! A team of persistent helper threads that run one job at a time together with the calling
//! thread. Between jobs a helper first spins (for [`Workers::spin`]) and only then sleeps.
//!
//! Why not rayon: on the 2-vCPU development VM a thread that blocked between two batches came
//! back to a cold core. Two threads stepping halves of one BabyAI pool with a blocking
//! barrier between batches ran at ~228k steps/s, with a spinning barrier at ~376k steps/s
//! (one thread alone: ~205k), and rayon's scope, which parks its workers and the caller,
//! behaved like the blocking barrier (`examples/steps.rs`, bench/RESULTS.md). Spinning for a
//! short, bounded time keeps the cores warm while batches follow each other and costs
//! nothing once the caller goes quiet.
//!
//! A job is a borrowed closure `f(thread_index)`; [`Workers::run`] calls `f(0)` on the caller
//! and `f(1..threads)` on the helpers, and returns only after every call finished, which is
//! what makes lending the borrowed closure to the helpers sound.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// How long an idle helper (or a caller waiting for helpers) spins before sleeping, unless
/// `AGENTGYM_SPIN_US` says otherwise.
pub const DEFAULT_SPIN: Duration = Duration::from_micros(1000);

type Job = &'static (dyn Fn(usize) + Sync);

struct Shared {
    /// Bumped once per job and once at shutdown; helpers wait for it to change.
    epoch: AtomicU64,
    job: Mutex<Option<Job>>,
    /// Helpers that have not finished the current job.
    pending: AtomicUsize,
    panic: Mutex<Option<Box<dyn std::any::Any + Send>>>,
    shutdown: AtomicBool,
    spin: Duration,
    sleep_lock: Mutex<()>,
    wake_helpers: Condvar,
    wake_caller: Condvar,
    /// Helpers parked (or about to park) on `wake_helpers`.
    sleepers: AtomicUsize,
    caller_sleeping: AtomicBool,
}

/// `threads - 1` helper threads plus the caller of [`Workers::run`].
pub struct Workers {
    shared: Arc<Shared>,
    handles: Vec<JoinHandle<()>>,
    /// One job at a time: a second concurrent caller runs its batch alone instead of waiting.
    dispatch: Mutex<()>,
    /// The process that started the helpers: a forked child has none of them.
    pid: u32,
}

impl Workers {
    /// Starts `threads - 1` helpers named `{name}-{i}`. The spin time comes from
    /// `AGENTGYM_SPIN_US` (microseconds) when set, else [`DEFAULT_SPIN`].
    pub fn new(threads: usize, name: &str) -> std::io::Result<Self> {
        let spin = std::env::var("AGENTGYM_SPIN_US")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map_or(DEFAULT_SPIN, Duration::from_micros);
        let shared = Arc::new(Shared {
            epoch: AtomicU64::new(0),
            job: Mutex::new(None),
            pending: AtomicUsize::new(0),
            panic: Mutex::new(None),
            shutdown: AtomicBool::new(false),
            spin,
            sleep_lock: Mutex::new(()),
            wake_helpers: Condvar::new(),
            wake_caller: Condvar::new(),
            sleepers: AtomicUsize::new(0),
            caller_sleeping: AtomicBool::new(false),
        });
        let mut handles = Vec::with_capacity(threads.saturating_sub(1));
        for index in 1..threads.max(1) {
            let mine = shared.clone();
            let spawned =
                std::thread::Builder::new().name(format!("{name}-{index}")).spawn(move || helper(&mine, index));
            match spawned {
                Ok(h) => handles.push(h),
                Err(e) => {
                    let partial = Self { shared, handles, dispatch: Mutex::new(()), pid: std::process::id() };
                    drop(partial); // stops the helpers already started
                    return Err(e);
                }
            }
        }
        Ok(Self { shared, handles, dispatch: Mutex::new(()), pid: std::process::id() })
    }

    /// Threads that run a job: the helpers plus the caller.
    pub fn threads(&self) -> usize {
        self.handles.len() + 1
    }

    pub fn spin(&self) -> Duration {
        self.shared.spin
    }

    /// Calls `f(t)` for every `t` in `0..threads()`: `f(0)` on this thread, the others on the
    /// helpers, all at once. Returns `false` without calling `f` when the team cannot take
    /// the job (another caller's job is running, or this is a forked child, where the helpers
    /// do not exist); the caller then does the work alone. A panic in any `f(t)` is re-raised
    /// here after all of them have finished.
    pub fn run(&self, f: &(dyn Fn(usize) + Sync)) -> bool {
        if self.handles.is_empty() {
            f(0);
            return true;
        }
        if std::process::id() != self.pid {
            return false;
        }
        let Some(_turn) = self.dispatch.try_lock() else { return false };
        let s = &*self.shared;
        // SAFETY: the helpers only use the job between seeing the new epoch and decrementing
        // `pending`, and this function does not return (or unwind) before `pending` is 0, so
        // the borrow outlives every use. The slot is cleared before returning.
        let job: Job = unsafe { std::mem::transmute::<&(dyn Fn(usize) + Sync), Job>(f) };
        *s.job.lock() = Some(job);
        s.pending.store(self.handles.len(), SeqCst);
        s.epoch.fetch_add(1, SeqCst);
        if s.sleepers.load(SeqCst) > 0 {
            let _g = s.sleep_lock.lock();
            s.wake_helpers.notify_all();
        }
        let mine = catch_unwind(AssertUnwindSafe(|| f(0)));
        self.wait_for_helpers();
        *s.job.lock() = None;
        // Taken in every case, so a helper's panic never resurfaces in a later job.
        let helpers_panic = s.panic.lock().take();
        if let Some(p) = mine.err().or(helpers_panic) {
            resume_unwind(p);
        }
        true
    }

    fn wait_for_helpers(&self) {
        let s = &*self.shared;
        let start = Instant::now();
        let mut spins = 0u32;
        while s.pending.load(SeqCst) != 0 {
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(64) && start.elapsed() >= s.spin {
                let mut g = s.sleep_lock.lock();
                s.caller_sleeping.store(true, SeqCst);
                while s.pending.load(SeqCst) != 0 {
                    s.wake_caller.wait(&mut g);
                }
                s.caller_sleeping.store(false, SeqCst);
                return;
            }
            std::hint::spin_loop();
        }
    }
}

fn helper(s: &Shared, index: usize) {
    let mut seen = 0u64;
    loop {
        seen = wait_for_epoch(s, seen);
        if s.shutdown.load(SeqCst) {
            return;
        }
        let job = *s.job.lock();
        if let Some(job) = job {
            if let Err(p) = catch_unwind(AssertUnwindSafe(|| job(index))) {
                s.panic.lock().get_or_insert(p);
            }
        }
        if s.pending.fetch_sub(1, SeqCst) == 1 && s.caller_sleeping.load(SeqCst) {
            let _g = s.sleep_lock.lock();
            s.wake_caller.notify_one();
        }
    }
}

/// Spins until `epoch` moves past `seen`, then sleeps until it does.
fn wait_for_epoch(s: &Shared, seen: u64) -> u64 {
    let start = Instant::now();
    let mut spins = 0u32;
    loop {
        let e = s.epoch.load(SeqCst);
        if e != seen {
            return e;
        }
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(64) && start.elapsed() >= s.spin {
            break;
        }
        std::hint::spin_loop();
    }
    let mut g = s.sleep_lock.lock();
    s.sleepers.fetch_add(1, SeqCst);
    loop {
        let e = s.epoch.load(SeqCst);
        if e != seen {
            s.sleepers.fetch_sub(1, SeqCst);
            return e;
        }
        s.wake_helpers.wait(&mut g);
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        if std::process::id() != self.pid {
            return; // a forked child: the helper threads are not in this process
        }
        let s = &*self.shared;
        s.shutdown.store(true, SeqCst);
        s.epoch.fetch_add(1, SeqCst);
        {
            let _g = s.sleep_lock.lock();
            s.wake_helpers.notify_all();
        }
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn every_thread_index_runs_once_per_job() {
        let w = Workers::new(3, "t").unwrap();
        for _ in 0..200 {
            let hits: Vec<AtomicUsize> = (0..3).map(|_| AtomicUsize::new(0)).collect();
            assert!(w.run(&|t| {
                hits[t].fetch_add(1, SeqCst);
            }));
            assert!(hits.iter().all(|h| h.load(SeqCst) == 1));
        }
    }

    #[test]
    fn helpers_wake_after_sleeping() {
        let w = Workers::new(2, "t").unwrap();
        let total = AtomicUsize::new(0);
        for _ in 0..3 {
            std::thread::sleep(w.spin() * 3); // helpers are asleep by now
            w.run(&|t| {
                total.fetch_add(t + 1, SeqCst);
            });
        }
        assert_eq!(total.load(SeqCst), 3 * (1 + 2));
    }

    #[test]
    fn a_helper_panic_reaches_the_caller_and_the_team_survives() {
        let w = Workers::new(2, "t").unwrap();
        let r = catch_unwind(AssertUnwindSafe(|| {
            w.run(&|t| {
                if t == 1 {
                    panic!("boom in helper");
                }
            })
        }));
        let msg = r.unwrap_err();
        assert_eq!(msg.downcast_ref::<&str>(), Some(&"boom in helper"));
        // Both sides panic: the caller's panic is raised, the helper's is not kept for later.
        let r = catch_unwind(AssertUnwindSafe(|| w.run(&|t| panic!("boom {t}"))));
        assert!(r.is_err());
        let count = AtomicUsize::new(0);
        assert!(w.run(&|_| {
            count.fetch_add(1, SeqCst);
        }));
        assert_eq!(count.load(SeqCst), 2);
    }

    #[test]
    fn a_second_concurrent_caller_is_turned_away_not_blocked() {
        let w = Workers::new(2, "t").unwrap();
        let inside = AtomicBool::new(false);
        let release = AtomicBool::new(false);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                w.run(&|t| {
                    if t == 0 {
                        inside.store(true, SeqCst);
                        while !release.load(SeqCst) {
                            std::hint::spin_loop();
                        }
                    }
                })
            });
            while !inside.load(SeqCst) {
                std::hint::spin_loop();
            }
            assert!(!w.run(&|_| {}), "the team is busy, so a second caller works alone");
            release.store(true, SeqCst);
        });
        assert!(w.run(&|_| {}));
    }
}
