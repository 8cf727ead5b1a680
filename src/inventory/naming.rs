//! LocalDisk names: a pure function of the disk's stable identity, so the same disk keeps its object.
//!
//! - A filesystem with a UUID is `fs-<uuid>`: it keeps that name across device renames, reboots and moves to
//!   another entry. A bind mount of a sub-directory appends the directory and a hash (`fs-<uuid>-data-1a2b3c4d`).
//! - Anything else (block volumes, whose content belongs to the tenant; tmpfs; unusable entries) is named after
//!   node and host path: `<node>-<entry>-<16 hex>`.
//! - Cloned disks: the plain `fs-<uuid>` name belongs to the node that took it first. Another node reporting the
//!   same UUID gets a node-qualified name (`fs-<uuid>-<node>-<8 hex>`) and is flagged; the two are never merged.
//!
//! Every name is a valid DNS-1123 subdomain of at most 100 characters.

use std::path::{Path, PathBuf};

use super::crd::{DiskVolumeMode, LocalDiskSpec};
use crate::disk::{Disk, VolumeMode};

const NODE_PART_MAX: usize = 24;
const ENTRY_PART_MAX: usize = 24;
const ROOT_PART_MAX: usize = 16;
/// Longest UUID used verbatim; longer or oddly spelled ones are shortened and hashed.
const UUID_VERBATIM_MAX: usize = 64;

/// The identity a LocalDisk is named and matched by.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DiskKey {
    /// A Filesystem-mode disk with a filesystem UUID, and the mount root of a sub-directory bind mount.
    Filesystem { uuid: String, root: Option<String> },
    /// Everything else, known by its host path on its node.
    Path(PathBuf),
}

impl DiskKey {
    pub fn of_disk(disk: &Disk) -> DiskKey {
        match (&disk.identity.fs_uuid, disk.mode) {
            (Some(uuid), VolumeMode::Filesystem) => DiskKey::Filesystem {
                uuid: uuid.clone(),
                root: normal_root(disk.mount_root.as_deref()),
            },
            _ => DiskKey::Path(disk.host_path.clone()),
        }
    }

    /// The key of an existing object, from its spec (which records the same fields).
    pub fn of_spec(spec: &LocalDiskSpec) -> DiskKey {
        match (&spec.fs_uuid, spec.volume_mode) {
            (Some(uuid), Some(DiskVolumeMode::Filesystem)) => DiskKey::Filesystem {
                uuid: uuid.clone(),
                root: normal_root(spec.mount_root.as_deref()),
            },
            _ => DiskKey::Path(PathBuf::from(&spec.path)),
        }
    }
}

fn normal_root(root: Option<&str>) -> Option<String> {
    root.filter(|r| *r != "/").map(str::to_string)
}

/// The name a disk of `node` gets when nobody else holds it.
pub fn name(node: &str, key: &DiskKey) -> String {
    match key {
        DiskKey::Filesystem { uuid, root } => uuid_name(uuid, root.as_deref(), None),
        DiskKey::Path(path) => path_name(node, path),
    }
}

/// The name for a disk whose plain name another node holds (a cloned filesystem UUID). For path keys, which
/// already contain the node, it is the plain name.
pub fn node_qualified_name(node: &str, key: &DiskKey) -> String {
    match key {
        DiskKey::Filesystem { uuid, root } => uuid_name(uuid, root.as_deref(), Some(node)),
        DiskKey::Path(path) => path_name(node, path),
    }
}

fn uuid_name(uuid: &str, root: Option<&str>, node: Option<&str>) -> String {
    let lower = uuid.to_ascii_lowercase();
    let verbatim = lower.len() <= UUID_VERBATIM_MAX
        && lower
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && lower.starts_with(|c: char| c.is_ascii_alphanumeric())
        && lower.ends_with(|c: char| c.is_ascii_alphanumeric());
    let mut name = if verbatim {
        format!("fs-{lower}")
    } else {
        format!(
            "fs-{}-{:016x}",
            readable(uuid, ENTRY_PART_MAX),
            fnv64(&[uuid.as_bytes()])
        )
    };
    if root.is_none() && node.is_none() {
        return name;
    }
    for (part, max) in [(root, ROOT_PART_MAX), (node, NODE_PART_MAX)] {
        let fragment = part.map(|p| readable(p, max)).unwrap_or_default();
        if !fragment.is_empty() {
            name.push('-');
            name.push_str(&fragment);
        }
    }
    // NB: the separators keep (root "a", no node) and (no root, node "a") apart.
    let hash = fnv64(&[
        root.unwrap_or("").as_bytes(),
        b"\0",
        node.unwrap_or("").as_bytes(),
    ]);
    name.push_str(&format!("-{:08x}", hash >> 32));
    name
}

fn path_name(node: &str, path: &Path) -> String {
    let entry = path
        .file_name()
        .map(|e| e.to_string_lossy().into_owned())
        .unwrap_or_default();
    let hash = fnv64(&[node.as_bytes(), b"\0", path.as_os_str().as_encoded_bytes()]);
    let fragments: Vec<String> = [
        readable(node, NODE_PART_MAX),
        readable(&entry, ENTRY_PART_MAX),
    ]
    .into_iter()
    .filter(|f| !f.is_empty())
    .collect();
    if fragments.is_empty() {
        format!("disk-{hash:016x}")
    } else {
        format!("{}-{hash:016x}", fragments.join("-"))
    }
}

/// 64-bit FNV-1a over the parts in order.
fn fnv64(parts: &[&[u8]]) -> u64 {
    parts
        .iter()
        .flat_map(|part| part.iter())
        .fold(0xcbf2_9ce4_8422_2325, |hash: u64, byte| {
            (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3)
        })
}

/// Lowercase alphanumerics, runs of anything else as one dash, no dash at either end, at most `max` chars.
fn readable(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(max);
    for c in text.chars() {
        if out.len() >= max {
            break;
        }
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_end_matches('-').to_string()
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;
    use crate::config::values::is_dns_subdomain;

    fn fs(uuid: &str, root: Option<&str>) -> DiskKey {
        DiskKey::Filesystem {
            uuid: uuid.to_string(),
            root: root.map(str::to_string),
        }
    }

    fn path(p: &str) -> DiskKey {
        DiskKey::Path(PathBuf::from(p))
    }

    #[rstest]
    #[case::uuid_is_used_verbatim(
        "node-1",
        fs("6f1c5a7e-2b4d-4c3a-9e8f-0a1b2c3d4e5f", None),
        "fs-6f1c5a7e-2b4d-4c3a-9e8f-0a1b2c3d4e5f"
    )]
    #[case::vfat_uuid_is_lowercased("node-1", fs("ABCD-1234", None), "fs-abcd-1234")]
    #[case::path_name_reads_node_and_entry("node-1", path("/mnt/disks/vol1"), "node-1-vol1-")]
    #[case::fqdn_node_is_readable(
        "ip-10-0-1-23.ec2.internal",
        path("/mnt/fast/nvme0"),
        "ip-10-0-1-23-ec2-interna-nvme0-"
    )]
    #[case::bind_mounted_directory_is_qualified("n", fs("abc", Some("/data/1")), "fs-abc-data-1-")]
    fn names_are_readable(#[case] node: &str, #[case] key: DiskKey, #[case] prefix: &str) {
        let name = name(node, &key);
        assert!(
            name.starts_with(prefix),
            "{name} should start with {prefix}"
        );
        assert!(is_dns_subdomain(&name), "{name} is not a DNS subdomain");
    }

    #[rstest]
    #[case::odd_characters_in_uuid(fs("UUID with spaces/and:colons", None))]
    #[case::very_long_uuid(fs(&"a".repeat(300), None))]
    #[case::uuid_with_leading_dash(fs("-abc", None))]
    #[case::long_root(fs("abc", Some(&"/x".repeat(200))))]
    #[case::unicode_path(path("/mnt/disks/☃"))]
    #[case::root_path(path("/"))]
    fn awkward_inputs_still_give_valid_names(#[case] key: DiskKey) {
        for name in [name("Node_1", &key), node_qualified_name("Node_1", &key)] {
            assert!(is_dns_subdomain(&name), "{name} is not a DNS subdomain");
            assert!(name.len() <= 100, "{name} is longer than 100");
        }
    }

    #[test]
    fn a_uuid_name_does_not_depend_on_node_or_path() {
        let key = fs("abc", None);
        assert_eq!(name("node-1", &key), name("node-2", &key));
    }

    #[test]
    fn a_cloned_uuid_on_another_node_gets_a_distinct_name() {
        let key = fs("abc", None);
        let plain = name("node-1", &key);
        let on_2 = node_qualified_name("node-2", &key);
        let on_3 = node_qualified_name("node-3", &key);
        assert_ne!(plain, on_2);
        assert_ne!(on_2, on_3);
        assert!(on_2.starts_with("fs-abc-node-2-"), "{on_2}");
    }

    #[test]
    fn the_same_path_on_two_nodes_gives_two_names() {
        let key = path("/mnt/disks/vol1");
        assert_ne!(name("node-1", &key), name("node-2", &key));
    }

    #[test]
    fn paths_that_read_alike_hash_apart() {
        assert_ne!(
            name("n", &path("/mnt/a/vol-1")),
            name("n", &path("/mnt/a/vol_1"))
        );
    }

    #[test]
    fn a_root_qualifier_and_a_node_qualifier_do_not_meet() {
        let by_root = uuid_name("abc", Some("x"), None);
        let by_node = uuid_name("abc", None, Some("x"));
        assert_ne!(by_root, by_node);
    }
}
