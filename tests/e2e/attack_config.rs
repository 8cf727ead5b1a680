//! Hostile configurations against a real agent: a discovery directory that is `/` (written so, or through a
//! symlink), a system directory, or two classes on one directory spelled through a symlink. The agent refuses
//! them (at start and on reload), names the key, and publishes nothing from `/`.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use rstest::rstest;

use crate::node_agent::{local_storage_class, pvs_of, wait_event, wait_pvs};
use crate::support::agent::{Agent, install_crd, localpv_bin};
use crate::support::cluster::{ControlPlane, Options};
use crate::support::disks::Mount;
use crate::support::eventually;
use crate::support::nodes::create_node;

/// `localpv node --check-config` over `yaml`, where `$TMP` is a directory holding `rootlink -> /`, `disks/` and
/// `alias -> disks`.
fn check_config(yaml: &str) -> (bool, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    symlink("/", dir.path().join("rootlink")).expect("symlink to /");
    fs::create_dir(dir.path().join("disks")).expect("disks dir");
    symlink(dir.path().join("disks"), dir.path().join("alias")).expect("symlink to disks");
    let file = dir.path().join("config.yaml");
    fs::write(
        &file,
        yaml.replace("$TMP", &dir.path().display().to_string()),
    )
    .expect("config written");
    let out = Command::new(localpv_bin())
        .args(["node", "--check-config", "--config"])
        .arg(&file)
        .output()
        .expect("localpv runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[rstest]
#[case::root(
    "evil:\n    hostDir: /\n",
    "storageClassMap.evil.hostDir: / contains the system directory"
)]
#[case::proc(
    "evil:\n    hostDir: /proc\n",
    "storageClassMap.evil.hostDir: /proc is a system directory"
)]
#[case::dev_mount_dir(
    "evil:\n    hostDir: /mnt/disks\n    mountDir: /dev\n",
    "storageClassMap.evil.mountDir: /dev is a system directory"
)]
#[case::etc(
    "evil:\n    hostDir: /etc\n",
    "storageClassMap.evil.hostDir: /etc is a system directory"
)]
#[case::kubelet(
    "evil:\n    hostDir: /var/lib/kubelet\n",
    "storageClassMap.evil.hostDir: /var/lib/kubelet is a system directory"
)]
#[case::symlink_to_root(
    "evil:\n    hostDir: $TMP/rootlink\n",
    "resolves to /: / contains the system directory"
)]
#[case::same_dir_via_symlink(
    "a:\n    hostDir: $TMP/disks\n  b:\n    hostDir: $TMP/alias\n",
    r#"storageClassMap.b.mountDir: $TMP/alias (resolved: "#
)]
fn check_config_refuses_hostile_directories_naming_the_key(
    #[case] classes: &str,
    #[case] needle: &str,
) {
    let (ok, stderr) = check_config(&format!("storageClassMap:\n  {classes}"));
    assert!(!ok, "accepted: {stderr}");
    let needle = needle.split("$TMP").next().unwrap_or(needle);
    assert!(stderr.contains(needle), "expected {needle:?} in {stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_refuses_root_at_start_and_on_reload_and_publishes_nothing_from_it() {
    let cp = ControlPlane::start(Options::default()).await;
    let client = cp.client();
    install_crd(&cp).await;
    local_storage_class(&client, "local-storage", "Delete").await;
    create_node(&client, "node-1", &[]).await;

    // At start: `/` through a symlink. The agent exits naming the key; no PV of this node appears.
    let mut agent = Agent::new(&cp, "node-1", "local-storage");
    let link = cp.dir.join("hosts/node-1/rootlink");
    symlink("/", &link).expect("symlink to /");
    let good = fs::read_to_string(&agent.config).expect("config");
    let evil = format!(
        "storageClassMap:\n  local-storage:\n    hostDir: {l}\n    mountDir: {l}\n",
        l = link.display()
    );
    fs::write(&agent.config, &evil).expect("config written");
    agent.start(&cp);
    let exited = eventually("the agent to exit", Duration::from_secs(30), || {
        let running = agent.process.as_mut().map(|p| p.running());
        async move {
            match running {
                Some(false) => Ok(()),
                _ => Err("still running".to_string()),
            }
        }
    });
    exited.await;
    let log = agent.log();
    assert!(
        log.contains("storageClassMap.local-storage.hostDir:") && log.contains("resolves to /"),
        "{log}"
    );
    assert!(pvs_of(&client, "node-1").await.is_empty());

    // On reload: a running agent is handed `/`; it keeps the last good config, says so, and publishes nothing
    // from `/` (whose first-level mounts are /proc, /sys, /dev...).
    fs::write(&agent.config, &good).expect("config written");
    let _m1 = Mount::tmpfs(&agent.disk("vol1"), "64M", cp.reaper());
    agent.start(&cp);
    agent.wait_ready().await;
    let vol1 = agent.disk("vol1").display().to_string();
    wait_pvs(&client, "node-1", std::slice::from_ref(&vol1), "Pending").await;
    fs::write(&agent.config, &evil).expect("config written");
    let message = wait_event(&client, "node-1", "ConfigRejected", Duration::from_secs(30)).await;
    assert!(
        message.contains("storageClassMap.local-storage.hostDir:"),
        "{message}"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pvs = pvs_of(&client, "node-1").await;
    assert_eq!(
        pvs.keys().collect::<Vec<_>>(),
        [&vol1],
        "only the good disk is published"
    );
    assert!(
        !pvs.keys()
            .any(|p| Path::new(p).starts_with("/dev") || Path::new(p).starts_with("/proc")),
        "{pvs:?}"
    );
}

#[test]
fn check_config_shows_warnings_also_when_there_are_errors() {
    let (ok, stderr) = check_config(
        "colour: red\nstorageClassMap:\n  evil:\n    hostDir: /proc\n    shade: blue\n",
    );
    assert!(!ok, "accepted: {stderr}");
    assert!(
        stderr.contains("warning: colour: unknown key, ignored"),
        "{stderr}"
    );
    assert!(
        stderr.contains("warning: storageClassMap.evil.shade: unknown key, ignored"),
        "{stderr}"
    );
    assert!(
        stderr.contains("storageClassMap.evil.hostDir: /proc is a system directory"),
        "{stderr}"
    );
}
