//! The agent's volume id (xattr `trusted.localpv.id`) on real filesystems, and the mount table's view of mounts
//! placed inside a volume (issue 14 points 2 and 4).

use std::fs;
use std::path::{Path, PathBuf};

use localpv::discover::discover;
use localpv::host::linux::LinuxHost;
use localpv::host::{Host, VolumeTag};
use rstest::rstest;

use crate::fixtures::Scene;

fn entries(path: &Path) -> Vec<PathBuf> {
    let mut names: Vec<PathBuf> = fs::read_dir(path)
        .expect("list volume root")
        .map(|e| e.expect("entry").path())
        .collect();
    names.sort();
    names
}

/// Mounts `kind` at `disks/vol1` (and, for `bind`, a sibling directory of the same tmpfs at `disks/vol2`).
fn volume(scene: &mut Scene, kind: &str) -> PathBuf {
    let vol1 = scene.disks().join("vol1");
    match kind {
        "tmpfs" => scene.tmpfs(&vol1, "16m"),
        "ext4" | "xfs" => {
            scene.formatted(kind, "vid", &vol1);
        }
        "bind" => {
            let shared = scene.root().join("shared");
            scene.tmpfs(&shared, "16m");
            fs::create_dir_all(shared.join("a")).unwrap();
            fs::create_dir_all(shared.join("b")).unwrap();
            scene.bind(&shared.join("a"), &vol1);
            scene.bind(&shared.join("b"), &scene.disks().join("vol2"));
        }
        other => panic!("no volume kind {other}"),
    }
    vol1
}

#[rstest]
#[case::tmpfs("tmpfs")]
#[case::ext4("ext4")]
#[case::xfs("xfs")]
#[case::directory_bind_mounted_from_a_shared_tmpfs("bind")]
fn the_volume_id_lives_on_the_volume_root_as_metadata_and_discovery_reports_it(#[case] kind: &str) {
    let mut scene = Scene::new();
    let vol1 = volume(&mut scene, kind);
    let host = LinuxHost::default();
    let before = entries(&vol1);
    assert_eq!(host.volume_id(&vol1).unwrap(), VolumeTag::Absent);

    let id = host.tag_volume(&vol1).expect("tag the volume root");
    assert!(
        id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()),
        "128 random bits as hex: {id}"
    );
    assert_eq!(
        host.volume_id(&vol1).unwrap(),
        VolumeTag::Present(id.clone())
    );
    assert_eq!(
        host.tag_volume(&vol1).unwrap(),
        id,
        "tagging again keeps the id"
    );
    assert_eq!(entries(&vol1), before, "no file is written into the volume");

    let found = discover(&host, &[scene.fs_class()]);
    let disk = found
        .disks
        .iter()
        .find(|d| d.entry == "vol1")
        .unwrap_or_else(|| panic!("vol1 found: {found:#?}"));
    assert_eq!(disk.identity.volume_id.as_deref(), Some(id.as_str()));
    if kind == "bind" {
        let sibling = scene.disks().join("vol2");
        assert_eq!(
            host.volume_id(&sibling).unwrap(),
            VolumeTag::Absent,
            "each bind-mounted directory carries its own id"
        );
    }
}

#[test]
fn a_filesystem_without_extended_attributes_is_reported_as_such_and_cannot_be_tagged() {
    let mut scene = Scene::new();
    let vol1 = scene.disks().join("vol1");
    scene.ramfs(&vol1);
    let host = LinuxHost::default();
    assert_eq!(host.volume_id(&vol1).unwrap(), VolumeTag::Unsupported);
    assert!(host.tag_volume(&vol1).is_err());
    let found = discover(&host, &[scene.fs_class()]);
    let disk = found
        .disks
        .iter()
        .find(|d| d.entry == "vol1")
        .expect("vol1");
    assert!(disk.identity.volume_id_unsupported, "{disk:#?}");
    assert_eq!(disk.identity.fs_uuid, None);
}

#[test]
fn the_volume_id_is_not_read_through_a_symlink() {
    let mut scene = Scene::new();
    let vol1 = volume(&mut scene, "tmpfs");
    let link = scene.root().join("link");
    scene.symlink(&vol1, &link);
    let host = LinuxHost::default();
    assert!(host.volume_id(&link).is_err());
    assert!(host.tag_volume(&link).is_err());
    assert_eq!(host.volume_id(&vol1).unwrap(), VolumeTag::Absent);
}

#[test]
fn a_mount_placed_inside_a_volume_shows_in_the_mount_table() {
    let mut scene = Scene::new();
    let vol1 = volume(&mut scene, "tmpfs");
    let host = LinuxHost::default();
    let canonical = host.canonicalize(&vol1).unwrap();
    assert_eq!(
        host.mount_table().unwrap().mounts_below(&canonical),
        Vec::<PathBuf>::new()
    );
    let outside = scene.root().join("outside");
    fs::create_dir_all(&outside).unwrap();
    fs::create_dir_all(vol1.join("deep/inner")).unwrap();
    scene.bind(&outside, &vol1.join("deep/inner"));
    assert_eq!(
        host.mount_table().unwrap().mounts_below(&canonical),
        vec![canonical.join("deep/inner")]
    );
}

/// Runs `f` on a thread whose effective capabilities lack CAP_SYS_ADMIN (capabilities are per thread), as the
/// chart's `node.privileged: false` agent runs.
fn without_sys_admin<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    const CAP_SYS_ADMIN: u32 = 21;
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut header = Header {
                version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
                pid: 0,
            };
            let mut data = [Data::default(); 2];
            // SAFETY: capget/capset read and write one header and two data structs, valid for the call.
            let rc = unsafe {
                nix::libc::syscall(
                    nix::libc::SYS_capget,
                    &mut header as *mut Header,
                    data.as_mut_ptr(),
                )
            };
            assert_eq!(rc, 0, "capget");
            data[0].effective &= !(1 << CAP_SYS_ADMIN);
            // SAFETY: as above; only this thread's effective set changes.
            let rc = unsafe {
                nix::libc::syscall(
                    nix::libc::SYS_capset,
                    &mut header as *mut Header,
                    data.as_ptr(),
                )
            };
            assert_eq!(rc, 0, "capset");
            f()
        })
        .join()
        .expect("the unprivileged thread")
    })
}

#[test]
fn an_agent_without_cap_sys_admin_keeps_the_volume_id_in_the_user_namespace() {
    let mut scene = Scene::new();
    let vol1 = volume(&mut scene, "tmpfs");
    let host = LinuxHost::default();
    let (id, seen) = without_sys_admin(|| {
        let id = host.tag_volume(&vol1).expect("tag without CAP_SYS_ADMIN");
        (id, host.volume_id(&vol1).expect("read back"))
    });
    assert_eq!(seen, VolumeTag::Present(id.clone()));
    let user = std::process::Command::new("python3")
        .args([
            "-c",
            "import os,sys; print(os.getxattr(sys.argv[1], 'user.localpv.id').decode())",
            vol1.to_str().expect("utf-8"),
        ])
        .output();
    let out =
        user.expect("missing prerequisite: python3 (reads the xattr independently of localpv)");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        id,
        "stored in user.localpv.id: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        host.volume_id(&vol1).unwrap(),
        VolumeTag::Present(id),
        "a privileged agent reads it too"
    );
}

/// A loop device has no hardware ids; its backing file stands in for one, so the same file attached again on another
/// loop number is the same disk (a renumbering, reclaimable), and another file is another disk.
#[test]
fn a_loop_device_is_identified_by_its_backing_file_across_loop_numbers() {
    let mut scene = Scene::new();
    let first = scene.loop_device(8);
    let other = scene.loop_device(8);
    let backing = scene.root().join("backing-0.img");
    let host = LinuxHost::default();
    let serial_of = |device: &Path| {
        let rdev =
            std::os::unix::fs::MetadataExt::rdev(&fs::metadata(device).expect("stat loop device"));
        let dev = localpv::contract::DevId::new(
            nix::sys::stat::major(rdev) as u32,
            nix::sys::stat::minor(rdev) as u32,
        );
        host.hardware_ids(dev).expect("hardware ids").serial
    };
    let before = serial_of(&first).expect("a loop device gets a backing-file id");
    assert!(before.starts_with("loop-backing:"), "{before}");
    assert_ne!(
        Some(before.clone()),
        serial_of(&other),
        "two backing files, two ids"
    );

    scene.detach(&first);
    // Something else takes the freed loop number first, as after a reboot in another order.
    let filler = scene.root().join("filler.img");
    fs::File::create(&filler)
        .and_then(|f| f.set_len(8 << 20))
        .expect("filler backing file");
    scene.attach(&filler);
    let again = scene.attach(&backing);
    assert_ne!(
        again, first,
        "the test needs the file on another loop number"
    );
    assert_eq!(
        serial_of(&again),
        Some(before),
        "same backing file, same id on another loop number"
    );
}
