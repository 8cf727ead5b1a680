//! Issue 39 points 0b and 0c as attacks on real agent processes: two agents on one state directory (a DaemonSet
//! update with `maxSurge`) in every order of start and stop, a state directory inside or around a discovery
//! directory, and a ledger that vanished while PVs of the node exist. Each ends with what the lost ledger would have
//! leaked: a disk that served a claim while no agent ran must be wiped before it is published again.

use std::fs;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolume;
use kube::api::{Api, DeleteParams};

use crate::node_agent::{
    claim_pv, fresh_pv_at, one_class_plane, phase, pv_at, pvs_of, release, wait_event,
};
use crate::support::agent::Agent;
use crate::support::cluster::ControlPlane;
use crate::support::disks::Mount;
use crate::support::eventually;

const CLASS: &str = "local-storage";

/// Waits until `agent` answers `/readyz` with 503 and a body naming the state directory lock.
async fn waits_for_the_lock(agent: &mut Agent) {
    let waiting = "waiting for the state directory lock";
    eventually(
        "the second agent to say it waits for the state directory lock",
        Duration::from_secs(30),
        || {
            let running = agent.process.as_mut().is_some_and(|p| p.running());
            assert!(running, "the second agent exited:\n{}", agent.log());
            let answer = agent.get("/readyz");
            async move {
                match answer {
                    Some((503, body)) if body.contains(waiting) => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            }
        },
    )
    .await;
}

fn uid(pv: &PersistentVolume) -> String {
    pv.metadata.uid.clone().unwrap_or_default()
}

/// A claim lifetime on `pv` while no agent runs: bound, written to, released, and the PV deleted by hand.
async fn used_while_no_agent_runs(cp: &ControlPlane, ns: &str, pv: &PersistentVolume, vol: &Path) {
    let client = cp.client();
    claim_pv(&client, ns, "while-down", pv, CLASS, "1Mi").await;
    fs::write(vol.join("tenant.txt"), "the last tenant's data").unwrap();
    release(&client, ns, "while-down").await;
    let name = pv.metadata.name.as_deref().expect("name");
    Api::<PersistentVolume>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await
        .expect("PV deleted by hand");
    eventually("the PV to be gone", Duration::from_secs(30), || async {
        let pvs = pvs_of(&client, "node-1").await;
        match pvs
            .values()
            .find(|p| p.metadata.name.as_deref() == Some(name))
        {
            Some(pv) => Err(phase(pv)),
            None => Ok(()),
        }
    })
    .await;
}

/// Waits for a PV at `vol` other than `old`, Available, and asserts it was wiped before it was published.
async fn published_again_empty(
    cp: &ControlPlane,
    vol: &Path,
    old: &PersistentVolume,
    log: impl Fn() -> String,
) {
    fresh_pv_at(&cp.client(), vol, old, Duration::from_secs(90)).await;
    assert!(
        !vol.join("tenant.txt").exists(),
        "{} was published again with the last tenant's file:\n{}",
        vol.display(),
        log()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn two_agents_on_one_state_dir_take_turns_and_keep_the_ledger() {
    let (cp, ns, mut first) = one_class_plane("attack-state-twins").await;
    let client = cp.client();
    let reaper = cp.reaper();
    let (vol1, vol2, vol3) = (first.disk("vol1"), first.disk("vol2"), first.disk("vol3"));
    let _m1 = Mount::tmpfs(&vol1, "16M", reaper);
    first.start(&cp);
    first.wait_ready().await;
    pv_at(
        &client,
        "node-1",
        &vol1,
        "Available",
        Duration::from_secs(60),
    )
    .await;

    // The second starts while the first runs, and stops while it waits: the first goes on, its ledger untouched.
    let mut second = first.twin("second");
    second.start(&cp);
    waits_for_the_lock(&mut second).await;
    second
        .process
        .take()
        .expect("running")
        .stop(Duration::from_secs(10));
    let _m2 = Mount::tmpfs(&vol2, "16M", reaper);
    pv_at(
        &client,
        "node-1",
        &vol2,
        "Available",
        Duration::from_secs(60),
    )
    .await;

    // The second starts again and the first dies at once (SIGKILL): the kernel drops the lock, the second takes
    // over and publishes what appears next.
    second.start(&cp);
    waits_for_the_lock(&mut second).await;
    first.process.take().expect("running").kill();
    second.wait_ready().await;
    let _m3 = Mount::tmpfs(&vol3, "16M", reaper);
    let pv3 = pv_at(
        &client,
        "node-1",
        &vol3,
        "Available",
        Duration::from_secs(60),
    )
    .await;

    // A third waits for the second; the second stops gracefully (its ledger written back whole under the lock);
    // the third takes over with the second's records.
    let mut third = first.twin("third");
    third.start(&cp);
    waits_for_the_lock(&mut third).await;
    second
        .process
        .take()
        .expect("running")
        .stop(Duration::from_secs(30));
    third.wait_ready().await;
    third
        .process
        .take()
        .expect("running")
        .stop(Duration::from_secs(30));

    // vol3 was published by the second agent only. It serves a claim while no agent runs; a fresh agent must
    // know it was published and wipe it before publishing it again.
    used_while_no_agent_runs(&cp, &ns, &pv3, &vol3).await;
    first.start(&cp);
    first.wait_ready().await;
    published_again_empty(&cp, &vol3, &pv3, || first.log()).await;
    first.process.take();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_state_dir_nested_with_a_discovery_dir_is_refused_at_start() {
    let (cp, _ns, mut agent) = one_class_plane("attack-state-nested").await;
    let disks = agent.disks_dir.clone();
    let _m1 = Mount::tmpfs(&disks.join("vol1"), "16M", cp.reaper());
    for (state, what) in [
        (disks.join("vol1/state"), "inside a published disk"),
        (disks.join("state"), "inside the discovery directory"),
        (
            disks.parent().expect("parent").to_path_buf(),
            "around the discovery directory",
        ),
    ] {
        agent.set_state_dir(&state);
        agent.start(&cp);
        let process = agent.process.as_mut().expect("started");
        eventually(
            &format!("the agent to refuse a state dir {what}"),
            Duration::from_secs(30),
            || {
                let running = process.running();
                async move {
                    if running {
                        Err("still running".to_string())
                    } else {
                        Ok(())
                    }
                }
            },
        )
        .await;
        let log = agent.log();
        assert!(
            log.contains("--state-dir")
                && log.contains(&format!("storageClassMap.{CLASS}.hostDir")),
            "the refusal names the key and the state directory ({what}):\n{log}"
        );
        assert!(
            log.contains(&state.display().to_string())
                && log.contains(&disks.display().to_string()),
            "the refusal names both directories ({what}):\n{log}"
        );
        agent.process.take();
    }
    let pvs = pvs_of(&cp.client(), "node-1").await;
    assert!(pvs.is_empty(), "nothing was published: {:?}", pvs.keys());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lost_ledger_never_publishes_a_disk_with_data_unwiped() {
    let (cp, ns, mut agent) = one_class_plane("attack-state-lost").await;
    let client = cp.client();
    let (vol1, vol2) = (agent.disk("vol1"), agent.disk("vol2"));
    let _m1 = Mount::tmpfs(&vol1, "16M", cp.reaper());
    let _m2 = Mount::tmpfs(&vol2, "16M", cp.reaper());
    agent.start(&cp);
    agent.wait_ready().await;
    let pv1 = pv_at(
        &client,
        "node-1",
        &vol1,
        "Available",
        Duration::from_secs(60),
    )
    .await;
    let pv2 = pv_at(
        &client,
        "node-1",
        &vol2,
        "Available",
        Duration::from_secs(60),
    )
    .await;
    agent
        .process
        .take()
        .expect("running")
        .stop(Duration::from_secs(30));

    // While no agent runs: a claim lifetime on vol1, then the state directory is emptied.
    used_while_no_agent_runs(&cp, &ns, &pv1, &vol1).await;
    fs::remove_dir_all(agent.state_dir()).expect("state directory removed");

    agent.start(&cp);
    let message = wait_event(&client, "node-1", "LedgerMissing", Duration::from_secs(60)).await;
    assert!(message.contains("no disk ledger"), "{message}");
    published_again_empty(&cp, &vol1, &pv1, || agent.log()).await;
    let kept = pvs_of(&client, "node-1").await;
    assert_eq!(
        kept.get(&vol2.display().to_string()).map(uid),
        Some(uid(&pv2)),
        "the PV that still exists is kept as it is"
    );
    agent.process.take();
}
