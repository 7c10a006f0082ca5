//! What a request asks to do, in the terms a SubjectAccessReview uses: kube-apiserver's
//! RequestInfo resolver (`k8s.io/apiserver/pkg/endpoints/request`), reimplemented.
//!
//! `/apis/<group>/<version>/...` and `/api/<version>/...` with at least one segment after the
//! version are resource requests; everything else (`/apis`, `/apis/<group>/<version>`,
//! `/healthz`, `/openapi/v2`, ...) is a non-resource request whose verb is the lower-cased method.

use http::Method;

/// The resource part of a request, as a SubjectAccessReview's `resourceAttributes`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResourceAttributes {
    /// The namespace; empty for cluster-scoped resources and requests across all namespaces.
    pub namespace: String,
    /// The API group; empty for the core group.
    pub group: String,
    /// The API version, e.g. `v1`.
    pub version: String,
    /// The plural resource name, e.g. `storageversionmigrations`.
    pub resource: String,
    /// The subresource (`status`); empty for the object itself.
    pub subresource: String,
    /// The object's name; empty for requests to a collection (list, watch, create).
    pub name: String,
}

/// Everything authorization looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestAttributes {
    /// get, list, watch, create, update, patch, delete, deletecollection for resources; the
    /// lower-cased HTTP method for non-resource paths.
    pub verb: String,
    /// The request path (without the query).
    pub path: String,
    /// `None` for a non-resource request.
    pub resource: Option<ResourceAttributes>,
}

/// Namespace subresources that are not resources of their own (`/namespaces/x/status`).
const NAMESPACE_SUBRESOURCES: [&str; 2] = ["status", "finalize"];

impl RequestAttributes {
    /// The request's attributes as the outermost layer resolved them once
    /// (`server::request_info::resolve`), or resolved now where that layer is not installed
    /// (a layer tested on its own).
    pub fn of<B>(request: &http::Request<B>) -> Self {
        match request.extensions().get::<RequestAttributes>() {
            Some(attributes) => attributes.clone(),
            None => Self::from_request(
                request.method(),
                request.uri().path(),
                request.uri().query(),
            ),
        }
    }

    /// Resolve the attributes of a request from its method, path and query string.
    pub fn from_request(method: &Method, path: &str, query: Option<&str>) -> Self {
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        match resource_request(method, &segments, query) {
            Some((verb, attributes)) => RequestAttributes {
                verb: verb.to_string(),
                path: path.to_string(),
                resource: Some(attributes),
            },
            None => RequestAttributes {
                verb: method.as_str().to_ascii_lowercase(),
                path: path.to_string(),
                resource: None,
            },
        }
    }
}

/// The verb and resource attributes of a resource request (its path's `segments`); `None`
/// for a non-resource request.
fn resource_request(
    method: &Method,
    segments: &[&str],
    query: Option<&str>,
) -> Option<(&'static str, ResourceAttributes)> {
    // /api/<version>/<resource>... or /apis/<group>/<version>/<resource>...
    let (group, rest) = match segments {
        ["api", rest @ ..] if rest.len() >= 2 => ("", rest),
        ["apis", group, rest @ ..] if rest.len() >= 2 => (*group, rest),
        _ => return None,
    };
    let (version, parts) = (rest[0], &rest[1..]);
    let (verb, parts) = verb_of(method, parts)?;
    let (namespace, parts) = namespace_of(parts);
    let mut attributes = ResourceAttributes {
        namespace: namespace.to_string(),
        group: group.to_string(),
        version: version.to_string(),
        resource: parts.first().copied().unwrap_or_default().to_string(),
        name: parts.get(1).copied().unwrap_or_default().to_string(),
        subresource: parts.get(2).copied().unwrap_or_default().to_string(),
    };
    let verb = collection_verb(verb, &mut attributes, query);
    Some((verb, attributes))
}

/// The verb of a resource request, and the path parts after the version that name what it
/// acts on: the deprecated `/watch/` prefix names the verb itself, otherwise the method does.
/// `None`: `/watch` alone is no resource request.
fn verb_of<'a, 'b>(method: &Method, parts: &'a [&'b str]) -> Option<(&'static str, &'a [&'b str])> {
    let verb = match parts {
        ["watch", tail @ ..] if !tail.is_empty() => return Some(("watch", tail)),
        ["watch"] => return None,
        _ => match *method {
            Method::POST => "create",
            Method::GET | Method::HEAD => "get",
            Method::PUT => "update",
            Method::PATCH => "patch",
            Method::DELETE => "delete",
            _ => "",
        },
    };
    Some((verb, parts))
}

/// The namespace the path parts name, and the parts that name the resource:
/// `/namespaces/<ns>/<resource>...` is a namespaced resource; `/namespaces/<ns>` and its own
/// subresources are the namespace object itself.
fn namespace_of<'a, 'b>(parts: &'a [&'b str]) -> (&'b str, &'a [&'b str]) {
    match parts {
        ["namespaces", ns, tail @ ..]
            if !tail.is_empty() && !NAMESPACE_SUBRESOURCES.contains(&tail[0]) =>
        {
            (*ns, tail)
        }
        ["namespaces", ns, ..] => (*ns, parts),
        _ => ("", parts),
    }
}

/// The verb of a request to a collection (no name in the path): a get lists, or watches with
/// `?watch`; a delete deletes the collection. A list or watch of one object by
/// `metadata.name` is authorized as that object, so its name goes into `attributes`.
fn collection_verb(
    verb: &'static str,
    attributes: &mut ResourceAttributes,
    query: Option<&str>,
) -> &'static str {
    let params = QueryParams::parse(query.unwrap_or_default());
    let mut verb = verb;
    if attributes.name.is_empty() && verb == "get" {
        verb = if params.watch() { "watch" } else { "list" };
    }
    if attributes.name.is_empty()
        && (verb == "list" || verb == "watch")
        && let Some(name) = params.field_selector_name()
    {
        attributes.name = name;
    }
    if attributes.name.is_empty() && verb == "delete" {
        verb = "deletecollection";
    }
    verb
}

/// The few query parameters the resolver reads.
struct QueryParams {
    pairs: Vec<(String, String)>,
}

impl QueryParams {
    fn parse(query: &str) -> Self {
        let pairs = query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|pair| {
                let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                (percent_decode(key), percent_decode(value))
            })
            .collect();
        QueryParams { pairs }
    }

    fn first(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// `watch` as metav1 converts a bool query parameter: present and not `0`/`false` is true.
    fn watch(&self) -> bool {
        self.first("watch")
            .is_some_and(|v| v != "0" && !v.eq_ignore_ascii_case("false"))
    }

    /// The name a field selector requires exactly (`metadata.name=x` or `metadata.name==x`,
    /// possibly among other terms), when it is a valid path segment.
    fn field_selector_name(&self) -> Option<String> {
        let selector = self.first("fieldSelector")?;
        selector.split(',').find_map(|term| {
            let value = term
                .trim()
                .strip_prefix("metadata.name")?
                .trim_start()
                .strip_prefix('=')?;
            let value = value.strip_prefix('=').unwrap_or(value).trim();
            let valid = !value.is_empty()
                && value != "."
                && value != ".."
                && !value.contains('/')
                && !value.contains('%');
            valid.then(|| value.to_string())
        })
    }
}

/// `application/x-www-form-urlencoded` decoding: `+` is a space, `%XX` a byte; malformed escapes
/// stay as they are.
fn percent_decode(input: &str) -> String {
    let bytes = input.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                match std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .and_then(|hex| u8::from_str_radix(hex, 16).ok())
                {
                    Some(byte) => {
                        out.push(byte);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            other => out.push(other),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(method: Method, target: &str) -> RequestAttributes {
        let (path, query) = match target.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (target, None),
        };
        RequestAttributes::from_request(&method, path, query)
    }

    fn resource(group: &str, resource: &str, sub: &str, name: &str) -> ResourceAttributes {
        ResourceAttributes {
            namespace: String::new(),
            group: group.into(),
            version: "v1".into(),
            resource: resource.into(),
            subresource: sub.into(),
            name: name.into(),
        }
    }

    const G: &str = "storagemigration.k8s.io";

    #[test]
    fn resource_verbs_follow_method_name_and_query() {
        let cases = [
            (
                Method::GET,
                "/apis/storagemigration.k8s.io/v1/storageversionmigrations",
                "list",
                "",
            ),
            (
                Method::GET,
                "/apis/storagemigration.k8s.io/v1/storageversionmigrations?watch=true",
                "watch",
                "",
            ),
            (
                Method::GET,
                "/apis/storagemigration.k8s.io/v1/storageversionmigrations?watch=1&resourceVersion=5",
                "watch",
                "",
            ),
            (
                Method::GET,
                "/apis/storagemigration.k8s.io/v1/storageversionmigrations?watch=false",
                "list",
                "",
            ),
            (
                Method::GET,
                "/apis/storagemigration.k8s.io/v1/storageversionmigrations?watch",
                "watch",
                "",
            ),
            (
                Method::HEAD,
                "/apis/storagemigration.k8s.io/v1/storageversionmigrations/m1",
                "get",
                "m1",
            ),
            (
                Method::GET,
                "/apis/storagemigration.k8s.io/v1/storageversionmigrations/m1",
                "get",
                "m1",
            ),
            (
                Method::POST,
                "/apis/storagemigration.k8s.io/v1/storageversionmigrations",
                "create",
                "",
            ),
            (
                Method::PUT,
                "/apis/storagemigration.k8s.io/v1/storageversionmigrations/m1",
                "update",
                "m1",
            ),
            (
                Method::PATCH,
                "/apis/storagemigration.k8s.io/v1/storageversionmigrations/m1",
                "patch",
                "m1",
            ),
            (
                Method::DELETE,
                "/apis/storagemigration.k8s.io/v1/storageversionmigrations/m1",
                "delete",
                "m1",
            ),
            (
                Method::DELETE,
                "/apis/storagemigration.k8s.io/v1/storageversionmigrations",
                "deletecollection",
                "",
            ),
            (
                Method::GET,
                "/apis/storagemigration.k8s.io/v1/watch/storageversionmigrations",
                "watch",
                "",
            ),
            (
                Method::GET,
                "/apis/storagemigration.k8s.io/v1/watch/storageversionmigrations/m1",
                "watch",
                "m1",
            ),
        ];
        for (method, target, verb, name) in cases {
            let attrs = resolve(method.clone(), target);
            assert_eq!(attrs.verb, verb, "{method} {target}");
            assert_eq!(
                attrs.resource,
                Some(resource(G, "storageversionmigrations", "", name)),
                "{method} {target}"
            );
        }
    }

    #[test]
    fn subresources_and_field_selected_names() {
        let status = resolve(
            Method::PUT,
            "/apis/storagemigration.k8s.io/v1/storageversionmigrations/m1/status",
        );
        assert_eq!(status.verb, "update");
        assert_eq!(
            status.resource,
            Some(resource(G, "storageversionmigrations", "status", "m1"))
        );

        let by_name = resolve(
            Method::GET,
            "/apis/storagemigration.k8s.io/v1/storagestates?fieldSelector=metadata.name%3Dpods&watch=1",
        );
        assert_eq!(by_name.verb, "watch");
        assert_eq!(by_name.resource.expect("resource").name, "pods");

        let other_field = resolve(
            Method::GET,
            "/apis/storagemigration.k8s.io/v1/storagestates?fieldSelector=spec.x%3Dy",
        );
        assert_eq!(other_field.verb, "list");
        assert_eq!(other_field.resource.expect("resource").name, "");
    }

    #[test]
    fn namespaces_core_group_and_the_namespace_object() {
        let pods = resolve(Method::GET, "/api/v1/namespaces/demo/pods/p1/log");
        let attrs = pods.resource.expect("resource");
        assert_eq!(
            (
                attrs.namespace.as_str(),
                attrs.group.as_str(),
                attrs.resource.as_str()
            ),
            ("demo", "", "pods")
        );
        assert_eq!(
            (attrs.name.as_str(), attrs.subresource.as_str()),
            ("p1", "log")
        );

        let ns = resolve(Method::PUT, "/api/v1/namespaces/demo/finalize");
        let attrs = ns.resource.expect("resource");
        assert_eq!(attrs.resource, "namespaces");
        assert_eq!(attrs.name, "demo");
        assert_eq!(attrs.subresource, "finalize");
        assert_eq!(attrs.namespace, "demo");
    }

    #[test]
    fn discovery_health_and_openapi_are_non_resource() {
        for path in [
            "/apis",
            "/apis/storagemigration.k8s.io",
            "/apis/storagemigration.k8s.io/v1",
            "/api",
            "/api/v1",
            "/healthz",
            "/openapi/v3/apis/storagemigration.k8s.io/v1",
            "/apis/storagemigration.k8s.io/v1/watch",
        ] {
            let attrs = resolve(Method::GET, path);
            assert_eq!(attrs.resource, None, "{path}");
            assert_eq!(attrs.verb, "get");
            assert_eq!(attrs.path, path);
        }
        assert_eq!(resolve(Method::POST, "/version").verb, "post");
    }

    #[test]
    fn percent_decoding_tolerates_malformed_escapes() {
        assert_eq!(percent_decode("a%3Db+c"), "a=b c");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz"), "%zz");
        assert_eq!(percent_decode("%4"), "%4");
    }
}
