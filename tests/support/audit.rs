//! kube-apiserver's own audit log, for tests that need to know what a client of the cluster
//! asked and what it was answered — kube-controller-manager's controllers, for instance, whose
//! requests to an aggregated API go through kube-apiserver (the aggregator proxies them, and
//! the audit filter records the proxied answer's code). The policy is the test's; the log is a
//! file in a temp dir of the handle, read back as [`AuditedRequest`]s.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;

use crate::server::keep_log;

/// An audit policy and the log kube-apiserver writes with it.
pub struct AuditLog {
    dir: tempfile::TempDir,
    policy: PathBuf,
    log: PathBuf,
}

/// One request as the audit log tells it (its last stage: `ResponseComplete`, or
/// `ResponseStarted` for a watch still open).
#[derive(Clone, Debug)]
pub struct AuditedRequest {
    pub user: String,
    pub user_agent: String,
    pub verb: String,
    pub uri: String,
    pub code: u16,
    /// `Status.reason` of an error answer, when kube-apiserver could read it.
    pub reason: String,
}

impl AuditedRequest {
    /// The controller a kube-controller-manager request came from: the last segment of its
    /// User-Agent (`kube-controller-manager/v1.36.2 (linux/amd64) kubernetes/<sha>/<name>`).
    pub fn component(&self) -> &str {
        self.user_agent.rsplit('/').next().unwrap_or_default()
    }
}

impl AuditLog {
    /// A policy of `rules` (the YAML list items of `audit.k8s.io/v1` Policy `rules`, indented
    /// by nothing), with the `RequestReceived` stage omitted.
    pub fn with_rules(rules: &str) -> AuditLog {
        let dir = tempfile::tempdir().expect("temp dir");
        let policy = dir.path().join("audit-policy.yaml");
        let indented: String = rules.lines().map(|line| format!("  {line}\n")).collect();
        std::fs::write(
            &policy,
            format!(
                "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\n\
                 rules:\n{indented}"
            ),
        )
        .expect("audit policy");
        let log = dir.path().join("audit.log");
        AuditLog { dir, policy, log }
    }

    /// kube-apiserver's flags for it.
    pub fn flags(&self) -> Vec<String> {
        vec![
            format!("--audit-policy-file={}", self.policy.display()),
            format!("--audit-log-path={}", self.log.display()),
        ]
    }

    /// Every request recorded so far, in the order they were first recorded.
    pub fn requests(&self) -> Vec<AuditedRequest> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let mut order: Vec<String> = Vec::new();
        let mut last: BTreeMap<String, Value> = BTreeMap::new();
        for line in text.lines() {
            let Ok(event) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            let id = event["auditID"].as_str().unwrap_or_default().to_string();
            if !last.contains_key(&id) {
                order.push(id.clone());
            }
            last.insert(id, event);
        }
        order
            .iter()
            .filter_map(|id| last.get(id))
            .map(|event| {
                let text = |pointer: &str| {
                    event
                        .pointer(pointer)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string()
                };
                AuditedRequest {
                    user: text("/user/username"),
                    user_agent: text("/userAgent"),
                    verb: text("/verb"),
                    uri: text("/requestURI"),
                    code: event
                        .pointer("/responseStatus/code")
                        .and_then(Value::as_u64)
                        .and_then(|c| u16::try_from(c).ok())
                        .unwrap_or(0),
                    reason: text("/responseStatus/reason"),
                }
            })
            .collect()
    }

    /// Where the log is (removed with the handle; kept like the servers' logs when
    /// `SVM_TEST_LOG_DIR` is set).
    pub fn path(&self) -> &std::path::Path {
        &self.log
    }

    /// The directory holding the policy and the log.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }
}

impl Drop for AuditLog {
    fn drop(&mut self) {
        keep_log("kube-apiserver-audit", &self.log);
    }
}
