//! How a request names one object: its namespace (namespaced kinds only) and name.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Where an object lives: its namespace (namespaced kinds only) and name. A bare `&str` is a
/// cluster-scoped name; `(namespace, name)` names an object of a namespaced kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectRef<'a> {
    /// The namespace; `None` for a cluster-scoped kind.
    pub namespace: Option<&'a str>,
    /// The object's name.
    pub name: &'a str,
}

impl<'a> ObjectRef<'a> {
    /// An object of a cluster-scoped kind.
    pub fn cluster(name: &'a str) -> Self {
        Self {
            namespace: None,
            name,
        }
    }

    /// An object of a namespaced kind.
    pub fn namespaced(namespace: &'a str, name: &'a str) -> Self {
        Self {
            namespace: Some(namespace),
            name,
        }
    }

    /// The place `meta` names (its namespace, when set, and its name).
    pub fn of(meta: &'a ObjectMeta) -> Self {
        Self {
            namespace: meta.namespace.as_deref().filter(|ns| !ns.is_empty()),
            name: meta.name.as_deref().unwrap_or_default(),
        }
    }
}

impl<'a> From<&'a str> for ObjectRef<'a> {
    fn from(name: &'a str) -> Self {
        Self::cluster(name)
    }
}

impl<'a> From<&'a String> for ObjectRef<'a> {
    fn from(name: &'a String) -> Self {
        Self::cluster(name)
    }
}

impl<'a> From<(&'a str, &'a str)> for ObjectRef<'a> {
    fn from((namespace, name): (&'a str, &'a str)) -> Self {
        Self::namespaced(namespace, name)
    }
}
