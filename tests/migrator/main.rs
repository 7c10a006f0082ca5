//! Integration tests of the migrator: the real `svm-apiserver` binary (its store embedded)
//! running StorageVersionMigrations against the kube-apiserver test double, asserted through
//! the double's read-back of how every object is stored and its request counters.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use svm_test_support as support;

use svm_test_support::harness;

mod client_go_status;
mod crash;
mod failover;
mod faults;
mod migrate;
mod named_failures;
mod preflight;
mod refusals;
