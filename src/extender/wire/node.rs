//! A node's name and labels, read from its raw JSON without decoding the rest of it.
//!
//! The node's text has already been checked by serde_json, so this only walks the node object's top-level keys
//! (the request's `Walker`), skipping values until it meets `metadata`, and decodes that one value. Go's encoder
//! writes `kind`, `apiVersion`, `metadata`, `spec`, `status` in that order, so the walk normally stops at once.
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

use super::walk::Walker;
use crate::selector::{HOSTNAME_LABEL, Labels, NodeLabels};

/// What the decision reads from a node: its name, and its labels' place in the node's JSON.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct NodeMeta {
    pub name: String,
    /// The span of the `labels` object within the node's text, when it has one.
    pub labels: Option<Range<usize>>,
    pub hostname: Option<String>,
    /// How many labels it has: what its map would hold if a decision built it.
    pub label_count: usize,
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
    let probe = serde_json::from_str::<Option<HostnameProbe>>(json)?.unwrap_or_default();
    let start = (json.as_ptr() as usize)
        .checked_sub(text.as_ptr() as usize)
        .ok_or_else(|| walk_failed(at))?;
    Ok(NodeMeta {
        name: meta.name.unwrap_or_default(),
        labels: Some(start..start + json.len()),
        hostname: probe.hostname,
        label_count: probe.count,
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
    count: usize,
    map: OnceLock<Labels>,
}

impl WireLabels {
    /// `json` must be a labels object that `read` accepted.
    pub fn new(json: Bytes, hostname: Option<String>, count: usize) -> WireLabels {
        WireLabels {
            json,
            hostname,
            count,
            map: OnceLock::new(),
        }
    }

    /// What building the map would cost at most, beyond the body (which holds the JSON): a map slot and two
    /// allocations per label, and a copy of the labels' text.
    pub fn map_bytes(&self) -> usize {
        self.count * LABEL_BYTES + self.json.len()
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

/// A built label's share of its `BTreeMap` node (two 24-byte `String`s, with the spare room of a node two thirds
/// full) and the allocator's overhead for its two strings; their text is about the labels' JSON.
const LABEL_BYTES: usize = 96;

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

/// Walks a labels object, checking that every value is a string or null, and keeps only the hostname's value and
/// how many labels there are; strings without escapes are borrowed, so nothing else is allocated, however many.
#[derive(Default)]
struct HostnameProbe {
    hostname: Option<String>,
    count: usize,
}

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
        let mut probe = HostnameProbe::default();
        while let Some((key, value)) = map.next_entry::<Unescaped<'de>, Option<Unescaped<'de>>>()? {
            probe.count += 1;
            if key.0 == HOSTNAME_LABEL {
                probe.hostname = Some(value.map(|v| v.0.into_owned()).unwrap_or_default());
            }
        }
        Ok(probe)
    }
}

/// A string borrowed from the text when it holds no escapes.
struct Unescaped<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Unescaped<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(TextVisitor)
    }
}

struct TextVisitor;

impl<'de> Visitor<'de> for TextVisitor {
    type Value = Unescaped<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Unescaped<'de>, E> {
        Ok(Unescaped(Cow::Borrowed(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Unescaped<'de>, E> {
        Ok(Unescaped(Cow::Owned(v.to_owned())))
    }
}

/// Where the value of the node's top-level `metadata` key starts, if it has one.
///
/// NB: the first `metadata` key wins; Go's encoder never writes a key twice, so the rest of the node is not read.
fn metadata_value(text: &str) -> Result<Option<usize>, serde_json::Error> {
    let mut w = Walker::new(text.as_bytes());
    if w.null() {
        return Ok(None);
    }
    if !w.enter(b'{') {
        return Err(de::Error::custom(
            "failed to read a Node: not a JSON object",
        ));
    }
    let mut first = true;
    while let Some(key) = w.next_key(first)? {
        first = false;
        if key == "metadata" {
            w.peek();
            return Ok(Some(w.at()));
        }
        w.raw()?;
    }
    Ok(None)
}

/// The walk saw valid text, so losing its way is our bug, reported as an error and never a panic.
fn walk_failed(at: usize) -> serde_json::Error {
    de::Error::custom(format!("failed to walk a Node's JSON at byte {at}"))
}
