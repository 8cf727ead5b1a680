//! Which objects and other entries the LocalDisk built for one found entry may read: the one description both the
//! whole build and the incremental inventory derive from (the inventory's counterpart of `plan::relation`, over
//! LocalDisk objects instead of PVs).
//!
//! An entry's object is decided from what is at its path (the entry, its PV, its wipe, its hold reason), the ledger
//! at its disk's key, this node's objects under its disk key, and the object names it may take (its plain name, the
//! node-qualified one, the name by path) with whichever entry took them first. The incremental inventory builds an
//! entry again when something sharing an [`EntryLink`] with it changed; in debug builds the builder asserts, at
//! each read of an object or of a name another entry may hold, that the entry links it.

use std::path::Path;

use super::naming::{self, DiskKey};
use crate::disk::Disk;
use crate::plan::identity;

/// What relates found entries at different paths, and entries to this node's objects.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum EntryLink {
    /// A disk key: the objects recorded under it.
    Key(DiskKey),
    /// An object name: the object and the entry that uses it.
    Name(String),
    /// A disk ledger key.
    Ledger(String),
}

/// The links of a found entry: its key, the names it may take, its disk's ledger key.
pub fn entry_links(
    node: &str,
    key: DiskKey,
    disk: Option<&Disk>,
    host_path: &Path,
) -> Vec<EntryLink> {
    let mut links = vec![EntryLink::Name(naming::name(node, &key))];
    if let DiskKey::Filesystem { .. } = key {
        links.push(EntryLink::Name(naming::node_qualified_name(node, &key)));
        // The name an entry falls back to when another entry of this pass took its key's name.
        let by_path = DiskKey::Path(host_path.to_path_buf());
        links.push(EntryLink::Name(naming::name(node, &by_path)));
    }
    if let Some(disk) = disk {
        links.push(EntryLink::Ledger(identity::disk_key(disk)));
    }
    links.push(EntryLink::Key(key));
    links
}

/// The links of one of this node's objects.
pub fn object_links(name: &str, key: &DiskKey) -> [EntryLink; 2] {
    [
        EntryLink::Name(name.to_string()),
        EntryLink::Key(key.clone()),
    ]
}

/// Whether an entry with `links` may read the object `name` recorded under `key` (or, without a key, whoever
/// holds that name): they share a link.
pub fn reaches(links: &[EntryLink], name: &str, key: Option<&DiskKey>) -> bool {
    links.iter().any(|link| match link {
        EntryLink::Name(n) => n == name,
        EntryLink::Key(k) => key == Some(k),
        EntryLink::Ledger(_) => false,
    })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn fs(uuid: &str) -> DiskKey {
        DiskKey::Filesystem {
            uuid: uuid.to_string(),
            root: None,
        }
    }

    #[test]
    fn a_filesystem_entry_links_every_name_it_may_take_and_its_key() {
        let path = PathBuf::from("/mnt/disks/vol1");
        let links = entry_links("n1", fs("u1"), None, &path);
        for name in [
            naming::name("n1", &fs("u1")),
            naming::node_qualified_name("n1", &fs("u1")),
            naming::name("n1", &DiskKey::Path(path.clone())),
        ] {
            assert!(reaches(&links, &name, None), "{name}");
        }
        assert!(reaches(&links, "any-name", Some(&fs("u1"))));
        assert!(!reaches(&links, "any-name", Some(&fs("u2"))));
        assert!(!reaches(&links, &naming::name("n1", &fs("u2")), None));
    }

    #[test]
    fn an_entry_known_by_its_path_links_its_one_name() {
        let path = PathBuf::from("/mnt/disks/vol1");
        let key = DiskKey::Path(path.clone());
        let links = entry_links("n1", key.clone(), None, &path);
        assert_eq!(
            links,
            vec![
                EntryLink::Name(naming::name("n1", &key)),
                EntryLink::Key(key)
            ]
        );
    }
}
