//! Reading the configuration's bytes, bounded, and parsing them again only when they changed.
//!
//! ```text
//!  file or ConfigMap dir ──read (≤ MAX_CONFIG_BYTES in all)──> Source ──fingerprint──> LoadCache: same bytes?
//!                                                                │                        └─ yes: last result
//!                                            check_text (nesting ≤ MAX_DEPTH, entries ≤ MAX_ENTRIES) <─┘
//!                                              └─> YAML parse (aliases bounded by the parser's repetition limit)
//! ```
//!
//! The agent polls the configuration every few seconds; a hostile or careless ConfigMap (deep nesting, thousands
//! of classes) must cost one bounded parse per change, not one per poll. The parse builds a tree with a node per
//! entry, each some tens of bytes more than its text (`a,` is 2 bytes, its node about 100), so the entries are
//! counted before the parser allocates them, not only the bytes.

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::Read;
use std::path::{Path, PathBuf};

use super::{Config, ConfigError, Loaded};

/// Largest configuration read, all files together. A ConfigMap holds at most 1 MiB anyway.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;
/// Deepest nesting of YAML collections accepted; the deepest legitimate key (a selector's values) is about 10.
pub const MAX_DEPTH: usize = 64;
/// Most entries (mapping keys, list items, scalars) accepted, estimated from the text before it is parsed: 256
/// classes of a hundred entries each fit twice over, and the parsed tree stays some MiB.
pub const MAX_ENTRIES: usize = 50_000;

/// The configuration's text as read, before parsing.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Source {
    origin: String,
    kind: Kind,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Kind {
    /// One YAML document (keys at top level, or a ConfigMap manifest).
    Yaml(String),
    /// A mounted ConfigMap: file name -> text.
    Files(BTreeMap<String, String>),
}

impl Source {
    /// Reads a directory (one file per key) or a single file.
    pub fn read(path: &Path) -> Result<Source, ConfigError> {
        let meta = std::fs::metadata(path).map_err(read_err(path))?;
        if meta.is_dir() {
            Self::read_dir(path)
        } else {
            Self::read_file(path)
        }
    }

    pub fn read_file(path: &Path) -> Result<Source, ConfigError> {
        let origin = path.display().to_string();
        let text = read_bounded(path, MAX_CONFIG_BYTES, &origin)?;
        Ok(Source {
            origin,
            kind: Kind::Yaml(text),
        })
    }

    pub fn read_dir(dir: &Path) -> Result<Source, ConfigError> {
        let origin = dir.display().to_string();
        let mut files = BTreeMap::new();
        let mut left = MAX_CONFIG_BYTES;
        for entry in std::fs::read_dir(dir).map_err(read_err(dir))? {
            let entry = entry.map_err(read_err(dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            if name.starts_with('.')
                || !std::fs::metadata(&path).map_err(read_err(&path))?.is_file()
            {
                continue;
            }
            let text = read_bounded(&path, left, &origin)?;
            left -= text.len() as u64;
            files.insert(name, text);
        }
        Ok(Source {
            origin,
            kind: Kind::Files(files),
        })
    }

    /// Parses and validates (pure: no symlink is resolved here).
    pub fn parse(&self) -> Result<Loaded, ConfigError> {
        match &self.kind {
            Kind::Yaml(text) => Config::from_yaml(text, &self.origin),
            Kind::Files(files) => Config::from_files(files, &self.origin),
        }
    }

    fn fingerprint(&self) -> u64 {
        let mut hasher = DefaultHasher::new();
        self.hash(&mut hasher);
        hasher.finish()
    }
}

fn read_err(path: &Path) -> impl FnOnce(std::io::Error) -> ConfigError {
    let path = path.to_path_buf();
    move |source| ConfigError::Read { path, source }
}

/// Reads at most `limit` bytes; more is an error naming the limit.
fn read_bounded(path: &Path, limit: u64, origin: &str) -> Result<String, ConfigError> {
    let file = std::fs::File::open(path).map_err(read_err(path))?;
    let mut text = String::new();
    file.take(limit + 1)
        .read_to_string(&mut text)
        .map_err(read_err(path))?;
    if text.len() as u64 > limit {
        return Err(ConfigError::TooLarge {
            origin: origin.to_string(),
            what: format!("more than {MAX_CONFIG_BYTES} bytes in all"),
        });
    }
    Ok(text)
}

/// Refuses text too large or nested too deeply before the YAML parser sees it.
pub(super) fn check_text(text: &str, origin: &str) -> Result<(), ConfigError> {
    let too_large = |what: String| ConfigError::TooLarge {
        origin: origin.to_string(),
        what,
    };
    if text.len() as u64 > MAX_CONFIG_BYTES {
        return Err(too_large(format!("more than {MAX_CONFIG_BYTES} bytes")));
    }
    let shape = shape(text);
    if shape.depth > MAX_DEPTH {
        return Err(too_large(format!(
            "collections nested {} deep, at most {MAX_DEPTH} allowed",
            shape.depth
        )));
    }
    if shape.entries > MAX_ENTRIES {
        return Err(too_large(format!(
            "about {} entries (keys, list items), at most {MAX_ENTRIES} allowed",
            shape.entries
        )));
    }
    Ok(())
}

/// What the parsed tree would be like, estimated from the text.
pub struct Shape {
    /// How deeply collections nest: indentation levels, `- ` items opened on one line, and flow brackets (outside
    /// quotes). It may overcount (a block scalar's indentation), never undercount by much.
    pub depth: usize,
    /// How many nodes the tree would have: a line's own, each `- ` item and each `,` in a flow collection
    /// (outside quotes). It may overcount (a block scalar's lines), never undercount by much.
    pub entries: usize,
}

pub fn shape(text: &str) -> Shape {
    let mut indents: Vec<usize> = Vec::new();
    let mut flow = 0usize;
    let mut deepest = 0usize;
    let mut entries = 0usize;
    for line in text.lines() {
        let trimmed = line.trim_start_matches([' ', '\t']);
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let indent = line.len() - trimmed.len();
        while indents.last().is_some_and(|&top| top >= indent) {
            indents.pop();
        }
        indents.push(indent);
        entries += 1;
        let mut rest = trimmed;
        let mut dashes = 0;
        while let Some(after) = rest.strip_prefix("- ").or_else(|| rest.strip_prefix("-\t")) {
            dashes += 1;
            entries += 1;
            rest = after.trim_start_matches([' ', '\t']);
        }
        let mut quote = None;
        for c in rest.chars() {
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), _) => {}
                (None, '"' | '\'') => quote = Some(c),
                (None, '[' | '{') => {
                    flow += 1;
                    deepest = deepest.max(indents.len() + dashes + flow);
                }
                (None, ']' | '}') => flow = flow.saturating_sub(1),
                (None, ',') if flow > 0 => entries += 1,
                (None, '#') => break,
                _ => {}
            }
        }
        deepest = deepest.max(indents.len() + dashes + flow);
    }
    Shape {
        depth: deepest,
        entries,
    }
}

/// The last configuration parsed, by fingerprint of its bytes: unchanged bytes are not parsed again.
#[derive(Default)]
pub struct LoadCache {
    last: Option<(PathBuf, u64, Result<Loaded, String>)>,
    parses: u64,
}

impl LoadCache {
    /// Like `Config::load`, parsing only when the bytes differ from the last call's; an error is returned as its
    /// text (`{:#}` of the error). Symlinks are resolved on every call: that is cheap and may change on its own.
    pub fn load(&mut self, path: &Path) -> Result<Loaded, String> {
        let source = Source::read(path).map_err(|e| format!("{:#}", anyhow::Error::from(e)))?;
        let fingerprint = source.fingerprint();
        let parsed = match &self.last {
            Some((p, f, parsed)) if p == path && *f == fingerprint => parsed.clone(),
            _ => {
                self.parses += 1;
                let parsed = source
                    .parse()
                    .map_err(|e| format!("{:#}", anyhow::Error::from(e)));
                self.last = Some((path.to_path_buf(), fingerprint, parsed.clone()));
                parsed
            }
        };
        parsed?
            .check_on_host()
            .map_err(|e| format!("{:#}", anyhow::Error::from(e)))
    }

    /// How many times the text was parsed (for tests and a debug log).
    pub fn parses(&self) -> u64 {
        self.parses
    }
}
