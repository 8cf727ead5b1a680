//! Values files of the reference provisioner's chart (sig-storage-local-static-provisioner) go through our chart:
//! every example file and its default values.yaml, taken from the reference source tarball at test time, install
//! (server-side dry run on a real API server) with the classes they name, the settings our chart maps applied to
//! the DaemonSet, a ConfigMap the agent accepts, and a NOTES warning for each key that has no meaning here.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::packaging::{NAMESPACE, NAMESPACE_FILE, apply, documents, install_crds, root, tool};
use crate::support::agent::localpv_bin;
use crate::support::cluster::{ControlPlane, Options};
use crate::support::reference::{tarball, unpack};

/// The reference chart's example values files and its default values.yaml, unpacked into `dir`.
pub(crate) fn reference_values_files(dir: &Path) -> Vec<PathBuf> {
    unpack(
        &tarball(),
        dir,
        &["*/helm/examples/*.yaml", "*/helm/provisioner/values.yaml"],
    );
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).expect("readable").filter_map(Result::ok) {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                files.push(p);
            }
        }
    }
    files.sort();
    files
}

/// Reference keys our chart ignores, with a NOTES warning when they are set to something.
const IGNORED: &[&str] = &[
    "enableWindows",
    "nodeSelectorWindows",
    "hostPID",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "useJobForCleaning",
];

/// Reference keys copied to the node agent's pod: (key, path in the DaemonSet's pod spec).
const MAPPED: &[(&str, &[&str])] = &[
    ("tolerations", &["tolerations"]),
    ("affinity", &["affinity"]),
    ("priorityClassName", &["priorityClassName"]),
    ("initContainers", &["initContainers"]),
];

fn is_set(v: &Value) -> bool {
    !matches!(v, Value::Null | Value::Bool(false))
        && v.as_object().is_none_or(|o| !o.is_empty())
        && v.as_array().is_none_or(|a| !a.is_empty())
        && v.as_str().is_none_or(|s| !s.is_empty())
}

fn at<'a>(v: &'a Value, path: &[&str]) -> &'a Value {
    path.iter().fold(v, |v, k| &v[*k])
}

/// `helm install --dry-run=server` of our chart with a reference values file: (rendered objects, NOTES).
fn dry_run_install(cp: &ControlPlane, file: &Path) -> (Vec<Value>, String) {
    let out = Command::new(tool("helm"))
        .args(["install", "ref", "charts/localpv", "--namespace", NAMESPACE])
        .args(["--dry-run=server", "-f"])
        .arg(file)
        .env("KUBECONFIG", &cp.admin_kubeconfig)
        .current_dir(root())
        .output()
        .expect("helm runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}: {}{text}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let manifest = text
        .split("\nMANIFEST:\n")
        .nth(1)
        .and_then(|m| m.split("\nNOTES:\n").next())
        .unwrap_or_else(|| panic!("no MANIFEST in helm's output:\n{text}"));
    let notes = text.split("\nNOTES:\n").nth(1).unwrap_or_default();
    (documents(manifest), notes.to_string())
}

/// `localpv node --check-config` of the rendered agent ConfigMap: Ok(storageClassMap) or Err(its output).
fn check_config_map(docs: &[Value], dir: &Path, what: &str) -> Result<Value, String> {
    let cm = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap" && d["data"].get("storageClassMap").is_some())
        .unwrap_or_else(|| panic!("{what}: no agent ConfigMap"));
    let file = dir.join("configmap.yaml");
    fs::write(&file, serde_yaml_ng::to_string(cm).expect("serialises")).expect("written");
    let out = Command::new(localpv_bin())
        .args(["node", "--check-config", "--config"])
        .arg(&file)
        .output()
        .expect("localpv runs");
    let text = String::from_utf8_lossy(&out.stdout);
    if !(out.status.success() && text.contains("is valid")) {
        return Err(format!("{text}{}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(
        serde_yaml_ng::from_str(cm["data"]["storageClassMap"].as_str().expect("a string"))
            .expect("storageClassMap parses"),
    )
}

fn check(cp: &ControlPlane, file: &Path, work: &Path) {
    let what = file.display().to_string();
    let values: Value =
        serde_yaml_ng::from_str(&fs::read_to_string(file).expect("readable")).expect("parses");
    let (docs, notes) = dry_run_install(cp, file);
    // NB: the reference EKS example discovers under /dev/disk/kubernetes (links to NVMe devices): a directory of
    // device links under /dev is accepted; discovery then refuses it whole unless it holds only block devices.
    let map = check_config_map(&docs, work, &what)
        .unwrap_or_else(|e| panic!("{what}: the agent refuses the rendered ConfigMap:\n{e}"));
    let under_dev = values["classes"].as_array().into_iter().flatten().any(|c| {
        c["hostDir"]
            .as_str()
            .is_some_and(|d| d.starts_with("/dev/"))
    });
    if under_dev {
        let guide = fs::read_to_string(root().join("docs/migration.md")).expect("guide");
        assert!(
            guide.contains("/dev/disk/kubernetes") && guide.contains("DeviceDirRefused"),
            "docs/migration.md does not say what a hostDir under /dev must hold"
        );
    }

    // Every class: in the agent's ConfigMap with its hostDir, and its StorageClass unless `storageClass: false`.
    let classes: Vec<&str> = docs
        .iter()
        .filter(|d| d["kind"] == "StorageClass")
        .filter_map(|d| d["metadata"]["name"].as_str())
        .collect();
    for class in values["classes"].as_array().into_iter().flatten() {
        let name = class["name"].as_str().expect("named");
        assert_eq!(map[name]["hostDir"], class["hostDir"], "{what}: {name}");
        let wanted = class["storageClass"] != Value::Bool(false);
        assert_eq!(
            classes.contains(&name),
            wanted,
            "{what}: StorageClass {name}"
        );
        if let Some(p) = class["storageClass"]["provisioner"].as_str() {
            let sc = docs
                .iter()
                .find(|d| d["kind"] == "StorageClass" && d["metadata"]["name"] == name)
                .expect("rendered");
            assert_eq!(sc["provisioner"], p, "{what}: provisioner kept");
        }
    }

    // The agent runs our image, with the pod settings the file gives.
    let ds = docs
        .iter()
        .find(|d| d["kind"] == "DaemonSet")
        .unwrap_or_else(|| panic!("{what}: no DaemonSet"));
    let pod = &ds["spec"]["template"]["spec"];
    let image = pod["containers"][0]["image"].as_str().expect("an image");
    assert!(
        !image.contains("local-volume-provisioner"),
        "{what}: runs {image}"
    );
    for (key, path) in MAPPED {
        if is_set(&values[*key]) {
            assert_eq!(at(pod, path), &values[*key], "{what}: {key}");
        }
    }
    for (k, v) in values["nodeSelector"].as_object().into_iter().flatten() {
        assert_eq!(&pod["nodeSelector"][k], v, "{what}: nodeSelector {k}");
    }
    if let Some(limits) = values["resources"].get("limits") {
        assert_eq!(
            &pod["containers"][0]["resources"]["limits"], limits,
            "{what}: resources"
        );
    }
    for volume in values["additionalVolumes"].as_array().into_iter().flatten() {
        let present = pod["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|v| v["name"] == volume["name"]);
        assert!(present, "{what}: volume {}", volume["name"]);
    }
    if let Some(policy) = values["imagePullPolicy"].as_str() {
        assert_eq!(pod["containers"][0]["imagePullPolicy"], policy, "{what}");
    }
    if values["rbac"]["create"] == Value::Bool(false) {
        assert!(
            !docs.iter().any(|d| d["kind"] == "ClusterRole"),
            "{what}: rbac.create=false"
        );
    }
    if values["serviceMonitor"]["enabled"] == Value::Bool(true) {
        assert!(
            docs.iter().any(|d| d["kind"] == "ServiceMonitor"),
            "{what}: serviceMonitor.enabled"
        );
    }

    // The startup taint: tolerated by the agent, which may then patch Nodes (and only then).
    let taint = match &values["removeNodeNotReadyTaint"] {
        Value::Bool(on) => *on,
        Value::String(on) => ["true", "yes", "on", "y"].contains(&on.to_lowercase().as_str()),
        _ => false,
    };
    let key = values["provisionerNotReadyNodeTaintKey"]
        .as_str()
        .unwrap_or("sig-storage-local-static-provisioner/agent-not-ready");
    let tolerated = pod["tolerations"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|t| t["key"] == key && t["operator"] == "Exists" && t.get("effect").is_none());
    let patches_nodes = docs
        .iter()
        .filter(|d| d["kind"] == "ClusterRole")
        .flat_map(|d| d["rules"].as_array().into_iter().flatten())
        .any(|r| {
            r["resources"]
                .as_array()
                .is_some_and(|r| r.contains(&"nodes".into()))
                && r["verbs"]
                    .as_array()
                    .is_some_and(|v| v.contains(&"patch".into()))
        });
    let rbac = values["rbac"]["create"] != Value::Bool(false);
    assert_eq!(tolerated, taint, "{what}: the startup taint's toleration");
    assert_eq!(patches_nodes, taint && rbac, "{what}: patch on Nodes");
    if taint {
        assert!(
            map_text(&docs, "removeNodeNotReadyTaint").is_some(),
            "{what}: removeNodeNotReadyTaint reaches the agent"
        );
    }
    let cleanup = values["nodeCleanupController"]["enabled"] == Value::Bool(true);
    assert_eq!(
        notes.contains("nodeCleanupController:"),
        cleanup,
        "{what}: the NOTES on nodeCleanupController:\n{notes}"
    );

    // What has no meaning here is named in the NOTES.
    for key in IGNORED {
        if is_set(&values[*key]) {
            assert!(
                notes.contains(&format!("{key}:")),
                "{what}: no NOTES warning about {key}:\n{notes}"
            );
        }
    }
    if values["image"]
        .as_str()
        .is_some_and(|i| i.contains("local-volume-provisioner"))
    {
        assert!(notes.contains("image:"), "{what}: no warning about image");
    }
}

/// A key of the agent's rendered ConfigMap.
fn map_text<'a>(docs: &'a [Value], key: &str) -> Option<&'a str> {
    docs.iter()
        .find(|d| d["kind"] == "ConfigMap" && d["data"].get("storageClassMap").is_some())?["data"]
        [key]
        .as_str()
}

/// The reference chart's default values with the keys of its newest code on: the startup taint (`master`, released
/// in 2.9.0) and the node clean-up controller (only on a branch, `copilot/add-configurable-options-node-cleanup-
/// controller`, as its example `baremetal-node-cleanup.yaml` sets it).
fn newest_keys(dir: &Path, defaults: &Path) -> PathBuf {
    let mut values: Value =
        serde_yaml_ng::from_str(&fs::read_to_string(defaults).expect("readable")).expect("parses");
    values["classes"] = serde_json::json!([{"name": "local-storage", "hostDir": "/mnt/disks",
        "volumeMode": "Block", "blockCleanerCommand": ["/scripts/shred.sh", "2"], "storageClass": true}]);
    values["removeNodeNotReadyTaint"] = true.into();
    values["provisionerNotReadyNodeTaintKey"] = "example.com/local-disks-not-ready".into();
    values["nodeCleanupController"] = serde_json::json!({
        "enabled": true, "storageClassNames": ["local-storage"], "pvcDeletionDelay": "60s",
        "stalePVDiscoveryInterval": "10s",
        "resources": {"limits": {"cpu": "100m", "memory": "200Mi"}, "requests": {"cpu": "50m", "memory": "100Mi"}},
    });
    let file = dir.join("newest-keys.yaml");
    fs::write(
        &file,
        serde_yaml_ng::to_string(&values).expect("serialises"),
    )
    .expect("written");
    file
}

#[tokio::test(flavor = "multi_thread")]
async fn every_values_file_of_the_reference_chart_installs_through_ours() {
    let dir = tempfile::tempdir().expect("temp dir");
    let files = reference_values_files(dir.path());
    let examples = files
        .iter()
        .filter(|f| f.parent().is_some_and(|p| p.ends_with("examples")))
        .count();
    assert!(
        examples >= 21 && files.len() == examples + 1,
        "the reference chart's 21 examples and its values.yaml: {files:?}"
    );
    let cp = ControlPlane::start(Options::default()).await;
    install_crds(&cp);
    apply(&cp, &root().join(NAMESPACE_FILE));
    let defaults = files
        .iter()
        .find(|f| f.ends_with("provisioner/values.yaml"))
        .expect("the reference chart's values.yaml");
    assert!(
        files
            .iter()
            .any(|f| f.ends_with("examples/eks-nvme-ssd.yaml")),
        "the reference EKS example (a hostDir under /dev) is among the files"
    );
    let newest = newest_keys(dir.path(), defaults);
    for file in files.iter().chain([&newest]) {
        check(&cp, file, dir.path());
    }
}

#[test]
fn every_reference_key_the_schema_accepts_is_in_the_migration_guide() {
    let schema: Value = serde_json::from_str(
        &fs::read_to_string(root().join("charts/localpv/values.schema.json")).expect("schema"),
    )
    .expect("the schema parses");
    let guide = fs::read_to_string(root().join("docs/migration.md")).expect("migration.md");
    let table = guide
        .split("## Values files of the reference chart")
        .nth(1)
        .expect("docs/migration.md has the values section");
    let mut checked = 0;
    for (key, property) in schema["properties"].as_object().expect("properties") {
        let from_reference = property["description"]
            .as_str()
            .is_some_and(|d| d.starts_with("sig-storage-local-static-provisioner chart key"));
        if from_reference {
            assert!(
                table.contains(&format!("`{key}`")) || table.contains(&format!("`{key}.")),
                "docs/migration.md does not say what the reference key {key} becomes"
            );
            checked += 1;
        }
    }
    assert!(checked >= 20, "only {checked} reference keys in the schema");
}
