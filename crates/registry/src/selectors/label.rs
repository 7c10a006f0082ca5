//! Label selectors with k8s.io/apimachinery `labels.Parse` grammar and error texts:
//! `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`, `a>1`, `a<1`, joined by `,`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::validation::{label_value_errors, qualified_name_errors};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operator {
    Equals,
    DoubleEquals,
    NotEquals,
    In,
    NotIn,
    Exists,
    DoesNotExist,
    GreaterThan,
    LessThan,
}

/// One `key <op> values` term.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Requirement {
    pub key: String,
    pub operator: Operator,
    /// Sorted and deduplicated, as upstream's string set.
    pub values: Vec<String>,
}

impl Requirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        let has = |v: &String| self.values.iter().any(|x| x == v);
        match self.operator {
            Operator::Equals | Operator::DoubleEquals | Operator::In => value.is_some_and(has),
            Operator::NotEquals | Operator::NotIn => !value.is_some_and(has),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::GreaterThan | Operator::LessThan => {
                let (Some(actual), [bound]) = (value, self.values.as_slice()) else {
                    return false;
                };
                match (actual.parse::<i64>(), bound.parse::<i64>()) {
                    (Ok(actual), Ok(bound)) if self.operator == Operator::GreaterThan => {
                        actual > bound
                    }
                    (Ok(actual), Ok(bound)) => actual < bound,
                    _ => false,
                }
            }
        }
    }
}

/// A parsed label selector: every requirement must hold. Empty matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LabelSelector {
    pub requirements: Vec<Requirement>,
}

impl LabelSelector {
    /// Parse like `labels.Parse`; the error is upstream's message (the server answers 400).
    pub(crate) fn parse(selector: &str) -> Result<Self, String> {
        let mut parser = Parser {
            items: Lexer::new(selector).scan(),
            position: 0,
        };
        let mut requirements = parser.parse()?;
        // Upstream sorts by key for a deterministic form.
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(Self { requirements })
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    pub(crate) fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    End,
    ClosedPar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

fn keyword(text: &str) -> Option<Token> {
    Some(match text {
        ")" => Token::ClosedPar,
        "," => Token::Comma,
        "!" => Token::DoesNotExist,
        "==" => Token::DoubleEquals,
        "=" => Token::Equals,
        ">" => Token::GreaterThan,
        "in" => Token::In,
        "<" => Token::LessThan,
        "!=" => Token::NotEquals,
        "notin" => Token::NotIn,
        "(" => Token::OpenPar,
        _ => return None,
    })
}

fn is_whitespace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special(b: u8) -> bool {
    matches!(b, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

struct Lexer<'a> {
    input: &'a [u8],
    pos: usize,
}

impl<'a> Lexer<'a> {
    fn new(input: &'a str) -> Self {
        Self {
            input: input.as_bytes(),
            pos: 0,
        }
    }

    fn scan(mut self) -> Vec<(Token, String)> {
        let mut items = Vec::new();
        loop {
            let item = self.lex();
            let end = item.0 == Token::End;
            items.push(item);
            if end {
                return items;
            }
        }
    }

    fn lex(&mut self) -> (Token, String) {
        while self.pos < self.input.len() && is_whitespace(self.input[self.pos]) {
            self.pos += 1;
        }
        match self.input.get(self.pos) {
            None => (Token::End, String::new()),
            Some(&b) if is_special(b) => self.special(),
            Some(_) => self.identifier_or_keyword(),
        }
    }

    fn identifier_or_keyword(&mut self) -> (Token, String) {
        let start = self.pos;
        while self.pos < self.input.len()
            && !is_special(self.input[self.pos])
            && !is_whitespace(self.input[self.pos])
        {
            self.pos += 1;
        }
        let text = String::from_utf8_lossy(&self.input[start..self.pos]).into_owned();
        match keyword(&text) {
            Some(token) => (token, text),
            None => (Token::Identifier, text),
        }
    }

    /// The longest operator made of special symbols (`!=` over `!`, `==` over `=`).
    fn special(&mut self) -> (Token, String) {
        let start = self.pos;
        let mut best: Option<(Token, usize)> = None;
        while self.pos < self.input.len() && is_special(self.input[self.pos]) {
            let text = String::from_utf8_lossy(&self.input[start..=self.pos]);
            match keyword(&text) {
                Some(token) => best = Some((token, self.pos + 1)),
                None if best.is_some() => break,
                None => {}
            }
            self.pos += 1;
        }
        match best {
            Some((token, end)) => {
                self.pos = end;
                let text = String::from_utf8_lossy(&self.input[start..end]).into_owned();
                (token, text)
            }
            // Unreachable in practice: every single special symbol is an operator.
            None => (Token::End, String::new()),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    KeyAndOperator,
    /// `in` and `notin` are plain identifiers where values are expected.
    Values,
}

struct Parser {
    items: Vec<(Token, String)>,
    position: usize,
}

impl Parser {
    fn item(&self, index: usize, context: Context) -> (Token, String) {
        let (token, literal) = self
            .items
            .get(index)
            .cloned()
            .unwrap_or((Token::End, String::new()));
        match token {
            Token::In | Token::NotIn if context == Context::Values => (Token::Identifier, literal),
            _ => (token, literal),
        }
    }

    fn lookahead(&self, context: Context) -> (Token, String) {
        self.item(self.position, context)
    }

    fn consume(&mut self, context: Context) -> (Token, String) {
        let item = self.item(self.position, context);
        self.position = (self.position + 1).min(self.items.len());
        item
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, String> {
        let mut requirements = Vec::new();
        loop {
            let (token, literal) = self.lookahead(Context::Values);
            match token {
                Token::Identifier | Token::DoesNotExist => {
                    let requirement = self
                        .requirement()
                        .map_err(|e| format!("unable to parse requirement: {e}"))?;
                    requirements.push(requirement);
                    let (token, literal) = self.consume(Context::Values);
                    match token {
                        Token::End => return Ok(requirements),
                        Token::Comma => {
                            let (next, next_literal) = self.lookahead(Context::Values);
                            if next != Token::Identifier && next != Token::DoesNotExist {
                                return Err(format!(
                                    "found '{next_literal}', expected: identifier after ','"
                                ));
                            }
                        }
                        _ => {
                            return Err(format!(
                                "found '{literal}', expected: ',' or 'end of string'"
                            ));
                        }
                    }
                }
                Token::End => return Ok(requirements),
                _ => {
                    return Err(format!(
                        "found '{literal}', expected: !, identifier, or 'end of string'"
                    ));
                }
            }
        }
    }

    fn requirement(&mut self) -> Result<Requirement, String> {
        let (key, unary) = self.key_and_inferred_operator()?;
        if let Some(operator) = unary {
            return new_requirement(key, operator, Vec::new());
        }
        let operator = self.operator()?;
        let values = match operator {
            Operator::In | Operator::NotIn => self.values()?,
            _ => self.exact_value()?,
        };
        new_requirement(key, operator, values)
    }

    fn key_and_inferred_operator(&mut self) -> Result<(String, Option<Operator>), String> {
        let (mut token, mut literal) = self.consume(Context::Values);
        let mut operator = None;
        if token == Token::DoesNotExist {
            operator = Some(Operator::DoesNotExist);
            (token, literal) = self.consume(Context::Values);
        }
        if token != Token::Identifier {
            return Err(format!("found '{literal}', expected: identifier"));
        }
        let errs = qualified_name_errors(&literal);
        if !errs.is_empty() {
            return Err(format!(
                "<nil>: Invalid value: {literal:?}: {}",
                errs.join("; ")
            ));
        }
        let (next, _) = self.lookahead(Context::Values);
        if matches!(next, Token::End | Token::Comma) && operator.is_none() {
            operator = Some(Operator::Exists);
        }
        Ok((literal, operator))
    }

    fn operator(&mut self) -> Result<Operator, String> {
        let (token, literal) = self.consume(Context::KeyAndOperator);
        Ok(match token {
            Token::In => Operator::In,
            Token::Equals => Operator::Equals,
            Token::DoubleEquals => Operator::DoubleEquals,
            Token::GreaterThan => Operator::GreaterThan,
            Token::LessThan => Operator::LessThan,
            Token::NotIn => Operator::NotIn,
            Token::NotEquals => Operator::NotEquals,
            _ => {
                return Err(format!(
                    "found '{literal}', expected: in, notin, =, ==, !=, gt, lt"
                ));
            }
        })
    }

    /// `(a, b, ...)`; empty entries are the empty value.
    fn values(&mut self) -> Result<Vec<String>, String> {
        let (token, literal) = self.consume(Context::Values);
        if token != Token::OpenPar {
            return Err(format!("found '{literal}' expected: '('"));
        }
        let (token, literal) = self.lookahead(Context::Values);
        match token {
            Token::Identifier | Token::Comma => {
                let values = self.identifiers()?;
                let (token, _) = self.consume(Context::Values);
                if token != Token::ClosedPar {
                    return Err(format!("found '{literal}', expected: ')'"));
                }
                Ok(values)
            }
            Token::ClosedPar => {
                self.consume(Context::Values);
                Ok(vec![String::new()])
            }
            _ => Err(format!(
                "found '{literal}', expected: ',', ')' or identifier"
            )),
        }
    }

    fn identifiers(&mut self) -> Result<Vec<String>, String> {
        let mut values: Vec<String> = Vec::new();
        loop {
            let (token, literal) = self.consume(Context::Values);
            match token {
                Token::Identifier => {
                    values.push(literal);
                    let (next, next_literal) = self.lookahead(Context::Values);
                    match next {
                        Token::Comma => continue,
                        Token::ClosedPar => return Ok(values),
                        _ => {
                            return Err(format!("found '{next_literal}', expected: ',' or ')'"));
                        }
                    }
                }
                Token::Comma => {
                    if values.is_empty() {
                        values.push(String::new());
                    }
                    let (next, _) = self.lookahead(Context::Values);
                    if matches!(next, Token::ClosedPar | Token::Comma) {
                        values.push(String::new());
                    }
                    if next == Token::ClosedPar {
                        return Ok(values);
                    }
                }
                _ => return Err(format!("found '{literal}', expected: ',', or identifier")),
            }
        }
    }

    fn exact_value(&mut self) -> Result<Vec<String>, String> {
        let (token, _) = self.lookahead(Context::Values);
        if matches!(token, Token::End | Token::Comma) {
            return Ok(vec![String::new()]);
        }
        let (token, literal) = self.consume(Context::Values);
        if token == Token::Identifier {
            Ok(vec![literal])
        } else {
            Err(format!("found '{literal}', expected: identifier"))
        }
    }
}

/// `NewRequirement`: validate the key and values, errors aggregated like `ErrorList`.
fn new_requirement(
    key: String,
    operator: Operator,
    mut values: Vec<String>,
) -> Result<Requirement, String> {
    values.sort();
    values.dedup();
    let mut errs = Vec::new();
    let key_errs = qualified_name_errors(&key);
    if !key_errs.is_empty() {
        errs.push(format!(
            "key: Invalid value: {key:?}: {}",
            key_errs.join("; ")
        ));
    }
    if matches!(operator, Operator::GreaterThan | Operator::LessThan) {
        for (i, value) in values.iter().enumerate() {
            if value.parse::<i64>().is_err() {
                errs.push(format!(
                    "values[{i}]: Invalid value: {value:?}: for 'Gt', 'Lt' operators, the value must be an integer"
                ));
            }
        }
    }
    for (i, value) in values.iter().enumerate() {
        let value_errs = label_value_errors(value);
        if !value_errs.is_empty() {
            errs.push(format!(
                "values[{i}][{key}]: Invalid value: {value:?}: {}",
                value_errs.join("; ")
            ));
        }
    }
    match errs.len() {
        0 => Ok(Requirement {
            key,
            operator,
            values,
        }),
        1 => Err(errs.remove(0)),
        _ => {
            let mut text = String::from("[");
            for (i, e) in errs.iter().enumerate() {
                if i > 0 {
                    text.push_str(", ");
                }
                let _ = write!(text, "{e}");
            }
            text.push(']');
            Err(text)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn parses_every_operator() {
        let selector = LabelSelector::parse("a=1, b==2,c!=3,d in (x, y),e notin (z),f,!g,h>5,i<7")
            .expect("valid selector");
        let ops: Vec<(&str, Operator, Vec<&str>)> = selector
            .requirements
            .iter()
            .map(|r| {
                (
                    r.key.as_str(),
                    r.operator,
                    r.values.iter().map(String::as_str).collect(),
                )
            })
            .collect();
        assert_eq!(
            ops,
            vec![
                ("a", Operator::Equals, vec!["1"]),
                ("b", Operator::DoubleEquals, vec!["2"]),
                ("c", Operator::NotEquals, vec!["3"]),
                ("d", Operator::In, vec!["x", "y"]),
                ("e", Operator::NotIn, vec!["z"]),
                ("f", Operator::Exists, vec![]),
                ("g", Operator::DoesNotExist, vec![]),
                ("h", Operator::GreaterThan, vec!["5"]),
                ("i", Operator::LessThan, vec!["7"]),
            ]
        );
    }

    #[test]
    fn empty_values_and_keywords_as_values() {
        let s = LabelSelector::parse("x in (foo,,baz),y,z notin ()").expect("upstream example");
        assert_eq!(s.requirements[0].values, vec!["", "baz", "foo"]);
        assert_eq!(s.requirements[2].values, vec![""]);
        let s = LabelSelector::parse("a=,b in (in, notin)").expect("keywords as values");
        assert_eq!(s.requirements[0].values, vec![""]);
        assert_eq!(s.requirements[1].values, vec!["in", "notin"]);
        assert!(LabelSelector::parse("").expect("empty").is_empty());
    }

    #[test]
    fn match_table() {
        type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], bool);
        let cases: &[Case] = &[
            ("", &[], true),
            ("a=1", &[("a", "1")], true),
            ("a=1", &[("a", "2")], false),
            ("a=1", &[], false),
            ("a==1", &[("a", "1")], true),
            ("a!=1", &[("a", "2")], true),
            ("a!=1", &[], true),
            ("a!=1", &[("a", "1")], false),
            ("a in (1,2)", &[("a", "2")], true),
            ("a in (1,2)", &[("a", "3")], false),
            ("a in (1,2)", &[], false),
            ("a notin (1,2)", &[("a", "3")], true),
            ("a notin (1,2)", &[], true),
            ("a notin (1,2)", &[("a", "1")], false),
            ("a", &[("a", "")], true),
            ("a", &[("b", "1")], false),
            ("!a", &[("b", "1")], true),
            ("!a", &[("a", "1")], false),
            ("a>5", &[("a", "6")], true),
            ("a>5", &[("a", "5")], false),
            ("a>5", &[("a", "x")], false),
            ("a<5", &[("a", "-1")], true),
            ("a=1,b=2", &[("a", "1"), ("b", "2")], true),
            ("a=1,b=2", &[("a", "1"), ("b", "3")], false),
        ];
        for (selector, set, expected) in cases {
            let parsed = LabelSelector::parse(selector).expect(selector);
            assert_eq!(
                parsed.matches(&labels(set)),
                *expected,
                "{selector} on {set:?}"
            );
        }
    }

    #[test]
    fn parse_errors_use_upstream_texts() {
        let cases = [
            (
                "a b",
                "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt",
            ),
            ("a=1 b", "found 'b', expected: ',' or 'end of string'"),
            ("a=1,", "found '', expected: identifier after ','"),
            (
                "=a",
                "found '=', expected: !, identifier, or 'end of string'",
            ),
            (
                "a in x",
                "unable to parse requirement: found 'x' expected: '('",
            ),
            (
                "a in (x",
                "unable to parse requirement: found '', expected: ',' or ')'",
            ),
            (
                "!",
                "unable to parse requirement: found '', expected: identifier",
            ),
            (
                "a>x",
                "unable to parse requirement: values[0]: Invalid value: \"x\": for 'Gt', 'Lt' operators, the value must be an integer",
            ),
        ];
        for (selector, expected) in cases {
            assert_eq!(
                LabelSelector::parse(selector),
                Err(expected.to_string()),
                "{selector}"
            );
        }
        let bad_key = LabelSelector::parse("Foo_=1").expect_err("bad key");
        assert!(
            bad_key.starts_with("unable to parse requirement: <nil>: Invalid value: \"Foo_\": name part must consist of"),
            "{bad_key}"
        );
        let bad_value = LabelSelector::parse("a=b c").expect_err("two values");
        assert_eq!(bad_value, "found 'c', expected: ',' or 'end of string'");
        let bad_value = LabelSelector::parse("a=-x").expect_err("bad value");
        assert!(bad_value.starts_with("unable to parse requirement: values[0][a]: Invalid value: \"-x\": a valid label must be"), "{bad_value}");
    }
}
