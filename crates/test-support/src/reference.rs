//! The reference provisioner's source (sig-storage-local-static-provisioner): where its tarball is, and members
//! of it unpacked. The packaging tests read its chart's values files from it; the real-node tier builds the
//! provisioner, its image and its chart from it.

use std::fs;
use std::path::{Path, PathBuf};

use super::disks::run;

/// `LOCALPV_REFERENCE_TARBALL`, else the peers' `sig-storage-local-static-provisioner-*.tar.gz` on this machine.
pub fn tarball() -> PathBuf {
    if let Some(p) = std::env::var_os("LOCALPV_REFERENCE_TARBALL") {
        return PathBuf::from(p);
    }
    let dir = Path::new("/work/shared/peers");
    fs::read_dir(dir)
        .ok()
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("sig-storage-local-static-provisioner-"))
        })
        .unwrap_or_else(|| {
            panic!(
                "missing prerequisite: the reference provisioner's source, a \
                 sig-storage-local-static-provisioner-*.tar.gz in {} (or set LOCALPV_REFERENCE_TARBALL)",
                dir.display()
            )
        })
}

/// Unpacks `members` (tar wildcards) of `tarball` into `into`; returns the tarball's top directory there.
pub fn unpack(tarball: &Path, into: &Path, members: &[&str]) -> PathBuf {
    fs::create_dir_all(into).expect("unpack dir");
    let (tarball, into) = (tarball.display().to_string(), into.display().to_string());
    let mut args = vec!["-xzf", &tarball, "-C", &into, "--wildcards"];
    args.extend(members);
    run("tar", &args);
    fs::read_dir(&into)
        .expect("unpacked")
        .flatten()
        .find(|e| e.path().is_dir())
        .expect("the tarball has a top directory")
        .path()
}
