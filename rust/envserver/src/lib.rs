//! agentgym's environment multiplexer: native text envs (BabyAI-text, TextCraft) hosted by
//! thousands in one [`pool::EnvPool`], stepped in batches on a rayon pool.
//!
//! Everything here is plain Rust and tested with `cargo test`; the PyO3 bindings live in
//! `python.rs` behind the `python` feature.

pub mod env;
pub mod envs;
pub mod pool;
pub mod remote;
pub mod rng;
pub mod server;

#[cfg(feature = "python")]
mod python;

pub use env::{EnvError, EnvFactory, Options, StepOutcome, TextEnv};
pub use pool::{EnvPool, PoolError, StepResult};
