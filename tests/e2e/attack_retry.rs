//! Issue 39 point 3 on an otherwise idle node: a volume held out of the pool for a cause that then goes away comes
//! back by itself. Each cause: a mount inside the volume (its unmount wakes the agent at once), an immutable file,
//! a cleaner command that fails. Nothing else happens on the node meanwhile: no other disk, no claim, only the
//! agent's own configuration poll (every 500 ms here), which must not keep pushing the retry away.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolume;

use crate::node_agent::{claim_pv, phase, plane_with_agent, pv_at, pvs_of, release, wait_event};
use crate::support::cluster::{ControlPlane, Options};
use crate::support::disks::{LoopDevice, Mount, run};
use crate::support::eventually;

const CLASS: &str = "local-storage";
const CLEANED: &str = "cleaned";

fn uid(pv: &PersistentVolume) -> String {
    pv.metadata.uid.clone().unwrap_or_default()
}

fn name(pv: &PersistentVolume) -> &str {
    pv.metadata.name.as_deref().expect("name")
}

/// Waits for a PV at `vol` other than `old`, Available and empty.
async fn comes_back_empty(
    cp: &ControlPlane,
    vol: &Path,
    old: &PersistentVolume,
    log: impl Fn() -> String,
) {
    let client = cp.client();
    let path = vol.display().to_string();
    let waited = tokio::time::timeout(
        Duration::from_secs(90),
        eventually(
            &format!("{path} to come back as a new Available PV"),
            Duration::from_secs(90),
            || async {
                match pvs_of(&client, "node-1").await.get(&path) {
                    Some(pv) if uid(pv) != uid(old) && phase(pv) == "Available" => Ok(()),
                    other => Err(format!("{:?}", other.map(|p| (uid(p), phase(p))))),
                }
            },
        ),
    )
    .await;
    assert!(waited.is_ok(), "{path} never came back:\n{}", log());
    let left: Vec<_> = fs::read_dir(vol)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n != "lost+found")
        .collect();
    assert!(left.is_empty(), "{path} published with {left:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_volume_held_out_for_a_cause_that_went_comes_back_on_an_idle_node() {
    let (cp, ns, mut agent) = plane_with_agent(
        Options {
            controller_manager: true,
            ..Default::default()
        },
        "attack-retry",
        &[(CLASS, "Delete"), (CLEANED, "Delete")],
        &["node-1"],
        &[(CLASS, "disks", ""), (CLEANED, "cleaned", "")],
    )
    .await;
    let client = cp.client();
    let reaper = cp.reaper();
    let hosts = cp.dir.join("hosts/node-1");
    // The cleaner fails while its flag file exists.
    let flag = hosts.join("cleaner-fails");
    let script = hosts.join("cleaner.sh");
    fs::write(
        &script,
        format!("#!/bin/sh\n! test -e {}\n", flag.display()),
    )
    .unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    let config = fs::read_to_string(&agent.config).unwrap().replace(
        &format!("    mountDir: {}\n", hosts.join("cleaned").display()),
        &format!(
            "    mountDir: {}\n    fsCleanerCommand:\n      - {}\n",
            hosts.join("cleaned").display(),
            script.display()
        ),
    );
    fs::write(&agent.config, config).unwrap();

    let mounted = agent.disk("vol-mount");
    let immutable = agent.disk("vol-immutable");
    let cleaned = hosts.join("cleaned/vol-cleaner");
    let _m1 = Mount::tmpfs(&mounted, "16M", reaper);
    let device = LoopDevice::new(&hosts.join("immutable.img"), 64, Some("ext4"), reaper);
    let _m2 = Mount::device(&device.device, &immutable, reaper);
    let _m3 = Mount::tmpfs(&cleaned, "16M", reaper);
    agent.start(&cp);
    agent.wait_ready().await;
    let mut pvs = Vec::new();
    for (i, (vol, class)) in [(&mounted, CLASS), (&immutable, CLASS), (&cleaned, CLEANED)]
        .into_iter()
        .enumerate()
    {
        let pv = pv_at(&client, "node-1", vol, "Available", Duration::from_secs(60)).await;
        claim_pv(&client, &ns, &format!("c{i}"), &pv, class, "1Mi").await;
        fs::write(vol.join("tenant.txt"), "tenant data").unwrap();
        pvs.push(pv);
    }

    // The causes, then the releases: each wipe is held out with its own Event.
    let host_data = hosts.join("host-data");
    fs::create_dir_all(&host_data).unwrap();
    fs::write(host_data.join("host.txt"), "the host's file").unwrap();
    let inner = Mount::bind(&host_data, &mounted.join("inner"), reaper);
    run(
        "chattr",
        &["+i", &immutable.join("tenant.txt").display().to_string()],
    );
    fs::write(&flag, "").unwrap();
    for i in 0..3 {
        release(&client, &ns, &format!("c{i}")).await;
    }
    wait_event(
        &client,
        name(&pvs[0]),
        "WipeIncomplete",
        Duration::from_secs(45),
    )
    .await;
    wait_event(
        &client,
        name(&pvs[1]),
        "WipeFailed",
        Duration::from_secs(45),
    )
    .await;
    wait_event(
        &client,
        name(&pvs[2]),
        "WipeFailed",
        Duration::from_secs(45),
    )
    .await;

    // Each cause goes; nothing else happens on the node.
    inner.unmount();
    run(
        "chattr",
        &["-i", &immutable.join("tenant.txt").display().to_string()],
    );
    fs::remove_file(&flag).unwrap();
    for (pv, vol) in pvs.iter().zip([&mounted, &immutable, &cleaned]) {
        comes_back_empty(&cp, vol, pv, || agent.log()).await;
    }
    assert!(
        host_data.join("host.txt").exists(),
        "the host's file under the mount survives"
    );
    agent.process.take();
}
