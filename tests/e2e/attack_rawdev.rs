//! Issue 38 point 1 as attacks on the real control plane with real loop devices: raw devices in a Filesystem class
//! are published for the kubelet to format (its mount, in a mount namespace of its own, stands in for the kubelet's).
//! A device mounted elsewhere on the host is never published, nor left published; a device swapped under a Bound
//! PV is never wiped; a corrupt filesystem does not misdirect the wipe; and a block cleaner that leaves the previous
//! tenant's filesystem signature does not count as a wipe (a kubelet formats only a device without a signature, so
//! the next claim would mount the old files).

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::node_agent::{
    claim_pv, events_of, fresh_pv_at, obj, phase, plane_with_agent, pv_at, pvs_of, release,
    wait_claim, wait_event,
};
use crate::support::agent::Agent;
use crate::support::cluster::{ControlPlane, Options};
use crate::support::disks::{LoopDevice, Mount, fs_signature, mkfs, run};
use crate::support::eventually;

const CLASS: &str = "raw-block";

/// Binds a `volumeMode: Block` claim `name` of `class` to `pv`.
pub(crate) async fn claim_block(
    client: &kube::Client,
    ns: &str,
    name: &str,
    class: &str,
    pv: &PersistentVolume,
) {
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let pvc: PersistentVolumeClaim = obj(json!({"metadata": {"name": name}, "spec": {
        "accessModes": ["ReadWriteOnce"], "storageClassName": class, "volumeMode": "Block",
        "volumeName": pv.metadata.name, "resources": {"requests": {"storage": "1Mi"}}}}));
    pvcs.create(&PostParams::default(), &pvc)
        .await
        .expect("PVC created");
    wait_claim(client, ns, name, "Bound").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_block_cleaner_that_leaves_a_filesystem_signature_keeps_the_device_out_of_the_pool() {
    // A cleaner that does nothing stands for any that does less than it says (a `discard` that does not zero).
    let extra = "    volumeMode: Block\n    blockCleanerCommand: [\"/bin/true\"]\n";
    let (cp, ns, mut agent) = one_class("attack-rawdev", CLASS, "raw", extra).await;
    let client = cp.client();
    let (dev, entry) = linked_device(&cp, &agent, "blk1");
    let pv = start_and_publish(&cp, &mut agent, &entry).await;
    claim_block(&client, &ns, "c1", CLASS, &pv).await;

    // The tenant makes a filesystem on its raw device and leaves a file there.
    mkfs("ext4", &dev.device, Some("tenant"));
    let seen = cp.dir.join("tenant-view");
    let m = Mount::device(&dev.device, &seen, cp.reaper());
    std::fs::write(seen.join("secret.txt"), "the first tenant's data").expect("tenant writes");
    m.unmount_now();
    release(&client, &ns, "c1").await;

    let name = pv.metadata.name.as_deref().expect("name");
    let why = wait_event(&client, name, "WipeIncomplete", Duration::from_secs(60)).await;
    assert!(why.contains("ext4 signature survived"), "{why}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let held = Api::<PersistentVolume>::all(client.clone())
        .get(name)
        .await
        .expect("the PV still exists");
    assert_eq!(
        (phase(&held), held.metadata.uid.clone()),
        ("Released".to_string(), pv.metadata.uid.clone()),
        "a device still carrying the tenant's filesystem is not published again:\n{}",
        agent.log()
    );
    assert_eq!(fs_signature(&dev.device).as_deref(), Some("ext4"));

    // Once the signature is gone (here by hand), the retried wipe passes and the device comes back.
    run("wipefs", &["-a", &dev.device]);
    fresh_pv_at(&client, &entry, &pv, Duration::from_secs(120)).await;
    agent.process.take();
}

/// The check does not hold back a wipe that did its job: the default `zeroout` erases the tenant's filesystem and
/// libblkid, reading right after it, sees none (no stale page cache).
#[tokio::test(flavor = "multi_thread")]
async fn a_zeroout_wipe_leaves_no_signature_and_the_device_comes_back() {
    let class = "raw-zero";
    let (cp, ns, mut agent) = one_class(
        "attack-rawdev-zero",
        class,
        "raw",
        "    volumeMode: Block\n",
    )
    .await;
    let client = cp.client();
    let (dev, entry) = linked_device(&cp, &agent, "blk1");
    let pv = start_and_publish(&cp, &mut agent, &entry).await;
    claim_block(&client, &ns, "c1", class, &pv).await;
    // The tenant's filesystem is read once through the page cache, as a tenant's reads would leave it.
    mkfs("ext4", &dev.device, Some("tenant"));
    assert_eq!(fs_signature(&dev.device).as_deref(), Some("ext4"));
    release(&client, &ns, "c1").await;
    fresh_pv_at(&client, &entry, &pv, Duration::from_secs(120)).await;
    assert_eq!(fs_signature(&dev.device), None, "wiped");
    agent.process.take();
}

/// A mount of a device in a mount namespace of its own, as the kubelet's is to the agent (and anyone's in another
/// container), held until dropped. `then` runs on the mounted filesystem first (`$M` is the mount point).
struct HiddenMount {
    child: std::process::Child,
}

impl HiddenMount {
    fn new(device: &str, at: &Path, then: &str) -> HiddenMount {
        std::fs::create_dir_all(at).expect("mount point");
        let ready = at.with_extension("ready");
        let _ = std::fs::remove_file(&ready);
        let script = format!(
            "M={m} && mount {device} \"$M\" && {then} && sync && touch {r} && exec sleep 600",
            m = at.display(),
            r = ready.display()
        );
        let child = std::process::Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", &script])
            .spawn()
            .expect("missing prerequisite: unshare (util-linux)");
        // Dropped (killed and waited for) on every path, the panic included.
        let held = HiddenMount { child };
        for _ in 0..200 {
            if ready.exists() {
                return held;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("{device} was not mounted in a namespace of its own");
    }
}

impl Drop for HiddenMount {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // The namespace, and its mount, go with their last process; the device is free a moment later.
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// What the kubelet does on first use of a Filesystem PV over a raw device: format only when blkid finds nothing.
fn kubelet_format(device: &str) {
    if fs_signature(device).is_none() {
        mkfs("ext4", device, None);
    }
}

const NVME: &str = "local-nvme";

/// A plane with one agent on node-1 and one class `class` over its directory `dir` (`extra`: more class keys).
async fn one_class(ns: &str, class: &str, dir: &str, extra: &str) -> (ControlPlane, String, Agent) {
    plane_with_agent(
        Options {
            controller_manager: true,
            ..Default::default()
        },
        ns,
        &[(class, "Delete")],
        &["node-1"],
        &[(class, dir, extra)],
    )
    .await
}

async fn nvme_plane(ns: &str) -> (ControlPlane, String, Agent) {
    one_class(ns, NVME, "disks", "    fsType: ext4\n").await
}

/// Starts the agent and waits for the Available PV of `entry`.
async fn start_and_publish(cp: &ControlPlane, agent: &mut Agent, entry: &Path) -> PersistentVolume {
    agent.start(cp);
    agent.wait_ready().await;
    pv_at(
        &cp.client(),
        "node-1",
        entry,
        "Available",
        Duration::from_secs(60),
    )
    .await
}

fn linked_device(cp: &ControlPlane, agent: &Agent, name: &str) -> (LoopDevice, PathBuf) {
    let images = cp.dir.join("images");
    std::fs::create_dir_all(&images).expect("image dir");
    let dev = LoopDevice::new(&images.join(format!("{name}.img")), 64, None, cp.reaper());
    let entry = agent.disk(name);
    std::os::unix::fs::symlink(&dev.device, &entry).expect("symlink to the device");
    (dev, entry)
}

async fn events_named(client: &kube::Client, pv: &PersistentVolume, reason: &str) -> usize {
    let name = pv.metadata.name.as_deref().expect("name");
    events_of(client, name)
        .await
        .iter()
        .filter(|(r, _)| r == reason)
        .count()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_device_in_a_filesystem_class_serves_a_kubelet_formatted_filesystem_and_is_wiped_clean_between_tenants()
 {
    let (cp, ns, mut agent) = nvme_plane("rawdev-life").await;
    let client = cp.client();
    let (dev, entry) = linked_device(&cp, &agent, "nvme-a");
    let pv = start_and_publish(&cp, &mut agent, &entry).await;
    let spec = pv.spec.clone().expect("spec");
    assert_eq!(spec.volume_mode.as_deref(), Some("Filesystem"));
    assert_eq!(
        spec.local.as_ref().and_then(|l| l.fs_type.as_deref()),
        Some("ext4")
    );
    let annotations = pv.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations.get("localpv.io/medium").map(String::as_str),
        Some("device")
    );
    claim_pv(&client, &ns, "c1", &pv, NVME, "1Mi").await;

    // The "kubelet" formats the device and mounts it in its own namespace; the tenant writes.
    kubelet_format(&dev.device);
    let kubelet = HiddenMount::new(
        &dev.device,
        &cp.dir.join("kubelet-mount"),
        "echo tenant-one-secret > \"$M/secret.txt\"",
    );
    tokio::time::sleep(Duration::from_secs(12)).await;
    let bound = Api::<PersistentVolume>::all(client.clone())
        .get(pv.metadata.name.as_deref().expect("name"))
        .await
        .expect("PV");
    assert_eq!(
        phase(&bound),
        "Bound",
        "the kubelet's mount is the tenant's"
    );
    assert_eq!(events_named(&client, &pv, "DeviceInUse").await, 0);

    drop(kubelet);
    release(&client, &ns, "c1").await;
    fresh_pv_at(&client, &entry, &pv, Duration::from_secs(120)).await;
    assert_eq!(
        fs_signature(&dev.device),
        None,
        "no signature left for the kubelet to mount"
    );
    let bytes = std::fs::read(&dev.device).expect("read the device");
    assert!(
        !bytes.windows(17).any(|w| w == b"tenant-one-secret"),
        "the tenant's file is gone from the device"
    );
    agent.process.take();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_device_mounted_elsewhere_on_the_host_is_never_published_nor_left_published() {
    let (cp, _ns, mut agent) = nvme_plane("rawdev-inuse").await;
    let client = cp.client();
    let (seen, seen_entry) = linked_device(&cp, &agent, "nvme-seen");
    let (hidden, hidden_entry) = linked_device(&cp, &agent, "nvme-hidden");
    let (later, later_entry) = linked_device(&cp, &agent, "nvme-later");
    for d in [&seen, &hidden, &later] {
        mkfs("ext4", &d.device, Some("host-data"));
    }
    // One mounted where the agent sees it, one in a namespace of its own (another container's, say).
    let _visible = Mount::device(&seen.device, &cp.dir.join("host-mnt"), cp.reaper());
    let hidden_mount = HiddenMount::new(&hidden.device, &cp.dir.join("hidden-mnt"), "true");
    let later_pv = start_and_publish(&cp, &mut agent, &later_entry).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pvs = pvs_of(&client, "node-1").await;
    for entry in [&seen_entry, &hidden_entry] {
        assert!(
            !pvs.contains_key(&entry.display().to_string()),
            "{} is mounted on the host yet published:\n{}",
            entry.display(),
            agent.log()
        );
    }

    // Mounted after it was published: the Available PV is withdrawn before a claim can take the host's files.
    let late = HiddenMount::new(&later.device, &cp.dir.join("late-mnt"), "true");
    let name = later_pv.metadata.name.as_deref().expect("name");
    wait_event(&client, name, "DeviceInUse", Duration::from_secs(45)).await;
    eventually("the PV withdrawn", Duration::from_secs(30), || async {
        match pvs_of(&client, "node-1")
            .await
            .get(&later_entry.display().to_string())
        {
            None => Ok(()),
            Some(pv) => Err(phase(pv)),
        }
    })
    .await;

    // Unmounted, both come (back) as PVs; the host's filesystems were never touched.
    drop(late);
    drop(hidden_mount);
    pv_at(
        &client,
        "node-1",
        &hidden_entry,
        "Available",
        Duration::from_secs(60),
    )
    .await;
    pv_at(
        &client,
        "node-1",
        &later_entry,
        "Available",
        Duration::from_secs(60),
    )
    .await;
    for d in [&seen, &hidden, &later] {
        assert_eq!(
            fs_signature(&d.device).as_deref(),
            Some("ext4"),
            "{}",
            d.device
        );
    }
    agent.process.take();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_device_swapped_under_a_bound_filesystem_pv_is_never_wiped() {
    let (cp, ns, mut agent) = nvme_plane("rawdev-swap").await;
    let client = cp.client();
    let (dev, entry) = linked_device(&cp, &agent, "nvme-a");
    let pv = start_and_publish(&cp, &mut agent, &entry).await;
    claim_pv(&client, &ns, "c1", &pv, NVME, "1Mi").await;
    kubelet_format(&dev.device);

    // Another disk, holding someone's filesystem, takes the entry's place while the claim is Bound.
    let images = cp.dir.join("images");
    let other = LoopDevice::new(&images.join("other.img"), 64, None, cp.reaper());
    mkfs("ext4", &other.device, Some("precious"));
    std::fs::remove_file(&entry).expect("unlink");
    std::os::unix::fs::symlink(&other.device, &entry).expect("relink");
    release(&client, &ns, "c1").await;
    let name = pv.metadata.name.as_deref().expect("name");
    wait_event(
        &client,
        name,
        "DiskIdentityChanged",
        Duration::from_secs(60),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let held = Api::<PersistentVolume>::all(client.clone())
        .get(name)
        .await
        .expect("the PV still exists");
    assert_eq!(phase(&held), "Released", "not wiped, not re-published");
    assert_eq!(fs_signature(&other.device).as_deref(), Some("ext4"));
    assert_eq!(
        fs_signature(&dev.device).as_deref(),
        Some("ext4"),
        "the tenant's device untouched too"
    );
    agent.process.take();
}

/// A tenant that smashes its filesystem's superblock: the device is still known by its own ids, wiped by the block
/// method and published again with no signature, never mistaken for a new disk nor left with the tenant's bytes.
#[tokio::test(flavor = "multi_thread")]
async fn a_device_whose_filesystem_is_corrupt_is_wiped_by_its_own_identity() {
    let (cp, ns, mut agent) = nvme_plane("rawdev-corrupt").await;
    let client = cp.client();
    let (dev, entry) = linked_device(&cp, &agent, "nvme-a");
    let pv = start_and_publish(&cp, &mut agent, &entry).await;
    claim_pv(&client, &ns, "c1", &pv, NVME, "1Mi").await;
    kubelet_format(&dev.device);
    drop(HiddenMount::new(
        &dev.device,
        &cp.dir.join("kubelet-mount"),
        "echo tenant-corrupt-secret > \"$M/secret.txt\"",
    ));
    run(
        "dd",
        &[
            "if=/dev/urandom",
            &format!("of={}", dev.device),
            "bs=1024",
            "seek=1",
            "count=3",
            "conv=notrunc,fsync",
        ],
    );
    release(&client, &ns, "c1").await;
    fresh_pv_at(&client, &entry, &pv, Duration::from_secs(120)).await;
    assert_eq!(fs_signature(&dev.device), None);
    let bytes = std::fs::read(&dev.device).expect("read the device");
    assert!(!bytes.windows(21).any(|w| w == b"tenant-corrupt-secret"));
    agent.process.take();
}
