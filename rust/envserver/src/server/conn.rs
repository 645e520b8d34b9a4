//! Connections: the accept loop, a cap on open connections, the timeouts that close
//! connections which hold a slot without using it, and eviction when the cap is reached.
//!
//! - At `max_connections` open connections, a newly accepted connection takes the place of
//!   the open one that has waited longest without a request in progress (no request head yet,
//!   a request whose body is still arriving, or idle between requests, in that order of
//!   preference); when every open connection has a request being answered, it waits until
//!   one closes. A client that crowds the cap with silent or slow sockets therefore never
//!   keeps a new client waiting: the newcomer sends its request at once and is answered,
//!   while the silent sockets push each other out. The cap is lowered to leave
//!   [`RESERVED_FDS`] file descriptors free under a smaller `ulimit -n`, so the server never
//!   runs out of descriptors for its own files.
//! - `header_read_timeout` is hyper's: a request's head must arrive within it of the server
//!   starting to wait (the connection opened, or the previous response was sent). It closes
//!   slow-loris clients and connections that never send anything.
//! - `body_read_timeout`: a request's body must have arrived within it of its head; reading
//!   it then fails ([`BodyTimeout`], answered 408 and the connection closed).
//! - `keep_alive_timeout`: a connection that has served a request and has none in progress for
//!   this long is closed (hyper's graceful shutdown, which closes an idle connection at once).
//!   hyper's header timer also runs while a kept-alive connection waits, so it idles at most the
//!   shorter of the two.

use std::collections::HashMap;
use std::future::Future;
use std::io::ErrorKind;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::Router;
use hyper::body::{Body as HttpBody, Bytes, Frame, Incoming, SizeHint};
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use parking_lot::Mutex;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch, Notify, Semaphore};
use tokio::time::{Instant, Sleep};
use tower::ServiceExt;

/// File descriptors kept free for the process's own files when `ulimit -n` caps connections.
pub const RESERVED_FDS: u64 = 64;

/// How connections are limited (see the module doc).
#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    pub header_read_timeout: Duration,
    pub body_read_timeout: Duration,
    pub keep_alive_timeout: Duration,
    pub max_connections: usize,
}

/// `wanted`, lowered so that `RESERVED_FDS` descriptors stay free under the open-file limit.
pub fn connection_cap(wanted: usize) -> usize {
    match open_file_limit() {
        Some(limit) => wanted.min(usize::try_from(limit.saturating_sub(RESERVED_FDS)).unwrap_or(usize::MAX).max(1)),
        None => wanted,
    }
    .max(1)
}

/// The soft `RLIMIT_NOFILE`, when there is one.
fn open_file_limit() -> Option<u64> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit only writes the struct it is given.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    #[allow(clippy::unnecessary_cast)] // rlim_t is not u64 on every platform
    (rc == 0 && limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur as u64)
}

/// Accepts connections until `stop` fires, then lets each finish its request in progress and
/// returns once all have closed.
pub async fn serve(listener: TcpListener, router: Router, limits: ConnLimits, mut stop: oneshot::Receiver<()>) {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let open = Arc::new(Open::default());
    let (closing, closing_rx) = watch::channel(());
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = &mut stop => break,
        };
        let tcp = match accepted {
            Ok((tcp, _)) => tcp,
            // Out of descriptors or memory: the connection waits in the backlog; try again soon
            // rather than spin on a listener that stays readable.
            Err(e) if !is_connection_error(&e) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            Err(_) => continue,
        };
        let permit = match Arc::clone(&slots).try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                open.evict_one();
                let permit = tokio::select! {
                    permit = Arc::clone(&slots).acquire_owned() => permit,
                    _ = &mut stop => break,
                };
                let Ok(permit) = permit else { break };
                permit
            }
        };
        let activity = open.insert();
        let conn = serve_connection(tcp, router.clone(), limits, closing_rx.clone(), Arc::clone(&activity));
        let open = Arc::clone(&open);
        tokio::spawn(async move {
            conn.await;
            open.remove(activity.id);
            drop(permit);
        });
    }
    drop(listener);
    drop(closing_rx);
    let _ = closing.send(());
    closing.closed().await;
}

/// Errors of one connection (the peer gave up before it was accepted), not of the listener.
fn is_connection_error(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::ConnectionRefused | ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset)
}

async fn serve_connection(
    tcp: TcpStream,
    router: Router,
    limits: ConnLimits,
    mut closing: watch::Receiver<()>,
    activity: Arc<Activity>,
) {
    let _ = tcp.set_nodelay(true);
    let requests = Arc::clone(&activity);
    let service = service_fn(move |request: Request<Incoming>| {
        let in_progress = requests.begin(request.body().is_end_stream());
        let deadline = limits.body_read_timeout;
        let body = Arc::clone(&requests);
        let reply = router.clone().oneshot(request.map(|b| Body::new(TimedBody::new(b, deadline, body))));
        async move {
            let response = reply.await;
            drop(in_progress);
            response
        }
    });
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
    let conn = http.serve_connection(TokioIo::new(tcp), service);
    tokio::pin!(conn);
    let idle = activity.idle_for(limits.keep_alive_timeout);
    tokio::pin!(idle);
    let mut shutting_down = false;
    loop {
        tokio::select! {
            _ = conn.as_mut() => break,
            _ = activity.evicted.notified() => break,
            _ = &mut idle, if !shutting_down => {
                conn.as_mut().graceful_shutdown();
                shutting_down = true;
            }
            _ = closing.changed(), if !shutting_down => {
                conn.as_mut().graceful_shutdown();
                shutting_down = true;
            }
        }
    }
}

/// The open connections, so that a new one at the cap can push out one that waits.
#[derive(Default)]
struct Open {
    next: AtomicU64,
    conns: Mutex<HashMap<u64, Arc<Activity>>>,
}

impl Open {
    fn insert(&self) -> Arc<Activity> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let activity = Arc::new(Activity::new(id));
        self.conns.lock().insert(id, Arc::clone(&activity));
        activity
    }

    fn remove(&self, id: u64) {
        self.conns.lock().remove(&id);
    }

    /// Tells the connection that has waited longest without a request in progress to close;
    /// false when every open connection has one.
    fn evict_one(&self) -> bool {
        let conns = self.conns.lock();
        let victim =
            conns.values().filter_map(|a| a.eviction_rank().map(|rank| (rank, a))).min_by_key(|(rank, _)| *rank);
        match victim {
            Some((_, activity)) => {
                activity.state.lock().evicted = true;
                activity.evicted.notify_one();
                true
            }
            None => false,
        }
    }
}

/// What one connection is doing, for the keep-alive timer and for eviction.
struct Activity {
    id: u64,
    state: Mutex<State>,
    changed: Notify,
    evicted: Notify,
}

struct State {
    /// Requests in progress (one at a time on HTTP/1).
    in_progress: usize,
    /// Whether the request in progress is still receiving its body.
    reading_body: bool,
    /// Whether the connection has answered a request.
    served: bool,
    /// When the connection last changed state (opened, a request began or ended, a body ended).
    since: Instant,
    evicted: bool,
}

/// Marks a request in progress until dropped.
struct InProgress(Arc<Activity>);

impl Activity {
    fn new(id: u64) -> Self {
        let state = State { in_progress: 0, reading_body: false, served: false, since: Instant::now(), evicted: false };
        Self { id, state: Mutex::new(state), changed: Notify::new(), evicted: Notify::new() }
    }

    fn begin(self: &Arc<Self>, body_done: bool) -> InProgress {
        let mut state = self.state.lock();
        state.in_progress += 1;
        state.reading_body = !body_done;
        state.since = Instant::now();
        drop(state);
        self.changed.notify_one();
        InProgress(Arc::clone(self))
    }

    fn body_done(&self) {
        let mut state = self.state.lock();
        if state.reading_body {
            state.reading_body = false;
            state.since = Instant::now();
        }
    }

    /// When this connection may be pushed out: waiting for a request head without having
    /// served one (0), receiving a body (1), idle between requests (2), then the longest
    /// waiting first. None while a request is being answered.
    fn eviction_rank(&self) -> Option<(u8, Instant)> {
        let state = self.state.lock();
        let class = match (state.in_progress, state.reading_body, state.served) {
            _ if state.evicted => return None,
            (0, _, false) => 0,
            (0, _, true) => 2,
            (_, true, _) => 1,
            _ => return None,
        };
        Some((class, state.since))
    }

    /// Resolves once the connection has served a request and then had none in progress for
    /// `limit`.
    async fn idle_for(&self, limit: Duration) {
        loop {
            let idle = {
                let state = self.state.lock();
                state.served && state.in_progress == 0
            };
            if !idle {
                self.changed.notified().await;
            } else if tokio::time::timeout(limit, self.changed.notified()).await.is_err() {
                return;
            }
        }
    }
}

impl Drop for InProgress {
    fn drop(&mut self) {
        let mut state = self.0.state.lock();
        state.served = true;
        state.in_progress -= 1;
        state.reading_body = false;
        state.since = Instant::now();
        drop(state);
        self.0.changed.notify_one();
    }
}

/// A request body that must have arrived within a deadline of the request's head; it tells
/// the connection's [`Activity`] when it is complete (or dropped unread).
struct TimedBody {
    inner: Incoming,
    deadline: Pin<Box<Sleep>>,
    timeout: Duration,
    activity: Arc<Activity>,
}

/// The error of a body that did not arrive within the body read timeout.
#[derive(Debug)]
pub struct BodyTimeout(pub Duration);

impl std::fmt::Display for BodyTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the request body did not arrive within {:?} of its head", self.0)
    }
}

impl std::error::Error for BodyTimeout {}

impl TimedBody {
    fn new(inner: Incoming, timeout: Duration, activity: Arc<Activity>) -> Self {
        Self { inner, deadline: Box::pin(tokio::time::sleep(timeout)), timeout, activity }
    }
}

impl HttpBody for TimedBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(None) => {
                this.activity.body_done();
                Poll::Ready(None)
            }
            Poll::Ready(Some(frame)) => Poll::Ready(Some(frame.map_err(Into::into))),
            Poll::Pending if this.deadline.as_mut().poll(cx).is_ready() => {
                Poll::Ready(Some(Err(Box::new(BodyTimeout(this.timeout)))))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for TimedBody {
    fn drop(&mut self) {
        self.activity.body_done();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_leaves_descriptors_free() {
        let cap = connection_cap(usize::MAX);
        if let Some(limit) = open_file_limit() {
            assert_eq!(cap as u64, limit.saturating_sub(RESERVED_FDS).max(1));
        }
        assert_eq!(connection_cap(3), 3);
        assert_eq!(connection_cap(0), 1);
    }

    // Real time, short limits: the lower bounds are what the code promises; the upper bound
    // only keeps a broken timer from hanging the test.
    #[tokio::test]
    async fn idle_counts_only_after_a_request_and_between_requests() {
        let activity = Arc::new(Activity::new(0));
        let limit = Duration::from_millis(40);
        let wait = Duration::from_millis(150);
        let fresh = tokio::time::timeout(wait, activity.idle_for(limit)).await;
        assert!(fresh.is_err(), "a connection that served nothing is the header timeout's");
        let request = activity.begin(true);
        let busy = tokio::time::timeout(wait, activity.idle_for(limit)).await;
        assert!(busy.is_err(), "a request in progress keeps the connection");
        drop(request);
        let start = std::time::Instant::now();
        activity.idle_for(limit).await;
        let idle = start.elapsed();
        assert!(idle >= limit, "idle after {idle:?}, limit {limit:?}");
        assert!(idle < Duration::from_secs(10), "idle after {idle:?}, limit {limit:?}");
    }

    #[test]
    fn the_connection_pushed_out_is_the_one_waiting_longest_without_a_request() {
        // Waits between the inserts so their times differ.
        let tick = || std::thread::sleep(Duration::from_millis(2));
        let open = Open::default();
        let silent = open.insert();
        tick();
        let kept_alive = open.insert();
        drop(kept_alive.begin(true)); // served one request, idle since
        let reading = open.insert();
        let _upload = reading.begin(false); // head in, body still arriving
        let busy = open.insert();
        let _work = busy.begin(true); // body in, being answered
        tick();
        let newest = open.insert();
        let mut order = Vec::new();
        while open.evict_one() {
            let id = open.conns.lock().values().find(|a| a.state.lock().evicted).map(|a| a.id).unwrap();
            open.remove(id);
            order.push(id);
        }
        assert_eq!(order, [silent.id, newest.id, reading.id, kept_alive.id], "busy is never pushed out");
        assert!(!open.evict_one());
        reading.body_done();
        assert_eq!(reading.eviction_rank(), None);
    }
}
