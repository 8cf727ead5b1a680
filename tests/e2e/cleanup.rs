//! Clean-up after deleted nodes, by the extender replica holding the Lease: a node gone past the grace period
//! loses its Available PVs and LocalDisks, claims bound to its PVs are told with an Event, bound PVs stay; a node
//! re-created within the grace period keeps everything.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, DeleteParams, PostParams};
use localpv::inventory::{LocalDisk, LocalDiskSpec};
use serde_json::json;

use crate::node_agent::{local_storage_class, obj, phase, wait_event};
use crate::support::agent::{install_crd, localpv_bin};
use crate::support::cluster::{ControlPlane, Options, free_port};
use crate::support::eventually;
use crate::support::nodes::create_node;
use crate::support::objects::Pv;
use crate::support::proc::Component;

fn pv(name: &str, node: &str) -> PersistentVolume {
    let pv = Pv::local(name, node).label("localpv.io/node", node);
    pv.provisioned_by(&format!("localpv-{node}")).build()
}

#[tokio::test(flavor = "multi_thread")]
async fn deleted_nodes_lose_free_pvs_and_disks_after_the_grace_period_and_recreated_ones_keep_them()
{
    let cp = ControlPlane::start(Options {
        controller_manager: true,
        ..Default::default()
    })
    .await;
    let client = cp.client();
    let ns = cp.namespace("cleanup").await;
    install_crd(&cp).await;
    local_storage_class(&client, "local-storage", "Delete").await;
    for n in ["gone", "back"] {
        create_node(&client, n, &[]).await;
    }
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    for (name, node) in [
        ("gone-free", "gone"),
        ("gone-used", "gone"),
        ("back-free", "back"),
    ] {
        pvs.create(&PostParams::default(), &pv(name, node))
            .await
            .expect("PV created");
    }
    let disks: Api<LocalDisk> = Api::all(client.clone());
    let spec = LocalDiskSpec {
        node: "gone".into(),
        path: "/mnt/disks/gone-free".into(),
        ..Default::default()
    };
    let mut disk = LocalDisk::new("gone-disk", spec);
    disk.metadata.labels = Some([("localpv.io/node".to_string(), "gone".to_string())].into());
    disks
        .create(&PostParams::default(), &disk)
        .await
        .expect("LocalDisk created");
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let claim: PersistentVolumeClaim = obj(json!({"metadata": {"name": "data"}, "spec": {
        "accessModes": ["ReadWriteOnce"], "storageClassName": "local-storage", "volumeName": "gone-used",
        "resources": {"requests": {"storage": "1Gi"}}}}));
    pvcs.create(&PostParams::default(), &claim)
        .await
        .expect("PVC created");
    eventually("gone-used to be Bound", Duration::from_secs(45), || async {
        let p = phase(&pvs.get("gone-used").await.map_err(|e| e.to_string())?);
        if p == "Bound" { Ok(()) } else { Err(p) }
    })
    .await;

    let port = free_port();
    let args: Vec<String> = vec![
        "extender".into(),
        format!("--listen=127.0.0.1:{port}"),
        "--node-cleanup-grace=8s".into(),
        "--lease-namespace=default".into(),
        "--identity=extender-test".into(),
    ];
    let kubeconfig = cp.admin_kubeconfig.display().to_string();
    let _extender = Component::spawn_with_env(
        "localpv-extender",
        &localpv_bin(),
        &args,
        &[("KUBECONFIG", kubeconfig.as_str())],
        &cp.log_dir(),
        cp.reaper(),
    );

    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .delete("gone", &DeleteParams::default())
        .await
        .expect("node deleted");
    nodes
        .delete("back", &DeleteParams::default())
        .await
        .expect("node deleted");
    tokio::time::sleep(Duration::from_secs(2)).await;
    create_node(&client, "back", &[]).await;

    eventually(
        "gone's free PV and LocalDisk to be removed",
        Duration::from_secs(60),
        || async {
            let free = pvs.get_opt("gone-free").await.map_err(|e| e.to_string())?;
            let disk = disks
                .get_opt("gone-disk")
                .await
                .map_err(|e| e.to_string())?;
            if free.is_none() && disk.is_none() {
                Ok(())
            } else {
                Err(format!("pv {} disk {}", free.is_some(), disk.is_some()))
            }
        },
    )
    .await;
    wait_event(&client, "data", "NodeDeleted", Duration::from_secs(30)).await;
    assert_eq!(
        phase(&pvs.get("gone-used").await.expect("bound PV kept")),
        "Bound",
        "a bound PV stays bound"
    );
    assert!(
        pvcs.get_opt("data").await.expect("get").is_some(),
        "claims are not deleted unless opted in"
    );
    assert!(
        pvs.get_opt("back-free").await.expect("get").is_some(),
        "a node re-created in time keeps its PVs"
    );
}
