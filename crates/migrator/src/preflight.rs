//! Preflight (docs/migrator.md, "Preflight"): before a migration's first write, the no-op PATCH
//! it would send is sent as a server-side dry run (`dryRun=All`) for a few objects spread over
//! the first objects of the resource. kube-apiserver authorizes, converts, admits and validates
//! a dry run as the real write and persists nothing, so a refusal that every write would meet —
//! an admission webhook's denial, a CRD's conversion webhook that cannot be reached, RBAC's 403
//! — is found before anything is written, and named with what to fix, instead of half-way
//! through the resource.
//!
//! The rule: the migration stops only when no sampled object was admitted and at least one was
//! refused. A refusal that does not depend on the object refuses every sample; one that does (a
//! webhook selecting objects by label, RBAC in some namespaces only) lets some through, and
//! then the run goes on and meets those objects as it always did. Transient answers are retried
//! as every request is; past the retry cap the migration pauses and preflight runs again.

use svm_api::migration::MigrationProgress;
use svm_cluster::refusal::{DryRunAnswer, Refusal, dry_run_answer};
use svm_cluster::{ClusterError, ObjectRef};

/// The reason of the Failed condition (and the Warning Event) of a migration preflight stopped.
pub(super) const REASON: &str = "PreflightFailed";
/// How many objects the sample is chosen from: one small metadata-only LIST.
pub(super) const LIST_LIMIT: u32 = 100;
/// How many objects are dry-run at most.
const SAMPLE_SIZE: usize = 5;

/// Whether preflight runs: until a checkpoint records progress (objects migrated or refused, a
/// continue token, a last key). Once one does, writes have been sent, and a resumed run goes on
/// without it (a refusal from then on is met by the writes themselves, as before preflight). A
/// run that stopped before its first checkpoint may have written some objects; a dry run is
/// cheap and writes nothing, so it checks again.
pub(super) fn needed(progress: &MigrationProgress) -> bool {
    progress.migrated_objects == 0
        && progress.failed_objects == 0
        && progress.continue_token.is_empty()
        && progress.migrated_through.is_empty()
}

/// Up to [`SAMPLE_SIZE`] of `items`, spread evenly: the first, the last, and between.
pub(super) fn sample(items: &[ObjectRef]) -> Vec<ObjectRef> {
    let n = items.len();
    if n <= SAMPLE_SIZE {
        return items.to_vec();
    }
    (0..SAMPLE_SIZE)
        .map(|i| items[i * (n - 1) / (SAMPLE_SIZE - 1)].clone())
        .collect()
}

/// One refused dry run (or the sample's LIST): who, and the answer.
#[derive(Debug)]
pub(super) struct Refused {
    /// `namespace/name`; `None` when the LIST of the sample was refused.
    pub object: Option<String>,
    pub refusal: Refusal,
    pub err: ClusterError,
}

/// What preflight found.
#[derive(Debug)]
pub(super) enum Verdict {
    /// Go on: `admitted` of `sampled` dry runs passed (0 of 0 for an empty resource).
    Pass { sampled: usize, admitted: usize },
    /// Every answered dry run was refused: stop before any write.
    Stop {
        first: Refused,
        refused: usize,
        sampled: usize,
    },
    /// An error that is not a refusal (transient, or ours): handled as the run handles any.
    Error { err: ClusterError, doing: String },
}

/// The verdict on the sample's LIST failing with `err`: a refusal of the LIST is every
/// object's (a conversion webhook that cannot convert the stored version, RBAC without list).
pub(super) fn list_failed(err: ClusterError, resource: &str) -> Verdict {
    match dry_run_answer(&err) {
        DryRunAnswer::Refused(refusal) => Verdict::Stop {
            first: Refused {
                object: None,
                refusal,
                err,
            },
            refused: 0,
            sampled: 0,
        },
        _ => Verdict::Error {
            err,
            doing: format!("preflight: listing {resource}"),
        },
    }
}

/// The verdict on the dry runs' answers.
pub(super) fn verdict(
    answers: Vec<(ObjectRef, Result<(), ClusterError>)>,
    resource: &str,
) -> Verdict {
    let sampled = answers.len();
    let (mut admitted, mut refused) = (0, Vec::new());
    for (object, answer) in answers {
        let Err(err) = answer else {
            admitted += 1;
            continue;
        };
        match dry_run_answer(&err) {
            DryRunAnswer::Refused(refusal) => refused.push(Refused {
                object: Some(object.display_name()),
                refusal,
                err,
            }),
            DryRunAnswer::Inconclusive => {}
            DryRunAnswer::Transient | DryRunAnswer::Local => {
                let doing = format!("preflight: dry run of {resource} {}", object.display_name());
                return Verdict::Error { err, doing };
            }
        }
    }
    let count = refused.len();
    match refused.into_iter().next() {
        Some(first) if admitted == 0 => Verdict::Stop {
            first,
            refused: count,
            sampled,
        },
        _ => Verdict::Pass { sampled, admitted },
    }
}

/// The Failed condition's message (and the Event's note): the object, the answer, what to fix.
pub(super) fn message(first: &Refused, refused: usize, sampled: usize, resource: &str) -> String {
    let what = match &first.object {
        Some(object) => format!(
            "a dry run (dryRun=All) of the no-op PATCH was refused for {refused} of {sampled} sampled objects of {resource}; {object}"
        ),
        None => format!("the LIST of {resource} that chooses the sample was refused"),
    };
    let answer = match &first.err {
        ClusterError::Api {
            code,
            reason,
            message,
            ..
        } => {
            // A webhook's Status often has no reason: the code's own name stands in.
            let reason = Some(reason.as_str())
                .filter(|r| !r.is_empty())
                .or_else(|| http::StatusCode::from_u16(*code).ok()?.canonical_reason())
                .unwrap_or_default();
            format!("{code} {reason}: {message}")
        }
        other => other.to_string(),
    };
    format!(
        "preflight: {what}: {answer}. Nothing was written. To fix: {}; then delete the migration and create it again.",
        fix(&first.refusal, resource)
    )
}

/// What to fix, by who refused.
fn fix(refusal: &Refusal, resource: &str) -> String {
    match refusal {
        Refusal::AdmissionWebhook { webhook } => format!(
            "admission webhook \"{webhook}\" denies the migrator's no-op PATCH (an UPDATE that changes nothing); let it allow that UPDATE (or the migrator's user), or take {resource} out of its rules"
        ),
        Refusal::AdmissionPolicy { policy } => format!(
            "ValidatingAdmissionPolicy '{policy}' denies the migrator's no-op PATCH; let it allow an UPDATE that changes nothing (or the migrator's user)"
        ),
        Refusal::ConversionWebhook { kind } => format!(
            "the conversion webhook of the CustomResourceDefinition {resource} (spec.conversion.webhook.clientConfig) cannot convert {kind}; make it reachable and answering"
        ),
        Refusal::Authorization { verb } => format!(
            "grant the migrator's identity {} on {resource} (deploy/ RBAC)",
            verb.as_deref().unwrap_or("list and patch")
        ),
        Refusal::Other => format!(
            "the apiserver refuses the no-op PATCH of {resource} (see the answer); every object would meet it"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(i: usize) -> ObjectRef {
        ObjectRef {
            namespace: Some("demo".into()),
            name: format!("w-{i:03}"),
            uid: format!("uid-{i}"),
            resource_version: i.to_string(),
        }
    }

    fn api(code: u16, message: &str) -> ClusterError {
        let body = serde_json::json!({"kind": "Status", "reason": "BadRequest", "message": message, "code": code});
        ClusterError::from_status(code, body.to_string().as_bytes(), None, "x")
    }

    fn denied() -> Result<(), ClusterError> {
        Err(api(
            400,
            r#"admission webhook "frozen.webhook.test" denied the request: frozen"#,
        ))
    }

    #[test]
    fn the_sample_is_spread_from_first_to_last() {
        let items: Vec<ObjectRef> = (0..100).map(object).collect();
        let names: Vec<String> = sample(&items).into_iter().map(|o| o.name).collect();
        assert_eq!(names, ["w-000", "w-024", "w-049", "w-074", "w-099"]);
        assert_eq!(sample(&items[..3]).len(), 3);
        assert!(sample(&[]).is_empty());
    }

    #[test]
    fn every_sample_refused_stops_and_names_the_webhook() {
        let answers = (0..3).map(|i| (object(i), denied())).collect();
        let Verdict::Stop {
            first,
            refused,
            sampled,
        } = verdict(answers, "widgets.example.test")
        else {
            panic!("not a stop");
        };
        assert_eq!((refused, sampled), (3, 3));
        let text = message(&first, refused, sampled, "widgets.example.test");
        assert!(text.contains("demo/w-000"), "{text}");
        assert!(text.contains("400 BadRequest"), "{text}");
        assert!(
            text.contains(r#"admission webhook "frozen.webhook.test""#),
            "{text}"
        );
        assert!(text.contains("Nothing was written"), "{text}");
    }

    #[test]
    fn a_refusal_some_samples_pass_goes_on() {
        let answers = vec![
            (object(0), denied()),
            (object(1), Ok(())),
            (object(2), denied()),
        ];
        assert!(matches!(
            verdict(answers, "w"),
            Verdict::Pass {
                sampled: 3,
                admitted: 1
            }
        ));
    }

    #[test]
    fn conflicts_say_nothing_and_transients_are_retried() {
        let conflict = || Err(api(409, "the object has been modified"));
        let answers = vec![(object(0), conflict()), (object(1), denied())];
        assert!(matches!(
            verdict(answers, "w"),
            Verdict::Stop { refused: 1, .. }
        ));
        let answers = vec![(object(0), conflict()), (object(1), conflict())];
        assert!(matches!(
            verdict(answers, "w"),
            Verdict::Pass { admitted: 0, .. }
        ));
        let answers = vec![(object(0), denied()), (object(1), Err(api(503, "busy")))];
        assert!(matches!(verdict(answers, "w"), Verdict::Error { .. }));
        // An empty resource has nothing to check.
        assert!(matches!(
            verdict(Vec::new(), "w"),
            Verdict::Pass {
                sampled: 0,
                admitted: 0
            }
        ));
    }

    #[test]
    fn a_conversion_webhook_failing_the_list_stops() {
        let err = api(
            500,
            "conversion webhook for example.test/v1, Kind=Widget failed: connection refused",
        );
        let Verdict::Stop { first, .. } = list_failed(err, "widgets.example.test") else {
            panic!("not a stop");
        };
        let text = message(&first, 0, 0, "widgets.example.test");
        assert!(text.contains("conversion webhook"), "{text}");
        assert!(text.contains("spec.conversion.webhook"), "{text}");
        assert!(matches!(
            list_failed(api(503, "busy"), "w"),
            Verdict::Error { .. }
        ));
    }

    #[test]
    fn preflight_runs_until_a_checkpoint_records_progress() {
        let mut progress = MigrationProgress::default();
        assert!(needed(&progress));
        progress.migrated_through = "demo/w-1".into();
        assert!(!needed(&progress));
    }
}
