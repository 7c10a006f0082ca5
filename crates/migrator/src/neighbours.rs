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
//! Both come from one of two accounts kube-apiserver keeps ([`Account`]). Where the migrator's
//! requests have a priority level of their own, API Priority and Fairness's dump of its levels
//! says it all in a few lines: executing and waiting per level, and requests dispatched per
//! level since it was created — every other level's are others'. Where they share a level
//! with others' (a cluster-admin's are `exempt`, with everyone else's there), only `/metrics`
//! tells ours from theirs, by resource and verb — at the price of the whole exposition each
//! reading. The dump is tried first at every migration's start; `/metrics` is read when the
//! dump cannot be (no grant, an older apiserver), has no level of ours, or its level does not
//! count our PATCHes (the FlowSchema matches someone else).
//!
//! Where neither can be read (no grant: a 403), the latency rule decides alone, as before.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::Pressure;
use super::concurrency::Neighbours;
use super::metrics::AccountLabel;
use super::metrics::MigratorMetrics;
use crate::priority_levels;
use svm_cluster::ClusterClient;
use svm_cluster::resources::{ResolvedResource, group_resource};
use svm_runtime::prometheus::{proto as prometheus_proto, text as prometheus_text};

/// The priority level `deploy/base/flowcontrol.yaml` gives the migrator's requests.
pub(crate) const OWN_LEVEL: &str = "svm-apiserver-migrator";
/// How often kube-apiserver's counts are read after a verdict changed (and at first).
pub(crate) const PERIOD: Duration = Duration::from_secs(1);
/// The longest wait between readings while the apiserver stays the migrator's alone: how long
/// a newcomer may wait behind 64 PATCHes before the migrator yields. Each reading costs
/// kube-apiserver its whole `/metrics` (10–12 ms of CPU for the 374 KB of protobuf of the
/// envtest kube-apiserver, idle; far more on a large cluster's, or a busy one), so a verdict
/// that holds is read less often.
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
/// Fewer of others' requests than this between two readings make no rate.
const MIN_REQUESTS: f64 = 2.0;
/// Weight of a new sample in the smoothed counts.
const SMOOTHING: f64 = 0.5;

const EXECUTING: &str = "apiserver_flowcontrol_current_executing_requests";
const WAITING: &str = "apiserver_flowcontrol_current_inqueue_requests";
const ANSWERED: &str = "apiserver_request_total";
const PROCESS_STARTED: &str = "process_start_time_seconds";
/// The families a reading uses.
const FAMILIES: [&str; 4] = [EXECUTING, WAITING, ANSWERED, PROCESS_STARTED];
/// What the migrator sends about a resource it migrates: its reads, the no-op write (a merge
/// patch, or an apply), a conflict's re-read.
const OUR_VERBS: [&str; 5] = ["GET", "LIST", "WATCH", "PATCH", "APPLY"];
/// Resources whose every request is taken for the migrator's: in companion mode its checkpoints
/// are status writes to the cluster's own migrations, one every `--chunk-size` objects (more
/// than one a second at full speed), which must not make the apiserver look shared.
const OURS_ALWAYS: [&str; 1] = ["storageversionmigrations.storagemigration.k8s.io"];

/// PATCHes sent between two readings of the priority levels, none of them counted in our
/// level, beyond which our requests are taken to be dispatched elsewhere.
const UNCOUNTED_PATCHES: u64 = 8;

/// Which of kube-apiserver's accounts of its requests a reading takes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Account {
    /// `/debug/api_priority_and_fairness/dump_priority_levels` ([`priority_levels`]): a few
    /// lines; tells ours from others' only by priority level.
    PriorityLevels,
    /// `/metrics`: hundreds of kilobytes; tells ours from others' by resource and verb.
    #[default]
    Metrics,
}

impl Account {
    fn label(self) -> AccountLabel {
        let account = match self {
            Account::PriorityLevels => "priority-levels",
            Account::Metrics => "metrics",
        };
        AccountLabel {
            account: account.into(),
        }
    }
}

/// What one reading says.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Sample {
    account: Account,
    /// (priority level, executing, waiting).
    levels: Vec<(String, f64, f64)>,
    /// Requests dispatched so far per priority level (the priority levels' account only).
    dispatched: Vec<(String, f64)>,
    /// Resource requests answered so far: (`resource.group`, verb, count).
    answered: Vec<(String, String, f64)>,
    /// When the kube-apiserver process that counted them started.
    process: Option<f64>,
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
        // Only the few families read here are parsed: the text has thousands of lines.
        let ours = text
            .lines()
            .filter(|line| FAMILIES.iter().any(|family| line.starts_with(family)))
            .filter_map(prometheus_text::sample);
        Self::from_series(ours)
    }

    /// The counts of a `/metrics` answer in Prometheus's protobuf format (see
    /// [`prometheus_proto`]); `None` as for [`Sample::parse`], or when it does not decode.
    pub(crate) fn decode(body: &[u8]) -> Option<Sample> {
        Self::from_series(prometheus_proto::samples(body, &FAMILIES)?.into_iter())
    }

    /// The counts of API Priority and Fairness's dump of its priority levels; `None` when the
    /// body is not one.
    pub(crate) fn from_priority_levels(text: &str) -> Option<Sample> {
        let levels = priority_levels::parse(text)?;
        if levels.is_empty() {
            return None;
        }
        Some(Sample {
            account: Account::PriorityLevels,
            levels: levels
                .iter()
                .map(|l| (l.name.clone(), l.executing, l.waiting))
                .collect(),
            dispatched: levels.into_iter().map(|l| (l.name, l.dispatched)).collect(),
            ..Sample::default()
        })
    }

    /// Whether the priority levels' account has the migrator's own level.
    fn has_own_level(&self) -> bool {
        self.dispatched.iter().any(|(level, _)| level == OWN_LEVEL)
    }

    /// Whether our own level shows any of our requests: executing or waiting now, or
    /// dispatched since `before`.
    fn own_level_counts_ours(&self, before: &Sample) -> bool {
        let dispatched = |sample: &Sample| {
            sample
                .dispatched
                .iter()
                .find(|(level, _)| level == OWN_LEVEL)
                .map(|(_, n)| *n)
        };
        let now = self
            .levels
            .iter()
            .any(|(level, executing, waiting)| level == OWN_LEVEL && executing + waiting > 0.0);
        now || dispatched(self) > dispatched(before)
    }

    /// The counts of the samples of [`FAMILIES`] (name, labels, value), however read.
    fn from_series(
        series: impl Iterator<Item = (impl AsRef<str>, BTreeMap<String, String>, f64)>,
    ) -> Option<Sample> {
        let mut sample = Sample::default();
        let mut seen = false;
        for (name, labels, value) in series {
            let name = name.as_ref();
            match name {
                EXECUTING | WAITING => {
                    let Some(level) = labels.get("priority_level") else {
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
                ANSWERED => sample.add_answered(&labels, value),
                PROCESS_STARTED => sample.process = Some(value),
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

    /// One series of `apiserver_request_total`, summed over what we do not tell apart (code,
    /// scope, version, …); non-resource requests are left out.
    fn add_answered(&mut self, labels: &BTreeMap<String, String>, value: f64) {
        let (Some(resource), Some(verb)) = (labels.get("resource"), labels.get("verb")) else {
            return;
        };
        if resource.is_empty() {
            return;
        }
        let group = labels.get("group").map_or("", String::as_str);
        let resource = group_resource(group, resource);
        match self
            .answered
            .iter_mut()
            .find(|(r, v, _)| *r == resource && v == verb)
        {
            Some(entry) => entry.2 += value,
            None => self.answered.push((resource, verb.to_string(), value)),
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

    /// Requests others sent between `before` and this sample. From `/metrics`: every
    /// resource request answered but those on the resources in `migrating` with
    /// [`OUR_VERBS`] and those on [`OURS_ALWAYS`]; from the priority levels: every request
    /// dispatched in a level not ours, less this reading's own. `None` when the two are not
    /// one process's counts (another kube-apiserver, a restart) or not of one account.
    pub(crate) fn others_since(&self, before: &Sample, migrating: &[String]) -> Option<f64> {
        let series = self.others_by_series(before, migrating)?;
        let sum: f64 = series.iter().map(|(_, n)| n).sum();
        let reading = match self.account {
            Account::PriorityLevels => 1.0,
            Account::Metrics => 0.0,
        };
        Some((sum - reading).max(0.0))
    }

    /// [`Sample::others_since`] by series — (verb, resource) or priority level — the busiest
    /// first: whom a verdict of "shared" is about, for the log.
    pub(crate) fn others_by_series(
        &self,
        before: &Sample,
        migrating: &[String],
    ) -> Option<Vec<(String, f64)>> {
        if self.account != before.account {
            return None;
        }
        match self.account {
            Account::PriorityLevels => self.others_by_level(before),
            Account::Metrics => self.others_by_resource(before, migrating),
        }
    }

    /// Requests dispatched in levels other than ours since `before`; `None` when a count went
    /// down (a restarted kube-apiserver, or another one behind a load balancer).
    fn others_by_level(&self, before: &Sample) -> Option<Vec<(String, f64)>> {
        let mut others = Vec::new();
        for (level, now) in self.dispatched.iter().filter(|(l, _)| l != OWN_LEVEL) {
            let then = before
                .dispatched
                .iter()
                .find(|(l, _)| l == level)
                .map_or(0.0, |(_, n)| *n);
            if *now < then {
                return None;
            }
            if *now > then {
                others.push((format!("priority level {level}"), now - then));
            }
        }
        others.sort_by(|a, b| b.1.total_cmp(&a.1));
        Some(others)
    }

    /// Resource requests answered since `before` but ours, by (verb, resource).
    fn others_by_resource(
        &self,
        before: &Sample,
        migrating: &[String],
    ) -> Option<Vec<(String, f64)>> {
        if self.process.is_none() || self.process != before.process {
            return None;
        }
        let mut others = Vec::new();
        for (resource, verb, now) in &self.answered {
            let then = before
                .answered
                .iter()
                .find(|(r, v, _)| r == resource && v == verb)
                .map_or(0.0, |(_, _, n)| *n);
            if *now < then {
                return None;
            }
            let ours = OURS_ALWAYS.contains(&resource.as_str())
                || (migrating.contains(resource) && OUR_VERBS.contains(&verb.as_str()));
            if !ours && *now > then {
                others.push((format!("{verb} {resource}"), now - then));
            }
        }
        others.sort_by(|a, b| b.1.total_cmp(&a.1));
        Some(others)
    }
}

/// Others' requests a second from `requests` in `seconds`; a single request is no rate (one
/// lease renewal between two readings 0.3 s apart is not 3 a second of a neighbour).
fn others_rate(requests: f64, seconds: f64) -> f64 {
    if requests < MIN_REQUESTS {
        0.0
    } else {
        requests / seconds
    }
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
pub struct Migrating {
    resources: Mutex<Vec<ResolvedResource>>,
    /// Migrations entered so far.
    started: std::sync::atomic::AtomicU64,
}

/// A resource being migrated; it is no longer once dropped.
#[must_use]
pub struct Entered<'a> {
    migrating: &'a Migrating,
    resource: ResolvedResource,
}

impl Migrating {
    /// `resource` is being migrated until the guard is dropped.
    pub fn enter(&self, resource: &ResolvedResource) -> Entered<'_> {
        self.lock().push(resource.clone());
        self.started
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Entered {
            migrating: self,
            resource: resource.clone(),
        }
    }

    /// The resources, as `resource.group`.
    fn now(&self) -> Vec<String> {
        self.lock()
            .iter()
            .map(ResolvedResource::group_resource)
            .collect()
    }

    /// How many migrations were entered so far.
    fn started(&self) -> u64 {
        self.started.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// One of them (the first entered of those still being migrated).
    pub fn any(&self) -> Option<ResolvedResource> {
        self.lock().first().cloned()
    }

    fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<ResolvedResource>> {
        self.resources.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A namespaced resource of `group` (empty: the core group) at v1, for tests.
#[cfg(test)]
pub(crate) fn test_resource(group: &str, resource: &str, kind: &str) -> ResolvedResource {
    ResolvedResource {
        group: group.into(),
        version: "v1".into(),
        resource: resource.into(),
        kind: kind.into(),
        namespaced: true,
    }
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        let mut migrating = self.migrating.lock();
        if let Some(at) = migrating.iter().position(|r| *r == self.resource) {
            migrating.remove(at);
        }
    }
}

/// What the pool gives the judging of its neighbours, and is told by it.
pub(crate) struct Sources<'a> {
    pub pressure: &'a Pressure,
    pub migrating: &'a Migrating,
    pub metrics: &'a MigratorMetrics,
}

/// Reads kube-apiserver's counts while a migration runs or the pool sends PATCHes — the first
/// two readings [`FIRST_PERIOD`] apart, then at the [`Pace`] of its verdicts — and tells the
/// pool's [`Pressure`] what they say; stops at the first answer that says neither account may
/// be read (a 403, or outside the access catalogue), leaving the latency rule in charge.
pub(crate) async fn watch(cluster: &ClusterClient, sources: Sources<'_>) {
    watch_with(sources, |account| read(cluster, account)).await;
}

/// The previous reading, against which the next one's rate is measured.
struct Before {
    sample: Sample,
    at: Instant,
    /// The resources being migrated then.
    migrating: Vec<String>,
    /// [`Pressure::patches_sent`] then.
    patches_sent: u64,
}

/// The loop of [`watch`], with any reader of the counts (tests play kube-apiserver's).
async fn watch_with<R, F>(sources: Sources<'_>, mut read: R)
where
    R: FnMut(Account) -> F,
    F: Future<Output = Result<Sample, Unreadable>>,
{
    let mut watching = Watching::default();
    loop {
        match watching.step(&sources, &mut read).await {
            Next::Wait(period) => tokio::time::sleep(period).await,
            Next::Again => {}
            Next::Stop => return,
        }
    }
}

/// What [`watch_with`] does after a step.
enum Next {
    Wait(Duration),
    Again,
    /// Neither account may be read: the latency rule stays in charge.
    Stop,
}

/// What [`watch_with`] keeps between readings.
#[derive(Default)]
struct Watching {
    judge: Judge,
    before: Option<Before>,
    pace: Pace,
    choice: Choice,
}

/// One reading as it came back.
struct Reading {
    sample: Sample,
    at: Instant,
    /// Ours in flight: the most of when it was asked for and when it came back.
    ours: usize,
    patches_sent: u64,
    /// The resources being migrated when it came back.
    migrating: Vec<String>,
}

impl Reading {
    fn into_before(self) -> Before {
        Before {
            sample: self.sample,
            at: self.at,
            migrating: self.migrating,
            patches_sent: self.patches_sent,
        }
    }
}

impl Watching {
    /// One reading and what it says, or a wait while nothing is sent.
    async fn step<R, F>(&mut self, sources: &Sources<'_>, read: &mut R) -> Next
    where
        R: FnMut(Account) -> F,
        F: Future<Output = Result<Sample, Unreadable>>,
    {
        // From the moment a migration starts (its discovery and preflight come before its
        // first PATCH), so that the first verdict is there about when the PATCHes start.
        if !sources.pressure.patching() && sources.migrating.is_empty() {
            // The counts go stale while nothing is sent: the next run starts afresh, and
            // tries the cheap account again (a FlowSchema may have been applied since).
            let judge = std::mem::take(&mut self.judge);
            *self = Watching {
                judge,
                ..Watching::default()
            };
            return Next::Wait(WAKE);
        }
        // Ours in flight when the reading was asked for and when it came back: those that
        // ended in between were counted by kube-apiserver as executing (at a page's end all
        // of its PATCHes end together), those that started may have been.
        let ours_before = sources.pressure.requests_in_flight();
        let account = self
            .choice
            .retry_at_a_new_migration(sources.migrating.started());
        let sample = match take(read, account, &mut self.choice, sources).await {
            Taken::Sample(sample) => sample,
            // The reading before (if any) still measures the next rate.
            Taken::FellBack => return Next::Again,
            Taken::Transient => {
                sources.pressure.neighbours(Neighbours::Unknown);
                self.before = None;
                return Next::Wait(PERIOD);
            }
            Taken::Never => {
                sources.pressure.neighbours(Neighbours::Unknown);
                return Next::Stop;
            }
        };
        let reading = Reading {
            sample,
            at: Instant::now(),
            ours: ours_before.max(sources.pressure.requests_in_flight()),
            patches_sent: sources.pressure.patches_sent(),
            migrating: sources.migrating.now(),
        };
        self.weigh(reading, account, sources)
    }

    /// What `reading` says against the one before, told to the pool.
    fn weigh(&mut self, reading: Reading, account: Account, sources: &Sources<'_>) -> Next {
        let Some(earlier) = self.before.take() else {
            // A rate needs two readings: the verdict waits for the second.
            self.before = Some(reading.into_before());
            return Next::Wait(FIRST_PERIOD);
        };
        if account == Account::PriorityLevels
            && reading.patches_sent - earlier.patches_sent >= UNCOUNTED_PATCHES
            && !reading.sample.own_level_counts_ours(&earlier.sample)
        {
            tracing::info!(
                level = OWN_LEVEL,
                "the migrator's requests are not dispatched in its own priority level (no FlowSchema matches them): reading kube-apiserver's /metrics"
            );
            self.choice.fall_back(sources.migrating.started());
            return Next::Again;
        }
        let verdict = self.verdict(&reading, earlier, account);
        self.before = Some(reading.into_before());
        sources
            .metrics
            .apiserver_shared
            .set(i64::from(verdict == Neighbours::Busy));
        sources.pressure.neighbours(verdict);
        Next::Wait(self.pace.after(verdict))
    }

    /// The judge's verdict on the others' work between `earlier` and `reading`.
    fn verdict(&mut self, reading: &Reading, earlier: Before, account: Account) -> Neighbours {
        let mut seen = reading.sample.observe(reading.ours);
        let elapsed = reading
            .at
            .duration_since(earlier.at)
            .as_secs_f64()
            .max(0.001);
        // The resources migrated since the reading before, a migration that ended meanwhile's
        // too: its last PATCHes are in this reading's counts.
        let mut migrating = reading.migrating.clone();
        migrating.extend(earlier.migrating);
        seen.others_rate = reading
            .sample
            .others_since(&earlier.sample, &migrating)
            .map(|requests| others_rate(requests, elapsed));
        let was_busy = self.judge.busy;
        let verdict = self.judge.judge(seen);
        if verdict == Neighbours::Busy && !was_busy {
            let busiest = reading
                .sample
                .others_by_series(&earlier.sample, &migrating)
                .and_then(|s| s.first().map(|(series, n)| format!("{series}: {n}")));
            tracing::info!(others_executing = seen.others, others_per_second = ?seen.others_rate, ?busiest, ?account, "kube-apiserver is shared: PATCHes follow latency");
        }
        verdict
    }
}

/// What one reading gave.
enum Taken {
    Sample(Sample),
    /// The priority levels do not serve: `/metrics` is read from now on.
    FellBack,
    Transient,
    /// Neither account may be read.
    Never,
}

/// One reading of `account` (the one `choice` says), counted; falls back from the priority
/// levels when they cannot be read or have no level of ours.
async fn take<R, F>(
    read: &mut R,
    account: Account,
    choice: &mut Choice,
    sources: &Sources<'_>,
) -> Taken
where
    R: FnMut(Account) -> F,
    F: Future<Output = Result<Sample, Unreadable>>,
{
    match read(account).await {
        Ok(sample) if account == Account::Metrics || sample.has_own_level() => {
            sources
                .metrics
                .apiserver_readings
                .get_or_create(&account.label())
                .inc();
            Taken::Sample(sample)
        }
        Ok(_) | Err(Unreadable::Never) if account == Account::PriorityLevels => {
            tracing::debug!(
                "no priority level of the migrator's own to read: reading kube-apiserver's /metrics"
            );
            choice.fall_back(sources.migrating.started());
            Taken::FellBack
        }
        Err(Unreadable::Transient) => Taken::Transient,
        // `/metrics` refused too (its `Ok` took the first arm).
        Err(Unreadable::Never) | Ok(_) => Taken::Never,
    }
}

/// Which account the readings take: the priority levels first, `/metrics` once they are seen
/// not to serve — until a migration starts (a FlowSchema may have been applied meanwhile).
#[derive(Debug, Default)]
struct Choice {
    /// `Some`: `/metrics`, since this many migrations had started ([`Migrating::started`]).
    metrics_since: Option<u64>,
}

impl Choice {
    fn account(&self) -> Account {
        match self.metrics_since {
            Some(_) => Account::Metrics,
            None => Account::PriorityLevels,
        }
    }

    /// Reads `/metrics` from now on, until a migration starts after the `started` so far.
    fn fall_back(&mut self, started: u64) {
        self.metrics_since = Some(started);
    }

    /// Tries the priority levels again if a migration started since the fall back; the
    /// account of the next reading.
    fn retry_at_a_new_migration(&mut self, started: u64) -> Account {
        if self.metrics_since.is_some_and(|then| started > then) {
            self.metrics_since = None;
        }
        self.account()
    }
}

/// How long until the next reading: [`PERIOD`] after a verdict changed, doubling while it
/// holds, up to [`LONGEST_ALONE`] or [`LONGEST_SHARED`].
#[derive(Debug, Default)]
struct Pace {
    last: Option<Neighbours>,
    wait: Option<Duration>,
}

impl Pace {
    fn after(&mut self, verdict: Neighbours) -> Duration {
        let shared = verdict == Neighbours::Busy;
        let held = self
            .last
            .is_some_and(|last| (last == Neighbours::Busy) == shared);
        let longest = if shared {
            LONGEST_SHARED
        } else {
            LONGEST_ALONE
        };
        let wait = match self.wait {
            Some(wait) if held => (wait * 2).min(longest),
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

/// One reading of kube-apiserver's `account`.
async fn read(cluster: &ClusterClient, account: Account) -> Result<Sample, Unreadable> {
    let (path, accept) = match account {
        Account::PriorityLevels => (priority_levels::PATH, "text/plain"),
        Account::Metrics => ("/metrics", prometheus_proto::ACCEPT),
    };
    let answer = match cluster.request(http::Method::GET, path, accept, None).await {
        Ok(answer) => answer,
        Err(err) if err.is_retriable() => {
            tracing::debug!(error = %err, path, "reading kube-apiserver's account of its requests");
            return Err(Unreadable::Transient);
        }
        Err(err) if account == Account::PriorityLevels => {
            tracing::debug!(error = %err, path, "kube-apiserver's priority levels cannot be read");
            return Err(Unreadable::Never);
        }
        Err(err) => {
            tracing::info!(error = %err, "kube-apiserver's /metrics cannot be read: --object-concurrency auto follows latency alone");
            return Err(Unreadable::Never);
        }
    };
    let sample = match account {
        Account::PriorityLevels => {
            Sample::from_priority_levels(&String::from_utf8_lossy(&answer.body))
        }
        Account::Metrics => {
            let protobuf = answer
                .headers
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(prometheus_proto::is_protobuf);
            if protobuf {
                Sample::decode(&answer.body)
            } else {
                Sample::parse(&String::from_utf8_lossy(&answer.body))
            }
        }
    };
    sample.ok_or_else(|| {
        if account == Account::Metrics {
            tracing::info!(
                "kube-apiserver's /metrics has no API Priority and Fairness gauges: --object-concurrency auto follows latency alone"
            );
        }
        Unreadable::Never
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

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

    /// Plays kube-apiserver's `/metrics` for [`watch_with`]: every reading's time is kept, and
    /// each says `text` — or that it may not be read, once `refuse` is set. Its priority
    /// levels' dump is refused (as without its grant) and not counted as a reading.
    fn played_reader(
        text: String,
        readings: std::sync::Arc<Mutex<Vec<Instant>>>,
        refuse: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> impl FnMut(Account) -> std::future::Ready<Result<Sample, Unreadable>> {
        move |account| {
            if account == Account::PriorityLevels {
                return std::future::ready(Err(Unreadable::Never));
            }
            readings
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(Instant::now());
            std::future::ready(if refuse.load(std::sync::atomic::Ordering::SeqCst) {
                Err(Unreadable::Never)
            } else {
                Sample::parse(&text).ok_or(Unreadable::Never)
            })
        }
    }

    /// [`watch_with`] on a task of its own, with `reader` playing kube-apiserver.
    fn spawn_watch<R, F>(
        pressure: impl std::ops::Deref<Target = Pressure> + Send + 'static,
        migrating: &Arc<Migrating>,
        metrics: &MigratorMetrics,
        reader: R,
    ) -> tokio::task::JoinHandle<()>
    where
        R: FnMut(Account) -> F + Send + 'static,
        F: Future<Output = Result<Sample, Unreadable>> + Send,
    {
        let (migrating, metrics) = (migrating.clone(), metrics.clone());
        tokio::spawn(async move {
            let sources = Sources {
                pressure: &pressure,
                migrating: &migrating,
                metrics: &metrics,
            };
            watch_with(sources, reader).await;
        })
    }

    #[tokio::test(start_paused = true)]
    async fn readings_start_with_a_migration_before_its_first_patch_and_stop_with_it() {
        use crate::concurrency::Mode;
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};

        let pressure = Arc::new(Pressure::new(0.0, 1, Mode::Adaptive { ceiling: 256 }));
        let migrating = Arc::new(Migrating::default());
        let metrics = MigratorMetrics::new();
        let readings = Arc::new(Mutex::new(Vec::new()));
        let refuse = Arc::new(AtomicBool::new(false));
        // Someone else's requests executing: shared, from the verdict on.
        let busy = scrape(&[("workload-low", "service-accounts", 3.0, 0.0)]);
        let reader = played_reader(busy, readings.clone(), refuse.clone());
        let watching = spawn_watch(pressure.clone(), &migrating, &metrics, reader);
        let count = || readings.lock().unwrap_or_else(|e| e.into_inner()).len();
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(count(), 0, "nothing migrating, nothing sent: no reading");

        // A migration enters its resource (after discovery, before preflight and any PATCH).
        let entered_at = Instant::now();
        let entered = migrating.enter(&test_resource("", "configmaps", "ConfigMap"));
        tokio::time::sleep(FIRST_PERIOD / 2).await;
        assert_eq!(count(), 1, "the first reading comes with the migration");
        assert!(!pressure.follows_latency(), "no verdict from one reading");
        tokio::time::sleep(FIRST_PERIOD).await;
        let times = readings.lock().unwrap_or_else(|e| e.into_inner()).clone();
        assert_eq!(times.len(), 2);
        assert!(times[0] - entered_at <= WAKE, "{:?}", times[0] - entered_at);
        assert_eq!(times[1] - times[0], FIRST_PERIOD);
        assert!(
            pressure.follows_latency(),
            "the second reading's verdict: shared"
        );
        assert_eq!(metrics.apiserver_shared.get(), 1);

        // The verdict holds: the readings back off (1 s, 2 s, 4 s, …).
        tokio::time::sleep(Duration::from_secs(7)).await;
        let backing_off = count();
        assert_eq!(backing_off, 5, "readings at 0, 0.5, 1.5, 3.5, 7.5 s");

        // The migration ends (no PATCH in the last 2 s): the readings stop.
        drop(entered);
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert!(count() <= backing_off + 1, "{} readings", count());
        let stopped = count();
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert_eq!(count(), stopped);

        // A refusal (a 403): the latency rule alone from then on, and no more readings.
        refuse.store(true, Ordering::SeqCst);
        let _again = migrating.enter(&test_resource("", "secrets", "Secret"));
        tokio::time::timeout(Duration::from_secs(1), watching)
            .await
            .expect("the watch ends at a refusal")
            .expect("task");
        assert_eq!(count(), stopped + 1);
    }

    /// The same families as the text of [`scrape`] (and a request count), in Prometheus's
    /// delimited protobuf, with a histogram family that is not read.
    fn scrape_protobuf(levels: &[(&str, &str, f64, f64)]) -> Vec<u8> {
        use svm_runtime::prometheus::proto::build::{counter, family, gauge};
        let mut body = family(
            "apiserver_request_duration_seconds",
            vec![gauge(&[("verb", "GET")], 0.5)],
        );
        for (name, pick) in [(EXECUTING, 0), (WAITING, 1)] {
            let metrics = levels
                .iter()
                .map(|(level, schema, executing, waiting)| {
                    let value = if pick == 0 { *executing } else { *waiting };
                    gauge(&[("flow_schema", schema), ("priority_level", level)], value)
                })
                .collect();
            body.extend(family(name, metrics));
        }
        let answered = counter(&[("resource", "pods"), ("verb", "LIST")], 12.0);
        body.extend(family(ANSWERED, vec![answered]));
        body
    }

    #[test]
    fn a_protobuf_reading_says_what_the_text_says() {
        let levels = [
            (OWN_LEVEL, OWN_LEVEL, 10.0, 30.0),
            ("workload-low", "service-accounts", 1.0, 2.0),
        ];
        let text = scrape(&levels)
            + "apiserver_request_total{code=\"200\",resource=\"pods\",verb=\"LIST\"} 12\n";
        let from_text = Sample::parse(&text).expect("APF gauges");
        let from_protobuf = Sample::decode(&scrape_protobuf(&levels)).expect("APF gauges");
        assert_eq!(from_protobuf, from_text);
        assert_ne!(from_protobuf, Sample::default());
        // Without the APF families, as from the text.
        assert_eq!(Sample::decode(&[]), None);
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

    /// Ours are never another's: PATCHes that end while the counts are read (a page's all
    /// end together) were counted as executing when the counts were taken, and the last
    /// PATCHes of a migration that ended since the reading before are in the counter.
    #[tokio::test(start_paused = true)]
    async fn patches_that_end_during_a_reading_and_a_finished_migrations_are_ours() {
        use crate::concurrency::Mode;
        use crate::pressure::Slot;
        use std::sync::Arc;

        // 'static, so that the played apiserver can hold the test's slots and end them.
        let pressure: &'static Pressure =
            Box::leak(Box::new(Pressure::new(0.0, 1, Mode::Fixed(64))));
        let migrating = Arc::new(Migrating::default());
        let metrics = MigratorMetrics::new();
        let ending: Arc<Mutex<Vec<Slot<'static>>>> = Arc::default();
        let readings = Arc::new(Mutex::new(0.0));
        let reader = {
            let (ending, readings) = (ending.clone(), readings.clone());
            move |account| {
                if account == Account::PriorityLevels {
                    // No grant for the dump: /metrics is read.
                    return std::future::ready(Err(Unreadable::Never));
                }
                let mut n = readings.lock().unwrap_or_else(|e| e.into_inner());
                *n += 1.0;
                // The slots held when the reading was asked for end before it comes back;
                // kube-apiserver counted them executing, with the /metrics read itself.
                let mut slots = ending.lock().unwrap_or_else(|e| e.into_inner());
                let executing = slots.len() as f64 + 1.0;
                slots.clear();
                let mut text = scrape(&[("exempt", "exempt", executing, 0.0)]);
                text.push_str("process_start_time_seconds 1.7e9\n");
                // Our applies to the configmaps we migrate: 1 000 more each reading.
                text.push_str(&format!(
                    "{ANSWERED}{{code=\"200\",component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"configmaps\",scope=\"resource\",subresource=\"\",system_client=\"\",verb=\"APPLY\",version=\"v1\"}} {}\n",
                    *n * 1000.0
                ));
                std::future::ready(Sample::parse(&text).ok_or(Unreadable::Never))
            }
        };
        let watching = spawn_watch(pressure, &migrating, &metrics, reader);
        let count = || *readings.lock().unwrap_or_else(|e| e.into_inner());
        let entered = migrating.enter(&test_resource("", "configmaps", "ConfigMap"));
        tokio::time::sleep(FIRST_PERIOD / 2).await;
        assert_eq!(count(), 1.0);
        // A page's 64 PATCHes in flight, all answered while the second reading is read.
        for _ in 0..64 {
            let slot = pressure.slot().await;
            ending.lock().unwrap_or_else(|e| e.into_inner()).push(slot);
        }
        tokio::time::sleep(FIRST_PERIOD).await;
        assert_eq!(count(), 2.0);
        assert_eq!(
            metrics.apiserver_shared.get(),
            0,
            "the page's PATCHes are ours"
        );
        // The migration ends, its last PATCH in flight: the next reading still counts its
        // applies as ours.
        let slot = pressure.slot().await;
        ending.lock().unwrap_or_else(|e| e.into_inner()).push(slot);
        drop(entered);
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(count(), 3.0);
        assert_eq!(
            metrics.apiserver_shared.get(),
            0,
            "a finished migration's applies are ours"
        );
        watching.abort();
    }

    #[test]
    fn one_request_between_two_readings_is_no_rate_two_are() {
        // kube-apiserver's own lease renewal, caught between readings 0.31 s apart.
        assert_eq!(others_rate(1.0, 0.31), 0.0);
        assert!(others_rate(2.0, 0.5) >= BUSY_RATE, "a steady neighbour");
        assert_eq!(others_rate(0.0, 0.5), 0.0);
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
        assert_eq!(after.others_since(&before, &migrating), Some(12.0));
        // Nothing migrated: every resource request is another's.
        assert_eq!(after.others_since(&before, &[]), Some(816.0));
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
        assert_eq!(after.others_since(&before, &[]), Some(1.0));
    }

    #[test]
    fn counts_of_another_process_or_that_went_down_give_no_rate() {
        let before = Sample::parse(&answered(1.7e9, &[("configmaps", "GET", 10.0)])).expect("APF");
        let restarted =
            Sample::parse(&answered(1.8e9, &[("configmaps", "GET", 12.0)])).expect("APF");
        assert_eq!(restarted.others_since(&before, &[]), None);
        let lower = Sample::parse(&answered(1.7e9, &[("configmaps", "GET", 4.0)])).expect("APF");
        assert_eq!(lower.others_since(&before, &[]), None);
        let unknown = Sample::parse(&scrape(&[("exempt", "exempt", 1.0, 0.0)])).expect("APF");
        assert_eq!(unknown.others_since(&unknown, &[]), None);
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
        let blobs = test_resource("example.com", "blobs", "Blob");
        let first = migrating.enter(&blobs);
        let second = migrating.enter(&blobs);
        drop(first);
        assert_eq!(migrating.now(), vec!["blobs.example.com".to_string()]);
        assert_eq!(migrating.any(), Some(blobs));
        drop(second);
        assert!(migrating.now().is_empty());
        assert_eq!(migrating.any(), None);
    }

    /// Two readings of the real kube-apiserver v1.36.2 with 13 resource requests in between
    /// (`tests/fixtures/metrics/README.md` says which).
    #[test]
    fn the_real_kube_apiservers_counts_read_as_recorded() {
        let before = Sample::parse(include_str!(
            "../../../tests/fixtures/metrics/kube-apiserver-1.36.2-before.txt"
        ))
        .expect("APF gauges");
        let after = Sample::parse(include_str!(
            "../../../tests/fixtures/metrics/kube-apiserver-1.36.2-after.txt"
        ))
        .expect("APF gauges");
        // The reading itself executes in workload-low (non-resource, not in our FlowSchema):
        // nobody else is there.
        assert_eq!(after.observe(0).others, 0.0);
        assert_eq!(after.others_since(&before, &[]), Some(13.0));
        // Migrating ServiceAccounts: its 5 PATCHes are ours, the 8 ConfigMap reads others'.
        let serviceaccounts = vec!["serviceaccounts".to_string()];
        assert_eq!(after.others_since(&before, &serviceaccounts), Some(8.0));
        let configmaps = vec!["configmaps".to_string()];
        assert_eq!(after.others_since(&before, &configmaps), Some(5.0));
    }

    #[test]
    fn a_verdict_that_holds_is_read_less_often_a_change_at_once_again() {
        let mut pace = Pace::default();
        let alone = Neighbours::Quiet { own_queue: false };
        let waits: Vec<u64> = [alone, alone, alone, alone, alone]
            .into_iter()
            .map(|v| pace.after(v).as_secs())
            .collect();
        assert_eq!(waits, [1, 2, 4, 4, 4]);
        // Our own level queueing is still the apiserver being ours.
        assert_eq!(
            pace.after(Neighbours::Quiet { own_queue: true }),
            LONGEST_ALONE
        );
        // Someone came: read again in a second, then less and less often while they stay.
        let waits: Vec<u64> = (0..6)
            .map(|_| pace.after(Neighbours::Busy).as_secs())
            .collect();
        assert_eq!(waits, [1, 2, 4, 8, 15, 15]);
        assert_eq!(pace.after(alone), PERIOD);
    }

    /// A dump of kube-apiserver's priority levels, as v1.36.2 writes it (the columns of
    /// `priority_levels`' recorded one): (level, executing, waiting, dispatched).
    fn levels_dump(levels: &[(&str, f64, f64, f64)]) -> String {
        let mut text = String::from(
            "PriorityLevelName, ActiveQueues, IsIdle, IsQuiescing, WaitingRequests, ExecutingRequests, DispatchedRequests, RejectedRequests, TimedoutRequests, CancelledRequests\n",
        );
        for (level, executing, waiting, dispatched) in levels {
            text.push_str(&format!(
                "{level}, 0, false, false, {waiting}, {executing}, {dispatched}, 0, 0, 0\n"
            ));
        }
        text
    }

    #[test]
    fn the_priority_levels_count_others_in_every_level_but_ours_less_the_reading() {
        let read = |levels: &[(&str, f64, f64, f64)]| {
            Sample::from_priority_levels(&levels_dump(levels)).expect("a dump")
        };
        let before = read(&[
            ("exempt", 1.0, 0.0, 444.0),
            (OWN_LEVEL, 64.0, 0.0, 1000.0),
            ("workload-low", 0.0, 0.0, 50.0),
        ]);
        assert!(before.has_own_level());
        // 2 000 of ours dispatched, 3 queued in our level; one more in exempt: this reading.
        let ours_only = read(&[
            ("exempt", 1.0, 0.0, 445.0),
            (OWN_LEVEL, 60.0, 3.0, 3000.0),
            ("workload-low", 0.0, 0.0, 50.0),
        ]);
        assert_eq!(ours_only.others_since(&before, &[]), Some(0.0));
        assert!(ours_only.own_level_counts_ours(&before));
        assert_eq!(
            ours_only.observe(64),
            Observation {
                others: 0.0,
                own_waiting: 3.0,
                others_rate: None
            }
        );
        // Ten of a controller's in workload-low, two executing now.
        let others = read(&[
            ("exempt", 1.0, 0.0, 445.0),
            (OWN_LEVEL, 60.0, 0.0, 3000.0),
            ("workload-low", 2.0, 0.0, 60.0),
        ]);
        assert_eq!(others.others_since(&before, &[]), Some(10.0));
        assert_eq!(others.observe(64).others, 2.0);
        assert_eq!(
            others.others_by_series(&before, &[]),
            Some(vec![
                ("priority level workload-low".to_string(), 10.0),
                ("priority level exempt".to_string(), 1.0),
            ])
        );
        // A level created since counts from nothing.
        let new_level = read(&[
            ("exempt", 1.0, 0.0, 445.0),
            (OWN_LEVEL, 60.0, 0.0, 3000.0),
            ("workload-low", 0.0, 0.0, 50.0),
            ("batch", 0.0, 0.0, 5.0),
        ]);
        assert_eq!(new_level.others_since(&before, &[]), Some(5.0));
        // A count that went down is another kube-apiserver's (or a restart's): no rate.
        let restarted = read(&[
            ("exempt", 1.0, 0.0, 12.0),
            (OWN_LEVEL, 60.0, 0.0, 3000.0),
            ("workload-low", 0.0, 0.0, 50.0),
        ]);
        assert_eq!(restarted.others_since(&before, &[]), None);
        // Our level idle and not counting: the FlowSchema does not match our requests.
        let not_ours = read(&[
            ("exempt", 65.0, 0.0, 3445.0),
            (OWN_LEVEL, 0.0, 0.0, 1000.0),
            ("workload-low", 0.0, 0.0, 50.0),
        ]);
        assert!(!not_ours.own_level_counts_ours(&before));
        // A dump and a /metrics reading make no rate together.
        let metrics = Sample::parse(&scrape(&[("exempt", "exempt", 1.0, 0.0)])).expect("gauges");
        assert_eq!(metrics.others_since(&before, &[]), None);
        assert_eq!(before.others_since(&metrics, &[]), None);
        // Without our level, a dump is still read, and says so.
        let without = read(&[("exempt", 1.0, 0.0, 444.0)]);
        assert!(!without.has_own_level());
        assert_eq!(Sample::from_priority_levels("404 page not found\n"), None);
        assert_eq!(Sample::from_priority_levels(&levels_dump(&[])), None);
    }

    /// What kube-apiserver plays in [`watch_with`] for the accounts' tests.
    #[derive(Default)]
    struct Played {
        /// Whether the dump has the migrator's own level…
        own_level: bool,
        /// …and whether our PATCHes are dispatched in it.
        counts_ours: bool,
        /// Requests of another client's dispatched in `workload-low` between two readings.
        others_per_reading: f64,
        /// Dispatched so far: exempt, workload-low.
        exempt: f64,
        others: f64,
        readings: BTreeMap<&'static str, usize>,
        /// Every reading's account, in order: `p` the priority levels, `m` /metrics.
        sequence: String,
    }

    impl Played {
        fn reading(&mut self, account: Account, patches_sent: u64) -> Result<Sample, Unreadable> {
            let name = match account {
                Account::PriorityLevels => "priority-levels",
                Account::Metrics => "metrics",
            };
            *self.readings.entry(name).or_default() += 1;
            self.sequence.push_str(&name[..1]);
            if account == Account::Metrics {
                let mut text = scrape(&[("exempt", "exempt", 1.0, 0.0)]);
                text.push_str("process_start_time_seconds 1.7e9\n");
                return Sample::parse(&text).ok_or(Unreadable::Never);
            }
            // The reading's own request, in exempt (a cluster-admin's) or wherever it lands.
            self.exempt += 1.0;
            self.others += self.others_per_reading;
            let mut levels = vec![
                ("exempt", 1.0, 0.0, self.exempt),
                ("workload-low", 0.0, 0.0, self.others),
            ];
            let ours = if self.counts_ours {
                patches_sent as f64
            } else {
                0.0
            };
            if self.own_level {
                levels.push((OWN_LEVEL, 0.0, 0.0, ours));
            }
            Sample::from_priority_levels(&levels_dump(&levels)).ok_or(Unreadable::Never)
        }
    }

    /// Runs [`watch_with`] against `played` for `seconds` of a migration sending a PATCH every
    /// 10 ms; the pool's metrics after it.
    async fn watch_played(played: Arc<Mutex<Played>>, seconds: u64) -> MigratorMetrics {
        let own_level = played.lock().unwrap_or_else(|e| e.into_inner()).own_level;
        watch_migrations(played, &[("configmaps", seconds, own_level)]).await
    }

    /// As [`watch_played`], for migrations of `(resource, seconds, own level in the dump
    /// meanwhile)` one after the other, each entered before the one before ends.
    async fn watch_migrations(
        played: Arc<Mutex<Played>>,
        migrations: &[(&str, u64, bool)],
    ) -> MigratorMetrics {
        use crate::concurrency::Mode;

        let pressure: &'static Pressure = Box::leak(Box::new(Pressure::new(
            0.0,
            1,
            Mode::Adaptive { ceiling: 256 },
        )));
        let migrating = Arc::new(Migrating::default());
        let metrics = MigratorMetrics::new();
        let reader = {
            let played = played.clone();
            move |account| {
                let sent = pressure.patches_sent();
                let mut played = played.lock().unwrap_or_else(|e| e.into_inner());
                std::future::ready(played.reading(account, sent))
            }
        };
        let watching = spawn_watch(pressure, &migrating, &metrics, reader);
        let mut entered = None;
        for (resource, seconds, own_level) in migrations {
            played.lock().unwrap_or_else(|e| e.into_inner()).own_level = *own_level;
            let next = migrating.enter(&test_resource("", resource, "Thing"));
            entered = Some(next);
            for _ in 0..seconds * 100 {
                drop(pressure.slot().await);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        drop(entered);
        watching.abort();
        metrics
    }

    fn readings_of(played: &Mutex<Played>, account: &str) -> usize {
        let played = played.lock().unwrap_or_else(|e| e.into_inner());
        played.readings.get(account).copied().unwrap_or(0)
    }

    /// With a level of its own that counts its PATCHes (deploy/base/flowcontrol.yaml), the
    /// migrator reads only the priority levels' dump — never the whole `/metrics` — and a
    /// client in another level shares the apiserver.
    #[tokio::test(start_paused = true)]
    async fn with_a_level_of_its_own_the_migrator_reads_only_the_priority_levels() {
        let played = Arc::new(Mutex::new(Played {
            own_level: true,
            counts_ours: true,
            ..Played::default()
        }));
        let metrics = watch_played(played.clone(), 10).await;
        assert_eq!(readings_of(&played, "metrics"), 0);
        let dumps = readings_of(&played, "priority-levels");
        assert!(dumps >= 5, "{dumps} readings in 10 s");
        assert_eq!(
            metrics.apiserver_shared.get(),
            0,
            "ours and the readings only"
        );
        let counted = metrics
            .apiserver_readings
            .get_or_create(&Account::PriorityLevels.label())
            .get();
        assert_eq!(counted, dumps as u64);

        // Another client's 20 requests between readings (at most 4 s apart): shared.
        let played = Arc::new(Mutex::new(Played {
            own_level: true,
            counts_ours: true,
            others_per_reading: 20.0,
            ..Played::default()
        }));
        let metrics = watch_played(played.clone(), 5).await;
        assert_eq!(metrics.apiserver_shared.get(), 1);
        assert_eq!(readings_of(&played, "metrics"), 0);
    }

    /// Where the dump cannot tell ours from others' — no level of ours in it, or one that does
    /// not count our PATCHes — the migrator reads `/metrics` instead.
    #[tokio::test(start_paused = true)]
    async fn without_a_level_that_counts_its_patches_the_migrator_reads_metrics() {
        for (own_level, counts_ours) in [(false, false), (true, false)] {
            let played = Arc::new(Mutex::new(Played {
                own_level,
                counts_ours,
                ..Played::default()
            }));
            let metrics = watch_played(played.clone(), 10).await;
            let (dumps, scrapes) = (
                readings_of(&played, "priority-levels"),
                readings_of(&played, "metrics"),
            );
            assert!(
                scrapes >= 4,
                "{own_level} {counts_ours}: {scrapes} of /metrics"
            );
            // The dump is read until it shows it cannot serve: once, or twice for the rate.
            let expected = if own_level { 2 } else { 1 };
            assert_eq!(dumps, expected, "{own_level} {counts_ours}");
            assert_eq!(
                metrics.apiserver_shared.get(),
                0,
                "{own_level} {counts_ours}"
            );
        }
    }

    /// A FlowSchema applied while the migrator reads `/metrics` is found at the next
    /// migration's start, without the pool going idle in between.
    #[tokio::test(start_paused = true)]
    async fn the_priority_levels_are_tried_again_when_a_migration_starts() {
        let played = Arc::new(Mutex::new(Played {
            counts_ours: true,
            ..Played::default()
        }));
        watch_migrations(
            played.clone(),
            &[("configmaps", 10, false), ("secrets", 10, true)],
        )
        .await;
        // The first migration: one dump (no level of ours), then /metrics; the second: one
        // /metrics reading at most (already under way), then the dumps alone.
        let sequence = played
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .sequence
            .clone();
        let switched = sequence.trim_end_matches('p');
        assert!(
            sequence.len() - switched.len() >= 3,
            "{sequence}: the dumps after the FlowSchema"
        );
        assert!(
            switched.starts_with("pmmmm") && switched[1..].chars().all(|c| c == 'm'),
            "{sequence}"
        );
    }
}
