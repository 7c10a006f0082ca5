//! Counters a test reads: requests by verb and resource, bytes in and out, writes performed
//! and skipped, peak requests per second over a sliding 1 s window, and a log of every LIST
//! (where each page started and the token it handed out).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

/// One LIST request as the double saw it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ListRecord {
    /// `configmaps`, `widgets.example.test`.
    pub resource: String,
    pub namespace: Option<String>,
    pub limit: Option<u64>,
    /// The continue token the client sent, verbatim.
    pub continue_token: Option<String>,
    /// The decoded start key of that token (relative to the list prefix, trailing NUL removed).
    pub start_key: Option<String>,
    /// The decoded revision of that token (`-1` for an inconsistent token).
    pub token_revision: Option<i64>,
    /// The HTTP status answered.
    pub code: u16,
    /// Items returned.
    pub items: usize,
    /// The continue token handed out (if any).
    pub next_continue: Option<String>,
    /// The list's resourceVersion.
    pub resource_version: Option<u64>,
    /// Whether the client asked for PartialObjectMetadataList.
    pub metadata_only: bool,
}

/// A point-in-time copy of every counter.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CountersSnapshot {
    /// "<verb> <resource>" (resource `configmaps`, `deployments.apps`; non-resource paths
    /// count as their path, e.g. "get /apis").
    pub requests: BTreeMap<String, u64>,
    /// "<verb> <resource or path> <code>": answers by status code (e.g. "get /apis 304"),
    /// for requests that reached a handler (injected faults are counted apart).
    pub responses: BTreeMap<String, u64>,
    pub total_requests: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub writes_performed: u64,
    pub writes_skipped: u64,
    pub writes_performed_by_resource: BTreeMap<String, u64>,
    pub writes_skipped_by_resource: BTreeMap<String, u64>,
    pub peak_requests_per_second: u64,
    pub faults_injected: u64,
}

#[derive(Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<String, u64>>,
    responses: Mutex<BTreeMap<String, u64>>,
    total: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    writes: Mutex<BTreeMap<String, u64>>,
    skipped: Mutex<BTreeMap<String, u64>>,
    writes_total: AtomicU64,
    skipped_total: AtomicU64,
    window: Mutex<RateWindow>,
    lists: Mutex<Vec<ListRecord>>,
    faults: AtomicU64,
}

#[derive(Default)]
struct RateWindow {
    recent: VecDeque<Instant>,
    peak: u64,
}

impl RateWindow {
    /// Counts a request at `now`; the peak is the most requests seen within any 1 s span.
    fn note(&mut self, now: Instant) {
        self.recent.push_back(now);
        while self
            .recent
            .front()
            .is_some_and(|t| now.duration_since(*t) >= Duration::from_secs(1))
        {
            self.recent.pop_front();
        }
        self.peak = self.peak.max(self.recent.len() as u64);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Metrics {
    pub fn request(&self, verb: &str, resource: &str) {
        *lock(&self.requests)
            .entry(format!("{verb} {resource}"))
            .or_default() += 1;
        self.total.fetch_add(1, Ordering::Relaxed);
        lock(&self.window).note(Instant::now());
    }

    pub fn response(&self, verb: &str, resource: &str, code: u16) {
        *lock(&self.responses)
            .entry(format!("{verb} {resource} {code}"))
            .or_default() += 1;
    }

    pub fn bytes_in(&self, n: u64) {
        self.bytes_in.fetch_add(n, Ordering::Relaxed);
    }

    pub fn bytes_out(&self, n: u64) {
        self.bytes_out.fetch_add(n, Ordering::Relaxed);
    }

    pub fn write_performed(&self, resource: &str) {
        self.writes_total.fetch_add(1, Ordering::Relaxed);
        *lock(&self.writes).entry(resource.to_string()).or_default() += 1;
    }

    pub fn write_skipped(&self, resource: &str) {
        self.skipped_total.fetch_add(1, Ordering::Relaxed);
        *lock(&self.skipped).entry(resource.to_string()).or_default() += 1;
    }

    pub fn fault_injected(&self) {
        self.faults.fetch_add(1, Ordering::Relaxed);
    }

    pub fn list(&self, record: ListRecord) {
        lock(&self.lists).push(record);
    }

    pub fn lists(&self) -> Vec<ListRecord> {
        lock(&self.lists).clone()
    }

    pub fn snapshot(&self) -> CountersSnapshot {
        CountersSnapshot {
            requests: lock(&self.requests).clone(),
            responses: lock(&self.responses).clone(),
            total_requests: self.total.load(Ordering::Relaxed),
            bytes_in: self.bytes_in.load(Ordering::Relaxed),
            bytes_out: self.bytes_out.load(Ordering::Relaxed),
            writes_performed: self.writes_total.load(Ordering::Relaxed),
            writes_skipped: self.skipped_total.load(Ordering::Relaxed),
            writes_performed_by_resource: lock(&self.writes).clone(),
            writes_skipped_by_resource: lock(&self.skipped).clone(),
            peak_requests_per_second: lock(&self.window).peak,
            faults_injected: self.faults.load(Ordering::Relaxed),
        }
    }

    /// Zeroes every counter and forgets the list log (e.g. after a test's setup phase).
    pub fn reset(&self) {
        lock(&self.requests).clear();
        lock(&self.responses).clear();
        self.total.store(0, Ordering::Relaxed);
        self.bytes_in.store(0, Ordering::Relaxed);
        self.bytes_out.store(0, Ordering::Relaxed);
        lock(&self.writes).clear();
        lock(&self.skipped).clear();
        self.writes_total.store(0, Ordering::Relaxed);
        self.skipped_total.store(0, Ordering::Relaxed);
        *lock(&self.window) = RateWindow::default();
        lock(&self.lists).clear();
        self.faults.store(0, Ordering::Relaxed);
    }
}

impl CountersSnapshot {
    /// Requests counted for `verb` on `resource` (`configmaps`, `widgets.example.test`).
    pub fn requests_for(&self, verb: &str, resource: &str) -> u64 {
        self.requests
            .get(&format!("{verb} {resource}"))
            .copied()
            .unwrap_or(0)
    }

    /// Answers with `code` to `verb` on `resource` (or a path such as `/apis`).
    pub fn responses_for(&self, verb: &str, resource: &str, code: u16) -> u64 {
        self.responses
            .get(&format!("{verb} {resource} {code}"))
            .copied()
            .unwrap_or(0)
    }

    pub fn writes_performed_for(&self, resource: &str) -> u64 {
        self.writes_performed_by_resource
            .get(resource)
            .copied()
            .unwrap_or(0)
    }

    pub fn writes_skipped_for(&self, resource: &str) -> u64 {
        self.writes_skipped_by_resource
            .get(resource)
            .copied()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_requests_and_peak_rate() {
        let m = Metrics::default();
        for _ in 0..5 {
            m.request("get", "configmaps");
        }
        m.request("list", "widgets.example.test");
        m.write_performed("configmaps");
        m.write_skipped("configmaps");
        let s = m.snapshot();
        assert_eq!(s.requests_for("get", "configmaps"), 5);
        assert_eq!(s.requests_for("list", "widgets.example.test"), 1);
        assert_eq!(s.total_requests, 6);
        assert_eq!(s.writes_performed_for("configmaps"), 1);
        assert_eq!(s.writes_skipped_for("configmaps"), 1);
        m.reset();
        assert_eq!(m.snapshot(), CountersSnapshot::default());
    }

    #[test]
    fn peak_rate_is_the_busiest_one_second_window() {
        let mut w = RateWindow::default();
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        for ms in [0, 100, 200, 900] {
            w.note(at(ms));
        }
        assert_eq!(w.peak, 4);
        // 1.1 s later the first three have left the window.
        for ms in [1100, 1150, 1200] {
            w.note(at(ms));
        }
        assert_eq!(w.peak, 4);
        for ms in [1300, 1400] {
            w.note(at(ms));
        }
        // 900, 1100, 1150, 1200, 1300, 1400 are within one second of each other.
        assert_eq!(w.peak, 6);
    }
}
