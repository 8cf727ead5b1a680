//! `localpv crd` and `localpv disks` as a user runs them: the built binary, a real kube-apiserver with the CRD
//! installed from the checked-in copy, `kubectl get ldisk` and `kubectl localpv disks` through the plugin name.
//!
//! The objects come from the pure inventory builder and are written the way the agent writes them (create, then
//! server-side apply), so the test also proves the API server accepts what the builder produces and that a
//! pass over what the server returns writes nothing.

use localpv_test_support as support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use localpv::disk::{Discovery, Disk, DiskIdentity, Unusable, UnusableReason, VolumeMode};
use localpv::inventory::{Change, Changes, Inputs, LocalDisk, Settings, build};
use localpv::plan::DiskLedger;

use support::agent::wait_established;
use support::cluster::{ControlPlane, Options};
use support::eventually;

const BIN: &str = env!("CARGO_BIN_EXE_localpv");
const GIB: u64 = 1 << 30;
const SHARED_UUID: &str = "11111111-2222-4333-8444-555555555555";

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// Runs `program args` with a clean environment: no kubeconfig, no in-cluster variables, HOME in `home`.
fn run(program: &Path, args: &[&str], home: &Path, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env_clear()
        .env("HOME", home)
        .env("PATH", std::env::var_os("PATH").unwrap_or_default());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output()
        .unwrap_or_else(|e| panic!("failed to run {}: {e}", program.display()))
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "command failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn failure(out: &Output) -> String {
    assert!(
        !out.status.success(),
        "command should have failed, printed: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn crd_subcommand_prints_the_checked_in_crd() {
    let home = tempfile::tempdir().expect("temp dir");
    let printed = stdout(&run(Path::new(BIN), &["crd"], home.path(), &[]));
    let copy = std::fs::read_to_string(repo("config/crd/localdisk.yaml")).expect("CRD copy exists");
    assert_eq!(printed, copy);
}

#[test]
fn disks_without_any_kubeconfig_fails_and_says_what_to_set() {
    let home = tempfile::tempdir().expect("temp dir");
    let err = failure(&run(Path::new(BIN), &["disks"], home.path(), &[]));
    assert!(err.contains("failed to find a kubeconfig"), "{err}");
    assert!(err.contains("KUBECONFIG"), "{err}");
}

#[test]
fn disks_with_an_unreadable_kubeconfig_names_the_file() {
    let home = tempfile::tempdir().expect("temp dir");
    let missing = home.path().join("nope.yaml");
    let missing = missing.to_str().expect("UTF-8 temp path");
    let err = failure(&run(
        Path::new(BIN),
        &["disks", "--kubeconfig", missing],
        home.path(),
        &[],
    ));
    assert!(err.contains("failed to read kubeconfig"), "{err}");
    assert!(err.contains("nope.yaml"), "{err}");
}

#[test]
fn an_unknown_phase_is_rejected_with_the_known_ones() {
    let home = tempfile::tempdir().expect("temp dir");
    let err = failure(&run(
        Path::new(BIN),
        &["disks", "--phase", "Gone"],
        home.path(),
        &[],
    ));
    assert!(err.contains("unknown phase"), "{err}");
    assert!(err.contains("IdentityChanged"), "{err}");
}

fn fs_disk(entry: &str, uuid: &str, device: &str, gib: u64) -> Disk {
    Disk {
        class: "local-storage".into(),
        entry: entry.into(),
        host_path: format!("/mnt/disks/{entry}").into(),
        mode: VolumeMode::Filesystem,
        capacity_bytes: gib * GIB,
        available_bytes: Some(gib * GIB / 2),
        mount_root: None,
        held: false,
        identity: DiskIdentity {
            device: Some(device.into()),
            fs_type: Some("ext4".into()),
            fs_uuid: Some(uuid.into()),
            model: Some("QEMU_HARDDISK".into()),
            serial: Some(format!("QM-{entry}")),
            ..DiskIdentity::default()
        },
    }
}

fn node_1() -> Discovery {
    let mut block = fs_disk("raw1", "tenant-uuid", "/dev/loop9", 2);
    block.class = "raw".into();
    block.host_path = "/mnt/raw/raw1".into();
    block.mode = VolumeMode::Block;
    block.available_bytes = None;
    Discovery {
        disks: vec![
            fs_disk("vol1", SHARED_UUID, "/dev/loop3", 10).into(),
            fs_disk(
                "vol2",
                "22222222-2222-4333-8444-555555555555",
                "/dev/loop4",
                5,
            )
            .into(),
            block.into(),
        ],
        unusable: vec![Unusable {
            class: "local-storage".into(),
            entry: "stray".into(),
            host_path: "/mnt/disks/stray".into(),
            reason: UnusableReason::NotAMountPoint,
            message: "path \"/mnt/disks/stray\" is not a valid mount point".into(),
        }],
        failed_classes: Vec::new(),
        unhealthy: Vec::new(),
        cordoned: Vec::new(),
    }
}

/// One inventory pass for `node` over what the API server holds now.
async fn pass(api: &Api<LocalDisk>, node: &str, found: &Discovery) -> Changes {
    let all = api.list(&ListParams::default()).await.expect("list");
    let (mine, others): (Vec<LocalDisk>, Vec<LocalDisk>) =
        all.items.into_iter().partition(|d| d.spec.node == node);
    let mine: Vec<Arc<LocalDisk>> = mine.into_iter().map(Arc::new).collect();
    let (ledger, wipes, failures) = (DiskLedger::default(), BTreeMap::new(), BTreeMap::new());
    build(&Inputs {
        node,
        found,
        unpublished: &[],
        pvs: &[],
        ledger: &ledger,
        wipes: &wipes,
        wipe_failures: &failures,
        existing: &mine,
        others: &others,
        settings: &Settings::default(),
        now: SystemTime::now(),
    })
}

/// Writes changes the way the agent does: create, server-side apply (forced, one field manager), delete.
async fn execute(api: &Api<LocalDisk>, changes: &Changes) {
    let apply = PatchParams::apply("localpv-test").force();
    for change in &changes.changes {
        match change {
            Change::Create(disk) => {
                api.create(&PostParams::default(), disk)
                    .await
                    .expect("create");
            }
            Change::Apply(disk) | Change::MarkMissing(disk) => {
                let name = disk.metadata.name.clone().expect("named");
                api.patch(&name, &apply, &Patch::Apply(disk))
                    .await
                    .expect("server-side apply");
            }
            Change::Delete(name) => {
                api.delete(name, &Default::default()).await.expect("delete");
            }
        }
    }
}

async fn install_crd(plane: &ControlPlane, home: &Path) {
    let kubectl = plane.bin.join("kubectl");
    let kubeconfig = plane.admin_kubeconfig.to_str().expect("UTF-8 path");
    let crd_file = repo("config/crd/localdisk.yaml");
    let crd_file = crd_file.to_str().expect("UTF-8 path");
    stdout(&run(
        &kubectl,
        &["--kubeconfig", kubeconfig, "apply", "-f", crd_file],
        home,
        &[],
    ));
    wait_established(plane, "localdisks.localpv.io", Duration::from_secs(30)).await;
    // The API server serves the new resource a moment after Established.
    let api: Api<LocalDisk> = Api::all(plane.client());
    eventually(
        "LocalDisks to be listable",
        Duration::from_secs(30),
        || async {
            api.list(&ListParams::default())
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn disks_are_listed_by_localpv_and_kubectl_from_a_real_api_server() {
    let plane = ControlPlane::start(Options::default()).await;
    let home = tempfile::tempdir().expect("temp dir");
    let kubeconfig = plane
        .admin_kubeconfig
        .to_str()
        .expect("UTF-8 path")
        .to_string();
    let localpv = |args: &[&str]| {
        let mut all = vec!["disks", "--kubeconfig", kubeconfig.as_str()];
        all.extend_from_slice(args);
        run(Path::new(BIN), &all, home.path(), &[])
    };

    let err = failure(&localpv(&[]));
    assert!(err.contains("CRD is not installed"), "{err}");

    install_crd(&plane, home.path()).await;
    let api: Api<LocalDisk> = Api::all(plane.client());
    let n1 = node_1();
    execute(&api, &pass(&api, "node-1", &n1).await).await;
    // node-2 holds a clone of vol1: same filesystem UUID, its own object, flagged.
    let n2 = Discovery {
        disks: vec![fs_disk("vol1", SHARED_UUID, "/dev/sdc", 10).into()],
        ..Discovery::default()
    };
    execute(&api, &pass(&api, "node-2", &n2).await).await;

    // What the server returns is what the builder wants: a second pass writes nothing.
    assert_eq!(pass(&api, "node-1", &n1).await, Changes::default());
    assert_eq!(pass(&api, "node-2", &n2).await, Changes::default());

    let table = stdout(&localpv(&[]));
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("NODE") && lines[0].ends_with("AGE"),
        "{table}"
    );
    let paths: Vec<&str> = lines[1..6]
        .iter()
        .map(|l| l.split_whitespace().nth(1).unwrap_or_default())
        .collect();
    assert_eq!(
        paths,
        [
            "/mnt/disks/stray",
            "/mnt/disks/vol1",
            "/mnt/disks/vol2",
            "/mnt/raw/raw1",
            "/mnt/disks/vol1"
        ],
        "{table}"
    );
    assert!(
        lines[2].contains("10.0GiB") && lines[2].contains("Available"),
        "{table}"
    );
    assert!(
        table.contains("5 disks, 27.0GiB in total; local-storage: 3 free (25.0GiB), 0 bound, 1 other; raw: 1 free (2.0GiB), 0 bound"),
        "{table}"
    );
    assert!(
        table.contains(&format!(
            "filesystem UUID {SHARED_UUID} is on nodes node-1, node-2"
        )),
        "{table}"
    );

    let only_n2 = stdout(&localpv(&["--node", "node-2", "-o", "json"]));
    let list: serde_json::Value = serde_json::from_str(&only_n2).expect("JSON");
    let items = list["items"].as_array().expect("items");
    assert_eq!(items.len(), 1, "{only_n2}");
    assert_eq!(items[0]["status"]["duplicateUuid"]["node"], "node-1");
    assert_eq!(
        items[0]["status"]["duplicateUuid"]["localDisk"],
        format!("fs-{SHARED_UUID}")
    );

    let unusable = stdout(&localpv(&["--phase", "unusable", "-o", "yaml"]));
    assert!(unusable.contains("reason: NotAMountPoint"), "{unusable}");

    // vol2 vanishes from node-1: Missing, applied server-side; still no writes on the pass after.
    let mut n1_later = n1.clone();
    n1_later.disks.retain(|d| d.entry != "vol2");
    execute(&api, &pass(&api, "node-1", &n1_later).await).await;
    assert_eq!(pass(&api, "node-1", &n1_later).await.changes, []);
    let missing = stdout(&localpv(&["--phase", "Missing"]));
    assert!(
        missing.contains("/mnt/disks/vol2") && missing.contains("Missing"),
        "{missing}"
    );

    kubectl_shows_the_columns(&plane, home.path(), &kubeconfig);
    kubectl_plugin_runs_disks(&plane, home.path(), &kubeconfig);
}

fn kubectl_shows_the_columns(plane: &ControlPlane, home: &Path, kubeconfig: &str) {
    let kubectl = plane.bin.join("kubectl");
    let get = stdout(&run(
        &kubectl,
        &["--kubeconfig", kubeconfig, "get", "ldisk"],
        home,
        &[],
    ));
    let header: Vec<&str> = get
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "NAME", "NODE", "PATH", "CLASS", "SIZE", "PHASE", "REASON", "HEALTH", "PV", "CLAIM",
            "AGE"
        ],
        "{get}"
    );
    assert!(
        get.contains(&format!("fs-{SHARED_UUID}")) && get.contains("10.0GiB"),
        "{get}"
    );
    let stray = get
        .lines()
        .find(|l| l.contains("Unusable"))
        .unwrap_or_default();
    assert!(
        stray.contains("NotAMountPoint"),
        "the reason shows in kubectl get: {get}"
    );
    let wide = stdout(&run(
        &kubectl,
        &["--kubeconfig", kubeconfig, "get", "ldisk", "-o", "wide"],
        home,
        &[],
    ));
    let header: Vec<&str> = wide
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header[11..],
        ["DEVICE", "FSTYPE", "FSUUID", "MODEL", "SERIAL"],
        "{wide}"
    );
    assert!(
        wide.contains("/dev/loop3") && wide.contains("QM-vol1"),
        "{wide}"
    );
}

/// Installed as `kubectl-localpv` on PATH, the binary answers `kubectl localpv disks`.
fn kubectl_plugin_runs_disks(plane: &ControlPlane, home: &Path, kubeconfig: &str) {
    let plugins = tempfile::tempdir().expect("temp dir");
    std::os::unix::fs::symlink(BIN, plugins.path().join("kubectl-localpv")).expect("symlink");
    let path = format!(
        "{}:{}",
        plugins.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let kubectl = plane.bin.join("kubectl");
    let env = [("PATH", path.as_str()), ("KUBECONFIG", kubeconfig)];
    let out = stdout(&run(
        &kubectl,
        &["localpv", "disks", "--node", "node-2"],
        home,
        &env,
    ));
    assert!(out.starts_with("NODE"), "{out}");
    assert!(out.contains("node-2") && !out.contains("node-1 "), "{out}");
    let help = stdout(&run(&kubectl, &["localpv", "disks", "--help"], home, &env));
    assert!(help.contains("kubectl localpv disks"), "{help}");
}

/// Creates, as the admin, the cluster-scoped object `object` describes.
async fn create<K>(plane: &ControlPlane, object: serde_json::Value)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::Serialize
        + serde::de::DeserializeOwned,
{
    let object: K = serde_json::from_value(object).expect("an object literal");
    Api::<K>::all(plane.client())
        .create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("{} created: {e}", K::kind(&())));
}

/// An operator whose kubeconfig may patch LocalDisks but not Nodes (a namespace-less role for disk operators
/// only): `localpv disks cordon` still cordons the disk and succeeds, and says the Node could not be marked, so its
/// agent sees the change at its next LocalDisk list instead of at once.
#[tokio::test(flavor = "multi_thread")]
async fn a_cordon_without_the_right_to_patch_nodes_succeeds_and_says_the_node_was_not_marked() {
    use k8s_openapi::api::core::v1::Node;
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};

    let plane = ControlPlane::start(Options::default()).await;
    let home = tempfile::tempdir().expect("temp dir");
    install_crd(&plane, home.path()).await;
    let api: Api<LocalDisk> = Api::all(plane.client());
    execute(&api, &pass(&api, "node-1", &node_1()).await).await;
    // NB: the Node exists, so what the operator meets is a refusal, not a missing Node.
    create::<Node>(&plane, serde_json::json!({"metadata": {"name": "node-1"}})).await;
    create::<ClusterRole>(
        &plane,
        serde_json::json!({
            "metadata": {"name": "disk-operator"},
            "rules": [{"apiGroups": ["localpv.io"], "resources": ["localdisks"], "verbs": ["get", "list", "patch"]}],
        }),
    )
    .await;
    create::<ClusterRoleBinding>(
        &plane,
        serde_json::json!({
            "metadata": {"name": "disk-operator"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "disk-operator"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "disk-operator"}],
        }),
    )
    .await;
    let kubeconfig = plane.kubeconfig_for("disk-operator", "disk-operator", &[]);
    let kubeconfig = kubeconfig.to_str().expect("UTF-8 path");

    // RBAC caches take a moment to see a new binding: the first cordon may be refused the LocalDisks too.
    let said = eventually(
        "the operator's cordon to succeed",
        Duration::from_secs(30),
        || {
            let out = run(
                Path::new(BIN),
                &["disks", "--kubeconfig", kubeconfig, "cordon", "node-1/vol1"],
                home.path(),
                &[],
            );
            let result = if out.status.success() {
                Ok(String::from_utf8_lossy(&out.stdout).into_owned())
            } else {
                Err(String::from_utf8_lossy(&out.stderr).into_owned())
            };
            async move { result }
        },
    )
    .await;
    assert!(said.contains("cordoned "), "{said}");
    assert!(
        said.contains("note: could not mark Node node-1")
            && said.contains("its agent sees the change at its next LocalDisk list"),
        "{said}"
    );
    let cordoned = api
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .into_iter()
        .find(|d| d.spec.node == "node-1" && d.spec.entry == "vol1")
        .and_then(|d| d.metadata.annotations)
        .and_then(|a| a.get("localpv.io/cordoned").cloned());
    assert_eq!(
        cordoned.as_deref(),
        Some("true"),
        "the LocalDisk is cordoned"
    );
    let node = Api::<Node>::all(plane.client())
        .get("node-1")
        .await
        .expect("Node");
    assert!(
        node.metadata.annotations.unwrap_or_default().is_empty(),
        "the Node is not marked"
    );
}
