//! The demo behind `scripts/demo.sh`: the classic local-PV walkthrough (REFERENCE section 8) on two real kubelet
//! nodes on this machine, brought up by the real-node test harness, with the chart installed by helm.
//!
//! ```text
//!  etcd + kube-apiserver + kube-controller-manager + kube-scheduler      (on bridge lpv<id>)
//!  node-1, node-2: containerd + runc + kubelet, each in a mount namespace and cgroup of its own
//!    DaemonSet pod localpv-node-* (image built here from the Dockerfile) ── tmpfs disks under R/node-n/mnt/disks
//!    pod example-pv-pod (busybox, pinned to node-2) writes and serves /data/index.html from its claim
//! ```
//!
//! Ctrl-C at any point drops the scenario: the harness's undo log stops the kubelets, containerd and every
//! container, unmounts the disks, removes the bridge, the iptables chain and the cgroups, and deletes the run dir;
//! its watchdog does the same if the process is killed outright. Run it through `scripts/demo.sh`, which installs
//! and builds what it needs first.

use localpv_test_support as support;
#[allow(dead_code)]
#[path = "../tests/realnode/common.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams};
use serde_json::json;

use common::{NAMESPACE, busybox_pod, claim, claim_state, create, delete_pod, host_path, pv_node};
use support::realnode::{POD_TIMEOUT, RealCluster};

const CLASS: &str = "local-storage";
const CLAIM: &str = "example-local-claim";
const POD: &str = "example-pv-pod";
/// Where the pod serves its page (busybox httpd), reached from the host over the nodes' bridge.
const HTTP_PORT: u16 = 8080;

fn step(text: &str) {
    println!("\n==> {text}");
}

/// The localpv binary for `localpv disks`: `$LOCALPV_BIN`, else `localpv` next to the directory of this example.
fn localpv_bin() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("LOCALPV_BIN") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().context("failed to find the demo's own path")?;
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("localpv"))
        .context("failed to derive the target dir")?;
    if !bin.is_file() {
        bail!(
            "{} is missing: run scripts/demo.sh, or `cargo build --bin localpv` first",
            bin.display()
        );
    }
    Ok(bin)
}

/// Prints a kubectl command and its output, as an operator would see it.
fn kubectl(c: &RealCluster, args: &[&str]) {
    println!("$ kubectl {}", args.join(" "));
    let out = c.kubectl(args);
    // kubectl says "No resources found" on stderr, which the harness does not keep.
    print!(
        "{}",
        if out.is_empty() {
            "No resources found\n"
        } else {
            &out
        }
    );
}

const PV_COLUMNS: &str = "custom-columns=PV:.metadata.name,NODE:.metadata.labels.localpv\\.io/node,\
PATH:.spec.local.path,CAPACITY:.spec.capacity.storage,STATUS:.status.phase,CLAIM:.spec.claimRef.name";

fn show(c: &RealCluster, bin: &Path, ns: &str) {
    let out = std::process::Command::new(bin)
        .args(["disks", "--kubeconfig"])
        .arg(&c.plane.admin_kubeconfig)
        .output();
    match out {
        Ok(o) => {
            println!("$ localpv disks");
            print!("{}", String::from_utf8_lossy(&o.stdout));
            print!("{}", String::from_utf8_lossy(&o.stderr));
        }
        Err(error) => println!("(could not run localpv disks: {error})"),
    }
    kubectl(c, &["get", "pv", "-o", PV_COLUMNS]);
    kubectl(c, &["get", "pvc", "-n", ns]);
}

/// Polls `check` every 300 ms for at most `POD_TIMEOUT`.
async fn wait_for<T, F, Fut>(what: &str, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + POD_TIMEOUT;
    loop {
        if let Some(v) = check().await {
            return Ok(v);
        }
        if Instant::now() > deadline {
            bail!("timed out after {POD_TIMEOUT:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// One HTTP/1.0 GET of `/index.html` from `ip:HTTP_PORT`; the body when the answer is 200.
async fn http_get(ip: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let connect = tokio::net::TcpStream::connect((ip, HTTP_PORT));
    let mut s = tokio::time::timeout(Duration::from_secs(2), connect)
        .await
        .ok()?
        .ok()?;
    s.write_all(b"GET /index.html HTTP/1.0\r\nHost: demo\r\n\r\n")
        .await
        .ok()?;
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(2), s.read_to_end(&mut buf))
        .await
        .ok()?
        .ok()?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.").then_some(())?;
    head.contains(" 200 ").then(|| body.to_string())
}

/// The Available PV of disk `vol1` on `node`: (name, uid).
async fn available_vol1(c: &RealCluster, node: &str) -> (String, Option<String>) {
    let path = c.disk_root().join("disks/vol1").display().to_string();
    let pv = common::wait_pv(c, node, &path, "Available").await;
    (pv.metadata.name.unwrap_or_default(), pv.metadata.uid)
}

async fn scenario(bin: &Path) -> anyhow::Result<()> {
    step("two real nodes on this machine (containerd, runc, kubelet) and a control plane");
    let c = RealCluster::start(2).await;
    println!(
        "real nodes in {} (bridge {}, iptables chain {})",
        c.dir.display(),
        c.net.bridge,
        c.net.chain
    );
    kubectl(&c, &["get", "nodes", "-o", "wide"]);

    step("tmpfs disks: node-1 has vol1 and vol2 (2G each), node-2 has vol1 (1G)");
    for (node, vol, size) in [
        ("node-1", "vol1", "2G"),
        ("node-1", "vol2", "2G"),
        ("node-2", "vol1", "1G"),
    ] {
        let path = c.tmpfs(node, vol, size);
        println!("mount -t tmpfs -o size={size} {vol} {}", path.display());
    }
    println!(
        "(each node sees its own disks at {})",
        c.disk_root().join("disks").display()
    );

    step(&format!(
        "helm install: the agent as a DaemonSet, StorageClass {CLASS} (WaitForFirstConsumer, reclaim Delete)"
    ));
    kubectl(&c, &["apply", "-f", "config/manifests/namespace.yaml"]);
    println!(
        "$ helm install localpv charts/localpv --namespace {NAMESPACE} -f values.yaml   # classes[0]: {CLASS}, hostDir {}",
        c.disk_root().join("disks").display()
    );
    common::helm_install(&c, json!({}));
    common::wait_agents_ready(&c).await;
    kubectl(&c, &["get", "pods", "-n", NAMESPACE, "-o", "wide"]);
    kubectl(&c, &["get", "storageclass", CLASS]);
    available_vol1(&c, "node-1").await;
    let (node2_pv, node2_uid) = available_vol1(&c, "node-2").await;
    let vol2 = c.disk_root().join("disks/vol2").display().to_string();
    common::wait_pv(&c, "node-1", &vol2, "Available").await;
    println!("the agents published one Available PV per disk:");
    let ns = c.plane.namespace("demo").await;
    show(&c, bin, &ns);

    step(&format!("PVC {CLAIM} (1Gi, class {CLASS})"));
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.client(), &ns);
    create(&claims, &claim(CLAIM, CLASS, "1Gi", false)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (phase, _) = claim_state(&c, &ns, CLAIM).await;
    if phase != "Pending" {
        bail!("the claim should wait for its first consumer, but is {phase:?}");
    }
    println!("PVC {CLAIM} is Pending: WaitForFirstConsumer binds it only once a pod uses it");
    kubectl(&c, &["get", "pvc", "-n", &ns]);

    step(&format!(
        "pod {POD} (busybox) using the claim, allowed only on node-2 (nodeSelector); it writes its own \
         index.html and serves it"
    ));
    let script = format!(
        "echo \"hello from $(hostname), written on a local PV\" > /data/index.html && sync && \
         exec httpd -f -p {HTTP_PORT} -h /data"
    );
    let pods: Api<Pod> = Api::namespaced(c.client(), &ns);
    create(
        &pods,
        &busybox_pod(POD, &script, CLAIM, false, Some("node-2")),
    )
    .await;
    let (phase, node) = common::wait_pod(&c, &ns, POD, &["Running", "Failed", "Succeeded"]).await;
    if phase != "Running" || node != "node-2" {
        bail!("pod {POD} is {phase} on {node:?}, expected Running on node-2");
    }
    let (phase, bound) = claim_state(&c, &ns, CLAIM).await;
    let bound = bound.unwrap_or_default();
    let pv = common::pvs(&c).await.remove(&bound);
    let pv = pv.with_context(|| format!("PV {bound:?} of the claim"))?;
    if phase != "Bound" || pv_node(&pv) != "node-2" || bound != node2_pv {
        bail!("expected {CLAIM} Bound to node-2's PV {node2_pv}, got {phase} to {bound}");
    }
    println!(
        "PVC {CLAIM} is Bound to {bound} on node-2; pod {POD} runs on node-2 \
         (node-1's bigger disks were never an option for this pod)"
    );
    kubectl(&c, &["get", "pod", POD, "-n", &ns, "-o", "wide"]);
    let ip = wait_for("the pod's IP", || async {
        let p = pods.get(POD).await.ok()?;
        p.status.and_then(|s| s.pod_ip)
    })
    .await?;
    let page = wait_for("the pod to serve index.html", || http_get(&ip)).await?;
    println!("$ curl http://{ip}:{HTTP_PORT}/index.html   # from the host, over the nodes' bridge");
    print!("{page}");
    println!("served by the pod: {}", page.trim());
    let on_disk = host_path(&c, "node-2", &common::pv_path(&pv)).join("index.html");
    let text = std::fs::read_to_string(&on_disk)
        .with_context(|| format!("failed to read {}", on_disk.display()))?;
    println!("$ cat {}   # node-2's disk, on the host", on_disk.display());
    print!("{text}");
    if text != page {
        bail!("the file on node-2's disk differs from what the pod serves");
    }
    println!("the pod's own index.html is on node-2's disk");
    for vol in ["vol1", "vol2"] {
        let other = c.node("node-1").disks.join("disks").join(vol);
        if other.join("index.html").exists() {
            bail!("{} holds the pod's file", other.display());
        }
    }
    println!("node-1's disks hold no index.html");
    show(&c, bin, &ns);

    step(&format!(
        "release: delete pod {POD} and PVC {CLAIM}; the agent wipes the disk and publishes it again"
    ));
    delete_pod(&c, &ns, POD).await;
    claims
        .delete(CLAIM, &DeleteParams::default())
        .await
        .context("failed to delete the claim")?;
    let fresh = wait_for("node-2's disk to come back wiped", || async {
        let path = c.disk_root().join("disks/vol1").display().to_string();
        let all = common::pvs(&c).await;
        all.into_values().find(|p| {
            pv_node(p) == "node-2"
                && common::pv_path(p) == path
                && common::pv_phase(p) == "Available"
                && p.metadata.uid != node2_uid
        })
    })
    .await?;
    if on_disk.exists() {
        bail!("{} survived the wipe", on_disk.display());
    }
    println!(
        "PV {node2_pv} was wiped (index.html is gone from node-2's disk) and is Available again, as a new \
         object (uid {})",
        fresh.metadata.uid.unwrap_or_default()
    );
    show(&c, bin, &ns);

    step(
        "demo finished: stopping the nodes, their pods and the control plane, unmounting the disks",
    );
    drop(c);
    println!("cleaned up");
    Ok(())
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> ExitCode {
    let bin = match localpv_bin() {
        Ok(b) => b,
        Err(error) => {
            eprintln!("demo: {error:#}");
            return ExitCode::FAILURE;
        }
    };
    // NB: dropping the scenario future on Ctrl-C runs every Drop in it: the cluster's undo log, then the plane.
    // A harness wait that gives up panics with what it saw; the unwinding drops the cluster the same way.
    let outcome = tokio::select! {
        result = scenario(&bin) => Some(result),
        _ = tokio::signal::ctrl_c() => None,
    };
    match outcome {
        Some(Ok(())) => ExitCode::SUCCESS,
        Some(Err(error)) => {
            eprintln!("demo failed: {error:#}");
            ExitCode::FAILURE
        }
        None => {
            println!(
                "\n==> interrupted: stopped the nodes and the control plane, unmounted the disks, removed \
                 the bridge, the iptables chain and the run dir"
            );
            ExitCode::from(130)
        }
    }
}
