//! What an agent and the extender cost the API server in connections (issue 34): each process speaks HTTP/2 and
//! carries every watch and request over one TLS connection, as client-go does, instead of one connection per open
//! watch (kube-client's HTTP/1.1). Counted from the kernel's socket table, not from our own metrics.

use std::collections::BTreeSet;
use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use crate::node_agent::{one_class_plane, plane_with_agent, pv_at};
use crate::support::agent::Agent;
use crate::support::cluster::{ControlPlane, Options};
use crate::support::disks::Mount;
use crate::support::eventually;
use crate::support::extender::ExtenderProcess;

/// The established TCP connections process `pid` holds to local port `port`.
pub fn connections_to(pid: u32, port: u16) -> Result<usize, String> {
    let mut inodes = BTreeSet::new();
    let fds = fs::read_dir(format!("/proc/{pid}/fd")).map_err(|e| format!("fds of {pid}: {e}"))?;
    for fd in fds.flatten() {
        let Ok(target) = fs::read_link(fd.path()) else {
            continue;
        };
        let target = target.display().to_string();
        if let Some(inode) = target
            .strip_prefix("socket:[")
            .and_then(|t| t.strip_suffix(']'))
        {
            inodes.insert(inode.to_string());
        }
    }
    let mut count = 0;
    for table in ["tcp", "tcp6"] {
        let text = fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let (Some(remote), Some(state), Some(inode)) = (cols.get(2), cols.get(3), cols.get(9))
            else {
                continue;
            };
            let remote_port = remote
                .rsplit(':')
                .next()
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            // NB: state 01 is TCP_ESTABLISHED.
            if *state == "01" && remote_port == Some(port) && inodes.contains(*inode) {
                count += 1;
            }
        }
    }
    Ok(count)
}

pub fn api_port(api_url: &str) -> u16 {
    api_url
        .rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches('/').parse().ok())
        .expect("the API server's URL ends with its port")
}

/// An agent with all its watches open (PVs, its Node; StorageClasses and LocalDisks are listed) and the extender with its own
/// (PVs, claims, classes, Nodes) and its Lease each hold exactly one connection to the API server, and still one a
/// few seconds later.
#[tokio::test(flavor = "multi_thread")]
async fn the_agent_and_the_extender_each_hold_one_connection_to_the_api_server() {
    let (cp, _ns, mut agent) = one_class_plane("conns").await;
    let port = api_port(&cp.api_url);
    agent.start(&cp);
    agent.wait_ready().await;
    let mut extender = ExtenderProcess::new(&cp);
    extender.start(&cp, Duration::from_secs(60)).await;
    let agent_pid = agent
        .process
        .as_ref()
        .and_then(|p| p.pid())
        .expect("agent pid");
    let extender_pid = extender.pid().expect("extender pid");
    // NB: requests racing at start-up may each open a connection; all but one close as soon as both speak HTTP/2.
    for (what, pid) in [("agent", agent_pid), ("extender", extender_pid)] {
        eventually(
            &format!("the {what} to hold one connection to the API server"),
            Duration::from_secs(20),
            || async move {
                match connections_to(pid, port)? {
                    1 => Ok(()),
                    n => Err(format!("{n} connections")),
                }
            },
        )
        .await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    for (what, pid) in [("agent", agent_pid), ("extender", extender_pid)] {
        assert_eq!(
            connections_to(pid, port),
            Ok(1),
            "the {what} opened another connection while running"
        );
    }
    extender.stop(Duration::from_secs(5));
}

/// A plane with the PV controller and the API server's feature gates `gates`, StorageClasses `policies`, and
/// node-1's agent over class `class` with one tmpfs disk `vol1`, started and ready.
async fn one_disk_agent(
    gates: Vec<String>,
    ns: &str,
    policies: &[(&str, &str)],
    class: &str,
) -> (ControlPlane, Agent, PathBuf, Mount) {
    let (cp, _ns, mut agent) = plane_with_agent(
        Options {
            controller_manager: true,
            api_feature_gates: gates,
            ..Options::default()
        },
        ns,
        policies,
        &["node-1"],
        &[(class, "disks", "")],
    )
    .await;
    let vol = agent.disk("vol1");
    let mount = Mount::tmpfs(&vol, "16M", cp.reaper());
    agent.start(&cp);
    agent.wait_ready().await;
    (cp, agent, vol, mount)
}

/// Streaming lists where the API server serves them, and lists where it does not: with the WatchList feature turned
/// off (it refuses `sendInitialEvents`), the agent and the extender say so once per watch, list and watch instead,
/// and work as before: the agent publishes its disk and is ready, the extender is ready.
#[tokio::test(flavor = "multi_thread")]
async fn without_streaming_lists_the_agent_and_the_extender_list_and_watch_as_before() {
    let (cp, agent, vol, _mount) = one_disk_agent(
        vec!["WatchList=false".into()],
        "nostream",
        &[("local-storage", "Delete")],
        "local-storage",
    )
    .await;
    let client = cp.client();
    pv_at(
        &client,
        "node-1",
        &vol,
        "Available",
        Duration::from_secs(30),
    )
    .await;
    let mut extender = ExtenderProcess::new(&cp);
    extender.start(&cp, Duration::from_secs(60)).await;
    let refused = "refuses streaming lists";
    assert!(agent.log().contains(refused), "{}", agent.log());
    assert!(extender.log().contains(refused), "{}", extender.log());
    extender.stop(Duration::from_secs(5));
}

/// StorageClasses are listed now and then, not watched (issue 34: one watch fewer per agent). A class the
/// configuration names but which does not exist yet is looked for every 10 s: created after the agent started, it
/// is seen without a restart and the waiting disk is published with the class's reclaim policy.
#[tokio::test(flavor = "multi_thread")]
async fn a_storage_class_created_after_the_agent_started_is_found_without_a_watch() {
    let (cp, _agent, vol, _mount) =
        one_disk_agent(Vec::new(), "lateclass", &[], "late-class").await;
    let client = cp.client();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = crate::node_agent::pvs_of(&client, "node-1").await;
    assert!(before.is_empty(), "no PV without its class: {before:?}");
    crate::node_agent::local_storage_class(&client, "late-class", "Retain").await;
    let pv = pv_at(
        &client,
        "node-1",
        &vol,
        "Available",
        Duration::from_secs(60),
    )
    .await;
    let spec = pv.spec.unwrap_or_default();
    assert_eq!(
        spec.persistent_volume_reclaim_policy.as_deref(),
        Some("Retain")
    );
}

/// LocalDisks are listed, not watched (issue 34: two watches per agent). An annotation set on a LocalDisk by hand is
/// seen at the agent's next list (`minResyncPeriod`, 20 s here); `localpv disks uncordon` marks the Node the agent
/// watches (`localpv.io/disks-changed`), so the agent lists them at once and publishes the disk again.
#[tokio::test(flavor = "multi_thread")]
async fn local_disks_are_listed_a_hand_made_cordon_is_seen_at_the_next_list_and_the_clis_at_once() {
    use kube::api::{Api, ListParams, Patch, PatchParams};
    use localpv::inventory::LocalDisk;

    let (cp, _ns, mut agent) = crate::node_agent::one_class_plane("ldpoll").await;
    crate::failure::configure(&agent, "minResyncPeriod: 20s\n");
    let vol = agent.disk("vol1");
    let _mount = Mount::tmpfs(&vol, "16M", cp.reaper());
    agent.start(&cp);
    agent.wait_ready().await;
    let client = cp.client();
    let published = || {
        pv_at(
            &client,
            "node-1",
            &vol,
            "Available",
            Duration::from_secs(60),
        )
    };
    published().await;
    let disks: Api<LocalDisk> = Api::all(client.clone());
    let mut name = None;
    for _ in 0..300 {
        name = disks
            .list(&ListParams::default())
            .await
            .expect("LocalDisks")
            .items
            .into_iter()
            .find(|d| d.spec.path == vol.display().to_string())
            .and_then(|d| d.metadata.name);
        if name.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let name = name.unwrap_or_else(|| panic!("no LocalDisk for the disk: {}", agent.log()));
    let cordon = serde_json::json!({"metadata": {"annotations": {"localpv.io/cordoned": "true"}}});
    disks
        .patch(&name, &PatchParams::default(), &Patch::Merge(&cordon))
        .await
        .expect("cordoned by hand");
    eventually(
        "the hand-made cordon to withdraw the PV",
        Duration::from_secs(60),
        || async {
            match crate::node_agent::pvs_of(&client, "node-1")
                .await
                .get(&vol.display().to_string())
            {
                None => Ok(()),
                Some(pv) => Err(format!("{:?} still there", pv.metadata.name)),
            }
        },
    )
    .await;
    let said = crate::failure::disks_cli(&cp, "uncordon", "node-1/vol1");
    assert!(said.starts_with("uncordoned "), "{said}");
    assert!(!said.contains("could not mark"), "{said}");
    let again = std::time::Instant::now();
    published().await;
    assert!(
        again.elapsed() < Duration::from_secs(15),
        "the CLI's mark should list at once, not at the 20 s list: {}",
        agent.log()
    );
    agent.process.take();
}

/// A restart starts from what the clean stop left (issue 34, part 6: `<stateDir>/api-cache.json`, the LocalDisks,
/// StorageClasses and the Node's mark) instead of listing them. A cordon made with `localpv disks` while the agent
/// is down marks the Node: the restarted agent sees a mark other than the one it left, lists its LocalDisks at once
/// and withdraws the disk's PV, rather than trusting the cache for a period. After a kill no cache is left.
#[tokio::test(flavor = "multi_thread")]
async fn a_cordon_made_while_the_agent_is_down_is_honoured_at_its_start_from_what_it_left() {
    let (cp, _ns, mut agent) = one_class_plane("warmstart").await;
    let vol = agent.disk("vol1");
    let _mount = Mount::tmpfs(&vol, "16M", cp.reaper());
    agent.start(&cp);
    agent.wait_ready().await;
    let client = cp.client();
    let pv = pv_at(
        &client,
        "node-1",
        &vol,
        "Available",
        Duration::from_secs(60),
    )
    .await;
    // The LocalDisk is written after the PV: wait for it, so the cache holds it.
    eventually("the LocalDisk", Duration::from_secs(30), || async {
        crate::failure::disk_says(&client, &vol).await.map(|_| ())
    })
    .await;
    agent
        .process
        .take()
        .expect("running")
        .stop(Duration::from_secs(10));
    let cache = agent.state_dir().join("api-cache.json");
    assert!(cache.exists(), "a clean stop leaves the cache");

    let said = crate::failure::disks_cli(&cp, "cordon", "node-1/vol1");
    assert!(!said.contains("could not mark"), "{said}");
    agent.start(&cp);
    agent.wait_ready().await;
    assert!(!cache.exists(), "taken at start");
    let name = pv.metadata.name.clone().expect("named");
    crate::node_agent::wait_event(&client, &name, "DiskCordoned", Duration::from_secs(20)).await;

    agent.process.as_mut().expect("running").kill();
    assert!(!cache.exists(), "a killed agent leaves none");
    agent.process.take();
}
