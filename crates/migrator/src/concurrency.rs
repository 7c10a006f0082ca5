//! How many PATCHes the pool keeps in flight: found from the apiserver's answers, so that the
//! default uses what the apiserver can take and a busy apiserver slows the migrator first.
//!
//! The limit moves once per *window* of answers (as many as the limit, at least
//! [`MIN_WINDOW`]), on the window's median latency against a *baseline*, the lowest window
//! median of the last [`BASELINE_WINDOWS`] windows (what a PATCH costs when nothing queues):
//!
//! - median ≤ [`GROW_BELOW`] × baseline, and the limit was in use (some request waited for
//!   a slot): grow — doubling until the first back-off (slow start), then by an eighth;
//! - median ≥ [`SHRINK_ABOVE`] × baseline: requests are queueing in the apiserver (behind
//!   each other, or behind another client's), so shrink by a quarter;
//! - in between: hold.
//!
//! An overload answer (429, 5xx, a timeout) halves the limit at once, at most once per
//! window: the requests rejected together are one congestion event. The window latencies are
//! medians so that one slow answer (a GC pause, a compaction) moves nothing.
//!
//! Every limit is an *epoch*, and a PATCH's answer counts only in the epoch it was sent in:
//! right after a change, the answers still coming are those of requests sent under the old
//! limit (a whole window of them after a large one), and counting them would judge the new
//! limit by the old one's latency — a probe at half the limit would measure nothing but the
//! queue it means to drain.
//!
//! The baseline must stay what an unqueued PATCH costs. A limit that holds steady above the
//! apiserver's capacity would otherwise, once the low medians age out, make its own queueing
//! the baseline and creep upwards; so before the lowest median ages out, one window runs at
//! half the limit (a *probe*, as BBR probes its minimum RTT) and measures it again. A lasting
//! change (larger objects, a slower etcd) still becomes the new normal once the old baseline
//! has aged out, and slow start is re-armed to find the capacity again.
//!
//! That rule yields to other clients, and so stops early when there are none: the latency
//! rises from the first PATCH on, ours queueing behind ours. So the adaptive limit also takes
//! what kube-apiserver says it is doing ([`Neighbours`], from its API Priority and Fairness
//! gauges: `neighbours.rs`). While nobody else's requests execute or queue there, the limit
//! is [`ALONE_CEILING`] whatever the latency (set at once when the counts say so), shrinking
//! by a quarter only when its own priority level queues its requests (the level is full: more
//! would only wait); the moment others show up it drops to [`INITIAL`] and the latency rule
//! takes over with a fresh baseline, as when nothing is known (no `/metrics` grant). While it
//! does, what others wait beside the migration (`probe.rs`: a read of the migrator's own,
//! timed against the same with its PATCHes held) bounds it too: from [`OTHERS_HOLD_AT`] times
//! the idle figure it does not grow, from [`OTHERS_SHRINK_AT`] it shrinks — the PATCHes' own
//! latency can stay flat while every other request waits for a core.
//!
//! `--object-concurrency N` fixes the limit at N instead: latency moves nothing, but an
//! overload still halves it, and it grows back to N over the following quiet windows.

use std::collections::VecDeque;
use std::time::Duration;

/// A window holds at least this many answers, so that its median means something.
pub(crate) const MIN_WINDOW: usize = 8;
/// Window medians the baseline is the minimum of.
pub(crate) const BASELINE_WINDOWS: usize = 32;
/// Latency within this factor of the baseline is flat: room to grow.
pub(crate) const GROW_BELOW: f64 = 1.3;
/// Latency past this factor of the baseline is queueing: shrink.
pub(crate) const SHRINK_ABOVE: f64 = 1.8;
/// Where an adaptive limit starts (the old fixed default).
pub(crate) const INITIAL: usize = 4;
/// The adaptive limit's ceiling unless `--object-concurrency` sets one.
pub const DEFAULT_CEILING: usize = 256;
/// Where the adaptive limit goes while the migrator has the apiserver to itself: the best
/// fixed limit `make bench-real` found (kube-apiserver's rate is flat beyond it — ~800 obj/s
/// at ~230 against 860–900 at 64 — while every PATCH waits longer and its watch-list watcher
/// is cut more often).
pub(crate) const ALONE_CEILING: usize = 64;
/// Others' requests this many times slower than while the migrator held its PATCHes: the
/// limit stops growing…
pub(crate) const OTHERS_HOLD_AT: f64 = 1.4;
/// …and from this many times, shrinks by a quarter at every measurement that says so (a
/// margin below the 2× of idle a neighbour may see: a median of ten reads still varies).
pub(crate) const OTHERS_SHRINK_AT: f64 = 1.8;

/// What kube-apiserver's own counts say about who else is using it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Neighbours {
    /// Not known (no `/metrics` grant, no sample yet, a failed read): latency decides.
    Unknown,
    /// Others' requests execute or queue beside ours: latency decides, yielding to them.
    Busy,
    /// Nobody else: the limit may go to its ceiling; `own_queue`: our own priority level
    /// holds some of our requests in its queue.
    Quiet { own_queue: bool },
}

/// Who sets the limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Found from latency, between 1 and `ceiling`.
    Adaptive {
        /// The most PATCHes in flight it may reach.
        ceiling: usize,
    },
    /// `--object-concurrency N`: N, lowered only by overload answers.
    Fixed(usize),
}

/// Which limit a request was sent under: it changes with every move of the limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Epoch(u64);

/// What the last window decided (for logs and tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Grew,
    Held,
    Shrank,
    /// An overload answer halved the limit.
    BackedOff,
    /// A window at half the limit re-measured the baseline.
    Probed,
}

#[derive(Debug)]
pub(crate) struct AdaptiveLimit {
    mode: Mode,
    limit: usize,
    epoch: Epoch,
    slow_start: bool,
    window: Vec<Duration>,
    /// Some request of this window found every slot taken.
    saturated: bool,
    /// The limit was halved by an overload answer in this window.
    backed_off: bool,
    medians: VecDeque<Duration>,
    /// The limit to restore after a probe window (running at half of it).
    probing: Option<usize>,
    /// Windows closed since the last probe.
    since_probe: usize,
    /// The apiserver is the migrator's alone (an adaptive limit only).
    alone: bool,
    /// A sample saw our own level queue our requests, not yet acted on.
    own_queue: bool,
    /// The apiserver's counts said something (even that they cannot be read).
    heard: bool,
    /// Others' requests are [`OTHERS_HOLD_AT`] times slower than without ours: no growth.
    others_slowed: bool,
}

impl AdaptiveLimit {
    pub(crate) fn new(mode: Mode) -> Self {
        let limit = match mode {
            Mode::Adaptive { ceiling } => INITIAL.min(ceiling.max(1)),
            Mode::Fixed(n) => n.max(1),
        };
        Self {
            mode,
            limit,
            epoch: Epoch(0),
            slow_start: true,
            window: Vec::with_capacity(MIN_WINDOW),
            saturated: false,
            backed_off: false,
            medians: VecDeque::with_capacity(BASELINE_WINDOWS),
            probing: None,
            since_probe: 0,
            alone: false,
            own_queue: false,
            heard: false,
            others_slowed: false,
        }
    }

    /// How much slower others' requests are than while the migrator held its PATCHes
    /// (`None`: not known; `probe.rs` measures it). Shared, that is what must stay bounded, not
    /// only our own latency: on a saturated apiserver (large objects, few cores) a few PATCHes
    /// in flight keep ours flat while every other request waits for a core.
    pub(crate) fn on_others_slowdown(&mut self, ratio: Option<f64>) -> Option<Step> {
        if self.alone || matches!(self.mode, Mode::Fixed(_)) {
            self.others_slowed = false;
            return None;
        }
        let ratio = ratio.unwrap_or(0.0);
        self.others_slowed = ratio >= OTHERS_HOLD_AT;
        let quarter_off = |n: usize| n - (n / 4).max(1);
        // During a probe window (at half the limit) the limit it would go back to is what
        // the others' wait was measured at: that is the one to lower.
        match self.probing.as_mut() {
            Some(back_to) if ratio >= OTHERS_SHRINK_AT && *back_to > 1 => {
                *back_to = quarter_off(*back_to);
            }
            _ if ratio >= OTHERS_SHRINK_AT && self.limit > 1 => {
                self.set_limit(quarter_off(self.limit));
            }
            _ => return None,
        }
        self.slow_start = false;
        Some(Step::Shrank)
    }

    /// What kube-apiserver's counts say now (see [`Neighbours`]).
    pub(crate) fn on_neighbours(&mut self, seen: Neighbours) {
        if matches!(self.mode, Mode::Fixed(_)) {
            return;
        }
        self.heard = true;
        match seen {
            Neighbours::Quiet { own_queue } => {
                self.others_slowed = false;
                if !self.alone {
                    self.alone = true;
                    self.slow_start = true;
                    self.probing = None;
                    // Nobody to yield to: straight to the ceiling, as a fixed limit starts
                    // (a slow start from 4 reached it a second later: performance.md, Run F).
                    let ceiling = self.ceiling().min(ALONE_CEILING);
                    self.set_limit(self.limit.max(ceiling));
                }
                self.own_queue |= own_queue;
            }
            Neighbours::Busy | Neighbours::Unknown if self.alone => self.leave_alone(),
            Neighbours::Busy | Neighbours::Unknown => {}
        }
    }

    /// Others came (or nothing is known any more): start again low, and judge latency against
    /// a baseline measured from now on — the medians of the alone windows were our own
    /// queueing.
    fn leave_alone(&mut self) {
        self.alone = false;
        self.own_queue = false;
        self.slow_start = false;
        self.medians.clear();
        self.since_probe = 0;
        self.probing = None;
        // A new epoch even when the limit stays: answers to requests sent while alone must
        // not count in the first window of the latency rule.
        self.epoch = Epoch(self.epoch.0 + 1);
        self.window.clear();
        self.limit = INITIAL.min(self.limit);
    }

    /// Whether the limit is following the apiserver's counts (nobody else there).
    #[cfg(test)]
    pub(crate) fn alone(&self) -> bool {
        self.alone
    }

    /// Whether the limit follows latency because others are there or their counts cannot be
    /// read: then what others wait is worth measuring. Not before the counts first said
    /// something — at a migration's start they usually say "alone" within a second, and
    /// measuring meanwhile would hold the first PATCHes for nothing.
    pub(crate) fn follows_latency(&self) -> bool {
        matches!(self.mode, Mode::Adaptive { .. }) && self.heard && !self.alone
    }

    /// PATCHes allowed in flight now.
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// The epoch a request sent now belongs to.
    pub(crate) fn epoch(&self) -> Epoch {
        self.epoch
    }

    /// Moves the limit and opens a new epoch: the window's answers so far were to requests
    /// sent under the old limit.
    fn set_limit(&mut self, limit: usize) {
        if limit != self.limit {
            self.limit = limit;
            self.epoch = Epoch(self.epoch.0 + 1);
            self.window.clear();
        }
    }

    fn ceiling(&self) -> usize {
        match self.mode {
            Mode::Adaptive { ceiling } => ceiling.max(1),
            Mode::Fixed(n) => n.max(1),
        }
    }

    /// The latency baseline (lowest recent window median), once a window has closed.
    pub(crate) fn baseline(&self) -> Option<Duration> {
        self.medians.iter().min().copied()
    }

    /// A request had to wait for a slot: the limit, not the work, is what holds it back.
    pub(crate) fn note_saturated(&mut self) {
        self.saturated = true;
    }

    /// An answer that says nothing about overload (2xx, 404, 409) to a request sent in
    /// `sent_in` took `latency`. Returns the window's decision when this answer closed one;
    /// an answer from an earlier epoch is not counted.
    pub(crate) fn on_latency(&mut self, latency: Duration, sent_in: Epoch) -> Option<Step> {
        if sent_in != self.epoch {
            return None;
        }
        self.window.push(latency);
        if self.window.len() < self.limit.max(MIN_WINDOW) {
            return None;
        }
        let step = self.close_window();
        Some(step)
    }

    /// The apiserver is overloaded (429, 5xx, a timeout): halve the limit, once per window.
    pub(crate) fn on_overload(&mut self) -> Step {
        if !self.backed_off {
            self.backed_off = true;
            self.slow_start = false;
            self.set_limit((self.limit / 2).max(1));
        }
        Step::BackedOff
    }

    fn close_window(&mut self) -> Step {
        let median = median(&mut self.window);
        let before = self.baseline();
        let step = if let Some(limit) = self.probing.take() {
            // Back to where it was (or to the half, if an overload came meanwhile).
            if !self.backed_off {
                self.set_limit(limit);
            }
            Step::Probed
        } else if self.backed_off {
            Step::BackedOff
        } else {
            match self.mode {
                Mode::Fixed(n) => self.recover_towards(n),
                Mode::Adaptive { .. } if self.alone => self.follow_alone(),
                Mode::Adaptive { .. } => self.follow_latency(median),
            }
        };
        if self.alone {
            // Our own queueing is no baseline for when others come.
            self.window.clear();
            self.saturated = false;
            self.backed_off = false;
            return step;
        }
        self.record_median(median);
        if let (Some(before), Some(after)) = (before, self.baseline())
            && after.as_secs_f64() > before.as_secs_f64() * SHRINK_ABOVE
        {
            // The old baseline aged out and the apiserver is slower now: find its capacity
            // afresh.
            self.slow_start = true;
        }
        self.window.clear();
        self.saturated = false;
        self.backed_off = false;
        self.since_probe += 1;
        if self.baseline_ages_soon() && matches!(self.mode, Mode::Adaptive { .. }) {
            self.since_probe = 0;
            self.probing = Some(self.limit);
            self.set_limit((self.limit / 2).max(1));
        }
        step
    }

    fn record_median(&mut self, median: Duration) {
        if self.medians.len() == BASELINE_WINDOWS {
            self.medians.pop_front();
        }
        self.medians.push_back(median);
    }

    /// The lowest median is among the oldest quarter of the history (it will age out soon),
    /// and no probe ran in the last half of it (a probe that measured a little more than an
    /// old lucky minimum must not be repeated until that minimum is gone).
    fn baseline_ages_soon(&self) -> bool {
        if self.medians.len() < BASELINE_WINDOWS || self.since_probe < BASELINE_WINDOWS / 2 {
            return false;
        }
        let lowest = self
            .medians
            .iter()
            .enumerate()
            .min_by_key(|(_, m)| **m)
            .map_or(0, |(i, _)| i);
        lowest < BASELINE_WINDOWS / 4
    }

    /// A fixed limit lowered by an overload grows back to its value.
    fn recover_towards(&mut self, n: usize) -> Step {
        if self.limit >= n {
            return Step::Held;
        }
        self.set_limit((self.limit + (self.limit / 8).max(1)).min(n));
        Step::Grew
    }

    /// Nobody else is there (the limit went to the ceiling when that was first seen): shrink
    /// by a quarter once per sample that saw our own level queue us, and grow back while the
    /// limit is what holds the work back.
    fn follow_alone(&mut self) -> Step {
        let ceiling = self.ceiling().min(ALONE_CEILING);
        if std::mem::take(&mut self.own_queue) {
            self.slow_start = false;
            self.set_limit((self.limit - self.limit / 4).max(1));
            Step::Shrank
        } else if self.saturated && self.limit < ceiling {
            let more = if self.slow_start {
                self.limit
            } else {
                (self.limit / 8).max(1)
            };
            self.set_limit((self.limit + more).min(ceiling));
            Step::Grew
        } else {
            Step::Held
        }
    }

    fn follow_latency(&mut self, median: Duration) -> Step {
        let Some(baseline) = self.baseline().filter(|b| !b.is_zero()) else {
            // The first window only measures.
            return Step::Held;
        };
        let ratio = median.as_secs_f64() / baseline.as_secs_f64();
        if ratio >= SHRINK_ABOVE {
            self.slow_start = false;
            self.set_limit((self.limit - self.limit / 4).max(1));
            Step::Shrank
        } else if ratio <= GROW_BELOW
            && self.saturated
            && !self.others_slowed
            && self.limit < self.ceiling()
        {
            let more = if self.slow_start {
                self.limit
            } else {
                (self.limit / 8).max(1)
            };
            self.set_limit((self.limit + more).min(self.ceiling()));
            Step::Grew
        } else {
            Step::Held
        }
    }
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort_unstable();
    samples[samples.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// An apiserver that serves `capacity` requests at once in `service` each and shares
    /// itself among more (processor sharing: latency grows with what queues), with ±10 %
    /// jitter from a seeded generator. `reject_above`: in-flight requests past which it
    /// answers 429 (a full priority level).
    struct Apiserver {
        capacity: f64,
        service: Duration,
        reject_above: Option<usize>,
        rng: rand::rngs::StdRng,
    }

    impl Apiserver {
        fn new(capacity: f64, seed: u64) -> Self {
            Self {
                capacity,
                service: Duration::from_millis(10),
                reject_above: None,
                rng: rand::rngs::StdRng::seed_from_u64(seed),
            }
        }

        fn latency(&mut self, in_flight: usize) -> Duration {
            let queueing = (in_flight as f64 / self.capacity).max(1.0);
            let jitter = self.rng.random_range(0.9..1.1);
            self.service.mul_f64(queueing * jitter)
        }

        /// Requests answered per second with `in_flight` of them at once.
        fn throughput(&self, in_flight: usize) -> f64 {
            in_flight.min(self.capacity as usize) as f64 / self.service.as_secs_f64()
        }
    }

    /// One round: the controller's limit in flight (the migrator always has work, so every
    /// slot is used and more wait), each answered by `server`.
    fn round(limit: &mut AdaptiveLimit, server: &mut Apiserver) {
        let in_flight = limit.limit();
        let sent_in = limit.epoch();
        limit.note_saturated();
        for _ in 0..in_flight {
            if server.reject_above.is_some_and(|max| in_flight > max) {
                limit.on_overload();
            } else {
                let latency = server.latency(in_flight);
                limit.on_latency(latency, sent_in);
            }
        }
    }

    /// Where a trace settled: the median of its last 50 rounds (probe windows fall out).
    fn settled(trace: &[usize]) -> usize {
        let mut tail = trace[trace.len().saturating_sub(50)..].to_vec();
        tail.sort_unstable();
        tail[tail.len() / 2]
    }

    fn run(limit: &mut AdaptiveLimit, server: &mut Apiserver, rounds: usize) -> Vec<usize> {
        (0..rounds)
            .map(|_| {
                round(limit, server);
                limit.limit()
            })
            .collect()
    }

    #[test]
    fn it_finds_the_apiserver_capacity_without_queueing_far_past_it() {
        for seed in 0..20 {
            let mut server = Apiserver::new(24.0, seed);
            let mut limit = AdaptiveLimit::new(Mode::Adaptive { ceiling: 256 });
            let trace = run(&mut limit, &mut server, 300);
            // Settled: from round 100 on, at or above capacity (no throughput left unused)
            // and below where latency would pass SHRINK_ABOVE × baseline (not queueing far
            // past it) — or at half of that for a probe window now and then.
            let probes = trace[100..].iter().filter(|l| **l < 18).count();
            assert!(
                probes <= 200 / 8,
                "seed {seed}: {probes} probe rounds: {trace:?}"
            );
            for (i, l) in trace.iter().enumerate().skip(100) {
                assert!(
                    (9..=44).contains(l),
                    "seed {seed}: limit {l} in round {i}: {trace:?}"
                );
            }
            let mean = trace[100..]
                .iter()
                .map(|l| server.throughput(*l))
                .sum::<f64>()
                / 200.0;
            assert!(
                mean >= 0.9 * server.throughput(24),
                "seed {seed}: {mean:.0}/s of {:.0}/s: {trace:?}",
                server.throughput(24)
            );
        }
    }

    #[test]
    fn slow_start_reaches_a_large_capacity_in_a_few_windows() {
        let mut server = Apiserver::new(200.0, 7);
        let mut limit = AdaptiveLimit::new(Mode::Adaptive { ceiling: 256 });
        let trace = run(&mut limit, &mut server, 12);
        // 4 → 8 → … → 256 doubling each window after the first (which only measures).
        assert!(
            trace.iter().any(|l| *l >= 128),
            "slow start too slow: {trace:?}"
        );
        assert!(trace.iter().all(|l| *l <= 256), "{trace:?}");
    }

    #[test]
    fn a_second_client_taking_half_the_apiserver_halves_the_migrator_and_it_grows_back_after() {
        let mut server = Apiserver::new(32.0, 11);
        let mut limit = AdaptiveLimit::new(Mode::Adaptive { ceiling: 256 });
        let alone = run(&mut limit, &mut server, 150);
        let before = settled(&alone);
        // Another client now holds half the apiserver: our requests queue behind its.
        server.capacity = 16.0;
        let shared = run(&mut limit, &mut server, 150);
        let during = settled(&shared);
        assert!(
            during < before && (12..=29).contains(&during),
            "limit {before} alone, {during} while shared: {shared:?}"
        );
        // It leaves: the latency falls back to the baseline and the limit grows again.
        server.capacity = 32.0;
        let after = run(&mut limit, &mut server, 300);
        let last = settled(&after);
        assert!(last >= 25, "grew back only to {last}: {after:?}");
    }

    #[test]
    fn a_lasting_slowdown_ages_into_the_baseline_instead_of_starving_the_migration() {
        let mut server = Apiserver::new(16.0, 3);
        let mut limit = AdaptiveLimit::new(Mode::Adaptive { ceiling: 256 });
        run(&mut limit, &mut server, 100);
        // Objects got larger: every PATCH costs three times as much from now on.
        server.service = Duration::from_millis(30);
        let trace = run(&mut limit, &mut server, 400);
        assert!(
            (12..=32).contains(&settled(&trace)),
            "did not settle at the capacity again: {trace:?}"
        );
    }

    #[test]
    fn rejections_halve_the_limit_once_per_window_and_keep_it_under_the_rejection_point() {
        let mut server = Apiserver::new(64.0, 5);
        server.reject_above = Some(20);
        let mut limit = AdaptiveLimit::new(Mode::Adaptive { ceiling: 256 });
        let trace = run(&mut limit, &mut server, 200);
        let over = trace[50..].iter().filter(|l| **l > 20).count();
        assert!(
            over <= 150 / 4,
            "{over} rounds above the rejection point: {trace:?}"
        );
        assert!(settled(&trace) >= 8, "{trace:?}");
        assert!(trace[50..].iter().all(|l| *l >= 4), "{trace:?}");

        // Many rejections at once are one event: halved once.
        let mut limit = AdaptiveLimit::new(Mode::Fixed(40));
        for _ in 0..30 {
            assert_eq!(limit.on_overload(), Step::BackedOff);
        }
        assert_eq!(limit.limit(), 20);
    }

    #[test]
    fn no_growth_while_the_limit_is_not_what_holds_the_work_back() {
        let mut server = Apiserver::new(64.0, 9);
        let mut limit = AdaptiveLimit::new(Mode::Adaptive { ceiling: 256 });
        // The token bucket lets only two requests out at a time: no request ever waits for a
        // slot, so the limit stays where it started whatever the latency says.
        for _ in 0..200 {
            let latency = server.latency(2);
            limit.on_latency(latency, limit.epoch());
        }
        assert_eq!(limit.limit(), INITIAL);
    }

    #[test]
    fn a_fixed_limit_ignores_latency_backs_off_on_overload_and_recovers_to_its_value() {
        let mut server = Apiserver::new(4.0, 13);
        let mut limit = AdaptiveLimit::new(Mode::Fixed(32));
        let trace = run(&mut limit, &mut server, 50);
        assert!(trace.iter().all(|l| *l == 32), "{trace:?}");
        limit.on_overload();
        assert_eq!(limit.limit(), 16);
        let trace = run(&mut limit, &mut server, 50);
        assert_eq!(*trace.last().expect("rounds"), 32, "{trace:?}");
        assert!(trace.iter().all(|l| *l <= 32));
    }

    #[test]
    fn latency_rising_past_the_baseline_shrinks_by_a_quarter_and_ends_slow_start() {
        let mut limit = AdaptiveLimit::new(Mode::Fixed(64));
        limit.mode = Mode::Adaptive { ceiling: 256 };
        let window = |limit: &mut AdaptiveLimit, latency_ms: u64| {
            limit.note_saturated();
            let n = limit.limit().max(MIN_WINDOW);
            let mut step = None;
            for _ in 0..n {
                step = limit
                    .on_latency(Duration::from_millis(latency_ms), limit.epoch())
                    .or(step);
            }
            step
        };
        // The first window only measures the baseline; flat latency then grows.
        assert_eq!(window(&mut limit, 10), Some(Step::Held));
        assert_eq!(window(&mut limit, 11), Some(Step::Grew));
        let grown = limit.limit();
        assert_eq!(grown, 128, "slow start doubles");
        // Twice the baseline: queueing. A quarter off, and growth is by an eighth after.
        assert_eq!(window(&mut limit, 20), Some(Step::Shrank));
        assert_eq!(limit.limit(), 96);
        // Between the two thresholds: hold.
        assert_eq!(window(&mut limit, 15), Some(Step::Held));
        assert_eq!(limit.limit(), 96);
        assert_eq!(window(&mut limit, 10), Some(Step::Grew));
        assert_eq!(limit.limit(), 108);
    }

    #[test]
    fn answers_to_requests_sent_under_an_earlier_limit_do_not_count_in_the_new_one() {
        let mut limit = AdaptiveLimit::new(Mode::Fixed(64));
        limit.mode = Mode::Adaptive { ceiling: 256 };
        let fill = |limit: &mut AdaptiveLimit, sent_in: Epoch, latency_ms: u64| {
            limit.note_saturated();
            (0..64)
                .filter_map(|_| limit.on_latency(Duration::from_millis(latency_ms), sent_in))
                .last()
        };
        let first = limit.epoch();
        assert_eq!(fill(&mut limit, first, 10), Some(Step::Held));
        assert_eq!(fill(&mut limit, first, 10), Some(Step::Grew));
        assert_eq!(limit.limit(), 128);
        // 128 are in flight now, and the 64 sent before the growth answer first, slower (they
        // queued behind the new ones): they close no window and move nothing.
        let grown = limit.epoch();
        assert_ne!(grown, first);
        assert_eq!(fill(&mut limit, first, 30), None);
        assert_eq!(limit.limit(), 128);
        // The window of the new limit is judged on its own answers.
        assert_eq!(fill(&mut limit, grown, 11), None);
        assert_eq!(fill(&mut limit, grown, 11), Some(Step::Grew));
        assert_eq!(limit.limit(), 256);

        // An overload opens an epoch too: the answers of the window so far are dropped.
        let before = limit.epoch();
        for _ in 0..100 {
            limit.on_latency(Duration::from_millis(50), before);
        }
        limit.on_overload();
        assert_eq!(limit.limit(), 128);
        assert_ne!(limit.epoch(), before);
        assert_eq!(fill(&mut limit, before, 50), None);
    }

    #[test]
    fn the_ceiling_and_the_floor_hold() {
        let mut server = Apiserver::new(1000.0, 17);
        let mut limit = AdaptiveLimit::new(Mode::Adaptive { ceiling: 10 });
        let trace = run(&mut limit, &mut server, 40);
        assert_eq!(*trace.last().expect("rounds"), 10);
        assert!(trace.iter().all(|l| *l <= 10));
        for _ in 0..20 {
            limit.on_overload();
            for _ in 0..MIN_WINDOW {
                limit.on_latency(Duration::from_millis(10), limit.epoch());
            }
        }
        assert_eq!(limit.limit(), 1);
    }

    #[test]
    fn alone_it_grows_to_the_alone_ceiling_whatever_its_own_queueing_does_to_latency() {
        // Capacity 8: past it every PATCH waits behind ours, which alone stops the latency
        // rule near 8; the apiserver's counts say nobody else is there.
        let mut server = Apiserver::new(8.0, 21);
        let mut limit = AdaptiveLimit::new(Mode::Adaptive { ceiling: 256 });
        let by_latency = settled(&run(&mut limit, &mut server, 150));
        assert!(by_latency < 24, "latency alone: {by_latency}");
        limit.on_neighbours(Neighbours::Quiet { own_queue: false });
        assert_eq!(
            limit.limit(),
            ALONE_CEILING,
            "at once, as a fixed limit starts"
        );
        let trace = run(&mut limit, &mut server, 30);
        assert!(trace.iter().all(|l| *l == ALONE_CEILING), "{trace:?}");
        // A smaller --object-concurrency auto ceiling still holds.
        let mut limit = AdaptiveLimit::new(Mode::Adaptive { ceiling: 16 });
        limit.on_neighbours(Neighbours::Quiet { own_queue: false });
        let trace = run(&mut limit, &mut server, 30);
        assert_eq!(*trace.last().expect("rounds"), 16, "{trace:?}");
    }

    #[test]
    fn others_arriving_drop_it_to_the_start_and_the_latency_rule_yields_from_a_fresh_baseline() {
        let mut server = Apiserver::new(16.0, 23);
        let mut limit = AdaptiveLimit::new(Mode::Adaptive { ceiling: 256 });
        limit.on_neighbours(Neighbours::Quiet { own_queue: false });
        run(&mut limit, &mut server, 30);
        assert_eq!(limit.limit(), ALONE_CEILING);
        let before = limit.epoch();
        limit.on_neighbours(Neighbours::Busy);
        assert_eq!(limit.limit(), INITIAL);
        assert!(!limit.alone());
        assert_ne!(
            limit.epoch(),
            before,
            "answers sent at the ceiling count no more"
        );
        assert_eq!(limit.baseline(), None, "the alone windows are no baseline");
        // Others hold half the apiserver: latency as if at twice our limit. The rule grows
        // by eighths (no slow start) and stops below where our queueing would show.
        let mut shared = Apiserver::new(8.0, 29);
        let trace = run(&mut limit, &mut shared, 100);
        assert!(settled(&trace) <= 12, "{trace:?}");
        // Repeated verdicts change nothing; the others leave: back to the ceiling.
        limit.on_neighbours(Neighbours::Busy);
        limit.on_neighbours(Neighbours::Quiet { own_queue: false });
        let trace = run(&mut limit, &mut server, 30);
        assert_eq!(*trace.last().expect("rounds"), ALONE_CEILING, "{trace:?}");
        // Knowing nothing any more (the counts could not be read) is treated as shared.
        limit.on_neighbours(Neighbours::Unknown);
        assert_eq!(limit.limit(), INITIAL);
    }

    #[test]
    fn alone_its_own_level_queueing_shrinks_it_once_per_sample_that_saw_it() {
        let mut server = Apiserver::new(64.0, 31);
        let mut limit = AdaptiveLimit::new(Mode::Adaptive { ceiling: 256 });
        limit.on_neighbours(Neighbours::Quiet { own_queue: false });
        run(&mut limit, &mut server, 30);
        assert_eq!(limit.limit(), 64);
        limit.on_neighbours(Neighbours::Quiet { own_queue: true });
        let trace = run(&mut limit, &mut server, 3);
        assert_eq!(trace[0], 48, "a quarter off: {trace:?}");
        // Then growth by an eighth, not slow start: it stays near where the level filled.
        assert!(
            trace[1..].iter().all(|l| (48..=60).contains(l)),
            "{trace:?}"
        );
    }

    #[test]
    fn others_slowed_past_the_shrink_point_shrink_it_and_past_the_hold_point_stop_its_growth() {
        // An apiserver where our own latency stays flat however many we send (the 100 KiB
        // case: the cores are what others wait for).
        let mut server = Apiserver::new(1_000.0, 37);
        let mut limit = AdaptiveLimit::new(Mode::Adaptive { ceiling: 256 });
        assert!(!limit.follows_latency(), "the counts have said nothing yet");
        limit.on_neighbours(Neighbours::Busy);
        assert!(limit.follows_latency());
        run(&mut limit, &mut server, 20);
        let grown = limit.limit();
        assert!(
            grown > INITIAL,
            "the latency rule grows on flat latency: {grown}"
        );
        // Others' requests twice as slow as while we held ours: a quarter off per reading.
        assert_eq!(limit.on_others_slowdown(Some(2.4)), Some(Step::Shrank));
        assert_eq!(limit.limit(), grown - (grown / 4).max(1));
        while limit.limit() > 1 {
            assert_eq!(limit.on_others_slowdown(Some(2.4)), Some(Step::Shrank));
        }
        assert_eq!(limit.on_others_slowdown(Some(2.4)), None, "never below 1");
        // Half as slow again: no growth however flat our latency.
        assert_eq!(limit.on_others_slowdown(Some(1.6)), None);
        let trace = run(&mut limit, &mut server, 10);
        assert!(trace.iter().all(|l| *l == 1), "{trace:?}");
        // Back within 1.5×: the latency rule grows again.
        limit.on_others_slowdown(Some(1.1));
        let trace = run(&mut limit, &mut server, 10);
        assert!(trace.last().is_some_and(|l| *l > 1), "{trace:?}");
        // Alone, or fixed, others' latency moves nothing.
        limit.on_neighbours(Neighbours::Quiet { own_queue: false });
        assert!(!limit.follows_latency());
        assert_eq!(limit.on_others_slowdown(Some(5.0)), None);
        let mut fixed = AdaptiveLimit::new(Mode::Fixed(8));
        fixed.on_neighbours(Neighbours::Busy);
        assert!(!fixed.follows_latency());
        // Counts that cannot be read: the latency rule, and what others wait, decide.
        let mut unread = AdaptiveLimit::new(Mode::Adaptive { ceiling: 256 });
        unread.on_neighbours(Neighbours::Unknown);
        assert!(unread.follows_latency());
        assert_eq!(fixed.on_others_slowdown(Some(5.0)), None);
        assert_eq!(fixed.limit(), 8);
    }

    #[test]
    fn a_fixed_limit_ignores_the_apiservers_counts() {
        let mut limit = AdaptiveLimit::new(Mode::Fixed(8));
        limit.on_neighbours(Neighbours::Quiet { own_queue: false });
        let mut server = Apiserver::new(64.0, 37);
        let trace = run(&mut limit, &mut server, 20);
        assert!(trace.iter().all(|l| *l == 8), "{trace:?}");
        limit.on_neighbours(Neighbours::Busy);
        assert_eq!(limit.limit(), 8);
    }
}
