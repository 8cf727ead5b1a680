//! Random worlds: after every change on the host (directories made and removed, mounts added, stacked, bind-mounted,
//! remounted, removed, mounts elsewhere and over the discovery directory itself, entries forgotten by the agent), the
//! pass that classifies only what the change touched reports exactly what a pass classifying everything from scratch
//! reports, entry for entry and in the same order.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::super::{Probed, discover_changed, discover_with};
use crate::disk::{DiscoveryClass, VolumeMode};
use crate::host::fake::FakeHost;
use crate::host::{DirEntry, EntryKind, HostChanges};

const MOUNT_DIR: &str = "/host/mnt/disks";

fn class(name: &str, host_dir: &str, pattern: &str) -> DiscoveryClass {
    DiscoveryClass {
        name: name.into(),
        host_dir: host_dir.into(),
        mount_dir: MOUNT_DIR.into(),
        mode: VolumeMode::Filesystem,
        name_patterns: vec![pattern.into()],
    }
}

/// A small deterministic generator (xorshift); discover may not import plan's, even in tests (`tests/layout.rs`).
struct Rng(u64);

impl Rng {
    fn seeded(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n.max(1) as u64) as usize
    }
}

#[derive(Clone, Debug)]
struct Mount {
    id: u32,
    dev: String,
    root: String,
    point: String,
    options: &'static str,
}

#[derive(Default)]
struct World {
    /// Entries of the discovery directory: true for a directory, false for a file.
    entries: BTreeMap<String, bool>,
    mounts: Vec<Mount>,
    next: u32,
    /// Free space each entry's filesystem reports (GiB): what the agent changes before it forgets an entry.
    free: BTreeMap<String, u64>,
}

impl World {
    fn mountinfo(&self) -> String {
        let mut text = String::from("1 0 253:1 / / rw shared:1 - ext4 /dev/vda1 rw\n");
        for m in &self.mounts {
            text.push_str(&format!(
                "{} 1 {} {} {} {} shared:1 - tmpfs tmpfs rw\n",
                m.id, m.dev, m.root, m.point, m.options
            ));
        }
        text
    }

    fn apply(&self, host: &mut FakeHost) {
        host.mountinfo = Some(Ok(self.mountinfo()));
        let entries = self
            .entries
            .iter()
            .map(|(name, is_dir)| DirEntry {
                name: name.clone(),
                kind: if *is_dir {
                    EntryKind::Directory
                } else {
                    EntryKind::File
                },
            })
            .collect();
        host.dirs.insert(MOUNT_DIR.into(), Ok(entries));
        for (name, free) in &self.free {
            // Entries ending in 3 cannot be measured: their probe fails in every pass.
            if !name.ends_with('3') {
                host.statvfs.insert(
                    PathBuf::from(format!("{MOUNT_DIR}/{name}")),
                    Ok(crate::host::FsSize {
                        total_bytes: 10 << 30,
                        available_bytes: free << 30,
                    }),
                );
            }
        }
    }

    fn point(name: &str) -> String {
        format!("{MOUNT_DIR}/{name}")
    }

    fn mounted_points(&self) -> Vec<String> {
        self.mounts
            .iter()
            .filter(|m| m.point.starts_with(MOUNT_DIR))
            .map(|m| m.point.clone())
            .collect()
    }

    fn mount(&mut self, dev: Option<String>, root: &str, point: String) {
        self.next += 1;
        let id = 100 + self.next;
        self.mounts.push(Mount {
            id,
            dev: dev.unwrap_or_else(|| format!("0:{id}")),
            root: root.into(),
            point,
            options: "rw,relatime",
        });
    }
}

/// One random change to the world; what a watcher would report of it.
fn step(
    world: &mut World,
    rng: &mut Rng,
    probed: &mut Probed,
    names: &[&str],
) -> (String, HostChanges) {
    let name = names[rng.below(names.len())].to_string();
    let mut changes = HostChanges::default();
    let what = match rng.below(14) {
        0 | 1 => {
            world.entries.insert(name.clone(), true);
            changes
                .entries
                .push((MOUNT_DIR.into(), name.clone().into()));
            format!("mkdir {name}")
        }
        2 => {
            world.entries.insert(name.clone(), false);
            changes
                .entries
                .push((MOUNT_DIR.into(), name.clone().into()));
            format!("file {name}")
        }
        3 if !world.mounted_points().contains(&World::point(&name)) => {
            world.entries.remove(&name);
            changes
                .entries
                .push((MOUNT_DIR.into(), name.clone().into()));
            format!("rm {name}")
        }
        4..=6 if world.entries.get(&name) == Some(&true) => {
            world.mount(None, "/", World::point(&name));
            changes.mounts = true;
            format!("mount tmpfs on {name}")
        }
        7 if world.entries.get(&name) == Some(&true) && !world.mounts.is_empty() => {
            // A bind mount of another mount's filesystem: whole, or a sub-directory of it.
            let other = world.mounts[rng.below(world.mounts.len())].clone();
            let root = ["/", "/a", "/b", "/a/x"][rng.below(4)];
            world.mount(Some(other.dev.clone()), root, World::point(&name));
            changes.mounts = true;
            format!("bind {} ({}) on {name}", other.dev, root)
        }
        8 | 9 if !world.mounts.is_empty() => {
            let at = rng.below(world.mounts.len());
            let gone = world.mounts.remove(at);
            changes.mounts = true;
            format!("umount {}", gone.point)
        }
        10 if !world.mounts.is_empty() => {
            let at = rng.below(world.mounts.len());
            let m = &mut world.mounts[at];
            m.options = if m.options == "rw,relatime" {
                "ro,relatime"
            } else {
                "rw,relatime"
            };
            changes.mounts = true;
            format!("remount {}", m.point)
        }
        11 => {
            let point = if rng.below(8) == 0 {
                // Over the discovery directory itself, or above it.
                [MOUNT_DIR, "/host/mnt", "/"][rng.below(3)].to_string()
            } else {
                format!("/elsewhere/{name}")
            };
            world.mount(None, "/", point.clone());
            changes.mounts = true;
            format!("mount on {point}")
        }
        12 => {
            // The agent changed an entry itself (a wipe frees space) and forgets its measurement.
            *world.free.entry(name.clone()).or_insert(5) += 1;
            for class_dir in ["/mnt/disks", "/mnt/slow"] {
                probed.forget(&PathBuf::from(class_dir).join(&name));
            }
            format!("forget {name}")
        }
        _ => {
            // An event on an entry that changed nothing the listing shows (an attribute written).
            changes
                .entries
                .push((MOUNT_DIR.into(), name.clone().into()));
            changes.mounts = rng.below(2) == 0;
            format!("touch {name}")
        }
    };
    (what, changes)
}

#[test]
fn a_pass_classifying_only_what_changed_reports_what_a_whole_pass_reports() {
    let names = ["a0", "a1", "a2", "a3", "b0", "b1", "b2", "b3", "c0"];
    let (mut incremental, mut total) = (0, 0);
    for seed in 1..=300u64 {
        let mut rng = Rng::seeded(seed);
        let classes = match seed % 3 {
            0 => vec![class("fast", "/mnt/disks", "*")],
            // Two classes over one directory, listed out of name order: the whole pass orders by class name.
            1 => vec![
                class("slow", "/mnt/slow", "b*"),
                class("fast", "/mnt/disks", "a*"),
            ],
            _ => vec![class("fast", "/mnt/disks", "[ab]*")],
        };
        let mut world = World {
            free: names.iter().map(|n| (n.to_string(), 5)).collect(),
            ..World::default()
        };
        let mut host = FakeHost::new();
        world.apply(&mut host);
        let mut probed = Probed::default();
        let first = discover_changed(&host, &classes, &mut probed, &HostChanges::all());
        assert_eq!(
            first,
            discover_with(&host, &classes, &mut Probed::default())
        );
        let mut history = Vec::new();
        for i in 0..40 {
            let (what, mut changes) = step(&mut world, &mut rng, &mut probed, &names);
            history.push(what);
            // Sometimes two changes before the pass (a forgotten entry and a mount event, say).
            if rng.below(3) == 0 {
                let (what, more) = step(&mut world, &mut rng, &mut probed, &names);
                history.push(format!("and {what}"));
                changes.mounts |= more.mounts;
                changes.entries.extend(more.entries);
            }
            world.apply(&mut host);
            let got = discover_changed(&host, &classes, &mut probed, &changes);
            let entries = world.entries.len();
            total += 1;
            if probed.last_classified < entries {
                incremental += 1;
            }
            let want = discover_with(&host, &classes, &mut Probed::default());
            assert_eq!(
                got,
                want,
                "seed {seed}, step {i}; what happened:\n{}\nmountinfo:\n{}",
                history.join("\\n"),
                world.mountinfo()
            );
        }
    }
    eprintln!("{incremental} of {total} passes classified only what changed");
    // The point of the test: most passes took the touched path (otherwise it checked nothing).
    assert!(
        incremental * 2 > total,
        "only {incremental} of {total} passes classified less than everything"
    );
}
