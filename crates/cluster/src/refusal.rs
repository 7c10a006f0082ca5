//! What kind of "no" an apiserver's error answer is, read from the Status kube-apiserver
//! builds for it — so a refusal can be named with what to fix. The messages are upstream's:
//! an admission webhook's denial (`admission webhook "<name>" denied the request…`, whatever
//! code ≥ 400 the webhook chose, 400 by default; k8s.io/apiserver's webhook `ToStatusErr`), a
//! ValidatingAdmissionPolicy's (`ValidatingAdmissionPolicy '<name>' with binding '<b>' denied
//! request…`), a CRD's conversion webhook that failed (500, `conversion webhook for <gvk>
//! failed: …`; apiextensions-apiserver's webhook converter), the authorizer's 403 (`… is
//! forbidden: User "<u>" cannot <verb> resource …`), and a webhook that cannot take a dry run
//! (`admission webhook "<name>" does not support dry run`).

use super::error::ClusterError;

/// A refusal, by who refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// An admission webhook denied the request.
    AdmissionWebhook {
        /// The webhook's name (`webhooks[].name` of its configuration).
        webhook: String,
    },
    /// A ValidatingAdmissionPolicy denied the request.
    AdmissionPolicy {
        /// The policy's name.
        policy: String,
    },
    /// The CRD's conversion webhook failed (unreachable, erroring, or answering nonsense).
    ConversionWebhook {
        /// The kind it was converting, as the message names it (`example.test/v1, Kind=Widget`).
        kind: String,
    },
    /// Authorization (RBAC) refused the request: 403 without an admission prefix, or 401.
    Authorization {
        /// The verb refused, as the message names it (`patch`), when it does.
        verb: Option<String>,
    },
    /// Any other error answer that is not retried (400, 405, 415, 422 …).
    Other,
}

/// How an error answer to a dry run is to be taken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DryRunAnswer {
    /// A refusal the real request would meet too.
    Refused(Refusal),
    /// Says nothing about the real request: 409 (the object changed since it was listed), 404
    /// (deleted since), or a webhook that cannot judge dry runs.
    Inconclusive,
    /// Worth another try (429, 5xx other than a conversion webhook's failure, no answer).
    Transient,
    /// Not an answer of the apiserver (an unreadable body, a request we could not build).
    Local,
}

/// What an error answer to a dry-run request (or any request) is.
pub fn dry_run_answer(err: &ClusterError) -> DryRunAnswer {
    let ClusterError::Api { code, message, .. } = err else {
        return if err.is_retriable() {
            DryRunAnswer::Transient
        } else {
            DryRunAnswer::Local
        };
    };
    if message.contains("does not support dry run") {
        return DryRunAnswer::Inconclusive;
    }
    if let Some(refusal) = refusal_in(*code, message) {
        return DryRunAnswer::Refused(refusal);
    }
    match code {
        404 | 409 => DryRunAnswer::Inconclusive,
        _ if err.is_retriable() => DryRunAnswer::Transient,
        _ => DryRunAnswer::Refused(Refusal::Other),
    }
}

/// The refusal a message names, whatever its code (a webhook may deny with a 5xx); `None` for
/// a message that names none, where only the code tells.
fn refusal_in(code: u16, message: &str) -> Option<Refusal> {
    if let Some(webhook) = quoted_after(message, "admission webhook \"", '"')
        && message.contains("denied the request")
    {
        return Some(Refusal::AdmissionWebhook { webhook });
    }
    if let Some(policy) = quoted_after(message, "ValidatingAdmissionPolicy '", '\'') {
        return Some(Refusal::AdmissionPolicy { policy });
    }
    if let Some(rest) = after(message, "conversion webhook for ")
        && let Some(end) = rest.find(" failed")
    {
        return Some(Refusal::ConversionWebhook {
            kind: rest[..end].to_string(),
        });
    }
    if code == 401 || (code == 403 && message.contains("forbidden")) {
        let verb = after(message, " cannot ")
            .and_then(|rest| rest.split_whitespace().next())
            .map(str::to_string);
        return Some(Refusal::Authorization { verb });
    }
    None
}

fn after<'a>(message: &'a str, marker: &str) -> Option<&'a str> {
    message.find(marker).map(|at| &message[at + marker.len()..])
}

/// The text between `marker` and the next `close`.
fn quoted_after(message: &str, marker: &str, close: char) -> Option<String> {
    let rest = after(message, marker)?;
    rest.find(close).map(|end| rest[..end].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16, message: &str) -> ClusterError {
        let body = serde_json::json!({"kind": "Status", "message": message, "code": code});
        ClusterError::from_status(code, body.to_string().as_bytes(), None, "x")
    }

    #[test]
    fn an_admission_webhook_denial_names_the_webhook_whatever_its_code() {
        for code in [400, 403, 422, 500] {
            let err = api(
                code,
                r#"admission webhook "frozen.webhook.test" denied the request: widgets are frozen"#,
            );
            assert_eq!(
                dry_run_answer(&err),
                DryRunAnswer::Refused(Refusal::AdmissionWebhook {
                    webhook: "frozen.webhook.test".into()
                }),
                "{code}"
            );
        }
    }

    #[test]
    fn a_conversion_webhook_failure_is_a_refusal_not_a_transient_500() {
        let err = api(
            500,
            r#"conversion webhook for example.test/v1, Kind=Widget failed: Post "https://127.0.0.1:1/convert?timeout=30s": dial tcp 127.0.0.1:1: connect: connection refused"#,
        );
        assert_eq!(
            dry_run_answer(&err),
            DryRunAnswer::Refused(Refusal::ConversionWebhook {
                kind: "example.test/v1, Kind=Widget".into()
            })
        );
        // A webhook that cannot be called is another 500: retried.
        let unreachable = api(
            500,
            r#"Internal error occurred: failed calling webhook "frozen.webhook.test": failed to call webhook: Post "https://127.0.0.1:1/validate": connection refused"#,
        );
        assert_eq!(dry_run_answer(&unreachable), DryRunAnswer::Transient);
    }

    #[test]
    fn rbac_names_the_verb() {
        let err = api(
            403,
            r#"widgets.example.test "w-1" is forbidden: User "system:serviceaccount:svm-system:svm-apiserver" cannot patch resource "widgets" in API group "example.test" in the namespace "demo""#,
        );
        assert_eq!(
            dry_run_answer(&err),
            DryRunAnswer::Refused(Refusal::Authorization {
                verb: Some("patch".into())
            })
        );
    }

    #[test]
    fn a_policy_denial_names_the_policy() {
        let err = api(
            403,
            "widgets.example.test \"w-1\" is forbidden: ValidatingAdmissionPolicy 'frozen' with binding 'frozen-binding' denied request: no",
        );
        assert_eq!(
            dry_run_answer(&err),
            DryRunAnswer::Refused(Refusal::AdmissionPolicy {
                policy: "frozen".into()
            })
        );
    }

    #[test]
    fn what_says_nothing_about_the_real_write() {
        assert_eq!(
            dry_run_answer(&api(409, "the object has been modified")),
            DryRunAnswer::Inconclusive
        );
        assert_eq!(
            dry_run_answer(&api(404, "not found")),
            DryRunAnswer::Inconclusive
        );
        assert_eq!(
            dry_run_answer(&api(
                400,
                r#"admission webhook "x.y.z" does not support dry run"#
            )),
            DryRunAnswer::Inconclusive
        );
        for code in [429, 503, 504] {
            assert_eq!(
                dry_run_answer(&api(code, "busy")),
                DryRunAnswer::Transient,
                "{code}"
            );
        }
        assert_eq!(
            dry_run_answer(&api(422, "spec.size: Invalid value")),
            DryRunAnswer::Refused(Refusal::Other)
        );
        let timed_out = ClusterError::TimedOut {
            what: "no answer",
            after: std::time::Duration::from_secs(1),
        };
        assert_eq!(dry_run_answer(&timed_out), DryRunAnswer::Transient);
    }
}
