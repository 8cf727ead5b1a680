//! Images for real nodes, all built on this machine (no registry is used): a pause image (a static C program),
//! a busybox image for test pods, and the localpv image from the repository's `Dockerfile` (its `prebuilt` target,
//! which puts the host-built release binary into the runtime stage). Each is saved as a docker archive under
//! `~/.cache/localpv/realnode/images`, named by a hash of what went into it, so a run builds only what changed;
//! nodes load them with `ctr images import` and pods use `imagePullPolicy: Never`.

use std::collections::hash_map::DefaultHasher;
use std::fs;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::disks::run;

pub const PAUSE: &str = "localhost/localpv-pause:realnode";
pub const BUSYBOX: &str = "localhost/localpv-busybox:realnode";
pub const LOCALPV_REPOSITORY: &str = "localhost/localpv";
/// The Debian base made with debootstrap (`ensure_base_image`), for the localpv image here and in the packaging test.
pub const BASE_IMAGE: &str = "localhost/debian:bookworm-debootstrap";

/// The archives every node imports, and the localpv image's tag.
#[derive(Clone, Debug)]
pub struct Images {
    pub archives: Vec<PathBuf>,
    pub localpv_tag: String,
}

impl Images {
    pub fn localpv(&self) -> String {
        format!("{LOCALPV_REPOSITORY}:{}", self.localpv_tag)
    }
}

const PAUSE_C: &str = r#"#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
static void stop(int s) { (void)s; _exit(0); }
static void reap(int s) { (void)s; while (waitpid(-1, 0, WNOHANG) > 0) {} }
int main(void) {
  struct sigaction a = {0}, r = {0};
  a.sa_handler = stop; sigaction(SIGINT, &a, 0); sigaction(SIGTERM, &a, 0);
  r.sa_handler = reap; r.sa_flags = SA_NOCLDSTOP; sigaction(SIGCHLD, &r, 0);
  for (;;) pause();
}
"#;

pub fn cache_dir() -> PathBuf {
    let home = std::env::var_os("HOME").expect("HOME is set");
    let dir = PathBuf::from(home).join(".cache/localpv/realnode");
    fs::create_dir_all(dir.join("images")).expect("image cache dir can be created");
    dir
}

pub fn key(parts: &[&[u8]]) -> String {
    let mut h = DefaultHasher::new();
    for p in parts {
        p.hash(&mut h);
    }
    format!("{:016x}", h.finish())
}

pub fn buildah(args: &[&str]) -> String {
    run("buildah", args)
}

pub fn image_exists(name: &str) -> bool {
    Command::new("buildah")
        .args(["images", "-q", name])
        .output()
        .map(|o| o.status.success() && !o.stdout.is_empty())
        .unwrap_or(false)
}

/// Saves `image` as a docker archive at `path` (written aside, then renamed: concurrent runs never see half).
pub fn save(image: &str, path: &Path) {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let _ = fs::remove_file(&tmp);
    buildah(&[
        "push",
        "-q",
        image,
        &format!("docker-archive:{}:{image}", tmp.display()),
    ]);
    fs::rename(&tmp, path).expect("image archive renamed into place");
}

/// A buildah working container from scratch holding `rootfs` (packed through a tar in `work`); its id.
fn scratch_container(rootfs: &Path, work: &Path) -> String {
    let tar = work.join("rootfs.tar");
    run(
        "tar",
        &[
            "-C",
            &rootfs.display().to_string(),
            "-cf",
            &tar.display().to_string(),
            ".",
        ],
    );
    let c = buildah(&["from", "scratch"]).trim().to_string();
    buildah(&["add", &c, &tar.display().to_string(), "/"]);
    c
}

/// An image made of a root file system directory, from scratch.
pub fn from_rootfs(rootfs: &Path, image: &str, entrypoint: &str, work: &Path) {
    let c = scratch_container(rootfs, work);
    buildah(&[
        "config",
        "--env",
        "PATH=/bin",
        "--entrypoint",
        entrypoint,
        &c,
    ]);
    buildah(&["commit", "-q", &c, image]);
    buildah(&["rm", &c]);
}

fn pause_archive(cache: &Path) -> PathBuf {
    let path = cache.join(format!("images/pause-{}.tar", key(&[PAUSE_C.as_bytes()])));
    if path.is_file() {
        return path;
    }
    let work = tempfile::tempdir_in(cache).expect("work dir");
    let rootfs = work.path().join("rootfs");
    fs::create_dir_all(&rootfs).expect("rootfs dir");
    let src = work.path().join("pause.c");
    fs::write(&src, PAUSE_C).expect("pause.c written");
    run(
        "gcc",
        &[
            "-static",
            "-O2",
            "-o",
            &rootfs.join("pause").display().to_string(),
            &src.display().to_string(),
        ],
    );
    from_rootfs(&rootfs, PAUSE, "[\"/pause\"]", work.path());
    save(PAUSE, &path);
    path
}

fn busybox_archive(cache: &Path) -> PathBuf {
    let bin = fs::read("/bin/busybox")
        .expect("missing prerequisite: /bin/busybox (apt-get install busybox-static)");
    let path = cache.join(format!("images/busybox-{}.tar", key(&[&bin])));
    if path.is_file() {
        return path;
    }
    let work = tempfile::tempdir_in(cache).expect("work dir");
    let rootfs = work.path().join("rootfs");
    fs::create_dir_all(rootfs.join("bin")).expect("rootfs/bin");
    fs::create_dir_all(rootfs.join("tmp")).expect("rootfs/tmp");
    fs::write(rootfs.join("bin/busybox"), &bin).expect("busybox copied");
    run(
        "chmod",
        &["0755", &rootfs.join("bin/busybox").display().to_string()],
    );
    for applet in run("/bin/busybox", &["--list"]).lines() {
        if applet != "busybox" {
            let _ = std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(applet));
        }
    }
    from_rootfs(&rootfs, BUSYBOX, "[]", work.path());
    save(BUSYBOX, &path);
    path
}

/// The cargo target directory this test binary was built in (it is `<target>/debug/deps/<name>`).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    exe.ancestors()
        .nth(3)
        .expect("test binary lives in <target>/debug/deps")
        .to_path_buf()
}

/// The release binary of this tree (`<target>/release/localpv`), built now if it is older than the sources
/// (`cargo build --release`). `LOCALPV_REALNODE_BINARY` names another binary instead (a development shortcut,
/// e.g. the debug build).
fn release_binary() -> PathBuf {
    if let Some(bin) = std::env::var_os("LOCALPV_REALNODE_BINARY") {
        return PathBuf::from(bin);
    }
    let target = target_dir();
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args([
            "build",
            "--release",
            "--locked",
            "--quiet",
            "--bin",
            "localpv",
        ])
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(crate::repo_root())
        .status()
        .expect("missing prerequisite: cargo, to build the release binary for the image");
    assert!(
        status.success(),
        "cargo build --release --bin localpv failed"
    );
    target.join("release/localpv")
}

/// Builds `BASE_IMAGE` with debootstrap (no registry is reachable here) unless buildah has it already; its root
/// file system is made in a temporary directory under `work_in`.
pub fn ensure_base_image(work_in: &Path) {
    if image_exists(BASE_IMAGE) {
        return;
    }
    let work = tempfile::tempdir_in(work_in).expect("work dir");
    let rootfs = work.path().join("rootfs");
    run(
        "debootstrap",
        &[
            "--variant=minbase",
            "bookworm",
            &rootfs.display().to_string(),
            "http://deb.debian.org/debian",
        ],
    );
    let c = scratch_container(&rootfs, work.path());
    buildah(&[
        "config",
        "--env",
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "--cmd",
        "/bin/bash",
        &c,
    ]);
    buildah(&["commit", "-q", &c, BASE_IMAGE]);
    buildah(&["rm", &c]);
}

/// The localpv image: `Dockerfile` target `prebuilt` with the release binary as the whole build context.
fn localpv_archive(cache: &Path) -> (PathBuf, String) {
    let bin = release_binary();
    let bytes = fs::read(&bin).expect("release binary readable");
    let dockerfile = crate::repo_root().join("Dockerfile");
    let df = fs::read(&dockerfile).expect("Dockerfile readable");
    let tag = format!("realnode-{}", &key(&[&bytes, &df])[..12]);
    let image = format!("{LOCALPV_REPOSITORY}:{tag}");
    let path = cache.join(format!("images/localpv-{tag}.tar"));
    if path.is_file() {
        return (path, tag);
    }
    ensure_base_image(cache);
    let ctx = tempfile::tempdir_in(cache).expect("context dir");
    fs::copy(&bin, ctx.path().join("localpv")).expect("binary copied into the context");
    let tmp = ctx.path().join("buildah-tmp");
    fs::create_dir_all(&tmp).expect("buildah tmp dir");
    let out = Command::new("buildah")
        .args([
            "build",
            "--isolation",
            "chroot",
            "--layers",
            "--target",
            "prebuilt",
            "--build-arg",
            &format!("RUNTIME_IMAGE={BASE_IMAGE}"),
            "-t",
            &image,
            "-f",
            &dockerfile.display().to_string(),
            &ctx.path().display().to_string(),
        ])
        .env("TMPDIR", &tmp)
        .output()
        .expect("missing prerequisite: buildah");
    assert!(
        out.status.success(),
        "buildah build --target prebuilt failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Older archives of the localpv image are never used again.
    for e in fs::read_dir(cache.join("images"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let n = e.file_name().to_string_lossy().into_owned();
        if n.starts_with("localpv-realnode-") && n.ends_with(".tar") {
            let _ = fs::remove_file(e.path());
        }
    }
    save(&image, &path);
    let _ = Command::new("buildah").args(["rmi", &image]).output();
    (path, tag)
}

/// Builds (or finds cached) every image, once per test process.
pub fn images() -> Images {
    static IMAGES: OnceLock<Images> = OnceLock::new();
    IMAGES
        .get_or_init(|| {
            let cache = cache_dir();
            let (localpv, localpv_tag) = localpv_archive(&cache);
            Images {
                archives: vec![pause_archive(&cache), busybox_archive(&cache), localpv],
                localpv_tag,
            }
        })
        .clone()
}
