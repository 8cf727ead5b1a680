//! The provisioners under test, behind one face: localpv's node agent, and the reference provisioner
//! (sig-storage-local-static-provisioner, "LSP") with its default discovery period and with
//! `--discovery-period=1s`. Each runs as its own stand-in node with its own discovery directory and client
//! identity, on the same control plane and over the same kind of disks (tmpfs mounts), so one plane serves all
//! three in turn and the audit log tells their requests apart.
//!
//! LSP reads its configuration from the constant directory `/etc/provisioner/config`. It runs in its own mount
//! namespace (`unshare -m --propagation slave`) where a tmpfs over `/etc` holds links to the host's `/etc` entries
//! and a bind mount of the benchmark's configuration at `provisioner/config`: nothing of the host changes, and the
//! namespace goes with the process. So that mounts made later in its discovery directory reach that namespace,
//! the directory is bind-mounted onto itself and made shared first (the host's mounts are private here).
//!
//! Without a kubelet LSP cleans by process, not by Job (`useJobForCleaning` off, the chart's default): for a
//! Filesystem volume that is an in-process delete of every entry of the volume (Go's `os.RemoveAll`); its block
//! cleaner scripts (`/scripts/shred.sh` and friends in its image) run only for Block volumes, which these tmpfs
//! disks are not, so none is installed.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::agent::{Agent, http_get};
use crate::support::cluster::{ControlPlane, free_port};
use crate::support::disks::{Mount, run};
use crate::support::proc::Component;

use crate::CLASS;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Localpv,
    /// LSP with its default discovery period (10 s), as operators run it.
    LspDefault,
    /// LSP with `--discovery-period=1s`.
    LspFast,
}

pub const KINDS: [Kind; 3] = [Kind::Localpv, Kind::LspDefault, Kind::LspFast];

impl Kind {
    /// The figure keys' part (`agent.<key>.<measure>`).
    pub fn key(self) -> &'static str {
        match self {
            Kind::Localpv => "localpv",
            Kind::LspDefault => "lsp_default",
            Kind::LspFast => "lsp_1s",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Kind::Localpv => "localpv",
            Kind::LspDefault => "reference, default period (10 s)",
            Kind::LspFast => "reference, `--discovery-period=1s`",
        }
    }
}

/// The reference provisioner's binary, built by `bench/peers.sh build-lsp` (bench/agent.sh exports it).
fn lsp_bin() -> PathBuf {
    let bin = std::env::var_os("LOCALPV_BENCH_LSP").map(PathBuf::from).unwrap_or_else(|| {
        panic!("missing prerequisite: LOCALPV_BENCH_LSP must name the reference provisioner's binary (bench/agent.sh builds it with bench/peers.sh build-lsp)")
    });
    assert!(
        bin.is_file(),
        "missing prerequisite: {} (LOCALPV_BENCH_LSP) does not exist",
        bin.display()
    );
    bin
}

enum Inner {
    Localpv(Agent),
    Lsp(Lsp),
}

pub struct Subject {
    pub kind: Kind,
    pub node: String,
    inner: Inner,
}

struct Lsp {
    user: String,
    disks_dir: PathBuf,
    root: PathBuf,
    kubeconfig: PathBuf,
    port: u16,
    process: Option<Component>,
    // NB: last, so the process (and its namespace) is gone before the shared mount is undone.
    _shared: Mount,
}

impl Subject {
    /// Prepares (does not start) `kind` as node `node` (whose Node object must exist).
    pub fn new(cp: &ControlPlane, kind: Kind, node: &str) -> Subject {
        let inner = match kind {
            Kind::Localpv => Inner::Localpv(Agent::new(cp, node, CLASS)),
            Kind::LspDefault | Kind::LspFast => Inner::Lsp(Lsp::new(cp, node)),
        };
        Subject {
            kind,
            node: node.to_string(),
            inner,
        }
    }

    pub fn disk(&self, name: &str) -> PathBuf {
        match &self.inner {
            Inner::Localpv(a) => a.disk(name),
            Inner::Lsp(l) => l.disks_dir.join(name),
        }
    }

    pub fn user(&self) -> &str {
        match &self.inner {
            Inner::Localpv(a) => &a.user,
            Inner::Lsp(l) => &l.user,
        }
    }

    pub fn start(&mut self, cp: &ControlPlane) {
        match &mut self.inner {
            Inner::Localpv(a) => a.start(cp),
            Inner::Lsp(l) => l.start(cp, &self.node, self.kind),
        }
    }

    pub fn stop(&mut self) {
        let p = match &mut self.inner {
            Inner::Localpv(a) => a.process.take(),
            Inner::Lsp(l) => l.process.take(),
        };
        if let Some(mut p) = p {
            p.stop(Duration::from_secs(10));
        }
    }

    pub fn pid(&self) -> u32 {
        let p = match &self.inner {
            Inner::Localpv(a) => a.process.as_ref(),
            Inner::Lsp(l) => l.process.as_ref(),
        };
        p.and_then(|p| p.pid())
            .expect("the provisioner was started")
    }

    /// Polls readiness every 5 ms (localpv `/readyz`; LSP `/ready`, true once its first discovery pass is done).
    pub async fn wait_ready(&mut self) {
        let (port, path) = match &self.inner {
            Inner::Localpv(a) => (a.port, "/readyz"),
            Inner::Lsp(l) => (l.port, "/ready"),
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(300);
        loop {
            if matches!(http_get(port, path), Some((200, _))) {
                return;
            }
            let p = match &mut self.inner {
                Inner::Localpv(a) => a.process.as_mut(),
                Inner::Lsp(l) => l.process.as_mut(),
            };
            if let Some(p) = p {
                assert!(p.running(), "{} exited:\n{}", self.node, p.tail(40));
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{} not ready after 300 s",
                self.node
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The value of one metric line (`name` with its labels, as exposed), `None` when absent.
    pub fn metric(&self, name: &str) -> Option<f64> {
        let (port, path) = match &self.inner {
            Inner::Localpv(a) => (a.port, "/metrics"),
            Inner::Lsp(l) => (l.port, "/metrics"),
        };
        let (_, body) = http_get(port, path)?;
        body.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
    }

    pub fn log(&self) -> String {
        match &self.inner {
            Inner::Localpv(a) => a.log(),
            Inner::Lsp(l) => l.process.as_ref().map(|p| p.tail(200)).unwrap_or_default(),
        }
    }
}

impl Lsp {
    fn new(cp: &ControlPlane, node: &str) -> Lsp {
        let root = cp.dir.join("hosts").join(node);
        let disks_dir = root.join("disks");
        std::fs::create_dir_all(&disks_dir).expect("disks dir can be created");
        let shared = Mount::bind(&disks_dir, &disks_dir, cp.reaper());
        run(
            "mount",
            &["--make-shared", &disks_dir.display().to_string()],
        );
        let config = root.join("lsp-config");
        std::fs::create_dir_all(&config).expect("LSP config dir can be created");
        // One file per key, as its ConfigMap volume would hold it.
        std::fs::write(
            config.join("storageClassMap"),
            format!(
                "{CLASS}:\n  hostDir: {d}\n  mountDir: {d}\n",
                d = disks_dir.display()
            ),
        )
        .expect("LSP config written");
        std::fs::create_dir_all(root.join("etc-host")).expect("etc mount point can be created");
        let user = format!("localpv-bench-lsp-{node}");
        let kubeconfig = cp.kubeconfig_for(&format!("lsp-{node}"), &user, &["system:masters"]);
        Lsp {
            user,
            disks_dir,
            root,
            kubeconfig,
            port: free_port(),
            process: None,
            _shared: shared,
        }
    }

    fn start(&mut self, cp: &ControlPlane, node: &str, kind: Kind) {
        // In the new namespace only: the host's /etc stays reachable at etc-host, a tmpfs over /etc links to its
        // entries and adds provisioner/config.
        let script = r#"set -e
root=$1; bin=$2; shift 2
mount --bind /etc "$root/etc-host"
mount -t tmpfs lsp-etc /etc
for f in "$root"/etc-host/* "$root"/etc-host/.[!.]*; do [ -e "$f" ] && ln -s "$f" /etc/; done
mkdir -p /etc/provisioner/config
mount --bind "$root/lsp-config" /etc/provisioner/config
exec "$bin" "$@""#;
        let mut args = vec![
            "-m".to_string(),
            "--propagation".to_string(),
            "slave".to_string(),
            "sh".to_string(),
            "-c".to_string(),
            script.to_string(),
            "lsp".to_string(),
            self.root.display().to_string(),
            lsp_bin().display().to_string(),
            format!("--listen-address=127.0.0.1:{}", self.port),
        ];
        if kind == Kind::LspFast {
            args.push("--discovery-period=1s".to_string());
        }
        let env = [
            ("KUBECONFIG", self.kubeconfig.to_str().expect("utf-8 path")),
            ("MY_NODE_NAME", node),
            ("MY_NAMESPACE", "default"),
            ("JOB_CONTAINER_IMAGE", "unused-without-jobs"),
        ];
        self.process = Some(Component::spawn_with_env(
            &format!("lsp-{node}"),
            Path::new("unshare"),
            &args,
            &env,
            &cp.log_dir(),
            cp.reaper(),
        ));
    }
}
