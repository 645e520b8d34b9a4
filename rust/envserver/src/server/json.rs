//! Reply bodies: a `serde_json::Value` written as JSON text (the same bytes `serde_json::to_vec`
//! writes) into chunks of at most [`CHUNK`] bytes, sent with their exact length.
//!
//! Why not `serde_json::to_vec`: profiles of `/step` and `/batch/step` (bench/RESULTS.md) found
//! two costs there. serde_json escapes strings one byte at a time (observations are most of a
//! reply, with a quote every few dozen bytes), and a `/batch/step` reply of 1,024 sessions is
//! one ~800 KiB buffer grown by doubling: the allocator hands such large blocks back to the OS
//! as soon as they are freed (the extension's mimalloc options keep RSS down when sessions
//! close), so every reply faulted its pages in anew. Chunks of 64 KiB are blocks the allocator
//! keeps and reuses, and the escaping here checks eight bytes at a time.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use serde_json::Value;

/// The largest chunk of a body, in bytes: below mimalloc's large-object size (128 KiB), whose
/// blocks are purged when freed.
pub const CHUNK: usize = 64 << 10;

/// JSON text being written, in chunks.
#[derive(Debug, Default)]
pub struct JsonWriter {
    done: VecDeque<Bytes>,
    current: Vec<u8>,
    len: usize,
}

impl JsonWriter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends raw bytes (already JSON).
    pub fn raw(&mut self, mut bytes: &[u8]) {
        self.len += bytes.len();
        while !bytes.is_empty() {
            let room = CHUNK - self.current.len();
            let (now, later) = bytes.split_at(room.min(bytes.len()));
            self.grow(now.len());
            self.current.extend_from_slice(now);
            bytes = later;
            if self.current.len() == CHUNK {
                self.done.push_back(Bytes::from(std::mem::take(&mut self.current)));
            }
        }
    }

    /// Makes room for `n` more bytes in the current chunk (`n` fits in it): capacity doubles,
    /// as a `Vec`'s does, but never past [`CHUNK`].
    fn grow(&mut self, n: usize) {
        let need = self.current.len() + n;
        if need > self.current.capacity() {
            let target = need.max(2 * self.current.capacity()).clamp(256, CHUNK);
            self.current.reserve_exact(target - self.current.len());
        }
    }

    /// Appends `value` as serde_json writes it: objects in their map's order, strings escaped
    /// as serde_json escapes them, numbers in serde_json's own text.
    pub fn value(&mut self, value: &Value) {
        match value {
            Value::Null => self.raw(b"null"),
            Value::Bool(true) => self.raw(b"true"),
            Value::Bool(false) => self.raw(b"false"),
            Value::Number(n) => {
                let text = serde_json::to_vec(n).unwrap_or_else(|_| b"null".to_vec());
                self.raw(&text);
            }
            Value::String(s) => self.string(s),
            Value::Array(items) => {
                self.raw(b"[");
                for (k, item) in items.iter().enumerate() {
                    if k > 0 {
                        self.raw(b",");
                    }
                    self.value(item);
                }
                self.raw(b"]");
            }
            Value::Object(map) => {
                self.raw(b"{");
                for (k, (key, item)) in map.iter().enumerate() {
                    if k > 0 {
                        self.raw(b",");
                    }
                    self.string(key);
                    self.raw(b":");
                    self.value(item);
                }
                self.raw(b"}");
            }
        }
    }

    /// Appends `text` as a JSON string: `"` and `\` and control characters escaped, the rest
    /// as it is (serde_json's rules).
    pub fn string(&mut self, text: &str) {
        // Escaped, a byte takes at most 6 bytes; a string that may not fit one chunk is
        // written run by run.
        let most = 2 + 6 * text.len();
        if most > CHUNK {
            return self.long_string(text);
        }
        if self.current.len() + most > CHUNK {
            self.done.push_back(Bytes::from(std::mem::take(&mut self.current)));
        }
        self.grow(most);
        // The chunk has room for the worst case: eight bytes are checked at a time and copied
        // as one word when none needs an escape; only such a word is copied byte by byte.
        let out = &mut self.current;
        let before = out.len();
        out.push(b'"');
        let mut words = text.as_bytes().chunks_exact(8);
        for word in &mut words {
            let mut w = [0u8; 8];
            w.copy_from_slice(word);
            if needs_escape(u64::from_le_bytes(w)) {
                w.iter().for_each(|&b| push_escaped(out, b));
            } else {
                out.extend_from_slice(&w);
            }
        }
        words.remainder().iter().for_each(|&b| push_escaped(out, b));
        out.push(b'"');
        self.len += out.len() - before;
    }

    /// [`JsonWriter::string`] for text longer than a chunk: runs without escapes copied whole.
    fn long_string(&mut self, text: &str) {
        self.raw(b"\"");
        let bytes = text.as_bytes();
        let mut start = 0;
        for (at, &b) in bytes.iter().enumerate() {
            if let Some(escape) = escape(b) {
                self.raw(&bytes[start..at]);
                self.raw(escape.as_bytes());
                start = at + 1;
            }
        }
        self.raw(&bytes[start..]);
        self.raw(b"\"");
    }

    /// The body: the chunks written, with their total length.
    pub fn finish(mut self) -> JsonBody {
        if !self.current.is_empty() {
            self.done.push_back(Bytes::from(self.current));
        }
        JsonBody { chunks: self.done, remaining: self.len as u64 }
    }
}

/// `value` as a JSON body.
pub fn to_body(value: &Value) -> JsonBody {
    let mut out = JsonWriter::new();
    out.value(value);
    out.finish()
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// Whether a byte of `w` is `"`, `\` or below 0x20 (exact: bytes of 0x80 and above, parts of
/// non-ASCII characters, never count).
fn needs_escape(w: u64) -> bool {
    let has_zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGHS != 0;
    let below_space = w.wrapping_sub(ONES * 0x20) & !w & HIGHS != 0;
    below_space || has_zero(w ^ (ONES * u64::from(b'"'))) || has_zero(w ^ (ONES * u64::from(b'\\')))
}

fn push_escaped(out: &mut Vec<u8>, b: u8) {
    match escape(b) {
        Some(escape) => out.extend_from_slice(escape.as_bytes()),
        None => out.push(b),
    }
}

/// serde_json's escape of one byte, if it needs one.
fn escape(b: u8) -> Option<&'static str> {
    const CONTROL: [&str; 32] = [
        "\\u0000", "\\u0001", "\\u0002", "\\u0003", "\\u0004", "\\u0005", "\\u0006", "\\u0007", "\\b", "\\t", "\\n",
        "\\u000b", "\\f", "\\r", "\\u000e", "\\u000f", "\\u0010", "\\u0011", "\\u0012", "\\u0013", "\\u0014",
        "\\u0015", "\\u0016", "\\u0017", "\\u0018", "\\u0019", "\\u001a", "\\u001b", "\\u001c", "\\u001d", "\\u001e",
        "\\u001f",
    ];
    match b {
        b'"' => Some("\\\""),
        b'\\' => Some("\\\\"),
        0..=0x1f => Some(CONTROL[usize::from(b)]),
        _ => None,
    }
}

/// A reply body of JSON chunks with its exact length (sent as `Content-Length`).
#[derive(Debug)]
pub struct JsonBody {
    chunks: VecDeque<Bytes>,
    remaining: u64,
}

impl Body for JsonBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let chunk = self.chunks.pop_front();
        if let Some(c) = &chunk {
            self.remaining -= c.len() as u64;
        }
        Poll::Ready(chunk.map(|c| Ok(Frame::data(c))))
    }

    fn is_end_stream(&self) -> bool {
        self.chunks.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn text(value: &Value) -> Vec<u8> {
        let body = to_body(value);
        assert_eq!(body.size_hint().exact(), Some(body.chunks.iter().map(|c| c.len() as u64).sum()));
        assert!(body.chunks.iter().all(|c| c.len() <= CHUNK && !c.is_empty()));
        body.chunks.iter().flat_map(|c| c.iter().copied()).collect()
    }

    #[test]
    fn writes_what_serde_json_writes() {
        let every_byte: String = (0u8..0x80).map(char::from).collect();
        let values = [
            json!(null),
            json!({"observation": "Available actions: [\"turn left\", \"go to red ball 1\"]", "reward": 0.94375,
                   "score": 1.5e-10, "done": false, "id": 7, "neg": -3, "big": u64::MAX}),
            json!([every_byte, "snow \u{2603} and \u{1F600}, tab\tand \\ backslash", "", "12345678\"", "\u{7f}\u{80}"]),
            json!({"nested": [[], {}, [{"a": [true, null]}]], "e": "ends with a quote\""}),
        ];
        for value in values {
            assert_eq!(text(&value), serde_json::to_vec(&value).unwrap(), "{value}");
        }
    }

    #[test]
    fn long_replies_split_into_chunks_and_keep_their_bytes() {
        let observations: Vec<String> =
            (0..2000).map(|i| format!("obs {i}: \"quoted\" {}", "x".repeat(i % 300))).collect();
        let value = json!({"observations": observations, "dones": vec![false; 2000]});
        let body = to_body(&value);
        assert!(body.chunks.len() > 4, "{} chunks", body.chunks.len());
        assert_eq!(text(&value), serde_json::to_vec(&value).unwrap());
    }

    #[test]
    fn strings_longer_than_a_chunk_are_escaped_too() {
        let long = "a \"quoted\"\n line, ".repeat(CHUNK / 8);
        let value = json!({"long": long, "after": "short \"one\""});
        assert_eq!(text(&value), serde_json::to_vec(&value).unwrap());
    }

    #[test]
    fn needs_escape_is_exact_on_every_byte_position() {
        for b in 0u8..=255 {
            for pos in 0..8 {
                let mut w = [b'a'; 8];
                w[pos] = b;
                let want = b < 0x20 || b == b'"' || b == b'\\';
                assert_eq!(needs_escape(u64::from_le_bytes(w)), want, "byte {b:#x} at {pos}");
            }
        }
    }
}
