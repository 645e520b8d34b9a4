//! The allocator: mimalloc as the Python extension's global allocator (features `python` and
//! `mimalloc`, both on in the wheel), and handing freed memory back to the OS on demand. In
//! other builds the binary picks the allocator (the `steps` example sets mimalloc itself) and
//! [`release_freed_memory`] does nothing.

/// Hands the calling thread's freed memory back to the OS now, where the allocator would
/// wait (the extension's mimalloc); nothing otherwise.
pub(crate) fn release_freed_memory() {
    #[cfg(all(feature = "python", feature = "mimalloc"))]
    allocator::collect();
}

/// The Python extension's allocator (feature `mimalloc`, on in the wheel): about 1.5x faster
/// BabyAI steps through Python than glibc's malloc, mostly because observation strings are
/// made on helper threads and freed on the caller's (bench/RESULTS.md).
#[cfg(all(feature = "python", feature = "mimalloc"))]
mod allocator {
    #[global_allocator]
    static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

    // Option numbers of mimalloc 2's `mi_option_e` (the `v2` feature builds mimalloc 2).
    const EAGER_COMMIT: libmimalloc_sys::mi_option_t = 3;
    const ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;
    const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

    /// Runs when the extension is loaded, before its first allocation: freed pages go back to
    /// the OS after 1 ms (`purge_delay`; mimalloc's default is 10 ms), and segments and arenas
    /// are committed on use. With mimalloc's defaults, RSS stayed at its peak after closing
    /// 10,000 sessions and the peak crept up over create/close cycles (bench/bench_memory.py).
    /// A delay of 0 purged a page as soon as its last block was freed, so a loop that frees
    /// what its previous round allocated (an HTTP client with 64 requests in flight) faulted
    /// fresh pages in every round: 14% of the client's CPU, ~20% fewer requests/s than with
    /// 1 ms. Purges happen at a thread's later allocations, so a quiet process keeps what it
    /// freed last; `EnvPool::close` hands it back on every pool thread ([`collect`]). The same
    /// options set in the environment (`MIMALLOC_PURGE_DELAY`, ...) still win.
    extern "C" fn set_options() {
        extern "C" {
            fn getenv(name: *const std::ffi::c_char) -> *const std::ffi::c_char;
        }
        let defaults = [
            (c"MIMALLOC_PURGE_DELAY", PURGE_DELAY, 1),
            (c"MIMALLOC_ARENA_EAGER_COMMIT", ARENA_EAGER_COMMIT, 0),
            (c"MIMALLOC_EAGER_COMMIT", EAGER_COMMIT, 0),
        ];
        for (name, option, value) in defaults {
            // SAFETY: getenv reads a NUL-terminated name and allocates nothing; mi_option_set
            // only stores the value.
            unsafe {
                if getenv(name.as_ptr()).is_null() {
                    libmimalloc_sys::mi_option_set(option, value);
                }
            }
        }
    }

    /// Frees the calling thread's empty pages and purges what it freed, without waiting for
    /// `purge_delay` or a later allocation.
    pub fn collect() {
        // SAFETY: mi_collect walks the calling thread's own heap and the shared arenas, which
        // mimalloc locks itself; it is safe to call from any thread at any time.
        unsafe { libmimalloc_sys::mi_collect(true) }
    }

    #[cfg(target_os = "linux")]
    #[used]
    #[link_section = ".init_array"]
    static SET_OPTIONS: extern "C" fn() = set_options;
}
