//! Integration tests of the trigger: the real `svm-apiserver` binary (trigger and migrator on,
//! its store on a real etcd) against the kube-apiserver test double. Each scenario asserts the
//! StorageStates, the hash history (read from the documented etcd prefix), the migrations
//! created, and that the "safe" verdict (persisted == [current]) is never reported while the
//! double's read-back still shows an object in an older encoding.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use svm_test_support as support;

use svm_test_support::harness;

mod world;

mod changes;
mod detection;
mod monitoring;
mod restarts;
