//! Who made a request, as kube-apiserver's `user.Info` describes a caller.

use std::collections::BTreeMap;

/// The group every authenticated caller is in.
pub const AUTHENTICATED_GROUP: &str = "system:authenticated";
/// The group of callers that presented no credentials (only with `--anonymous-auth=true`, or on
/// an always-allowed path).
pub const UNAUTHENTICATED_GROUP: &str = "system:unauthenticated";
/// The user name of such callers.
pub const ANONYMOUS_USER: &str = "system:anonymous";
/// Members of this group are allowed everything without asking the cluster (the aggregator
/// probes as `system:kube-aggregator` in this group).
pub const MASTERS_GROUP: &str = "system:masters";

/// An authenticated (or anonymous) caller. Put into every admitted request's extensions.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UserInfo {
    /// The user name (`system:anonymous` for an anonymous caller).
    pub name: String,
    /// The user's uid, when the authenticator gave one; else empty.
    pub uid: String,
    /// The groups the caller is in, `system:authenticated` among them once authenticated.
    pub groups: Vec<String>,
    /// Extra attributes (e.g. `authentication.kubernetes.io/credential-id`), keys lower case.
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// The anonymous caller.
    pub fn anonymous() -> Self {
        UserInfo {
            name: ANONYMOUS_USER.into(),
            groups: vec![UNAUTHENTICATED_GROUP.into()],
            ..UserInfo::default()
        }
    }

    /// Whether this is the anonymous caller.
    pub fn is_anonymous(&self) -> bool {
        self.name == ANONYMOUS_USER
    }

    /// Whether the caller is in `group`.
    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }

    /// Add `system:authenticated` unless already present, as kube-apiserver's
    /// AuthenticatedGroupAdder does for every authenticated (non-anonymous) caller.
    pub(crate) fn with_authenticated_group(mut self) -> Self {
        if !self.is_anonymous() && !self.in_group(AUTHENTICATED_GROUP) {
            self.groups.push(AUTHENTICATED_GROUP.into());
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authenticated_group_is_added_once_and_never_to_anonymous() {
        let user = UserInfo {
            name: "jane".into(),
            groups: vec!["dev".into()],
            ..UserInfo::default()
        }
        .with_authenticated_group()
        .with_authenticated_group();
        assert_eq!(user.groups, vec!["dev", AUTHENTICATED_GROUP]);
        let anonymous = UserInfo::anonymous().with_authenticated_group();
        assert_eq!(anonymous.groups, vec![UNAUTHENTICATED_GROUP]);
    }
}
