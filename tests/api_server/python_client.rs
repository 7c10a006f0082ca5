//! The Python kubernetes client's `server_side_apply` (DynamicClient), installed into .venv
//! by `make test` (hack/ensure-deps.sh python-client), against the real binary.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use crate::support::server::{Backend, ServerProcess};

#[test]
fn python_client_server_side_apply_on_both_kinds() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = root.join(".venv/bin/python");
    let probe = Command::new(&python)
        .args(["-c", "import kubernetes"])
        .output();
    assert!(
        probe.is_ok_and(|o| o.status.success()),
        "the Python kubernetes client is not in .venv — run `make test` (hack/ensure-deps.sh python-client installs it)"
    );
    let server = ServerProcess::start(Backend::Embedded);
    let out = Command::new(&python)
        .arg(root.join("tests/api_server/python/server_side_apply.py"))
        .arg(&server.kubeconfig)
        .output()
        .expect("run python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "python failed:\n{stdout}\n{stderr}");
    let seen: Value = serde_json::from_str(stdout.trim()).expect("the script prints JSON");
    for kind in ["StorageVersionMigration", "StorageState"] {
        let seen = &seen[kind];
        assert_eq!(seen["manager"], "python-client", "{kind}");
        assert_eq!(seen["operation"], "Apply", "{kind}");
        assert_eq!(
            seen["fields"],
            json!({"f:metadata": {"f:labels": {"f:owner": {}}}, "f:spec": {"f:resource": {"f:group": {}, "f:resource": {}}}}),
            "{kind}"
        );
        assert_eq!(seen["conflict"]["status"], 409, "{kind}");
        assert_eq!(
            seen["conflict"]["body"]["message"],
            "Apply failed with 1 conflict: conflict with \"python-client\": .metadata.labels.owner",
            "{kind}"
        );
        assert_eq!(seen["forced_owner"], "someone-else", "{kind}");
        // Sorted by time first: which comes first depends on the clock's second.
        let mut managers: Vec<&str> = seen["forced_managers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        managers.sort();
        assert_eq!(managers, vec!["other", "python-client"], "{kind}");
    }
}
