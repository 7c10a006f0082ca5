//! What reviews not answered from a cache may cost the cluster: the TokenReview budget
//! (`--authentication-token-webhook-max-inflight`, `…-qps`, `…-burst`) and the
//! SubjectAccessReview budget (`--authorization-webhook-max-inflight`, `…-qps`, `…-burst`),
//! each at most so many reviews in flight at once and a token bucket of so many a second. A
//! review that finds the bucket empty, or no free slot within [`SLOT_WAIT`], is not made: the
//! request is turned away at once (and may retry), never queued behind a flood.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Semaphore, SemaphorePermit};

use super::cache::Clock;

/// How long a review waits for a slot before its request is turned away.
pub(crate) const SLOT_WAIT: Duration = Duration::from_secs(2);

/// The cost bound of one kind of review: at most `max_in_flight` at once, and at most `burst`
/// at a time refilled at `qps` per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ReviewLimits {
    /// Reviews in flight at once.
    pub max_in_flight: usize,
    /// Reviews per second, refilling the bucket.
    pub qps: f64,
    /// The bucket's size: reviews allowed at once above the rate.
    pub burst: u32,
}

/// The budget of one kind of review.
pub(crate) struct ReviewBudget {
    in_flight: Semaphore,
    bucket: TokenBucket,
}

impl ReviewBudget {
    pub(crate) fn new(limits: ReviewLimits, clock: Arc<dyn Clock>) -> Self {
        ReviewBudget {
            in_flight: Semaphore::new(limits.max_in_flight.max(1)),
            bucket: TokenBucket::new(limits.qps, limits.burst, clock),
        }
    }

    /// A slot for one review, held while it is in flight; `None` when the budget has none.
    pub(crate) async fn admit(&self) -> Option<SemaphorePermit<'_>> {
        if !self.bucket.take() {
            return None;
        }
        tokio::time::timeout(SLOT_WAIT, self.in_flight.acquire())
            .await
            .ok()?
            .ok()
    }
}

/// A token bucket on the [`Clock`]: `burst` tokens, refilled at `qps` per second.
struct TokenBucket {
    qps: f64,
    burst: f64,
    state: std::sync::Mutex<(f64, std::time::Instant)>,
    clock: Arc<dyn Clock>,
}

impl TokenBucket {
    fn new(qps: f64, burst: u32, clock: Arc<dyn Clock>) -> Self {
        let burst = f64::from(burst.max(1));
        let now = clock.now();
        TokenBucket {
            qps: qps.max(0.0),
            burst,
            state: std::sync::Mutex::new((burst, now)),
            clock,
        }
    }

    /// Take a token if there is one.
    fn take(&self) -> bool {
        let now = self.clock.now();
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (tokens, last) = &mut *state;
        let elapsed = now.saturating_duration_since(*last).as_secs_f64();
        *tokens = (*tokens + elapsed * self.qps).min(self.burst);
        *last = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::cache::ManualClock;

    #[tokio::test]
    async fn the_bucket_refills_at_its_rate_and_the_slots_bound_what_is_in_flight() {
        let clock = Arc::new(ManualClock::default());
        let budget = ReviewBudget::new(
            ReviewLimits {
                max_in_flight: 2,
                qps: 2.0,
                burst: 3,
            },
            clock.clone(),
        );
        let first = budget.admit().await.expect("burst");
        let second = budget.admit().await.expect("burst");
        drop((first, second));
        let _third = budget.admit().await.expect("burst");
        assert!(budget.admit().await.is_none(), "the bucket is empty");
        clock.advance(Duration::from_millis(500));
        let _fourth = budget.admit().await.expect("refilled by one");
        assert!(budget.admit().await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn no_free_slot_within_the_wait_turns_the_review_away() {
        let clock = Arc::new(ManualClock::default());
        let budget = ReviewBudget::new(
            ReviewLimits {
                max_in_flight: 1,
                qps: 100.0,
                burst: 100,
            },
            clock,
        );
        let _held = budget.admit().await.expect("a slot");
        assert!(budget.admit().await.is_none(), "no slot within the wait");
    }
}
