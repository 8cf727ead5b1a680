//! docs/migration.md's "Step by step" as the migrate scenario runs it: the doc's fenced `sh` blocks, the list the
//! test expects them to be (a doc change without the test fails), and the operator's shell that runs them with
//! this machine's only substitutions (the run's disk directory for `/mnt/disks`, the locally built image on
//! `helm install localpv`).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::realnode::RealCluster;

pub const DOC: &str = "docs/migration.md";

/// What the test does with each fenced `sh` block of the doc's "Step by step", in the doc's order.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Use {
    Run,
    /// The other way of step 4 (the old values file); the chart_reference_values test covers those files.
    Alternative,
}

/// The doc's blocks as the test expects them (indentation removed).
pub const BLOCKS: &[(Use, &str)] = &[
    (
        Use::Run,
        "kubectl get pv -o custom-columns='NAME:.metadata.name,UID:.metadata.uid,STATUS:.status.phase,CLAIM:.spec.claimRef.name,PATH:.spec.local.path,BY:.metadata.annotations.pv\\.kubernetes\\.io/provisioned-by' \\
  | tee pvs-before.txt
kubectl -n kube-system get configmap local-static-provisioner-config -o yaml > lsp-config.yaml
",
    ),
    (
        Use::Run,
        "localpv node --check-config --config lsp-config.yaml\n",
    ),
    (
        Use::Run,
        "kubectl -n kube-system delete daemonset local-static-provisioner --cascade=foreground\n",
    ),
    (
        Use::Run,
        "helm install localpv charts/localpv --namespace kube-system \\
  --set existingConfigMap=local-static-provisioner-config \\
  --set 'node.hostDirs[0].hostPath=/mnt/disks' --set 'node.hostDirs[0].mountPath=/mnt/disks' \\
  --set 'classes=null'
",
    ),
    (
        Use::Run,
        "kubectl apply --server-side --force-conflicts -f charts/localpv/crds/
helm upgrade localpv charts/localpv --namespace kube-system --reset-then-reuse-values
",
    ),
    (
        Use::Alternative,
        "helm install localpv charts/localpv --namespace kube-system -f lsp-values.yaml\n",
    ),
    (
        Use::Run,
        "kubectl get events -A --field-selector reason=Adopted
kubectl get pv -L localpv.io/node
localpv disks
",
    ),
    (
        Use::Run,
        "kubectl get pv -o custom-columns='NAME:.metadata.name,UID:.metadata.uid,STATUS:.status.phase,CLAIM:.spec.claimRef.name,PATH:.spec.local.path,BY:.metadata.annotations.pv\\.kubernetes\\.io/provisioned-by' \\
  | diff pvs-before.txt - && echo \"every PV kept\"
",
    ),
    (
        Use::Run,
        "kubectl -n kube-system delete secret -l owner=helm,name=local-static-provisioner
kubectl -n kube-system delete serviceaccount,role,rolebinding,service -l app.kubernetes.io/instance=local-static-provisioner
kubectl delete clusterrole,clusterrolebinding -l app.kubernetes.io/instance=local-static-provisioner
",
    ),
];

/// The fenced `sh` blocks of the doc's "## Step by step" section, dedented.
pub fn doc_blocks() -> Vec<String> {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(DOC))
        .expect("docs/migration.md readable");
    let start = text
        .find("## Step by step")
        .expect("docs/migration.md has a \"## Step by step\" section");
    let section = &text[start..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    let mut blocks = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for line in section.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        match &mut current {
            None if trimmed == "```sh" => current = Some((indent, String::new())),
            Some(_) if trimmed == "```" => blocks.push(current.take().expect("in a block").1),
            Some((ind, body)) => {
                body.push_str(line.get(*ind..).unwrap_or(trimmed));
                body.push('\n');
            }
            None => {}
        }
    }
    blocks
}

/// The operator's shell: kubectl, helm and localpv on PATH, the cluster's kubeconfig, a working directory of its
/// own where `charts/` is the repository's.
pub struct Operator<'a> {
    c: &'a RealCluster,
    pub dir: PathBuf,
    bin: PathBuf,
}

impl<'a> Operator<'a> {
    pub fn new(c: &'a RealCluster) -> Operator<'a> {
        let dir = c.run_dir().join("operator");
        let bin = c.run_dir().join("operator-bin");
        std::fs::create_dir_all(&dir).expect("operator dir");
        std::fs::create_dir_all(&bin).expect("operator bin dir");
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        std::os::unix::fs::symlink(repo.join("charts"), dir.join("charts")).expect("charts link");
        for tool in ["kubectl", "helm"] {
            std::os::unix::fs::symlink(c.plane.bin.join(tool), bin.join(tool)).expect("tool link");
        }
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_localpv"), bin.join("localpv"))
            .expect("localpv link");
        Operator { c, dir, bin }
    }

    /// Runs a block of the doc with this machine's substitutions; panics with its output when it fails.
    pub fn run(&self, block: &str) -> String {
        let disks = self.c.disk_root().join("disks");
        let script = block
            .replace("/mnt/disks", &disks.display().to_string())
            .replace(
                "helm install localpv charts/localpv",
                &format!(
                    "helm install localpv charts/localpv --set image.repository={} --set image.tag={} \
                     --set image.pullPolicy=Never",
                    crate::support::realnode::images::LOCALPV_REPOSITORY,
                    self.c.images.localpv_tag
                ),
            );
        let home = self.c.run_dir().join("helm-home");
        let out = Command::new("sh")
            .args(["-e", "-c", &script])
            .current_dir(&self.dir)
            .env(
                "PATH",
                format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", self.bin.display()),
            )
            .env("KUBECONFIG", &self.c.plane.admin_kubeconfig)
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data"))
            .output()
            .expect("sh runs");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success(),
            "{DOC}'s commands failed ({}):\n{script}\n----- output -----\n{text}",
            out.status
        );
        eprintln!("$ {script}{text}");
        text
    }
}
