//! Tests of `svm_server::auth` through its public interface — the delegated TokenReview /
//! SubjectAccessReview clients against a stand-in kube-apiserver that answers like recordings
//! 15a/15b, the middleware over real TLS with client certificates, the binary's development
//! certificates beside the cluster's CAs — and of the deployment
//! manifests rendered by the real kubectl 1.37.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod dev_certs;
mod fake_cluster;
mod from_options;
mod kustomize;
mod rbac_coverage;
mod tls_stack;
mod webhooks;
