//! A real, throw-away Kubernetes control plane on loopback: etcd, kube-apiserver and, on request,
//! kube-controller-manager (PV binder and protection controllers) and kube-scheduler (optionally with an extender).
//!
//! Binaries come from `scripts/k8s-bins.sh` (see `bin_dir`). Each plane has its own temp dir with certificates,
//! kubeconfigs, etcd data and one log per component; on a failing test the log tails are printed before teardown.

use std::fmt::Write as _;
use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use super::certs::Certs;
use super::proc::{Component, Reaper};

/// Where the Go-built binaries are: `$LOCALPV_K8S_BIN_DIR`, else `~/.cache/localpv/k8s-<version>/bin` with the
/// version pinned in `scripts/versions.env`. Panics with instructions when a binary is missing.
pub fn bin_dir() -> PathBuf {
    let dir = match std::env::var_os("LOCALPV_K8S_BIN_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            let home = std::env::var_os("HOME").expect("HOME is set");
            PathBuf::from(home).join(format!(".cache/localpv/k8s-{}/bin", pinned("K8S_VERSION")))
        }
    };
    for b in [
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kubectl",
    ] {
        assert!(
            dir.join(b).is_file(),
            "missing prerequisite: {} not found; run scripts/k8s-bins.sh (or the README's test command) first",
            dir.join(b).display()
        );
    }
    dir
}

/// The Kubernetes version of the control plane in `bin_dir` (e.g. `1.34.12`), as its kube-apiserver reports it:
/// the tests run on whichever plane `LOCALPV_K8S_BIN_DIR` names (`scripts/test.sh` runs a subset on the oldest
/// supported one), and a chart rendered for the plane must say the same version the API server does.
pub fn kube_version() -> String {
    static VERSION: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    VERSION
        .get_or_init(|| {
            let program = bin_dir().join("kube-apiserver");
            let out = std::process::Command::new(&program)
                .arg("--version")
                .output()
                .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
            // "Kubernetes v1.34.12"
            let text = String::from_utf8_lossy(&out.stdout);
            text.trim()
                .strip_prefix("Kubernetes v")
                .unwrap_or_else(|| panic!("{} --version printed {text:?}", program.display()))
                .to_string()
        })
        .clone()
}

/// The minor of `kube_version()` (34 for 1.34.12), for what a release added or dropped.
pub fn kube_minor() -> u32 {
    kube_version()
        .split('.')
        .nth(1)
        .and_then(|m| m.parse().ok())
        .expect("kube-apiserver reports major.minor.patch")
}

/// A version pinned in `scripts/versions.env`.
pub fn pinned(key: &str) -> String {
    let path = crate::repo_root().join("scripts/versions.env");
    let text = fs::read_to_string(&path).expect("scripts/versions.env is readable");
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("{key} is not pinned in scripts/versions.env"))
        .trim()
        .to_string()
}

/// The `kubernetes` Service's ClusterIP: the first address of `--service-cluster-ip-range`.
pub const KUBERNETES_SERVICE_IP: &str = "10.96.0.1";

/// A free TCP port on 127.0.0.1 (the probe listener is dropped, so a race with another process is possible but rare).
///
/// NB: never from the kernel's ephemeral range (`ip_local_port_range`, 32768-60999 here) nor the NodePort range.
/// An ephemeral port is free only until a client's outgoing connection takes it as its local port, and a client
/// retrying against a stopped server on such a port can connect to itself (TCP simultaneous open) and hold it: a
/// restarted kube-apiserver then failed with "bind: address already in use". Ports below the range are taken
/// only by an explicit bind, and this process never hands one out twice.
pub fn free_port() -> u16 {
    use std::collections::HashSet;
    use std::hash::{BuildHasher, RandomState};
    use std::sync::Mutex;
    static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
    const LOW: u16 = 10_000;
    // Below the NodePort range (30000-32767) too.
    const HIGH: u16 = 30_000;
    let hasher = RandomState::new();
    let mut handed = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    let handed = handed.get_or_insert_with(HashSet::new);
    for attempt in 0u32..10_000 {
        let port = LOW + (hasher.hash_one(attempt) % u64::from(HIGH - LOW)) as u16;
        if handed.contains(&port) || TcpListener::bind(("127.0.0.1", port)).is_err() {
            continue;
        }
        handed.insert(port);
        return port;
    }
    panic!("no free loopback port between {LOW} and {HIGH}");
}

/// An extender entry for the scheduler configuration.
#[derive(Clone, Debug)]
pub struct Extender {
    pub url_prefix: String,
    pub filter_verb: String,
    pub prioritize_verb: Option<String>,
    pub weight: i64,
    pub node_cache_capable: bool,
    pub ignorable: bool,
    pub http_timeout: String,
    /// PEM CA bundle to verify an HTTPS extender with (`tlsConfig.caFile`).
    pub ca_file: Option<PathBuf>,
    /// The name to verify the extender's certificate against when the URL holds an address (`tlsConfig.serverName`).
    pub server_name: Option<String>,
    /// The scheduler's client certificate and key for an extender that requires mTLS (`certFile`, `keyFile`).
    pub client_cert: Option<(PathBuf, PathBuf)>,
}

impl Extender {
    pub fn new(url_prefix: &str) -> Extender {
        Extender {
            url_prefix: url_prefix.to_string(),
            filter_verb: "filter".into(),
            prioritize_verb: Some("prioritize".into()),
            weight: 1,
            node_cache_capable: false,
            ignorable: false,
            http_timeout: "5s".into(),
            ca_file: None,
            server_name: None,
            client_cert: None,
        }
    }

    fn yaml(&self) -> String {
        let mut y = format!(
            "- urlPrefix: {:?}\n  filterVerb: {}\n  weight: {}\n  nodeCacheCapable: {}\n  ignorable: {}\n  httpTimeout: {}\n",
            self.url_prefix,
            self.filter_verb,
            self.weight,
            self.node_cache_capable,
            self.ignorable,
            self.http_timeout
        );
        if let Some(p) = &self.prioritize_verb {
            let _ = writeln!(y, "  prioritizeVerb: {p}");
        }
        if let Some(ca) = &self.ca_file {
            let _ = writeln!(
                y,
                "  enableHTTPS: true\n  tlsConfig:\n    caFile: {:?}",
                ca.display().to_string()
            );
            if let Some(name) = &self.server_name {
                let _ = writeln!(y, "    serverName: {name:?}");
            }
            if let Some((crt, key)) = &self.client_cert {
                let _ = writeln!(
                    y,
                    "    certFile: {:?}\n    keyFile: {:?}",
                    crt.display().to_string(),
                    key.display().to_string()
                );
            }
        }
        y
    }
}

/// What to start besides etcd and kube-apiserver.
#[derive(Clone, Debug, Default)]
pub struct Options {
    pub controller_manager: bool,
    pub scheduler: bool,
    /// Extenders for the scheduler started with the plane (more schedulers: `start_scheduler`).
    pub extenders: Vec<Extender>,
    /// kube-controller-manager's client rate limit (requests per second; burst twice that); None keeps the
    /// Kubernetes default of 20, which makes the PV binder the bottleneck when thousands of claims bind at once.
    pub controller_manager_qps: Option<u32>,
    /// For kubelets (`support::realnode`): the API server listens on this address instead of loopback, serves
    /// it and the `kubernetes` Service IP, authorizes nodes (Node authorizer, NodeRestriction), and the
    /// controller-manager also runs the workload, node-lifecycle, pod garbage collector and root-CA publisher
    /// controllers.
    pub real_nodes_address: Option<String>,
    /// kube-apiserver `--feature-gates`, e.g. `CSIVolumeHealth=true`.
    pub api_feature_gates: Vec<String>,
}

impl Options {
    /// etcd + kube-apiserver + kube-controller-manager + kube-scheduler.
    pub fn full() -> Options {
        Options {
            controller_manager: true,
            scheduler: true,
            ..Options::default()
        }
    }
}

pub struct ControlPlane {
    pub dir: PathBuf,
    pub bin: PathBuf,
    pub certs: Certs,
    pub api_url: String,
    pub admin_kubeconfig: PathBuf,
    client: Client,
    components: Vec<Component>,
    api_args: Vec<String>,
    /// kube-apiserver feature gates (Options::api_feature_gates).
    feature_gates: Vec<String>,
    real_nodes: bool,
    // Declared last: dropped after the components, so the watchdog is still there while they stop.
    reaper: Reaper,
}

impl ControlPlane {
    pub async fn start(opts: Options) -> ControlPlane {
        let bin = bin_dir();
        // Shown with a failing test's output: which Kubernetes it ran on.
        println!(
            "control plane: Kubernetes v{} ({})",
            kube_version(),
            bin.display()
        );
        let dir =
            std::env::temp_dir().join(format!("localpv-cp-{}-{}", std::process::id(), unique()));
        fs::create_dir_all(&dir).expect("plane dir can be created");
        let reaper = Reaper::start(&dir);
        let api_host = opts.real_nodes_address.as_deref().unwrap_or("127.0.0.1");
        let certs = match &opts.real_nodes_address {
            Some(addr) => {
                Certs::generate_with_sans(&dir.join("pki"), &[addr, KUBERNETES_SERVICE_IP])
            }
            None => Certs::generate(&dir.join("pki")),
        };
        let api_port = free_port();
        let api_url = format!("https://{api_host}:{api_port}");
        let admin = certs.client("localpv-test-admin", &["system:masters"]);
        let admin_kubeconfig = write_kubeconfig(&dir, "admin", &api_url, &certs, &admin);
        let mut plane = ControlPlane {
            client: client_for(&admin_kubeconfig).await,
            dir,
            bin,
            certs,
            api_url,
            admin_kubeconfig,
            components: Vec::new(),
            api_args: Vec::new(),
            feature_gates: Vec::new(),
            real_nodes: opts.real_nodes_address.is_some(),
            reaper,
        };
        plane.feature_gates = opts.api_feature_gates.clone();
        plane.start_etcd_and_apiserver(api_host, api_port).await;
        if opts.controller_manager {
            plane
                .start_controller_manager(opts.controller_manager_qps)
                .await;
        }
        if opts.scheduler {
            plane
                .start_scheduler("default-scheduler", &opts.extenders)
                .await;
        }
        plane
    }

    /// The admin client (system:masters).
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    pub fn reaper(&self) -> &Reaper {
        &self.reaper
    }

    /// Runs the pinned kubectl as the admin; its stdout, or a panic with its output when it fails.
    pub fn kubectl(&self, args: &[&str]) -> String {
        let kubeconfig = format!("--kubeconfig={}", self.admin_kubeconfig.display());
        let mut all = vec![kubeconfig.as_str()];
        all.extend(args);
        super::disks::run(&self.bin.join("kubectl").display().to_string(), &all)
    }

    pub fn log_dir(&self) -> PathBuf {
        self.dir.join("logs")
    }

    /// A kubeconfig for a client-certificate user, e.g. to run a component under its own identity.
    pub fn kubeconfig_for(&self, name: &str, user: &str, groups: &[&str]) -> PathBuf {
        let cert = self.certs.client(user, groups);
        write_kubeconfig(&self.dir, name, &self.api_url, &self.certs, &cert)
    }

    /// A new namespace (with its `default` ServiceAccount, which pod admission requires) for one test.
    pub async fn namespace(&self, prefix: &str) -> String {
        let name = format!("{prefix}-{}", unique());
        let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))
            .expect("namespace literal is valid");
        Api::<Namespace>::all(self.client())
            .create(&PostParams::default(), &ns)
            .await
            .expect("namespace created");
        let sa: ServiceAccount =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "default"}}))
                .expect("service account literal is valid");
        let _ = Api::<ServiceAccount>::namespaced(self.client(), &name)
            .create(&PostParams::default(), &sa)
            .await;
        name
    }

    /// Starts another kube-scheduler with its own profile name (pods select it with `schedulerName`).
    pub async fn start_scheduler(&mut self, scheduler_name: &str, extenders: &[Extender]) {
        let kubeconfig = self.kubeconfig_for(
            &format!("scheduler-{scheduler_name}"),
            "system:kube-scheduler",
            &[],
        );
        let mut cfg = format!(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
             clientConnection:\n  kubeconfig: {:?}\nleaderElection:\n  leaderElect: false\n\
             profiles:\n- schedulerName: {scheduler_name}\n",
            kubeconfig.display().to_string()
        );
        if !extenders.is_empty() {
            cfg.push_str("extenders:\n");
            for e in extenders {
                cfg.push_str(&e.yaml());
            }
        }
        let cfg_path = self.dir.join(format!("scheduler-{scheduler_name}.yaml"));
        fs::write(&cfg_path, cfg).expect("scheduler config written");
        let port = free_port();
        let args = vec![
            format!("--config={}", cfg_path.display()),
            format!("--authentication-kubeconfig={}", kubeconfig.display()),
            format!("--authorization-kubeconfig={}", kubeconfig.display()),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={port}"),
            "--v=2".into(),
        ];
        self.spawn(
            &format!("kube-scheduler-{scheduler_name}"),
            "kube-scheduler",
            &args,
        );
        self.wait_healthz(&format!("kube-scheduler-{scheduler_name}"), port)
            .await;
    }

    /// Stops a scheduler started earlier (e.g. to restart it with another extender configuration).
    pub fn stop_component(&mut self, name: &str) {
        if let Some(i) = self.components.iter().position(|c| c.name == name) {
            let mut c = self.components.remove(i);
            c.stop(Duration::from_secs(5));
        }
    }

    async fn start_etcd_and_apiserver(&mut self, api_host: &str, api_port: u16) {
        let (client_port, peer_port) = (free_port(), free_port());
        let etcd_url = format!("http://127.0.0.1:{client_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let etcd_args = vec![
            format!("--data-dir={}", self.dir.join("etcd").display()),
            format!("--listen-client-urls={etcd_url}"),
            format!("--advertise-client-urls={etcd_url}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster=default={peer_url}"),
            // The data is thrown away after the test: durability only costs time here.
            "--unsafe-no-fsync".into(),
            "--log-level=warn".into(),
        ];
        self.spawn("etcd", "etcd", &etcd_args);
        let c = &self.certs;
        let authz = if self.real_nodes { "Node,RBAC" } else { "RBAC" };
        let mut api_args = vec![
            format!("--etcd-servers={etcd_url}"),
            format!("--bind-address={api_host}"),
            format!("--advertise-address={api_host}"),
            format!("--secure-port={api_port}"),
            format!("--tls-cert-file={}", c.serving_cert.display()),
            format!("--tls-private-key-file={}", c.serving_key.display()),
            format!("--client-ca-file={}", c.ca_cert.display()),
            format!("--service-account-key-file={}", c.sa_pub.display()),
            format!("--service-account-signing-key-file={}", c.sa_key.display()),
            "--service-account-issuer=https://kubernetes.default.svc".into(),
            "--service-cluster-ip-range=10.96.0.0/16".into(),
            format!("--authorization-mode={authz}"),
            "--allow-privileged=true".into(),
            // Loopback cannot be advertised as the kubernetes Service endpoint; nothing here needs that Service.
            "--endpoint-reconciler-type=none".into(),
            format!("--cert-dir={}", self.dir.join("apiserver-certs").display()),
            format!(
                "--audit-log-path={}",
                self.dir.join("logs/audit.log").display()
            ),
            format!("--audit-policy-file={}", self.audit_policy().display()),
            "--v=1".into(),
        ];
        if self.real_nodes {
            api_args.push("--enable-admission-plugins=NodeRestriction".into());
        }
        if !self.feature_gates.is_empty() {
            api_args.push(format!("--feature-gates={}", self.feature_gates.join(",")));
        }
        self.spawn("kube-apiserver", "kube-apiserver", &api_args);
        self.api_args = api_args;
        self.wait_ready("kube-apiserver", "/readyz").await;
    }

    /// Stops kube-apiserver (clients see connection errors until `start_apiserver`).
    pub fn stop_apiserver(&mut self) {
        self.stop_component("kube-apiserver");
    }

    /// Starts kube-apiserver again with the same flags, port and etcd, and waits until it is ready.
    pub async fn start_apiserver(&mut self) {
        let args = self.api_args.clone();
        self.spawn("kube-apiserver", "kube-apiserver", &args);
        self.wait_ready("kube-apiserver", "/readyz").await;
    }

    fn audit_policy(&self) -> PathBuf {
        // Metadata for every request: enough to count requests by user and verb in tests and benchmarks.
        let path = self.dir.join("audit-policy.yaml");
        fs::write(&path, "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n")
            .expect("audit policy written");
        path
    }

    async fn start_controller_manager(&mut self, qps: Option<u32>) {
        let kubeconfig =
            self.kubeconfig_for("controller-manager", "system:kube-controller-manager", &[]);
        let port = free_port();
        let mut controllers = vec![
            "persistentvolume-binder-controller",
            "persistentvolume-protection-controller",
            "persistentvolumeclaim-protection-controller",
            "garbage-collector-controller",
            "namespace-controller",
            "serviceaccount-controller",
        ];
        if self.real_nodes {
            controllers.extend([
                "daemonset-controller",
                "deployment-controller",
                "replicaset-controller",
                "statefulset-controller",
                "disruption-controller",
                "node-lifecycle-controller",
                // NB: as in every real cluster: it force-deletes the pods of a deleted Node, which no kubelet will
                // ever confirm gone.
                "pod-garbage-collector-controller",
                "root-ca-certificate-publisher-controller",
            ]);
        }
        let mut args = vec![
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--authentication-kubeconfig={}", kubeconfig.display()),
            format!("--authorization-kubeconfig={}", kubeconfig.display()),
            format!("--controllers={}", controllers.join(",")),
            "--leader-elect=false".into(),
            // Each controller acts as its own ServiceAccount with its bootstrap role (persistent-volume-binder...),
            // as in a real cluster; the controller-manager's own identity may not update PV status.
            "--use-service-account-credentials=true".into(),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={port}"),
            format!("--root-ca-file={}", self.certs.ca_cert.display()),
            // The binder resyncs this often; events drive it too, this only bounds how stale it can get.
            "--pvclaimbinder-sync-period=2s".into(),
            "--v=2".into(),
        ];
        if let Some(qps) = qps {
            args.push(format!("--kube-api-qps={qps}"));
            args.push(format!("--kube-api-burst={}", qps * 2));
        }
        self.spawn("kube-controller-manager", "kube-controller-manager", &args);
        self.wait_healthz("kube-controller-manager", port).await;
    }

    fn spawn(&mut self, name: &str, binary: &str, args: &[String]) {
        let program = self.bin.join(binary);
        let c = Component::spawn(name, &program, args, &self.log_dir(), &self.reaper);
        self.components.push(c);
    }

    fn assert_running(&mut self, name: &str) {
        let c = self
            .components
            .iter_mut()
            .find(|c| c.name == name)
            .expect("component was started");
        if !c.running() {
            panic!(
                "{name} exited during start-up; last log lines:\n{}",
                c.tail(40)
            );
        }
    }

    async fn wait_ready(&mut self, name: &str, path: &str) {
        let client = self.client.clone();
        self.wait_ok(name, &client, path).await;
    }

    /// Polls `https://127.0.0.1:<port>/healthz` of a component serving a self-signed certificate.
    async fn wait_healthz(&mut self, name: &str, port: u16) {
        let mut cfg = Config::new(
            format!("https://127.0.0.1:{port}")
                .parse()
                .expect("valid url"),
        );
        cfg.accept_invalid_certs = true;
        let client = Client::try_from(cfg).expect("health client builds");
        self.wait_ok(name, &client, "/healthz").await;
    }

    /// Polls `path` until it answers `ok`, failing fast (with the log tail) if the component exits.
    async fn wait_ok(&mut self, name: &str, client: &Client, path: &str) {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            self.assert_running(name);
            let req = http::Request::get(path)
                .body(Vec::new())
                .expect("request builds");
            if matches!(client.request_text(req).await, Ok(body) if body.trim() == "ok") {
                return;
            }
            assert!(Instant::now() < deadline, "{name} not healthy after 90s");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The last lines of every component's log, for failure reports.
    pub fn log_tails(&self, lines: usize) -> String {
        let mut out = String::new();
        for c in &self.components {
            let _ = writeln!(
                out,
                "----- {} ({}) -----\n{}",
                c.name,
                c.log.display(),
                c.tail(lines)
            );
        }
        out
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "test failed; control plane logs (last lines):\n{}",
                self.log_tails(30)
            );
        }
        // Scheduler and controller-manager first, the API server next, etcd last.
        while let Some(mut c) = self.components.pop() {
            c.stop(Duration::from_secs(5));
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A short unique suffix: the time in micro-seconds, base 36, plus a counter.
pub fn unique() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_micros();
    let mut v = micros as u64 ^ ((N.fetch_add(1, Ordering::Relaxed) as u64) << 40);
    let mut s = String::new();
    while v > 0 {
        let d = (v % 36) as u8;
        s.push(if d < 10 {
            (b'0' + d) as char
        } else {
            (b'a' + d - 10) as char
        });
        v /= 36;
    }
    s.chars().take(8).collect()
}

pub async fn client_for(kubeconfig: &Path) -> Client {
    let kc = Kubeconfig::read_from(kubeconfig).expect("kubeconfig parses");
    let cfg = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig loads");
    Client::try_from(cfg).expect("client builds")
}

fn write_kubeconfig(
    dir: &Path,
    name: &str,
    server: &str,
    certs: &Certs,
    cert: &super::certs::ClientCert,
) -> PathBuf {
    let (crt, key) = certs.write_pair(&format!("client-{name}"), cert);
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {server}\n    certificate-authority: {ca:?}\n\
         users:\n- name: {name}\n  user:\n    client-certificate: {crt:?}\n    client-key: {key:?}\n\
         contexts:\n- name: test\n  context:\n    cluster: test\n    user: {name}\ncurrent-context: test\n",
        ca = certs.ca_cert.display().to_string(),
        crt = crt.display().to_string(),
        key = key.display().to_string(),
    );
    let path = dir.join(format!("{name}.kubeconfig"));
    fs::write(&path, text).expect("kubeconfig written");
    path
}
