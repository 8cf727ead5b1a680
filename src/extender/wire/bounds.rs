//! What one request may hold once decoded, as counts, and what it costs in memory.
//!
//! The body limit counts bytes on the wire, but decoding is not one byte for one byte: the 4 bytes `"a",` of a
//! `NodeNames` list become a 24-byte `String` and its allocation, 3 bytes `{},` of a node list become a `WireNode`
//! of some hundred bytes. So the decoder counts what it allocates per item and stops with [`DecodeError::TooMany`]
//! at a limit no real cluster reaches, before the item past it is allocated; what a request then holds is at most
//! the limits times a constant, plus its body ([`ExtenderArgs::decoded_bytes`](super::ExtenderArgs) says how much,
//! for the server to charge its memory budget with).
//!
//! ```text
//!  NodeNames[i] / Nodes.items[i] ──> Tally::node (max_nodes)
//!  Nodes.items[i].metadata.labels ─> Tally::labels (max_labels_per_node, max_labels for the whole request)
//!  Pod.spec.volumes ──────────────> counted before the pod is decoded (max_volumes)
//! ```

/// Counts one request may hold. Every default is far above a real cluster's (Kubernetes supports 5,000 nodes; a
/// node has tens of labels, a few hundred with node-feature-discovery; a pod some tens of volumes) and low enough
/// that a request at every limit stays some MiB once decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeLimits {
    /// Entries of `NodeNames` or of `Nodes.items`.
    pub max_nodes: usize,
    /// Labels of one node in `Nodes.items`.
    pub max_labels_per_node: usize,
    /// Labels of all nodes of one request together.
    pub max_labels: usize,
    /// Entries of the pod's `spec.volumes`.
    pub max_volumes: usize,
}

impl Default for DecodeLimits {
    fn default() -> Self {
        DecodeLimits {
            max_nodes: 20_000,
            max_labels_per_node: 1_000,
            max_labels: 500_000,
            max_volumes: 1_000,
        }
    }
}

/// One of the [`DecodeLimits`], with the flag and environment variable that raise it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    Nodes,
    LabelsPerNode,
    Labels,
    Volumes,
}

impl Limit {
    /// What is counted, as the request spells it.
    pub fn what(self) -> &'static str {
        match self {
            Limit::Nodes => "NodeNames or Nodes.items entries",
            Limit::LabelsPerNode => "labels on one node",
            Limit::Labels => "node labels in all",
            Limit::Volumes => "Pod.spec.volumes entries",
        }
    }

    pub fn flag(self) -> &'static str {
        match self {
            Limit::Nodes => "--max-nodes",
            Limit::LabelsPerNode => "--max-labels-per-node",
            Limit::Labels => "--max-labels",
            Limit::Volumes => "--max-volumes",
        }
    }

    pub fn env(self) -> &'static str {
        match self {
            Limit::Nodes => "LOCALPV_EXTENDER_MAX_NODES",
            Limit::LabelsPerNode => "LOCALPV_EXTENDER_MAX_LABELS_PER_NODE",
            Limit::Labels => "LOCALPV_EXTENDER_MAX_LABELS",
            Limit::Volumes => "LOCALPV_EXTENDER_MAX_VOLUMES",
        }
    }

    pub fn of(self, limits: &DecodeLimits) -> usize {
        match self {
            Limit::Nodes => limits.max_nodes,
            Limit::LabelsPerNode => limits.max_labels_per_node,
            Limit::Labels => limits.max_labels,
            Limit::Volumes => limits.max_volumes,
        }
    }
}

/// Why a body did not decode.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error(transparent)]
    Malformed(#[from] serde_json::Error),
    #[error(
        "the request holds more than {count} {what}, the limit {flag} (env {env}) allows; raise it if a real \
         cluster needs more",
        count = .limit, what = .which.what(), flag = .which.flag(), env = .which.env()
    )]
    TooMany { which: Limit, limit: usize },
}

impl DecodeError {
    pub fn too_many(which: Limit, limits: &DecodeLimits) -> DecodeError {
        DecodeError::TooMany {
            which,
            limit: which.of(limits),
        }
    }
}

/// The running counts of one walk (the whole request, or one part of its node list read on its own thread: each
/// part stops at the limits on its own, and `items::stitch` checks the sum, so no thread allocates past a limit and
/// nodes of a part that turns out not to be one are never counted).
#[derive(Debug)]
pub struct Tally<'a> {
    pub limits: &'a DecodeLimits,
    pub nodes: usize,
    pub labels: usize,
}

impl<'a> Tally<'a> {
    pub fn new(limits: &'a DecodeLimits) -> Tally<'a> {
        Tally {
            limits,
            nodes: 0,
            labels: 0,
        }
    }

    /// Counts one more node (or node name), before it is allocated.
    pub fn node(&mut self) -> Result<(), DecodeError> {
        self.add_nodes(1)
    }

    pub fn add_nodes(&mut self, n: usize) -> Result<(), DecodeError> {
        self.nodes += n;
        if self.nodes > self.limits.max_nodes {
            return Err(DecodeError::too_many(Limit::Nodes, self.limits));
        }
        Ok(())
    }

    /// Counts a node's `n` labels, before a map of them can be built.
    pub fn node_labels(&mut self, n: usize) -> Result<(), DecodeError> {
        if n > self.limits.max_labels_per_node {
            return Err(DecodeError::too_many(Limit::LabelsPerNode, self.limits));
        }
        self.add_labels(n)
    }

    pub fn add_labels(&mut self, n: usize) -> Result<(), DecodeError> {
        self.labels += n;
        if self.labels > self.limits.max_labels {
            return Err(DecodeError::too_many(Limit::Labels, self.limits));
        }
        Ok(())
    }
}
