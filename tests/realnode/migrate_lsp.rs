//! The reference provisioner (sig-storage-local-static-provisioner, "LSP") as operators run it, built on this
//! machine from its source tarball: its binary (`go build -mod=vendor`, offline), an image holding what its
//! Dockerfile puts there for the cleanup path (the binary at `/local-provisioner`, its `/scripts`, bash, and the
//! util-linux, e2fsprogs and coreutils programs those scripts call, taken from this Debian host with their
//! libraries), and its own Helm chart. All three are cached under `~/.cache/localpv/realnode`, keyed by the tarball's
//! SHA-256 (and, for the image, the host programs), so only the first run pays for the Go build.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::disks::run;
use crate::support::proc::stdout_of;
use crate::support::realnode::images::{cache_dir, from_rootfs, key, save};
use crate::support::reference::{tarball, unpack};

pub const REPOSITORY: &str = "localhost/local-volume-provisioner";

/// The programs the stock cleanup scripts run (`shred.sh`, `dd_zero.sh`, `quick_reset.sh`, `blkdiscard.sh`,
/// `fsclean.sh`, `common.sh`), at their paths on this Debian host.
const TOOLS: &[&str] = &[
    "/bin/bash",
    "/bin/sh",
    "/usr/bin/shred",
    "/usr/bin/dd",
    "/usr/bin/ionice",
    "/usr/bin/find",
    "/usr/bin/xargs",
    "/usr/bin/rm",
    "/usr/bin/expr",
    "/usr/bin/tee",
    "/usr/bin/dirname",
    "/usr/bin/basename",
    "/usr/bin/cat",
    "/usr/sbin/mkfs",
    "/usr/sbin/mkfs.ext4",
    "/usr/sbin/mke2fs",
    "/usr/sbin/wipefs",
    "/usr/sbin/blkdiscard",
];

pub struct Lsp {
    /// The image reference the chart's `image` value names (imported on every node, never pulled).
    pub image: String,
    pub archive: PathBuf,
    /// The reference chart (`helm/provisioner` of the tarball).
    pub chart: PathBuf,
}

fn go() -> PathBuf {
    for p in std::env::var("PATH").unwrap_or_default().split(':') {
        let g = Path::new(p).join("go");
        if g.is_file() {
            return g;
        }
    }
    let g = PathBuf::from("/usr/local/go/bin/go");
    assert!(
        g.is_file(),
        "missing prerequisite: go (on PATH or /usr/local/go/bin), to build the reference provisioner"
    );
    g
}

/// Copies `file` (following links) to the same path under `rootfs`, with every shared library `ldd` names.
fn copy_with_libraries(file: &Path, rootfs: &Path) {
    let mut files = vec![file.to_path_buf()];
    let ldd = Command::new("ldd")
        .arg(file)
        .output()
        .expect("missing prerequisite: ldd");
    for line in String::from_utf8_lossy(&ldd.stdout).lines() {
        // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or "/lib64/ld-linux-x86-64.so.2 (0x...)"
        let path = line
            .split("=>")
            .last()
            .and_then(|r| r.split_whitespace().next())
            .filter(|p| p.starts_with('/'));
        if let Some(p) = path {
            files.push(PathBuf::from(p));
        }
    }
    for f in files {
        let real = fs::canonicalize(&f)
            .unwrap_or_else(|e| panic!("missing prerequisite: {} ({e})", f.display()));
        let dest = rootfs.join(real.strip_prefix("/").expect("absolute"));
        fs::create_dir_all(dest.parent().expect("has a parent")).expect("rootfs dir");
        if !dest.exists() {
            fs::copy(&real, &dest).expect("copied into the rootfs");
        }
        // The name the scripts use, when it is a link on the host (e.g. /usr/sbin/mkfs.ext4 -> mke2fs).
        let parent = fs::canonicalize(f.parent().expect("has a parent")).expect("parent resolves");
        let link = rootfs
            .join(parent.strip_prefix("/").expect("absolute"))
            .join(f.file_name().expect("has a name"));
        if link != dest && fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(&real, &link).expect("link in the rootfs");
        }
    }
}

/// Builds (or finds cached) the reference provisioner's binary, image archive and chart.
pub fn lsp() -> Lsp {
    let tarball = tarball();
    let tools: Vec<Vec<u8>> = TOOLS
        .iter()
        .map(|t| {
            fs::read(t).unwrap_or_else(|e| {
                panic!(
                    "missing prerequisite: {t} for the reference image ({e}; apt-get install util-linux e2fsprogs \
                     coreutils findutils)"
                )
            })
        })
        .collect();
    let sha = run("sha256sum", &[&tarball.display().to_string()]);
    let source_key = sha[..16].to_string();
    let mut parts: Vec<&[u8]> = vec![source_key.as_bytes()];
    parts.extend(tools.iter().map(Vec::as_slice));
    let image_key = key(&parts);
    let cache = cache_dir();
    let dir = cache.join(format!("lsp-{source_key}"));

    let binary = dir.join("local-volume-provisioner");
    if !binary.is_file() {
        let work = tempfile::tempdir_in(&cache).expect("work dir");
        let src = unpack(&tarball, work.path(), &["*"]);
        let tmp = work.path().join("local-volume-provisioner");
        stdout_of(
            Command::new(go())
                .args(["build", "-mod=vendor", "-trimpath", "-o"])
                .arg(&tmp)
                .arg("./cmd/local-volume-provisioner")
                .current_dir(&src)
                .env("CGO_ENABLED", "0")
                .env("GOPROXY", "off")
                .env("GOFLAGS", "-mod=vendor")
                .env("GOTOOLCHAIN", "local"),
            "go build of the reference provisioner",
        );
        fs::create_dir_all(&dir).expect("cache dir");
        fs::rename(&tmp, &binary).expect("binary moved into the cache");
    }

    let chart = dir.join("chart");
    if !chart.join("Chart.yaml").is_file() {
        let work = tempfile::tempdir_in(&cache).expect("work dir");
        let src = unpack(&tarball, work.path(), &["*/helm/provisioner/*"]);
        let _ = fs::remove_dir_all(&chart);
        fs::rename(src.join("helm/provisioner"), &chart).expect("chart moved into the cache");
    }

    let tag = format!("realnode-{}", &image_key[..12]);
    let image = format!("{REPOSITORY}:{tag}");
    let archive = cache.join(format!("images/lsp-{tag}.tar"));
    if !archive.is_file() {
        let work = tempfile::tempdir_in(&cache).expect("work dir");
        let src = unpack(
            &tarball,
            &work.path().join("src"),
            &["*/deployment/docker/scripts/*"],
        );
        let rootfs = work.path().join("rootfs");
        for d in ["usr/bin", "usr/sbin", "usr/lib64", "tmp", "etc"] {
            fs::create_dir_all(rootfs.join(d)).expect("rootfs dirs");
        }
        // Debian's merged /usr, as on the host and in the reference's debian-base image.
        for (link, to) in [
            ("bin", "usr/bin"),
            ("sbin", "usr/sbin"),
            ("lib", "usr/lib"),
            ("lib64", "usr/lib64"),
        ] {
            std::os::unix::fs::symlink(to, rootfs.join(link)).expect("rootfs link");
        }
        for t in TOOLS {
            copy_with_libraries(Path::new(t), &rootfs);
            // The image's PATH is /bin (the helper's), the reference image's also has /sbin: link them there.
            if let Some(name) = t.strip_prefix("/usr/sbin/") {
                let link = rootfs.join("usr/bin").join(name);
                if fs::symlink_metadata(&link).is_err() {
                    std::os::unix::fs::symlink(format!("/usr/sbin/{name}"), link).expect("link");
                }
            }
        }
        fs::copy(&binary, rootfs.join("local-provisioner")).expect("binary into the rootfs");
        run(
            "cp",
            &[
                "-r",
                &src.join("deployment/docker/scripts").display().to_string(),
                &rootfs.join("scripts").display().to_string(),
            ],
        );
        from_rootfs(&rootfs, &image, "[\"/local-provisioner\"]", work.path());
        save(&image, &archive);
        let _ = Command::new("buildah").args(["rmi", &image]).output();
    }
    Lsp {
        image,
        archive,
        chart,
    }
}
