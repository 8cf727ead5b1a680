//! Pod Security admission on a real API server: the node agent's pods (taken from the rendered DaemonSet) are
//! refused in a `baseline` namespace, with or without `node.privileged=false`, and admitted in the namespace of
//! `config/manifests/namespace.yaml` (`privileged`); the extender's pods pass even `restricted`. The pods are
//! created with a server-side dry run, which runs every admission check and stores nothing.

use std::fs;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::node_agent::obj;
use crate::packaging::{NAMESPACE_FILE, documents, render, root, tool};
use crate::support::cluster::{ControlPlane, Options};

/// A Pod with the pod template of the rendered workload of `component` (its ServiceAccount swapped for `default`, which
/// the test namespaces have: the ServiceAccount admission check runs before Pod Security).
fn pod_of(yaml: &str, component: &str) -> Pod {
    let docs = documents(yaml);
    let workload = docs
        .iter()
        .find(|d| {
            ["DaemonSet", "Deployment"].contains(&d["kind"].as_str().unwrap_or_default())
                && d["metadata"]["labels"]["app.kubernetes.io/component"] == component
        })
        .unwrap_or_else(|| panic!("no {component} workload rendered"));
    let mut spec = workload["spec"]["template"]["spec"].clone();
    spec["serviceAccountName"] = json!("default");
    obj(json!({"metadata": {"generateName": "psa-"}, "spec": spec}))
}

async fn namespace_enforcing(cp: &ControlPlane, level: &str) -> String {
    let ns = cp.namespace(&format!("psa-{level}")).await;
    let patch = json!({"metadata": {"labels": {"pod-security.kubernetes.io/enforce": level}}});
    Api::<Namespace>::all(cp.client())
        .patch(&ns, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("namespace labelled");
    ns
}

/// Ok, or the API server's refusal message.
async fn dry_run(cp: &ControlPlane, ns: &str, pod: &Pod) -> Result<(), String> {
    let params = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    match Api::<Pod>::namespaced(cp.client(), ns)
        .create(&params, pod)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) => Err(format!("{} {}", e.code, e.message)),
        Err(e) => panic!("dry-run create failed for another reason: {e}"),
    }
}

/// The NOTES of `helm install --dry-run=server` of the defaults into `ns`.
fn notes_of_install(cp: &ControlPlane, ns: &str) -> String {
    let out = std::process::Command::new(tool("helm"))
        .args(["install", "psa", "charts/localpv", "--dry-run=server"])
        .args(["--namespace", ns])
        .env("KUBECONFIG", &cp.admin_kubeconfig)
        .current_dir(root())
        .output()
        .expect("helm runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text.split("\nNOTES:\n")
        .nth(1)
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn node_agent_pods_need_the_privileged_pod_security_level_that_the_namespace_file_sets() {
    let cp = ControlPlane::start(Options::default()).await;
    // The documented namespace file, applied as written.
    let file: Value = serde_yaml_ng::from_str(
        &fs::read_to_string(root().join(NAMESPACE_FILE)).expect("namespace.yaml exists"),
    )
    .expect("namespace.yaml parses");
    let documented: Namespace = obj(file);
    let documented_name = documented.metadata.name.clone().expect("named");
    Api::<Namespace>::all(cp.client())
        .create(&PostParams::default(), &documented)
        .await
        .expect("documented namespace created");
    let sa = obj(json!({"metadata": {"name": "default"}}));
    Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(cp.client(), &documented_name)
        .create(&PostParams::default(), &sa)
        .await
        .expect("service account created");
    let baseline = namespace_enforcing(&cp, "baseline").await;
    let restricted = namespace_enforcing(&cp, "restricted").await;

    assert_eq!(
        documented_name,
        crate::packaging::NAMESPACE,
        "the chart's namespace"
    );
    // The NOTES look the release namespace up and warn unless it admits the agent.
    let baseline_notes = notes_of_install(&cp, &baseline);
    assert!(
        baseline_notes.contains(&format!("Namespace {baseline} enforces \"baseline\"")),
        "{baseline_notes}"
    );
    let documented_notes = notes_of_install(&cp, &documented_name);
    assert!(
        !documented_notes.contains("WARNING: Pod Security"),
        "{documented_notes}"
    );
    for extra in [
        vec!["--set", "scheduler.enabled=true"],
        vec!["--set", "node.privileged=false"],
    ] {
        let yaml = render("localpv", &extra);
        let agent = pod_of(&yaml, "node");
        let refused = dry_run(&cp, &baseline, &agent)
            .await
            .expect_err("a baseline namespace refuses the node agent");
        assert!(
            refused.starts_with("403") && refused.contains("violates PodSecurity"),
            "{extra:?}: {refused}"
        );
        assert!(refused.contains("hostPath"), "{extra:?}: {refused}");
        dry_run(&cp, &documented_name, &agent)
            .await
            .unwrap_or_else(|e| panic!("{extra:?}: {NAMESPACE_FILE} admits the agent: {e}"));
        for component in ["extender", "scheduler"] {
            if component == "scheduler" && extra[1] != "scheduler.enabled=true" {
                continue;
            }
            dry_run(&cp, &restricted, &pod_of(&yaml, component))
                .await
                .unwrap_or_else(|e| panic!("{extra:?}: restricted admits the {component}: {e}"));
        }
    }
}
