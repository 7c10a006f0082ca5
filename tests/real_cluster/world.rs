//! Reading the cluster's state the way a user would: kubectl through the aggregator.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::real_cluster::RealCluster;

/// `kubectl get <what> -o json`'s items.
pub fn items(cluster: &RealCluster, what: &str) -> Vec<Value> {
    let out = cluster.kubectl().ok(&["get", what, "-o", "json"]);
    let list: Value = serde_json::from_str(&out).expect("kubectl printed JSON");
    list["items"].as_array().cloned().unwrap_or_default()
}

/// The condition types whose status is "True".
pub fn true_conditions(migration: &Value) -> Vec<String> {
    migration["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["status"] == "True")
        .filter_map(|c| c["type"].as_str().map(str::to_string))
        .collect()
}

pub fn name(object: &Value) -> String {
    object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// A StorageState is safe when its persisted hashes are exactly `[current]`.
pub fn is_safe(state: &Value) -> bool {
    let status = &state["status"];
    let current = status["currentStorageVersionHash"].as_str().unwrap_or("");
    !current.is_empty()
        && current != "Unknown"
        && status["persistedStorageVersionHashes"] == serde_json::json!([current])
}

/// Poll `check` until it gives `Some`, or fail with what `describe` says after `limit` (a hang
/// guard, not a speed check).
pub fn wait_for<T>(
    limit: Duration,
    what: &str,
    mut check: impl FnMut() -> Option<T>,
    describe: impl Fn() -> String,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within {limit:?}\n{}",
            describe()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}
