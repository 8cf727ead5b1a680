//! The kube-scheduler extender wire format: the Go types of `k8s.io/kube-scheduler/extender/v1` (`ExtenderArgs`,
//! `ExtenderFilterResult`, `HostPriorityList`).
//!
//! The Go types carry no json tags, so keys are PascalCase and Go matches them case-insensitively: the top-level
//! keys of `ExtenderArgs` are matched ignoring ASCII case here too, and every field tolerates `null`.
//!
//! ```text
//!  body: Bytes ─> walk (keys, punctuation) ─┬─> Pod (narrow struct: name, namespace, volumes)
//!    each value checked once by serde_json  ├─> NodeNames
//!                                           └─> Nodes.items (items: in parts on up to 4 threads)
//!                                                 [i]: &RawValue ─> RawNode (a slice of the body, not a copy)
//!                                                               └─> node::read: metadata.name; labels checked,
//!                                                                   hostname read, map built only on demand
//!  filter result ─> ExtenderFilterResult::to_json: survivors' RawNodes copied once, into the response
//! ```
//!
//! Every list that costs an allocation per entry is counted as it is read, and reading stops with an error at the
//! first entry past its limit (`bounds`), so what a request holds once decoded is bounded by counts, not only by
//! its size in bytes, which a list of tiny entries multiplies many times over.
//!
//! Only what the decision needs is decoded. A node's JSON is read once by the scan; then only its `metadata` is
//! decoded, and it is echoed back byte for byte if it survives, so a 5,000-node request is never decoded into
//! `v1.Node` structs nor copied before the answer is written. Its labels become a map only when a PV's affinity
//! needs more than the hostname (`WireLabels`).

mod bounds;
mod items;
mod node;
mod walk;
pub use bounds::{DecodeError, DecodeLimits, Limit};
pub use node::WireLabels;
#[cfg(test)]
mod bounds_tests;
#[cfg(test)]
mod split_tests;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::OnceLock;

use bytes::Bytes;
use serde::de::IgnoredAny;
use serde::ser;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

use bounds::Tally;
use items::Split;
use walk::Walker;

/// `ExtenderArgs`: the pod and the candidate nodes, as objects (`Nodes`) or names (`NodeNames`).
#[derive(Debug, Default)]
pub struct ExtenderArgs {
    pub pod: Pod,
    pub nodes: Option<Vec<WireNode>>,
    pub node_names: Option<Vec<String>>,
}

impl ExtenderArgs {
    /// Decodes a request body within the default limits; see [`decode_within`](Self::decode_within).
    pub fn decode(body: Bytes) -> Result<ExtenderArgs, DecodeError> {
        ExtenderArgs::decode_within(body, &DecodeLimits::default())
    }

    /// Decodes a request body, refusing one over `limits`. Each node's JSON stays in `body` (kept alive by the
    /// `RawNode`s), so nothing the decision does not read is copied. A long node list is checked on up to 4
    /// threads (`items`).
    pub fn decode_within(body: Bytes, limits: &DecodeLimits) -> Result<ExtenderArgs, DecodeError> {
        ExtenderArgs::decode_split(body, Split::on(threads()), limits)
    }

    /// The most memory decoding a body of `len` bytes within `limits` allocates beyond the body, in bytes: an
    /// entry per three bytes at most (`{},`), and no more than each thread reading part of a node list may hold
    /// before the parts are joined and counted together. Charged before decoding, so the budget is never passed.
    pub fn decode_bound(len: usize, limits: &DecodeLimits) -> usize {
        let per_entry = len / 3 + 1;
        let parts = Split::on(threads()).parts(len);
        let entries = per_entry.min(limits.max_nodes.saturating_mul(parts));
        let volumes = per_entry.min(limits.max_volumes);
        entries.saturating_mul(DECODED_BYTES_PER_NODE)
            + volumes.saturating_mul(std::mem::size_of::<Option<PodVolume>>() + 32)
    }

    /// `decode` with the node list checked on at most `threads` threads.
    pub fn decode_on(body: Bytes, threads: usize) -> Result<ExtenderArgs, DecodeError> {
        ExtenderArgs::decode_split(body, Split::on(threads), &DecodeLimits::default())
    }

    fn decode_split(
        body: Bytes,
        split: Split,
        limits: &DecodeLimits,
    ) -> Result<ExtenderArgs, DecodeError> {
        let mut w = Walker::new(&body);
        if !w.enter(b'{') {
            return Err(expected(&mut w, "an ExtenderArgs object").into());
        }
        let mut args = ExtenderArgs::default();
        let mut tally = Tally::new(limits);
        let mut first = true;
        while let Some(key) = w.next_key(first)? {
            first = false;
            if key.eq_ignore_ascii_case("pod") {
                args.pod = pod(&mut w, limits)?;
            } else if key.eq_ignore_ascii_case("nodes") {
                args.nodes = node_list(&mut w, &body, split, &mut tally)?;
            } else if key.eq_ignore_ascii_case("nodenames") {
                args.node_names = node_names(&mut w, &mut tally)?;
            } else {
                w.raw()?;
            }
        }
        w.end()?;
        Ok(args)
    }

    /// `decode` of a copy of `body`, for callers that do not hold `Bytes`.
    pub fn from_slice(body: &[u8]) -> Result<ExtenderArgs, DecodeError> {
        ExtenderArgs::decode(Bytes::copy_from_slice(body))
    }

    /// Memory that deciding this request may hold beyond its body, in bytes: what was decoded (a `String` per
    /// node name, a `WireNode` per node), the label maps a decision may build, and the answer (a reason per node,
    /// and in `Nodes` mode a copy of the survivors' JSON, at most every node's). Bounded by the `DecodeLimits` the
    /// request was decoded within, and by its body.
    pub fn cost_bytes(&self) -> usize {
        let string = std::mem::size_of::<String>();
        let names = self.node_names.iter().flatten();
        let names: usize = names.map(|n| string + n.capacity()).sum();
        let nodes = self.nodes.iter().flatten();
        let nodes: usize = nodes
            .map(|n| {
                let echo = n.raw.json().len();
                std::mem::size_of::<WireNode>() + n.name.capacity() + n.labels.map_bytes() + echo
            })
            .sum();
        let volumes = self.pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
        let volumes = volumes.map_or(0, |v| v.len() * std::mem::size_of::<Option<PodVolume>>());
        let listed =
            self.node_names.as_ref().map_or(0, Vec::len) + self.nodes.as_ref().map_or(0, Vec::len);
        names + nodes + volumes + listed * ANSWER_BYTES_PER_NODE
    }
}

/// Threads a long node list is read on.
fn threads() -> usize {
    static THREADS: OnceLock<usize> = OnceLock::new();
    *THREADS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get().min(4)))
}

/// What decoding allocates per node or name beyond the text it copies: a `WireNode` (the largest of the two) and
/// the allocator's share of its name and hostname.
const DECODED_BYTES_PER_NODE: usize = std::mem::size_of::<WireNode>() + 64;

/// What the answer may hold per candidate: its name and a one-line reason in `FailedNodes`, or its score.
const ANSWER_BYTES_PER_NODE: usize = 256;

/// `Pod`: decoded once its volumes are counted, so a list of a million `{}` is refused before it is allocated.
fn pod(w: &mut Walker, limits: &DecodeLimits) -> Result<Pod, DecodeError> {
    let volumes = count_volumes(&mut w.clone(), limits.max_volumes + 1)?;
    if volumes > limits.max_volumes {
        return Err(DecodeError::too_many(Limit::Volumes, limits));
    }
    Ok(w.value::<Option<Pod>>()?.unwrap_or_default())
}

/// Entries of `spec.volumes` in the pod at the cursor, counting no further than `stop`. What is not a pod is left
/// for serde to name; serde refuses a repeated key, so the first `spec` and `volumes` are the ones it reads.
fn count_volumes(w: &mut Walker, stop: usize) -> Result<usize, serde_json::Error> {
    for key in ["spec", "volumes"] {
        if !w.enter(b'{') {
            return Ok(0);
        }
        let mut first = true;
        loop {
            let Some(k) = w.next_key(first)? else {
                return Ok(0);
            };
            first = false;
            if k == key {
                break;
            }
            w.raw()?;
        }
    }
    if !w.enter(b'[') {
        return Ok(0);
    }
    let mut count = 0;
    while count < stop && w.next_element(count == 0)? {
        w.raw()?;
        count += 1;
    }
    Ok(count)
}

/// `NodeNames`: a list of strings (a `null` entry skipped) or `null`, counted before each name is allocated.
fn node_names(w: &mut Walker, tally: &mut Tally) -> Result<Option<Vec<String>>, DecodeError> {
    if !enter_or_null(w, b'[', "a list of node names or null")? {
        return Ok(None);
    }
    let mut names = Vec::new();
    let mut first = true;
    while w.next_element(first)? {
        first = false;
        tally.node()?;
        names.extend(w.value::<Option<String>>()?);
    }
    Ok(Some(names))
}

/// `Nodes`: a `v1.NodeList` or `null`; its `items` become `WireNode`s sharing the body.
fn node_list(
    w: &mut Walker,
    body: &Bytes,
    split: Split,
    tally: &mut Tally,
) -> Result<Option<Vec<WireNode>>, DecodeError> {
    if !enter_or_null(w, b'{', "a NodeList object or null")? {
        return Ok(None);
    }
    let mut nodes = Vec::new();
    let mut first = true;
    while let Some(key) = w.next_key(first)? {
        first = false;
        if key == "items" {
            nodes = if w.null() {
                Vec::new()
            } else if w.enter(b'[') {
                items::read(w, body, split, tally)?
            } else {
                return Err(expected(w, "a list of Nodes or null").into());
            };
        } else {
            w.raw()?;
        }
    }
    Ok(Some(nodes))
}

/// Moves into the list or object that `open` starts at the cursor: `false` past a `null`, an error naming `what`
/// for any other value.
fn enter_or_null(w: &mut Walker, open: u8, what: &str) -> Result<bool, serde_json::Error> {
    if w.null() {
        return Ok(false);
    }
    if !w.enter(open) {
        return Err(expected(w, what));
    }
    Ok(true)
}

/// The error for a value at the cursor that is not `what`: serde_json's when it is not JSON at all.
fn expected(w: &mut Walker, what: &str) -> serde_json::Error {
    let at = w.clone();
    match w.raw() {
        Err(e) => e,
        Ok(_) => at.error(&format!("invalid type: expected {what}")),
    }
}

/// The parts of a `v1.Pod` the decision reads.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Pod {
    pub metadata: Option<PodMeta>,
    pub spec: Option<PodSpec>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct PodMeta {
    pub name: Option<String>,
    pub namespace: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct PodSpec {
    pub volumes: Option<Vec<Option<PodVolume>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodVolume {
    pub name: Option<String>,
    pub persistent_volume_claim: Option<ClaimSource>,
    pub ephemeral: Option<IgnoredAny>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ClaimSource {
    pub claim_name: Option<String>,
}

impl Pod {
    pub fn namespace(&self) -> &str {
        self.metadata
            .as_ref()
            .and_then(|m| m.namespace.as_deref())
            .filter(|n| !n.is_empty())
            .unwrap_or("default")
    }

    pub fn name(&self) -> &str {
        self.metadata
            .as_ref()
            .and_then(|m| m.name.as_deref())
            .unwrap_or("")
    }

    /// Names of the claims the pod's volumes use; a generic ephemeral volume's claim is `<pod>-<volume>`.
    pub fn claim_names(&self) -> Vec<String> {
        let volumes = self.spec.as_ref().and_then(|s| s.volumes.as_ref());
        let mut names = Vec::new();
        for v in volumes.into_iter().flatten().flatten() {
            if let Some(claim) = v
                .persistent_volume_claim
                .as_ref()
                .and_then(|c| c.claim_name.as_ref())
            {
                names.push(claim.clone());
            } else if v.ephemeral.is_some() {
                names.push(format!(
                    "{}-{}",
                    self.name(),
                    v.name.as_deref().unwrap_or("")
                ));
            }
        }
        names
    }
}

impl From<&k8s_openapi::api::core::v1::Pod> for Pod {
    /// What the decision reads of a watched pod (name, namespace, claims), taken over without a JSON round trip:
    /// the extender's Lease holder converts every pending pod on each look.
    fn from(pod: &k8s_openapi::api::core::v1::Pod) -> Pod {
        let volumes = pod.spec.as_ref().map(|spec| {
            let volumes = spec.volumes.iter().flatten();
            volumes
                .map(|v| {
                    Some(PodVolume {
                        name: Some(v.name.clone()),
                        persistent_volume_claim: v.persistent_volume_claim.as_ref().map(|c| {
                            ClaimSource {
                                claim_name: Some(c.claim_name.clone()),
                            }
                        }),
                        ephemeral: v.ephemeral.as_ref().map(|_| IgnoredAny),
                    })
                })
                .collect()
        });
        Pod {
            metadata: Some(PodMeta {
                name: pod.metadata.name.clone(),
                namespace: pod.metadata.namespace.clone(),
            }),
            spec: Some(PodSpec { volumes }),
        }
    }
}

/// One node of a `Nodes` list: its raw JSON (echoed back) and what the decision reads from it.
#[derive(Debug)]
pub struct WireNode {
    pub raw: RawNode,
    pub name: String,
    pub labels: WireLabels,
}

/// One JSON value exactly as received, shared with the request body rather than copied out of it.
///
/// Invariant: the bytes are one valid JSON value (UTF-8), checked when it was made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawNode(Bytes);

impl RawNode {
    pub fn json(&self) -> &[u8] {
        &self.0
    }
}

impl Serialize for RawNode {
    /// Written verbatim by serde_json. This generic path re-validates the bytes; the filter answer uses
    /// `ExtenderFilterResult::to_json`, which copies them without looking.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let raw: &RawValue = serde_json::from_slice(&self.0).map_err(ser::Error::custom)?;
        raw.serialize(s)
    }
}

impl<'de> Deserialize<'de> for RawNode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(d)?;
        Ok(RawNode(Bytes::from(
            Box::<str>::from(raw).into_boxed_bytes(),
        )))
    }
}

/// The `Nodes` field of a filter result: a `v1.NodeList` holding the survivors' raw objects.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct NodeListOut {
    pub items: Vec<RawNode>,
}

/// `ExtenderFilterResult`.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ExtenderFilterResult {
    pub nodes: Option<NodeListOut>,
    pub node_names: Option<Vec<String>>,
    pub failed_nodes: BTreeMap<String, String>,
    pub failed_and_unresolvable_nodes: BTreeMap<String, String>,
    pub error: String,
}

impl ExtenderFilterResult {
    /// The bytes `serde_json::to_vec` would write.
    pub fn to_json(&self) -> Result<Vec<u8>, serde_json::Error> {
        let mut out = Vec::with_capacity(self.json_size_hint());
        self.write_json(&mut out)?;
        Ok(out)
    }

    /// A buffer size for the answer: the survivors' JSON it echoes (the bulk of a `Nodes` answer) and room for the
    /// rest of a typical one. Size `write_json`'s buffer with it; the write grows it when the reasons are long.
    pub fn json_size_hint(&self) -> usize {
        let items = self.nodes.as_ref().map_or(&[][..], |l| &l.items[..]);
        items.iter().map(|n| n.json().len() + 1).sum::<usize>() + 128
    }

    /// Appends what [`to_json`](Self::to_json) returns to `out`, each survivor's JSON copied as is: the one copy
    /// the echo needs, and no second look at the bytes.
    pub fn write_json(&self, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
        let items = self.nodes.as_ref().map_or(&[][..], |l| &l.items[..]);
        out.extend_from_slice(b"{\"Nodes\":");
        if self.nodes.is_some() {
            out.extend_from_slice(b"{\"items\":[");
            for (i, node) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(node.json());
            }
            out.extend_from_slice(b"]}");
        } else {
            out.extend_from_slice(b"null");
        }
        out.extend_from_slice(b",\"NodeNames\":");
        serde_json::to_writer(&mut *out, &self.node_names)?;
        out.extend_from_slice(b",\"FailedNodes\":");
        serde_json::to_writer(&mut *out, &self.failed_nodes)?;
        out.extend_from_slice(b",\"FailedAndUnresolvableNodes\":");
        serde_json::to_writer(&mut *out, &self.failed_and_unresolvable_nodes)?;
        out.extend_from_slice(b",\"Error\":");
        serde_json::to_writer(&mut *out, &self.error)?;
        out.push(b'}');
        Ok(())
    }

    /// A result the scheduler reads as an error for this pod (it then retries), keeping the input form.
    pub fn error(message: String, names_mode: bool) -> ExtenderFilterResult {
        ExtenderFilterResult {
            nodes: (!names_mode).then(NodeListOut::default),
            node_names: names_mode.then(Vec::new),
            error: message,
            ..Default::default()
        }
    }
}

/// One entry of a `HostPriorityList`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct HostPriority {
    pub host: String,
    pub score: i64,
}
