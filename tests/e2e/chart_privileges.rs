//! The capabilities the chart gives a non-privileged node agent (`node.privileged=false`) are enough, and each
//! one is needed: an agent limited to exactly the rendered set (bounding set, no inheritable capabilities) wipes a
//! released volume full of another user's files (private directories, unreadable files, a sticky directory) and
//! republishes it.

use std::fs;
use std::os::unix::fs::{PermissionsExt, chown};
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

use crate::node_agent::{local_storage_class, obj, phase, pvs_of};
use crate::packaging::{documents, render};
use crate::support::agent::{http_get, install_crd, localpv_bin};
use crate::support::cluster::{ControlPlane, Options, free_port};
use crate::support::disks::Mount;
use crate::support::eventually;
use crate::support::nodes::create_node;
use crate::support::proc::Component;

/// The capabilities the rendered DaemonSet adds with `node.privileged=false` (after dropping ALL).
fn rendered_capabilities() -> Vec<String> {
    let yaml = render("localpv", &["--set", "node.privileged=false"]);
    let ds = documents(&yaml)
        .into_iter()
        .find(|d| d["kind"] == "DaemonSet")
        .expect("the DaemonSet");
    let sc = &ds["spec"]["template"]["spec"]["containers"][0]["securityContext"];
    assert_eq!(sc["privileged"], serde_json::Value::Null, "not privileged");
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
    sc["capabilities"]["add"]
        .as_array()
        .expect("added capabilities")
        .iter()
        .map(|c| c.as_str().expect("a name").to_string())
        .collect()
}

/// Another tenant's data: private directories, an unreadable file, a sticky world-writable directory with a
/// third user's file in it, a directory with no permissions at all.
fn write_tenant_files(vol: &Path) {
    let dir = |p: &Path, mode: u32, uid: u32| {
        fs::create_dir_all(p).expect("dir");
        chown(p, Some(uid), Some(uid)).expect("chown");
        fs::set_permissions(p, fs::Permissions::from_mode(mode)).expect("chmod");
    };
    let file = |p: &Path, mode: u32, uid: u32| {
        fs::write(p, "tenant data").expect("file");
        chown(p, Some(uid), Some(uid)).expect("chown");
        fs::set_permissions(p, fs::Permissions::from_mode(mode)).expect("chmod");
    };
    dir(&vol.join("app"), 0o700, 1000);
    dir(&vol.join("app/nested"), 0o700, 1000);
    file(&vol.join("app/nested/secret.txt"), 0o000, 1000);
    dir(&vol.join("tmp"), 0o1777, 1000);
    file(&vol.join("tmp/other.txt"), 0o600, 1001);
    dir(&vol.join("locked"), 0o700, 1000);
    file(&vol.join("locked/inside.txt"), 0o600, 1000);
    fs::set_permissions(vol.join("locked"), fs::Permissions::from_mode(0o000)).expect("chmod");
}

/// Runs the node agent limited to `caps`, claims and releases its one volume, and reports whether the volume
/// came back empty as a new Available PV.
async fn wipe_with_capabilities(caps: &[String]) -> Result<(), String> {
    let cp = ControlPlane::start(Options {
        controller_manager: true,
        ..Options::default()
    })
    .await;
    let client = cp.client();
    install_crd(&cp).await;
    local_storage_class(&client, "local-storage", "Delete").await;
    create_node(&client, "node-1", &[]).await;
    let root = cp.dir.join("hosts/node-1");
    let disks = root.join("disks");
    let vol = disks.join("vol1");
    let _mount = Mount::tmpfs(&vol, "64M", cp.reaper());
    let config = root.join("config.yaml");
    fs::write(
        &config,
        format!(
            "storageClassMap:\n  local-storage:\n    hostDir: {d}\n    mountDir: {d}\n",
            d = disks.display()
        ),
    )
    .expect("config");
    let kubeconfig = cp.kubeconfig_for("agent-node-1", "localpv-test-agent", &["system:masters"]);
    let port = free_port();
    let bounding = format!(
        "--bounding-set=-all{}",
        caps.iter()
            .map(|c| format!(",+{}", c.to_lowercase()))
            .collect::<String>()
    );
    let setpriv = Path::new("/usr/bin/setpriv");
    assert!(
        setpriv.is_file(),
        "missing prerequisite: setpriv (util-linux)"
    );
    let mut agent = Component::spawn_with_env(
        "localpv-node-limited",
        setpriv,
        &[
            bounding,
            "--inh-caps=-all".into(),
            "--no-new-privs".into(),
            "--".into(),
            localpv_bin().display().to_string(),
            "node".into(),
            format!("--config={}", config.display()),
            "--node-name=node-1".into(),
            format!("--listen=127.0.0.1:{port}"),
            format!("--state-dir={}", root.join("state").display()),
            "--config-poll=500ms".into(),
        ],
        &[
            ("KUBECONFIG", kubeconfig.to_str().expect("utf-8")),
            ("RUST_LOG", "info,localpv=debug"),
        ],
        &cp.log_dir(),
        cp.reaper(),
    );
    eventually("the agent to be ready", Duration::from_secs(60), || async {
        match http_get(port, "/readyz") {
            Some((200, _)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let status = fs::read_to_string(format!("/proc/{}/status", agent.pid().expect("pid")))
        .unwrap_or_default();
    let path = vol.display().to_string();
    // Without a capability it needs, the agent may not even publish the volume.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let pv = loop {
        if let Some(pv) = pvs_of(&client, "node-1").await.get(&path)
            && phase(pv) == "Available"
        {
            break pv.clone();
        }
        if std::time::Instant::now() > deadline {
            return Err(format!("not published in 30s:\n{}", agent.tail(30)));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    let ns = cp.namespace("privileges").await;
    let claim: PersistentVolumeClaim = obj(json!({
        "metadata": {"name": "data"},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "local-storage",
            "volumeName": pv.metadata.name,
            "resources": {"requests": {"storage": "1Mi"}},
        },
    }));
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    claims
        .create(&PostParams::default(), &claim)
        .await
        .expect("claim created");
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let name = pv.metadata.name.clone().expect("named");
    eventually("the claim to bind", Duration::from_secs(60), || async {
        let p = pvs.get(&name).await.map_err(|e| e.to_string())?;
        (phase(&p) == "Bound").then_some(()).ok_or(phase(&p))
    })
    .await;
    write_tenant_files(&vol);
    claims
        .delete("data", &DeleteParams::default())
        .await
        .expect("claim deleted");
    let old_uid = pv.metadata.uid.clone();
    let deadline = std::time::Instant::now() + Duration::from_secs(45);
    loop {
        let now = pvs_of(&client, "node-1").await;
        if let Some(p) = now.get(&path)
            && p.metadata.uid != old_uid
            && phase(p) == "Available"
        {
            let left = fs::read_dir(&vol).map(|d| d.count()).unwrap_or(usize::MAX);
            return if left == 0 {
                Ok(())
            } else {
                Err(format!("republished with {left} entries left"))
            };
        }
        if std::time::Instant::now() > deadline {
            let caps_line = status
                .lines()
                .filter(|l| l.starts_with("Cap"))
                .collect::<Vec<_>>()
                .join(" ");
            return Err(format!(
                "not wiped and republished in 45s ({caps_line}):\n{}",
                agent.tail(30)
            ));
        }
        assert!(agent.running(), "the agent exited:\n{}", agent.tail(40));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_capabilities_of_a_non_privileged_agent_are_enough_and_each_is_needed() {
    let caps = rendered_capabilities();
    wipe_with_capabilities(&caps)
        .await
        .unwrap_or_else(|e| panic!("with {caps:?}: {e}"));
    for dropped in &caps {
        let fewer: Vec<String> = caps.iter().filter(|c| *c != dropped).cloned().collect();
        assert!(
            wipe_with_capabilities(&fewer).await.is_err(),
            "the wipe also works without {dropped}: the chart should not add it"
        );
    }
}
