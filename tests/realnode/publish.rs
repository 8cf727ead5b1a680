//! The chart's DaemonSet on real nodes publishes every kind of disk, whether mounted before or after it started;
//! a Block volume written by a pod reads back as zeros once released and wiped.

use std::io::Read;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams};
use serde_json::json;

use crate::common::*;
use crate::support::realnode::RealCluster;

#[tokio::test(flavor = "multi_thread")]
async fn agent_pods_publish_tmpfs_ext4_xfs_and_block_disks_mounted_before_and_after_they_start() {
    let c = RealCluster::start(2).await;
    let root = c.disk_root();
    let disks = root.join("disks");
    let blocks = root.join("blocks");
    // Before the agent runs.
    c.tmpfs("node-1", "tmpfs-a", "64M");
    c.fs_disk("node-1", "ext4-a", 64, "ext4");
    c.fs_disk("node-2", "xfs-a", 300, "xfs");
    c.block_disk("node-2", "blk-a", 32);
    install(&c, json!({})).await;
    let before = [
        ("node-1", disks.join("tmpfs-a"), "Filesystem"),
        ("node-1", disks.join("ext4-a"), "Filesystem"),
        ("node-2", disks.join("xfs-a"), "Filesystem"),
        ("node-2", blocks.join("blk-a"), "Block"),
    ];
    for (node, path, mode) in &before {
        let pv = wait_pv(&c, node, &path.display().to_string(), "Available").await;
        let spec = pv.spec.expect("PV has a spec");
        assert_eq!(spec.volume_mode.as_deref(), Some(*mode), "{path:?}");
    }
    // After it started: the DaemonSet's pods see new host mounts through HostToContainer propagation.
    c.tmpfs("node-2", "tmpfs-b", "64M");
    c.fs_disk("node-2", "ext4-b", 64, "ext4");
    c.fs_disk("node-1", "xfs-b", 300, "xfs");
    c.block_disk("node-1", "blk-b", 32);
    for (node, path) in [
        ("node-2", disks.join("tmpfs-b")),
        ("node-2", disks.join("ext4-b")),
        ("node-1", disks.join("xfs-b")),
        ("node-1", blocks.join("blk-b")),
    ] {
        wait_pv(&c, node, &path.display().to_string(), "Available").await;
    }
    // Exactly one PV per disk: no node published another node's disks.
    let all = pvs(&c).await;
    assert_eq!(all.len(), 8, "{:#?}", all.keys().collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread")]
async fn block_volume_written_by_a_pod_reads_back_as_zeros_after_release() {
    let c = RealCluster::start(2).await;
    let dev = c.block_disk("node-1", "blk", 16);
    install(&c, json!({})).await;
    let path = c.disk_root().join("blocks/blk").display().to_string();
    let pv = wait_pv(&c, "node-1", &path, "Available").await;
    let ns = c.plane.namespace("block").await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.client(), &ns);
    let pods: Api<Pod> = Api::namespaced(c.client(), &ns);
    create(&claims, &claim("raw", "local-block", "8Mi", true)).await;
    let script = "yes LOCALPV-SECRET | head -c 1048576 | dd of=/dev/xvda bs=65536 conv=fsync 2>/dev/null && sync";
    create(&pods, &busybox_pod("writer", script, "raw", true, None)).await;
    let (phase, node) = wait_pod(&c, &ns, "writer", &["Succeeded", "Failed"]).await;
    assert_eq!(
        (phase.as_str(), node.as_str()),
        ("Succeeded", "node-1"),
        "{}",
        c.container_logs(&ns, "writer")
    );
    assert_eq!(claim_state(&c, &ns, "raw").await.1, pv.metadata.name);
    assert!(
        read_head(&dev, 1 << 20)
            .windows(14)
            .any(|w| w == b"LOCALPV-SECRET"),
        "the pod's pattern reached the device"
    );
    delete_pod(&c, &ns, "writer").await;
    claims
        .delete("raw", &DeleteParams::default())
        .await
        .expect("claim deleted");
    // Released, wiped (zeroout, the Block default), then published again as Available.
    let again = wait_pv(&c, "node-1", &path, "Available").await;
    assert_ne!(
        again.metadata.uid, pv.metadata.uid,
        "the disk came back as a new PV only after its wipe"
    );
    let head = read_head(&dev, 16 << 20);
    assert!(
        head.iter().all(|b| *b == 0),
        "released device reads back as zeros"
    );
}

fn read_head(dev: &str, len: usize) -> Vec<u8> {
    let mut f = std::fs::File::open(dev).expect("device opens");
    let mut buf = vec![0; len];
    f.read_exact(&mut buf).expect("device readable");
    buf
}
