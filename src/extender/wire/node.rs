//! A node's name and labels, read from its raw JSON without decoding the rest of it.
//!
//! The text has already been validated by the scan of the whole request, so this only walks the node object's
//! top-level keys, skipping values until it meets `metadata`, and decodes that one value. Go's encoder writes
//! `kind`, `apiVersion`, `metadata`, `spec`, `status` in that order, so the walk normally stops at once; when
//! `metadata` comes later, the values before it are skipped by a byte scan that builds nothing.

use std::ops::Range;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};

use crate::extender::labels::Labels;

/// What the decision reads from a node.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct NodeMeta {
    pub name: String,
    pub labels: Labels,
}

/// Reads `metadata.name` and `metadata.labels` of one node; `null` (or an object without metadata) gives an empty
/// name and no labels. `text` must be one valid JSON value.
pub fn read(text: &str) -> Result<NodeMeta, serde_json::Error> {
    let Some(at) = metadata_value(text)? else {
        return Ok(NodeMeta::default());
    };
    let rest = text.get(at..).ok_or_else(|| walk_failed(at))?;
    // NB: no `end()`: the deserializer stops after the metadata value and the rest of the node stays unread.
    let meta = Option::<LeanMeta>::deserialize(&mut serde_json::Deserializer::from_str(rest))?
        .unwrap_or_default();
    Ok(NodeMeta {
        name: meta.name.unwrap_or_default(),
        labels: meta.labels.map(|l| l.0).unwrap_or_default(),
    })
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct LeanMeta {
    name: Option<String>,
    labels: Option<LabelMap>,
}

/// Labels decoded straight into `Labels`, a `null` value read as "".
struct LabelMap(Labels);

impl<'de> Deserialize<'de> for LabelMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(LabelMapVisitor)
    }
}

struct LabelMapVisitor;

impl<'de> Visitor<'de> for LabelMapVisitor {
    type Value = LabelMap;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a map of label strings")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<LabelMap, A::Error> {
        let mut labels = Labels::new();
        while let Some((key, value)) = map.next_entry::<String, Option<String>>()? {
            labels.insert(key, value.unwrap_or_default());
        }
        Ok(LabelMap(labels))
    }
}

/// Where the value of the node's top-level `metadata` key starts, if it has one.
///
/// NB: the first `metadata` key wins; Go's encoder never writes a key twice, so the rest of the node is not read.
fn metadata_value(text: &str) -> Result<Option<usize>, serde_json::Error> {
    let mut c = Cursor {
        text: text.as_bytes(),
        at: 0,
    };
    c.skip_ws();
    match c.peek() {
        Some(b'{') => c.at += 1,
        Some(b'n') => return Ok(None),
        _ => {
            return Err(de::Error::custom(
                "failed to read a Node: not a JSON object",
            ));
        }
    }
    c.skip_ws();
    if c.peek() == Some(b'}') {
        return Ok(None);
    }
    loop {
        c.skip_ws();
        let key = c.string().ok_or_else(|| walk_failed(c.at))?;
        c.skip_ws();
        if c.peek() != Some(b':') {
            return Err(walk_failed(c.at));
        }
        c.at += 1;
        if is_metadata(text, key)? {
            return Ok(Some(c.at));
        }
        c.value().ok_or_else(|| walk_failed(c.at))?;
        c.skip_ws();
        match c.peek() {
            Some(b',') => c.at += 1,
            Some(b'}') => return Ok(None),
            _ => return Err(walk_failed(c.at)),
        }
    }
}

/// Whether the key string `key` (quotes excluded, escapes not yet resolved) reads `metadata`.
fn is_metadata(text: &str, key: Key) -> Result<bool, serde_json::Error> {
    let bytes = text.as_bytes().get(key.inner.clone()).unwrap_or_default();
    if !key.escaped {
        return Ok(bytes == b"metadata");
    }
    let quoted = key
        .inner
        .start
        .checked_sub(1)
        .zip(key.inner.end.checked_add(1));
    let quoted = quoted
        .and_then(|(s, e)| text.get(s..e))
        .ok_or_else(|| walk_failed(key.inner.start))?;
    Ok(serde_json::from_str::<String>(quoted)? == "metadata")
}

/// The scan validated the text, so a walk that loses its way is our bug, reported as an error and never a panic.
fn walk_failed(at: usize) -> serde_json::Error {
    de::Error::custom(format!("failed to walk a Node's JSON at byte {at}"))
}

/// A key string: its bytes between the quotes and whether they hold escapes.
struct Key {
    inner: Range<usize>,
    escaped: bool,
}

/// A position in JSON text known to be valid; every step returns `None` rather than index out of bounds.
struct Cursor<'a> {
    text: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.peek() {
            self.at += 1;
        }
    }

    /// Moves past the string starting at the cursor.
    fn string(&mut self) -> Option<Key> {
        if self.peek()? != b'"' {
            return None;
        }
        self.at += 1;
        let start = self.at;
        let mut escaped = false;
        loop {
            let rest = self.text.get(self.at..)?;
            self.at += memchr::memchr2(b'"', b'\\', rest)?;
            if self.peek()? == b'"' {
                let inner = start..self.at;
                self.at += 1;
                return Some(Key { inner, escaped });
            }
            // A backslash and the byte it escapes; the four hex digits of `\u` hold neither quote nor backslash.
            escaped = true;
            self.at += 2;
        }
    }

    /// Moves past the value starting at the cursor (after optional whitespace).
    fn value(&mut self) -> Option<()> {
        self.skip_ws();
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'{' | b'[' => self.nested(),
            _ => {
                while let Some(b) = self.peek() {
                    if matches!(b, b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t') {
                        break;
                    }
                    self.at += 1;
                }
                Some(())
            }
        }
    }

    fn nested(&mut self) -> Option<()> {
        let mut depth = 0usize;
        loop {
            match self.peek()? {
                b'"' => {
                    self.string()?;
                    continue;
                }
                b'{' | b'[' => depth += 1,
                b'}' | b']' => {
                    depth = depth.checked_sub(1)?;
                    if depth == 0 {
                        self.at += 1;
                        return Some(());
                    }
                }
                _ => {}
            }
            self.at += 1;
        }
    }
}
