//! The resource model: what the double serves, per group and resource, and the catalogue that
//! CRDs extend at run time.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, RwLock};

use base64::Engine as _;
use sha2::{Digest, Sha256};

/// A group and a resource (plural), like `schema.GroupResource`. The core group is `""`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupResource {
    pub group: String,
    pub resource: String,
}

impl GroupResource {
    pub fn new(group: impl Into<String>, resource: impl Into<String>) -> Self {
        Self {
            group: group.into(),
            resource: resource.into(),
        }
    }

    /// Parses `resource.group` as kubectl writes it: `configmaps`, `deployments.apps`,
    /// `widgets.example.test`.
    pub fn parse(qualified: &str) -> Self {
        match qualified.split_once('.') {
            Some((resource, group)) => Self::new(group, resource),
            None => Self::new("", qualified),
        }
    }
}

impl fmt::Display for GroupResource {
    /// `configmaps` or `widgets.example.test`: the form kube-apiserver uses in error messages.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            write!(f, "{}", self.resource)
        } else {
            write!(f, "{}.{}", self.resource, self.group)
        }
    }
}

impl From<&str> for GroupResource {
    fn from(qualified: &str) -> Self {
        Self::parse(qualified)
    }
}

/// Type-specific behaviour the double reproduces (the per-kind `strategy.go` upstream).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    ConfigMap,
    Secret,
    Namespace,
    Deployment,
    Lease,
    /// events.k8s.io/v1 Events, where controllers report (kube's `events::Recorder`).
    Event,
    CustomResourceDefinition,
    /// apiregistration.k8s.io APIServices: stored as they are written (the double runs no
    /// aggregator, so it registers no local ones; a test creates what its cluster would show).
    APIService,
    StorageVersion,
    TokenReview,
    SubjectAccessReview,
    /// Objects of a resource defined by a CRD.
    Custom,
}

/// A subresource as discovery shows it.
#[derive(Clone, Debug)]
pub struct SubresourceDef {
    pub name: String,
    pub kind: String,
    pub verbs: Vec<String>,
}

/// Everything the double knows about one resource.
#[derive(Clone, Debug)]
pub struct ResourceDef {
    pub group: String,
    pub plural: String,
    pub singular: String,
    pub kind: String,
    pub list_kind: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    /// Discovery verbs, in the order kube-apiserver lists them.
    pub verbs: Vec<String>,
    /// Served versions, highest priority first (kube-aware version order).
    pub served_versions: Vec<String>,
    /// The version objects are encoded in when written (a version, not a group/version).
    pub storage_version: String,
    /// Versions the server can decode besides the served ones (StorageVersion API).
    pub extra_decodable_versions: Vec<String>,
    pub subresources: Vec<SubresourceDef>,
    pub flavor: Flavor,
    /// The encryption-at-rest write key (`None`: identity, stored as plain JSON).
    pub encryption_key: Option<String>,
    /// `rest.RESTUpdateStrategy.AllowCreateOnUpdate`.
    pub allow_create_on_update: bool,
    /// `rest.RESTUpdateStrategy.AllowUnconditionalUpdate`: a PUT without resourceVersion is fine.
    pub allow_unconditional_update: bool,
    /// Whether metadata.generation is maintained (types with a spec).
    pub tracks_generation: bool,
}

impl ResourceDef {
    pub fn group_resource(&self) -> GroupResource {
        GroupResource::new(self.group.clone(), self.plural.clone())
    }

    /// `v1` for the core group, `group/version` otherwise.
    pub fn group_version(&self, version: &str) -> String {
        group_version(&self.group, version)
    }

    pub fn storage_group_version(&self) -> String {
        self.group_version(&self.storage_version)
    }

    pub fn serves(&self, version: &str) -> bool {
        self.served_versions.iter().any(|v| v == version)
    }

    pub fn has_subresource(&self, name: &str) -> bool {
        self.subresources.iter().any(|s| s.name == name)
    }

    pub fn has_status(&self) -> bool {
        self.has_subresource("status")
    }

    /// Objects of this resource live in the store (reviews are answered, never stored).
    pub fn is_stored(&self) -> bool {
        !matches!(
            self.flavor,
            Flavor::TokenReview | Flavor::SubjectAccessReview
        )
    }

    pub fn is_custom(&self) -> bool {
        self.flavor == Flavor::Custom
    }

    /// The discovery `storageVersionHash`: base64 of the first 8 bytes of
    /// sha256("<group>/<version>/<kind>") of the storage version (recording 03b).
    pub fn storage_version_hash(&self) -> String {
        storage_version_hash(&self.group, &self.storage_version, &self.kind)
    }

    /// The name kube-apiserver uses in messages: `configmaps`, `widgets.example.test`.
    pub fn qualified_resource(&self) -> String {
        self.group_resource().to_string()
    }

    /// `Widget.example.test` / `ConfigMap`: the Invalid message prefix.
    pub fn qualified_kind(&self) -> String {
        if self.group.is_empty() {
            self.kind.clone()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }

    pub fn is_verb_supported(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == verb)
    }
}

pub fn group_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    }
}

/// base64(sha256("<group>/<version>/<kind>")[..8]), as `discovery.StorageVersionHash`.
pub fn storage_version_hash(group: &str, version: &str, kind: &str) -> String {
    let digest = Sha256::digest(format!("{group}/{version}/{kind}").as_bytes());
    base64::engine::general_purpose::STANDARD.encode(&digest[..8])
}

/// Kubernetes' version priority (`version.CompareKubeAwareVersionStrings`): GA before beta
/// before alpha, higher majors and minors first, then any non-kube-like version alphabetically.
pub fn compare_versions(a: &str, b: &str) -> Ordering {
    match (parse_kube_version(a), parse_kube_version(b)) {
        (Some(x), Some(y)) => y.cmp(&x),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}

/// (stability rank, major, minor) with GA = 2, beta = 1, alpha = 0.
fn parse_kube_version(v: &str) -> Option<(u8, u64, u64)> {
    let rest = v.strip_prefix('v')?;
    let digits_end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let major: u64 = rest[..digits_end].parse().ok()?;
    if major == 0 {
        return None;
    }
    let tail = &rest[digits_end..];
    if tail.is_empty() {
        return Some((2, major, 0));
    }
    let (rank, minor) = if let Some(m) = tail.strip_prefix("beta") {
        (1, m)
    } else if let Some(m) = tail.strip_prefix("alpha") {
        (0, m)
    } else {
        return None;
    };
    let minor: u64 = if minor.is_empty() {
        0
    } else {
        minor.parse().ok()?
    };
    Some((rank, major, minor))
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

const FULL_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// CRD-served resources list their verbs in this order (recordings 02a, 03b).
pub const CUSTOM_RESOURCE_VERBS: &[&str] = &[
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "create",
    "update",
    "watch",
];

fn status_subresource(kind: &str) -> SubresourceDef {
    SubresourceDef {
        name: "status".into(),
        kind: kind.into(),
        verbs: strings(&["get", "patch", "update"]),
    }
}

struct Builtin {
    group: &'static str,
    version: &'static str,
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
    short_names: &'static [&'static str],
    categories: &'static [&'static str],
    verbs: &'static [&'static str],
    flavor: Flavor,
}

impl Builtin {
    fn into_def(self) -> ResourceDef {
        ResourceDef {
            group: self.group.into(),
            plural: self.plural.into(),
            singular: self.singular.into(),
            kind: self.kind.into(),
            list_kind: format!("{}List", self.kind),
            namespaced: self.namespaced,
            short_names: strings(self.short_names),
            categories: strings(self.categories),
            verbs: strings(self.verbs),
            served_versions: vec![self.version.into()],
            storage_version: self.version.into(),
            extra_decodable_versions: Vec::new(),
            subresources: Vec::new(),
            flavor: self.flavor,
            encryption_key: None,
            allow_create_on_update: false,
            allow_unconditional_update: true,
            tracks_generation: false,
        }
    }
}

/// The built-in resources, in kube-apiserver's discovery order (core first, then groups as
/// recording 01 lists them).
pub fn builtin_resources() -> Vec<ResourceDef> {
    let mut out = Vec::new();

    out.push(
        Builtin {
            group: "",
            version: "v1",
            plural: "configmaps",
            singular: "configmap",
            kind: "ConfigMap",
            namespaced: true,
            short_names: &["cm"],
            categories: &[],
            verbs: FULL_VERBS,
            flavor: Flavor::ConfigMap,
        }
        .into_def(),
    );

    let mut namespaces = Builtin {
        group: "",
        version: "v1",
        plural: "namespaces",
        singular: "namespace",
        kind: "Namespace",
        namespaced: false,
        short_names: &["ns"],
        categories: &[],
        verbs: &[
            "create", "delete", "get", "list", "patch", "update", "watch",
        ],
        flavor: Flavor::Namespace,
    }
    .into_def();
    namespaces.subresources = vec![
        SubresourceDef {
            name: "finalize".into(),
            kind: "Namespace".into(),
            verbs: strings(&["update"]),
        },
        status_subresource("Namespace"),
    ];
    out.push(namespaces);

    out.push(
        Builtin {
            group: "",
            version: "v1",
            plural: "secrets",
            singular: "secret",
            kind: "Secret",
            namespaced: true,
            short_names: &[],
            categories: &[],
            verbs: FULL_VERBS,
            flavor: Flavor::Secret,
        }
        .into_def(),
    );

    let mut deployments = Builtin {
        group: "apps",
        version: "v1",
        plural: "deployments",
        singular: "deployment",
        kind: "Deployment",
        namespaced: true,
        short_names: &["deploy"],
        categories: &["all"],
        verbs: FULL_VERBS,
        flavor: Flavor::Deployment,
    }
    .into_def();
    deployments.subresources = vec![status_subresource("Deployment")];
    deployments.tracks_generation = true;
    out.push(deployments);

    out.push(
        Builtin {
            group: "authentication.k8s.io",
            version: "v1",
            plural: "tokenreviews",
            singular: "tokenreview",
            kind: "TokenReview",
            namespaced: false,
            short_names: &[],
            categories: &[],
            verbs: &["create"],
            flavor: Flavor::TokenReview,
        }
        .into_def(),
    );

    out.push(
        Builtin {
            group: "authorization.k8s.io",
            version: "v1",
            plural: "subjectaccessreviews",
            singular: "subjectaccessreview",
            kind: "SubjectAccessReview",
            namespaced: false,
            short_names: &[],
            categories: &[],
            verbs: &["create"],
            flavor: Flavor::SubjectAccessReview,
        }
        .into_def(),
    );

    // kube-apiserver stores CRDs as apiextensions.k8s.io/v1beta1 although only v1 is served
    // (recording 13, verified in etcd).
    let mut crds = Builtin {
        group: "apiextensions.k8s.io",
        version: "v1",
        plural: "customresourcedefinitions",
        singular: "customresourcedefinition",
        kind: "CustomResourceDefinition",
        namespaced: false,
        short_names: &["crd", "crds"],
        categories: &["api-extensions"],
        verbs: FULL_VERBS,
        flavor: Flavor::CustomResourceDefinition,
    }
    .into_def();
    crds.storage_version = "v1beta1".into();
    crds.extra_decodable_versions = vec!["v1beta1".into()];
    crds.subresources = vec![status_subresource("CustomResourceDefinition")];
    crds.tracks_generation = true;
    crds.allow_unconditional_update = false;
    out.push(crds);

    let mut leases = Builtin {
        group: "coordination.k8s.io",
        version: "v1",
        plural: "leases",
        singular: "lease",
        kind: "Lease",
        namespaced: true,
        short_names: &[],
        categories: &[],
        verbs: FULL_VERBS,
        flavor: Flavor::Lease,
    }
    .into_def();
    leases.extra_decodable_versions = vec!["v1beta1".into()];
    // The lease strategy allows create-on-update (leader election relies on it).
    leases.allow_create_on_update = true;
    out.push(leases);

    // events.k8s.io/v1 (kube-apiserver serves core v1 events as well; the migrator's recorder
    // writes only this one). Its apiserver TTL (--event-ttl, 1h) is not modelled.
    out.push(
        Builtin {
            group: "events.k8s.io",
            version: "v1",
            plural: "events",
            singular: "event",
            kind: "Event",
            namespaced: true,
            short_names: &["ev"],
            categories: &[],
            verbs: FULL_VERBS,
            flavor: Flavor::Event,
        }
        .into_def(),
    );

    // kube-aggregator's records of who serves each group version (svm-apiserver's API mode
    // reads them). Empty here unless a test writes some.
    let mut apiservices = Builtin {
        group: "apiregistration.k8s.io",
        version: "v1",
        plural: "apiservices",
        singular: "apiservice",
        kind: "APIService",
        namespaced: false,
        short_names: &[],
        categories: &["api-extensions"],
        verbs: FULL_VERBS,
        flavor: Flavor::APIService,
    }
    .into_def();
    apiservices.subresources = vec![status_subresource("APIService")];
    out.push(apiservices);

    let mut storage_versions = Builtin {
        group: "internal.apiserver.k8s.io",
        version: "v1alpha1",
        plural: "storageversions",
        singular: "storageversion",
        kind: "StorageVersion",
        namespaced: false,
        short_names: &[],
        categories: &[],
        verbs: FULL_VERBS,
        flavor: Flavor::StorageVersion,
    }
    .into_def();
    storage_versions.subresources = vec![status_subresource("StorageVersion")];
    out.push(storage_versions);

    out
}

/// The served resources, changing at run time as CRDs come and go and storage versions move.
/// Lookups clone an `Arc`, so no lock is held while a request works with a definition.
#[derive(Default)]
pub struct Catalog {
    inner: RwLock<CatalogInner>,
}

#[derive(Default)]
struct CatalogInner {
    /// Discovery order.
    order: Vec<GroupResource>,
    defs: HashMap<GroupResource, Arc<ResourceDef>>,
}

impl Catalog {
    pub fn new(defs: Vec<ResourceDef>) -> Self {
        let catalog = Self::default();
        for def in defs {
            catalog.upsert(def);
        }
        catalog
    }

    pub fn get(&self, gr: &GroupResource) -> Option<Arc<ResourceDef>> {
        self.read().defs.get(gr).cloned()
    }

    /// Every resource, in discovery order.
    pub fn all(&self) -> Vec<Arc<ResourceDef>> {
        let inner = self.read();
        inner
            .order
            .iter()
            .filter_map(|gr| inner.defs.get(gr).cloned())
            .collect()
    }

    /// The resource `plural` served in `group`/`version`.
    pub fn find_served(
        &self,
        group: &str,
        version: &str,
        plural: &str,
    ) -> Option<Arc<ResourceDef>> {
        self.get(&GroupResource::new(group, plural))
            .filter(|def| def.serves(version))
    }

    /// Whether `group`/`version` is served at all (for the plain 404 on unknown paths).
    pub fn serves_group_version(&self, group: &str, version: &str) -> bool {
        self.read()
            .defs
            .values()
            .any(|def| def.group == group && def.serves(version))
    }

    pub fn upsert(&self, def: ResourceDef) {
        let gr = def.group_resource();
        let mut inner = self.write();
        if !inner.defs.contains_key(&gr) {
            inner.order.push(gr.clone());
        }
        inner.defs.insert(gr, Arc::new(def));
    }

    /// Applies `change` to a copy of the definition and publishes it; `None` if unknown.
    pub fn update(
        &self,
        gr: &GroupResource,
        change: impl FnOnce(&mut ResourceDef),
    ) -> Option<Arc<ResourceDef>> {
        let mut inner = self.write();
        let current = inner.defs.get(gr)?;
        let mut def = ResourceDef::clone(current);
        change(&mut def);
        let def = Arc::new(def);
        inner.defs.insert(gr.clone(), def.clone());
        Some(def)
    }

    pub fn remove(&self, gr: &GroupResource) -> Option<Arc<ResourceDef>> {
        let mut inner = self.write();
        inner.order.retain(|g| g != gr);
        inner.defs.remove(gr)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, CatalogInner> {
        // A poisoned lock only means another thread panicked mid-update of plain data; the
        // catalogue is still consistent (every update swaps an Arc), so keep serving.
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, CatalogInner> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_version_hashes_match_the_recordings() {
        assert_eq!(storage_version_hash("", "v1", "ConfigMap"), "qFsyl6wFWjQ=");
        assert_eq!(storage_version_hash("", "v1", "Secret"), "S6u1pOWzb84=");
        assert_eq!(storage_version_hash("", "v1", "Namespace"), "Q3oi5N2YM8M=");
        assert_eq!(
            storage_version_hash("example.test", "v1", "Widget"),
            "zHyf2mNf1TY="
        );
        assert_eq!(
            storage_version_hash("example.test", "v2", "Widget"),
            "N5cUTqCK6wo="
        );
    }

    #[test]
    fn versions_sort_by_kube_priority() {
        let mut v = vec![
            "v1alpha1", "foo", "v2", "v1", "v1beta2", "v1beta1", "v10", "bar",
        ];
        v.sort_by(|a, b| compare_versions(a, b));
        assert_eq!(
            v,
            vec![
                "v10", "v2", "v1", "v1beta2", "v1beta1", "v1alpha1", "bar", "foo"
            ]
        );
    }

    #[test]
    fn group_resource_parses_kubectl_form() {
        assert_eq!(
            GroupResource::parse("configmaps"),
            GroupResource::new("", "configmaps")
        );
        assert_eq!(
            GroupResource::parse("widgets.example.test"),
            GroupResource::new("example.test", "widgets")
        );
        assert_eq!(
            GroupResource::new("apps", "deployments").to_string(),
            "deployments.apps"
        );
    }
}
