//! Label and field selectors (`labels.Parse`, `fields.ParseSelector`), enough for what clients
//! send: `a=b`, `a==b`, `a!=b`, `a`, `!a`, `a in (x,y)`, `a notin (x,y)`, and the field
//! selectors `metadata.name` / `metadata.namespace` every resource supports.

use serde_json::Value;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A parsed labelSelector; empty matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

impl LabelSelector {
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut requirements = Vec::new();
        for term in split_terms(text) {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            requirements.push(parse_term(term)?);
        }
        Ok(Self { requirements })
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    pub fn matches(&self, labels: Option<&serde_json::Map<String, Value>>) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.requirements.iter().all(|r| match r {
            Requirement::Equals(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            Requirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::NotIn(k, vs) => !get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::DoesNotExist(k) => get(k).is_none(),
        })
    }
}

/// Splits on commas that are not inside parentheses.
fn split_terms(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                out.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&text[start..]);
    out
}

fn parse_term(term: &str) -> Result<Requirement, String> {
    let invalid = || format!("unable to parse requirement: {term:?}");
    if let Some(key) = term.strip_prefix('!') {
        return Ok(Requirement::DoesNotExist(valid_key(key.trim())?));
    }
    if let Some((k, v)) = term.split_once("!=") {
        return Ok(Requirement::NotEquals(
            valid_key(k.trim())?,
            v.trim().into(),
        ));
    }
    if let Some((k, v)) = term.split_once("==") {
        return Ok(Requirement::Equals(valid_key(k.trim())?, v.trim().into()));
    }
    if let Some((k, v)) = term.split_once('=') {
        return Ok(Requirement::Equals(valid_key(k.trim())?, v.trim().into()));
    }
    for (word, notin) in [(" notin ", true), (" in ", false)] {
        if let Some((k, rest)) = term.split_once(word) {
            let rest = rest.trim();
            let inner = rest
                .strip_prefix('(')
                .and_then(|r| r.strip_suffix(')'))
                .ok_or_else(invalid)?;
            let values = inner.split(',').map(|v| v.trim().to_string()).collect();
            let key = valid_key(k.trim())?;
            return Ok(if notin {
                Requirement::NotIn(key, values)
            } else {
                Requirement::In(key, values)
            });
        }
    }
    Ok(Requirement::Exists(valid_key(term)?))
}

fn valid_key(key: &str) -> Result<String, String> {
    let ok = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    if ok {
        Ok(key.to_string())
    } else {
        Err(format!(
            "unable to parse requirement: invalid label key {key:?}"
        ))
    }
}

/// A parsed fieldSelector over `metadata.name` and `metadata.namespace`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector {
    terms: Vec<(String, bool, String)>,
}

impl FieldSelector {
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut terms = Vec::new();
        for term in text.split(',') {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            let (field, equal, value) = if let Some((f, v)) = term.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = term.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = term.split_once('=') {
                (f, true, v)
            } else {
                return Err(format!(
                    "invalid selector: '{term}'; can't understand '{term}'"
                ));
            };
            let field = field.trim();
            if field != "metadata.name" && field != "metadata.namespace" {
                return Err(format!("field label not supported: {field}"));
            }
            terms.push((field.to_string(), equal, value.trim().to_string()));
        }
        Ok(Self { terms })
    }

    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    pub fn matches(&self, object: &Value) -> bool {
        self.terms.iter().all(|(field, equal, value)| {
            let actual = match field.as_str() {
                "metadata.name" => object["metadata"]["name"].as_str(),
                _ => object["metadata"]["namespace"].as_str(),
            }
            .unwrap_or("");
            (actual == value) == *equal
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selectors_match_like_kubernetes() {
        let labels = json!({"apiserver.kubernetes.io/identity": "kube-apiserver", "tier": "a"});
        let labels = labels.as_object();
        let yes = [
            "apiserver.kubernetes.io/identity=kube-apiserver",
            "tier in (a,b),apiserver.kubernetes.io/identity",
            "tier notin (b)",
            "!missing",
            "tier!=b",
            "",
        ];
        for s in yes {
            assert!(LabelSelector::parse(s).unwrap().matches(labels), "{s}");
        }
        let no = ["tier=b", "tier in (b,c)", "missing", "!tier", "tier==x"];
        for s in no {
            assert!(!LabelSelector::parse(s).unwrap().matches(labels), "{s}");
        }
        assert!(LabelSelector::parse("bad key=1").is_err());
    }

    #[test]
    fn field_selectors_cover_name_and_namespace() {
        let obj = json!({"metadata": {"name": "a", "namespace": "n"}});
        assert!(
            FieldSelector::parse("metadata.name=a")
                .unwrap()
                .matches(&obj)
        );
        assert!(
            !FieldSelector::parse("metadata.name!=a")
                .unwrap()
                .matches(&obj)
        );
        assert!(
            FieldSelector::parse("metadata.namespace==n,metadata.name=a")
                .unwrap()
                .matches(&obj)
        );
        assert!(FieldSelector::parse("spec.x=1").is_err());
    }
}
