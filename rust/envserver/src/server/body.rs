//! Reading request bodies and query strings into typed requests, with the status codes the
//! wire contract promises: 413 too large, 400 not UTF-8 or not JSON, 422 wrong fields or types.

use axum::body::Body;
use axum::http::{header, HeaderMap, StatusCode};
use serde::de::DeserializeOwned;

use super::conn::BodyTimeout;
use super::error::ApiError;

/// Reads at most `limit` bytes of `body` and parses it as a JSON object of type `T`.
/// An empty body reads as `{}` (AgentGym's clients post `/create` without one).
pub async fn read_json<T: DeserializeOwned>(headers: &HeaderMap, body: Body, limit: usize) -> Result<T, ApiError> {
    let bytes = read_limited(headers, body, limit).await?;
    parse_json(&bytes)
}

/// Parses a JSON object of type `T` from raw bytes.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let text = std::str::from_utf8(bytes)
        .map_err(|e| ApiError::malformed(format!("request body is not valid UTF-8 ({e})")))?;
    let value: serde_json::Value = if text.trim().is_empty() {
        serde_json::Value::Object(serde_json::Map::new())
    } else {
        serde_json::from_str(text).map_err(|e| ApiError::malformed(format!("request body is not valid JSON: {e}")))?
    };
    if !value.is_object() {
        return Err(ApiError::unprocessable(format!("request body must be a JSON object, got {}", kind(&value))));
    }
    serde_json::from_value(value).map_err(|e| ApiError::unprocessable(format!("wrong fields in request body: {e}")))
}

async fn read_limited(headers: &HeaderMap, body: Body, limit: usize) -> Result<axum::body::Bytes, ApiError> {
    let too_large =
        || ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, format!("request body is over the {limit}-byte limit"));
    let declared =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    axum::body::to_bytes(body, limit).await.map_err(|e| {
        if is_length_limit(&e) {
            too_large()
        } else if let Some(timeout) = find_source::<BodyTimeout>(&e) {
            ApiError::new(StatusCode::REQUEST_TIMEOUT, timeout.to_string())
        } else {
            ApiError::malformed(format!("could not read the request body: {e}"))
        }
    })
}

/// The first error of type `E` in `err`'s source chain.
fn find_source<'a, E: std::error::Error + 'static>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a E> {
    let mut source = Some(err);
    while let Some(e) = source {
        if let Some(found) = e.downcast_ref::<E>() {
            return Some(found);
        }
        source = e.source();
    }
    None
}

fn is_length_limit(err: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        if e.to_string().contains("length limit exceeded") {
            return true;
        }
        source = e.source();
    }
    false
}

/// The session id of `GET /observation?id=N`.
pub fn query_id(query: Option<&str>) -> Result<u64, ApiError> {
    let query = query.unwrap_or("");
    let raw = query
        .split('&')
        .filter_map(|pair| pair.split_once('=').or(Some((pair, ""))))
        .find(|(k, _)| *k == "id")
        .map(|(_, v)| v)
        .ok_or_else(|| ApiError::unprocessable("missing query parameter `id`"))?;
    raw.parse::<u64>().map_err(|_| {
        ApiError::unprocessable(format!("query parameter `id` must be a non-negative integer, got {raw:?}"))
    })
}

fn kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    struct Step {
        #[allow(dead_code)]
        id: u64,
        #[allow(dead_code)]
        action: String,
    }

    #[test]
    fn statuses_of_bad_bodies() {
        assert_eq!(parse_json::<Step>(b"{\"id\": 1").unwrap_err().status, StatusCode::BAD_REQUEST);
        assert_eq!(
            parse_json::<Step>(b"{\"id\": 1, \"action\": \"\xff\"}").unwrap_err().status,
            StatusCode::BAD_REQUEST
        );
        assert_eq!(parse_json::<Step>(b"[1, \"go\"]").unwrap_err().status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(
            parse_json::<Step>(b"{\"id\": \"1\", \"action\": \"go\"}").unwrap_err().status,
            StatusCode::UNPROCESSABLE_ENTITY
        );
        let missing = parse_json::<Step>(b"{\"id\": 1}").unwrap_err();
        assert!(missing.message.contains("action"), "{}", missing.message);
        assert!(parse_json::<Step>(b"{\"id\": 1, \"action\": \"go\", \"extra\": 2}").is_ok());
    }

    #[test]
    fn query_ids() {
        assert_eq!(query_id(Some("id=12")).unwrap(), 12);
        assert_eq!(query_id(Some("x=1&id=3")).unwrap(), 3);
        assert_eq!(query_id(None).unwrap_err().status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(query_id(Some("id=-1")).unwrap_err().status, StatusCode::UNPROCESSABLE_ENTITY);
    }
}
