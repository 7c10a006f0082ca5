//! What reviews not answered from a cache may cost the cluster: the TokenReview budget
//! (`--authentication-token-webhook-max-inflight`, `…-qps`, `…-burst`) and the
//! SubjectAccessReview budget (`--authorization-webhook-max-inflight`, `…-qps`, `…-burst`),
//! each at most so many reviews in flight at once and a token bucket of so many a second. A
//! review that finds the bucket empty, or no free slot within [`SLOT_WAIT`], is not made: the
//! request is turned away at once (and may retry), never queued behind a flood.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use governor::clock::Clock as GovernorClock;
use governor::middleware::NoOpMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};
use tokio::sync::{Semaphore, SemaphorePermit};

use super::cache::Clock;

/// How long a review waits for a slot before its request is turned away.
pub(crate) const SLOT_WAIT: Duration = Duration::from_secs(2);

/// The longest a bucket may take to fill from empty. governor keeps time in `u64`
/// nanoseconds (584 years) and computes a full bucket's time as period × burst without a check,
/// so a tiny `--…-qps` with a large burst must not reach that far: a bucket this slow refills
/// one review in `LONGEST_REFILL / burst`, which no one waits for anyway.
const LONGEST_REFILL: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

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

/// The auth [`Clock`] as governor reads time, so tests move it instead of sleeping.
#[derive(Clone, Debug)]
struct BudgetClock(Arc<dyn Clock>);

impl GovernorClock for BudgetClock {
    type Instant = Instant;

    fn now(&self) -> Instant {
        self.0.now()
    }
}

/// governor's GCRA token bucket, on the auth clock: `burst` reviews at once, one more every
/// `1/qps` seconds. Only ever asked whether a review may go now (`check`), never waited on.
type TokenBucket = RateLimiter<NotKeyed, InMemoryState, BudgetClock, NoOpMiddleware<Instant>>;

/// The budget of one kind of review.
pub(crate) struct ReviewBudget {
    in_flight: Semaphore,
    /// `None` when the rate has no bound (a `qps` too high for a nanosecond's period).
    bucket: Option<TokenBucket>,
}

impl ReviewBudget {
    pub(crate) fn new(limits: ReviewLimits, clock: Arc<dyn Clock>) -> Self {
        ReviewBudget {
            in_flight: Semaphore::new(limits.max_in_flight.max(1)),
            bucket: quota(limits.qps, limits.burst)
                .map(|quota| RateLimiter::direct_with_clock(quota, BudgetClock(clock))),
        }
    }

    /// A slot for one review, held while it is in flight; `None` when the budget has none.
    pub(crate) async fn admit(&self) -> Option<SemaphorePermit<'_>> {
        if let Some(bucket) = &self.bucket
            && bucket.check().is_err()
        {
            return None;
        }
        tokio::time::timeout(SLOT_WAIT, self.in_flight.acquire())
            .await
            .ok()?
            .ok()
    }
}

/// The bucket of `qps` and `burst` (at least one). As the hand-written bucket before it: a
/// `qps` of 0 or less (or NaN) gives `burst` reviews and then practically no more (one per
/// [`LONGEST_REFILL`]` / burst`), an infinite one (or one past a review a nanosecond) no bound.
fn quota(qps: f64, burst: u32) -> Option<Quota> {
    let burst = NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN);
    let slowest = LONGEST_REFILL / burst.get();
    let period = if qps > 0.0 {
        Duration::try_from_secs_f64(qps.recip()).map_or(slowest, |p| p.min(slowest))
    } else {
        slowest
    };
    Quota::with_period(period).map(|quota| quota.allow_burst(burst))
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

    fn budget(qps: f64, burst: u32) -> (ReviewBudget, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::default());
        let limits = ReviewLimits {
            max_in_flight: 1,
            qps,
            burst,
        };
        (ReviewBudget::new(limits, clock.clone()), clock)
    }

    #[tokio::test]
    async fn a_rate_of_zero_gives_the_burst_and_an_infinite_one_no_bound() {
        let (none, clock) = budget(0.0, 2);
        assert!(none.admit().await.is_some());
        assert!(none.admit().await.is_some());
        clock.advance(Duration::from_secs(30 * 24 * 3600));
        assert!(none.admit().await.is_none(), "a month later, still none");
        let (nan, _) = budget(f64::NAN, 1);
        assert!(nan.admit().await.is_some());
        assert!(nan.admit().await.is_none());
        let (unbounded, _) = budget(f64::INFINITY, 1);
        for _ in 0..1000 {
            assert!(unbounded.admit().await.is_some());
        }
    }

    #[tokio::test]
    async fn a_very_slow_rate_with_a_huge_burst_does_not_overflow_governors_clock() {
        // Unclamped, one review in 10⁶ s times a burst of 2³² is past u64 nanoseconds.
        for qps in [1e-6, 1e-30] {
            let (slow, clock) = budget(qps, u32::MAX);
            assert!(slow.admit().await.is_some());
            clock.advance(Duration::from_secs(200 * 365 * 24 * 3600));
            assert!(slow.admit().await.is_some());
        }
        // The slowest bucket still refills: one review per LONGEST_REFILL / burst.
        let (one, clock) = budget(1e-30, 1);
        assert!(one.admit().await.is_some());
        assert!(one.admit().await.is_none());
        clock.advance(LONGEST_REFILL);
        assert!(one.admit().await.is_some());
    }
}
