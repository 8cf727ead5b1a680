//! Every values file of the reference chart (its 21 `helm/examples/*.yaml` and its `values.yaml`, from the
//! reference tarball) run through our chart on real nodes, and the PVs the agent publishes compared with what the
//! reference provisioner publishes for that file (issue 38's proof; the table in docs/migration.md says the same).
//!
//! Examples whose classes render the same (the ConfigMap's `storageClassMap` and what shapes a PV) form one group:
//! one `helm upgrade` with the group's files merged in order (the pod settings of each apply together), then
//! the group's disks are made on the nodes and the PVs must be exactly the group's expectation; where the reference
//! publishes nothing, the entry's LocalDisk must give localpv's reason. Groups follow one another in one cluster; a
//! group's disks and PVs are removed before the next (as an operator starting afresh would find them), so each
//! group's PVs are judged alone. Each node sees a `/mnt` of its own, so the examples'
//! `hostDir`s (`/mnt/disks`, `/mnt/fast-disks`, `/mnt/disks/by-uuid/...`) stand as written, and the EKS example's
//! `/dev/disk/kubernetes` is a directory of device links of each node's own.
//!
//! What the reference publishes is data here, read from its code (`pkg/discovery/discovery.go`,
//! `pkg/common/common.go`): one PV per first-level entry of `hostDir`; a block device (or a link to one) in a
//! Filesystem class is a Filesystem PV with the class's `fsType` (the desired mode wins over the entry's), in a
//! Block class a Block PV; a directory in a Filesystem class only if it is a mount point (`path ... is not a valid
//! mount point`); a directory in a Block class never (`path ... of filesystem mode cannot be used to create block
//! volume`); `fsType` set on the PV only when the class's is not empty; the reclaim policy from the StorageClass; the
//! access mode ReadWriteOnce unless the class says otherwise; node affinity `kubernetes.io/hostname In [<the node's
//! hostname label>]` (which is the node name on these nodes) ORed with the class's `selector` (none here).

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::PersistentVolume;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::common::*;
use crate::support::disks::Mount;
use crate::support::realnode::images::LOCALPV_REPOSITORY;
use crate::support::realnode::{POD_TIMEOUT, RealCluster};
use crate::support::reference::{tarball, unpack};

mod groups;

use groups::{DEV_DIR, Disk, GROUPS, Group, Kind, NOT_INSTALLED, Publishes};

/// A PV as the comparison sees it: (node affinity as JSON, path, class, volumeMode, fsType, reclaim policy, access
/// modes).
type Shape = (
    String,
    String,
    String,
    String,
    Option<String>,
    String,
    Vec<String>,
);

fn shape(pv: &PersistentVolume) -> Shape {
    let spec = pv.spec.clone().unwrap_or_default();
    let local = spec.local.clone().unwrap_or_default();
    (
        serde_json::to_value(&spec.node_affinity)
            .expect("serialises")
            .to_string(),
        local.path,
        spec.storage_class_name.unwrap_or_default(),
        spec.volume_mode.unwrap_or_default(),
        local.fs_type,
        spec.persistent_volume_reclaim_policy.unwrap_or_default(),
        spec.access_modes.unwrap_or_default(),
    )
}

fn expected(group: &Group, disks: &[Disk]) -> Vec<Shape> {
    let mut out: Vec<Shape> = disks
        .iter()
        .filter_map(|d| {
            let class = group
                .classes
                .iter()
                .find(|c| c.name == d.class)
                .expect("a disk's class is the group's");
            let (mode, fs_type) = match d.publishes {
                Publishes::Filesystem(t) => ("Filesystem", t.map(str::to_string)),
                Publishes::Block => ("Block", None),
                Publishes::Nothing(..) => return None,
            };
            let affinity = json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [d.node]}]}]}});
            Some((
                affinity.to_string(),
                format!("{}/{}", class.host_dir, d.entry),
                class.name.to_string(),
                mode.to_string(),
                fs_type,
                class.reclaim.to_string(),
                vec!["ReadWriteOnce".to_string()],
            ))
        })
        .collect();
    out.sort();
    out
}

async fn shapes(c: &RealCluster) -> Vec<Shape> {
    let mut out: Vec<Shape> = pvs(c).await.values().map(shape).collect();
    out.sort();
    out
}

/// What a group's disks left on the host: mounts to drop (lazily), then links and directories (the mount points
/// too) to remove, so the next group's `hostDir` holds only its own entries.
#[derive(Default)]
struct Made {
    mounts: Vec<Mount>,
    paths: Vec<PathBuf>,
}

impl Made {
    fn clear(&mut self) {
        self.mounts.clear();
        for p in self.paths.drain(..) {
            let _ = fs::remove_file(&p).or_else(|_| fs::remove_dir(&p));
        }
    }
}

/// The host path of what `node` sees at `node_path` (its own `/mnt`, or its own device directory).
fn on_host(c: &RealCluster, node: &str, node_path: &str) -> PathBuf {
    let n = c.node(node);
    match Path::new(node_path).strip_prefix(DEV_DIR) {
        Ok(rel) => n.dev_dir.clone().expect("the node's dev dir").join(rel),
        Err(_) => n.own(Path::new(node_path)),
    }
}

fn make_disks(c: &RealCluster, group: &Group, disks: &[Disk], made: &mut Made) {
    for d in disks {
        let class = group
            .classes
            .iter()
            .find(|k| k.name == d.class)
            .expect("class");
        let at = on_host(c, d.node, &format!("{}/{}", class.host_dir, d.entry));
        match d.kind {
            Kind::Tmpfs => {
                made.mounts.push(Mount::tmpfs(&at, "16M", c.undo()));
                made.paths.push(at);
            }
            Kind::Dir => {
                fs::create_dir_all(&at).expect("a plain directory");
                made.paths.push(at);
            }
            Kind::Device => {
                // NB: kept attached to the end of the run: detaching mid-run would let the undo log detach
                // whatever device of another test took the freed number.
                let dev = c.loop_device(&format!("{}-{}-{}", d.node, d.class, d.entry), 16, None);
                symlink(&dev, &at).expect("a link to the device");
                made.paths.push(at);
            }
        }
    }
}

/// Removes every PV and waits until none is left (no group's disks are on the nodes then).
async fn clear_pvs(c: &RealCluster) {
    c.kubectl(&[
        "delete",
        "pv",
        "--all",
        "--ignore-not-found",
        "--wait=false",
    ]);
    let deadline = Instant::now() + POD_TIMEOUT;
    while !pvs(c).await.is_empty() {
        assert!(
            Instant::now() < deadline,
            "PVs left after {POD_TIMEOUT:?}: {:?}",
            pvs(c).await.keys().collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Waits until the PVs are exactly `want`, then checks that they stay so for a moment.
async fn wait_shapes(c: &RealCluster, group: &Group, disks: &[Disk], want: &[Shape]) {
    let none: Vec<String> = disks
        .iter()
        .filter_map(|d| match d.publishes {
            Publishes::Nothing(why, _) => {
                Some(format!("{} {}/{}: {why}", d.node, d.class, d.entry))
            }
            _ => None,
        })
        .collect();
    let deadline = Instant::now() + POD_TIMEOUT;
    loop {
        let got = shapes(c).await;
        if got == want {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{}: the PVs are not what the reference publishes after {POD_TIMEOUT:?}\n\
             want: {want:#?}\n(no PV where the reference's discovery fails: {none:#?})\ngot: {got:#?}\n{}",
            group.name,
            c.container_logs(NAMESPACE, RELEASE)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(shapes(c).await, want, "{}: PVs changed", group.name);
}

/// Waits until every entry the reference publishes nothing for has a LocalDisk on its node with localpv's reason.
async fn wait_reasons(c: &RealCluster, group: &Group, disks: &[Disk]) {
    let want: Vec<(String, String, String)> = disks
        .iter()
        .filter_map(|d| match d.publishes {
            Publishes::Nothing(_, reason) => {
                let class = group.classes.iter().find(|k| k.name == d.class)?;
                let path = format!("{}/{}", class.host_dir, d.entry);
                Some((d.node.to_string(), path, reason.to_string()))
            }
            _ => None,
        })
        .collect();
    let deadline = Instant::now() + POD_TIMEOUT;
    loop {
        let list: Value =
            serde_json::from_str(&c.kubectl(&["get", "localdisks", "-o", "json"])).expect("json");
        let seen: Vec<(String, String, String)> = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|d| {
                let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
                (
                    s(&d["spec"]["node"]),
                    s(&d["spec"]["path"]),
                    s(&d["status"]["reason"]),
                )
            })
            .collect();
        if want.iter().all(|w| seen.contains(w)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{}: LocalDisks after {POD_TIMEOUT:?}: want {want:#?} among {seen:#?}",
            group.name
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The node agent's RBAC as our chart renders it for these files, under names of its own: what an operator who
/// sets `rbac.create: false` provides (the reference chart's `baremetal-without-rbac.yaml` assumes it).
fn operator_rbac(c: &RealCluster, files: &[PathBuf]) -> PathBuf {
    let mut args: Vec<String> = [
        "template",
        RELEASE,
        "charts/localpv",
        "--namespace",
        NAMESPACE,
    ]
    .map(str::to_string)
    .to_vec();
    for f in files {
        args.extend(["-f".to_string(), f.display().to_string()]);
    }
    args.extend(
        [
            "--set",
            "rbac.create=true",
            "--show-only",
            "templates/node-rbac.yaml",
        ]
        .map(str::to_string),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let text = c.helm(&args);
    let mut out = String::new();
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let mut v = Value::deserialize(doc).expect("helm's output parses");
        let kind = v["kind"].as_str().unwrap_or_default().to_string();
        if !["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"].contains(&kind.as_str()) {
            continue;
        }
        let renamed = format!(
            "{}-by-operator",
            v["metadata"]["name"].as_str().expect("named")
        );
        let namespace = v["metadata"]["namespace"].take();
        v["metadata"] = json!({"name": renamed});
        if !namespace.is_null() {
            v["metadata"]["namespace"] = namespace;
        }
        if let Some(role) = v["roleRef"]["name"].as_str() {
            v["roleRef"]["name"] = json!(format!("{role}-by-operator"));
        }
        out += &format!("---\n{}", serde_yaml_ng::to_string(&v).expect("yaml"));
    }
    assert!(
        out.contains("ClusterRoleBinding"),
        "no agent RBAC rendered:\n{text}"
    );
    let path = c.run_dir().join("operator-rbac.yaml");
    fs::write(&path, out).expect("written");
    path
}

/// What the examples ask the operator to have first: the labels `affinity` and `nodeSelector` select, the
/// PriorityClass `priority-important`, the ServiceMonitor CRD.
fn prerequisites(c: &RealCluster) {
    c.kubectl(&[
        "label",
        "node",
        "node-1",
        "node-2",
        "pool=localssd",
        "localVolume=present",
    ]);
    let file = c.run_dir().join("prerequisites.yaml");
    let priority = "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: priority-important}\n\
                    value: 1000000\n";
    fs::write(
        &file,
        format!("{}---\n{priority}", crate::support::service_monitor_crd()),
    )
    .expect("written");
    c.kubectl(&["apply", "-f", &file.display().to_string()]);
    c.kubectl(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/servicemonitors.monitoring.coreos.com",
    ]);
}

#[tokio::test(flavor = "multi_thread")]
async fn every_reference_chart_example_publishes_on_real_nodes_what_the_reference_would() {
    let started = Instant::now();
    let c = RealCluster::start_with(2, &[], Some(Path::new(DEV_DIR)), &[Path::new("/mnt")]).await;
    let top = unpack(
        &tarball(),
        &c.run_dir().join("reference"),
        &["*/helm/examples/*.yaml", "*/helm/provisioner/values.yaml"],
    );
    let helm_dir = top.join("helm");
    // Every file of the reference chart is in a group or said not to be.
    let mut all: Vec<String> = fs::read_dir(helm_dir.join("examples"))
        .expect("examples")
        .flatten()
        .map(|e| format!("examples/{}", e.file_name().to_string_lossy()))
        .chain(["provisioner/values.yaml".to_string()])
        .collect();
    all.sort();
    let mut covered: Vec<String> = GROUPS
        .iter()
        .flat_map(|g| g.files.iter())
        .chain(NOT_INSTALLED)
        .map(|f| f.to_string())
        .collect();
    covered.sort();
    assert_eq!(covered, all, "each reference values file once");
    assert_eq!(all.len(), 22, "21 examples and values.yaml");

    // Only what every real-node test needs: the image built here (never pulled), no extender. Last, so the
    // examples' `image` and `imagePullPolicy` (the reference's image, `Always`) give way to it.
    let ours = c.run_dir().join("values-ours.yaml");
    let image = json!({
        "image": {"repository": LOCALPV_REPOSITORY, "tag": c.images.localpv_tag, "pullPolicy": "Never"},
        "imagePullPolicy": "Never",
        "extender": {"enabled": false},
    });
    fs::write(&ours, serde_yaml_ng::to_string(&image).expect("yaml")).expect("written");
    c.kubectl(&["apply", "-f", "config/manifests/namespace.yaml"]);
    prerequisites(&c);

    let mut made = Made::default();
    let mut installed = false;
    let mut current: &[Disk] = &[];
    for group in GROUPS {
        let step = Instant::now();
        if group.disks.is_some() && installed {
            made.clear();
            clear_pvs(&c).await;
        }
        for class in group.recreate {
            c.kubectl(&["delete", "storageclass", class, "--ignore-not-found"]);
        }
        let mut files: Vec<PathBuf> = group.files.iter().map(|f| helm_dir.join(f)).collect();
        files.push(ours.clone());
        if group
            .files
            .contains(&"examples/baremetal-without-rbac.yaml")
        {
            let rbac = operator_rbac(&c, &files);
            c.kubectl(&["apply", "-f", &rbac.display().to_string()]);
        }
        for class in group.classes {
            for node in ["node-1", "node-2"] {
                fs::create_dir_all(on_host(&c, node, class.host_dir)).expect("the class's hostDir");
            }
        }
        let paths: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
        helm_with_files(&c, if installed { "upgrade" } else { "install" }, &paths);
        installed = true;
        wait_agents_ready(&c).await;
        if let Some(disks) = group.disks {
            make_disks(&c, group, disks, &mut made);
            current = disks;
        }
        let want = expected(group, current);
        assert!(
            !want.is_empty(),
            "{}: a group publishes something",
            group.name
        );
        wait_shapes(&c, group, current, &want).await;
        wait_reasons(&c, group, current).await;
        eprintln!(
            "{}: {} PVs as the reference publishes them, in {:.1?}",
            group.name,
            want.len(),
            step.elapsed()
        );
    }
    made.clear();
    eprintln!("every example: {:.1?}", started.elapsed());
}
