//! Request counters and a latency histogram, rendered as Prometheus text for `GET /metrics`.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use crate::pool::EnvPool;

/// Routes that get their own request counter; anything else counts as `other`.
pub const ROUTES: &[&str] = &[
    "/",
    "/create",
    "/reset",
    "/step",
    "/observation",
    "/close",
    "/batch/create",
    "/batch/reset",
    "/batch/step",
    "/batch/close",
    "/health",
    "/metrics",
    "other",
];

/// Error statuses counted one by one; any other >= 400 status counts under its class.
const ERROR_STATUSES: &[u16] = &[400, 401, 404, 405, 409, 413, 422, 429, 500, 503];

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: &[f64] = &[0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5];

#[derive(Default)]
pub struct Metrics {
    requests: [AtomicU64; ROUTES.len()],
    errors: [AtomicU64; ERROR_STATUSES.len()],
    other_errors: AtomicU64,
    buckets: [AtomicU64; BUCKETS.len()],
    latency_count: AtomicU64,
    latency_sum_ns: AtomicU64,
    pub reclaimed: AtomicU64,
}

impl Metrics {
    /// Index of `path` in [`ROUTES`].
    pub fn route_index(path: &str) -> usize {
        ROUTES.iter().position(|r| *r == path).unwrap_or(ROUTES.len() - 1)
    }

    /// Counts one finished request.
    pub fn record(&self, route: usize, status: u16, elapsed: Duration) {
        self.requests[route].fetch_add(1, Relaxed);
        if status >= 400 {
            match ERROR_STATUSES.iter().position(|s| *s == status) {
                Some(i) => self.errors[i].fetch_add(1, Relaxed),
                None => self.other_errors.fetch_add(1, Relaxed),
            };
        }
        let secs = elapsed.as_secs_f64();
        if let Some(i) = BUCKETS.iter().position(|b| secs <= *b) {
            self.buckets[i].fetch_add(1, Relaxed);
        }
        self.latency_count.fetch_add(1, Relaxed);
        self.latency_sum_ns.fetch_add(elapsed.as_nanos().min(u64::MAX as u128) as u64, Relaxed);
    }

    /// The Prometheus text exposition of these counters and the pool's.
    pub fn render(&self, pool: &EnvPool) -> String {
        let env = pool.env_name();
        let mut out = String::with_capacity(4096);
        let mut metric = |name: &str, kind: &str, help: &str, value: u64| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{env=\"{env}\"}} {value}");
        };
        metric("agentgym_sessions_open", "gauge", "Sessions open now.", pool.len() as u64);
        metric("agentgym_env_steps_total", "counter", "Env steps taken.", pool.stats.steps.load(Relaxed));
        metric("agentgym_env_resets_total", "counter", "Episodes reset.", pool.stats.resets.load(Relaxed));
        metric(
            "agentgym_env_step_errors_total",
            "counter",
            "Steps refused or failed per session.",
            pool.stats.step_errors.load(Relaxed),
        );
        metric(
            "agentgym_env_panics_total",
            "counter",
            "Panics caught inside envs.",
            pool.stats.env_panics.load(Relaxed),
        );
        metric(
            "agentgym_sessions_reclaimed_total",
            "counter",
            "Idle sessions closed by the server.",
            self.reclaimed.load(Relaxed),
        );
        self.render_requests(&mut out);
        self.render_latency(&mut out);
        out
    }

    fn render_requests(&self, out: &mut String) {
        out.push_str("# HELP agentgym_http_requests_total HTTP requests by route.\n# TYPE agentgym_http_requests_total counter\n");
        for (route, n) in ROUTES.iter().zip(&self.requests) {
            let _ = writeln!(out, "agentgym_http_requests_total{{route=\"{route}\"}} {}", n.load(Relaxed));
        }
        out.push_str("# HELP agentgym_http_errors_total HTTP error replies by status.\n# TYPE agentgym_http_errors_total counter\n");
        for (status, n) in ERROR_STATUSES.iter().zip(&self.errors) {
            let _ = writeln!(out, "agentgym_http_errors_total{{status=\"{status}\"}} {}", n.load(Relaxed));
        }
        let _ = writeln!(out, "agentgym_http_errors_total{{status=\"other\"}} {}", self.other_errors.load(Relaxed));
    }

    fn render_latency(&self, out: &mut String) {
        let name = "agentgym_http_request_duration_seconds";
        let _ = writeln!(out, "# HELP {name} Time from request to reply.\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (bound, n) in BUCKETS.iter().zip(&self.buckets) {
            cumulative += n.load(Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
        }
        let count = self.latency_count.load(Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let _ = writeln!(out, "{name}_sum {}", self.latency_sum_ns.load(Relaxed) as f64 / 1e9);
        let _ = writeln!(out, "{name}_count {count}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_is_cumulative() {
        let m = Metrics::default();
        m.record(Metrics::route_index("/step"), 200, Duration::from_micros(50));
        m.record(Metrics::route_index("/nope"), 404, Duration::from_millis(30));
        let mut out = String::new();
        m.render_latency(&mut out);
        m.render_requests(&mut out);
        assert!(out.contains("agentgym_http_request_duration_seconds_bucket{le=\"0.0001\"} 1"), "{out}");
        assert!(out.contains("agentgym_http_request_duration_seconds_bucket{le=\"0.05\"} 2"), "{out}");
        assert!(out.contains("agentgym_http_requests_total{route=\"/step\"} 1"), "{out}");
        assert!(out.contains("agentgym_http_requests_total{route=\"other\"} 1"), "{out}");
        assert!(out.contains("agentgym_http_errors_total{status=\"404\"} 1"), "{out}");
    }
}
