//! Checks on the shape of `src/` itself, read as text: the contract with the cluster is spelled in one place.
//!
//! `string_literals` is a small Rust lexer: enough to tell string literals from comments, char literals and
//! lifetimes, not a parser. Its own tests below feed it the tricky cases.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, sorted, with paths relative to the crate root.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries =
            fs::read_dir(&dir).unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

fn crate_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn relative(path: &Path) -> String {
    path.strip_prefix(crate_root())
        .unwrap_or(path)
        .display()
        .to_string()
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok {
    Ident(String),
    /// A string literal's contents (plain, raw, byte or C string), escapes left as written.
    Str(String),
    /// `::`
    Path,
    Punct(char),
}

/// The tokens of `source` that matter here, each with its 1-based line. Comments, char literals, lifetimes and
/// numbers are dropped; that is enough to tell string literals and paths from prose.
fn tokens(source: &str) -> Vec<(usize, Tok)> {
    let chars: Vec<char> = source.chars().collect();
    let mut found = Vec::new();
    let mut line = 1;
    let mut i = 0;
    let lines_in = |from: usize, to: usize| {
        chars[from..to.min(chars.len())]
            .iter()
            .filter(|&&c| c == '\n')
            .count()
    };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let start = i;
        if c == '/' && next == Some('/') {
            i = chars[i..]
                .iter()
                .position(|&c| c == '\n')
                .map_or(chars.len(), |p| i + p);
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == '"' {
            let (text, end) = quoted(&chars, i + 1);
            found.push((line, Tok::Str(text)));
            i = end;
        } else if c == '\'' {
            i = after_quote(&chars, i);
        } else if c.is_ascii_digit() {
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
        } else if c.is_alphabetic() || c == '_' {
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let at = chars.get(i).copied();
            match (word.as_str(), at) {
                ("r" | "br" | "cr", Some('"' | '#')) => {
                    let hashes = chars[i..].iter().take_while(|&&c| c == '#').count();
                    if chars.get(i + hashes) != Some(&'"') {
                        // `r#ident`, a raw identifier.
                        let from = i + hashes;
                        i = from;
                        while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                            i += 1;
                        }
                        found.push((line, Tok::Ident(chars[from..i].iter().collect())));
                        continue;
                    }
                    let open = i + hashes + 1;
                    let close: String = std::iter::once('"')
                        .chain((0..hashes).map(|_| '#'))
                        .collect();
                    let rest: String = chars[open..].iter().collect();
                    let len = rest
                        .find(&close)
                        .map_or(rest.len(), |p| rest[..p].chars().count());
                    found.push((line, Tok::Str(chars[open..open + len].iter().collect())));
                    i = (open + len + 1 + hashes).min(chars.len());
                }
                ("b" | "c", Some('"')) => {
                    let (text, end) = quoted(&chars, i + 1);
                    found.push((line, Tok::Str(text)));
                    i = end;
                }
                ("b", Some('\'')) => i = after_quote(&chars, i),
                _ => found.push((line, Tok::Ident(word))),
            }
        } else if c == ':' && next == Some(':') {
            found.push((line, Tok::Path));
            i += 2;
        } else {
            if !c.is_whitespace() {
                found.push((line, Tok::Punct(c)));
            }
            i += 1;
        }
        line += lines_in(start, i);
    }
    found
}

/// The contents of every string literal in `source`, with its line.
fn string_literals(source: &str) -> Vec<(usize, String)> {
    tokens(source)
        .into_iter()
        .filter_map(|(line, t)| match t {
            Tok::Str(s) => Some((line, s)),
            _ => None,
        })
        .collect()
}

/// The text of a `"..."` literal whose contents start at `from`, and the index after its closing quote.
fn quoted(chars: &[char], from: usize) -> (String, usize) {
    let mut i = from;
    while i < chars.len() && chars[i] != '"' {
        i += if chars[i] == '\\' { 2 } else { 1 };
    }
    let end = i.min(chars.len());
    (
        chars[from..end].iter().collect(),
        (end + 1).min(chars.len()),
    )
}

/// Past a char literal (`'x'`, `'\n'`, `'\u{1F600}'`) or a lifetime (`'a`) starting at the quote at `at`.
fn after_quote(chars: &[char], at: usize) -> usize {
    if chars.get(at + 1) == Some(&'\\') {
        let close = chars[at + 2..].iter().position(|&c| c == '\'');
        return close.map_or(chars.len(), |p| at + 2 + p + 1);
    }
    if chars.get(at + 2) == Some(&'\'') {
        return at + 3;
    }
    at + 1
}

/// NB: `#[kube(group = ..)]` accepts only a literal; the CRD's test checks it against `contract::GROUP`.
const ALLOWED: &[(&str, &str)] = &[("src/inventory/crd.rs", "localpv.io")];

#[test]
fn only_the_contract_spells_a_localpv_io_key() {
    let src = crate_root().join("src");
    let files = rust_files(&src);
    assert!(
        files.len() > 10,
        "found only {} files under {}",
        files.len(),
        src.display()
    );
    let mut offenders = Vec::new();
    for path in files {
        let name = relative(&path);
        if name == "src/contract.rs" {
            continue;
        }
        let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {name}: {e}"));
        for (line, literal) in string_literals(&text) {
            if literal.contains("localpv.io")
                && !ALLOWED.contains(&(name.as_str(), literal.as_str()))
            {
                offenders.push(format!("{name}:{line}: {literal:?}"));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "spell these with the constants of src/contract.rs:\n{}",
        offenders.join("\n")
    );
}

#[test]
fn the_contract_spells_the_keys_it_owns() {
    let text = fs::read_to_string(crate_root().join("src/contract.rs"))
        .expect("src/contract.rs is readable");
    let literals: Vec<String> = string_literals(&text).into_iter().map(|(_, l)| l).collect();
    assert!(
        literals.iter().any(|l| l == "localpv.io/node"),
        "{literals:?}"
    );
}

#[test]
fn the_lexer_finds_literals_and_skips_comments() {
    let source = r####"
// "in a line comment"
/* "in a block /* nested "still comment" */ comment" */
/// "in a doc comment"
fn f<'a>(x: &'a str) -> char {
    let q = '"';
    let e = '\'';
    let u = '\u{22}';
    let b = b'"';
    let s = "plain \"escaped\" text";
    let r = r#"raw "quoted" text"#;
    let bs = b"bytes";
    let rr = r##"two "# hashes"##;
    let r#type = 1;
    'outer: loop { break 'outer; }
    let last = "after
a newline";
    q
}
"####;
    let found = string_literals(source);
    let texts: Vec<&str> = found.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(
        texts,
        [
            r#"plain \"escaped\" text"#,
            r#"raw "quoted" text"#,
            "bytes",
            r##"two "# hashes"##,
            "after\na newline",
        ]
    );
    assert_eq!(found[0].0, 10, "line of the first literal");
    assert_eq!(found[4].0, 16, "line of the last literal");
}

#[test]
fn a_key_hidden_after_a_quote_char_is_still_found() {
    let found = string_literals("let a = '\"'; let b = \"localpv.io/node\";");
    assert_eq!(found, [(1, "localpv.io/node".to_string())]);
}

/// One source file as a node of the module tree: `src/agent/pass.rs` is `["agent", "pass"]`; a file wired in with
/// `#[path]` takes the name its parent gives it.
struct SourceFile {
    name: String,
    module: Vec<String>,
    tokens: Vec<(usize, Tok)>,
}

fn module_of(path: &Path) -> Vec<String> {
    let rel = path
        .strip_prefix(crate_root().join("src"))
        .expect("a file under src/");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().expect("a file name");
    let stem = last.trim_end_matches(".rs");
    if !matches!(stem, "mod" | "lib" | "main") {
        parts.push(stem.to_string());
    }
    parts
}

fn source_files() -> Vec<SourceFile> {
    let mut files: Vec<SourceFile> = rust_files(&crate_root().join("src"))
        .into_iter()
        .map(|path| {
            let text = fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            SourceFile {
                name: relative(&path),
                module: module_of(&path),
                tokens: tokens(&text),
            }
        })
        .collect();
    // `#[path = "x.rs"] mod name;` in a file of module M: x.rs (beside that file) is module M::name.
    let mut renames = Vec::new();
    for file in &files {
        for w in file.tokens.windows(8) {
            if let [
                (_, Tok::Punct('#')),
                (_, Tok::Punct('[')),
                (_, Tok::Ident(path)),
                (_, Tok::Punct('=')),
                (_, Tok::Str(target)),
                (_, Tok::Punct(']')),
                (_, Tok::Ident(kw)),
                (_, Tok::Ident(name)),
            ] = w
                && path == "path"
                && kw == "mod"
            {
                let dir = Path::new(&file.name).parent().expect("a directory");
                let mut module = file.module.clone();
                module.push(name.clone());
                renames.push((dir.join(target).display().to_string(), module));
            }
        }
    }
    for (name, module) in renames {
        if let Some(file) = files.iter_mut().find(|f| f.name == name) {
            file.module = module;
        }
    }
    files
}

/// Every `crate::`/`super::`/`self::` path in `tokens`, resolved to absolute module paths (each as far as it is
/// spelled: `crate::plan::pv::PvView` gives `plan, pv, PvView`), from a file of module `module`. Inline modules
/// (`mod tests { .. }`) are followed so their `super` is the file's module. Groups (`use crate::{a, b::c}`) expand.
fn paths(module: &[String], tokens: &[(usize, Tok)]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut scope = module.to_vec();
    // Brace depth at which each inline module opened.
    let mut inline: Vec<usize> = Vec::new();
    let mut depth = 0;
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i].1 {
            Tok::Ident(kw) if kw == "mod" => {
                if let (Some((_, Tok::Ident(name))), Some((_, Tok::Punct('{')))) =
                    (tokens.get(i + 1), tokens.get(i + 2))
                {
                    scope.push(name.clone());
                    inline.push(depth);
                    depth += 1;
                    i += 3;
                    continue;
                }
            }
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => {
                depth -= 1;
                if inline.last() == Some(&depth) {
                    inline.pop();
                    scope.pop();
                }
            }
            Tok::Ident(first) if matches!(first.as_str(), "crate" | "super" | "self") => {
                let after_path = i == 0 || tokens[i - 1].1 != Tok::Path;
                if after_path && tokens.get(i + 1).map(|t| &t.1) == Some(&Tok::Path) {
                    let (end, found) = expand(&scope, tokens, i);
                    out.extend(found);
                    i = end;
                    continue;
                }
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// Resolve the path starting at `tokens[at]` (`crate`, `super` or `self`) from `scope`; returns the index after it.
fn expand(scope: &[String], tokens: &[(usize, Tok)], at: usize) -> (usize, Vec<Vec<String>>) {
    let mut base: Vec<String> = Vec::new();
    let mut i = at;
    let mut current = scope.to_vec();
    loop {
        match tokens.get(i).map(|t| &t.1) {
            Some(Tok::Ident(w)) if w == "crate" && i == at => current.clear(),
            Some(Tok::Ident(w)) if w == "super" => {
                current.pop();
            }
            Some(Tok::Ident(w)) if w == "self" && i == at => {}
            _ => break,
        }
        i += 1;
        if tokens.get(i).map(|t| &t.1) != Some(&Tok::Path) {
            return (i, vec![current]);
        }
        i += 1;
    }
    base.extend(current);
    group_or_path(base, tokens, i)
}

/// Continue a path `base` at `tokens[i]`: identifiers joined by `::`, or a `{ .. }` group of such paths.
fn group_or_path(
    mut base: Vec<String>,
    tokens: &[(usize, Tok)],
    mut i: usize,
) -> (usize, Vec<Vec<String>>) {
    loop {
        match tokens.get(i).map(|t| &t.1) {
            Some(Tok::Ident(w)) => {
                base.push(w.clone());
                i += 1;
                if tokens.get(i).map(|t| &t.1) != Some(&Tok::Path) {
                    return (i, vec![base]);
                }
                i += 1;
            }
            Some(Tok::Punct('{')) => {
                let mut found = Vec::new();
                i += 1;
                while let Some(t) = tokens.get(i).map(|t| &t.1) {
                    match t {
                        Tok::Punct('}') => return (i + 1, found),
                        Tok::Punct(',') => i += 1,
                        Tok::Ident(_) | Tok::Punct('{') => {
                            let (end, more) = group_or_path(base.clone(), tokens, i);
                            found.extend(more);
                            // Skip `as name` and anything else up to the next separator.
                            i = end;
                            while let Some(t) = tokens.get(i).map(|t| &t.1) {
                                if matches!(t, Tok::Punct(',' | '}')) {
                                    break;
                                }
                                i += 1;
                            }
                        }
                        _ => i += 1,
                    }
                }
                return (i, found);
            }
            _ => return (i, vec![base]),
        }
    }
}

/// Edges between sibling modules: `from` and `to` are children of `parent`, and some file in `from`'s subtree names
/// something inside `to`. A child naming its parent's items (`super::Control`) is not an edge: the parent declares
/// its children, and that is how Rust modules are built; only siblings (and top-level modules, the crate's
/// children) must not need each other both ways.
fn sibling_edges(files: &[SourceFile]) -> BTreeSet<(Vec<String>, String, String, String)> {
    let modules: BTreeSet<Vec<String>> = files
        .iter()
        .flat_map(|f| (1..=f.module.len()).map(|n| f.module[..n].to_vec()))
        .collect();
    let mut edges = BTreeSet::new();
    for file in files {
        for target in paths(&file.module, &file.tokens) {
            let common = file
                .module
                .iter()
                .zip(&target)
                .take_while(|(a, b)| a == b)
                .count();
            let (Some(from), Some(to)) = (file.module.get(common), target.get(common)) else {
                continue;
            };
            if modules.contains(&target[..=common]) {
                edges.insert((
                    file.module[..common].to_vec(),
                    from.clone(),
                    to.clone(),
                    file.name.clone(),
                ));
            }
        }
    }
    edges
}

/// A cycle among the sibling edges, as `a -> b -> a` under its parent, if there is one.
fn find_cycle(edges: &BTreeSet<(Vec<String>, String, String, String)>) -> Option<String> {
    let mut graph: BTreeMap<(Vec<String>, String), BTreeSet<String>> = BTreeMap::new();
    for (parent, from, to, _) in edges {
        graph
            .entry((parent.clone(), from.clone()))
            .or_default()
            .insert(to.clone());
    }
    // Depth-first search per node; graphs are tiny.
    for (parent, start) in graph.keys() {
        let mut stack = vec![vec![start.clone()]];
        while let Some(route) = stack.pop() {
            let last = route.last().expect("a route is never empty");
            for next in graph
                .get(&(parent.clone(), last.clone()))
                .into_iter()
                .flatten()
            {
                if next == start {
                    let via: Vec<String> = route
                        .windows(2)
                        .chain(std::iter::once(&[last.clone(), next.clone()][..]))
                        .map(|w| {
                            let by: Vec<&str> = edges
                                .iter()
                                .filter(|e| e.0 == *parent && e.1 == w[0] && e.2 == w[1])
                                .map(|e| e.3.as_str())
                                .collect();
                            format!("{} -> {} ({})", w[0], w[1], by.join(", "))
                        })
                        .collect();
                    return Some(format!(
                        "under crate::{}: {}",
                        parent.join("::"),
                        via.join("; ")
                    ));
                }
                if !route.contains(next) {
                    let mut longer = route.clone();
                    longer.push(next.clone());
                    stack.push(longer);
                }
            }
        }
    }
    None
}

/// Edges left out of the cycle check, `(parent, from, to)`, each with why and what removes it.
const ALLOWED_EDGES: &[(&str, &str, &str)] = &[];

/// No module needs a sibling that needs it back, at any level: top-level modules, and the files of one module.
#[test]
fn no_module_cycle() {
    let files = source_files();
    let mut edges = sibling_edges(&files);
    edges.retain(|(parent, from, to, _)| {
        !ALLOWED_EDGES.contains(&(parent.join("::").as_str(), from.as_str(), to.as_str()))
    });
    assert!(
        edges
            .iter()
            .any(|e| e.0.is_empty() && e.1 == "agent" && e.2 == "plan"),
        "the scan lost the agent -> plan edge: {edges:#?}"
    );
    if let Some(cycle) = find_cycle(&edges) {
        panic!("module cycle {cycle}");
    }
}

#[test]
fn the_cycle_scan_sees_groups_super_and_inline_modules() {
    let source = "use crate::{a::x, b::{self, y}};\nuse super::c::Z;\nmod tests { use super::d; }\nfn f() { crate::e::g(); }";
    let scope = vec!["m".to_string(), "n".to_string()];
    let found: Vec<String> = paths(&scope, &tokens(source))
        .iter()
        .map(|p| p.join("::"))
        .collect();
    assert_eq!(
        found,
        ["a::x", "b::self", "b::y", "m::c::Z", "m::n::d", "e::g"]
    );
}

#[test]
fn a_two_module_cycle_is_reported() {
    let files = [
        ("src/a.rs", "use crate::b::X;"),
        ("src/b.rs", "fn f() { crate::a::g() }"),
    ]
    .map(|(name, text)| SourceFile {
        name: name.to_string(),
        module: vec![name[4..5].to_string()],
        tokens: tokens(text),
    });
    let cycle = find_cycle(&sibling_edges(&files)).expect("a cycle");
    assert!(cycle.contains("a -> b (src/a.rs)"), "{cycle}");
    assert!(cycle.contains("b -> a (src/b.rs)"), "{cycle}");
}

/// docs/architecture.md's module table names every top-level module under src/ and nothing else.
#[test]
fn the_architecture_table_lists_every_top_level_module() {
    let doc = fs::read_to_string(crate_root().join("docs/architecture.md"))
        .expect("docs/architecture.md is readable");
    let listed: BTreeSet<String> = doc
        .lines()
        .filter_map(|l| l.strip_prefix("| `")?.split('`').next().map(str::to_string))
        .collect();
    let modules: BTreeSet<String> = source_files()
        .into_iter()
        .filter_map(|f| f.module.first().cloned())
        .collect();
    let missing: Vec<&String> = modules.difference(&listed).collect();
    let extra: Vec<&String> = listed.difference(&modules).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "docs/architecture.md's table: missing {missing:?}, naming modules that do not exist {extra:?}"
    );
}

/// The text of docs/architecture.md's section `## <title>`, up to the next one.
fn architecture_section(title: &str) -> String {
    let doc = fs::read_to_string(crate_root().join("docs/architecture.md"))
        .expect("docs/architecture.md is readable");
    let after = doc
        .split(&format!("## {title}\n"))
        .nth(1)
        .unwrap_or_else(|| panic!("docs/architecture.md has a section {title}"));
    after.split("\n## ").next().unwrap_or(after).to_string()
}

/// docs/architecture.md's "Where each decision lives" names, for each decision, a file and a function in it.
#[test]
fn every_decision_in_the_architecture_map_names_a_function_that_exists() {
    let section = architecture_section("Where each decision lives");
    let mut rows = 0;
    for line in section
        .lines()
        .filter(|l| l.starts_with("| ") && l.contains("` `"))
    {
        let cell = line
            .trim_end_matches('|')
            .rsplit('|')
            .next()
            .unwrap_or_default()
            .trim();
        let parts: Vec<&str> = cell.split('`').filter(|p| !p.trim().is_empty()).collect();
        let [file, function] = parts[..] else {
            panic!("a row names `file` `function`: {line}");
        };
        let text = fs::read_to_string(crate_root().join(file))
            .unwrap_or_else(|e| panic!("{file} (named in docs/architecture.md): {e}"));
        assert!(
            text.contains(&format!("fn {function}(")) || text.contains(&format!("fn {function}<")),
            "docs/architecture.md names {function} in {file}, which has no such function"
        );
        rows += 1;
    }
    assert!(rows >= 10, "the map lists the decisions ({rows} rows)");
}

/// Whether a source file holds only tests or their fixtures.
fn is_test_file(path: &Path) -> bool {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    name == "tests.rs"
        || name == "fixtures.rs"
        || name.ends_with("_tests.rs")
        || path.components().any(|c| c.as_os_str() == "tests")
}

/// The type names (struct, enum, union, trait, type alias) defined at the top level of `source`.
fn top_level_type_names(source: &str) -> Vec<String> {
    let mut names = Vec::new();
    for line in source.lines() {
        let mut rest = line;
        if let Some(after) = rest.strip_prefix("pub") {
            rest = match after.strip_prefix('(') {
                Some(scoped) => scoped.split_once(')').map_or("", |(_, r)| r),
                None => after,
            }
            .trim_start();
        }
        for kind in ["struct ", "enum ", "union ", "trait ", "type "] {
            if let Some(named) = rest.strip_prefix(kind) {
                let name: String = named
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if name.starts_with(|c: char| c.is_ascii_uppercase()) {
                    names.push(name);
                }
            }
        }
    }
    names
}

#[test]
fn the_type_name_scan_sees_visibility_and_skips_nested_items() {
    let source = "pub struct A;\npub(crate) enum B {}\nstruct C<T>(T);\ntype D = u8;\n    struct Nested;\nfn f() {}\n";
    assert_eq!(top_level_type_names(source), ["A", "B", "C", "D"]);
}

/// docs/architecture.md's "Names in several modules": a type name defined at the top level of more than one source
/// file (tests aside) is a role listed there, and every name listed is still defined more than once.
#[test]
fn a_type_name_defined_in_several_modules_is_a_listed_role() {
    let mut defined: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for file in rust_files(&crate_root().join("src")) {
        if is_test_file(file.strip_prefix(crate_root()).unwrap_or(&file)) {
            continue;
        }
        let source = fs::read_to_string(&file).expect("a readable source file");
        for name in top_level_type_names(&source) {
            defined.entry(name).or_default().push(relative(&file));
        }
    }
    let section = architecture_section("Names in several modules");
    let listed: BTreeSet<String> = section
        .lines()
        .filter_map(|l| l.strip_prefix("| ")?.split(' ').next().map(str::to_string))
        .filter(|n| n.starts_with(|c: char| c.is_ascii_uppercase()))
        .collect();
    let twice: BTreeMap<&String, &Vec<String>> = defined
        .iter()
        .filter(|(_, files)| files.len() > 1)
        .collect();
    let unlisted: Vec<String> = twice
        .iter()
        .filter(|(name, _)| !listed.contains(**name))
        .map(|(name, files)| format!("{name} ({})", files.join(", ")))
        .collect();
    let stale: Vec<&String> = listed.iter().filter(|n| !twice.contains_key(n)).collect();
    assert!(
        unlisted.is_empty(),
        "type names defined in several modules with no shared meaning in docs/architecture.md: rename one, or \
         list the role: {unlisted:#?}"
    );
    assert!(
        stale.is_empty(),
        "docs/architecture.md lists names no longer defined twice: {stale:?}"
    );
}
