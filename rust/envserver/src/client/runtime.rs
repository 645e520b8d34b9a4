//! The HTTP clients of one process: a tokio runtime plus one [`ServerClient`] per URL, built on
//! first use and rebuilt after a fork (a child must not touch its parent's runtime threads or
//! connections; the parent's copies are leaked in the child, not dropped).
//!
//! Shared by [`crate::remote::RemotePool`] (sessions on env servers) and the search env's
//! remote retriever, so both speak HTTP through the same client, pool and timeout rules.

use std::sync::Arc;

use parking_lot::Mutex;

use super::server::{ClientOptions, ServerClient};

/// This process's runtime and clients (see the module docstring).
pub struct Io {
    pid: u32,
    pub runtime: tokio::runtime::Runtime,
    /// One client per URL, in the order given.
    pub clients: Vec<Arc<ServerClient>>,
}

/// Builds and keeps an [`Io`] per process for a fixed list of URLs.
pub struct ProcessClients {
    urls: Vec<String>,
    options: ClientOptions,
    slot: Mutex<Option<Arc<Io>>>,
}

impl ProcessClients {
    /// Clients for `urls`; nothing is built or contacted until [`ProcessClients::get`].
    pub fn new(urls: Vec<String>, options: ClientOptions) -> Self {
        Self { urls, options, slot: Mutex::new(None) }
    }

    pub fn urls(&self) -> &[String] {
        &self.urls
    }

    /// This process's runtime and clients, built now if this process has none yet.
    pub fn get(&self) -> Result<Arc<Io>, String> {
        let pid = std::process::id();
        let mut slot = self.slot.lock();
        if let Some(io) = slot.as_ref() {
            if io.pid == pid {
                return Ok(Arc::clone(io));
            }
        }
        if let Some(stale) = slot.take() {
            std::mem::forget(stale);
        }
        // One thread drives the requests of a call: they are I/O-bound, and a current-thread
        // runtime starts no threads a forked child would lose.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the HTTP client runtime: {e}"))?;
        let clients = self
            .urls
            .iter()
            .map(|url| ServerClient::new(url, &self.options).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        let io = Arc::new(Io { pid, runtime, clients });
        *slot = Some(Arc::clone(&io));
        Ok(io)
    }
}
