//! Fault injection per route (verb + resource, optionally namespace and object name),
//! changeable at run time. Faults are spread deterministically: a rule with fraction `f`
//! fires on exactly ⌊n·f⌋ of its first n matching requests (an error-diffusion counter rather
//! than a random draw), so tests can count on the numbers.

use std::str::FromStr;
use std::sync::Mutex;
use std::time::Duration;

use crate::resources::GroupResource;

/// What a matching request suffers.
#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    /// A Status with this 5xx code (500 InternalError, 503 ServiceUnavailable, 504 Timeout...).
    ServerError { code: u16 },
    /// 429 with `Retry-After`, as API Priority and Fairness rejects (plain text, no Status).
    TooManyRequests { retry_after_seconds: u64 },
    /// 429 `storage is (re)initializing`, a Status with Retry-After 1: the resource's watch
    /// cache still filling after its storage was rebuilt.
    StorageInitializing,
    /// Extra latency before the request is handled (combines with any other fault).
    Latency(Duration),
    /// The connection is closed without an answer.
    DropConnection,
    /// The request is answered, but the response body ends after this many frames: a watch
    /// stream (one frame per event) cut mid-list, before its initial-events-end bookmark, as
    /// a connection lost through a proxy or load balancer ends it.
    CutStream { after_frames: usize },
    /// RBAC refuses the request: 403 Forbidden with the RBAC authorizer's text
    /// (`<resource>.<group> is forbidden: User "<user>" cannot <verb> resource ...`).
    Forbidden,
    /// A validating admission webhook denies the write:
    /// `admission webhook "<webhook>" denied the request: <message>`.
    Deny {
        webhook: String,
        code: u16,
        reason: String,
        message: String,
    },
}

impl Fault {
    /// A 403 webhook denial, as most webhooks (and controller-runtime's `Denied`) answer.
    pub fn deny(webhook: &str, message: &str) -> Self {
        Fault::Deny {
            webhook: webhook.into(),
            code: 403,
            reason: "Forbidden".into(),
            message: message.into(),
        }
    }

    /// A 422 webhook denial (a webhook that reports invalid objects).
    pub fn deny_invalid(webhook: &str, message: &str) -> Self {
        Fault::Deny {
            webhook: webhook.into(),
            code: 422,
            reason: "Invalid".into(),
            message: message.into(),
        }
    }
}

/// Which requests a rule applies to; `None` matches anything.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FaultRule {
    /// Kubernetes verb: get, list, watch, create, update, patch, delete, deletecollection.
    pub verb: Option<String>,
    pub resource: Option<GroupResource>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    /// A request path (`/apis`, `/api`): for non-resource requests such as discovery.
    pub path: Option<String>,
    /// Share of matching requests that get the fault (1.0 = all).
    pub fraction: f64,
    /// Stop after this many injections.
    pub limit: Option<u64>,
    pub fault: Option<Fault>,
}

impl FaultRule {
    /// A rule that always injects `fault`.
    pub fn new(fault: Fault) -> Self {
        Self {
            fraction: 1.0,
            fault: Some(fault),
            ..Self::default()
        }
    }

    pub fn verb(mut self, verb: &str) -> Self {
        self.verb = Some(verb.into());
        self
    }

    /// `configmaps`, `deployments.apps`, `widgets.example.test`.
    pub fn resource(mut self, resource: &str) -> Self {
        self.resource = Some(GroupResource::parse(resource));
        self
    }

    pub fn namespace(mut self, namespace: &str) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    pub fn name(mut self, name: &str) -> Self {
        self.name = Some(name.into());
        self
    }

    pub fn path(mut self, path: &str) -> Self {
        self.path = Some(path.into());
        self
    }

    pub fn fraction(mut self, fraction: f64) -> Self {
        self.fraction = fraction.clamp(0.0, 1.0);
        self
    }

    pub fn times(mut self, limit: u64) -> Self {
        self.limit = Some(limit);
        self
    }

    fn matches(&self, req: &RequestFacts<'_>) -> bool {
        self.verb.as_deref().is_none_or(|v| v == req.verb)
            && self
                .resource
                .as_ref()
                .is_none_or(|r| Some(r) == req.resource)
            && self
                .namespace
                .as_deref()
                .is_none_or(|n| Some(n) == req.namespace)
            && self.name.as_deref().is_none_or(|n| Some(n) == req.name)
            && self.path.as_deref().is_none_or(|p| p == req.path)
    }
}

/// Parses the binary's `--fault` flag:
/// `verb=patch,resource=configmaps,name=x,path=/apis,fraction=0.1,times=5,fault=<kind>`
/// where kind is
/// `500`/`503`/any 5xx, `429:<retry-after s>` (API Priority and Fairness), `initializing`
/// (a filling watch cache's 429), `latency:<ms>`, `drop`, `cut:<frames>`,
/// `deny:<webhook>:<message>` or `deny422:<webhook>:<message>`.
impl FromStr for FaultRule {
    type Err = String;

    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        let mut rule = FaultRule {
            fraction: 1.0,
            ..FaultRule::default()
        };
        for part in spec.split(',') {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("fault spec part {part:?} is not key=value"))?;
            match k.trim() {
                "verb" => rule.verb = Some(v.into()),
                "resource" => rule.resource = Some(GroupResource::parse(v)),
                "namespace" => rule.namespace = Some(v.into()),
                "name" => rule.name = Some(v.into()),
                "path" => rule.path = Some(v.into()),
                "fraction" => {
                    rule.fraction = v
                        .parse::<f64>()
                        .map_err(|e| format!("fraction {v:?}: {e}"))?
                        .clamp(0.0, 1.0)
                }
                "times" => rule.limit = Some(v.parse().map_err(|e| format!("times {v:?}: {e}"))?),
                "fault" => rule.fault = Some(parse_fault(v)?),
                other => return Err(format!("unknown fault spec key {other:?}")),
            }
        }
        if rule.fault.is_none() {
            return Err("fault spec needs fault=<kind>".into());
        }
        Ok(rule)
    }
}

fn parse_fault(v: &str) -> Result<Fault, String> {
    let mut parts = v.splitn(3, ':');
    let kind = parts.next().unwrap_or_default();
    let arg = parts.next();
    let rest = parts.next();
    match kind {
        "drop" => Ok(Fault::DropConnection),
        "cut" => {
            let after_frames = arg
                .ok_or("cut:<frames>")?
                .parse()
                .map_err(|e| format!("cut: {e}"))?;
            Ok(Fault::CutStream { after_frames })
        }
        "forbidden" => Ok(Fault::Forbidden),
        "latency" => {
            let ms: u64 = arg
                .ok_or("latency:<ms>")?
                .parse()
                .map_err(|e| format!("latency: {e}"))?;
            Ok(Fault::Latency(Duration::from_millis(ms)))
        }
        "initializing" => Ok(Fault::StorageInitializing),
        "429" => {
            let secs = arg
                .map(str::parse)
                .transpose()
                .map_err(|e| format!("429: {e}"))?;
            Ok(Fault::TooManyRequests {
                retry_after_seconds: secs.unwrap_or(1),
            })
        }
        "deny" | "deny422" => {
            let webhook = arg.ok_or("deny:<webhook>:<message>")?;
            let message = rest.unwrap_or("denied by test policy");
            Ok(if kind == "deny" {
                Fault::deny(webhook, message)
            } else {
                Fault::deny_invalid(webhook, message)
            })
        }
        code => {
            let code: u16 = code
                .parse()
                .map_err(|_| format!("unknown fault kind {v:?}"))?;
            if !(500..600).contains(&code) {
                return Err(format!("{code} is not a 5xx code"));
            }
            Ok(Fault::ServerError { code })
        }
    }
}

/// What the fault layer knows about a request.
#[derive(Debug, Clone, Copy)]
pub struct RequestFacts<'a> {
    pub verb: &'a str,
    pub resource: Option<&'a GroupResource>,
    pub namespace: Option<&'a str>,
    pub name: Option<&'a str>,
    pub path: &'a str,
}

/// The decision for one request: latency to add, then at most one failure.
#[derive(Debug, Default, PartialEq)]
pub struct Decision {
    pub latency: Duration,
    pub fault: Option<Fault>,
}

struct ActiveRule {
    id: u64,
    rule: FaultRule,
    credit: f64,
    injected: u64,
}

/// The rule set of one double.
#[derive(Default)]
pub struct Faults {
    rules: Mutex<(u64, Vec<ActiveRule>)>,
}

impl Faults {
    /// Adds a rule; returns its id for [`Faults::remove`].
    pub fn add(&self, rule: FaultRule) -> u64 {
        let mut guard = self.rules.lock().unwrap_or_else(|e| e.into_inner());
        guard.0 += 1;
        let id = guard.0;
        guard.1.push(ActiveRule {
            id,
            rule,
            credit: 0.0,
            injected: 0,
        });
        id
    }

    pub fn remove(&self, id: u64) {
        let mut guard = self.rules.lock().unwrap_or_else(|e| e.into_inner());
        guard.1.retain(|r| r.id != id);
    }

    pub fn clear(&self) {
        let mut guard = self.rules.lock().unwrap_or_else(|e| e.into_inner());
        guard.1.clear();
    }

    /// How many times rule `id` has fired.
    pub fn injected(&self, id: u64) -> u64 {
        let guard = self.rules.lock().unwrap_or_else(|e| e.into_inner());
        guard
            .1
            .iter()
            .find(|r| r.id == id)
            .map_or(0, |r| r.injected)
    }

    pub fn decide(&self, req: &RequestFacts<'_>) -> Decision {
        let mut guard = self.rules.lock().unwrap_or_else(|e| e.into_inner());
        let mut decision = Decision::default();
        for active in guard.1.iter_mut() {
            if !active.rule.matches(req) {
                continue;
            }
            if active.rule.limit.is_some_and(|l| active.injected >= l) {
                continue;
            }
            let is_latency = matches!(active.rule.fault, Some(Fault::Latency(_)));
            if !is_latency && decision.fault.is_some() {
                continue;
            }
            active.credit += active.rule.fraction;
            if active.credit + 1e-9 < 1.0 {
                continue;
            }
            active.credit -= 1.0;
            active.injected += 1;
            match &active.rule.fault {
                Some(Fault::Latency(d)) => decision.latency += *d,
                Some(f) => decision.fault = Some(f.clone()),
                None => {}
            }
        }
        decision
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts<'a>(verb: &'a str, gr: &'a GroupResource, name: &'a str) -> RequestFacts<'a> {
        RequestFacts {
            verb,
            resource: Some(gr),
            namespace: Some("demo"),
            name: Some(name),
            path: "/api/v1/namespaces/demo/configmaps",
        }
    }

    #[test]
    fn fractions_are_exact_and_rules_are_scoped() {
        let faults = Faults::default();
        let id = faults.add(
            FaultRule::new(Fault::ServerError { code: 500 })
                .verb("patch")
                .resource("configmaps")
                .fraction(0.25),
        );
        let cm = GroupResource::parse("configmaps");
        let secrets = GroupResource::parse("secrets");
        let hits = (0..100)
            .filter(|_| faults.decide(&facts("patch", &cm, "a")).fault.is_some())
            .count();
        assert_eq!(hits, 25);
        assert!(faults.decide(&facts("get", &cm, "a")).fault.is_none());
        assert!(
            faults
                .decide(&facts("patch", &secrets, "a"))
                .fault
                .is_none()
        );
        assert_eq!(faults.injected(id), 25);
    }

    #[test]
    fn limits_latency_and_names() {
        let faults = Faults::default();
        faults.add(FaultRule::new(Fault::Latency(Duration::from_millis(5))));
        faults.add(
            FaultRule::new(Fault::deny("policy.example.com", "no"))
                .name("x")
                .times(1),
        );
        let cm = GroupResource::parse("configmaps");
        let d = faults.decide(&facts("update", &cm, "x"));
        assert_eq!(d.latency, Duration::from_millis(5));
        assert!(matches!(d.fault, Some(Fault::Deny { code: 403, .. })));
        assert!(faults.decide(&facts("update", &cm, "x")).fault.is_none());
        assert!(faults.decide(&facts("update", &cm, "y")).fault.is_none());
        faults.add(FaultRule::new(Fault::ServerError { code: 503 }).path("/apis"));
        let discovery = RequestFacts {
            verb: "get",
            resource: None,
            namespace: None,
            name: None,
            path: "/apis",
        };
        assert!(faults.decide(&discovery).fault.is_some());
        assert!(faults.decide(&facts("get", &cm, "y")).fault.is_none());
    }

    #[test]
    fn parses_flag_specs() {
        let rule: FaultRule = "verb=patch,resource=widgets.example.test,fraction=0.5,fault=429:3"
            .parse()
            .unwrap();
        assert_eq!(rule.verb.as_deref(), Some("patch"));
        assert_eq!(
            rule.fault,
            Some(Fault::TooManyRequests {
                retry_after_seconds: 3
            })
        );
        assert!("fault=200".parse::<FaultRule>().is_err());
        assert!("verb=get".parse::<FaultRule>().is_err());
        let deny: FaultRule = "name=w1,fault=deny422:v.example.com:bad size"
            .parse()
            .unwrap();
        assert!(matches!(deny.fault, Some(Fault::Deny { code: 422, .. })));
    }
}
