//! `make image` builds `svm-apiserver:<Cargo.toml version>`; deploy/ must run that same image,
//! as the same non-root user the Containerfile sets.

use std::path::Path;

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .unwrap_or_else(|e| panic!("read {path}: {e}"))
}

fn yaml(path: &str) -> serde_norway::Value {
    serde_norway::from_str(&read(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn the_image_name_tag_and_user_agree_across_containerfile_makefile_and_deploy() {
    let version = env!("CARGO_PKG_VERSION");
    // hack/image.sh: the default name, and the tag read from Cargo.toml's version.
    let script = read("hack/image.sh");
    assert!(
        script.contains(r#"IMAGE="${IMAGE:-svm-apiserver}""#),
        "hack/image.sh's default image name changed"
    );
    assert!(script.contains(r#"--tag "$IMAGE:$VERSION""#), "{script}");
    assert!(script.contains(r#"sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml"#));
    let makefile = read("Makefile");
    assert!(
        makefile.contains("\n\t@hack/image.sh\n"),
        "make image runs hack/image.sh"
    );

    // deploy/base: the kustomize image override names the same image and tag.
    let kustomization = yaml("deploy/base/kustomization.yaml");
    let images = kustomization["images"].as_sequence().expect("images");
    assert_eq!(images.len(), 1, "{images:?}");
    assert_eq!(images[0]["name"].as_str(), Some("svm-apiserver"));
    assert_eq!(
        images[0]["newName"].as_str(),
        None,
        "no other registry by default"
    );
    assert_eq!(
        images[0]["newTag"].as_str(),
        Some(version),
        "deploy/base/kustomization.yaml's newTag must be Cargo.toml's version (what make image tags)"
    );
    let deployment = yaml("deploy/base/deployment.yaml");
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(container["image"].as_str(), Some("svm-apiserver"));

    // Containerfile: scratch, the version label from the build argument, the same user.
    let containerfile = read("Containerfile");
    let instructions: Vec<&str> = containerfile
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .collect();
    assert_eq!(instructions.first(), Some(&"FROM scratch"));
    assert!(instructions.contains(&"ARG VERSION"));
    assert!(containerfile.contains(r#"org.opencontainers.image.version="${VERSION}""#));
    assert!(script.contains(r#"--build-arg "VERSION=$VERSION""#));
    let user = instructions
        .iter()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("a USER instruction");
    let (uid, gid) = user.split_once(':').expect("USER uid:gid");
    assert_ne!(uid, "0", "the image runs as a non-root user");
    assert_eq!(
        pod["securityContext"]["runAsUser"]
            .as_u64()
            .map(|u| u.to_string()),
        Some(uid.to_string())
    );
    assert_eq!(
        pod["securityContext"]["runAsGroup"]
            .as_u64()
            .map(|g| g.to_string()),
        Some(gid.to_string())
    );
    assert!(instructions.contains(&r#"ENTRYPOINT ["/svm-apiserver"]"#));
    assert_eq!(container["args"][0].as_str(), Some("serve"));
}
