//! The demo behind `scripts/demo.sh`: the classic local-PV walkthrough (REFERENCE section 8) on a throw-away
//! control plane from the test harness, with real node agents, the extender and kube-scheduler using it.
//!
//! ```text
//!  etcd + kube-apiserver + kube-controller-manager + kube-scheduler ──extender──> localpv extender
//!  stand-in Nodes node-1, node-2 <── localpv node (one process per node) ── tmpfs "disks" under <plane>/hosts/
//! ```
//!
//! Ctrl-C at any point drops the scenario: agents, extender and control plane are stopped, the tmpfs disks
//! unmounted and the temp dir removed; the harness's watchdog does the same if the process is killed outright.
//! Run it through `scripts/demo.sh`, which builds the binaries and the control plane first.

// NB: the harness's `mod.rs` also brings `agent.rs`, which needs `CARGO_BIN_EXE_localpv` (set for integration
// tests only), so the demo includes the modules it uses one by one, at the crate root where their `super::`
// paths resolve.
#[allow(dead_code)]
#[path = "../tests/support/certs.rs"]
mod certs;
#[allow(dead_code)]
#[path = "../tests/support/cluster.rs"]
mod cluster;
#[allow(dead_code)]
#[path = "../tests/support/disks.rs"]
mod disks;
#[allow(dead_code)]
#[path = "../tests/support/nodes.rs"]
mod nodes;
#[allow(dead_code)]
#[path = "../tests/support/proc.rs"]
mod proc;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

use cluster::{ControlPlane, Extender, Options, free_port};
use disks::Mount;
use nodes::create_node;
use proc::Component;

const CLASS: &str = "local-storage";
const CLAIM: &str = "example-local-claim";
const POD: &str = "example-pv-pod";

/// The localpv binary: `$LOCALPV_BIN`, else `localpv` next to the directory holding this example.
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

fn step(text: &str) {
    println!("\n==> {text}");
}

async fn wait_for<T, F, Fut>(what: &str, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Some(v) = check().await {
            return Ok(v);
        }
        if Instant::now() > deadline {
            bail!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn obj<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v).expect("demo object literal is valid")
}

fn pv_path(pv: &PersistentVolume) -> String {
    let local = pv.spec.as_ref().and_then(|s| s.local.as_ref());
    local.map(|l| l.path.clone()).unwrap_or_default()
}

fn pv_phase(pv: &PersistentVolume) -> String {
    let status = pv.status.as_ref();
    status.and_then(|s| s.phase.clone()).unwrap_or_default()
}

fn short_path(path: &str) -> String {
    // <plane>/hosts/<node>/disks/<vol> reads better as <node>:/disks/<vol>.
    match path.split_once("/hosts/") {
        Some((_, rest)) => rest.replacen('/', ":/", 1),
        None => path.to_string(),
    }
}

/// PVs and PVCs as two tables, like `kubectl get pv,pvc`.
async fn print_tables(client: &kube::Client, ns: &str) -> anyhow::Result<()> {
    let pvs = Api::<PersistentVolume>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    let mut out = format!(
        "{:<44} {:<8} {:<20} {:<10} {:<10} {}\n",
        "PV", "NODE", "DISK", "CAPACITY", "STATUS", "CLAIM"
    );
    for pv in &pvs.items {
        let spec = pv.spec.clone().unwrap_or_default();
        let labels = pv.metadata.labels.clone().unwrap_or_default();
        let claim = spec.claim_ref.as_ref().map(|c| {
            format!(
                "{}/{}",
                c.namespace.clone().unwrap_or_default(),
                c.name.clone().unwrap_or_default()
            )
        });
        let _ = writeln!(
            out,
            "{:<44} {:<8} {:<20} {:<10} {:<10} {}",
            pv.metadata.name.clone().unwrap_or_default(),
            labels.get("localpv.io/node").cloned().unwrap_or_default(),
            short_path(&pv_path(pv)),
            spec.capacity
                .and_then(|c| c.get("storage").map(|q| q.0.clone()))
                .unwrap_or_default(),
            pv_phase(pv),
            claim.unwrap_or_default()
        );
    }
    let pvcs = Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await?;
    out.push_str(&format!(
        "\n{:<24} {:<10} {:<44} {}\n",
        "PVC", "STATUS", "VOLUME", "REQUEST"
    ));
    for c in &pvcs.items {
        let spec = c.spec.clone().unwrap_or_default();
        let request = spec
            .resources
            .and_then(|r| r.requests)
            .and_then(|r| r.get("storage").map(|q| q.0.clone()));
        let _ = writeln!(
            out,
            "{:<24} {:<10} {:<44} {}",
            c.metadata.name.clone().unwrap_or_default(),
            c.status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_default(),
            spec.volume_name.unwrap_or_default(),
            request.unwrap_or_default()
        );
    }
    print!("{out}");
    Ok(())
}

/// `localpv disks`, as an operator would run it.
fn print_disks(bin: &Path, cp: &ControlPlane) {
    let out = std::process::Command::new(bin)
        .args(["disks", "--kubeconfig"])
        .arg(&cp.admin_kubeconfig)
        .output();
    match out {
        Ok(o) => {
            println!("$ localpv disks");
            print!("{}", String::from_utf8_lossy(&o.stdout));
            print!("{}", String::from_utf8_lossy(&o.stderr));
        }
        Err(error) => println!("(could not run localpv disks: {error})"),
    }
}

async fn show(bin: &Path, cp: &ControlPlane, ns: &str) -> anyhow::Result<()> {
    print_disks(bin, cp);
    println!();
    print_tables(&cp.client(), ns).await
}

fn spawn(cp: &ControlPlane, bin: &Path, name: &str, args: &[String], user: &str) -> Component {
    let kubeconfig = cp.kubeconfig_for(name, user, &["system:masters"]);
    let env = [
        ("KUBECONFIG", kubeconfig.to_str().expect("utf-8 path")),
        ("RUST_LOG", "info"),
    ];
    Component::spawn_with_env(name, bin, args, &env, &cp.log_dir(), cp.reaper())
}

async fn wait_ready(c: &mut Component, port: u16) -> anyhow::Result<()> {
    let url = format!("http://127.0.0.1:{port}/readyz");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if !c.running() {
            bail!("{} exited:\n{}", c.name, c.tail(30));
        }
        if get_ok(port).await {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{url} not ready after 60s:\n{}", c.tail(30));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn get_ok(port: u16) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
        return false;
    };
    let mut buf = Vec::new();
    let sent = s
        .write_all(b"GET /readyz HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .await;
    sent.is_ok()
        && s.read_to_end(&mut buf).await.is_ok()
        && buf.starts_with(b"HTTP/1.")
        && buf.get(8..13) == Some(b" 200 ")
}

async fn node_pv(client: &kube::Client, path: &str) -> Option<PersistentVolume> {
    let pvs = Api::<PersistentVolume>::all(client.clone())
        .list(&ListParams::default())
        .await
        .ok()?;
    pvs.items.into_iter().find(|pv| pv_path(pv) == path)
}

async fn scenario(bin: &Path) -> anyhow::Result<()> {
    step("starting a control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler");
    let extender_port = free_port();
    let mut extender_cfg = Extender::new(&format!("http://127.0.0.1:{extender_port}"));
    extender_cfg.node_cache_capable = true;
    let cp = ControlPlane::start(Options {
        controller_manager: true,
        scheduler: true,
        extenders: vec![extender_cfg],
        ..Options::default()
    })
    .await;
    println!("control plane in {}", cp.dir.display());
    let client = cp.client();
    let ns = cp.namespace("demo").await;
    let kubectl = cp.bin.join("kubectl");
    let crd = Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/localpv/crds");
    let applied = std::process::Command::new(&kubectl)
        .arg("--kubeconfig")
        .arg(&cp.admin_kubeconfig)
        .args(["apply", "--server-side", "-f"])
        .arg(&crd)
        .output()
        .context("failed to run kubectl")?;
    if !applied.status.success() {
        bail!(
            "failed to install the LocalDisk CRD: {}",
            String::from_utf8_lossy(&applied.stderr)
        );
    }

    step(
        "two stand-in nodes with tmpfs disks: node-1 has vol1 and vol2 (2G each), node-2 has vol1 (1G)",
    );
    let mut mounts = Vec::new();
    let mut hosts = Vec::new();
    for (node, disks) in [("node-1", vec!["vol1", "vol2"]), ("node-2", vec!["vol1"])] {
        create_node(&client, node, &[]).await;
        let root = cp.dir.join("hosts").join(node);
        for d in disks {
            let size = if node == "node-1" { "2G" } else { "1G" };
            mounts.push(Mount::tmpfs(&root.join("disks").join(d), size, cp.reaper()));
            println!("mount -t tmpfs -o size={size} {d} {node}:/disks/{d}");
        }
        hosts.push((node, root));
    }

    step(&format!(
        "StorageClass {CLASS}: kubernetes.io/no-provisioner, WaitForFirstConsumer, reclaim Delete"
    ));
    let sc: StorageClass = obj(json!({
        "metadata": {"name": CLASS}, "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "WaitForFirstConsumer", "reclaimPolicy": "Delete",
    }));
    Api::<StorageClass>::all(client.clone())
        .create(&PostParams::default(), &sc)
        .await?;

    step("starting a localpv node agent per node and the localpv extender");
    let mut processes = Vec::new();
    for (node, root) in &hosts {
        let config = root.join("config.yaml");
        let disks = root.join("disks");
        std::fs::write(
            &config,
            format!(
                "storageClassMap:\n  {CLASS}:\n    hostDir: {}\n",
                disks.display()
            ),
        )?;
        let port = free_port();
        let args = vec![
            "node".to_string(),
            format!("--config={}", config.display()),
            format!("--node-name={node}"),
            format!("--listen=127.0.0.1:{port}"),
            format!("--state-dir={}", root.join("state").display()),
        ];
        let name = format!("localpv-node-{node}");
        processes.push((spawn(&cp, bin, &name, &args, &name), port));
    }
    let args = vec![
        "extender".to_string(),
        format!("--listen=127.0.0.1:{extender_port}"),
    ];
    processes.push((
        spawn(&cp, bin, "localpv-extender", &args, "localpv-extender"),
        extender_port,
    ));
    for (c, port) in processes.iter_mut() {
        wait_ready(c, *port).await?;
    }
    let vol = |node: &str| {
        cp.dir
            .join("hosts")
            .join(node)
            .join("disks/vol1")
            .display()
            .to_string()
    };
    let all_three = wait_for("three Available PVs", || async {
        let pvs = Api::<PersistentVolume>::all(client.clone())
            .list(&ListParams::default())
            .await
            .ok()?;
        let available = pvs.items.iter().filter(|p| pv_phase(p) == "Available");
        (available.count() == 3).then_some(())
    })
    .await;
    all_three?;
    println!("the agents published one Available PV per disk:");
    show(bin, &cp, &ns).await?;

    step(&format!("PVC {CLAIM} (1Gi, class {CLASS})"));
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let claim: PersistentVolumeClaim = obj(json!({"metadata": {"name": CLAIM}, "spec": {
        "accessModes": ["ReadWriteOnce"], "storageClassName": CLASS,
        "resources": {"requests": {"storage": "1Gi"}}}}));
    pvcs.create(&PostParams::default(), &claim).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let phase = pvcs.get(CLAIM).await?.status.and_then(|s| s.phase);
    if phase.as_deref() != Some("Pending") {
        bail!("the claim should wait for its first consumer, but is {phase:?}");
    }
    println!("PVC {CLAIM} is Pending: WaitForFirstConsumer binds it only once a pod uses it");
    show(bin, &cp, &ns).await?;

    step(&format!(
        "pod {POD} using the claim, allowed only on node-2 (nodeSelector)"
    ));
    let pod: Pod = obj(json!({"metadata": {"name": POD}, "spec": {
        "nodeSelector": {"kubernetes.io/hostname": "node-2"},
        "containers": [{"name": "web", "image": "nginx",
            "volumeMounts": [{"name": "html", "mountPath": "/usr/share/nginx/html"}]}],
        "volumes": [{"name": "html", "persistentVolumeClaim": {"claimName": CLAIM}}]}}));
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    pods.create(&PostParams::default(), &pod).await?;
    let node2 = node_pv(&client, &vol("node-2"))
        .await
        .context("node-2's PV")?;
    let node2_name = node2.metadata.name.clone().unwrap_or_default();
    let (bound, scheduled) = wait_for("the claim to bind and the pod to be scheduled", || async {
        let c = pvcs.get(CLAIM).await.ok()?;
        let volume = c.spec.and_then(|s| s.volume_name)?;
        let node = pods.get(POD).await.ok()?.spec.and_then(|s| s.node_name)?;
        let bound = c.status.and_then(|s| s.phase).as_deref() == Some("Bound");
        bound.then_some((volume, node))
    })
    .await?;
    if bound != node2_name || scheduled != "node-2" {
        bail!("expected {CLAIM} on node-2's PV {node2_name}, got {bound} on {scheduled}");
    }
    println!(
        "PVC {CLAIM} is Bound to {bound} on node-2; pod {POD} is scheduled to node-2 \
         (node-1's bigger disks were never an option for this pod)"
    );
    // No kubelet runs the pod: write what nginx would serve straight into the disk.
    let index = Path::new(&vol("node-2")).join("index.html");
    std::fs::write(&index, "hello from a local PV\n")?;
    println!(
        "the pod's data: {}",
        short_path(&index.display().to_string())
    );
    show(bin, &cp, &ns).await?;

    step(&format!(
        "release: delete pod {POD} and PVC {CLAIM}; the agent wipes the disk and publishes it again"
    ));
    pods.delete(POD, &DeleteParams::default().grace_period(0))
        .await?;
    pvcs.delete(CLAIM, &DeleteParams::default()).await?;
    let old_uid = node2.metadata.uid.clone();
    wait_for("the disk to come back", || async {
        let pv = node_pv(&client, &vol("node-2")).await?;
        (pv.metadata.uid != old_uid && pv_phase(&pv) == "Available").then_some(())
    })
    .await?;
    if index.exists() {
        bail!("{} survived the wipe", index.display());
    }
    println!(
        "PV {node2_name} was wiped (index.html is gone) and is Available again, as a new object"
    );
    show(bin, &cp, &ns).await?;

    step("demo finished: stopping the agents, the extender and the control plane");
    drop(processes);
    drop(mounts);
    drop(cp);
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
    // NB: dropping the scenario future on Ctrl-C runs every Drop in it: processes, mounts, then the plane.
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
                "\n==> interrupted: stopped everything, unmounted the disks, removed the temp dir"
            );
            ExitCode::from(130)
        }
    }
}
