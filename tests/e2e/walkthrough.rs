//! The classic local-PV walkthrough (REFERENCE section 8), with hand-made PVs: proves the harness gives us the real
//! delayed-binding behaviour of kube-scheduler and the PV controller that everything else builds on.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::support::cluster::{ControlPlane, Options};
use crate::support::eventually;
use crate::support::nodes::create_node;
use crate::support::objects::Pv;

fn obj<T: DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v).expect("test object literal is valid")
}

/// A hand-made local PV as a static provisioner would create it.
///
/// NB: the `provisioned-by` annotation matters. With reclaim policy Delete and no such annotation, the PV controller
/// looks for an in-tree deleter, finds none for local volumes and marks the released PV `Failed`; with it, the
/// controller leaves the `Released` PV to the named (external) provisioner, which is what a node agent relies on.
fn local_pv(name: &str, node: &str, size: &str) -> PersistentVolume {
    let pv = Pv::local(name, node).capacity(size).path("/mnt/disks/vol1");
    pv.provisioned_by(&format!("local-volume-provisioner-{node}"))
        .build()
}

fn claim(name: &str, size: &str) -> PersistentVolumeClaim {
    obj(json!({
        "metadata": {"name": name},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "local-storage",
            "resources": {"requests": {"storage": size}},
        },
    }))
}

fn pod(name: &str, claim: &str, node: Option<&str>) -> Pod {
    let mut spec = json!({
        "containers": [{"name": "web", "image": "nginx", "volumeMounts": [
            {"name": "data", "mountPath": "/usr/share/nginx/html"}
        ]}],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
    });
    if let Some(n) = node {
        spec["nodeSelector"] = json!({"kubernetes.io/hostname": n});
    }
    obj(json!({"metadata": {"name": name}, "spec": spec}))
}

async fn pvc_state(api: &Api<PersistentVolumeClaim>, name: &str) -> (String, Option<String>) {
    let pvc = api.get(name).await.expect("PVC exists");
    let phase = pvc.status.and_then(|s| s.phase).unwrap_or_default();
    (phase, pvc.spec.and_then(|s| s.volume_name))
}

#[tokio::test(flavor = "multi_thread")]
async fn classic_walkthrough_binds_the_claim_on_the_node_the_pod_must_run_on() {
    let cp = ControlPlane::start(Options::full()).await;
    let client = cp.client();
    let ns = cp.namespace("walkthrough").await;

    let sc: StorageClass = obj(json!({
        "metadata": {"name": "local-storage"},
        "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "WaitForFirstConsumer",
    }));
    Api::<StorageClass>::all(client.clone())
        .create(&PostParams::default(), &sc)
        .await
        .expect("class created");
    create_node(&client, "node-1", &[]).await;
    create_node(&client, "node-2", &[]).await;
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    for (name, node) in [("example-pv-1", "node-1"), ("example-pv-2", "node-2")] {
        pvs.create(&PostParams::default(), &local_pv(name, node, "5Gi"))
            .await
            .expect("PV created");
    }

    // The claim stays Pending while no pod uses it: binding waits for the first consumer.
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    pvcs.create(&PostParams::default(), &claim("example-local-claim", "5Gi"))
        .await
        .expect("PVC created");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        pvc_state(&pvcs, "example-local-claim").await,
        ("Pending".to_string(), None)
    );

    // A pod restricted to node-2: the scheduler picks node-2 and its PV, the PV controller completes the binding.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    pods.create(
        &PostParams::default(),
        &pod("example-pv-pod", "example-local-claim", Some("node-2")),
    )
    .await
    .expect("pod created");
    eventually(
        "the PVC to bind to node-2's PV",
        Duration::from_secs(60),
        || async {
            match pvc_state(&pvcs, "example-local-claim").await {
                (phase, Some(pv)) if phase == "Bound" && pv == "example-pv-2" => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    eventually(
        "the pod to be bound to node-2",
        Duration::from_secs(60),
        || async {
            let p = pods
                .get("example-pv-pod")
                .await
                .map_err(|e| e.to_string())?;
            match p.spec.and_then(|s| s.node_name) {
                Some(n) if n == "node-2" => Ok(()),
                other => Err(format!("nodeName {other:?}")),
            }
        },
    )
    .await;

    // A 10Gi claim cannot be served by any 5Gi PV: the pod stays unscheduled with the binder's reason.
    pvcs.create(&PostParams::default(), &claim("big-claim", "10Gi"))
        .await
        .expect("PVC created");
    pods.create(&PostParams::default(), &pod("big-pod", "big-claim", None))
        .await
        .expect("pod created");
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let message = eventually(
        "a FailedScheduling event for big-pod",
        Duration::from_secs(60),
        || async {
            let list = events
                .list(
                    &ListParams::default()
                        .fields("involvedObject.name=big-pod,reason=FailedScheduling"),
                )
                .await
                .map_err(|e| e.to_string())?;
            list.items
                .into_iter()
                .find_map(|e| e.message)
                .ok_or_else(|| "no event yet".to_string())
        },
    )
    .await;
    assert!(
        message.contains("didn't find available persistent volumes to bind"),
        "unexpected FailedScheduling message: {message}"
    );
    let big = pods.get("big-pod").await.expect("pod exists");
    assert_eq!(
        big.spec.and_then(|s| s.node_name),
        None,
        "big-pod must stay unscheduled"
    );

    // Releasing: delete the pod (no kubelet, so grace period 0), then the claim; the PV becomes Released.
    pods.delete(
        "example-pv-pod",
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        },
    )
    .await
    .expect("pod deleted");
    pvcs.delete("example-local-claim", &DeleteParams::default())
        .await
        .expect("PVC deleted");
    eventually(
        "example-pv-2 to be Released",
        Duration::from_secs(60),
        || async {
            let pv = pvs.get("example-pv-2").await.map_err(|e| e.to_string())?;
            match pv.status.and_then(|s| s.phase) {
                Some(p) if p == "Released" => Ok(()),
                other => Err(format!("phase {other:?}")),
            }
        },
    )
    .await;
    let other = pvs.get("example-pv-1").await.expect("PV exists");
    assert_eq!(
        other.status.and_then(|s| s.phase).as_deref(),
        Some("Available"),
        "node-1's PV is untouched"
    );
}
