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
//! Only what the decision needs is decoded. A node's JSON is read once by the scan; then only its `metadata` is
//! decoded, and it is echoed back byte for byte if it survives, so a 5,000-node request is never decoded into
//! `v1.Node` structs nor copied before the answer is written. Its labels become a map only when a PV's affinity
//! needs more than the hostname (`WireLabels`).

mod items;
mod node;
mod walk;
pub use node::WireLabels;
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
    /// Decodes a request body. Each node's JSON stays in `body` (kept alive by the `RawNode`s), so nothing the
    /// decision does not read is copied. A long node list is checked on up to 4 threads (`items`).
    pub fn decode(body: Bytes) -> Result<ExtenderArgs, serde_json::Error> {
        static THREADS: OnceLock<usize> = OnceLock::new();
        let threads = *THREADS
            .get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get().min(4)));
        ExtenderArgs::decode_on(body, threads)
    }

    /// `decode` with the node list checked on at most `threads` threads.
    pub fn decode_on(body: Bytes, threads: usize) -> Result<ExtenderArgs, serde_json::Error> {
        ExtenderArgs::decode_split(body, Split::on(threads), usize::MAX).map_err(|e| match e {
            Refused::Malformed(e) => e,
            Refused::TooMany { .. } => unreachable!("no limit was given"),
        })
    }

    /// `decode`, refusing a request that lists more than `max_nodes` node names or Nodes before any of them is
    /// decoded: a 4-byte name (`"a",`) would cost 30 or more bytes of heap once decoded, a 3-byte Node (`{},`) a
    /// hundred, so the body limit alone does not bound what a request costs (issue 39, point 1).
    pub fn decode_within(body: Bytes, max_nodes: usize) -> Result<ExtenderArgs, Refused> {
        static THREADS: OnceLock<usize> = OnceLock::new();
        let threads = *THREADS
            .get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get().min(4)));
        ExtenderArgs::decode_split(body, Split::on(threads), max_nodes)
    }

    fn decode_split(body: Bytes, split: Split, max_nodes: usize) -> Result<ExtenderArgs, Refused> {
        let mut w = Walker::new(&body);
        if !w.enter(b'{') {
            return Err(expected(&mut w, "an ExtenderArgs object").into());
        }
        let mut args = ExtenderArgs::default();
        let mut first = true;
        while let Some(key) = w.next_key(first)? {
            first = false;
            if key.eq_ignore_ascii_case("pod") {
                args.pod = w.value::<Option<Pod>>()?.unwrap_or_default();
            } else if key.eq_ignore_ascii_case("nodes") {
                args.nodes = node_list(&mut w, &body, split, max_nodes)?;
            } else if key.eq_ignore_ascii_case("nodenames") {
                within(&w, "NodeNames", max_nodes)?;
                args.node_names = w
                    .value::<Option<Vec<Option<String>>>>()?
                    .map(|names| names.into_iter().flatten().collect());
            } else {
                w.raw()?;
            }
        }
        w.end()?;
        Ok(args)
    }

    /// `decode` of a copy of `body`, for callers that do not hold `Bytes`.
    pub fn from_slice(body: &[u8]) -> Result<ExtenderArgs, serde_json::Error> {
        ExtenderArgs::decode(Bytes::copy_from_slice(body))
    }
}

/// Why a request body was not decoded.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error(transparent)]
    Malformed(#[from] serde_json::Error),
    #[error("{what} lists more than {limit} entries (--max-nodes, LOCALPV_EXTENDER_MAX_NODES)")]
    TooMany { what: &'static str, limit: usize },
}

/// Counts the elements of the array at the cursor without decoding them (the cursor does not move); refuses more
/// than `limit`. Anything that is not an array is left to the decoder to judge.
fn within(w: &Walker, what: &'static str, limit: usize) -> Result<(), Refused> {
    if limit == usize::MAX {
        return Ok(());
    }
    let mut scan = w.clone();
    if !scan.enter(b'[') {
        return Ok(());
    }
    let mut count = 0usize;
    let mut first = true;
    while scan.next_element(first)? {
        first = false;
        count += 1;
        if count > limit {
            return Err(Refused::TooMany { what, limit });
        }
        scan.raw()?;
    }
    Ok(())
}

/// `Nodes`: a `v1.NodeList` or `null`; its `items` become `WireNode`s sharing the body.
fn node_list(
    w: &mut Walker,
    body: &Bytes,
    split: Split,
    max_nodes: usize,
) -> Result<Option<Vec<WireNode>>, Refused> {
    if w.null() {
        return Ok(None);
    }
    if !w.enter(b'{') {
        return Err(expected(w, "a NodeList object or null").into());
    }
    let mut nodes = Vec::new();
    let mut first = true;
    while let Some(key) = w.next_key(first)? {
        first = false;
        if key == "items" {
            within(w, "Nodes.items", max_nodes)?;
            nodes = if w.null() {
                Vec::new()
            } else if w.enter(b'[') {
                items::read(w, body, split)?
            } else {
                return Err(expected(w, "a list of Nodes or null").into());
            };
        } else {
            w.raw()?;
        }
    }
    Ok(Some(nodes))
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
