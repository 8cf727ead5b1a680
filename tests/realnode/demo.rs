//! The demo as users run it: `scripts/demo.sh`, the one command, on real nodes. It must walk the classic scenario
//! with a pod that writes its own data, and leave nothing behind, also when interrupted with Ctrl-C.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};

use crate::support::cluster::bin_dir;

/// One demo at a time: each brings up its own pair of nodes, and two demos of the same binary would build and
/// remove the same image tag at once.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// `scripts/demo.sh` with this build's target dir and control plane, so it reuses what `cargo test` built.
fn demo_command() -> Command {
    let target = crate::support::realnode::images::target_dir();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut cmd = Command::new(root.join("scripts/demo.sh"));
    // NB: what cargo puts in a test's environment (CARGO_PKG_NAME, CARGO_MANIFEST_DIR...) must not reach the
    // script's `cargo build`: build scripts that track those variables (ring's do) would count as changed and
    // rebuild, and the next `cargo test` would rebuild them back.
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        let set_by_cargo = key == "CARGO"
            || key.starts_with("CARGO_PKG_")
            || key.starts_with("CARGO_BIN_")
            || [
                "CARGO_MANIFEST_DIR",
                "CARGO_MANIFEST_PATH",
                "CARGO_CRATE_NAME",
                "CARGO_PRIMARY_PACKAGE",
                "CARGO_TARGET_TMPDIR",
                "OUT_DIR",
                "LD_LIBRARY_PATH",
                "RUST_RECURSION_COUNT",
            ]
            .contains(&key.as_ref());
        if set_by_cargo {
            cmd.env_remove(key.as_ref());
        }
    }
    cmd.env("CARGO_TARGET_DIR", &target)
        .env("LOCALPV_K8S_BIN_DIR", bin_dir())
        .env("CARGO_TERM_COLOR", "never")
        .current_dir(root);
    cmd
}

/// What the demo says it made on the host: (run dir, bridge, iptables chain).
fn run_of(lines: &[String]) -> Option<(PathBuf, String, String)> {
    let line = lines
        .iter()
        .find_map(|l| l.strip_prefix("real nodes in "))?;
    let (dir, rest) = line.split_once(" (bridge ")?;
    let (bridge, rest) = rest.split_once(", iptables chain ")?;
    let chain = rest.strip_suffix(')')?;
    Some((PathBuf::from(dir), bridge.to_string(), chain.to_string()))
}

fn output(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("missing prerequisite: cannot run {program}: {e}"));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Everything the run made is gone: the run dir, every mount under it, loop devices backed by files in it,
/// the bridge, the iptables chain, the cgroups and their processes.
fn assert_nothing_left((dir, bridge, chain): &(PathBuf, String, String)) {
    let dir_text = dir.display().to_string();
    assert!(!dir.exists(), "{dir_text} removed");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo readable");
    let left: Vec<&str> = mounts.lines().filter(|l| l.contains(&dir_text)).collect();
    assert!(left.is_empty(), "mounts left under {dir_text}: {left:#?}");
    let loops = output("losetup", &["-a"]);
    assert!(!loops.contains(&dir_text), "loop devices left: {loops}");
    let links = output("ip", &["-o", "link"]);
    assert!(
        !links.contains(&format!(" {bridge}:")),
        "bridge {bridge} left"
    );
    let nat = output("iptables", &["-w", "-t", "nat", "-S"]);
    assert!(!nat.contains(chain.as_str()), "iptables chain {chain} left");
    let run = dir
        .file_name()
        .expect("run dir has a name")
        .to_string_lossy()
        .into_owned();
    for h in std::fs::read_dir("/sys/fs/cgroup")
        .expect("cgroup root")
        .flatten()
    {
        let cg = h.path().join(&run);
        assert!(!cg.exists(), "cgroup {} left", cg.display());
    }
}

#[test]
fn demo_walks_the_classic_scenario_on_real_nodes_and_cleans_up() {
    let _one = one_at_a_time();
    let out = demo_command().output().expect("scripts/demo.sh runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "demo failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in [
        "the agents published one Available PV per disk",
        "$ localpv disks",
        "$ helm install localpv charts/localpv",
        "PVC example-local-claim is Pending",
        "pod example-pv-pod runs on node-2",
        "the pod's own index.html is on node-2's disk",
        "node-1's disks hold no index.html",
        "is Available again",
        "cleaned up",
    ] {
        assert!(text.contains(line), "the demo printed {line:?}:\n{text}");
    }
    let bound = text
        .lines()
        .find(|l| l.starts_with("PVC example-local-claim is Bound to "))
        .unwrap_or_else(|| panic!("no Bound line:\n{text}"));
    assert!(bound.contains("on node-2"), "{bound}");
    // The page comes from the pod itself: busybox's `hostname` in the container is the pod's name.
    let served = text
        .lines()
        .find_map(|l| l.strip_prefix("served by the pod: "))
        .unwrap_or_else(|| panic!("no page served:\n{text}"));
    assert_eq!(
        served, "hello from example-pv-pod, written on a local PV",
        "{text}"
    );
    // Two DaemonSet pods, one per node, as the chart's agent.
    let agents = text
        .lines()
        .filter(|l| l.starts_with("localpv-node-") && l.contains("Running"))
        .count();
    assert!(agents >= 2, "agent pods Running on both nodes:\n{text}");
    let lines: Vec<String> = text.lines().map(str::to_string).collect();
    let run = run_of(&lines).unwrap_or_else(|| panic!("the demo names its run dir:\n{text}"));
    assert_nothing_left(&run);
}

#[test]
fn demo_cleans_up_on_ctrl_c() {
    let _one = one_at_a_time();
    let mut child = demo_command()
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("scripts/demo.sh starts");
    let stdout = child.stdout.take().expect("piped");
    let mut seen = Vec::new();
    let mut lines = BufReader::new(stdout).lines();
    for line in lines.by_ref().map_while(Result::ok) {
        let pending = line.starts_with("PVC example-local-claim is Pending");
        seen.push(line);
        if pending {
            break;
        }
    }
    // Keep draining: a closed pipe would make the demo's next print fail, which is not what is tested here.
    let drain = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>());
    let run =
        run_of(&seen).unwrap_or_else(|| panic!("the demo did not start:\n{}", seen.join("\n")));
    assert!(
        std::fs::read_to_string("/proc/self/mountinfo")
            .expect("mountinfo")
            .contains(&run.0.display().to_string()),
        "the disks are mounted mid-demo"
    );
    // The script exec'd the demo, so its pid is the demo's: what a terminal's Ctrl-C reaches.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .expect("SIGINT sent");
    let status = child.wait().expect("the demo exits");
    let rest = drain.join().expect("drain thread");
    assert_eq!(
        status.code(),
        Some(130),
        "exit status after Ctrl-C:\n{}",
        rest.join("\n")
    );
    assert!(rest.iter().any(|l| l.contains("interrupted")), "{rest:?}");
    assert_nothing_left(&run);
}
