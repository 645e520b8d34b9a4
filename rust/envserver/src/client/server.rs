//! One HTTP client per server: keep-alive connections, a cap on requests in flight, timeouts,
//! and errors that say whether the request can have reached the server.
//!
//! Before each call the client lets its runtime see what arrived on its idle pooled connections
//! ([`settle`]): the runtime turns only inside a call, so without that a connection the server
//! closed while idle (its keep-alive timeout, a restart) or one holding bytes nobody asked for
//! would be handed out as if it were open. Replies of agentgym-envserver echo each request's
//! number ([`REQUEST_HEADER`]); a reply with another number drops the server's connections.
//!
//! The timeout of a call counts from when it is issued, the wait for an in-flight slot
//! included: a batch issues all its calls at once, so it ends within one timeout however many
//! of them queue behind a server that stopped answering. A reply is read up to
//! `max_reply_bytes` and no further: a larger one fails its call (the server may have acted).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body as _, Incoming};
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use hyper::{Method, Request, Response, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::{INSTANCE_HEADER, REQUEST_HEADER};

/// Why a call failed. Only [`CallError::NotSent`] guarantees the server never saw the request.
#[derive(Debug, Clone, PartialEq)]
pub enum CallError {
    /// The connection could not be made (refused, unreachable, connect timeout).
    NotSent(String),
    /// All in-flight slots of the server stayed busy for the whole timeout; nothing was sent.
    NoSlot { max_in_flight: usize, timeout: Duration },
    /// Sent, but no complete reply within the timeout: the server may have acted on it.
    Timeout(String),
    /// The connection broke after sending (the server died mid-request, reset...).
    Broken(String),
    /// A reply with a non-2xx status; `message` is the server's `error` field when it has one.
    Status { code: u16, message: String },
    /// A 2xx reply that is not JSON, or JSON of the wrong shape.
    Garbage(String),
    /// A 200 JSON reply `{"error": ...}` (AgentGym servers report failures this way).
    Server(String),
    /// agentgym-envserver refused the request (410) because it names sessions of another
    /// instance of the server: it was restarted and those sessions are gone. Nothing was done.
    Gone(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::NotSent(e) => write!(f, "could not connect: {e}"),
            CallError::NoSlot { max_in_flight, timeout } => write!(
                f,
                "not sent: the server's {max_in_flight} in-flight slots stayed busy for the whole timeout ({timeout:?})"
            ),
            CallError::Timeout(e) => write!(f, "no reply within the timeout ({e})"),
            CallError::Broken(e) => write!(f, "connection failed during the request: {e}"),
            CallError::Status { code, message } => write!(f, "HTTP {code}: {message}"),
            CallError::Garbage(e) => write!(f, "unusable reply: {e}"),
            CallError::Server(e) => write!(f, "server error: {e}"),
            CallError::Gone(e) => write!(f, "session lost: {e}"),
        }
    }
}

impl CallError {
    /// Whether the server may have received (and acted on) the request.
    pub fn may_have_reached(&self) -> bool {
        !matches!(self, CallError::NotSent(_) | CallError::NoSlot { .. } | CallError::Gone(_))
    }
}

/// Client settings shared by all servers of a pool.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    pub max_in_flight: usize,
    pub connect_timeout: Duration,
    /// A call's whole budget: waiting for an in-flight slot, connecting, sending, the reply.
    pub timeout: Duration,
    pub token: Option<String>,
    /// The largest reply body read; a larger one fails the call instead of being buffered.
    pub max_reply_bytes: usize,
}

/// Replies past this many bytes fail their call unless told otherwise (a batch reply of
/// 50,000 observations of a few KB each fits).
pub const DEFAULT_MAX_REPLY_BYTES: usize = 256 << 20;

type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// A reply's JSON and the instance of agentgym-envserver that sent it ([`INSTANCE_HEADER`];
/// None from other servers).
#[derive(Debug, Clone)]
pub struct Reply {
    pub value: Value,
    pub instance: Option<String>,
}

pub struct ServerClient {
    pub base: String,
    /// hyper's pooled client (no proxy, no redirects: env servers answer in place); replaced
    /// by a fresh one, without the pooled connections, when a reply answers another request.
    http: Mutex<HttpClient>,
    connect_timeout: Duration,
    pool_size: usize,
    /// The number of the next request ([`REQUEST_HEADER`]).
    next_request: AtomicU64,
    /// `Bearer <token>` where the pool has a token.
    authorization: Option<HeaderValue>,
    slots: Arc<Semaphore>,
    max_in_flight: usize,
    timeout: Duration,
    max_reply_bytes: usize,
}

impl ServerClient {
    pub fn new(base: &str, options: &ClientOptions) -> Result<Self, String> {
        let authorization = match &options.token {
            Some(token) => Some(
                HeaderValue::from_str(&format!("Bearer {token}"))
                    .map_err(|_| "the token is not a valid header value".to_string())?,
            ),
            None => None,
        };
        let base = base.trim_end_matches('/').to_string();
        base.parse::<Uri>().map_err(|e| format!("cannot build an HTTP client for {base}: {e}"))?;
        let (connect_timeout, pool_size) = (options.connect_timeout, options.max_in_flight);
        let http = Mutex::new(http_client(connect_timeout, pool_size));
        let max_in_flight = options.max_in_flight.max(1);
        let slots = Arc::new(Semaphore::new(max_in_flight));
        let (timeout, max_reply_bytes) = (options.timeout, options.max_reply_bytes);
        let next_request = AtomicU64::new(1);
        Ok(Self {
            base,
            http,
            connect_timeout,
            pool_size,
            next_request,
            authorization,
            slots,
            max_in_flight,
            timeout,
            max_reply_bytes,
        })
    }

    /// `POST path` with a JSON body; the reply parsed as JSON.
    pub async fn post(&self, path: &str, body: &Value) -> Result<Value, CallError> {
        self.post_to(path, body, None).await.map(|r| r.value)
    }

    /// `POST path` for sessions of server instance `instance` (None: any), which refuses it
    /// ([`CallError::Gone`]) when it is another instance; the reply with its instance.
    pub async fn post_to(&self, path: &str, body: &Value, instance: Option<&str>) -> Result<Reply, CallError> {
        let bytes = serde_json::to_vec(body).map_err(|e| CallError::NotSent(e.to_string()))?;
        self.send(Method::POST, path, Bytes::from(bytes), instance).await
    }

    /// `GET path`; the reply parsed as JSON.
    pub async fn get(&self, path: &str) -> Result<Value, CallError> {
        self.send(Method::GET, path, Bytes::new(), None).await.map(|r| r.value)
    }

    async fn send(&self, method: Method, path: &str, body: Bytes, instance: Option<&str>) -> Result<Reply, CallError> {
        let deadline = Instant::now() + self.timeout;
        let url = format!("{}{path}", self.base);
        let uri: Uri = url.parse().map_err(|e| CallError::NotSent(format!("{url} is not a usable URL: {e}")))?;
        let number = self.next_request.fetch_add(1, Ordering::Relaxed).to_string();
        let mut request = Request::builder()
            .method(method)
            .uri(uri)
            .header(CONTENT_TYPE, "application/json")
            .header(REQUEST_HEADER, number.as_str());
        if let Some(value) = &self.authorization {
            request = request.header(AUTHORIZATION, value.clone());
        }
        if let Some(instance) = instance {
            request = request.header(INSTANCE_HEADER, instance);
        }
        let request = request.body(Full::new(body)).map_err(|e| CallError::NotSent(full_message(&e)))?;
        let no_slot = CallError::NoSlot { max_in_flight: self.max_in_flight, timeout: self.timeout };
        let _slot = tokio::time::timeout_at(deadline, self.slots.acquire())
            .await
            .map_err(|_| no_slot)?
            .map_err(|e| CallError::NotSent(e.to_string()))?;
        settle().await;
        let http = self.http.lock().clone();
        // One deadline covers connecting, sending and reading the whole body.
        let exchange = async {
            let response = http.request(request).await.map_err(classify)?;
            self.check_echo(&response, &number)?;
            let status = response.status();
            let replier = response.headers().get(INSTANCE_HEADER).and_then(|v| v.to_str().ok()).map(str::to_string);
            read_capped(response, self.max_reply_bytes).await.map(|body| (status, body, replier))
        };
        let (status, body, replier) = tokio::time::timeout_at(deadline, exchange)
            .await
            .map_err(|_| CallError::Timeout(format!("{url}: no complete reply within {:?}", self.timeout)))??;
        let parsed: Result<Value, _> = serde_json::from_slice(&body);
        if status == hyper::StatusCode::GONE && instance.is_some() {
            let message = match &parsed {
                Ok(Value::Object(m)) if m.contains_key("error") => error_text(&m["error"]),
                _ => snippet(&body),
            };
            return Err(CallError::Gone(message));
        }
        if !status.is_success() {
            let message = match &parsed {
                Ok(Value::Object(m)) if m.contains_key("error") => error_text(&m["error"]),
                Ok(Value::Object(m)) if m.contains_key("detail") => error_text(&m["detail"]),
                _ => snippet(&body),
            };
            return Err(CallError::Status { code: status.as_u16(), message });
        }
        match parsed {
            Ok(Value::Object(m)) if m.len() == 1 && m.contains_key("error") => {
                Err(CallError::Server(error_text(&m["error"])))
            }
            Ok(value) => Ok(Reply { value, instance: replier }),
            Err(e) => Err(CallError::Garbage(format!("not JSON ({e}): {}", snippet(&body)))),
        }
    }

    /// A reply whose echoed request number ([`REQUEST_HEADER`]) is not `number` answers an
    /// earlier request: the connection carries a surplus reply, and every later reply on it
    /// would be one request late. All pooled connections of the server are dropped (the
    /// reply's own closes with it); the call fails, as its request may have reached the server.
    fn check_echo(&self, response: &Response<Incoming>, number: &str) -> Result<(), CallError> {
        let Some(echo) = response.headers().get(REQUEST_HEADER) else { return Ok(()) };
        if echo.as_bytes() == number.as_bytes() {
            return Ok(());
        }
        *self.http.lock() = http_client(self.connect_timeout, self.pool_size);
        Err(CallError::Broken(format!(
            "{}: the reply answers request {}, not request {number} (the server or a proxy sent \
             more replies than requests); its pooled connections were dropped",
            self.base,
            String::from_utf8_lossy(echo.as_bytes())
        )))
    }
}

/// hyper's pooled client for one server.
fn http_client(connect_timeout: Duration, pool_size: usize) -> HttpClient {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(connect_timeout));
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(pool_size)
        // Below the keep-alive timeout of agentgym-envserver and uvicorn (5 s): the client
        // drops an idle connection before the server can close it under a new request.
        .pool_idle_timeout(Duration::from_secs(4))
        .pool_timer(TokioTimer::new())
        .build(connector)
}

/// Lets the runtime's I/O driver and the pooled connections' tasks run before a request takes
/// a connection from the pool. The runtime turns only inside a call, so a server's FIN on an
/// idle connection (its keep-alive timeout, or its restart) or surplus bytes on it are seen
/// only now: the first yield polls the driver, which wakes those connections' tasks; the
/// second lets them run, and a connection that was closed or holds unrequested bytes is then
/// out of the pool before the request asks it for one. Costs two zero-timeout polls.
async fn settle() {
    for _ in 0..2 {
        tokio::task::yield_now().await;
    }
}

/// The reply body, frame by frame, refused once it passes `cap` bytes (declared or read).
async fn read_capped(response: Response<Incoming>, cap: usize) -> Result<Vec<u8>, CallError> {
    let too_large = |n: u64| CallError::Garbage(format!("the reply is over the {cap}-byte cap ({n} bytes or more)"));
    let mut incoming = response.into_body();
    let declared = incoming.size_hint().exact();
    if let Some(n) = declared.filter(|&n| n > cap as u64) {
        return Err(too_large(n));
    }
    // Sized once from the declared length (at most `cap`), not grown copy by copy.
    let mut body = Vec::with_capacity(declared.map_or(0, |n| n as usize));
    while let Some(frame) = incoming.frame().await {
        let frame = frame.map_err(|e| CallError::Broken(full_message(&e)))?;
        let Ok(chunk) = frame.into_data() else { continue };
        if body.len() + chunk.len() > cap {
            return Err(too_large((body.len() + chunk.len()) as u64));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// A request that failed before a reply: one that never connected cannot have reached the
/// server; any other (reset, closed mid-reply) may have.
fn classify(e: hyper_util::client::legacy::Error) -> CallError {
    if e.is_connect() {
        CallError::NotSent(full_message(&e))
    } else {
        CallError::Broken(full_message(&e))
    }
}

fn full_message(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

fn error_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The start of a reply body, for error messages.
fn snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
    if body.len() > 200 {
        format!("{text:?}...")
    } else {
        format!("{text:?}")
    }
}
