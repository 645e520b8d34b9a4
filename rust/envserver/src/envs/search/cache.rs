//! Recent search results, shared by all sessions of an index: the episodes of a GRPO group ask
//! the same question and often send the same query in the same step, so one of them searches and
//! the others read its result.
//!
//! Two generations of at most `capacity / 2` entries each: lookups read the current generation,
//! then the previous one (moving a hit forward); when the current one is full it becomes the
//! previous and the oldest is dropped. That keeps recently used queries at the cost of one map
//! swap, with no per-entry bookkeeping. Results are the same with or without the cache.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::index::Hit;

/// A query's distinct tokens joined by spaces, and `k`.
pub type CacheKey = (String, usize);

#[derive(Default)]
struct Generations {
    current: HashMap<CacheKey, Arc<Vec<Hit>>>,
    previous: HashMap<CacheKey, Arc<Vec<Hit>>>,
}

/// A bounded map of recent results (see the module docstring).
pub struct QueryCache {
    generations: Mutex<Generations>,
    /// Entries per generation; 0 turns the cache off.
    per_generation: usize,
    pub hits: AtomicU64,
    pub misses: AtomicU64,
}

impl QueryCache {
    /// A cache of about `capacity` entries (0: off).
    pub fn new(capacity: usize) -> Self {
        Self {
            generations: Mutex::new(Generations::default()),
            per_generation: capacity / 2,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// The cached result of `key`, if any.
    pub fn get(&self, key: &CacheKey) -> Option<Arc<Vec<Hit>>> {
        if self.per_generation == 0 {
            return None;
        }
        let mut g = self.generations.lock();
        let found = match g.current.get(key) {
            Some(hits) => Some(hits.clone()),
            None => g.previous.remove(key).inspect(|hits| Self::put(&mut g, self.per_generation, key, hits)),
        };
        let counter = if found.is_some() { &self.hits } else { &self.misses };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// Remembers `hits` as the result of `key`.
    pub fn insert(&self, key: &CacheKey, hits: &Arc<Vec<Hit>>) {
        if self.per_generation > 0 {
            Self::put(&mut self.generations.lock(), self.per_generation, key, hits);
        }
    }

    fn put(g: &mut Generations, per_generation: usize, key: &CacheKey, hits: &Arc<Vec<Hit>>) {
        if g.current.len() >= per_generation {
            g.previous = std::mem::take(&mut g.current);
        }
        g.current.insert(key.clone(), hits.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(q: &str) -> CacheKey {
        (q.to_string(), 3)
    }

    fn hits(id: &str) -> Arc<Vec<Hit>> {
        Arc::new(vec![Hit { id: id.into(), contents: String::new(), score: 1.0, row: 0 }])
    }

    #[test]
    fn recent_entries_stay_and_old_ones_go() {
        let cache = QueryCache::new(4); // two generations of two
        cache.insert(&key("a"), &hits("a"));
        cache.insert(&key("b"), &hits("b"));
        cache.insert(&key("c"), &hits("c")); // a, b move to the previous generation
        assert_eq!(cache.get(&key("a")).unwrap()[0].id, "a"); // moved forward again
        cache.insert(&key("d"), &hits("d")); // current {c, a} is full: b is dropped
        assert!(cache.get(&key("b")).is_none());
        for q in ["a", "c", "d"] {
            assert_eq!(cache.get(&key(q)).unwrap()[0].id, q);
        }
        assert!(cache.get(&("a".to_string(), 5)).is_none(), "k is part of the key");
        assert_eq!(cache.hits.load(Ordering::Relaxed), 4);
        assert_eq!(cache.misses.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn capacity_zero_turns_the_cache_off() {
        let cache = QueryCache::new(0);
        cache.insert(&key("a"), &hits("a"));
        assert!(cache.get(&key("a")).is_none());
    }
}
