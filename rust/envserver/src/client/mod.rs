//! The HTTP client of the crate: pooled keep-alive connections to one server each, a cap on
//! requests in flight, one deadline per call, capped replies, and errors that say whether a
//! request can have reached its server ([`server`]); and the per-process runtime that drives
//! them, rebuilt after a fork ([`runtime`]).
//!
//! Used by [`crate::remote`] (sessions on env servers) and the search env's remote retriever,
//! so both speak HTTP under the same rules; it depends on neither.

mod runtime;
mod server;

pub use runtime::{Io, ProcessClients};
pub use server::{CallError, ClientOptions, ServerClient, DEFAULT_MAX_REPLY_BYTES};
