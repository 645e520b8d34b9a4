//! Per-env reply shapes of AgentGym's servers (`agentenv-textcraft`, `agentenv-babyai`), so that
//! AgentGym's own clients read our replies unchanged. Requests are the same for every env
//! (`{"id"}`, `{"id", "data_idx"}`, `{"id", "action"}`); only what comes back differs.

use serde_json::{json, Value};

use super::error::ApiError;
use super::sessions::Meta;
use crate::env::CustomTask;

/// Which AgentGym server the replies imitate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// `agentenv-textcraft`: `/create` starts an episode and returns its observation;
    /// `/observation` is a bare string.
    TextCraft,
    /// `agentenv-babyai`: `/create` returns only `{"id"}`; replies carry `score` (the running sum
    /// of `reward` since the reset); `/observation` is an object whose text starts with the goal.
    BabyAi,
}

impl Dialect {
    /// The dialect of a native env, by its registry name.
    pub fn for_env(env: &str) -> Self {
        match env {
            "babyai" => Dialect::BabyAi,
            _ => Dialect::TextCraft,
        }
    }

    /// What `GET /` answers.
    pub fn hello(self) -> &'static str {
        match self {
            Dialect::TextCraft => "This is environment TextCraft.",
            Dialect::BabyAi => "This is environment BabyAI.",
        }
    }

    /// Whether `/create` also resets the new session (TextCraft starts task `id - 1`, as
    /// AgentGym's server starts task `id` with ids counted from 0).
    pub fn create_resets(self) -> bool {
        self == Dialect::TextCraft
    }

    /// `/reset` without `data_idx`: TextCraft's server defaults it to 0, BabyAI's requires it.
    pub fn default_data_idx(self) -> Result<i64, ApiError> {
        match self {
            Dialect::TextCraft => Ok(0),
            Dialect::BabyAi => Err(ApiError::unprocessable("wrong fields in request body: missing field `data_idx`")),
        }
    }

    /// TextCraft's `/create` may name a `goal` (and the `commands` to show): the new session
    /// then plays that episode instead of a numbered task. AgentGym's server accepts the fields
    /// but its reset discards them; here they take effect or are refused, never ignored.
    /// BabyAI's `/create` takes no fields.
    pub fn custom_task(self, commands: Option<String>, goal: Option<String>) -> Result<Option<CustomTask>, ApiError> {
        match (self, goal, commands) {
            (_, None, None) => Ok(None),
            (Dialect::BabyAi, ..) => {
                Err(ApiError::unprocessable("`commands` and `goal` are TextCraft fields; BabyAI's /create takes none"))
            }
            (Dialect::TextCraft, None, Some(_)) => {
                Err(ApiError::unprocessable("`commands` needs a `goal`: the item the episode asks to craft"))
            }
            (Dialect::TextCraft, Some(goal), commands) => {
                check_custom_size(&goal, commands.as_deref())?;
                Ok(Some(CustomTask { goal, commands }))
            }
        }
    }

    pub fn create_reply(self, id: u64, observation: Option<String>) -> Value {
        match self {
            Dialect::TextCraft => {
                json!({"id": id, "observation": observation.unwrap_or_default(), "done": false, "reward": 0})
            }
            Dialect::BabyAi => json!({"id": id}),
        }
    }

    pub fn reset_reply(self, id: u64, observation: String) -> Value {
        match self {
            Dialect::TextCraft => json!({"id": id, "observation": observation, "done": false, "reward": 0}),
            Dialect::BabyAi => {
                json!({"observation": observation, "reward": 0, "score": 0, "deleted": false, "done": false})
            }
        }
    }

    pub fn step_reply(self, observation: String, reward: f32, done: bool, meta: &Meta) -> Value {
        match self {
            Dialect::TextCraft => json!({"observation": observation, "reward": reward_json(reward), "done": done}),
            Dialect::BabyAi => json!({
                "observation": observation,
                "reward": reward_json(reward),
                "score": score_json(meta.score),
                "done": done,
            }),
        }
    }

    /// `GET /observation`. `goal` is the episode's goal line (BabyAI), `None` before a reset.
    pub fn observation_reply(self, observation: String, goal: Option<&str>, meta: &Meta) -> Value {
        match self {
            Dialect::TextCraft => Value::String(observation),
            Dialect::BabyAi => {
                let Some(goal) = goal else {
                    return json!({"observation": "Environment not initialized", "reward": 0, "score": 0, "done": false, "deleted": false});
                };
                let prefix = format!("Your goal: {goal}\n");
                let text = if observation.starts_with(&prefix) { observation } else { prefix + &observation };
                json!({
                    "observation": text,
                    "reward": reward_json(meta.last_reward),
                    "score": score_json(meta.score),
                    "done": meta.done,
                    "deleted": false,
                })
            }
        }
    }
}

/// Size limits of a custom TextCraft episode: a session keeps its commands for its lifetime, so
/// without them a client could hold body size x max sessions of memory.
pub const MAX_GOAL_BYTES: usize = 256;
pub const MAX_COMMAND_LINES: usize = 256;
pub const MAX_COMMAND_LINE_BYTES: usize = 512;

fn check_custom_size(goal: &str, commands: Option<&str>) -> Result<(), ApiError> {
    if goal.len() > MAX_GOAL_BYTES {
        return Err(ApiError::unprocessable(format!(
            "`goal` is {} bytes, over the limit of {MAX_GOAL_BYTES}",
            goal.len()
        )));
    }
    let Some(commands) = commands else { return Ok(()) };
    let lines = commands.lines().count();
    if lines > MAX_COMMAND_LINES {
        return Err(ApiError::unprocessable(format!(
            "`commands` has {lines} lines, over the limit of {MAX_COMMAND_LINES}"
        )));
    }
    if let Some((k, line)) = commands.lines().enumerate().find(|(_, l)| l.len() > MAX_COMMAND_LINE_BYTES) {
        return Err(ApiError::unprocessable(format!(
            "`commands` line {} is {} bytes, over the limit of {MAX_COMMAND_LINE_BYTES} per line",
            k + 1,
            line.len()
        )));
    }
    Ok(())
}

/// An `f32` reward as the JSON number a reader expects (`0.82`, not `0.8199999928474426`).
pub fn reward_json(reward: f32) -> Value {
    score_json(decimal(reward))
}

/// The decimal value an `f32` reward stands for: its shortest round-trip text read as `f64`
/// (`0.94375f32` is 0.94375, where `f64::from` gives 0.9437500238418579). Scores add these, so
/// a score equals the sum of the rewards as the wire shows them.
pub fn decimal(reward: f32) -> f64 {
    reward.to_string().parse::<f64>().unwrap_or(0.0)
}

fn score_json(score: f64) -> Value {
    let rounded = (score * 1e9).round() / 1e9;
    serde_json::Number::from_f64(rounded).map_or(Value::Null, Value::Number)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewards_and_scores_are_the_decimals_the_env_computed() {
        assert_eq!(decimal(0.94375), 0.94375);
        assert_eq!(reward_json(0.94375), json!(0.94375));
        assert_eq!(score_json(decimal(0.1) + decimal(0.2)), json!(0.3));
    }

    #[test]
    fn rewards_print_short() {
        assert_eq!(reward_json(0.82).to_string(), "0.82");
        assert_eq!(reward_json(1.0).to_string(), "1.0");
        assert_eq!(reward_json(f32::NAN), Value::Null);
    }

    #[test]
    fn babyai_observation_has_the_goal_line_once() {
        let meta = Meta::new();
        let reply = Dialect::BabyAi.observation_reply("You see a wall.".into(), Some("go to the red ball"), &meta);
        assert_eq!(reply["observation"], "Your goal: go to the red ball\nYou see a wall.");
        let again = Dialect::BabyAi.observation_reply(
            "Your goal: go to the red ball\nx".into(),
            Some("go to the red ball"),
            &meta,
        );
        assert_eq!(again["observation"], "Your goal: go to the red ball\nx");
        let fresh = Dialect::BabyAi.observation_reply(String::new(), None, &meta);
        assert_eq!(fresh["observation"], "Environment not initialized");
    }
}
