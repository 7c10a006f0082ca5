//! The replica guards: whether a node may go, and whether it came back whole.
//!
//! A guard names a kind of replica object (Longhorn's `replicas.longhorn.io`, LINSTOR's
//! resources, …), the field that says its node, the one that says its volume, and when it is
//! healthy. Before a node goes, every volume with a replica on it must keep
//! `minHealthyElsewhere` healthy replicas on nodes that stay up ([`shortfalls`]); after the
//! node's new engine is Ready, every replica of those volumes must be healthy again
//! ([`unrebuilt`]). Each answer names what holds the node, for a person to act on.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::Value;
use svm_api::dataplane::{HealthRule, ReplicaGuard};

/// One replica object, as its guard reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replica {
    /// The guard that read it.
    pub guard: String,
    /// Its volume.
    pub volume: String,
    /// Its node; empty while it is not placed.
    pub node: String,
    /// Whether the guard's health rule holds.
    pub healthy: bool,
}

/// A volume short of healthy replicas on the nodes that stay up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shortfall {
    /// The guard.
    pub guard: String,
    /// The volume.
    pub volume: String,
    /// Its healthy replicas on nodes that stay up.
    pub healthy_elsewhere: usize,
    /// How many it must keep.
    pub needed: usize,
}

impl fmt::Display for Shortfall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let plural = if self.healthy_elsewhere == 1 { "" } else { "s" };
        write!(
            f,
            "{} volume {}: {} healthy replica{plural} on other nodes, {} needed",
            self.guard, self.volume, self.healthy_elsewhere, self.needed
        )
    }
}

/// A replica of an affected volume not healthy yet after the node came back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unrebuilt {
    /// The guard.
    pub guard: String,
    /// The volume.
    pub volume: String,
    /// The replica's node (empty: not placed yet).
    pub node: String,
}

impl fmt::Display for Unrebuilt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let node = if self.node.is_empty() {
            "no node yet"
        } else {
            &self.node
        };
        write!(
            f,
            "{} volume {}: a replica on {node} is not healthy yet",
            self.guard, self.volume
        )
    }
}

/// `object` as `guard` reads it; `None` when it names no volume (not a replica we can judge).
/// A namespaced replica's volume is known as `<namespace>/<volume>`: two namespaces' volumes of
/// the same name are two volumes.
pub fn read_replica(guard: &ReplicaGuard, object: &Value) -> Option<Replica> {
    let volume = text_at(object, &guard.volume_field).filter(|v| !v.is_empty())?;
    let volume = match text_at(object, "metadata.namespace").filter(|ns| !ns.is_empty()) {
        Some(namespace) => format!("{namespace}/{volume}"),
        None => volume,
    };
    Some(Replica {
        guard: guard.name.clone(),
        volume,
        node: text_at(object, &guard.node_field).unwrap_or_default(),
        healthy: is_healthy(&guard.healthy, object),
    })
}

/// The string (or number, or boolean) at the dotted `path` of `object`.
fn text_at(object: &Value, path: &str) -> Option<String> {
    let pointer: String = path
        .split('.')
        .map(|segment| format!("/{segment}"))
        .collect();
    match object.pointer(&pointer)? {
        Value::String(text) => Some(text.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn is_healthy(rule: &HealthRule, object: &Value) -> bool {
    if !rule.condition.is_empty() {
        return object
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|conditions| {
                conditions
                    .iter()
                    .any(|c| c["type"] == rule.condition.as_str() && c["status"] == "True")
            });
    }
    text_at(object, &rule.field).is_some_and(|value| value == rule.value)
}

/// The volumes that keep `node` from going: for every guard, each volume with a replica on
/// `node` that has fewer than the guard's `minHealthyElsewhere` healthy replicas on nodes not
/// in `down` (`node` itself and the nodes of the rollout that are not back yet).
pub fn shortfalls(
    node: &str,
    down: &BTreeSet<String>,
    guards: &[ReplicaGuard],
    replicas: &[Replica],
) -> Vec<Shortfall> {
    let mut short = Vec::new();
    for guard in guards {
        let needed = usize::try_from(guard.min_healthy_elsewhere()).unwrap_or(1);
        let theirs: Vec<&Replica> = replicas.iter().filter(|r| r.guard == guard.name).collect();
        for volume in volumes_on(node, &theirs) {
            let healthy_elsewhere = theirs
                .iter()
                .filter(|r| r.volume == volume && r.healthy)
                .filter(|r| !r.node.is_empty() && r.node != node && !down.contains(&r.node))
                .count();
            if healthy_elsewhere < needed {
                short.push(Shortfall {
                    guard: guard.name.clone(),
                    volume,
                    healthy_elsewhere,
                    needed,
                });
            }
        }
    }
    short
}

/// The replicas, of the volumes `node` held replicas of before it went (`affected`, by
/// guard), that are not healthy: the rebuild is done when there are none.
pub fn unrebuilt(
    affected: &BTreeMap<String, BTreeSet<String>>,
    replicas: &[Replica],
) -> Vec<Unrebuilt> {
    replicas
        .iter()
        .filter(|r| !r.healthy)
        .filter(|r| {
            affected
                .get(&r.guard)
                .is_some_and(|volumes| volumes.contains(&r.volume))
        })
        .map(|r| Unrebuilt {
            guard: r.guard.clone(),
            volume: r.volume.clone(),
            node: r.node.clone(),
        })
        .collect()
}

/// The volumes of each guard with a replica on `node`, by guard: what its rebuild waits for.
pub fn affected(node: &str, replicas: &[Replica]) -> BTreeMap<String, BTreeSet<String>> {
    let mut affected: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for replica in replicas.iter().filter(|r| r.node == node) {
        affected
            .entry(replica.guard.clone())
            .or_default()
            .insert(replica.volume.clone());
    }
    affected
}

fn volumes_on(node: &str, replicas: &[&Replica]) -> BTreeSet<String> {
    replicas
        .iter()
        .filter(|r| r.node == node)
        .map(|r| r.volume.clone())
        .collect()
}

#[cfg(test)]
mod tests;
