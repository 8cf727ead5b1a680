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

const DEV_DIR: &str = "/dev/disk/kubernetes";

/// What the reference provisioner publishes for one entry of a class's `hostDir`.
#[derive(Clone, Copy, Debug)]
enum Publishes {
    /// A Filesystem PV, with this `local.fsType`.
    Filesystem(Option<&'static str>),
    Block,
    /// No PV: the reference's discovery error says why; localpv's LocalDisk gives the reason after it.
    Nothing(&'static str, &'static str),
}

/// What the test puts at an entry on the node.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// A tmpfs mounted there.
    Tmpfs,
    /// A symlink to a raw loop device.
    Device,
    /// A plain directory, no mount.
    Dir,
}

struct Disk {
    node: &'static str,
    class: &'static str,
    entry: &'static str,
    kind: Kind,
    publishes: Publishes,
}

struct Class {
    name: &'static str,
    host_dir: &'static str,
    reclaim: &'static str,
}

struct Group {
    name: &'static str,
    /// The files (under the tarball's `helm/`), merged in this order, later ones winning.
    files: &'static [&'static str],
    /// The StorageClasses to delete before the upgrade: a field the API server will not update (provisioner,
    /// reclaimPolicy) differs from the group before.
    recreate: &'static [&'static str],
    /// The group's classes, as its files render them.
    classes: &'static [Class],
    /// `None`: the previous group's disks and PVs stay (same classes, same disks).
    disks: Option<&'static [Disk]>,
}

const fn disk(
    node: &'static str,
    class: &'static str,
    entry: &'static str,
    kind: Kind,
    publishes: Publishes,
) -> Disk {
    Disk {
        node,
        class,
        entry,
        kind,
        publishes,
    }
}

const NOT_MOUNTED: Publishes = Publishes::Nothing("is not a valid mount point", "NotAMountPoint");
const FS_IN_BLOCK: Publishes = Publishes::Nothing(
    "of filesystem mode cannot be used to create block volume",
    "WrongVolumeMode",
);
const FS: Publishes = Publishes::Filesystem(None);

/// Disks come in list order: those that publish nothing first, so the pass that publishes the last PV has seen them.
const BAREMETAL_DISKS: &[Disk] = &[
    disk("node-2", "local-storage", "a-fs", Kind::Tmpfs, FS_IN_BLOCK),
    disk(
        "node-1",
        "local-storage",
        "a-1",
        Kind::Device,
        Publishes::Block,
    ),
    disk(
        "node-1",
        "local-storage",
        "a-2",
        Kind::Device,
        Publishes::Block,
    ),
    disk(
        "node-2",
        "local-storage",
        "a-1",
        Kind::Device,
        Publishes::Block,
    ),
];

const LOCAL_STORAGE: &[Class] = &[Class {
    name: "local-storage",
    host_dir: "/mnt/disks",
    reclaim: "Delete",
}];
const LOCAL_SCSI: &[Class] = &[Class {
    name: "local-scsi",
    host_dir: "/mnt/disks",
    reclaim: "Delete",
}];

const GROUPS: &[Group] = &[
    // A Block class over /mnt/disks, cleaned by shred; the files differ only in pod settings, applied together
    // (priorityClassName: the last file's wins).
    Group {
        name: "baremetal, shred",
        files: &[
            "examples/baremetal.yaml",
            "examples/baremetal-affinity.yaml",
            "examples/baremetal-nodeselector.yaml",
            "examples/baremetal-tolerations.yaml",
            "examples/baremetal-with-resource-limits.yaml",
            "examples/baremetal-prometheus.yaml",
            "examples/baremetal-priority-critical.yaml",
            "examples/baremetal-priority-noncritical.yaml",
        ],
        recreate: &[],
        classes: LOCAL_STORAGE,
        disks: Some(BAREMETAL_DISKS),
    },
    // The same class cleaned by quick_reset.sh; one file names another provisioner in the StorageClass, one
    // creates no RBAC (the test applies what an operator would), one cleans by Jobs, one resyncs hourly.
    Group {
        name: "baremetal, quick_reset",
        files: &[
            "examples/baremetal-cleanbyjobs.yaml",
            "examples/baremetal-resyncperiod.yaml",
            "examples/baremetal-without-rbac.yaml",
            "examples/baremetal-provisioner.yaml",
        ],
        recreate: &["local-storage"],
        classes: LOCAL_STORAGE,
        disks: None,
    },
    Group {
        name: "baremetal-default-storage",
        files: &["examples/baremetal-default-storage.yaml"],
        recreate: &["local-storage"],
        classes: LOCAL_STORAGE,
        disks: Some(&[
            disk("node-2", "local-storage", "c-plain", Kind::Dir, NOT_MOUNTED),
            disk("node-1", "local-storage", "c-1", Kind::Tmpfs, FS),
            disk("node-1", "local-storage", "c-2", Kind::Tmpfs, FS),
            disk("node-2", "local-storage", "c-1", Kind::Tmpfs, FS),
        ]),
    },
    // `fsType: ""` and no fsType are the same class; a raw device there is a Filesystem PV for the kubelet to format.
    Group {
        name: "development, gke",
        files: &[
            "examples/development-gce.yaml",
            "examples/development-gke.yaml",
            "examples/gke.yaml",
        ],
        recreate: &[],
        classes: LOCAL_SCSI,
        disks: Some(&[
            disk("node-1", "local-scsi", "d-1", Kind::Tmpfs, FS),
            disk("node-2", "local-scsi", "d-1", Kind::Tmpfs, FS),
            disk("node-2", "local-scsi", "d-dev", Kind::Device, FS),
        ]),
    },
    Group {
        name: "gce",
        files: &["examples/gce.yaml"],
        recreate: &[],
        classes: &[
            Class {
                name: "local-scsi",
                host_dir: "/mnt/disks/by-uuid/google-local-ssds-scsi-fs",
                reclaim: "Delete",
            },
            Class {
                name: "local-nvme",
                host_dir: "/mnt/disks/by-uuid/google-local-ssds-nvme-fs",
                reclaim: "Delete",
            },
        ],
        disks: Some(&[
            disk("node-1", "local-scsi", "e-ssd0", Kind::Tmpfs, FS),
            disk("node-1", "local-nvme", "e-nvme0", Kind::Tmpfs, FS),
            disk("node-2", "local-nvme", "e-nvme0", Kind::Tmpfs, FS),
        ]),
    },
    Group {
        name: "gce-retain",
        files: &["examples/gce-retain.yaml"],
        recreate: &["local-scsi", "local-nvme"],
        classes: &[
            Class {
                name: "local-scsi",
                host_dir: "/mnt/disks/by-uuid/google-local-ssds-scsi-fs",
                reclaim: "Retain",
            },
            Class {
                name: "local-nvme",
                host_dir: "/mnt/disks/by-uuid/google-local-ssds-nvme-fs",
                reclaim: "Retain",
            },
        ],
        disks: Some(&[
            disk("node-1", "local-scsi", "r-ssd0", Kind::Tmpfs, FS),
            disk("node-2", "local-nvme", "r-nvme0", Kind::Tmpfs, FS),
        ]),
    },
    // The RAID the GKE example's DaemonSet builds is mounted at /mnt/disks/raid/0.
    Group {
        name: "gke-nvme-ssd-block-raid",
        files: &["examples/gke-nvme-ssd-block-raid.yaml"],
        recreate: &[],
        classes: &[Class {
            name: "nvme-ssd-block",
            host_dir: "/mnt/disks/raid",
            reclaim: "Delete",
        }],
        disks: Some(&[
            disk("node-1", "nvme-ssd-block", "0", Kind::Tmpfs, FS),
            disk("node-2", "nvme-ssd-block", "0", Kind::Tmpfs, FS),
        ]),
    },
    Group {
        name: "eks-nvme-ssd",
        files: &["examples/eks-nvme-ssd.yaml"],
        recreate: &[],
        classes: &[Class {
            name: "nvme-ssd",
            host_dir: DEV_DIR,
            reclaim: "Delete",
        }],
        disks: Some(&[
            disk("node-1", "nvme-ssd", "nvme-1", Kind::Device, FS),
            disk("node-1", "nvme-ssd", "nvme-2", Kind::Device, FS),
            disk("node-2", "nvme-ssd", "nvme-1", Kind::Device, FS),
        ]),
    },
    // The chart's defaults: `fsType: ext4` goes on every PV of the class, a mount point's too.
    Group {
        name: "values.yaml",
        files: &["provisioner/values.yaml"],
        recreate: &[],
        classes: &[Class {
            name: "fast-disks",
            host_dir: "/mnt/fast-disks",
            reclaim: "Delete",
        }],
        disks: Some(&[
            disk("node-2", "fast-disks", "h-plain", Kind::Dir, NOT_MOUNTED),
            disk(
                "node-1",
                "fast-disks",
                "h-1",
                Kind::Tmpfs,
                Publishes::Filesystem(Some("ext4")),
            ),
            disk(
                "node-2",
                "fast-disks",
                "h-1",
                Kind::Tmpfs,
                Publishes::Filesystem(Some("ext4")),
            ),
            disk(
                "node-2",
                "fast-disks",
                "h-dev",
                Kind::Device,
                Publishes::Filesystem(Some("ext4")),
            ),
        ]),
    },
];

/// Examples no group installs on real nodes, and why (docs/migration.md's table says which group proves them).
const NOT_INSTALLED: &[&str] = &[
    // Its init container runs /etc/init/run.sh from a ConfigMap volume without `defaultMode`, so mode 0644: it can
    // never execute, under either chart. Its classes are the chart's defaults, as in "baremetal-default-storage".
    "examples/additional-volumes.yaml",
];

/// A PV as the comparison sees it: (node affinity as JSON, path, class, volumeMode, fsType, reclaim policy, access modes).
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

/// A stand-in for the Prometheus Operator's ServiceMonitor CRD (`baremetal-prometheus.yaml` enables one).
const SERVICE_MONITOR_CRD: &str = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: servicemonitors.monitoring.coreos.com
spec:
  group: monitoring.coreos.com
  names: {kind: ServiceMonitor, plural: servicemonitors, singular: servicemonitor, listKind: ServiceMonitorList}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
";

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
    fs::write(&file, format!("{SERVICE_MONITOR_CRD}---\n{priority}")).expect("written");
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
