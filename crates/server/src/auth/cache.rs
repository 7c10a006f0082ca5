//! The bounded cache of webhook answers (TokenReview and SubjectAccessReview results), and the
//! clock their expiry reads.
//!
//! Time comes from a [`Clock`], so tests move it forward instead of sleeping.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where cache expiry reads the time.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current instant.
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
    /// Moves the clock forward by `by`.
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

/// A cache key: the SHA-256 of what was reviewed (a token is never kept, and a key has a
/// fixed size however long the reviewed spec is).
pub(crate) type Key = [u8; 32];

pub(crate) fn key_of(bytes: &[u8]) -> Key {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).into()
}

/// Webhook answers (TokenReview, SubjectAccessReview), bounded and O(1) per operation (moka:
/// TinyLFU admission, LRU eviction), each answer kept for the TTL its kind of answer gets
/// (allowed and denied apart). Concurrent misses of one key make one review, whose answer all
/// of them get (singleflight).
///
/// An answer's age is read from the [`Clock`] (so tests move time instead of sleeping);
/// moka also drops it from memory once its TTL has passed in real time.
pub(crate) struct ReviewCache<V> {
    entries: moka::future::Cache<Key, Entry<V>>,
    clock: Arc<dyn Clock>,
}

#[derive(Clone)]
struct Entry<V> {
    value: V,
    expires: Instant,
    ttl: Duration,
}

/// Each entry lives for its own TTL.
struct ByTtl;

impl<V> moka::Expiry<Key, Entry<V>> for ByTtl {
    fn expire_after_create(
        &self,
        _key: &Key,
        entry: &Entry<V>,
        _created: std::time::Instant,
    ) -> Option<Duration> {
        Some(entry.ttl)
    }
}

/// Where an answer came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// Already cached (or computed by a concurrent caller this one waited for).
    Cache,
    /// Reviewed by this call.
    Review,
}

impl<V: Clone + Send + Sync + 'static> ReviewCache<V> {
    pub(crate) fn new(capacity: u64, clock: Arc<dyn Clock>) -> Self {
        ReviewCache {
            entries: moka::future::Cache::builder()
                .max_capacity(capacity.max(1))
                .expire_after(ByTtl)
                .build(),
            clock,
        }
    }

    /// The live answer for `key`, or the answer of `review`, made once however many callers
    /// miss the key at the same time, and kept for `ttl_of(answer)` (zero: not kept). A failed
    /// review is not kept: every waiting caller gets its error, the next one reviews again.
    pub(crate) async fn get_or_review<E, F>(
        &self,
        key: Key,
        review: F,
        ttl_of: impl FnOnce(&V) -> Duration,
    ) -> Result<(V, Source), Arc<E>>
    where
        F: std::future::Future<Output = Result<V, E>>,
        E: Send + Sync + 'static,
    {
        if let Some(entry) = self.entries.get(&key).await {
            if entry.expires > self.clock.now() {
                return Ok((entry.value, Source::Cache));
            }
            self.entries.invalidate(&key).await;
        }
        let clock = self.clock.clone();
        let entry = self
            .entries
            .entry(key)
            .or_try_insert_with(async move {
                let value = review.await?;
                let ttl = ttl_of(&value);
                Ok(Entry {
                    expires: clock.now() + ttl,
                    ttl,
                    value,
                })
            })
            .await?;
        let source = if entry.is_fresh() {
            Source::Review
        } else {
            Source::Cache
        };
        Ok((entry.into_value().value, source))
    }

    #[cfg(test)]
    pub(crate) async fn len(&self) -> u64 {
        self.entries.run_pending_tasks().await;
        self.entries.entry_count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn cache(capacity: u64) -> (ReviewCache<bool>, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::default());
        (ReviewCache::new(capacity, clock.clone()), clock)
    }

    /// `true` answers are kept 10 s, `false` ones 2 s.
    fn ttl(allowed: &bool) -> Duration {
        Duration::from_secs(if *allowed { 10 } else { 2 })
    }

    async fn ask(cache: &ReviewCache<bool>, key: &str, answer: bool) -> (bool, Source) {
        cache
            .get_or_review(
                key_of(key.as_bytes()),
                async move { Ok::<_, ()>(answer) },
                ttl,
            )
            .await
            .expect("review")
    }

    #[tokio::test]
    async fn allowed_and_denied_answers_expire_after_their_own_ttl() {
        let (cache, clock) = cache(100);
        assert_eq!(ask(&cache, "a", true).await, (true, Source::Review));
        assert_eq!(ask(&cache, "d", false).await, (false, Source::Review));
        clock.advance(Duration::from_secs(1));
        assert_eq!(ask(&cache, "a", false).await, (true, Source::Cache));
        assert_eq!(ask(&cache, "d", true).await, (false, Source::Cache));
        clock.advance(Duration::from_secs(1));
        // The denial is gone after 2 s, the allowance stays for 10 s.
        assert_eq!(ask(&cache, "d", true).await, (true, Source::Review));
        assert_eq!(ask(&cache, "a", false).await, (true, Source::Cache));
        clock.advance(Duration::from_secs(8));
        assert_eq!(ask(&cache, "a", false).await, (false, Source::Review));
    }

    #[tokio::test]
    async fn a_zero_ttl_keeps_nothing_and_errors_are_not_kept() {
        let (cache, _) = cache(100);
        let zero = |_: &bool| Duration::ZERO;
        for _ in 0..2 {
            let (_, source) = cache
                .get_or_review(key_of(b"z"), async { Ok::<_, ()>(true) }, zero)
                .await
                .expect("review");
            assert_eq!(source, Source::Review);
        }
        let failed = cache
            .get_or_review(key_of(b"e"), async { Err::<bool, _>("down") }, ttl)
            .await;
        assert_eq!(failed.err().as_deref(), Some(&"down"));
        assert_eq!(ask(&cache, "e", true).await, (true, Source::Review));
    }

    #[tokio::test]
    async fn concurrent_misses_of_one_key_make_one_review() {
        let (cache, _) = cache(100);
        let reviews = AtomicUsize::new(0);
        let (release, released) = tokio::sync::watch::channel(false);
        let one = || {
            let mut released = released.clone();
            let reviews = &reviews;
            cache.get_or_review(
                key_of(b"same-token"),
                async move {
                    reviews.fetch_add(1, Ordering::SeqCst);
                    let _ = released.wait_for(|r| *r).await;
                    Ok::<_, ()>(true)
                },
                ttl,
            )
        };
        let callers = futures::future::join_all((0..50).map(|_| one()));
        let releaser = async {
            tokio::task::yield_now().await;
            release.send_replace(true);
        };
        let (answers, ()) = tokio::join!(callers, releaser);
        assert!(answers.iter().all(|a| matches!(a, Ok((true, _)))));
        assert_eq!(reviews.load(Ordering::SeqCst), 1);
        let fresh = answers
            .iter()
            .filter(|a| matches!(a, Ok((_, Source::Review))))
            .count();
        assert_eq!(fresh, 1);
    }

    #[tokio::test]
    async fn the_cache_is_bounded() {
        let (cache, _) = cache(64);
        for i in 0..1000 {
            ask(&cache, &format!("token-{i}"), false).await;
        }
        let len = cache.len().await;
        assert!(len <= 64, "{len} entries kept");
    }
}
