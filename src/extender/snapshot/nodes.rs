//! The snapshot's node table: name -> (host id, labels), laid out for thousands of lookups per request.
//!
//! ```text
//!  buckets: [(hash tag, node id)]  open addressing, load <= 1/2   ──> entries[id]: name span, host id
//!  names:   "n0n1n2..."            every name, one allocation      ──> labels[id]  (touched only when needed)
//! ```
//!
//! A `HashMap<String, _>` costs a lookup two scattered reads: its bucket, then the key's own heap block to
//! compare. Here the bucket is 8 bytes in a small array, the name compares against one contiguous buffer, and the
//! host id sits next to the name, so the fast path of a decision never reads the labels.

use std::hash::Hasher;
use std::sync::Arc;

use super::HostId;
use crate::fasthash::FastHasher;
use crate::selector::Labels;

fn hash(name: &str) -> u64 {
    let mut h = FastHasher::default();
    h.write(name.as_bytes());
    h.finish()
}

const EMPTY: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
struct Bucket {
    /// High half of the name's hash: most misses end here without reading the name.
    tag: u32,
    id: u32,
}

#[derive(Clone, Copy, Debug)]
struct NodeEntry {
    start: u32,
    len: u32,
    host: Option<HostId>,
}

#[derive(Debug, Default)]
pub struct NodeTable {
    names: String,
    entries: Vec<NodeEntry>,
    labels: Vec<Arc<Labels>>,
    buckets: Vec<Bucket>,
}

impl NodeTable {
    /// Nodes with their host ids; a name given twice keeps the last labels, as a map would.
    pub fn new(nodes: Vec<(String, Arc<Labels>, Option<HostId>)>) -> NodeTable {
        let size = (nodes.len() * 2).next_power_of_two().max(8);
        let mut table = NodeTable {
            names: String::with_capacity(nodes.iter().map(|(n, _, _)| n.len()).sum()),
            entries: Vec::with_capacity(nodes.len()),
            labels: Vec::with_capacity(nodes.len()),
            buckets: vec![Bucket { tag: 0, id: EMPTY }; size],
        };
        for (name, labels, host) in nodes {
            let h = hash(&name);
            match table.find(&name, h) {
                Ok(id) => {
                    table.entries[id].host = host;
                    table.labels[id] = labels;
                }
                Err(bucket) => {
                    let id = table.entries.len();
                    table.buckets[bucket] = Bucket {
                        tag: (h >> 32) as u32,
                        id: id as u32,
                    };
                    table.entries.push(NodeEntry {
                        start: table.names.len() as u32,
                        len: name.len() as u32,
                        host,
                    });
                    table.names.push_str(&name);
                    table.labels.push(labels);
                }
            }
        }
        table
    }

    /// The node's id, or the empty bucket where it would go.
    fn find(&self, name: &str, h: u64) -> Result<usize, usize> {
        let mask = self.buckets.len() - 1;
        let tag = (h >> 32) as u32;
        let mut at = h as usize & mask;
        loop {
            let b = self.buckets[at];
            if b.id == EMPTY {
                return Err(at);
            }
            if b.tag == tag && self.name(b.id as usize) == name {
                return Ok(b.id as usize);
            }
            at = (at + 1) & mask;
        }
    }

    fn name(&self, id: usize) -> &str {
        let e = &self.entries[id];
        &self.names[e.start as usize..(e.start + e.len) as usize]
    }

    /// Labels and host id of a node by name.
    pub fn get(&self, name: &str) -> Option<(&Labels, Option<HostId>)> {
        if self.entries.is_empty() {
            return None;
        }
        let id = self.find(name, hash(name)).ok()?;
        Some((&self.labels[id], self.entries[id].host))
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        (0..self.entries.len()).map(|id| self.name(id))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }
}
