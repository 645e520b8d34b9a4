//! agentgym's environment multiplexer: native text envs hosted by thousands in one
//! [`pool::EnvPool`], stepped in batches by the calling thread and persistent helper threads
//! ([`workers::Workers`]).
//!
//! The native envs ([`envs`], one folder each): BabyAI-text (`babyai`), TextCraft
//! (`textcraft`), Deep Search (`search`: question answering over an embedded BM25 index) and
//! web navigation (`webnav`). [`remote::RemotePool`] drives sessions on AgentGym-style HTTP
//! servers behind the same batched API; [`server`] serves an `EnvPool` over that protocol.
//!
//! Everything here is plain Rust and tested with `cargo test`; the PyO3 bindings live in
//! `python.rs` behind the `python` feature.

mod alloc;
pub mod client;
pub mod env;
pub mod envs;
pub mod fasthash;
pub mod np_rng;
pub mod pool;
pub mod pytext;
pub mod remote;
pub mod rng;
pub mod server;
pub mod workers;

#[cfg(feature = "python")]
mod python;

pub use env::{EnvError, EnvFactory, ExpertMove, Options, StepOutcome, TextEnv};
pub use pool::{EnvPool, PoolError, StepResult};
