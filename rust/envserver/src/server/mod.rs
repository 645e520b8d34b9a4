//! `agentgym-envserver`: an [`EnvPool`] served over HTTP in AgentGym's wire format.
//!
//! Routes (field names and shapes as AgentGym's server for the env; see [`dialect`]):
//! `GET /`, `POST /create`, `POST /reset {id, data_idx}`, `POST /step {id, action}`,
//! `GET /observation?id=N`, `POST /close {id}` (`true`, or `false` when the id was not open);
//! added: `POST /batch/create {n} -> {ids}`, `POST /batch/reset {ids, data_idxs} ->
//! {observations, errors}`, `POST /batch/step {ids, actions} -> {observations, rewards, dones,
//! truncated, errors}`, `POST /batch/close {ids} -> {closed}`, `GET /health`, `GET /metrics`.
//!
//! Errors are `{"error": "..."}` with 400 (not JSON / not UTF-8), 401 (missing or wrong bearer
//! token), 404 (unknown session id or route), 405, 409 (a step the session cannot take now:
//! never reset, episode finished), 413 (body over the limit), 422 (wrong fields or types, bad
//! task id, over-long action), 503 (over `max_sessions`). Batch routes report per-item errors
//! in `errors[i]` and answer 200. Env work runs on tokio's blocking threads (and the pool's
//! helper threads for large batches), never on the event loop.
//!
//! Connections are capped and time out when they hold a slot without using it ([`conn`]);
//! requests a browser makes for a page of another site are refused ([`cross_site`]).

mod body;
mod conn;
mod cross_site;
mod dialect;
mod error;
mod handlers;
mod json;
mod metrics;
mod sessions;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::routing::{get, post};
use axum::Router;
use parking_lot::{Condvar, Mutex};
use tokio::sync::oneshot;

use crate::env::Options;
use crate::pool::{EnvPool, PoolError, DEFAULT_MAX_ACTION_BYTES};

pub use cross_site::CrossSite;
pub use dialect::Dialect;
pub use sessions::{AppState, Limits};

/// Everything `agentgym-envserver` can be told.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Native env name (`babyai`, `textcraft`).
    pub env: String,
    /// Env options (e.g. `recipes_dir` for TextCraft).
    pub options: Options,
    /// Address to bind; `127.0.0.1` unless told otherwise.
    pub host: String,
    /// 0 picks a free port (see [`Server::addr`]).
    pub port: u16,
    pub max_sessions: usize,
    pub max_body_bytes: usize,
    pub max_action_bytes: usize,
    /// Sessions unused for this long are closed and counted (`None`: never).
    pub idle_timeout: Option<Duration>,
    /// When set, every request must carry `Authorization: Bearer <token>`.
    pub token: Option<String>,
    /// Tokio worker threads (HTTP parsing); `None`: one per core.
    pub workers: Option<usize>,
    /// Threads for batched env work (the caller plus helpers); `None`: one per core.
    pub env_threads: Option<usize>,
    /// Threads that run the requests' env work (each batch still spreads over `env_threads`).
    /// Two by default: with one, every request waits behind the batch in progress (a client
    /// stepping one session saw p90 0.8-1.0 s during 50,000-session batches; 15-24 ms with
    /// two), and with tokio's default of up to 512 requests rotate over many threads, whose
    /// cross-thread frees cost ~30% of a `/batch/step` (bench/RESULTS.md).
    pub blocking_threads: usize,
    /// Extra latency added to every step request, to stand in for a slow env or network in
    /// benchmarks; zero in normal use.
    pub step_latency: Duration,
    /// A request's head must arrive within this of the server starting to wait for it.
    pub header_read_timeout: Duration,
    /// A request's body must arrive within this of its head (408 otherwise).
    pub body_read_timeout: Duration,
    /// A kept-alive connection with no request in progress for this long is closed.
    pub keep_alive_timeout: Duration,
    /// Open connections at most (lowered to what `ulimit -n` allows); a new one at the cap
    /// takes the place of one that waits without a request in progress (see [`conn`]).
    pub max_connections: usize,
    /// Host names served besides the bound address and localhost (`*`: any), on a server
    /// without a token (see [`cross_site`]); also the sites whose pages may call it.
    pub allowed_hosts: Vec<String>,
    /// Bytes of custom TextCraft episodes (`/create` with `goal` and `commands`) all open
    /// sessions may hold together; a `/create` past it is refused (503).
    pub max_custom_bytes: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            env: String::new(),
            options: Options::new(),
            host: "127.0.0.1".into(),
            port: 36001,
            max_sessions: 65_536,
            max_body_bytes: 8 << 20,
            max_action_bytes: DEFAULT_MAX_ACTION_BYTES,
            idle_timeout: Some(Duration::from_secs(3600)),
            token: None,
            workers: None,
            env_threads: None,
            blocking_threads: 2,
            step_latency: Duration::ZERO,
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            // Shorter than the header timeout (which also bounds an idle connection), longer
            // than EnvPool.remote's pooled connections idle (4 s), so that client closes first.
            keep_alive_timeout: Duration::from_secs(5),
            max_connections: 1024,
            allowed_hosts: Vec::new(),
            max_custom_bytes: DEFAULT_MAX_CUSTOM_BYTES,
        }
    }
}

/// Custom episodes' bytes all sessions may hold by default: 512 episodes of the largest size
/// a `/create` accepts, or tens of thousands of ordinary ones.
pub const DEFAULT_MAX_CUSTOM_BYTES: usize = 64 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Pool(#[from] PoolError),
    #[error("cannot listen on {host}:{port}: {source}")]
    Bind { host: String, port: u16, source: std::io::Error },
    #[error("cannot start the server runtime: {0}")]
    Runtime(std::io::Error),
}

/// A running server. Dropping it stops it.
pub struct Server {
    addr: SocketAddr,
    max_connections: usize,
    state: Arc<AppState>,
    runtime: Mutex<Option<tokio::runtime::Runtime>>,
    shutdown: Mutex<Option<oneshot::Sender<()>>>,
    done: Arc<Done>,
}

/// Set once when the serving task ends: `Ok` after a shutdown, `Err` if serving failed.
#[derive(Default)]
struct Done {
    result: Mutex<Option<Result<(), String>>>,
    cond: Condvar,
}

impl Done {
    fn finish(&self, result: Result<(), String>) {
        *self.result.lock() = Some(result);
        self.cond.notify_all();
    }
}

impl Server {
    /// Builds the pool, binds the address and starts serving on a runtime of its own.
    pub fn start(config: ServerConfig) -> Result<Self, ServerError> {
        let mut pool = EnvPool::new(&config.env, &config.options, config.env_threads)?;
        pool.set_max_action_bytes(config.max_action_bytes);
        pool.set_max_sessions(config.max_sessions);
        let bind_err = |source| ServerError::Bind { host: config.host.clone(), port: config.port, source };
        let listener = std::net::TcpListener::bind((config.host.as_str(), config.port)).map_err(bind_err)?;
        listener.set_nonblocking(true).map_err(bind_err)?;
        let addr = listener.local_addr().map_err(bind_err)?;
        let limits = Limits {
            max_sessions: config.max_sessions,
            max_body_bytes: config.max_body_bytes,
            max_action_bytes: config.max_action_bytes,
            max_custom_bytes: config.max_custom_bytes,
            token: config.token.clone(),
            idle_timeout: config.idle_timeout,
            step_latency: config.step_latency,
            cross_site: CrossSite {
                bound: addr.ip(),
                allowed_hosts: config.allowed_hosts.iter().map(|h| h.to_ascii_lowercase()).collect(),
                has_token: config.token.is_some(),
            },
        };
        let state = Arc::new(AppState::new(pool, limits));
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        if let Some(n) = config.workers {
            builder.worker_threads(n.max(1));
        }
        builder.max_blocking_threads(config.blocking_threads.max(1));
        let runtime = builder.enable_all().thread_name("envserver-http").build().map_err(ServerError::Runtime)?;
        let (tx, rx) = oneshot::channel();
        let done = Arc::new(Done::default());
        let limits = conn::ConnLimits {
            header_read_timeout: config.header_read_timeout,
            body_read_timeout: config.body_read_timeout,
            keep_alive_timeout: config.keep_alive_timeout,
            max_connections: conn::connection_cap(config.max_connections),
        };
        runtime.spawn(serve(listener, Arc::clone(&state), limits, rx, Arc::clone(&done)));
        if config.idle_timeout.is_some() {
            runtime.spawn(reap_idle(Arc::clone(&state)));
        }
        let max_connections = limits.max_connections;
        let (runtime, shutdown) = (Mutex::new(Some(runtime)), Mutex::new(Some(tx)));
        Ok(Self { addr, max_connections, state, runtime, shutdown, done })
    }

    /// The bound address (useful with port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The cap on open connections in force: as configured, or lower under `ulimit -n`.
    pub fn max_connections(&self) -> usize {
        self.max_connections
    }

    /// The shared state (pool, metrics), for in-process inspection.
    pub fn state(&self) -> &Arc<AppState> {
        &self.state
    }

    /// Waits until the server has stopped, at most `timeout` (`None`: forever). Returns the
    /// serving result once stopped, `None` if still running.
    pub fn wait(&self, timeout: Option<Duration>) -> Option<Result<(), String>> {
        let mut result = self.done.result.lock();
        match timeout {
            None => {
                while result.is_none() {
                    self.done.cond.wait(&mut result);
                }
            }
            Some(t) => {
                if result.is_none() {
                    self.done.cond.wait_for(&mut result, t);
                }
            }
        }
        result.clone()
    }

    /// Stops accepting, lets requests in flight finish (up to a few seconds), then shuts down.
    pub fn stop(&self) {
        if let Some(tx) = self.shutdown.lock().take() {
            let _ = tx.send(());
        }
        let _ = self.wait(Some(Duration::from_secs(5)));
        if let Some(runtime) = self.runtime.lock().take() {
            runtime.shutdown_timeout(Duration::from_secs(1));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The routes, over `state`.
pub fn router(state: Arc<AppState>) -> Router {
    use handlers::*;
    Router::new()
        .route("/", get(hello))
        .route("/create", post(create))
        .route("/reset", post(reset))
        .route("/step", post(step))
        .route("/observation", get(observation))
        .route("/close", post(close))
        .route("/batch/create", post(batch_create))
        .route("/batch/reset", post(batch_reset))
        .route("/batch/step", post(batch_step))
        .route("/batch/close", post(batch_close))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(Arc::clone(&state), guard))
        .with_state(state)
}

async fn serve(
    listener: std::net::TcpListener,
    state: Arc<AppState>,
    limits: conn::ConnLimits,
    stop: oneshot::Receiver<()>,
    done: Arc<Done>,
) {
    let result = match tokio::net::TcpListener::from_std(listener) {
        Ok(listener) => {
            conn::serve(listener, router(state), limits, stop).await;
            Ok(())
        }
        Err(e) => Err(e.to_string()),
    };
    done.finish(result);
}

async fn reap_idle(state: Arc<AppState>) {
    let Some(timeout) = state.limits.idle_timeout else { return };
    let period = (timeout / 4).clamp(Duration::from_millis(10), Duration::from_secs(5));
    loop {
        tokio::time::sleep(period).await;
        let s = Arc::clone(&state);
        let _ = tokio::task::spawn_blocking(move || s.reclaim_idle()).await;
    }
}
