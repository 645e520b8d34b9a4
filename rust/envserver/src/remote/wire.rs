//! The request bodies and reply shapes of AgentGym-style servers, per dialect, and of the batch
//! routes of `agentgym-envserver`. Every parse failure is a [`CallError::Garbage`] naming what
//! was expected.

use serde_json::{json, Map, Value};

use crate::client::{CallError, Reply, ServerClient};

/// A new session's remote id and the server instance that made it (None: a server that does
/// not name its instances).
pub type Created = (u64, Option<String>);

/// How a server names sessions on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireDialect {
    /// `{"id": N}` (TextCraft, BabyAI, SciWorld): `/create` answers an object with `id`,
    /// `/reset {id, data_idx}` and `/step {id, action}` answer objects with `observation`.
    Id,
    /// `{"env_idx": N}` (SearchQA, WebShop): `/create` answers a bare integer, `/reset
    /// {env_idx, id}` answers the observation string (WebShop: `[observation, null]`),
    /// `/step {env_idx, action}` answers `{observation | state, reward, done}`.
    EnvIdx,
    /// AgentGym's WebArena server: `/create` answers `{"env_idx": N}`, `/reset {env_idx, seed,
    /// idx}` answers `{observation}` (the task's config file `idx`), `/step {env_idx, action}`
    /// answers `{observation, reward, terminated, truncated, info}` (terminated meaning done),
    /// `/close {env_idx}` answers the text `closed`.
    WebArena,
}

impl WireDialect {
    pub fn parse(name: &str) -> Result<Self, String> {
        match name {
            "id" => Ok(WireDialect::Id),
            "env_idx" => Ok(WireDialect::EnvIdx),
            "webarena" => Ok(WireDialect::WebArena),
            other => Err(format!("unknown wire dialect {other:?}: expected \"id\", \"env_idx\" or \"webarena\"")),
        }
    }

    /// `{<id key>: remote_id, field: value}`.
    fn body(self, remote_id: u64, field: &str, value: Value) -> Value {
        let mut body = json!({ field: value });
        body[self.key()] = remote_id.into();
        body
    }

    fn key(self) -> &'static str {
        match self {
            WireDialect::Id => "id",
            WireDialect::EnvIdx | WireDialect::WebArena => "env_idx",
        }
    }
}

/// What a reset reply carries: the observation and any other fields (task name, score...).
#[derive(Debug, Clone)]
pub struct ResetReply {
    pub observation: String,
    pub extra: Map<String, Value>,
}

/// One step's reply.
#[derive(Debug, Clone, PartialEq)]
pub struct StepReply {
    pub observation: String,
    pub reward: f32,
    pub done: bool,
    /// The env ended the episode at its own limit (an optional `truncated` flag in the reply;
    /// `agentgym-sciworld-server` sends it at ScienceWorld's move limit, with `done` true).
    pub truncated: bool,
    /// The reply's cumulative score, when the pool reads one (`RemoteConfig::score_field`).
    pub score: Option<f64>,
}

pub async fn create(c: &ServerClient, d: WireDialect) -> Result<Created, CallError> {
    // SearchQA's /create requires a body `{"id": item}`; WebShop's ignores it.
    let body = if d == WireDialect::EnvIdx { json!({"id": 0}) } else { json!({}) };
    let Reply { value: reply, instance } = c.post_to("/create", &body, None).await?;
    let id = match d {
        WireDialect::Id => {
            uint(&reply["id"]).ok_or_else(|| garbage("/create", "an object with an integer `id`", &reply))
        }
        WireDialect::EnvIdx => uint(&reply).ok_or_else(|| garbage("/create", "an integer", &reply)),
        WireDialect::WebArena => {
            uint(&reply["env_idx"]).ok_or_else(|| garbage("/create", "an object with an integer `env_idx`", &reply))
        }
    }?;
    Ok((id, instance))
}

pub async fn reset(
    c: &ServerClient,
    d: WireDialect,
    remote_id: u64,
    task_id: u64,
    instance: Option<&str>,
) -> Result<ResetReply, CallError> {
    let post = |path: &'static str, body: Value| async move { c.post_to(path, &body, instance).await.map(|r| r.value) };
    match d {
        WireDialect::Id => {
            let reply = post("/reset", json!({"id": remote_id, "data_idx": task_id})).await?;
            let mut extra = match reply {
                Value::Object(m) => m,
                other => return Err(garbage("/reset", "an object with `observation`", &other)),
            };
            match extra.remove("observation") {
                Some(Value::String(observation)) => Ok(ResetReply { observation, extra }),
                _ => Err(garbage("/reset", "an object with a string `observation`", &Value::Object(extra))),
            }
        }
        WireDialect::EnvIdx => {
            let body = json!({"env_idx": remote_id, "id": task_id, "session_id": task_id});
            let reply = post("/reset", body).await?;
            let observation = match &reply {
                Value::String(s) => Some(s.clone()),
                Value::Array(items) => items.first().and_then(Value::as_str).map(str::to_string),
                _ => None,
            };
            observation
                .map(|observation| ResetReply { observation, extra: Map::new() })
                .ok_or_else(|| garbage("/reset", "a string (or [string, null])", &reply))
        }
        WireDialect::WebArena => {
            let reply = post("/reset", json!({"env_idx": remote_id, "seed": 0, "idx": task_id})).await?;
            match reply.get("observation").and_then(Value::as_str) {
                Some(observation) => Ok(ResetReply { observation: observation.to_string(), extra: Map::new() }),
                None => Err(garbage("/reset", "an object with a string `observation`", &reply)),
            }
        }
    }
}

pub async fn step(
    c: &ServerClient,
    d: WireDialect,
    remote_id: u64,
    action: &str,
    score_field: Option<&str>,
    instance: Option<&str>,
) -> Result<StepReply, CallError> {
    let reply = c.post_to("/step", &d.body(remote_id, "action", action.into()), instance).await?.value;
    let Some(mut parsed) = parse_step(&reply) else {
        return Err(garbage("/step", "an object with `observation`, `reward`, `done`", &reply));
    };
    if let Some(field) = score_field {
        parsed.score = Some(
            reply
                .get(field)
                .and_then(Value::as_f64)
                .ok_or_else(|| garbage("/step", &format!("an object with a numeric `{field}`"), &reply))?,
        );
    }
    Ok(parsed)
}

pub async fn close(c: &ServerClient, d: WireDialect, remote_id: u64, instance: Option<&str>) -> Result<(), CallError> {
    let mut body = json!({});
    body[d.key()] = remote_id.into();
    match c.post_to("/close", &body, instance).await {
        // WebArena's server answers a successful close with the plain text `closed`
        Err(CallError::Garbage(_)) if d == WireDialect::WebArena => Ok(()),
        other => other.map(|_| ()),
    }
}

// --- agentgym-envserver batch routes ---------------------------------------------------------

/// `n` new sessions' remote ids (all different) and the instance that made them.
pub async fn batch_create(c: &ServerClient, n: usize) -> Result<(Vec<u64>, Option<String>), CallError> {
    let Reply { value: reply, instance } = c.post_to("/batch/create", &json!({"n": n}), None).await?;
    let ids: Option<Vec<u64>> = reply["ids"].as_array().and_then(|a| a.iter().map(uint).collect());
    match ids {
        Some(ids) if ids.len() == n && all_different(&ids) => Ok((ids, instance)),
        _ => Err(garbage("/batch/create", &format!("{{\"ids\": [{n} different integers]}}"), &reply)),
    }
}

fn all_different(ids: &[u64]) -> bool {
    let mut seen = std::collections::HashSet::with_capacity(ids.len());
    ids.iter().all(|id| seen.insert(*id))
}

pub async fn batch_reset(
    c: &ServerClient,
    ids: &[u64],
    tasks: &[u64],
    instance: Option<&str>,
) -> Result<Vec<Result<String, String>>, CallError> {
    let reply = c.post_to("/batch/reset", &json!({"ids": ids, "data_idxs": tasks}), instance).await?;
    parse_batch_reset(reply.value, ids.len())
}

/// A `/batch/reset` reply of `n` slots: each an observation or an error. The observations are
/// moved out of the parsed reply, not copied.
fn parse_batch_reset(mut reply: Value, n: usize) -> Result<Vec<Result<String, String>>, CallError> {
    if column(&reply, "observations", n).is_none() || column(&reply, "errors", n).is_none() {
        let expected = "{\"observations\": [...], \"errors\": [...]} of the batch's length";
        return Err(garbage("/batch/reset", expected, &reply));
    }
    let (obs, errors) = (take_column(&mut reply, "observations"), take_column(&mut reply, "errors"));
    Ok(obs
        .into_iter()
        .zip(errors)
        .map(|(o, e)| match (o, e) {
            (_, Value::String(e)) => Err(e),
            (Value::String(o), _) => Ok(o),
            _ => Err("reply slot has neither an observation nor an error".to_string()),
        })
        .collect())
}

pub async fn batch_step(
    c: &ServerClient,
    ids: &[u64],
    actions: &[&str],
    instance: Option<&str>,
) -> Result<Vec<Result<StepReply, String>>, CallError> {
    let reply = c.post_to("/batch/step", &json!({"ids": ids, "actions": actions}), instance).await?;
    parse_batch_step(reply.value, ids.len())
}

/// A `/batch/step` reply of `n` slots (columns `observations`, `rewards`, `dones`, `errors`,
/// and `truncated` where the server sends it). The observations are moved out of the parsed
/// reply, not copied.
fn parse_batch_step(mut reply: Value, n: usize) -> Result<Vec<Result<StepReply, String>>, CallError> {
    let expected = "{observations, rewards, dones, errors} of the batch's length";
    if ["observations", "rewards", "dones", "errors"].iter().any(|k| column(&reply, k, n).is_none()) {
        return Err(garbage("/batch/step", expected, &reply));
    }
    let obs = take_column(&mut reply, "observations");
    let cols = ["rewards", "dones", "errors"].map(|k| column(&reply, k, n));
    let [Some(rewards), Some(dones), Some(errors)] = cols else {
        return Err(garbage("/batch/step", expected, &reply));
    };
    let truncated = column(&reply, "truncated", n);
    let mut out = Vec::with_capacity(n);
    for (i, o) in obs.into_iter().enumerate() {
        let t = truncated.map_or(Some(false), |t| flag(&t[i]));
        out.push(match (errors[i].as_str(), o, rewards[i].as_f64(), flag(&dones[i]), t) {
            (Some(e), ..) => Err(e.to_string()),
            (None, Value::String(o), Some(r), Some(d), Some(t)) => {
                Ok(StepReply { observation: o, reward: r as f32, done: d, truncated: t, score: None })
            }
            _ => Err(format!("reply slot {i} of /batch/step is malformed")),
        });
    }
    Ok(out)
}

pub async fn batch_close(c: &ServerClient, ids: &[u64], instance: Option<&str>) -> Result<(), CallError> {
    c.post_to("/batch/close", &json!({"ids": ids}), instance).await.map(|_| ())
}

/// `GET /health` of an agentgym-envserver; `None` for other servers (no such route).
pub async fn health(c: &ServerClient) -> Result<Option<Map<String, Value>>, CallError> {
    match c.get("/health").await {
        Ok(Value::Object(m)) if m.get("server").and_then(Value::as_str).is_some_and(|s| s.starts_with("agentgym")) => {
            Ok(Some(m))
        }
        Ok(_) => Ok(None),
        Err(CallError::Status { .. } | CallError::Garbage(_) | CallError::Server(_) | CallError::Gone(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

fn parse_step(reply: &Value) -> Option<StepReply> {
    let observation = reply.get("observation").or_else(|| reply.get("state"))?.as_str()?.to_string();
    let reward = reply.get("reward")?.as_f64()? as f32;
    // WebArena's server says `terminated` (gymnasium's name) where the others say `done`
    let done = flag(reply.get("done").or_else(|| reply.get("terminated"))?)?;
    let truncated = match reply.get("truncated") {
        None | Some(Value::Null) => false,
        Some(v) => flag(v)?,
    };
    Some(StepReply { observation, reward, done, truncated, score: None })
}

fn column<'a>(reply: &'a Value, key: &str, n: usize) -> Option<&'a Vec<Value>> {
    reply.get(key)?.as_array().filter(|a| a.len() == n)
}

/// Moves `reply[key]`'s array out of the reply (an empty one where it is not an array).
fn take_column(reply: &mut Value, key: &str) -> Vec<Value> {
    match reply.get_mut(key).map(Value::take) {
        Some(Value::Array(items)) => items,
        _ => Vec::new(),
    }
}

fn uint(v: &Value) -> Option<u64> {
    v.as_u64()
}

fn flag(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        Value::Number(n) => n.as_f64().map(|x| x != 0.0),
        _ => None,
    }
}

fn garbage(route: &str, expected: &str, got: &Value) -> CallError {
    let mut text = got.to_string();
    if text.len() > 200 {
        let cut = (0..=200).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
        text.truncate(cut);
        text.push_str("...");
    }
    CallError::Garbage(format!("{route} should answer {expected}, got {text}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_replies_of_both_dialects() {
        let textcraft = json!({"observation": "Got 1 coal", "reward": 0, "done": false});
        assert_eq!(
            parse_step(&textcraft),
            Some(StepReply {
                observation: "Got 1 coal".into(),
                reward: 0.0,
                done: false,
                truncated: false,
                score: None
            })
        );
        let limit = json!({"observation": "x", "reward": 0, "done": true, "truncated": true});
        assert!(parse_step(&limit).unwrap().truncated);
        assert_eq!(parse_step(&json!({"observation": "x", "reward": 0, "done": true, "truncated": "?"})), None);
        let webshop = json!({"state": "page", "reward": 0.5, "done": true, "info": null});
        assert_eq!(parse_step(&webshop).unwrap().reward, 0.5);
        assert_eq!(parse_step(&json!({"observation": 3, "reward": 0, "done": false})), None);
        assert_eq!(parse_step(&json!("ok")), None);
        let webarena = json!({"observation": "p", "reward": 1.0, "terminated": true, "truncated": false, "info": {}});
        let parsed = parse_step(&webarena).unwrap();
        assert!(parsed.done && !parsed.truncated && parsed.reward == 1.0);
        assert_eq!(parse_step(&json!({"observation": "p", "reward": 0})), None);
    }

    #[test]
    fn batch_step_replies_slot_by_slot() {
        let reply = json!({
            "observations": ["a", "", "c", 7],
            "rewards": [0.5, 0, 1, 0],
            "dones": [false, false, 1, false],
            "truncated": [false, false, false, false],
            "errors": [null, "the episode is over", null, null],
        });
        let slots = parse_batch_step(reply, 4).unwrap();
        let first = slots[0].as_ref().unwrap();
        assert_eq!((first.observation.as_str(), first.reward, first.done, first.truncated), ("a", 0.5, false, false));
        assert_eq!(slots[1], Err("the episode is over".to_string()));
        assert!(slots[2].as_ref().unwrap().done);
        assert_eq!(slots[3], Err("reply slot 3 of /batch/step is malformed".to_string()));
        // `truncated` is optional; a short column or a missing one fails the whole reply.
        let no_truncated = json!({"observations": ["x"], "rewards": [0], "dones": [false], "errors": [null]});
        assert!(!parse_batch_step(no_truncated, 1).unwrap()[0].as_ref().unwrap().truncated);
        let short = json!({"observations": ["x"], "rewards": [], "dones": [false], "errors": [null]});
        let Err(CallError::Garbage(why)) = parse_batch_step(short, 1) else { panic!("a short column passed") };
        assert!(why.contains("/batch/step should answer") && why.contains("\"rewards\":[]"), "{why}");
        assert!(matches!(parse_batch_step(json!("ok"), 1), Err(CallError::Garbage(_))));
    }

    #[test]
    fn batch_reset_replies_slot_by_slot() {
        let reply = json!({"observations": ["first", "", 3], "errors": [null, "no such task", null]});
        assert_eq!(
            parse_batch_reset(reply, 3).unwrap(),
            vec![
                Ok("first".to_string()),
                Err("no such task".to_string()),
                Err("reply slot has neither an observation nor an error".to_string())
            ]
        );
        let short = json!({"observations": ["x"], "errors": [null]});
        assert!(matches!(parse_batch_reset(short, 2), Err(CallError::Garbage(_))));
    }

    #[test]
    fn dialect_names() {
        assert_eq!(WireDialect::parse("webarena"), Ok(WireDialect::WebArena));
        assert!(WireDialect::parse("web").unwrap_err().contains("\"webarena\""));
        assert_eq!(WireDialect::WebArena.key(), "env_idx");
    }
}
