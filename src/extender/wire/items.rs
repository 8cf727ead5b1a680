//! `Nodes.items`: the node list, most of a `Nodes`-mode request (about 8 KiB per node, 39 MiB at 5,000 nodes).
//! Checking that text is the cost of decoding it, so a long list is cut into parts checked on several threads.
//!
//! ```text
//!  [{node 0},{node 1},  …  ,{node k},{node k+1},  …  ,{node n}]
//!   part 0 ───────────────>│ part 1 (from a guessed cut) ──────>]
//!   stops where part 1 began: the guess is proved, part 1's nodes follow part 0's
//!   runs past it: the guess was wrong, part 0 went on to the end and part 1 is dropped
//! ```
//!
//! A cut is guessed at the text `},{"metadata":{` (how Go writes the boundary between two nodes), found by a
//! byte search near an even share of the list. The guess only saves time: every part but the first begins at a
//! guess, and its nodes are used only when the part before it, walked element by element from the list's start,
//! stopped exactly there. So the result is the one a single walk gives, errors included.

use std::ops::Range;

use bytes::Bytes;
use memchr::memmem;
use serde::de::Error as _;

use super::bounds::{DecodeError, DecodeLimits, Tally};
use super::walk::{Error, Walker};
use super::{RawNode, WireLabels, WireNode, node};

/// How a node list may be split.
#[derive(Clone, Copy, Debug)]
pub struct Split {
    pub threads: usize,
    /// No part shorter than this: a thread costs tens of microseconds, checking 4 MiB some milliseconds.
    pub min_part_bytes: usize,
}

impl Split {
    pub fn on(threads: usize) -> Split {
        Split {
            threads,
            min_part_bytes: 4 << 20,
        }
    }
}

/// The boundaries Go's encoder writes between two nodes (their first key is `metadata`, or `kind` when the
/// objects carry their type); a part starts at the second `{`. The quote after that `{` opens a key: had it closed
/// a string, a letter could not follow it, so the `{` is structure, not string content.
const BOUNDARIES: [&[u8]; 2] = [br#"},{"metadata":{"#, br#"},{"kind":"Node","#];

/// How far past an even share a boundary is looked for (nodes are some KiB; a very large one is just not cut).
const SEARCH_BYTES: usize = 4 << 20;

/// Reads the list whose `[` the walker has just passed, in parts as `split` allows, and leaves the walker after
/// its `]`. The nodes and labels are counted into `tally` (see `stitch`).
pub fn read(
    walker: &mut Walker,
    body: &Bytes,
    split: Split,
    tally: &mut Tally,
) -> Result<Vec<WireNode>, DecodeError> {
    let limits = tally.limits;
    let start = walker.at();
    let cuts = guess_cuts(body, start, split);
    let parts: Vec<Part> = if cuts.is_empty() {
        vec![walk_part(body, start, None, limits)]
    } else {
        std::thread::scope(|scope| {
            let bounds: Vec<(usize, Option<usize>)> = std::iter::once(start)
                .chain(cuts.iter().copied())
                .zip(cuts.iter().copied().map(Some).chain([None]))
                .collect();
            let spawned: Vec<_> = bounds[1..]
                .iter()
                .map(|&(from, stop)| {
                    let thread = std::thread::Builder::new().name("localpv-decode".into());
                    (
                        from,
                        stop,
                        thread.spawn_scoped(scope, move || walk_part(body, from, stop, limits)),
                    )
                })
                .collect();
            let mut parts = vec![walk_part(body, start, bounds[0].1, limits)];
            for (from, stop, handle) in spawned {
                // NB: a thread that could not start or panicked is walked here instead; never a lost part.
                let part = handle.ok().and_then(|h| h.join().ok());
                parts.push(part.unwrap_or_else(|| walk_part(body, from, stop, limits)));
            }
            parts
        })
    };
    let (nodes, end) = stitch(parts, tally)?;
    walker.seek(end);
    Ok(nodes)
}

impl Split {
    /// How many parts a list of `len` bytes is read in at most.
    pub fn parts(&self, len: usize) -> usize {
        self.threads.min(len / self.min_part_bytes.max(1)).max(1)
    }
}

/// Positions where parts 1.. may start: after the boundary text found from each even share of the list onwards,
/// ascending, none when the list is too short to be worth splitting.
pub(super) fn guess_cuts(body: &[u8], start: usize, split: Split) -> Vec<usize> {
    let len = body.len().saturating_sub(start);
    let parts = split.parts(len);
    let mut cuts: Vec<usize> = Vec::with_capacity(parts - 1);
    for i in 1..parts {
        let from = start + len / parts * i;
        let window = &body[from..body.len().min(from + SEARCH_BYTES)];
        let found = BOUNDARIES.iter().find_map(|b| memmem::find(window, b));
        let Some(found) = found else {
            continue;
        };
        let cut = from + found + 2;
        if cuts.last().is_none_or(|&last| cut > last) {
            cuts.push(cut);
        }
    }
    cuts
}

/// The nodes one walk found, their labels, and how it ended.
struct Part {
    nodes: Vec<WireNode>,
    labels: usize,
    end: Result<End, Failure>,
}

enum End {
    /// Reached the next part's start at an element boundary.
    Stop,
    /// Passed the list's `]`; the byte after it.
    List(usize),
}

/// An error, and whether it belongs to the node at `nodes.len()` of its part.
struct Failure {
    in_node: bool,
    error: DecodeError,
}

/// Walks elements from `from` (the list's first byte after `[`, or a guessed node start) until `stop` is met at an
/// element's start or the list ends, or the part alone is over a limit.
fn walk_part(body: &Bytes, from: usize, stop: Option<usize>, limits: &DecodeLimits) -> Part {
    let mut nodes = Vec::new();
    let mut tally = Tally::new(limits);
    let end = walk_elements(body, from, stop, &mut nodes, &mut tally);
    Part {
        nodes,
        labels: tally.labels,
        end,
    }
}

fn walk_elements(
    body: &Bytes,
    from: usize,
    stop: Option<usize>,
    nodes: &mut Vec<WireNode>,
    tally: &mut Tally,
) -> Result<End, Failure> {
    let outside = |error: DecodeError| Failure {
        in_node: false,
        error,
    };
    let mut walker = Walker::at_offset(body, from);
    let mut first = true;
    loop {
        if !walker.next_element(first).map_err(|e| outside(e.into()))? {
            return Ok(End::List(walker.at()));
        }
        first = false;
        walker.peek();
        if Some(walker.at()) == stop {
            return Ok(End::Stop);
        }
        tally.node().map_err(outside)?;
        let in_node = |error: DecodeError| Failure {
            in_node: true,
            error,
        };
        let text = walker.raw().map_err(|e| in_node(e.into()))?;
        let span = walker.at() - text.len()..walker.at();
        nodes.push(wire_node(body, text, span, tally).map_err(in_node)?);
    }
}

fn wire_node(
    body: &Bytes,
    text: &str,
    span: Range<usize>,
    tally: &mut Tally,
) -> Result<WireNode, DecodeError> {
    let meta = node::read(text)?;
    tally.node_labels(meta.label_count)?;
    let raw = body.slice(span);
    let labels = meta.labels.map(|s| raw.slice(s)).unwrap_or_default();
    Ok(WireNode {
        raw: RawNode(raw),
        name: meta.name,
        labels: WireLabels::new(labels, meta.hostname, meta.label_count),
    })
}

/// Joins the parts a single walk would have found, and where the list ended. Each part kept to the limits on its
/// own; the parts joined so far are counted into `tally`, so a list over a limit is refused as a single walk would
/// refuse it (when it is over two limits, which one is named may differ).
fn stitch(parts: Vec<Part>, tally: &mut Tally) -> Result<(Vec<WireNode>, usize), DecodeError> {
    let mut nodes: Vec<WireNode> = Vec::new();
    for part in parts {
        tally.add_nodes(part.nodes.len())?;
        tally.add_labels(part.labels)?;
        if nodes.is_empty() {
            nodes = part.nodes;
        } else {
            nodes.extend(part.nodes);
        }
        match part.end {
            Ok(End::Stop) => continue,
            Ok(End::List(end)) => return Ok((nodes, end)),
            Err(Failure {
                in_node: false,
                error,
            }) => return Err(error),
            Err(Failure {
                in_node: true,
                error: DecodeError::Malformed(error),
            }) => {
                let index = nodes.len();
                return Err(Error::custom(format_args!(
                    "failed to read Nodes.items[{index}]: {error}"
                ))
                .into());
            }
            Err(Failure { error, .. }) => return Err(error),
        }
    }
    // Only a part that stopped at the next part's start continues; the last part has none.
    Err(Error::custom("failed to walk the node list: its parts do not join").into())
}
