//! The LocalDisk inventory end to end (issue 6): a node agent over real loop devices (ext4 and xfs mounted, a raw
//! device behind a symlink in a Block class) and entries it cannot use writes one LocalDisk per entry with the
//! disk's identity, follows a volume through its life, keeps a disk's object when its device is renamed, gives a
//! reformatted disk a new one, and writes nothing in a steady state. Read back the ways an operator reads it:
//! `kubectl get ldisk`, `localpv disks` and the agent's `GET /disks`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use localpv::inventory::format::human_bytes;
use localpv::inventory::{LocalDisk, LocalDiskPhase};
use serde_json::json;
use tokio::task::JoinHandle;

use crate::node_agent::{local_storage_class, obj, phase, pvs_of};
use crate::support::agent::{Agent, audited, install_crd, localpv_bin};
use crate::support::cluster::{ControlPlane, Options};
use crate::support::disks::{LoopDevice, Mount, run};
use crate::support::eventually;
use crate::support::nodes::create_node;

/// Generous: the machine is shared with builds and other tests.
const WAIT: Duration = Duration::from_secs(90);
const MIB: u64 = 1 << 20;

// ---- disks ----

/// A loop device over an existing backing file (which `LoopDevice::new` would truncate), detached on drop.
struct Attached {
    device: String,
}

impl Attached {
    fn new(backing: &Path, cp: &ControlPlane) -> Attached {
        let device = run(
            "losetup",
            &["--find", "--show", &backing.display().to_string()],
        )
        .trim()
        .to_string();
        cp.reaper().track_loop(&device);
        Attached { device }
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.device]).status();
    }
}

/// Formats `device` (mkfs on the attached device, so a label can be given).
fn mkfs(fs: &str, device: &str, label: &str) {
    match fs {
        "xfs" => run("mkfs.xfs", &["-q", "-f", "-L", label, device]),
        other => run(&format!("mkfs.{other}"), &["-q", "-F", "-L", label, device]),
    };
}

/// Unmounts now (not lazily: the device must be free before it is detached or reformatted) and disarms the guard.
fn unmount_now(mount: Mount) {
    run("umount", &[&mount.path.display().to_string()]);
    // NB: the guard's lazy unmount would only complain that the path is not mounted; a later mount there has its
    // own guard (and the reaper tracks the path either way).
    std::mem::forget(mount);
}

/// What libblkid says about `device`, probing it directly (`-p`: no cache, which a reformat makes stale).
fn blkid(device: &str) -> BTreeMap<String, String> {
    run("blkid", &["-p", "-o", "export", device])
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Total bytes of the filesystem mounted at `path`, as statvfs counts them.
fn fs_capacity(path: &Path) -> u64 {
    let s = nix::sys::statvfs::statvfs(path).expect("statvfs of a mounted test filesystem");
    s.blocks() * s.fragment_size()
}

// ---- LocalDisks ----

fn phase_of(d: &LocalDisk) -> LocalDiskPhase {
    d.status.as_ref().map(|s| s.phase).unwrap_or_default()
}

fn pv_of(d: &LocalDisk) -> Option<String> {
    d.status.as_ref().and_then(|s| s.pv.clone())
}

fn describe(disks: &[LocalDisk]) -> String {
    disks
        .iter()
        .map(|d| {
            let s = d.status.clone().unwrap_or_default();
            format!(
                "{} {} {:?} {:?} pv={:?} claim={:?}",
                d.metadata.name.as_deref().unwrap_or("?"),
                d.spec.path,
                s.phase,
                s.reason,
                s.pv,
                s.claim
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Waits until the LocalDisks satisfy `check`, which returns what the test needs or why it is not there yet.
async fn wait_disks<T>(
    api: &Api<LocalDisk>,
    what: &str,
    check: impl Fn(&[LocalDisk]) -> Result<T, String>,
) -> T {
    eventually(what, WAIT, || async {
        let disks = api
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?
            .items;
        check(&disks).map_err(|why| format!("{why}; LocalDisks:\n{}", describe(&disks)))
    })
    .await
}

fn at_path<'a>(disks: &'a [LocalDisk], path: &Path) -> Vec<&'a LocalDisk> {
    let path = path.display().to_string();
    disks.iter().filter(|d| d.spec.path == path).collect()
}

fn named<'a>(disks: &'a [LocalDisk], name: &str) -> Result<&'a LocalDisk, String> {
    disks
        .iter()
        .find(|d| d.metadata.name.as_deref() == Some(name))
        .ok_or_else(|| format!("no LocalDisk {name}"))
}

/// One written state of a LocalDisk, as its watch delivers it.
#[derive(Clone, Debug, PartialEq)]
struct Step {
    phase: LocalDiskPhase,
    reason: Option<String>,
    pv: Option<String>,
    claim: Option<String>,
    wipe_reported: bool,
}

/// Every state one LocalDisk is written in (repeats folded), collected by a watch in the background.
struct History {
    steps: Arc<Mutex<Vec<Step>>>,
    task: JoinHandle<()>,
}

impl History {
    fn follow(api: Api<LocalDisk>, name: &str) -> History {
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let steps = Arc::new(Mutex::new(Vec::new()));
        let sink = steps.clone();
        let task = tokio::spawn(async move {
            let stream = watcher(api, config).default_backoff().applied_objects();
            let mut stream = std::pin::pin!(stream);
            while let Some(item) = stream.next().await {
                let Ok(disk) = item else { continue };
                let status = disk.status.clone().unwrap_or_default();
                let step = Step {
                    phase: status.phase,
                    reason: status.reason,
                    pv: status.pv,
                    claim: status.claim,
                    wipe_reported: status.wipe.is_some(),
                };
                let mut steps = sink.lock().expect("history lock");
                if steps.last() != Some(&step) {
                    steps.push(step);
                }
            }
        });
        History { steps, task }
    }

    fn steps(&self) -> Vec<Step> {
        self.steps.lock().expect("history lock").clone()
    }
}

impl Drop for History {
    fn drop(&mut self) {
        self.task.abort();
    }
}

// ---- the agent's side ----

/// The agent's LocalDisk writes in the audit log so far.
fn disk_writes(cp: &ControlPlane, agent: &Agent) -> Vec<(String, String, String)> {
    let audit = cp.dir.join("logs/audit.log");
    audited(
        &audit,
        &agent.user,
        &["create", "update", "patch", "delete"],
    )
    .into_iter()
    .filter(|(_, resource, _)| resource == "localdisks")
    .collect()
}

fn passes(agent: &Agent) -> u64 {
    let (_, text) = agent.get("/metrics").expect("agent serves /metrics");
    text.lines()
        .find_map(|l| l.strip_prefix("localpv_node_discovery_passes_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no discovery pass counter in:\n{text}"))
}

/// Runs `localpv disks args` as an operator would: the kubeconfig from `$KUBECONFIG`, nothing else inherited.
fn localpv_disks(cp: &ControlPlane, home: &Path, args: &[&str]) -> String {
    let mut all = vec!["disks"];
    all.extend_from_slice(args);
    let out = Command::new(localpv_bin())
        .args(&all)
        .env_clear()
        .env("HOME", home)
        .env("KUBECONFIG", &cp.admin_kubeconfig)
        .output()
        .expect("localpv runs");
    success(&out, "localpv disks")
}

fn kubectl(cp: &ControlPlane, args: &[&str]) -> String {
    let out = Command::new(cp.bin.join("kubectl"))
        .arg("--kubeconfig")
        .arg(&cp.admin_kubeconfig)
        .args(args)
        .output()
        .expect("kubectl runs");
    success(&out, "kubectl")
}

fn success(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn header(text: &str) -> Vec<String> {
    text.lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// The cells of `line` by column name, cut where the header's words start (empty cells print as nothing).
fn cells<'a>(table: &str, line: &'a str) -> BTreeMap<String, &'a str> {
    let head = table.lines().next().unwrap_or_default();
    let starts: Vec<(usize, &str)> = head
        .split_whitespace()
        .map(|word| (word.as_ptr() as usize - head.as_ptr() as usize, word))
        .collect();
    starts
        .iter()
        .enumerate()
        .map(|(i, (start, word))| {
            let end = starts
                .get(i + 1)
                .map_or(line.len(), |(next, _)| *next)
                .min(line.len());
            let cell = line.get((*start).min(end)..end).unwrap_or_default().trim();
            (word.to_string(), cell)
        })
        .collect()
}

fn row<'a>(text: &'a str, needle: &str) -> &'a str {
    text.lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line with {needle} in:\n{text}"))
}

/// A claim pre-bound to `pv` by `volumeName` (no pod needed), waited on until Bound.
async fn claim(client: &kube::Client, ns: &str, name: &str, pv: &str, class: &str) {
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let pvc: PersistentVolumeClaim = obj(json!({"metadata": {"name": name}, "spec": {
        "accessModes": ["ReadWriteOnce"], "storageClassName": class, "volumeName": pv,
        "resources": {"requests": {"storage": "10Mi"}}}}));
    pvcs.create(&PostParams::default(), &pvc)
        .await
        .expect("PVC created");
    eventually(&format!("{name} to be Bound"), WAIT, || async {
        let c = pvcs.get(name).await.map_err(|e| e.to_string())?;
        let p = c.status.and_then(|s| s.phase).unwrap_or_default();
        if p == "Bound" { Ok(()) } else { Err(p) }
    })
    .await;
}

/// A plane with the PV binder (claims pre-bound by `volumeName` need nothing else), the CRD, the classes and
/// `node-1`.
async fn plane(classes: &[(&str, &str)]) -> ControlPlane {
    let cp = ControlPlane::start(Options {
        controller_manager: true,
        ..Default::default()
    })
    .await;
    install_crd(&cp).await;
    for (class, policy) in classes {
        local_storage_class(&cp.client(), class, policy).await;
    }
    create_node(&cp.client(), "node-1", &[]).await;
    cp
}

struct FsDisk {
    path: PathBuf,
    device: String,
    ids: BTreeMap<String, String>,
    name: String,
}

impl FsDisk {
    fn uuid(&self) -> &str {
        &self.ids["UUID"]
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn local_disks_describe_every_entry_follow_a_volume_through_its_life_and_stay_quiet() {
    let cp = plane(&[("local-storage", "Delete"), ("raw-block", "Delete")]).await;
    let client = cp.client();
    let ns = cp.namespace("inventory").await;
    // The cleaner runs after the in-process removal; slow on purpose so the Wiping phase can be seen.
    let slow_cleaner = "    fsCleanerCommand: [\"sleep\", \"4\"]\n";
    let mut agent = Agent::with_classes(
        &cp,
        "node-1",
        &[
            ("local-storage", "disks", slow_cleaner),
            ("raw-block", "raw", "    volumeMode: Block\n"),
        ],
    );
    let images = cp.dir.join("images");
    std::fs::create_dir_all(&images).expect("image dir");

    // ext4 and xfs (xfs needs 300 MiB at least), formatted with labels, mounted under the Filesystem class.
    let ext4_dev = LoopDevice::new(&images.join("ext4.img"), 64, None, cp.reaper());
    let xfs_dev = LoopDevice::new(&images.join("xfs.img"), 320, None, cp.reaper());
    mkfs("ext4", &ext4_dev.device, "inv-ext4");
    mkfs("xfs", &xfs_dev.device, "inv-xfs");
    let _m_ext4 = Mount::device(&ext4_dev.device, &agent.disk("vol-ext4"), cp.reaper());
    let _m_xfs = Mount::device(&xfs_dev.device, &agent.disk("vol-xfs"), cp.reaper());
    let ext4 = fs_disk(&agent.disk("vol-ext4"), &ext4_dev.device);
    let xfs = fs_disk(&agent.disk("vol-xfs"), &xfs_dev.device);
    // Entries the agent cannot use: a stray file and a plain directory.
    std::fs::write(agent.disk("README"), "not a disk").expect("stray file");
    std::fs::create_dir_all(agent.disk("scratch")).expect("plain dir");
    // A raw device in the Block class, behind a symlink as the reference provisioner's docs set them up.
    let raw_dev = LoopDevice::new(&images.join("raw.img"), 64, None, cp.reaper());
    let raw_dir = cp.dir.join("hosts/node-1/raw");
    let blk1 = raw_dir.join("blk1");
    std::os::unix::fs::symlink(&raw_dev.device, &blk1).expect("symlink to the raw device");

    agent.start(&cp);
    agent.wait_ready().await;
    let api: Api<LocalDisk> = Api::all(client.clone());

    // Every entry has its LocalDisk once the PVs exist, with identity and phase.
    let pvs = eventually("three Available PVs", WAIT, || async {
        let pvs = pvs_of(&client, "node-1").await;
        let ready = pvs.len() == 3 && pvs.values().all(|pv| phase(pv) == "Available");
        if ready {
            Ok(pvs)
        } else {
            Err(format!("{:?}", pvs.keys()))
        }
    })
    .await;
    let pv_name = |path: &Path| -> String {
        pvs[&path.display().to_string()]
            .metadata
            .name
            .clone()
            .expect("PV has a name")
    };
    let (readme, scratch, block) = wait_disks(&api, "a LocalDisk per entry", |disks| {
        if disks.len() != 5 {
            return Err(format!("{} LocalDisks, want 5", disks.len()));
        }
        for (d, path) in [(&ext4, &ext4.path), (&xfs, &xfs.path)] {
            let disk = named(disks, &d.name)?;
            if pv_of(disk) != Some(pv_name(path)) {
                return Err(format!("{} does not name its PV yet", d.name));
            }
        }
        let one = |path: &Path| -> Result<LocalDisk, String> {
            match at_path(disks, path).as_slice() {
                [d] => Ok((*d).clone()),
                other => Err(format!("{} LocalDisks at {}", other.len(), path.display())),
            }
        };
        let block = one(&blk1)?;
        if pv_of(&block) != Some(pv_name(&blk1)) {
            return Err("the block disk does not name its PV yet".into());
        }
        Ok((
            one(&agent.disk("README"))?,
            one(&agent.disk("scratch"))?,
            block,
        ))
    })
    .await;
    let disks = api.list(&ListParams::default()).await.expect("list").items;
    for fs in [&ext4, &xfs] {
        let d = named(&disks, &fs.name).expect("listed above");
        assert_fs_identity(d, fs, "local-storage");
        assert_eq!(
            phase_of(d),
            LocalDiskPhase::Available,
            "{}",
            describe(&disks)
        );
    }
    let raw_size = 64 * MIB;
    assert_block_identity(&block, &blk1, &raw_dev.device, raw_size);
    assert_unusable(&readme, "NotADiskEntry");
    assert_unusable(&scratch, "NotAMountPoint");

    agent_reports_what_it_sees(&agent, &[&ext4, &xfs], &blk1);
    kubectl_shows_the_columns(&cp, &ext4, &xfs, &raw_dev.device);
    let capacity = |fs: &FsDisk| fs_capacity(&fs.path);
    let free = capacity(&ext4) + capacity(&xfs);
    let total = free + raw_size;
    let summary = format!(
        "5 disks, {} in total; local-storage: 2 free ({}), 0 bound, 2 other; raw-block: 1 free (64.0MiB), 0 bound",
        human_bytes(total),
        human_bytes(free)
    );
    localpv_disks_lists_them(&cp, &[&ext4, &xfs], &blk1, &summary);

    steady_state_writes_nothing(&cp, &agent, &pvs).await;

    a_volume_is_followed_through_its_life(&cp, &ns, &ext4, &pvs[&ext4.path.display().to_string()])
        .await;
    agent.process.take();
    drop((_m_ext4, _m_xfs));
}

/// A volume's life on the LocalDisk of `fs`: bound through a claim pre-bound to `pv`, released, wiped (seen while
/// the slow cleaner runs), published again; the same object all along.
async fn a_volume_is_followed_through_its_life(
    cp: &ControlPlane,
    ns: &str,
    fs: &FsDisk,
    pv: &PersistentVolume,
) {
    let client = cp.client();
    let api: Api<LocalDisk> = Api::all(client.clone());
    let history = History::follow(api.clone(), &fs.name);
    eventually("the watch on the LocalDisk to list it", WAIT, || async {
        if history.steps().is_empty() {
            Err("nothing yet".to_string())
        } else {
            Ok(())
        }
    })
    .await;
    let before = api.get(&fs.name).await.expect("the LocalDisk exists");
    let first_pv = pv.metadata.name.clone().expect("PV has a name");
    claim(&client, ns, "data-1", &first_pv, "local-storage").await;
    let claim = format!("{ns}/data-1");
    wait_disks(&api, "the LocalDisk to be Bound to the claim", |disks| {
        let d = named(disks, &fs.name)?;
        let status = d.status.clone().unwrap_or_default();
        let bound = status.phase == LocalDiskPhase::Bound
            && status.claim.as_deref() == Some(claim.as_str())
            && status.pv.as_deref() == Some(first_pv.as_str());
        if bound {
            Ok(())
        } else {
            Err("not Bound yet".into())
        }
    })
    .await;
    std::fs::write(fs.path.join("tenant.txt"), "tenant data").expect("tenant writes");
    Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
        .delete("data-1", &DeleteParams::default())
        .await
        .expect("PVC deleted");
    // NB: the PV name derives from node, class and entry: the new PV has the old one's name and a new UID.
    let path = fs.path.display().to_string();
    eventually(
        "the disk to come back as a new Available PV",
        WAIT,
        || async {
            let now = pvs_of(&client, "node-1").await;
            match now.get(&path) {
                Some(p) if p.metadata.uid != pv.metadata.uid && phase(p) == "Available" => Ok(()),
                other => Err(format!(
                    "{:?}",
                    other.map(|p| (p.metadata.uid.clone(), phase(p)))
                )),
            }
        },
    )
    .await;
    eventually("the LocalDisk to follow its PV", WAIT, || async {
        followed(&history.steps(), &first_pv, &claim)
    })
    .await;
    assert!(
        !fs.path.join("tenant.txt").exists(),
        "the tenant's data is wiped"
    );
    let after = api.get(&fs.name).await.expect("the LocalDisk exists");
    assert_eq!(
        after.metadata.uid, before.metadata.uid,
        "the disk kept its LocalDisk through the reclaim"
    );
}

/// The ext4/xfs disk at `path` on `device`: what blkid says and the LocalDisk name it must get.
fn fs_disk(path: &Path, device: &str) -> FsDisk {
    let ids = blkid(device);
    let uuid = ids
        .get("UUID")
        .unwrap_or_else(|| panic!("blkid shows no UUID on {device}: {ids:?}"));
    FsDisk {
        path: path.to_path_buf(),
        device: device.to_string(),
        name: format!("fs-{}", uuid.to_ascii_lowercase()),
        ids,
    }
}

fn assert_fs_identity(d: &LocalDisk, fs: &FsDisk, class: &str) {
    let spec = &d.spec;
    let what = &fs.name;
    assert_eq!(spec.node, "node-1", "{what}");
    assert_eq!(spec.path, fs.path.display().to_string(), "{what}");
    assert_eq!(spec.storage_class, class, "{what}");
    assert_eq!(
        spec.volume_mode.map(|m| format!("{m:?}")),
        Some("Filesystem".into()),
        "{what}"
    );
    assert_eq!(spec.device.as_deref(), Some(fs.device.as_str()), "{what}");
    assert_eq!(spec.fs_type.as_ref(), fs.ids.get("TYPE"), "{what}");
    assert_eq!(spec.fs_uuid.as_deref(), Some(fs.uuid()), "{what}");
    let label = fs
        .ids
        .get("LABEL")
        .expect("the test labels its filesystems");
    assert_eq!(spec.fs_label.as_ref(), Some(label), "{what}");
    let capacity = fs_capacity(&fs.path);
    assert_eq!(spec.capacity_bytes, Some(capacity), "{what}");
    assert_eq!(
        spec.capacity_human.as_deref(),
        Some(human_bytes(capacity).as_str()),
        "{what}"
    );
    let labels = d.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get("localpv.io/node").map(String::as_str),
        Some("node-1"),
        "{what}"
    );
    assert_eq!(
        labels.get("localpv.io/class").map(String::as_str),
        Some(class),
        "{what}"
    );
    assert_eq!(
        labels.get("localpv.io/fs-uuid").map(String::as_str),
        Some(fs.uuid()),
        "{what}"
    );
    let available = d.status.as_ref().and_then(|s| s.available_bytes);
    let available = available.unwrap_or_else(|| panic!("{what}: no free space recorded"));
    assert!(
        available <= capacity,
        "{what}: free space {available} of {capacity}"
    );
}

fn assert_block_identity(d: &LocalDisk, path: &Path, device: &str, size: u64) {
    let spec = &d.spec;
    assert_eq!(spec.node, "node-1");
    assert_eq!(spec.path, path.display().to_string());
    assert_eq!(spec.storage_class, "raw-block");
    assert_eq!(
        spec.volume_mode.map(|m| format!("{m:?}")),
        Some("Block".into())
    );
    assert_eq!(spec.device.as_deref(), Some(device), "the symlink's target");
    assert_eq!(spec.fs_type, None, "a raw device has no filesystem");
    assert_eq!(spec.capacity_bytes, Some(size));
    assert_eq!(spec.capacity_human, Some(human_bytes(size)));
    assert_eq!(phase_of(d), LocalDiskPhase::Available);
}

fn assert_unusable(d: &LocalDisk, reason: &str) {
    let status = d.status.clone().unwrap_or_default();
    assert_eq!(status.phase, LocalDiskPhase::Unusable, "{}", d.spec.path);
    assert_eq!(status.reason.as_deref(), Some(reason), "{}", d.spec.path);
    let message = status.message.unwrap_or_default();
    assert!(
        message.contains(&d.spec.path),
        "the message names the path: {message}"
    );
    assert_eq!(d.spec.storage_class, "local-storage");
    assert_eq!(d.spec.capacity_bytes, None);
}

/// `GET /disks` on the agent: what discovery sees right now, usable or not.
fn agent_reports_what_it_sees(agent: &Agent, fs: &[&FsDisk], block: &Path) {
    let (status, body) = agent.get("/disks").expect("agent serves /disks");
    assert_eq!(status, 200, "{body}");
    let seen: serde_json::Value = serde_json::from_str(&body).expect("/disks is JSON");
    assert_eq!(seen["node"], "node-1", "{body}");
    let disks = seen["disks"].as_array().expect("disks array");
    let by_path = |p: &Path| {
        disks
            .iter()
            .find(|d| d["hostPath"] == json!(p.display().to_string()))
            .unwrap_or_else(|| panic!("/disks lacks {}: {body}", p.display()))
    };
    for d in fs {
        let entry = by_path(&d.path);
        assert_eq!(entry["mode"], "Filesystem", "{body}");
        assert_eq!(entry["identity"]["fsUuid"], json!(d.uuid()), "{body}");
        assert_eq!(entry["identity"]["fsType"], json!(d.ids["TYPE"]), "{body}");
        assert_eq!(entry["identity"]["device"], json!(d.device), "{body}");
    }
    assert_eq!(by_path(block)["mode"], "Block", "{body}");
    assert_eq!(disks.len(), 3, "{body}");
    let unusable: BTreeMap<String, String> = seen["unusable"]
        .as_array()
        .expect("unusable array")
        .iter()
        .map(|u| {
            let s = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
            (s(&u["entry"]), s(&u["reason"]))
        })
        .collect();
    assert_eq!(
        unusable,
        BTreeMap::from([
            ("README".to_string(), "NotADiskEntry".to_string()),
            ("scratch".to_string(), "NotAMountPoint".to_string()),
        ]),
        "{body}"
    );
}

fn kubectl_shows_the_columns(cp: &ControlPlane, ext4: &FsDisk, xfs: &FsDisk, raw_device: &str) {
    let table = kubectl(cp, &["get", "ldisk"]);
    assert_eq!(
        header(&table),
        [
            "NAME", "NODE", "PATH", "CLASS", "SIZE", "PHASE", "PV", "CLAIM", "AGE"
        ],
        "{table}"
    );
    assert_eq!(table.lines().count(), 6, "{table}");
    let line = row(&table, &ext4.name);
    for cell in ["node-1", "local-storage", "Available"] {
        assert!(line.contains(cell), "{cell} missing: {line}");
    }
    assert!(
        line.contains(&human_bytes(fs_capacity(&ext4.path))),
        "{line}"
    );
    assert!(row(&table, "scratch").contains("Unusable"), "{table}");
    assert!(row(&table, "blk1").contains("64.0MiB"), "{table}");

    let wide = kubectl(cp, &["get", "ldisk", "-o", "wide"]);
    let columns = header(&wide);
    assert_eq!(
        columns[9..],
        ["DEVICE", "FSTYPE", "FSUUID", "MODEL", "SERIAL"],
        "{wide}"
    );
    for fs in [ext4, xfs] {
        let cells = cells(&wide, row(&wide, &fs.name));
        assert_eq!(cells["DEVICE"], fs.device, "{wide}");
        assert_eq!(cells["FSTYPE"], fs.ids["TYPE"], "{wide}");
        assert_eq!(cells["FSUUID"], fs.uuid(), "{wide}");
    }
    assert!(row(&wide, "blk1").contains(raw_device), "{wide}");
}

fn localpv_disks_lists_them(cp: &ControlPlane, fs: &[&FsDisk], block: &Path, summary: &str) {
    let home = tempfile::tempdir().expect("temp dir");
    let table = localpv_disks(cp, home.path(), &[]);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(
        header(&table),
        [
            "NODE", "PATH", "CLASS", "SIZE", "PHASE", "PV", "CLAIM", "AGE"
        ],
        "{table}"
    );
    let paths: Vec<&str> = lines[1..6]
        .iter()
        .map(|l| l.split_whitespace().nth(1).unwrap_or_default())
        .collect();
    let want: Vec<String> = [
        fs[0].path.with_file_name("README"),
        fs[0].path.with_file_name("scratch"),
        fs[0].path.clone(),
        fs[1].path.clone(),
        block.to_path_buf(),
    ]
    .iter()
    .map(|p| p.display().to_string())
    .collect();
    assert_eq!(paths, want, "sorted by node and path:\n{table}");
    for d in fs {
        let line = row(&table, &d.path.display().to_string());
        assert!(line.contains(&human_bytes(fs_capacity(&d.path))), "{line}");
    }
    assert!(row(&table, "README").contains("Unusable"), "{table}");
    assert!(
        table.contains(summary),
        "want summary {summary:?} in:\n{table}"
    );

    let wide = localpv_disks(cp, home.path(), &["-o", "wide", "--class", "local-storage"]);
    assert!(
        header(&wide).ends_with(
            &["DEVICE", "FSTYPE", "FSUUID", "MODEL", "SERIAL", "NAME"].map(String::from)
        ),
        "{wide}"
    );
    assert!(row(&wide, &fs[1].name).contains("xfs"), "{wide}");
    assert!(!wide.contains("blk1"), "--class filters: {wide}");

    let text = localpv_disks(cp, home.path(), &["-o", "json"]);
    let list: serde_json::Value = serde_json::from_str(&text).expect("-o json is JSON");
    assert_eq!(list["kind"], "List", "{text}");
    let items = list["items"].as_array().expect("items");
    let names: Vec<&str> = items
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .collect();
    assert_eq!(items.len(), 5, "{text}");
    for d in fs {
        assert!(names.contains(&d.name.as_str()), "{names:?}");
    }
    assert!(
        items
            .iter()
            .all(|i| i["metadata"].get("managedFields").is_none()),
        "{text}"
    );
    let unusable = localpv_disks(cp, home.path(), &["--phase", "unusable", "-o", "json"]);
    let list: serde_json::Value = serde_json::from_str(&unusable).expect("JSON");
    let reasons: Vec<&str> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|i| i["status"]["reason"].as_str())
        .collect();
    assert_eq!(reasons, ["NotADiskEntry", "NotAMountPoint"], "{unusable}");
}

/// After things settle, passes over the unchanged node (woken by PV events) write no LocalDisk.
async fn steady_state_writes_nothing(
    cp: &ControlPlane,
    agent: &Agent,
    pvs: &BTreeMap<String, PersistentVolume>,
) {
    eventually("the agent's LocalDisk writes to settle", WAIT, || async {
        let before = disk_writes(cp, agent).len();
        tokio::time::sleep(Duration::from_secs(3)).await;
        let after = disk_writes(cp, agent).len();
        if before == after {
            Ok(())
        } else {
            Err(format!("{} writes in 3s", after - before))
        }
    })
    .await;
    let writes_before = disk_writes(cp, agent).len();
    let passes_before = passes(agent);
    // Unrelated PV changes wake the agent: each wake is a full discovery and inventory pass.
    let api: Api<PersistentVolume> = Api::all(cp.client());
    for (i, pv) in pvs.values().enumerate() {
        let name = pv.metadata.name.as_deref().expect("PV has a name");
        let patch = json!({"metadata": {"annotations": {"example.com/poke": i.to_string()}}});
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("PV annotated");
    }
    eventually(
        "the agent to run passes after the PV changes",
        WAIT,
        || async {
            let now = passes(agent);
            if now > passes_before {
                Ok(())
            } else {
                Err(format!("{now} passes"))
            }
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let writes = disk_writes(cp, agent);
    assert_eq!(
        writes[writes_before..].to_vec(),
        vec![],
        "a steady state writes no LocalDisk ({} passes ran)",
        passes(agent) - passes_before
    );
}

/// Whether the LocalDisk went Bound (PV and claim) → Wiping (with wipe progress) and Released → Available (the
/// PV again, no claim). Err says what is missing so far.
fn followed(steps: &[Step], first_pv: &str, claim: &str) -> Result<(), String> {
    let show = || format!("{steps:#?}");
    let bound = steps
        .iter()
        .position(|s| s.phase == LocalDiskPhase::Bound)
        .ok_or_else(|| format!("never Bound: {}", show()))?;
    let b = &steps[bound];
    if b.pv.as_deref() != Some(first_pv) || b.claim.as_deref() != Some(claim) {
        return Err(format!("Bound without PV and claim: {}", show()));
    }
    let after_bound = &steps[bound..];
    let wiping = after_bound
        .iter()
        .position(|s| s.phase == LocalDiskPhase::Wiping && s.wipe_reported)
        .ok_or_else(|| format!("never Wiping with progress after Bound: {}", show()))?;
    let released = after_bound
        .iter()
        .find(|s| s.phase == LocalDiskPhase::Released)
        .ok_or_else(|| format!("never Released after Bound: {}", show()))?;
    if released.claim.as_deref() != Some(claim) {
        return Err(format!("the claim is not kept while Released: {}", show()));
    }
    let last = steps.last().filter(|_| after_bound.len() > wiping + 1);
    match last {
        Some(s)
            if s.phase == LocalDiskPhase::Available
                && s.pv.as_deref() == Some(first_pv)
                && s.claim.is_none() =>
        {
            Ok(())
        }
        _ => Err(format!(
            "not Available with its new PV after the wipe: {}",
            show()
        )),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_disk_keeps_its_local_disk_across_a_device_rename_and_a_reformat_gets_a_new_one() {
    let cp = plane(&[("local-storage", "Delete")]).await;
    let mut agent = Agent::new(&cp, "node-1", "local-storage");
    let images = cp.dir.join("images");
    std::fs::create_dir_all(&images).expect("image dir");
    let backing = images.join("vol1.img");
    let first = LoopDevice::new(&backing, 64, None, cp.reaper());
    mkfs("ext4", &first.device, "inv-rename");
    let vol1 = agent.disk("vol1");
    let mount = Mount::device(&first.device, &vol1, cp.reaper());
    let disk = fs_disk(&vol1, &first.device);
    agent.start(&cp);
    agent.wait_ready().await;
    let api: Api<LocalDisk> = Api::all(cp.client());

    let original = wait_disks(&api, "vol1's LocalDisk to be Available", |disks| {
        let d = named(disks, &disk.name)?;
        let ready = phase_of(d) == LocalDiskPhase::Available
            && d.status.as_ref().is_some_and(|s| s.pv.is_some());
        if ready {
            Ok(d.clone())
        } else {
            Err("not Available with a PV yet".into())
        }
    })
    .await;
    assert_eq!(original.spec.device.as_deref(), Some(first.device.as_str()));

    // Detach and attach again under another number: unmount, detach, take the freed number with an unrelated
    // device, attach the same file, mount it again.
    unmount_now(mount);
    wait_disks(
        &api,
        "vol1's LocalDisk to go Missing while unmounted",
        |disks| {
            let d = named(disks, &disk.name)?;
            if phase_of(d) == LocalDiskPhase::Missing {
                Ok(())
            } else {
                Err("not Missing yet".into())
            }
        },
    )
    .await;
    let old_device = first.device.clone();
    drop(first);
    let mut fillers = Vec::new();
    while run("losetup", &["--find"]).trim() == old_device && fillers.len() < 4 {
        let filler = images.join(format!("filler-{}.img", fillers.len()));
        fillers.push(LoopDevice::new(&filler, 1, None, cp.reaper()));
    }
    let again = Attached::new(&backing, &cp);
    assert_ne!(
        again.device, old_device,
        "the loop file came back under another number"
    );
    let mount = Mount::device(&again.device, &vol1, cp.reaper());
    assert_eq!(
        blkid(&again.device).get("UUID").map(String::as_str),
        Some(disk.uuid())
    );
    let renamed = wait_disks(
        &api,
        "vol1's LocalDisk to be Available on the new device",
        |disks| {
            let d = named(disks, &disk.name)?;
            let back = phase_of(d) == LocalDiskPhase::Available
                && d.spec.device.as_deref() == Some(again.device.as_str());
            if !back {
                return Err("not back yet".into());
            }
            match at_path(disks, &vol1).len() {
                1 => Ok(d.clone()),
                n => Err(format!(
                    "{n} LocalDisks at vol1: the unmounted directory's object is not gone"
                )),
            }
        },
    )
    .await;
    assert_eq!(
        renamed.metadata.uid, original.metadata.uid,
        "same object, not a new one"
    );
    assert_eq!(
        renamed.metadata.creation_timestamp,
        original.metadata.creation_timestamp
    );
    assert_eq!(
        renamed
            .status
            .as_ref()
            .and_then(|s| s.missing_since.clone()),
        None
    );

    // Reformat the same device: a new filesystem UUID is a new disk; the old object goes Missing.
    unmount_now(mount);
    mkfs("ext4", &again.device, "inv-new");
    let mount = Mount::device(&again.device, &vol1, cp.reaper());
    let reformatted = fs_disk(&vol1, &again.device);
    assert_ne!(reformatted.uuid(), disk.uuid(), "mkfs gives a new UUID");
    let (new, old) = wait_disks(
        &api,
        "a new LocalDisk for the reformatted disk, the old one Missing",
        |disks| {
            let new = named(disks, &reformatted.name)?;
            let old = named(disks, &disk.name)?;
            let done = phase_of(new) == LocalDiskPhase::Available
                && phase_of(old) == LocalDiskPhase::Missing;
            if done {
                Ok((new.clone(), old.clone()))
            } else {
                Err("not yet".into())
            }
        },
    )
    .await;
    assert_ne!(new.metadata.uid, original.metadata.uid);
    assert_fs_identity(&new, &reformatted, "local-storage");
    assert_eq!(old.metadata.uid, original.metadata.uid);
    let status = old.status.clone().unwrap_or_default();
    assert_eq!(status.reason.as_deref(), Some("DiskNotFound"));
    assert!(status.missing_since.is_some(), "{status:?}");
    assert_eq!(
        old.spec.path,
        vol1.display().to_string(),
        "the old object still says where the disk was"
    );

    agent.process.take();
    drop(mount);
    drop(again);
    drop(fillers);
}
