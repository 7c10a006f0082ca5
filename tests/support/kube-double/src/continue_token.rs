//! List continue tokens in kube-apiserver's format: base64url (no padding) of
//! `{"v":"meta.k8s.io/v1","rv":<list revision>,"start":"<key after the last item>\u0000"}`,
//! with `start` relative to the list's key prefix (recordings 04, 04b, 05). A token with
//! `rv` -1 is the "inconsistent" continuation a 410 Expired hands out.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

const TOKEN_VERSION: &str = "meta.k8s.io/v1";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Wire {
    v: String,
    rv: i64,
    start: String,
}

/// A decoded token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContinueToken {
    /// The snapshot revision; `None` for an inconsistent token (rv -1): read the current state.
    pub revision: Option<u64>,
    /// Where the next page starts, relative to the list prefix (includes the trailing NUL).
    pub start: String,
}

impl ContinueToken {
    /// The token for the page after `last_key` (relative to the prefix) of snapshot `revision`.
    pub fn after(revision: u64, last_relative_key: &str) -> Self {
        Self {
            revision: Some(revision),
            start: format!("{last_relative_key}\u{0}"),
        }
    }

    /// The same position with `rv` -1.
    pub fn inconsistent(&self) -> Self {
        Self {
            revision: None,
            start: self.start.clone(),
        }
    }

    pub fn encode(&self) -> String {
        let wire = Wire {
            v: TOKEN_VERSION.into(),
            rv: self
                .revision
                .and_then(|r| i64::try_from(r).ok())
                .unwrap_or(-1),
            start: self.start.clone(),
        };
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(&wire).unwrap_or_default())
    }

    /// Decodes a token, with the error text of kube-apiserver's "continue key is not valid".
    pub fn decode(token: &str) -> Result<Self, String> {
        let raw = URL_SAFE_NO_PAD
            .decode(token.trim_end_matches('='))
            .map_err(|e| format!("continue key is not valid: {e}"))?;
        let wire: Wire =
            serde_json::from_slice(&raw).map_err(|e| format!("continue key is not valid: {e}"))?;
        if wire.v != TOKEN_VERSION {
            return Err(format!(
                "continue key is not valid: server does not recognize this encoded key version {:?}",
                wire.v
            ));
        }
        let revision = match wire.rv {
            -1 => None,
            rv if rv > 0 => Some(rv as u64),
            _ => {
                return Err(
                    "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"
                        .into(),
                );
            }
        };
        // Tokens minted by the watch cache carry a leading "/" (recording 05); both continue
        // at the same key.
        let start = wire
            .start
            .strip_prefix('/')
            .unwrap_or(&wire.start)
            .to_string();
        if start.split('/').any(|segment| segment == "..") {
            return Err("continue key is not valid: key must not traverse the prefix".into());
        }
        Ok(Self { revision, start })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_exactly_like_kube_apiserver() {
        // Recording 04: page 2's token.
        let token = ContinueToken::after(308, "demo/cm2");
        assert_eq!(
            token.encode(),
            "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MzA4LCJzdGFydCI6ImRlbW8vY20yXHUwMDAwIn0"
        );
        // Recording 05: the inconsistent token of the 410.
        let expired = ContinueToken::after(350, "default/openshift-service-ca.crt");
        assert_eq!(
            expired.inconsistent().encode(),
            "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6LTEsInN0YXJ0IjoiZGVmYXVsdC9vcGVuc2hpZnQtc2VydmljZS1jYS5jcnRcdTAwMDAifQ"
        );
    }

    #[test]
    fn decodes_etcd_and_watch_cache_tokens() {
        let etcd = ContinueToken::decode(
            "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6NjIzLCJzdGFydCI6Inctd2Fyblx1MDAwMCJ9",
        )
        .unwrap();
        assert_eq!(etcd.revision, Some(623));
        assert_eq!(etcd.start, "w-warn\u{0}");
        let cache = ContinueToken::decode(
            "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MzUwLCJzdGFydCI6Ii9kZW1vL2NtMlx1MDAwMCJ9",
        )
        .unwrap();
        assert_eq!(cache.start, "demo/cm2\u{0}");
    }

    #[test]
    fn rejects_garbage() {
        assert!(ContinueToken::decode("not a token!").is_err());
        let zero = URL_SAFE_NO_PAD.encode(br#"{"v":"meta.k8s.io/v1","rv":0,"start":"a"}"#);
        assert!(ContinueToken::decode(&zero).is_err());
        let other = URL_SAFE_NO_PAD.encode(br#"{"v":"v9","rv":3,"start":"a"}"#);
        assert!(ContinueToken::decode(&other).is_err());
    }
}
