//! agentgym's environment multiplexer: native text envs (BabyAI-text, TextCraft) hosted by
//! thousands in one [`pool::EnvPool`], stepped in batches by the calling thread and
//! persistent helper threads ([`workers::Workers`]).
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
