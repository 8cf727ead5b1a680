//! The pass after a mount or directory event, classifying only the entries the event touched: the entries it named,
//! and those at the mount point of every mount that appeared, went or changed since the last pass. The rest of the
//! kept classification stands as it is, and so do its measurements.
//!
//! ```text
//!  last table ─┐ diff by address            ┌─ named entries
//!  new table ──┴─> changed mounts ─> points ┴─> touched (class, entry) ─> classify each ─> edit the kept
//!                                                                          (pure rules)   candidates in order
//! ```
//!
//! Only where the outcome cannot depend on other entries: Filesystem classes (each entry is classified from its own
//! kind and mount; overlaps between entries are the planner's to decide), and at most [`MAX_CHANGED`] changed
//! mounts. Anything else classifies every entry again, as
//! before. (A mount on a discovery directory itself or above it names no entry: classifying everything against the
//! same listing would decide the same, and what it hides in the directory is the watcher's to report.) The result is the whole classification's, entry for entry
//! and in the same order (random worlds check it against `classify`).

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;

use super::classify::{self, Candidate};
use super::{Gathered, KeptCandidate, Probed, pattern};
use crate::disk::{Discovery, DiscoveryClass, Unusable, VolumeMode};
use crate::fasthash::FastSet;
use crate::host::{Host, MountEntry, MountTable};

/// More changed mounts than this classify everything again.
pub const MAX_CHANGED: usize = 64;

/// One touched entry: its class (position in `Gathered::classes`) and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Touched {
    class: usize,
    entry: String,
}

/// What classifying a touched entry again decided, before anything is changed.
struct Decided {
    touched: Touched,
    /// Its position among the kept candidates, and among the kept rejections, before this pass.
    old_candidate: Option<usize>,
    old_unusable: Option<usize>,
    new: Option<Result<KeptCandidate, Unusable>>,
}

/// Classifies the touched entries of `gathered` against `table` and measures what needs it; `None` (nothing
/// changed) when the pass must classify everything. `named` are the entries a directory event named, as
/// (directory as configured, name); their listings are already updated (names spelled as the listing does).
pub(super) fn discover_touched(
    host: &dyn Host,
    classes: &[DiscoveryClass],
    gathered: &mut Gathered,
    table: &MountTable,
    named: &[(PathBuf, OsString)],
    probed: &mut Probed,
) -> Option<Discovery> {
    let last = gathered.table.as_ref()?;
    if classes.iter().any(|c| c.mode != VolumeMode::Filesystem) {
        return None;
    }
    let changed = changed_mounts(last, table)?;
    // Each class's directory as the mount table spells it.
    let dirs: Vec<Vec<u8>> = gathered
        .listed
        .iter()
        .map(|l| {
            l.as_ref()
                .map(|l| classify::normal(&l.resolved_dir).into_owned())
        })
        .collect::<Result<_, _>>()
        .ok()?;
    let mut touched: Vec<Touched> = Vec::new();
    for mount in &changed {
        let point = classify::normal(&mount.mount_point);
        for (class, dir) in dirs.iter().enumerate() {
            if let Some(name) = classify::child_name(&point, dir) {
                touched.push(Touched {
                    class,
                    entry: std::str::from_utf8(name).ok()?.to_string(),
                });
            }
        }
    }
    for (dir, name) in named {
        for (class, c) in classes.iter().enumerate() {
            if c.mount_dir == *dir {
                touched.push(Touched {
                    class,
                    entry: name.to_string_lossy().into_owned(),
                });
            }
        }
    }
    touched.sort();
    touched.dedup();
    probed.last_classified = touched.len();
    let order = Order::of(classes);
    let mut decided = Vec::with_capacity(touched.len());
    for t in touched {
        decided.push(decide(classes, gathered, table, &dirs, &order, t)?);
    }
    let added = apply(gathered, &order, decided, probed);
    // NB: the kept table keeps the last pass's mounts alive until here, so no new mount can have been allocated at
    // the address of one that went (which would read as unchanged).
    gathered.table = Some(table.clone());
    let measure_now = super::measured_again(gathered, probed, added);
    Some(super::measure_kept(host, gathered, &measure_now, probed))
}

/// The mounts that appeared, went or changed (a changed mount is a new entry): by address, since an unchanged
/// mount is handed over as the same allocation. `None` when there are too many to follow.
fn changed_mounts(last: &MountTable, table: &MountTable) -> Option<Vec<Arc<MountEntry>>> {
    let address = |m: &Arc<MountEntry>| Arc::as_ptr(m) as usize;
    let before: FastSet<usize> = last.entries.iter().map(address).collect();
    let now: FastSet<usize> = table.entries.iter().map(address).collect();
    let mut changed: Vec<Arc<MountEntry>> = Vec::new();
    let appeared = table
        .entries
        .iter()
        .filter(|m| !before.contains(&address(m)));
    let went = last.entries.iter().filter(|m| !now.contains(&address(m)));
    for mount in appeared.chain(went) {
        if changed.len() == MAX_CHANGED {
            return None;
        }
        changed.push(mount.clone());
    }
    Some(changed)
}

/// The order the whole classification produces: classes by name, then entries by name.
struct Order {
    /// Per class (position in `classes`), its rank by name.
    rank: Vec<usize>,
}

impl Order {
    fn of(classes: &[DiscoveryClass]) -> Order {
        let mut by_name: Vec<usize> = (0..classes.len()).collect();
        by_name.sort_by(|&a, &b| classes[a].name.cmp(&classes[b].name));
        let mut rank = vec![0; classes.len()];
        for (r, &c) in by_name.iter().enumerate() {
            rank[c] = r;
        }
        Order { rank }
    }

    fn key<'a>(&self, class: usize, entry: &'a str) -> (usize, &'a str) {
        (self.rank[class], entry)
    }

    /// The rank of the class named `name` (rejections carry the class's name).
    fn rank_named(&self, classes: &[DiscoveryClass], name: &str) -> usize {
        classes
            .iter()
            .position(|c| c.name == name)
            .map_or(usize::MAX, |c| self.rank[c])
    }
}

fn decide(
    classes: &[DiscoveryClass],
    gathered: &Gathered,
    table: &MountTable,
    dirs: &[Vec<u8>],
    order: &Order,
    touched: Touched,
) -> Option<Decided> {
    let key = order.key(touched.class, &touched.entry);
    let old_candidate = gathered
        .candidates
        .binary_search_by(|c| order.key(c.class, &c.entry).cmp(&key))
        .ok();
    let old_unusable = gathered
        .unusable
        .binary_search_by(|u| (order.rank_named(classes, &u.class), u.entry.as_str()).cmp(&key))
        .ok();
    let class = &classes[touched.class];
    let listed = gathered.listed[touched.class].as_ref().ok()?;
    let entry = listed
        .entries
        .iter()
        .find(|e| e.name == touched.entry)
        .filter(|e| {
            class
                .name_patterns
                .iter()
                .any(|p| pattern::matches(p, &e.name))
        });
    let new = entry.map(|entry| {
        let mount = visible_at(table, &dirs[touched.class], &touched.entry);
        classify::classify_entry(class, entry, mount, &Default::default()).map(|c| kept(classes, c))
    });
    Some(Decided {
        touched,
        old_candidate,
        old_unusable,
        new,
    })
}

/// The mount visible at `name` in `dir` (normal form): of mounts stacked there, the one listed last, as `classify`
/// picks it.
fn visible_at<'t>(table: &'t MountTable, dir: &[u8], name: &str) -> Option<&'t Arc<MountEntry>> {
    table.entries.iter().rev().find(|m| {
        // NB: the last component first (parsed from the back, cheap); the whole path only for those that match.
        m.mount_point.file_name().and_then(|n| n.to_str()) == Some(name)
            && classify::child_name(&classify::normal(&m.mount_point), dir) == Some(name.as_bytes())
    })
}

fn kept(classes: &[DiscoveryClass], c: Candidate<'_>) -> KeptCandidate {
    KeptCandidate {
        class: classes
            .iter()
            .position(|k| std::ptr::eq(k, c.class))
            .expect("a candidate's class is one of the classes"),
        entry: c.entry,
        host_path: c.host_path,
        probe_path: c.probe_path,
        kind: c.kind,
    }
}

/// Replaces each touched entry's outcome in the kept classification, keeping its order, and moves the cached
/// positions along. Returns the positions of the new candidates (to measure or find in the cache).
fn apply(
    gathered: &mut Gathered,
    order: &Order,
    decided: Vec<Decided>,
    probed: &mut Probed,
) -> Vec<usize> {
    // Removals first, from the last position down, so earlier positions stay valid.
    let mut gone: Vec<usize> = decided.iter().filter_map(|d| d.old_candidate).collect();
    gone.sort_unstable();
    let mut gone_paths = Vec::new();
    for &at in gone.iter().rev() {
        let c = gathered.candidates.remove(at);
        gathered.reusable.remove(at);
        // NB: its measurement stays cached while it may come back below on the same mount (found by path, its
        // position set again); one that does not come back is dropped at the end.
        if probed
            .disks
            .get(&c.host_path)
            .is_some_and(|cached| cached.at == at)
        {
            gone_paths.push(c.host_path);
        }
        shift(probed, at, Shift::Removed);
    }
    let mut rejected: Vec<usize> = decided.iter().filter_map(|d| d.old_unusable).collect();
    rejected.sort_unstable();
    for &at in rejected.iter().rev() {
        gathered.unusable.remove(at);
    }
    let mut added = Vec::new();
    for d in decided {
        match d.new {
            Some(Ok(candidate)) => {
                let key = order.key(candidate.class, &candidate.entry);
                let at = gathered
                    .candidates
                    .partition_point(|c| order.key(c.class, &c.entry) < key);
                shift(probed, at, Shift::Inserted);
                for a in added.iter_mut().filter(|a| **a >= at) {
                    *a += 1;
                }
                gathered.candidates.insert(at, candidate);
                gathered.reusable.insert(at, None);
                added.push(at);
            }
            Some(Err(unusable)) => {
                let rank = order.rank[d.touched.class];
                let at = gathered.unusable.partition_point(|u| {
                    (
                        order.rank_named(&gathered.classes, &u.class),
                        u.entry.as_str(),
                    ) < (rank, unusable.entry.as_str())
                });
                gathered.unusable.insert(at, unusable);
            }
            None => {}
        }
    }
    for path in gone_paths {
        if !added
            .iter()
            .any(|&at| gathered.candidates[at].host_path == path)
        {
            probed.disks.remove(&path);
        }
    }
    added
}

enum Shift {
    Removed,
    Inserted,
}

/// Moves the cached and forgotten positions past `at` along with a removal or an insertion there.
fn shift(probed: &mut Probed, at: usize, how: Shift) {
    let moved = |p: &mut usize| match how {
        Shift::Removed if *p > at => *p -= 1,
        Shift::Inserted if *p >= at => *p += 1,
        _ => {}
    };
    for cached in probed.disks.values_mut() {
        moved(&mut cached.at);
    }
    if let Shift::Removed = how {
        probed.forgotten.retain(|&p| p != at);
    }
    probed.forgotten.iter_mut().for_each(moved);
}

#[cfg(test)]
mod tests;
