//! The scheduler extender (`localpv extender`, a real process) behind a real kube-scheduler, in both
//! `nodeCacheCapable` modes: placement, two claims, binpack, a Pending pod explained by `localpv explain`, and
//! pods that wait while a non-ignorable extender is down.
//!
//! NB: kube-scheduler runs its in-tree filters, VolumeBinding included, before it calls any extender, and our
//! filter rules are VolumeBinding's. So the extender only ever rejects what VolumeBinding already rejected; when no
//! node fits, it is not called at all and the FailedScheduling event carries the in-tree message. Our reasons
//! reach the operator through `localpv explain` on a dump of the cluster, which this test runs too.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use rstest::rstest;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::support::agent::{install_crd, localpv_bin};
use crate::support::cluster::{ControlPlane, Extender, Options};
use crate::support::eventually;
use crate::support::extender::ExtenderProcess;
use crate::support::nodes::create_node;
use crate::support::proc::stdout_of;

const SCHEDULER: &str = "localpv-scheduler";
/// What VolumeBinding reports for a node where no free PV matches a delayed claim.
const IN_TREE_NO_PV: &str = "didn't find available persistent volumes to bind";
const PLACE_TIMEOUT: Duration = Duration::from_secs(90);

fn obj<T: DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("test object literal is valid")
}

/// Filter and prioritize requests the extender answered (`verb` is `Filter` or `Prioritize`), from `/metrics`.
fn answered(extender: &ExtenderProcess, verb: &str) -> u64 {
    let verb = format!("verb=\"{verb}\"");
    extender.metric(
        "localpv_extender_requests_total",
        &[&verb, "outcome=\"Ok\""],
    ) as u64
}

/// How long the extender may take to turn ready (its caches synced).
const READY: Duration = Duration::from_secs(60);

/// One plane with the PV binder, an extender, and a scheduler that pods select with `schedulerName`.
struct Ctx {
    // Declared first: dropped (and its log printed on failure) before the plane removes its directory.
    extender: ExtenderProcess,
    cp: ControlPlane,
    client: kube::Client,
    ns: String,
}

impl Ctx {
    async fn start(node_cache_capable: bool) -> Ctx {
        let mut cp = ControlPlane::start(Options {
            controller_manager: true,
            ..Options::default()
        })
        .await;
        let client = cp.client();
        let ns = cp.namespace("extender").await;
        // As installed: the extender's node clean-up also watches LocalDisks.
        install_crd(&cp).await;
        let mut extender = ExtenderProcess::new(&cp).env("RUST_LOG", "info,localpv=debug");
        extender.start(&cp, READY).await;
        // As config/scheduler/default-scheduler.yaml: weight 2 (binpack must outweigh VolumeBinding's own
        // capacity score), not ignorable.
        let mut entry = Extender::new(&extender.url());
        entry.weight = 2;
        entry.node_cache_capable = node_cache_capable;
        entry.ignorable = false;
        cp.start_scheduler(SCHEDULER, &[entry]).await;
        Ctx {
            cp,
            client,
            ns,
            extender,
        }
    }

    async fn class(&self, name: &str) {
        let sc: StorageClass = obj(json!({
            "metadata": {"name": name},
            "provisioner": "kubernetes.io/no-provisioner",
            "volumeBindingMode": "WaitForFirstConsumer",
            "reclaimPolicy": "Delete",
        }));
        Api::<StorageClass>::all(self.client.clone())
            .create(&PostParams::default(), &sc)
            .await
            .expect("class created");
    }

    /// A local PV as a static provisioner publishes it (see walkthrough.rs for why `provisioned-by` matters).
    async fn pv(
        &self,
        name: &str,
        class: &str,
        node: &str,
        size: &str,
        annotations: &[(&str, &str)],
    ) {
        let mut ann = serde_json::Map::new();
        ann.insert(
            "pv.kubernetes.io/provisioned-by".into(),
            json!(format!("local-volume-provisioner-{node}")),
        );
        for (k, v) in annotations {
            ann.insert((*k).into(), json!(v));
        }
        let pv: PersistentVolume = obj(json!({
            "metadata": {"name": name, "annotations": ann},
            "spec": {
                "capacity": {"storage": size},
                "volumeMode": "Filesystem",
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Delete",
                "storageClassName": class,
                "local": {"path": format!("/mnt/disks/{name}")},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
                ]}]}},
            },
        }));
        let api: Api<PersistentVolume> = Api::all(self.client.clone());
        api.create(&PostParams::default(), &pv)
            .await
            .expect("PV created");
        // The PV controller marks new PVs Available; VolumeBinding only takes Available PVs.
        eventually(
            &format!("PV {name} to be Available"),
            Duration::from_secs(30),
            || async {
                let pv = api.get(name).await.map_err(|e| e.to_string())?;
                match pv.status.and_then(|s| s.phase) {
                    Some(p) if p == "Available" => Ok(()),
                    other => Err(format!("phase {other:?}")),
                }
            },
        )
        .await;
    }

    /// Claims (name, class, size) and a pod using all of them, for our scheduler.
    async fn pod(&self, name: &str, claims: &[(&str, &str, &str)]) {
        let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), &self.ns);
        let mut volumes = Vec::new();
        let mut mounts = Vec::new();
        for (claim, class, size) in claims {
            let pvc: PersistentVolumeClaim = obj(json!({
                "metadata": {"name": claim},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": class,
                    "resources": {"requests": {"storage": size}},
                },
            }));
            pvcs.create(&PostParams::default(), &pvc)
                .await
                .expect("PVC created");
            volumes.push(json!({"name": claim, "persistentVolumeClaim": {"claimName": claim}}));
            mounts.push(json!({"name": claim, "mountPath": format!("/data/{claim}")}));
        }
        let pod: Pod = obj(json!({
            "metadata": {"name": name},
            "spec": {
                "schedulerName": SCHEDULER,
                "containers": [{"name": "app", "image": "busybox", "volumeMounts": mounts}],
                "volumes": volumes,
            },
        }));
        Api::<Pod>::namespaced(self.client.clone(), &self.ns)
            .create(&PostParams::default(), &pod)
            .await
            .expect("pod created");
    }

    async fn node_of(&self, pod: &str) -> Option<String> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.ns);
        let p = pods.get(pod).await.expect("pod exists");
        p.spec.and_then(|s| s.node_name)
    }

    /// Waits until `pod` is on `node` and each claim is bound to its PV (the PV controller completes binding).
    async fn expect_placed(&self, pod: &str, node: &str, claims: &[(&str, &str)]) {
        // A placement is final: wait for any node, then compare.
        let placed = eventually(&format!("{pod} to be placed"), PLACE_TIMEOUT, || async {
            match self.node_of(pod).await {
                Some(n) => Ok(n),
                None => Err(format!("events: {:?}", self.events(pod).await)),
            }
        })
        .await;
        assert_eq!(placed, node, "{pod} landed on the wrong node");
        let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), &self.ns);
        for (claim, pv) in claims {
            eventually(
                &format!("claim {claim} to bind to {pv}"),
                Duration::from_secs(60),
                || async {
                    let pvc = pvcs.get(claim).await.map_err(|e| e.to_string())?;
                    let phase = pvc.status.and_then(|s| s.phase).unwrap_or_default();
                    match pvc.spec.and_then(|s| s.volume_name) {
                        Some(v) if v == *pv && phase == "Bound" => Ok(()),
                        other => Err(format!("{phase} {other:?}")),
                    }
                },
            )
            .await;
        }
    }

    async fn events(&self, pod: &str) -> Vec<String> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), &self.ns);
        let fields = format!("involvedObject.name={pod},reason=FailedScheduling");
        match api.list(&ListParams::default().fields(&fields)).await {
            Ok(list) => list.items.into_iter().filter_map(|e| e.message).collect(),
            Err(e) => vec![format!("failed to list events: {e}")],
        }
    }

    /// The first FailedScheduling message of `pod` that contains `needle`.
    async fn failed_scheduling(&self, pod: &str, needle: &str) -> String {
        eventually(
            &format!("a FailedScheduling event of {pod} saying {needle:?}"),
            PLACE_TIMEOUT,
            || async {
                let messages = self.events(pod).await;
                match messages.iter().find(|m| m.contains(needle)) {
                    Some(m) => Ok(m.clone()),
                    None => Err(format!("{messages:?}")),
                }
            },
        )
        .await
    }

    async fn delete_pod(&self, pod: &str) {
        Api::<Pod>::namespaced(self.client.clone(), &self.ns)
            .delete(
                pod,
                &DeleteParams {
                    grace_period_seconds: Some(0),
                    ..Default::default()
                },
            )
            .await
            .expect("pod deleted");
    }

    /// `localpv explain` on a dump of the cluster, as an operator would run it for a Pending pod.
    fn explain(&self, pod: &str, output: &str) -> String {
        let dir = self.cp.dir.join("explain");
        std::fs::create_dir_all(&dir).expect("explain dir can be created");
        let snapshot = write(
            &dir.join("cluster.yaml"),
            &self
                .cp
                .kubectl(&["get", "pv,pvc,sc,nodes", "-A", "-o", "yaml"]),
        );
        let pod_file = write(
            &dir.join(format!("{pod}.yaml")),
            &self
                .cp
                .kubectl(&["get", "pod", pod, "-n", &self.ns, "-o", "yaml"]),
        );
        stdout_of(
            Command::new(localpv_bin())
                .arg("explain")
                .arg(format!("--snapshot={}", snapshot.display()))
                .arg(format!("--pod={}", pod_file.display()))
                .arg(format!("--output={output}")),
            "localpv explain",
        )
    }
}

fn write(path: &Path, text: &str) -> PathBuf {
    std::fs::write(path, text).expect("file written");
    path.to_path_buf()
}

#[rstest]
#[case::node_names(true)]
#[case::whole_nodes(false)]
#[tokio::test(flavor = "multi_thread")]
async fn extender_places_pods_explains_pending_ones_and_holds_pods_while_down(
    #[case] node_cache_capable: bool,
) {
    let mut ctx = Ctx::start(node_cache_capable).await;
    for node in ["node-a", "node-b", "node-c", "node-d", "node-e"] {
        create_node(&ctx.client, node, &[]).await;
    }
    for node in ["pack-10g", "pack-20g", "pack-100g"] {
        create_node(&ctx.client, node, &[]).await;
    }

    only_node_whose_pv_fits(&ctx).await;
    two_claims_land_where_both_have_a_pv(&ctx).await;
    binpack_keeps_big_pvs_for_big_claims(&ctx).await;
    assert!(
        answered(&ctx.extender, "Filter") >= 4,
        "the scheduler called the extender's filter for every placed pod:\n{}",
        ctx.extender.log()
    );
    assert!(
        answered(&ctx.extender, "Prioritize") >= 2,
        "binpack placements went through prioritize:\n{}",
        ctx.extender.log()
    );
    no_fit_stays_pending_and_explain_names_our_reason_per_node(&ctx).await;
    available_pv_with_a_wipe_annotation_is_not_rejected(&ctx).await;
    pods_wait_while_the_extender_is_down(&mut ctx).await;
}

async fn only_node_whose_pv_fits(ctx: &Ctx) {
    ctx.class("fit").await;
    ctx.pv("fit-a", "fit", "node-a", "5Gi", &[]).await;
    ctx.pv("fit-b", "fit", "node-b", "5Gi", &[]).await;
    ctx.pv("fit-c", "fit", "node-c", "20Gi", &[]).await;
    ctx.pod("one", &[("one", "fit", "10Gi")]).await;
    ctx.expect_placed("one", "node-c", &[("one", "fit-c")])
        .await;
}

/// Claims of 5Gi and 15Gi: node-a (10Gi + 20Gi) serves both; node-b (two 10Gi) and node-c (one 20Gi) do not.
/// The in-tree greedy order finds node-a's assignment too, so VolumeBinding lets node-a through to us.
async fn two_claims_land_where_both_have_a_pv(ctx: &Ctx) {
    ctx.class("pair").await;
    ctx.pv("pair-a-10", "pair", "node-a", "10Gi", &[]).await;
    ctx.pv("pair-a-20", "pair", "node-a", "20Gi", &[]).await;
    ctx.pv("pair-b-1", "pair", "node-b", "10Gi", &[]).await;
    ctx.pv("pair-b-2", "pair", "node-b", "10Gi", &[]).await;
    ctx.pv("pair-c", "pair", "node-c", "20Gi", &[]).await;
    ctx.pod(
        "two",
        &[("small", "pair", "5Gi"), ("large", "pair", "15Gi")],
    )
    .await;
    ctx.expect_placed(
        "two",
        "node-a",
        &[("small", "pair-a-10"), ("large", "pair-a-20")],
    )
    .await;
}

/// Two 8Gi pods in turn: the first takes the 10Gi PV, the second the 20Gi one, and the 100Gi PV stays free.
async fn binpack_keeps_big_pvs_for_big_claims(ctx: &Ctx) {
    ctx.class("pack").await;
    for (node, size) in [
        ("pack-10g", "10Gi"),
        ("pack-20g", "20Gi"),
        ("pack-100g", "100Gi"),
    ] {
        ctx.pv(&format!("pv-{node}"), "pack", node, size, &[]).await;
    }
    ctx.pod("pack-1", &[("pack-1", "pack", "8Gi")]).await;
    ctx.expect_placed("pack-1", "pack-10g", &[("pack-1", "pv-pack-10g")])
        .await;
    ctx.pod("pack-2", &[("pack-2", "pack", "8Gi")]).await;
    ctx.expect_placed("pack-2", "pack-20g", &[("pack-2", "pv-pack-20g")])
        .await;
}

/// A 50Gi claim that no PV can serve. VolumeBinding rejects every node, so the extender is never asked and the
/// event carries the in-tree message; `localpv explain` on the dumped cluster gives our reason for each node.
async fn no_fit_stays_pending_and_explain_names_our_reason_per_node(ctx: &Ctx) {
    let filters_before = answered(&ctx.extender, "Filter");
    ctx.pod("huge", &[("huge", "fit", "50Gi")]).await;
    let message = ctx.failed_scheduling("huge", IN_TREE_NO_PV).await;
    eprintln!("FailedScheduling of huge: {message}");
    assert!(
        message.starts_with("0/8 nodes are available"),
        "every node is rejected: {message}"
    );
    assert_eq!(ctx.node_of("huge").await, None, "huge stays unscheduled");
    assert_eq!(
        answered(&ctx.extender, "Filter"),
        filters_before,
        "with no node left after the in-tree filters, the extender is not called"
    );

    let report: Value =
        serde_json::from_str(&ctx.explain("huge", "json")).expect("explain -o json prints JSON");
    let claim = format!("claim {}/huge", ctx.ns);
    let mut want = serde_json::Map::new();
    for node in ["node-a", "node-b"] {
        want.insert(
            node.into(),
            json!(format!("{claim}: largest free PV is 5Gi, claim asks 50Gi")),
        );
    }
    want.insert(
        "node-c".into(),
        json!(format!("{claim}: all 1 PVs of class fit are bound")),
    );
    for node in ["node-d", "node-e", "pack-10g", "pack-20g", "pack-100g"] {
        want.insert(
            node.into(),
            json!(format!("{claim}: no PV of class fit on node")),
        );
    }
    assert_eq!(
        report["filter"]["FailedAndUnresolvableNodes"],
        Value::Object(want),
        "explain names our reason for every node:\n{report:#}"
    );
    assert_eq!(report["filter"]["NodeNames"], json!([]));
    assert_eq!(report["filter"]["FailedNodes"], json!({}));

    let table = ctx.explain("huge", "table");
    eprintln!("localpv explain for huge:\n{table}");
    let node_c = table
        .lines()
        .find(|l| l.starts_with("node-c "))
        .unwrap_or_else(|| panic!("the table has a row for node-c:\n{table}"));
    assert!(
        node_c.contains("Unresolvable") && node_c.contains("all 1 PVs of class fit are bound"),
        "the table gives node-c's verdict and reason:\n{table}"
    );

    // The same reasons reach the pod itself: the extender's Lease holder adds a NoLocalVolume event.
    let api: Api<Event> = Api::namespaced(ctx.client.clone(), &ctx.ns);
    let note = eventually("a NoLocalVolume event on huge", PLACE_TIMEOUT, || async {
        let fields = "involvedObject.name=huge,reason=NoLocalVolume";
        let list = api
            .list(&ListParams::default().fields(fields))
            .await
            .map_err(|e| e.to_string())?;
        list.items
            .into_iter()
            .find_map(|e| e.message)
            .ok_or_else(|| "none yet".to_string())
    })
    .await;
    assert!(
        note.contains("largest free PV is 5Gi, claim asks 50Gi")
            && note.contains("all 1 PVs of class fit are bound"),
        "the pod's own event carries our per-node reasons: {note}"
    );
    ctx.delete_pod("huge").await;
}

/// Where the extender's reason could reach the event: a PV our extender holds back while VolumeBinding takes
/// it. The likeliest candidate is a PV the node agent is wiping, but the agent annotates only Released PVs,
/// which VolumeBinding skips as well; an Available PV with the annotation left on it is free to both.
async fn available_pv_with_a_wipe_annotation_is_not_rejected(ctx: &Ctx) {
    ctx.class("wiped").await;
    ctx.pv(
        "wiped-d",
        "wiped",
        "node-d",
        "5Gi",
        &[("localpv.io/wipe-phase", "Wiping")],
    )
    .await;
    ctx.pod("wiped", &[("wiped", "wiped", "5Gi")]).await;
    ctx.expect_placed("wiped", "node-d", &[("wiped", "wiped-d")])
        .await;
}

/// `ignorable: false`: with the extender gone the scheduler reports the failed call and retries; once the
/// extender is back on the same address the pod is placed.
async fn pods_wait_while_the_extender_is_down(ctx: &mut Ctx) {
    ctx.class("later").await;
    ctx.pv("later-e", "later", "node-e", "5Gi", &[]).await;
    ctx.extender.stop(Duration::from_secs(5));
    ctx.pod("waits", &[("waits", "later", "5Gi")]).await;
    let url = format!("{}/filter", ctx.extender.url());
    let message = ctx.failed_scheduling("waits", &url).await;
    eprintln!("FailedScheduling of waits: {message}");
    assert!(
        message.contains("connection refused"),
        "the event says the extender could not be reached: {message}"
    );
    // The scheduler retries with backoff; the pod must still be unscheduled a few seconds later.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(ctx.node_of("waits").await, None, "waits stays unscheduled");

    ctx.extender.start(&ctx.cp, READY).await;
    ctx.expect_placed("waits", "node-e", &[("waits", "later-e")])
        .await;
}
