//! Upgrading as documented, on a real control plane: after the documented install (and after the migration
//! install with `classes=null`), the upgrade commands of the docs, run as written, succeed, bring an outdated
//! LocalDisk CRD up to the chart's, and keep the generated certificate (so the schedulers' caData stays valid).

use std::fs;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use crate::chart_docs::{fenced_blocks, shell_commands};
use crate::chart_scheduler::{run_documented, run_documented_install};
use crate::node_agent::obj;
use crate::packaging::{NAMESPACE, root};
use crate::support::cluster::{ControlPlane, Options};

const CRD: &str = "localdisks.localpv.io";

/// The commands of the first ```sh block after `marker` in a doc.
fn commands_after(doc: &str, marker: &str) -> Vec<Vec<String>> {
    let text = fs::read_to_string(root().join(doc)).expect("doc readable");
    let rest = text
        .split(marker)
        .nth(1)
        .unwrap_or_else(|| panic!("{doc} has no {marker:?}"));
    let (_, block) = fenced_blocks(rest)
        .into_iter()
        .find(|(info, _)| info == "sh")
        .unwrap_or_else(|| panic!("{doc}: no commands after {marker:?}"));
    shell_commands(&block)
}

/// The printer columns of the served versions: what an outdated CRD lacks here.
fn columns(crd: &Value) -> Value {
    crd["spec"]["versions"]
        .as_array()
        .expect("versions")
        .iter()
        .map(|v| v["additionalPrinterColumns"].clone())
        .collect()
}

/// Replaces the cluster's CRD with an "older release" of it (one printer column fewer), written by Helm's field
/// manager as `helm install` does.
async fn make_crd_outdated(cp: &ControlPlane) {
    let api: Api<CustomResourceDefinition> = Api::all(cp.client());
    let mut crd = serde_json::to_value(api.get(CRD).await.expect("the chart installed the CRD"))
        .expect("serialises");
    let cols = crd["spec"]["versions"][0]["additionalPrinterColumns"]
        .as_array_mut()
        .expect("the CRD has printer columns");
    cols.pop();
    let params = PostParams {
        field_manager: Some("helm".into()),
        ..PostParams::default()
    };
    api.replace(CRD, &params, &obj(crd))
        .await
        .expect("outdated CRD written");
}

async fn assert_crd_is_the_charts(cp: &ControlPlane) {
    let api: Api<CustomResourceDefinition> = Api::all(cp.client());
    let live = serde_json::to_value(api.get(CRD).await.expect("CRD")).expect("serialises");
    let file: Value = serde_yaml_ng::from_str(
        &fs::read_to_string(root().join("charts/localpv/crds/localdisk.yaml")).expect("CRD file"),
    )
    .expect("parses");
    assert_eq!(
        columns(&live),
        columns(&file),
        "the CRD is the chart's after the upgrade"
    );
}

async fn tls_secret(cp: &ControlPlane, ns: &str) -> Value {
    let secret: Secret = Api::namespaced(cp.client(), ns)
        .get("localpv-extender-tls")
        .await
        .expect("the generated TLS Secret");
    serde_json::to_value(secret.data).expect("serialises")
}

#[tokio::test(flavor = "multi_thread")]
async fn documented_upgrade_updates_the_crd_and_keeps_the_generated_certificate() {
    let cp = ControlPlane::start(Options::default()).await;
    run_documented_install(&cp);
    let before = tls_secret(&cp, NAMESPACE).await;
    make_crd_outdated(&cp).await;
    for command in commands_after("docs/install.md", "## Upgrading") {
        run_documented(&cp, &command);
    }
    assert_crd_is_the_charts(&cp).await;
    assert_eq!(
        tls_secret(&cp, NAMESPACE).await,
        before,
        "the upgrade kept the certificate"
    );
    let notes = run_documented(
        &cp,
        &["helm", "get", "notes", "localpv", "--namespace", NAMESPACE].map(String::from),
    );
    let ca = before["ca.crt"].as_str().expect("ca.crt");
    assert!(
        notes.contains(&format!("caData: {ca}")),
        "the NOTES after the upgrade print the same CA:\n{notes}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn migration_install_with_classes_null_upgrades_as_documented() {
    let cp = ControlPlane::start(Options::default()).await;
    // The reference provisioner's ConfigMap, where the migration guide expects it.
    let cm: ConfigMap = obj(json!({
        "metadata": {"name": "local-static-provisioner-config", "namespace": "kube-system"},
        "data": {"storageClassMap": "local-storage:\n  hostDir: /mnt/disks\n  mountDir: /mnt/disks\n"},
    }));
    Api::<ConfigMap>::namespaced(cp.client(), "kube-system")
        .create(&PostParams::default(), &cm)
        .await
        .expect("ConfigMap created");
    let install = commands_after("docs/migration.md", "*Reuse the ConfigMap object.*");
    assert!(
        install
            .iter()
            .any(|c| c[..2] == ["helm", "install"] && c.contains(&"classes=null".to_string())),
        "{install:?}"
    );
    for command in install {
        run_documented(&cp, &command);
    }
    make_crd_outdated(&cp).await;
    let upgrade = commands_after("docs/migration.md", "Later upgrades keep these");
    assert!(
        upgrade.iter().any(|c| c[..2] == ["helm", "upgrade"]),
        "{upgrade:?}"
    );
    for command in upgrade {
        run_documented(&cp, &command);
    }
    assert_crd_is_the_charts(&cp).await;
    // The older flag, which failed on `classes: null` against the schema (issue 17).
    run_documented(
        &cp,
        &[
            "helm",
            "upgrade",
            "localpv",
            "charts/localpv",
            "--namespace",
            "kube-system",
            "--reuse-values",
        ]
        .map(String::from),
    );
    let values = run_documented(
        &cp,
        &[
            "helm",
            "get",
            "values",
            "localpv",
            "--namespace",
            "kube-system",
            "--output",
            "json",
        ]
        .map(String::from),
    );
    let values: Value = serde_json::from_str(&values).expect("helm prints JSON");
    assert_eq!(
        values["existingConfigMap"], "local-static-provisioner-config",
        "the upgrade kept the migration's settings: {values}"
    );
}
