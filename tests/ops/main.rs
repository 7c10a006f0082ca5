//! Deployment artefacts checked without a cluster: the image's name and tag agree across
//! Containerfile, hack/image.sh, Cargo.toml and deploy/; the monitoring component renders,
//! its alerts pass `promtool check rules` and behave as `promtool test rules` expects; the
//! volume controller's test hooks are in the test builds only.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use svm_test_support as support;

mod hooks;
mod image;
mod monitoring;
