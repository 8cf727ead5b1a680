//! `localpv explain`: the extender's decision, offline, on a dumped cluster. The operator's answer to "why is my
//! pod Pending?".
//!
//! ```text
//!  --snapshot FILE (kubectl get pv,pvc,sc,nodes -A -o yaml: a List, or a multi-document stream; YAML or JSON)
//!  --pod FILE ──> extender::verbs (every Node of the snapshot is a candidate) ──> table | json
//! ```
//!
//! It runs exactly the pure code the server runs (`extender::verbs`), so its answer is the extender's answer for
//! the same state. Errors name the file and what is wrong with it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use serde::Deserialize;
use serde_json::Value;

use crate::extender::decide::Verdict;
use crate::extender::model::{Claim, Class, ModelError, Strategy, Volume, node_labels};
use crate::extender::snapshot::Snapshot;
use crate::extender::verbs;
use crate::extender::wire::{ExtenderArgs, Pod};

#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Output {
    #[default]
    Table,
    Json,
}

/// Flags of `localpv explain`.
#[derive(clap::Args, Debug, Clone)]
pub struct Options {
    /// Cluster objects (PVs, PVCs, StorageClasses, Nodes): a `kind: List` or a multi-document stream, YAML or JSON.
    #[arg(long)]
    pub snapshot: PathBuf,
    /// The pod to place, YAML or JSON.
    #[arg(long)]
    pub pod: PathBuf,
    #[arg(long, value_enum, default_value_t = Strategy::Binpack)]
    pub score_strategy: Strategy,
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    #[error("failed to read {path}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("failed to parse {path} (document {document}): {source}")]
    Parse {
        path: PathBuf,
        document: usize,
        source: serde_yaml::Error,
    },
    #[error("failed to read {kind} {name:?} in {path}: {message}")]
    Object {
        path: PathBuf,
        kind: String,
        name: String,
        message: String,
    },
    #[error("failed to find a Pod in {path}")]
    NoPod { path: PathBuf },
    #[error("failed to find any Node in {path}: every Node of the snapshot is a candidate")]
    NoNodes { path: PathBuf },
    #[error("failed to encode the result as JSON")]
    Encode(#[source] serde_json::Error),
}

/// Every object of a file, `List`s flattened, in file order.
fn objects(path: &Path, text: &str) -> Result<Vec<Value>, ExplainError> {
    let mut out = Vec::new();
    for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let parse = |source| ExplainError::Parse {
            path: path.into(),
            document: i + 1,
            source,
        };
        let value = serde_yaml::Value::deserialize(doc).map_err(parse)?;
        let value: Value = serde_yaml::from_value(value).map_err(parse)?;
        flatten(value, &mut out);
    }
    Ok(out)
}

fn flatten(value: Value, out: &mut Vec<Value>) {
    match value {
        Value::Null => {}
        Value::Object(mut obj) if obj.get("items").is_some_and(Value::is_array) => {
            if let Some(Value::Array(items)) = obj.remove("items") {
                items.into_iter().for_each(|item| flatten(item, out));
            }
        }
        Value::Array(items) => items.into_iter().for_each(|item| flatten(item, out)),
        other => out.push(other),
    }
}

fn kind_of(v: &Value) -> &str {
    v.get("kind").and_then(Value::as_str).unwrap_or("")
}

fn typed<K: serde::de::DeserializeOwned, T>(
    path: &Path,
    v: Value,
    convert: fn(&K) -> Result<T, ModelError>,
) -> Result<T, ExplainError> {
    let kind = kind_of(&v).to_string();
    let name = v
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let object = |message: String| ExplainError::Object {
        path: path.into(),
        kind: kind.clone(),
        name: name.clone(),
        message,
    };
    let k: K = serde_json::from_value(v).map_err(|e| object(e.to_string()))?;
    convert(&k).map_err(|e| object(e.to_string()))
}

/// Builds a snapshot from the objects of a snapshot file; other kinds (Pods, Events...) are ignored.
pub fn snapshot_from(path: &Path, text: &str) -> Result<Snapshot, ExplainError> {
    let (mut volumes, mut claims, mut classes, mut nodes) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for v in objects(path, text)? {
        match kind_of(&v) {
            "PersistentVolume" => {
                volumes.push(typed::<PersistentVolume, _>(path, v, Volume::from_pv)?)
            }
            "PersistentVolumeClaim" => {
                claims.push(typed::<PersistentVolumeClaim, _>(path, v, Claim::from_pvc)?)
            }
            "StorageClass" => classes.push(typed::<StorageClass, _>(
                path,
                v,
                Class::from_storage_class,
            )?),
            "Node" => nodes.push(typed::<Node, _>(path, v, node_labels)?),
            _ => {}
        }
    }
    if nodes.is_empty() {
        return Err(ExplainError::NoNodes { path: path.into() });
    }
    Ok(Snapshot::new(volumes, claims, classes, nodes))
}

pub fn pod_from(path: &Path, text: &str) -> Result<Pod, ExplainError> {
    let found = objects(path, text)?
        .into_iter()
        .find(|v| matches!(kind_of(v), "Pod" | ""));
    let value = found.ok_or_else(|| ExplainError::NoPod { path: path.into() })?;
    let name = value
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    serde_json::from_value(value).map_err(|e| ExplainError::Object {
        path: path.into(),
        kind: "Pod".into(),
        name,
        message: e.to_string(),
    })
}

/// The decision for every node of `snap`, rendered as `output`.
pub fn explain(
    snap: &Snapshot,
    pod: Pod,
    strategy: Strategy,
    output: Output,
) -> Result<String, ExplainError> {
    let mut names: Vec<String> = snap.node_names().map(String::from).collect();
    names.sort();
    let args = ExtenderArgs {
        pod,
        nodes: None,
        node_names: Some(names),
    };
    let (verdicts, _) = verbs::evaluate(&args, snap, true);
    let priorities = verbs::prioritize(&args, snap, strategy);
    let assignments = verbs::assignments(snap, &verdicts);
    match output {
        Output::Json => {
            let (filter, _) = verbs::filter(args, snap);
            let doc = serde_json::json!({"filter": filter, "priorities": priorities, "assignments": assignments});
            serde_json::to_string_pretty(&doc)
                .map(|s| s + "\n")
                .map_err(ExplainError::Encode)
        }
        Output::Table => {
            let scores: BTreeMap<&str, i64> = priorities
                .iter()
                .map(|p| (p.host.as_str(), p.score))
                .collect();
            Ok(table(&verdicts, &scores, &assignments))
        }
    }
}

fn table(
    verdicts: &[(String, Verdict)],
    scores: &BTreeMap<&str, i64>,
    assignments: &BTreeMap<String, BTreeMap<String, String>>,
) -> String {
    let rows: Vec<[String; 4]> = verdicts
        .iter()
        .map(|(node, verdict)| {
            let (label, detail) = match verdict {
                Verdict::Fit(fit) => {
                    let chosen = assignments
                        .get(node)
                        .into_iter()
                        .flatten()
                        .map(|(c, pv)| format!("{c} -> {pv}"));
                    let chosen: Vec<String> = chosen.collect();
                    let mut detail = if chosen.is_empty() {
                        "no local claims to place".into()
                    } else {
                        chosen.join(", ")
                    };
                    if fit.greedy_misses {
                        detail.push_str(
                            " (the in-tree binder's greedy order misses this assignment)",
                        );
                    }
                    ("Fits", detail)
                }
                Verdict::Failed(reason) => ("Failed", reason.clone()),
                Verdict::Unresolvable(reason) => ("Unresolvable", reason.clone()),
            };
            let score = scores
                .get(node.as_str())
                .map(i64::to_string)
                .unwrap_or_default();
            [node.clone(), label.into(), score, detail]
        })
        .collect();
    let header = [
        "NODE".to_string(),
        "VERDICT".into(),
        "SCORE".into(),
        "PVS / REASON".into(),
    ];
    let widths: Vec<usize> = (0..3)
        .map(|i| {
            rows.iter()
                .chain([&header])
                .map(|r| r[i].len())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in [&header].into_iter().chain(&rows) {
        let _ = writeln!(
            out,
            "{:w0$}  {:w1$}  {:w2$}  {}",
            row[0],
            row[1],
            row[2],
            row[3],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2]
        );
    }
    out
}

fn read(path: &Path) -> Result<String, ExplainError> {
    std::fs::read_to_string(path).map_err(|source| ExplainError::Read {
        path: path.into(),
        source,
    })
}

/// `localpv explain`: reads both files and renders the decision.
pub fn run(opts: &Options) -> Result<String, ExplainError> {
    let snap = snapshot_from(&opts.snapshot, &read(&opts.snapshot)?)?;
    let pod = pod_from(&opts.pod, &read(&opts.pod)?)?;
    explain(&snap, pod, opts.score_strategy, opts.output)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SNAPSHOT_YAML: &str = r#"
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {kubernetes.io/hostname: n1}}
---
apiVersion: v1
kind: Node
metadata: {name: n2, labels: {kubernetes.io/hostname: n2}}
---
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: PersistentVolume
  metadata: {name: pv-small}
  spec:
    capacity: {storage: 10Gi}
    accessModes: [ReadWriteOnce]
    storageClassName: local
    local: {path: /mnt/disks/vol1}
    nodeAffinity:
      required:
        nodeSelectorTerms:
        - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [n1]}]
  status: {phase: Available}
- apiVersion: v1
  kind: PersistentVolumeClaim
  metadata: {name: data, namespace: web}
  spec:
    accessModes: [ReadWriteOnce]
    storageClassName: local
    resources: {requests: {storage: 8Gi}}
- apiVersion: storage.k8s.io/v1
  kind: StorageClass
  metadata: {name: local}
  provisioner: kubernetes.io/no-provisioner
  volumeBindingMode: WaitForFirstConsumer
- apiVersion: v1
  kind: Event
  metadata: {name: ignored}
"#;

    const POD_JSON: &str = r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "app", "namespace": "web"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}],
                 "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}}"#;

    fn run_on(snapshot: &str, pod: &str, output: Output) -> Result<String, ExplainError> {
        let snap = snapshot_from(Path::new("snap.yaml"), snapshot)?;
        let pod = pod_from(Path::new("pod.json"), pod)?;
        explain(&snap, pod, Strategy::Binpack, output)
    }

    #[test]
    fn json_output_has_filter_priorities_and_assignments() {
        let out = run_on(SNAPSHOT_YAML, POD_JSON, Output::Json).expect("explains");
        let v: Value = serde_json::from_str(&out).expect("valid JSON");
        assert_eq!(v["filter"]["NodeNames"], serde_json::json!(["n1"]));
        assert_eq!(v["filter"]["Nodes"], Value::Null);
        assert_eq!(
            v["filter"]["FailedAndUnresolvableNodes"]["n2"],
            "claim web/data: no PV of class local on node"
        );
        assert_eq!(
            v["priorities"],
            serde_json::json!([{"Host": "n1", "Score": 8}, {"Host": "n2", "Score": 0}])
        );
        assert_eq!(
            v["assignments"],
            serde_json::json!({"n1": {"web/data": "pv-small"}})
        );
    }

    #[test]
    fn table_output_shows_verdict_score_and_chosen_pvs_per_node() {
        let out = run_on(SNAPSHOT_YAML, POD_JSON, Output::Table).expect("explains");
        let lines: Vec<Vec<&str>> = out
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(lines[0], ["NODE", "VERDICT", "SCORE", "PVS", "/", "REASON"]);
        assert_eq!(lines[1], ["n1", "Fits", "8", "web/data", "->", "pv-small"]);
        assert_eq!(lines[2][..3], ["n2", "Unresolvable", "0"]);
        assert!(out.contains("claim web/data: no PV of class local on node"));
    }

    #[test]
    fn a_json_list_snapshot_works_like_yaml() {
        let yaml: serde_yaml::Value = serde_yaml::Deserializer::from_str(SNAPSHOT_YAML)
            .map(|d| serde_yaml::Value::deserialize(d).expect("valid yaml"))
            .fold(serde_yaml::Value::Sequence(vec![]), |mut acc, v| {
                if let serde_yaml::Value::Sequence(s) = &mut acc {
                    s.push(v);
                }
                acc
            });
        let json = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": yaml});
        let out = run_on(&json.to_string(), POD_JSON, Output::Json).expect("explains");
        assert!(out.contains("pv-small"));
    }

    #[test]
    fn errors_name_the_file_and_the_problem() {
        let bad_yaml = run_on("kind: Node\nmetadata: [unclosed", POD_JSON, Output::Table)
            .expect_err("bad yaml");
        assert!(
            bad_yaml
                .to_string()
                .starts_with("failed to parse snap.yaml (document 1): "),
            "{bad_yaml}"
        );
        let bad_pv = "kind: PersistentVolume\nmetadata: {name: pv-x}\nspec: {capacity: 3}\n---\nkind: Node\nmetadata: {name: n1}";
        let err = run_on(bad_pv, POD_JSON, Output::Table).expect_err("bad PV");
        assert!(
            err.to_string()
                .starts_with("failed to read PersistentVolume \"pv-x\" in snap.yaml: "),
            "{err}"
        );
        let no_nodes = run_on(
            "kind: StorageClass\nmetadata: {name: x}\nprovisioner: p",
            POD_JSON,
            Output::Table,
        );
        assert!(
            no_nodes
                .expect_err("no nodes")
                .to_string()
                .contains("failed to find any Node in snap.yaml")
        );
        let no_pod = run_on(
            SNAPSHOT_YAML,
            "kind: Service\nmetadata: {name: s}",
            Output::Table,
        );
        assert_eq!(
            no_pod.expect_err("no pod").to_string(),
            "failed to find a Pod in pod.json"
        );
        let missing = run(&Options {
            snapshot: "/nonexistent/snap.yaml".into(),
            pod: "/nonexistent/pod.yaml".into(),
            score_strategy: Strategy::Binpack,
            output: Output::Table,
        });
        assert_eq!(
            missing.expect_err("missing file").to_string(),
            "failed to read /nonexistent/snap.yaml"
        );
    }

    #[test]
    fn a_pod_without_local_claims_fits_everywhere_with_a_neutral_score() {
        let pod = r#"{"kind": "Pod", "metadata": {"name": "p"}, "spec": {"volumes": [{"name": "t", "emptyDir": {}}]}}"#;
        let out = run_on(SNAPSHOT_YAML, pod, Output::Table).expect("explains");
        assert!(
            out.lines()
                .skip(1)
                .all(|l| l.contains("Fits") && l.contains("no local claims to place")),
            "{out}"
        );
    }
}
