//! The layers, as the workspace's manifests declare them: each crate of `crates/` may depend
//! (its dependencies, and its tests' except the test support) only on the crates of the
//! layers below its own in [`LAYERS`] — never on one of its own layer, so the controllers
//! stay apart from each other — and the binary on any. An upward dependency between two
//! layers that already depend on each other would not even build (Cargo refuses cycles);
//! this test also holds the order for layers that do not, and makes the map one list to read.
//!
//! Inside each crate (`files.rs`): no circle of files — a module's own file that uses its
//! children is above them, and none of them imports from it.

#[path = "layers/files.rs"]
mod files;

use std::path::Path;

/// Bottom first: a crate may use the crates of the layers before its own.
const LAYERS: &[&[&str]] = &[
    &["svm-devcerts"],
    &["svm-storage"],
    &["svm-registry"],
    &["svm-api"],
    &["svm-server"],
    &["svm-cluster"],
    &["svm-runtime"],
    &[
        "svm-trigger",
        "svm-migrator",
        "svm-volumes",
        "svm-apimode",
        "svm-ksvm",
        "svm-dataplane",
    ],
    &["svm-controllers"],
];

/// The layer `name` is in.
fn layer_of(name: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&name))
}

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
    for name in LAYERS.iter().flat_map(|layer| layer.iter()) {
        let index = layer_of(name).expect("a layer");
        let dir = name.trim_start_matches("svm-");
        let manifest = manifest(dir);
        // A crate's own tests may use a layer below it and the test support, never one above.
        let deps = workspace_deps(&manifest, "dependencies").into_iter().chain(
            workspace_deps(&manifest, "dev-dependencies")
                .into_iter()
                .filter(|dep| dep != "svm-test-support"),
        );
        for dep in deps {
            match layer_of(&dep) {
                Some(at) if at < index => {}
                Some(at) if at == index => {
                    problems.push(format!("{name} depends on {dep}, of its own layer"))
                }
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
    let mut layers: Vec<String> = LAYERS
        .iter()
        .flat_map(|layer| layer.iter())
        .map(|s| s.to_string())
        .collect();
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

/// The sources of every crate of `crates/` and of the binary.
fn every_crate_source() -> Vec<std::path::PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut sources: Vec<_> = std::fs::read_dir(root.join("crates"))
        .expect("crates/")
        .map(|entry| entry.expect("entry").path().join("src"))
        .collect();
    sources.sort();
    sources.push(root.join("src"));
    sources
}

#[test]
fn no_file_imports_in_a_circle() {
    let mut problems = Vec::new();
    for src in every_crate_source() {
        let modules = files::modules(&src);
        let edges = files::imports(&modules);
        for circle in files::circles(&edges) {
            let inside: Vec<String> = circle
                .iter()
                .flat_map(|from| {
                    edges[from]
                        .iter()
                        .filter(|to| circle.contains(to))
                        .map(move |to| format!("{} → {}", files::shown(from), files::shown(to)))
                })
                .collect();
            problems.push(format!(
                "{}: a circle of files: {}",
                src.display(),
                inside.join(", ")
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The drawing of a made-up crate: the rule must see a circle through a module that uses its
/// child, follow a re-export, and not see comments, re-exports or tests.
#[test]
fn the_file_drawing_sees_circles_and_follows_reexports() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path();
    let write = |name: &str, text: &str| {
        let path = src.join(name);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("dir");
        std::fs::write(path, text).expect("write");
    };
    write(
        "lib.rs",
        "mod a;\nmod b;\nmod c;\nmod d;\nmod e;\npub use c::Shared;\n/// [`crate::b`]\npub struct Root;\nfn f() { e::g() }\n",
    );
    write("a.rs", "use crate::b::{Thing, other::More};\n");
    write("b.rs", "use super::a;\npub struct Thing;\n");
    write("b/other.rs", "pub struct More;\n");
    write("c.rs", "use crate::Root;\npub struct Shared;\n");
    write(
        "d.rs",
        "use crate::Shared;\n#[cfg(test)]\nmod tests {\n    use crate::Root;\n}\n",
    );
    write("e.rs", "pub fn g() { crate::f() }\n");
    let modules = files::modules(src);
    let edges = files::imports(&modules);
    let path = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        edges[&path(&["a"])],
        [path(&["b"]), path(&["b", "other"])].into_iter().collect()
    );
    // The root uses `e`, which uses the root: a circle. `c` imports from the root, which only
    // re-exports it: none.
    assert_eq!(
        files::circles(&edges),
        vec![
            vec![path(&[]), path(&["e"])],
            vec![path(&["a"]), path(&["b"])]
        ]
    );
    // `crate::Shared` is followed to the file that defines it; the test module is not read.
    assert_eq!(edges[&path(&["d"])], [path(&["c"])].into_iter().collect());
    // Neither a doc link nor a re-export is an import: the root imports `e` alone.
    assert_eq!(edges[&path(&[])], [path(&["e"])].into_iter().collect());
}

/// The longest a function of product code may be, in lines from `fn` to its closing brace.
const MAX_FUNCTION_LINES: usize = 60;

/// Functions that are one literal, not logic: the OpenAPI schemas of our kinds, written as the
/// JSON they are (splitting one would only scatter the document).
const ONE_LITERAL: &[(&str, &str)] = &[
    ("crates/api/src/migration/schema.rs", "definitions"),
    ("crates/api/src/storagestate.rs", "definitions"),
    ("crates/api/src/volumes.rs", "definitions"),
    ("crates/registry/src/openapi_meta.rs", "definitions"),
];

#[test]
fn no_function_of_the_product_is_longer_than_a_reader_takes_in_at_a_glance() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut long = Vec::new();
    for src in every_crate_source() {
        for module in files::modules(&src).values() {
            let file = module.file.strip_prefix(root).unwrap_or(&module.file);
            let file = file.to_string_lossy().replace('\\', "/");
            for function in files::functions(&module.code) {
                let literal = ONE_LITERAL.contains(&(file.as_str(), function.name.as_str()));
                if function.lines > MAX_FUNCTION_LINES && !literal {
                    long.push(format!(
                        "{file}:{}: fn {} ({} lines)",
                        function.line, function.name, function.lines
                    ));
                }
            }
        }
    }
    assert!(
        long.is_empty(),
        "{} functions over {MAX_FUNCTION_LINES} lines:\n{}",
        long.len(),
        long.join("\n")
    );
}

#[test]
fn function_lengths_count_braces_outside_literals() {
    let code = "fn short() {\n    let c = '{';\n    let s = \"}}}\";\n}\n\npub(crate) async fn two_lines() -> u8 { 1 }\nfn declared();\n";
    let found: Vec<(String, usize)> = files::functions(code)
        .into_iter()
        .map(|f| (f.name, f.lines))
        .collect();
    assert_eq!(
        found,
        [("short".to_string(), 4), ("two_lines".to_string(), 1)]
    );
}
