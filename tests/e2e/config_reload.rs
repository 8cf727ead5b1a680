//! Configuration on a live agent: `--check-config` names the key and the problem; a broken config written while
//! the agent runs is rejected (Event on the Node, log line, metric) and the agent keeps serving on the last good
//! one; a valid change (a new class) is picked up without a restart.

use std::fs;
use std::process::Command;
use std::time::Duration;

use crate::node_agent::{local_storage_class, pvs_of, wait_event, wait_pvs};
use crate::support::agent::{Agent, install_crd, localpv_bin};
use crate::support::cluster::{ControlPlane, Options};
use crate::support::disks::Mount;
use crate::support::eventually;
use crate::support::nodes::create_node;

#[test]
fn check_config_names_the_key_and_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.yaml");
    fs::write(
        &good,
        "storageClassMap:\n  fast:\n    hostDir: /mnt/fast\n    volumeMode: Block\n",
    )
    .unwrap();
    let out = Command::new(localpv_bin())
        .args(["node", "--check-config", "--config"])
        .arg(&good)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let bad = dir.path().join("bad.yaml");
    fs::write(
        &bad,
        "storageClassMap:\n  fast:\n    hostDir: /mnt/fast\n    volumeMode: Blok\n",
    )
    .unwrap();
    let out = Command::new(localpv_bin())
        .args(["node", "--check-config", "--config"])
        .arg(&bad)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("storageClassMap.fast.volumeMode") && err.contains("Blok"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_broken_config_is_rejected_and_a_valid_change_is_picked_up_while_running() {
    let cp = ControlPlane::start(Options::default()).await;
    let client = cp.client();
    install_crd(&cp).await;
    local_storage_class(&client, "local-storage", "Delete").await;
    local_storage_class(&client, "fast-storage", "Delete").await;
    create_node(&client, "node-1", &[]).await;
    let mut agent = Agent::new(&cp, "node-1", "local-storage");
    let _m1 = Mount::tmpfs(&agent.disk("vol1"), "1G", cp.reaper());
    agent.start(&cp);
    agent.wait_ready().await;
    let vol1 = agent.disk("vol1").display().to_string();
    wait_pvs(&client, "node-1", std::slice::from_ref(&vol1), "Pending").await;

    // Broken: rejected with an Event on the Node and a metric; the agent stays ready on the old config.
    let good = fs::read_to_string(&agent.config).unwrap();
    fs::write(
        &agent.config,
        "storageClassMap:\n  local-storage:\n    volumeMode: Blok\n",
    )
    .unwrap();
    wait_event(&client, "node-1", "ConfigRejected", Duration::from_secs(30)).await;
    let (_, metrics) = agent.get("/metrics").expect("metrics served");
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("localpv_node_config_reloads_total{outcome=\"Error\"} 1")),
        "{metrics}"
    );
    assert!(
        matches!(agent.get("/readyz"), Some((200, _))),
        "still ready on the last good config"
    );
    assert!(
        agent.log().contains("new configuration rejected"),
        "{}",
        agent.log()
    );

    // Valid again, with a second class: its disk is published without a restart.
    let fast_dir = cp.dir.join("hosts/node-1/fast");
    fs::create_dir_all(&fast_dir).unwrap();
    let _m2 = Mount::tmpfs(&fast_dir.join("nvme0"), "1G", cp.reaper());
    let d = fast_dir.display();
    fs::write(
        &agent.config,
        format!("{good}  fast-storage:\n    hostDir: {d}\n    mountDir: {d}\n"),
    )
    .unwrap();
    let nvme = fast_dir.join("nvme0").display().to_string();
    eventually(
        "the new class's disk to get a PV",
        Duration::from_secs(30),
        || async {
            let pvs = pvs_of(&client, "node-1").await;
            if pvs.contains_key(&nvme) && pvs.contains_key(&vol1) {
                Ok(())
            } else {
                Err(format!("{:?}", pvs.keys()))
            }
        },
    )
    .await;
}
