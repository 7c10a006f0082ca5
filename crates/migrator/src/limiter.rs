//! The load the migrator puts on the apiserver: one token bucket shared by every worker (so
//! `--qps`/`--burst` bound the whole pool, not each migration), a pool-wide pause when the
//! apiserver says Retry-After (a 429 from priority-and-fairness is about the apiserver, not
//! about one object), a lower rate while API Priority and Fairness keeps rejecting (halved at
//! most once a second, doubled back for every quiet interval), and exponential backoff with
//! jitter for retriable failures (backon's).
//!
//! The token bucket is written here, not taken from `governor` (which the server's review
//! budgets use): what it is for is what governor's GCRA does not do. A request that finds no
//! token *reserves* the next one and waits for its turn (golang.org/x/time/rate's `Reserve`,
//! which client-go's `--kube-api-qps` limiter waits on); governor's `check` refuses without
//! taking a turn and `until_ready` asks again after its sleep, so a waiter that wakes late
//! (tokio's timers round up to the millisecond) loses that time when the bucket holds one
//! token, and concurrent waiters race instead of queueing. Its quota is fixed when it is built,
//! so the rate halved by API Priority and Fairness would be a new limiter that forgets its
//! tokens; it has no pause after which the bucket starts empty (Retry-After); its burst is a
//! whole number, this bucket is `burst − qps·0.1`; and `until_ready` sleeps on futures-timer's
//! thread, which a test's paused tokio clock does not move. The tests below hold each of these.

use std::sync::Mutex;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use tokio::time::Instant;

/// A token bucket refilled at `qps` per second, so that the apiserver never sees more than
/// `qps + burst` requests in any one-second window. The bucket holds `burst − qps·0.1` tokens
/// (at least one), not `burst`: a request leaves the limiter a little before it reaches the
/// apiserver (connection pool, TLS, scheduling), and those 100 ms of slack keep a bunched
/// arrival inside the bound too. `qps <= 0` disables it (for benchmarks).
/// How late a request may reach the apiserver after leaving the limiter, and still be
/// counted within the bound.
const DISPATCH_SLACK_SECONDS: f64 = 0.1;

/// How long the rate stays lowered after an APF rejection before it is doubled back.
const RECOVERY_INTERVAL: Duration = Duration::from_secs(5);
/// Rejections closer together than this are one congestion event: the requests in flight when
/// the level filled up are rejected together, and must not halve the rate once each.
const DECREASE_GAP: Duration = Duration::from_secs(1);
/// The lowest rate APF backpressure drives the pool to, as a fraction of `--qps`.
const MIN_RATE_FRACTION: f64 = 1.0 / 32.0;

#[derive(Debug)]
pub(crate) struct RateLimiter {
    /// The configured rate (`--qps`); the bucket refills at `BucketState::rate` ≤ this.
    qps: f64,
    burst: f64,
    state: Mutex<BucketState>,
}

#[derive(Debug)]
struct BucketState {
    /// Below zero while requests hold reservations: each waits for its own turn, so a
    /// late wake-up (timers round up) costs that request, not the rate.
    tokens: f64,
    /// Counts pauses: a reservation made before one is void, and its request queues again.
    pauses: u64,
    refilled: Instant,
    paused_until: Option<Instant>,
    /// The rate in force: `qps`, or lower after APF rejections.
    rate: f64,
    /// The last APF rejection or rate step up: the next step is a quiet interval later.
    stepped: Instant,
    /// The last halving.
    decreased: Option<Instant>,
}

impl RateLimiter {
    pub(crate) fn new(qps: f64, burst: u32) -> Self {
        let burst = (f64::from(burst) - qps.max(0.0) * DISPATCH_SLACK_SECONDS).max(1.0);
        Self {
            qps,
            burst,
            state: Mutex::new(BucketState {
                tokens: burst,
                pauses: 0,
                refilled: Instant::now(),
                paused_until: None,
                rate: qps,
                stepped: Instant::now(),
                decreased: None,
            }),
        }
    }

    pub(crate) fn unlimited(&self) -> bool {
        self.qps <= 0.0
    }

    /// Wait for a token (and for any pause to end).
    pub(crate) async fn acquire(&self) {
        loop {
            match self.take(Instant::now()) {
                Take::Now => return,
                Take::Paused(wait) => tokio::time::sleep(wait).await,
                Take::Reserved { wait, pauses } => {
                    tokio::time::sleep(wait).await;
                    if self.pauses() == pauses {
                        return;
                    }
                }
            }
        }
    }

    fn pauses(&self) -> u64 {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).pauses
    }

    /// Takes a token at `now`, or reserves the next one (as golang.org/x/time/rate does),
    /// or says how long the pool is paused.
    fn take(&self, now: Instant) -> Take {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(until) = state.paused_until {
            if now < until {
                return Take::Paused(until - now);
            }
            state.paused_until = None;
        }
        if self.unlimited() {
            return Take::Now;
        }
        let elapsed = now.saturating_duration_since(state.refilled).as_secs_f64();
        state.tokens = (state.tokens + elapsed * state.rate).min(self.burst);
        state.refilled = now;
        // Doubled back for every quiet interval: from the floor to --qps in five of them.
        while state.rate < self.qps
            && now.saturating_duration_since(state.stepped) >= RECOVERY_INTERVAL
        {
            state.rate = (state.rate * 2.0).min(self.qps);
            state.stepped += RECOVERY_INTERVAL;
        }
        state.tokens -= 1.0;
        if state.tokens >= 0.0 {
            Take::Now
        } else {
            Take::Reserved {
                wait: Duration::from_secs_f64(-state.tokens / state.rate),
                pauses: state.pauses,
            }
        }
    }

    /// API Priority and Fairness rejected a request: the migrator's priority level is full,
    /// so the pool halves its rate (at most once per [`DECREASE_GAP`], down to 1/32 of
    /// `--qps`) and doubles it back for every [`RECOVERY_INTERVAL`] without a rejection.
    /// Unlimited pools (`--qps 0`) only pause. Returns the rate now in force.
    pub(crate) fn backpressure(&self) -> f64 {
        let now = Instant::now();
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if self.unlimited() {
            return 0.0;
        }
        state.stepped = now;
        if state
            .decreased
            .is_some_and(|at| now.saturating_duration_since(at) < DECREASE_GAP)
        {
            return state.rate;
        }
        state.decreased = Some(now);
        state.rate = (state.rate / 2.0).max(self.qps * MIN_RATE_FRACTION);
        state.tokens = state.tokens.min(1.0);
        state.rate
    }

    /// The rate in force (requests per second; 0 when unlimited).
    pub(crate) fn rate(&self) -> f64 {
        if self.unlimited() {
            return 0.0;
        }
        self.state.lock().unwrap_or_else(|e| e.into_inner()).rate
    }

    /// Hold every request of the pool for `delay` (Retry-After): the apiserver asked for it.
    /// The bucket is emptied too, so the pool does not answer a 429 with a burst.
    pub(crate) fn pause(&self, delay: Duration) {
        let now = Instant::now();
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let until = now + delay;
        state.paused_until = Some(state.paused_until.map_or(until, |u| u.max(until)));
        state.tokens = 0.0;
        state.pauses += 1;
        state.refilled = until;
    }
}

/// What [`RateLimiter::acquire`] does next.
enum Take {
    Now,
    /// The token is this request's once `wait` is over, unless a pause comes first.
    Reserved {
        wait: Duration,
        pauses: u64,
    },
    Paused(Duration),
}

/// Exponential backoff with jitter, backon's `ExponentialBuilder`: retry n waits a random time
/// in [c/2, c), c = min(cap, base·2ⁿ) — the AWS architecture blog's "equal jitter" — but never
/// less than a Retry-After. Not its "full jitter" ([0, c], which this was before): backon's
/// jitter adds a random part of the delay to the delay (d + d·r, r in [0, 1)), so it is given
/// half of each ceiling and cannot go below that half. A retry therefore never follows at once,
/// and the ceilings, which bound how long a migration waits, are the same.
#[derive(Clone, Copy, Debug)]
pub struct Backoff {
    /// The first retry's ceiling.
    pub base: Duration,
    /// No retry waits longer (but for a longer Retry-After).
    pub cap: Duration,
    /// Retries of one request before its error is reported.
    pub max_retries: u32,
}

/// Retries of one request before the migration pauses (`--max-retries`' default).
pub const DEFAULT_MAX_RETRIES: u32 = 8;

/// Past this many doublings every ceiling is the cap (2⁶³ times any base is).
const MAX_DOUBLINGS: u32 = 63;

impl Default for Backoff {
    fn default() -> Self {
        Self {
            base: Duration::from_millis(100),
            cap: Duration::from_secs(30),
            max_retries: DEFAULT_MAX_RETRIES,
        }
    }
}

impl Backoff {
    /// How long retry `attempt` (0 first) waits.
    pub fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        // The caller counts the retries against `max_retries` (and counts the ones spent in
        // its metrics), so the builder is given no maximum of its own; a base above the cap is
        // the cap from the first retry on, as backon's first delay is its minimum, unclamped.
        let jittered = ExponentialBuilder::new()
            .with_jitter()
            .with_factor(2.0)
            .with_min_delay(self.base.min(self.cap) / 2)
            .with_max_delay(self.cap / 2)
            .without_max_times()
            .build()
            .nth(attempt.min(MAX_DOUBLINGS) as usize)
            .unwrap_or(self.cap)
            // backon computes in f32 seconds: its delays may pass the cap by nanoseconds.
            .min(self.cap);
        match retry_after {
            Some(after) => jittered.max(after),
            None => jittered,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_full_bucket_allows_a_burst_then_the_rate() {
        // burst 5 at 10 qps: 5 − 10·0.1 = 4 tokens at once.
        let limiter = RateLimiter::new(10.0, 5);
        let start = Instant::now();
        for _ in 0..4 {
            limiter.acquire().await;
        }
        assert_eq!(start.elapsed(), Duration::ZERO, "the burst is free");
        for _ in 0..10 {
            limiter.acquire().await;
        }
        // Ten more tokens at 10/s take one second.
        let elapsed = start.elapsed();
        assert!(
            elapsed >= Duration::from_millis(990) && elapsed <= Duration::from_millis(1010),
            "{elapsed:?}"
        );
    }

    #[test]
    fn a_request_that_wakes_late_keeps_its_turn_and_the_rate_holds() {
        // --qps 200 --burst 10: a bucket of one token (10 − 200·0.1 < 1), so nothing of a
        // late wake-up could be saved in it. Every request wakes 1 ms after it was told to
        // (timers round up): the rate must still be 200/s, not 1/(5 ms + 1 ms).
        let limiter = RateLimiter::new(200.0, 10);
        let start = Instant::now();
        let mut now = start;
        for _ in 0..1000 {
            match limiter.take(now) {
                Take::Now => {}
                Take::Reserved { wait, .. } => now += wait + Duration::from_millis(1),
                Take::Paused(_) => panic!("no pause was asked for"),
            }
        }
        let elapsed = now - start;
        assert!(
            elapsed >= Duration::from_millis(4990) && elapsed <= Duration::from_millis(5010),
            "1000 tokens at 200/s took {elapsed:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_pause_voids_the_reservations_made_before_it() {
        let limiter = std::sync::Arc::new(RateLimiter::new(10.0, 1));
        limiter.acquire().await;
        let start = Instant::now();
        // The next token is reserved for 100 ms from now; a Retry-After of 2 s comes first.
        let waiter = {
            let limiter = limiter.clone();
            tokio::spawn(async move { limiter.acquire().await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        limiter.pause(Duration::from_secs(2));
        waiter.await.expect("waiter");
        assert!(
            start.elapsed() >= Duration::from_secs(2),
            "{:?}",
            start.elapsed()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn no_one_second_window_holds_more_than_burst_plus_qps() {
        let limiter = std::sync::Arc::new(RateLimiter::new(20.0, 10));
        let start = Instant::now();
        let mut handles = Vec::new();
        for _ in 0..8 {
            let limiter = limiter.clone();
            handles.push(tokio::spawn(async move {
                let mut times = Vec::new();
                for _ in 0..25 {
                    limiter.acquire().await;
                    times.push(start.elapsed());
                }
                times
            }));
        }
        let mut times = Vec::new();
        for handle in handles {
            times.extend(handle.await.expect("task"));
        }
        times.sort();
        assert_eq!(times.len(), 200);
        let peak = times
            .iter()
            .enumerate()
            .map(|(i, t)| {
                times[i..]
                    .iter()
                    .take_while(|u| **u < *t + Duration::from_secs(1))
                    .count()
            })
            .max()
            .unwrap_or(0);
        // Even with every request 100 ms late, at most qps + burst land in one second.
        assert!(peak <= 28, "peak {peak} in one second");
        assert!(peak >= 20, "the limiter is not starving callers: {peak}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_pause_holds_everyone_and_empties_the_bucket() {
        let limiter = RateLimiter::new(100.0, 50);
        let start = Instant::now();
        limiter.pause(Duration::from_secs(3));
        limiter.acquire().await;
        assert!(start.elapsed() >= Duration::from_secs(3));
        // No burst right after the pause: the bucket starts empty.
        for _ in 0..10 {
            limiter.acquire().await;
        }
        assert!(
            start.elapsed() >= Duration::from_millis(3090),
            "{:?}",
            start.elapsed()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn apf_rejections_halve_the_rate_once_a_second_and_quiet_intervals_double_it_back() {
        let limiter = RateLimiter::new(64.0, 1);
        assert_eq!(limiter.backpressure(), 32.0);
        // The other requests rejected in the same moment are the same congestion event.
        assert_eq!(limiter.backpressure(), 32.0);
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            limiter.backpressure();
        }
        assert_eq!(limiter.rate(), 2.0, "never below 1/32 of --qps");
        // At 2/s, ten requests take about 4.5 seconds.
        let start = Instant::now();
        for _ in 0..10 {
            limiter.acquire().await;
        }
        assert!(
            start.elapsed() >= Duration::from_secs(4),
            "{:?}",
            start.elapsed()
        );
        // Doubled for each quiet 5 s since the last rejection: 2 → 4 → 8 (≥ 10 s quiet).
        tokio::time::sleep(Duration::from_millis(5600)).await;
        limiter.acquire().await;
        assert_eq!(limiter.rate(), 8.0);
        tokio::time::sleep(Duration::from_secs(60)).await;
        limiter.acquire().await;
        assert_eq!(limiter.rate(), 64.0);
        let unlimited = RateLimiter::new(0.0, 1);
        assert_eq!(unlimited.backpressure(), 0.0);
        assert_eq!(unlimited.rate(), 0.0);
    }

    #[tokio::test(start_paused = true)]
    async fn an_unlimited_limiter_still_honours_a_pause() {
        let limiter = RateLimiter::new(0.0, 1);
        let start = Instant::now();
        for _ in 0..1000 {
            limiter.acquire().await;
        }
        assert_eq!(start.elapsed(), Duration::ZERO);
        limiter.pause(Duration::from_secs(2));
        limiter.acquire().await;
        assert!(start.elapsed() >= Duration::from_secs(2));
    }

    #[test]
    fn backoff_grows_to_the_cap_and_respects_retry_after() {
        let backoff = Backoff {
            base: Duration::from_millis(100),
            cap: Duration::from_secs(2),
            max_retries: 5,
        };
        // backon computes in f32 seconds: a ceiling is met to within a microsecond.
        let slack = Duration::from_micros(1);
        for attempt in (0..40).chain([1000, u32::MAX]) {
            let ceiling = Duration::from_millis(100)
                .saturating_mul(2u32.saturating_pow(attempt))
                .min(Duration::from_secs(2));
            for _ in 0..50 {
                let delay = backoff.delay(attempt, None);
                assert!(
                    delay <= ceiling + slack && delay + slack >= ceiling / 2,
                    "attempt {attempt}: {delay:?} not in [{:?}, {ceiling:?}]",
                    ceiling / 2
                );
            }
        }
        assert!(backoff.delay(0, Some(Duration::from_secs(7))) >= Duration::from_secs(7));
        // A short Retry-After does not shorten the backoff.
        assert!(backoff.delay(10, Some(Duration::from_millis(1))) >= Duration::from_millis(999));
        // Jitter: not every delay at the cap is the same.
        let delays: std::collections::BTreeSet<_> =
            (0..20).map(|_| backoff.delay(10, None)).collect();
        assert!(delays.len() > 1);
    }

    #[test]
    fn a_base_above_the_cap_waits_the_cap_from_the_first_retry() {
        let backoff = Backoff {
            base: Duration::from_secs(10),
            cap: Duration::from_secs(1),
            max_retries: 3,
        };
        for attempt in 0..3 {
            let delay = backoff.delay(attempt, None);
            assert!(
                delay <= Duration::from_secs(1) && delay >= Duration::from_millis(500),
                "attempt {attempt}: {delay:?}"
            );
        }
        let zero = Backoff {
            base: Duration::ZERO,
            ..backoff
        };
        assert_eq!(zero.delay(5, None), Duration::ZERO);
    }
}
