//! The documentation checked against the repository, so that a rename which leaves the docs
//! behind fails a test instead of misleading a reader. Read: README.md, docs/*.md,
//! tests/README.md, deploy/README.md and tests/fixtures/recordings/README.md. Checked, outside
//! fenced code blocks:
//!
//! - every relative Markdown link reaches a file or directory of the repository, and a link with
//!   an `#anchor` into our Markdown reaches a heading of it (GitHub's anchor rules);
//! - every repository path written in backticks exists (`crates/server/src/negotiate.rs`,
//!   `hack/envtest.sh`, `deploy/base/`). A path is one whose first segment names an entry of the
//!   repository's root or of the Markdown file's own directory (and, on the pages under docs/,
//!   of `crates/`: `registry/src/store/mod.rs`), or that starts with `../`. Paths git ignores (what
//!   `make certs` or a build writes) are not checked, nor anything with a placeholder, a glob
//!   or a URL;
//! - every Rust path written in backticks whose first segment is a module of `src/`
//!   (`registry::fence`, `auth::tls::server_config`) names a module, or an item defined in that
//!   module's files (a `fn`, `struct`, `enum`, `trait`, `const`, `type`, `mod`, `static`,
//!   `union` or `macro_rules!`), and every `Type::member` whose type is defined in `src/`
//!   (`Store::create_object`, `ApiError::Fenced`) names a function, constant, variant or field
//!   defined there. Names of other crates (`kube::core::Duration`, `KubeDouble::builder`) are
//!   not checked.
//!
//! And docs/README.md, the index, links every page of docs/. External links are not followed
//! (no network). Each failure names the file, the line and what is missing.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Component, Path, PathBuf};

/// The Markdown files checked, relative to the repository's root (`docs/*.md` is expanded).
const DOCUMENTS: &[&str] = &[
    "README.md",
    "docs/*.md",
    "tests/README.md",
    "deploy/README.md",
    "tests/fixtures/recordings/README.md",
];

/// Stale names the check knows of in files this change could not edit: (file, name, the fix).
/// A name here that the file no longer uses fails the check until it is taken off the list.
const KNOWN_STALE: &[(&str, &str, &str)] = &[(
    "tests/README.md",
    "src/table.rs",
    "the double's Table is tests/support/kube-double/src/table.rs",
)];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The documents, as paths relative to the root, sorted within `docs/`.
fn documents() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for pattern in DOCUMENTS {
        if let Some(dir) = pattern.strip_suffix("/*.md") {
            let mut pages: Vec<PathBuf> = fs::read_dir(root().join(dir))
                .unwrap()
                .map(|entry| entry.unwrap().path())
                .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
                .map(|path| Path::new(dir).join(path.file_name().unwrap()))
                .collect();
            pages.sort();
            out.extend(pages);
        } else {
            out.push(PathBuf::from(pattern));
        }
    }
    out
}

// ----- Markdown, as far as these checks need it -----

/// A run of text outside fenced code blocks (a paragraph, a list, a table), with the line
/// number of its first line.
struct Block {
    first_line: usize,
    text: String,
}

/// The document's text outside fenced code blocks, cut at blank lines (a code span never
/// crosses a blank line).
fn blocks(markdown: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut fence: Option<String> = None;
    let mut current: Option<Block> = None;
    for (index, line) in markdown.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(open) = &fence {
            if trimmed.starts_with(open.as_str()) {
                fence = None;
            }
            continue;
        }
        let marker: String = trimmed
            .chars()
            .take_while(|&c| c == '`' || c == '~')
            .collect();
        if marker.len() >= 3 && marker.chars().all(|c| c == marker.chars().next().unwrap()) {
            out.extend(current.take());
            fence = Some(marker);
            continue;
        }
        if line.trim().is_empty() {
            out.extend(current.take());
            continue;
        }
        let block = current.get_or_insert_with(|| Block {
            first_line: index + 1,
            text: String::new(),
        });
        block.text.push_str(line);
        block.text.push('\n');
    }
    out.extend(current);
    out
}

/// The line of a byte offset within a block.
fn line_of(block: &Block, offset: usize) -> usize {
    block.first_line + block.text[..offset].matches('\n').count()
}

/// An inline code span of a block: the byte range of its backticks and of its content.
struct Span {
    open: usize,
    start: usize,
    end: usize,
    close: usize,
    content: String,
}

/// The inline code spans of a block. A span opened by a run of N backticks ends at the next
/// run of exactly N backticks; a line break inside a span is a space.
fn spans(text: &str) -> Vec<Span> {
    let bytes = text.as_bytes();
    let run_at = |i: usize| bytes[i..].iter().take_while(|&&b| b == b'`').count();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'`' {
            i += 1;
            continue;
        }
        let run = run_at(i);
        let start = i + run;
        let mut j = start;
        let mut end = None;
        while j < bytes.len() {
            if bytes[j] == b'`' {
                let close = run_at(j);
                if close == run {
                    end = Some(j);
                    break;
                }
                j += close;
            } else {
                j += 1;
            }
        }
        match end {
            Some(end) => {
                let content = text[start..end].replace('\n', " ");
                out.push(Span {
                    open: i,
                    start,
                    end,
                    close: end + run,
                    content,
                });
                i = end + run;
            }
            None => i = start,
        }
    }
    out
}

/// The code spans of a block: (byte offset of the content, content).
fn code_spans(text: &str) -> Vec<(usize, String)> {
    spans(text)
        .into_iter()
        .map(|span| (span.start, span.content))
        .collect()
}

/// The block's text with code spans blanked out (same length, so offsets still hold).
fn without_code(text: &str) -> String {
    let mut out = text.as_bytes().to_vec();
    for span in spans(text) {
        debug_assert!(span.open < span.start && span.start <= span.end && span.end < span.close);
        for byte in &mut out[span.open..span.close] {
            if *byte != b'\n' {
                *byte = b' ';
            }
        }
    }
    String::from_utf8(out).unwrap()
}

/// The targets of the inline links and images of a block (`[text](target "title")`), and of
/// reference definitions (`[name]: target`): (byte offset, target).
fn links(text: &str) -> Vec<(usize, String)> {
    let text = without_code(text);
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(found) = text[from..].find("](") {
        let start = from + found + 2;
        let mut depth = 1;
        let mut end = start;
        for (offset, c) in text[start..].char_indices() {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                '\n' => break,
                _ => {}
            }
            if depth == 0 {
                end = start + offset;
                break;
            }
        }
        if end > start {
            let inner = text[start..end].trim();
            let target = match inner.strip_prefix('<') {
                Some(rest) => rest.split('>').next().unwrap_or_default(),
                None => inner.split_whitespace().next().unwrap_or_default(),
            };
            out.push((start, target.to_string()));
        }
        from = start;
    }
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix('[')
            && let Some(close) = rest.find("]:")
            && !rest[..close].contains(']')
        {
            let target = rest[close + 2..]
                .split_whitespace()
                .next()
                .unwrap_or_default();
            if !target.is_empty() {
                out.push((offset + (line.len() - trimmed.len()), target.to_string()));
            }
        }
        offset += line.len();
    }
    out
}

/// GitHub's anchor of a heading: the text as rendered (code spans without their backticks,
/// links as their text), lowercased, with everything but letters, digits, spaces, `-` and `_`
/// removed and each space made a `-`.
fn github_anchor(heading: &str) -> String {
    let mut rendered = String::new();
    let mut rest = heading;
    // Links: keep the text, drop the target.
    while let Some(open) = rest.find('[') {
        rendered.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after
            .find("](")
            .and_then(|mid| after[mid..].find(')').map(|end| (mid, mid + end)))
        {
            Some((mid, end)) => {
                rendered.push_str(&after[..mid]);
                rest = &after[end + 1..];
            }
            None => {
                rendered.push('[');
                rest = after;
            }
        }
    }
    rendered.push_str(rest);
    rendered
        .to_lowercase()
        .chars()
        .filter(|&c| c.is_alphanumeric() || c == '-' || c == '_' || c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown file's ATX headings, outside fenced code; a repeated anchor gets
/// `-1`, `-2`, ... as on GitHub.
fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for block in blocks(markdown) {
        for line in block.text.lines() {
            let trimmed = line.trim_start();
            let level = trimmed.chars().take_while(|&c| c == '#').count();
            if level == 0 || level > 6 || !trimmed[level..].starts_with(' ') {
                continue;
            }
            let text = trimmed[level..].trim().trim_end_matches('#').trim();
            let anchor = github_anchor(text);
            let count = seen.entry(anchor.clone()).or_insert(0);
            out.insert(if *count == 0 {
                anchor.clone()
            } else {
                format!("{anchor}-{count}")
            });
            *count += 1;
        }
    }
    out
}

// ----- The repository -----

/// `path` (relative, possibly with `..`) joined onto `base` and normalised; `None` when it
/// leaves the repository.
fn normalise(base: &Path, path: &str) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for component in base.join(path).components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::Normal(part) => out.push(part),
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// Whether git ignores `path` (relative to the root), by the patterns of the `.gitignore`
/// files on its way, in the forms this repository uses: `/name` (anchored to that file's
/// directory), `*.ext`, and a plain `name` (any segment).
fn ignored(path: &Path) -> bool {
    let mut dir = PathBuf::new();
    let segments: Vec<String> = path
        .iter()
        .map(|segment| segment.to_string_lossy().into_owned())
        .collect();
    for depth in 0..segments.len() {
        if let Ok(patterns) = fs::read_to_string(root().join(&dir).join(".gitignore")) {
            let below = &segments[depth..];
            for pattern in patterns.lines().map(str::trim) {
                if pattern.is_empty() || pattern.starts_with('#') {
                    continue;
                }
                let pattern = pattern.trim_end_matches('/');
                let hit = if let Some(anchored) = pattern.strip_prefix('/') {
                    below.first().is_some_and(|first| first == anchored)
                } else if let Some(suffix) = pattern.strip_prefix('*') {
                    below.iter().any(|segment| segment.ends_with(suffix))
                } else {
                    below.iter().any(|segment| segment == pattern)
                };
                if hit {
                    return true;
                }
            }
        }
        dir.push(&segments[depth]);
    }
    false
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.map(|entry| entry.unwrap().path()).collect();
    paths.sort();
    for path in paths {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// What one source file defines: items (after `fn`, `struct`, ... ) and members (enum
/// variants and fields: a line that starts with a name followed by `,`, `(`, `{`, `:` or `=`,
/// or by nothing).
#[derive(Default)]
struct Definitions {
    items: BTreeSet<String>,
    types: BTreeSet<String>,
    members: BTreeSet<String>,
}

fn definitions(source: &str) -> Definitions {
    const ITEMS: &[&str] = &[
        "fn",
        "struct",
        "enum",
        "trait",
        "const",
        "type",
        "mod",
        "static",
        "union",
        "macro_rules!",
    ];
    const TYPES: &[&str] = &["struct", "enum", "trait", "type", "union"];
    let mut defs = Definitions::default();
    for line in source.lines() {
        let words: Vec<&str> = line
            .split(|c: char| c.is_whitespace() || c == '(' || c == '<' || c == ';')
            .filter(|word| !word.is_empty())
            .collect();
        for pair in words.windows(2) {
            if ITEMS.contains(&pair[0]) {
                let name: String = pair[1].chars().take_while(|&c| is_ident_char(c)).collect();
                if !name.is_empty() {
                    if TYPES.contains(&pair[0]) {
                        defs.types.insert(name.clone());
                    }
                    defs.items.insert(name);
                }
            }
        }
        let mut member = line.trim_start();
        for visibility in ["pub(crate) ", "pub(super) ", "pub "] {
            if let Some(rest) = member.strip_prefix(visibility) {
                member = rest.trim_start();
            }
        }
        let name: String = member.chars().take_while(|&c| is_ident_char(c)).collect();
        let after = member[name.len()..].trim_start();
        if !name.is_empty()
            && (after.is_empty() || after.starts_with([',', '(', '{', ':', '=']))
            && !after.starts_with("::")
        {
            defs.members.insert(name);
        }
    }
    defs
}

/// The workspace's source: each `.rs` file under `src/` (the binary) and under each crate's
/// `crates/<name>/src/`, with what it defines.
struct Source {
    /// `src/` and every `crates/<name>/src/`: where module paths start.
    roots: Vec<PathBuf>,
    files: BTreeMap<PathBuf, Definitions>,
}

impl Source {
    fn read() -> Self {
        let mut roots = vec![root().join("src")];
        for entry in fs::read_dir(root().join("crates")).unwrap() {
            let src = entry.unwrap().path().join("src");
            if src.is_dir() {
                roots.push(src);
            }
        }
        let mut paths = Vec::new();
        for src in &roots {
            rust_files(src, &mut paths);
        }
        let files = paths
            .into_iter()
            .map(|path| {
                let defs = definitions(&fs::read_to_string(&path).unwrap());
                (path, defs)
            })
            .collect();
        Source { roots, files }
    }

    /// Where modules named `name` are: a crate of the workspace (`svm_server`, or `server` for
    /// `crates/server`), and `…/name.rs` and `…/name/` anywhere in the sources.
    fn modules_named(&self, name: &str) -> Vec<PathBuf> {
        let mut out = BTreeSet::new();
        let crate_dir = name.strip_prefix("svm_").unwrap_or(name);
        let crate_src = root().join("crates").join(crate_dir).join("src");
        if self.roots.contains(&crate_src) {
            out.insert(crate_src.join("lib"));
        }
        for path in self.files.keys() {
            if path.file_stem().is_some_and(|stem| stem == name)
                && !["mod", "lib", "main"].contains(&name)
            {
                out.insert(path.with_extension(""));
            }
            for ancestor in path.ancestors().skip(1) {
                if self.roots.iter().any(|src| ancestor == src) {
                    break;
                }
                if ancestor.file_name().is_some_and(|dir| dir == name) {
                    out.insert(ancestor.to_path_buf());
                }
            }
        }
        out.into_iter().collect()
    }

    /// A module, given as its path without extension (`crates/registry/src/fence`): its file
    /// (`fence.rs`) and every file under its directory (`fence/`); a crate (`…/src/lib`): every
    /// file of it.
    fn module_files(&self, module: &Path) -> Vec<&Definitions> {
        if module.file_name().is_some_and(|name| name == "lib") {
            let src = module.parent().unwrap_or(module);
            return self
                .files
                .iter()
                .filter(|(path, _)| path.starts_with(src))
                .map(|(_, defs)| defs)
                .collect();
        }
        let file = module.with_extension("rs");
        self.files
            .iter()
            .filter(|(path, _)| **path == file || path.starts_with(module))
            .map(|(_, defs)| defs)
            .collect()
    }

    fn is_module(&self, module: &Path) -> bool {
        module.with_extension("rs").is_file() || module.is_dir()
    }

    /// The directory a module's submodules live in (a crate's: its `src/`).
    fn submodule_dir(module: &Path) -> PathBuf {
        if module.file_name().is_some_and(|name| name == "lib") {
            module.parent().unwrap_or(module).to_path_buf()
        } else {
            module.to_path_buf()
        }
    }

    fn defines_type_anywhere(&self, name: &str) -> bool {
        self.files.values().any(|defs| defs.types.contains(name))
    }

    fn defines_member_anywhere(&self, name: &str) -> bool {
        self.files
            .values()
            .any(|defs| defs.items.contains(name) || defs.members.contains(name))
    }

    /// Whether `rest` resolves inside `module`: a submodule, an item of its files, or a type
    /// of its files followed by a member.
    fn resolves(&self, module: &Path, rest: &[&str]) -> bool {
        let Some((first, after)) = rest.split_first() else {
            return true;
        };
        let submodule = Self::submodule_dir(module).join(first);
        let files = self.module_files(module);
        let declared = files.iter().any(|defs| defs.items.contains(*first));
        if self.is_module(&submodule) && self.resolves(&submodule, after) {
            return true;
        }
        if !declared {
            return false;
        }
        after.iter().all(|member| {
            files
                .iter()
                .any(|defs| defs.items.contains(*member) || defs.members.contains(*member))
        })
    }
}

/// A Rust path in a code span's word: `a::b::C`, without generics, call parentheses or a
/// leading `crate::`; `None` for anything else.
fn rust_path(word: &str) -> Option<Vec<String>> {
    let mut cleaned = String::new();
    let mut depth = 0;
    for c in word.chars() {
        match c {
            '<' => depth += 1,
            '>' if depth > 0 => depth -= 1,
            _ if depth == 0 => cleaned.push(c),
            _ => {}
        }
    }
    let cleaned = cleaned.split('(').next().unwrap_or_default();
    let cleaned = cleaned.trim_end_matches(['.', ',', ';', ':', '!', '?', '*']);
    let cleaned = cleaned.strip_prefix("crate::").unwrap_or(cleaned);
    if !cleaned.contains("::") {
        return None;
    }
    let segments: Vec<String> = cleaned.split("::").map(str::to_string).collect();
    let valid = segments.iter().all(|segment| {
        segment
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && segment.chars().all(is_ident_char)
    });
    valid.then_some(segments)
}

/// A repository path in a code span's word, when it looks like one: a `/` in it, and none of
/// the marks of an API path, a placeholder, a glob, a URL or a command line.
fn path_like(word: &str) -> Option<&str> {
    let word = word.trim_matches(|c: char| matches!(c, '(' | ')' | ',' | ';' | '"' | '\''));
    let word = word.trim_end_matches('.');
    let looks = word.contains('/')
        && !word.starts_with('/')
        && !word.contains("//")
        && !word.contains(|c: char| "<>{}[]*?$=:…|&@%#~,;\"'`\\".contains(c));
    looks.then_some(word)
}

// ----- The checks -----

struct Doc {
    path: PathBuf,
    text: String,
}

fn read_documents() -> Vec<Doc> {
    documents()
        .into_iter()
        .map(|path| {
            let text = fs::read_to_string(root().join(&path))
                .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
            Doc { path, text }
        })
        .collect()
}

/// Whether a missing `name` in `file` is a known stale name (and marks it as seen).
fn known_stale(file: &Path, name: &str, seen: &mut BTreeSet<usize>) -> bool {
    let known = KNOWN_STALE.iter().position(|(known_file, known_name, _)| {
        file == Path::new(known_file) && name == *known_name
    });
    match known {
        Some(index) => {
            seen.insert(index);
            true
        }
        None => false,
    }
}

/// The known stale names no longer found: the list must shrink with the docs.
fn fixed_names(seen: &BTreeSet<usize>) -> Vec<String> {
    KNOWN_STALE
        .iter()
        .enumerate()
        .filter(|(index, _)| !seen.contains(index))
        .map(|(_, (file, name, fix))| {
            format!("{file}: `{name}` is no longer there ({fix}): take it off KNOWN_STALE")
        })
        .collect()
}

fn report(what: &str, problems: Vec<String>) {
    assert!(
        problems.is_empty(),
        "{} {what}:\n  {}\n(fix the docs, or the name they use, so they name what the repository has)",
        problems.len(),
        problems.join("\n  ")
    );
}

#[test]
fn every_relative_link_reaches_a_file_and_every_anchor_a_heading() {
    let mut problems = Vec::new();
    for doc in read_documents() {
        let dir = doc.path.parent().unwrap_or(Path::new(""));
        for block in blocks(&doc.text) {
            for (offset, target) in links(&block.text) {
                let line = line_of(&block, offset);
                let place = format!("{}:{line}: link `{target}`", doc.path.display());
                let scheme = target.split(['/', '#']).next().unwrap_or_default();
                if target.is_empty() || scheme.contains(':') {
                    continue; // https:, mailto:: external, not checked.
                }
                let (file, anchor) = match target.split_once('#') {
                    Some((file, anchor)) => (file, Some(anchor)),
                    None => (target.as_str(), None),
                };
                let resolved = if file.is_empty() {
                    Some(doc.path.clone())
                } else {
                    normalise(dir, file)
                };
                let Some(resolved) = resolved else {
                    problems.push(format!("{place}: leaves the repository"));
                    continue;
                };
                if !root().join(&resolved).exists() {
                    problems.push(format!("{place}: no such file {}", resolved.display()));
                    continue;
                }
                let Some(anchor) = anchor else { continue };
                if resolved.extension().is_none_or(|ext| ext != "md") {
                    continue; // An anchor into source (#L10) is GitHub's, not a heading.
                }
                let markdown = fs::read_to_string(root().join(&resolved)).unwrap();
                let known = anchors(&markdown);
                if !known.contains(anchor) {
                    problems.push(format!(
                        "{place}: {} has no heading with the anchor #{anchor}",
                        resolved.display()
                    ));
                }
            }
        }
    }
    report("broken links", problems);
}

#[test]
fn every_repository_path_in_backticks_exists() {
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    for doc in read_documents() {
        let dir = doc.path.parent().unwrap_or(Path::new("")).to_path_buf();
        let mut bases = vec![PathBuf::new()];
        if !dir.as_os_str().is_empty() {
            bases.push(dir.clone());
        }
        if doc.path.starts_with("docs") {
            bases.push(PathBuf::from("crates"));
        }
        for block in blocks(&doc.text) {
            for (offset, span) in code_spans(&block.text) {
                for word in span.split_whitespace() {
                    let Some(path) = path_like(word) else {
                        continue;
                    };
                    let first = path.split('/').next().unwrap_or_default();
                    // The bases in which this path's first segment names something.
                    let candidates: Vec<PathBuf> = if first == ".." || first == "." {
                        // Relative to the file; one that may mean a sibling of the repository
                        // (`../shared/envtest`, from the root) is outside it: not checked.
                        match (normalise(&dir, path), normalise(Path::new(""), path)) {
                            (Some(path), Some(_)) => vec![path],
                            _ => Vec::new(),
                        }
                    } else {
                        bases
                            .iter()
                            .filter(|base| root().join(base).join(first).exists())
                            .map(|base| base.join(path))
                            .collect()
                    };
                    if candidates.is_empty() || candidates.iter().any(|path| ignored(path)) {
                        continue;
                    }
                    if !candidates.iter().any(|path| root().join(path).exists())
                        && !known_stale(&doc.path, path, &mut seen)
                    {
                        let line = line_of(&block, offset);
                        let tried: Vec<String> = candidates
                            .iter()
                            .map(|path| path.display().to_string())
                            .collect();
                        problems.push(format!(
                            "{}:{line}: `{path}`: no such file or directory ({})",
                            doc.path.display(),
                            tried.join(", ")
                        ));
                    }
                }
            }
        }
    }
    problems.extend(fixed_names(&seen));
    report("paths that do not exist", problems);
}

#[test]
fn every_rust_symbol_of_src_in_backticks_is_defined() {
    let source = Source::read();
    let mut problems = Vec::new();
    for doc in read_documents() {
        for block in blocks(&doc.text) {
            for (offset, span) in code_spans(&block.text) {
                for word in span.split_whitespace() {
                    let Some(segments) = rust_path(word) else {
                        continue;
                    };
                    let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
                    let first = segments[0];
                    let modules = source.modules_named(first);
                    let defined = if !modules.is_empty() {
                        modules
                            .iter()
                            .any(|module| source.resolves(module, &segments[1..]))
                    } else if first.starts_with(|c: char| c.is_ascii_uppercase())
                        && source.defines_type_anywhere(first)
                    {
                        segments[1..]
                            .iter()
                            .all(|member| source.defines_member_anywhere(member))
                    } else {
                        continue; // Another crate's name.
                    };
                    if !defined {
                        let line = line_of(&block, offset);
                        let path = segments.join("::");
                        let what = if modules.is_empty() {
                            format!("`{first}` (in src/) has no such member")
                        } else {
                            let places: Vec<String> = modules
                                .iter()
                                .map(|module| {
                                    module
                                        .strip_prefix(root())
                                        .unwrap_or(module)
                                        .display()
                                        .to_string()
                                })
                                .collect();
                            format!("not defined in the module {}", places.join(" or "))
                        };
                        problems.push(format!("{}:{line}: `{path}`: {what}", doc.path.display()));
                    }
                }
            }
        }
    }
    report("Rust names that src/ does not define", problems);
}

#[test]
fn every_page_of_docs_is_in_the_index() {
    let index = fs::read_to_string(root().join("docs/README.md")).unwrap();
    let linked: BTreeSet<String> = blocks(&index)
        .iter()
        .flat_map(|block| links(&block.text))
        .map(|(_, target)| target.split('#').next().unwrap_or_default().to_string())
        .collect();
    let missing: Vec<String> = documents()
        .into_iter()
        .filter(|path| path.starts_with("docs") && !path.ends_with("README.md"))
        .filter_map(|path| {
            path.file_name()
                .map(|name| name.to_string_lossy().into_owned())
        })
        .filter(|page| !linked.contains(page))
        .map(|page| format!("docs/{page} is not linked from docs/README.md"))
        .collect();
    report("pages missing from the index", missing);
}

#[test]
fn anchors_follow_githubs_rules() {
    assert_eq!(
        github_anchor("Clusters that serve storagemigration.k8s.io themselves"),
        "clusters-that-serve-storagemigrationk8sio-themselves"
    );
    assert_eq!(
        github_anchor("A fair share of the apiserver (`deploy/base/flowcontrol.yaml`)"),
        "a-fair-share-of-the-apiserver-deploybaseflowcontrolyaml"
    );
    assert_eq!(
        github_anchor("Walk 1: `kubectl create -f svm.yaml`"),
        "walk-1-kubectl-create--f-svmyaml"
    );
    assert_eq!(
        github_anchor("See [the design](design.md) now"),
        "see-the-design-now"
    );
    let twice = anchors("# Notes\n\n```sh\n# not a heading\n```\n\n## Notes\n");
    assert_eq!(
        twice,
        BTreeSet::from(["notes".to_string(), "notes-1".to_string()])
    );
}

#[test]
fn spans_links_and_paths_are_read_as_markdown_has_them() {
    let block = Block {
        first_line: 7,
        text: "a `x`\nb ``c ` d`` [t](docs/x.md#y \"T\")\n".into(),
    };
    let spans: Vec<String> = code_spans(&block.text)
        .into_iter()
        .map(|(_, s)| s)
        .collect();
    assert_eq!(spans, ["x", "c ` d"]);
    let found = links(&block.text);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].1, "docs/x.md#y");
    assert_eq!(line_of(&block, found[0].0), 8);
    assert_eq!(links("`[no](link)`"), []);
    assert_eq!(
        path_like("crates/server/src/negotiate.rs,"),
        Some("crates/server/src/negotiate.rs")
    );
    for not_a_path in [
        "apps/v1",
        "/apis",
        "<prefix>/leader",
        "https://x/y",
        "tests/*.rs",
    ] {
        let kept = path_like(not_a_path).filter(|path| {
            let first = path.split('/').next().unwrap_or_default();
            root().join(first).exists()
        });
        assert_eq!(kept, None, "{not_a_path}");
    }
    assert_eq!(
        rust_path("registry::Store<S>"),
        Some(vec!["registry".into(), "Store".into()])
    );
    assert_eq!(
        rust_path("Fence::check()."),
        Some(vec!["Fence".into(), "check".into()])
    );
    assert_eq!(rust_path("https://x"), None);
    assert!(ignored(Path::new("certs/apiserver.crt")));
    assert!(ignored(Path::new(".dev/kubeconfig")));
    assert!(!ignored(Path::new("certs/generate.sh")));
}
