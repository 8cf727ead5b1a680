//! Runs real `localpv node` processes against the harness's control plane, each as its own stand-in node with its
//! own discovery directory, state directory, HTTP port and client identity (so its requests can be told apart in
//! the API server's audit log). Also what every localpv process shares: the binary, a loopback GET and the wait
//! until a process answers it.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::cluster::{ControlPlane, free_port};
use super::proc::Component;

pub struct Agent {
    pub node: String,
    pub user: String,
    pub disks_dir: PathBuf,
    pub config: PathBuf,
    pub port: u16,
    /// Names the process and its log (`localpv-node-<node>` unless [`Agent::twin`] made it).
    name: String,
    state_dir: PathBuf,
    kubeconfig: PathBuf,
    log_dir: PathBuf,
    pub process: Option<Component>,
    /// Flags added to every start (e.g. `--admission-policy=...`).
    pub extra_args: Vec<String>,
}

/// The localpv binary cargo built for this test run.
/// The `localpv` binary cargo built beside the running test, benchmark or example (`target/<profile>/localpv`;
/// cargo builds it for every integration test and benchmark), or `LOCALPV_BIN`.
pub fn localpv_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("LOCALPV_BIN") {
        return PathBuf::from(bin);
    }
    let exe = std::env::current_exe().expect("the running executable's path");
    // target/<profile>/deps/<test> or target/<profile>/examples/<example>
    let profile = exe
        .parent()
        .and_then(Path::parent)
        .expect("a test under target/<profile>");
    profile.join("localpv")
}

impl Agent {
    /// Prepares (does not start) an agent for `node` whose only class is `class` over `<plane>/hosts/<node>/disks`.
    pub fn new(cp: &ControlPlane, node: &str, class: &str) -> Agent {
        Self::with_classes(cp, node, &[(class, "disks", "")])
    }

    /// An agent with several classes: (class, sub-directory of `<plane>/hosts/<node>`, extra YAML lines for the
    /// class, each indented by four spaces). The first class's directory is `disks_dir`.
    pub fn with_classes(cp: &ControlPlane, node: &str, classes: &[(&str, &str, &str)]) -> Agent {
        let root = cp.dir.join("hosts").join(node);
        let mut text = String::from("storageClassMap:\n");
        for (class, sub, extra) in classes {
            let dir = root.join(sub);
            fs::create_dir_all(&dir).expect("disks dir can be created");
            text.push_str(&format!(
                "  {class}:\n    hostDir: {d}\n    mountDir: {d}\n{extra}",
                d = dir.display()
            ));
        }
        let disks_dir = root.join(classes[0].1);
        let config = root.join("config.yaml");
        fs::write(&config, text).expect("agent config written");
        let user = format!("localpv-test-agent-{node}");
        let kubeconfig = cp.kubeconfig_for(&format!("agent-{node}"), &user, &["system:masters"]);
        Agent {
            name: format!("localpv-node-{node}"),
            node: node.to_string(),
            user,
            disks_dir,
            config,
            port: free_port(),
            state_dir: root.join("state"),
            kubeconfig,
            log_dir: cp.log_dir(),
            process: None,
            extra_args: Vec::new(),
        }
    }

    /// Runs the agent with this kubeconfig instead of its own admin identity (e.g. a ServiceAccount's token).
    pub fn set_kubeconfig(&mut self, kubeconfig: &Path) {
        self.kubeconfig = kubeconfig.to_path_buf();
    }

    pub fn start(&mut self, cp: &ControlPlane) {
        let mut args = vec![
            "node".to_string(),
            format!("--config={}", self.config.display()),
            format!("--node-name={}", self.node),
            format!("--listen=127.0.0.1:{}", self.port),
            format!("--state-dir={}", self.state_dir.display()),
            "--config-poll=500ms".to_string(),
        ];
        args.extend(self.extra_args.iter().cloned());
        let env = [
            ("KUBECONFIG", self.kubeconfig.to_str().expect("utf-8 path")),
            ("RUST_LOG", "info,localpv=debug"),
        ];
        let c = Component::spawn_with_env(
            &self.name,
            &localpv_bin(),
            &args,
            &env,
            &self.log_dir,
            cp.reaper(),
        );
        self.process = Some(c);
    }

    /// A second agent for the same node, configuration and state directory (what a DaemonSet update with
    /// `maxSurge` runs), on its own port and log, named `<name>`.
    pub fn twin(&self, name: &str) -> Agent {
        Agent {
            name: format!("localpv-node-{}-{name}", self.node),
            node: self.node.clone(),
            user: self.user.clone(),
            disks_dir: self.disks_dir.clone(),
            config: self.config.clone(),
            port: free_port(),
            state_dir: self.state_dir.clone(),
            kubeconfig: self.kubeconfig.clone(),
            log_dir: self.log_dir.clone(),
            process: None,
            extra_args: self.extra_args.clone(),
        }
    }

    /// Uses `dir` as the state directory from the next start on.
    pub fn set_state_dir(&mut self, dir: &Path) {
        self.state_dir = dir.to_path_buf();
    }

    /// The agent's state directory (its disk ledger).
    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// GET a path of the agent's HTTP server; `None` when it does not answer.
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        http_get(self.port, path)
    }

    pub async fn wait_ready(&mut self) {
        let process = self.process.as_mut().expect("the agent was started");
        wait_answering(
            process,
            self.port,
            "/readyz",
            Duration::from_secs(60),
            || true,
        )
        .await;
    }

    pub fn log(&self) -> String {
        self.process
            .as_ref()
            .map(|p| p.tail(200))
            .unwrap_or_default()
    }

    pub fn disk(&self, name: &str) -> PathBuf {
        self.disks_dir.join(name)
    }
}

/// A minimal HTTP/1.0 GET on loopback (no client library needed for health checks).
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let status = buf.split_whitespace().nth(1)?.parse().ok()?;
    let body = buf
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((status, body))
}

/// Waits until `process` answers GET `path` on loopback `port` with 200 and `synced()` holds, polling every 100 ms;
/// fails with its log when it exits or `within` passes.
pub async fn wait_answering(
    process: &mut Component,
    port: u16,
    path: &str,
    within: Duration,
    synced: impl Fn() -> bool,
) {
    let deadline = Instant::now() + within;
    while !matches!(http_get(port, path), Some((200, _))) || !synced() {
        assert!(
            process.running(),
            "{} exited:\n{}",
            process.name,
            process.tail(40)
        );
        assert!(
            Instant::now() < deadline,
            "{} does not answer {path} after {within:?}:\n{}",
            process.name,
            process.tail(60)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Requests by `user` in the audit log whose verb is one of `verbs`, as (verb, resource, name).
pub fn audited(audit_log: &Path, user: &str, verbs: &[&str]) -> Vec<(String, String, String)> {
    use super::audit::{completed, text};
    completed(audit_log)
        .into_iter()
        .filter(|e| super::audit::user(e) == user && verbs.iter().any(|v| e["verb"] == *v))
        .map(|e| {
            let verb = format!("{} {}", text(&e["verb"]), e["responseStatus"]["code"]);
            (
                verb,
                text(&e["objectRef"]["resource"]),
                text(&e["objectRef"]["name"]),
            )
        })
        .collect()
}

/// Creates the LocalDisk CRD from `config/crd/localdisk.yaml` (the checked-in copy of `localpv crd`) and waits
/// until it is established: agents wait for their LocalDisk watch before they turn ready.
pub async fn install_crd(cp: &ControlPlane) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{Api, PostParams};
    let path = crate::repo_root().join("config/crd/localdisk.yaml");
    let text = fs::read_to_string(&path).expect("config/crd/localdisk.yaml is readable");
    let crd: CustomResourceDefinition =
        serde_yaml_ng::from_str(&text).expect("the CRD copy parses");
    let api: Api<CustomResourceDefinition> = Api::all(cp.client());
    let name = crd.metadata.name.clone().expect("CRD has a name");
    if let Err(e) = api.create(&PostParams::default(), &crd).await {
        assert!(
            matches!(&e, kube::Error::Api(s) if s.code == 409),
            "failed to create the LocalDisk CRD: {e}"
        );
    }
    wait_established(cp, &name, Duration::from_secs(30)).await;
}

/// Waits until the CustomResourceDefinition `name` is established (its resource served), for at most `within`.
pub async fn wait_established(cp: &ControlPlane, name: &str, within: Duration) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let api: kube::Api<CustomResourceDefinition> = kube::Api::all(cp.client());
    super::eventually(
        &format!("the CRD {name} to be established"),
        within,
        || async {
            let c = api.get(name).await.map_err(|e| e.to_string())?;
            let established = c
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            if established {
                Ok(())
            } else {
                Err("not established".into())
            }
        },
    )
    .await;
}
