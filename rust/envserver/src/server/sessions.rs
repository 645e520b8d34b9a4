//! The server's state: the EnvPool, what the wire needs per session beyond it (last use for the
//! idle reaper, BabyAI's running score), and the synchronous operations the handlers run on
//! blocking threads. Every method here may block on env work; only `step_one` and `observation_one`
//! of an env whose steps are cheap run on an async thread (`handlers::single_session`).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use parking_lot::Mutex;
use serde_json::{json, Value};

use super::cross_site::CrossSite;
use super::dialect::{reward_json, Dialect};
use super::error::ApiError;
use super::metrics::Metrics;
use crate::client::INSTANCE_HEADER;
use crate::env::{CustomTask, EnvError};
use crate::pool::{EnvPool, PoolError, StepResult};

/// Per-session facts the pool does not keep.
#[derive(Debug, Clone)]
pub struct Meta {
    pub last_used: Instant,
    /// Sum of step rewards since the last reset (BabyAI's `score`).
    pub score: f64,
    pub last_reward: f32,
    pub done: bool,
    /// Bytes of the custom episode this session was created with (counted until it closes).
    pub custom_bytes: usize,
}

impl Meta {
    pub fn new() -> Self {
        Self { last_used: Instant::now(), score: 0.0, last_reward: 0.0, done: false, custom_bytes: 0 }
    }
}

impl Default for Meta {
    fn default() -> Self {
        Self::new()
    }
}

/// Limits and options fixed when the server starts.
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_sessions: usize,
    pub max_body_bytes: usize,
    pub max_action_bytes: usize,
    pub max_custom_bytes: usize,
    pub token: Option<String>,
    pub idle_timeout: Option<Duration>,
    pub step_latency: Duration,
    pub cross_site: CrossSite,
}

pub struct AppState {
    pub pool: EnvPool,
    pub dialect: Dialect,
    pub limits: Limits,
    pub metrics: Metrics,
    sessions: Mutex<HashMap<u64, Meta>>,
    /// Bytes of custom episodes the open sessions hold (see `Limits::max_custom_bytes`).
    custom_bytes: AtomicUsize,
    /// This server's instance id, drawn when it starts: a restarted server numbers its
    /// sessions from 1 again, and the id tells a client that its sessions are not these.
    instance: HeaderValue,
}

/// One slot of a batch reply: what the pool said, or why the item was not sent to it.
type Slot<T> = Result<T, String>;

impl AppState {
    pub fn new(pool: EnvPool, limits: Limits) -> Self {
        let dialect = Dialect::for_env(pool.env_name());
        let sessions = Mutex::new(HashMap::new());
        let custom_bytes = AtomicUsize::new(0);
        let instance = HeaderValue::from_str(&new_instance_id()).expect("hex digits are a header value");
        Self { pool, dialect, limits, metrics: Metrics::default(), sessions, custom_bytes, instance }
    }

    /// This server's instance id (sent with every authorized reply and in `/health`).
    pub fn instance(&self) -> &str {
        self.instance.to_str().unwrap_or_default()
    }

    pub fn instance_header(&self) -> HeaderValue {
        self.instance.clone()
    }

    /// Refuses (410) a request that names another instance ([`INSTANCE_HEADER`]): its sessions
    /// were another run of this server's, and their ids may now be other sessions'.
    pub fn check_instance(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        match headers.get(INSTANCE_HEADER) {
            Some(given) if given != self.instance => Err(ApiError::new(
                StatusCode::GONE,
                format!(
                    "this server is instance {}, not {}: it was restarted, and the sessions of that \
                     instance are gone",
                    self.instance(),
                    String::from_utf8_lossy(given.as_bytes())
                ),
            )),
            _ => Ok(()),
        }
    }

    // --- AgentGym's single-session endpoints -------------------------------------------------

    pub fn create_one(&self, custom: Option<CustomTask>) -> Result<Value, ApiError> {
        let size = custom.as_ref().map_or(0, |t| t.goal.len() + t.commands.as_ref().map_or(0, String::len));
        self.reserve_custom(size)?;
        let id = match self.create(1) {
            Ok(ids) => ids[0],
            Err(e) => {
                self.custom_bytes.fetch_sub(size, Ordering::SeqCst);
                return Err(e);
            }
        };
        if let Some(meta) = self.sessions.lock().get_mut(&id) {
            meta.custom_bytes = size; // given back when the session closes
        }
        let observation = if let Some(task) = custom {
            match self.pool.reset_custom(id, &task) {
                Ok(observation) => {
                    self.record_reset(id);
                    Some(observation)
                }
                Err(err) => {
                    // the session was made for this episode only: it does not outlive the refusal
                    self.close_ids(&[id]);
                    return Err(match err {
                        PoolError::Env(EnvError::Unsupported(msg)) => ApiError::unprocessable(msg),
                        other => other.into(),
                    });
                }
            }
        } else if self.dialect.create_resets() {
            let task = (id - 1) % self.pool.num_tasks().max(1);
            Some(self.reset_checked(id, task as i64)?)
        } else {
            None
        };
        Ok(self.dialect.create_reply(id, observation))
    }

    pub fn reset_one(&self, id: u64, data_idx: i64) -> Result<Value, ApiError> {
        self.touch(id)?;
        let observation = self.reset_checked(id, data_idx)?;
        Ok(self.dialect.reset_reply(id, observation))
    }

    pub fn step_one(&self, id: u64, action: &str) -> Result<Value, ApiError> {
        self.touch(id)?;
        if action.len() > self.limits.max_action_bytes {
            return Err(ApiError::unprocessable(format!(
                "action is {} bytes, over the {}-byte cap; not sent to the env",
                action.len(),
                self.limits.max_action_bytes
            )));
        }
        let r = self.pool.step(&[id], &[action])?.remove(0);
        if let Some(error) = &r.error {
            return Err(ApiError::new(StatusCode::CONFLICT, error.clone()));
        }
        let meta = self.record_step(id, &r);
        Ok(self.dialect.step_reply(r.observation, r.reward, r.done || r.truncated, &meta))
    }

    pub fn observation_one(&self, id: u64) -> Result<Value, ApiError> {
        let meta = self.touch(id)?;
        let observation = self.pool.observations(&[id])?.remove(0);
        let info = self.pool.info(&[id])?.remove(0);
        let goal = (info["phase"] != "fresh").then(|| info["goal"].as_str().unwrap_or_default());
        Ok(self.dialect.observation_reply(observation, goal, &meta))
    }

    /// Counts `size` more bytes of custom episodes, or refuses (503) past `max_custom_bytes`.
    fn reserve_custom(&self, size: usize) -> Result<(), ApiError> {
        if size == 0 {
            return Ok(());
        }
        let max = self.limits.max_custom_bytes;
        self.custom_bytes
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |held| held.checked_add(size).filter(|&n| n <= max))
            .map(|_| ())
            .map_err(|held| {
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!(
                        "open sessions hold {held} bytes of custom episodes; {size} more would pass the \
                         {max}-byte limit (--max-custom-bytes): close some first"
                    ),
                )
            })
    }

    /// Bytes of custom episodes the open sessions hold.
    pub fn custom_bytes(&self) -> usize {
        self.custom_bytes.load(Ordering::SeqCst)
    }

    /// `true` if the session was open and is now closed; `false` if it was not open (as AgentGym).
    pub fn close_one(&self, id: u64) -> bool {
        self.close_ids(&[id])[0]
    }

    // --- batch endpoints -----------------------------------------------------------------------

    /// Opens `n` sessions, refusing (503) when that would pass `max_sessions`.
    pub fn create(&self, n: usize) -> Result<Vec<u64>, ApiError> {
        let open = self.pool.len();
        if open.saturating_add(n) > self.limits.max_sessions {
            let err = PoolError::TooManySessions { open, requested: n, max: self.limits.max_sessions };
            return Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, err.to_string()));
        }
        let ids = self.pool.create(n)?;
        let mut table = self.sessions.lock();
        for &id in &ids {
            table.insert(id, Meta::new());
        }
        Ok(ids)
    }

    pub fn batch_reset(&self, ids: &[u64], data_idxs: &[i64]) -> Result<Value, ApiError> {
        check_len(ids.len(), data_idxs.len(), "data_idxs")?;
        let slots = self.run_batch(
            ids,
            |i| {
                let t = data_idxs[i];
                self.pool.check_task_id(t).map_err(|e| e.to_string())?;
                Ok(t)
            },
            |ok_ids, tasks| {
                let out = self.pool.reset(ok_ids, tasks)?;
                for (id, r) in ok_ids.iter().zip(&out) {
                    if r.is_ok() {
                        self.record_reset(*id);
                    }
                }
                Ok(out.into_iter().map(|r| r.map_err(|e| e.to_string())).collect())
            },
        )?;
        let (observations, errors): (Vec<Value>, Vec<Value>) = slots.into_iter().map(split_slot).unzip();
        Ok(json!({"observations": observations, "errors": errors}))
    }

    pub fn batch_step(&self, ids: &[u64], actions: Vec<String>) -> Result<Value, ApiError> {
        check_len(ids.len(), actions.len(), "actions")?;
        let slots = self.run_batch(
            ids,
            |i| Ok(actions[i].as_str()),
            |ok_ids, acts| {
                let out = self.pool.step(ok_ids, acts)?;
                for (id, r) in ok_ids.iter().zip(&out) {
                    if r.error.is_none() {
                        self.record_step(*id, r);
                    }
                }
                Ok(out
                    .into_iter()
                    .map(|r| match r.error {
                        Some(e) => Err(e),
                        None => Ok(r),
                    })
                    .collect())
            },
        )?;
        let n = slots.len();
        let (mut obs, mut rewards, mut dones, mut truncated, mut errors) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        for slot in slots {
            let (o, r, d, t, e) = match slot {
                Ok(r) => (Value::String(r.observation), reward_json(r.reward), r.done, r.truncated, Value::Null),
                Err(e) => (Value::String(String::new()), json!(0), false, false, Value::String(e)),
            };
            obs.push(o);
            rewards.push(r);
            dones.push(d);
            truncated.push(t);
            errors.push(e);
        }
        Ok(json!({"observations": obs, "rewards": rewards, "dones": dones, "truncated": truncated, "errors": errors}))
    }

    /// Closes each open id; `closed[i]` says whether `ids[i]` was open.
    pub fn close_ids(&self, ids: &[u64]) -> Vec<bool> {
        let removed: Vec<bool> = {
            let mut table = self.sessions.lock();
            ids.iter().map(|id| table.remove(id).map(|meta| self.release(&meta)).is_some()).collect()
        };
        let mut seen = HashSet::new();
        let to_close: Vec<u64> =
            ids.iter().zip(&removed).filter(|(id, r)| **r && seen.insert(**id)).map(|(id, _)| *id).collect();
        for id in &to_close {
            // Only ids we just removed from the table reach here, so each is open in the pool.
            let _ = self.pool.close(&[*id]);
        }
        removed
    }

    /// Closes sessions unused for longer than the idle timeout; returns how many.
    pub fn reclaim_idle(&self) -> usize {
        let Some(timeout) = self.limits.idle_timeout else { return 0 };
        let now = Instant::now();
        let idle: Vec<u64> = {
            let mut table = self.sessions.lock();
            let idle: Vec<u64> =
                table.iter().filter(|(_, m)| now.duration_since(m.last_used) > timeout).map(|(id, _)| *id).collect();
            for id in &idle {
                if let Some(meta) = table.remove(id) {
                    self.release(&meta);
                }
            }
            idle
        };
        for id in &idle {
            let _ = self.pool.close(&[*id]);
        }
        self.metrics.reclaimed.fetch_add(idle.len() as u64, std::sync::atomic::Ordering::Relaxed);
        idle.len()
    }

    pub fn health(&self) -> Value {
        json!({
            "status": "ok",
            "server": "agentgym-envserver",
            "version": env!("CARGO_PKG_VERSION"),
            "env": self.pool.env_name(),
            "num_tasks": self.pool.num_tasks(),
            "sessions": self.pool.len(),
            "max_sessions": self.limits.max_sessions,
            "max_action_bytes": self.limits.max_action_bytes,
            "batch": true,
            "instance": self.instance(),
        })
    }

    // --- helpers -------------------------------------------------------------------------------

    /// Marks `id` used now and returns its meta; 404 if it is not open.
    fn touch(&self, id: u64) -> Result<Meta, ApiError> {
        let mut table = self.sessions.lock();
        let meta = table.get_mut(&id).ok_or_else(|| ApiError::unknown_session(id))?;
        meta.last_used = Instant::now();
        Ok(meta.clone())
    }

    fn reset_checked(&self, id: u64, data_idx: i64) -> Result<String, ApiError> {
        match self.pool.reset(&[id], &[data_idx])?.remove(0) {
            Ok(observation) => {
                self.record_reset(id);
                Ok(observation)
            }
            Err(message) => Err(ApiError::internal(message)),
        }
    }

    fn release(&self, meta: &Meta) {
        self.custom_bytes.fetch_sub(meta.custom_bytes, Ordering::SeqCst);
    }

    fn record_reset(&self, id: u64) {
        if let Some(meta) = self.sessions.lock().get_mut(&id) {
            *meta = Meta { custom_bytes: meta.custom_bytes, ..Meta::new() };
        }
    }

    /// Updates the session's metadata after a step. A `/close` may have removed the session
    /// while the step ran (with several blocking threads): the step's reply is still built,
    /// but the closed id is not brought back.
    fn record_step(&self, id: u64, r: &StepResult) -> Meta {
        let mut table = self.sessions.lock();
        let mut closed = Meta::new();
        let meta = table.get_mut(&id).unwrap_or(&mut closed);
        meta.last_used = Instant::now();
        meta.score += super::dialect::decimal(r.reward);
        meta.last_reward = r.reward;
        meta.done = r.done || r.truncated;
        meta.clone()
    }

    /// Runs a batch where each item may be refused before the pool sees it (unknown or repeated
    /// id, bad argument). The pool call gets only the accepted items; a session closed between
    /// the check and the call (the reaper, a concurrent close) becomes that item's error.
    fn run_batch<A: Clone, T>(
        &self,
        ids: &[u64],
        check: impl Fn(usize) -> Result<A, String>,
        call: impl Fn(&[u64], &[A]) -> Result<Vec<Slot<T>>, PoolError>,
    ) -> Result<Vec<Slot<T>>, ApiError> {
        let mut slots: Vec<Option<Slot<T>>> = (0..ids.len()).map(|_| None).collect();
        let mut accepted: Vec<(usize, A)> = Vec::with_capacity(ids.len());
        let mut seen = HashSet::with_capacity(ids.len());
        for (i, &id) in ids.iter().enumerate() {
            let verdict = if self.touch(id).is_err() {
                Err(format!("unknown session id {id} (never created, already closed, or reclaimed after idling)"))
            } else if !seen.insert(id) {
                Err(format!("session id {id} appears more than once in one batch"))
            } else {
                check(i)
            };
            match verdict {
                Ok(arg) => accepted.push((i, arg)),
                Err(e) => slots[i] = Some(Err(e)),
            }
        }
        loop {
            let ok_ids: Vec<u64> = accepted.iter().map(|(i, _)| ids[*i]).collect();
            let args: Vec<A> = accepted.iter().map(|(_, a)| a.clone()).collect();
            match call(&ok_ids, &args) {
                Ok(out) => {
                    for ((i, _), r) in accepted.iter().zip(out) {
                        slots[*i] = Some(r);
                    }
                    break;
                }
                Err(PoolError::UnknownSession(gone)) => {
                    let pos = accepted
                        .iter()
                        .position(|(i, _)| ids[*i] == gone)
                        .ok_or_else(|| ApiError::from(PoolError::UnknownSession(gone)))?;
                    let (i, _) = accepted.remove(pos);
                    slots[i] = Some(Err(format!("session {gone} was closed while this batch ran")));
                }
                Err(other) => return Err(other.into()),
            }
        }
        Ok(slots.into_iter().map(|s| s.unwrap_or_else(|| Err("not processed".to_string()))).collect())
    }
}

/// 16 hex digits that differ between runs of the server: std's hasher keys are drawn from the
/// OS's randomness per process, and the clock and pid are mixed in.
fn new_instance_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    h.write_u128(now.as_nanos());
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
}

fn split_slot(slot: Slot<String>) -> (Value, Value) {
    match slot {
        Ok(obs) => (Value::String(obs), Value::Null),
        Err(e) => (Value::Null, Value::String(e)),
    }
}

fn check_len(ids: usize, other: usize, what: &str) -> Result<(), ApiError> {
    if ids == other {
        return Ok(());
    }
    Err(ApiError::unprocessable(format!("length mismatch: {ids} ids but {other} {what}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::Options;

    fn state() -> AppState {
        let pool = EnvPool::new("babyai", &Options::new(), Some(1)).unwrap();
        AppState::new(pool, limits())
    }

    fn limits() -> Limits {
        Limits {
            max_sessions: 8,
            max_body_bytes: 1 << 20,
            max_action_bytes: 64,
            max_custom_bytes: 1000,
            token: None,
            idle_timeout: None,
            step_latency: Duration::ZERO,
            cross_site: CrossSite { bound: [127, 0, 0, 1].into(), allowed_hosts: vec![], has_token: false },
        }
    }

    #[test]
    fn custom_episodes_share_one_memory_budget() {
        let dir = format!("{}/tests/data/textcraft", env!("CARGO_MANIFEST_DIR"));
        let options: Options = [("recipes_dir".to_string(), dir)].into_iter().collect();
        let pool = EnvPool::new("textcraft", &options, Some(1)).unwrap();
        let s = AppState::new(pool, Limits { max_custom_bytes: 30, ..limits() });
        let custom = || Some(CustomTask { goal: "minecraft:bookshelf".into(), commands: None }); // 19 bytes
        let first = s.create_one(custom()).unwrap()["id"].as_u64().unwrap();
        assert_eq!(s.custom_bytes(), 19);
        let refused = s.create_one(custom()).unwrap_err();
        assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(refused.message.contains("--max-custom-bytes"), "{}", refused.message);
        assert_eq!(s.pool.len(), 1, "a refused create opens nothing");
        s.create_one(None).unwrap(); // ordinary episodes are not counted
        s.reset_one(first, 3).unwrap();
        assert_eq!(s.custom_bytes(), 19, "counted until the session closes");
        assert!(s.close_one(first));
        assert_eq!(s.custom_bytes(), 0);
        s.create_one(custom()).unwrap();
    }

    #[test]
    fn requests_for_another_instance_are_refused_as_gone() {
        let (s, other) = (state(), state());
        assert_ne!(s.instance(), other.instance(), "each start draws its own instance");
        let mut headers = HeaderMap::new();
        assert!(s.check_instance(&headers).is_ok(), "a request naming no instance is served");
        headers.insert(INSTANCE_HEADER, s.instance_header());
        assert!(s.check_instance(&headers).is_ok());
        headers.insert(INSTANCE_HEADER, other.instance_header());
        let refused = s.check_instance(&headers).unwrap_err();
        assert_eq!(refused.status, StatusCode::GONE);
        assert!(refused.message.contains("restarted"), "{}", refused.message);
        assert_eq!(s.health()["instance"], s.instance());
    }

    #[test]
    fn a_step_finishing_after_close_does_not_reopen_the_id() {
        let s = state();
        let id = s.create(1).unwrap()[0];
        s.reset_one(id, 0).unwrap();
        let r = s.pool.step(&[id], &["turn left"]).unwrap().remove(0);
        assert!(s.close_one(id));
        // the step's bookkeeping lands after the close, as when /step races /close
        let meta = s.record_step(id, &r);
        assert_eq!(meta.last_reward, r.reward);
        assert!(!s.close_one(id), "a closed id must stay closed");
        assert_eq!(s.sessions.lock().len(), 0);
    }
}
