//! List continue tokens in kube-apiserver's format (k8s.io/apiserver `pkg/storage/continue.go`):
//! base64url (no padding) of `{"v":"meta.k8s.io/v1","rv":<revision>,"start":"<next key>"}`,
//! where `start` is the key after the page's last item (`<last name>\0`) without the resource
//! prefix. A revision of -1 marks an "inconsistent" token: continue at the current revision
//! (what a 410 for an expired token hands out, recording 05).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

use super::error::ApiError;
use svm_storage::Revision;

const VERSION: &str = "meta.k8s.io/v1";

#[derive(Debug, Serialize, Deserialize)]
struct Wire {
    v: String,
    rv: i64,
    start: String,
}

/// A decoded continue token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ContinueToken {
    /// The revision every page of the list is read at; `None` for an inconsistent token
    /// (continue at the current revision).
    pub revision: Option<Revision>,
    /// The key to start the next page at, relative to the resource prefix.
    pub start: String,
}

impl ContinueToken {
    /// The token for the page after the item stored under `last_key_suffix`.
    pub(crate) fn after(last_key_suffix: &str, revision: Revision) -> Self {
        Self {
            revision: Some(revision),
            start: format!("{last_key_suffix}\0"),
        }
    }

    /// The same position, continued at the current revision (rv -1).
    pub(crate) fn inconsistent(&self) -> Self {
        Self {
            revision: None,
            start: self.start.clone(),
        }
    }

    pub(crate) fn encode(&self) -> String {
        let wire = Wire {
            v: VERSION.into(),
            rv: self.revision.unwrap_or(-1),
            start: self.start.clone(),
        };
        // Serializing three plain fields cannot fail.
        let json = serde_json::to_vec(&wire).unwrap_or_default();
        URL_SAFE_NO_PAD.encode(json)
    }

    /// Decode a client's token; every defect is a 400 with upstream's wording.
    pub(crate) fn decode(token: &str) -> Result<Self, ApiError> {
        let invalid = |detail: String| {
            ApiError::BadRequest(format!(
                "invalid continue token: continue key is not valid{detail}"
            ))
        };
        let bytes = URL_SAFE_NO_PAD
            .decode(token.trim_end_matches('='))
            .map_err(|e| invalid(format!(": {e}")))?;
        let wire: Wire = serde_json::from_slice(&bytes).map_err(|e| invalid(format!(": {e}")))?;
        if wire.v != VERSION {
            return Err(invalid(format!(
                ": server does not recognize this encoded version {}",
                wire.v
            )));
        }
        if wire.rv == 0 {
            return Err(invalid(
                ": incorrect encoded start resourceVersion (version meta.k8s.io/v1)".into(),
            ));
        }
        if wire.start.is_empty() {
            return Err(invalid(
                ": encoded start key empty (version meta.k8s.io/v1)".into(),
            ));
        }
        // A start key must stay inside the resource's prefix: no path traversal (upstream
        // cleans the path and rejects anything that changes).
        let start = wire.start.strip_prefix('/').unwrap_or(&wire.start);
        if start.is_empty()
            || start
                .split('/')
                .any(|seg| seg.is_empty() || seg == "." || seg == "..")
        {
            return Err(invalid(format!(": {}", wire.start)));
        }
        Ok(Self {
            revision: (wire.rv > 0).then_some(wire.rv),
            start: start.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_like_kube_apiserver() {
        // Recording 04: {"v":"meta.k8s.io/v1","rv":308,"start":"demo/cm2\u0000"}.
        let token = ContinueToken::after("demo/cm2", 308);
        assert_eq!(
            token.encode(),
            "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MzA4LCJzdGFydCI6ImRlbW8vY20yXHUwMDAwIn0"
        );
    }

    #[test]
    fn decodes_upstream_tokens_including_the_inconsistent_form() {
        let token = ContinueToken::decode(
            "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6LTEsInN0YXJ0IjoiZGVmYXVsdC9vcGVuc2hpZnQtc2VydmljZS1jYS5jcnRcdTAwMDAifQ",
        )
        .expect("recording 05 token");
        assert_eq!(token.revision, None);
        assert_eq!(token.start, "default/openshift-service-ca.crt\0");
        // Tokens served from the watch cache carry a leading "/" (recording 05, step 3).
        let cached = ContinueToken::decode(
            "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MzUwLCJzdGFydCI6Ii9kZW1vL2NtMlx1MDAwMCJ9",
        )
        .expect("cache token");
        assert_eq!(cached.revision, Some(350));
        assert_eq!(cached.start, "demo/cm2\0");
    }

    #[test]
    fn round_trips_and_marks_inconsistent() {
        let token = ContinueToken::after("name-7", 42);
        let back = ContinueToken::decode(&token.encode()).expect("round trip");
        assert_eq!(back, token);
        let inconsistent = ContinueToken::decode(&token.inconsistent().encode()).expect("rv -1");
        assert_eq!(inconsistent.revision, None);
        assert_eq!(inconsistent.start, "name-7\0");
    }

    #[test]
    fn rejects_malformed_tokens_with_400() {
        let encode = |json: &str| URL_SAFE_NO_PAD.encode(json);
        let cases = [
            (
                "not base64 at all!".to_string(),
                "continue key is not valid",
            ),
            (encode("{"), "continue key is not valid"),
            (
                encode(r#"{"v":"meta.k8s.io/v2","rv":1,"start":"a"}"#),
                "does not recognize this encoded version",
            ),
            (
                encode(r#"{"v":"meta.k8s.io/v1","rv":0,"start":"a"}"#),
                "incorrect encoded start resourceVersion",
            ),
            (
                encode(r#"{"v":"meta.k8s.io/v1","rv":5,"start":""}"#),
                "encoded start key empty",
            ),
            (
                encode(r#"{"v":"meta.k8s.io/v1","rv":5,"start":"../other/x"}"#),
                "continue key is not valid",
            ),
        ];
        for (token, expected) in cases {
            match ContinueToken::decode(&token) {
                Err(ApiError::BadRequest(msg)) => {
                    assert!(msg.starts_with("invalid continue token: "), "{msg}");
                    assert!(msg.contains(expected), "{msg} should mention {expected}");
                }
                other => panic!("{token}: expected 400, got {other:?}"),
            }
        }
    }
}
