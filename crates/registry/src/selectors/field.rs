//! Field selectors with k8s.io/apimachinery `fields.ParseSelector` syntax: `field=value`,
//! `field==value`, `field!=value`, joined by `,`; `\,` `\=` `\\` escape inside values.

/// One term of a field selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FieldTerm {
    pub field: String,
    /// `true` for `=` / `==`, `false` for `!=`.
    pub equals: bool,
    pub value: String,
}

/// A parsed field selector: every term must hold. Empty matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FieldSelector {
    pub terms: Vec<FieldTerm>,
}

impl FieldSelector {
    /// Parse like `fields.ParseSelector`; the error is upstream's message (400).
    pub(crate) fn parse(selector: &str) -> Result<Self, String> {
        let mut parts = split_terms(selector);
        parts.sort();
        let mut terms = Vec::new();
        for part in parts.iter().filter(|p| !p.is_empty()) {
            let Some((field, op, raw)) = split_term(part) else {
                return Err(format!(
                    "invalid selector: '{selector}'; can't understand '{part}'"
                ));
            };
            terms.push(FieldTerm {
                field: field.to_string(),
                equals: op != "!=",
                value: unescape(raw)?,
            });
        }
        Ok(Self { terms })
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// The fields named, for validation against what the resource can select on.
    pub(crate) fn fields(&self) -> impl Iterator<Item = &str> {
        self.terms.iter().map(|t| t.field.as_str())
    }

    /// Whether an object matches, given how to read one of its fields (`None` reads as the
    /// empty string, as in upstream's `fields.Set`).
    pub(crate) fn matches(&self, value_of: impl Fn(&str) -> Option<String>) -> bool {
        self.terms.iter().all(|term| {
            let actual = value_of(&term.field).unwrap_or_default();
            (actual == term.value) == term.equals
        })
    }
}

/// Split on commas that are not escaped with a backslash; escapes stay in the terms.
fn split_terms(selector: &str) -> Vec<String> {
    if selector.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut current = String::new();
    let mut escaped = false;
    for c in selector.chars() {
        match c {
            _ if escaped => {
                escaped = false;
                current.push(c);
            }
            '\\' => {
                escaped = true;
                current.push(c);
            }
            ',' => terms.push(std::mem::take(&mut current)),
            _ => current.push(c),
        }
    }
    terms.push(current);
    terms
}

/// The first `!=`, `==` or `=` splits a term (no escapes on the left-hand side).
fn split_term(term: &str) -> Option<(&str, &'static str, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        for op in ["!=", "==", "="] {
            if rest.starts_with(op) {
                return Some((&term[..i], op, &term[i + op.len()..]));
            }
        }
    }
    None
}

fn unescape(raw: &str) -> Result<String, String> {
    if !raw.contains(['\\', '=', ',']) {
        return Ok(raw.to_string());
    }
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(next @ ('\\' | ',' | '=')) => out.push(next),
                Some(next) => {
                    return Err(format!(
                        "invalid field selector: invalid escape sequence: \\{next}"
                    ));
                }
                None => {
                    return Err("invalid field selector: invalid escape sequence: \\".into());
                }
            },
            ',' | '=' => {
                // Go prints the rune with %v: its code point.
                return Err(format!(
                    "invalid field selector: unescaped character in value: {}",
                    u32::from(c)
                ));
            }
            _ => out.push(c),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn term(field: &str, equals: bool, value: &str) -> FieldTerm {
        FieldTerm {
            field: field.into(),
            equals,
            value: value.into(),
        }
    }

    #[test]
    fn parses_operators_and_escapes() {
        let s = FieldSelector::parse("metadata.name=a,spec.x!=b,status.y==c\\,d").expect("valid");
        assert_eq!(
            s.terms,
            vec![
                term("metadata.name", true, "a"),
                term("spec.x", false, "b"),
                term("status.y", true, "c,d"),
            ]
        );
        assert!(FieldSelector::parse("").expect("empty").is_empty());
        assert_eq!(
            FieldSelector::parse("a=").expect("empty value").terms,
            vec![term("a", true, "")]
        );
    }

    #[test]
    fn parse_errors_use_upstream_texts() {
        assert_eq!(
            FieldSelector::parse("metadata.name"),
            Err("invalid selector: 'metadata.name'; can't understand 'metadata.name'".into())
        );
        assert_eq!(
            FieldSelector::parse("a=b\\x"),
            Err("invalid field selector: invalid escape sequence: \\x".into())
        );
        assert_eq!(
            FieldSelector::parse("a=b=c"),
            Err("invalid field selector: unescaped character in value: 61".into())
        );
    }

    #[test]
    fn match_table() {
        let object = |field: &str| match field {
            "metadata.name" => Some("a".to_string()),
            "metadata.namespace" => Some(String::new()),
            _ => None,
        };
        let cases = [
            ("", true),
            ("metadata.name=a", true),
            ("metadata.name==a", true),
            ("metadata.name=b", false),
            ("metadata.name!=b", true),
            ("metadata.name!=a", false),
            ("metadata.namespace=", true),
            ("metadata.name=a,metadata.namespace!=", false),
        ];
        for (selector, expected) in cases {
            let parsed = FieldSelector::parse(selector).expect(selector);
            assert_eq!(parsed.matches(object), expected, "{selector}");
        }
    }
}
