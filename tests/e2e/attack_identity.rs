//! Issue 14 points 2-4 as attacks on the real control plane with real mounts: a different filesystem put under a
//! Bound or Released PV is never wiped (tmpfs reusing a device number, directories of one filesystem swapped), the
//! same disk on a new device number is reclaimed, and a volume is not published again while something still
//! writes into it or a mount hides data inside it.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolume;
use kube::api::Api;

use crate::node_agent::{claim_pv, phase, plane_with_agent, pv_at, pvs_of, release, wait_event};
use crate::support::agent::Agent;
use crate::support::cluster::{ControlPlane, Options};
use crate::support::disks::{LoopDevice, Mount, run};
use crate::support::eventually;

const CLASS: &str = "local-storage";

struct World {
    cp: ControlPlane,
    ns: String,
    agent: Agent,
}

impl World {
    async fn new() -> World {
        let (cp, ns, agent) = plane_with_agent(
            Options {
                controller_manager: true,
                ..Default::default()
            },
            "attack-id",
            &[(CLASS, "Delete")],
            &["node-1"],
            &[(CLASS, "disks", "")],
        )
        .await;
        World { cp, ns, agent }
    }

    fn client(&self) -> kube::Client {
        self.cp.client()
    }

    /// A directory of the node outside every discovery directory.
    fn host_dir(&self, name: &str) -> PathBuf {
        let dir = self.cp.dir.join("hosts/node-1").join(name);
        fs::create_dir_all(&dir).expect("host dir");
        dir
    }

    async fn start_agent(&mut self) {
        self.agent.start(&self.cp);
        self.agent.wait_ready().await;
    }

    async fn pv_at(&self, path: &Path, want: &str) -> PersistentVolume {
        pv_at(
            &self.client(),
            "node-1",
            path,
            want,
            Duration::from_secs(60),
        )
        .await
    }

    /// A PV at `path` other than `old`, in phase Available.
    async fn fresh_pv_at(&self, path: &Path, old: &PersistentVolume, within: Duration) {
        let path = path.display().to_string();
        eventually(
            &format!("{path} to come back as a new Available PV"),
            within,
            || async {
                match pvs_of(&self.client(), "node-1").await.get(&path) {
                    Some(pv) if uid(pv) != uid(old) && phase(pv) == "Available" => Ok(()),
                    other => Err(format!("{:?}", other.map(|p| (uid(p), phase(p))))),
                }
            },
        )
        .await;
    }

    async fn claim(&self, name: &str, pv: &PersistentVolume) {
        claim_pv(&self.client(), &self.ns, name, pv, CLASS, "1Mi").await;
    }

    async fn release(&self, name: &str) {
        release(&self.client(), &self.ns, name).await;
    }

    async fn wait_reason(&self, pv: &PersistentVolume, reason: &str) {
        let name = pv.metadata.name.as_deref().expect("name");
        wait_event(&self.client(), name, reason, Duration::from_secs(45)).await;
    }

    async fn current(&self, pv: &PersistentVolume) -> PersistentVolume {
        let api: Api<PersistentVolume> = Api::all(self.client());
        api.get(pv.metadata.name.as_deref().expect("name"))
            .await
            .expect("the PV still exists")
    }
}

fn uid(pv: &PersistentVolume) -> String {
    pv.metadata.uid.clone().unwrap_or_default()
}

fn dev_of(path: &Path) -> String {
    run("stat", &["-c", "%Hd:%Ld", &path.display().to_string()])
        .trim()
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn filesystems_swapped_under_bound_and_released_pvs_are_never_wiped() {
    let mut w = World::new().await;
    let (vol1, vol2, vol3) = (
        w.agent.disk("vol1"),
        w.agent.disk("vol2"),
        w.agent.disk("vol3"),
    );
    // vol2 is a directory bind-mounted from a shared tmpfs: same device number (and no UUID) for every directory.
    let shared = w.host_dir("shared");
    let _shared = Mount::tmpfs(&shared, "64M", w.cp.reaper());
    fs::create_dir_all(shared.join("a")).unwrap();
    fs::create_dir_all(shared.join("b")).unwrap();
    fs::write(shared.join("b/other-tenant.txt"), "someone else's data").unwrap();
    let m1 = Mount::tmpfs(&vol1, "64M", w.cp.reaper());
    let m2 = Mount::bind(&shared.join("a"), &vol2, w.cp.reaper());
    let m3 = Mount::tmpfs(&vol3, "64M", w.cp.reaper());
    w.start_agent().await;
    let pv1 = w.pv_at(&vol1, "Available").await;
    let pv2 = w.pv_at(&vol2, "Available").await;
    let pv3 = w.pv_at(&vol3, "Available").await;
    for (claim, pv, vol) in [
        ("c1", &pv1, &vol1),
        ("c2", &pv2, &vol2),
        ("c3", &pv3, &vol3),
    ] {
        w.claim(claim, pv).await;
        fs::write(vol.join("tenant.txt"), "tenant data").unwrap();
    }

    // Under Bound PVs: another tmpfs (the kernel hands it the device number just freed) and the sibling directory.
    let before = dev_of(&vol1);
    m1.unmount();
    let _b1 = Mount::tmpfs(&vol1, "64M", w.cp.reaper());
    fs::write(vol1.join("other-tenant.txt"), "someone else's data").unwrap();
    eprintln!("vol1 device number {before} -> {}", dev_of(&vol1));
    m2.unmount();
    let _b2 = Mount::bind(&shared.join("b"), &vol2, w.cp.reaper());
    w.release("c1").await;
    w.release("c2").await;

    // Under a Released PV: the claim goes while the agent is down, the disk is swapped before it comes back.
    w.agent.process.as_mut().expect("agent running").kill();
    w.release("c3").await;
    w.pv_at(&vol3, "Released").await;
    m3.unmount();
    let _b3 = Mount::tmpfs(&vol3, "64M", w.cp.reaper());
    fs::write(vol3.join("other-tenant.txt"), "someone else's data").unwrap();
    w.start_agent().await;

    for pv in [&pv1, &pv2, &pv3] {
        w.wait_reason(pv, "DiskIdentityChanged").await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    for vol in [&vol1, &vol2, &vol3] {
        assert!(
            vol.join("other-tenant.txt").exists(),
            "the filesystem swapped in at {} was wiped:\n{}",
            vol.display(),
            w.agent.log()
        );
    }
    for pv in [&pv1, &pv2, &pv3] {
        let now = w.current(pv).await;
        assert_eq!(phase(&now), "Released", "{:?}", pv.metadata.name);
        assert_eq!(uid(&now), uid(pv));
    }
    w.agent.process.take();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_same_disk_on_a_new_device_number_is_reclaimed() {
    let mut w = World::new().await;
    let vol1 = w.agent.disk("vol1");
    let images = w.host_dir("images");
    let first = LoopDevice::new(&images.join("vol1.img"), 64, Some("ext4"), w.cp.reaper());
    let m1 = Mount::device(&first.device, &vol1, w.cp.reaper());
    w.start_agent().await;
    let pv1 = w.pv_at(&vol1, "Available").await;
    w.claim("c1", &pv1).await;
    fs::write(vol1.join("tenant.txt"), "tenant data").unwrap();

    // A reboot-like renumbering: the same image comes back on another loop device (a blocker takes the old one).
    let before = dev_of(&vol1);
    m1.unmount();
    let backing = first.backing.clone();
    drop(first);
    let _blocker = LoopDevice::new(&images.join("blocker.img"), 8, None, w.cp.reaper());
    let again = LoopDevice::attach(&backing, w.cp.reaper());
    let _m2 = Mount::device(&again.device, &vol1, w.cp.reaper());
    let after = dev_of(&vol1);
    assert_ne!(before, after, "the loop device was not renumbered");
    assert!(vol1.join("tenant.txt").exists(), "the same filesystem");

    w.release("c1").await;
    w.fresh_pv_at(&vol1, &pv1, Duration::from_secs(60)).await;
    assert!(
        !vol1.join("tenant.txt").exists(),
        "the renumbered disk was wiped before it was published again"
    );
    w.agent.process.take();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_late_writer_or_a_mount_inside_keeps_the_volume_out_of_the_pool() {
    let mut w = World::new().await;
    let (vol1, vol2) = (w.agent.disk("vol1"), w.agent.disk("vol2"));
    let _m1 = Mount::tmpfs(&vol1, "64M", w.cp.reaper());
    let _m2 = Mount::tmpfs(&vol2, "64M", w.cp.reaper());
    w.start_agent().await;
    let pv1 = w.pv_at(&vol1, "Available").await;
    let pv2 = w.pv_at(&vol2, "Available").await;
    w.claim("c1", &pv1).await;
    w.claim("c2", &pv2).await;

    // vol2: the tenant's directory gets a host directory bind-mounted over it before the release.
    let host = w.host_dir("host-data");
    fs::write(host.join("host.txt"), "the host's files").unwrap();
    fs::create_dir_all(vol2.join("inner")).unwrap();
    let inner = Mount::bind(&host, &vol2.join("inner"), w.cp.reaper());
    w.release("c2").await;

    // vol1: a writer that outlives its claim keeps creating files while the wipe runs.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (stop, vol1) = (stop.clone(), vol1.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) && n < 20_000 {
                let _ = fs::write(vol1.join(format!("late-{n}.txt")), "late tenant data");
                n += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    w.release("c1").await;
    let seen = tokio::time::timeout(
        Duration::from_secs(40),
        w.wait_reason(&pv1, "WipeIncomplete"),
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("writer thread");
    assert!(
        seen.is_ok(),
        "no WipeIncomplete while a writer was active:\n{}",
        w.agent.log()
    );
    w.fresh_pv_at(&vol1, &pv1, Duration::from_secs(60)).await;
    let left: Vec<_> = fs::read_dir(&vol1)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(
        left.is_empty(),
        "published with the late writer's files: {left:?}"
    );

    // vol2 stays Released with its PV while the mount is inside; the host's files survive; then it is reclaimed.
    w.wait_reason(&pv2, "WipeIncomplete").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let held = w.current(&pv2).await;
    assert_eq!(
        (phase(&held), uid(&held)),
        ("Released".to_string(), uid(&pv2)),
        "a volume with a mount inside is not published again"
    );
    assert!(
        host.join("host.txt").exists(),
        "the host's files under the mount survive"
    );
    inner.unmount();
    w.fresh_pv_at(&vol2, &pv2, Duration::from_secs(90)).await;
    assert!(host.join("host.txt").exists());
    assert_eq!(fs::read_dir(&vol2).unwrap().count(), 0, "published empty");
    w.agent.process.take();
}
