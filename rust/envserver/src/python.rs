//! PyO3 bindings: type conversion, GIL release around batched work, one error adapter.
//! No logic lives here; see `pool.rs` and `envs/`.

use std::collections::BTreeMap;

use numpy::{PyArray1, PyArrayMethods};
use pyo3::exceptions::{PyKeyError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::env::EnvError;
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

/// Step results as columns: observations, rewards, dones, truncated, errors.
type StepColumns<'py> = (
    Vec<String>,
    Bound<'py, PyArray1<f32>>,
    Bound<'py, PyArray1<bool>>,
    Bound<'py, PyArray1<bool>>,
    Vec<Option<String>>,
);

/// Native session multiplexer; use `agentgym.envs.EnvPool`, which wraps it.
#[pyclass(name = "EnvPool", module = "agentgym._envserver", frozen)]
struct PyEnvPool {
    inner: EnvPool,
}

#[pymethods]
impl PyEnvPool {
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

    fn create(&self, py: Python<'_>, n: usize) -> PyResult<Vec<u64>> {
        py.detach(|| self.inner.create(n)).map_err(to_py)
    }

    /// Returns (observations, errors); a failed slot has observation None and an error message.
    fn reset(
        &self,
        py: Python<'_>,
        ids: Vec<u64>,
        task_ids: Vec<i64>,
    ) -> PyResult<(Vec<Option<String>>, Vec<Option<String>>)> {
        let out = py.detach(|| self.inner.reset(&ids, &task_ids)).map_err(to_py)?;
        Ok(out
            .into_iter()
            .map(|r| match r {
                Ok(obs) => (Some(obs), None),
                Err(e) => (None, Some(e)),
            })
            .unzip())
    }

    fn step<'py>(&self, py: Python<'py>, ids: Vec<u64>, actions: Vec<Bound<'py, PyAny>>) -> PyResult<StepColumns<'py>> {
        let actions = actions.iter().enumerate().map(|(i, a)| action_text(i, a)).collect::<PyResult<Vec<_>>>()?;
        let results = py.detach(|| self.inner.step_checked(&ids, &actions)).map_err(to_py)?;
        Ok(columns(py, results))
    }

    fn close(&self, py: Python<'_>, ids: Vec<u64>) -> PyResult<usize> {
        py.detach(|| self.inner.close(&ids)).map_err(to_py)
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
    fn num_tasks(&self) -> u64 {
        self.inner.num_tasks()
    }

    #[getter]
    fn env(&self) -> String {
        self.inner.env_name().to_string()
    }

    #[getter]
    fn num_threads(&self) -> usize {
        self.inner.num_threads()
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    fn ids(&self) -> Vec<u64> {
        self.inner.ids()
    }

    fn observations(&self, py: Python<'_>, ids: Vec<u64>) -> PyResult<Vec<String>> {
        py.detach(|| self.inner.observations(&ids)).map_err(to_py)
    }

    fn available_actions(&self, py: Python<'_>, ids: Vec<u64>) -> PyResult<Vec<Option<Vec<String>>>> {
        py.detach(|| self.inner.available_actions(&ids)).map_err(to_py)
    }

    /// Per-session info as JSON strings (the facade decodes them).
    fn info(&self, py: Python<'_>, ids: Vec<u64>) -> PyResult<Vec<String>> {
        let values = py.detach(|| self.inner.info(&ids)).map_err(to_py)?;
        Ok(values.iter().map(|v| v.to_string()).collect())
    }

    /// Counters since the pool was built: steps, resets, step_errors, env_panics.
    fn stats(&self) -> BTreeMap<&'static str, u64> {
        use std::sync::atomic::Ordering::Relaxed;
        let s = &self.inner.stats;
        BTreeMap::from([
            ("steps", s.steps.load(Relaxed)),
            ("resets", s.resets.load(Relaxed)),
            ("step_errors", s.step_errors.load(Relaxed)),
            ("env_panics", s.env_panics.load(Relaxed)),
        ])
    }
}

/// A Python `str` action as text; text that cannot be UTF-8 (lone surrogates) is a
/// per-session error, anything but a `str` a `TypeError` for the whole batch.
fn action_text(index: usize, action: &Bound<'_, PyAny>) -> PyResult<Result<String, String>> {
    if !action.is_instance_of::<PyString>() {
        let kind = action.get_type().name()?;
        return Err(PyTypeError::new_err(format!("actions[{index}] must be str, not {kind}")));
    }
    Ok(action.extract::<String>().map_err(|_| "action is not valid UTF-8 text (lone surrogates)".to_string()))
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
    (obs, PyArray1::from_vec(py, rewards), PyArray1::from_vec(py, dones), PyArray1::from_vec(py, truncs), errors)
}

#[pymodule]
#[pyo3(name = "_envserver")]
fn envserver_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyEnvPool>()?;
    m.add("ENV_NAMES", crate::envs::ENV_NAMES.to_vec())?;
    m.add("MAX_ACTION_BYTES", crate::pool::DEFAULT_MAX_ACTION_BYTES)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
