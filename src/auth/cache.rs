//! A small bounded cache whose entries expire, for webhook answers (TokenReview and
//! SubjectAccessReview results). Callers count hits and misses (one authorization lookup may
//! consult two caches).
//!
//! Time comes from a [`Clock`], so tests move it forward instead of sleeping.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where cache expiry reads the time.
pub trait Clock: Send + Sync + std::fmt::Debug {
    fn now(&self) -> Instant;
}

/// The real monotonic clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A clock that moves only when told to (for tests of cache expiry).
#[derive(Debug)]
pub struct ManualClock {
    start: Instant,
    elapsed: Mutex<Duration>,
}

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock {
            start: Instant::now(),
            elapsed: Mutex::new(Duration::ZERO),
        }
    }
}

impl ManualClock {
    pub fn advance(&self, by: Duration) {
        let mut elapsed = self
            .elapsed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *elapsed += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        let elapsed = *self
            .elapsed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.start + elapsed
    }
}

#[derive(Debug)]
pub(crate) struct TtlCache<K, V> {
    entries: Mutex<HashMap<K, (V, Instant)>>,
    capacity: usize,
    clock: Arc<dyn Clock>,
}

impl<K: Eq + Hash + Clone, V: Clone> TtlCache<K, V> {
    pub(crate) fn new(capacity: usize, clock: Arc<dyn Clock>) -> Self {
        TtlCache {
            entries: Mutex::new(HashMap::new()),
            capacity: capacity.max(1),
            clock,
        }
    }

    /// The live value for `key`.
    pub(crate) fn get(&self, key: &K) -> Option<V> {
        let now = self.clock.now();
        let mut entries = self.lock();
        match entries.get(key) {
            Some((value, expires)) if *expires > now => Some(value.clone()),
            Some(_) => {
                entries.remove(key);
                None
            }
            None => None,
        }
    }

    /// Remember `value` for `ttl`; a zero TTL caches nothing. When full, expired entries go
    /// first, then the one closest to expiry.
    pub(crate) fn insert(&self, key: K, value: V, ttl: Duration) {
        if ttl.is_zero() {
            return;
        }
        let now = self.clock.now();
        let mut entries = self.lock();
        if entries.len() >= self.capacity && !entries.contains_key(&key) {
            entries.retain(|_, (_, expires)| *expires > now);
            if entries.len() >= self.capacity
                && let Some(oldest) = entries
                    .iter()
                    .min_by_key(|(_, (_, expires))| *expires)
                    .map(|(k, _)| k.clone())
            {
                entries.remove(&oldest);
            }
        }
        entries.insert(key, (value, now + ttl));
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<K, (V, Instant)>> {
        // A panic while holding the lock cannot leave the map inconsistent (every update is a
        // single insert/remove), so a poisoned lock is still usable.
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache<K: Eq + Hash + Clone, V: Clone>(
        capacity: usize,
    ) -> (TtlCache<K, V>, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::default());
        (TtlCache::new(capacity, clock.clone()), clock)
    }

    #[test]
    fn entries_expire_after_their_ttl() {
        let (cache, clock) = cache(10);
        cache.insert("a", 1, Duration::from_secs(10));
        assert_eq!(cache.get(&"a"), Some(1));
        clock.advance(Duration::from_secs(9));
        assert_eq!(cache.get(&"a"), Some(1));
        clock.advance(Duration::from_secs(1));
        assert_eq!(cache.get(&"a"), None);
        assert_eq!(cache.get(&"b"), None);
        assert_eq!(cache.len(), 0, "an expired entry is dropped when seen");
    }

    #[test]
    fn zero_ttl_caches_nothing() {
        let (cache, _) = cache(10);
        cache.insert("a", 1, Duration::ZERO);
        assert_eq!(cache.get(&"a"), None);
    }

    #[test]
    fn a_full_cache_drops_expired_entries_then_the_soonest_to_expire() {
        let (cache, clock) = cache(2);
        cache.insert("short", 1, Duration::from_secs(1));
        cache.insert("long", 2, Duration::from_secs(100));
        cache.insert("new", 3, Duration::from_secs(50));
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.get(&"short"), None);
        assert_eq!(cache.get(&"long"), Some(2));
        assert_eq!(cache.get(&"new"), Some(3));

        clock.advance(Duration::from_secs(60));
        cache.insert("third", 4, Duration::from_secs(10));
        assert_eq!(cache.len(), 2, "the expired entry made room");
        assert_eq!(cache.get(&"long"), Some(2));
        assert_eq!(cache.get(&"third"), Some(4));
    }
}
