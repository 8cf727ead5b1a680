//! A Node deleted and re-created under its name (issue 37, point 3: cloud providers reuse names for new machines):
//! the replica whose PV was made on the old machine is recovered only with `--recover-replaced-nodes-after`, and
//! never while the node's agent finds the PV's disk again (the same machine re-registered: its agent moves the PV's
//! `localpv.io/node-uid` to the new Node's UID). A real agent plays the machine that comes back; the other machine
//! is new and has no agent yet.

use k8s_openapi::api::core::v1::{Node, PersistentVolume};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

use crate::node_agent::pv_at;
use crate::recovery::{CLASS, Scene, WAIT, extender, passes, plane, statefulset};
use crate::support::agent::Agent;
use crate::support::disks::Mount;
use crate::support::eventually;
use crate::support::nodes::create_node;

const ANN_NODE_UID: &str = "localpv.io/node-uid";

async fn pv_node_uid(client: &kube::Client, pv: &str) -> Option<String> {
    let pv = Api::<PersistentVolume>::all(client.clone())
        .get(pv)
        .await
        .expect("PV read");
    pv.metadata.annotations?.get(ANN_NODE_UID).cloned()
}

/// Deletes Node `name`, waits until it is gone, and creates it again: returns the new UID.
async fn re_create(client: &kube::Client, name: &str) -> String {
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .delete(name, &DeleteParams::default())
        .await
        .expect("node deleted");
    eventually(&format!("node {name} gone"), WAIT, || async {
        match nodes.get_opt(name).await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(n) => Err(format!("{:?}", n.metadata.uid)),
        }
    })
    .await;
    let node = create_node(client, name, &[]).await;
    node.metadata.uid.expect("a created node has a UID")
}

/// A one-replica set `web` in a namespace of its own, its claim bound to PV `pv`.
async fn replica_on(cp: &crate::support::cluster::ControlPlane, prefix: &str, pv: &str) -> Scene {
    let client = cp.client();
    let s = Scene {
        client: client.clone(),
        ns: cp.namespace(prefix).await,
    };
    statefulset(&client, &s.ns, 1, None).await;
    s.replica(0, pv).await;
    s
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_re_created_under_its_name_loses_its_replicas_volume_only_when_opted_in_and_never_while_its_agent_finds_the_disk()
 {
    let cp = plane(Some("on")).await;
    let client = cp.client();
    let pvs: Api<PersistentVolume> = Api::all(client.clone());

    // node-new: a machine about to be replaced; its PV records the UID of the Node it was made on.
    let old_uid = create_node(&client, "node-new", &[]).await.metadata.uid;
    let lost = Scene {
        client: client.clone(),
        ns: cp.namespace("new").await,
    };
    statefulset(&client, &lost.ns, 1, None).await;
    let lost_pv = format!("rec-{}", lost.ns);
    lost.volume(&lost_pv, "node-new", Some("data-web-0"), "disk-new")
        .await;
    let record = json!({"metadata": {"annotations": {ANN_NODE_UID: old_uid}}});
    pvs.patch(&lost_pv, &PatchParams::default(), &Patch::Merge(&record))
        .await
        .expect("PV annotated");
    lost.replica(0, &lost_pv).await;

    // node-1: a machine that comes back; its agent published the PV with its Node's UID.
    let node1_uid = create_node(&client, "node-1", &[]).await.metadata.uid;
    let mut agent = Agent::new(&cp, "node-1", CLASS);
    let _disk = Mount::tmpfs(&agent.disk("vol1"), "2G", cp.reaper());
    agent.start(&cp);
    let kept_pv = pv_at(&client, "node-1", &agent.disk("vol1"), "Available", WAIT).await;
    let kept_pv = kept_pv.metadata.name.expect("named");
    assert_eq!(
        pv_node_uid(&client, &kept_pv).await,
        node1_uid,
        "a new PV records its Node's UID"
    );
    let kept = replica_on(&cp, "kept", &kept_pv).await;
    let kept_pod = kept.uid(&kept.pods(), "web-0").await;
    let lost_pod = lost.uid(&lost.pods(), "web-0").await;

    let new_uid = re_create(&client, "node-new").await;
    let node1_new_uid = re_create(&client, "node-1").await;
    assert_ne!(Some(new_uid.clone()), old_uid, "a new object");
    eventually(
        "node-1's agent moves its PV to the new UID",
        WAIT,
        || async {
            match pv_node_uid(&client, &kept_pv).await {
                Some(uid) if uid == node1_new_uid => Ok(()),
                other => Err(format!("{other:?}: {}", agent.log())),
            }
        },
    )
    .await;
    assert_eq!(
        pv_node_uid(&client, &lost_pv).await,
        old_uid,
        "no agent on the new machine: the PV still names the old Node"
    );

    // Recovery on with every other node signal, but not this one: nothing moves.
    let without = extender(
        &cp,
        &[
            "--recovery=true",
            "--recovery-interval=1s",
            "--recover-out-of-service=true",
            "--recover-not-ready-after=1s",
        ],
    );
    passes().await;
    lost.assert_no_recovery_events("without the flag").await;
    assert_eq!(lost.uid(&lost.pods(), "web-0").await, lost_pod);
    drop(without);

    // Opted in: the replica on the replaced machine is recovered; the one whose disk was found again is not.
    let _with = extender(
        &cp,
        &[
            "--recovery=true",
            "--recovery-interval=1s",
            "--recover-replaced-nodes-after=3s",
        ],
    );
    let done = lost
        .note("data-web-0", "ReplicaRecovered", "was re-created")
        .await;
    assert!(done.contains("deleting claim"), "{done}");
    assert!(done.contains(&new_uid), "{done}");
    lost.wait_pod_gone("web-0").await;
    let old = pvs.get(&lost_pv).await.expect("the old PV stays");
    assert!(
        old.metadata.deletion_timestamp.is_none(),
        "the old PV is never deleted by recovery"
    );
    passes().await;
    assert_eq!(
        kept.uid(&kept.pods(), "web-0").await,
        kept_pod,
        "the machine that came back keeps its replica"
    );
    kept.assert_no_recovery_events("a disk found again").await;
}
