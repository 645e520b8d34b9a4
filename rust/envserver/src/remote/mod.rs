//! RemotePool: sessions living on AgentGym-compatible HTTP servers, behind the same batched API
//! as [`crate::pool::EnvPool`] (create / reset / step / close, horizon cap, per-session errors).
//!
//! - One batched call puts all its HTTP requests in flight at once on a tokio runtime (keep-alive
//!   connection pool per server, at most `max_in_flight` requests per server, connect and
//!   request timeouts). A request's timeout includes its wait for an in-flight slot, so a batch
//!   ends within one timeout even when many of its requests queue behind a hung server. With an
//!   `agentgym-envserver` (detected through `GET /health`) a batch is one `/batch/*` request per
//!   server.
//! - New sessions go to the servers holding the fewest; a server that cannot be reached gets none.
//! - A server that dies, hangs or answers garbage fails only its own sessions, each with an error
//!   naming the server and the cause. A step whose request may have reached the server is never
//!   retried (the env may have moved); the session is then marked failed until it is reset.
//! - Sessions are bound to the server instance that created them: agentgym-envserver names its
//!   instance on every reply ([`crate::client::INSTANCE_HEADER`]) and refuses (410) requests for
//!   another instance's sessions, so after a restart on the same address the old sessions are
//!   reported lost instead of stepping the new sessions' envs. A server that hands out a remote
//!   id twice (in one reply, or one an open session holds: a restarted server that does not name
//!   its instances) is not believed: duplicates in a reply are refused, and the open session
//!   that held the id is lost. A lost session sends nothing more (not even its close) and can
//!   only be closed; `stats()["lost_sessions"]` counts them.
//! - The runtime and connections are built per process id ([`ProcessClients`]), so a forked
//!   child gets fresh ones.
//! - Observations are the last ones the servers returned, kept here; `info` adds the reset
//!   reply's other fields (e.g. ScienceWorld's `task_name`, `var_num`, `task_description`).
//! - Per env family, as AgentGym's clients read their servers: `task_field` names a reset-reply
//!   field that opens the first observation (`task + "\n" + observation`; ScienceWorld's
//!   `task_description`), and `score_field` a cumulative score whose change is each step's
//!   reward (0 at reset, so an episode's rewards add up to its last score). A step reply's
//!   optional `truncated` flag ends the episode as truncated, not done.

mod wire;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use parking_lot::Mutex;
use serde_json::{Map, Value};

pub use crate::client::{CallError, ClientOptions, Io, ProcessClients, ServerClient};
pub use wire::WireDialect;

use crate::fasthash::IdMap;
use crate::pool::{check_ids, check_lengths, HorizonCap, Phase, PoolError, StepResult, DEFAULT_MAX_ACTION_BYTES};

/// How a RemotePool reaches its servers.
#[derive(Debug, Clone)]
pub struct RemoteConfig {
    /// Base URLs, e.g. `http://127.0.0.1:36001`.
    pub urls: Vec<String>,
    /// Env name, for messages and `info`.
    pub env: String,
    pub dialect: WireDialect,
    /// Use the `/batch/*` routes: `None` detects them through `GET /health`.
    pub batch: Option<bool>,
    pub client: ClientOptions,
    pub max_action_bytes: usize,
    /// Valid task ids are `0..num_tasks`; `None` takes it from an agentgym server's `/health`.
    pub num_tasks: Option<u64>,
    /// A reset-reply field whose text, then a newline, opens the first observation.
    pub task_field: Option<String>,
    /// A step-reply field holding the episode's cumulative score: rewards are its changes.
    pub score_field: Option<String>,
}

impl RemoteConfig {
    pub fn new(urls: Vec<String>, env: &str) -> Self {
        Self {
            urls,
            env: env.to_string(),
            dialect: WireDialect::Id,
            batch: None,
            client: ClientOptions {
                max_in_flight: 64,
                connect_timeout: Duration::from_secs(5),
                timeout: Duration::from_secs(60),
                token: None,
                max_reply_bytes: crate::client::DEFAULT_MAX_REPLY_BYTES,
            },
            max_action_bytes: DEFAULT_MAX_ACTION_BYTES,
            num_tasks: None,
            task_field: None,
            score_field: None,
        }
    }
}

/// Whole-call failures of a RemotePool (per-session failures are in the results).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RemoteError {
    /// Bad arguments, as for a local pool: nothing was sent.
    #[error(transparent)]
    Pool(#[from] PoolError),
    #[error("{0}")]
    Config(String),
    /// No server could take the request.
    #[error("{0}")]
    Unavailable(String),
}

#[derive(Debug, Clone)]
struct Session {
    server: usize,
    remote_id: u64,
    /// The server instance that created it (agentgym-envserver), sent with each request.
    instance: Option<Arc<str>>,
    /// Why the session is gone from its server (restarted, or its id handed to another): it
    /// is failed for good and nothing more is sent for it.
    lost: Option<String>,
    phase: Phase,
    steps: u32,
    task_id: Option<u64>,
    observation: String,
    extra: Map<String, Value>,
    /// The last cumulative score (`score_field`), 0 at reset.
    score: f64,
}

/// A session's server and phase: what a reset or step needs to know before sending.
struct Target {
    server: usize,
    remote_id: u64,
    instance: Option<Arc<str>>,
    phase: Phase,
    lost: Option<String>,
}

/// The requests of one batch that go together: one server, one instance of it.
type Group = (usize, Option<Arc<str>>);

/// Why one session's request failed; `lost` when its server says the session is gone.
#[derive(Debug, Clone)]
struct Failure {
    message: String,
    lost: bool,
}

/// Counters since the pool was built.
#[derive(Debug, Default)]
pub struct RemoteStats {
    pub steps: AtomicU64,
    pub resets: AtomicU64,
    pub step_errors: AtomicU64,
    /// Requests that failed in transport or got an unusable reply.
    pub transport_errors: AtomicU64,
    /// Close requests that failed (the session is forgotten here anyway).
    pub close_errors: AtomicU64,
    /// Sessions found gone from their server (restarted, or their remote id handed out again).
    pub lost_sessions: AtomicU64,
}

impl RemoteStats {
    /// The counters as (name, value) pairs, in the names the Python `stats()` uses;
    /// `env_panics` is always 0 (a remote env's panic is its server's), kept so that the keys
    /// match [`crate::pool::PoolStats::counters`].
    pub fn counters(&self) -> [(&'static str, u64); 7] {
        [
            ("steps", self.steps.load(Ordering::Relaxed)),
            ("resets", self.resets.load(Ordering::Relaxed)),
            ("step_errors", self.step_errors.load(Ordering::Relaxed)),
            ("env_panics", 0),
            ("transport_errors", self.transport_errors.load(Ordering::Relaxed)),
            ("close_errors", self.close_errors.load(Ordering::Relaxed)),
            ("lost_sessions", self.lost_sessions.load(Ordering::Relaxed)),
        ]
    }
}

/// What a server said about itself (`None` fields: not an agentgym server).
#[derive(Debug, Clone, Default)]
struct Probe {
    batch: bool,
    num_tasks: Option<u64>,
}

pub struct RemotePool {
    config: RemoteConfig,
    io: ProcessClients,
    probes: Mutex<Vec<Option<Probe>>>,
    sessions: Mutex<IdMap<Session>>,
    /// Which session holds each (server, remote id): locked after `sessions`, never alone
    /// around it.
    holders: Mutex<HashMap<(usize, u64), u64>>,
    next_id: AtomicU64,
    horizon: HorizonCap,
    pub stats: RemoteStats,
}

impl RemotePool {
    /// Checks the URLs and builds the pool; servers are contacted on first use.
    pub fn new(config: RemoteConfig) -> Result<Self, RemoteError> {
        if config.urls.is_empty() {
            return Err(RemoteError::Config("RemotePool needs at least one server URL".into()));
        }
        for url in &config.urls {
            if !(url.starts_with("http://") || url.starts_with("https://")) || url.len() < 8 {
                return Err(RemoteError::Config(format!("server URL {url:?} must start with http://")));
            }
            if url.starts_with("https://") {
                return Err(RemoteError::Config(format!(
                    "server URL {url:?}: https is not supported by this build; use http://"
                )));
            }
        }
        let probes = Mutex::new(vec![None; config.urls.len()]);
        let io = ProcessClients::new(config.urls.clone(), config.client.clone());
        let pool = Self {
            config,
            io,
            probes,
            sessions: Mutex::new(IdMap::default()),
            holders: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            horizon: HorizonCap::default(),
            stats: RemoteStats::default(),
        };
        pool.io()?;
        Ok(pool)
    }

    pub fn env_name(&self) -> &str {
        &self.config.env
    }

    pub fn urls(&self) -> &[String] {
        &self.config.urls
    }

    /// Task ids are `0..num_tasks`, from the config or an agentgym server's `/health`.
    pub fn num_tasks(&self) -> Result<u64, RemoteError> {
        if let Some(n) = self.known_num_tasks() {
            return Ok(n);
        }
        self.probe_all()?;
        self.probes.lock().iter().flatten().find_map(|p| p.num_tasks).ok_or_else(|| {
            RemoteError::Config("the servers do not report their number of tasks; pass num_tasks=".into())
        })
    }

    /// `num_tasks` if already known, without contacting a server.
    fn known_num_tasks(&self) -> Option<u64> {
        self.config.num_tasks.or_else(|| self.probes.lock().iter().flatten().find_map(|p| p.num_tasks))
    }

    pub fn len(&self) -> usize {
        self.sessions.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn ids(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self.sessions.lock().keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    pub fn set_horizon(&self, cap: Option<u32>) {
        self.horizon.set(cap);
    }

    pub fn horizon(&self) -> Option<u32> {
        self.horizon.get()
    }

    /// Opens `n` sessions spread over the reachable servers (fewest sessions first). Shares that
    /// fail on one server are moved once to servers that succeeded; if sessions are still
    /// missing, those created are closed again and the call fails naming each server's error.
    pub fn create(&self, n: usize) -> Result<Vec<u64>, RemoteError> {
        if n == 0 {
            return Ok(Vec::new());
        }
        let io = self.io()?;
        let mut errors: BTreeMap<usize, String> = BTreeMap::new();
        for (i, e) in self.probe_all()? {
            errors.insert(i, e);
        }
        let mut created: Vec<(usize, wire::Created)> = Vec::with_capacity(n);
        for _round in 0..2 {
            let usable: Vec<usize> = (0..io.clients.len()).filter(|i| !errors.contains_key(i)).collect();
            if usable.is_empty() || created.len() == n {
                break;
            }
            let shares = self.shares(n - created.len(), &usable, &created);
            let jobs = shares.iter().map(|&(server, k)| self.create_on(&io, server, k));
            for (&(server, _), (ids, err)) in shares.iter().zip(io.runtime.block_on(join_all(jobs))) {
                created.extend(ids.into_iter().map(|id| (server, id)));
                if let Some(e) = err {
                    errors.insert(server, e);
                }
            }
        }
        if created.len() < n {
            let made: Vec<(usize, u64, Option<Arc<str>>)> =
                created.into_iter().map(|(server, (id, instance))| (server, id, instance.map(Arc::from))).collect();
            {
                // the server gave these ids out anew: a session here that held one is lost
                let mut table = self.sessions.lock();
                for &(server, remote_id, _) in &made {
                    self.take_remote_id(&mut table, None, server, remote_id);
                }
            }
            self.close_remote(&io, &made);
            let detail: Vec<String> = errors.iter().map(|(i, e)| format!("{}: {e}", self.config.urls[*i])).collect();
            return Err(RemoteError::Unavailable(format!(
                "could create only {} of {n} sessions; {}",
                made.len(),
                detail.join("; ")
            )));
        }
        let first = self.next_id.fetch_add(n as u64, Ordering::Relaxed);
        let mut table = self.sessions.lock();
        let ids: Vec<u64> = (first..first + n as u64).collect();
        for (&id, (server, (remote_id, instance))) in ids.iter().zip(created) {
            self.take_remote_id(&mut table, Some(id), server, remote_id);
            let session = Session {
                server,
                remote_id,
                instance: instance.map(Arc::from),
                lost: None,
                phase: Phase::Fresh,
                steps: 0,
                task_id: None,
                observation: String::new(),
                extra: Map::new(),
                score: 0.0,
            };
            table.insert(id, session);
        }
        Ok(ids)
    }

    /// Starts episode `task_ids[i]` in session `ids[i]`; a failure is that slot's `Err`.
    pub fn reset(&self, ids: &[u64], task_ids: &[i64]) -> Result<Vec<Result<String, String>>, RemoteError> {
        check_lengths(ids.len(), task_ids.len(), "task_ids")?;
        let num_tasks = self.known_num_tasks();
        for &t in task_ids {
            if t < 0 || num_tasks.is_some_and(|n| t as u64 >= n) {
                let num_tasks = num_tasks.unwrap_or(0);
                return Err(PoolError::TaskOutOfRange { env: self.config.env.clone(), task_id: t, num_tasks }.into());
            }
        }
        let sessions = self.targets(ids)?;
        let io = self.io()?;
        let mut out: Vec<Result<String, String>> = vec![Err(String::new()); ids.len()];
        let mut live = Vec::with_capacity(ids.len());
        for (i, s) in sessions.iter().enumerate() {
            match &s.lost {
                Some(why) => out[i] = Err(why.clone()),
                None => live.push(i),
            }
        }
        let groups = group_by_target(&sessions, live);
        let jobs = groups.iter().map(|(group, items)| {
            let remote: Vec<u64> = items.iter().map(|&i| sessions[i].remote_id).collect();
            let tasks: Vec<u64> = items.iter().map(|&i| task_ids[i] as u64).collect();
            self.reset_on(&io, group, remote, tasks)
        });
        let replies = io.runtime.block_on(join_all(jobs));
        let mut table = self.sessions.lock();
        for (((server, _), items), results) in groups.iter().zip(replies) {
            for (&i, result) in items.iter().zip(results) {
                let (id, s) = (ids[i], &sessions[i]);
                let entry = table.get_mut(&id);
                let result = result.and_then(|r| self.opening(r).map_err(|message| Failure { message, lost: false }));
                out[i] = match result {
                    Ok(reply) => {
                        if let Some(e) = entry {
                            e.phase = Phase::Running;
                            e.steps = 0;
                            e.score = 0.0;
                            e.task_id = Some(task_ids[i] as u64);
                            e.observation.clone_from(&reply.observation);
                            e.extra = reply.extra;
                        }
                        Ok(reply.observation)
                    }
                    Err(e) => {
                        let what = format!("reset to task {} failed: {}", task_ids[i], e.message);
                        let msg = self.session_error(id, *server, s.remote_id, &what);
                        if let Some(entry) = entry {
                            self.fail(entry, &msg, e.lost);
                        }
                        Err(msg)
                    }
                };
            }
        }
        self.stats.resets.fetch_add(ids.len() as u64, Ordering::Relaxed);
        Ok(out)
    }

    /// The reset reply with `task_field`'s text put before the observation, as AgentGym's client
    /// shows it; an error when the reply lacks that field.
    fn opening(&self, mut reply: wire::ResetReply) -> Result<wire::ResetReply, String> {
        let Some(field) = &self.config.task_field else { return Ok(reply) };
        match reply.extra.get(field) {
            Some(Value::String(task)) => {
                reply.observation = format!("{task}\n{}", reply.observation);
                Ok(reply)
            }
            _ => Err(format!("the reset reply has no string `{field}` (the task of the episode)")),
        }
    }

    /// Applies `actions[i]` to session `ids[i]`; `Err(reason)` actions are refused per session.
    pub fn step<S: AsRef<str>>(
        &self,
        ids: &[u64],
        actions: &[Result<S, String>],
    ) -> Result<Vec<StepResult>, RemoteError> {
        check_lengths(ids.len(), actions.len(), "actions")?;
        let sessions = self.targets(ids)?;
        let cap = self.horizon();
        let mut out: Vec<Option<StepResult>> = vec![None; ids.len()];
        let mut ready = Vec::with_capacity(ids.len());
        for (i, (s, action)) in sessions.iter().zip(actions).enumerate() {
            match self.refuse_step(ids[i], s, action) {
                Some(reason) => out[i] = Some(failed(reason)),
                None => ready.push(i),
            }
        }
        let io = self.io()?;
        let groups = group_by_target(&sessions, ready);
        let jobs = groups.iter().map(|(group, items)| {
            let remote: Vec<u64> = items.iter().map(|&i| sessions[i].remote_id).collect();
            let acts: Vec<&str> = items.iter().map(|&i| actions[i].as_ref().map_or("", AsRef::as_ref)).collect();
            self.step_on(&io, group, remote, acts)
        });
        let replies = io.runtime.block_on(join_all(jobs));
        let mut table = self.sessions.lock();
        for (((server, _), items), results) in groups.iter().zip(replies) {
            for (&i, result) in items.iter().zip(results) {
                let (id, remote_id) = (ids[i], sessions[i].remote_id);
                out[i] = Some(match (result, table.get_mut(&id)) {
                    (Ok(reply), Some(entry)) => apply_step(entry, reply, cap),
                    (Ok(reply), None) => StepResult {
                        observation: reply.observation,
                        reward: reply.reward,
                        done: reply.done && !reply.truncated,
                        truncated: reply.truncated,
                        error: None,
                    },
                    (Err(e), entry) => {
                        let msg = self.session_error(id, *server, remote_id, &e.message);
                        if let Some(entry) = entry {
                            self.fail(entry, &msg, e.lost);
                        }
                        failed(msg)
                    }
                });
            }
        }
        drop(table);
        let out: Vec<StepResult> =
            out.into_iter().map(|r| r.unwrap_or_else(|| failed("not processed".into()))).collect();
        self.stats.steps.fetch_add(ids.len() as u64, Ordering::Relaxed);
        let errors = out.iter().filter(|r| r.error.is_some()).count();
        self.stats.step_errors.fetch_add(errors as u64, Ordering::Relaxed);
        Ok(out)
    }

    /// Forgets the sessions here and asks their servers to close them; a server that fails to
    /// answer is counted in `close_errors`, never an error of this call. Returns how many closed.
    pub fn close(&self, ids: &[u64]) -> Result<usize, RemoteError> {
        let removed: Vec<Session> = {
            let mut table = self.sessions.lock();
            check_ids(ids, |id| table.contains_key(&id))?;
            let removed: Vec<(u64, Session)> = ids.iter().filter_map(|id| table.remove(id).map(|s| (*id, s))).collect();
            let mut holders = self.holders.lock();
            for (id, s) in &removed {
                if holders.get(&(s.server, s.remote_id)) == Some(id) {
                    holders.remove(&(s.server, s.remote_id));
                }
            }
            removed.into_iter().map(|(_, s)| s).collect()
        };
        // a lost session's remote id may be another session's now: its close is not sent
        let remote: Vec<(usize, u64, Option<Arc<str>>)> =
            removed.iter().filter(|s| s.lost.is_none()).map(|s| (s.server, s.remote_id, s.instance.clone())).collect();
        let io = self.io()?;
        self.close_remote(&io, &remote);
        Ok(removed.len())
    }

    /// The last observation each server returned (empty before the first reset).
    pub fn observations(&self, ids: &[u64]) -> Result<Vec<String>, RemoteError> {
        Ok(self.lookup(ids)?.into_iter().map(|s| s.observation).collect())
    }

    /// Per-session facts: the reset reply's extra fields plus `server`, `remote_id`, `phase`,
    /// `task_id`, `pool_steps` (and `error` for a failed session).
    pub fn info(&self, ids: &[u64]) -> Result<Vec<Value>, RemoteError> {
        let sessions = self.lookup(ids)?;
        Ok(sessions
            .into_iter()
            .map(|s| {
                let mut info = s.extra;
                info.insert("server".into(), self.config.urls[s.server].clone().into());
                info.insert("remote_id".into(), s.remote_id.into());
                info.insert("pool_steps".into(), s.steps.into());
                info.insert("task_id".into(), s.task_id.map_or(Value::Null, Value::from));
                info.insert("phase".into(), if s.lost.is_some() { "lost" } else { s.phase.name() }.into());
                if let Some(instance) = &s.instance {
                    info.insert("instance".into(), instance.to_string().into());
                }
                if let Phase::Failed(msg) = &s.phase {
                    info.insert("error".into(), msg.clone().into());
                }
                Value::Object(info)
            })
            .collect())
    }

    // --- per-server work -------------------------------------------------------------------------

    fn create_on<'a>(
        &'a self,
        io: &'a Io,
        server: usize,
        k: usize,
    ) -> impl Future<Output = (Vec<wire::Created>, Option<String>)> + 'a {
        let c = &io.clients[server];
        let d = self.config.dialect;
        let batch = self.uses_batch(server);
        async move {
            if batch {
                return match wire::batch_create(c, k).await {
                    Ok((ids, instance)) => (ids.into_iter().map(|id| (id, instance.clone())).collect(), None),
                    Err(e) => (Vec::new(), Some(self.count_failure(e))),
                };
            }
            let results = join_all((0..k).map(|_| wire::create(c, d))).await;
            let mut made: Vec<wire::Created> = Vec::with_capacity(k);
            let mut error = None;
            for r in results {
                match r {
                    // one env on the server is one session here: a repeated id is not a new one
                    Ok((id, _)) if made.iter().any(|(m, _)| *m == id) => {
                        self.stats.transport_errors.fetch_add(1, Ordering::Relaxed);
                        error = Some(format!("/create handed out remote id {id} twice"));
                    }
                    Ok(created) => made.push(created),
                    Err(e) => error = Some(self.count_failure(e)),
                }
            }
            (made, error)
        }
    }

    async fn reset_on(
        &self,
        io: &Io,
        (server, instance): &Group,
        remote: Vec<u64>,
        tasks: Vec<u64>,
    ) -> Vec<Result<wire::ResetReply, Failure>> {
        let (c, instance) = (&io.clients[*server], instance.as_deref());
        if self.uses_batch(*server) {
            return match wire::batch_reset(c, &remote, &tasks, instance).await {
                Ok(slots) => slots
                    .into_iter()
                    .map(|r| {
                        r.map(|observation| wire::ResetReply { observation, extra: Map::new() })
                            .map_err(|message| Failure { message, lost: false })
                    })
                    .collect(),
                Err(e) => vec![Err(self.failure(e, false)); remote.len()],
            };
        }
        let d = self.config.dialect;
        let calls = remote.iter().zip(&tasks).map(|(&r, &t)| wire::reset(c, d, r, t, instance));
        join_all(calls).await.into_iter().map(|r| r.map_err(|e| self.failure(e, false))).collect()
    }

    async fn step_on(
        &self,
        io: &Io,
        (server, instance): &Group,
        remote: Vec<u64>,
        actions: Vec<&str>,
    ) -> Vec<Result<wire::StepReply, Failure>> {
        let (c, instance) = (&io.clients[*server], instance.as_deref());
        if self.uses_batch(*server) {
            return match wire::batch_step(c, &remote, &actions, instance).await {
                Ok(slots) => slots.into_iter().map(|r| r.map_err(|message| Failure { message, lost: false })).collect(),
                Err(e) => vec![Err(self.failure(e, true)); remote.len()],
            };
        }
        let (d, score) = (self.config.dialect, self.config.score_field.as_deref());
        let calls = remote.iter().zip(&actions).map(|(&r, a)| wire::step(c, d, r, a, score, instance));
        join_all(calls).await.into_iter().map(|r| r.map_err(|e| self.failure(e, true))).collect()
    }

    fn close_remote(&self, io: &Io, sessions: &[(usize, u64, Option<Arc<str>>)]) {
        let mut by_target: BTreeMap<Group, Vec<u64>> = BTreeMap::new();
        for (server, remote_id, instance) in sessions {
            by_target.entry((*server, instance.clone())).or_default().push(*remote_id);
        }
        let d = self.config.dialect;
        let jobs = by_target.iter().map(|((server, instance), remote)| {
            let (c, instance) = (&io.clients[*server], instance.as_deref());
            let batch = self.uses_batch(*server);
            async move {
                if batch {
                    return usize::from(wire::batch_close(c, remote, instance).await.is_err()) * remote.len();
                }
                let results = join_all(remote.iter().map(|&r| wire::close(c, d, r, instance))).await;
                results.iter().filter(|r| r.is_err()).count()
            }
        });
        let failures: usize = io.runtime.block_on(join_all(jobs)).into_iter().sum();
        self.stats.close_errors.fetch_add(failures as u64, Ordering::Relaxed);
    }

    // --- helpers -----------------------------------------------------------------------------

    /// This process's runtime and clients ([`ProcessClients`]: rebuilt after a fork).
    fn io(&self) -> Result<Arc<Io>, RemoteError> {
        self.io.get().map_err(RemoteError::Config)
    }

    /// Asks each not-yet-probed server what it is. Returns the servers that could not be
    /// reached, with why; they are probed again next time.
    fn probe_all(&self) -> Result<Vec<(usize, String)>, RemoteError> {
        let pending: Vec<usize> =
            self.probes.lock().iter().enumerate().filter(|(_, p)| p.is_none()).map(|(i, _)| i).collect();
        if pending.is_empty() {
            return Ok(Vec::new());
        }
        let io = self.io()?;
        let jobs = pending.iter().map(|&i| wire::health(&io.clients[i]));
        let results = io.runtime.block_on(join_all(jobs));
        let mut probes = self.probes.lock();
        let mut unreachable = Vec::new();
        for (&i, r) in pending.iter().zip(results) {
            match r {
                Ok(Some(h)) => {
                    let batch = h.get("batch").and_then(Value::as_bool).unwrap_or(false);
                    probes[i] = Some(Probe { batch, num_tasks: h.get("num_tasks").and_then(Value::as_u64) });
                }
                Ok(None) => probes[i] = Some(Probe::default()),
                Err(e) => unreachable.push((i, self.count_failure(e))),
            }
        }
        Ok(unreachable)
    }

    /// Whether `server` gets `/batch/*` requests: as configured, else as its probe said.
    fn uses_batch(&self, server: usize) -> bool {
        self.config.batch.unwrap_or_else(|| self.probes.lock()[server].as_ref().is_some_and(|p| p.batch))
    }

    /// How many of `n` new sessions each usable server gets: fewest open sessions first.
    fn shares(&self, n: usize, usable: &[usize], pending: &[(usize, wire::Created)]) -> Vec<(usize, usize)> {
        let mut load: BTreeMap<usize, usize> = usable.iter().map(|&i| (i, 0)).collect();
        for s in self.sessions.lock().values() {
            if let Some(l) = load.get_mut(&s.server) {
                *l += 1;
            }
        }
        for (server, _) in pending {
            if let Some(l) = load.get_mut(server) {
                *l += 1;
            }
        }
        let mut share: BTreeMap<usize, usize> = BTreeMap::new();
        for _ in 0..n {
            let (&server, _) = load.iter().min_by_key(|(i, l)| (**l, **i)).expect("usable is not empty");
            *load.get_mut(&server).expect("present") += 1;
            *share.entry(server).or_default() += 1;
        }
        share.into_iter().collect()
    }

    fn lookup(&self, ids: &[u64]) -> Result<Vec<Session>, RemoteError> {
        let table = self.sessions.lock();
        check_ids(ids, |id| table.contains_key(&id))?;
        Ok(ids.iter().map(|id| table[id].clone()).collect())
    }

    /// Where each session lives and its phase, copied out of the table without the rest of
    /// the session (its last observation and the reset's extra fields).
    fn targets(&self, ids: &[u64]) -> Result<Vec<Target>, RemoteError> {
        let table = self.sessions.lock();
        check_ids(ids, |id| table.contains_key(&id))?;
        Ok(ids
            .iter()
            .map(|id| {
                let s = &table[id];
                Target {
                    server: s.server,
                    remote_id: s.remote_id,
                    instance: s.instance.clone(),
                    phase: s.phase.clone(),
                    lost: s.lost.clone(),
                }
            })
            .collect())
    }

    /// Why session `id` cannot step now, if it cannot; checked before anything is sent.
    fn refuse_step<S: AsRef<str>>(&self, id: u64, s: &Target, action: &Result<S, String>) -> Option<String> {
        if let Some(lost) = &s.lost {
            return Some(lost.clone());
        }
        if let Some(refusal) = s.phase.step_refusal(id) {
            return Some(refusal);
        }
        match action.as_ref().map(AsRef::as_ref) {
            Err(reason) => Some(format!("session {id}: {reason}; not sent to the server")),
            Ok(a) if a.len() > self.config.max_action_bytes => Some(format!(
                "session {id}: action is {} bytes, over the {}-byte cap; not sent to the server",
                a.len(),
                self.config.max_action_bytes
            )),
            Ok(_) => None,
        }
    }

    fn session_error(&self, id: u64, server: usize, remote_id: u64, what: &str) -> String {
        format!("session {id} (server {}, remote id {remote_id}): {what}", self.config.urls[server])
    }

    fn count_failure(&self, e: CallError) -> String {
        if !matches!(e, CallError::Server(_) | CallError::Gone(_)) {
            self.stats.transport_errors.fetch_add(1, Ordering::Relaxed);
        }
        e.to_string()
    }

    /// One request's failure, for each of its sessions (`step`: a step, which is never
    /// retried once it may have reached the server). A 410 of agentgym-envserver is a lost
    /// session: the server was restarted.
    fn failure(&self, e: CallError, step: bool) -> Failure {
        let lost = matches!(e, CallError::Gone(_));
        let retry_note =
            if step && e.may_have_reached() && !matches!(e, CallError::Server(_) | CallError::Status { .. }) {
                "; the step may have reached the server and was not retried: reset or close the session"
            } else {
                ""
            };
        let message = self.count_failure(e);
        let message = if step { format!("step failed: {message}{retry_note}") } else { message };
        Failure { message, lost }
    }

    /// Marks a session failed (`lost`: for good, gone from its server).
    fn fail(&self, entry: &mut Session, message: &str, lost: bool) {
        entry.phase = Phase::Failed(message.to_string());
        if lost && entry.lost.is_none() {
            entry.lost = Some(format!("{message}; the session is lost: close it"));
            self.stats.lost_sessions.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The server handed out `remote_id` anew, to session `id` (None: to a session being closed
    /// again): an open session of this pool that held it is lost (the server restarted, or
    /// reuses ids), as two sessions here must never drive one env there.
    fn take_remote_id(&self, table: &mut IdMap<Session>, id: Option<u64>, server: usize, remote_id: u64) {
        let mut holders = self.holders.lock();
        let old = match id {
            Some(id) => holders.insert((server, remote_id), id),
            None => holders.remove(&(server, remote_id)),
        };
        drop(holders);
        let Some(old) = old else { return };
        if let Some(holder) = table.get_mut(&old).filter(|s| s.lost.is_none()) {
            let msg = self.session_error(
                old,
                server,
                remote_id,
                "the server handed out this remote id again to a new session (it was restarted, or \
                 reuses ids): this session's env there is gone",
            );
            holder.phase = Phase::Failed(msg.clone());
            holder.lost = Some(format!("{msg}; the session is lost: close it"));
            self.stats.lost_sessions.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The session after one step: its reward (the score's change when the pool reads a score), and
/// whether the episode ended done (by the env's rules) or truncated (the env's own limit, or
/// the pool's cap).
fn apply_step(entry: &mut Session, reply: wire::StepReply, cap: Option<u32>) -> StepResult {
    entry.steps += 1;
    let done = reply.done && !reply.truncated;
    let truncated = !done && (reply.truncated || cap.is_some_and(|c| entry.steps >= c));
    if done || truncated {
        entry.phase = Phase::Finished { truncated };
    }
    let reward = match reply.score {
        Some(score) => {
            let change = score - entry.score;
            entry.score = score;
            change as f32
        }
        None => reply.reward,
    };
    entry.observation.clone_from(&reply.observation);
    StepResult { observation: reply.observation, reward, done, truncated, error: None }
}

fn failed(message: String) -> StepResult {
    StepResult { observation: String::new(), reward: 0.0, done: false, truncated: false, error: Some(message) }
}

/// Positions `items` grouped by server and server instance, servers in ascending order.
fn group_by_target(sessions: &[Target], items: Vec<usize>) -> Vec<(Group, Vec<usize>)> {
    let mut groups: BTreeMap<Group, Vec<usize>> = BTreeMap::new();
    for i in items {
        groups.entry((sessions[i].server, sessions[i].instance.clone())).or_default().push(i);
    }
    groups.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session() -> Session {
        Session {
            server: 0,
            remote_id: 0,
            instance: None,
            lost: None,
            phase: Phase::Running,
            steps: 0,
            task_id: Some(0),
            observation: String::new(),
            extra: Map::new(),
            score: 0.0,
        }
    }

    fn reply(done: bool, truncated: bool, score: Option<f64>) -> wire::StepReply {
        wire::StepReply { observation: "o".into(), reward: 7.0, done, truncated, score }
    }

    #[test]
    fn a_read_score_makes_rewards_its_changes() {
        let mut s = session();
        let r: Vec<f32> = [Some(25.0), Some(25.0), Some(75.0), Some(-100.0)]
            .into_iter()
            .map(|score| apply_step(&mut s, reply(false, false, score), None).reward)
            .collect();
        assert_eq!(r, vec![25.0, 0.0, 50.0, -175.0]);
        assert_eq!(r.iter().sum::<f32>(), -100.0);
        assert_eq!(apply_step(&mut session(), reply(false, false, None), None).reward, 7.0);
    }

    #[test]
    fn the_envs_own_limit_is_truncation_not_done() {
        let mut s = session();
        let out = apply_step(&mut s, reply(true, true, None), None);
        assert!(out.truncated && !out.done);
        assert_eq!(s.phase, Phase::Finished { truncated: true });
        let mut s = session();
        let out = apply_step(&mut s, reply(true, false, None), Some(1));
        assert!(out.done && !out.truncated, "an episode done at the cap is done");
        let mut s = session();
        let out = apply_step(&mut s, reply(false, false, None), Some(1));
        assert!(out.truncated && !out.done);
    }

    #[test]
    fn counters_name_the_local_pools_keys_first_and_no_panics() {
        let stats = RemoteStats::default();
        stats.steps.fetch_add(5, Ordering::Relaxed);
        stats.lost_sessions.fetch_add(2, Ordering::Relaxed);
        let local: Vec<&str> = crate::pool::PoolStats::default().counters().iter().map(|c| c.0).collect();
        let counters = stats.counters();
        assert_eq!(counters[..local.len()].iter().map(|c| c.0).collect::<Vec<_>>(), local);
        assert_eq!(counters[0], ("steps", 5));
        assert_eq!(counters[3], ("env_panics", 0));
        assert_eq!(counters[6], ("lost_sessions", 2));
    }
}
