//! Who else is using the apiserver, from what kube-apiserver says it is doing: its `/metrics`
//! (`apiserver_flowcontrol_current_executing_requests` and `…_current_inqueue_requests`, per
//! API Priority and Fairness priority level). `--object-concurrency auto` runs at its ceiling
//! while the migrator is the only one working, and falls back to the latency rule of
//! [`AdaptiveLimit`](super::concurrency::AdaptiveLimit) — which yields to others — as soon as
//! other requests execute or queue beside ours.
//!
//! Latency alone cannot tell the two apart: our own PATCHes queueing behind each other raise
//! it exactly as another client's requests do. The apiserver's counts can: with the FlowSchema
//! of `deploy/base/flowcontrol.yaml` our requests have a priority level of their own
//! ([`OWN_LEVEL`]), so the others are every other level, and requests waiting in ours are our
//! own queue (the level is full: more in flight would only wait longer). Without it (a
//! cluster-admin's credentials are `exempt`), the others are everything counted minus our
//! PATCHes in flight, which undercounts the others by the requests in transit, never
//! overcounts them.
//!
//! Where `/metrics` cannot be read (no `get /metrics` grant: a 403), the latency rule decides
//! alone, as before.

use std::time::Duration;

use super::Pressure;
use super::concurrency::Neighbours;
use super::metrics::MigratorMetrics;
use svm_cluster::ClusterClient;

/// The priority level `deploy/base/flowcontrol.yaml` gives the migrator's requests.
pub(crate) const OWN_LEVEL: &str = "svm-apiserver-migrator";
/// How often kube-apiserver's counts are read while PATCHes are being sent.
pub(crate) const PERIOD: Duration = Duration::from_secs(1);
/// Others' requests (smoothed) at or above which the apiserver is shared.
pub(crate) const BUSY_AT: f64 = 1.0;
/// …and below which it is the migrator's alone again (hysteresis).
pub(crate) const QUIET_BELOW: f64 = 0.5;
/// Weight of a new sample in the smoothed count.
const SMOOTHING: f64 = 0.5;

const EXECUTING: &str = "apiserver_flowcontrol_current_executing_requests";
const WAITING: &str = "apiserver_flowcontrol_current_inqueue_requests";

/// Requests kube-apiserver is executing and holding in queue, per priority level.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Sample {
    /// (priority level, executing, waiting).
    levels: Vec<(String, f64, f64)>,
}

/// What one sample says, against our own requests in flight.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Observation {
    /// Requests of others executing or waiting.
    pub others: f64,
    /// Our requests waiting in our own priority level (0 when we have none of our own).
    pub own_waiting: f64,
}

impl Sample {
    /// The APF gauges of a `/metrics` text; `None` when it has none (APF off, or not kube).
    pub(crate) fn parse(text: &str) -> Option<Sample> {
        let mut sample = Sample::default();
        let mut seen = false;
        for line in text.lines() {
            let (waiting, rest) = if let Some(rest) = line.strip_prefix(EXECUTING) {
                (false, rest)
            } else if let Some(rest) = line.strip_prefix(WAITING) {
                (true, rest)
            } else {
                continue;
            };
            let Some((labels, value)) = rest.strip_prefix('{').and_then(|r| r.rsplit_once("} "))
            else {
                continue;
            };
            let (Some(level), Ok(value)) = (label(labels, "priority_level"), value.trim().parse())
            else {
                continue;
            };
            seen = true;
            sample.add(level, if waiting { (0.0, value) } else { (value, 0.0) });
        }
        seen.then_some(sample)
    }

    fn add(&mut self, level: &str, (executing, waiting): (f64, f64)) {
        match self.levels.iter_mut().find(|(l, _, _)| l == level) {
            Some(entry) => {
                entry.1 += executing;
                entry.2 += waiting;
            }
            None => self.levels.push((level.to_string(), executing, waiting)),
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
        match own {
            Some((_, executing, waiting)) if executing + waiting > 0.0 => Observation {
                others: (total(Some(OWN_LEVEL)) - 1.0).max(0.0),
                own_waiting: *waiting,
            },
            _ => Observation {
                others: (total(None) - ours as f64 - 1.0).max(0.0),
                own_waiting: 0.0,
            },
        }
    }
}

/// The value of label `name` in a Prometheus label set (`a="x",b="y"`).
fn label<'a>(labels: &'a str, name: &str) -> Option<&'a str> {
    let start = labels.find(&format!("{name}=\""))? + name.len() + 2;
    let len = labels[start..].find('"')?;
    Some(&labels[start..start + len])
}

/// The smoothed count of others' requests, with hysteresis: one request of a light client
/// caught by a sample does not make the apiserver shared, a steady one does.
#[derive(Debug, Default)]
pub(crate) struct Judge {
    smoothed: Option<f64>,
    busy: bool,
}

impl Judge {
    /// The verdict after `seen`: whether others are using the apiserver, and whether our own
    /// level queues.
    pub(crate) fn judge(&mut self, seen: Observation) -> Neighbours {
        let smoothed = match self.smoothed {
            Some(before) => before + SMOOTHING * (seen.others - before),
            None => seen.others,
        };
        self.smoothed = Some(smoothed);
        if smoothed >= BUSY_AT {
            self.busy = true;
        } else if smoothed < QUIET_BELOW {
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

/// Reads kube-apiserver's counts every [`PERIOD`] while the pool sends PATCHes, and tells the
/// pool's [`Pressure`] what they say; stops at the first answer that says it may not (a 403,
/// or `/metrics` outside the access catalogue), leaving the latency rule in charge.
pub(crate) async fn watch(cluster: ClusterClient, pressure: &Pressure, metrics: &MigratorMetrics) {
    let mut judge = Judge::default();
    let mut ticks = tokio::time::interval(PERIOD);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        if !pressure.patching() {
            continue;
        }
        let text = match cluster
            .request(http::Method::GET, "/metrics", "text/plain", None)
            .await
        {
            Ok(answer) => String::from_utf8_lossy(&answer.body).into_owned(),
            Err(err) if !err.is_retriable() => {
                tracing::info!(error = %err, "kube-apiserver's /metrics cannot be read: --object-concurrency auto follows latency alone");
                pressure.neighbours(Neighbours::Unknown);
                return;
            }
            Err(err) => {
                tracing::debug!(error = %err, "reading kube-apiserver's /metrics");
                pressure.neighbours(Neighbours::Unknown);
                continue;
            }
        };
        let verdict = match Sample::parse(&text) {
            Some(sample) => judge.judge(sample.observe(pressure.in_flight())),
            None => {
                tracing::info!(
                    "kube-apiserver's /metrics has no API Priority and Fairness gauges: --object-concurrency auto follows latency alone"
                );
                pressure.neighbours(Neighbours::Unknown);
                return;
            }
        };
        metrics
            .apiserver_shared
            .set(i64::from(verdict == Neighbours::Busy));
        pressure.neighbours(verdict);
    }
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
                own_waiting: 0.0
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
                own_waiting: 30.0
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
                own_waiting: 0.0
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
        };
        let one = Observation {
            others: 1.0,
            own_waiting: 0.0,
        };
        let eight = Observation {
            others: 8.0,
            own_waiting: 0.0,
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
        };
        assert_eq!(judge.judge(queued), Neighbours::Quiet { own_queue: true });
    }
}
