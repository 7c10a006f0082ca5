//! TokenReview and SubjectAccessReview answers with a policy the test configures
//! (recordings 15a, 15b).

use std::collections::{BTreeMap, HashMap};

use serde_json::{Map, Value, json};

/// Who a token belongs to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TokenUser {
    pub username: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

impl TokenUser {
    pub fn new(username: &str, groups: &[&str]) -> Self {
        Self {
            username: username.into(),
            uid: uuid::Uuid::new_v4().to_string(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            extra: BTreeMap::new(),
        }
    }
}

/// One authorization rule. Empty lists match anything; `"*"` matches anything too.
/// Rules are tried in order; the first that matches decides.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccessRule {
    pub users: Vec<String>,
    pub groups: Vec<String>,
    pub verbs: Vec<String>,
    pub api_groups: Vec<String>,
    /// `resource` or `resource/subresource`.
    pub resources: Vec<String>,
    pub namespaces: Vec<String>,
    /// Non-resource paths (`/healthz`, `/apis`); a rule with paths matches only non-resource
    /// requests.
    pub paths: Vec<String>,
    pub allowed: bool,
    /// The status.reason to report.
    pub reason: Option<String>,
}

impl AccessRule {
    pub fn allow() -> Self {
        Self {
            allowed: true,
            ..Self::default()
        }
    }

    /// An explicit denial (a webhook authorizer's "denied": true).
    pub fn deny() -> Self {
        Self::default()
    }

    pub fn user(mut self, user: &str) -> Self {
        self.users.push(user.into());
        self
    }

    pub fn group(mut self, group: &str) -> Self {
        self.groups.push(group.into());
        self
    }

    pub fn verb(mut self, verb: &str) -> Self {
        self.verbs.push(verb.into());
        self
    }

    pub fn api_group(mut self, group: &str) -> Self {
        self.api_groups.push(group.into());
        self
    }

    pub fn resource(mut self, resource: &str) -> Self {
        self.resources.push(resource.into());
        self
    }

    pub fn namespace(mut self, namespace: &str) -> Self {
        self.namespaces.push(namespace.into());
        self
    }

    pub fn path(mut self, path: &str) -> Self {
        self.paths.push(path.into());
        self
    }

    pub fn reason(mut self, reason: &str) -> Self {
        self.reason = Some(reason.into());
        self
    }
}

fn any_of(list: &[String], value: &str) -> bool {
    list.is_empty() || list.iter().any(|x| x == "*" || x == value)
}

/// The request a SubjectAccessReview asks about.
#[derive(Debug)]
struct Attributes<'a> {
    user: &'a str,
    groups: Vec<&'a str>,
    verb: &'a str,
    group: &'a str,
    resource: String,
    namespace: &'a str,
    path: Option<&'a str>,
}

impl AccessRule {
    fn matches(&self, a: &Attributes<'_>) -> bool {
        let who = (self.users.is_empty() && self.groups.is_empty())
            || self.users.iter().any(|u| u == "*" || u == a.user)
            || self.groups.iter().any(|g| a.groups.contains(&g.as_str()));
        if !who || !any_of(&self.verbs, a.verb) {
            return false;
        }
        match a.path {
            Some(path) => {
                !self.paths.is_empty()
                    && self.paths.iter().any(|p| {
                        p == "*"
                            || p == path
                            || p.strip_suffix('*').is_some_and(|pre| path.starts_with(pre))
                    })
            }
            None => {
                self.paths.is_empty()
                    && any_of(&self.api_groups, a.group)
                    && any_of(&self.resources, &a.resource)
                    && any_of(&self.namespaces, a.namespace)
            }
        }
    }
}

/// Tokens and rules, replaceable at run time.
#[derive(Clone, Debug, Default)]
pub struct AuthPolicy {
    pub tokens: HashMap<String, TokenUser>,
    pub rules: Vec<AccessRule>,
}

/// The default audience of kube-apiserver's service-account issuer in the recordings.
const DEFAULT_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";

impl AuthPolicy {
    /// `status` of a TokenReview for `spec` (recording 15a: unknown tokens get
    /// `user: {}` and `error: "invalid bearer token"`, still 201).
    pub fn token_review_status(&self, spec: &Value) -> Value {
        let token = spec["token"].as_str().unwrap_or("");
        match self.tokens.get(token) {
            None => json!({"user": {}, "error": "invalid bearer token"}),
            Some(user) => {
                let mut u = Map::new();
                u.insert("username".into(), json!(user.username));
                if !user.uid.is_empty() {
                    u.insert("uid".into(), json!(user.uid));
                }
                if !user.groups.is_empty() {
                    u.insert("groups".into(), json!(user.groups));
                }
                if !user.extra.is_empty() {
                    u.insert("extra".into(), json!(user.extra));
                }
                let audiences = spec
                    .get("audiences")
                    .filter(|a| a.as_array().is_some_and(|a| !a.is_empty()))
                    .cloned()
                    .unwrap_or_else(|| json!([DEFAULT_AUDIENCE]));
                json!({"authenticated": true, "user": u, "audiences": audiences})
            }
        }
    }

    /// `status` of a SubjectAccessReview (recording 15b: system:masters is allowed without a
    /// reason; no matching rule means `allowed: false` and nothing else).
    pub fn access_review_status(&self, spec: &Value) -> Value {
        let groups: Vec<&str> = spec["groups"]
            .as_array()
            .map(|g| g.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let ra = &spec["resourceAttributes"];
        let nra = &spec["nonResourceAttributes"];
        let resource = match (ra["resource"].as_str(), ra["subresource"].as_str()) {
            (Some(r), Some(s)) if !s.is_empty() => format!("{r}/{s}"),
            (Some(r), _) => r.to_string(),
            _ => String::new(),
        };
        let attrs = Attributes {
            user: spec["user"].as_str().unwrap_or(""),
            groups,
            verb: ra["verb"].as_str().or(nra["verb"].as_str()).unwrap_or(""),
            group: ra["group"].as_str().unwrap_or(""),
            resource,
            namespace: ra["namespace"].as_str().unwrap_or(""),
            path: if ra.is_object() {
                None
            } else {
                nra["path"].as_str()
            },
        };
        if attrs.groups.contains(&"system:masters") {
            return json!({"allowed": true});
        }
        for rule in &self.rules {
            if rule.matches(&attrs) {
                let mut status = Map::new();
                status.insert("allowed".into(), json!(rule.allowed));
                if !rule.allowed {
                    status.insert("denied".into(), json!(true));
                }
                if let Some(reason) = &rule.reason {
                    status.insert("reason".into(), json!(reason));
                }
                return Value::Object(status);
            }
        }
        json!({"allowed": false})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_resolve_to_users() {
        let mut policy = AuthPolicy::default();
        policy.tokens.insert(
            "t1".into(),
            TokenUser::new("system:serviceaccount:ns:sa", &["system:serviceaccounts"]),
        );
        let ok = policy.token_review_status(&json!({"token": "t1"}));
        assert_eq!(ok["authenticated"], true);
        assert_eq!(ok["user"]["username"], "system:serviceaccount:ns:sa");
        assert_eq!(ok["audiences"][0], DEFAULT_AUDIENCE);
        let bad = policy.token_review_status(&json!({"token": "nope"}));
        assert_eq!(bad, json!({"user": {}, "error": "invalid bearer token"}));
    }

    #[test]
    fn access_rules_apply_in_order() {
        let policy = AuthPolicy {
            tokens: HashMap::new(),
            rules: vec![
                AccessRule::deny().user("mallory").reason("blocked"),
                AccessRule::allow()
                    .user("svm")
                    .verb("patch")
                    .api_group("")
                    .resource("configmaps")
                    .reason("RBAC: allowed by test"),
                AccessRule::allow()
                    .group("readers")
                    .verb("get")
                    .path("/healthz"),
            ],
        };
        let sar = |spec: Value| policy.access_review_status(&spec);
        assert_eq!(
            sar(
                json!({"user": "svm", "resourceAttributes": {"verb": "patch", "resource": "configmaps", "namespace": "a"}})
            ),
            json!({"allowed": true, "reason": "RBAC: allowed by test"})
        );
        assert_eq!(
            sar(
                json!({"user": "svm", "resourceAttributes": {"verb": "delete", "resource": "configmaps"}})
            ),
            json!({"allowed": false})
        );
        assert_eq!(
            sar(
                json!({"user": "mallory", "resourceAttributes": {"verb": "get", "resource": "pods"}})
            ),
            json!({"allowed": false, "denied": true, "reason": "blocked"})
        );
        assert_eq!(
            sar(
                json!({"user": "x", "groups": ["system:masters"], "resourceAttributes": {"verb": "get", "resource": "pods"}})
            ),
            json!({"allowed": true})
        );
        assert_eq!(
            sar(
                json!({"user": "r", "groups": ["readers"], "nonResourceAttributes": {"verb": "get", "path": "/healthz"}})
            ),
            json!({"allowed": true})
        );
    }
}
