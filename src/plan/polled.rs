//! What the agent's polled caches (its LocalDisks and the StorageClasses, `watch::poll`) decide besides their
//! period (pure; issue 35, point 2): when the LocalDisks are listed at once, and when both are left for the next
//! start (`agent::warmstart`). The shell (`agent::pass`) reads the Node and the stores, calls these, and pokes the
//! poller or writes the file.
//!
//! ```text
//!  own Node (watch store) ── mark_of ──> DisksMark::see ──> true: list the LocalDisks now (an operator changed one)
//!  stores synced? LocalDisks found? ── leaves_snapshot ──> leave api-cache.json at a clean stop, or not
//! ```

use k8s_openapi::api::core::v1::Node;

use crate::contract::ANN_DISKS_CHANGED;

/// The Node's `localpv.io/disks-changed` mark, set by `localpv disks` when it changes one of the node's LocalDisks.
pub fn mark_of(node: &Node) -> Option<String> {
    let annotations = node.metadata.annotations.as_ref()?;
    annotations.get(ANN_DISKS_CHANGED).cloned()
}

/// The Node's mark as the agent last saw it, to tell a new one from one already reflected in the LocalDisks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DisksMark {
    /// `None`: not seen yet (no pass, and no mark left by the last clean stop); `Some(None)`: seen without a mark.
    seen: Option<Option<String>>,
}

impl DisksMark {
    /// As a start finds it: the mark the last clean stop left with its seeded LocalDisks (`Some`), or none seen
    /// (`None`: the stores list at once, so the first mark seen is already reflected).
    pub fn at_start(left: Option<Option<String>>) -> DisksMark {
        DisksMark { seen: left }
    }

    /// Keeps `mark` as seen; true when it is news (another than the one seen last), and the LocalDisks must be
    /// listed now. NB: the first one seen is not news: the start's own list (or the snapshot it left) reflects it.
    pub fn see(&mut self, mark: Option<String>) -> bool {
        let news = self.seen.as_ref().is_some_and(|seen| *seen != mark);
        self.seen = Some(mark);
        news
    }

    /// The last mark seen, for the snapshot a clean stop leaves.
    pub fn last(&self) -> Option<String> {
        self.seen.clone().flatten()
    }
}

/// Whether a clean stop leaves its LocalDisks and StorageClasses for the next start: only when both stores were
/// listed, and there are LocalDisks (a node without any, or without the CRD, lists them again at start).
pub fn leaves_snapshot(classes_synced: bool, disks_synced: bool, disks_empty: bool) -> bool {
    classes_synced && disks_synced && !disks_empty
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    fn mark(m: Option<&str>) -> Option<String> {
        m.map(str::to_string)
    }

    #[rstest]
    #[case::first_sight_with_a_mark(None, Some("t1"), false)]
    #[case::first_sight_without_one(None, None, false)]
    #[case::same(Some(Some("t1")), Some("t1"), false)]
    #[case::same_none(Some(None), None, false)]
    #[case::changed(Some(Some("t1")), Some("t2"), true)]
    #[case::removed(Some(Some("t1")), None, true)]
    #[case::appeared(Some(None), Some("t1"), true)]
    fn a_mark_other_than_the_last_seen_lists_the_local_disks(
        #[case] seen: Option<Option<&str>>,
        #[case] now: Option<&str>,
        #[case] news: bool,
    ) {
        let mut marks = DisksMark::at_start(seen.map(mark));
        assert_eq!(marks.see(mark(now)), news);
        assert_eq!(marks.last(), mark(now), "kept as seen");
        assert!(!marks.see(mark(now)), "news once");
    }

    #[test]
    fn a_mark_left_by_the_last_stop_is_what_the_start_compares_with() {
        let mut marks = DisksMark::at_start(Some(mark(Some("t1"))));
        assert_eq!(marks.last(), mark(Some("t1")));
        assert!(
            marks.see(mark(Some("t2"))),
            "marked while the agent was down"
        );
    }

    #[test]
    fn the_mark_is_read_from_the_nodes_annotation() {
        let mut node = Node::default();
        assert_eq!(mark_of(&node), None);
        node.metadata.annotations =
            Some([(ANN_DISKS_CHANGED.to_string(), "t1".to_string())].into());
        assert_eq!(mark_of(&node), mark(Some("t1")));
    }

    #[rstest]
    #[case::both_listed_with_disks(true, true, false, true)]
    #[case::no_local_disks(true, true, true, false)]
    #[case::classes_not_listed(false, true, false, false)]
    #[case::disks_not_listed(true, false, false, false)]
    #[case::nothing_listed(false, false, true, false)]
    fn a_snapshot_is_left_only_when_both_kinds_were_listed_and_local_disks_exist(
        #[case] classes_synced: bool,
        #[case] disks_synced: bool,
        #[case] disks_empty: bool,
        #[case] want: bool,
    ) {
        assert_eq!(
            leaves_snapshot(classes_synced, disks_synced, disks_empty),
            want
        );
    }
}
