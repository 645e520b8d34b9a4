//! Connections: the accept loop, a cap on open connections, and the two timeouts that close
//! connections which hold a slot without using it.
//!
//! - At `max_connections` open connections the loop stops accepting; new ones wait in the
//!   kernel's listen backlog until one closes (as Go's `netutil.LimitListener`). The cap is
//!   lowered to leave [`RESERVED_FDS`] file descriptors free under a smaller `ulimit -n`, so the
//!   server never runs out of descriptors for its own files.
//! - `header_read_timeout` is hyper's: a request's head must arrive within it of the server
//!   starting to wait (the connection opened, or the previous response was sent). It closes
//!   slow-loris clients and connections that never send anything.
//! - `keep_alive_timeout`: a connection that has served a request and has none in progress for
//!   this long is closed (hyper's graceful shutdown, which closes an idle connection at once).
//!   hyper's header timer also runs while a kept-alive connection waits, so it idles at most the
//!   shorter of the two.

use std::io::ErrorKind;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::Router;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch, Notify, OwnedSemaphorePermit, Semaphore};
use tower::ServiceExt;

/// File descriptors kept free for the process's own files when `ulimit -n` caps connections.
pub const RESERVED_FDS: u64 = 64;

/// How connections are limited (see the module doc).
#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    pub header_read_timeout: Duration,
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
    let (closing, closing_rx) = watch::channel(());
    loop {
        let permit = tokio::select! {
            permit = Arc::clone(&slots).acquire_owned() => permit,
            _ = &mut stop => break,
        };
        let Ok(permit) = permit else { break };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = &mut stop => break,
        };
        match accepted {
            Ok((tcp, _)) => {
                tokio::spawn(serve_connection(tcp, router.clone(), limits, closing_rx.clone(), permit));
            }
            // Out of descriptors or memory: the connection waits in the backlog; try again soon
            // rather than spin on a listener that stays readable.
            Err(e) if !is_connection_error(&e) => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(_) => {}
        }
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
    _slot: OwnedSemaphorePermit,
) {
    let _ = tcp.set_nodelay(true);
    let activity = Arc::new(Activity::default());
    let requests = Arc::clone(&activity);
    let service = service_fn(move |request: Request<Incoming>| {
        let in_progress = requests.begin();
        let reply = router.clone().oneshot(request.map(Body::new));
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

/// Requests in progress on one connection, and whether it has served one yet.
#[derive(Default)]
struct Activity {
    in_progress: AtomicUsize,
    served: AtomicBool,
    changed: Notify,
}

/// Marks a request in progress until dropped.
struct InProgress(Arc<Activity>);

impl Activity {
    fn begin(self: &Arc<Self>) -> InProgress {
        self.in_progress.fetch_add(1, Ordering::SeqCst);
        self.changed.notify_one();
        InProgress(Arc::clone(self))
    }

    /// Resolves once the connection has served a request and then had none in progress for
    /// `limit`.
    async fn idle_for(&self, limit: Duration) {
        loop {
            let idle = self.served.load(Ordering::SeqCst) && self.in_progress.load(Ordering::SeqCst) == 0;
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
        self.0.served.store(true, Ordering::SeqCst);
        self.0.in_progress.fetch_sub(1, Ordering::SeqCst);
        self.0.changed.notify_one();
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

    #[tokio::test(start_paused = true)]
    async fn idle_counts_only_after_a_request_and_between_requests() {
        let activity = Arc::new(Activity::default());
        let limit = Duration::from_secs(5);
        let fresh = tokio::time::timeout(Duration::from_secs(60), activity.idle_for(limit)).await;
        assert!(fresh.is_err(), "a connection that served nothing is the header timeout's");
        let request = activity.begin();
        let busy = tokio::time::timeout(Duration::from_secs(60), activity.idle_for(limit)).await;
        assert!(busy.is_err(), "a request in progress keeps the connection");
        drop(request);
        let start = tokio::time::Instant::now();
        activity.idle_for(limit).await;
        assert_eq!(start.elapsed(), limit);
    }
}
