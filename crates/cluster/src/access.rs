//! Every request svm-apiserver makes to the target cluster, as data: the single list the
//! deploy/ RBAC is checked against (`tests/auth/rbac_coverage.rs`: every entry allowed, every
//! grant used by some entry). [`ClusterClient`](super::ClusterClient) refuses a request that is
//! not listed, so the list cannot fall behind the code.

use svm_server::auth::RequestAttributes;

/// Which part of the server makes the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Component {
    /// Delegated authentication and authorization (`crates/server/src/auth`).
    Auth,
    /// Running migrations (`crates/migrator/`, `crates/cluster/src/`).
    Migrator,
    /// Events on migrations (kube's recorder).
    Events,
    /// Watching storage versions and keeping StorageStates true (`crates/trigger/`).
    Trigger,
    /// Which part of `storagemigration.k8s.io` the server plays (`crates/apimode/`).
    ApiMode,
    /// Resizing a StatefulSet's claims for VolumeClaimMigrations (`crates/volumes/`).
    Volumes,
    /// Rolling a data-plane DaemonSet out node by node for DataPlaneRollouts
    /// (`crates/dataplane/`).
    DataPlane,
}

/// What a request touches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// `resource` `"*"`: any resource an operator asks to migrate.
    Resource {
        /// The API group; `"*"` for any.
        group: &'static str,
        /// The plural resource name; `"*"` for any.
        resource: &'static str,
        /// The subresource (`status`), matched exactly; empty for the object itself.
        subresource: &'static str,
        /// The one namespace allowed; `None` for any (and for cluster-scoped resources).
        namespace: Option<&'static str>,
        /// The one object allowed; `None` for any.
        name: Option<&'static str>,
    },
    /// A path; a trailing `*` matches any suffix.
    NonResource {
        /// The path, e.g. `/readyz` or `/api/*`.
        path: &'static str,
    },
}

/// One catalogue entry: who may send which request, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    /// The part of the server that sends it.
    pub component: Component,
    /// The Kubernetes verb (`get`, `list`, `watch`, `patch`, ...), as RBAC names it.
    pub verb: &'static str,
    /// What it touches.
    pub target: Target,
    /// Why the request is needed, for people reading the catalogue or a refusal.
    pub why: &'static str,
}

const fn resource(
    component: Component,
    verb: &'static str,
    group: &'static str,
    resource: &'static str,
    why: &'static str,
) -> Access {
    Access {
        component,
        verb,
        target: Target::Resource {
            group,
            resource,
            subresource: "",
            namespace: None,
            name: None,
        },
        why,
    }
}

const fn path(component: Component, path: &'static str, why: &'static str) -> Access {
    Access {
        component,
        verb: "get",
        target: Target::NonResource { path },
        why,
    }
}

/// The catalogue.
pub const CLUSTER_ACCESS: &[Access] = &[
    resource(
        Component::Auth,
        "create",
        "authentication.k8s.io",
        "tokenreviews",
        "bearer tokens are authenticated by TokenReview",
    ),
    resource(
        Component::Auth,
        "create",
        "authorization.k8s.io",
        "subjectaccessreviews",
        "every request is authorized by SubjectAccessReview",
    ),
    Access {
        component: Component::Auth,
        verb: "get",
        target: Target::Resource {
            group: "",
            resource: "configmaps",
            subresource: "",
            namespace: Some("kube-system"),
            name: Some("extension-apiserver-authentication"),
        },
        why: "client CA and request-header settings of the cluster",
    },
    path(Component::Migrator, "/api", "discovery of the core group"),
    path(Component::Migrator, "/api/*", "discovery of a core version"),
    path(Component::Migrator, "/apis", "discovery of the groups"),
    path(
        Component::Migrator,
        "/readyz",
        "whether a 401/403 came from an apiserver still starting (its authorizer not yet synced)",
    ),
    path(
        Component::Migrator,
        "/apis/*",
        "discovery of a group's preferred version and its resources",
    ),
    resource(
        Component::Migrator,
        "list",
        "*",
        "*",
        "metadata-only pages of the resource being migrated",
    ),
    resource(
        Component::Migrator,
        "watch",
        "*",
        "*",
        "the resource being migrated as one metadata-only watch-list stream",
    ),
    resource(
        Component::Migrator,
        "patch",
        "*",
        "*",
        "the no-op merge patch that rewrites each object",
    ),
    path(
        Component::Migrator,
        "/debug/api_priority_and_fairness/dump_priority_levels",
        "at --object-concurrency auto, per API Priority and Fairness priority level the requests executing, queued and dispatched so far: whether others are using the apiserver, read every second or so at the cost of a few lines (the migrator's requests in a level of their own: deploy/base/flowcontrol.yaml)",
    ),
    path(
        Component::Trigger,
        "/metrics",
        "each kube-apiserver's encryption configuration hash and KMS v2 write key (a key rotation starts migrations of the encrypted resources); and, read by the migrator at --object-concurrency auto where its requests have no priority level of their own, the requests executing and queued per API Priority and Fairness priority level and the requests answered per resource and verb (whether others are using the apiserver)",
    ),
    resource(
        Component::Trigger,
        "list",
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        "CRD storage versions and storedVersions (the watch's initial list)",
    ),
    resource(
        Component::Trigger,
        "watch",
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        "a CRD storage-version move is seen at once",
    ),
    Access {
        component: Component::Trigger,
        verb: "update",
        target: Target::Resource {
            group: "apiextensions.k8s.io",
            resource: "customresourcedefinitions",
            subresource: "status",
            namespace: None,
            name: None,
        },
        why: "status.storedVersions narrowed to the storage version after a migration",
    },
    Access {
        component: Component::Trigger,
        verb: "list",
        target: Target::Resource {
            group: "coordination.k8s.io",
            resource: "leases",
            subresource: "",
            namespace: Some("kube-system"),
            name: None,
        },
        why: "kube-apiserver identity leases (the watch's initial list)",
    },
    Access {
        component: Component::Trigger,
        verb: "watch",
        target: Target::Resource {
            group: "coordination.k8s.io",
            resource: "leases",
            subresource: "",
            namespace: Some("kube-system"),
            name: None,
        },
        why: "every apiserver restart makes the trigger look again at once",
    },
    resource(
        Component::Trigger,
        "list",
        "internal.apiserver.k8s.io",
        "storageversions",
        "per-apiserver encoding versions (the watch's initial list)",
    ),
    resource(
        Component::Trigger,
        "watch",
        "internal.apiserver.k8s.io",
        "storageversions",
        "apiservers disagreeing on an encoding (HA rolling upgrade)",
    ),
    resource(
        Component::ApiMode,
        "list",
        "apiregistration.k8s.io",
        "apiservices",
        "which versions of storagemigration.k8s.io kube-apiserver serves itself (the watch's initial list)",
    ),
    resource(
        Component::ApiMode,
        "watch",
        "apiregistration.k8s.io",
        "apiservices",
        "an upgraded kube-apiserver registering the group, or ours deleted, is seen at once",
    ),
    resource(
        Component::Trigger,
        "create",
        "storagemigration.k8s.io",
        "storageversionmigrations",
        "companion mode: the trigger's migrations, on the cluster's built-in API",
    ),
    resource(
        Component::Trigger,
        "delete",
        "storagemigration.k8s.io",
        "storageversionmigrations",
        "companion mode: the trigger's stale migrations",
    ),
    resource(
        Component::Trigger,
        "list",
        "storagemigration.k8s.io",
        "storageversionmigrations",
        "companion mode: the trigger's migrations and their status (the watch's initial list)",
    ),
    resource(
        Component::Trigger,
        "watch",
        "storagemigration.k8s.io",
        "storageversionmigrations",
        "companion mode: a built-in migration's success narrows the StorageState at once",
    ),
    resource(
        Component::Migrator,
        "get",
        "storagemigration.k8s.io",
        "storageversionmigrations",
        "companion mode, --companion-migrator=svm-apiserver: the built-in migration being run",
    ),
    Access {
        component: Component::Migrator,
        verb: "update",
        target: Target::Resource {
            group: "storagemigration.k8s.io",
            resource: "storageversionmigrations",
            subresource: "status",
            namespace: None,
            name: None,
        },
        why: "companion mode, --companion-migrator=svm-apiserver: the built-in migration's conditions",
    },
    resource(
        Component::Events,
        "create",
        "events.k8s.io",
        "events",
        "MigrationStarted/Succeeded/Failed events",
    ),
    resource(
        Component::Events,
        "patch",
        "events.k8s.io",
        "events",
        "a repeated event becomes a series (kube's recorder patches it)",
    ),
    resource(
        Component::Volumes,
        "get",
        "apps",
        "statefulsets",
        "a VolumeClaimMigration's target: its replicas and volumeClaimTemplates",
    ),
    resource(
        Component::Volumes,
        "get",
        "apps.kruise.io",
        "statefulsets",
        "a VolumeClaimMigration's target when it is an OpenKruise Advanced StatefulSet",
    ),
    resource(
        Component::Volumes,
        "get",
        "",
        "persistentvolumeclaims",
        "each claim of the target, by name: its request, capacity and resize conditions",
    ),
    resource(
        Component::Volumes,
        "patch",
        "",
        "persistentvolumeclaims",
        "a claim's storage request raised (or lowered after a failed resize)",
    ),
    resource(
        Component::Volumes,
        "get",
        "storage.k8s.io",
        "storageclasses",
        "whether a claim's StorageClass allows volume expansion",
    ),
    resource(
        Component::Volumes,
        "get",
        "",
        "pods",
        "the pod of a claim whose file system waits for a restart: its uid and readiness",
    ),
    resource(
        Component::Volumes,
        "delete",
        "",
        "pods",
        "that pod deleted so the kubelet resizes the file system when it starts again",
    ),
    resource(
        Component::Volumes,
        "delete",
        "apps",
        "statefulsets",
        "spec.recreateStatefulSet: the old StatefulSet deleted with orphan cascade",
    ),
    resource(
        Component::Volumes,
        "create",
        "apps",
        "statefulsets",
        "spec.recreateStatefulSet: the same StatefulSet created with the new templates",
    ),
    resource(
        Component::DataPlane,
        "get",
        "apps",
        "daemonsets",
        "a DataPlaneRollout's DaemonSet: its selector and update strategy (OnDelete)",
    ),
    resource(
        Component::DataPlane,
        "list",
        "apps",
        "controllerrevisions",
        "the DaemonSet's revisions: the newest is the one rolled out",
    ),
    resource(
        Component::DataPlane,
        "list",
        "",
        "pods",
        "the DaemonSet's pods (node, revision, Ready) and the consumer pods to evict first",
    ),
    resource(
        Component::DataPlane,
        "get",
        "",
        "pods",
        "a pod whose eviction a PodDisruptionBudget refused: its labels, to name the budget",
    ),
    resource(
        Component::DataPlane,
        "list",
        "policy",
        "poddisruptionbudgets",
        "the budgets over a pod whose eviction was refused, named in the node's status",
    ),
    resource(
        Component::DataPlane,
        "list",
        "",
        "nodes",
        "the selected nodes: Ready, cordoned, and which rollout holds them",
    ),
    resource(
        Component::DataPlane,
        "get",
        "",
        "nodes",
        "a node read right before its cordon or release (the PATCH's resourceVersion)",
    ),
    resource(
        Component::DataPlane,
        "patch",
        "",
        "nodes",
        "a node cordoned with the rollout's claim annotation, then released (uncordoned only if the rollout cordoned it)",
    ),
    Access {
        component: Component::DataPlane,
        verb: "create",
        target: Target::Resource {
            group: "",
            resource: "pods",
            subresource: "eviction",
            namespace: None,
            name: None,
        },
        why: "consumer pods, then the node's old data-plane pod, evicted through the Eviction API (every PodDisruptionBudget has its say) with the pod's uid as precondition",
    },
    resource(
        Component::DataPlane,
        "list",
        "*",
        "*",
        "the replicas a guard names (any group and resource the user chose), every namespace",
    ),
];

fn matches(pattern: &str, value: &str) -> bool {
    pattern == "*" || pattern == value
}

impl Access {
    /// Whether this entry covers the request.
    pub fn covers(&self, attrs: &RequestAttributes) -> bool {
        if self.verb != attrs.verb {
            return false;
        }
        match (self.target, &attrs.resource) {
            (Target::NonResource { path }, None) => match path.strip_suffix('*') {
                Some(prefix) => attrs.path.starts_with(prefix),
                None => attrs.path == path,
            },
            (
                Target::Resource {
                    group,
                    resource,
                    subresource,
                    namespace,
                    name,
                },
                Some(asked),
            ) => {
                matches(group, &asked.group)
                    && matches(resource, &asked.resource)
                    && subresource == asked.subresource
                    && namespace.is_none_or(|ns| asked.namespace == ns)
                    && name.is_none_or(|n| asked.name == n)
            }
            _ => false,
        }
    }
}

/// The catalogue entry that covers this request, if any.
pub fn catalogued(attrs: &RequestAttributes) -> Option<&'static Access> {
    CLUSTER_ACCESS.iter().find(|a| a.covers(attrs))
}

/// A request outside the access catalogue, refused before it leaves the process.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0} is not in the access catalogue (crates/cluster/src/access.rs)")]
pub struct NotCatalogued(pub String);

/// Only what the RBAC in deploy/ grants: every request of the kube client — raw requests,
/// watchers, the events recorder — must be in the catalogue. A missing entry is a bug here,
/// caught by the tests rather than by a 403 in someone's cluster.
pub(crate) fn catalogue_guard(
    request: http::Request<kube::client::Body>,
) -> Result<http::Request<kube::client::Body>, NotCatalogued> {
    let uri = request.uri();
    let attributes = RequestAttributes::from_request(request.method(), uri.path(), uri.query());
    if catalogued(&attributes).is_some() {
        Ok(request)
    } else {
        Err(NotCatalogued(format!(
            "{} {}",
            request.method(),
            uri.path()
        )))
    }
}

#[cfg(test)]
mod tests {
    use http::Method;

    use super::*;

    fn request(method: http::Method, uri: &str) -> http::Request<kube::client::Body> {
        http::Request::builder()
            .method(method)
            .uri(uri)
            .body(kube::client::Body::empty())
            .expect("request")
    }

    #[test]
    fn the_guard_passes_catalogued_requests_and_refuses_the_rest() {
        assert!(catalogue_guard(request(http::Method::GET, "/api/v1/secrets?limit=500")).is_ok());
        assert!(
            catalogue_guard(request(
                http::Method::PATCH,
                "/apis/apps/v1/namespaces/demo/deployments/d"
            ))
            .is_ok()
        );
        let refused = catalogue_guard(request(
            http::Method::DELETE,
            "/api/v1/namespaces/demo/secrets/s",
        ))
        .expect_err("delete is not catalogued");
        assert!(
            refused
                .to_string()
                .contains("DELETE /api/v1/namespaces/demo/secrets/s")
        );
    }

    fn attrs(method: Method, target: &str) -> RequestAttributes {
        let (path, query) = match target.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (target, None),
        };
        RequestAttributes::from_request(&method, path, query)
    }

    #[test]
    fn the_catalogue_covers_what_the_migrator_does_and_nothing_else() {
        let allowed = [
            (Method::GET, "/apis/example.test"),
            (Method::GET, "/metrics"),
            (
                Method::GET,
                "/debug/api_priority_and_fairness/dump_priority_levels",
            ),
            (Method::GET, "/api/v1"),
            (Method::GET, "/apis/apps/v1"),
            (Method::GET, "/api/v1/secrets?limit=500&continue=abc"),
            (Method::PATCH, "/api/v1/namespaces/demo/secrets/s1"),
            (
                Method::PATCH,
                "/apis/example.test/v2/widgets/cluster-scoped",
            ),
            (
                Method::POST,
                "/apis/events.k8s.io/v1/namespaces/default/events",
            ),
            (Method::POST, "/apis/authentication.k8s.io/v1/tokenreviews"),
            (
                Method::GET,
                "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication",
            ),
        ];
        for (method, target) in allowed {
            assert!(
                catalogued(&attrs(method.clone(), target)).is_some(),
                "{method} {target}"
            );
        }
        let refused = [
            (Method::GET, "/api/v1/namespaces/demo/secrets/s1"),
            (Method::PUT, "/api/v1/namespaces/demo/secrets/s1"),
            (Method::DELETE, "/api/v1/namespaces/demo/secrets/s1"),
            (Method::POST, "/api/v1/namespaces/demo/secrets"),
            (Method::PATCH, "/api/v1/namespaces/demo/secrets/s1/status"),
            (
                Method::GET,
                "/api/v1/namespaces/kube-system/configmaps/other",
            ),
            (Method::GET, "/metrics/slis"),
            (
                Method::GET,
                "/debug/api_priority_and_fairness/dump_requests",
            ),
            (Method::POST, "/api/v1/namespaces/default/events"),
        ];
        for (method, target) in refused {
            assert!(
                catalogued(&attrs(method.clone(), target)).is_none(),
                "{method} {target}"
            );
        }
    }
}
