//! The server against clients that hold connections without using them and against requests
//! a browser sends for a page of another site, over real sockets.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use agentgym_envserver::server::{Server, ServerConfig};

fn server(max_connections: usize, timeout: Duration) -> Server {
    let config = ServerConfig {
        env: "babyai".into(),
        port: 0,
        workers: Some(2),
        env_threads: Some(1),
        max_connections,
        header_read_timeout: timeout,
        body_read_timeout: timeout,
        ..Default::default()
    };
    Server::start(config).expect("server starts")
}

/// Sends `request` on a new connection and reads the reply until the server closes it or
/// `patience` passes; the reply's status (None: no complete status line) and its text.
fn exchange(addr: SocketAddr, request: &str, patience: Duration) -> (Option<u16>, String) {
    let mut tcp = TcpStream::connect(addr).expect("connect");
    tcp.set_read_timeout(Some(patience)).unwrap();
    tcp.write_all(request.as_bytes()).unwrap();
    let mut reply = Vec::new();
    let _ = tcp.read_to_end(&mut reply);
    let text = String::from_utf8_lossy(&reply).into_owned();
    let status = text.strip_prefix("HTTP/1.1 ").and_then(|rest| rest.get(..3)).and_then(|code| code.parse().ok());
    (status, text)
}

fn get_health(addr: SocketAddr) -> String {
    format!("GET /health HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")
}

/// Connections that hold a slot: `count` of them, each having sent `prefix` (maybe nothing).
fn hold(addr: SocketAddr, count: usize, prefix: &str) -> Vec<TcpStream> {
    (0..count)
        .map(|_| {
            let mut tcp = TcpStream::connect(addr).expect("connect");
            tcp.write_all(prefix.as_bytes()).unwrap();
            tcp
        })
        .collect()
}

/// 32 sockets (four times the server's cap of 8) each send what `head` makes of the server's
/// address and then nothing more; a new client's `/health` is still answered in time.
fn a_flood_does_not_keep_a_new_client_waiting(head: impl Fn(SocketAddr) -> String) {
    let timeout = Duration::from_secs(3);
    let s = server(8, timeout);
    let _flood = hold(s.addr(), 32, &head(s.addr()));
    std::thread::sleep(Duration::from_millis(200));
    let start = Instant::now();
    let (status, text) = exchange(s.addr(), &get_health(s.addr()), timeout);
    assert_eq!(status, Some(200), "{text}");
    assert!(start.elapsed() < timeout, "served after {:?}", start.elapsed());
}

#[test]
fn a_flood_of_silent_sockets_four_times_the_cap_does_not_keep_a_new_client_waiting() {
    a_flood_does_not_keep_a_new_client_waiting(|_| String::new());
}

#[test]
fn a_flood_of_slow_bodies_four_times_the_cap_does_not_keep_a_new_client_waiting() {
    a_flood_does_not_keep_a_new_client_waiting(|addr| {
        format!(
            "POST /step HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{"
        )
    });
}

#[test]
fn a_body_that_stops_arriving_is_answered_408_and_the_connection_closed() {
    let timeout = Duration::from_millis(500);
    let s = server(8, timeout);
    let head = format!(
        "POST /step HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{",
        s.addr()
    );
    let start = Instant::now();
    let (status, text) = exchange(s.addr(), &head, Duration::from_secs(5));
    let waited = start.elapsed();
    assert_eq!(status, Some(408), "{text}");
    assert!(text.to_ascii_lowercase().contains("connection: close"), "{text}");
    assert!(text.contains("did not arrive within"), "{text}");
    assert!(waited >= timeout && waited < Duration::from_secs(3), "{waited:?}");
}

fn post(addr: SocketAddr, path: &str, headers: &str, body: &str) -> (Option<u16>, String) {
    let request =
        format!("POST {path} HTTP/1.1\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
    exchange(addr, &request, Duration::from_secs(5))
}

#[test]
fn cross_site_requests_are_refused_and_change_nothing() {
    let s = server(64, Duration::from_secs(10));
    let addr = s.addr();
    let host = format!("Host: {addr}\r\n");
    let json = "Content-Type: application/json\r\n";
    let (status, text) = post(addr, "/batch/create", &format!("{host}{json}"), r#"{"n": 3}"#);
    assert_eq!(status, Some(200), "{text}");
    assert_eq!(s.state().pool.len(), 3);
    let ids = r#"{"ids": [0, 1, 2, 3, 4]}"#;
    let foreign = [
        (format!("{host}Content-Type: text/plain\r\nOrigin: https://evil.example\r\n"), 403),
        (format!("{host}Content-Type: text/plain\r\n"), 415),
        (format!("{host}Content-Type: application/x-www-form-urlencoded\r\n"), 415),
        (format!("{host}{json}Origin: https://evil.example\r\n"), 403),
        (format!("{host}{json}Origin: null\r\n"), 403),
        (format!("Host: rebind.evil.example:{}\r\n{json}", addr.port()), 403),
        (host.clone(), 415),
    ];
    for (headers, want) in foreign {
        let (status, text) = post(addr, "/batch/close", &headers, ids);
        assert_eq!(status, Some(want), "{headers:?}: {text}");
    }
    let (status, text) = post(addr, "/batch/create", &format!("{host}Content-Type: text/plain\r\n"), r#"{"n": 5}"#);
    assert_eq!(status, Some(415), "{text}");
    assert_eq!(s.state().pool.len(), 3, "no refused request closed or opened a session");
    let rebound = "GET /health HTTP/1.1\r\nHost: rebind.evil.example\r\nConnection: close\r\n\r\n";
    let (status, text) = exchange(addr, rebound, Duration::from_secs(5));
    assert_eq!(status, Some(403), "DNS rebinding reads nothing: {text}");
    assert!(text.contains("--allow-host"), "{text}");
    // AgentGym's clients post /create without a body or a content type
    let (status, text) = post(addr, "/create", &host, "");
    assert_eq!(status, Some(200), "{text}");
}

#[test]
fn allowed_hosts_are_served() {
    let config = ServerConfig {
        env: "babyai".into(),
        port: 0,
        workers: Some(1),
        env_threads: Some(1),
        allowed_hosts: vec!["Envs.Internal".into()],
        ..Default::default()
    };
    let s = Server::start(config).unwrap();
    let request = |host: &str| format!("GET /health HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    let port = s.addr().port();
    assert_eq!(exchange(s.addr(), &request(&format!("envs.internal:{port}")), Duration::from_secs(5)).0, Some(200));
    assert_eq!(exchange(s.addr(), &request(&format!("other.internal:{port}")), Duration::from_secs(5)).0, Some(403));
}
