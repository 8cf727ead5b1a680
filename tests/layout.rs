//! Checks on the shape of `src/` itself, read as text: the contract with the cluster is spelled in one place.
//!
//! `string_literals` is a small Rust lexer: enough to tell string literals from comments, char literals and
//! lifetimes, not a parser. Its own tests below feed it the tricky cases.

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

/// The contents of every string literal in `source` (plain, raw, byte and C strings), with its 1-based line.
/// Comments, char literals and lifetimes are skipped. Escapes are left as written.
fn string_literals(source: &str) -> Vec<(usize, String)> {
    let chars: Vec<char> = source.chars().collect();
    let mut found = Vec::new();
    let mut line = 1;
    let mut i = 0;
    // Advances over `chars[from..to]`, counting lines.
    let count_lines = |from: usize, to: usize, line: &mut usize| {
        *line += chars[from..to.min(chars.len())]
            .iter()
            .filter(|&&c| c == '\n')
            .count();
    };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            let end = chars[i..]
                .iter()
                .position(|&c| c == '\n')
                .map_or(chars.len(), |p| i + p);
            i = end;
        } else if c == '/' && next == Some('*') {
            let start = i;
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
            count_lines(start, i, &mut line);
        } else if c == '"' {
            let (text, end) = quoted(&chars, i + 1);
            found.push((line, text));
            count_lines(i, end, &mut line);
            i = end;
        } else if c == '\'' {
            i = after_quote(&chars, i);
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let at = chars.get(i).copied();
            match (word.as_str(), at) {
                ("r" | "br" | "cr", Some('"' | '#')) => {
                    let hashes = chars[i..].iter().take_while(|&&c| c == '#').count();
                    if chars.get(i + hashes) != Some(&'"') {
                        continue; // `r#ident`, a raw identifier.
                    }
                    let open = i + hashes + 1;
                    let close: String = std::iter::once('"')
                        .chain((0..hashes).map(|_| '#'))
                        .collect();
                    let rest: String = chars[open..].iter().collect();
                    let len = rest
                        .find(&close)
                        .map_or(rest.len(), |p| rest[..p].chars().count());
                    found.push((line, chars[open..open + len].iter().collect()));
                    let end = (open + len + 1 + hashes).min(chars.len());
                    count_lines(i, end, &mut line);
                    i = end;
                }
                ("b" | "c", Some('"')) => {
                    let (text, end) = quoted(&chars, i + 1);
                    found.push((line, text));
                    count_lines(i, end, &mut line);
                    i = end;
                }
                ("b", Some('\'')) => i = after_quote(&chars, i),
                _ => {}
            }
        } else {
            if c == '\n' {
                line += 1;
            }
            i += 1;
        }
    }
    found
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
