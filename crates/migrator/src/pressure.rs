//! How hard the migrator pushes the apiserver: one owner for the whole pool, fed with every
//! answer. It holds the two levers and decides both:
//!
//! - the **rate** (`--qps`/`--burst`, a token bucket every request takes a token from, paused
//!   by a Retry-After and lowered while API Priority and Fairness rejects: [`RateLimiter`]);
//! - the **PATCHes in flight** ([`AdaptiveLimit`]): grown while the apiserver's latency stays
//!   flat, shrunk when it rises, halved by a 429, a 5xx or a timeout.
//!
//! Every request reports its answer here ([`Pressure::answered`]), and what kube-apiserver's
//! own counts say about its other clients comes here too ([`Pressure::neighbours`], read by
//! `neighbours.rs`); nothing else decides how fast to go. An APF rejection moves both levers: the concurrency, because the level is
//! full, and the rate, because a throttled pool may already be below any concurrency limit
//! (five requests a second rarely have two in flight).

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

use super::concurrency::{AdaptiveLimit, Epoch, Mode, Neighbours, Step};
use super::limiter::RateLimiter;
use svm_cluster::ClusterError;

/// What an answer changed, for the caller's logs and metrics.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Reaction {
    /// The pool waits this long before its next request (Retry-After).
    pub paused: Option<Duration>,
    /// An APF rejection from this priority level lowered the rate to this many per second.
    pub apf: Option<(String, f64)>,
    /// The PATCH limit moved (or a window closed).
    pub step: Option<Step>,
}

#[derive(Debug)]
struct Slots {
    limit: AdaptiveLimit,
    in_flight: usize,
    /// PATCH slots taken so far.
    taken: u64,
    /// When the last PATCH slot was taken.
    last_taken: Option<tokio::time::Instant>,
    /// No slot is given until then ([`Pressure::hold`]).
    held_until: Option<tokio::time::Instant>,
}

/// The one owner of the load the pool puts on the apiserver: its rate and its PATCHes in flight.
#[derive(Debug)]
pub struct Pressure {
    rate: RateLimiter,
    slots: Mutex<Slots>,
    freed: Notify,
    /// The migrator's reads in flight (LIST pages, the probe's one-object LIST, discovery):
    /// kube-apiserver counts them as executing like anyone's requests.
    reads: AtomicUsize,
}

/// A read in flight, counted until dropped ([`Pressure::reading`]).
#[must_use]
pub struct Reading<'a>(&'a Pressure);

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        self.0.reads.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A PATCH in flight; its slot is given back when dropped.
#[must_use]
pub struct Slot<'a> {
    pressure: &'a Pressure,
    sent_in: Epoch,
}

impl Slot<'_> {
    /// The limit's epoch when the slot was taken: its answer counts in that one only.
    pub fn epoch(&self) -> Epoch {
        self.sent_in
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.pressure.release();
    }
}

impl Pressure {
    /// At `qps` (0: unlimited) with `burst`, and PATCHes in flight as `concurrency` says.
    pub fn new(qps: f64, burst: u32, concurrency: Mode) -> Self {
        Self {
            rate: RateLimiter::new(qps, burst),
            slots: Mutex::new(Slots {
                limit: AdaptiveLimit::new(concurrency),
                in_flight: 0,
                taken: 0,
                last_taken: None,
                held_until: None,
            }),
            freed: Notify::new(),
            reads: AtomicUsize::new(0),
        }
    }

    /// Counts a read of the migrator's as in flight while the guard lives.
    pub fn reading(&self) -> Reading<'_> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        Reading(self)
    }

    /// Every request of the migrator's that kube-apiserver counts as executing now: its
    /// PATCHes and its reads (not its watch-list stream, which holds no seat once open).
    /// Others are what its counts show beyond these.
    pub fn requests_in_flight(&self) -> usize {
        self.in_flight() + self.reads.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wait for the rate to allow one more request (and for any pause to end).
    pub async fn token(&self) {
        self.rate.acquire().await;
    }

    /// Wait for a PATCH slot under the current limit (and for a hold to end).
    pub async fn slot(&self) -> Slot<'_> {
        let mut waited = false;
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            // Registered before looking, so a slot freed in between still wakes us.
            freed.as_mut().enable();
            let held_until = {
                let mut slots = self.lock();
                let now = tokio::time::Instant::now();
                match slots.held_until {
                    Some(until) if now < until => Some(until),
                    _ if slots.in_flight < slots.limit.limit() => {
                        slots.in_flight += 1;
                        slots.taken += 1;
                        slots.last_taken = Some(now);
                        if waited || slots.in_flight == slots.limit.limit() {
                            slots.limit.note_saturated();
                        }
                        return Slot {
                            pressure: self,
                            sent_in: slots.limit.epoch(),
                        };
                    }
                    _ => None,
                }
            };
            match held_until {
                // A hold is not the limit holding the work back: no `waited`.
                Some(until) => {
                    tokio::select! {
                        () = &mut freed => {}
                        () = tokio::time::sleep_until(until) => {}
                    }
                }
                None => {
                    waited = true;
                    freed.await;
                }
            }
        }
    }

    /// Gives no PATCH slot for `at_most` (those in flight finish), or until
    /// [`Pressure::release_hold`]: to time others' requests without ours (`probe.rs`).
    pub fn hold(&self, at_most: Duration) {
        self.lock().held_until = Some(tokio::time::Instant::now() + at_most);
    }

    /// Ends a hold early.
    pub fn release_hold(&self) {
        self.lock().held_until = None;
        self.freed.notify_waiters();
    }

    fn release(&self) {
        self.lock().in_flight -= 1;
        self.freed.notify_waiters();
    }

    /// What the answer to a request says about the apiserver: `latency` of an answer that
    /// was not an overload feeds the PATCH limit for a PATCH (`sent_in`: its slot's epoch; a
    /// page of 500 takes longer for other reasons); an overload answer backs off.
    pub fn answered<T>(
        &self,
        result: &Result<T, ClusterError>,
        latency: Duration,
        sent_in: Option<Epoch>,
    ) -> Reaction {
        let mut reaction = Reaction::default();
        let err = match result {
            Ok(_) => {
                if let Some(epoch) = sent_in {
                    reaction.step = self.sample(latency, epoch);
                }
                return reaction;
            }
            Err(err) => err,
        };
        if !overloaded(err) {
            return reaction;
        }
        if let Some(after) = err.retry_after() {
            self.rate.pause(after);
            reaction.paused = Some(after);
        }
        if let Some(level) = err.flow_control() {
            reaction.apf = Some((level.to_string(), self.rate.backpressure()));
        }
        reaction.step = Some(self.lock().limit.on_overload());
        reaction
    }

    fn sample(&self, latency: Duration, sent_in: Epoch) -> Option<Step> {
        let step = self.lock().limit.on_latency(latency, sent_in);
        if step == Some(Step::Grew) || step == Some(Step::Probed) {
            self.freed.notify_waiters();
        }
        step
    }

    /// What kube-apiserver's counts say about its other clients now.
    pub fn neighbours(&self, seen: Neighbours) {
        self.lock().limit.on_neighbours(seen);
    }

    /// How much slower others' requests are than while the pool held its PATCHes (`None`:
    /// not known).
    pub fn others_slowdown(&self, ratio: Option<f64>) -> Option<Step> {
        self.lock().limit.on_others_slowdown(ratio)
    }

    /// Whether the PATCH limit follows latency now (see [`AdaptiveLimit::follows_latency`]).
    pub fn follows_latency(&self) -> bool {
        self.lock().limit.follows_latency()
    }

    /// PATCHes in flight now.
    pub fn in_flight(&self) -> usize {
        self.lock().in_flight
    }

    /// PATCHes sent so far (slots taken): whose dispatch kube-apiserver's counts must show.
    pub fn patches_sent(&self) -> u64 {
        self.lock().taken
    }

    /// Whether the pool is sending PATCHes (one in flight, or one sent in the last 2 s): only
    /// then is it worth reading the apiserver's counts.
    pub fn patching(&self) -> bool {
        let slots = self.lock();
        slots.in_flight > 0
            || slots
                .last_taken
                .is_some_and(|at| at.elapsed() < Duration::from_secs(2))
    }

    /// The rate in force (requests per second; 0 when unlimited).
    pub fn rate(&self) -> f64 {
        self.rate.rate()
    }

    /// PATCHes allowed in flight now.
    pub fn concurrency(&self) -> usize {
        self.lock().limit.limit()
    }
}

/// Answers that mean the apiserver has more than it can take: a 429 of its filters
/// (max-inflight or a full APF level), a 5xx, a timeout, or no answer at all — what is worth
/// retrying ([`ClusterError::is_retriable`], the one place that classifies an answer) less a
/// 429 a handler gave one request ([`ClusterError::is_refused_for_now`]: the watch cache of a
/// resource whose storage was just rebuilt, as at the start of a migration after a CRD's
/// storage version moved). That request is retried after its Retry-After; the pool goes on.
fn overloaded(err: &ClusterError) -> bool {
    err.is_retriable() && !err.is_refused_for_now()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn api(code: u16, retry_after: Option<u64>, apf: bool) -> ClusterError {
        ClusterError::Api {
            code,
            reason: String::new(),
            message: String::new(),
            retry_after: retry_after.map(Duration::from_secs),
            continue_token: None,
            flow_control: apf.then(|| "level-uid".to_string()),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn slots_hold_the_limit_and_a_freed_one_lets_the_next_request_in() {
        let pressure = Arc::new(Pressure::new(0.0, 1, Mode::Fixed(2)));
        let a = pressure.slot().await;
        let _b = pressure.slot().await;
        let waiting = {
            let pressure = pressure.clone();
            tokio::spawn(async move {
                let _c = pressure.slot().await;
            })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!waiting.is_finished(), "a third slot under a limit of two");
        drop(a);
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("woken when a slot is freed")
            .expect("task");
    }

    #[tokio::test(start_paused = true)]
    async fn a_hold_gives_no_slot_until_it_ends_or_is_released() {
        let pressure = Arc::new(Pressure::new(0.0, 1, Mode::Fixed(4)));
        let waiter = |pressure: &Arc<Pressure>| {
            let pressure = pressure.clone();
            tokio::spawn(async move {
                let _slot = pressure.slot().await;
            })
        };
        pressure.hold(Duration::from_secs(3));
        let waiting = waiter(&pressure);
        tokio::time::sleep(Duration::from_millis(2_900)).await;
        assert!(!waiting.is_finished(), "a slot during a hold");
        tokio::time::timeout(Duration::from_millis(200), waiting)
            .await
            .expect("given when the hold ends")
            .expect("task");
        pressure.hold(Duration::from_secs(60));
        let waiting = waiter(&pressure);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!waiting.is_finished(), "a slot during a hold");
        pressure.release_hold();
        tokio::time::timeout(Duration::from_millis(10), waiting)
            .await
            .expect("given when the hold is released")
            .expect("task");
    }

    #[tokio::test(start_paused = true)]
    async fn an_apf_rejection_pauses_lowers_the_rate_and_halves_the_concurrency() {
        let pressure = Pressure::new(100.0, 10, Mode::Fixed(16));
        let rejected: Result<(), _> = Err(api(429, Some(2), true));
        let reaction = pressure.answered(&rejected, Duration::from_millis(5), None);
        assert_eq!(reaction.paused, Some(Duration::from_secs(2)));
        assert_eq!(reaction.apf, Some(("level-uid".to_string(), 50.0)));
        assert_eq!(reaction.step, Some(Step::BackedOff));
        assert_eq!(pressure.concurrency(), 8);
        assert_eq!(pressure.rate(), 50.0);
        let start = tokio::time::Instant::now();
        pressure.token().await;
        assert!(start.elapsed() >= Duration::from_secs(2), "the pause holds");
    }

    #[tokio::test(start_paused = true)]
    async fn reads_count_in_flight_with_the_patches_while_they_last() {
        let pressure = Pressure::new(0.0, 1, Mode::Fixed(4));
        let _patch = pressure.slot().await;
        let page = pressure.reading();
        let probe = pressure.reading();
        assert_eq!(
            (pressure.in_flight(), pressure.requests_in_flight()),
            (1, 3)
        );
        drop(page);
        drop(probe);
        assert_eq!(pressure.requests_in_flight(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_filling_watch_cache_neither_pauses_nor_lowers_anything() {
        let pressure = Pressure::new(100.0, 10, Mode::Fixed(16));
        // Recording 21, step 1 (APF's headers are on it too; it is no APF rejection).
        let mut headers = http::HeaderMap::new();
        headers.insert("Retry-After", http::HeaderValue::from_static("1"));
        headers.insert(
            "X-Kubernetes-Pf-Prioritylevel-Uid",
            http::HeaderValue::from_static("57e292c5-a8ec-4359-954c-2adffc364808"),
        );
        let filling: Result<(), _> = Err(ClusterError::from_answer(
            http::StatusCode::TOO_MANY_REQUESTS,
            &headers,
            br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"storage is (re)initializing","reason":"TooManyRequests","details":{"retryAfterSeconds":1},"code":429}"#,
        ));
        let reaction = pressure.answered(&filling, Duration::from_millis(5), None);
        assert_eq!(
            (reaction.paused, reaction.apf, reaction.step),
            (None, None, None)
        );
        assert_eq!((pressure.concurrency(), pressure.rate()), (16, 100.0));
        let start = tokio::time::Instant::now();
        pressure.token().await;
        assert_eq!(start.elapsed(), Duration::ZERO, "no pause");
    }

    #[tokio::test(start_paused = true)]
    async fn other_overloads_halve_the_concurrency_only_and_refusals_change_nothing() {
        let pressure = Pressure::new(100.0, 10, Mode::Fixed(16));
        let unavailable: Result<(), _> = Err(api(503, None, false));
        pressure.answered(&unavailable, Duration::ZERO, None);
        assert_eq!((pressure.concurrency(), pressure.rate()), (8, 100.0));
        let pressure = Pressure::new(100.0, 10, Mode::Fixed(16));
        let reset: Result<(), _> = Err(ClusterError::TimedOut {
            what: "no answer",
            after: Duration::from_secs(60),
        });
        pressure.answered(&reset, Duration::ZERO, None);
        assert_eq!(pressure.concurrency(), 8);
        let pressure = Pressure::new(100.0, 10, Mode::Fixed(16));
        for refused in [403, 404, 409, 422] {
            let answer: Result<(), _> = Err(api(refused, None, false));
            assert_eq!(
                pressure.answered(&answer, Duration::ZERO, None),
                Reaction::default()
            );
        }
        assert_eq!(pressure.concurrency(), 16);
    }

    #[tokio::test(start_paused = true)]
    async fn flat_latency_grows_a_busy_adaptive_limit() {
        let pressure = Arc::new(Pressure::new(0.0, 1, Mode::Adaptive { ceiling: 64 }));
        // More work than slots: every slot in use, and more waiting.
        let mut tasks = Vec::new();
        for _ in 0..64 {
            let pressure = pressure.clone();
            tasks.push(tokio::spawn(async move {
                for _ in 0..50 {
                    let slot = pressure.slot().await;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    let ok: Result<(), ClusterError> = Ok(());
                    pressure.answered(&ok, Duration::from_millis(10), Some(slot.epoch()));
                    drop(slot);
                }
            }));
        }
        for task in tasks {
            task.await.expect("task");
        }
        assert_eq!(pressure.concurrency(), 64);
    }
}
