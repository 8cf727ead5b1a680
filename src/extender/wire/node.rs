//! A node's name and labels, read from its raw JSON without decoding the rest of it.
//!
//! The text has already been validated by the scan of the whole request, so this only walks the node object's
//! top-level keys, skipping values until it meets `metadata`, and decodes that one value. Go's encoder writes
//! `kind`, `apiVersion`, `metadata`, `spec`, `status` in that order, so the walk normally stops at once; when
//! `metadata` comes later, the values before it are skipped by a byte scan that builds nothing.
//!
//! The labels are checked (an object of strings or nulls) and the hostname taken from them, but the map is built
//! only when a decision asks for it: building 5,000 maps of a dozen strings each was half the time of decoding a
//! 5,000-node request, and a decision needs them only for a PV whose affinity says more than a hostname.

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;
use std::sync::OnceLock;

use bytes::Bytes;
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::extender::labels::{HOSTNAME_LABEL, Labels, NodeLabels};

/// What the decision reads from a node: its name, and its labels' place in the node's JSON.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct NodeMeta {
    pub name: String,
    /// The span of the `labels` object within the node's text, when it has one.
    pub labels: Option<Range<usize>>,
    pub hostname: Option<String>,
}

/// Reads `metadata.name` and checks `metadata.labels` of one node; `null` (or an object without metadata) gives an
/// empty name and no labels. `text` must be one valid JSON value.
pub fn read(text: &str) -> Result<NodeMeta, serde_json::Error> {
    let Some(at) = metadata_value(text)? else {
        return Ok(NodeMeta::default());
    };
    let rest = text.get(at..).ok_or_else(|| walk_failed(at))?;
    // NB: no `end()`: the deserializer stops after the metadata value and the rest of the node stays unread.
    let meta = Option::<LeanMeta>::deserialize(&mut serde_json::Deserializer::from_str(rest))?
        .unwrap_or_default();
    let Some(labels) = meta.labels else {
        return Ok(NodeMeta {
            name: meta.name.unwrap_or_default(),
            ..NodeMeta::default()
        });
    };
    let json = labels.get();
    let hostname = serde_json::from_str::<Option<HostnameProbe>>(json)?.and_then(|p| p.0);
    let start = (json.as_ptr() as usize)
        .checked_sub(text.as_ptr() as usize)
        .ok_or_else(|| walk_failed(at))?;
    Ok(NodeMeta {
        name: meta.name.unwrap_or_default(),
        labels: Some(start..start + json.len()),
        hostname,
    })
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct LeanMeta<'a> {
    name: Option<String>,
    #[serde(borrow)]
    labels: Option<&'a RawValue>,
}

/// A request node's labels: checked and the hostname read when the request was decoded, the map built from the
/// node's JSON on first use.
#[derive(Debug, Default)]
pub struct WireLabels {
    /// The labels object's JSON (a slice of the request body), empty when the node has none.
    json: Bytes,
    hostname: Option<String>,
    map: OnceLock<Labels>,
}

impl WireLabels {
    /// `json` must be a labels object that `read` accepted.
    pub fn new(json: Bytes, hostname: Option<String>) -> WireLabels {
        WireLabels {
            json,
            hostname,
            map: OnceLock::new(),
        }
    }

    /// Whether a decision has asked for the whole map yet.
    #[cfg(test)]
    pub fn is_built(&self) -> bool {
        self.map.get().is_some()
    }
}

impl NodeLabels for WireLabels {
    fn hostname(&self) -> Option<&str> {
        self.hostname.as_deref()
    }

    fn all(&self) -> &Labels {
        self.map.get_or_init(|| {
            // NB: `read` checked this JSON (an object of strings or nulls), so it cannot fail; if it ever did, no
            // labels match fewer PVs than wrong ones would.
            serde_json::from_slice::<Option<LabelMap>>(&self.json)
                .ok()
                .flatten()
                .map(|l| l.0)
                .unwrap_or_default()
        })
    }
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

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
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

/// Walks a labels object, checking that every value is a string or null, and keeps only the hostname's value;
/// strings without escapes are borrowed, so nothing else is allocated.
struct HostnameProbe(Option<String>);

impl<'de> Deserialize<'de> for HostnameProbe {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(HostnameVisitor)
    }
}

struct HostnameVisitor;

impl<'de> Visitor<'de> for HostnameVisitor {
    type Value = HostnameProbe;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a map of label strings")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<HostnameProbe, A::Error> {
        let mut hostname = None;
        while let Some((key, value)) = map.next_entry::<Text<'de>, Option<Text<'de>>>()? {
            if key.0 == HOSTNAME_LABEL {
                hostname = Some(value.map(|v| v.0.into_owned()).unwrap_or_default());
            }
        }
        Ok(HostnameProbe(hostname))
    }
}

/// A string borrowed from the text when it holds no escapes.
struct Text<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(TextVisitor)
    }
}

struct TextVisitor;

impl<'de> Visitor<'de> for TextVisitor {
    type Value = Text<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Text<'de>, E> {
        Ok(Text(Cow::Borrowed(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Text<'de>, E> {
        Ok(Text(Cow::Owned(v.to_owned())))
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
