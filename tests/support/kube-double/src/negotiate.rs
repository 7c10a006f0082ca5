//! Content negotiation: which representation an `Accept` header asks for and in which
//! encoding (JSON, or protobuf where kube-apiserver answers in it: recordings 20a-20h), and
//! which patch type a `Content-Type` names.

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

/// How an answer is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Json,
    /// `application/vnd.kubernetes.protobuf` (`crate::protobuf`).
    Protobuf,
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
    // goautoneg's order: by q, then a concrete type before `type/*` before `*/*`; otherwise
    // the client's order (a stable sort).
    ranges.sort_by(|a, b| {
        b.q.partial_cmp(&a.q)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then_with(|| wildcards(&a.essence).cmp(&wildcards(&b.essence)))
    });
    ranges
}

/// 0 for `type/subtype`, 1 for `type/*`, 2 for `*/*`.
fn wildcards(essence: &str) -> u8 {
    match essence.split_once('/') {
        Some(("*", _)) => 2,
        Some((_, "*")) => 1,
        _ => 0,
    }
}

/// The encoding a clause names, if the double writes it.
fn encoding(essence: &str) -> Option<Encoding> {
    match essence {
        "application/json" | "*/*" | "application/*" => Some(Encoding::Json),
        crate::protobuf::MEDIA_TYPE => Some(Encoding::Protobuf),
        _ => None,
    }
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
    negotiate_encoded(accept, discovery, false).map(|(output, _)| output)
}

/// The first representation in `accept` the double serves, and its encoding, or `None`
/// (406). `protobuf_objects`: the plain form (no `as=`) of what is asked has protobuf
/// messages here (a ConfigMap; kube-apiserver has them for every built-in kind, never for a
/// custom resource: recording 20g step 12). The `meta.k8s.io` metadata forms are written in
/// protobuf for every resource, custom ones included (20d); a Table and aggregated
/// discovery never (20g steps 3-6).
pub fn negotiate_encoded(
    accept: Option<&str>,
    discovery: bool,
    protobuf_objects: bool,
) -> Option<(Output, Encoding)> {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return Some((Output::Json, Encoding::Json));
    };
    for range in parse_accept(accept) {
        let Some(encoding) = encoding(&range.essence) else {
            continue;
        };
        let protobuf = encoding == Encoding::Protobuf;
        match range.param("as") {
            None if protobuf && !protobuf_objects => continue,
            None => return Some((Output::Json, encoding)),
            Some(kind) => {
                let group = range.param("g").unwrap_or("");
                let version = range.param("v").unwrap_or("");
                match (kind, group, version) {
                    ("APIGroupDiscoveryList", "apidiscovery.k8s.io", "v2")
                        if discovery && !protobuf =>
                    {
                        return Some((Output::AggregatedDiscovery, encoding));
                    }
                    ("PartialObjectMetadata", "meta.k8s.io", "v1" | "v1beta1") if !discovery => {
                        let version = version.to_string();
                        return Some((Output::PartialMetadata { version }, encoding));
                    }
                    ("PartialObjectMetadataList", "meta.k8s.io", "v1" | "v1beta1")
                        if !discovery =>
                    {
                        let version = version.to_string();
                        return Some((Output::PartialMetadataList { version }, encoding));
                    }
                    ("Table", "meta.k8s.io", "v1" | "v1beta1") if !discovery && !protobuf => {
                        return Some((Output::Table, encoding));
                    }
                    // Anything else is not served: try the next entry.
                    _ => continue,
                }
            }
        }
    }
    None
}

/// How an error is written for this `Accept` (`negotiation.DefaultEndpointRestrictions`: the
/// first clause without `as=` the double writes, protobuf for any resource, recordings 20g
/// steps 1, 10). `None`: no clause is acceptable, and kube-apiserver writes the Status as
/// indented JSON (`WriteRawJSON`: recordings 06 steps 5-6, 20g step 3).
pub fn error_encoding(accept: Option<&str>) -> Option<Encoding> {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return Some(Encoding::Json);
    };
    parse_accept(accept)
        .into_iter()
        .filter(|range| range.param("as").is_none())
        .find_map(|range| encoding(&range.essence))
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
    fn protobuf_where_kube_apiserver_answers_in_it() {
        let metadata = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
        let list = Output::PartialMetadataList {
            version: "v1".into(),
        };
        // The metadata forms: protobuf for any resource.
        for objects in [false, true] {
            assert_eq!(
                negotiate_encoded(Some(metadata), false, objects),
                Some((list.clone(), Encoding::Protobuf))
            );
        }
        // client-go's typed Accept: protobuf where the plain form has messages, else JSON.
        let typed = "application/vnd.kubernetes.protobuf, */*";
        assert_eq!(
            negotiate_encoded(Some(typed), false, true),
            Some((Output::Json, Encoding::Protobuf))
        );
        assert_eq!(
            negotiate_encoded(Some(typed), false, false),
            Some((Output::Json, Encoding::Json))
        );
        assert_eq!(
            negotiate_encoded(Some("application/vnd.kubernetes.protobuf"), false, false),
            None
        );
        // A concrete type before a wildcard; q first.
        assert_eq!(
            negotiate_encoded(Some("*/*,application/vnd.kubernetes.protobuf"), false, true),
            Some((Output::Json, Encoding::Protobuf))
        );
        assert_eq!(
            negotiate_encoded(
                Some("application/vnd.kubernetes.protobuf;q=0.5,application/json"),
                false,
                true
            ),
            Some((Output::Json, Encoding::Json))
        );
        // No protobuf Table: the next clause, or nothing.
        let table = "application/vnd.kubernetes.protobuf;as=Table;g=meta.k8s.io;v=v1";
        assert_eq!(negotiate_encoded(Some(table), false, true), None);
        assert_eq!(
            negotiate_encoded(Some(&format!("{table},application/json")), false, true),
            Some((Output::Json, Encoding::Json))
        );
        // Errors: the first clause without `as=`.
        assert_eq!(error_encoding(Some(typed)), Some(Encoding::Protobuf));
        assert_eq!(error_encoding(Some(metadata)), Some(Encoding::Json));
        assert_eq!(error_encoding(Some(table)), None);
        assert_eq!(error_encoding(None), Some(Encoding::Json));
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
