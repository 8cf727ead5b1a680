//! One real node: containerd and a kubelet in a mount namespace of their own, under a cgroup of the run's own.
//!
//! Host side, per node `n` of run dir `R`: `R/node-n/` holds containerd's root, state and socket, the kubelet's
//! config, and the directories bound (inside the namespace only) over `/var/lib`, `/var/log` and `/run`, so the
//! kubelet's hard-coded paths and the chart's hostPaths (`/var/lib/localpv`, `/run/udev`) are per node and the
//! host's stay untouched. `R/node-n/mnt` is the node's disk directory, a shared bind mount on the host; inside
//! the namespace it is bound over `R/mnt`, so every node sees its own disks at the same path, as on real
//! machines, and disks mounted on the host later appear in the node and in `HostToContainer` volumes.
//! Sysctls the kubelet insists on writing are files bound over `/proc/sys` inside the namespace.
//! Teardown (the undo log): every process in the node's cgroups is killed (containerd's shims and containers
//! included, whatever process group they made), then the cgroups are removed; the namespace and every mount the
//! kubelet made die with the last process.

use std::fs;
use std::path::{Path, PathBuf};

use super::net::Network;
use super::undo::Undo;
use crate::cluster::ControlPlane;
use crate::disks::run;
use crate::proc::Component;

pub struct RealNode {
    pub name: String,
    pub dir: PathBuf,
    /// The node's disk directory on the host (`R/node-n/mnt`); the nodes see it as `R/mnt`.
    pub disks: PathBuf,
    pub socket: PathBuf,
    pub component: Component,
    /// The host's side (on devtmpfs) of the directory the node sees at `NodeSpec::dev_dir`.
    pub dev_dir: Option<PathBuf>,
    /// Each of `NodeSpec::own_dirs` (as the node sees it) with its host side (under `disks`).
    pub own_dirs: Vec<(PathBuf, PathBuf)>,
}

/// Sysctls the kubelet sets at start-up and fails without, with the values it wants.
const SYSCTLS: [(&str, &str); 6] = [
    ("vm/overcommit_memory", "1"),
    ("vm/panic_on_oom", "0"),
    ("kernel/panic", "10"),
    ("kernel/panic_on_oops", "1"),
    ("kernel/keys/root_maxkeys", "1000000"),
    ("kernel/keys/root_maxbytes", "25000000"),
];

/// The cgroup v1 hierarchies mounted on this host (`/sys/fs/cgroup/<name>`).
pub fn hierarchies() -> Vec<PathBuf> {
    let info = fs::read_to_string("/proc/self/mountinfo").expect("mountinfo readable");
    let found: Vec<PathBuf> = info
        .lines()
        .filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let fstype = post.split_whitespace().next()?;
            let mount_point = pre.split_whitespace().nth(4)?;
            (fstype == "cgroup").then(|| PathBuf::from(mount_point))
        })
        .collect();
    assert!(
        !found.is_empty(),
        "missing prerequisite: cgroup v1 hierarchies under /sys/fs/cgroup (this tier runs the kubelet with the \
         cgroupfs driver on cgroup v1, as on this machine kind)"
    );
    found
}

/// Every cgroup hierarchy mounted on this host, the v2 one (`unified`) included: runc makes each container's
/// cgroup there too, so teardown removes the run's tree from all of them, not only from those `hierarchies` lists.
pub fn all_hierarchies() -> Vec<PathBuf> {
    let info = fs::read_to_string("/proc/self/mountinfo").expect("mountinfo readable");
    info.lines()
        .filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let fstype = post.split_whitespace().next()?;
            let mount_point = pre.split_whitespace().nth(4)?;
            matches!(fstype, "cgroup" | "cgroup2").then(|| PathBuf::from(mount_point))
        })
        .collect()
}

/// Creates `<h>/<path>` in every hierarchy; cpuset needs cpus and mems copied down before tasks can join.
fn make_cgroup(path: &str) {
    for h in hierarchies() {
        let mut dir = h.clone();
        for part in path.split('/') {
            let parent = dir.clone();
            dir = dir.join(part);
            if !dir.exists() {
                fs::create_dir(&dir)
                    .unwrap_or_else(|e| panic!("cannot create cgroup {}: {e}", dir.display()));
            }
            for f in ["cpuset.cpus", "cpuset.mems"] {
                if let Ok(v) = fs::read_to_string(parent.join(f)) {
                    let _ = fs::write(dir.join(f), v.trim());
                }
            }
        }
    }
}

pub struct NodeSpec<'a> {
    pub run_dir: &'a Path,
    pub run_cgroup: &'a str,
    pub index: usize,
    pub net: &'a Network,
    pub plane: &'a ControlPlane,
    pub undo: &'a Undo,
    /// Taints the kubelet registers its Node with (`registerWithTaints`), as `key=value:Effect` or `key:Effect`.
    pub taints: &'a [&'a str],
    /// A path under `/dev` where the node sees a directory of its own (see `RealCluster::start_with`).
    pub dev_dir: Option<&'a Path>,
    /// Absolute paths outside `/dev` (such as `/mnt`) where the node sees a directory of its own, on its shared
    /// disk directory, so what the host mounts there later reaches the node (see `RealCluster::start_with`).
    pub own_dirs: &'a [&'a Path],
}

impl RealNode {
    pub fn start(s: NodeSpec) -> RealNode {
        let name = format!("node-{}", s.index);
        let dir = s.run_dir.join(&name);
        for d in [
            "varlib",
            "varlog",
            "run",
            "sysctl",
            "cni",
            "logs",
            "mnt/disks",
            "mnt/blocks",
        ] {
            fs::create_dir_all(dir.join(d)).expect("node dirs can be created");
        }
        let disks = dir.join("mnt");
        let d = disks.display().to_string();
        s.undo.push(&format!("umount -l {d}"));
        run("mount", &["--bind", &d, &d]);
        run("mount", &["--make-shared", &d]);

        let cgroup = format!("{}/{name}", s.run_cgroup);
        let procs_root = hierarchies()
            .into_iter()
            .find(|h| h.ends_with("pids"))
            .unwrap_or_else(|| hierarchies()[0].clone())
            .join(&cgroup);
        let rmdirs: Vec<String> = all_hierarchies()
            .iter()
            .map(|h| {
                format!(
                    "find {} -depth -type d -exec rmdir {{}} + 2>/dev/null",
                    h.join(&cgroup).display()
                )
            })
            .collect();
        s.undo.push(&format!(
            "for i in $(seq 50); do p=$(find {root} -name cgroup.procs -exec cat {{}} + 2>/dev/null); [ -z \"$p\" ] && break; kill -9 $p; sleep 0.2; done; {rm}",
            root = procs_root.display(),
            rm = rmdirs.join("; ")
        ));
        make_cgroup(&format!("{cgroup}/daemons"));
        make_cgroup(&format!("{cgroup}/pods"));

        let socket = dir.join("containerd.sock");
        let kubeconfig = s.plane.kubeconfig_for(
            &format!("kubelet-{name}"),
            &format!("system:node:{name}"),
            &["system:nodes"],
        );
        fs::write(
            dir.join("resolv.conf"),
            "# no cluster DNS in the real-node tier\n",
        )
        .expect("resolv.conf");
        fs::write(
            dir.join("containerd.toml"),
            containerd_config(&dir, &socket),
        )
        .expect("containerd config");
        fs::write(
            dir.join("cni/10-bridge.conflist"),
            cni_config(s.net, s.index, &dir),
        )
        .expect("cni config");
        let kubelet_port = crate::cluster::free_port();
        let healthz_port = crate::cluster::free_port();
        fs::write(
            dir.join("kubelet.yaml"),
            kubelet_config(&s, &dir, &socket, &cgroup, kubelet_port, healthz_port),
        )
        .expect("kubelet config");
        let kubelet = s.plane.bin.join("kubelet");
        assert!(
            kubelet.is_file(),
            "missing prerequisite: {} (scripts/k8s-bins.sh builds it)",
            kubelet.display()
        );
        let joins: Vec<String> = hierarchies()
            .iter()
            .map(|h| {
                format!(
                    "echo $$ > {}/cgroup.procs",
                    h.join(&cgroup).join("daemons").display()
                )
            })
            .collect();
        let mut inner = String::from("set -e\nmount --make-rshared /\n");
        for (key, value) in SYSCTLS {
            let f = dir.join("sysctl").join(key.replace('/', "."));
            fs::write(&f, format!("{value}\n")).expect("sysctl file");
            inner += &format!("mount --bind {} /proc/sys/{key}\n", f.display());
        }
        let dev_dir = s.dev_dir.map(|target| {
            let own = PathBuf::from(format!("/dev/{}-{name}", s.run_cgroup));
            fs::create_dir_all(&own).expect("the node's dev dir can be created");
            s.undo
                .push(&format!("rm -rf --one-file-system {}", own.display()));
            inner += &format!("mount --bind {} {}\n", own.display(), target.display());
            own
        });
        // NB: each is bound after `{dd}/mnt` is, from under that shared mount, so host mounts there propagate.
        let own_dirs: Vec<(PathBuf, PathBuf)> = s
            .own_dirs
            .iter()
            .map(|target| {
                let rel = target.strip_prefix("/").expect("an own dir is absolute");
                let own = disks.join("own").join(rel);
                fs::create_dir_all(&own).expect("the node's own dir can be created");
                (target.to_path_buf(), own)
            })
            .collect();
        let dd = dir.display();
        inner += &format!(
            "mount --bind {dd}/varlib /var/lib\nmount --bind {dd}/varlog /var/log\nmount --bind {dd}/run /run\n\
             mount --bind {dd}/mnt {run}/mnt\n\
             {own}\
             containerd --config {dd}/containerd.toml > {dd}/logs/containerd.log 2>&1 &\n\
             i=0; until [ -S {sock} ]; do i=$((i+1)); if [ $i -gt 300 ]; then echo 'containerd did not open its socket; see {dd}/logs/containerd.log'; exit 1; fi; sleep 0.1; done\n\
             exec {kubelet} --config={dd}/kubelet.yaml --kubeconfig={kc} --hostname-override={name} --node-ip={ip} --v=2 > {dd}/logs/kubelet.log 2>&1\n",
            run = s.run_dir.display(),
            own = own_dirs
                .iter()
                .map(|(target, own)| format!(
                    "mount --bind {} {}\n",
                    own.display(),
                    target.display()
                ))
                .collect::<String>(),
            sock = socket.display(),
            kubelet = kubelet.display(),
            kc = kubeconfig.display(),
            ip = s.net.gateway(),
        );
        fs::write(dir.join("inner.sh"), inner).expect("inner script");
        let outer = format!(
            "set -e\n{}\nexec unshare --mount --propagation slave /bin/sh {dd}/inner.sh\n",
            joins.join("\n")
        );
        fs::write(dir.join("node.sh"), outer).expect("node script");
        let component = Component::spawn(
            &name,
            Path::new("/bin/sh"),
            &[dir.join("node.sh").display().to_string()],
            &dir.join("logs"),
            s.plane.reaper(),
        );
        RealNode {
            name,
            dir,
            disks,
            socket,
            component,
            dev_dir,
            own_dirs,
        }
    }

    /// The host path of what this node sees at `node_path`, a path inside one of its own dirs.
    pub fn own(&self, node_path: &Path) -> PathBuf {
        self.own_dirs
            .iter()
            .find_map(|(target, own)| Some(own.join(node_path.strip_prefix(target).ok()?)))
            .unwrap_or_else(|| panic!("{} is in no own dir of {}", node_path.display(), self.name))
    }

    /// The last lines of containerd's and the kubelet's logs.
    pub fn log_tails(&self, lines: usize) -> String {
        let mut out = String::new();
        for f in [self.name.as_str(), "containerd", "kubelet"] {
            let p = self.dir.join("logs").join(format!("{f}.log"));
            out += &format!(
                "----- {} {} -----\n{}\n",
                self.name,
                p.display(),
                crate::proc::tail(&p, lines)
            );
        }
        out
    }

    /// Loads an image archive into the node's containerd.
    pub fn import(&self, archive: &Path) {
        self.images(&["import", &archive.display().to_string()]);
    }

    /// Lets containerd pull from `host` (`127.0.0.1:<port>`) over plain HTTP: a `hosts.toml` in its `certs.d`
    /// directory, read at each pull.
    pub fn pull_over_http(&self, host: &str) {
        let dir = self.dir.join("certs.d").join(host);
        fs::create_dir_all(&dir).expect("certs.d dir can be created");
        let hosts = format!(
            "server = \"http://{host}\"\n\n[host.\"http://{host}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
        );
        fs::write(dir.join("hosts.toml"), hosts).expect("hosts.toml written");
    }

    /// Gives an image already imported another name (e.g. a new tag for `helm upgrade`).
    pub fn tag(&self, from: &str, to: &str) {
        self.images(&["tag", "--force", from, to]);
    }

    /// `ctr images <args>` against the node's containerd, in the namespace the kubelet uses.
    fn images(&self, args: &[&str]) {
        let socket = self.socket.display().to_string();
        let mut all = vec!["--address", &socket, "-n", "k8s.io", "images"];
        all.extend_from_slice(args);
        run("ctr", &all);
    }
}

fn containerd_config(dir: &Path, socket: &Path) -> String {
    let d = dir.display();
    format!(
        r#"version = 2
root = "{d}/containerd/root"
state = "{d}/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "{sock}"
[ttrpc]
  address = "{sock}.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
  # Sandboxes ask for oom_score_adj -998, which needs CAP_SYS_RESOURCE this machine does not grant.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{d}/cni"
  # Per-registry hosts (`RealNode::pull_over_http`), as docs/install.md tells an air-gapped operator.
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{d}/certs.d"
"#,
        sock = socket.display(),
        pause = super::images::PAUSE,
    )
}

/// Bridge CNI on the run's bridge; node `index` hands out 10.x.<index>.2-254 of the bridge's /16, so pods of both
/// nodes share one L2 and reach the API server on the bridge address.
fn cni_config(net: &Network, index: usize, dir: &Path) -> String {
    let o = net.octet;
    serde_json::json!({
        "cniVersion": "1.0.0",
        "name": "localpv-realnode",
        "plugins": [{
            "type": "bridge",
            "bridge": net.bridge,
            "isGateway": false,
            "ipMasq": false,
            "hairpinMode": true,
            "ipam": {
                "type": "host-local",
                "dataDir": dir.join("cni-ipam").display().to_string(),
                "ranges": [[{
                    "subnet": format!("10.{o}.0.0/16"),
                    "rangeStart": format!("10.{o}.{index}.2"),
                    "rangeEnd": format!("10.{o}.{index}.254"),
                    "gateway": net.gateway(),
                }]],
                "routes": [{"dst": "0.0.0.0/0", "gw": net.gateway()}],
            },
        }],
    })
    .to_string()
}

fn kubelet_config(
    s: &NodeSpec,
    dir: &Path,
    socket: &Path,
    cgroup: &str,
    port: u16,
    healthz_port: u16,
) -> String {
    format!(
        r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: {ip}
port: {port}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: {healthz_port}
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: false}}
  x509: {{clientCAFile: {ca:?}}}
authorization: {{mode: AlwaysAllow}}
cgroupDriver: cgroupfs
cgroupRoot: /{cgroup}/pods
failCgroupV1: false
failSwapOn: false
oomScoreAdj: 0
containerRuntimeEndpoint: unix://{sock}
resolvConf: {resolv:?}
podCIDR: {cidr}
maxPods: 40
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {{memory.available: "1Mi", nodefs.available: "1%", nodefs.inodesFree: "1%", imagefs.available: "1%"}}
nodeStatusUpdateFrequency: 5s
syncFrequency: 10s
registerWithTaints: {taints}
"#,
        ip = s.net.gateway(),
        ca = s.plane.certs.ca_cert.display().to_string(),
        sock = socket.display(),
        resolv = dir.join("resolv.conf").display().to_string(),
        cidr = s.net.pod_cidr(s.index),
        taints = register_with_taints(s.taints),
    )
}

/// `registerWithTaints` as a flow sequence of taint objects.
fn register_with_taints(taints: &[&str]) -> String {
    let objects: Vec<serde_json::Value> = taints
        .iter()
        .map(|t| {
            let (kv, effect) = t.rsplit_once(':').expect("a taint is key[=value]:Effect");
            let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
            serde_json::json!({"key": key, "value": value, "effect": effect})
        })
        .collect();
    serde_json::Value::Array(objects).to_string()
}
