//! Who else is using the apiserver, from what kube-apiserver says it is doing: its `/metrics`.
//! `--object-concurrency auto` runs at its ceiling while the migrator is the only one working,
//! and falls back to the latency rule of [`AdaptiveLimit`](super::concurrency::AdaptiveLimit)
//! — which yields to others — as soon as anyone else works beside it.
//!
//! Latency alone cannot tell the two apart: our own PATCHes queueing behind each other raise
//! it exactly as another client's requests do. The apiserver's counts can, in two ways, and
//! either one makes the apiserver *shared*:
//!
//! - **how many of others' requests execute or wait now** — API Priority and Fairness's
//!   `apiserver_flowcontrol_current_executing_requests` and `…_current_inqueue_requests`, per
//!   priority level: the heavy client (eight LISTs of every object) shows at once. With the
//!   FlowSchema of `deploy/base/flowcontrol.yaml` our requests have a priority level of their
//!   own ([`OWN_LEVEL`]), so the others are every other level, and requests waiting in ours are
//!   our own queue (the level is full: more in flight would only wait longer). Without it (a
//!   cluster-admin's credentials are `exempt`), the others are everything counted minus our
//!   PATCHes in flight, which undercounts the others by the requests in transit, never
//!   overcounts them.
//! - **how many requests others sent since the last reading** — the counter
//!   `apiserver_request_total`, less the requests on the resources the pool is migrating with
//!   the verbs it uses on them ([`Migrating`]) and the non-resource requests (our own
//!   `/metrics` reads, health probes): the light client a gauge read once a second misses (one
//!   GET every 100 ms executes 3 ms of each 100) but whose every request would wait behind 64
//!   of ours. A handful a second ([`BUSY_RATE`]) is someone working; kube-apiserver's own
//!   lease renewals on an idle cluster (~0.3 a second) are not. A counter that went down, or a
//!   reading from another kube-apiserver process (`process_start_time_seconds`: behind a load
//!   balancer), gives no rate.
//!
//! Where `/metrics` cannot be read (no `get /metrics` grant: a 403), the latency rule decides
//! alone, as before.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::Pressure;
use super::concurrency::Neighbours;
use super::metrics::MigratorMetrics;
use svm_cluster::ClusterClient;
use svm_cluster::resources::group_resource;

/// The priority level `deploy/base/flowcontrol.yaml` gives the migrator's requests.
pub(crate) const OWN_LEVEL: &str = "svm-apiserver-migrator";
/// How often kube-apiserver's counts are read after a verdict changed (and at first).
pub(crate) const PERIOD: Duration = Duration::from_secs(1);
/// The longest wait between readings while the apiserver stays the migrator's alone: how long
/// a newcomer may wait behind 64 PATCHes before the migrator yields. Each reading costs
/// kube-apiserver the whole `/metrics` text (~45 ms of CPU for the 1.5 MB of the envtest
/// kube-apiserver, far more on a large cluster's), so a verdict that holds is read less often.
pub(crate) const LONGEST_ALONE: Duration = Duration::from_secs(4);
/// …and while it stays shared: how long the migrator may go on yielding after the others
/// left (it costs rate, never others' latency).
pub(crate) const LONGEST_SHARED: Duration = Duration::from_secs(15);
/// The first rate of a run is measured over this much: the limit follows latency until then.
pub(crate) const FIRST_PERIOD: Duration = Duration::from_millis(500);
/// How often an idle pool looks whether PATCHes started.
const WAKE: Duration = Duration::from_millis(100);
/// Others' requests executing or waiting (smoothed) at or above which the apiserver is shared.
pub(crate) const BUSY_AT: f64 = 1.0;
/// …and below which it is the migrator's alone again (hysteresis).
pub(crate) const QUIET_BELOW: f64 = 0.5;
/// Others' requests a second (smoothed) at or above which the apiserver is shared.
pub(crate) const BUSY_RATE: f64 = 3.0;
/// …and below which it is the migrator's alone again.
pub(crate) const QUIET_RATE: f64 = 1.5;
/// How often, while shared, others' latency is measured again with the pool's PATCHes held
/// (each costs ~1.3 s of migration: ~2 %).
pub(crate) const REBASE: Duration = Duration::from_secs(60);
/// How long the pool holds its PATCHes to measure others' latency without them…
const HOLD: Duration = Duration::from_millis(1_400);
/// …the first reading once those in flight are answered…
const DRAIN: Duration = Duration::from_millis(300);
/// …and the second this long after it.
const HELD_WINDOW: Duration = Duration::from_secs(1);
/// Others' requests timed between two readings for their mean latency to count.
const MIN_TIMED: f64 = 5.0;
/// Weight of a new sample in the smoothed counts.
const SMOOTHING: f64 = 0.5;

const EXECUTING: &str = "apiserver_flowcontrol_current_executing_requests";
const WAITING: &str = "apiserver_flowcontrol_current_inqueue_requests";
const ANSWERED: &str = "apiserver_request_total";
const SECONDS: &str = "apiserver_request_duration_seconds_sum";
const TIMED: &str = "apiserver_request_duration_seconds_count";
/// Requests whose duration is their connection's life, not a latency anyone waits on.
const LONG_RUNNING: [&str; 3] = ["WATCH", "WATCHLIST", "CONNECT"];
const PROCESS_STARTED: &str = "process_start_time_seconds";
/// What the migrator sends about a resource it migrates: its reads, the no-op write (a merge
/// patch, or an apply), a conflict's re-read.
const OUR_VERBS: [&str; 5] = ["GET", "LIST", "WATCH", "PATCH", "APPLY"];
/// Resources whose every request is taken for the migrator's: in companion mode its checkpoints
/// are status writes to the cluster's own migrations, one every `--chunk-size` objects (more
/// than one a second at full speed), which must not make the apiserver look shared.
const OURS_ALWAYS: [&str; 1] = ["storageversionmigrations.storagemigration.k8s.io"];

/// What one `/metrics` reading says.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Sample {
    /// (priority level, executing, waiting).
    levels: Vec<(String, f64, f64)>,
    /// Resource requests answered so far, per `resource.group` and verb.
    requests: Vec<Requests>,
    /// When the kube-apiserver process that counted them started.
    process: Option<f64>,
}

/// The counts of one resource and verb.
#[derive(Clone, Debug, Default, PartialEq)]
struct Requests {
    resource: String,
    verb: String,
    /// `apiserver_request_total`.
    answered: f64,
    /// `apiserver_request_duration_seconds`: the sum of their durations, and how many.
    seconds: f64,
    timed: f64,
}

/// Others' requests between two readings.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Others {
    /// Every request answered.
    pub requests: f64,
    /// The seconds the requests that are not long-running took, and how many they were.
    pub seconds: f64,
    pub timed: f64,
}

impl Others {
    /// Their mean latency, from at least `least` requests.
    pub(crate) fn mean_latency(&self, least: f64) -> Option<f64> {
        (self.timed >= least).then(|| self.seconds / self.timed)
    }
}

/// What one sample says, against our own requests in flight.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Observation {
    /// Requests of others executing or waiting.
    pub others: f64,
    /// Our requests waiting in our own priority level (0 when we have none of our own).
    pub own_waiting: f64,
    /// Requests others sent per second since the reading before (None: no rate).
    pub others_rate: Option<f64>,
}

impl Sample {
    /// The counts of a `/metrics` text; `None` when it has no APF gauges (APF off, or not
    /// kube-apiserver).
    pub(crate) fn parse(text: &str) -> Option<Sample> {
        let mut sample = Sample::default();
        let mut seen = false;
        for line in text.lines() {
            if let Some(value) = line
                .strip_prefix(PROCESS_STARTED)
                .and_then(|v| v.strip_prefix(' '))
            {
                sample.process = value.trim().parse().ok();
                continue;
            }
            let Some((name, labels, value)) = series(line) else {
                continue;
            };
            match name {
                EXECUTING | WAITING => {
                    let Some(level) = label(labels, "priority_level") else {
                        continue;
                    };
                    seen = true;
                    let counts = if name == WAITING {
                        (0.0, value)
                    } else {
                        (value, 0.0)
                    };
                    sample.add_level(level, counts);
                }
                ANSWERED | SECONDS | TIMED => sample.add_requests(name, labels, value),
                _ => {}
            }
        }
        seen.then_some(sample)
    }

    fn add_level(&mut self, level: &str, (executing, waiting): (f64, f64)) {
        match self.levels.iter_mut().find(|(l, _, _)| l == level) {
            Some(entry) => {
                entry.1 += executing;
                entry.2 += waiting;
            }
            None => self.levels.push((level.to_string(), executing, waiting)),
        }
    }

    /// One series of `apiserver_request_total` or of `apiserver_request_duration_seconds`'s
    /// sum and count, summed over what we do not tell apart (code, scope, version, …);
    /// non-resource requests are left out.
    fn add_requests(&mut self, name: &str, labels: &str, value: f64) {
        let (Some(resource), Some(verb)) = (label(labels, "resource"), label(labels, "verb"))
        else {
            return;
        };
        if resource.is_empty() {
            return;
        }
        let resource = group_resource(label(labels, "group").unwrap_or_default(), resource);
        let at = match self
            .requests
            .iter()
            .position(|r| r.resource == resource && r.verb == verb)
        {
            Some(at) => at,
            None => {
                self.requests.push(Requests {
                    resource,
                    verb: verb.to_string(),
                    ..Requests::default()
                });
                self.requests.len() - 1
            }
        };
        let entry = &mut self.requests[at];
        match name {
            ANSWERED => entry.answered += value,
            SECONDS => entry.seconds += value,
            _ => entry.timed += value,
        }
    }

    /// Others' requests and our own queue, given `ours` PATCHes in flight when the sample was
    /// taken. The request that read the sample is executing too, and is not another's.
    pub(crate) fn observe(&self, ours: usize) -> Observation {
        let own = self.levels.iter().find(|(l, _, _)| l == OWN_LEVEL);
        let total = |skip: Option<&str>| -> f64 {
            self.levels
                .iter()
                .filter(|(l, _, _)| Some(l.as_str()) != skip)
                .map(|(_, e, w)| e + w)
                .sum()
        };
        let (others, own_waiting) = match own {
            Some((_, executing, waiting)) if executing + waiting > 0.0 => {
                (total(Some(OWN_LEVEL)) - 1.0, *waiting)
            }
            _ => (total(None) - ours as f64 - 1.0, 0.0),
        };
        Observation {
            others: others.max(0.0),
            own_waiting,
            others_rate: None,
        }
    }

    /// Others' requests between `before` and this sample — every resource request answered
    /// but those on the resources in `migrating` with [`OUR_VERBS`] and those on
    /// [`OURS_ALWAYS`] — and how long those that are not long-running took. `None` when the
    /// two are not one process's counts (another kube-apiserver, a restart).
    pub(crate) fn others_between(&self, before: &Sample, migrating: &[String]) -> Option<Others> {
        if self.process.is_none() || self.process != before.process {
            return None;
        }
        let mut others = Others::default();
        for now in &self.requests {
            let then = before
                .requests
                .iter()
                .find(|r| r.resource == now.resource && r.verb == now.verb)
                .cloned()
                .unwrap_or_default();
            if now.answered < then.answered || now.timed < then.timed {
                return None;
            }
            let ours = OURS_ALWAYS.contains(&now.resource.as_str())
                || (migrating.contains(&now.resource) && OUR_VERBS.contains(&now.verb.as_str()));
            if ours {
                continue;
            }
            others.requests += now.answered - then.answered;
            if !LONG_RUNNING.contains(&now.verb.as_str()) {
                others.seconds += now.seconds - then.seconds;
                others.timed += now.timed - then.timed;
            }
        }
        Some(others)
    }
}

/// A sample line's metric name, label set and value: `name{labels} value`.
fn series(line: &str) -> Option<(&str, &str, f64)> {
    let (name, rest) = line.split_once('{')?;
    let (labels, value) = rest.rsplit_once("} ")?;
    Some((name, labels, value.trim().parse().ok()?))
}

/// The value of label `name` in a Prometheus label set (`a="x",b="y"`).
fn label<'a>(labels: &'a str, name: &str) -> Option<&'a str> {
    let at = labels
        .match_indices(&format!("{name}=\""))
        .find(|(i, _)| *i == 0 || labels.as_bytes()[i - 1] == b',')?
        .0;
    let start = at + name.len() + 2;
    let len = labels[start..].find('"')?;
    Some(&labels[start..start + len])
}

/// The smoothed counts of others' requests, with hysteresis: one request of a light client
/// caught by a sample does not make the apiserver shared, a steady one does.
#[derive(Debug, Default)]
pub(crate) struct Judge {
    smoothed: Option<f64>,
    rate: Option<f64>,
    busy: bool,
}

impl Judge {
    /// The verdict after `seen`: whether others are using the apiserver, and whether our own
    /// level queues.
    pub(crate) fn judge(&mut self, seen: Observation) -> Neighbours {
        let smoothed = smooth(self.smoothed, seen.others);
        self.smoothed = Some(smoothed);
        if let Some(rate) = seen.others_rate {
            self.rate = Some(smooth(self.rate, rate));
        }
        let rate = self.rate.unwrap_or(0.0);
        if smoothed >= BUSY_AT || rate >= BUSY_RATE {
            self.busy = true;
        } else if smoothed < QUIET_BELOW && rate < QUIET_RATE {
            self.busy = false;
        }
        if self.busy {
            Neighbours::Busy
        } else {
            Neighbours::Quiet {
                own_queue: seen.own_waiting > 0.0,
            }
        }
    }
}

fn smooth(before: Option<f64>, seen: f64) -> f64 {
    match before {
        Some(before) => before + SMOOTHING * (seen - before),
        None => seen,
    }
}

/// The resources the pool is migrating now: its own requests on them are not others'.
#[derive(Debug, Default)]
pub(crate) struct Migrating(Mutex<Vec<String>>);

/// A resource being migrated; it is no longer once dropped.
#[must_use]
pub(crate) struct Entered<'a> {
    migrating: &'a Migrating,
    resource: String,
}

impl Migrating {
    /// `resource` (as `resource.group`) is being migrated until the guard is dropped.
    pub(crate) fn enter(&self, resource: String) -> Entered<'_> {
        self.lock().push(resource.clone());
        Entered {
            migrating: self,
            resource,
        }
    }

    fn now(&self) -> Vec<String> {
        self.lock().clone()
    }

    fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        let mut migrating = self.migrating.lock();
        if let Some(at) = migrating.iter().position(|r| *r == self.resource) {
            migrating.swap_remove(at);
        }
    }
}

/// What the pool needs to judge its neighbours.
pub(crate) struct Sources<'a> {
    pub cluster: &'a ClusterClient,
    pub pressure: &'a Pressure,
    pub migrating: &'a Migrating,
    pub metrics: &'a MigratorMetrics,
}

/// Reads kube-apiserver's counts while a migration runs or the pool sends PATCHes — the first
/// two readings [`FIRST_PERIOD`] apart, then at the [`Pace`] of its verdicts — and tells the
/// pool's [`Pressure`] what they say; stops at the first answer that says it may not (a 403,
/// or `/metrics` outside the access catalogue), leaving the latency rule in charge.
pub(crate) async fn watch(sources: Sources<'_>) {
    let mut watcher = Watcher {
        sources,
        judge: Judge::default(),
        before: None,
        pace: Pace::default(),
        guard: Guard::default(),
    };
    while let Some(wait) = watcher.step().await {
        tokio::time::sleep(wait).await;
    }
}

struct Watcher<'a> {
    sources: Sources<'a>,
    judge: Judge,
    /// The last reading, and when it was taken.
    before: Option<(Sample, Instant)>,
    pace: Pace,
    guard: Guard,
}

impl Watcher<'_> {
    /// One reading and what it says; how long until the next (`None`: never again).
    async fn step(&mut self) -> Option<Duration> {
        let pressure = self.sources.pressure;
        // From the moment a migration starts (its discovery and preflight come before its
        // first PATCH), so that the first verdict is there about when the PATCHes start.
        if !pressure.patching() && self.sources.migrating.is_empty() {
            // The counts go stale while nothing is sent: the next run starts afresh.
            self.before = None;
            self.pace = Pace::default();
            return Some(WAKE);
        }
        let sample = match read(self.sources.cluster).await {
            Ok(sample) => sample,
            Err(Unreadable::Transient) => {
                pressure.neighbours(Neighbours::Unknown);
                self.before = None;
                return Some(PERIOD);
            }
            Err(Unreadable::Never) => {
                pressure.neighbours(Neighbours::Unknown);
                return None;
            }
        };
        let now = Instant::now();
        let mut seen = sample.observe(pressure.in_flight());
        let others = self.before.as_ref().map(|(earlier, at)| {
            (
                sample.others_between(earlier, &self.sources.migrating.now()),
                *at,
            )
        });
        self.before = Some((sample, now));
        let Some((others, at)) = others else {
            // A rate needs two readings: the verdict waits for the second.
            return Some(FIRST_PERIOD);
        };
        let elapsed = now.duration_since(at).as_secs_f64().max(0.001);
        seen.others_rate = others.map(|o| o.requests / elapsed);
        let verdict = self.judge.judge(seen);
        self.sources
            .metrics
            .apiserver_shared
            .set(i64::from(verdict == Neighbours::Busy));
        pressure.neighbours(verdict);
        let guarding = self.guard_others(verdict, others).await?;
        Some(self.pace.after(verdict, guarding))
    }

    /// While the apiserver is shared: how much slower others' requests are than while the
    /// pool held its PATCHes (measured again every [`REBASE`]), told to the pool; what that
    /// needs of the readings. `None`: `/metrics` may not be read.
    async fn guard_others(
        &mut self,
        verdict: Neighbours,
        others: Option<Others>,
    ) -> Option<Guarding> {
        let pressure = self.sources.pressure;
        if verdict != Neighbours::Busy {
            self.guard = Guard::default();
            self.publish(None);
            return Some(Guarding::Off);
        }
        if self.guard.due(Instant::now()) {
            let baseline = match self.measure_held().await {
                Ok(baseline) => baseline,
                Err(Unreadable::Never) => return None,
                Err(Unreadable::Transient) => {
                    self.before = None;
                    None
                }
            };
            self.guard.rebased(baseline, Instant::now());
            return Some(if baseline.is_some() {
                Guarding::On
            } else {
                Guarding::Off
            });
        }
        let ratio = self
            .guard
            .ratio(others.and_then(|o| o.mean_latency(MIN_TIMED)));
        self.publish(ratio);
        if pressure.others_slowdown(ratio) == Some(super::concurrency::Step::Shrank) {
            tracing::debug!(
                ?ratio,
                limit = pressure.concurrency(),
                "others' requests are slowed: fewer PATCHes in flight"
            );
        }
        Some(match ratio {
            Some(r) if r >= super::concurrency::OTHERS_HOLD_AT => Guarding::Slowed,
            _ if self.guard.baseline.is_some() => Guarding::On,
            _ => Guarding::Off,
        })
    }

    fn publish(&self, ratio: Option<f64>) {
        self.sources
            .metrics
            .others_slowdown
            .set(ratio.unwrap_or(0.0));
    }

    /// Others' mean latency with none of our PATCHes in flight: the pool holds them for
    /// [`HOLD`], and the two readings [`HELD_WINDOW`] apart start once those in flight are
    /// answered ([`DRAIN`]). `None` when too few of others' requests were timed meanwhile.
    async fn measure_held(&mut self) -> Result<Option<f64>, Unreadable> {
        self.sources.pressure.hold(HOLD);
        tokio::time::sleep(DRAIN).await;
        let first = read(self.sources.cluster).await?;
        tokio::time::sleep(HELD_WINDOW).await;
        let second = read(self.sources.cluster).await?;
        let baseline = second
            .others_between(&first, &self.sources.migrating.now())
            .and_then(|o| o.mean_latency(MIN_TIMED));
        self.before = Some((second, Instant::now()));
        Ok(baseline)
    }
}

/// Others' latency against what it is while the pool holds its PATCHes.
#[derive(Debug, Default)]
struct Guard {
    /// Others' mean latency while held (seconds), when enough were timed.
    baseline: Option<f64>,
    /// When it was last measured (or tried).
    measured: Option<Instant>,
    smoothed: Option<f64>,
}

impl Guard {
    fn due(&self, now: Instant) -> bool {
        self.measured
            .is_none_or(|at| now.duration_since(at) >= REBASE)
    }

    fn rebased(&mut self, baseline: Option<f64>, now: Instant) {
        self.baseline = baseline.filter(|b| *b > 0.0);
        self.measured = Some(now);
        self.smoothed = None;
    }

    /// Others' latency now over the baseline, smoothed; `None` when either is not known.
    fn ratio(&mut self, latency: Option<f64>) -> Option<f64> {
        let ratio = latency? / self.baseline?;
        let smoothed = smooth(self.smoothed, ratio);
        self.smoothed = Some(smoothed);
        Some(smoothed)
    }
}

/// How long until the next reading: [`PERIOD`] after a verdict changed or while others'
/// requests are slowed, doubling while the verdict holds, up to [`LONGEST_ALONE`] — or, while
/// shared with no baseline of others' latency to guard, [`LONGEST_SHARED`].
#[derive(Debug, Default)]
struct Pace {
    last: Option<Neighbours>,
    wait: Option<Duration>,
}

/// What the guard of others' latency needs of the readings.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Guarding {
    /// Nothing (alone, or no baseline).
    Off,
    /// A baseline to hold others' latency to: readings no further apart than alone.
    On,
    /// Others' requests are slowed: a reading every [`PERIOD`].
    Slowed,
}

impl Pace {
    fn after(&mut self, verdict: Neighbours, guarding: Guarding) -> Duration {
        let shared = verdict == Neighbours::Busy;
        let held = self
            .last
            .is_some_and(|last| (last == Neighbours::Busy) == shared);
        let longest = if shared && guarding == Guarding::Off {
            LONGEST_SHARED
        } else {
            LONGEST_ALONE
        };
        let wait = match self.wait {
            Some(wait) if held && guarding != Guarding::Slowed => (wait * 2).min(longest),
            _ => PERIOD,
        };
        self.last = Some(verdict);
        self.wait = Some(wait);
        wait
    }
}

/// Why kube-apiserver's counts could not be had.
enum Unreadable {
    /// This time (a timeout, a 5xx): try again.
    Transient,
    /// Not now and not later: no grant, not in the access catalogue, no APF gauges.
    Never,
}

/// One reading of kube-apiserver's `/metrics`.
async fn read(cluster: &ClusterClient) -> Result<Sample, Unreadable> {
    let answer = match cluster
        .request(http::Method::GET, "/metrics", "text/plain", None)
        .await
    {
        Ok(answer) => answer,
        Err(err) if err.is_retriable() => {
            tracing::debug!(error = %err, "reading kube-apiserver's /metrics");
            return Err(Unreadable::Transient);
        }
        Err(err) => {
            tracing::info!(error = %err, "kube-apiserver's /metrics cannot be read: --object-concurrency auto follows latency alone");
            return Err(Unreadable::Never);
        }
    };
    Sample::parse(&String::from_utf8_lossy(&answer.body)).ok_or_else(|| {
        tracing::info!(
            "kube-apiserver's /metrics has no API Priority and Fairness gauges: --object-concurrency auto follows latency alone"
        );
        Unreadable::Never
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What kube-apiserver v1.36's `/metrics` says of APF (trimmed to the two gauges and a
    /// neighbour that shares a prefix).
    fn scrape(levels: &[(&str, &str, f64, f64)]) -> String {
        let mut text = String::from(
            "# HELP apiserver_flowcontrol_current_executing_requests [BETA] Number of requests in initial (for a WATCH) or any (for a non-WATCH) execution stage in the API Priority and Fairness subsystem\n# TYPE apiserver_flowcontrol_current_executing_requests gauge\n",
        );
        for (level, schema, executing, _) in levels {
            text.push_str(&format!(
                "{EXECUTING}{{flow_schema=\"{schema}\",priority_level=\"{level}\"}} {executing}\n"
            ));
        }
        for (level, schema, _, waiting) in levels {
            text.push_str(&format!(
                "{WAITING}{{flow_schema=\"{schema}\",priority_level=\"{level}\"}} {waiting}\n"
            ));
        }
        text.push_str("apiserver_flowcontrol_current_executing_seats{flow_schema=\"exempt\",priority_level=\"exempt\"} 99\n");
        text
    }

    #[test]
    fn without_a_level_of_our_own_the_others_are_everything_but_our_patches_and_the_scrape() {
        let text = scrape(&[
            ("exempt", "exempt", 40.0, 0.0),
            ("workload-low", "service-accounts", 3.0, 2.0),
        ]);
        let sample = Sample::parse(&text).expect("APF gauges");
        // 39 of ours in flight: one exempt request is the scrape, the 5 in workload-low others.
        assert_eq!(
            sample.observe(39),
            Observation {
                others: 5.0,
                own_waiting: 0.0,
                others_rate: None,
            }
        );
        // Requests in transit: the apiserver counts fewer of ours than we have in flight.
        assert_eq!(sample.observe(64).others, 0.0);
    }

    #[test]
    fn with_our_own_level_the_others_are_the_other_levels_and_its_queue_is_ours() {
        let text = scrape(&[
            (OWN_LEVEL, OWN_LEVEL, 10.0, 30.0),
            ("workload-low", "service-accounts", 1.0, 0.0),
            ("global-default", "global-default", 0.0, 0.0),
        ]);
        let seen = Sample::parse(&text).expect("APF gauges").observe(40);
        // The one in workload-low is our scrape (a non-resource GET our FlowSchema does not
        // classify).
        assert_eq!(
            seen,
            Observation {
                others: 0.0,
                own_waiting: 30.0,
                others_rate: None,
            }
        );
        let text = scrape(&[
            (OWN_LEVEL, OWN_LEVEL, 10.0, 0.0),
            ("workload-high", "kube-controller-manager", 6.0, 2.0),
        ]);
        let seen = Sample::parse(&text).expect("APF gauges").observe(3);
        assert_eq!(
            seen,
            Observation {
                others: 7.0,
                own_waiting: 0.0,
                others_rate: None,
            }
        );
    }

    #[test]
    fn a_scrape_without_apf_gauges_says_nothing() {
        assert_eq!(Sample::parse("process_cpu_seconds_total 12\n"), None);
        assert_eq!(
            Sample::parse("apiserver_flowcontrol_current_executing_requests{} x\n"),
            None
        );
    }

    #[test]
    fn a_light_client_seen_now_and_then_leaves_the_apiserver_ours_a_steady_one_shares_it() {
        let quiet = Observation {
            others: 0.0,
            own_waiting: 0.0,
            others_rate: None,
        };
        let one = Observation {
            others: 1.0,
            own_waiting: 0.0,
            others_rate: None,
        };
        let eight = Observation {
            others: 8.0,
            own_waiting: 0.0,
            others_rate: None,
        };
        let mut judge = Judge::default();
        // A neighbour's GET caught by one sample in four.
        for seen in [quiet, one, quiet, quiet, quiet, one, quiet, quiet] {
            assert_eq!(judge.judge(seen), Neighbours::Quiet { own_queue: false });
        }
        // Eight LISTs at a time: shared at once, and it stays shared while they run.
        assert_eq!(judge.judge(eight), Neighbours::Busy);
        assert_eq!(judge.judge(one), Neighbours::Busy);
        assert_eq!(judge.judge(eight), Neighbours::Busy);
        // They stop: ours again once the smoothed count has fallen below QUIET_BELOW.
        let verdicts: Vec<Neighbours> = (0..5).map(|_| judge.judge(quiet)).collect();
        assert_eq!(
            verdicts.last(),
            Some(&Neighbours::Quiet { own_queue: false })
        );
        assert_eq!(verdicts[0], Neighbours::Busy);
        let queued = Observation {
            others: 0.0,
            own_waiting: 3.0,
            others_rate: None,
        };
        assert_eq!(judge.judge(queued), Neighbours::Quiet { own_queue: true });
    }

    /// `apiserver_request_total` as kube-apiserver v1.36 writes it, one series per
    /// (resource, verb, count); the group is `blobs.example.com`'s for `blobs`.
    fn answered(process: f64, series: &[(&str, &str, f64)]) -> String {
        let mut text = scrape(&[("exempt", "exempt", 1.0, 0.0)]);
        text.push_str(&format!("process_start_time_seconds {process}\n"));
        for (resource, verb, n) in series {
            let group = match *resource {
                "blobs" => "example.com",
                "storageversionmigrations" => "storagemigration.k8s.io",
                _ => "",
            };
            let subresource = if resource.is_empty() { "/readyz" } else { "" };
            text.push_str(&format!(
                "{ANSWERED}{{code=\"200\",component=\"apiserver\",dry_run=\"\",group=\"{group}\",resource=\"{resource}\",scope=\"resource\",subresource=\"{subresource}\",system_client=\"\",verb=\"{verb}\",version=\"v1\"}} {n}\n"
            ));
        }
        text
    }

    #[test]
    fn others_requests_are_every_resource_request_but_ours_on_what_the_pool_migrates() {
        let before = Sample::parse(&answered(
            1.7e9,
            &[
                ("blobs", "PATCH", 100.0),
                ("configmaps", "GET", 10.0),
                ("", "GET", 5.0),
            ],
        ))
        .expect("APF gauges");
        let after = Sample::parse(&answered(
            1.7e9,
            &[
                // Ours: 800 PATCHes, 3 LISTs, a conflict's GET on the migrated resource.
                ("blobs", "PATCH", 900.0),
                ("blobs", "LIST", 3.0),
                ("blobs", "GET", 1.0),
                // Another client's: 10 GETs of a ConfigMap, and a write to the migrated
                // resource (not a verb of ours).
                ("configmaps", "GET", 20.0),
                ("blobs", "PUT", 2.0),
                // Health probes and our /metrics reads: not resource requests.
                ("", "GET", 50.0),
            ],
        ))
        .expect("APF gauges");
        let migrating = vec!["blobs.example.com".to_string()];
        assert_eq!(
            after
                .others_between(&before, &migrating)
                .map(|o| o.requests),
            Some(12.0)
        );
        // Nothing migrated: every resource request is another's.
        assert_eq!(
            after.others_between(&before, &[]).map(|o| o.requests),
            Some(816.0)
        );
    }

    #[test]
    fn our_checkpoints_to_the_clusters_own_migrations_are_not_anothers_requests() {
        let before = Sample::parse(&answered(
            1.7e9,
            &[("storageversionmigrations", "PUT", 3.0)],
        ))
        .expect("APF gauges");
        let after = Sample::parse(&answered(
            1.7e9,
            &[
                ("storageversionmigrations", "PUT", 5.0),
                ("pods", "LIST", 1.0),
            ],
        ))
        .expect("APF gauges");
        assert_eq!(
            after.others_between(&before, &[]).map(|o| o.requests),
            Some(1.0)
        );
    }

    #[test]
    fn counts_of_another_process_or_that_went_down_give_no_rate() {
        let before = Sample::parse(&answered(1.7e9, &[("configmaps", "GET", 10.0)])).expect("APF");
        let restarted =
            Sample::parse(&answered(1.8e9, &[("configmaps", "GET", 12.0)])).expect("APF");
        assert_eq!(
            restarted.others_between(&before, &[]).map(|o| o.requests),
            None
        );
        let lower = Sample::parse(&answered(1.7e9, &[("configmaps", "GET", 4.0)])).expect("APF");
        assert_eq!(lower.others_between(&before, &[]).map(|o| o.requests), None);
        let unknown = Sample::parse(&scrape(&[("exempt", "exempt", 1.0, 0.0)])).expect("APF");
        assert_eq!(
            unknown.others_between(&unknown, &[]).map(|o| o.requests),
            None
        );
    }

    #[test]
    fn a_label_is_read_whole_not_as_the_tail_of_another() {
        let labels = "subresource=\"status\",resource=\"pods\",verb=\"GET\"";
        assert_eq!(label(labels, "resource"), Some("pods"));
        assert_eq!(label(labels, "subresource"), Some("status"));
        assert_eq!(label(labels, "group"), None);
    }

    #[test]
    fn a_steady_client_of_a_few_requests_a_second_shares_the_apiserver_background_does_not() {
        let at = |rate: f64| Observation {
            others: 0.0,
            own_waiting: 0.0,
            others_rate: Some(rate),
        };
        // kube-apiserver's own lease renewals on an idle cluster: ~0.3 a second.
        let mut judge = Judge::default();
        for rate in [0.0, 1.0, 0.0, 0.0, 2.0, 0.0, 1.0] {
            assert_eq!(
                judge.judge(at(rate)),
                Neighbours::Quiet { own_queue: false }
            );
        }
        // The bench's neighbour: one GET every 100 ms — never executing when a gauge is read.
        assert_eq!(judge.judge(at(10.0)), Neighbours::Busy);
        assert_eq!(judge.judge(at(9.0)), Neighbours::Busy);
        // A reading with no rate (another kube-apiserver answered) changes nothing.
        let no_rate = Observation {
            others_rate: None,
            ..at(0.0)
        };
        assert_eq!(judge.judge(no_rate), Neighbours::Busy);
        // It stops: the apiserver is ours again once the smoothed rate is below QUIET_RATE.
        let verdicts: Vec<Neighbours> = (0..4).map(|_| judge.judge(at(0.0))).collect();
        assert_eq!(verdicts[0], Neighbours::Busy);
        assert_eq!(
            verdicts.last(),
            Some(&Neighbours::Quiet { own_queue: false })
        );
    }

    #[test]
    fn a_resource_is_migrating_while_its_guard_lives_and_twice_when_entered_twice() {
        let migrating = Migrating::default();
        let first = migrating.enter("blobs.example.com".into());
        let second = migrating.enter("blobs.example.com".into());
        drop(first);
        assert_eq!(migrating.now(), vec!["blobs.example.com".to_string()]);
        drop(second);
        assert!(migrating.now().is_empty());
    }

    /// Two readings of the real kube-apiserver v1.36.2 with 13 resource requests in between
    /// (`tests/fixtures/metrics/README.md` says which).
    #[test]
    fn the_real_kube_apiservers_counts_read_as_recorded() {
        let before = Sample::parse(include_str!(
            "../../../../tests/fixtures/metrics/kube-apiserver-1.36.2-before.txt"
        ))
        .expect("APF gauges");
        let after = Sample::parse(include_str!(
            "../../../../tests/fixtures/metrics/kube-apiserver-1.36.2-after.txt"
        ))
        .expect("APF gauges");
        // The reading itself executes in workload-low (non-resource, not in our FlowSchema):
        // nobody else is there.
        assert_eq!(after.observe(0).others, 0.0);
        assert_eq!(
            after.others_between(&before, &[]).map(|o| o.requests),
            Some(13.0)
        );
        // Migrating ServiceAccounts: its 5 PATCHes are ours, the 8 ConfigMap reads others'.
        let serviceaccounts = vec!["serviceaccounts".to_string()];
        assert_eq!(
            after
                .others_between(&before, &serviceaccounts)
                .map(|o| o.requests),
            Some(8.0)
        );
        let configmaps = vec!["configmaps".to_string()];
        assert_eq!(
            after
                .others_between(&before, &configmaps)
                .map(|o| o.requests),
            Some(5.0)
        );
    }

    #[test]
    fn a_verdict_that_holds_is_read_less_often_a_change_at_once_again() {
        let mut pace = Pace::default();
        let alone = Neighbours::Quiet { own_queue: false };
        let waits: Vec<u64> = [alone, alone, alone, alone, alone]
            .into_iter()
            .map(|v| pace.after(v, Guarding::Off).as_secs())
            .collect();
        assert_eq!(waits, [1, 2, 4, 4, 4]);
        // Our own level queueing is still the apiserver being ours.
        assert_eq!(
            pace.after(Neighbours::Quiet { own_queue: true }, Guarding::Off),
            LONGEST_ALONE
        );
        // Someone came: read again in a second, then less and less often while they stay.
        let waits: Vec<u64> = (0..6)
            .map(|_| pace.after(Neighbours::Busy, Guarding::Off).as_secs())
            .collect();
        assert_eq!(waits, [1, 2, 4, 8, 15, 15]);
        assert_eq!(pace.after(alone, Guarding::Off), PERIOD);
        // Shared with others' requests slowed: read every second; once they are not, the
        // waits grow again, to LONGEST_ALONE at most while a baseline guards them.
        pace.after(Neighbours::Busy, Guarding::On);
        assert_eq!(pace.after(Neighbours::Busy, Guarding::Slowed), PERIOD);
        assert_eq!(pace.after(Neighbours::Busy, Guarding::Slowed), PERIOD);
        let waits: Vec<u64> = (0..4)
            .map(|_| pace.after(Neighbours::Busy, Guarding::On).as_secs())
            .collect();
        assert_eq!(waits, [2, 4, 4, 4]);
    }

    /// `apiserver_request_total` and `apiserver_request_duration_seconds`' sum and count
    /// for (resource, verb, answered, seconds).
    fn timed(series: &[(&str, &str, f64, f64)]) -> String {
        let mut text = scrape(&[("exempt", "exempt", 1.0, 0.0)]);
        text.push_str("process_start_time_seconds 1.7e9\n");
        for (resource, verb, n, seconds) in series {
            let labels = format!(
                "component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"{resource}\",scope=\"resource\",subresource=\"\",verb=\"{verb}\",version=\"v1\""
            );
            text.push_str(&format!("{ANSWERED}{{code=\"200\",{labels}}} {n}\n"));
            text.push_str(&format!("{SECONDS}{{{labels}}} {seconds}\n"));
            text.push_str(&format!("{TIMED}{{{labels}}} {n}\n"));
        }
        text
    }

    #[test]
    fn others_latency_is_that_of_their_short_requests_from_a_few_of_them() {
        let before = Sample::parse(&timed(&[
            ("configmaps", "GET", 100.0, 0.2),
            ("pods", "WATCH", 3.0, 900.0),
            ("blobs", "PATCH", 1_000.0, 50.0),
        ]))
        .expect("APF gauges");
        let after = Sample::parse(&timed(&[
            // 10 GETs in 0.05 s: 5 ms each.
            ("configmaps", "GET", 110.0, 0.25),
            // A watch ended after 10 minutes: not a latency anyone waited on.
            ("pods", "WATCH", 4.0, 1_500.0),
            // Ours.
            ("blobs", "PATCH", 2_000.0, 150.0),
        ]))
        .expect("APF gauges");
        let others = after
            .others_between(&before, &["blobs".to_string()])
            .expect("one process");
        assert_eq!(others.requests, 11.0);
        let mean = others.mean_latency(5.0).expect("10 timed");
        assert!((mean - 0.005).abs() < 1e-9, "{mean}");
        assert_eq!(others.mean_latency(11.0), None, "too few to judge");
    }

    #[test]
    fn others_latency_is_judged_against_what_it_was_while_ours_were_held() {
        let mut guard = Guard::default();
        let start = Instant::now();
        assert!(guard.due(start), "measured first");
        guard.rebased(Some(0.002), start);
        assert!(!guard.due(start + Duration::from_secs(59)));
        assert!(guard.due(start + REBASE));
        assert_eq!(guard.ratio(Some(0.002)), Some(1.0));
        // 5× for one reading: smoothed to 3×.
        let ratio = guard.ratio(Some(0.010)).expect("both known");
        assert!((ratio - 3.0).abs() < 1e-9, "{ratio}");
        assert_eq!(guard.ratio(None), None, "too few of others' requests");
        // Others were too few while held: nothing to judge against.
        guard.rebased(None, start);
        assert_eq!(guard.ratio(Some(0.010)), None);
    }
}
