//! The volume controller's test hooks (`SVM_TEST_VOLUME_HOOKS`, `crates/volumes/src/hooks.rs`)
//! are in the test builds and in no product build. They are compiled only with the
//! `test-hooks` feature, which the binary's dev-dependency on svm-controllers turns on: a build
//! with dev-dependencies (`cargo test`, `cargo bench`, what `make test` runs) has them, one
//! without (`cargo build --release`: `make build`, `make run`, `make image`) does not.
//!
//! Building a release binary here to look inside it would cost `make test` minutes; so this
//! asks cargo how it resolves the features of each kind of build (about a second), and looks
//! inside the binary this test build did produce with `hack/no-test-hooks.sh`, the check
//! `make build` and `make image` run on the release binaries they build.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::support;

/// What `cargo tree` prints for the feature when a build turns it on.
const HOOKS_ON: &str = r#"svm-volumes feature "test-hooks""#;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// svm-volumes' features in the binary's build with the dependency `edges` (`normal,build` for
/// a product build, with `dev` for a test build), for every target (the image's musl one
/// included), as cargo resolves them, each with what turned it on. Inverted (`-i`), because the
/// binary package's own features (a `default` that names `test-hooks`) show only so.
fn resolved_features(edges: &str) -> String {
    // The cargo running this test (cargo sets CARGO for the tests it runs; a test binary run
    // another way falls back to the one that compiled it).
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let output = Command::new(cargo)
        .args(["tree", "--locked", "--offline", "--manifest-path"])
        .arg(root().join("Cargo.toml"))
        .args([
            "-p",
            "svm-apiserver",
            "-i",
            "svm-volumes",
            "--target",
            "all",
        ])
        .args(["--prefix", "none", "-e"])
        .arg(format!("{edges},features"))
        .output()
        .expect("run cargo tree");
    assert!(
        output.status.success(),
        "cargo tree: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8")
}

#[test]
fn a_product_build_resolves_without_the_test_hooks_and_a_test_build_with_them() {
    let product = resolved_features("normal,build");
    assert!(
        product.contains("svm-volumes v"),
        "the product's build has the volume controller:\n{product}"
    );
    assert!(
        !product.contains(r#"feature "test-hooks""#),
        "a product build (no dev-dependencies: cargo build --release, make run, make image) \
         would compile the test hooks in (only a dev-dependency may ask for the test-hooks \
         feature); cargo tree -e normal,build,features -i svm-volumes says:\n{product}"
    );
    // The same question for the test build sees the feature: the check above can fail.
    let tests = resolved_features("normal,build,dev");
    assert!(
        tests.contains(HOOKS_ON),
        "a test build must have the test hooks (tests/real_cluster/volumes/crashes.rs uses \
         them): the dev-dependency on svm-controllers must ask for its test-hooks feature"
    );
}

fn no_test_hooks(binary: &Path) -> (bool, String) {
    let output = Command::new(root().join("hack/no-test-hooks.sh"))
        .arg(binary)
        .output()
        .expect("run hack/no-test-hooks.sh");
    let code = output.status.code();
    assert!(
        matches!(code, Some(0 | 1)),
        "hack/no-test-hooks.sh {}: {code:?}: {}",
        binary.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn the_test_build_carries_the_hooks_and_the_binary_check_finds_them() {
    // The svm-apiserver this test build started its servers with.
    let binary = support::svm_apiserver_binary();
    let (clean, said) = no_test_hooks(&binary);
    assert!(
        !clean,
        "{} has no test hooks: the real-cluster crash test could not stop it at its points",
        binary.display()
    );
    assert!(said.contains("SVM_TEST_VOLUME_HOOKS"), "{said}");

    // A file with neither marker passes; one with either is refused.
    let dir = tempfile::tempdir().expect("tempdir");
    let file = |name: &str, bytes: &[u8]| -> PathBuf {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).expect("write");
        path
    };
    assert!(no_test_hooks(&file("plain", b"\x7fELF svm-apiserver serve\0")).0);
    assert!(!no_test_hooks(&file("variable", b"\0SVM_TEST_VOLUME_HOOKS\0")).0);
    assert!(!no_test_hooks(&file("line", b"\0test hook: halted after save\0")).0);
}

#[test]
fn make_build_and_make_image_check_the_binaries_they_build() {
    let read = |path: &str| std::fs::read_to_string(root().join(path)).expect(path);
    let makefile = read("Makefile");
    assert!(
        makefile.contains(
            "hack/no-test-hooks.sh \"$${CARGO_TARGET_DIR:-target}/release/svm-apiserver\""
        ),
        "make build checks its binary"
    );
    let image = read("hack/image.sh");
    assert!(
        image.contains("hack/no-test-hooks.sh \"$context/svm-apiserver\""),
        "hack/image.sh checks the binary it packages"
    );
    // Their release builds ask for no feature (make chaos, a test build, has the hooks from the
    // dev-dependency, not from its command line).
    for (name, text) in [("Makefile", &makefile), ("hack/image.sh", &image)] {
        let builds: Vec<&str> = text
            .lines()
            .filter(|line| line.contains(" --release"))
            .collect();
        assert!(!builds.is_empty(), "{name} builds a release binary");
        for line in builds {
            assert!(
                !line.contains("test-hooks") && !line.contains("--all-features"),
                "{name}: a release build with the test hooks: {line}"
            );
        }
    }
}
