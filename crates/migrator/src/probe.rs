//! What others wait for beside the migration, measured as one of them: while the PATCH limit
//! follows latency (others are there, or nothing is known), the migrator times a read of its
//! own — a metadata-only LIST of one object of the resource it migrates, on a connection of its
//! own — from outside, and holds that within
//! [`OTHERS_SHRINK_AT`](super::concurrency::OTHERS_SHRINK_AT) of what it takes with the pool's
//! PATCHes held.
//!
//! Why a request of its own: the latency rule reads the PATCHes' latency, and on a saturated
//! apiserver (objects of 100 KiB, two cores) three applies in flight keep it flat while every
//! other client's request waits (the bench's neighbour: GET p50 2.6–3.3× idle).
//! kube-apiserver's own durations do not see that wait either — its
//! `apiserver_request_duration_seconds` over others' requests stayed at 1.0–1.2× (measured,
//! docs/performance.md): the wait comes before a request is read and timed. A client sees it.
//!
//! Why that read: it waits where another client's read waits — for a core, and in etcd, whose
//! consistent read queues behind the migration's writes (a `GET /version`, which never reaches
//! etcd, measured half the neighbour's slowdown at two PATCHes in flight and let it reach 2×);
//! it is one of the verbs the migrator uses on the resource it migrates, so `neighbours.rs`
//! does not count it as another client; and it needs no grant the migrator lacks. About ten a
//! second while the limit follows latency and the pool sends PATCHes; the pool's PATCHes are
//! held for a few of them every [`REBASE`] (a quarter of a second at 100 KiB: under 1 % of
//! the migration's time).

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::Pressure;
use super::concurrency::Step;
use super::metrics::MigratorMetrics;
use super::neighbours::Migrating;
use svm_cluster::ClusterClient;
use svm_cluster::objects::list_metadata;

/// The time between two probes while the limit follows latency.
pub(crate) const EVERY: Duration = Duration::from_millis(100);
/// Probes whose median is one measurement (about a second of them).
pub(crate) const WINDOW: usize = 10;
/// Probes timed with the pool's PATCHes held, for the idle figure…
pub(crate) const HELD_PROBES: usize = 5;
/// …of which at least these must be answered.
const HELD_LEAST: usize = 3;
/// …this far apart.
const HELD_GAP: Duration = Duration::from_millis(40);
/// How often the idle figure is measured again (others come and go, and their load with them).
pub(crate) const REBASE: Duration = Duration::from_secs(30);
/// The longest the PATCHes in flight are waited for before the held probes start.
const DRAIN_AT_MOST: Duration = Duration::from_secs(1);
/// The longest a hold lasts, whatever happens to the probes (it is released after them).
const HOLD_AT_MOST: Duration = Duration::from_secs(2);
/// The idle figure is never taken below this: the jitter of a busy scheduler would read as a
/// multiple of a smaller one.
pub(crate) const LEAST_IDLE: Duration = Duration::from_micros(500);
/// How often an idle pool looks whether the limit follows latency and PATCHes go out.
const WAKE: Duration = Duration::from_millis(100);
/// A read not answered by then is timed at this: others wait at least as long.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// What the probes say against the idle figure.
#[derive(Debug, Default)]
pub(crate) struct Slowdown {
    /// The probes' median with the pool's PATCHes held, and when it was measured (or tried).
    idle: Option<Duration>,
    measured: Option<Instant>,
    window: Vec<Duration>,
}

impl Slowdown {
    /// Whether the idle figure is to be measured (again).
    pub(crate) fn due(&self, now: Instant) -> bool {
        self.measured
            .is_none_or(|at| now.duration_since(at) >= REBASE)
    }

    /// The held probes' times (`None`s unanswered): their median is the idle figure, when
    /// enough were answered.
    pub(crate) fn rebased(&mut self, held: &[Option<Duration>], now: Instant) {
        let mut answered: Vec<Duration> = held.iter().flatten().copied().collect();
        self.idle = (answered.len() >= HELD_LEAST).then(|| median(&mut answered).max(LEAST_IDLE));
        self.measured = Some(now);
        self.window.clear();
    }

    /// One probe's time; every [`WINDOW`] of them, how many times the idle figure their
    /// median is. Not smoothed further: a median of ten is steady enough, and a lagging
    /// figure would go on shrinking the limit after it reached the point that holds.
    pub(crate) fn add(&mut self, took: Duration) -> Option<f64> {
        let idle = self.idle?;
        self.window.push(took);
        if self.window.len() < WINDOW {
            return None;
        }
        let now = median(&mut self.window);
        self.window.clear();
        // Faster beside the PATCHes than with them held: the held figure was not idle (taken
        // in a run's first seconds, while kube-apiserver filled the watch cache of a resource
        // whose storage had just moved; the bench saw ratios of 0.13–0.4 for 30 s, and the
        // limit unrestrained meanwhile). The faster figure is the better idle one.
        let idle = if now < idle {
            let lower = now.max(LEAST_IDLE);
            self.idle = Some(lower);
            lower
        } else {
            idle
        };
        Some(now.as_secs_f64() / idle.as_secs_f64())
    }

    /// Nothing to measure now (alone, or no PATCHes): the next run starts afresh.
    fn forget(&mut self) {
        *self = Self::default();
    }
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort_unstable();
    samples.get(samples.len() / 2).copied().unwrap_or_default()
}

/// Probes kube-apiserver on a connection of its own while the pool's limit follows latency.
pub(crate) async fn watch(
    cluster: &ClusterClient,
    pressure: &Pressure,
    migrating: &Migrating,
    metrics: &MigratorMetrics,
) {
    // Not behind the PATCHes' own connection: HTTP/2 frames of their answers there would be
    // timed as the apiserver's wait.
    let client = match cluster.on_new_connection() {
        Ok(client) => client,
        Err(err) => {
            tracing::info!(error = %err, "no connection of its own for timing others' wait: --object-concurrency auto follows the PATCHes' latency alone");
            return;
        }
    };
    watch_with(pressure, metrics, || async {
        let _counted = pressure.reading();
        time_one_read(&client, migrating).await
    })
    .await;
}

/// One metadata-only LIST of one object of a resource being migrated, timed (at most
/// [`PROBE_TIMEOUT`]); `None` when there is none or it failed (a failed read says nothing of
/// the wait, and the migration's own requests meet the same error and deal with it).
async fn time_one_read(client: &ClusterClient, migrating: &Migrating) -> Option<Duration> {
    let resource = migrating.any()?;
    let started = Instant::now();
    match tokio::time::timeout(PROBE_TIMEOUT, list_metadata(client, &resource, 1, None)).await {
        Err(_) => Some(PROBE_TIMEOUT),
        Ok(Ok(_)) => Some(started.elapsed()),
        Ok(Err(err)) => {
            tracing::debug!(error = %err, resource = %resource.group_resource(), "timing a read of one object");
            None
        }
    }
}

/// The loop of [`watch`], with any probe (tests time a played apiserver).
pub(crate) async fn watch_with<P, F>(pressure: &Pressure, metrics: &MigratorMetrics, mut probe: P)
where
    P: FnMut() -> F,
    F: Future<Output = Option<Duration>>,
{
    let mut slowdown = Slowdown::default();
    loop {
        if !pressure.follows_latency() || !pressure.patching() {
            if slowdown.measured.is_some() {
                slowdown.forget();
                pressure.others_slowdown(None);
                metrics.others_slowdown.set(0.0);
            }
            tokio::time::sleep(WAKE).await;
            continue;
        }
        if slowdown.due(Instant::now()) {
            let held = probe_held(pressure, &mut probe).await;
            slowdown.rebased(&held, Instant::now());
            continue;
        }
        if let Some(ratio) = probe().await.and_then(|took| slowdown.add(took)) {
            metrics.others_slowdown.set(ratio);
            if pressure.others_slowdown(Some(ratio)) == Some(Step::Shrank) {
                tracing::debug!(
                    ratio,
                    limit = pressure.concurrency(),
                    "others wait longer beside the PATCHes: fewer in flight"
                );
            }
        }
        tokio::time::sleep(EVERY).await;
    }
}

/// [`HELD_PROBES`] probes with none of the pool's PATCHes in flight: it holds them, waits for
/// those in flight to be answered, probes, and lets them go.
async fn probe_held<P, F>(pressure: &Pressure, probe: &mut P) -> Vec<Option<Duration>>
where
    P: FnMut() -> F,
    F: Future<Output = Option<Duration>>,
{
    pressure.hold(HOLD_AT_MOST);
    let drained_by = Instant::now() + DRAIN_AT_MOST;
    while pressure.in_flight() > 0 && Instant::now() < drained_by {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut held = Vec::with_capacity(HELD_PROBES);
    for _ in 0..HELD_PROBES {
        held.push(probe().await);
        tokio::time::sleep(HELD_GAP).await;
    }
    pressure.release_hold();
    held
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::concurrency::{Mode, Neighbours};
    use crate::neighbours::test_resource;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_ratio_is_the_windows_median_over_the_held_median() {
        let mut slowdown = Slowdown::default();
        let start = Instant::now();
        assert!(slowdown.due(start));
        assert_eq!(slowdown.add(ms(5)), None, "no idle figure yet");
        slowdown.rebased(
            &[Some(ms(2)), Some(ms(2)), None, Some(ms(2)), Some(ms(9))],
            start,
        );
        assert!(!slowdown.due(start + REBASE - ms(1)));
        assert!(slowdown.due(start + REBASE));
        // Nine probes at 6 ms and one slow outlier: the median is 6, three times the idle 2.
        for _ in 0..WINDOW - 2 {
            assert_eq!(slowdown.add(ms(6)), None);
        }
        assert_eq!(slowdown.add(ms(100)), None);
        assert_eq!(slowdown.add(ms(6)), Some(3.0));
        // Then a window at the idle figure.
        let ratio = (0..WINDOW).filter_map(|_| slowdown.add(ms(2))).last();
        assert_eq!(ratio, Some(1.0));
    }

    #[test]
    fn a_window_faster_than_the_held_figure_becomes_the_idle_figure() {
        let mut slowdown = Slowdown::default();
        // Held while kube-apiserver was busy with something else than our PATCHes.
        slowdown.rebased(&[Some(ms(20)); HELD_PROBES], Instant::now());
        let ratio = (0..WINDOW).filter_map(|_| slowdown.add(ms(4))).last();
        assert_eq!(ratio, Some(1.0), "not 0.2: the held 20 ms was not idle");
        // Against the 4 ms now: 12 ms is three times it.
        let ratio = (0..WINDOW).filter_map(|_| slowdown.add(ms(12))).last();
        assert_eq!(ratio, Some(3.0));
        // Never below the floor.
        let ratio = (0..WINDOW)
            .filter_map(|_| slowdown.add(Duration::from_micros(100)))
            .last();
        assert_eq!(ratio, Some(0.2), "0.1 ms against {LEAST_IDLE:?}");
    }

    #[test]
    fn too_few_held_answers_give_no_idle_figure_and_a_tiny_one_is_taken_at_its_floor() {
        let mut slowdown = Slowdown::default();
        let now = Instant::now();
        slowdown.rebased(&[Some(ms(2)), None, None, Some(ms(2)), None], now);
        assert!(!slowdown.due(now), "tried: not again before REBASE");
        assert!((0..WINDOW).all(|_| slowdown.add(ms(50)).is_none()));
        slowdown.rebased(&[Some(Duration::from_micros(200)); HELD_PROBES], now);
        let ratio = (0..WINDOW).filter_map(|_| slowdown.add(ms(1))).last();
        assert_eq!(ratio, Some(2.0), "against {LEAST_IDLE:?}, not 0.2 ms");
    }

    /// A played saturated apiserver: a light request waits longer the more PATCHes are in
    /// flight (2 ms idle, half a millisecond more for each), while the PATCHes' own latency
    /// stays flat — what the latency rule cannot see.
    fn played_wait(in_flight: usize) -> Duration {
        ms(2) + Duration::from_micros(500) * u32::try_from(in_flight).unwrap_or(u32::MAX)
    }

    /// Keeps the pool's slots as full as the limit allows, each PATCH answered in a flat
    /// 10 ms (told to the latency rule).
    fn busy_pool(pressure: &Arc<Pressure>) -> tokio::task::JoinSet<()> {
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..64 {
            let pressure = pressure.clone();
            workers.spawn(async move {
                loop {
                    let slot = pressure.slot().await;
                    tokio::time::sleep(ms(10)).await;
                    let answer: Result<(), svm_cluster::ClusterError> = Ok(());
                    pressure.answered(&answer, ms(10), Some(slot.epoch()));
                    drop(slot);
                }
            });
        }
        workers
    }

    /// An adaptive pool on an apiserver its counts say is shared, its slots kept full.
    fn shared_busy_pool() -> (Arc<Pressure>, MigratorMetrics, tokio::task::JoinSet<()>) {
        let pressure = Arc::new(Pressure::new(0.0, 1, Mode::Adaptive { ceiling: 256 }));
        pressure.neighbours(Neighbours::Busy);
        let pool = busy_pool(&pressure);
        (pressure, MigratorMetrics::new(), pool)
    }

    #[tokio::test(start_paused = true)]
    async fn the_limit_settles_where_others_wait_less_than_the_shrink_point() {
        let (pressure, metrics, pool) = shared_busy_pool();
        let probing = {
            let pressure = pressure.clone();
            let metrics = metrics.clone();
            tokio::spawn(async move {
                let probe = || {
                    let in_flight = pressure.in_flight();
                    async move {
                        let took = played_wait(in_flight);
                        tokio::time::sleep(took).await;
                        Some(took)
                    }
                };
                watch_with(&pressure, &metrics, probe).await;
            })
        };
        tokio::time::sleep(Duration::from_secs(20)).await;
        // Idle (held) 2 ms; at 4 in flight 4 ms (2×): a quarter off; at 3, 3.5 ms (1.75×):
        // past the hold point, so the latency rule (flat PATCH latency) may not grow it back.
        assert_eq!(pressure.concurrency(), 3);
        let ratio = metrics.others_slowdown.get();
        assert!((1.4..1.8).contains(&ratio), "{ratio}");
        // Others gone (alone): the probes stop, the ratio is forgotten, the limit grows.
        pressure.neighbours(Neighbours::Quiet { own_queue: false });
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(metrics.others_slowdown.get(), 0.0);
        assert!(pressure.concurrency() > 3, "{}", pressure.concurrency());
        drop(pool);
        probing.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_not_answered_in_time_is_timed_at_the_timeout() {
        // A loopback port that accepts connections (the kernel's backlog) and never answers.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let url = format!("http://{}", silent.local_addr().expect("its address"));
        let config = kube::Config::new(url.parse().expect("a URL"));
        let client = ClusterClient::from_config(config).expect("a client");
        let migrating = Migrating::default();
        let entered = migrating.enter(&test_resource("", "configmaps", "ConfigMap"));
        assert_eq!(
            time_one_read(&client, &migrating).await,
            Some(PROBE_TIMEOUT)
        );
        drop(entered);
        assert_eq!(
            time_one_read(&client, &migrating).await,
            None,
            "nothing being migrated: nothing to read"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn failing_probes_move_nothing_and_leave_no_hold_behind() {
        let (pressure, metrics, pool) = shared_busy_pool();
        let probes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let probing = {
            let (pressure, metrics, probes) = (pressure.clone(), metrics.clone(), probes.clone());
            tokio::spawn(async move {
                let probe = || {
                    probes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    async { None }
                };
                watch_with(&pressure, &metrics, probe).await;
            })
        };
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(probes.load(std::sync::atomic::Ordering::SeqCst) >= HELD_PROBES);
        assert_eq!(metrics.others_slowdown.get(), 0.0);
        // The latency rule alone: flat latency, so it grew past where it started.
        assert!(pressure.concurrency() > 4, "{}", pressure.concurrency());
        probing.abort();
        drop(pool);
        let _slot = tokio::time::timeout(ms(100), pressure.slot())
            .await
            .expect("no hold left behind");
    }
}
