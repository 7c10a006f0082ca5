//! Content negotiation: which representation an `Accept` header asks for, and which patch type
//! a `Content-Type` names.

/// A representation the double can answer with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// Plain JSON of the object or list.
    Json,
    /// `as=PartialObjectMetadata;g=meta.k8s.io;v=<v>` (recording 06).
    PartialMetadata { version: String },
    /// `as=PartialObjectMetadataList;g=meta.k8s.io;v=<v>`.
    PartialMetadataList { version: String },
    /// `as=APIGroupDiscoveryList;g=apidiscovery.k8s.io;v=v2` (recordings 02a, 02b).
    AggregatedDiscovery,
    /// `as=Table;g=meta.k8s.io;v=v1` (recording 07): served by GET and LIST.
    Table,
}

#[derive(Debug)]
struct MediaRange<'a> {
    essence: String,
    params: Vec<(String, &'a str)>,
    q: f32,
}

fn parse_accept(header: &str) -> Vec<MediaRange<'_>> {
    let mut ranges: Vec<MediaRange<'_>> = header
        .split(',')
        .filter_map(|part| {
            let mut pieces = part.split(';');
            let essence = pieces.next()?.trim().to_ascii_lowercase();
            if essence.is_empty() {
                return None;
            }
            let mut params = Vec::new();
            let mut q = 1.0;
            for p in pieces {
                let Some((k, v)) = p.split_once('=') else {
                    continue;
                };
                let k = k.trim().to_ascii_lowercase();
                let v = v.trim().trim_matches('"');
                if k == "q" {
                    q = v.parse().unwrap_or(1.0);
                } else {
                    params.push((k, v));
                }
            }
            Some(MediaRange { essence, params, q })
        })
        .filter(|r| r.q > 0.0)
        .collect();
    // Stable: equal q keeps the client's order.
    ranges.sort_by(|a, b| b.q.partial_cmp(&a.q).unwrap_or(std::cmp::Ordering::Equal));
    ranges
}

impl MediaRange<'_> {
    fn param(&self, name: &str) -> Option<&str> {
        self.params.iter().find(|(k, _)| k == name).map(|(_, v)| *v)
    }
}

/// The first representation in `accept` the double serves, or `None` (406).
///
/// `discovery` allows the aggregated discovery form (only `/api` and `/apis` serve it; a
/// `v=v2beta1` request falls through to the next entry, recording 02a step 4).
pub fn negotiate(accept: Option<&str>, discovery: bool) -> Option<Output> {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return Some(Output::Json);
    };
    for range in parse_accept(accept) {
        let json_like = matches!(
            range.essence.as_str(),
            "application/json" | "*/*" | "application/*"
        );
        if !json_like {
            continue;
        }
        match range.param("as") {
            None => return Some(Output::Json),
            Some(kind) => {
                let group = range.param("g").unwrap_or("");
                let version = range.param("v").unwrap_or("");
                match (kind, group, version) {
                    ("APIGroupDiscoveryList", "apidiscovery.k8s.io", "v2") if discovery => {
                        return Some(Output::AggregatedDiscovery);
                    }
                    ("PartialObjectMetadata", "meta.k8s.io", "v1" | "v1beta1") if !discovery => {
                        return Some(Output::PartialMetadata {
                            version: version.to_string(),
                        });
                    }
                    ("PartialObjectMetadataList", "meta.k8s.io", "v1" | "v1beta1")
                        if !discovery =>
                    {
                        return Some(Output::PartialMetadataList {
                            version: version.to_string(),
                        });
                    }
                    ("Table", "meta.k8s.io", "v1" | "v1beta1") if !discovery => {
                        return Some(Output::Table);
                    }
                    // Anything else is not served: try the next entry.
                    _ => continue,
                }
            }
        }
    }
    None
}

/// The body formats of PATCH.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    Json,
    Merge,
    StrategicMerge,
    Apply,
}

pub fn patch_type(content_type: Option<&str>) -> Option<PatchType> {
    let essence = content_type?.split(';').next()?.trim().to_ascii_lowercase();
    match essence.as_str() {
        "application/json-patch+json" => Some(PatchType::Json),
        "application/merge-patch+json" => Some(PatchType::Merge),
        "application/strategic-merge-patch+json" => Some(PatchType::StrategicMerge),
        "application/apply-patch+yaml" | "application/apply-patch+cbor" => Some(PatchType::Apply),
        _ => None,
    }
}

/// Whether a create/update body's Content-Type is one the double decodes (JSON, or YAML which
/// JSON is a subset of).
pub fn is_json_body(content_type: Option<&str>) -> bool {
    let Some(ct) = content_type else {
        return true;
    };
    let essence = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    matches!(
        essence.as_str(),
        "application/json" | "application/yaml" | "*/*" | ""
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_what_clients_ask_for() {
        assert_eq!(negotiate(None, false), Some(Output::Json));
        assert_eq!(negotiate(Some("*/*"), false), Some(Output::Json));
        assert_eq!(
            negotiate(
                Some("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"),
                false
            ),
            Some(Output::PartialMetadataList {
                version: "v1".into()
            })
        );
        let v2 =
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
        assert_eq!(negotiate(Some(v2), true), Some(Output::AggregatedDiscovery));
        let v2beta1 = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(negotiate(Some(v2beta1), true), Some(Output::Json));
        assert_eq!(
            negotiate(
                Some("application/json;as=Table;g=meta.k8s.io;v=v1,application/json"),
                false
            ),
            Some(Output::Table)
        );
        assert_eq!(
            negotiate(
                Some("application/json;as=Table;g=meta.k8s.io;v=v1,application/json"),
                true
            ),
            Some(Output::Json)
        );
        assert_eq!(
            negotiate(Some("application/vnd.kubernetes.protobuf"), false),
            None
        );
        assert_eq!(
            negotiate(Some("application/json;as=Table;g=meta.k8s.io;v=v2"), false),
            None
        );
    }

    #[test]
    fn patch_types() {
        assert_eq!(
            patch_type(Some("application/merge-patch+json")),
            Some(PatchType::Merge)
        );
        assert_eq!(
            patch_type(Some("application/apply-patch+yaml; charset=utf-8")),
            Some(PatchType::Apply)
        );
        assert_eq!(patch_type(Some("text/plain")), None);
        assert_eq!(patch_type(None), None);
    }
}
