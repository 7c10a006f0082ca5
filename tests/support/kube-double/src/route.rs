//! Maps a request path onto what kube-apiserver serves there.

use std::collections::HashMap;
use std::sync::Arc;

use http::Method;

use crate::resources::{Catalog, GroupResource, ResourceDef};

/// A request for a resource, a collection or a subresource.
#[derive(Clone, Debug)]
pub struct ResourceRoute {
    pub def: Arc<ResourceDef>,
    pub version: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

impl ResourceRoute {
    /// The store key: `<namespace>/<name>` or `<name>`.
    pub fn key(&self) -> Option<String> {
        let name = self.name.as_deref()?;
        Some(object_key(self.namespace.as_deref(), name))
    }

    /// The key prefix of the collection: `<namespace>/` or everything.
    pub fn prefix(&self) -> String {
        match &self.namespace {
            Some(ns) if self.def.namespaced => format!("{ns}/"),
            _ => String::new(),
        }
    }

    pub fn group_version(&self) -> String {
        self.def.group_version(&self.version)
    }
}

pub fn object_key(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    }
}

#[derive(Clone, Debug)]
pub enum Route {
    /// `/api`: APIVersions or the core aggregated discovery.
    CoreVersions,
    /// `/apis`: APIGroupList or the aggregated discovery of every group.
    Groups,
    /// `/apis/<group>`: APIGroup.
    Group(String),
    /// `/api/v1`, `/apis/<group>/<version>`: APIResourceList.
    ResourceList {
        group: String,
        version: String,
    },
    Resource(ResourceRoute),
    /// `/healthz`, `/livez`, `/readyz`, `/version`.
    Health(String),
    /// `/_double/...`: the test-only admin API.
    Admin(Vec<String>),
    /// Anything else: kube-apiserver's plain-text "404 page not found" (recording 09c).
    NotFound,
    /// An unknown version, resource or subresource under a built-in group (the core group
    /// included): a 404 Status, "the server could not find the requested resource". (Custom
    /// resources' groups answer plain text, as anything nothing serves.)
    UnknownBuiltIn,
}

/// Routes `path` (no query string).
pub fn route(catalog: &Catalog, path: &str) -> Route {
    let segments: Vec<&str> = path
        .trim_start_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    match segments.as_slice() {
        ["api"] => Route::CoreVersions,
        ["apis"] => Route::Groups,
        ["healthz" | "livez" | "readyz" | "version", ..] => Route::Health(segments[0].to_string()),
        ["_double", rest @ ..] => Route::Admin(rest.iter().map(|s| s.to_string()).collect()),
        ["api", version, rest @ ..] => in_built_in(within_group(catalog, "", version, rest)),
        ["apis", group] => {
            if catalog.all().iter().any(|d| d.group == *group) {
                Route::Group(group.to_string())
            } else {
                Route::NotFound
            }
        }
        ["apis", group, version, rest @ ..] => {
            let routed = within_group(catalog, group, version, rest);
            if catalog
                .all()
                .iter()
                .any(|d| d.group == *group && !d.is_custom())
            {
                in_built_in(routed)
            } else {
                routed
            }
        }
        _ => Route::NotFound,
    }
}

/// Under a built-in group, what nothing serves is a Status, not plain text.
fn in_built_in(route: Route) -> Route {
    match route {
        Route::NotFound => Route::UnknownBuiltIn,
        other => other,
    }
}

fn within_group(catalog: &Catalog, group: &str, version: &str, rest: &[&str]) -> Route {
    if !catalog.serves_group_version(group, version) {
        return Route::NotFound;
    }
    let find = |plural: &str| catalog.find_served(group, version, plural);
    let resource =
        |def: Arc<ResourceDef>, namespace: Option<&str>, name: Option<&str>, sub: Option<&str>| {
            if let Some(sub) = sub
                && !def.has_subresource(sub)
            {
                return Route::NotFound;
            }
            Route::Resource(ResourceRoute {
                def,
                version: version.to_string(),
                namespace: namespace.map(str::to_string),
                name: name.map(str::to_string),
                subresource: sub.map(str::to_string),
            })
        };
    match rest {
        [] => Route::ResourceList {
            group: group.to_string(),
            version: version.to_string(),
        },
        // /api/v1/namespaces/<ns>/<resource>[/<name>[/<sub>]] for namespaced resources; a
        // three-segment path may also be a namespace's own subresource (namespaces/x/status).
        ["namespaces", ns, plural, tail @ ..]
            if group.is_empty() || find(plural).is_some_and(|d| d.namespaced) =>
        {
            match (find(plural).filter(|d| d.namespaced), tail) {
                (Some(def), []) => resource(def, Some(ns), None, None),
                (Some(def), [name]) => resource(def, Some(ns), Some(name), None),
                (Some(def), [name, sub]) => resource(def, Some(ns), Some(name), Some(sub)),
                (None, []) if group.is_empty() => match find("namespaces") {
                    Some(def) => resource(def, None, Some(ns), Some(plural)),
                    None => Route::NotFound,
                },
                _ => Route::NotFound,
            }
        }
        [plural, tail @ ..] => match (find(plural), tail) {
            // A namespaced resource's collection across all namespaces.
            (Some(def), []) => resource(def, None, None, None),
            (Some(def), [name]) if !def.namespaced => resource(def, None, Some(name), None),
            (Some(def), [name, sub]) if !def.namespaced => {
                resource(def, None, Some(name), Some(sub))
            }
            _ => Route::NotFound,
        },
    }
}

/// The Kubernetes verb of a request (what RBAC and the counters see).
pub fn verb(
    method: &Method,
    route: &ResourceRoute,
    query: &HashMap<String, String>,
) -> &'static str {
    let collection = route.name.is_none();
    let watch = query.get("watch").is_some_and(|v| v == "true" || v == "1");
    match *method {
        Method::GET | Method::HEAD if collection && watch => "watch",
        Method::GET | Method::HEAD if collection => "list",
        Method::GET | Method::HEAD => "get",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if collection => "deletecollection",
        Method::DELETE => "delete",
        _ => "unknown",
    }
}

/// The counters' name for a resource: `configmaps`, `deployments.apps`, plus `/<sub>` for a
/// subresource.
pub fn counter_name(gr: &GroupResource, subresource: Option<&str>) -> String {
    match subresource {
        Some(sub) => format!("{gr}/{sub}"),
        None => gr.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtin_resources;

    fn catalog() -> Catalog {
        Catalog::new(builtin_resources())
    }

    fn resource(path: &str) -> ResourceRoute {
        match route(&catalog(), path) {
            Route::Resource(r) => r,
            other => panic!("{path}: {other:?}"),
        }
    }

    #[test]
    fn resource_paths() {
        let r = resource("/api/v1/namespaces/demo/configmaps/cm1");
        assert_eq!(
            (
                r.def.plural.as_str(),
                r.namespace.as_deref(),
                r.name.as_deref()
            ),
            ("configmaps", Some("demo"), Some("cm1"))
        );
        assert_eq!(r.key().as_deref(), Some("demo/cm1"));

        let r = resource("/api/v1/configmaps");
        assert!(r.namespace.is_none() && r.name.is_none());
        assert_eq!(r.prefix(), "");

        let r = resource("/api/v1/namespaces/demo");
        assert_eq!(
            (r.def.plural.as_str(), r.name.as_deref()),
            ("namespaces", Some("demo"))
        );

        let r = resource("/api/v1/namespaces/demo/status");
        assert_eq!(
            (
                r.def.plural.as_str(),
                r.name.as_deref(),
                r.subresource.as_deref()
            ),
            ("namespaces", Some("demo"), Some("status"))
        );

        let r = resource("/apis/apps/v1/namespaces/x/deployments/d/status");
        assert_eq!(r.subresource.as_deref(), Some("status"));

        let r = resource("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/w.example.test");
        assert_eq!(r.key().as_deref(), Some("w.example.test"));
    }

    #[test]
    fn unknown_paths_are_plain_404s_except_under_built_in_groups() {
        // What kube-apiserver 1.36 answers (tests/real_cluster/fidelity.rs compares them).
        for path in ["/apis/nosuch.group/v1/namespaces/demo/things/x", "/metrics"] {
            assert!(matches!(route(&catalog(), path), Route::NotFound), "{path}");
        }
        for path in [
            "/api/v1/namespaces/demo/gadgets/x",
            "/api/v1/configmaps/x",
            "/api/v2",
            "/apis/apps/v1/namespaces/x/deployments/d/scale2",
            "/apis/apps/v9/deployments",
        ] {
            assert!(
                matches!(route(&catalog(), path), Route::UnknownBuiltIn),
                "{path}"
            );
        }
    }

    #[test]
    fn verbs() {
        let mut q = HashMap::new();
        let coll = resource("/api/v1/configmaps");
        let obj = resource("/api/v1/namespaces/a/configmaps/b");
        assert_eq!(verb(&Method::GET, &coll, &q), "list");
        assert_eq!(verb(&Method::GET, &obj, &q), "get");
        assert_eq!(verb(&Method::DELETE, &coll, &q), "deletecollection");
        q.insert("watch".into(), "true".into());
        assert_eq!(verb(&Method::GET, &coll, &q), "watch");
    }
}
