//! The core job without the inventory: with no LocalDisk CRD installed the agent still turns ready and publishes
//! PVs, says once why the inventory is off (log, Node Event, metric, `/readyz`), and starts the inventory as soon
//! as the CRD is applied.

use std::time::Duration;

use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams};
use localpv::inventory::LocalDisk;

use crate::node_agent::{local_storage_class, wait_pvs};
use crate::support::agent::{Agent, install_crd};
use crate::support::cluster::{ControlPlane, Options};
use crate::support::disks::Mount;
use crate::support::eventually;
use crate::support::nodes::create_node;

#[tokio::test(flavor = "multi_thread")]
async fn the_agent_publishes_without_the_crd_and_starts_the_inventory_when_it_appears() {
    let cp = ControlPlane::start(Options::default()).await;
    let client = cp.client();
    local_storage_class(&client, "local-storage", "Delete").await;
    create_node(&client, "node-1", &[]).await;
    let mut agent = Agent::new(&cp, "node-1", "local-storage");
    let _m1 = Mount::tmpfs(&agent.disk("vol1"), "64M", cp.reaper());
    agent.start(&cp);
    agent.wait_ready().await;
    let vol1 = agent.disk("vol1").display().to_string();
    wait_pvs(&client, "node-1", std::slice::from_ref(&vol1), "Pending").await;

    let (status, readyz) = agent.get("/readyz").expect("readyz answered");
    assert_eq!(status, 200, "{readyz}");
    assert!(
        readyz.contains("LocalDisk CRD is not installed"),
        "{readyz}"
    );
    let (_, metrics) = agent.get("/metrics").expect("metrics answered");
    assert!(
        metrics
            .lines()
            .any(|l| l == "localpv_node_inventory_available 0"),
        "{metrics}"
    );
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let reasons = || async {
        let list = events
            .list(&ListParams::default().fields("involvedObject.name=node-1"))
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>(
            list.items
                .iter()
                .filter(|e| e.reason.as_deref() == Some("InventoryUnavailable"))
                .count(),
        )
    };
    eventually(
        "one InventoryUnavailable Event on the Node",
        Duration::from_secs(20),
        || async {
            match reasons().await? {
                0 => Err("none yet".to_string()),
                n => Ok(n),
            }
        },
    )
    .await;
    let said = agent
        .log()
        .matches("LocalDisk CRD is not installed")
        .count();
    assert_eq!(said, 1, "said once, not per pass:\n{}", agent.log());

    install_crd(&cp).await;
    let disks: Api<LocalDisk> = Api::all(client.clone());
    eventually("the LocalDisk of vol1", Duration::from_secs(40), || async {
        let list = disks
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        match list.items.len() {
            0 => Err("no LocalDisk yet".to_string()),
            n => Ok(n),
        }
    })
    .await;
    eventually(
        "the inventory reported as available",
        Duration::from_secs(20),
        || async {
            let (_, metrics) = agent.get("/metrics").ok_or("no answer")?;
            let (_, readyz) = agent.get("/readyz").ok_or("no answer")?;
            if metrics
                .lines()
                .any(|l| l == "localpv_node_inventory_available 1")
                && !readyz.contains("CRD")
            {
                Ok(())
            } else {
                Err(readyz)
            }
        },
    )
    .await;
    assert_eq!(
        reasons().await.expect("events listed"),
        1,
        "the Event is published once"
    );
}
