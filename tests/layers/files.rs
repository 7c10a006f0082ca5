//! The files of each crate as their imports draw them: a file imports another when its
//! product code (tests left out) names a path into it (`crate::…`, `super::…`, `self::…`).
//! A name a module re-exports (`pub use child::Name`) is followed to the file that defines
//! it, and a module's code naming its own child (`child::f()`) is an import of that child.
//! The rule it holds: no circle of files.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path inside a crate: `[]` for the crate root, `["migrator", "pool"]`.
pub(crate) type ModPath = Vec<String>;

/// One file of a crate's product code.
#[derive(Debug)]
pub(crate) struct Module {
    /// Where it is, for messages.
    pub(crate) file: PathBuf,
    /// Its product code: comments and test modules cut out.
    pub(crate) code: String,
}

/// Every product module of the crate whose sources are in `src` (test files left out).
pub(crate) fn modules(src: &Path) -> BTreeMap<ModPath, Module> {
    let mut found = BTreeMap::new();
    collect(src, src, &mut found);
    let test_only: Vec<ModPath> = found
        .keys()
        .filter(|path| declared_for_tests(&found, path))
        .cloned()
        .collect();
    found.retain(|path, _| !test_only.iter().any(|t| path.starts_with(t)));
    found
}

/// Whether `path`'s declaration in its parent is `#[cfg(test)]` (or the parent's is).
fn declared_for_tests(found: &BTreeMap<ModPath, Module>, path: &ModPath) -> bool {
    let Some((name, parent)) = path.split_last() else {
        return false;
    };
    let Some(parent) = found.get(parent) else {
        return false;
    };
    let text = std::fs::read_to_string(&parent.file).unwrap_or_default();
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    lines.windows(2).any(|pair| {
        pair[0] == "#[cfg(test)]"
            && [
                format!("mod {name};"),
                format!("pub(crate) mod {name};"),
                format!("pub mod {name};"),
            ]
            .contains(&pair[1].to_string())
    })
}

fn collect(src: &Path, dir: &Path, found: &mut BTreeMap<ModPath, Module>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "tests") {
                collect(src, &path, found);
            }
            continue;
        }
        if let Some(module) = module_path(src, &path) {
            let text = std::fs::read_to_string(&path).expect("source");
            let code = product_code(&text);
            found.insert(module, Module { file: path, code });
        }
    }
}

/// `src/lib.rs` → `[]`, `src/a.rs` and `src/a/mod.rs` → `[a]`, `src/a/b.rs` → `[a, b]`;
/// `None` for what is not a product module (not Rust, a test file, a binary's `main.rs`
/// beside a `lib.rs`).
fn module_path(src: &Path, path: &Path) -> Option<ModPath> {
    if path.extension()? != "rs" {
        return None;
    }
    let relative = path.strip_prefix(src).ok()?.with_extension("");
    let mut parts: ModPath = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    match parts.last().map(String::as_str) {
        Some("tests") => return None,
        Some("mod") => {
            parts.pop();
        }
        Some("lib") if parts.len() == 1 => parts.clear(),
        Some("main") if parts.len() == 1 => {
            if src.join("lib.rs").exists() {
                return None;
            }
            parts.clear();
        }
        _ => {}
    }
    Some(parts)
}

/// `text` without comments (doc links are not imports) and without `#[cfg(test)]` items.
pub(crate) fn product_code(text: &str) -> String {
    let lines: Vec<&str> = text
        .lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect();
    let mut code = String::new();
    let mut skip_item = false;
    let mut depth = 0i32;
    for line in lines {
        if skip_item {
            depth += brace_balance(line);
            // An item ends at its closing brace, or at a `;` when it opened none.
            if depth <= 0 && (line.contains('}') || line.trim_end().ends_with(';')) {
                skip_item = false;
                depth = 0;
            }
            // Kept as an empty line: line numbers stay those of the file.
            code.push('\n');
            continue;
        }
        if line.trim() == "#[cfg(test)]" {
            skip_item = true;
            depth = 0;
            code.push('\n');
            continue;
        }
        code.push_str(line);
        code.push('\n');
    }
    code
}

fn brace_balance(line: &str) -> i32 {
    line.chars()
        .map(|c| match c {
            '{' => 1,
            '}' => -1,
            _ => 0,
        })
        .sum()
}

/// Every path `code` names from `crate`, `super` or `self`, as written: `use a::{b, c::d}`
/// is `a::b` and `a::c::d`. Inside an inline `mod name { … }`, `super` is the file's own
/// module: each level of inline module takes one `super` off (written as `self`).
pub(crate) fn named_paths(code: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let chars: Vec<char> = code.chars().collect();
    let (mut depth, mut inline_opened_at) = (0usize, Vec::new());
    let mut at = 0;
    while at < chars.len() {
        match chars[at] {
            '{' => {
                if opens_inline_module(&chars, at) {
                    inline_opened_at.push(depth);
                }
                depth += 1;
            }
            '}' => {
                depth = depth.saturating_sub(1);
                if inline_opened_at.last() == Some(&depth) {
                    inline_opened_at.pop();
                }
            }
            _ => {}
        }
        let starts_word = at == 0 || !is_ident(chars[at - 1]) && chars[at - 1] != ':';
        if starts_word {
            for root in ["crate", "super", "self"] {
                if matches_at(&chars, at, root) && matches_at(&chars, at + root.len(), "::") {
                    let (found, end) = read_path(&chars, at, Vec::new());
                    let inline = inline_opened_at.len();
                    paths.extend(found.into_iter().map(|path| outside_inline(path, inline)));
                    at = end.max(at + 1) - 1;
                    break;
                }
            }
        }
        at += 1;
    }
    paths
}

/// Whether the `{` at `at` opens `mod name {`.
fn opens_inline_module(chars: &[char], at: usize) -> bool {
    let before: String = chars[..at].iter().collect();
    let mut words = before.split_whitespace().rev();
    let _name = words.next();
    words.next() == Some("mod")
}

/// `path`, named `inline` levels of inline modules deep, as the file's module sees it.
fn outside_inline(mut path: Vec<String>, inline: usize) -> Vec<String> {
    let supers = path.iter().take_while(|s| *s == "super").count();
    if inline == 0 || supers == 0 {
        return path;
    }
    let dropped = supers.min(inline);
    path.drain(..dropped);
    if path.first().map(String::as_str) != Some("super") {
        path.insert(0, "self".into());
    }
    path
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn matches_at(chars: &[char], at: usize, word: &str) -> bool {
    word.chars()
        .enumerate()
        .all(|(i, c)| chars.get(at + i) == Some(&c))
}

/// Reads one path (with `{…}` groups) from `at`, under `prefix`; returns the paths and
/// where it ended.
fn read_path(chars: &[char], mut at: usize, mut prefix: Vec<String>) -> (Vec<Vec<String>>, usize) {
    loop {
        while chars.get(at).is_some_and(|c| c.is_whitespace()) {
            at += 1;
        }
        if chars.get(at) == Some(&'{') {
            let mut paths = Vec::new();
            at += 1;
            loop {
                let (found, end) = read_path(chars, at, prefix.clone());
                paths.extend(found);
                at = end;
                while chars
                    .get(at)
                    .is_some_and(|c| c.is_whitespace() || *c == ',')
                {
                    at += 1;
                }
                match chars.get(at) {
                    Some('}') => return (paths, at + 1),
                    None => return (paths, at),
                    _ => {}
                }
            }
        }
        let start = at;
        while chars.get(at).copied().is_some_and(is_ident) || chars.get(at) == Some(&'*') {
            at += 1;
        }
        if at == start {
            return (vec![prefix], at);
        }
        prefix.push(chars[start..at].iter().collect());
        if matches_at(chars, at, "::") {
            at += 2;
        } else {
            // `as Name` and anything after the path are not part of it.
            return (vec![prefix], at);
        }
    }
}

/// The module file `path` (named in module `from`) points into, following re-exports; `None`
/// outside the crate.
pub(crate) fn resolve(
    modules: &BTreeMap<ModPath, Module>,
    from: &ModPath,
    path: &[String],
) -> Option<ModPath> {
    let mut absolute: ModPath = Vec::new();
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => rest = &rest[1..],
        Some("self") => {
            absolute = from.clone();
            rest = &rest[1..];
        }
        Some("super") => {
            absolute = from.clone();
            while rest.first().map(String::as_str) == Some("super") {
                absolute.pop()?;
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    absolute.extend(rest.iter().cloned());
    deepest_module(modules, &absolute, 0)
}

/// The deepest module of `absolute`; a name it does not declare as a module is looked up in
/// its re-exports.
fn deepest_module(
    modules: &BTreeMap<ModPath, Module>,
    absolute: &[String],
    hops: usize,
) -> Option<ModPath> {
    let mut depth = absolute.len();
    while depth > 0 && !modules.contains_key(&absolute[..depth].to_vec()) {
        depth -= 1;
    }
    let module = absolute[..depth].to_vec();
    let item = absolute.get(depth);
    if let Some(item) = item
        && hops < 8
        && let Some(target) = reexport(modules, &module, item)
    {
        return deepest_module(modules, &target, hops + 1).or(Some(module));
    }
    modules.contains_key(&module).then_some(module)
}

/// Where `module` takes `name` from when it re-exports it (`pub use child::Name;`,
/// `pub use child::{Other as Name};`), as an absolute path.
fn reexport(
    modules: &BTreeMap<ModPath, Module>,
    module: &ModPath,
    name: &str,
) -> Option<Vec<String>> {
    let code = &modules.get(module)?.code;
    for statement in code.split(';') {
        let statement = statement.trim();
        let Some(used) = statement
            .strip_prefix("pub use ")
            .or_else(|| statement.strip_prefix("pub(crate) use "))
            .or_else(|| statement.strip_prefix("pub(super) use "))
        else {
            continue;
        };
        for (path, alias) in use_tree(used) {
            if alias == name {
                let absolute = match path.first().map(String::as_str) {
                    Some("crate") => path[1..].to_vec(),
                    Some("self") => {
                        let mut p = module.clone();
                        p.extend(path[1..].iter().cloned());
                        p
                    }
                    Some(first) if modules.contains_key(&child(module, first)) => {
                        let mut p = module.clone();
                        p.extend(path.iter().cloned());
                        p
                    }
                    _ => return None,
                };
                return Some(absolute);
            }
        }
    }
    None
}

fn child(module: &ModPath, name: &str) -> ModPath {
    let mut path = module.clone();
    path.push(name.to_string());
    path
}

/// The paths of a `use` tree with the name each brings in: `a::{b, c as d}` is
/// `(a::b, b)` and `(a::c, d)`.
fn use_tree(tree: &str) -> Vec<(Vec<String>, String)> {
    let mut out = Vec::new();
    let flat: String = tree.split_whitespace().collect::<Vec<_>>().join(" ");
    expand(&flat, Vec::new(), &mut out);
    out
}

fn expand(tree: &str, prefix: Vec<String>, out: &mut Vec<(Vec<String>, String)>) {
    let tree = tree.trim();
    if let Some(open) = tree.find('{') {
        let head = tree[..open].trim_end_matches("::");
        let mut base = prefix.clone();
        base.extend(head.split("::").filter(|s| !s.is_empty()).map(String::from));
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        for part in split_top(inner) {
            expand(part, base.clone(), out);
        }
        return;
    }
    let (path, alias) = match tree.split_once(" as ") {
        Some((path, alias)) => (path, alias.trim().to_string()),
        None => (tree, tree.rsplit("::").next().unwrap_or(tree).to_string()),
    };
    let mut full = prefix;
    full.extend(path.split("::").filter(|s| !s.is_empty()).map(String::from));
    if alias == "self" {
        let name = full.last().cloned().unwrap_or_default();
        full.pop();
        full.push(name.clone());
        out.push((full, name));
    } else {
        out.push((full, alias));
    }
}

/// `a, b::{c, d}, e` split at its top-level commas.
fn split_top(list: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in list.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&list[start..]);
    parts.into_iter().filter(|p| !p.trim().is_empty()).collect()
}

/// The import edges between the crate's files: module → the modules it imports from. A
/// module's code naming its own child (`child::f()`, `use child::Thing;`) is an edge too;
/// re-exporting one (`pub use child::Thing;`) only names it for others.
pub(crate) fn imports(modules: &BTreeMap<ModPath, Module>) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    modules
        .iter()
        .map(|(path, module)| {
            let children: Vec<String> = modules
                .keys()
                .filter(|other| other.len() == path.len() + 1 && other.starts_with(path))
                .filter_map(|other| other.last().cloned())
                .collect();
            let own_code = without_reexports(&module.code);
            let targets = named_paths(&module.code)
                .into_iter()
                .chain(child_paths(&own_code, &children))
                .filter_map(|named| resolve(modules, path, &named))
                .filter(|target| target != path)
                .collect();
            (path.clone(), targets)
        })
        .collect()
}

/// `code` without its `pub use …;` statements.
fn without_reexports(code: &str) -> String {
    code.split_inclusive(';')
        .filter(|statement| {
            let words: Vec<&str> = statement.split_whitespace().take(2).collect();
            !(words.len() == 2 && words[0].starts_with("pub") && words[1] == "use")
        })
        .collect()
}

/// The paths `code` names from one of `children` (`child::…`), as `self::child::…`.
fn child_paths(code: &str, children: &[String]) -> Vec<Vec<String>> {
    let chars: Vec<char> = code.chars().collect();
    let mut paths = Vec::new();
    for at in 0..chars.len() {
        let starts_word = at == 0 || !is_ident(chars[at - 1]) && chars[at - 1] != ':';
        if !starts_word {
            continue;
        }
        for child in children {
            let after = at + child.chars().count();
            if matches_at(&chars, at, child) && matches_at(&chars, after, "::") {
                let (found, _) = read_path(&chars, at, vec!["self".to_string()]);
                paths.extend(found);
            }
        }
    }
    paths
}

/// Every circle of `edges` (one per strongly connected group of two or more files).
pub(crate) fn circles(edges: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<Vec<ModPath>> {
    let nodes: Vec<&ModPath> = edges.keys().collect();
    let reach = |from: &ModPath| -> BTreeSet<ModPath> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(node) = todo.pop() {
            for next in edges.get(&node).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    todo.push(next.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&ModPath, BTreeSet<ModPath>> =
        nodes.iter().map(|n| (*n, reach(n))).collect();
    let mut groups: Vec<Vec<ModPath>> = Vec::new();
    let mut placed = BTreeSet::new();
    for node in &nodes {
        if placed.contains(*node) || !reached[node].contains(*node) {
            continue;
        }
        let group: Vec<ModPath> = nodes
            .iter()
            .filter(|other| reached[node].contains(**other) && reached[**other].contains(*node))
            .map(|n| (*n).clone())
            .collect();
        placed.extend(group.iter().cloned());
        groups.push(group);
    }
    groups
}

/// `path` as `crate::a::b`, for messages.
pub(crate) fn shown(path: &ModPath) -> String {
    std::iter::once("crate")
        .chain(path.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join("::")
}

/// One function of product code and its length in lines, from `fn` to its closing brace.
#[derive(Debug)]
pub(crate) struct Function {
    /// Its name.
    pub(crate) name: String,
    /// The line its `fn` is on (1-based).
    pub(crate) line: usize,
    /// Its lines.
    pub(crate) lines: usize,
}

/// Every function of `code` (product code), with its length: braces are counted outside
/// string and character literals.
pub(crate) fn functions(code: &str) -> Vec<Function> {
    let lines: Vec<&str> = code.lines().collect();
    let mut found = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        let Some(name) = fn_name(line) else { continue };
        let mut depth = 0i32;
        let mut opened = false;
        for (offset, body) in lines[at..].iter().enumerate() {
            let balance = code_braces(body);
            opened |= balance.0 > 0;
            depth += balance.0 - balance.1;
            if !opened && body.trim_end().ends_with(';') {
                break;
            }
            if opened && depth <= 0 {
                found.push(Function {
                    name: name.clone(),
                    line: at + 1,
                    lines: offset + 1,
                });
                break;
            }
        }
    }
    found
}

/// The name of the function `line` declares, if it declares one.
fn fn_name(line: &str) -> Option<String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words.iter().position(|w| *w == "fn")?;
    let before_ok = words[..at].iter().all(|w| {
        matches!(*w, "pub" | "async" | "const" | "unsafe" | "extern") || w.starts_with("pub(")
    });
    let name: String = words
        .get(at + 1)?
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (before_ok && !name.is_empty()).then_some(name)
}

/// The `{` and `}` of `line` outside string and character literals.
fn code_braces(line: &str) -> (i32, i32) {
    let chars: Vec<char> = line.chars().collect();
    let (mut open, mut close) = (0, 0);
    let mut at = 0;
    while at < chars.len() {
        match chars[at] {
            '"' => {
                at += 1;
                while at < chars.len() && chars[at] != '"' {
                    at += if chars[at] == '\\' { 2 } else { 1 };
                }
            }
            // A character literal ('{', '\''); a lifetime ('a) has no closing quote nearby.
            '\'' if chars.get(at + 2) == Some(&'\'') => at += 2,
            '\'' if chars.get(at + 1) == Some(&'\\') => at += 3,
            '{' => open += 1,
            '}' => close += 1,
            _ => {}
        }
        at += 1;
    }
    (open, close)
}
