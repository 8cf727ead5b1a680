//! The kube-scheduler extender wire format (REFERENCE section 5).
//!
//! The Go types carry no json tags, so keys are PascalCase and Go matches them case-insensitively: the top-level
//! keys of `ExtenderArgs` are matched ignoring ASCII case here too, and every field tolerates `null`.
//!
//! Only what the decision needs is decoded: the pod's name, namespace and volumes, and each node's name and
//! labels. Node objects are kept as raw JSON and echoed back unchanged for the survivors, so a 5,000-node
//! request is never decoded into full `v1.Node` structs.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;

use super::labels::Labels;

/// `ExtenderArgs`: the pod and the candidate nodes, as objects (`Nodes`) or names (`NodeNames`).
#[derive(Debug, Default)]
pub struct ExtenderArgs {
    pub pod: Pod,
    pub nodes: Option<Vec<WireNode>>,
    pub node_names: Option<Vec<String>>,
}

impl<'de> Deserialize<'de> for ExtenderArgs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(ArgsVisitor)
    }
}

struct ArgsVisitor;

impl<'de> Visitor<'de> for ArgsVisitor {
    type Value = ExtenderArgs;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an ExtenderArgs object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ExtenderArgs, A::Error> {
        let mut args = ExtenderArgs::default();
        while let Some(key) = map.next_key::<String>()? {
            if key.eq_ignore_ascii_case("pod") {
                args.pod = map.next_value::<Option<Pod>>()?.unwrap_or_default();
            } else if key.eq_ignore_ascii_case("nodes") {
                args.nodes = map
                    .next_value::<Option<NodeList>>()?
                    .map(|l| l.items.unwrap_or_default());
            } else if key.eq_ignore_ascii_case("nodenames") {
                args.node_names = map
                    .next_value::<Option<Vec<Option<String>>>>()?
                    .map(|names| names.into_iter().flatten().collect());
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(args)
    }
}

/// The parts of a `v1.Pod` the decision reads.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Pod {
    pub metadata: Option<PodMeta>,
    pub spec: Option<PodSpec>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct PodMeta {
    pub name: Option<String>,
    pub namespace: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct PodSpec {
    pub volumes: Option<Vec<Option<PodVolume>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodVolume {
    pub name: Option<String>,
    pub persistent_volume_claim: Option<ClaimSource>,
    pub ephemeral: Option<IgnoredAny>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ClaimSource {
    pub claim_name: Option<String>,
}

impl Pod {
    pub fn namespace(&self) -> &str {
        self.metadata
            .as_ref()
            .and_then(|m| m.namespace.as_deref())
            .filter(|n| !n.is_empty())
            .unwrap_or("default")
    }

    pub fn name(&self) -> &str {
        self.metadata
            .as_ref()
            .and_then(|m| m.name.as_deref())
            .unwrap_or("")
    }

    /// Names of the claims the pod's volumes use; a generic ephemeral volume's claim is `<pod>-<volume>`.
    pub fn claim_names(&self) -> Vec<String> {
        let volumes = self.spec.as_ref().and_then(|s| s.volumes.as_ref());
        let mut names = Vec::new();
        for v in volumes.into_iter().flatten().flatten() {
            if let Some(claim) = v
                .persistent_volume_claim
                .as_ref()
                .and_then(|c| c.claim_name.as_ref())
            {
                names.push(claim.clone());
            } else if v.ephemeral.is_some() {
                names.push(format!(
                    "{}-{}",
                    self.name(),
                    v.name.as_deref().unwrap_or("")
                ));
            }
        }
        names
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct NodeList {
    items: Option<Vec<WireNode>>,
}

/// One node of a `Nodes` list: its raw JSON (echoed back) and what the decision reads from it.
#[derive(Debug)]
pub struct WireNode {
    pub raw: Box<RawValue>,
    pub name: String,
    pub labels: Labels,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct LeanNode {
    metadata: Option<LeanMeta>,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct LeanMeta {
    name: Option<String>,
    labels: Option<BTreeMap<String, Option<String>>>,
}

impl<'de> Deserialize<'de> for WireNode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(d)?;
        let lean: Option<LeanNode> = serde_json::from_str(raw.get()).map_err(de::Error::custom)?;
        let meta = lean.and_then(|n| n.metadata).unwrap_or_default();
        let labels = meta
            .labels
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.unwrap_or_default()))
            .collect();
        Ok(WireNode {
            raw,
            name: meta.name.unwrap_or_default(),
            labels,
        })
    }
}

/// The `Nodes` field of a filter result: a `v1.NodeList` holding the survivors' raw objects.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct NodeListOut {
    pub items: Vec<Box<RawValue>>,
}

/// `ExtenderFilterResult`.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ExtenderFilterResult {
    pub nodes: Option<NodeListOut>,
    pub node_names: Option<Vec<String>>,
    pub failed_nodes: BTreeMap<String, String>,
    pub failed_and_unresolvable_nodes: BTreeMap<String, String>,
    pub error: String,
}

impl ExtenderFilterResult {
    /// A result the scheduler reads as an error for this pod (it then retries), keeping the input form.
    pub fn error(message: String, names_mode: bool) -> ExtenderFilterResult {
        ExtenderFilterResult {
            nodes: (!names_mode).then(NodeListOut::default),
            node_names: names_mode.then(Vec::new),
            error: message,
            ..Default::default()
        }
    }
}

/// One entry of a `HostPriorityList`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct HostPriority {
    pub host: String,
    pub score: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_match_ignoring_case_and_nulls_are_tolerated() {
        let body = r#"{"pod":{"metadata":{"name":"p","namespace":null},"spec":{"volumes":[null,
            {"name":"v","persistentVolumeClaim":{"claimName":"data"}},{"name":"e","ephemeral":{}}]}},
            "NODENAMES":["n1",null],"nodes":null,"Extra":1}"#;
        let args: ExtenderArgs = serde_json::from_str(body).expect("valid args");
        assert_eq!(args.pod.namespace(), "default");
        assert_eq!(args.pod.claim_names(), ["data", "p-e"]);
        assert_eq!(args.node_names, Some(vec!["n1".to_string()]));
        assert!(args.nodes.is_none());
    }

    #[test]
    fn nodes_keep_their_raw_json_and_expose_name_and_labels() {
        let body = r#"{"Pod":null,"Nodes":{"items":[{"metadata":{"name":"n1","labels":{"a":"b","c":null}},
            "status":{"capacity":{"cpu":"4"}}}]},"NodeNames":null}"#;
        let args: ExtenderArgs = serde_json::from_str(body).expect("valid args");
        let nodes = args.nodes.expect("nodes given");
        assert_eq!(nodes[0].name, "n1");
        assert_eq!(nodes[0].labels.get("a").map(String::as_str), Some("b"));
        assert_eq!(nodes[0].labels.get("c").map(String::as_str), Some(""));
        assert!(nodes[0].raw.get().contains(r#""cpu":"4""#));
        assert!(args.pod.claim_names().is_empty());
    }

    #[test]
    fn results_use_pascal_case_keys() {
        let r = ExtenderFilterResult::error("boom".into(), true);
        let json = serde_json::to_string(&r).expect("serialisable");
        assert_eq!(
            json,
            r#"{"Nodes":null,"NodeNames":[],"FailedNodes":{},"FailedAndUnresolvableNodes":{},"Error":"boom"}"#
        );
        let p = serde_json::to_string(&HostPriority {
            host: "n1".into(),
            score: 7,
        })
        .expect("serialisable");
        assert_eq!(p, r#"{"Host":"n1","Score":7}"#);
    }
}
