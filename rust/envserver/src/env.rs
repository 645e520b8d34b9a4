//! The environment contract: what every native env implements, and the errors they share.

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Env construction options (`EnvPool(env, **options)` in Python), as strings.
/// Each env documents the keys it reads; unknown keys are rejected by the env's factory.
pub type Options = BTreeMap<String, String>;

/// What one step returns. Invalid actions are part of the game: they produce an
/// observation explaining what was wrong, never an `Err`.
#[derive(Debug, Clone, PartialEq)]
pub struct StepOutcome {
    pub observation: String,
    pub reward: f32,
    pub done: bool,
}

/// Errors raised while building envs or starting episodes. Messages are shown to users
/// verbatim, so they name the offending value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EnvError {
    #[error("unknown env {name:?}; known envs: {known}")]
    UnknownEnv { name: String, known: String },
    #[error("task id {task_id} is out of range: env {env:?} has task ids 0..{num_tasks}")]
    TaskOutOfRange { env: String, task_id: u64, num_tasks: u64 },
    #[error("invalid option {key:?}: {message}")]
    InvalidOption { key: String, message: String },
    #[error("{0}")]
    Data(String),
    /// A request the env cannot serve (e.g. a custom task where it has none, or an invalid one).
    #[error("{0}")]
    Unsupported(String),
}

/// An episode a client describes instead of choosing a numbered task (TextCraft's
/// `POST /create {"goal", "commands"}` in AgentGym's wire format).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomTask {
    /// What the episode asks for (TextCraft: the item to craft, `minecraft:oak_planks` or `oak planks`).
    pub goal: String,
    /// The crafting commands to show (TextCraft); `None`: the env derives them from the goal.
    pub commands: Option<String>,
}

/// An expert's next move: an action from the env's own vocabulary (what `step` accepts now)
/// and a short reason in words, for demonstrations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpertMove {
    pub action: String,
    pub thought: String,
}

/// One text environment episode at a time. Implementations are plain single-threaded
/// state machines; the pool provides batching, threading, ids and horizon caps.
pub trait TextEnv: Send {
    /// Starts the episode `task_id` (already range-checked by the caller, or any id where the
    /// factory wraps task ids) and returns the first observation. The same task id must give the same episode on every machine.
    fn reset(&mut self, task_id: u64) -> Result<String, EnvError>;

    /// Applies one text action. Must not be called before `reset`; the pool guarantees it.
    fn step(&mut self, action: &str) -> StepOutcome;

    /// [`TextEnv::step`] within a batched step, reading what the factory fetched for the whole
    /// batch ([`EnvFactory::prepare_step`]; `None` when it fetched nothing). `Err(message)`: the
    /// step could not be taken for a reason outside the game (a remote service failed) and the
    /// session is as it was, so the same action can be sent again.
    fn step_prepared(&mut self, action: &str, _prepared: Option<&Prepared>) -> Result<StepOutcome, String> {
        Ok(self.step(action))
    }

    /// The current observation, as last returned by `reset` or `step`.
    fn observation(&self) -> String;

    /// The actions the env currently accepts, where the env has such a list.
    fn available_actions(&self) -> Option<Vec<String>> {
        None
    }

    /// One of [`TextEnv::available_actions`], the one at index `pick(n)` of the `n` listed;
    /// `None` where the env lists none. Envs with a menu override it to copy one action
    /// rather than the whole list (a random policy draws every step).
    fn sample_action(&self, pick: &mut dyn FnMut(usize) -> usize) -> Option<String> {
        let mut menu = self.available_actions().filter(|m| !m.is_empty())?;
        let k = pick(menu.len());
        Some(menu.swap_remove(k))
    }

    /// Env-specific facts about the current episode (level name, goal, ...), as JSON.
    fn info(&self) -> serde_json::Value {
        serde_json::Value::Null
    }

    /// The next move of an expert that reads the episode's true state. Envs without an
    /// expert refuse; an expert that cannot act here says why (`Unsupported`).
    fn expert(&self) -> Result<ExpertMove, EnvError> {
        Err(EnvError::Unsupported("this env has no expert".into()))
    }

    /// Starts an episode the client describes. An invalid description is an `Err` and leaves
    /// the session as it was. Envs without such episodes refuse.
    fn reset_custom(&mut self, _task: &CustomTask) -> Result<String, EnvError> {
        Err(EnvError::Unsupported("this env only plays its numbered tasks; reset with a task id".into()))
    }
}

/// Builds sessions of one env kind. Shared, read-only data (recipes, level tables)
/// lives in the factory and is shared by all sessions through `Arc`s.
pub trait EnvFactory: Send + Sync {
    /// The env's registry name (`"babyai"`, `"textcraft"`).
    fn name(&self) -> &str;
    /// The number of tasks random task ids are drawn from: ids `0..num_tasks()`.
    fn num_tasks(&self) -> u64;
    /// Whether a task id past `num_tasks()` is accepted instead of being out of range, as
    /// AgentGym's servers accept it: TextCraft takes it modulo `num_tasks()`, BabyAI's
    /// `worlds="agentgym"` plays level `id % 40` with seed `id / 40` like any other id.
    fn takes_ids_past_end(&self) -> bool {
        false
    }
    /// Whether one session's step is bounded CPU work of microseconds, with no I/O (no index
    /// pages to read, no page to render, no remote call). The HTTP server runs such a step of a
    /// single-session request on its async thread instead of handing it to a blocking thread:
    /// for BabyAI the hand-off cost more than the step (bench/RESULTS.md, "HTTP env server").
    fn steps_are_cheap(&self) -> bool {
        false
    }
    /// A fresh session, not yet reset.
    fn make(&self) -> Box<dyn TextEnv>;
    /// Work done once for a batched step before its sessions step, given the actions of the
    /// sessions that will step: e.g. one request to a remote service for all of them instead of
    /// one per session. `None` (the default): nothing to share.
    fn prepare_step(&self, _actions: &[&str]) -> Option<Box<Prepared>> {
        None
    }
}

pub type SharedFactory = Arc<dyn EnvFactory>;

/// What a factory fetched once for a whole batched step, read by each session's
/// [`TextEnv::step_prepared`] (which downcasts it to the factory's own type).
pub type Prepared = dyn Any + Send + Sync;

/// Rejects option keys an env does not read, naming them and the accepted ones.
pub fn check_option_keys(options: &Options, accepted: &[&str]) -> Result<(), EnvError> {
    match options.keys().find(|k| !accepted.contains(&k.as_str())) {
        None => Ok(()),
        Some(key) => Err(EnvError::InvalidOption {
            key: key.clone(),
            message: format!("not an option of this env (accepted: {})", accepted.join(", ")),
        }),
    }
}
