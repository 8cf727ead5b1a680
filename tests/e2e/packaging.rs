//! Install and run: the Helm chart lints and renders, every object it renders is accepted by a real API server,
//! the plain manifests in `config/manifests` are the chart's defaults, the rendered ConfigMaps are valid agent
//! configuration, the chart's RBAC is enough for a full scenario and no more than `docs/security.md` lists, and the
//! image builds and runs. (The demo runs on real nodes: `tests/realnode/demo.rs`.)

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};

use crate::node_agent::{obj, pvs_of, wait_pvs};
use crate::support::agent::{http_get, localpv_bin, wait_answering};
use crate::support::cluster::{
    ControlPlane, Extender, Options, bin_dir, free_port, kube_version, pinned,
};
use crate::support::disks::Mount;
use crate::support::eventually;
use crate::support::nodes::create_node;
use crate::support::proc::Component;
use crate::support::realnode::images::{BASE_IMAGE, buildah, ensure_base_image, image_exists};
use crate::support::sa;

pub(crate) const NAMESPACE: &str = "localpv-system";
const MANIFESTS: &str = "config/manifests/localpv.yaml";
const ALL_ON: &str = "charts/localpv/ci/all-on-values.yaml";

pub(crate) fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub(crate) fn tool(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.is_file(),
        "missing prerequisite: {} not found; run scripts/k8s-bins.sh first",
        path.display()
    );
    path
}

pub(crate) fn run(program: &Path, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .current_dir(root())
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "missing prerequisite: cannot run {}: {e}",
                program.display()
            )
        })
}

pub(crate) fn run_ok(program: &Path, args: &[&str]) -> String {
    let out = run(program, args);
    assert!(
        out.status.success(),
        "{} {} failed:\n{}{}",
        program.display(),
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `helm template` of the chart in `NAMESPACE` for the plane under test, as `helm install` against it would
/// render (`extra` may name another `--kube-version`: the last one wins).
pub(crate) fn render(release: &str, extra: &[&str]) -> String {
    let version = kube_version();
    let mut args = vec![
        "template",
        release,
        "charts/localpv",
        "--namespace",
        NAMESPACE,
        "--kube-version",
        &version,
    ];
    args.extend_from_slice(extra);
    run_ok(&tool("helm"), &args)
}

pub(crate) fn documents(yaml: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(yaml)
        .filter_map(|d| {
            let v: Value = serde::Deserialize::deserialize(d).expect("rendered YAML parses");
            (!v.is_null()).then_some(v)
        })
        .collect()
}

/// The renderings the tests cover: the defaults, every option on, and the certificates from cert-manager (with
/// the chart's own CA issuer, and with a cluster issuer).
fn renderings() -> Vec<(&'static str, String)> {
    vec![
        ("defaults", render("localpv", &[])),
        ("all-on", render("t", &["-f", ALL_ON])),
        (
            "cert-manager",
            render(
                "cm",
                &[
                    "--set",
                    "extender.tls.source=certManager,extender.tls.clientAuth=true,scheduler.enabled=true",
                ],
            ),
        ),
        (
            "cert-manager-issuer",
            // The all-on objects again (same release): only the certificate objects are new.
            render(
                "t",
                &[
                    "-f",
                    ALL_ON,
                    "--set",
                    "extender.tls.source=certManager,extender.tls.secretName=",
                ],
            ),
        ),
    ]
}

/// The namespace file helm users apply before installing (labelled for the `privileged` Pod Security level).
pub(crate) const NAMESPACE_FILE: &str = "config/manifests/namespace.yaml";

/// The header of `config/manifests/localpv.yaml`: the namespace the chart's defaults install into, as in
/// `NAMESPACE_FILE`.
fn manifests_header() -> String {
    let namespace = fs::read_to_string(root().join(NAMESPACE_FILE)).expect("namespace.yaml exists");
    format!(
        "# Plain manifests equal to `helm template localpv charts/localpv --namespace {NAMESPACE} --include-crds {}`,\n\
         # generated, do not edit: LOCALPV_UPDATE_MANIFESTS=1 cargo test --test e2e packaging::plain rewrites them.\n\
         # The extender serves plain HTTP here: a certificate generated into a published file would carry the same\n\
         # private key to every cluster. For HTTPS use the chart (docs/install.md).\n\
         # Install: kubectl apply --server-side -f {MANIFESTS}\n---\n{namespace}",
        MANIFESTS_SET.join(" ")
    )
}

/// What the plain manifests set on top of the chart's defaults.
const MANIFESTS_SET: &[&str] = &["--set", "extender.tls.enabled=false"];

#[test]
fn chart_lints_clean_with_defaults_and_with_every_option_on() {
    let helm = tool("helm");
    for extra in [
        vec![],
        vec!["-f", ALL_ON],
        vec!["--set", "node.privileged=false"],
        vec![
            "--set",
            "existingConfigMap=local-provisioner-config",
            "--set",
            "classes=null",
        ],
    ] {
        let mut args = vec!["lint", "--strict", "charts/localpv"];
        args.extend_from_slice(&extra);
        run_ok(&helm, &args);
    }
}

/// helm built by scripts/k8s-bins.sh carries the Kubernetes version a released helm has, so an operator's bare
/// `helm template` (no cluster asked, no `--kube-version`) renders the chart instead of assuming v1.20.0.
#[test]
fn bare_helm_template_renders_the_chart() {
    let out = run(&tool("helm"), &["template", "localpv", "charts/localpv"]);
    assert!(
        out.status.success(),
        "helm template charts/localpv (no --kube-version) failed; rerun scripts/k8s-bins.sh:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let version = run_ok(&tool("helm"), &["version", "--template", "{{.Version}}"]);
    assert_eq!(version, format!("v{}", pinned("HELM_VERSION")));
}

/// The chart's default image is the repository `scripts/release.sh` pushes to by default, and the chart's version
/// and appVersion are Cargo.toml's, which the release script takes as the one version.
#[test]
fn chart_defaults_name_what_the_release_publishes() {
    let script = fs::read_to_string(root().join("scripts/release.sh")).expect("release.sh");
    let registry = script
        .lines()
        .find_map(|l| l.split("registry=").nth(1))
        .and_then(|r| r.split_whitespace().next())
        .expect("release.sh sets a default registry");
    let values: Value = serde_yaml_ng::from_str(
        &fs::read_to_string(root().join("charts/localpv/values.yaml")).expect("values.yaml"),
    )
    .expect("values parse");
    assert_eq!(values["image"]["repository"], format!("{registry}/localpv"));
    let chart = chart_yaml();
    let cargo = fs::read_to_string(root().join("Cargo.toml")).expect("Cargo.toml");
    let version = cargo
        .lines()
        .find_map(|l| l.strip_prefix("version = \""))
        .and_then(|v| v.strip_suffix('"'))
        .expect("Cargo.toml has a version");
    assert_eq!(chart["version"], version);
    assert_eq!(chart["appVersion"], version);
}

fn chart_yaml() -> Value {
    serde_yaml_ng::from_str(
        &fs::read_to_string(root().join("charts/localpv/Chart.yaml")).expect("Chart.yaml"),
    )
    .expect("Chart.yaml parses")
}

/// Chart.yaml's kubeVersion is exactly the tested range: it starts at the minor of K8S_OLDEST_VERSION, the
/// Kubernetes scripts/test.sh runs the end-to-end subset on. Below it helm refuses, naming kubeVersion. The
/// README and docs/install.md's table say the same versions.
#[test]
fn chart_kube_version_starts_at_the_oldest_tested_kubernetes() {
    let oldest = pinned("K8S_OLDEST_VERSION");
    let mut parts = oldest
        .split('.')
        .map(|p| p.parse::<u32>().expect("a numeric version"));
    let (major, minor) = (parts.next().expect("major"), parts.next().expect("minor"));
    let range = format!(">={major}.{minor}.0-0");
    assert_eq!(chart_yaml()["kubeVersion"], range.as_str());
    let install = fs::read_to_string(root().join("docs/install.md")).expect("docs/install.md");
    let readme = fs::read_to_string(root().join("README.md")).expect("README.md");
    for row in [
        format!(
            "| {} (newest) | {} |",
            pinned("K8S_VERSION"),
            pinned("ETCD_VERSION")
        ),
        format!("| {oldest} (oldest) | {} |", pinned("ETCD_OLDEST_VERSION")),
        format!("kubeVersion: \"{range}\""),
    ] {
        assert!(install.contains(&row), "docs/install.md states {row}");
    }
    for text in [
        format!("kubeVersion: \"{range}\""),
        oldest.clone(),
        pinned("K8S_VERSION"),
    ] {
        assert!(readme.contains(&text), "README.md states {text}");
    }
    let template = |version: &str| {
        run(
            &tool("helm"),
            &["template", "x", "charts/localpv", "--kube-version", version],
        )
    };
    let below = template(&format!("{major}.{}.99", minor - 1));
    let stderr = String::from_utf8_lossy(&below.stderr);
    assert!(
        !below.status.success() && stderr.contains("kubeVersion"),
        "helm refuses a cluster below the tested range, naming kubeVersion: {stderr}"
    );
    for version in [format!("{major}.{minor}.0"), pinned("K8S_VERSION")] {
        let out = template(&version);
        assert!(
            out.status.success(),
            "{version} renders: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn chart_refuses_values_outside_its_schema() {
    for set in [
        "classes[0].volumeMode=Blok",
        "node.bogus=1",
        "extender.scoreStrategy=random",
        "minResyncPeriod=5 minutes",
    ] {
        let out = run(
            &tool("helm"),
            &["template", "x", "charts/localpv", "--set", set],
        );
        assert!(!out.status.success(), "--set {set} was accepted");
    }
}

/// Recovery values a careless operator might give are refused, naming the key: a malformed duration, deleted nodes
/// as a signal without the clean-up that times their absence, and a zero time for re-created nodes (the extender
/// would refuse to start).
#[test]
fn chart_refuses_recovery_values_that_would_break_or_do_nothing_naming_the_key() {
    for (set, key) in [
        ("extender.recovery.interval=5 minutes", "interval"),
        ("extender.recovery.notReadyAfter=soon", "notReadyAfter"),
        (
            "extender.recovery.replacedNodesAfter=soon",
            "replacedNodesAfter",
        ),
        (
            "extender.recovery.enabled=true,extender.recovery.replacedNodesAfter=0s",
            "replacedNodesAfter",
        ),
        (
            "extender.recovery.enabled=true,extender.recovery.deletedNodes=true,extender.nodeCleanup.enabled=false",
            "deletedNodes",
        ),
    ] {
        let out = run(
            &tool("helm"),
            &["template", "x", "charts/localpv", "--set", set],
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "--set {set} was accepted");
        assert!(
            err.contains(key),
            "--set {set}: the error names {key}: {err}"
        );
    }
}

#[test]
fn plain_manifests_are_the_chart_defaults() {
    let expected = format!(
        "{}{}",
        manifests_header(),
        render("localpv", &[&["--include-crds"], MANIFESTS_SET].concat())
    );
    let path = root().join(MANIFESTS);
    if std::env::var_os("LOCALPV_UPDATE_MANIFESTS").is_some() {
        fs::create_dir_all(path.parent().expect("has a parent")).expect("dir created");
        fs::write(&path, &expected).expect("manifests written");
    }
    let committed = fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == expected,
        "{MANIFESTS} is out of date with charts/localpv: run \
         `LOCALPV_UPDATE_MANIFESTS=1 cargo test --test e2e packaging::plain` and commit the result"
    );
}

#[test]
fn rendered_config_maps_are_valid_node_agent_configuration() {
    let dir = tempfile::tempdir().expect("temp dir");
    for (name, yaml) in renderings() {
        let maps: Vec<Value> = documents(&yaml)
            .into_iter()
            .filter(|d| d["kind"] == "ConfigMap" && d["data"].get("storageClassMap").is_some())
            .collect();
        assert_eq!(maps.len(), 1, "{name}: one agent ConfigMap");
        let file = dir.path().join(format!("{name}.yaml"));
        fs::write(
            &file,
            serde_yaml_ng::to_string(&maps[0]).expect("serialises"),
        )
        .expect("written");
        let out = run_ok(
            &localpv_bin(),
            &[
                "node",
                "--check-config",
                "--config",
                file.to_str().expect("utf-8"),
            ],
        );
        assert!(out.contains("is valid"), "{name}: {out}");
    }
}

/// Stand-ins for cert-manager's CRDs, so the cert-manager renderings can be applied.
/// cert-manager's Certificate and Issuer CRDs, stand-ins.
fn cert_manager_crds() -> String {
    let crd = crate::support::stand_in_crd;
    format!(
        "{}---\n{}",
        crd("cert-manager.io", "Certificate", "certificates"),
        crd("cert-manager.io", "Issuer", "issuers")
    )
}

/// Applies a file with server-side apply as the admin; returns kubectl's output lines.
pub(crate) fn apply(cp: &ControlPlane, file: &Path) -> Vec<String> {
    let kubeconfig = cp.admin_kubeconfig.display().to_string();
    let out = run_ok(
        &tool("kubectl"),
        &[
            "--kubeconfig",
            &kubeconfig,
            "apply",
            "--server-side",
            "--field-manager=localpv-packaging-test",
            "-f",
            file.to_str().expect("utf-8"),
        ],
    );
    out.lines().map(str::to_string).collect()
}

/// The chart's CRDs (and the ServiceMonitor stand-in), applied and Established.
pub(crate) fn install_crds(cp: &ControlPlane) {
    let stub = cp.dir.join("servicemonitor-crd.yaml");
    fs::write(
        &stub,
        format!(
            "{}---\n{}",
            crate::support::service_monitor_crd(),
            cert_manager_crds()
        ),
    )
    .expect("written");
    apply(cp, &stub);
    apply(cp, &root().join("charts/localpv/crds"));
    let kubeconfig = cp.admin_kubeconfig.display().to_string();
    run_ok(
        &tool("kubectl"),
        &[
            "--kubeconfig",
            &kubeconfig,
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/localdisks.localpv.io",
            "crd/servicemonitors.monitoring.coreos.com",
            "crd/certificates.cert-manager.io",
            "crd/issuers.cert-manager.io",
        ],
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn every_rendered_object_is_accepted_by_the_api_server() {
    let cp = ControlPlane::start(Options::default()).await;
    install_crds(&cp);
    let ns: k8s_openapi::api::core::v1::Namespace = obj(json!({"metadata": {"name": NAMESPACE}}));
    Api::all(cp.client())
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace created");
    for (name, yaml) in renderings() {
        let docs = documents(&yaml);
        let file = cp.dir.join(format!("{name}.yaml"));
        fs::write(&file, &yaml).expect("written");
        let applied = apply(&cp, &file);
        let accepted = applied
            .iter()
            .filter(|l| l.ends_with("serverside-applied"))
            .count();
        assert_eq!(
            accepted,
            docs.len(),
            "{name}: every object applied:\n{}",
            applied.join("\n")
        );
    }
    // The committed manifests too (their Namespace and CRD were applied above: re-applying is a no-op).
    let applied = apply(&cp, &root().join(MANIFESTS));
    assert!(applied.iter().all(|l| l.ends_with("serverside-applied")));
}

/// (component, API group, resource, verb) for every rule of every Role and ClusterRole in the renderings, plus
/// ("component", "built-in role", name, "bind") for bindings to roles the chart does not render.
fn granted() -> BTreeSet<[String; 4]> {
    let mut grants = BTreeSet::new();
    for (_, yaml) in renderings() {
        let docs = documents(&yaml);
        let rendered: BTreeSet<String> = docs
            .iter()
            .filter(|d| d["kind"] == "Role" || d["kind"] == "ClusterRole")
            .map(|d| {
                d["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect();
        for d in &docs {
            let component = d["metadata"]["labels"]["app.kubernetes.io/component"]
                .as_str()
                .unwrap_or("none")
                .to_string();
            let kind = d["kind"].as_str().unwrap_or_default();
            if kind == "Role" || kind == "ClusterRole" {
                for rule in d["rules"].as_array().into_iter().flatten() {
                    let strings = |k: &str| -> Vec<String> {
                        rule[k]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .map(|v| v.as_str().unwrap_or_default().to_string())
                            .collect()
                    };
                    for group in strings("apiGroups") {
                        for resource in strings("resources") {
                            for verb in strings("verbs") {
                                let group = if group.is_empty() {
                                    "core".into()
                                } else {
                                    group.clone()
                                };
                                grants.insert([component.clone(), group, resource.clone(), verb]);
                            }
                        }
                    }
                }
            }
            if kind == "RoleBinding" || kind == "ClusterRoleBinding" {
                let role = d["roleRef"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                if !rendered.contains(&role) {
                    grants.insert([component, "built-in role".into(), role, "bind".into()]);
                }
            }
        }
    }
    grants
}

/// The rows of the RBAC table in docs/security.md, in the same shape as `granted`.
fn documented() -> BTreeSet<[String; 4]> {
    let text =
        fs::read_to_string(root().join("docs/security.md")).expect("docs/security.md exists");
    let table = text
        .split("<!-- rbac-table -->")
        .nth(1)
        .expect("docs/security.md has the <!-- rbac-table --> marker");
    let mut rows = BTreeSet::new();
    for line in table.lines().skip_while(|l| l.trim().is_empty()).skip(2) {
        if !line.starts_with('|') {
            break;
        }
        let cells: Vec<String> = line
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().trim_matches('`').to_string())
            .collect();
        for verb in cells[3].split(',') {
            rows.insert([
                cells[0].clone(),
                cells[1].clone(),
                cells[2].clone(),
                verb.trim().trim_matches('`').to_string(),
            ]);
        }
    }
    rows
}

#[test]
fn roles_grant_exactly_what_docs_security_md_lists() {
    let granted = granted();
    assert!(
        granted.iter().all(|g| !g.iter().any(|s| s.contains('*'))),
        "no wildcards: {granted:?}"
    );
    let documented = documented();
    let undocumented: Vec<_> = granted.difference(&documented).collect();
    let unused: Vec<_> = documented.difference(&granted).collect();
    assert!(
        undocumented.is_empty() && unused.is_empty(),
        "granted but not in docs/security.md: {undocumented:?}\nin docs/security.md but not granted: {unused:?}"
    );
    assert!(
        !granted.iter().any(|g| g[2] == "secrets"),
        "no component reads Secrets"
    );
}

/// Every metric family the components expose is described in docs/metrics.md.
fn assert_metrics_documented(scrapes: &[&str]) {
    let docs = fs::read_to_string(root().join("docs/metrics.md")).expect("docs/metrics.md exists");
    let families: Vec<&str> = scrapes
        .iter()
        .flat_map(|s| s.lines())
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(!families.is_empty(), "no metric families scraped");
    let missing: Vec<&&str> = families
        .iter()
        .filter(|f| !docs.contains(&format!("`{f}")))
        .collect();
    assert!(
        missing.is_empty(),
        "metric families missing from docs/metrics.md: {missing:?}"
    );
}

/// A `localpv` process (node agent or extender) under a ServiceAccount's kubeconfig.
fn spawn(cp: &ControlPlane, name: &str, args: &[String], kubeconfig: &Path) -> Component {
    let env = [
        ("KUBECONFIG", kubeconfig.to_str().expect("utf-8 path")),
        ("RUST_LOG", "info,localpv=debug"),
    ];
    Component::spawn_with_env(name, &localpv_bin(), args, &env, &cp.log_dir(), cp.reaper())
}

/// The arguments of an agent for stand-in node `node` on `port`, with one class `local-storage` over the
/// node's `disks` directory (returned too).
pub(crate) fn agent_args(cp: &ControlPlane, node: &str, port: u16) -> (Vec<String>, PathBuf) {
    let host = cp.dir.join("hosts").join(node);
    let disks = host.join("disks");
    fs::create_dir_all(&disks).expect("disks dir");
    let config = host.join("config.yaml");
    fs::write(
        &config,
        format!(
            "storageClassMap:\n  local-storage:\n    hostDir: {}\n",
            disks.display()
        ),
    )
    .expect("config written");
    let args = vec![
        "node".into(),
        format!("--config={}", config.display()),
        format!("--node-name={node}"),
        format!("--listen=127.0.0.1:{port}"),
        format!("--state-dir={}", host.join("state").display()),
        "--config-poll=500ms".into(),
    ];
    (args, disks)
}

/// A kubeconfig for the node agent's ServiceAccount with a token bound to a pod on `node` (the pod is created, never
/// run), as the kubelet gives the DaemonSet's pod.
pub(crate) async fn node_token(cp: &ControlPlane, node: &str) -> PathBuf {
    sa::node_agent_kubeconfig(cp, NAMESPACE, "localpv-node", node.to_string()).await
}

/// A plane with the PV binder and a scheduler that calls an extender (nodeCacheCapable) at a free loopback port,
/// where the test starts one; and that port.
pub(crate) async fn plane_calling_an_extender() -> (ControlPlane, u16) {
    let port = free_port();
    let mut ext = Extender::new(&format!("http://127.0.0.1:{port}"));
    ext.node_cache_capable = true;
    let cp = ControlPlane::start(Options {
        controller_manager: true,
        scheduler: true,
        extenders: vec![ext],
        ..Options::default()
    })
    .await;
    (cp, port)
}

/// How long a localpv process may take to turn ready.
pub(crate) const READY: Duration = Duration::from_secs(60);

/// Claim `data` of `size` (class local-storage) for a pod `app` pinned to `node`; waits until the claim is bound
/// to the PV `pv`.
pub(crate) async fn bind_app(client: &kube::Client, ns: &str, node: &str, size: &str, pv: &str) {
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    pvcs.create(
        &PostParams::default(),
        &obj(
            json!({"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"],
            "storageClassName": "local-storage", "resources": {"requests": {"storage": size}}}}),
        ),
    )
    .await
    .expect("claim created");
    pods.create(
        &PostParams::default(),
        &obj(json!({"metadata": {"name": "app"}, "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [{"name": "app", "image": "nginx"}],
            "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}})),
    )
    .await
    .expect("pod created");
    eventually(
        &format!("the claim to bind to {node}'s PV {pv}"),
        Duration::from_secs(60),
        || async {
            let c = pvcs.get("data").await.map_err(|e| e.to_string())?;
            let to = c.spec.and_then(|s| s.volume_name);
            (to.as_deref() == Some(pv))
                .then_some(())
                .ok_or(format!("{to:?}"))
        },
    )
    .await;
}

/// Deletes pod `app` at once, then claim `data`: the claim's PV is released.
pub(crate) async fn release_app(client: &kube::Client, ns: &str) {
    Api::<Pod>::namespaced(client.clone(), ns)
        .delete("app", &DeleteParams::default().grace_period(0))
        .await
        .expect("pod deleted");
    Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
        .delete("data", &DeleteParams::default())
        .await
        .expect("claim deleted");
}

#[tokio::test(flavor = "multi_thread")]
async fn chart_service_accounts_run_a_full_scenario_without_a_forbidden_request() {
    let (cp, extender_port) = plane_calling_an_extender().await;
    let client = cp.client();
    install_crds(&cp);
    let ns: k8s_openapi::api::core::v1::Namespace = obj(json!({"metadata": {"name": NAMESPACE}}));
    Api::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace created");
    // The chart's defaults: ServiceAccounts, roles, bindings, and the StorageClass local-storage (Delete).
    let rendered = cp.dir.join("defaults.yaml");
    fs::write(&rendered, render("localpv", &[])).expect("written");
    apply(&cp, &rendered);
    let ext_kc = sa::token_kubeconfig(&cp, NAMESPACE, "localpv-extender").await;
    let app_ns = cp.namespace("app").await;
    for n in ["node-1", "node-2"] {
        create_node(&client, n, &[]).await;
    }

    // Publish: two agents under the node agent's ServiceAccount, each with a token bound to a pod on its node as
    // the kubelet gives it, and the flag the chart passes; the extender under its own.
    let mut agents = Vec::new();
    let mut mounts = Vec::new();
    for n in ["node-1", "node-2"] {
        let port = free_port();
        let (mut args, disks) = agent_args(&cp, n, port);
        args.push("--admission-policy=localpv-discovery-dirs".into());
        let node_kc = node_token(&cp, n).await;
        mounts.push(Mount::tmpfs(&disks.join("vol1"), "1G", cp.reaper()));
        agents.push((
            spawn(&cp, &format!("localpv-node-{n}"), &args, &node_kc),
            port,
            disks,
        ));
    }
    let mut extender = spawn(
        &cp,
        "localpv-extender",
        &[
            "extender".into(),
            format!("--listen=127.0.0.1:{extender_port}"),
            // What the chart passes from the downward API; a short grace so the clean-up runs in the test.
            format!("--lease-namespace={NAMESPACE}"),
            "--identity=localpv-extender-0".into(),
            "--node-cleanup-grace=2s".into(),
        ],
        &ext_kc,
    );
    for (c, port, _) in agents.iter_mut() {
        wait_answering(c, *port, "/readyz", READY, || true).await;
    }
    wait_answering(&mut extender, extender_port, "/readyz", READY, || true).await;
    let path = |i: usize| agents[i].2.join("vol1").display().to_string();
    wait_pvs(&client, "node-1", &[path(0)], "Available").await;
    let node2 = wait_pvs(&client, "node-2", &[path(1)], "Available").await;
    let node2_pv = node2[&path(1)].metadata.name.clone().expect("named");

    // Bind: a pod pinned to node-2 gets node-2's PV, through the extender.
    bind_app(&client, &app_ns, "node-2", "100Mi", &node2_pv).await;
    let (_, metrics) = http_get(extender_port, "/metrics").expect("extender serves /metrics");
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("localpv_extender_requests_total") && !l.ends_with(" 0")),
        "the scheduler consulted the extender:\n{metrics}"
    );

    let (_, agent_metrics) = http_get(agents[0].1, "/metrics").expect("agent serves /metrics");
    assert_metrics_documented(&[&metrics, &agent_metrics]);

    // Release and wipe: the data goes, the disk comes back as a new Available PV.
    fs::write(agents[1].2.join("vol1/index.html"), "hello").expect("pod data written");
    release_app(&client, &app_ns).await;
    eventually(
        "node-2's disk to be wiped and republished",
        Duration::from_secs(60),
        || async {
            let pvs = pvs_of(&client, "node-2").await;
            match pvs.get(&path(1)) {
                Some(pv)
                    if pv.metadata.name.as_deref() == Some(node2_pv.as_str())
                        && pv.metadata.uid != node2[&path(1)].metadata.uid
                        && crate::node_agent::phase(pv) == "Available" =>
                {
                    Ok(())
                }
                other => Err(format!(
                    "{:?}",
                    other.map(|p| (&p.metadata.uid, crate::node_agent::phase(p)))
                )),
            }
        },
    )
    .await;
    assert!(
        !agents[1].2.join("vol1/index.html").exists(),
        "the wipe removed the pod's data"
    );

    // Node deleted: the extender's clean-up removes its Available PV; its agent asks for nothing it may not have.
    Api::<Node>::all(client.clone())
        .delete("node-1", &DeleteParams::default())
        .await
        .expect("node deleted");
    eventually(
        "the deleted node's PV to be cleaned up",
        Duration::from_secs(60),
        || async {
            let left = pvs_of(&client, "node-1").await;
            left.is_empty()
                .then_some(())
                .ok_or(format!("{:?}", left.keys()))
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;

    let audit = cp.log_dir().join("audit.log");
    let prefix = format!("system:serviceaccount:{NAMESPACE}:");
    assert!(
        sa::request_count(&audit, &sa::username(NAMESPACE, "localpv-node")) > 0
            && sa::request_count(&audit, &sa::username(NAMESPACE, "localpv-extender")) > 0,
        "both components ran under the chart's ServiceAccounts"
    );
    // The scenario exercised the writes the roles exist for (else "no 403" would prove little).
    let used = sa::verbs_used(&audit, &sa::username(NAMESPACE, "localpv-node"));
    // NB: no `list` but of StorageClasses and LocalDisks (polled, not watched): every watch starts with a streaming list (a watch
    // request); the grant stays for where the API server has WatchList off and for the agent's fallback list of
    // every PV.
    for (verb, resource) in [
        ("watch", "persistentvolumes"),
        ("create", "persistentvolumes"),
        ("patch", "persistentvolumes"),
        ("delete", "persistentvolumes"),
        ("watch", "nodes"),
        ("list", "storageclasses"),
        ("list", "localdisks"),
        ("create", "events"),
        ("patch", "localdisks"),
    ] {
        assert!(
            used.contains(&(verb.to_string(), resource.to_string())),
            "the node agent never did {verb} {resource}: {used:?}"
        );
    }
    let forbidden = sa::answered_with(&audit, &prefix, 403);
    assert!(forbidden.is_empty(), "forbidden requests: {forbidden:#?}");
    drop(mounts);
}

/// The builder base: the Debian base plus this machine's Rust toolchain (the stand-in for the official rust
/// image) and its CA bundle (egress here goes through a TLS-inspecting proxy). Cached per rustc version.
fn ensure_builder_image() -> String {
    let version = run_ok(Path::new("rustc"), &["--version"]);
    let version = version
        .split_whitespace()
        .nth(1)
        .expect("rustc prints a version");
    let name = format!("localhost/localpv-rust-builder:{version}-bookworm");
    if image_exists(&name) {
        return name;
    }
    ensure_base_image(&std::env::temp_dir());
    let sysroot = run_ok(Path::new("rustc"), &["--print", "sysroot"]);
    let sysroot = Path::new(sysroot.trim());
    let c = buildah(&["from", BASE_IMAGE]).trim().to_string();
    buildah(&[
        "run",
        "--isolation",
        "chroot",
        &c,
        "--",
        "mkdir",
        "-p",
        "/usr/local/rust",
    ]);
    for part in ["bin", "lib", "libexec"] {
        let from = sysroot.join(part).display().to_string();
        buildah(&["copy", &c, &from, &format!("/usr/local/rust/{part}")]);
    }
    buildah(&[
        "copy",
        &c,
        "/etc/ssl/certs/ca-certificates.crt",
        "/etc/ssl/certs/ca-certificates.crt",
    ]);
    buildah(&[
        "config",
        "--env",
        "PATH=/usr/local/rust/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "--env",
        "CARGO_HOME=/usr/local/cargo",
        "--env",
        "CARGO_HTTP_CAINFO=/etc/ssl/certs/ca-certificates.crt",
        "--env",
        "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
        &c,
    ]);
    buildah(&["commit", "-q", &c, &name]);
    buildah(&["rm", &c]);
    name
}

#[test]
fn image_builds_and_runs_localpv_version() {
    let builder = ensure_builder_image();
    // NB: chroot isolation: this machine's crun may not set rlimits (`setrlimit RLIMIT_NOFILE: Operation not
    // permitted`), so `podman run` and OCI isolation fail here; chroot needs neither. Niced: on a machine where
    // the release build inside is cold (minutes of rustc on both cores), the tests running beside this one keep
    // their share of the CPU; a flood test starved by it once missed its /readyz probe.
    crate::support::disks::run(
        "nice",
        &[
            "-n",
            "10",
            "buildah",
            "build",
            "--isolation",
            "chroot",
            "--layers",
            "--build-arg",
            &format!("BUILDER_IMAGE={builder}"),
            "--build-arg",
            &format!("RUNTIME_IMAGE={BASE_IMAGE}"),
            "-t",
            "localhost/localpv:test",
            "-f",
            "Dockerfile",
            ".",
        ],
    );
    let c = buildah(&["from", "localhost/localpv:test"])
        .trim()
        .to_string();
    let version = buildah(&[
        "run",
        "--isolation",
        "chroot",
        &c,
        "--",
        "/usr/local/bin/localpv",
        "--version",
    ]);
    let tools = run(
        Path::new("/usr/bin/buildah"),
        &[
            "run",
            "--isolation",
            "chroot",
            &c,
            "--",
            "sh",
            "-c",
            "command -v cargo rustc clang",
        ],
    );
    let user = buildah(&[
        "inspect",
        "--format",
        "{{.OCIv1.Config.User}}",
        "localhost/localpv:test",
    ]);
    buildah(&["rm", &c]);
    assert_eq!(
        version.trim(),
        format!("localpv {}", env!("CARGO_PKG_VERSION"))
    );
    assert!(
        tools.stdout.is_empty(),
        "no build tools in the runtime image: {}",
        String::from_utf8_lossy(&tools.stdout)
    );
    assert_eq!(
        user.trim(),
        "65532:65532",
        "the image's default user is not root"
    );
}

#[test]
fn second_scheduler_image_follows_the_clusters_version_unless_pinned() {
    let image = |extra: &[&str]| {
        let mut args = vec!["--set", "scheduler.enabled=true"];
        args.extend_from_slice(extra);
        documents(&render("localpv", &args))
            .into_iter()
            .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == "localpv-scheduler")
            .expect("the scheduler Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
            .as_str()
            .expect("an image")
            .to_string()
    };
    assert_eq!(
        image(&["--kube-version", "v1.35.2-eks-4f3e2d1"]),
        "registry.k8s.io/kube-scheduler:v1.35.2"
    );
    assert_eq!(
        image(&["--kube-version", "1.36.0"]),
        "registry.k8s.io/kube-scheduler:v1.36.0"
    );
    assert_eq!(
        image(&["--set", "scheduler.image.tag=v1.34.9"]),
        "registry.k8s.io/kube-scheduler:v1.34.9"
    );
}
