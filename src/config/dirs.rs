//! Which discovery directories a configuration may name, decided on paths only.
//!
//! ```text
//!  ClassConfig (hostDir, mountDir as written) ──┐
//!  resolved mountDir (symlinks followed, by     ─┼─> problems(): system directories, shared or nested dirs
//!  `Config::load` on the host; else as written) ─┘         (each named by its key)
//! ```
//!
//! Every first-level mount under a discovery directory becomes a tenant volume that is later wiped, so a
//! directory of the operating system (or one that contains one) must never be a discovery directory, and two
//! classes must never see the same entry. The check is pure: the caller resolves symlinks and passes the result.

use std::path::{Path, PathBuf};

use super::Problem;

/// Directories of the operating system and the kubelet: refused, and so is anything beneath them or above them
/// (`/` and `/var` contain some of them).
pub const SYSTEM_DIRS: [&str; 18] = [
    "/proc",
    "/sys",
    "/dev",
    "/etc",
    "/boot",
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/run",
    "/var/run",
    "/var/lib/kubelet",
    "/var/lib/localpv",
    "/root",
    "/var/log",
];

/// The directories of one class as the checks see them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassDirs {
    pub name: String,
    /// `hostDir` as written (normalised lexically).
    pub host_dir: PathBuf,
    /// `mountDir` as written (normalised lexically).
    pub mount_dir: PathBuf,
    /// `mountDir` with every symlink resolved; equal to `mount_dir` when nothing could be resolved.
    pub resolved_mount_dir: PathBuf,
}

/// Directories under `/dev` that are never a directory of device links: the kernel's and the runtime's other
/// filesystems mounted there (their entries are files, terminals and queues) and the kernel's and udev's own
/// link directories (every disk of the node, the system disk among them, is linked there). Refused, and so is
/// anything beneath them or above them; so are `/dev/disk` and udev's `/dev/disk/by-*`.
pub const DEV_SYSTEM_DIRS: [&str; 7] = [
    "/dev/shm",
    "/dev/pts",
    "/dev/mqueue",
    "/dev/hugepages",
    "/dev/block",
    "/dev/char",
    "/dev/mapper",
];

/// Why a directory is a system directory, or `None` when it may be a discovery directory.
///
/// A directory strictly inside `/dev` is the one exception to the system directories: a node's bootstrap may link
/// the disks meant for volumes there (the reference provisioner's EKS recipe: `/dev/disk/kubernetes`). It is
/// accepted unless it is, lies in or contains one of [`DEV_SYSTEM_DIRS`] (or is `/dev/disk` or udev's `by-*`
/// directories); discovery then refuses it as a whole unless it lies on devtmpfs and holds nothing but block
/// devices and symlinks to them (`discover::classify::device_dir_problem`).
pub fn system_dir_problem(path: &Path) -> Option<String> {
    let dev = Path::new("/dev");
    if path.starts_with(dev) && path != dev {
        return dev_dir_problem(path);
    }
    for system in SYSTEM_DIRS.iter().map(Path::new) {
        if path == system {
            return Some(format!("{} is a system directory", path.display()));
        }
        if path.starts_with(system) {
            return Some(format!(
                "{} is inside the system directory {}",
                path.display(),
                system.display()
            ));
        }
        if system.starts_with(path) {
            return Some(format!(
                "{} contains the system directory {}",
                path.display(),
                system.display()
            ));
        }
    }
    None
}

/// Why a directory strictly inside `/dev` may not be a directory of device links, or `None`.
fn dev_dir_problem(path: &Path) -> Option<String> {
    let by_dir = path
        .strip_prefix("/dev/disk")
        .ok()
        .and_then(|rest| rest.components().next())
        .is_some_and(|first| first.as_os_str().as_encoded_bytes().starts_with(b"by-"));
    if path == Path::new("/dev/disk") || by_dir {
        return Some(format!(
            "{} is udev's: it links every disk of the node, the system disk among them; link the disks meant for \
             volumes in a directory of their own, such as /dev/disk/kubernetes",
            path.display()
        ));
    }
    for system in DEV_SYSTEM_DIRS.iter().map(Path::new) {
        let relation = if path == system {
            "is"
        } else if path.starts_with(system) {
            "is inside"
        } else if system.starts_with(path) {
            "contains"
        } else {
            continue;
        };
        return Some(format!(
            "{} {relation} {}, which is not a directory of block devices (only a directory of its own under \
             /dev, holding block devices and symlinks to them, may be a discovery directory)",
            path.display(),
            system.display()
        ));
    }
    None
}

/// Every problem with the classes' directories, each under the key it concerns.
pub fn problems(classes: &[ClassDirs]) -> Vec<Problem> {
    let mut found = Vec::new();
    for class in classes {
        found.extend(own_problems(class));
    }
    for (i, class) in classes.iter().enumerate() {
        for earlier in &classes[..i] {
            found.extend(shared_problems(class, earlier));
        }
    }
    found
}

fn key(class: &ClassDirs, key: &str) -> String {
    format!("storageClassMap.{}.{key}", class.name)
}

fn own_problems(class: &ClassDirs) -> Vec<Problem> {
    let host = system_dir_problem(&class.host_dir);
    let resolved = (class.resolved_mount_dir != class.mount_dir)
        .then(|| system_dir_problem(&class.resolved_mount_dir))
        .flatten()
        .map(|why| {
            format!(
                "{} resolves to {}: {why}",
                class.mount_dir.display(),
                class.resolved_mount_dir.display()
            )
        });
    let mount = system_dir_problem(&class.mount_dir).or(resolved);
    // NB: mountDir defaults to hostDir; then the operator wrote only hostDir, and that is the key to name.
    let found = if class.mount_dir == class.host_dir {
        vec![("hostDir", host.or(mount))]
    } else {
        vec![("hostDir", host), ("mountDir", mount)]
    };
    found
        .into_iter()
        .filter_map(|(name, message)| {
            Some(Problem {
                key: key(class, name),
                message: message?,
            })
        })
        .collect()
}

/// Two classes on one directory, or one inside the other, compared as written (hostDir) and as resolved
/// (mountDir): an entry of one would be published, and wiped, by the other too.
fn shared_problems(class: &ClassDirs, earlier: &ClassDirs) -> Vec<Problem> {
    let mut found = Vec::new();
    let pairs = [
        ("hostDir", &class.host_dir, &earlier.host_dir, None),
        (
            "mountDir",
            &class.resolved_mount_dir,
            &earlier.resolved_mount_dir,
            Some(&class.mount_dir),
        ),
    ];
    for (name, mine, theirs, written) in pairs {
        let shown = match written {
            Some(written) if written != mine => {
                format!("{} (resolved: {})", written.display(), mine.display())
            }
            _ => mine.display().to_string(),
        };
        let message = if mine == theirs {
            format!("{shown} is also the {name} of class {:?}", earlier.name)
        } else if mine.starts_with(theirs) || theirs.starts_with(mine) {
            format!(
                "{shown} and the {name} of class {:?} ({}) are nested: an entry of one would be published and \
                 wiped by the other",
                earlier.name,
                theirs.display()
            )
        } else {
            continue;
        };
        found.push(Problem {
            key: key(class, name),
            message,
        });
    }
    found
}

/// The agent's state directory (`--state-dir`, resolved like `mountDir`) inside, or containing, a class's
/// directory: the ledger would sit on a tenant's disk (readable and editable by the tenant, deleted by its wipe) or
/// the tenants' disks inside the ledger's directory. One problem per class, naming both directories.
pub fn state_dir_problems(
    state_dir: &Path,
    resolved_state_dir: &Path,
    classes: &[ClassDirs],
) -> Vec<Problem> {
    let mut found = Vec::new();
    for class in classes {
        let pairs = [
            ("hostDir", &class.host_dir, state_dir),
            ("mountDir", &class.resolved_mount_dir, resolved_state_dir),
        ];
        let nested = pairs
            .iter()
            .find(|(_, dir, state)| dir.starts_with(state) || state.starts_with(dir));
        if let Some((name, dir, _)) = nested {
            found.push(Problem {
                key: key(class, name),
                message: format!(
                    "{} and the agent's state directory {} (--state-dir) are nested: the disk ledger must not                      live on a disk the agent publishes and wipes, nor contain one",
                    dir.display(),
                    state_dir.display()
                ),
            });
        }
    }
    found
}

/// Resolves every symlink in `path` on this host. Components that do not exist yet are kept as written
/// after the longest prefix that does, so a directory created later is still checked by where it would be.
pub fn resolve(path: &Path) -> PathBuf {
    let mut missing = Vec::new();
    let mut existing = path.to_path_buf();
    loop {
        if let Ok(real) = std::fs::canonicalize(&existing) {
            return missing.iter().rev().fold(real, |acc, part| acc.join(part));
        }
        match (
            existing.file_name().map(ToOwned::to_owned),
            existing.parent(),
        ) {
            (Some(name), Some(parent)) => {
                missing.push(name);
                existing = parent.to_path_buf();
            }
            _ => return path.to_path_buf(),
        }
    }
}
