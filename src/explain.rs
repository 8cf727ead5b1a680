//! `localpv explain`: the extender's decision, offline, on a dumped cluster. The operator's answer to "why is my
//! pod Pending?".
//!
//! ```text
//!  --snapshot FILE (kubectl get pv,pvc,sc,nodes -A -o yaml: a List, or a multi-document stream; YAML or JSON)
//!  --pod FILE (one Pod, or a List/PodList of them) ──> extender::verbs (every Node of the snapshot is a
//!                                                      candidate), per pod ──> table | json
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
    /// The pod to place, YAML or JSON; a `List`/`PodList` (`kubectl get pods -o yaml`) or several documents
    /// explain every pod in it.
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
        source: serde_yaml_ng::Error,
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
    for (i, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let parse = |source| ExplainError::Parse {
            path: path.into(),
            document: i + 1,
            source,
        };
        let value = serde_yaml_ng::Value::deserialize(doc).map_err(parse)?;
        let value: Value = serde_yaml_ng::from_value(value).map_err(parse)?;
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

/// The pods of a `--pod` file: one Pod, or several (a `List`, a `PodList`, a multi-document stream).
#[derive(Debug)]
pub struct Pods {
    pub pods: Vec<Pod>,
    /// The file held a list or several documents: every pod is explained, under its own heading.
    pub many: bool,
}

/// Reads the pods of a `--pod` file. Anything that is not a Pod is refused by name: a wrong file must not be
/// explained as a pod without claims (which fits everywhere).
pub fn pods_from(path: &Path, text: &str) -> Result<Pods, ExplainError> {
    let (mut values, mut documents, mut listed) = (Vec::new(), 0, false);
    for (i, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let parse = |source| ExplainError::Parse {
            path: path.into(),
            document: i + 1,
            source,
        };
        let value = serde_yaml_ng::Value::deserialize(doc).map_err(parse)?;
        let value: Value = serde_yaml_ng::from_value(value).map_err(parse)?;
        if value.is_null() {
            continue;
        }
        documents += 1;
        listed |= value.is_array() || value.get("items").is_some();
        pod_values(value, &mut values);
    }
    if values.is_empty() {
        return Err(ExplainError::NoPod { path: path.into() });
    }
    let pods = values
        .into_iter()
        .map(|v| typed_pod(path, v))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Pods {
        pods,
        many: listed || documents > 1,
    })
}

/// Flattens lists; the items of a `PodList` (as the API server sends them) carry no `kind` of their own.
fn pod_values(value: Value, out: &mut Vec<Value>) {
    let item_kind = match kind_of(&value) {
        "PodList" => Some("Pod"),
        _ => None,
    };
    match value {
        Value::Null => {}
        Value::Object(mut obj) if obj.get("items").is_some_and(Value::is_array) => {
            if let Some(Value::Array(items)) = obj.remove("items") {
                for mut item in items {
                    if let (Some(kind), Value::Object(fields)) = (item_kind, &mut item) {
                        fields.entry("kind").or_insert_with(|| kind.into());
                    }
                    pod_values(item, out);
                }
            }
        }
        Value::Array(items) => items.into_iter().for_each(|item| pod_values(item, out)),
        other => out.push(other),
    }
}

fn typed_pod(path: &Path, value: Value) -> Result<Pod, ExplainError> {
    let name = value
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let object = |kind: &str, message: String| ExplainError::Object {
        path: path.into(),
        kind: kind.into(),
        name: name.clone(),
        message,
    };
    match kind_of(&value) {
        "Pod" => {}
        // A bare pod manifest without `kind` is still a pod when it has a spec.
        "" if value.get("spec").is_some_and(Value::is_object) => {}
        "" => return Err(object("object", "has neither a kind nor a pod spec".into())),
        other => {
            let message =
                "is not a Pod: give the pod to place, e.g. kubectl get pod NAME -o yaml".into();
            return Err(object(other, message));
        }
    }
    serde_json::from_value(value).map_err(|e| object("Pod", e.to_string()))
}

/// The first pod of a `--pod` file (see [`pods_from`]).
pub fn pod_from(path: &Path, text: &str) -> Result<Pod, ExplainError> {
    let mut pods = pods_from(path, text)?.pods;
    Ok(pods.swap_remove(0))
}

/// The decision for one pod on every node of a snapshot.
struct PodDecision {
    verdicts: Vec<(String, Verdict)>,
    priorities: Vec<crate::extender::wire::HostPriority>,
    assignments: BTreeMap<String, BTreeMap<String, String>>,
    filter: Value,
}

impl PodDecision {
    fn new(snap: &Snapshot, pod: Pod, strategy: Strategy) -> Result<PodDecision, ExplainError> {
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
        let (filter, _) = verbs::filter(args, snap);
        let filter = serde_json::to_value(filter).map_err(ExplainError::Encode)?;
        Ok(PodDecision {
            verdicts,
            priorities,
            assignments,
            filter,
        })
    }

    fn json(&self) -> Value {
        serde_json::json!({"filter": self.filter, "priorities": self.priorities, "assignments": self.assignments})
    }

    fn table(&self) -> String {
        let scores: BTreeMap<&str, i64> = self
            .priorities
            .iter()
            .map(|p| (p.host.as_str(), p.score))
            .collect();
        table(&self.verdicts, &scores, &self.assignments)
    }

    /// Fits every node and places nothing: the pod has no claim the extender decides on.
    fn no_local_claims(&self) -> bool {
        self.assignments.values().all(BTreeMap::is_empty)
            && self
                .verdicts
                .iter()
                .all(|(_, v)| matches!(v, Verdict::Fit(_)))
    }
}

fn pretty(doc: &Value) -> Result<String, ExplainError> {
    serde_json::to_string_pretty(doc)
        .map(|s| s + "\n")
        .map_err(ExplainError::Encode)
}

/// The decision for every node of `snap`, rendered as `output`.
pub fn explain(
    snap: &Snapshot,
    pod: Pod,
    strategy: Strategy,
    output: Output,
) -> Result<String, ExplainError> {
    let decision = PodDecision::new(snap, pod, strategy)?;
    match output {
        Output::Json => pretty(&decision.json()),
        Output::Table => Ok(decision.table()),
    }
}

/// Every pod of `pods`. One pod from a single document renders as [`explain`] does; a list renders each pod
/// under a `pod NAMESPACE/NAME` heading (JSON: an array of `{pod, filter, priorities, assignments}`), a pod with
/// no local claims in one line.
pub fn explain_all(
    snap: &Snapshot,
    pods: Pods,
    strategy: Strategy,
    output: Output,
) -> Result<String, ExplainError> {
    if !pods.many {
        if let Some(pod) = pods.pods.into_iter().next() {
            return explain(snap, pod, strategy, output);
        }
        return Ok(String::new());
    }
    let mut docs = Vec::new();
    let mut text = String::new();
    for pod in pods.pods {
        let key = format!("{}/{}", pod.namespace(), pod.name());
        let decision = PodDecision::new(snap, pod, strategy)?;
        match output {
            Output::Json => {
                let mut doc = decision.json();
                doc["pod"] = Value::String(key);
                docs.push(doc);
            }
            Output::Table if decision.no_local_claims() => {
                let _ = writeln!(
                    text,
                    "pod {key}: no local claims to place; fits every node\n"
                );
            }
            Output::Table => {
                let _ = writeln!(text, "pod {key}:\n{}", decision.table());
            }
        }
    }
    match output {
        Output::Json => pretty(&Value::Array(docs)),
        Output::Table => Ok(text),
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
    let pods = pods_from(&opts.pod, &read(&opts.pod)?)?;
    explain_all(&snap, pods, opts.score_strategy, opts.output)
}

#[cfg(test)]
mod tests;
