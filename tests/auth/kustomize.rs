//! `kubectl kustomize deploy/` with the real kubectl 1.37: every rendered object must decode
//! into its k8s-openapi type and re-serialize to exactly what was rendered (so a misspelled or
//! misplaced field fails), and the objects must fit together.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Namespace, Secret, Service, ServiceAccount};
use k8s_openapi::api::flowcontrol::v1::{FlowSchema, PriorityLevelConfiguration};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use svm_devcerts as devcerts;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// kubectl from `$SVM_KUBECTL` or `.venv/bin/kubectl`; never skipped when missing.
fn kubectl() -> PathBuf {
    let bin = std::env::var_os("SVM_KUBECTL")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".venv/bin/kubectl"));
    assert!(
        bin.exists(),
        "kubectl not found at {} — run make test (it installs kubectl 1.37 into .venv)",
        bin.display()
    );
    bin
}

/// Copy a directory's committed files (not generated keys) into `to`.
fn copy_sources(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let path = entry.expect("entry").path();
        let generated = matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("crt" | "key" | "pem")
        );
        if path.is_file() && !generated {
            std::fs::copy(&path, to.join(path.file_name().expect("name"))).expect("copy");
        }
    }
}

pub(crate) struct Rendered {
    objects: Vec<Value>,
    certs: devcerts::DevCertFiles,
    _dir: tempfile::TempDir,
}

/// Render `deploy/<overlay>` as `make certs && kubectl apply -k deploy/<overlay>` would, on a
/// copy of the tree with fresh development certificates.
pub(crate) fn render(overlay: &str) -> Rendered {
    let dir = tempfile::tempdir().expect("tempdir");
    for sub in [
        "deploy",
        "deploy/base",
        "deploy/external-etcd",
        "deploy/companion",
        "apiservice",
        "apiservice/project",
        "apiservice/companion",
        "certs",
    ] {
        copy_sources(&repo().join(sub), &dir.path().join(sub));
    }
    let certs = devcerts::generate(&dir.path().join("certs")).expect("certs");
    let output = Command::new(kubectl())
        .arg("kustomize")
        .arg(dir.path().join("deploy").join(overlay))
        .output()
        .expect("run kubectl");
    assert!(
        output.status.success(),
        "kubectl kustomize failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).expect("utf8");
    let objects = serde_norway::Deserializer::from_str(&text)
        .map(|doc| {
            serde_json::to_value(serde_norway::Value::deserialize(doc).expect("yaml"))
                .expect("json")
        })
        .filter(|v| !v.is_null())
        .collect();
    Rendered {
        objects,
        certs,
        _dir: dir,
    }
}

use serde::Deserialize;

/// kube-apiserver decodes base64 bytes ignoring line breaks, and kustomize wraps long values:
/// compare them unwrapped.
fn unwrap_base64(object: &mut Value) {
    let strip = |v: &mut Value| {
        if let Some(s) = v.as_str() {
            *v = Value::String(s.split_whitespace().collect());
        }
    };
    match object["kind"].as_str() {
        Some("Secret") => {
            if let Some(data) = object["data"].as_object_mut() {
                data.values_mut().for_each(strip);
            }
        }
        Some("APIService") => strip(&mut object["spec"]["caBundle"]),
        _ => {}
    }
}

/// Decode as `T` and require every rendered field to survive re-serialization with its value:
/// fields `T` does not know (typos, wrong nesting) are dropped by the decode and show up as a
/// difference. (Fields only the re-serialization has are type defaults, e.g. the apiVersion
/// and kind k8s-openapi writes on an embedded PersistentVolumeClaim template.)
fn strict<T: DeserializeOwned + Serialize>(object: &Value) -> T {
    let typed: T = serde_json::from_value(object.clone())
        .unwrap_or_else(|err| panic!("{} {}: {err}", object["kind"], object["metadata"]["name"]));
    let back = serde_json::to_value(&typed).expect("serialize");
    if let Some(path) = first_difference(object, &back, String::new()) {
        panic!(
            "{} {}: field {path} does not survive decoding (unknown or misplaced)",
            object["kind"], object["metadata"]["name"]
        );
    }
    typed
}

fn first_difference(a: &Value, b: &Value, path: String) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => x.iter().find_map(|(k, p)| match y.get(k) {
            Some(q) => first_difference(p, q, format!("{path}.{k}")),
            None => Some(format!("{path}.{k}")),
        }),
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (p, q))| first_difference(p, q, format!("{path}[{i}]"))),
        _ => (a != b).then_some(path),
    }
}

#[derive(Default)]
pub(crate) struct Objects {
    namespaces: Vec<Namespace>,
    service_accounts: Vec<ServiceAccount>,
    pub(crate) cluster_roles: Vec<ClusterRole>,
    pub(crate) cluster_role_bindings: Vec<ClusterRoleBinding>,
    pub(crate) roles: Vec<Role>,
    pub(crate) role_bindings: Vec<RoleBinding>,
    deployments: Vec<Deployment>,
    stateful_sets: Vec<StatefulSet>,
    services: Vec<Service>,
    secrets: Vec<Secret>,
    pdbs: Vec<PodDisruptionBudget>,
    network_policies: Vec<NetworkPolicy>,
    api_services: Vec<APIService>,
    pub(crate) flow_schemas: Vec<FlowSchema>,
    pub(crate) priority_levels: Vec<PriorityLevelConfiguration>,
}

pub(crate) fn decode_all(rendered: &Rendered) -> Objects {
    let mut objects = Objects::default();
    for object in &rendered.objects {
        let mut object = object.clone();
        unwrap_base64(&mut object);
        let gvk = (
            object["apiVersion"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            object["kind"].as_str().unwrap_or_default().to_string(),
        );
        match (gvk.0.as_str(), gvk.1.as_str()) {
            ("v1", "Namespace") => objects.namespaces.push(strict(&object)),
            ("v1", "ServiceAccount") => objects.service_accounts.push(strict(&object)),
            ("v1", "Service") => objects.services.push(strict(&object)),
            ("v1", "Secret") => objects.secrets.push(strict(&object)),
            ("rbac.authorization.k8s.io/v1", "ClusterRole") => {
                objects.cluster_roles.push(strict(&object))
            }
            ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
                objects.cluster_role_bindings.push(strict(&object))
            }
            ("rbac.authorization.k8s.io/v1", "Role") => objects.roles.push(strict(&object)),
            ("rbac.authorization.k8s.io/v1", "RoleBinding") => {
                objects.role_bindings.push(strict(&object))
            }
            ("apps/v1", "Deployment") => objects.deployments.push(strict(&object)),
            ("apps/v1", "StatefulSet") => objects.stateful_sets.push(strict(&object)),
            ("policy/v1", "PodDisruptionBudget") => objects.pdbs.push(strict(&object)),
            ("networking.k8s.io/v1", "NetworkPolicy") => {
                objects.network_policies.push(strict(&object))
            }
            ("apiregistration.k8s.io/v1", "APIService") => {
                objects.api_services.push(strict(&object))
            }
            ("flowcontrol.apiserver.k8s.io/v1", "FlowSchema") => {
                objects.flow_schemas.push(strict(&object))
            }
            ("flowcontrol.apiserver.k8s.io/v1", "PriorityLevelConfiguration") => {
                objects.priority_levels.push(strict(&object))
            }
            other => panic!("unexpected object {other:?} in deploy/"),
        }
    }
    objects
}

pub(crate) fn name_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> &str {
    meta.name.as_deref().unwrap_or_default()
}

pub(crate) fn namespace_of(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> &str {
    meta.namespace.as_deref().unwrap_or_default()
}

#[test]
fn deploy_renders_only_valid_objects_that_fit_together() {
    let rendered = render("");
    let objects = decode_all(&rendered);

    // Everything is there.
    assert_eq!(objects.namespaces.len(), 1);
    assert_eq!(name_of(&objects.namespaces[0].metadata), "svm-system");
    assert_eq!(objects.service_accounts.len(), 1);
    assert_eq!(objects.deployments.len(), 1);
    assert_eq!(objects.stateful_sets.len(), 1);
    assert_eq!(
        objects.services.len(),
        2,
        "svm-apiserver and the etcd headless Service"
    );
    assert_eq!(
        objects.secrets.len(),
        3,
        "serving certificate, etcd serving certificate, etcd client certificate"
    );
    assert_eq!(objects.pdbs.len(), 1);
    assert_eq!(objects.api_services.len(), 4);

    // Every namespaced object lives in svm-system, except the one binding kube-system needs.
    let mut namespaced: Vec<(&str, &str)> = Vec::new();
    namespaced.extend(
        objects
            .service_accounts
            .iter()
            .map(|o| (name_of(&o.metadata), namespace_of(&o.metadata))),
    );
    namespaced.extend(
        objects
            .deployments
            .iter()
            .map(|o| (name_of(&o.metadata), namespace_of(&o.metadata))),
    );
    namespaced.extend(
        objects
            .stateful_sets
            .iter()
            .map(|o| (name_of(&o.metadata), namespace_of(&o.metadata))),
    );
    namespaced.extend(
        objects
            .services
            .iter()
            .map(|o| (name_of(&o.metadata), namespace_of(&o.metadata))),
    );
    namespaced.extend(
        objects
            .secrets
            .iter()
            .map(|o| (name_of(&o.metadata), namespace_of(&o.metadata))),
    );
    namespaced.extend(
        objects
            .pdbs
            .iter()
            .map(|o| (name_of(&o.metadata), namespace_of(&o.metadata))),
    );
    namespaced.extend(
        objects
            .network_policies
            .iter()
            .map(|o| (name_of(&o.metadata), namespace_of(&o.metadata))),
    );
    // No Role of ours: the migrator's wildcard list/watch covers what the trigger reads in
    // kube-system (the identity leases).
    assert!(objects.roles.is_empty(), "{:?}", objects.roles);
    for (name, namespace) in namespaced {
        assert_eq!(namespace, "svm-system", "{name}");
    }
    let mut kube_system: Vec<(&str, &str)> = objects
        .role_bindings
        .iter()
        .filter(|b| namespace_of(&b.metadata) == "kube-system")
        .map(|b| (b.role_ref.kind.as_str(), b.role_ref.name.as_str()))
        .collect();
    kube_system.sort();
    assert_eq!(
        kube_system,
        [("Role", "extension-apiserver-authentication-reader")]
    );

    check_rbac(&objects);
    check_workloads(&objects);
    check_api_services(&objects, &rendered.certs);
    check_flow_control(&objects);
}

/// The migrator's priority level: its ServiceAccount's reads and PATCHes only (never the
/// creates that authenticate users' requests), ahead of the default service-accounts schema.
fn check_flow_control(objects: &Objects) {
    assert_eq!(objects.flow_schemas.len(), 1);
    assert_eq!(objects.priority_levels.len(), 1);
    let schema = &objects.flow_schemas[0].spec;
    assert_eq!(
        schema.priority_level_configuration.name,
        name_of(&objects.priority_levels[0].metadata)
    );
    assert!(schema.matching_precedence.is_some_and(|p| p < 9000));
    let rules = schema.rules.as_deref().unwrap_or_default();
    assert_eq!(rules.len(), 1);
    let subject = &rules[0].subjects[0];
    let account = subject
        .service_account
        .as_ref()
        .expect("a ServiceAccount subject");
    assert_eq!(
        (
            subject.kind.as_str(),
            account.name.as_str(),
            account.namespace.as_str()
        ),
        ("ServiceAccount", "svm-apiserver", "svm-system")
    );
    for rule in rules[0].resource_rules.as_deref().unwrap_or_default() {
        assert!(
            !rule.verbs.iter().any(|v| v == "create" || v == "*"),
            "{:?}",
            rule.verbs
        );
    }
    let level = &objects.priority_levels[0].spec;
    assert_eq!(level.type_, "Limited");
}

pub(crate) fn subject_is_our_service_account(
    subjects: &Option<Vec<k8s_openapi::api::rbac::v1::Subject>>,
) -> bool {
    subjects.as_deref().unwrap_or_default().iter().any(|s| {
        s.kind == "ServiceAccount"
            && s.name == "svm-apiserver"
            && s.namespace.as_deref() == Some("svm-system")
    })
}

fn check_rbac(objects: &Objects) {
    let delegator = objects
        .cluster_role_bindings
        .iter()
        .find(|b| b.role_ref.name == "system:auth-delegator")
        .expect("system:auth-delegator binding");
    assert!(subject_is_our_service_account(&delegator.subjects));
    assert!(
        objects
            .role_bindings
            .iter()
            .all(|b| subject_is_our_service_account(&b.subjects))
    );
    assert!(
        objects
            .cluster_role_bindings
            .iter()
            .all(|b| subject_is_our_service_account(&b.subjects))
    );

    // Every bound role exists (or is a built-in one).
    let built_in = [
        "system:auth-delegator",
        "extension-apiserver-authentication-reader",
    ];
    for binding in &objects.cluster_role_bindings {
        let name = &binding.role_ref.name;
        assert!(
            built_in.contains(&name.as_str())
                || objects
                    .cluster_roles
                    .iter()
                    .any(|r| name_of(&r.metadata) == name),
            "{name}"
        );
    }
    for binding in &objects.role_bindings {
        let name = &binding.role_ref.name;
        assert!(
            built_in.contains(&name.as_str())
                || objects.roles.iter().any(|r| name_of(&r.metadata) == name),
            "{name}"
        );
    }

    // Minimal verbs: never "*", and the wildcard resource rule only reads and patches.
    let rules: Vec<&PolicyRule> = objects
        .cluster_roles
        .iter()
        .flat_map(|r| r.rules.as_deref().unwrap_or_default())
        .chain(
            objects
                .roles
                .iter()
                .flat_map(|r| r.rules.as_deref().unwrap_or_default()),
        )
        .collect();
    for rule in &rules {
        assert!(!rule.verbs.iter().any(|v| v == "*"), "{rule:?}");
    }
    let wildcard: Vec<&&PolicyRule> = rules
        .iter()
        .filter(|r| {
            r.resources
                .as_deref()
                .unwrap_or_default()
                .iter()
                .any(|x| x == "*")
        })
        .collect();
    assert_eq!(wildcard.len(), 1);
    assert_eq!(wildcard[0].verbs, ["list", "watch", "patch"]);
    // Exactly what the server asks for and nothing more is checked in rbac_coverage.rs.
}

fn labels_match(
    selector: &BTreeMap<String, String>,
    labels: &Option<BTreeMap<String, String>>,
) -> bool {
    let labels = labels.clone().unwrap_or_default();
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

fn check_workloads(objects: &Objects) {
    let deployment = &objects.deployments[0];
    let spec = &deployment.spec;
    assert_eq!(spec.replicas, Some(2));
    let template = &spec.template;
    let pod_labels = template.metadata.as_ref().and_then(|m| m.labels.clone());
    let pod = template.spec.as_ref().expect("pod spec");
    assert_eq!(pod.service_account_name.as_deref(), Some("svm-apiserver"));
    let pod_security = pod.security_context.as_ref().expect("pod securityContext");
    assert_eq!(pod_security.run_as_non_root, Some(true));
    let container = &pod.containers[0];
    let security = container
        .security_context
        .as_ref()
        .expect("securityContext");
    assert_eq!(security.read_only_root_filesystem, Some(true));
    assert_eq!(security.allow_privilege_escalation, Some(false));
    let probe_path = |probe: &Option<k8s_openapi::api::core::v1::Probe>| {
        let get = probe
            .as_ref()
            .and_then(|p| p.http_get.as_ref())
            .expect("httpGet probe");
        assert_eq!(get.scheme.as_deref(), Some("HTTPS"));
        get.path.clone().unwrap_or_default()
    };
    assert_eq!(probe_path(&container.liveness_probe), "/livez");
    assert_eq!(probe_path(&container.readiness_probe), "/readyz");
    let resources = container.resources.as_ref().expect("resources");
    assert!(
        resources
            .requests
            .as_ref()
            .is_some_and(|r| r.contains_key("cpu") && r.contains_key("memory"))
    );
    assert!(
        resources
            .limits
            .as_ref()
            .is_some_and(|l| l.contains_key("memory"))
    );

    // The serving-cert volume is the generated Secret, mounted where the flags look.
    let mount = secret_mount(pod, container, "svm-apiserver-serving-cert");
    let args = container.args.clone().unwrap_or_default();
    assert!(args.contains(&format!("--tls-cert-file={mount}/tls.crt")));
    assert!(args.contains(&format!("--tls-private-key-file={mount}/tls.key")));
    // And etcd's client certificate, for the flags that reach etcd over TLS.
    let etcd_client = secret_mount(pod, container, "svm-apiserver-etcd-client");
    for flag in [
        format!("--etcd-cafile={etcd_client}/ca.crt"),
        format!("--etcd-certfile={etcd_client}/tls.crt"),
        format!("--etcd-keyfile={etcd_client}/tls.key"),
    ] {
        assert!(args.contains(&flag), "{args:?} lacks {flag}");
    }

    // The Service and the PDB select the Deployment's pods.
    let service = objects
        .services
        .iter()
        .find(|s| name_of(&s.metadata) == "svm-apiserver")
        .expect("service");
    let service_spec = service.spec.as_ref().expect("service spec");
    assert!(labels_match(
        &service_spec.selector.clone().unwrap_or_default(),
        &pod_labels
    ));
    let port = &service_spec.ports.as_deref().unwrap_or_default()[0];
    assert_eq!(port.port, 443);
    let pdb_selector = objects.pdbs[0]
        .spec
        .as_ref()
        .and_then(|s| s.selector.as_ref())
        .and_then(|s| s.match_labels.clone())
        .unwrap_or_default();
    assert!(labels_match(&pdb_selector, &pod_labels));

    // etcd: the address the Deployment is given resolves to the StatefulSet's first member.
    let etcd = &objects.stateful_sets[0];
    let etcd_spec = &etcd.spec;
    let etcd_service = etcd_spec.service_name.clone().unwrap_or_default();
    let expected = format!(
        "--etcd-servers=https://{}-0.{etcd_service}.svm-system.svc:2379",
        name_of(&etcd.metadata)
    );
    assert!(args.contains(&expected), "{args:?} lacks {expected}");
    // etcd serves TLS with its Secret and requires client certificates from its CA.
    let etcd_pod = etcd_spec.template.spec.as_ref().expect("etcd pod");
    let etcd_container = &etcd_pod.containers[0];
    let etcd_tls = secret_mount(etcd_pod, etcd_container, "svm-etcd-server-tls");
    let etcd_args = etcd_container.args.clone().unwrap_or_default();
    for flag in [
        "--client-cert-auth=true".to_string(),
        format!("--trusted-ca-file={etcd_tls}/ca.crt"),
        format!("--cert-file={etcd_tls}/tls.crt"),
        format!("--key-file={etcd_tls}/tls.key"),
        "--listen-client-urls=https://0.0.0.0:2379".to_string(),
    ] {
        assert!(etcd_args.contains(&flag), "{etcd_args:?} lacks {flag}");
    }
    assert!(
        objects
            .services
            .iter()
            .any(|s| name_of(&s.metadata) == etcd_service)
    );
}

/// Where the volume of Secret `secret` is mounted into `container` of `pod`.
fn secret_mount(
    pod: &k8s_openapi::api::core::v1::PodSpec,
    container: &k8s_openapi::api::core::v1::Container,
    secret: &str,
) -> String {
    let volume = pod
        .volumes
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|v| {
            v.secret
                .as_ref()
                .and_then(|s| s.secret_name.as_deref())
                .is_some_and(|name| name == secret)
        })
        .unwrap_or_else(|| panic!("no volume of Secret {secret}"));
    container
        .volume_mounts
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|m| m.name == volume.name)
        .unwrap_or_else(|| panic!("Secret {secret} is not mounted"))
        .mount_path
        .clone()
}

/// Every APIService points at our Service with the serving CA; upstream's group (when there)
/// has v1 preferred at kube-apiserver's own group priority, the project group sits just above.
fn check_api_services(objects: &Objects, certs: &devcerts::DevCertFiles) {
    let ca = std::fs::read(&certs.ca_cert).expect("ca");
    let mut versions: Vec<(i32, String)> = Vec::new();
    let mut project = 0;
    for api_service in &objects.api_services {
        let spec = api_service.spec.as_ref().expect("spec");
        let version = spec.version.clone().unwrap_or_default();
        let group = spec.group.clone().unwrap_or_default();
        assert_eq!(name_of(&api_service.metadata), format!("{version}.{group}"));
        if group == "storage.svm-apiserver.io" {
            assert_eq!(version, "v1alpha1");
            assert_eq!(spec.group_priority_minimum, 15900);
            project += 1;
        } else {
            assert_eq!(group, "storagemigration.k8s.io");
            assert_eq!(spec.group_priority_minimum, 15800);
            versions.push((spec.version_priority, version.clone()));
        }
        let service = spec.service.as_ref().expect("service");
        assert_eq!(service.name.as_deref(), Some("svm-apiserver"));
        assert_eq!(service.namespace.as_deref(), Some("svm-system"));
        assert_eq!(service.port, Some(443));
        assert_eq!(spec.insecure_skip_tls_verify, None);
        assert_eq!(
            spec.ca_bundle.as_ref().map(|b| b.0.clone()),
            Some(ca.clone()),
            "caBundle of {version}.{group} is the serving CA"
        );
    }
    assert_eq!(project, 1, "the project group is registered in every mode");
    versions.sort();
    let order: Vec<&str> = versions.iter().rev().map(|(_, v)| v.as_str()).collect();
    if !order.is_empty() {
        assert_eq!(order, ["v1", "v1beta1", "v1alpha1"], "v1 is preferred");
    }

    let secret = objects
        .secrets
        .iter()
        .find(|s| name_of(&s.metadata) == "svm-apiserver-serving-cert")
        .expect("serving certificate Secret");
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));
    let data = secret.data.clone().unwrap_or_default();
    let file = |path: &Path| std::fs::read(path).expect("read");
    assert_eq!(data["tls.crt"].0, file(&certs.serving_cert));
    assert_eq!(data["tls.key"].0, file(&certs.serving_key));
    assert_eq!(data["ca.crt"].0, ca);
    // The serving certificate names the Service the APIServices use.
    let pem = String::from_utf8(data["tls.crt"].0.clone()).expect("pem");
    let der = base64::engine::general_purpose::STANDARD
        .decode(
            pem.lines()
                .filter(|l| !l.starts_with("-----"))
                .collect::<String>(),
        )
        .expect("der");
    let needle = b"svm-apiserver.svm-system.svc";
    assert!(der.windows(needle.len()).any(|w| w == needle));
}

#[test]
fn the_external_etcd_overlay_drops_the_bundled_etcd_and_repoints_the_server() {
    let rendered = render("external-etcd");
    let objects = decode_all(&rendered);
    assert!(objects.stateful_sets.is_empty());
    assert!(objects.network_policies.is_empty());
    assert_eq!(objects.services.len(), 1);
    assert_eq!(objects.api_services.len(), 4);
    let args = objects.deployments[0]
        .spec
        .template
        .spec
        .as_ref()
        .and_then(|p| p.containers[0].args.clone())
        .unwrap_or_default();
    let etcd: Vec<&String> = args
        .iter()
        .filter(|a| a.starts_with("--etcd-servers="))
        .collect();
    assert_eq!(etcd, ["--etcd-servers=https://etcd.example.invalid:2379"]);
    // A shared etcd is compacted by its owner, and the bundled etcd's certificate is gone.
    assert!(args.contains(&"--etcd-compaction-interval=0".to_string()));
    let secrets: Vec<&str> = objects
        .secrets
        .iter()
        .map(|s| name_of(&s.metadata))
        .collect();
    assert!(!secrets.contains(&"svm-etcd-server-tls"), "{secrets:?}");
    assert!(
        secrets.contains(&"svm-apiserver-etcd-client"),
        "{secrets:?}"
    );
}

fn deployment_args(objects: &Objects) -> Vec<String> {
    objects.deployments[0]
        .spec
        .template
        .spec
        .as_ref()
        .and_then(|p| p.containers[0].args.clone())
        .unwrap_or_default()
}

#[test]
fn the_companion_overlay_registers_only_the_project_group_and_runs_in_companion_mode() {
    let owner = decode_all(&render(""));
    assert!(deployment_args(&owner).contains(&"--api-mode=owner".to_string()));
    let rendered = render("companion");
    let objects = decode_all(&rendered);
    // Nothing of storagemigration.k8s.io: the cluster's own APIServices serve it.
    let names: Vec<&str> = objects
        .api_services
        .iter()
        .map(|a| name_of(&a.metadata))
        .collect();
    assert_eq!(names, ["v1alpha1.storage.svm-apiserver.io"]);
    check_api_services(&objects, &rendered.certs);
    let args = deployment_args(&objects);
    assert!(
        args.contains(&"--api-mode=companion".to_string()),
        "{args:?}"
    );
    assert!(!args.iter().any(|a| a == "--api-mode=owner"), "{args:?}");
    // Everything else as deploy/ installs it: the same RBAC (a server in auto mode may switch
    // modes at runtime), workloads and certificates.
    check_rbac(&objects);
    check_workloads(&objects);
    let roles = |o: &Objects| {
        let mut names: Vec<String> = o
            .cluster_roles
            .iter()
            .map(|r| format!("{}:{:?}", name_of(&r.metadata), r.rules))
            .collect();
        names.sort();
        names
    };
    assert_eq!(roles(&objects), roles(&owner));
}
