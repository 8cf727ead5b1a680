//! The release path (issue 36): `scripts/release.sh --profile dev` publishes to a registry on loopback (Debian's
//! `docker-registry`, plain HTTP) the linux/amd64 + linux/arm64 image as one manifest list and the chart as an OCI
//! artifact; its other outputs (CLI archives, SHA256SUMS, SBOM, krew manifest) agree with each other; the arm64
//! image's binary runs under qemu-user; and two real nodes install with `helm install localpv oci://...` and pull
//! the image from that registry by digest, containerd configured as docs/install.md tells an air-gapped operator.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};

use crate::common::*;
use crate::support::cluster::{bin_dir, free_port};
use crate::support::disks::run;
use crate::support::realnode::RealCluster;
use crate::support::realnode::images::{images, target_dir};

/// `docker-registry serve` on 127.0.0.1:`port`, storage in `dir`; killed on drop.
struct Registry(Child);

impl Registry {
    fn start(dir: &Path, port: u16) -> Registry {
        let config = dir.join("registry.yml");
        let storage = dir.join("storage");
        fs::write(
            &config,
            format!(
                "version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\n\
                 http:\n  addr: 127.0.0.1:{port}\nlog:\n  level: warn\n",
                storage.display()
            ),
        )
        .expect("registry config written");
        let child = Command::new("docker-registry")
            .args(["serve", &config.display().to_string()])
            .stdout(Stdio::null())
            .stderr(fs::File::create(dir.join("registry.log")).expect("registry log"))
            .spawn()
            .expect("missing prerequisite: docker-registry (apt-get install docker-registry)");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "docker-registry did not listen on 127.0.0.1:{port}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Registry(child)
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn version() -> String {
    let toml = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
        .expect("Cargo.toml");
    toml.lines()
        .find_map(|l| l.strip_prefix("version = \""))
        .and_then(|v| v.strip_suffix('"'))
        .expect("Cargo.toml has a version")
        .to_string()
}

fn release(registry: &str, out: &Path) {
    let start = Instant::now();
    let status = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/release.sh"))
        .args(["--profile", "dev", "--plain-http", "--registry", registry])
        .arg("--out")
        .arg(out)
        .env("CARGO_TARGET_DIR", target_dir())
        .env("HELM", bin_dir().join("helm"))
        .status()
        .expect("scripts/release.sh runs");
    assert!(status.success(), "scripts/release.sh failed");
    eprintln!("release.sh took {:?}", start.elapsed());
}

/// SHA256SUMS names every archive and the chart with their real sums; the krew manifest names both archives with
/// the same sums; the SBOM is SPDX naming localpv at this version.
fn check_outputs(out: &Path, v: &str) {
    let sums = fs::read_to_string(out.join("SHA256SUMS")).expect("SHA256SUMS");
    let check = Command::new("sha256sum")
        .args(["-c", "SHA256SUMS"])
        .current_dir(out)
        .output()
        .expect("sha256sum");
    assert!(check.status.success(), "SHA256SUMS does not check: {sums}");
    let krew: Value = serde_yaml_ng::from_str(
        &fs::read_to_string(out.join("localpv.yaml")).expect("krew manifest"),
    )
    .expect("krew manifest parses");
    assert_eq!(krew["kind"], "Plugin");
    let platforms = krew["spec"]["platforms"].as_array().expect("platforms");
    for arch in ["amd64", "arm64"] {
        let archive = format!("localpv-{v}-linux-{arch}.tar.gz");
        let sum = sums
            .lines()
            .find(|l| l.ends_with(&archive))
            .and_then(|l| l.split_whitespace().next())
            .unwrap_or_else(|| panic!("SHA256SUMS lacks {archive}: {sums}"));
        let p = platforms
            .iter()
            .find(|p| p["selector"]["matchLabels"]["arch"] == arch)
            .unwrap_or_else(|| panic!("krew manifest lacks linux/{arch}"));
        assert!(p["uri"].as_str().is_some_and(|u| u.ends_with(&archive)));
        assert_eq!(p["sha256"], sum, "krew sha256 of {archive}");
    }
    assert!(sums.contains(&format!("localpv-{v}.tgz")));
    let sbom: Value = serde_json::from_str(
        &fs::read_to_string(out.join(format!("localpv-{v}.spdx.json"))).expect("SBOM"),
    )
    .expect("SBOM parses");
    assert_eq!(sbom["spdxVersion"], "SPDX-2.3");
    let packages = sbom["packages"].as_array().expect("SBOM packages");
    assert!(
        packages
            .iter()
            .any(|p| p["name"] == "localpv" && p["versionInfo"] == v)
    );
    assert!(
        packages.iter().any(|p| p["name"] == "kube"),
        "SBOM lacks kube"
    );
}

/// The platforms of the manifest list at `reference`.
fn platforms(reference: &str) -> Vec<String> {
    let raw = run(
        "skopeo",
        &["inspect", "--raw", "--tls-verify=false", reference],
    );
    let list: Value = serde_json::from_str(&raw).expect("manifest list parses");
    list["manifests"]
        .as_array()
        .unwrap_or_else(|| panic!("{reference} is no manifest list: {raw}"))
        .iter()
        .map(|m| {
            format!(
                "{}/{}",
                m["platform"]["os"].as_str().unwrap_or_default(),
                m["platform"]["architecture"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

/// Unpacks the arm64 image of `reference` into `dir`/rootfs; its path.
fn arm64_rootfs(reference: &str, dir: &Path) -> PathBuf {
    let oci = dir.join("arm64-oci");
    run(
        "skopeo",
        &[
            "copy",
            "-q",
            "--src-tls-verify=false",
            "--override-arch",
            "arm64",
            reference,
            &format!("dir:{}", oci.display()),
        ],
    );
    let manifest: Value =
        serde_json::from_str(&fs::read_to_string(oci.join("manifest.json")).expect("manifest"))
            .expect("manifest parses");
    let rootfs = dir.join("rootfs");
    fs::create_dir_all(&rootfs).expect("rootfs dir");
    for layer in manifest["layers"].as_array().expect("layers") {
        let digest = layer["digest"].as_str().expect("layer digest");
        let blob = oci.join(digest.trim_start_matches("sha256:"));
        run(
            "tar",
            &[
                "-xf",
                &blob.display().to_string(),
                "-C",
                &rootfs.display().to_string(),
            ],
        );
    }
    rootfs
}

/// Runs the arm64 `localpv` of `rootfs` under qemu-user with the image's own libraries.
fn qemu(rootfs: &Path, args: &[&str]) -> String {
    let out = Command::new("qemu-aarch64-static")
        .arg("-L")
        .arg(rootfs)
        .arg(rootfs.join("usr/local/bin/localpv"))
        .args(args)
        .output()
        .expect("missing prerequisite: qemu-aarch64-static (apt-get install qemu-user-static)");
    assert!(
        out.status.success(),
        "arm64 localpv {} under qemu failed: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_release_pushed_to_a_local_registry_installs_from_its_oci_chart_on_real_nodes() {
    // NB: release.sh builds the CLI-only binary through `<target>/debug/localpv` (cargo has one output path per
    // profile), the file LOCALPV_REALNODE_BINARY names for the node image; the images are made once per process,
    // so making them first keeps a test starting beside this one from packing the CLI build.
    images();
    let work = tempfile::tempdir().expect("work dir");
    let port = free_port();
    let _registry = Registry::start(work.path(), port);
    let host = format!("127.0.0.1:{port}");
    let out = work.path().join("dist");
    let v = version();
    release(&host, &out);
    check_outputs(&out, &v);

    let reference = format!("docker://{host}/localpv:{v}");
    let mut found = platforms(&reference);
    found.sort();
    assert_eq!(found, ["linux/amd64", "linux/arm64"]);
    let rootfs = arm64_rootfs(&reference, work.path());
    assert!(qemu(&rootfs, &["--version"]).contains(&v));
    let digest = fs::read_to_string(out.join("image-digest")).expect("image-digest");
    let digest = digest.trim();
    assert!(digest.starts_with("sha256:"), "no digest: {digest}");

    let c = RealCluster::start(2).await;
    // The chart as pulled from the registry: its agent ConfigMap passes the arm64 binary's --check-config.
    let chart = format!("oci://{host}/charts/localpv");
    let rendered = c.helm(&[
        "template",
        "localpv",
        &chart,
        "--version",
        &v,
        "--plain-http",
    ]);
    let cm = rendered
        .split("\n---")
        .find(|d| d.contains("kind: ConfigMap") && d.contains("storageClassMap"))
        .expect("the chart renders the agent ConfigMap");
    let cm_file = work.path().join("configmap.yaml");
    fs::write(&cm_file, cm).expect("ConfigMap written");
    let state = work.path().join("state");
    fs::create_dir_all(&state).expect("state dir");
    let check = qemu(
        &rootfs,
        &[
            "node",
            "--check-config",
            "--config",
            &cm_file.display().to_string(),
            "--state-dir",
            &state.display().to_string(),
        ],
    );
    assert!(check.contains("is valid"), "{check}");

    for n in &c.nodes {
        n.pull_over_http(&host);
    }
    c.tmpfs("node-1", "vol1", "64M");
    c.kubectl(&["apply", "-f", "config/manifests/namespace.yaml"]);
    // Only what this cluster needs (its disk directories); the image is the chart's own: the registry's, by digest.
    let root = c.disk_root();
    let values = c.run_dir().join("release-values.yaml");
    let v_classes = json!({"extender": {"enabled": false}, "classes": [
        {"name": "local-storage", "hostDir": root.join("disks"), "volumeMode": "Filesystem",
         "storageClass": {"reclaimPolicy": "Delete"}}]});
    fs::write(
        &values,
        serde_yaml_ng::to_string(&v_classes).expect("values"),
    )
    .expect("values");
    c.helm(&[
        "install",
        RELEASE,
        &chart,
        "--version",
        &v,
        "--plain-http",
        "--namespace",
        NAMESPACE,
        "-f",
        &values.display().to_string(),
    ]);
    wait_agents_ready(&c).await;
    let pods: Api<Pod> = Api::namespaced(c.client(), NAMESPACE);
    let want = format!("{host}/localpv@{digest}");
    for p in pods.list(&ListParams::default()).await.expect("pods").items {
        let spec = p.spec.expect("pod spec");
        assert_eq!(spec.containers[0].image.as_deref(), Some(want.as_str()));
    }
}
