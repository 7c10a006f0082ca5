//! Facts about API versions every layer shares: how kube-apiserver orders a group's versions,
//! and the storage-version hash discovery publishes.

use std::cmp::Ordering;

/// A storage version's hash as discovery publishes it: base64 of the first 8 bytes of
/// sha256(`<group>/<version>/<kind>`) (recording 03b). Our own discovery and the trigger's
/// reading of CRDs and StorageVersions compute it the same way.
pub fn storage_version_hash(group: &str, version: &str, kind: &str) -> String {
    use base64::Engine as _;
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(format!("{group}/{version}/{kind}").as_bytes());
    base64::engine::general_purpose::STANDARD.encode(&digest[..8])
}

/// kube-apiserver's version priority: GA before beta before alpha, higher numbers first, then
/// non-Kubernetes-style versions alphabetically.
pub fn compare_kube_versions(a: &str, b: &str) -> Ordering {
    fn key(v: &str) -> (u8, i64, i64, String) {
        let parsed = v.strip_prefix('v').and_then(|rest| {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            let major = digits.parse::<i64>().ok()?;
            let tail = &rest[digits.len()..];
            if tail.is_empty() {
                return Some((0u8, major, 0i64));
            }
            for (stage, prefix) in [(1u8, "beta"), (2u8, "alpha")] {
                if let Some(n) = tail.strip_prefix(prefix) {
                    return n.parse::<i64>().ok().map(|minor| (stage, major, minor));
                }
            }
            None
        });
        match parsed {
            Some((stage, major, minor)) => (stage, -major, -minor, String::new()),
            None => (3, 0, 0, v.to_string()),
        }
    }
    key(a).cmp(&key(b))
}
