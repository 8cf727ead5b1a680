//! The whole node agent driven through single events against a scripted API server and a fake host: the exact
//! requests one event causes, checked request by request (`effects::scripted`), with the stores filled as the
//! watches would fill them.

use std::future::Future;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::runtime::watcher::Event;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tokio::sync::Notify;

use super::pass::{Agent, Setup};
use super::pvindex::PvIndex;
use super::{Options, http, metrics};
use crate::contract::{
    ANN_DEV_ID, ANN_DEVICE, ANN_FS_TYPE, ANN_FS_UUID, ANN_NODE_UID, ANN_WIPE_PHASE, DevId, GROUP,
    NODE_LABEL,
};
use crate::effects::scripted::{self, Exchange, Received, Verifier, created};
use crate::host::fake::FakeHost;
use crate::host::{DirEntry, EntryKind, FsProbe};
use crate::inventory::LocalDisk;
use crate::plan::NodeFacts;
use crate::pvname;
use crate::watch::checks::{object, text};
use crate::watch::{Store, apply, objects};

const NODE: &str = "n1";
const NODE_UID: &str = "node-uid";
const CLASS: &str = "fast";
const HOST_PATH: &str = "/mnt/disks/vol1";

/// The node's one disk, `vol1`: a real directory (a wipe removes its real contents) that the fake host reports as
/// the mount of an ext4 filesystem with a UUID, on the device the directory really is on.
struct TestDisk {
    mount_dir: tempfile::TempDir,
    dev: DevId,
    /// Global keys added to the configuration.
    extra_config: String,
}

impl TestDisk {
    fn new() -> TestDisk {
        let mount_dir = tempfile::tempdir().expect("a temporary directory");
        std::fs::create_dir(mount_dir.path().join("vol1")).expect("vol1 is created");
        std::fs::write(mount_dir.path().join("vol1/data"), "a tenant's data")
            .expect("data is written");
        let st_dev = std::fs::metadata(mount_dir.path()).expect("stat").dev();
        let dev = DevId::from_dev(st_dev);
        assert!(
            !dev.is_anonymous(),
            "these tests need the temporary directory on a block-device-backed filesystem (not tmpfs): it is on \
             {dev}"
        );
        TestDisk {
            mount_dir,
            dev,
            extra_config: String::new(),
        }
    }

    fn vol1(&self) -> PathBuf {
        self.mount_dir.path().join("vol1")
    }

    /// One filesystem class, as the ConfigMap would say it.
    fn config_text(&self) -> String {
        let mount_dir = self.mount_dir.path().display();
        format!(
            "{}storageClassMap:\n  {CLASS}:\n    hostDir: /mnt/disks\n    mountDir: {mount_dir}\n",
            self.extra_config
        )
    }

    fn host(&self) -> FakeHost {
        let (mount_dir, vol1, dev) = (self.mount_dir.path(), self.vol1(), self.dev);
        let mountinfo = format!(
            "1 0 253:1 / / rw shared:1 - ext4 /dev/vda1 rw\n\
             30 1 {dev} / {} rw,relatime shared:1 - ext4 /dev/test0 rw\n",
            vol1.display()
        );
        let entry = DirEntry {
            name: "vol1".into(),
            kind: EntryKind::Directory,
        };
        let mut host = FakeHost::new()
            .with_mountinfo(&mountinfo)
            .with_dir(mount_dir, vec![entry])
            .with_statvfs(&vol1, 1 << 30, 1 << 29)
            .with_device_node(dev, "/dev/test0")
            .with_probe(
                "/dev/test0",
                FsProbe {
                    fs_type: Some("ext4".into()),
                    uuid: Some("uuid-1".into()),
                    label: None,
                },
            );
        host.canonical.insert(vol1.clone(), Ok(vol1));
        host
    }

    /// The annotations our PV for this disk records.
    fn identity_annotations(&self) -> Value {
        json!({ANN_DEV_ID: self.dev.to_string(), ANN_DEVICE: "/dev/test0", ANN_FS_TYPE: "ext4",
               ANN_FS_UUID: "uuid-1", ANN_NODE_UID: NODE_UID, "pv.kubernetes.io/provisioned-by": "localpv-n1"})
    }
}

fn node_facts() -> NodeFacts {
    let labels = [("kubernetes.io/hostname".to_string(), NODE.to_string())];
    NodeFacts {
        name: NODE.into(),
        hostname_label: Some(NODE.into()),
        uid: NODE_UID.into(),
        labels: labels.into(),
    }
}

/// The agent's stores as its watches leave them once listed: this Node, the class's StorageClass, no LocalDisk,
/// and `pvs` in the PV index.
struct Stores {
    pvs: Arc<PvIndex>,
    nodes: Arc<Store<Node>>,
    classes: Arc<Store<StorageClass>>,
    disks: Arc<Store<LocalDisk>>,
}

fn listed<K: kube::Resource + serde::de::DeserializeOwned + PartialEq>(
    store: &Store<K>,
    items: Vec<Value>,
) {
    apply(store, "", Event::Init, &objects());
    for item in items {
        apply(store, "", Event::InitApply(object(item)), &objects());
    }
    apply(store, "", Event::InitDone, &objects());
}

fn stores(pvs: Vec<Value>) -> Stores {
    stores_with_taints(pvs, json!(null))
}

/// As [`stores`], with `taints` on the Node.
fn stores_with_taints(pvs: Vec<Value>, taints: Value) -> Stores {
    let s = Stores {
        pvs: PvIndex::new(),
        nodes: Store::new(),
        classes: Store::new(),
        disks: Store::new(),
    };
    let node = json!({"metadata": {"name": NODE, "uid": NODE_UID, "resourceVersion": "5",
                                   "labels": {"kubernetes.io/hostname": NODE}},
                      "spec": {"taints": taints}});
    listed(&s.nodes, vec![node]);
    let class = json!({"metadata": {"name": CLASS}, "provisioner": "kubernetes.io/no-provisioner",
                       "reclaimPolicy": "Delete", "volumeBindingMode": "WaitForFirstConsumer"});
    listed(&s.classes, vec![class]);
    listed(&s.disks, vec![]);
    s.pvs.set_node(&node_facts());
    s.pvs.set_narrow(false);
    s.pvs.apply(&node_facts(), Event::Init);
    for pv in pvs {
        s.pvs.apply(&node_facts(), Event::InitApply(text(pv)));
    }
    s.pvs.apply(&node_facts(), Event::InitDone);
    s
}

/// A running agent and what the test reads of it.
struct Running {
    verifier: Verifier,
    changed: Arc<Notify>,
    metrics: metrics::Metrics,
    shutdown: tokio::sync::watch::Sender<bool>,
    _state: tempfile::TempDir,
}

/// Runs the agent on `disk` and `stores` against an API server following `steps` until it has sent the first
/// `caused` requests (what the event causes in one pass), then for three more passes, as later watch events would
/// cause (a write they repeat is a doubled write); then stops it and checks the script was followed to the letter.
async fn run_agent(disk: &TestDisk, stores: &Stores, steps: Vec<Exchange>, caused: usize) {
    let (running, agent) = start(disk, stores, steps);
    let driven = async {
        let what = format!("the first {caused} requests");
        running
            .until(&what, |r| r.verifier.seen().len() >= caused)
            .await;
        running.passes_after(3).await;
        let _ = running.shutdown.send(true);
    };
    // NB: joined on this task, not spawned: the agent's loop is not `Send` for every lifetime, as `main` runs it.
    let both = async { tokio::join!(agent, driven) };
    tokio::time::timeout(Duration::from_secs(120), both)
        .await
        .expect("the agent stops on shutdown");
    running.verifier.assert_done();
}

fn start(
    disk: &TestDisk,
    stores: &Stores,
    steps: Vec<Exchange>,
) -> (Running, impl Future<Output = ()>) {
    let state = tempfile::tempdir().expect("a state directory");
    // NB: the agent that made the PVs these scripts start from kept a ledger; without one they would read as a
    // lost ledger (`plan::lost`), which has its own test.
    std::fs::create_dir_all(state.path().join("state")).expect("the state directory");
    std::fs::write(
        state.path().join("state/disk-ledger.json"),
        r#"{"disks": {}}"#,
    )
    .expect("an empty ledger");
    let config_path = state.path().join("config.yaml");
    std::fs::write(&config_path, disk.config_text()).expect("the config is written");
    let config = super::load_config(&config_path).expect("the config is valid");
    let (client, verifier) = scripted::client(steps);
    let mut registry = Registry::default();
    let metrics = metrics::Metrics::register(&mut registry);
    let changed = Arc::new(Notify::new());
    let opts = Options {
        config: config_path,
        node_name: Some(NODE.into()),
        check_config: false,
        listen: "127.0.0.1:0".parse().expect("an address"),
        state_dir: state.path().join("state"),
        config_poll: Duration::from_secs(3600),
        http: Default::default(),
        wipe_failing_after: 3,
        admission_policy: None,
    };
    let agent = Agent::new(Setup {
        node: NODE.into(),
        client,
        host: Arc::new(disk.host()),
        config,
        opts,
        pvs: stores.pvs.clone(),
        nodes: stores.nodes.clone(),
        classes: stores.classes.clone(),
        disks: stores.disks.clone(),
        classes_polled: crate::watch::Polled::kept_current(),
        disks_polled: crate::watch::Polled::kept_current(),
        changed: changed.clone(),
        metrics: metrics.clone(),
        http: http::HttpState::new(registry),
    })
    .expect("the agent starts");
    let (shutdown, stop) = tokio::sync::watch::channel(false);
    let running = Running {
        verifier,
        changed,
        metrics,
        shutdown,
        _state: state,
    };
    (running, agent.run(stop))
}

impl Running {
    /// Waits until `done` holds, failing after 30 seconds (generous: CI runs at a high load).
    async fn until(&self, what: &str, done: impl Fn(&Self) -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while !done(self) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {what}; requests: {:?}",
                self.verifier
                    .seen()
                    .iter()
                    .map(|s| s.line())
                    .collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn passes(&self) -> u64 {
        self.metrics.discovery_passes.get()
    }

    /// `n` more passes, each woken as a watch event wakes the agent.
    async fn passes_after(&self, n: usize) {
        for _ in 0..n {
            let before = self.passes();
            self.changed.notify_one();
            self.until("another pass", |r| r.passes() > before).await;
        }
    }
}

/// The path of our LocalDisk `name`.
fn local_disk_path(name: &str) -> String {
    format!("/apis/{GROUP}/v1alpha1/localdisks/{name}")
}

/// The body must carry this node's label.
fn labelled_for_this_node(seen: &Received) -> Result<(), String> {
    match &seen.body["metadata"]["labels"][NODE_LABEL] {
        Value::String(node) if node == NODE => Ok(()),
        other => Err(format!("{NODE_LABEL} is {other}, expected {NODE}")),
    }
}

/// The answer to a PV create: the PV as stored, shown to the PV index as the watch would show it.
/// NB: before the create's answer is read, as it may be in a cluster.
fn shown_pv(
    pvs: &Arc<PvIndex>,
    uid: &'static str,
) -> impl Fn(&Received) -> (u16, Value) + Send + 'static {
    let pvs = pvs.clone();
    move |seen| {
        let pv = created(seen, uid, "1");
        pvs.apply(&node_facts(), Event::Apply(text(pv.clone())));
        (201, pv)
    }
}

/// The answer to an apply of our LocalDisk: the object as stored, shown to the agent's LocalDisk store as its
/// watch would show it.
fn stored_disk(
    disks: &Arc<Store<LocalDisk>>,
) -> impl Fn(&Received) -> (u16, Value) + Send + 'static {
    let disks = disks.clone();
    move |seen| {
        let disk = created(seen, "disk-uid-1", "2");
        apply(
            &disks,
            "LocalDisk",
            Event::Apply(object(disk.clone())),
            &objects(),
        );
        (200, disk)
    }
}

/// The pass that creates a PV builds the LocalDisk before it; the next pass names it there.
fn naming_the_pv(stores: &Stores) -> Exchange {
    Exchange::new(
        "the LocalDisk naming its PV",
        "PATCH",
        &local_disk_path("fs-uuid-1"),
    )
    .query("fieldManager=localpv-node-n1")
    .query("force=true")
    .body(
        "/status/pv",
        json!(pvname::localpv_name(NODE, CLASS, "vol1")),
    )
    .answer_with(stored_disk(&stores.disks))
}

#[tokio::test]
async fn a_new_disk_becomes_one_pv_with_the_node_label_and_one_local_disk() {
    let (disk, stores) = (TestDisk::new(), stores(vec![]));
    let local_disk = local_disk_path("fs-uuid-1");
    let steps = vec![
        Exchange::new("the PV create", "POST", "/api/v1/persistentvolumes")
            .query("fieldManager=localpv-node")
            .check(labelled_for_this_node)
            .body(
                "/metadata/name",
                json!(pvname::localpv_name(NODE, CLASS, "vol1")),
            )
            .body("/spec/local/path", json!(HOST_PATH))
            .body("/spec/storageClassName", json!(CLASS))
            .answer_with(shown_pv(&stores.pvs, "pv-uid-1")),
        Exchange::new("the look for another node's LocalDisk", "GET", &local_disk)
            .fail(404, "NotFound"),
        Exchange::new("the LocalDisk create", "PATCH", &local_disk)
            .query("fieldManager=localpv-node-n1")
            .check(|seen| match seen.query.contains("force=true") {
                false => Ok(()),
                true => Err("a create must not take over another node's object".into()),
            })
            .check(labelled_for_this_node)
            .body("/spec/path", json!(HOST_PATH))
            .answer_with(stored_disk(&stores.disks)),
        naming_the_pv(&stores),
    ];
    run_agent(&disk, &stores, steps, 3).await;
}

/// Our PV for the disk, Released by its claim, as the watch shows it.
fn released_pv(disk: &TestDisk) -> Value {
    json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": pvname::localpv_name(NODE, CLASS, "vol1"), "uid": "pv-uid-1", "resourceVersion": "7",
                     "labels": {NODE_LABEL: NODE}, "annotations": disk.identity_annotations()},
        "spec": {"capacity": {"storage": "1Gi"}, "local": {"path": HOST_PATH}, "storageClassName": CLASS,
                 "persistentVolumeReclaimPolicy": "Delete", "volumeMode": "Filesystem",
                 "accessModes": ["ReadWriteOnce"],
                 "claimRef": {"namespace": "ns", "name": "data", "uid": "claim-uid-1"}},
        "status": {"phase": "Released"},
    })
}

/// The answer to a merge patch of `pv`: the PV with the patch applied and a new resource version, shown to the
/// PV index as the watch would show it.
fn patched_pv(
    pvs: &Arc<PvIndex>,
    pv: &Value,
    version: &'static str,
) -> impl Fn(&Received) -> (u16, Value) + Send + 'static {
    let (pvs, pv) = (pvs.clone(), pv.clone());
    move |seen| {
        let mut now = pv.clone();
        merge(&mut now, &seen.body);
        now["metadata"]["resourceVersion"] = json!(version);
        pvs.apply(&node_facts(), Event::Apply(text(now.clone())));
        (200, now)
    }
}

#[tokio::test]
async fn a_released_pv_is_wiped_between_two_phase_patches_deleted_and_published_again() {
    let disk = TestDisk::new();
    let pv = released_pv(&disk);
    let stores = stores(vec![pv.clone()]);
    let pv_path = format!(
        "/api/v1/persistentvolumes/{}",
        pvname::localpv_name(NODE, CLASS, "vol1")
    );
    let local_disk = local_disk_path("fs-uuid-1");
    let steps = vec![
        Exchange::new("the wipe phase Wiping", "PATCH", &pv_path)
            .query("fieldManager=localpv-node")
            .body("/metadata/uid", json!("pv-uid-1"))
            .body("/metadata/resourceVersion", json!("7"))
            .check(|seen| wipe_phase(seen, "Wiping"))
            .answer_with(patched_pv(&stores.pvs, &pv, "8")),
        Exchange::new("the look for another node's LocalDisk", "GET", &local_disk)
            .fail(404, "NotFound"),
        Exchange::new("the LocalDisk create", "PATCH", &local_disk)
            .body("/status/phase", json!("Wiping"))
            .answer_with(stored_disk(&stores.disks)),
        Exchange::new("the wipe phase Wiped", "PATCH", &pv_path)
            .body("/metadata/uid", json!("pv-uid-1"))
            .check(|seen| wipe_phase(seen, "Wiped"))
            .answer_with(patched_pv(&stores.pvs, &pv, "9")),
        Exchange::new(
            "the WipeCompleted Event",
            "POST",
            "/apis/events.k8s.io/v1/namespaces/default/events",
        )
        .body("/reason", json!("WipeCompleted"))
        .body("/regarding/uid", json!("pv-uid-1")),
        Exchange::new("the PV delete", "DELETE", &pv_path)
            .body("/preconditions/uid", json!("pv-uid-1"))
            .body("/preconditions/resourceVersion", json!("9"))
            .answer_with({
                let (pvs, pv) = (stores.pvs.clone(), pv.clone());
                move |_| {
                    pvs.apply(&node_facts(), Event::Delete(text(pv.clone())));
                    (200, pv.clone())
                }
            }),
        Exchange::new("the LocalDisk wiped", "PATCH", &local_disk)
            .query("force=true")
            .body("/status/reason", json!("Wiped"))
            .answer_with(stored_disk(&stores.disks)),
        Exchange::new("the new PV", "POST", "/api/v1/persistentvolumes")
            .check(labelled_for_this_node)
            .body("/spec/local/path", json!(HOST_PATH))
            .answer_with(shown_pv(&stores.pvs, "pv-uid-2")),
        Exchange::new("the LocalDisk available", "PATCH", &local_disk)
            .query("force=true")
            .body("/status/phase", json!("Available"))
            .answer_with(stored_disk(&stores.disks)),
        naming_the_pv(&stores),
    ];
    run_agent(&disk, &stores, steps, 9).await;
    assert_eq!(
        std::fs::read_dir(disk.vol1())
            .expect("vol1 is there")
            .count(),
        0,
        "vol1 is wiped"
    );
}

/// A JSON merge patch (RFC 7386), as the API server applies one.
fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(fields) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    for (key, value) in fields {
        match value {
            Value::Null => {
                target.as_object_mut().map(|t| t.remove(key));
            }
            value => merge(&mut target[key.as_str()], value),
        }
    }
}

fn wipe_phase(seen: &Received, phase: &str) -> Result<(), String> {
    match &seen.body["metadata"]["annotations"][ANN_WIPE_PHASE] {
        Value::String(p) if p == phase => Ok(()),
        other => Err(format!("{ANN_WIPE_PHASE} is {other}, expected {phase}")),
    }
}

const STARTUP_TAINT: &str = "example.com/storage-not-ready";

#[tokio::test]
async fn the_startup_taint_is_removed_once_the_first_pass_has_published_the_disk_and_never_again() {
    let mut disk = TestDisk::new();
    disk.extra_config = format!(
        "removeNodeNotReadyTaint: \"true\"\nprovisionerNotReadyNodeTaintKey: {STARTUP_TAINT}\n"
    );
    let other = json!({"key": "dedicated", "value": "db", "effect": "NoSchedule"});
    let taints = json!([{"key": STARTUP_TAINT, "effect": "NoSchedule"}, other]);
    let stores = stores_with_taints(vec![], taints);
    let local_disk = local_disk_path("fs-uuid-1");
    let steps = vec![
        Exchange::new("the PV create", "POST", "/api/v1/persistentvolumes")
            .answer_with(shown_pv(&stores.pvs, "pv-uid-1")),
        Exchange::new("the look for another node's LocalDisk", "GET", &local_disk)
            .fail(404, "NotFound"),
        Exchange::new("the LocalDisk create", "PATCH", &local_disk)
            .answer_with(stored_disk(&stores.disks)),
        Exchange::new(
            "the taint removed",
            "PATCH",
            &format!("/api/v1/nodes/{NODE}"),
        )
        .query("fieldManager=localpv-node")
        .body("/metadata/resourceVersion", json!("5"))
        .body("/spec/taints", json!([other]))
        .answer_with(untainted_node(&stores.nodes)),
        naming_the_pv(&stores),
    ];
    run_agent(&disk, &stores, steps, 4).await;
}

/// The Node as the API server stores it after `seen`'s taint patch, shown to the agent's Node store.
fn untainted_node(nodes: &Arc<Store<Node>>) -> impl Fn(&Received) -> (u16, Value) + Send + 'static {
    let nodes = nodes.clone();
    move |seen| {
        let node = json!({"metadata": {"name": NODE, "uid": NODE_UID, "resourceVersion": "6",
                                       "labels": {"kubernetes.io/hostname": NODE}},
                          "spec": {"taints": seen.body["spec"]["taints"].clone()}});
        apply(
            &nodes,
            "Node",
            Event::Apply(object(node.clone())),
            &objects(),
        );
        (200, node)
    }
}

#[tokio::test]
async fn a_taint_patch_that_meets_a_changed_node_is_tried_again() {
    let mut disk = TestDisk::new();
    disk.extra_config = "removeNodeNotReadyTaint: true\n".into();
    let taints = json!([{"key": crate::config::DEFAULT_STARTUP_TAINT, "effect": "NoSchedule"}]);
    let stores = stores_with_taints(vec![], taints);
    let local_disk = local_disk_path("fs-uuid-1");
    let node_path = format!("/api/v1/nodes/{NODE}");
    let steps = vec![
        Exchange::new("the PV create", "POST", "/api/v1/persistentvolumes")
            .answer_with(shown_pv(&stores.pvs, "pv-uid-1")),
        Exchange::new("the look for another node's LocalDisk", "GET", &local_disk)
            .fail(404, "NotFound"),
        Exchange::new("the LocalDisk create", "PATCH", &local_disk)
            .answer_with(stored_disk(&stores.disks)),
        Exchange::new("the taint patch, on a changed Node", "PATCH", &node_path)
            .body("/spec/taints", json!(null))
            .fail(409, "Conflict"),
        naming_the_pv(&stores),
        Exchange::new("the taint patch again", "PATCH", &node_path)
            .body("/metadata/resourceVersion", json!("5"))
            .body("/spec/taints", json!(null))
            .answer_with(untainted_node(&stores.nodes)),
    ];
    run_agent(&disk, &stores, steps, 6).await;
}
