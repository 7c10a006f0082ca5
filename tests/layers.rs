//! The layers, as the workspace's manifests declare them: each crate of `crates/` may depend
//! (its dependencies, and its tests' except the test support) only on the crates below it in
//! [`LAYERS`], and the binary on any. An
//! upward dependency between two layers that already depend on each other would not even build
//! (Cargo refuses cycles); this test also holds the order for layers that do not, and makes
//! the map one list to read.

use std::path::Path;

/// Bottom first: a crate may use the ones before it.
const LAYERS: &[&str] = &[
    "svm-devcerts",
    "svm-storage",
    "svm-registry",
    "svm-api",
    "svm-server",
    "svm-cluster",
    "svm-controllers",
];

/// The `svm-*` crates named in one `[section]` of a manifest.
fn workspace_deps(manifest: &str, section: &str) -> Vec<String> {
    let mut in_section = false;
    let mut deps = Vec::new();
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_section = line == format!("[{section}]");
            continue;
        }
        if !in_section {
            continue;
        }
        let name = line
            .split(['=', '.', ' '])
            .next()
            .unwrap_or_default()
            .trim();
        if name.starts_with("svm-") {
            deps.push(name.to_string());
        }
    }
    deps
}

fn manifest(dir: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("crates")
        .join(dir)
        .join("Cargo.toml");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn every_crate_depends_only_on_the_layers_below_it() {
    let mut problems = Vec::new();
    for (index, name) in LAYERS.iter().enumerate() {
        let dir = name.trim_start_matches("svm-");
        let manifest = manifest(dir);
        // A crate's own tests may use a layer below it and the test support, never one above.
        let deps = workspace_deps(&manifest, "dependencies").into_iter().chain(
            workspace_deps(&manifest, "dev-dependencies")
                .into_iter()
                .filter(|dep| dep != "svm-test-support"),
        );
        for dep in deps {
            match LAYERS.iter().position(|layer| *layer == dep) {
                Some(at) if at < index => {}
                Some(_) => problems.push(format!("{name} depends on {dep}, a layer above it")),
                None => problems.push(format!("{name} depends on {dep}, which is not a layer")),
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_crate_of_crates_is_a_layer() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates");
    let mut found: Vec<String> = std::fs::read_dir(&crates)
        .expect("crates/")
        .map(|entry| {
            format!(
                "svm-{}",
                entry.expect("entry").file_name().to_string_lossy()
            )
        })
        .collect();
    found.sort();
    let mut layers: Vec<String> = LAYERS.iter().map(|s| s.to_string()).collect();
    layers.sort();
    assert_eq!(
        found, layers,
        "crates/ and LAYERS must name the same crates"
    );
}

#[test]
fn the_reader_sees_what_a_manifest_says() {
    let manifest = "[package]\nname = \"x\"\n\n[dependencies]\nserde.workspace = true\nsvm-storage.workspace = true\nsvm-api = { workspace = true }\n\n[dev-dependencies]\nsvm-server.workspace = true\n";
    assert_eq!(
        workspace_deps(manifest, "dependencies"),
        ["svm-storage", "svm-api"]
    );
    assert_eq!(workspace_deps(manifest, "dev-dependencies"), ["svm-server"]);
}
