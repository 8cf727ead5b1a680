//! The inventory tests' kit: filesystems as blkid and statvfs see them, LocalDisk lookups and waits, a watch that
//! records every state one LocalDisk is written in, and the agent's, kubectl's and `localpv disks`' outputs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use localpv::inventory::{LocalDisk, LocalDiskPhase};
use serde_json::json;
use tokio::task::JoinHandle;

use crate::node_agent::{local_storage_class, obj};
use crate::support::agent::{Agent, audited, install_crd, localpv_bin};
use crate::support::cluster::{ControlPlane, Options};
use crate::support::disks::blkid;
use crate::support::eventually;
use crate::support::nodes::create_node;
use crate::support::proc::stdout_of;

/// Generous: the machine is shared with builds and other tests.
pub const WAIT: Duration = Duration::from_secs(90);
pub const MIB: u64 = 1 << 20;

// ---- disks ----

/// Total bytes of the filesystem mounted at `path`, as statvfs counts them.
pub fn fs_capacity(path: &Path) -> u64 {
    let s = nix::sys::statvfs::statvfs(path).expect("statvfs of a mounted test filesystem");
    s.blocks() * s.fragment_size()
}

// ---- LocalDisks ----

pub fn phase_of(d: &LocalDisk) -> LocalDiskPhase {
    d.status.as_ref().map(|s| s.phase).unwrap_or_default()
}

pub fn pv_of(d: &LocalDisk) -> Option<String> {
    d.status.as_ref().and_then(|s| s.pv.clone())
}

pub fn describe(disks: &[LocalDisk]) -> String {
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
pub async fn wait_disks<T>(
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

pub fn at_path<'a>(disks: &'a [LocalDisk], path: &Path) -> Vec<&'a LocalDisk> {
    let path = path.display().to_string();
    disks.iter().filter(|d| d.spec.path == path).collect()
}

pub fn named<'a>(disks: &'a [LocalDisk], name: &str) -> Result<&'a LocalDisk, String> {
    disks
        .iter()
        .find(|d| d.metadata.name.as_deref() == Some(name))
        .ok_or_else(|| format!("no LocalDisk {name}"))
}

/// One written state of a LocalDisk, as its watch delivers it.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub phase: LocalDiskPhase,
    pub reason: Option<String>,
    pub pv: Option<String>,
    pub claim: Option<String>,
    pub wipe_reported: bool,
}

/// Every state one LocalDisk is written in (repeats folded), collected by a watch in the background.
pub struct History {
    steps: Arc<Mutex<Vec<Step>>>,
    task: JoinHandle<()>,
}

impl History {
    pub fn follow(api: Api<LocalDisk>, name: &str) -> History {
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

    pub fn steps(&self) -> Vec<Step> {
        self.steps.lock().expect("history lock").clone()
    }
}

impl Drop for History {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A claim pre-bound to `pv` by `volumeName` (no pod needed), waited on until Bound.
pub async fn claim(client: &kube::Client, ns: &str, name: &str, pv: &str, class: &str) {
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
pub async fn plane(classes: &[(&str, &str)]) -> ControlPlane {
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

pub struct FsDisk {
    pub path: PathBuf,
    pub device: String,
    pub ids: BTreeMap<String, String>,
    pub name: String,
}

impl FsDisk {
    pub fn uuid(&self) -> &str {
        &self.ids["UUID"]
    }
}

/// The ext4/xfs disk at `path` on `device`: what blkid says and the LocalDisk name it must get.
pub fn fs_disk(path: &Path, device: &str) -> FsDisk {
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

// ---- the agent's side ----

/// The agent's LocalDisk writes in the audit log so far.
pub fn disk_writes(cp: &ControlPlane, agent: &Agent) -> Vec<(String, String, String)> {
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

pub fn passes(agent: &Agent) -> u64 {
    let (_, text) = agent.get("/metrics").expect("agent serves /metrics");
    text.lines()
        .find_map(|l| l.strip_prefix("localpv_node_discovery_passes_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no discovery pass counter in:\n{text}"))
}

/// Runs `localpv disks args` as an operator would: the kubeconfig from `$KUBECONFIG`, nothing else inherited.
pub fn localpv_disks(cp: &ControlPlane, home: &Path, args: &[&str]) -> String {
    let mut all = vec!["disks"];
    all.extend_from_slice(args);
    stdout_of(
        Command::new(localpv_bin())
            .args(&all)
            .env_clear()
            .env("HOME", home)
            .env("KUBECONFIG", &cp.admin_kubeconfig),
        "localpv disks",
    )
}

pub fn header(text: &str) -> Vec<String> {
    text.lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// The cells of `line` by column name, cut where the header's words start (empty cells print as nothing).
pub fn cells<'a>(table: &str, line: &'a str) -> BTreeMap<String, &'a str> {
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

pub fn row<'a>(text: &'a str, needle: &str) -> &'a str {
    text.lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line with {needle} in:\n{text}"))
}
