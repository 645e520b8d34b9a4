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
pub use server::{CallError, ClientOptions, Reply, ServerClient, DEFAULT_MAX_REPLY_BYTES};

/// The header in which agentgym-envserver names its instance (an id drawn when it starts) on
/// every authorized reply, and in which a client names the instance its sessions were created
/// on: a server of another instance (restarted on the same address) refuses such a request
/// with 410 instead of acting on sessions that now belong to someone else.
pub const INSTANCE_HEADER: &str = "x-agentgym-instance";

/// The header in which a client numbers each request and agentgym-envserver echoes the number
/// on its reply: a reply carrying another number answers another request (a server or proxy
/// that sent two responses to one request), and the connection it came on is dropped.
pub const REQUEST_HEADER: &str = "x-agentgym-request";
