//! The registry of native envs. Adding an env: a folder under `envs/` plus one line here.

use std::sync::Arc;

use crate::env::{EnvError, Options, SharedFactory};

pub mod babyai;
pub mod search;
pub mod textcraft;
pub mod webnav;

/// Names accepted by [`factory`].
pub const ENV_NAMES: &[&str] = &["babyai", "search", "textcraft", "webnav"];

/// Builds the factory for env `name` with its options.
pub fn factory(name: &str, options: &Options) -> Result<SharedFactory, EnvError> {
    match name {
        "babyai" => Ok(Arc::new(babyai::BabyAiFactory::new(options)?)),
        "search" => Ok(Arc::new(search::SearchFactory::new(options)?)),
        "textcraft" => Ok(Arc::new(textcraft::TextCraftFactory::new(options)?)),
        "webnav" => Ok(Arc::new(webnav::WebNavFactory::new(options)?)),
        _ => Err(EnvError::UnknownEnv { name: name.to_string(), known: ENV_NAMES.join(", ") }),
    }
}
