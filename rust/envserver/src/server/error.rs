//! The one error type of the HTTP layer: a status code and a message, sent as `{"error": "..."}`.

use axum::body::Body;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::json::{to_body, JsonBody};

use crate::pool::PoolError;

#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self { status, message: message.into() }
    }

    /// 400: the body is not JSON (or not UTF-8).
    pub fn malformed(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// 422: JSON, but the wrong fields or types.
    pub fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, message)
    }

    /// 404: a session id that is not open.
    pub fn unknown_session(id: u64) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            format!("unknown session id {id} (never created, already closed, or reclaimed after idling)"),
        )
    }

    /// 500: something broke on our side (a panic outside the envs).
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }
}

impl From<PoolError> for ApiError {
    fn from(err: PoolError) -> Self {
        let status = match err {
            PoolError::UnknownSession(_) => StatusCode::NOT_FOUND,
            PoolError::DuplicateSession(_) | PoolError::LengthMismatch { .. } | PoolError::TaskOutOfRange { .. } => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            PoolError::TooManySessions { .. } => StatusCode::SERVICE_UNAVAILABLE,
            PoolError::Env(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Self::new(status, err.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.message });
        let mut response = json_response(self.status, &body);
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if self.status == StatusCode::REQUEST_TIMEOUT {
            // the rest of the body may still come: the connection cannot carry another request
            response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}

/// A JSON reply with the given status.
pub fn json_response(status: StatusCode, value: &serde_json::Value) -> Response {
    json_body_response(status, to_body(value))
}

/// A reply whose body is JSON text already written.
pub fn json_body_response(status: StatusCode, body: JsonBody) -> Response {
    let mut response = (status, Body::new(body)).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

pub type ApiResult = Result<Response, ApiError>;

/// A 200 JSON reply.
pub fn ok(value: serde_json::Value) -> ApiResult {
    Ok(json_response(StatusCode::OK, &value))
}
