//! The documented install run as written against a real control plane, then the scheduler wired the way the
//! chart's NOTES say: `docs/install.md`'s first command block (namespace file, `helm install`) is executed word
//! for word; the kube-scheduler configuration the NOTES print (the chart-generated CA inline as `caData`) starts
//! a real kube-scheduler; an extender process serves HTTPS with the generated Secret's certificate and key; with
//! `ignorable: false` a pod is bound only if the scheduler's TLS call to the extender succeeded.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{Api, PostParams};
use kube::{Client, Config};
use serde_json::{Value, json};

use crate::chart_docs::{fenced_blocks, shell_commands};
use crate::node_agent::obj;
use crate::packaging::{NAMESPACE, root, tool};
use crate::support::agent::localpv_bin;
use crate::support::cluster::{ControlPlane, Options, bin_dir, free_port};
use crate::support::eventually;
use crate::support::nodes::create_node;
use crate::support::proc::Component;
use crate::support::sa;

/// Runs a documented `kubectl`/`helm` command as the cluster admin; returns stdout.
pub(crate) fn run_documented(cp: &ControlPlane, command: &[String]) -> String {
    let program = match command[0].as_str() {
        "kubectl" | "helm" => tool(&command[0]),
        other => panic!("a documented install step runs {other}, which this test cannot run"),
    };
    let out = Command::new(&program)
        .args(&command[1..])
        .env("KUBECONFIG", &cp.admin_kubeconfig)
        .env("HELM_CACHE_HOME", cp.dir.join("helm/cache"))
        .env("HELM_CONFIG_HOME", cp.dir.join("helm/config"))
        .env("HELM_DATA_HOME", cp.dir.join("helm/data"))
        .current_dir(root())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    assert!(
        out.status.success(),
        "`{}` failed:\n{}{}",
        command.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The first ```sh block of docs/install.md's "Install the chart" section, run command by command.
pub(crate) fn run_documented_install(cp: &ControlPlane) {
    run_documented_install_with(cp, &[]);
}

/// The documented install, with `extra` arguments added to its `helm install`.
fn run_documented_install_with(cp: &ControlPlane, extra: &[&str]) {
    let text = fs::read_to_string(root().join("docs/install.md")).expect("docs/install.md");
    let section = text
        .split("## 2. Install the chart")
        .nth(1)
        .expect("docs/install.md has the section \"2. Install the chart\"");
    let (_, block) = fenced_blocks(section)
        .into_iter()
        .find(|(info, _)| info == "sh")
        .expect("the section shows the install commands");
    let commands = shell_commands(&block);
    assert!(
        commands.iter().any(|c| c[..2] == ["helm", "install"]),
        "{commands:?}"
    );
    for mut command in commands {
        if command[..2] == ["helm", "install"] {
            command.extend(extra.iter().map(|s| s.to_string()));
        }
        run_documented(cp, &command);
    }
}

/// The scheduler configuration between the NOTES' scissors lines.
fn scheduler_config_in(notes: &str) -> Value {
    let body = notes
        .split("----- 8< ----- kube-scheduler configuration -----\n")
        .nth(1)
        .and_then(|rest| rest.split("----- >8 -----").next())
        .unwrap_or_else(|| panic!("the NOTES print no scheduler configuration:\n{notes}"));
    serde_yaml_ng::from_str(body)
        .unwrap_or_else(|e| panic!("the printed configuration: {e}\n{body}"))
}

/// The body of a 200 answer of an HTTPS endpoint on loopback (any certificate).
async fn https_get(port: u16, path: &str) -> Option<String> {
    let mut cfg = Config::new(
        format!("https://127.0.0.1:{port}")
            .parse()
            .expect("valid url"),
    );
    cfg.accept_invalid_certs = true;
    let client = Client::try_from(cfg).expect("client builds");
    let req = http::Request::get(path)
        .body(Vec::new())
        .expect("request builds");
    client.request_text(req).await.ok()
}

/// Polls an HTTPS endpoint (any certificate) until it answers 200.
async fn wait_https_ok(component: &mut Component, port: u16, path: &str) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        assert!(
            component.running(),
            "{} exited:\n{}",
            component.name,
            component.tail(40)
        );
        if https_get(port, path).await.is_some() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{} {path} not 200 after 90s:\n{}",
            component.name,
            component.tail(40)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Runs kube-scheduler `name` with `config` as the user of `kubeconfig`, then creates node-1 and a pod `web` (of
/// `scheduler_name` when given) in a new namespace and waits up to `within` until the scheduler binds it. The
/// scheduler is returned still running.
async fn scheduler_binds_a_pod(
    cp: &ControlPlane,
    name: &str,
    config: &Value,
    kubeconfig: &Path,
    scheduler_name: Option<&str>,
    within: Duration,
) -> Component {
    let config_path = cp.dir.join(format!("{name}.yaml"));
    fs::write(
        &config_path,
        serde_yaml_ng::to_string(config).expect("serialises"),
    )
    .expect("written");
    let port = free_port();
    let mut scheduler = Component::spawn(
        name,
        &bin_dir().join("kube-scheduler"),
        &[
            format!("--config={}", config_path.display()),
            format!("--authentication-kubeconfig={}", kubeconfig.display()),
            format!("--authorization-kubeconfig={}", kubeconfig.display()),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={port}"),
            "--v=2".into(),
        ],
        &cp.log_dir(),
        cp.reaper(),
    );
    wait_https_ok(&mut scheduler, port, "/healthz").await;

    let client = cp.client();
    create_node(&client, "node-1", &[]).await;
    let ns = cp.namespace("app").await;
    let mut spec = json!({"containers": [{"name": "web", "image": "nginx"}]});
    if let Some(scheduler_name) = scheduler_name {
        spec["schedulerName"] = json!(scheduler_name);
    }
    let pod: Pod = obj(json!({"metadata": {"name": "web"}, "spec": spec}));
    let pods: Api<Pod> = Api::namespaced(client, &ns);
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("pod created");
    eventually(
        &format!("the pod to be bound by {name}"),
        within,
        || async {
            let p = pods.get("web").await.map_err(|e| e.to_string())?;
            match p.spec.and_then(|s| s.node_name) {
                Some(n) => Ok(n),
                None => Err(format!("{:?}\n{}", p.status, scheduler.tail(10))),
            }
        },
    )
    .await;
    scheduler
}

fn write(path: &Path, bytes: &[u8]) -> String {
    fs::write(path, bytes).expect("written");
    path.display().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn kube_scheduler_with_the_configuration_the_notes_print_calls_the_extender_over_tls() {
    scheduler_from_the_notes_schedules_through_the_extender(false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn with_client_auth_the_generated_client_certificate_lets_kube_scheduler_in() {
    scheduler_from_the_notes_schedules_through_the_extender(true).await;
}

/// Installs as documented (plus `extender.tls.clientAuth` when `client_auth`), then runs an extender with the
/// generated Secret and kube-scheduler with the configuration the NOTES print, and schedules a pod through them.
async fn scheduler_from_the_notes_schedules_through_the_extender(client_auth: bool) {
    let cp = ControlPlane::start(Options {
        controller_manager: true,
        ..Options::default()
    })
    .await;
    let client = cp.client();
    let extra: &[&str] = if client_auth {
        &["--set", "extender.tls.clientAuth=true"]
    } else {
        &[]
    };
    run_documented_install_with(&cp, extra);
    let notes = run_documented(
        &cp,
        &["helm", "get", "notes", "localpv", "--namespace", NAMESPACE].map(String::from),
    );
    let mut config = scheduler_config_in(&notes);

    // The Secret the chart generated: the extender serves with its certificate and key.
    let secret: Secret = Api::namespaced(client.clone(), NAMESPACE)
        .get("localpv-extender-tls")
        .await
        .expect("the chart generated the extender's TLS Secret");
    let data = secret.data.expect("the Secret has data");
    let ca = &data["ca.crt"];
    let dir = cp.dir.join("extender-tls");
    fs::create_dir_all(&dir).expect("dir");
    let cert = write(&dir.join("tls.crt"), &data["tls.crt"].0);
    let key = write(&dir.join("tls.key"), &data["tls.key"].0);
    let extender_port = free_port();
    let mut args = vec![
        "extender".into(),
        format!("--listen=127.0.0.1:{extender_port}"),
        format!("--tls-cert={cert}"),
        format!("--tls-key={key}"),
        "--node-cleanup=false".into(),
        "--explain-pending=false".into(),
    ];
    if client_auth {
        // As the chart's Deployment does: the Secret's ca.crt checks client certificates.
        args.push(format!(
            "--tls-client-ca={}",
            write(&dir.join("ca.crt"), &ca.0)
        ));
    }
    let mut extender = Component::spawn_with_env(
        "localpv-extender",
        &localpv_bin(),
        &args,
        &[
            ("KUBECONFIG", cp.admin_kubeconfig.to_str().expect("utf-8")),
            ("RUST_LOG", "info,localpv=debug"),
        ],
        &cp.log_dir(),
        cp.reaper(),
    );
    wait_https_ok(&mut extender, extender_port, "/readyz").await;

    // The printed configuration, changed only where this machine differs from a cluster: the scheduler's
    // kubeconfig, leader election off, and the extender's address (its name does not resolve here;
    // tlsConfig.serverName still makes the scheduler check the certificate against that name and the CA).
    let entry = &mut config["extenders"][0];
    let ca_data = entry["tlsConfig"]["caData"]
        .as_str()
        .expect("caData is printed inline");
    assert_eq!(
        json!(ca_data),
        serde_json::to_value(ca).expect("serialises as base64"),
        "the NOTES print the generated Secret's CA"
    );
    let url = entry["urlPrefix"].as_str().expect("urlPrefix").to_string();
    assert!(url.starts_with("https://"), "{url}");
    entry["urlPrefix"] = json!(format!("https://127.0.0.1:{extender_port}"));
    if client_auth {
        // The files the NOTES tell to extract from the generated client Secret, written here instead.
        let client_secret: Secret = Api::namespaced(client.clone(), NAMESPACE)
            .get("localpv-scheduler-client")
            .await
            .expect("the chart generated the schedulers' client certificate");
        assert!(
            notes.contains("get secret localpv-scheduler-client"),
            "the NOTES say where the client certificate is:\n{notes}"
        );
        let data = client_secret.data.expect("data");
        for (field, key) in [("certFile", "tls.crt"), ("keyFile", "tls.key")] {
            let printed = entry["tlsConfig"][field]
                .as_str()
                .unwrap_or_else(|| panic!("the NOTES print tlsConfig.{field}"))
                .to_string();
            let name = Path::new(&printed).file_name().expect("a file name");
            entry["tlsConfig"][field] = json!(write(&dir.join(name), &data[key].0));
        }
    }
    let kubeconfig = cp.kubeconfig_for("scheduler-notes", "system:kube-scheduler", &[]);
    config["clientConnection"]["kubeconfig"] = json!(kubeconfig.display().to_string());
    config["leaderElection"]["leaderElect"] = json!(false);
    let _scheduler = scheduler_binds_a_pod(
        &cp,
        "kube-scheduler-from-notes",
        &config,
        &kubeconfig,
        None,
        Duration::from_secs(60),
    )
    .await;
    let metrics = https_get(extender_port, "/metrics")
        .await
        .expect("the extender's metrics");
    let filters: f64 = metrics
        .lines()
        .filter(|l| {
            l.starts_with("localpv_extender_requests_total{")
                && l.to_lowercase().contains("verb=\"filter\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(
        filters >= 1.0,
        "the extender counted the scheduler's filter call:\n{metrics}"
    );
    drop(extender);
}

/// The extender as the chart runs it, serving the generated Secret's certificate; returns its port.
async fn extender_with_generated_certificate(cp: &ControlPlane) -> (Component, u16, PathBuf) {
    let secret: Secret = Api::namespaced(cp.client(), NAMESPACE)
        .get("localpv-extender-tls")
        .await
        .expect("the chart generated the extender's TLS Secret");
    let data = secret.data.expect("the Secret has data");
    let dir = cp.dir.join("extender-tls");
    fs::create_dir_all(&dir).expect("dir");
    let port = free_port();
    let args = vec![
        "extender".into(),
        format!("--listen=127.0.0.1:{port}"),
        format!(
            "--tls-cert={}",
            write(&dir.join("tls.crt"), &data["tls.crt"].0)
        ),
        format!(
            "--tls-key={}",
            write(&dir.join("tls.key"), &data["tls.key"].0)
        ),
        "--node-cleanup=false".into(),
        "--explain-pending=false".into(),
    ];
    let ca = dir.join("ca.crt");
    write(&ca, &data["ca.crt"].0);
    let mut extender = Component::spawn_with_env(
        "localpv-extender",
        &localpv_bin(),
        &args,
        &[("KUBECONFIG", cp.admin_kubeconfig.to_str().expect("utf-8"))],
        &cp.log_dir(),
        cp.reaper(),
    );
    wait_https_ok(&mut extender, port, "/readyz").await;
    (extender, port, ca)
}

#[tokio::test(flavor = "multi_thread")]
async fn second_scheduler_runs_with_the_charts_configuration_and_service_account() {
    let cp = ControlPlane::start(Options {
        controller_manager: true,
        ..Options::default()
    })
    .await;
    let client = cp.client();
    run_documented_install_with(&cp, &["--set", "scheduler.enabled=true"]);
    let (extender, extender_port, ca) = extender_with_generated_certificate(&cp).await;

    // The chart's ConfigMap, changed only where a pod and this machine differ: the ServiceAccount's token as a
    // kubeconfig instead of the mounted one, the CA file where the test wrote it, the extender's address.
    let cm: ConfigMap = Api::namespaced(client.clone(), NAMESPACE)
        .get("localpv-scheduler")
        .await
        .expect("the scheduler's ConfigMap");
    let text = cm.data.expect("data")["config.yaml"].clone();
    let mut config: Value = serde_yaml_ng::from_str(&text).expect("the config parses");
    let kubeconfig = sa::token_kubeconfig(&cp, NAMESPACE, "localpv-scheduler").await;
    config["clientConnection"] = json!({"kubeconfig": kubeconfig.display().to_string()});
    let entry = &mut config["extenders"][0];
    assert_eq!(
        entry["tlsConfig"]["caFile"], "/etc/localpv/extender-ca/ca.crt",
        "the CA path the Deployment mounts"
    );
    entry["tlsConfig"]["caFile"] = json!(ca.display().to_string());
    entry["urlPrefix"] = json!(format!("https://127.0.0.1:{extender_port}"));
    let _scheduler = scheduler_binds_a_pod(
        &cp,
        "kube-scheduler-second",
        &config,
        &kubeconfig,
        Some("localpv-scheduler"),
        Duration::from_secs(90),
    )
    .await;
    let forbidden = sa::answered_with(
        &cp.log_dir().join("audit.log"),
        &sa::username(NAMESPACE, "localpv-scheduler"),
        403,
    );
    assert!(forbidden.is_empty(), "forbidden requests: {forbidden:#?}");
    drop(extender);
}
