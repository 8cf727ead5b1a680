//! The reference chart's EKS example (`helm/examples/eks-nvme-ssd.yaml`: class `nvme-ssd`, `hostDir:
//! /dev/disk/kubernetes`, no `volumeMode`) run as written on real nodes (issue 38, point 2), loop devices standing
//! in for the NVMe instance-store disks: each node sees a directory of its own at `/dev/disk/kubernetes` on the
//! host's devtmpfs, holding symlinks to its devices as the node's bootstrap would make them. As written the class is
//! a Filesystem class: as the reference provisioner did, each device is a Filesystem PV; a pod on node-1 mounts the
//! filesystem the kubelet makes on its device and writes; released, the device is wiped with no signature left and
//! published again. With `volumeMode: Block` added the devices are raw block PVs a pod writes to. One
//! regular file dropped into node-1's directory refuses that directory whole (`DeviceDirRefused`, naming the file)
//! while its PVs stay as they are, and node-2 goes on; the file removed, node-1's disks come back. The directories
//! and the loop devices are removed at teardown.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::Instant;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::Api;
use serde_json::{Value, json};

use crate::common::*;
use crate::support::disks::fs_signature;
use crate::support::realnode::images::LOCALPV_REPOSITORY;
use crate::support::realnode::{POD_TIMEOUT, RealCluster};
use crate::support::reference::{tarball, unpack};

const DEV_DIR: &str = "/dev/disk/kubernetes";
const CLASS: &str = "nvme-ssd";

/// Every LocalDisk of class `nvme-ssd`: (node, path, phase, reason, message).
fn local_disks(c: &RealCluster) -> Vec<(String, String, String, String, String)> {
    let list: Value =
        serde_json::from_str(&c.kubectl(&["get", "localdisks", "-o", "json"])).expect("json");
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let mut out: Vec<_> = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|d| d["spec"]["storageClass"] == CLASS)
        .map(|d| {
            (
                s(&d["spec"]["node"]),
                s(&d["spec"]["path"]),
                s(&d["status"]["phase"]),
                s(&d["status"]["reason"]),
                s(&d["status"]["message"]),
            )
        })
        .collect();
    out.sort();
    out
}

/// Waits until `done` holds for the class's LocalDisks; panics with them and the agents' logs after POD_TIMEOUT.
async fn wait_disks(
    c: &RealCluster,
    what: &str,
    done: impl Fn(&[(String, String, String, String, String)]) -> bool,
) -> Vec<(String, String, String, String, String)> {
    let deadline = Instant::now() + POD_TIMEOUT;
    loop {
        let disks = local_disks(c);
        if done(&disks) {
            return disks;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: LocalDisks after {POD_TIMEOUT:?}: {disks:#?}\n{}",
            c.container_logs(NAMESPACE, RELEASE)
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_reference_eks_values_run_as_written_with_loop_devices_for_nvme_disks() {
    let c = RealCluster::start_with(2, &[], Some(Path::new(DEV_DIR)), &[]).await;
    let mut devices = Vec::new();
    for (node, name) in [
        ("node-1", "nvme-1"),
        ("node-1", "nvme-2"),
        ("node-2", "nvme-1"),
    ] {
        let dev = c.loop_device(&format!("{node}-{name}"), 32, None);
        let own = c.node(node).dev_dir.clone().expect("the node's dev dir");
        symlink(&dev, own.join(name)).expect("link in the node's dev dir");
        devices.push((node, name, dev));
    }
    let top = unpack(
        &tarball(),
        &c.run_dir().join("reference"),
        &["*/helm/examples/eks-nvme-ssd.yaml"],
    );
    let eks = top.join("helm/examples/eks-nvme-ssd.yaml");
    // Only what this cluster needs besides the file: the image built here, no extender. The file's classes stand.
    let ours = c.run_dir().join("values-eks-ours.yaml");
    let image = json!({
        "image": {"repository": LOCALPV_REPOSITORY, "tag": c.images.localpv_tag, "pullPolicy": "Never"},
        "extender": {"enabled": false},
    });
    fs::write(&ours, serde_yaml_ng::to_string(&image).expect("yaml")).expect("written");

    c.kubectl(&["apply", "-f", "config/manifests/namespace.yaml"]);
    helm_with_files(&c, "install", &[&ours, &eks]);
    wait_agents_ready(&c).await;
    c.kubectl(&["get", "storageclass", CLASS]);
    // As written (a Filesystem class): Filesystem PVs over the devices, for the kubelet to format.
    for (node, name, _) in &devices {
        let pv = wait_pv(&c, node, &format!("{DEV_DIR}/{name}"), "Available").await;
        let spec = pv.spec.as_ref().expect("spec");
        assert_eq!(spec.volume_mode.as_deref(), Some("Filesystem"));
        assert_eq!(spec.storage_class_name.as_deref(), Some(CLASS));
    }
    let ns = c.plane.namespace("eks").await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.client(), &ns);
    let pods: Api<Pod> = Api::namespaced(c.client(), &ns);
    create(&claims, &claim("fs", CLASS, "16Mi", false)).await;
    let script = "echo LOCALPV-EKS-FS > /data/hello && sync && grep -q LOCALPV-EKS-FS /data/hello";
    create(
        &pods,
        &busybox_pod("fs-writer", script, "fs", false, Some("node-1")),
    )
    .await;
    let (phase, node) = wait_pod(&c, &ns, "fs-writer", &["Succeeded", "Failed"]).await;
    assert_eq!(
        (phase.as_str(), node.as_str()),
        ("Succeeded", "node-1"),
        "{}",
        c.container_logs(&ns, "fs-writer")
    );
    let pv_name = claim_state(&c, &ns, "fs").await.1.expect("bound");
    let first = pvs(&c).await.remove(&pv_name).expect("its PV");
    let device = devices
        .iter()
        .find(|(n, name, _)| *n == "node-1" && pv_path(&first) == format!("{DEV_DIR}/{name}"))
        .map(|d| d.2.clone())
        .expect("the claim's PV is one of node-1's devices");
    assert!(
        fs_signature(&device).is_some(),
        "the kubelet formatted {device}"
    );
    delete_pod(&c, &ns, "fs-writer").await;
    claims
        .delete("fs", &Default::default())
        .await
        .expect("claim deleted");
    let path = pv_path(&first);
    let deadline = Instant::now() + POD_TIMEOUT;
    loop {
        let again = pvs(&c).await.into_values().find(|p| {
            pv_node(p) == "node-1" && pv_path(p) == path && p.metadata.uid != first.metadata.uid
        });
        if again.as_ref().is_some_and(|p| pv_phase(p) == "Available") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{path} not published again: {:?}\n{}",
            again.map(|p| pv_phase(&p)),
            c.container_logs(NAMESPACE, RELEASE)
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    assert_eq!(
        fs_signature(&device),
        None,
        "{device} wiped with no signature left:\n{}",
        c.container_logs(NAMESPACE, RELEASE)
    );

    // The same file with `volumeMode: Block` added to its class: raw block PVs.
    let mut values: Value =
        serde_yaml_ng::from_str(&fs::read_to_string(&eks).expect("readable")).expect("parses");
    values["classes"][0]["volumeMode"] = json!("Block");
    let block = c.run_dir().join("eks-nvme-ssd-block.yaml");
    fs::write(&block, serde_yaml_ng::to_string(&values).expect("yaml")).expect("written");
    helm_with_files(&c, "upgrade", &[&ours, &block]);
    wait_agents_ready(&c).await;
    // The Filesystem PVs are withdrawn and the devices published again as Block PVs.
    let deadline = Instant::now() + POD_TIMEOUT;
    loop {
        let all = pvs(&c).await;
        let block_pvs = devices
            .iter()
            .filter(|(node, name, _)| {
                all.values().any(|p| {
                    pv_node(p) == *node
                        && pv_path(p) == format!("{DEV_DIR}/{name}")
                        && pv_phase(p) == "Available"
                        && p.spec.as_ref().and_then(|s| s.volume_mode.as_deref()) == Some("Block")
                        && p.spec
                            .as_ref()
                            .and_then(|s| s.storage_class_name.as_deref())
                            == Some(CLASS)
                })
            })
            .count();
        if block_pvs == devices.len() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{block_pvs} of {} devices are Block PVs:\n{}",
            devices.len(),
            c.container_logs(NAMESPACE, RELEASE)
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }

    create(&claims, &claim("raw", CLASS, "16Mi", true)).await;
    let script = "echo LOCALPV-EKS | dd of=/dev/xvda conv=fsync 2>/dev/null && sync";
    create(
        &pods,
        &busybox_pod("writer", script, "raw", true, Some("node-1")),
    )
    .await;
    let (phase, node) = wait_pod(&c, &ns, "writer", &["Succeeded", "Failed"]).await;
    assert_eq!(
        (phase.as_str(), node.as_str()),
        ("Succeeded", "node-1"),
        "{}",
        c.container_logs(&ns, "writer")
    );
    let pv_name = claim_state(&c, &ns, "raw").await.1.expect("bound");
    let bound = pvs(&c).await.remove(&pv_name).expect("its PV");
    let written = devices
        .iter()
        .find(|(n, name, _)| *n == "node-1" && pv_path(&bound) == format!("{DEV_DIR}/{name}"))
        .expect("the claim's PV is one of node-1's devices");
    let head = fs::read(&written.2)
        .map(|b| b[..11].to_vec())
        .unwrap_or_default();
    assert_eq!(
        head, b"LOCALPV-EKS",
        "the pod's bytes reached {}",
        written.2
    );

    // A regular file in node-1's directory refuses it whole; its PVs stay, node-2's disk is untouched.
    let before = pvs(&c).await;
    let stray = c
        .node("node-1")
        .dev_dir
        .clone()
        .expect("dev dir")
        .join("notes");
    fs::write(&stray, "not a disk\n").expect("stray file");
    let disks = wait_disks(&c, "a stray file on node-1", |d| {
        d.iter()
            .filter(|x| x.0 == "node-1")
            .all(|x| x.3 == "DeviceDirRefused")
    })
    .await;
    for d in disks.iter().filter(|x| x.0 == "node-1") {
        assert!(
            d.4.contains("its entry \"notes\" is a regular file"),
            "{d:?}"
        );
    }
    assert!(
        disks
            .iter()
            .any(|x| x.0 == "node-2" && x.3 != "DeviceDirRefused"),
        "node-2 goes on: {disks:#?}"
    );
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let during = pvs(&c).await;
    for (name, pv) in before.iter().filter(|(_, p)| pv_node(p) == "node-1") {
        let now = during
            .get(name)
            .unwrap_or_else(|| panic!("{name} withdrawn while refused"));
        assert_eq!(pv_phase(now), pv_phase(pv), "{name}");
        assert_eq!(now.metadata.uid, pv.metadata.uid, "{name}");
    }
    fs::remove_file(&stray).expect("stray removed");
    // NB: the file had a LocalDisk of its own while there (refused with the rest); it is Missing now.
    let devices_only = |d: &[(String, String, String, String, String)]| {
        d.iter()
            .filter(|x| !x.1.ends_with("/notes"))
            .map(|x| (x.0.clone(), x.3.clone()))
            .collect::<Vec<_>>()
    };
    // NB: one wait for both: the inventory writes its objects one by one, so a read can fall between the devices'
    // objects and the file's.
    wait_disks(&c, "the stray file removed", |d| {
        devices_only(d).len() == 3
            && devices_only(d).iter().all(|x| x.1.is_empty())
            && d.iter()
                .any(|x| x.1.ends_with("/notes") && x.3 == "DiskNotFound")
    })
    .await;
}
