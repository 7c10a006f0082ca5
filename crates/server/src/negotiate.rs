//! Content negotiation: which encoding (JSON compact/pretty, YAML, protobuf) and which form
//! (the object, a Table, PartialObjectMetadata, aggregated discovery) a request's `Accept`
//! asks for, and how its body is to be read (`Content-Type`), as kube-apiserver's
//! `NegotiateOutputMediaType` decides (tests/fixtures/recordings/20*).

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, header};
use serde_json::Value;

use svm_registry::ApiError;
use svm_registry::protobuf::{self, ProtobufError, ProtobufKind, meta};
use svm_registry::rest::PatchType;

pub(crate) const JSON: &str = "application/json";
pub(crate) const YAML: &str = "application/yaml";
pub(crate) const PROTOBUF: &str = protobuf::MEDIA_TYPE;
/// The exact Content-Type of an aggregated discovery response (recording 02a).
pub(crate) const DISCOVERY_V2: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// How a response body is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Encoding {
    /// Compact JSON ending in a newline, or 2-space indented JSON without one (curl, wget,
    /// browsers and `?pretty=true`, recording 00).
    Json {
        pretty: bool,
    },
    Yaml,
    /// `application/vnd.kubernetes.protobuf`: magic, envelope, message.
    Protobuf,
}

/// The `meta.k8s.io` version a Table or PartialObjectMetadata was asked in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MetaVersion {
    V1,
    V1beta1,
}

impl MetaVersion {
    pub(crate) fn api_version(self) -> &'static str {
        match self {
            MetaVersion::V1 => "meta.k8s.io/v1",
            MetaVersion::V1beta1 => "meta.k8s.io/v1beta1",
        }
    }
}

/// The form of the response an `Accept` clause asks for (its `as`/`g`/`v` parameters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// The resource itself (no `as` parameter).
    Object,
    Table(MetaVersion),
    PartialObjectMetadata(MetaVersion),
    PartialObjectMetadataList(MetaVersion),
    /// `apidiscovery.k8s.io/v2` APIGroupDiscoveryList.
    DiscoveryV2,
}

/// Which alternative forms an endpoint can produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Endpoint {
    /// get / list / watch of a resource: Table and PartialObjectMetadata(List).
    Read,
    /// The answer of a create, update or patch: PartialObjectMetadata(List) (client-go's
    /// metadata client patches so, recording 20d steps 3 and 8).
    Write,
    /// `/apis`: aggregated discovery.
    Apis,
    /// Everything else: only the plain form.
    Plain,
}

/// Whether the plain form of what an endpoint answers has protobuf messages (a kind with
/// them, a Status); the `meta.k8s.io` forms always have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protobuf {
    Spoken,
    NotSpoken,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Negotiated {
    pub encoding: Encoding,
    pub target: Target,
}

impl Negotiated {
    /// Serialize `value` in the negotiated encoding: the body and its Content-Type. `kind` is
    /// the messages of the resource's kind, for a protobuf answer of the object form.
    pub(crate) fn encode(
        &self,
        value: &Value,
        kind: Option<&dyn ProtobufKind>,
    ) -> Result<(Bytes, &'static str), ApiError> {
        match self.encoding {
            Encoding::Protobuf => {
                let body = protobuf_body(value, kind).map_err(|err| {
                    ApiError::Internal(format!("encoding the answer as protobuf: {err}"))
                })?;
                Ok((Bytes::from(body), PROTOBUF))
            }
            encoding => Ok(encode(encoding, value)),
        }
    }
}

/// A whole protobuf body of a JSON value: a `meta.k8s.io` form, a Status, or an object or list
/// of `kind`, by the value's own apiVersion and kind.
pub(crate) fn protobuf_body(
    value: &Value,
    kind: Option<&dyn ProtobufKind>,
) -> Result<Vec<u8>, ProtobufError> {
    let field = |name: &str| value.get(name).and_then(Value::as_str).unwrap_or_default();
    let (api_version, kind_name) = (field("apiVersion"), field("kind"));
    if (api_version, kind_name) == ("v1", "Status") {
        return meta::status_body(value);
    }
    let raw = match (meta::meta_message(value), kind) {
        (Some(message), _) => message?,
        (None, Some(kind)) => kind.encode(protobuf::version_of(api_version), value)?,
        (None, None) => {
            return Err(ProtobufError::NotMarshalable {
                api_version: api_version.to_string(),
                kind: kind_name.to_string(),
            });
        }
    };
    Ok(protobuf::encode_body(api_version, kind_name, raw))
}

/// Serialize `value` as JSON or YAML: compact JSON gets Go's trailing newline; pretty JSON none.
/// (Protobuf needs the kind's messages: [`Negotiated::encode`].)
pub(crate) fn encode(encoding: Encoding, value: &Value) -> (Bytes, &'static str) {
    match encoding {
        Encoding::Json { pretty: false } => {
            let mut body = serde_json::to_vec(value).unwrap_or_default();
            body.push(b'\n');
            (Bytes::from(body), JSON)
        }
        Encoding::Json { pretty: true } => (
            Bytes::from(serde_json::to_vec_pretty(value).unwrap_or_default()),
            JSON,
        ),
        Encoding::Yaml => (
            Bytes::from(serde_norway::to_string(value).unwrap_or_default()),
            YAML,
        ),
        Encoding::Protobuf => match protobuf_body(value, None) {
            Ok(body) => (Bytes::from(body), PROTOBUF),
            Err(_) => encode(Encoding::Json { pretty: false }, value),
        },
    }
}

/// Negotiate the response of a request from its headers and query. `pretty` is the `pretty`
/// query parameter, if given; `protobuf` whether the plain form has protobuf messages.
pub(crate) fn negotiate(
    headers: &HeaderMap,
    pretty: Option<&str>,
    endpoint: Endpoint,
    protobuf: Protobuf,
) -> Result<Negotiated, ApiError> {
    let pretty = wants_pretty(headers, pretty);
    let accept = header_str(headers, header::ACCEPT).unwrap_or("");
    if accept.trim().is_empty() {
        return Ok(Negotiated {
            encoding: Encoding::Json { pretty },
            target: Target::Object,
        });
    }
    for clause in parse_accept(accept) {
        let encoding = match clause.media_type.as_str() {
            "application/json" | "*/*" | "application/*" => Encoding::Json { pretty },
            "application/yaml" => Encoding::Yaml,
            PROTOBUF => Encoding::Protobuf,
            _ => continue,
        };
        let Some(target) = clause_target(&clause, endpoint) else {
            continue;
        };
        if encoding == Encoding::Protobuf && !speaks_protobuf(target, protobuf) {
            continue;
        }
        return Ok(Negotiated { encoding, target });
    }
    // A read of any kind can be answered in protobuf (its PartialObjectMetadata forms), so
    // kube-apiserver names protobuf there even for a custom resource (recording 20g, step 10).
    let served = if matches!(endpoint, Endpoint::Read | Endpoint::Write) {
        Protobuf::Spoken
    } else {
        protobuf
    };
    Err(ApiError::NotAcceptable(format!(
        "only the following media types are accepted: {}",
        media_types(served)
    )))
}

/// The media types an endpoint serves, in kube-apiserver's order.
fn media_types(protobuf: Protobuf) -> &'static str {
    match protobuf {
        Protobuf::Spoken => {
            "application/json, application/yaml, application/vnd.kubernetes.protobuf"
        }
        Protobuf::NotSpoken => "application/json, application/yaml",
    }
}

/// Which forms have protobuf messages: Table and aggregated discovery are JSON (and YAML)
/// only, as upstream's `AllowsConversion`; the PartialObjectMetadata forms always have.
fn speaks_protobuf(target: Target, protobuf: Protobuf) -> bool {
    match target {
        Target::Object => protobuf == Protobuf::Spoken,
        Target::PartialObjectMetadata(_) | Target::PartialObjectMetadataList(_) => true,
        Target::Table(_) | Target::DiscoveryV2 => false,
    }
}

/// The form a clause asks for, if the endpoint can produce it.
fn clause_target(clause: &AcceptClause, endpoint: Endpoint) -> Option<Target> {
    let Some(as_kind) = clause.param("as") else {
        return Some(Target::Object);
    };
    let group = clause.param("g").unwrap_or("");
    let version = clause.param("v").unwrap_or("");
    match (endpoint, group) {
        (Endpoint::Read, "meta.k8s.io") => {
            let version = match version {
                "v1" => MetaVersion::V1,
                "v1beta1" => MetaVersion::V1beta1,
                _ => return None,
            };
            match as_kind {
                "Table" => Some(Target::Table(version)),
                "PartialObjectMetadata" => Some(Target::PartialObjectMetadata(version)),
                "PartialObjectMetadataList" => Some(Target::PartialObjectMetadataList(version)),
                _ => None,
            }
        }
        (Endpoint::Write, "meta.k8s.io") => {
            let version = match version {
                "v1" => MetaVersion::V1,
                "v1beta1" => MetaVersion::V1beta1,
                _ => return None,
            };
            match as_kind {
                "PartialObjectMetadata" => Some(Target::PartialObjectMetadata(version)),
                "PartialObjectMetadataList" => Some(Target::PartialObjectMetadataList(version)),
                _ => None,
            }
        }
        // Only v2 is served; a v2beta1 clause falls through to the next one (recording 02a).
        (Endpoint::Apis, "apidiscovery.k8s.io")
            if version == "v2" && as_kind == "APIGroupDiscoveryList" =>
        {
            Some(Target::DiscoveryV2)
        }
        _ => None,
    }
}

/// kube-apiserver pretty-prints for `?pretty=<true>` and for curl, wget and browsers, unless
/// `?pretty=<false>` says otherwise.
fn wants_pretty(headers: &HeaderMap, pretty: Option<&str>) -> bool {
    if let Some(value) = pretty.and_then(parse_go_bool) {
        return value;
    }
    let agent = header_str(headers, header::USER_AGENT).unwrap_or("");
    agent.starts_with("curl") || agent.starts_with("Wget") || agent.starts_with("Mozilla/5.0")
}

/// Go's `strconv.ParseBool`.
pub(crate) fn parse_go_bool(value: &str) -> Option<bool> {
    match value {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

pub(crate) fn header_str(headers: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    headers
        .get(name)
        .and_then(|v: &HeaderValue| v.to_str().ok())
}

#[derive(Debug)]
struct AcceptClause {
    media_type: String,
    params: Vec<(String, String)>,
    quality: f32,
}

impl AcceptClause {
    fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The clauses of an `Accept` header, most preferred first: by `q`, then a concrete type before
/// `type/*` before `*/*`, then header order (goautoneg's order, which kube-apiserver uses).
fn parse_accept(accept: &str) -> Vec<AcceptClause> {
    let mut clauses: Vec<AcceptClause> = accept
        .split(',')
        .filter_map(|raw| {
            let (media_type, params) = parse_media_type(raw)?;
            let quality = params
                .iter()
                .find(|(k, _)| k == "q")
                .and_then(|(_, v)| v.parse::<f32>().ok())
                .unwrap_or(1.0);
            Some(AcceptClause {
                media_type,
                params,
                quality,
            })
        })
        .filter(|c| c.quality > 0.0)
        .collect();
    clauses.sort_by(|a, b| {
        b.quality
            .total_cmp(&a.quality)
            .then_with(|| wildcards(&a.media_type).cmp(&wildcards(&b.media_type)))
    });
    clauses
}

/// 0 for `type/subtype`, 1 for `type/*`, 2 for `*/*`.
fn wildcards(media_type: &str) -> u8 {
    match media_type.split_once('/') {
        Some(("*", _)) => 2,
        Some((_, "*")) => 1,
        _ => 0,
    }
}

/// `type/subtype; k=v; ...` -> (lowercased type/subtype, params with lowercased keys).
fn parse_media_type(raw: &str) -> Option<(String, Vec<(String, String)>)> {
    let mut parts = raw.split(';');
    let media_type = parts.next()?.trim().to_ascii_lowercase();
    if media_type.is_empty() {
        return None;
    }
    let params = parts
        .filter_map(|p| {
            let (k, v) = p.split_once('=')?;
            Some((
                k.trim().to_ascii_lowercase(),
                v.trim().trim_matches('"').to_string(),
            ))
        })
        .collect();
    Some((media_type, params))
}

/// The format of a create/update body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyFormat {
    Json,
    Yaml,
    Protobuf,
}

/// The body format from `Content-Type` (parameters such as `charset` ignored); anything else,
/// including no Content-Type or protobuf for a kind without messages, is a 415 as in
/// kube-apiserver.
pub(crate) fn body_format(headers: &HeaderMap, protobuf: Protobuf) -> Result<BodyFormat, ApiError> {
    let content_type = content_media_type(headers);
    match content_type.as_deref() {
        Some("application/json") => Ok(BodyFormat::Json),
        Some("application/yaml") => Ok(BodyFormat::Yaml),
        Some(PROTOBUF) if protobuf == Protobuf::Spoken => Ok(BodyFormat::Protobuf),
        _ => Err(ApiError::UnsupportedMediaType(format!(
            "the body of the request was in an unknown format - accepted media types include: {}",
            media_types(protobuf)
        ))),
    }
}

/// The patch type from `Content-Type` (recording 09d for the 415 text; a protobuf body on a
/// kind with protobuf messages gets go-restful's bare text, recording 20g step 15).
pub(crate) fn patch_type(headers: &HeaderMap, protobuf: Protobuf) -> Result<PatchType, ApiError> {
    match content_media_type(headers).as_deref() {
        Some(PROTOBUF) if protobuf == Protobuf::Spoken => Err(ApiError::RouteUnsupportedMediaType),
        Some("application/json-patch+json") => Ok(PatchType::Json),
        Some("application/merge-patch+json") => Ok(PatchType::Merge),
        Some("application/strategic-merge-patch+json") => Ok(PatchType::StrategicMerge),
        Some("application/apply-patch+yaml") => Ok(PatchType::Apply),
        _ => Err(ApiError::UnsupportedMediaType(
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml".into(),
        )),
    }
}

fn content_media_type(headers: &HeaderMap) -> Option<String> {
    let raw = header_str(headers, header::CONTENT_TYPE)?;
    parse_media_type(raw).map(|(media_type, _)| media_type)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(*k, HeaderValue::from_static(v));
        }
        map
    }

    fn neg(accept: &'static str, endpoint: Endpoint) -> Result<Negotiated, ApiError> {
        negotiate(
            &headers(&[("accept", accept)]),
            None,
            endpoint,
            Protobuf::NotSpoken,
        )
    }

    fn neg_pb(accept: &'static str, endpoint: Endpoint) -> Result<Negotiated, ApiError> {
        negotiate(
            &headers(&[("accept", accept)]),
            None,
            endpoint,
            Protobuf::Spoken,
        )
    }

    #[test]
    fn client_go_gets_protobuf_where_the_kind_has_messages() {
        // What client-go's typed clients send for a built-in kind.
        let typed = "application/vnd.kubernetes.protobuf, */*";
        let n = neg_pb(typed, Endpoint::Read).expect("ok");
        assert_eq!((n.encoding, n.target), (Encoding::Protobuf, Target::Object));
        // A kind without messages (a custom resource, StorageState): the fallback, JSON.
        let n = neg(typed, Endpoint::Read).expect("ok");
        assert_eq!(n.encoding, Encoding::Json { pretty: false });
        // A concrete type before a wildcard, whatever the header order.
        let n = neg_pb("*/*, application/vnd.kubernetes.protobuf", Endpoint::Plain).expect("ok");
        assert_eq!(n.encoding, Encoding::Protobuf);
        // Quality first.
        let n = neg_pb(
            "application/vnd.kubernetes.protobuf;q=0.5, application/json",
            Endpoint::Plain,
        )
        .expect("ok");
        assert_eq!(n.encoding, Encoding::Json { pretty: false });
    }

    #[test]
    fn metadata_forms_speak_protobuf_and_tables_never() {
        // client-go's metadata client, on any kind.
        let metadata = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
        for n in [
            neg(metadata, Endpoint::Read),
            neg_pb(metadata, Endpoint::Read),
        ] {
            let n = n.expect("ok");
            assert_eq!(
                (n.encoding, n.target),
                (
                    Encoding::Protobuf,
                    Target::PartialObjectMetadataList(MetaVersion::V1)
                )
            );
        }
        let table = "application/vnd.kubernetes.protobuf;as=Table;g=meta.k8s.io;v=v1, application/json;as=Table;g=meta.k8s.io;v=v1";
        let n = neg_pb(table, Endpoint::Read).expect("ok");
        assert_eq!(
            (n.encoding, n.target),
            (
                Encoding::Json { pretty: false },
                Target::Table(MetaVersion::V1)
            )
        );
        let only = neg_pb(
            "application/vnd.kubernetes.protobuf;as=Table;g=meta.k8s.io;v=v1",
            Endpoint::Read,
        );
        let err = only.unwrap_err();
        assert_eq!(err.code(), 406);
        assert!(
            err.to_string()
                .contains("application/vnd.kubernetes.protobuf")
        );
    }

    #[test]
    fn plain_json_is_compact_unless_curl_or_pretty() {
        let compact = neg("*/*", Endpoint::Plain).expect("ok");
        assert_eq!(compact.encoding, Encoding::Json { pretty: false });
        let curl = negotiate(
            &headers(&[("user-agent", "curl/7.88.1")]),
            None,
            Endpoint::Plain,
            Protobuf::NotSpoken,
        )
        .expect("ok");
        assert_eq!(curl.encoding, Encoding::Json { pretty: true });
        let forced_off = negotiate(
            &headers(&[("user-agent", "curl/7.88.1")]),
            Some("false"),
            Endpoint::Plain,
            Protobuf::NotSpoken,
        )
        .expect("ok");
        assert_eq!(forced_off.encoding, Encoding::Json { pretty: false });
        let param = negotiate(
            &HeaderMap::new(),
            Some("true"),
            Endpoint::Plain,
            Protobuf::NotSpoken,
        )
        .expect("ok");
        assert_eq!(param.encoding, Encoding::Json { pretty: true });
    }

    #[test]
    fn compact_json_ends_with_newline_and_pretty_does_not() {
        let value = serde_json::json!({"kind": "APIVersions", "versions": ["v1"]});
        let (compact, _) = encode(Encoding::Json { pretty: false }, &value);
        assert_eq!(
            &compact[..],
            b"{\"kind\":\"APIVersions\",\"versions\":[\"v1\"]}\n"
        );
        let (pretty, _) = encode(Encoding::Json { pretty: true }, &value);
        assert_eq!(
            std::str::from_utf8(&pretty).expect("utf8"),
            "{\n  \"kind\": \"APIVersions\",\n  \"versions\": [\n    \"v1\"\n  ]\n}"
        );
    }

    #[test]
    fn yaml_is_chosen_by_accept() {
        let n = neg("application/yaml", Endpoint::Read).expect("ok");
        assert_eq!(n.encoding, Encoding::Yaml);
        let (body, ct) = n
            .encode(&serde_json::json!({"a": 1}), None)
            .expect("encodes");
        assert_eq!(ct, YAML);
        assert_eq!(&body[..], b"a: 1\n");
    }

    #[test]
    fn protobuf_only_is_not_acceptable() {
        let err = neg("application/vnd.kubernetes.protobuf", Endpoint::Read).unwrap_err();
        assert_eq!(err.code(), 406);
        // A protobuf preference with a JSON fallback picks JSON.
        let n = neg(
            "application/vnd.kubernetes.protobuf,application/json",
            Endpoint::Read,
        )
        .expect("ok");
        assert_eq!(n.target, Target::Object);
    }

    #[test]
    fn table_and_metadata_forms_only_on_reads() {
        let table = neg(
            "application/json;as=Table;v=v1;g=meta.k8s.io",
            Endpoint::Read,
        )
        .expect("ok");
        assert_eq!(table.target, Target::Table(MetaVersion::V1));
        let beta = neg(
            "application/json;as=Table;v=v1beta1;g=meta.k8s.io, application/json",
            Endpoint::Read,
        )
        .expect("ok");
        assert_eq!(beta.target, Target::Table(MetaVersion::V1beta1));
        let pom = neg(
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
            Endpoint::Read,
        )
        .expect("ok");
        assert_eq!(
            pom.target,
            Target::PartialObjectMetadataList(MetaVersion::V1)
        );
        // On a write the Table clause is skipped: only a fallback clause can answer.
        let err = neg(
            "application/json;as=Table;v=v1;g=meta.k8s.io",
            Endpoint::Plain,
        )
        .unwrap_err();
        assert_eq!(err.code(), 406);
        let unknown = neg(
            "application/json;as=Table;v=v2;g=meta.k8s.io",
            Endpoint::Read,
        );
        assert_eq!(unknown.unwrap_err().code(), 406);
    }

    #[test]
    fn discovery_v2_only_on_apis_and_v2beta1_falls_back() {
        let v2 = neg(
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json",
            Endpoint::Apis,
        )
        .expect("ok");
        assert_eq!(v2.target, Target::DiscoveryV2);
        let beta = neg(
            "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json",
            Endpoint::Apis,
        )
        .expect("ok");
        assert_eq!(beta.target, Target::Object);
    }

    #[test]
    fn quality_orders_clauses() {
        let n = neg("application/json;q=0.5, application/yaml", Endpoint::Plain).expect("ok");
        assert_eq!(n.encoding, Encoding::Yaml);
    }

    #[test]
    fn body_and_patch_content_types() {
        let spoken = Protobuf::Spoken;
        assert_eq!(
            body_format(
                &headers(&[("content-type", "application/json; charset=utf-8")]),
                spoken
            )
            .ok(),
            Some(BodyFormat::Json)
        );
        assert_eq!(
            body_format(&headers(&[("content-type", "application/yaml")]), spoken).ok(),
            Some(BodyFormat::Yaml)
        );
        assert_eq!(
            body_format(&HeaderMap::new(), spoken).unwrap_err().code(),
            415
        );
        let protobuf = headers(&[("content-type", "application/vnd.kubernetes.protobuf")]);
        assert_eq!(
            body_format(&protobuf, spoken).ok(),
            Some(BodyFormat::Protobuf)
        );
        let refused = body_format(&protobuf, Protobuf::NotSpoken).unwrap_err();
        assert_eq!(refused.code(), 415);
        assert!(
            refused
                .to_string()
                .ends_with("application/json, application/yaml")
        );
        assert_eq!(
            patch_type(
                &headers(&[("content-type", "application/merge-patch+json")]),
                spoken
            )
            .ok(),
            Some(PatchType::Merge)
        );
        assert_eq!(
            patch_type(
                &headers(&[("content-type", "application/apply-patch+yaml")]),
                spoken
            )
            .ok(),
            Some(PatchType::Apply)
        );
        let err = patch_type(&headers(&[("content-type", "text/plain")]), spoken).unwrap_err();
        assert_eq!(err.code(), 415);
        assert!(err.to_string().contains("application/json-patch+json"));
    }
}
