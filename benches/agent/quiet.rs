//! The quiet node, one plane for all three provisioners at once (each its own node with `own` disks and one
//! tenant volume): resident memory as other nodes' PVs are added, restart to ready with all those PVs in the
//! cluster, Released to Available for tenant volumes of 10k/100k/1M files, requests at steady state by verb from
//! the audit log, and last what each does with a bind mount left inside a released volume.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::cluster::ControlPlane;
use crate::support::disks::Mount;
use crate::support::nodes::create_node;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::agent::busy::{disk_paths, mount_all, node_name};
use crate::agent::subject::{KINDS, Subject};
use crate::agent::watch::{Seen, Watch};
use crate::common::process::status_mib;
use crate::{CLASS, Results, Sizes, plane};

pub const VERBS: [&str; 7] = [
    "get", "list", "watch", "create", "update", "patch", "delete",
];

/// Resident memory of the agent under test, MiB; it must still run.
fn rss_mib(pid: u32) -> f64 {
    status_mib(pid, "VmRSS")
        .unwrap_or_else(|| panic!("no VmRSS for pid {pid}: did the provisioner exit?"))
}

/// Creates PVs `other-<from>..other-<to>` spread over 100 other nodes, Available.
async fn other_pvs(client: &kube::Client, from: usize, to: usize) {
    let api: Api<PersistentVolume> = Api::all(client.clone());
    futures::stream::iter(from..to)
        .map(|i| {
            let api = api.clone();
            async move {
                let node = format!("other-{}", i % 100);
                let pv: PersistentVolume = serde_json::from_value(json!({
                    "metadata": {"name": format!("other-{i}"), "labels": {"localpv.io/node": node}},
                    "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                             "storageClassName": CLASS, "local": {"path": format!("/mnt/d/{i}")},
                             "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                                 {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}},
                }))
                .expect("PV literal");
                let name = format!("other-{i}");
                api.create(&PostParams::default(), &pv).await.expect("PV created");
                // NB: left to kube-controller-manager, whose client is held to 20 requests/s, 10,000 phase updates
                // queue for ~8 minutes and hold back every PV created after them (a recycled one too). Other
                // nodes' PVs in a real cluster have long been Available, so the benchmark sets the phase itself.
                let available = json!({"status": {"phase": "Available"}});
                api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&available))
                    .await
                    .expect("PV phase set");
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
}

/// Fills `dir` with `n` empty files, 1,000 per sub-directory, as a tenant would have left them. Empty: a wipe's
/// cost is per entry, and a page per file would take 4 GiB of memory at 1M files.
fn fill(dir: &Path, n: usize) {
    for i in 0..n {
        let sub = dir.join(format!("d{:04}", i / 1000));
        if i % 1000 == 0 {
            std::fs::create_dir_all(&sub).expect("tenant directory");
        }
        std::fs::File::create(sub.join(format!("f{:04}", i % 1000))).expect("tenant file");
    }
}

struct Node {
    subject: Subject,
    own: Vec<String>,
    tenant: PathBuf,
}

pub async fn quiet(s: &Sizes, r: &mut Results) {
    let cp = plane().await;
    let client = cp.client();
    let watch = Watch::start(client.clone(), &cp.dir.display().to_string()).await;
    // NB: the provisioners are stopped at the end by hand; then the mounts go, then the nodes (LSP's shared
    // mounts), so no unmount finds its mount already detached.
    let mut nodes = Vec::new();
    let mut mounts: Vec<Mount> = Vec::new();
    for kind in KINDS {
        let node = node_name(kind, "quiet");
        create_node(&client, &node, &[]).await;
        let subject = Subject::new(&cp, kind, &node);
        let own = disk_paths(&subject, "own", s.own);
        mount_all(&own, &cp, &mut mounts);
        let tenant = subject.disk("tenant");
        mounts.push(Mount::tmpfs(&tenant, "64M", cp.reaper()));
        nodes.push(Node {
            subject,
            own,
            tenant,
        });
    }
    for n in &mut nodes {
        n.subject.start(&cp);
    }
    for n in &mut nodes {
        let mut all = n.own.clone();
        all.push(n.tenant.display().to_string());
        watch.all(&all, true, Duration::from_secs(1800)).await;
        n.subject.wait_ready().await;
    }
    let mine = nodes.len() * (s.own + 1);
    let small = (s.cluster_pvs / 10).max(mine);
    eprintln!("quiet: {small} PVs");
    other_pvs(&client, 0, small - mine).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    for n in &nodes {
        r.add(n.subject.kind, "rss_small", rss_mib(n.subject.pid()));
    }
    eprintln!("quiet: {} PVs", s.cluster_pvs);
    other_pvs(&client, small - mine, s.cluster_pvs.max(small) - mine).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    for n in &nodes {
        r.add(n.subject.kind, "rss_large", rss_mib(n.subject.pid()));
    }

    for round in 0..s.quiet_repeats {
        for i in 0..nodes.len() {
            let n = &mut nodes[(i + round) % KINDS.len()];
            n.subject.stop();
            let t0 = Instant::now();
            n.subject.start(&cp);
            n.subject.wait_ready().await;
            r.add(n.subject.kind, "restart_ready", t0.elapsed().as_secs_f64());
        }
    }

    let ns = cp.namespace("bench").await;
    let mut claims = 0;
    for &files in &s.wipe_files {
        for round in 0..s.quiet_repeats {
            for i in 0..nodes.len() {
                let n = &nodes[(i + round) % KINDS.len()];
                eprintln!("quiet: recycle {files} files, {}", n.subject.kind.label());
                claims += 1;
                let took = recycle(&client, &watch, &ns, &n.tenant, claims, files).await;
                let took = took.unwrap_or_else(|| {
                    panic!(
                        "{} never made the volume Available again:\n{}",
                        n.subject.kind.label(),
                        n.subject.log()
                    )
                });
                r.add(
                    n.subject.kind,
                    &format!("recycle_{files}_files"),
                    took.as_secs_f64(),
                );
            }
        }
    }

    steady(s, &cp, &nodes, r).await;

    for n in &nodes {
        claims += 1;
        let text = bind_mount(&cp, &watch, &ns, n, claims).await;
        r.text(n.subject.kind, "bind_mount", text);
    }
    for n in &mut nodes {
        n.subject.stop();
    }
    drop(mounts);
}

async fn steady(s: &Sizes, cp: &ControlPlane, nodes: &[Node], r: &mut Results) {
    tokio::time::sleep(Duration::from_secs(3)).await;
    let audit = cp.dir.join("logs/audit.log");
    let before: Vec<_> = nodes
        .iter()
        .map(|n| {
            let ids = requests(&audit, n.subject.user(), &BTreeSet::new()).ids;
            // NB: an empty count proves nothing if the user filter is wrong: the start-up requests must be there.
            assert!(
                !ids.is_empty(),
                "no request by {} in {}",
                n.subject.user(),
                audit.display()
            );
            ids
        })
        .collect();
    eprintln!("quiet: steady state for {} s", s.steady);
    tokio::time::sleep(Duration::from_secs(s.steady)).await;
    let hour = 3600.0 / s.steady as f64;
    for (n, before) in nodes.iter().zip(before) {
        let after = requests(&audit, n.subject.user(), &before);
        let kind = n.subject.kind;
        let mut writes = 0.0;
        let mut total = 0.0;
        for (verb, count) in &after.new_by_verb {
            let per_hour = *count as f64 * hour;
            total += per_hour;
            if !["get", "list", "watch"].contains(&verb.as_str()) {
                writes += per_hour;
            }
        }
        for verb in VERBS {
            let count = after.new_by_verb.get(verb).copied().unwrap_or(0);
            r.add(kind, &format!("steady_{verb}"), count as f64 * hour);
        }
        r.add(kind, "steady_writes", writes);
        r.add(kind, "steady_total", total);
        r.add(kind, "steady_open_watches", after.open_watches as f64);
    }
}

/// A tenant's claim on the Available PV at a path.
struct Claim {
    pv: String,
    uid: String,
    claim: String,
    path: String,
}

/// Binds the Available PV at `vol` to a new claim and waits until it is Bound.
async fn claim(client: &kube::Client, watch: &Watch, ns: &str, vol: &Path, no: usize) -> Claim {
    let path = vol.display().to_string();
    let (pv, uid) = watch
        .until(
            &format!("an Available PV for {path}"),
            Duration::from_secs(300),
            |s| {
                let last = s.changes.iter().rev().find(|c| c.path == path)?;
                (last.phase == "Available" && !last.deleted)
                    .then(|| (last.name.clone(), last.uid.clone()))
            },
        )
        .await;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let claim = format!("tenant-{no}");
    let pvc: PersistentVolumeClaim =
        serde_json::from_value(json!({"metadata": {"name": claim}, "spec": {
        "accessModes": ["ReadWriteOnce"], "storageClassName": CLASS, "volumeName": pv,
        "resources": {"requests": {"storage": "10Mi"}}}}))
        .expect("PVC literal");
    pvcs.create(&PostParams::default(), &pvc)
        .await
        .expect("PVC created");
    let c = Claim {
        pv,
        uid,
        claim,
        path,
    };
    watch
        .until(
            &format!("{} Bound", c.pv),
            Duration::from_secs(120),
            in_phase(&c.uid, "Bound"),
        )
        .await;
    c
}

fn in_phase(uid: &str, phase: &'static str) -> impl Fn(&Seen) -> Option<Instant> {
    let uid = uid.to_string();
    move |s: &Seen| {
        s.changes
            .iter()
            .find(|c| c.uid == uid && c.phase == phase)
            .map(|c| c.at)
    }
}

/// Deletes the claim; when its PV was seen Released.
async fn release(client: &kube::Client, watch: &Watch, ns: &str, c: &Claim) -> Instant {
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    pvcs.delete(&c.claim, &DeleteParams::default())
        .await
        .expect("PVC deleted");
    watch
        .until(
            &format!("{} Released", c.pv),
            Duration::from_secs(120),
            in_phase(&c.uid, "Released"),
        )
        .await
}

/// When a new PV for the claim's path was seen Available after `released`, waiting `patience` at most.
async fn fresh(watch: &Watch, c: &Claim, released: Instant, patience: Duration) -> Option<Instant> {
    watch
        .within(patience, |s| {
            s.changes
                .iter()
                .find(|x| {
                    x.at > released
                        && x.uid != c.uid
                        && x.path == c.path
                        && x.phase == "Available"
                        && !x.deleted
                })
                .map(|x| x.at)
        })
        .await
}

/// Released to a new Available PV for the tenant volume `vol` after a tenant left `files` files in it.
async fn recycle(
    client: &kube::Client,
    watch: &Watch,
    ns: &str,
    vol: &Path,
    no: usize,
    files: usize,
) -> Option<Duration> {
    let c = claim(client, watch, ns, vol, no).await;
    let dir = vol.to_path_buf();
    tokio::task::spawn_blocking(move || fill(&dir, files))
        .await
        .expect("fill task");
    let released = release(client, watch, ns, &c).await;
    let at = fresh(watch, &c, released, Duration::from_secs(1800)).await?;
    let empty = std::fs::read_dir(vol)
        .expect("volume readable")
        .next()
        .is_none();
    assert!(empty, "the recycled volume {} is not empty", vol.display());
    Some(at - released)
}

/// A tenant volume released with a bind mount of a directory from outside the volume (holding one file) left
/// inside it. What became of the outside file, the mount and the PV, in words.
async fn bind_mount(cp: &ControlPlane, watch: &Watch, ns: &str, n: &Node, no: usize) -> String {
    let client = cp.client();
    let c = claim(&client, watch, ns, &n.tenant, no).await;
    let outside = cp.dir.join(format!("outside-{}", n.subject.node));
    std::fs::create_dir_all(&outside).expect("outside dir");
    std::fs::write(outside.join("precious"), "not the tenant's\n").expect("outside file");
    std::fs::write(n.tenant.join("tenant-file"), "the tenant's\n").expect("tenant file");
    let inside = n.tenant.join("mnt");
    let mount = Mount::bind(&outside, &inside, cp.reaper());
    let released = release(&client, watch, ns, &c).await;
    // Two discovery periods of the slowest (10 s) and then some: long enough for any of them to act.
    let patience = Duration::from_secs(45);
    let recycled = fresh(watch, &c, released, patience).await.is_some();
    let precious = outside.join("precious").exists();
    let tenant_left = n.tenant.join("tenant-file").exists();
    let mounted = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(inside.to_str().unwrap_or("")));
    let phase = watch.current(&c.path).map(|(_, uid, phase)| {
        if uid == c.uid {
            phase
        } else {
            format!("new PV {phase}")
        }
    });
    drop(mount);
    let verdict = match (precious, recycled) {
        (false, _) => "**wiped through the mount**: the file outside the volume was deleted",
        (true, true) if mounted => "**leaked**: recycled with the mount still inside",
        (true, true) => "recycled, the outside file untouched",
        (true, false) => "refused: the outside file untouched, the volume not recycled",
    };
    format!(
        "{verdict} (after {} s: outside file {}, tenant's own file {}, bind mount {}, PV {})",
        patience.as_secs(),
        if precious { "kept" } else { "deleted" },
        if tenant_left { "kept" } else { "deleted" },
        if mounted { "still mounted" } else { "gone" },
        phase.unwrap_or_else(|| "deleted, none new".into()),
    )
}

/// What the audit log holds for one user.
struct Audited {
    /// Every request's audit ID.
    ids: BTreeSet<String>,
    /// Requests per verb, leaving out those in the `known` set given.
    new_by_verb: BTreeMap<String, usize>,
    /// Watches started and not ended (their ResponseComplete is not logged yet).
    open_watches: usize,
}

/// Requests by `user` in the audit log. A watch counts when it starts (ResponseStarted), other requests when
/// answered (RequestReceived is not logged).
fn requests(audit_log: &Path, user: &str, known: &BTreeSet<String>) -> Audited {
    use crate::support::audit::{entries, text};
    let mut a = Audited {
        ids: BTreeSet::new(),
        new_by_verb: BTreeMap::new(),
        open_watches: 0,
    };
    let mut open = BTreeSet::new();
    for e in entries(audit_log) {
        if crate::support::audit::user(&e) != user {
            continue;
        }
        let id = text(&e["auditID"]);
        if e["verb"] == "watch" {
            if e["stage"] == "ResponseComplete" {
                open.remove(&id);
            } else {
                open.insert(id.clone());
            }
        }
        if a.ids.insert(id.clone()) && !known.contains(&id) {
            *a.new_by_verb.entry(text(&e["verb"])).or_insert(0) += 1;
        }
    }
    a.open_watches = open.len();
    a
}
