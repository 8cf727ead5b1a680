//! The whole agent pass on a host that only counts and an API server that only remembers: what one mount event
//! costs the agent, in work items, whatever the number of disks already on the node.
//!
//! ```text
//!  Disks (Host: a growing mount table and discovery directory, every call counted)
//!  FakeApi (tower service behind a kube::Client: creates and applies land in the agent's own stores)
//!        └──> Agent::pass, as the loop runs it: once per wake-up, again at once while it asks (a volume id stored)
//! ```

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::watch::Guarded;
use clap::Parser;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::watcher::Event;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};

use super::*;
use crate::config::{ClassConfig, FsWipe, WipeMethod};
use crate::contract::DevId;
use crate::disk::VolumeMode;
use crate::effects::scripted;
use crate::host::{
    DirEntry, EntryKind, FsProbe, FsSize, HardwareIds, HostError, MountTable, VolumeTag,
};
use crate::watch::checks::{object, text};
use crate::watch::objects;

const NODE: &str = "n1";
const CLASS: &str = "local-storage";
const HOST_DIR: &str = "/mnt/disks";
const MOUNT_DIR: &str = "/host/mnt/disks";

/// Host calls by kind.
#[derive(Default)]
struct Counts {
    mount_table: AtomicUsize,
    read_dir: AtomicUsize,
    dir_entry: AtomicUsize,
    /// Calls that look at one entry: statvfs, block size, blkid, udev, device node, volume id.
    probes: AtomicUsize,
    tags: AtomicUsize,
}

/// Tmpfs disks mounted under `MOUNT_DIR`, one added at a time.
#[derive(Default)]
struct Disks {
    state: Mutex<DiskState>,
    counts: Counts,
}

#[derive(Default)]
struct DiskState {
    mountinfo: String,
    entries: Vec<DirEntry>,
    ids: HashMap<PathBuf, String>,
    /// The filesystem takes a volume id and loses it: it never reads back.
    forget_tags: bool,
}

impl Disks {
    fn new() -> Disks {
        let disks = Disks::default();
        disks.lock().mountinfo = "1 0 253:1 / / rw shared:1 - ext4 /dev/vda1 rw\n".into();
        disks
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, DiskState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Mounts one more tmpfs, with the agent's volume id already on it when `tagged`.
    fn mount(&self, name: &str, tagged: bool) {
        let mut s = self.lock();
        let id = s.entries.len() + 100;
        let line = format!(
            "{id} 1 0:{id} / {MOUNT_DIR}/{name} rw,relatime shared:{id} - tmpfs tmpfs rw,size=1048576k\n"
        );
        s.mountinfo.push_str(&line);
        s.entries.push(DirEntry {
            name: name.into(),
            kind: EntryKind::Directory,
        });
        if tagged {
            let path = Path::new(MOUNT_DIR).join(name);
            s.ids.insert(path, format!("id-{name}"));
        }
    }

    fn probes(&self) -> usize {
        self.counts.probes.load(Ordering::Relaxed)
    }

    fn reads(&self) -> usize {
        self.counts.mount_table.load(Ordering::Relaxed)
            + self.counts.read_dir.load(Ordering::Relaxed)
    }

    fn probe(&self) {
        self.counts.probes.fetch_add(1, Ordering::Relaxed);
    }
}

fn enoent(path: &Path) -> HostError {
    HostError::Statvfs {
        path: path.into(),
        source: std::io::Error::from_raw_os_error(nix::libc::ENOENT),
    }
}

impl Host for Disks {
    fn mount_table(&self) -> Result<MountTable, HostError> {
        self.counts.mount_table.fetch_add(1, Ordering::Relaxed);
        let text = self.lock().mountinfo.clone();
        let mut table =
            MountTable::parse(text.as_bytes()).map_err(|source| HostError::ParseMountTable {
                path: "/proc/self/mountinfo".into(),
                source,
            })?;
        // NB: as the mount API reads it: every mount here is made once, so mountinfo's id serves as the unique one.
        for entry in &mut table.entries {
            std::sync::Arc::make_mut(entry).unique_id = Some(u64::from(entry.mount_id));
        }
        Ok(table)
    }

    fn canonicalize(&self, path: &Path) -> Result<PathBuf, HostError> {
        Ok(path.into())
    }

    fn read_dir(&self, dir: &Path) -> Result<Vec<DirEntry>, HostError> {
        self.counts.read_dir.fetch_add(1, Ordering::Relaxed);
        match dir == Path::new(MOUNT_DIR) {
            true => Ok(self.lock().entries.clone()),
            false => Err(enoent(dir)),
        }
    }

    fn dir_entry(&self, dir: &Path, name: &OsStr) -> Result<Option<DirEntry>, HostError> {
        self.counts.dir_entry.fetch_add(1, Ordering::Relaxed);
        match dir == Path::new(MOUNT_DIR) {
            true => Ok(self
                .lock()
                .entries
                .iter()
                .find(|e| OsStr::new(&e.name) == name)
                .cloned()),
            false => Err(enoent(dir)),
        }
    }

    fn statvfs(&self, _: &Path) -> Result<FsSize, HostError> {
        self.probe();
        Ok(FsSize {
            total_bytes: 1 << 30,
            available_bytes: 1 << 29,
        })
    }

    fn block_device_size(&self, path: &Path) -> Result<u64, HostError> {
        self.probe();
        Err(enoent(path))
    }

    fn probe_filesystem(&self, _: &Path) -> Result<FsProbe, HostError> {
        self.probe();
        Ok(FsProbe::default())
    }

    fn device_claimed(&self, _: &Path) -> Result<bool, HostError> {
        self.probe();
        Ok(false)
    }

    fn hardware_ids(&self, _: DevId) -> Result<HardwareIds, HostError> {
        self.probe();
        Ok(HardwareIds::default())
    }

    fn device_node(&self, _: DevId) -> Result<Option<PathBuf>, HostError> {
        self.probe();
        Ok(None)
    }

    fn volume_id(&self, path: &Path) -> Result<VolumeTag, HostError> {
        self.probe();
        Ok(match self.lock().ids.get(path) {
            Some(id) => VolumeTag::Present(id.clone()),
            None => VolumeTag::Absent,
        })
    }

    fn tag_volume(&self, path: &Path) -> Result<String, HostError> {
        self.counts.tags.fetch_add(1, Ordering::Relaxed);
        let mut s = self.lock();
        let id = format!("id-{}", path.display());
        if s.forget_tags {
            return Ok(id);
        }
        Ok(s.ids.entry(path.into()).or_insert(id).clone())
    }
}

/// The API server as far as the agent's pass needs it: a PV create is answered and shown to the PV index (as its
/// watch would), a LocalDisk apply is answered and put in the LocalDisk store, Events are taken, reads of other
/// nodes' LocalDisks find nothing.
struct FakeApi {
    pvs: Arc<PvIndex>,
    disks: Arc<Store<LocalDisk>>,
    node: plan::NodeFacts,
    uids: AtomicU64,
    requests: Mutex<Vec<String>>,
    /// The reclaim policy of the StorageClass a list of them shows.
    class_policy: Mutex<&'static str>,
    /// The reclaim policy of each PV created, in order.
    created_policies: Mutex<Vec<String>>,
}

impl FakeApi {
    fn answer(&self, method: &str, path: &str, body: Value) -> (u16, Value) {
        self.requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(format!("{method} {path}"));
        let uid = self.uids.fetch_add(1, Ordering::Relaxed);
        let ours = format!("/apis/{}/", crate::contract::GROUP);
        match (method, path) {
            ("POST", "/api/v1/persistentvolumes") => {
                let mut pv = body;
                pv["metadata"]["uid"] = json!(format!("uid-{uid}"));
                pv["metadata"]["resourceVersion"] = json!(uid.to_string());
                self.created_policies
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(
                        pv["spec"]["persistentVolumeReclaimPolicy"]
                            .as_str()
                            .unwrap_or_default()
                            .into(),
                    );
                let mut watched = pv.clone();
                watched["status"] = json!({"phase": "Available"});
                self.pvs.apply(&self.node, Event::Apply(text(watched)));
                (201, pv)
            }
            ("PATCH", p) if p.starts_with(&ours) => {
                let mut disk = body;
                disk["metadata"]["uid"] = json!(format!("uid-{uid}"));
                disk["metadata"]["resourceVersion"] = json!(uid.to_string());
                let event = Event::Apply(object(disk.clone()));
                crate::watch::apply(&self.disks, "LocalDisk", event, &objects());
                (200, disk)
            }
            ("GET", p) if p.starts_with(&ours) => (404, not_found()),
            ("POST", p) if p.ends_with("/events") => (201, body),
            ("GET", "/apis/storage.k8s.io/v1/storageclasses") => {
                let policy = *self.class_policy.lock().unwrap_or_else(|e| e.into_inner());
                let class = json!({"metadata": {"name": CLASS, "uid": "sc-uid"},
                    "provisioner": "kubernetes.io/no-provisioner", "reclaimPolicy": policy});
                (
                    200,
                    json!({"metadata": {"resourceVersion": "1"}, "items": [class]}),
                )
            }
            _ => (404, not_found()),
        }
    }

    fn requests(&self) -> Vec<String> {
        std::mem::take(&mut *self.requests.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

fn not_found() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "NotFound",
           "code": 404, "message": "not found"})
}

fn client(api: Arc<FakeApi>) -> Client {
    scripted::serve(move |seen| api.answer(&seen.method, &seen.path, seen.body))
}

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    opts: Options,
}

fn class() -> ClassConfig {
    ClassConfig {
        name: CLASS.into(),
        host_dir: HOST_DIR.into(),
        mount_dir: MOUNT_DIR.into(),
        volume_mode: VolumeMode::Filesystem,
        access_modes: vec!["ReadWriteOnce".into()],
        fs_type: None,
        name_patterns: vec!["*".into()],
        selector: Vec::new(),
        wipe: WipeMethod::Filesystem(FsWipe::RemoveContents),
        device_wipe: crate::config::BlockWipe::default(),
        wipe_on_first_discovery: false,
    }
}

fn stored<K: kube::Resource + Clone + PartialEq>(store: &Store<K>, items: Vec<K>) {
    crate::watch::apply(store, "", Event::Init, &objects());
    for o in items {
        crate::watch::apply(store, "", Event::InitApply(Guarded(Ok(o))), &objects());
    }
    crate::watch::apply(store, "", Event::InitDone, &objects());
}

/// An agent on a node holding `disks`, its PV index synced and empty, its caches filled.
struct Bed {
    agent: Agent,
    host: Arc<Disks>,
    api: Arc<FakeApi>,
    /// PVs and disks the planner planned, and whether a pass planned all of them, since the last event.
    planned: usize,
    whole: bool,
    _state: tempfile::TempDir,
}

impl Bed {
    fn new(host: Disks) -> Bed {
        let state = tempfile::tempdir().expect("a temporary directory");
        let node_facts = plan::NodeFacts {
            name: NODE.into(),
            hostname_label: Some(NODE.into()),
            uid: "node-uid".into(),
            labels: BTreeMap::from([("kubernetes.io/hostname".into(), NODE.into())]),
        };
        let pvs = PvIndex::new();
        pvs.set_node(&node_facts);
        pvs.set_narrow(false);
        pvs.apply(&node_facts, Event::Init);
        pvs.apply(&node_facts, Event::InitDone);
        let disks = Store::<LocalDisk>::new();
        stored(&disks, Vec::new());
        let nodes = Store::<Node>::new();
        stored(
            &nodes,
            vec![Node {
                metadata: ObjectMeta {
                    name: Some(NODE.into()),
                    uid: Some("node-uid".into()),
                    labels: Some(node_facts.labels.clone()),
                    ..ObjectMeta::default()
                },
                ..Node::default()
            }],
        );
        let classes = Store::<StorageClass>::new();
        stored(
            &classes,
            vec![StorageClass {
                metadata: ObjectMeta {
                    name: Some(CLASS.into()),
                    ..ObjectMeta::default()
                },
                provisioner: "kubernetes.io/no-provisioner".into(),
                reclaim_policy: Some("Delete".into()),
                ..StorageClass::default()
            }],
        );
        let api = Arc::new(FakeApi {
            pvs: pvs.clone(),
            disks: disks.clone(),
            node: node_facts,
            uids: AtomicU64::new(1),
            requests: Mutex::new(Vec::new()),
            class_policy: Mutex::new("Delete"),
            created_policies: Mutex::new(Vec::new()),
        });
        let state_dir = state.path().display().to_string();
        let cli =
            Cli::try_parse_from(["localpv", "--state-dir", &state_dir]).expect("valid options");
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        let host = Arc::new(host);
        let config = Config {
            classes: vec![class()],
            ..Config::default()
        };
        let agent = Agent::new(Setup {
            node: NODE.into(),
            client: client(api.clone()),
            host: host.clone(),
            config,
            opts: cli.opts,
            pvs,
            nodes,
            classes,
            disks,
            classes_polled: crate::watch::Polled::kept_current(),
            disks_polled: crate::watch::Polled::kept_current(),
            changed: Arc::new(Notify::new()),
            metrics,
            http: HttpState::new(registry),
        })
        .expect("the agent starts");
        Bed {
            agent,
            host,
            api,
            planned: 0,
            whole: false,
            _state: state,
        }
    }

    /// One wake-up of the loop: a pass, and again at once while the pass asks for it.
    async fn wake(&mut self) -> usize {
        let mut passes = 0;
        loop {
            let again = self.agent.pass().await == Some(Duration::ZERO);
            passes += 1;
            let work = self.agent.planner.work();
            self.planned += work.pvs + work.disks;
            self.whole |= work.whole;
            if !again {
                return passes;
            }
        }
    }
}

/// A node with `n` tagged disks, all published and in the inventory.
async fn settled(n: usize) -> Bed {
    let host = Disks::new();
    for i in 0..n {
        host.mount(&format!("pre-{i:05}"), true);
    }
    let mut bed = Bed::new(host);
    // Until a wake-up writes nothing: PVs, then LocalDisks, then the LocalDisks again with their PVs.
    for _ in 0..5 {
        bed.wake().await;
        if bed.api.requests().is_empty() {
            return bed;
        }
    }
    panic!("the agent did not settle in 5 wake-ups");
}

/// What one new mount cost: host probes, reads of the mount table and directories, PVs and disks planned, and the
/// API requests it caused.
#[derive(Debug)]
struct EventCost {
    probes: usize,
    reads: usize,
    /// Directory entries looked at one by one.
    entries: usize,
    passes: usize,
    planned: usize,
    /// Inventory entries built.
    built: usize,
    whole: bool,
    requests: Vec<String>,
}

async fn one_event(bed: &mut Bed, name: &str) -> EventCost {
    let probes = bed.host.probes();
    let reads = bed.host.reads();
    let entries = bed.host.counts.dir_entry.load(Ordering::Relaxed);
    let built = bed.agent.inventory_builder.built();
    (bed.planned, bed.whole) = (0, false);
    bed.host.mount(name, false);
    // As the mount watcher says after `mkdir` and `mount` in the discovery directory.
    bed.agent.changes.merge(HostChanges {
        mounts: true,
        entries: vec![(MOUNT_DIR.into(), name.into())],
        list_all: false,
    });
    // The mount event, then the wake-up the agent's own writes cause (PV and LocalDisk watch events).
    let passes = bed.wake().await + bed.wake().await;
    EventCost {
        probes: bed.host.probes() - probes,
        reads: bed.host.reads() - reads,
        entries: bed.host.counts.dir_entry.load(Ordering::Relaxed) - entries,
        passes,
        planned: bed.planned,
        built: bed.agent.inventory_builder.built() - built,
        whole: bed.whole || bed.agent.inventory_builder.work().whole,
        requests: bed.api.requests(),
    }
}

/// StorageClasses are polled, not watched (issue 34): a class deleted and made again with another reclaim policy
/// since the last list must not give a new PV the old one. Every pass that creates lists them first, however recent
/// the poller's last list.
#[tokio::test]
async fn a_new_pv_takes_the_reclaim_policy_of_the_class_as_listed_just_before_it_is_created() {
    let host = Disks::new();
    host.mount("vol1", true);
    let mut bed = Bed::new(host);
    *bed.api
        .class_policy
        .lock()
        .unwrap_or_else(|e| e.into_inner()) = "Retain";
    bed.agent.s.classes_polled = crate::watch::Polled::new();
    bed.wake().await;
    let requests = bed.api.requests();
    let at = |line: &str| requests.iter().position(|r| r.as_str() == line);
    let (listed, created) = (
        at("GET /apis/storage.k8s.io/v1/storageclasses"),
        at("POST /api/v1/persistentvolumes"),
    );
    assert!(
        listed.is_some() && listed < created,
        "listed, then created: {requests:?}"
    );
    let api = bed.api.clone();
    let policies = || {
        api.created_policies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    };
    assert_eq!(policies(), ["Retain"], "the class as it is now");
    bed.host.mount("vol2", true);
    bed.agent.changes.merge(HostChanges {
        mounts: true,
        entries: vec![(MOUNT_DIR.into(), "vol2".into())],
        list_all: false,
    });
    // Made again with Delete since the last list, a second before the next disk.
    *api.class_policy.lock().unwrap_or_else(|e| e.into_inner()) = "Delete";
    bed.wake().await;
    let requests = bed.api.requests();
    assert!(
        requests.iter().any(|r| r.contains("storageclasses")),
        "listed again before this create too: {requests:?}"
    );
    assert_eq!(policies(), ["Retain", "Delete"]);
}

#[tokio::test]
async fn a_mount_event_costs_the_same_work_at_10_and_2000_disks() {
    let mut costs = Vec::new();
    for n in [10, 2000] {
        let mut bed = settled(n).await;
        let pvs = bed.agent.s.pvs.view().pvs.pvs.len();
        assert_eq!(pvs, n, "every disk is published before the event");
        let cost = one_event(&mut bed, "new").await;
        let creates = cost
            .requests
            .iter()
            .filter(|r| r.starts_with("POST /api/v1/persistentvolumes"));
        assert_eq!(
            creates.count(),
            1,
            "one PV for the new disk: {:?}",
            cost.requests
        );
        assert!(!cost.whole, "no pass planned every disk: {cost:?}");
        assert_eq!(
            (cost.reads, cost.entries),
            (1, 1),
            "the first pass reads the mount table and looks at the one entry named, never the whole directory"
        );
        costs.push((
            cost.probes,
            cost.passes,
            cost.planned,
            cost.built,
            cost.requests.len(),
        ));
    }
    assert_eq!(
        costs[0], costs[1],
        "(probes, passes, PVs and disks planned, inventory entries built, requests) at 10 and 2000 disks"
    );
}

/// Prints what passes cost, for a profiler (`LOCALPV_PASS_COST=1000,5000 LOCALPV_PASS_EVENTS=5`, e.g. under
/// callgrind). Asserts nothing about time (machines here are noisy); in the suite it runs at small sizes, so the
/// hook keeps compiling and running instead of being skipped.
#[tokio::test]
async fn measure_event_cost() {
    let sizes = std::env::var("LOCALPV_PASS_COST").unwrap_or_else(|_| "10,50".into());
    let events: usize = std::env::var("LOCALPV_PASS_EVENTS")
        .ok()
        .and_then(|e| e.parse().ok())
        .unwrap_or(2);
    for n in sizes.split(',').filter_map(|n| n.parse::<usize>().ok()) {
        let t0 = Instant::now();
        let mut bed = settled(n).await;
        let setup = t0.elapsed();
        let t1 = Instant::now();
        let (mut probes, mut passes, mut planned) = (0, 0, 0);
        for e in 0..events {
            let cost = one_event(&mut bed, &format!("new-{e}")).await;
            probes += cost.probes;
            passes += cost.passes;
            planned += cost.planned + cost.built;
        }
        let per = |x: usize| x as f64 / events.max(1) as f64;
        let per_event = t1.elapsed() / events.max(1) as u32;
        eprintln!(
            "{n} disks: setup {setup:?}; per event {per_event:?}, {} probes, {} passes, {} planned",
            per(probes),
            per(passes),
            per(planned)
        );
    }
}

/// A filesystem that takes the volume id and loses it (it never reads back) gets no PV, and does not make the loop
/// spin: the pass right after the tag stores it again, and then the agent backs off like after any failed step. The
/// loop still stops when told.
#[tokio::test]
async fn a_volume_id_that_does_not_read_back_publishes_nothing_and_does_not_spin() {
    let host = Disks::new();
    host.lock().forget_tags = true;
    host.mount("lossy", false);
    let bed = Bed::new(host);
    let (host, api) = (bed.host.clone(), bed.api.clone());
    let (stop, stopped) = tokio_watch::channel(false);
    let watch_it = async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let tags = host.counts.tags.load(Ordering::Relaxed);
        stop.send(true).expect("the loop listens");
        tags
    };
    let ((), tags) = tokio::time::timeout(Duration::from_secs(10), async {
        tokio::join!(bed.agent.run(stopped), watch_it)
    })
    .await
    .expect("the agent stops when told");
    let requests = api.requests();
    assert!(
        !requests
            .iter()
            .any(|r| r.starts_with("POST /api/v1/persistentvolumes")),
        "no PV for a disk whose id does not read back: {requests:?}"
    );
    // NB: a spinning loop stores the id thousands of times a second; two (the tag and the pass that checks it) and a
    // few more for wake-ups from the agent's own writes are expected.
    assert!(
        (2..=5).contains(&tags),
        "volume ids stored in the first second: {tags}"
    );
}
