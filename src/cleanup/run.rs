//! The clean-up shell: watches Nodes, our PVs and LocalDisks, and while this replica holds the Lease, plans and
//! applies clean-up every few seconds. Followers only keep their caches warm, so a new leader acts at once.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{
    Node, ObjectReference, PersistentVolume, PersistentVolumeClaim, Pod,
};
use kube::Client;
use kube::api::{Api, DeleteParams, Preconditions};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::watcher;
use tokio::sync::{Notify, watch as tokio_watch};
use tracing::{info, warn};

use crate::logging::error_text;

use super::lease::Elector;
use super::{Action, Inputs, Settings, plan};
use crate::contract::NODE_LABEL;
use crate::extender::pending;
use crate::extender::server::Cache;
use crate::inventory::LocalDisk;
use crate::watch::{Store, run as watch_run};

const TICK: Duration = Duration::from_secs(5);
const LEASE: Duration = Duration::from_secs(15);

pub struct Cleanup {
    /// Clean up after deleted nodes.
    pub node_cleanup: bool,
    pub settings: Settings,
    /// Explain pending pods with our reasons (needs the extender's snapshot).
    pub explain_pending: Option<Arc<Cache>>,
    pub lease_namespace: String,
    pub identity: String,
}

/// A pod pending at least this long is looked at (the scheduler usually places a pod well within it).
const PENDING_AFTER: Duration = Duration::from_secs(5);

pub async fn run(client: Client, cfg: Cleanup, shutdown: tokio_watch::Receiver<bool>) {
    let changed = Arc::new(Notify::new());
    let st = Stores {
        nodes: Store::<Node>::new(),
        pvs: Store::<PersistentVolume>::new(),
        disks: Store::<LocalDisk>::new(),
        pods: Store::<Pod>::new(),
    };
    let ours = watcher::Config::default().labels(NODE_LABEL);
    let unscheduled = watcher::Config::default().fields("spec.nodeName=");
    let watch_pods = cfg.explain_pending.is_some();
    let (c, n, s) = (&client, &changed, &shutdown);
    tokio::join!(
        watch_run(
            c.clone(),
            watcher::Config::default(),
            st.nodes.clone(),
            n.clone(),
            s.clone()
        ),
        watch_run(
            c.clone(),
            ours.clone(),
            st.pvs.clone(),
            n.clone(),
            s.clone()
        ),
        watch_run(c.clone(), ours, st.disks.clone(), n.clone(), s.clone()),
        async {
            if watch_pods {
                watch_run(
                    c.clone(),
                    unscheduled,
                    st.pods.clone(),
                    n.clone(),
                    s.clone(),
                )
                .await;
            }
        },
        lead(c.clone(), cfg, st.clone(), s.clone()),
    );
}

#[derive(Clone)]
struct Stores {
    nodes: Arc<Store<Node>>,
    pvs: Arc<Store<PersistentVolume>>,
    disks: Arc<Store<LocalDisk>>,
    pods: Arc<Store<Pod>>,
}

async fn lead(client: Client, cfg: Cleanup, st: Stores, mut shutdown: tokio_watch::Receiver<bool>) {
    let Stores {
        nodes,
        pvs,
        disks,
        pods,
    } = st;
    // Pod UID -> the explanation already published for it.
    let mut explained: BTreeMap<String, String> = BTreeMap::new();
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
                warn!(error = %error_text(&error), "failed to renew the clean-up lease; acting as follower");
                leader = false;
            }
        }
        if let (true, Some(cache)) = (leader && pods.synced(), &cfg.explain_pending) {
            explain_pending(&recorder, cache, &pods.all(), &mut explained).await;
        }
        if cfg.node_cleanup && leader && nodes.synced() && pvs.synced() && disks.synced() {
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

/// One Warning Event per pending pod and distinct explanation (`pending::plan_explanations`); a failed publish
/// is tried again on the next look.
async fn explain_pending(
    recorder: &Recorder,
    cache: &Cache,
    pods: &[Pod],
    explained: &mut BTreeMap<String, String>,
) {
    let snap = cache.load();
    let now = k8s_openapi::jiff::Timestamp::now();
    let plan = pending::plan_explanations(&snap, pods, now, PENDING_AFTER, explained);
    let mut seen = BTreeMap::new();
    for e in plan {
        if e.publish {
            let reference = ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                namespace: e.pod.metadata.namespace.clone(),
                name: e.pod.metadata.name.clone(),
                uid: Some(e.uid.clone()),
                ..Default::default()
            };
            let ev = Event {
                type_: EventType::Warning,
                reason: "NoLocalVolume".into(),
                note: Some(e.message.chars().take(1000).collect()),
                action: "Explain".into(),
                secondary: None,
            };
            if let Err(error) = recorder.publish(&ev, &reference).await {
                let pod = e.pod.metadata.name.as_deref().unwrap_or_default();
                warn!(error = %error_text(&error), pod, "failed to publish the pending pod's explanation");
                continue;
            }
        }
        seen.insert(e.uid, e.message);
    }
    *explained = seen;
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
        Ok(()) => info!(%action, "clean-up applied"),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
        Err(error) => {
            warn!(%action, error = %error_text(&error), "clean-up step failed; retried next pass")
        }
    }
}
