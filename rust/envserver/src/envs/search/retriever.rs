//! A remote retriever speaking the retrieval-server API of Search-R1 (`retrieval_server.py`), so
//! a dense E5/FAISS retriever on a GPU serves the search env unchanged:
//!
//! `POST <url> {"queries": [q, ...], "topk": k, "return_scores": true}` answers
//! `{"result": [[{"document": {"id": ..., "contents": "\"Title\"\ntext"}, "score": s}, ...], ...]}`,
//! one list per query, in the order sent. A server that leaves the scores out answers the bare
//! documents; those are read too (score 0).
//!
//! All searches of one batched step go out as one request ([`RemoteRetriever::retrieve`], called
//! from the factory's `prepare_step`). The HTTP client is the one remote env servers use
//! ([`crate::client::ProcessClients`]: keep-alive, fork-safe, one deadline per call covering the
//! connection, the request and the whole reply). A request that fails (no connection, timeout,
//! an HTTP error status, a reply that is not the API's shape or has the wrong number of lists)
//! fails the searches it carried; a malformed list fails only its own query.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::index::Hit;
use crate::client::{ClientOptions, ProcessClients, DEFAULT_MAX_REPLY_BYTES};
use crate::env::EnvError;

/// Requests one process may have in flight to the retriever (concurrent batched steps).
const MAX_IN_FLIGHT: usize = 16;
/// The longest wait for a connection, within the call's timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A query's result, or why the retriever gave none.
pub type Retrieved = Result<Arc<Vec<Hit>>, String>;

/// A retrieval server at one URL (see the module docstring).
pub struct RemoteRetriever {
    url: String,
    clients: ProcessClients,
}

impl RemoteRetriever {
    /// A retriever at `url` (the whole endpoint, e.g. `http://127.0.0.1:8000/retrieve`) whose
    /// calls give up after `timeout`. Nothing is contacted until the first search.
    pub fn new(url: &str, timeout: Duration) -> Result<Self, EnvError> {
        let invalid = |message: String| EnvError::InvalidOption { key: "retriever".into(), message };
        if !url.starts_with("http://") || url.len() <= "http://".len() {
            let https = if url.starts_with("https://") { " (https is not supported by this build)" } else { "" };
            return Err(invalid(format!("{url:?} is not an http:// URL{https}")));
        }
        let options = ClientOptions {
            max_in_flight: MAX_IN_FLIGHT,
            connect_timeout: CONNECT_TIMEOUT.min(timeout),
            timeout,
            token: None,
            max_reply_bytes: DEFAULT_MAX_REPLY_BYTES,
        };
        let clients = ProcessClients::new(vec![url.to_string()], options);
        clients.get().map_err(invalid)?;
        Ok(Self { url: url.to_string(), clients })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// The top `k` passages of each query, in order, from one request. A failed request fails
    /// every query with the same message, which names the retriever and the cause.
    pub fn retrieve(&self, queries: &[&str], k: usize) -> Vec<Retrieved> {
        match self.request(queries, k) {
            Ok(results) => results,
            Err(e) => vec![Err(format!("retriever {}: {e}", self.url)); queries.len()],
        }
    }

    fn request(&self, queries: &[&str], k: usize) -> Result<Vec<Retrieved>, String> {
        if queries.is_empty() {
            return Ok(Vec::new());
        }
        let io = self.clients.get()?;
        let body = json!({"queries": queries, "topk": k, "return_scores": true});
        let reply = io.runtime.block_on(io.clients[0].post("", &body)).map_err(|e| e.to_string())?;
        let url = &self.url;
        let results = parse_reply(&reply, queries.len(), k)?;
        Ok(results.into_iter().map(|r| r.map(Arc::new).map_err(|e| format!("retriever {url}: {e}"))).collect())
    }
}

/// The per-query results of a `/retrieve` reply for `n` queries, each cut to `k` passages.
/// `Err`: the reply as a whole is unusable; an inner `Err`: that query's list is.
pub fn parse_reply(reply: &Value, n: usize, k: usize) -> Result<Vec<Result<Vec<Hit>, String>>, String> {
    let lists = reply
        .get("result")
        .and_then(Value::as_array)
        .ok_or_else(|| format!("the reply has no \"result\" list: {}", snippet(reply)))?;
    if lists.len() != n {
        return Err(format!("the reply has {} result lists for {n} queries", lists.len()));
    }
    Ok(lists.iter().map(|list| parse_list(list, k)).collect())
}

fn parse_list(list: &Value, k: usize) -> Result<Vec<Hit>, String> {
    let entries = list.as_array().ok_or_else(|| format!("a query's result is not a list: {}", snippet(list)))?;
    entries.iter().take(k).enumerate().map(|(rank, entry)| parse_entry(entry, rank)).collect()
}

/// `{"document": {...}, "score": s}` or a bare document; the document needs a string
/// `contents`, its `id` may be a string or a number (absent: empty).
fn parse_entry(entry: &Value, rank: usize) -> Result<Hit, String> {
    let (document, score) = match entry.get("document") {
        Some(document) => (document, entry.get("score")),
        None => (entry, None),
    };
    let contents = document
        .get("contents")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("passage {} has no string \"contents\": {}", rank + 1, snippet(entry)))?;
    let id = match document.get("id") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => String::new(),
    };
    let score = match score {
        None | Some(Value::Null) => 0.0,
        Some(value) => {
            value.as_f64().ok_or_else(|| format!("passage {} has a score that is not a number", rank + 1))? as f32
        }
    };
    // The corpus row is not known remotely: the rank stands in for it.
    Ok(Hit { id, contents: contents.to_string(), score, row: rank as u64 })
}

/// The start of a JSON value, for messages.
fn snippet(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(120) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_of_search_r1s_shape_are_read() {
        let reply = json!({"result": [
            [{"document": {"id": "7", "contents": "\"Paris\"\nParis is a city."}, "score": 1.5},
             {"document": {"id": 8, "contents": "\"Lyon\"\nLyon."}, "score": 0.5}],
            [],
            [{"id": "3", "contents": "\"Rhone\"\nA river."}],
        ]});
        let out = parse_reply(&reply, 3, 1).unwrap();
        let first = out[0].as_ref().unwrap();
        assert_eq!(first.len(), 1, "cut to k");
        assert_eq!((first[0].id.as_str(), first[0].score), ("7", 1.5));
        assert!(out[1].as_ref().unwrap().is_empty());
        let bare = &out[2].as_ref().unwrap()[0];
        assert_eq!((bare.id.as_str(), bare.contents.as_str(), bare.score), ("3", "\"Rhone\"\nA river.", 0.0));
        let two = parse_reply(&reply, 3, 5).unwrap();
        assert_eq!(two[0].as_ref().unwrap()[1].id, "8");
    }

    #[test]
    fn unusable_replies_say_why() {
        let cases = [
            (json!({"results": []}), "no \"result\" list"),
            (json!({"result": [[]]}), "1 result lists for 2 queries"),
            (json!([1, 2]), "no \"result\" list"),
        ];
        for (reply, want) in cases {
            let err = parse_reply(&reply, 2, 3).err().unwrap();
            assert!(err.contains(want), "{reply} -> {err}");
        }
        let reply = json!({"result": [
            [{"document": {"id": "1"}, "score": 1.0}],
            "oops",
            [{"document": {"contents": "\"T\"\nx"}, "score": "high"}],
            [{"document": {"contents": "\"T\"\nx"}, "score": 2}],
        ]});
        let out = parse_reply(&reply, 4, 3).unwrap();
        assert!(out[0].as_ref().err().unwrap().contains("no string \"contents\""));
        assert!(out[1].as_ref().err().unwrap().contains("not a list"));
        assert!(out[2].as_ref().err().unwrap().contains("score that is not a number"));
        assert_eq!(out[3].as_ref().unwrap()[0].score, 2.0, "the other queries are unaffected");
    }

    #[test]
    fn only_http_urls_are_accepted() {
        for url in ["127.0.0.1:8000/retrieve", "https://host/retrieve", "http://"] {
            let err = RemoteRetriever::new(url, Duration::from_secs(1)).err().unwrap().to_string();
            assert!(err.contains("retriever") && err.contains("not an http:// URL"), "{err}");
        }
        assert!(RemoteRetriever::new("http://127.0.0.1:9/retrieve", Duration::from_secs(1)).is_ok());
    }

    #[test]
    fn an_unreachable_retriever_fails_every_query_of_the_request() {
        // Port 9 (discard) on loopback: nothing listens there on test machines.
        let retriever = RemoteRetriever::new("http://127.0.0.1:9/retrieve", Duration::from_secs(2)).unwrap();
        let out = retriever.retrieve(&["a", "b"], 3);
        assert_eq!(out.len(), 2);
        for r in out {
            let err = r.err().unwrap();
            assert!(err.starts_with("retriever http://127.0.0.1:9/retrieve: could not connect"), "{err}");
        }
    }
}
