//! Objects the cluster refuses for good, and what they do to their migration.
//!
//! A refusal is the cluster's final answer to one object's no-op PATCH: 400, 403 or 422 — a
//! validating admission webhook's or a ValidatingAdmissionPolicy's denial (whatever 4xx it
//! chose), validation the stored object no longer passes. Retriable answers (429, 5xx, 408,
//! timeouts) were retried before; 404 (deleted) and 409 (written since it was listed) mean the
//! object needs no rewrite and are not failures. RBAC's 403 (`cannot patch resource`) is not
//! one object's fault: every object would meet it, so it fails the migration at once as any
//! other error does.
//!
//! Refused objects are counted and the first [`MAX_NAMED_FAILURES`] named in
//! `status.progress` at the checkpoints; at the end the migration's
//! [`ON_OBJECT_FAILURE_ANNOTATION`](svm_api::migration::ON_OBJECT_FAILURE_ANNOTATION) policy
//! decides: `Fail` (the default) ends it Failed naming them — at once once
//! [`MAX_NAMED_FAILURES`] are refused, since a longer list would say no more — and `Skip` ends
//! it Succeeded with the condition `ObjectsSkipped` naming them, which keeps the resource
//! unsafe.

use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};

use svm_api::migration::{MAX_NAMED_FAILURES, MigrationProgress, ObjectFailure};
use svm_cluster::{ClusterError, ObjectRef};

/// The cluster's answer to `object`'s PATCH, when it is a refusal of that object (see the
/// module's documentation); `None` for anything else.
pub(super) fn refusal(err: &ClusterError, object: &ObjectRef) -> Option<ObjectFailure> {
    let ClusterError::Api {
        code,
        reason,
        message,
        ..
    } = err
    else {
        return None;
    };
    let refused = matches!(code, 400 | 403 | 422) && !message.contains("cannot patch resource");
    refused.then(|| ObjectFailure {
        namespace: object.namespace.clone().unwrap_or_default(),
        name: object.name.clone(),
        code: i32::from(*code),
        reason: reason.clone(),
        message: super::status::bounded_message(message.clone()),
    })
}

/// The refusals recorded so far (those the stored progress held when the run started, then
/// this run's): the count, and the first [`MAX_NAMED_FAILURES`].
#[derive(Debug, Default)]
pub(super) struct FailureLog {
    inner: Mutex<(i64, Vec<ObjectFailure>)>,
    /// Refusals seen, recorded or not yet (a refused object waits for the objects before it
    /// in a stream, or for the rest of its page, before it is recorded).
    seen: AtomicI64,
    /// The first refusals seen, recorded or not: what a migration failed before they were
    /// recorded names.
    first_seen: Mutex<Vec<ObjectFailure>>,
}

impl FailureLog {
    /// Starts from what `progress` recorded.
    pub(super) fn reset(&self, progress: &MigrationProgress) {
        if let Ok(mut inner) = self.inner.lock() {
            *inner = (progress.failed_objects, progress.failures.clone());
        }
        self.seen.store(progress.failed_objects, Ordering::Relaxed);
        if let Ok(mut first) = self.first_seen.lock() {
            first.clone_from(&progress.failures);
        }
    }

    /// One more refusal seen: how many so far.
    pub(super) fn saw(&self, failure: &ObjectFailure) -> i64 {
        if let Ok(mut first) = self.first_seen.lock()
            && first.len() < MAX_NAMED_FAILURES
        {
            first.push(failure.clone());
        }
        self.seen.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// As [`FailureLog::fill`], with the refusals seen and not yet recorded — for a migration
    /// that ends now: they are taken out of the remaining objects.
    pub(super) fn fill_all(&self, progress: &mut MigrationProgress) {
        self.fill(progress);
        let unrecorded = self.seen.load(Ordering::Relaxed) - progress.failed_objects;
        if unrecorded > 0 {
            progress.failed_objects += unrecorded;
            progress.remaining_objects =
                progress.remaining_objects.map(|r| (r - unrecorded).max(0));
        }
        if let Ok(first) = self.first_seen.lock()
            && first.len() > progress.failures.len()
        {
            progress.failures.clone_from(&first);
        }
    }

    /// Records `failures`; returns the count after.
    pub(super) fn record(&self, failures: impl IntoIterator<Item = ObjectFailure>) -> i64 {
        let Ok(mut inner) = self.inner.lock() else {
            return 0;
        };
        for failure in failures {
            inner.0 += 1;
            if inner.1.len() < MAX_NAMED_FAILURES {
                inner.1.push(failure);
            }
        }
        inner.0
    }

    /// Writes the count and the named failures into `progress`.
    pub(super) fn fill(&self, progress: &mut MigrationProgress) {
        if let Ok(inner) = self.inner.lock() {
            progress.failed_objects = inner.0;
            progress.failures.clone_from(&inner.1);
        }
    }

    /// How many were refused.
    pub(super) fn count(&self) -> i64 {
        self.inner.lock().map_or(0, |inner| inner.0)
    }
}

/// `demo/w-1 (403 Forbidden: admission webhook "…" denied the request: …); …` — the named
/// failures, and how many more there were.
pub(super) fn failures_text(progress: &MigrationProgress) -> String {
    let mut text = progress
        .failures
        .iter()
        .map(|f| {
            // A webhook that sets no reason gets none from kube-apiserver either.
            let reason = if f.reason.is_empty() {
                String::new()
            } else {
                format!(" {}", f.reason)
            };
            format!("{} ({}{reason}: {})", f.key(), f.code, f.message)
        })
        .collect::<Vec<_>>()
        .join("; ");
    let more = progress.failed_objects - super::status::count(progress.failures.len());
    if more > 0 {
        text.push_str(&format!("; and {more} more"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16, reason: &str, message: &str) -> ClusterError {
        ClusterError::Api {
            code,
            reason: reason.into(),
            message: message.into(),
            retry_after: None,
            continue_token: None,
            flow_control: None,
        }
    }

    fn object(name: &str) -> ObjectRef {
        ObjectRef {
            namespace: Some("demo".into()),
            name: name.into(),
            uid: format!("uid-{name}"),
            resource_version: "7".into(),
        }
    }

    #[test]
    fn denials_are_refusals_and_deleted_changed_or_throttled_objects_are_not() {
        let denied = api(
            403,
            "Forbidden",
            r#"admission webhook "deny.example.test" denied the request: no"#,
        );
        let failure = refusal(&denied, &object("w-1")).expect("a refusal");
        assert_eq!(failure.key(), "demo/w-1");
        assert_eq!((failure.code, failure.reason.as_str()), (403, "Forbidden"));
        assert!(refusal(&api(422, "Invalid", "spec.size: Invalid"), &object("w")).is_some());
        assert!(refusal(&api(400, "BadRequest", "denied"), &object("w")).is_some());
        for (code, reason) in [
            (404, "NotFound"),
            (409, "Conflict"),
            (429, "TooManyRequests"),
        ] {
            assert!(
                refusal(&api(code, reason, ""), &object("w")).is_none(),
                "{code}"
            );
        }
        // RBAC's refusal is every object's: the migration's failure, not one object's.
        let rbac = api(
            403,
            "Forbidden",
            r#"widgets.example.test "w" is forbidden: User "x" cannot patch resource "widgets""#,
        );
        assert!(refusal(&rbac, &object("w")).is_none());
    }

    #[test]
    fn the_log_counts_every_refusal_and_names_the_first_ten() {
        let log = FailureLog::default();
        log.reset(&MigrationProgress {
            failed_objects: 1,
            failures: vec![ObjectFailure {
                name: "before-a-restart".into(),
                ..Default::default()
            }],
            ..Default::default()
        });
        let pending = ObjectFailure {
            name: "not-yet-recorded".into(),
            ..Default::default()
        };
        assert_eq!(log.saw(&pending), 2);
        let mut ending = MigrationProgress {
            remaining_objects: Some(5),
            ..Default::default()
        };
        log.fill_all(&mut ending);
        assert_eq!(ending.failed_objects, 2);
        assert_eq!(
            ending.remaining_objects,
            Some(4),
            "the refused one is not remaining"
        );
        assert_eq!(ending.failures.len(), 2);
        let many = (0..12).map(|i| ObjectFailure {
            namespace: "demo".into(),
            name: format!("w-{i}"),
            code: 403,
            reason: "Forbidden".into(),
            message: "no".into(),
        });
        assert_eq!(log.record(std::iter::once(pending).chain(many)), 14);
        let mut progress = MigrationProgress::default();
        log.fill(&mut progress);
        assert_eq!(progress.failed_objects, 14);
        assert_eq!(progress.failures.len(), MAX_NAMED_FAILURES);
        assert_eq!(progress.failures[0].name, "before-a-restart");
        let text = failures_text(&progress);
        assert!(
            text.starts_with(
                "before-a-restart (0: ); not-yet-recorded (0: ); demo/w-0 (403 Forbidden: no)"
            ),
            "{text}"
        );
        assert!(text.ends_with("; and 4 more"), "{text}");
    }
}
