//! The clean-up shell: watches Nodes, our PVs and LocalDisks, and while this replica holds the Lease, plans and
//! applies clean-up every few seconds. Followers only keep their caches warm, so a new leader acts at once.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{Node, ObjectReference, PersistentVolume, PersistentVolumeClaim};
use kube::Client;
use kube::api::{Api, DeleteParams, Preconditions};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::watcher;
use tokio::sync::{Notify, watch as tokio_watch};
use tracing::{info, warn};

use super::lease::Elector;
use super::{Action, Inputs, Settings, plan};
use crate::agent::watch::{Store, run as watch_run};
use crate::inventory::LocalDisk;
use crate::plan::pv::NODE_LABEL;

const TICK: Duration = Duration::from_secs(5);
const LEASE: Duration = Duration::from_secs(15);

pub struct Cleanup {
    pub settings: Settings,
    pub lease_namespace: String,
    pub identity: String,
}

pub async fn run(client: Client, cfg: Cleanup, shutdown: tokio_watch::Receiver<bool>) {
    let changed = Arc::new(Notify::new());
    let nodes = Store::<Node>::new();
    let pvs = Store::<PersistentVolume>::new();
    let disks = Store::<LocalDisk>::new();
    let ours = watcher::Config::default().labels(NODE_LABEL);
    tokio::join!(
        watch_run(
            client.clone(),
            watcher::Config::default(),
            nodes.clone(),
            changed.clone(),
            shutdown.clone()
        ),
        watch_run(
            client.clone(),
            ours.clone(),
            pvs.clone(),
            changed.clone(),
            shutdown.clone()
        ),
        watch_run(
            client.clone(),
            ours,
            disks.clone(),
            changed.clone(),
            shutdown.clone()
        ),
        lead(client, cfg, nodes, pvs, disks, shutdown.clone()),
    );
}

async fn lead(
    client: Client,
    cfg: Cleanup,
    nodes: Arc<Store<Node>>,
    pvs: Arc<Store<PersistentVolume>>,
    disks: Arc<Store<LocalDisk>>,
    mut shutdown: tokio_watch::Receiver<bool>,
) {
    let elector = Elector::new(
        client.clone(),
        &cfg.lease_namespace,
        "localpv-cleanup",
        &cfg.identity,
        LEASE,
    );
    let reporter = Reporter {
        controller: "localpv-cleanup".into(),
        instance: Some(cfg.identity.clone()),
    };
    let recorder = Recorder::new(client.clone(), reporter);
    let mut leader = false;
    let mut gone_since = BTreeMap::new();
    let mut warned = BTreeSet::new();
    loop {
        match elector.try_acquire_or_renew().await {
            Ok(now_leader) if now_leader != leader => {
                info!(identity = %cfg.identity, leader = now_leader, "clean-up leadership changed");
                leader = now_leader;
            }
            Ok(_) => {}
            Err(error) => {
                warn!(%error, "failed to renew the clean-up lease; acting as follower");
                leader = false;
            }
        }
        if leader && nodes.synced() && pvs.synced() && disks.synced() {
            let names: BTreeSet<String> = nodes
                .all()
                .into_iter()
                .filter_map(|n| n.metadata.name)
                .collect();
            let disk_nodes: Vec<(String, String)> = disks
                .all()
                .into_iter()
                .filter_map(|d| Some((d.metadata.name.clone()?, d.spec.node.clone())))
                .collect();
            let all_pvs = pvs.all();
            let p = plan(&Inputs {
                nodes: &names,
                pvs: &all_pvs,
                disks: &disk_nodes,
                gone_since: &gone_since,
                warned: &warned,
                settings: &cfg.settings,
                now: SystemTime::now(),
            });
            for action in p.actions {
                execute(&client, &recorder, action).await;
            }
            gone_since = p.gone_since;
            warned = p.warned;
        }
        tokio::select! {
            _ = tokio::time::sleep(TICK) => {}
            _ = shutdown.changed() => return,
        }
    }
}

async fn execute(client: &Client, recorder: &Recorder, action: Action) {
    let result = match &action {
        Action::DeletePv(r) => {
            let pre = Preconditions {
                uid: Some(r.uid.clone()),
                resource_version: Some(r.resource_version.clone()),
            };
            let dp = DeleteParams {
                preconditions: Some(pre),
                ..Default::default()
            };
            Api::<PersistentVolume>::all(client.clone())
                .delete(&r.name, &dp)
                .await
                .map(drop)
        }
        Action::DeleteLocalDisk(name) => Api::<LocalDisk>::all(client.clone())
            .delete(name, &DeleteParams::default())
            .await
            .map(drop),
        Action::DeleteClaim {
            namespace,
            name,
            uid,
        } => {
            let pre = Preconditions {
                uid: uid.clone(),
                resource_version: None,
            };
            let dp = DeleteParams {
                preconditions: Some(pre),
                ..Default::default()
            };
            Api::<PersistentVolumeClaim>::namespaced(client.clone(), namespace)
                .delete(name, &dp)
                .await
                .map(drop)
        }
        Action::WarnClaim {
            namespace,
            name,
            uid,
            pv,
            node,
        } => {
            let reference = ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("PersistentVolumeClaim".into()),
                namespace: Some(namespace.clone()),
                name: Some(name.clone()),
                uid: uid.clone(),
                ..Default::default()
            };
            let ev = Event {
                type_: EventType::Warning,
                reason: "NodeDeleted".into(),
                note: Some(format!(
                    "node {node} holding local volume {pv} was deleted; the data is on that machine only"
                )),
                action: "NodeDeleted".into(),
                secondary: None,
            };
            recorder.publish(&ev, &reference).await
        }
    };
    match result {
        Ok(()) => info!(?action, "clean-up applied"),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
        Err(error) => warn!(?action, %error, "clean-up step failed; retried next pass"),
    }
}
