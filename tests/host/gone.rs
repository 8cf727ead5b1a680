//! A device that goes away under its volume (issue 37, point 1: "the device gone (removed, loop detached, backing
//! lost) while its PV is Bound"), on real loop devices, as the agent's health look sees it and judges it with the
//! grace rule: `Degraded` at once, `Failed` only once gone past the grace.
//!
//! What the kernel shows (Linux 6.x, measured here): a raw loop device detached with `losetup -d` stays in sysfs
//! (`/sys/dev/block/7:N` is still there) with `size` 0 and no `loop/` directory; a loop device detached while its
//! filesystem is mounted only gets `loop/autoclear` 1 and keeps serving its backing file until the unmount; once
//! that backing file is deleted, `loop/backing_file` ends with ` (deleted)`.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use localpv::discover::discover;
use localpv::disk::{DiscoveryClass, Disk};
use localpv::health::{Cause, Policy, Record, Signals, State, judge};
use localpv::host::Host;
use localpv::host::health::HealthProbe;
use localpv::host::linux::LinuxHost;

use crate::disks::run;
use crate::fixtures::{Scene, loop_numbers};

fn found(class: &DiscoveryClass, entry: &str) -> Disk {
    let found = discover(&LinuxHost::default(), std::slice::from_ref(class));
    let disk = found.disks.iter().find(|d| d.entry == entry);
    let disk = disk.unwrap_or_else(|| panic!("{entry} not found: {found:#?}"));
    Disk::clone(disk)
}

/// The agent's look at `disk` of `class`, as `agent::health` builds it.
fn look(class: &DiscoveryClass, disk: &Disk) -> Signals {
    let probe = HealthProbe {
        path: class.mount_dir.join(&disk.entry),
        mode: disk.mode,
        dev: disk.identity.dev_id,
        device: disk.identity.device.as_ref().map(PathBuf::from),
        fs_type: disk.identity.fs_type.clone(),
        super_options: None,
        round: 1,
    };
    LinuxHost::default().health(&probe)
}

/// Waits (up to 10 s) until the loop device no longer serves `backing`: its size is 0, or its backing file is gone
/// or another's.
fn wait_detached(device: &Path, backing: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (size, now) = (sysfs(device, "size"), sysfs(device, "loop/backing_file"));
        if size == "0" || now != backing {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} still serves {backing} 10 s after losetup -d (size {size})",
            device.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn sysfs(device: &Path, attribute: &str) -> String {
    let name = device.file_name().expect("a device name");
    let path = Path::new("/sys/block").join(name).join(attribute);
    fs::read_to_string(&path)
        .unwrap_or_else(|e| format!("({}: {e})", path.display()))
        .trim()
        .to_string()
}

/// Judges `signals` seen at `t0`, at `t0 + grace - 1s` and at `t0 + grace`, with the default policy.
fn judged_over_the_grace(signals: &Signals) -> Vec<(State, Cause)> {
    let policy = Policy::default();
    let t0 = SystemTime::now();
    let times = [
        t0,
        t0 + policy.gone_grace - Duration::from_secs(1),
        t0 + policy.gone_grace,
    ];
    let mut record: Option<Record> = None;
    let mut seen = Vec::new();
    for now in times {
        let next = judge(record.as_ref(), signals, &policy, now);
        seen.push((next.state, next.cause));
        record = Some(next);
    }
    seen
}

#[test]
fn a_raw_device_detached_under_its_volume_is_gone_degraded_at_once_and_failed_past_the_grace() {
    let mut scene = Scene::new();
    let device = scene.loop_device(64);
    scene.symlink(&device, &scene.block().join("dev1"));
    let class = scene.block_class();
    let disk = found(&class, "dev1");
    assert_eq!(look(&class, &disk), Signals::default(), "attached: no sign");

    let backing = sysfs(&device, "loop/backing_file");
    // NB: no other test of this binary attaches a loop device (and so reuses this number) until the looks are done.
    let _numbers = loop_numbers();
    scene.detach(&device);
    // NB: `losetup -d` of a device someone holds open (a parallel test's probe of every block device) only marks
    // it to go when closed: wait for that. Then read at once: another process may attach a new backing file to the
    // freed loop number at any time.
    wait_detached(&device, &backing);
    let signals = look(&class, &disk);
    let shown = (sysfs(&device, "size"), sysfs(&device, "loop/backing_file"));
    assert!(
        signals.gone,
        "detached, the kernel shows {shown:?}: {signals:?}"
    );
    // Discovery still lists it (a device node of size 0), so the agent goes on looking at it every period.
    let again = found(&class, "dev1");
    assert_eq!(again.identity.dev_id, disk.identity.dev_id);
    assert!(look(&class, &again).gone, "looked at again");
    assert_eq!(
        judged_over_the_grace(&signals),
        [
            (State::Degraded, Cause::DeviceGone),
            (State::Degraded, Cause::DeviceGone),
            (State::Failed, Cause::DeviceGone),
        ]
    );
}

#[test]
fn a_mounted_filesystem_whose_loop_is_detached_is_not_gone_until_its_backing_file_is_deleted() {
    let mut scene = Scene::new();
    let device = scene.formatted("ext4", "gone", &scene.disks().join("vol1"));
    let backing = run(
        "losetup",
        &[
            "--noheadings",
            "--output",
            "BACK-FILE",
            &device.display().to_string(),
        ],
    );
    let backing = PathBuf::from(backing.trim());
    assert!(backing.starts_with(scene.root()), "{backing:?}");
    let class = scene.fs_class();
    let disk = found(&class, "vol1");
    let healthy = look(&class, &disk);
    assert!(
        !healthy.gone && healthy.probe_error.is_none(),
        "{healthy:?}"
    );

    // `losetup -d` of a mounted loop device only marks it to go at the unmount: the data is still served.
    scene.detach(&device);
    assert_eq!(sysfs(&device, "loop/autoclear"), "1");
    let detached = look(&class, &disk);
    assert_eq!(detached, healthy, "still serving its backing file");

    // The backing file deleted: the data goes with the next unmount.
    fs::remove_file(&backing).expect("backing file removed");
    let shown = sysfs(&device, "loop/backing_file");
    assert!(shown.ends_with("(deleted)"), "{shown}");
    let lost = look(&class, &disk);
    assert!(
        lost.gone,
        "backing deleted, the kernel shows {shown:?}: {lost:?}"
    );
    assert_eq!(
        judged_over_the_grace(&lost)[0],
        (State::Degraded, Cause::DeviceGone)
    );
}

/// The false alarm (issue 37): a raw loop device detached and the same backing file attached again under the same
/// number. Gone, discovery still lists it but its identity lost the serial (a loop device's is its backing file);
/// back, it shows the very identity it had, and the judgement goes Degraded then Healthy at once, never Failed.
#[test]
fn a_raw_device_detached_and_attached_again_is_the_same_disk_and_healthy_again() {
    let scene = Scene::new();
    let backing = scene.root().join("back.img");
    fs::File::create(&backing)
        .and_then(|f| f.set_len(64 << 20))
        .expect("backing file");
    // NB: a number of its own, far above the ones `losetup --find` hands out: no one takes it while detached.
    let device = crate::disks::LoopDevice::attach_apart(&backing, &crate::disks::Unwatched);
    scene.symlink(device.path(), &scene.block().join("dev1"));
    let class = scene.block_class();
    let before = found(&class, "dev1");
    assert!(
        before.identity.serial.is_some(),
        "a loop device's serial is its backing file: {before:?}"
    );
    let policy = Policy::default();
    let t0 = SystemTime::now();
    let first = judge(None, &look(&class, &before), &policy, t0);

    device.detach_only();
    wait_detached(device.path(), &backing.display().to_string());
    let gone = found(&class, "dev1");
    let signals = look(&class, &gone);
    assert!(signals.gone, "{signals:?}");
    assert_eq!(gone.identity.serial, None, "nothing to confirm it with");
    let degraded = judge(
        Some(&first),
        &signals,
        &policy,
        t0 + Duration::from_secs(10),
    );
    assert_eq!(
        (degraded.state, degraded.cause),
        (State::Degraded, Cause::DeviceGone)
    );

    device.reattach();
    let back = found(&class, "dev1");
    assert_eq!(back.identity, before.identity, "the same disk");
    let signals = look(&class, &back);
    assert_eq!(signals, Signals::default(), "back, no sign");
    let healthy = judge(
        Some(&degraded),
        &signals,
        &policy,
        t0 + Duration::from_secs(20),
    );
    assert_eq!(
        (healthy.state, healthy.cause),
        (State::Healthy, Cause::NoErrors)
    );
}
