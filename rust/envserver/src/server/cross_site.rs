//! Refusing requests a web browser makes on a foreign page's behalf.
//!
//! A page on any site can make the browser of someone running a server on loopback send it
//! requests: a "simple" cross-site POST (a `text/plain` body, no preflight) acts on the
//! server even though the page cannot read the answer, and DNS rebinding (a name of the
//! attacker's that resolves to 127.0.0.1) lets the page read answers too. Three rules close
//! both ways, and cost nothing to clients that are not browsers:
//!
//! - a POST body must be JSON: `Content-Type: application/json` (or `application/*+json`); a
//!   POST without a body may leave the type out (AgentGym's clients post `/create` so);
//! - an `Origin` header, which browsers add to cross-site requests and programs do not, must
//!   name this server (the host rule below); `Origin: null` is refused;
//! - on a server without a bearer token, the `Host` header must name this server: `localhost`,
//!   a loopback address, the address it is bound to (any IP address when bound to all of
//!   them: a rebinding page cannot make the browser send an address), or a name given with
//!   `--allow-host` (`*` allows any). With a token a rebinding page has nothing to send.

use std::net::IpAddr;

use axum::http::{header, HeaderMap, Method, StatusCode};

use super::error::ApiError;

/// The rules of the module doc for one server.
#[derive(Debug, Clone)]
pub struct CrossSite {
    /// The address the server is bound to.
    pub bound: IpAddr,
    /// Host names allowed besides the server's addresses (lowercase; `*`: any).
    pub allowed_hosts: Vec<String>,
    /// Whether every request needs a bearer token (the `Host` rule is then not needed).
    pub has_token: bool,
}

impl CrossSite {
    /// `Ok` when the request may be served; the refusal names the header and how to allow it.
    pub fn check(&self, method: &Method, headers: &HeaderMap) -> Result<(), ApiError> {
        if !self.has_token {
            if let Some(host) = text(headers, header::HOST) {
                if !self.host_allowed(host_part(host)) {
                    return Err(forbidden(format!(
                        "Host {host:?} is not this server's address; start it with --allow-host {} \
                         (or with a --token) to serve that name",
                        host_part(host)
                    )));
                }
            }
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let origin = origin.to_str().unwrap_or("");
            let host = origin.split_once("://").map(|(_, rest)| host_part(rest));
            if !host.is_some_and(|h| self.host_allowed(h)) {
                return Err(forbidden(format!(
                    "requests from web pages of other sites are refused (Origin {origin:?}); \
                     --allow-host NAME allows a page served under NAME"
                )));
            }
        }
        if method == Method::POST {
            check_json_body(headers)?;
        }
        Ok(())
    }

    /// Whether `host` (no port) names this server (see the module doc).
    fn host_allowed(&self, host: &str) -> bool {
        let host = host.to_ascii_lowercase();
        if host == "localhost" || self.allowed_hosts.iter().any(|a| a == "*" || *a == host) {
            return true;
        }
        match host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
            Ok(ip) => ip.is_loopback() || ip == self.bound || self.bound.is_unspecified(),
            Err(_) => false,
        }
    }
}

/// `host` of `host:port`, `[v6]:port`, `host` (no port) or `host/path...`.
fn host_part(authority: &str) -> &str {
    let authority = authority.split('/').next().unwrap_or("");
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or("");
    }
    authority.rsplit_once(':').map_or(authority, |(host, _)| host)
}

fn check_json_body(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(kind) = headers.get(header::CONTENT_TYPE) else {
        let empty = text(headers, header::CONTENT_LENGTH).is_none_or(|n| n.trim() == "0")
            && !headers.contains_key(header::TRANSFER_ENCODING);
        return if empty {
            Ok(())
        } else {
            Err(unsupported("a request body needs `Content-Type: application/json`".into()))
        };
    };
    let media = kind.to_str().unwrap_or("").split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    if media == "application/json" || (media.starts_with("application/") && media.ends_with("+json")) {
        Ok(())
    } else {
        Err(unsupported(format!("the body must be JSON (`Content-Type: application/json`), not {media:?}")))
    }
}

fn text(headers: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn forbidden(message: String) -> ApiError {
    ApiError::new(StatusCode::FORBIDDEN, message)
}

fn unsupported(message: String) -> ApiError {
    ApiError::new(StatusCode::UNSUPPORTED_MEDIA_TYPE, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(header::HeaderName::from_bytes(k.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn loopback() -> CrossSite {
        CrossSite { bound: "127.0.0.1".parse().unwrap(), allowed_hosts: vec![], has_token: false }
    }

    fn status(gate: &CrossSite, method: Method, pairs: &[(&str, &str)]) -> Option<u16> {
        gate.check(&method, &headers(pairs)).err().map(|e| e.status.as_u16())
    }

    #[test]
    fn hosts_of_this_server_pass_and_rebinding_names_do_not() {
        let gate = loopback();
        for host in ["127.0.0.1:36001", "localhost:36001", "LOCALHOST", "[::1]:80", "127.0.0.1"] {
            assert_eq!(status(&gate, Method::GET, &[("host", host)]), None, "{host}");
        }
        for host in ["rebind.evil.example:36001", "evil.example", "10.0.0.1:36001"] {
            assert_eq!(status(&gate, Method::GET, &[("host", host)]), Some(403), "{host}");
        }
        let allowed = CrossSite { allowed_hosts: vec!["gpu-node-3".into()], ..loopback() };
        assert_eq!(status(&allowed, Method::GET, &[("host", "GPU-node-3:36001")]), None);
        let tokened = CrossSite { has_token: true, ..loopback() };
        assert_eq!(status(&tokened, Method::GET, &[("host", "rebind.evil.example")]), None);
        let any = CrossSite { bound: "0.0.0.0".parse().unwrap(), ..loopback() };
        assert_eq!(status(&any, Method::GET, &[("host", "10.0.0.1:36001")]), None);
        assert_eq!(status(&any, Method::GET, &[("host", "node.example:36001")]), Some(403));
    }

    #[test]
    fn foreign_origins_are_refused() {
        let gate = loopback();
        assert_eq!(status(&gate, Method::GET, &[("origin", "http://127.0.0.1:36001")]), None);
        for origin in ["https://evil.example", "null", "http://rebind.evil.example:36001"] {
            assert_eq!(status(&gate, Method::GET, &[("origin", origin)]), Some(403), "{origin}");
        }
        let tokened = CrossSite { has_token: true, ..loopback() };
        assert_eq!(status(&tokened, Method::GET, &[("origin", "https://evil.example")]), Some(403));
    }

    #[test]
    fn post_bodies_must_be_json() {
        let gate = loopback();
        let json = [("content-type", "application/json; charset=utf-8"), ("content-length", "2")];
        assert_eq!(status(&gate, Method::POST, &json), None);
        assert_eq!(status(&gate, Method::POST, &[("content-type", "application/problem+json")]), None);
        assert_eq!(status(&gate, Method::POST, &[("content-length", "0")]), None);
        assert_eq!(status(&gate, Method::POST, &[]), None);
        for kind in ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"] {
            assert_eq!(status(&gate, Method::POST, &[("content-type", kind)]), Some(415), "{kind}");
        }
        assert_eq!(status(&gate, Method::POST, &[("content-length", "12")]), Some(415));
        assert_eq!(status(&gate, Method::GET, &[("content-type", "text/plain")]), None);
    }
}
