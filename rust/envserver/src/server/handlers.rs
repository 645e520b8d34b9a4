//! The HTTP endpoints: AgentGym's single-session routes, the batch routes, health and metrics.
//! Each handler parses its request on the async thread and runs the env work on a blocking
//! thread ([`blocking`]), so slow envs never stall the event loop. One exception: a
//! single-session `/step` or `/observation` of an env whose steps are microseconds of CPU
//! ([`crate::env::EnvFactory::steps_are_cheap`]: BabyAI, TextCraft) runs where it was parsed
//! ([`single_session`]); handing it to a blocking thread and back cost more than the step.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{json, Value};

use super::body::{query_id, read_json};
use super::error::{json_body_response, ok, ApiError, ApiResult};
use super::json::to_body;
use super::metrics::Metrics;
use super::sessions::AppState;
pub use crate::client::{INSTANCE_HEADER, REQUEST_HEADER};

type AppRef = State<Arc<AppState>>;

#[derive(Deserialize)]
struct CreateBody {
    #[serde(default)]
    commands: Option<String>,
    #[serde(default)]
    goal: Option<String>,
}

#[derive(Deserialize)]
struct ResetBody {
    id: u64,
    #[serde(default)]
    data_idx: Option<i64>,
}

#[derive(Deserialize)]
struct StepBody {
    id: u64,
    action: String,
}

#[derive(Deserialize)]
struct IdBody {
    id: u64,
}

#[derive(Deserialize)]
struct BatchCreateBody {
    n: usize,
}

#[derive(Deserialize)]
struct BatchResetBody {
    ids: Vec<u64>,
    data_idxs: Vec<i64>,
}

#[derive(Deserialize)]
struct BatchStepBody {
    ids: Vec<u64>,
    actions: Vec<String>,
}

#[derive(Deserialize)]
struct BatchIdsBody {
    ids: Vec<u64>,
}

/// Runs `f` on tokio's blocking pool; a panic there becomes a 500, never a dead server.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T, ApiError> + Send + 'static) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| ApiError::internal(format!("request handler failed: {e}")))?
}

/// [`blocking`] for a JSON reply, serialized on the blocking thread too, so the observations
/// are freed by the thread that allocated them (a cross-thread free is the allocator's slow
/// path; see `ServerConfig::blocking_threads` for the change that measurably mattered).
async fn blocking_ok(f: impl FnOnce() -> Result<Value, ApiError> + Send + 'static) -> ApiResult {
    let body = blocking(move || f().map(|value| to_body(&value))).await?;
    Ok(json_body_response(StatusCode::OK, body))
}

/// Env work of one session: on the async thread when the env's steps are cheap, otherwise on a
/// blocking thread ([`blocking_ok`]). Either way a panic becomes a 500.
async fn single_session(cheap: bool, f: impl FnOnce() -> Result<Value, ApiError> + Send + 'static) -> ApiResult {
    if !cheap {
        return blocking_ok(f).await;
    }
    let body = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f().map(|value| to_body(&value))))
        .map_err(|_| ApiError::internal("request handler failed: it panicked"))??;
    Ok(json_body_response(StatusCode::OK, body))
}

async fn body<T: serde::de::DeserializeOwned>(state: &AppState, req: Request) -> Result<T, ApiError> {
    let (parts, body) = req.into_parts();
    read_json(&parts.headers, body, state.limits.max_body_bytes).await
}

pub async fn hello(State(s): AppRef) -> ApiResult {
    ok(Value::String(s.dialect.hello().to_string()))
}

pub async fn create(State(s): AppRef, req: Request) -> ApiResult {
    let b: CreateBody = body(&s, req).await?;
    let custom = s.dialect.custom_task(b.commands, b.goal)?;
    blocking_ok(move || s.create_one(custom)).await
}

pub async fn reset(State(s): AppRef, req: Request) -> ApiResult {
    let b: ResetBody = body(&s, req).await?;
    let data_idx = match b.data_idx {
        Some(t) => t,
        None => s.dialect.default_data_idx()?,
    };
    blocking_ok(move || s.reset_one(b.id, data_idx)).await
}

pub async fn step(State(s): AppRef, req: Request) -> ApiResult {
    let b: StepBody = body(&s, req).await?;
    simulated_latency(&s).await;
    single_session(s.pool.steps_are_cheap(), move || s.step_one(b.id, &b.action)).await
}

pub async fn observation(State(s): AppRef, req: Request) -> ApiResult {
    let id = query_id(req.uri().query())?;
    single_session(s.pool.steps_are_cheap(), move || s.observation_one(id)).await
}

pub async fn close(State(s): AppRef, req: Request) -> ApiResult {
    let b: IdBody = body(&s, req).await?;
    ok(Value::Bool(blocking(move || Ok(s.close_one(b.id))).await?))
}

pub async fn batch_create(State(s): AppRef, req: Request) -> ApiResult {
    let b: BatchCreateBody = body(&s, req).await?;
    let ids = blocking(move || s.create(b.n)).await?;
    ok(json!({ "ids": ids }))
}

pub async fn batch_reset(State(s): AppRef, req: Request) -> ApiResult {
    let b: BatchResetBody = body(&s, req).await?;
    blocking_ok(move || s.batch_reset(&b.ids, &b.data_idxs)).await
}

pub async fn batch_step(State(s): AppRef, req: Request) -> ApiResult {
    let b: BatchStepBody = body(&s, req).await?;
    simulated_latency(&s).await;
    blocking_ok(move || s.batch_step(&b.ids, b.actions)).await
}

pub async fn batch_close(State(s): AppRef, req: Request) -> ApiResult {
    let b: BatchIdsBody = body(&s, req).await?;
    let closed = blocking(move || Ok(s.close_ids(&b.ids))).await?;
    ok(json!({ "closed": closed }))
}

pub async fn health(State(s): AppRef) -> ApiResult {
    ok(s.health())
}

pub async fn metrics(State(s): AppRef) -> Response {
    let text = s.metrics.render(&s.pool);
    let mut response = (StatusCode::OK, text).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4"));
    response
}

pub async fn not_found(req: Request<Body>) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, format!("no endpoint {} {}", req.method(), req.uri().path()))
}

pub async fn method_not_allowed(req: Request<Body>) -> ApiError {
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, format!("{} is not allowed on {}", req.method(), req.uri().path()))
}

/// Wraps every request: the bearer-token check first (an unauthenticated request gets 401
/// whatever its route, method, headers or body, and nothing of the body is read), then the
/// cross-site rules and the instance check, then metrics (route, status, latency). An
/// authorized reply carries this server's instance id and echoes the request's id
/// ([`REQUEST_HEADER`]), so that a client can tell a reply to another request apart.
pub async fn guard(State(s): AppRef, req: Request, next: Next) -> Response {
    let start = std::time::Instant::now();
    let route = Metrics::route_index(req.uri().path());
    if let Err(e) = authorize(&s, &req) {
        let response = e.into_response();
        s.metrics.record(route, response.status().as_u16(), start.elapsed());
        return response;
    }
    let request_id = req.headers().get(REQUEST_HEADER).cloned();
    let allowed = s.limits.cross_site.check(req.method(), req.headers()).and_then(|()| s.check_instance(req.headers()));
    let mut response = match allowed {
        Ok(()) => next.run(req).await,
        Err(e) => e.into_response(),
    };
    let headers = response.headers_mut();
    headers.insert(INSTANCE_HEADER, s.instance_header());
    if let Some(id) = request_id {
        headers.insert(REQUEST_HEADER, id);
    }
    s.metrics.record(route, response.status().as_u16(), start.elapsed());
    response
}

fn authorize(s: &AppState, req: &Request) -> Result<(), ApiError> {
    let Some(token) = &s.limits.token else { return Ok(()) };
    let given = req.headers().get(header::AUTHORIZATION).and_then(|v| bearer_token(v.as_bytes())).ok_or_else(|| {
        ApiError::new(StatusCode::UNAUTHORIZED, "missing bearer token (header `Authorization: Bearer <token>`)")
    })?;
    if constant_time_eq(given, token.as_bytes()) {
        Ok(())
    } else {
        Err(ApiError::new(StatusCode::UNAUTHORIZED, "wrong bearer token"))
    }
}

/// The credentials of an `Authorization: Bearer <token>` header; the scheme name is
/// case-insensitive (RFC 7235), spaces after it are skipped.
fn bearer_token(value: &[u8]) -> Option<&[u8]> {
    let space = value.iter().position(|&b| b == b' ')?;
    let (scheme, rest) = value.split_at(space);
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return None;
    }
    let start = rest.iter().position(|&b| b != b' ')?;
    Some(&rest[start..])
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn simulated_latency(s: &AppState) {
    if !s.limits.step_latency.is_zero() {
        tokio::time::sleep(s.limits.step_latency).await;
    }
}

#[cfg(test)]
mod tests {
    use super::bearer_token;

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        for header in [&b"Bearer abc"[..], b"bearer abc", b"BEARER  abc"] {
            assert_eq!(bearer_token(header), Some(&b"abc"[..]));
        }
        assert_eq!(bearer_token(b"Basic abc"), None);
        assert_eq!(bearer_token(b"Bearer"), None);
        assert_eq!(bearer_token(b"Bearer "), None);
    }
}
