//! The real-node tier: the control plane of `support::cluster` on a bridge of the run's own, and real nodes
//! (containerd + runc + kubelet) on this machine, so the chart's pods run and pods mount the PVs we publish.
//!
//! ```text
//!  host: bridge lpv<id> 10.x.0.1/16 ── kube-apiserver :port (also 10.96.0.1:443 for pods, via chain LPV-<id>)
//!          │            │
//!        node-1       node-2        each: mount ns + cgroup /localpv-rn-<id>/node-n, containerd, kubelet,
//!        pods 10.x.1.*  pods 10.x.2.*     disks at R/node-n/mnt seen by the node as R/mnt
//! ```
//!
//! Every host change is in the run's undo log (`undo`), reverted on drop or by its watchdog if the test dies.

pub mod images;
pub mod net;
pub mod node;
pub mod undo;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Api;

use self::images::Images;
use self::net::Network;
use self::node::{NodeSpec, RealNode};
use self::undo::Undo;
use super::cluster::{ControlPlane, Options, unique};
use super::disks::{LoopDevice, Mount};

pub struct RealCluster {
    pub dir: PathBuf,
    pub nodes: Vec<RealNode>,
    pub net: Network,
    pub images: Images,
    pub plane: ControlPlane,
    undo: Undo,
}

/// Per-operation bound for waits on real pods (image unpack, container start, probes).
pub const POD_TIMEOUT: Duration = Duration::from_secs(120);

impl RealCluster {
    /// Brings up the control plane and `count` real nodes, all Ready, with every image imported.
    pub async fn start(count: usize) -> RealCluster {
        RealCluster::start_tainted(count, &[]).await
    }

    /// As [`RealCluster::start`], node `index` (1-based) registering with the taints `taints` names for it
    /// (`key[=value]:Effect`).
    pub async fn start_tainted(count: usize, taints: &[(usize, &str)]) -> RealCluster {
        RealCluster::start_with(count, taints, None, &[]).await
    }

    /// As [`RealCluster::start_tainted`]; with `dev_dir` (a path under `/dev`, such as `/dev/disk/kubernetes`)
    /// every node sees a directory of its own there, on the host's devtmpfs (`RealNode::dev_dir`), as a node's
    /// bootstrap would make one. The directories, and `dev_dir` with its parents when the host lacked them, are
    /// removed at teardown. Likewise every node sees a directory of its own at each of `own_dirs` (absolute
    /// paths outside `/dev`, such as `/mnt`), kept under its disk directory (`RealNode::own`); the host's own
    /// directory there stays as it is (created, and removed at teardown, only when missing).
    pub async fn start_with(
        count: usize,
        taints: &[(usize, &str)],
        dev_dir: Option<&Path>,
        own_dirs: &[&Path],
    ) -> RealCluster {
        if let Err(missing) = net::check_tools() {
            panic!("missing prerequisite for the real-node tier: {missing}");
        }
        let images = images::images();
        let id = unique();
        let dir = std::env::temp_dir().join(format!("localpv-rn-{id}"));
        let undo = Undo::start(&dir.with_extension("undo"));
        undo.push(&format!("rm -rf --one-file-system {}", dir.display()));
        fs::create_dir_all(dir.join("mnt")).expect("run dir can be created");
        let net = Network::create(&id, &undo);
        let plane = ControlPlane::start(Options {
            real_nodes_address: Some(net.gateway()),
            ..Options::full()
        })
        .await;
        let api_port: u16 = plane
            .api_url
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("API URL has a port");
        net.route_kubernetes_service(api_port, &undo);
        let run_cgroup = format!("localpv-rn-{id}");
        let top: Vec<String> = node::all_hierarchies()
            .iter()
            .map(|h| format!("rmdir {}", h.join(&run_cgroup).display()))
            .collect();
        undo.push(&top.join("; "));
        if let Some(target) = dev_dir {
            assert!(
                target.starts_with("/dev") && target != Path::new("/dev"),
                "{} is not under /dev",
                target.display()
            );
            // NB: the bind target lives on the host's devtmpfs; only what this run created goes at teardown.
            let mut missing: Vec<&Path> = target.ancestors().take_while(|p| !p.exists()).collect();
            fs::create_dir_all(target).expect("the dev dir's mount point can be created");
            missing.reverse();
            for created in missing {
                undo.push(&format!("rmdir {}", created.display()));
            }
        }
        for target in own_dirs {
            assert!(
                target.is_absolute() && !target.starts_with("/dev") && target != &Path::new("/"),
                "{} is not an absolute path outside /dev",
                target.display()
            );
            let mut missing: Vec<&Path> = target.ancestors().take_while(|p| !p.exists()).collect();
            fs::create_dir_all(target).expect("an own dir's mount point can be created");
            missing.reverse();
            for created in missing {
                undo.push(&format!("rmdir {}", created.display()));
            }
        }
        let mut cluster = RealCluster {
            dir,
            nodes: Vec::new(),
            net,
            images,
            plane,
            undo,
        };
        for index in 1..=count {
            let own: Vec<&str> = taints
                .iter()
                .filter(|(i, _)| *i == index)
                .map(|(_, t)| *t)
                .collect();
            let node = RealNode::start(NodeSpec {
                taints: &own,
                dev_dir,
                own_dirs,
                run_dir: &cluster.dir,
                run_cgroup: &run_cgroup,
                index,
                net: &cluster.net,
                plane: &cluster.plane,
                undo: &cluster.undo,
            });
            cluster.nodes.push(node);
        }
        for i in 0..cluster.nodes.len() {
            cluster.wait_socket(i).await;
            for a in &cluster.images.archives {
                cluster.nodes[i].import(a);
            }
        }
        for i in 0..cluster.nodes.len() {
            cluster.wait_node_ready(i).await;
        }
        cluster
    }

    async fn wait_socket(&mut self, i: usize) {
        for _ in 0..300 {
            if self.nodes[i].socket.exists() {
                return;
            }
            if !self.nodes[i].component.running() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "{}: containerd did not start (socket {}):\n{}",
            self.nodes[i].name,
            self.nodes[i].socket.display(),
            self.nodes[i].log_tails(40)
        );
    }

    async fn wait_node_ready(&mut self, i: usize) {
        let nodes: Api<Node> = Api::all(self.client());
        let name = self.nodes[i].name.clone();
        let deadline = std::time::Instant::now() + Duration::from_secs(90);
        loop {
            let ready = nodes.get_opt(&name).await.ok().flatten().is_some_and(|n| {
                let no_taint = n
                    .spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .is_none_or(|t| t.iter().all(|t| t.key != "node.kubernetes.io/not-ready"));
                let ready = n
                    .status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True");
                ready && no_taint
            });
            if ready {
                return;
            }
            if !self.nodes[i].component.running() || std::time::Instant::now() > deadline {
                panic!(
                    "{name} is not Ready (kubelet exited or 90s passed):\n{}",
                    self.nodes[i].log_tails(60)
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    pub fn client(&self) -> kube::Client {
        self.plane.client()
    }

    pub fn node(&self, name: &str) -> &RealNode {
        self.nodes
            .iter()
            .find(|n| n.name == name)
            .unwrap_or_else(|| panic!("no node {name}"))
    }

    /// The directory under which every node sees its own disks (`R/mnt`): chart `hostDir`s live below it.
    pub fn disk_root(&self) -> PathBuf {
        self.dir.join("mnt")
    }

    /// A tmpfs disk `name` on `node`, mounted on the host under the node's `disks/`; returns its host path.
    pub fn tmpfs(&self, node: &str, name: &str, size: &str) -> PathBuf {
        let path = self.node(node).disks.join("disks").join(name);
        Mount::tmpfs(&path, size, &self.undo).keep()
    }

    /// A loop device of `mib` MiB over a sparse file in the run dir; `fs` formats it (mkfs.<fs>).
    pub fn loop_device(&self, name: &str, mib: u64, fs: Option<&str>) -> String {
        let backing = self.dir.join(format!("{name}.img"));
        LoopDevice::new(&backing, mib, fs, &self.undo).keep()
    }

    /// A formatted loop device mounted as disk `name` on `node`; returns (host path, device).
    pub fn fs_disk(&self, node: &str, name: &str, mib: u64, fs: &str) -> (PathBuf, String) {
        let dev = self.loop_device(&format!("{node}-{name}"), mib, Some(fs));
        let path = self.node(node).disks.join("disks").join(name);
        (Mount::device(&dev, &path, &self.undo).keep(), dev)
    }

    /// A raw loop device published as block disk `name` on `node` (a symlink in the node's `blocks/`).
    pub fn block_disk(&self, node: &str, name: &str, mib: u64) -> String {
        let dev = self.loop_device(&format!("{node}-{name}"), mib, None);
        std::os::unix::fs::symlink(&dev, self.node(node).disks.join("blocks").join(name))
            .expect("block symlink can be created");
        dev
    }

    fn tool_env(&self, cmd: &mut Command) {
        let home = self.dir.join("helm-home");
        cmd.env("KUBECONFIG", &self.plane.admin_kubeconfig)
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data"))
            .current_dir(crate::repo_root());
    }

    /// Runs helm (from the pinned bin dir) against this cluster; panics with its output on failure.
    pub fn helm(&self, args: &[&str]) -> String {
        self.tool("helm", args)
    }

    pub fn kubectl(&self, args: &[&str]) -> String {
        self.tool("kubectl", args)
    }

    fn tool(&self, name: &str, args: &[&str]) -> String {
        let mut cmd = Command::new(self.plane.bin.join(name));
        cmd.args(args);
        self.tool_env(&mut cmd);
        let out = cmd
            .output()
            .unwrap_or_else(|e| panic!("missing prerequisite: cannot run {name}: {e}"));
        assert!(
            out.status.success(),
            "{name} {} failed:\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The log of a container as the node keeps it (`/var/log/pods` inside the node), for failure messages.
    pub fn container_logs(&self, namespace: &str, pod_prefix: &str) -> String {
        let mut out = String::new();
        for n in &self.nodes {
            let pods = n.dir.join("varlog/pods");
            for e in fs::read_dir(&pods).into_iter().flatten().flatten() {
                let dn = e.file_name().to_string_lossy().into_owned();
                if dn.starts_with(&format!("{namespace}_{pod_prefix}")) {
                    for c in fs::read_dir(e.path()).into_iter().flatten().flatten() {
                        for l in fs::read_dir(c.path()).into_iter().flatten().flatten() {
                            out += &format!(
                                "----- {} {} -----\n{}\n",
                                n.name,
                                l.path().display(),
                                super::proc::tail(&l.path(), 30)
                            );
                        }
                    }
                }
            }
        }
        out
    }

    pub fn undo(&self) -> &Undo {
        &self.undo
    }

    pub fn run_dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for RealCluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for n in &self.nodes {
                eprintln!("{}", n.log_tails(30));
            }
        }
        for n in &mut self.nodes {
            n.component.stop(Duration::from_secs(5));
        }
        self.undo.run();
    }
}
