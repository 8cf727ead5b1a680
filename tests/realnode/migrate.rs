//! Migration for real: the reference provisioner, built from its source and installed with its own chart as
//! operators run it, publishes disks on both nodes and serves a StatefulSet whose pods keep writing; then the
//! commands of docs/migration.md's "Step by step" run as the doc prints them. The pods keep running (same pods, no
//! container restart, their data and counters intact), localpv adopts every PV in place (names, UIDs, claims), the
//! old provisioner is gone, and once the claims are deleted localpv wipes the adopted disks, publishes them anew and
//! the next pods find them empty.
//!
//! The test holds the doc's command blocks as it expects them and fails when the doc says anything else, so a doc
//! change breaks it; it then runs the doc's own text. The only substitutions are this machine's: the run's disk
//! directory for `/mnt/disks`, and the locally built image (no registry here) on `helm install localpv`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod};
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, ListParams};

use crate::common::*;
use crate::migrate_doc::{BLOCKS, DOC, Operator, Use, doc_blocks};
use crate::migrate_lsp::lsp;
use crate::support::realnode::{POD_TIMEOUT, RealCluster};

const LSP_RELEASE: &str = "local-static-provisioner";
const NS: &str = "kube-system";

/// Each replica: on first start writes its name to /data/owner; on every start records what it found; then counts.
const SCRIPT: &str = "if [ -f /data/owner ]; then echo \"found $(cat /data/owner)\" >> /data/history; \
                      else echo empty >> /data/history; hostname > /data/owner; fi; sync; \
                      trap 'exit 0' TERM; i=0; while true; do i=$((i+1)); echo $i > /data/counter; sleep 0.2; done";

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn counter(disk: &Path) -> u64 {
    read(&disk.join("counter")).trim().parse().unwrap_or(0)
}

/// (UID, container restarts, phase) of each pod of the StatefulSet.
async fn pod_states(c: &RealCluster, ns: &str) -> BTreeMap<String, (String, i32, String)> {
    Api::<Pod>::namespaced(c.client(), ns)
        .list(&ListParams::default().labels("app=db"))
        .await
        .expect("pods list")
        .items
        .into_iter()
        .map(|p| {
            let st = p.status.unwrap_or_default();
            let restarts = st
                .container_statuses
                .unwrap_or_default()
                .iter()
                .map(|s| s.restart_count)
                .sum();
            (
                p.metadata.name.unwrap_or_default(),
                (
                    p.metadata.uid.unwrap_or_default(),
                    restarts,
                    st.phase.unwrap_or_default(),
                ),
            )
        })
        .collect()
}

/// Waits until `check` holds for the PVs; returns them.
async fn wait_pvs<F>(
    c: &RealCluster,
    what: &str,
    logs: &str,
    check: F,
) -> BTreeMap<String, k8s_openapi::api::core::v1::PersistentVolume>
where
    F: Fn(&BTreeMap<String, k8s_openapi::api::core::v1::PersistentVolume>) -> bool,
{
    let deadline = Instant::now() + POD_TIMEOUT;
    loop {
        let all = pvs(c).await;
        if check(&all) {
            return all;
        }
        if Instant::now() > deadline {
            let seen: Vec<_> = all
                .values()
                .map(|p| {
                    (
                        p.metadata.name.clone().unwrap_or_default(),
                        pv_node(p),
                        pv_path(p),
                        pv_phase(p),
                        p.metadata.labels.clone().unwrap_or_default(),
                    )
                })
                .collect();
            panic!(
                "{what}: not after {POD_TIMEOUT:?}; PVs: {seen:#?}\n{}",
                c.container_logs(NS, logs)
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The reference provisioner installed with its own chart, values as an operator writes them (one Filesystem class
/// with the stock cleaner and a StorageClass); waits until it has published every disk.
async fn install_reference(c: &RealCluster, lsp: &crate::migrate_lsp::Lsp) {
    let (repo, tag) = lsp.image.split_once(':').expect("image has a tag");
    let values = c.run_dir().join("lsp-values.yaml");
    std::fs::write(
        &values,
        format!(
            "classes:\n- name: local-storage\n  hostDir: {}\n  volumeMode: Filesystem\n  fsType: ext4\n  \
             blockCleanerCommand:\n  - \"/scripts/shred.sh\"\n  - \"2\"\n  storageClass:\n    reclaimPolicy: Delete\n\
             image: {repo}:{tag}\nimagePullPolicy: Never\n",
            c.disk_root().join("disks").display()
        ),
    )
    .expect("values written");
    c.helm(&[
        "install",
        LSP_RELEASE,
        &lsp.chart.display().to_string(),
        "--namespace",
        NS,
        "-f",
        &values.display().to_string(),
    ]);
    wait_daemonset(c, NS, LSP_RELEASE, LSP_RELEASE).await;
    let by_lsp = |p: &k8s_openapi::api::core::v1::PersistentVolume| {
        p.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("pv.kubernetes.io/provisioned-by"))
            .is_some_and(|b| b.starts_with("local-volume-provisioner-"))
    };
    wait_pvs(
        c,
        "the reference provisioner publishes 4 PVs",
        LSP_RELEASE,
        |all| {
            all.values()
                .filter(|p| by_lsp(p) && pv_phase(p) == "Available")
                .count()
                == 4
        },
    )
    .await;
}

/// Release: the claims deleted, localpv wipes the adopted disks and publishes them anew; the Available adopted PVs
/// stay as they were, and the next replicas find their volumes empty.
async fn release_and_recycle(
    c: &RealCluster,
    ns: &str,
    tenant_disks: &[(&str, PathBuf)],
    pvs_before: &BTreeMap<String, Option<String>>,
) {
    let disks = c.disk_root().join("disks");
    let vol1 = disks.join("vol1").display().to_string();
    let small = disks.join("small").display().to_string();
    scale_down_and_delete_claims(c, ns, "db", &["db-0", "db-1"]).await;
    let recycled = wait_pvs(
        c,
        "vol1 wiped and published anew on both nodes",
        "localpv",
        |all| {
            ["node-1", "node-2"].iter().all(|node| {
                all.iter().any(|(name, p)| {
                    pv_node(p) == *node
                        && pv_path(p) == vol1
                        && pv_phase(p) == "Available"
                        && !pvs_before.contains_key(name)
                })
            }) && all.values().filter(|p| pv_path(p) == vol1).count() == 2
        },
    )
    .await;
    for (pod, disk) in tenant_disks {
        let left: Vec<_> = std::fs::read_dir(disk)
            .expect("disk readable")
            .flatten()
            .map(|e| e.file_name())
            .filter(|n| n != "lost+found")
            .collect();
        assert!(left.is_empty(), "{pod}'s disk wiped, found {left:?}");
    }
    for (name, p) in &recycled {
        if pv_path(p) == small {
            assert_eq!(
                pvs_before.get(name),
                Some(&p.metadata.uid),
                "the Available adopted PV {name} is untouched"
            );
            assert_eq!(pv_phase(p), "Available");
        }
    }
    // The next tenants find their volumes empty.
    scale(c, ns, "db", 2).await;
    for pod in ["db-0", "db-1"] {
        wait_pod(c, ns, pod, &["Running"]).await;
        let (history, _) = replica_history(c, ns, pod, 1).await;
        assert_eq!(
            history, "empty\n",
            "{pod}'s new claim starts on an empty volume"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn migration_from_the_reference_provisioner_as_the_doc_says_keeps_pods_and_data_and_recycles_disks()
 {
    // The doc first: a changed command fails here, before minutes of cluster work.
    let blocks = doc_blocks();
    let expected: Vec<&str> = BLOCKS.iter().map(|(_, b)| *b).collect();
    assert_eq!(
        blocks, expected,
        "{DOC}'s command blocks differ from what tests/realnode/migrate.rs runs: change both together"
    );

    let lsp = lsp();
    let c = RealCluster::start(2).await;
    for n in &c.nodes {
        n.import(&lsp.archive);
    }
    // Each node: a disk for a tenant (tmpfs on node-1, an ext4 loop device on node-2), and one too small for the
    // tenants' claims, which stays Available all along.
    c.tmpfs("node-1", "vol1", "64M");
    c.fs_disk("node-2", "vol1", 64, "ext4");
    for node in ["node-1", "node-2"] {
        c.tmpfs(node, "small", "16M");
    }
    install_reference(&c, &lsp).await;

    // Tenants: one replica per node, each bound to its node's vol1 (the small disks do not fit 32Mi).
    let ns = c.plane.namespace("tenant").await;
    let sets: Api<StatefulSet> = Api::namespaced(c.client(), &ns);
    create(&sets, &statefulset("db", 2, SCRIPT)).await;
    let mut tenant_disks = Vec::new();
    for pod in ["db-0", "db-1"] {
        wait_pod(&c, &ns, pod, &["Running"]).await;
        let (disk, _) = replica_disk(&c, &ns, pod).await;
        assert!(
            disk.ends_with("mnt/disks/vol1"),
            "{pod} is on {}",
            disk.display()
        );
        tenant_disks.push((pod, disk));
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while tenant_disks.iter().any(|(_, d)| counter(d) < 3) {
        assert!(Instant::now() < deadline, "tenants do not write");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let pods_before = pod_states(&c, &ns).await;
    let pvs_before: BTreeMap<String, Option<String>> = pvs(&c)
        .await
        .into_iter()
        .map(|(n, p)| (n, p.metadata.uid))
        .collect();
    assert_eq!(pvs_before.len(), 4);

    // docs/migration.md, step by step.
    let op = Operator::new(&c);
    let mut run = BLOCKS
        .iter()
        .zip(&blocks)
        .filter(|((u, _), _)| *u == Use::Run)
        .map(|(_, b)| b.as_str());
    let mut next = || run.next().expect("another block of the doc");
    let total = BLOCKS.iter().filter(|(u, _)| *u == Use::Run).count();
    let mut ran = 0;

    // 1. Record what exists.
    {
        ran += 1;
        op.run(next())
    };
    let recorded = read(&op.dir.join("pvs-before.txt"));
    for name in pvs_before.keys() {
        assert!(
            recorded.contains(name.as_str()),
            "{name} recorded:\n{recorded}"
        );
    }
    // 2. Check the configuration: valid (the Filesystem class's blockCleanerCommand now wipes its raw devices).
    let check = {
        ran += 1;
        op.run(next())
    };
    assert!(
        check.contains("is valid"),
        "check-config accepts the reference ConfigMap:\n{check}"
    );
    // 3. Stop the reference provisioner: its pods are gone when the command returns.
    {
        ran += 1;
        op.run(next())
    };
    let left: Vec<_> = Api::<Pod>::namespaced(c.client(), NS)
        .list(&ListParams::default().labels(&format!("app.kubernetes.io/instance={LSP_RELEASE}")))
        .await
        .expect("pods list")
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    assert!(left.is_empty(), "reference pods still there: {left:?}");
    // 4. Install localpv with the same ConfigMap, then the documented upgrade.
    {
        ran += 1;
        op.run(next())
    };
    wait_daemonset(&c, NS, "localpv-node", "localpv").await;
    {
        ran += 1;
        op.run(next())
    };
    wait_daemonset(&c, NS, "localpv-node", "localpv").await;
    // 5. Watch the adoption: every PV carries localpv.io/node, with an Adopted Event.
    let adopted = wait_pvs(&c, "every PV adopted", "localpv", |all| {
        all.len() == 4
            && all.values().all(|p| {
                p.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("localpv.io/node"))
                    .is_some_and(|n| *n == pv_node(p))
            })
    })
    .await;
    let shown = {
        ran += 1;
        op.run(next())
    };
    for name in adopted.keys() {
        assert!(shown.contains(name.as_str()), "{name} shown:\n{shown}");
    }
    let events = Api::<Event>::all(c.client())
        .list(&ListParams::default().fields("reason=Adopted"))
        .await
        .expect("events list")
        .items;
    for name in adopted.keys() {
        assert!(
            events
                .iter()
                .any(|e| e.involved_object.name.as_deref() == Some(name.as_str())),
            "an Adopted Event for {name}"
        );
    }
    // 6. Compare: same names, UIDs, phases, claims, paths.
    let diff = {
        ran += 1;
        op.run(next())
    };
    assert!(diff.contains("every PV kept"), "{diff}");
    // 7. Remove the rest of the reference provisioner; its ConfigMap and StorageClass stay.
    {
        ran += 1;
        op.run(next())
    };
    assert_eq!(ran, total, "every block of the doc was run");
    let releases = c.helm(&["list", "--namespace", NS, "--short"]);
    assert!(
        !releases.contains(LSP_RELEASE),
        "reference release forgotten: {releases}"
    );
    assert!(
        exists(&Api::<StorageClass>::all(c.client()), "local-storage").await,
        "the StorageClass stays"
    );
    assert!(
        exists(
            &Api::<ConfigMap>::namespaced(c.client(), NS),
            "local-static-provisioner-config"
        )
        .await,
        "the ConfigMap localpv reads stays"
    );
    let roles: Vec<_> = Api::<ClusterRole>::all(c.client())
        .list(&ListParams::default().labels(&format!("app.kubernetes.io/instance={LSP_RELEASE}")))
        .await
        .expect("list")
        .items;
    assert!(roles.is_empty(), "the reference ClusterRole is deleted");

    // The tenants never noticed: the same pods, no container restart, still writing, their data as written.
    let pods_after = pod_states(&c, &ns).await;
    assert_eq!(pods_after, pods_before, "the same pods, never restarted");
    for (pod, disk) in &tenant_disks {
        let was = counter(disk);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(counter(disk) > was, "{pod} keeps writing");
        assert_eq!(read(&disk.join("owner")).trim(), *pod, "{pod}'s data");
        assert_eq!(read(&disk.join("history")), "empty\n", "{pod} started once");
    }
    let now: BTreeMap<String, Option<String>> = pvs(&c)
        .await
        .into_iter()
        .map(|(n, p)| (n, p.metadata.uid))
        .collect();
    assert_eq!(now, pvs_before, "every PV kept its name and UID");

    release_and_recycle(&c, &ns, &tenant_disks, &pvs_before).await;
}
