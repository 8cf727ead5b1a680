//! Issue 39 point 2 as an attack with real copies: a Bound ext4 disk block-copied onto another loop device (same
//! filesystem UUID) and a Bound tmpfs volume copied with `cp -a` (the agent's volume id travels in its extended
//! attribute), each mounted at a new entry. Neither copy is published; the original's PV, once Released, is not
//! wiped while its twin is there; once the twins are gone the original is wiped and published again.

use std::fs;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolume;

use crate::node_agent::{
    claim_pv, fresh_pv_at, one_class_plane, pv_at, pvs_of, release, wait_event,
};
use crate::support::disks::{LoopDevice, Mount, run};

const CLASS: &str = "local-storage";

fn name(pv: &PersistentVolume) -> &str {
    pv.metadata.name.as_deref().expect("name")
}

#[tokio::test(flavor = "multi_thread")]
async fn copies_of_a_bound_disk_are_never_published_and_never_authorise_a_wipe() {
    let (cp, ns, mut agent) = one_class_plane("attack-clone").await;
    let client = cp.client();
    let reaper = cp.reaper();
    let hosts = cp.dir.join("hosts/node-1");
    let (ext4, tmpfs) = (agent.disk("vol-m-ext4"), agent.disk("vol-m-tmpfs"));
    let original = LoopDevice::new(&hosts.join("original.img"), 64, Some("ext4"), reaper);
    let m_ext4 = Mount::device(&original.device, &ext4, reaper);
    let m_tmpfs = Mount::tmpfs(&tmpfs, "16M", reaper);
    agent.start(&cp);
    agent.wait_ready().await;
    let mut pvs = Vec::new();
    for (i, vol) in [&ext4, &tmpfs].into_iter().enumerate() {
        let pv = pv_at(&client, "node-1", vol, "Available", Duration::from_secs(60)).await;
        claim_pv(&client, &ns, &format!("c{i}"), &pv, CLASS, "1Mi").await;
        fs::write(vol.join("secret"), "the tenant's secret").unwrap();
        pvs.push(pv);
    }

    // The copies: a block copy of the ext4 image on another loop device at an entry named before the original,
    // and `cp -a` of the tmpfs volume's root (its volume id with it) bind-mounted at an entry named after it.
    run("sync", &[]);
    let image = hosts.join("copy.img");
    run(
        "cp",
        &[
            &original.backing.display().to_string(),
            &image.display().to_string(),
        ],
    );
    let copy = LoopDevice::attach(&image, reaper);
    let ext4_copy = agent.disk("vol-a-ext4");
    let c_ext4 = Mount::device(&copy.device, &ext4_copy, reaper);
    // NB: onto another tmpfs: this machine's root device cannot be probed by blkid.
    let copies = hosts.join("copies");
    let _m_copies = Mount::tmpfs(&copies, "16M", reaper);
    let copied_root = copies.join("copied-root");
    run(
        "cp",
        &[
            "-a",
            &tmpfs.display().to_string(),
            &copied_root.display().to_string(),
        ],
    );
    let tmpfs_copy = agent.disk("vol-z-tmpfs");
    let c_tmpfs = Mount::bind(&copied_root, &tmpfs_copy, reaper);
    for pv in &pvs {
        wait_event(
            &client,
            name(pv),
            "DuplicateIdentity",
            Duration::from_secs(45),
        )
        .await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    no_pv_at(&client, &[&ext4_copy, &tmpfs_copy], &agent.log()).await;

    // Released while their copies are there: not wiped.
    release(&client, &ns, "c0").await;
    release(&client, &ns, "c1").await;
    for pv in &pvs {
        pv_at(
            &client,
            "node-1",
            Path::new(&local_path(pv)),
            "Released",
            Duration::from_secs(60),
        )
        .await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    for vol in [&ext4, &tmpfs] {
        assert!(
            vol.join("secret").exists(),
            "{} was wiped while a copy answered to its identity:\n{}",
            vol.display(),
            agent.log()
        );
    }
    no_pv_at(&client, &[&ext4_copy, &tmpfs_copy], &agent.log()).await;

    // The copies go: the originals are wiped and published again, by themselves.
    drop(c_ext4);
    drop(c_tmpfs);
    drop(copy);
    for (pv, vol) in pvs.iter().zip([&ext4, &tmpfs]) {
        fresh_pv_at(&client, vol, pv, Duration::from_secs(90)).await;
        let path = vol.display();
        assert!(!vol.join("secret").exists(), "{path} published unwiped");
    }
    agent.process.take();
    drop(m_ext4);
    drop(m_tmpfs);
    drop(original);
}

fn local_path(pv: &PersistentVolume) -> String {
    pv.spec
        .as_ref()
        .and_then(|s| s.local.as_ref())
        .map(|l| l.path.clone())
        .unwrap_or_default()
}

async fn no_pv_at(client: &kube::Client, paths: &[&Path], log: &str) {
    let pvs = pvs_of(client, "node-1").await;
    for path in paths {
        let at = pvs.get(&path.display().to_string());
        assert!(
            at.is_none(),
            "the copy at {} was published as {:?}:\n{log}",
            path.display(),
            at.and_then(|pv| pv.metadata.name.clone())
        );
    }
}
