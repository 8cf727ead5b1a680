//! Issue 38 point 1's wipe check as an attack on the real control plane with a real loop device: a block cleaner
//! that leaves the previous tenant's filesystem signature on the device does not count as a wipe. The device is
//! not published again (a kubelet formats only a device without a signature, so the next claim would mount the
//! old files) until a wipe leaves none.

use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::node_agent::{
    fresh_pv_at, obj, phase, plane_with_agent, pv_at, release, wait_claim, wait_event,
};
use crate::support::cluster::Options;
use crate::support::disks::{LoopDevice, Mount, mkfs, run};

const CLASS: &str = "raw-block";

/// The filesystem type libblkid finds on `device`, probed directly; `None` when there is none (blkid exits 2).
fn fs_type(device: &str) -> Option<String> {
    let out = std::process::Command::new("blkid")
        .args(["-p", "-o", "value", "-s", "TYPE", device])
        .output()
        .expect("missing prerequisite: blkid");
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (!text.is_empty()).then_some(text)
}

/// Binds a `volumeMode: Block` claim `name` of `class` to `pv`.
async fn claim_block(
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
    let (cp, ns, mut agent) = plane_with_agent(
        Options {
            controller_manager: true,
            ..Default::default()
        },
        "attack-rawdev",
        &[(CLASS, "Delete")],
        &["node-1"],
        &[(CLASS, "raw", extra)],
    )
    .await;
    let client = cp.client();
    let images = cp.dir.join("images");
    std::fs::create_dir_all(&images).expect("image dir");
    let dev = LoopDevice::new(&images.join("raw.img"), 64, None, cp.reaper());
    let entry = agent.disk("blk1");
    std::os::unix::fs::symlink(&dev.device, &entry).expect("symlink to the raw device");
    agent.start(&cp);
    agent.wait_ready().await;
    let pv = pv_at(
        &client,
        "node-1",
        &entry,
        "Available",
        Duration::from_secs(60),
    )
    .await;
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
    assert_eq!(fs_type(&dev.device).as_deref(), Some("ext4"));

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
    let (cp, ns, mut agent) = plane_with_agent(
        Options {
            controller_manager: true,
            ..Default::default()
        },
        "attack-rawdev-zero",
        &[(class, "Delete")],
        &["node-1"],
        &[(class, "raw", "    volumeMode: Block\n")],
    )
    .await;
    let client = cp.client();
    let images = cp.dir.join("images");
    std::fs::create_dir_all(&images).expect("image dir");
    let dev = LoopDevice::new(&images.join("raw.img"), 64, None, cp.reaper());
    let entry = agent.disk("blk1");
    std::os::unix::fs::symlink(&dev.device, &entry).expect("symlink to the raw device");
    agent.start(&cp);
    agent.wait_ready().await;
    let pv = pv_at(
        &client,
        "node-1",
        &entry,
        "Available",
        Duration::from_secs(60),
    )
    .await;
    claim_block(&client, &ns, "c1", class, &pv).await;
    // The tenant's filesystem is read once through the page cache, as a tenant's reads would leave it.
    mkfs("ext4", &dev.device, Some("tenant"));
    assert_eq!(fs_type(&dev.device).as_deref(), Some("ext4"));
    release(&client, &ns, "c1").await;
    fresh_pv_at(&client, &entry, &pv, Duration::from_secs(120)).await;
    assert_eq!(fs_type(&dev.device), None, "wiped");
    agent.process.take();
}
