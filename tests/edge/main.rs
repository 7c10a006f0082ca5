//! The network edge, against the real binary over real TLS: every response delivered (big
//! rejected bodies over HTTP/1.1 keep-alive and HTTP/2 while the CPU is busy), slow and hostile
//! clients contained (slowloris connections and stalled handshakes, watchers that stop
//! reading, floods of random bearer tokens, request bodies trickled past `--request-timeout`),
//! and etcd over TLS with client certificates.
//!
//! The heavy tests take a lock so they never run at the same time as each other (the suites
//! share two cores); each prints what it measured.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use svm_test_support as support;
use svm_test_support::{edge_client as client, watch_load};

mod delivery;
mod etcd_tls;
mod slow_bodies;
mod slowloris;
mod tokens;
mod trickle;
mod watchers;

/// Held by each heavy test for its whole run.
pub static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The resident set of a process now, in bytes (from /proc).
pub fn rss_bytes(pid: u32) -> u64 {
    proc_status_kib(pid, "VmRSS:") * 1024
}

/// The peak resident set of a process, in bytes (from /proc).
pub fn peak_rss_bytes(pid: u32) -> u64 {
    proc_status_kib(pid, "VmHWM:") * 1024
}

fn proc_status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// Print a random seed and return it, so a failing run can be repeated (`SVM_TEST_SEED`).
pub fn seed(test: &str) -> u64 {
    let seed = std::env::var("SVM_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    println!("{test}: seed {seed} (SVM_TEST_SEED={seed} to repeat)");
    seed
}
