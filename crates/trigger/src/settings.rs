//! The trigger's knobs (flags of `serve`).

use std::time::Duration;

/// The trigger's knobs (flags of `serve`).
#[derive(Clone, Debug)]
pub struct Settings {
    /// How often aggregated discovery is polled (an unchanged cluster answers 304).
    pub discovery_interval: Duration,
    /// How often each StorageState's `lastHeartbeatTime` (and the observer record) is
    /// refreshed while nothing changes.
    pub heartbeat_interval: Duration,
    /// How long the trigger may be away (its last record of what it vouched for) and still
    /// vouch for built-in resources on its return.
    pub vouch_window: Duration,
    /// `(group, resource)` never tracked.
    pub ignored: Vec<(String, String)>,
    /// Groups served by this server (its objects are in its own store, not the cluster's):
    /// never tracked. Upstream's group is ours only in owner mode.
    pub own_groups: Vec<String>,
    /// `(group, resource)` encrypted at rest: a key rotation migrates them. Empty: kube-apiserver's
    /// `/metrics` is never read.
    pub encryption_resources: Vec<(String, String)>,
    /// How often kube-apiserver's `/metrics` is read for its encryption generation.
    pub encryption_interval: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            discovery_interval: Duration::from_secs(10),
            heartbeat_interval: Duration::from_secs(300),
            vouch_window: Duration::from_secs(3600),
            ignored: parse_resources("events,events.events.k8s.io"),
            own_groups: vec![svm_api::GROUP.into(), svm_api::PROJECT.name.into()],
            encryption_resources: parse_resources("secrets"),
            encryption_interval: Duration::from_secs(10),
        }
    }
}

/// `events,deployments.apps` → `[("", "events"), ("apps", "deployments")]`.
pub fn parse_resources(list: &str) -> Vec<(String, String)> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| match s.split_once('.') {
            Some((resource, group)) => (group.to_string(), resource.to_string()),
            None => (String::new(), s.to_string()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_lists_parse() {
        assert_eq!(
            parse_resources("events, events.events.k8s.io,,deployments.apps"),
            [
                ("".to_string(), "events".to_string()),
                ("events.k8s.io".into(), "events".into()),
                ("apps".into(), "deployments".into())
            ]
        );
    }
}
