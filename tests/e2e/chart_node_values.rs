//! Node agent values that reach the host or the agent's command line, checked by rendering: `node.mountUdev` never
//! makes the kubelet create `/run/udev` on a node without udev, the only host paths the chart may create are its
//! own, and `node.wipeFailingAfter` becomes a flag the real agent binary accepts.

use std::fs;

use serde_json::Value;

use crate::packaging::{documents, render, run, run_ok, tool};
use crate::support::agent::localpv_bin;

const ALL_ON: &str = "charts/localpv/ci/all-on-values.yaml";

fn daemonset(yaml: &str) -> Value {
    documents(yaml)
        .into_iter()
        .find(|d| d["kind"] == "DaemonSet")
        .expect("the chart renders the node DaemonSet")
}

fn pod_spec(ds: &Value) -> &Value {
    &ds["spec"]["template"]["spec"]
}

/// (volume name, host path, hostPath type) of every hostPath volume.
fn host_paths(ds: &Value) -> Vec<(String, String, String)> {
    let volumes = pod_spec(ds)["volumes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    volumes
        .iter()
        .filter(|v| v.get("hostPath").is_some())
        .map(|v| {
            let text = |x: &Value| x.as_str().unwrap_or_default().to_string();
            (
                text(&v["name"]),
                text(&v["hostPath"]["path"]),
                text(&v["hostPath"]["type"]),
            )
        })
        .collect()
}

fn node_args(ds: &Value) -> Vec<String> {
    let args = pod_spec(ds)["containers"][0]["args"].as_array().cloned();
    args.unwrap_or_default()
        .iter()
        .map(|a| a.as_str().expect("args are strings").to_string())
        .collect()
}

#[test]
fn defaults_mount_no_udev_directory_so_a_node_without_udev_is_left_as_it_was() {
    let ds = daemonset(&render("localpv", &[]));
    let paths = host_paths(&ds);
    assert!(
        paths.iter().all(|(_, path, _)| !path.starts_with("/run")),
        "the defaults mount nothing under /run: {paths:?}"
    );
    let mounts = pod_spec(&ds)["containers"][0]["volumeMounts"].to_string();
    assert!(!mounts.contains("/run/udev"), "{mounts}");
}

#[test]
fn mount_udev_needs_the_directory_to_exist_and_reads_it_only() {
    for extra in [vec!["--set", "node.mountUdev=true"], vec!["-f", ALL_ON]] {
        let ds = daemonset(&render("t", &extra));
        let udev: Vec<_> = host_paths(&ds)
            .into_iter()
            .filter(|(_, path, _)| path == "/run/udev")
            .collect();
        assert_eq!(udev.len(), 1, "{extra:?}: one /run/udev volume");
        let (name, _, kind) = &udev[0];
        // `Directory`: the kubelet checks the path and refuses the pod when it is missing; the empty type and
        // `DirectoryOrCreate` both end with the directory made on the host (containerd creates missing sources).
        assert_eq!(kind, "Directory", "{extra:?}");
        let mounts = pod_spec(&ds)["containers"][0]["volumeMounts"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let mount = mounts
            .iter()
            .find(|m| m["name"] == name.as_str())
            .unwrap_or_else(|| panic!("{extra:?}: volume {name} is mounted"));
        assert_eq!(mount["mountPath"], "/run/udev", "{extra:?}");
        assert_eq!(mount["readOnly"], true, "{extra:?}: {mount}");
    }
}

#[test]
fn the_chart_creates_on_the_host_only_its_state_dir_and_the_discovery_dirs() {
    for (what, extra) in [
        ("defaults", vec![]),
        ("all-on", vec!["-f", ALL_ON]),
        (
            "udev",
            vec!["--set", "node.mountUdev=true,node.stateDir=/srv/lpv"],
        ),
    ] {
        let ds = daemonset(&render("t", &extra));
        let created: Vec<_> = host_paths(&ds)
            .into_iter()
            .filter(|(_, _, kind)| kind.is_empty() || kind.ends_with("OrCreate"))
            .collect();
        assert!(!created.is_empty(), "{what}: the state dir is created");
        for (name, path, _) in created {
            assert!(
                name == "state" || name.starts_with("discovery-"),
                "{what}: hostPath {path} ({name}) would be created on every node"
            );
        }
    }
}

#[test]
fn wipe_failing_after_is_rendered_as_the_agents_flag() {
    for (extra, want) in [
        (vec![], "3"),
        (vec!["--set", "node.wipeFailingAfter=7"], "7"),
        (vec!["-f", ALL_ON], "5"),
    ] {
        let args = node_args(&daemonset(&render("t", &extra)));
        let flag = format!("--wipe-failing-after={want}");
        assert_eq!(
            args.iter()
                .filter(|a| a.starts_with("--wipe-failing-after"))
                .count(),
            1,
            "{extra:?}: {args:?}"
        );
        assert!(args.contains(&flag), "{extra:?}: {flag} in {args:?}");
    }
}

#[test]
fn the_rendered_agent_command_line_is_accepted_by_the_agent() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("config.yaml");
    fs::write(
        &config,
        format!(
            "storageClassMap:\n  local-storage:\n    hostDir: {}\n",
            dir.path().display()
        ),
    )
    .expect("config written");
    for extra in [
        vec!["--set", "node.wipeFailingAfter=4294967295"],
        vec!["-f", ALL_ON],
    ] {
        let mut args = node_args(&daemonset(&render("t", &extra)));
        assert_eq!(args.first().map(String::as_str), Some("node"));
        // The container's paths do not exist here: the configuration is this test's; every other flag as rendered.
        for a in args.iter_mut() {
            if a.starts_with("--config=") {
                *a = format!("--config={}", config.display());
            }
        }
        args.push("--check-config".into());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = run_ok(&localpv_bin(), &args);
        assert!(out.contains("is valid"), "{extra:?}: {out}");
    }
}

#[test]
fn wipe_failing_after_outside_what_the_agent_takes_is_refused_by_the_schema() {
    for bad in ["0", "-1", "1.5", "three", "4294967296"] {
        let set = format!("node.wipeFailingAfter={bad}");
        let out = run(
            &tool("helm"),
            &["template", "x", "charts/localpv", "--set", &set],
        );
        assert!(!out.status.success(), "--set {set} was accepted");
    }
    // The agent draws the same line.
    let out = run(
        &localpv_bin(),
        &["node", "--check-config", "--wipe-failing-after=0"],
    );
    assert!(
        !out.status.success(),
        "the agent took --wipe-failing-after=0"
    );
}

/// A surge would run two agents on one state directory: the second waits for the first's lock and never becomes
/// Ready, so the update would never finish. The chart refuses it, naming the key (issue 39, point 0b).
#[test]
fn a_surging_update_strategy_is_refused_naming_the_key() {
    for surge in ["1", "25%"] {
        let set = format!("node.updateStrategy.rollingUpdate.maxSurge={surge}");
        let out = run(
            &tool("helm"),
            &[
                "template",
                "x",
                "charts/localpv",
                "--kube-version",
                "1.37.1",
                "--set",
                &set,
            ],
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "--set {set} was accepted");
        assert!(
            stderr.contains("node.updateStrategy.rollingUpdate.maxSurge is")
                && stderr.contains("state directory"),
            "{set}: {stderr}"
        );
    }
    // The reference chart's top-level key is read the same way; no surge renders as before.
    let out = run(
        &tool("helm"),
        &[
            "template",
            "x",
            "charts/localpv",
            "--kube-version",
            "1.37.1",
            "--set",
            "updateStrategy.rollingUpdate.maxSurge=1",
        ],
    );
    assert!(!out.status.success(), "the reference chart's key surged");
    let ds = daemonset(&render(
        "localpv",
        &["--set", "node.updateStrategy.rollingUpdate.maxSurge=0"],
    ));
    assert_eq!(ds["spec"]["updateStrategy"]["rollingUpdate"]["maxSurge"], 0);
}
