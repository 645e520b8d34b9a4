//! PyO3 bindings: type conversion, GIL release around batched work, one error adapter.
//! No logic lives here; see `pool.rs` and `envs/`.

use std::collections::BTreeMap;

use numpy::PyArray1;
use pyo3::exceptions::{PyKeyError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::env::{CustomTask, EnvError};
use crate::pool::{EnvPool, PoolError, StepResult};

/// The single mapping from Rust errors to Python exceptions.
fn to_py(err: PoolError) -> PyErr {
    let msg = err.to_string();
    match err {
        PoolError::UnknownSession(_) => PyKeyError::new_err(msg),
        PoolError::TooManySessions { .. } => PyRuntimeError::new_err(msg),
        PoolError::Env(EnvError::Data(_)) => PyValueError::new_err(msg),
        _ => PyValueError::new_err(msg),
    }
}

/// Reset results as columns: observations (None where failed), errors.
type ResetColumns = (Vec<Option<String>>, Vec<Option<String>>);

/// Expert moves as columns: `(action, thought)` (None where there is none), errors.
type ExpertColumns = (Vec<Option<(String, String)>>, Vec<Option<String>>);

/// Step results as columns: observations, rewards, dones, truncated, errors.
type StepColumns<'py> = (
    Vec<String>,
    Bound<'py, PyArray1<f32>>,
    Bound<'py, PyArray1<bool>>,
    Bound<'py, PyArray1<bool>>,
    Vec<Option<String>>,
);

/// The `#[pymethods]` block of a pool class: the batched methods `EnvPool` and `RemotePool`
/// share (same Python signatures and semantics), then the class's own methods (`$own`).
/// `$err` maps the inner pool's error to a Python exception; `$step` is its checked step.
macro_rules! pool_pymethods {
    ($ty:ident, $err:ident, $step:ident, $($own:tt)*) => {
        #[pymethods]
        impl $ty {
            fn create(&self, py: Python<'_>, n: usize) -> PyResult<Vec<u64>> {
                py.detach(|| self.inner.create(n)).map_err($err)
            }

            /// Returns (observations, errors); a failed slot has observation None and an
            /// error message.
            fn reset(&self, py: Python<'_>, ids: Vec<u64>, task_ids: Vec<i64>) -> PyResult<ResetColumns> {
                let out = py.detach(|| self.inner.reset(&ids, &task_ids)).map_err($err)?;
                Ok(out.into_iter().map(|r| r.map_or_else(|e| (None, Some(e)), |o| (Some(o), None))).unzip())
            }

            fn step<'py>(
                &self,
                py: Python<'py>,
                ids: Vec<u64>,
                actions: Vec<Bound<'py, PyAny>>,
            ) -> PyResult<StepColumns<'py>> {
                let actions =
                    actions.iter().enumerate().map(|(i, a)| action_text(i, a)).collect::<PyResult<Vec<_>>>()?;
                let results = py.detach(|| self.inner.$step(&ids, &actions)).map_err($err)?;
                Ok(columns(py, results))
            }

            fn close(&self, py: Python<'_>, ids: Vec<u64>) -> PyResult<usize> {
                py.detach(|| self.inner.close(&ids)).map_err($err)
            }

            #[pyo3(signature = (cap))]
            fn set_horizon(&self, cap: Option<u32>) -> PyResult<()> {
                if cap == Some(0) {
                    return Err(PyValueError::new_err("horizon cap must be >= 1, or None for no cap"));
                }
                self.inner.set_horizon(cap);
                Ok(())
            }

            #[getter]
            fn horizon(&self) -> Option<u32> {
                self.inner.horizon()
            }

            #[getter]
            fn env(&self) -> String {
                self.inner.env_name().to_string()
            }

            fn __len__(&self) -> usize {
                self.inner.len()
            }

            fn ids(&self) -> Vec<u64> {
                self.inner.ids()
            }

            $($own)*
        }
    };
}

/// Native session multiplexer; use `agentgym.envs.EnvPool`, which wraps it.
#[pyclass(name = "EnvPool", module = "agentgym._envserver", frozen)]
struct PyEnvPool {
    inner: EnvPool,
}

pool_pymethods! { PyEnvPool, to_py, step_checked,
    #[new]
    #[pyo3(signature = (env, *, threads=None, options=None, max_action_bytes=None, max_sessions=None))]
    fn new(
        py: Python<'_>,
        env: &str,
        threads: Option<usize>,
        options: Option<BTreeMap<String, String>>,
        max_action_bytes: Option<usize>,
        max_sessions: Option<usize>,
    ) -> PyResult<Self> {
        let options = options.unwrap_or_default();
        let mut inner = py.detach(|| EnvPool::new(env, &options, threads)).map_err(to_py)?;
        if let Some(n) = max_action_bytes {
            inner.set_max_action_bytes(n);
        }
        if let Some(n) = max_sessions {
            inner.set_max_sessions(n);
        }
        Ok(Self { inner })
    }

    #[getter]
    fn num_tasks(&self) -> u64 {
        self.inner.num_tasks()
    }

    #[getter]
    fn num_threads(&self) -> usize {
        self.inner.num_threads()
    }

    fn observations(&self, py: Python<'_>, ids: Vec<u64>) -> PyResult<Vec<String>> {
        py.detach(|| self.inner.observations(&ids)).map_err(to_py)
    }

    fn available_actions(&self, py: Python<'_>, ids: Vec<u64>) -> PyResult<Vec<Option<Vec<String>>>> {
        py.detach(|| self.inner.available_actions(&ids)).map_err(to_py)
    }

    fn sample_actions(&self, py: Python<'_>, ids: Vec<u64>, seed: u64) -> PyResult<Vec<Option<String>>> {
        py.detach(|| self.inner.sample_actions(&ids, seed)).map_err(to_py)
    }

    /// Starts the episode `goal` (and `commands`) describe in session `id`; see `EnvPool.reset_custom`.
    #[pyo3(signature = (id, goal, commands=None))]
    fn reset_custom(&self, py: Python<'_>, id: u64, goal: String, commands: Option<String>) -> PyResult<String> {
        let task = CustomTask { goal, commands };
        py.detach(|| self.inner.reset_custom(id, &task)).map_err(to_py)
    }

    /// Returns (moves, errors): each session's expert `(action, thought)`, or None and why.
    fn expert(&self, py: Python<'_>, ids: Vec<u64>) -> PyResult<ExpertColumns> {
        let out = py.detach(|| self.inner.expert(&ids)).map_err(to_py)?;
        Ok(out.into_iter().map(|r| r.map_or_else(|e| (None, Some(e)), |m| (Some((m.action, m.thought)), None))).unzip())
    }

    /// Per-session info as JSON strings (the facade decodes them).
    fn info(&self, py: Python<'_>, ids: Vec<u64>) -> PyResult<Vec<String>> {
        let values = py.detach(|| self.inner.info(&ids)).map_err(to_py)?;
        Ok(values.iter().map(|v| v.to_string()).collect())
    }

    /// Counters since the pool was built: steps, resets, step_errors, env_panics.
    fn stats(&self) -> BTreeMap<&'static str, u64> {
        BTreeMap::from(self.inner.stats.counters())
    }
}

/// A Python `str` action as text, borrowed from the `str` object (its UTF-8 form, which
/// Python keeps with the string: nothing is copied, and the objects outlive the step that
/// reads them with the GIL released); text that cannot be UTF-8 (lone surrogates) is a
/// per-session error, anything but a `str` a `TypeError` for the whole batch.
fn action_text<'a>(index: usize, action: &'a Bound<'_, PyAny>) -> PyResult<Result<&'a str, String>> {
    let Ok(text) = action.cast::<PyString>() else {
        let kind = action.get_type().name()?;
        return Err(PyTypeError::new_err(format!("actions[{index}] must be str, not {kind}")));
    };
    Ok(text.to_str().map_err(|_| "action is not valid UTF-8 text (lone surrogates)".to_string()))
}

fn columns(py: Python<'_>, results: Vec<StepResult>) -> StepColumns<'_> {
    let n = results.len();
    let (mut obs, mut rewards, mut dones, mut truncs, mut errors) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    for r in results {
        obs.push(r.observation);
        rewards.push(r.reward);
        dones.push(r.done);
        truncs.push(r.truncated);
        errors.push(r.error);
    }
    // Copied into arrays numpy allocates: cheaper than handing numpy the vectors (each would
    // need a Python object owning its memory).
    (
        obs,
        PyArray1::from_slice(py, &rewards),
        PyArray1::from_slice(py, &dones),
        PyArray1::from_slice(py, &truncs),
        errors,
    )
}

#[pymodule]
#[pyo3(name = "_envserver")]
fn envserver_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyEnvPool>()?;
    m.add_class::<PyServer>()?;
    m.add_class::<PyRemotePool>()?;
    m.add_class::<PySearchIndex>()?;
    m.add_function(wrap_pyfunction!(build_search_index, m)?)?;
    m.add("ENV_NAMES", crate::envs::ENV_NAMES.to_vec())?;
    m.add("MAX_ACTION_BYTES", crate::pool::DEFAULT_MAX_ACTION_BYTES)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

// ---- HTTP server and remote sessions (issue 3) ----

use std::time::Duration;

use pyo3::exceptions::{PyConnectionError, PyOSError};

use crate::remote::{RemoteConfig, RemoteError, RemotePool, WireDialect};
use crate::server::{Server, ServerConfig, ServerError};

/// RemotePool errors: bad arguments as for a local pool, unreachable servers as ConnectionError.
fn remote_to_py(err: RemoteError) -> PyErr {
    match err {
        RemoteError::Pool(e) => to_py(e),
        RemoteError::Config(m) => PyValueError::new_err(m),
        RemoteError::Unavailable(m) => PyConnectionError::new_err(m),
    }
}

fn server_to_py(err: ServerError) -> PyErr {
    match err {
        ServerError::Pool(e) => to_py(e),
        e @ ServerError::Bind { .. } => PyOSError::new_err(e.to_string()),
        e @ ServerError::Runtime(_) => PyRuntimeError::new_err(e.to_string()),
    }
}

fn seconds(name: &str, value: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(value)
        .map_err(|_| PyValueError::new_err(format!("{name} must be a non-negative number of seconds, got {value}")))
}

/// `agentgym-envserver` running in this process (on its own threads); `stop()` ends it.
#[pyclass(name = "Server", module = "agentgym._envserver", frozen)]
struct PyServer {
    inner: Server,
}

#[pymethods]
impl PyServer {
    #[new]
    #[pyo3(signature = (env, *, host="127.0.0.1", port=36001, options=None, max_sessions=65536, max_body_bytes=8388608,
        max_action_bytes=None, idle_timeout=Some(3600.0), token=None, workers=None, env_threads=None, blocking_threads=2, step_latency=0.0,
        header_read_timeout=10.0, keep_alive_timeout=5.0, max_connections=1024, body_read_timeout=30.0, allowed_hosts=None,
        max_custom_bytes=crate::server::DEFAULT_MAX_CUSTOM_BYTES))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        env: &str,
        host: &str,
        port: u16,
        options: Option<BTreeMap<String, String>>,
        max_sessions: usize,
        max_body_bytes: usize,
        max_action_bytes: Option<usize>,
        idle_timeout: Option<f64>,
        token: Option<String>,
        workers: Option<usize>,
        env_threads: Option<usize>,
        blocking_threads: usize,
        step_latency: f64,
        header_read_timeout: f64,
        keep_alive_timeout: f64,
        max_connections: usize,
        body_read_timeout: f64,
        allowed_hosts: Option<Vec<String>>,
        max_custom_bytes: usize,
    ) -> PyResult<Self> {
        if blocking_threads == 0 {
            return Err(PyValueError::new_err("blocking_threads must be at least 1"));
        }
        if max_connections == 0 {
            return Err(PyValueError::new_err("max_connections must be at least 1"));
        }
        if !(header_read_timeout > 0.0 && keep_alive_timeout > 0.0 && body_read_timeout > 0.0) {
            return Err(PyValueError::new_err(
                "header_read_timeout, body_read_timeout and keep_alive_timeout must be positive",
            ));
        }
        let config = ServerConfig {
            env: env.to_string(),
            options: options.unwrap_or_default(),
            host: host.to_string(),
            port,
            max_sessions,
            max_body_bytes,
            max_action_bytes: max_action_bytes.unwrap_or(crate::pool::DEFAULT_MAX_ACTION_BYTES),
            idle_timeout: idle_timeout.map(|t| seconds("idle_timeout", t)).transpose()?,
            token,
            workers,
            env_threads,
            blocking_threads,
            step_latency: seconds("step_latency", step_latency)?,
            header_read_timeout: seconds("header_read_timeout", header_read_timeout)?,
            keep_alive_timeout: seconds("keep_alive_timeout", keep_alive_timeout)?,
            body_read_timeout: seconds("body_read_timeout", body_read_timeout)?,
            max_connections,
            allowed_hosts: allowed_hosts.unwrap_or_default(),
            max_custom_bytes,
        };
        let inner = py.detach(|| Server::start(config)).map_err(server_to_py)?;
        Ok(Self { inner })
    }

    #[getter]
    fn host(&self) -> String {
        self.inner.addr().ip().to_string()
    }

    #[getter]
    fn port(&self) -> u16 {
        self.inner.addr().port()
    }

    /// The cap on open connections in force (lower than asked under a small `ulimit -n`).
    #[getter]
    fn max_connections(&self) -> usize {
        self.inner.max_connections()
    }

    /// Waits up to `timeout` seconds (None: forever) for the server to stop; True once stopped.
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        let timeout = timeout.map(|t| seconds("timeout", t)).transpose()?;
        match py.detach(|| self.inner.wait(timeout)) {
            None => Ok(false),
            Some(Ok(())) => Ok(true),
            Some(Err(e)) => Err(PyRuntimeError::new_err(format!("the server stopped: {e}"))),
        }
    }

    /// Stops accepting, lets requests in flight finish, shuts the threads down.
    fn stop(&self, py: Python<'_>) {
        py.detach(|| self.inner.stop());
    }

    /// Sessions open now.
    fn sessions(&self) -> usize {
        self.inner.state().pool.len()
    }
}

/// Sessions on AgentGym-compatible HTTP servers; use `agentgym.envs.EnvPool.remote`, which wraps it.
#[pyclass(name = "RemotePool", module = "agentgym._envserver", frozen)]
struct PyRemotePool {
    inner: RemotePool,
}

pool_pymethods! { PyRemotePool, remote_to_py, step,
    #[new]
    #[pyo3(signature = (urls, env, *, dialect="id", batch=None, max_in_flight=64, connect_timeout=5.0, timeout=60.0,
        token=None, max_action_bytes=None, num_tasks=None, task_field=None, score_field=None, max_reply_bytes=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        urls: Vec<String>,
        env: &str,
        dialect: &str,
        batch: Option<bool>,
        max_in_flight: usize,
        connect_timeout: f64,
        timeout: f64,
        token: Option<String>,
        max_action_bytes: Option<usize>,
        num_tasks: Option<u64>,
        task_field: Option<String>,
        score_field: Option<String>,
        max_reply_bytes: Option<usize>,
    ) -> PyResult<Self> {
        let mut config = RemoteConfig::new(urls, env);
        config.dialect = WireDialect::parse(dialect).map_err(PyValueError::new_err)?;
        config.batch = batch;
        config.client.max_in_flight = max_in_flight;
        config.client.connect_timeout = seconds("connect_timeout", connect_timeout)?;
        config.client.timeout = seconds("timeout", timeout)?;
        config.client.token = token;
        config.client.max_reply_bytes = max_reply_bytes.unwrap_or(config.client.max_reply_bytes);
        config.max_action_bytes = max_action_bytes.unwrap_or(config.max_action_bytes);
        config.num_tasks = num_tasks;
        config.task_field = task_field;
        config.score_field = score_field;
        let inner = py.detach(|| RemotePool::new(config)).map_err(remote_to_py)?;
        Ok(Self { inner })
    }

    #[getter]
    fn num_tasks(&self, py: Python<'_>) -> PyResult<u64> {
        py.detach(|| self.inner.num_tasks()).map_err(remote_to_py)
    }

    /// The HTTP client runs on one thread per process (all requests of a batch overlap on it).
    #[getter]
    fn num_threads(&self) -> usize {
        1
    }

    #[getter]
    fn urls(&self) -> Vec<String> {
        self.inner.urls().to_vec()
    }

    fn observations(&self, ids: Vec<u64>) -> PyResult<Vec<String>> {
        self.inner.observations(&ids).map_err(remote_to_py)
    }

    /// Remote servers do not list actions: None for each session.
    fn available_actions(&self, ids: Vec<u64>) -> PyResult<Vec<Option<Vec<String>>>> {
        Ok(vec![None; self.inner.observations(&ids).map_err(remote_to_py)?.len()])
    }

    fn info(&self, ids: Vec<u64>) -> PyResult<Vec<String>> {
        Ok(self.inner.info(&ids).map_err(remote_to_py)?.iter().map(|v| v.to_string()).collect())
    }

    /// Counters: steps, resets, step_errors, env_panics (always 0), transport_errors, close_errors,
    /// lost_sessions.
    fn stats(&self) -> BTreeMap<&'static str, u64> {
        BTreeMap::from(self.inner.stats.counters())
    }
}

// ---- search env: building and querying an index (issue 15) ----

use std::path::PathBuf;
use std::sync::Arc;

use crate::envs::search::index::{build_index, BuildOptions, IndexError, SearchIndex};

fn index_to_py(err: IndexError) -> PyErr {
    let msg = err.to_string();
    match err {
        IndexError::Io { .. } => PyOSError::new_err(msg),
        IndexError::Incompatible(_) => PyValueError::new_err(msg),
        IndexError::Tantivy(_) | IndexError::Cancelled(_) => PyRuntimeError::new_err(msg),
    }
}

/// Builds a search index of `corpus` into `index_dir`; returns (passages, skipped,
/// first_skipped [(line, why)], seconds, index_bytes). `progress(bytes_read, bytes_total,
/// passages, skipped)` is called every few thousand lines; an exception in it (or Ctrl-C)
/// cancels the build.
#[pyfunction]
#[pyo3(signature = (corpus, index_dir, *, threads=None, memory_mb=None, progress=None))]
#[allow(clippy::type_complexity)]
fn build_search_index(
    py: Python<'_>,
    corpus: PathBuf,
    index_dir: PathBuf,
    threads: Option<usize>,
    memory_mb: Option<usize>,
    progress: Option<Py<PyAny>>,
) -> PyResult<(u64, u64, Vec<(u64, String)>, f64, u64)> {
    let mut options = BuildOptions::default();
    options.threads = threads.unwrap_or(options.threads);
    options.memory_bytes = memory_mb.map_or(options.memory_bytes, |mb| mb << 20);
    let mut raised: Option<PyErr> = None;
    let result = py.detach(|| {
        build_index(&corpus, &index_dir, &options, &mut |p| {
            Python::attach(|py| {
                let called = match &progress {
                    Some(f) => f.call1(py, (p.bytes_read, p.bytes_total, p.passages, p.skipped)).map(drop),
                    None => Ok(()),
                };
                match called.and_then(|()| py.check_signals()) {
                    Ok(()) => true,
                    Err(e) => {
                        raised = Some(e);
                        false
                    }
                }
            })
        })
    });
    if let Some(e) = raised {
        return Err(e);
    }
    let r = result.map_err(index_to_py)?;
    Ok((r.passages, r.skipped, r.first_skipped, r.seconds, r.index_bytes))
}

/// An opened search index (shared with every search pool of this process over the same
/// directory), for direct batched queries: benchmarks and ranking checks.
#[pyclass(name = "SearchIndex", module = "agentgym._envserver", frozen)]
struct PySearchIndex {
    inner: Arc<SearchIndex>,
}

#[pymethods]
impl PySearchIndex {
    #[new]
    fn new(py: Python<'_>, index_dir: PathBuf) -> PyResult<Self> {
        let inner = py.detach(|| crate::envs::search::open_shared(&index_dir)).map_err(|e| to_py(e.into()))?;
        Ok(Self { inner })
    }

    #[getter]
    fn num_passages(&self) -> u64 {
        self.inner.num_passages()
    }

    /// The distinct tokens of `query`, sorted: what is searched for.
    fn query_terms(&self, query: &str) -> Vec<String> {
        self.inner.query_terms(query)
    }

    /// The top-`k` (id, score) of each query, spread over `threads` threads (default: one per core).
    #[pyo3(signature = (queries, k, threads=None))]
    fn search(
        &self,
        py: Python<'_>,
        queries: Vec<String>,
        k: usize,
        threads: Option<usize>,
    ) -> PyResult<Vec<Vec<(String, f32)>>> {
        let threads = threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let results = py.detach(|| self.inner.search_batch(&queries, k, threads));
        results
            .into_iter()
            .map(|r| r.map(|hits| hits.into_iter().map(|h| (h.id, h.score)).collect()).map_err(index_to_py))
            .collect()
    }
}
