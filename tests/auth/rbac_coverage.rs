//! The RBAC in deploy/ grants exactly what the server asks of the cluster: every request in
//! `svm_cluster::access::CLUSTER_ACCESS` is allowed for our ServiceAccount, every
//! verb our roles grant is used by one of them, each of our rules is load-bearing, and what the
//! server never does is denied. The evaluator follows upstream RBAC's rule matching
//! (kubernetes `plugin/pkg/auth/authorizer/rbac/rbac.go` and `pkg/apis/rbac/v1/evaluation_helpers.go`:
//! VerbMatches, APIGroupMatches, ResourceMatches with "*" and "resource/subresource",
//! ResourceNameMatches, NonResourceURLMatches with a trailing "*"; a ClusterRoleBinding applies
//! everywhere, a RoleBinding only in its namespace).

use http::Method;
use k8s_openapi::api::rbac::v1::PolicyRule;
use svm_cluster::access::{CLUSTER_ACCESS, Target};
use svm_server::auth::RequestAttributes;

use crate::kustomize::{decode_all, name_of, namespace_of, render, subject_is_our_service_account};

/// The RBAC objects of a rendering.
#[derive(Clone, Default)]
struct Rbac {
    cluster_roles: Vec<k8s_openapi::api::rbac::v1::ClusterRole>,
    cluster_role_bindings: Vec<k8s_openapi::api::rbac::v1::ClusterRoleBinding>,
    roles: Vec<k8s_openapi::api::rbac::v1::Role>,
    role_bindings: Vec<k8s_openapi::api::rbac::v1::RoleBinding>,
}

/// A rule and where it applies (`None`: cluster-wide), and whether it is one of ours.
#[derive(Clone, Debug)]
struct Grant {
    rule: PolicyRule,
    namespace: Option<String>,
    role: String,
    ours: bool,
}

fn strings(values: &[&str]) -> Option<Vec<String>> {
    Some(values.iter().map(|s| s.to_string()).collect())
}

fn rule(groups: &[&str], resources: &[&str], names: &[&str], verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: strings(groups),
        resources: strings(resources),
        resource_names: if names.is_empty() {
            None
        } else {
            strings(names)
        },
        verbs: verbs.iter().map(|s| s.to_string()).collect(),
        non_resource_urls: None,
    }
}

/// The built-in roles our bindings name, with their upstream rules (kubernetes
/// `plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go` and `namespace_policy.go`), and
/// `system:discovery`, bound to every authenticated user.
fn built_in(name: &str) -> Vec<PolicyRule> {
    match name {
        "system:auth-delegator" => vec![
            rule(
                &["authentication.k8s.io"],
                &["tokenreviews"],
                &[],
                &["create"],
            ),
            rule(
                &["authorization.k8s.io"],
                &["subjectaccessreviews"],
                &[],
                &["create"],
            ),
        ],
        "extension-apiserver-authentication-reader" => vec![rule(
            &[""],
            &["configmaps"],
            &["extension-apiserver-authentication"],
            &["get", "list", "watch"],
        )],
        "system:discovery" => vec![PolicyRule {
            non_resource_urls: strings(&[
                "/api",
                "/api/*",
                "/apis",
                "/apis/*",
                "/healthz",
                "/livez",
                "/openapi",
                "/openapi/*",
                "/readyz",
                "/version",
                "/version/",
            ]),
            verbs: vec!["get".into()],
            ..Default::default()
        }],
        other => panic!("no fixture for the built-in role {other}"),
    }
}

/// Every rule that applies to our ServiceAccount.
fn grants(objects: &Rbac) -> Vec<Grant> {
    let mut out = Vec::new();
    let mut add = |role: &str, namespace: Option<String>, ours_rules: Option<Vec<PolicyRule>>| {
        let (rules, ours) = match ours_rules {
            Some(rules) => (rules, true),
            None => (built_in(role), false),
        };
        for rule in rules {
            out.push(Grant {
                rule,
                namespace: namespace.clone(),
                role: role.to_string(),
                ours,
            });
        }
    };
    for binding in &objects.cluster_role_bindings {
        if !subject_is_our_service_account(&binding.subjects) {
            continue;
        }
        let name = &binding.role_ref.name;
        let ours = objects
            .cluster_roles
            .iter()
            .find(|r| name_of(&r.metadata) == name)
            .map(|r| r.rules.clone().unwrap_or_default());
        add(name, None, ours);
    }
    for binding in &objects.role_bindings {
        if !subject_is_our_service_account(&binding.subjects) {
            continue;
        }
        let namespace = namespace_of(&binding.metadata).to_string();
        let name = &binding.role_ref.name;
        let ours = match binding.role_ref.kind.as_str() {
            "Role" => objects
                .roles
                .iter()
                .find(|r| name_of(&r.metadata) == name && namespace_of(&r.metadata) == namespace)
                .map(|r| r.rules.clone().unwrap_or_default()),
            _ => objects
                .cluster_roles
                .iter()
                .find(|r| name_of(&r.metadata) == name)
                .map(|r| r.rules.clone().unwrap_or_default()),
        };
        add(name, Some(namespace), ours);
    }
    add("system:discovery", None, None);
    out
}

fn has(list: &Option<Vec<String>>, value: &str) -> bool {
    list.as_deref()
        .unwrap_or_default()
        .iter()
        .any(|v| v == "*" || v == value)
}

/// Upstream's RuleAllows.
fn rule_allows(rule: &PolicyRule, attrs: &RequestAttributes) -> bool {
    if !rule.verbs.iter().any(|v| v == "*" || *v == attrs.verb) {
        return false;
    }
    let Some(asked) = &attrs.resource else {
        return rule
            .non_resource_urls
            .as_deref()
            .unwrap_or_default()
            .iter()
            .any(|url| {
                url == "*"
                    || *url == attrs.path
                    || url
                        .strip_suffix('*')
                        .is_some_and(|prefix| attrs.path.starts_with(prefix))
            });
    };
    let combined = if asked.subresource.is_empty() {
        asked.resource.clone()
    } else {
        format!("{}/{}", asked.resource, asked.subresource)
    };
    let resource_matches = rule
        .resources
        .as_deref()
        .unwrap_or_default()
        .iter()
        .any(|r| {
            r == "*"
                || *r == combined
                || (asked.subresource.is_empty() && *r == asked.resource)
                || r.strip_prefix("*/").is_some_and(|s| s == asked.subresource)
        });
    let name_matches = match rule.resource_names.as_deref() {
        None | Some([]) => true,
        Some(names) => names.contains(&asked.name),
    };
    has(&rule.api_groups, &asked.group) && resource_matches && name_matches
}

fn allowed_by<'a>(grants: &'a [Grant], attrs: &RequestAttributes) -> Option<&'a Grant> {
    grants.iter().find(|g| {
        let in_scope = match &g.namespace {
            None => true,
            Some(ns) => attrs.resource.as_ref().is_some_and(|r| r.namespace == *ns),
        };
        in_scope && rule_allows(&g.rule, attrs)
    })
}

/// Concrete requests standing for a catalogue entry ("*" resources tried on several kinds).
fn samples(entry: &svm_cluster::access::Access) -> Vec<RequestAttributes> {
    let method = match entry.verb {
        "create" => Method::POST,
        "update" => Method::PUT,
        "patch" => Method::PATCH,
        "delete" => Method::DELETE,
        _ => Method::GET,
    };
    let query = (entry.verb == "watch").then_some("watch=true");
    match entry.target {
        Target::NonResource { path } => {
            let path = path.replace('*', "v1");
            vec![RequestAttributes::from_request(&method, &path, query)]
        }
        Target::Resource {
            group,
            resource,
            subresource,
            namespace,
            name,
        } => {
            let kinds: Vec<(&str, &str)> = if resource == "*" {
                vec![
                    ("", "configmaps"),
                    ("", "secrets"),
                    ("apps", "deployments"),
                    ("example.test", "widgets"),
                ]
            } else {
                vec![(group, resource)]
            };
            kinds
                .into_iter()
                .map(|(group, resource)| {
                    let base = if group.is_empty() {
                        "/api/v1".to_string()
                    } else {
                        format!("/apis/{group}/v1")
                    };
                    let ns = namespace
                        .map(|ns| format!("/namespaces/{ns}"))
                        .unwrap_or_else(|| {
                            if matches!(entry.verb, "list" | "watch")
                                || entry.verb == "create" && group != "events.k8s.io"
                                || entry.verb == "update"
                            {
                                String::new()
                            } else {
                                "/namespaces/demo".into()
                            }
                        });
                    let mut path = format!("{base}{ns}/{resource}");
                    // A subresource is always of one object (a pod's eviction is a create).
                    let item = name.map(str::to_string).or_else(|| {
                        (!subresource.is_empty()
                            || !matches!(entry.verb, "list" | "create" | "watch"))
                        .then(|| "x".into())
                    });
                    if let Some(item) = item {
                        path.push('/');
                        path.push_str(&item);
                    }
                    if !subresource.is_empty() {
                        path.push('/');
                        path.push_str(subresource);
                    }
                    RequestAttributes::from_request(&method, &path, query)
                })
                .collect()
        }
    }
}

fn check(objects: &Rbac) -> Result<(), String> {
    let grants = grants(objects);
    // (a) Every request the server makes is allowed.
    for entry in CLUSTER_ACCESS {
        for attrs in samples(entry) {
            if allowed_by(&grants, &attrs).is_none() {
                return Err(format!(
                    "not allowed: {} {} ({})",
                    attrs.verb, attrs.path, entry.why
                ));
            }
        }
    }
    Ok(())
}

fn unused_grants(objects: &Rbac) -> Vec<String> {
    let grants = grants(objects);
    let requests: Vec<RequestAttributes> = CLUSTER_ACCESS.iter().flat_map(samples).collect();
    let mut unused = Vec::new();
    for grant in grants.iter().filter(|g| g.ours) {
        for verb in &grant.rule.verbs {
            let used = requests
                .iter()
                .any(|r| r.verb == *verb && rule_allows(&grant.rule, r));
            if !used {
                unused.push(format!(
                    "{}: {verb} on {:?}",
                    grant.role, grant.rule.resources
                ));
            }
        }
    }
    unused
}

#[test]
fn deploy_rbac_grants_exactly_the_requests_the_server_makes() {
    coverage("");
}

#[test]
fn the_companion_overlay_grants_exactly_the_same() {
    coverage("companion");
}

fn coverage(overlay: &str) {
    let rendered = render(overlay);
    let decoded = decode_all(&rendered);
    let objects = Rbac {
        cluster_roles: decoded.cluster_roles.clone(),
        cluster_role_bindings: decoded.cluster_role_bindings.clone(),
        roles: decoded.roles.clone(),
        role_bindings: decoded.role_bindings.clone(),
    };

    // (a) Everything in the catalogue is allowed.
    check(&objects).unwrap();

    // (b) Nothing more: every verb of every rule of ours serves a catalogued request.
    let unused = unused_grants(&objects);
    assert!(unused.is_empty(), "granted but never used: {unused:#?}");

    // (c) What the server never does is denied. (RBAC's "*" also covers subresources, so a
    // PATCH of `<resource>/status` is allowed here; the cluster client refuses it, as it
    // refuses anything outside the catalogue.)
    let grants = grants(&objects);
    let denied = [
        (Method::GET, "/api/v1/namespaces/demo/secrets/s1"),
        (Method::POST, "/api/v1/namespaces/demo/secrets"),
        (Method::PUT, "/api/v1/namespaces/demo/secrets/s1"),
        (Method::DELETE, "/api/v1/namespaces/demo/secrets/s1"),
        (Method::PUT, "/apis/apps/v1/namespaces/demo/deployments/d"),
        (
            Method::POST,
            "/apis/coordination.k8s.io/v1/namespaces/svm-system/leases",
        ),
        (Method::POST, "/api/v1/namespaces/default/events"),
        (
            Method::GET,
            "/api/v1/namespaces/kube-system/configmaps/other",
        ),
    ];
    for (method, target) in denied {
        let attrs = RequestAttributes::from_request(&method, target, None);
        assert!(
            allowed_by(&grants, &attrs).is_none(),
            "{method} {target} should be denied but {:?} allows it",
            allowed_by(&grants, &attrs).map(|g| &g.role)
        );
    }

    // (d) Each of our rules is load-bearing: without it some catalogued request is refused.
    for (index, role) in objects.cluster_roles.iter().enumerate() {
        for rule_index in 0..role.rules.as_deref().unwrap_or_default().len() {
            let mut without = objects.clone();
            if let Some(rules) = without.cluster_roles[index].rules.as_mut() {
                rules.remove(rule_index);
            }
            assert!(
                check(&without).is_err(),
                "rule {rule_index} of {} is not needed",
                name_of(&role.metadata)
            );
        }
    }
    for (index, role) in objects.roles.iter().enumerate() {
        for rule_index in 0..role.rules.as_deref().unwrap_or_default().len() {
            let mut without = objects.clone();
            if let Some(rules) = without.roles[index].rules.as_mut() {
                rules.remove(rule_index);
            }
            assert!(
                check(&without).is_err(),
                "rule {rule_index} of the Role {} is not needed",
                name_of(&role.metadata)
            );
        }
    }
}
