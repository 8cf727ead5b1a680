//! Label matching as the in-tree scheduler does it: PVC label selectors against PV labels, and PV node affinity
//! against node labels. Pure; the extender's decision and the node agent's planner (`plan::owners`: may another
//! PV be mounted on this node?) both match through it.
//!
//! Both are compiled once when an object enters the extender's cache (`Selector::compile`, `NodeAffinity::compile`) so a
//! decision only compares strings. Compilation never fails: an invalid requirement compiles to something that
//! matches nothing, which is what the in-tree code ends up doing with it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, VolumeNodeAffinity};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

pub type Labels = BTreeMap<String, String>;

pub use crate::contract::HOSTNAME_LABEL;

/// A node's labels as a decision reads them: its hostname for the PV index on every node, the whole map only for
/// a PV whose node affinity says more than a hostname. A request's nodes build the map on first use (most never
/// do), the cache's nodes have it at hand.
pub trait NodeLabels: std::fmt::Debug {
    fn hostname(&self) -> Option<&str>;
    fn all(&self) -> &Labels;
}

impl NodeLabels for Labels {
    fn hostname(&self) -> Option<&str> {
        self.get(HOSTNAME_LABEL).map(String::as_str)
    }

    fn all(&self) -> &Labels {
        self
    }
}

/// Reading one label by key: a node's whole map, or a PV's compact list.
pub trait LabelSet {
    fn label(&self, key: &str) -> Option<&str>;
}

impl LabelSet for Labels {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

/// A PV's labels, read only by claim selectors: one sorted allocation instead of a map. A `BTreeMap` with two
/// labels costs a whole 11-entry node (over 500 bytes), and there is one per cached PV.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PvLabels(Box<[(Box<str>, Box<str>)]>);

impl PvLabels {
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<&Labels> for PvLabels {
    fn from(labels: &Labels) -> PvLabels {
        // NB: a BTreeMap iterates in key order, so the list is sorted and `label` can search it.
        let pairs = labels
            .iter()
            .map(|(k, v)| (k.as_str().into(), v.as_str().into()));
        PvLabels(pairs.collect())
    }
}

impl LabelSet for PvLabels {
    fn label(&self, key: &str) -> Option<&str> {
        let found = self.0.binary_search_by(|(k, _)| (**k).cmp(key)).ok()?;
        Some(&self.0[found].1)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Op {
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    DoesNotExist,
    Gt(i64),
    Lt(i64),
    /// An unknown operator or malformed values: never satisfied.
    Invalid,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Requirement {
    key: String,
    op: Op,
}

impl Requirement {
    fn matches<L: LabelSet + ?Sized>(&self, labels: &L) -> bool {
        let value = labels.label(&self.key);
        match &self.op {
            Op::In(values) => value.is_some_and(|v| values.iter().any(|x| x == v)),
            Op::NotIn(values) => value.is_none_or(|v| !values.iter().any(|x| x == v)),
            Op::Exists => value.is_some(),
            Op::DoesNotExist => value.is_none(),
            Op::Gt(bound) => value
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v > *bound),
            Op::Lt(bound) => value
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v < *bound),
            Op::Invalid => false,
        }
    }
}

fn compile_op(operator: &str, values: Vec<String>, numeric: bool) -> Op {
    match operator {
        "In" if !values.is_empty() => Op::In(values),
        "NotIn" if !values.is_empty() => Op::NotIn(values),
        "Exists" if values.is_empty() => Op::Exists,
        "DoesNotExist" if values.is_empty() => Op::DoesNotExist,
        "Gt" | "Lt" if numeric && values.len() == 1 => match values[0].parse::<i64>() {
            Ok(n) if operator == "Gt" => Op::Gt(n),
            Ok(n) => Op::Lt(n),
            Err(_) => Op::Invalid,
        },
        _ => Op::Invalid,
    }
}

/// A PVC's `spec.selector`: `matchLabels` and `matchExpressions`, all ANDed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    requirements: Vec<Requirement>,
}

impl Selector {
    pub fn compile(selector: &LabelSelector) -> Selector {
        let mut requirements = Vec::new();
        for (key, value) in selector.match_labels.iter().flatten() {
            requirements.push(Requirement {
                key: key.clone(),
                op: Op::In(vec![value.clone()]),
            });
        }
        for expr in selector.match_expressions.iter().flatten() {
            let values = expr.values.clone().unwrap_or_default();
            requirements.push(Requirement {
                key: expr.key.clone(),
                op: compile_op(&expr.operator, values, false),
            });
        }
        Selector { requirements }
    }

    pub fn matches<L: LabelSet + ?Sized>(&self, labels: &L) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }
}

/// One `nodeSelectorTerms` entry: its expressions ANDed. `matchFields` cannot match a node known only by its
/// labels, so a term that has any compiles to `never`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Term {
    requirements: Vec<Requirement>,
    never: bool,
}

impl Term {
    fn matches(&self, labels: &Labels) -> bool {
        !self.never && self.requirements.iter().all(|r| r.matches(labels))
    }

    /// The hostnames this term is limited to, when it has a `kubernetes.io/hostname In [..]` requirement.
    fn hostnames(&self) -> Option<&[String]> {
        if self.never {
            return Some(&[]);
        }
        self.requirements.iter().find_map(|r| match &r.op {
            Op::In(values) if r.key == HOSTNAME_LABEL => Some(values.as_slice()),
            _ => None,
        })
    }
}

/// A PV's `spec.nodeAffinity.required`: terms ORed. `None` required means every node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeAffinity(Compiled);

#[derive(Clone, Debug, Default, PartialEq, Eq)]
enum Compiled {
    /// No required affinity: every node.
    #[default]
    Any,
    /// Exactly `kubernetes.io/hostname In [..]` (what local PVs carry), kept as its values alone: one small
    /// allocation per PV instead of a term, a requirement and their vectors. Being found under a node's hostname
    /// in the index proves a match.
    Hostnames(Box<[Box<str>]>),
    Terms(Box<[Term]>),
}

impl NodeAffinity {
    pub fn compile(affinity: Option<&VolumeNodeAffinity>) -> NodeAffinity {
        let Some(required) = affinity.and_then(|a| a.required.as_ref()) else {
            return NodeAffinity(Compiled::Any);
        };
        let terms = required.node_selector_terms.iter().map(|term| {
            let exprs: &[NodeSelectorRequirement] =
                term.match_expressions.as_deref().unwrap_or(&[]);
            let has_fields = term.match_fields.as_ref().is_some_and(|f| !f.is_empty());
            let requirements: Vec<Requirement> = exprs
                .iter()
                .map(|e| Requirement {
                    key: e.key.clone(),
                    op: compile_op(&e.operator, e.values.clone().unwrap_or_default(), true),
                })
                .collect();
            // NB: a term with neither expressions nor fields selects nothing (in-tree semantics), not everything.
            let never = has_fields || requirements.is_empty();
            Term {
                requirements,
                never,
            }
        });
        let mut terms: Vec<Term> = terms.collect();
        if let [t] = terms.as_mut_slice()
            && !t.never
            && let [r] = t.requirements.as_mut_slice()
            && r.key == HOSTNAME_LABEL
            && let Op::In(values) = &mut r.op
        {
            let values = std::mem::take(values)
                .into_iter()
                .map(String::into_boxed_str);
            return NodeAffinity(Compiled::Hostnames(values.collect()));
        }
        NodeAffinity(Compiled::Terms(terms.into_boxed_slice()))
    }

    pub fn matches(&self, labels: &Labels) -> bool {
        match &self.0 {
            Compiled::Any => true,
            Compiled::Hostnames(values) => labels
                .get(HOSTNAME_LABEL)
                .is_some_and(|v| values.iter().any(|x| **x == **v)),
            Compiled::Terms(terms) => terms.iter().any(|t| t.matches(labels)),
        }
    }

    /// Whether finding this PV under a node's hostname (`hostnames`) already proves the affinity matches it.
    pub fn implied_by_hostname(&self) -> bool {
        matches!(self.0, Compiled::Hostnames(_))
    }

    /// Hostname label values outside which this affinity can never match, or `None` when it may match nodes of
    /// any hostname. Used only to index; every decision still evaluates `matches`.
    pub fn hostnames(&self) -> Option<Vec<String>> {
        let mut all: Vec<String> = match &self.0 {
            Compiled::Any => return None,
            Compiled::Hostnames(values) => values.iter().map(|v| v.to_string()).collect(),
            Compiled::Terms(terms) => {
                let mut all = Vec::new();
                for term in terms {
                    all.extend(term.hostnames()?.iter().cloned());
                }
                all
            }
        };
        all.sort();
        all.dedup();
        Some(all)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeSelector, NodeSelectorTerm};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
    use rstest::rstest;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn req(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirement {
        NodeSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: Some(values.iter().map(|v| v.to_string()).collect()),
        }
    }

    fn affinity(terms: Vec<NodeSelectorTerm>) -> NodeAffinity {
        let a = VolumeNodeAffinity {
            required: Some(NodeSelector {
                node_selector_terms: terms,
            }),
        };
        NodeAffinity::compile(Some(&a))
    }

    fn term(exprs: Vec<NodeSelectorRequirement>) -> NodeSelectorTerm {
        NodeSelectorTerm {
            match_expressions: Some(exprs),
            match_fields: None,
        }
    }

    #[rstest]
    #[case::in_matches(req("zone", "In", &["a", "b"]), true)]
    #[case::in_other_value(req("zone", "In", &["c"]), false)]
    #[case::not_in_other_value(req("zone", "NotIn", &["c"]), true)]
    #[case::not_in_missing_label(req("rack", "NotIn", &["c"]), true)]
    #[case::exists(req("zone", "Exists", &[]), true)]
    #[case::does_not_exist(req("zone", "DoesNotExist", &[]), false)]
    #[case::gt(req("cpus", "Gt", &["4"]), true)]
    #[case::lt(req("cpus", "Lt", &["4"]), false)]
    #[case::gt_non_numeric_label(req("zone", "Gt", &["1"]), false)]
    #[case::unknown_operator(req("zone", "Near", &["a"]), false)]
    #[case::in_without_values(req("zone", "In", &[]), false)]
    fn node_affinity_operators_follow_the_in_tree_rules(
        #[case] r: NodeSelectorRequirement,
        #[case] want: bool,
    ) {
        let node = labels(&[("zone", "a"), ("cpus", "8")]);
        assert_eq!(affinity(vec![term(vec![r])]).matches(&node), want);
    }

    #[test]
    fn terms_are_ored_and_expressions_anded() {
        let node = labels(&[("zone", "a"), ("rack", "1")]);
        let both = term(vec![req("zone", "In", &["a"]), req("rack", "In", &["2"])]);
        assert!(!affinity(vec![both.clone()]).matches(&node));
        assert!(affinity(vec![both, term(vec![req("rack", "In", &["1"])])]).matches(&node));
    }

    #[test]
    fn match_fields_never_match_and_empty_terms_select_nothing() {
        let node = labels(&[("kubernetes.io/hostname", "n1")]);
        let fields = NodeSelectorTerm {
            match_expressions: None,
            match_fields: Some(vec![req("metadata.name", "In", &["n1"])]),
        };
        assert!(!affinity(vec![fields]).matches(&node));
        assert!(!affinity(vec![term(vec![])]).matches(&node));
        assert!(!affinity(vec![]).matches(&node));
        assert!(NodeAffinity::compile(None).matches(&node));
    }

    #[test]
    fn hostnames_are_known_only_when_every_term_pins_them() {
        let a = affinity(vec![
            term(vec![req(HOSTNAME_LABEL, "In", &["n2"])]),
            term(vec![req(HOSTNAME_LABEL, "In", &["n1"])]),
        ]);
        assert_eq!(
            a.hostnames(),
            Some(vec!["n1".to_string(), "n2".to_string()])
        );
        let b = affinity(vec![
            term(vec![req(HOSTNAME_LABEL, "In", &["n1"])]),
            term(vec![req("zone", "In", &["a"])]),
        ]);
        assert_eq!(b.hostnames(), None);
        assert_eq!(NodeAffinity::compile(None).hostnames(), None);
    }

    #[rstest]
    #[case::match_labels_equal(&[("tier", "fast")], true)]
    #[case::match_labels_differs(&[("tier", "slow")], false)]
    #[case::missing_label(&[], false)]
    fn selector_match_labels_require_equal_values(#[case] pv: &[(&str, &str)], #[case] want: bool) {
        let sel = LabelSelector {
            match_labels: Some(labels(&[("tier", "fast")])),
            match_expressions: None,
        };
        assert_eq!(Selector::compile(&sel).matches(&labels(pv)), want);
    }

    #[rstest]
    #[case::in_("In", &["a"], true)]
    #[case::not_in("NotIn", &["a"], false)]
    #[case::exists("Exists", &[], true)]
    #[case::does_not_exist("DoesNotExist", &[], false)]
    #[case::gt_is_not_a_label_selector_operator("Gt", &["1"], false)]
    fn selector_expressions_follow_label_selector_rules(
        #[case] op: &str,
        #[case] values: &[&str],
        #[case] want: bool,
    ) {
        let expr = LabelSelectorRequirement {
            key: "zone".into(),
            operator: op.into(),
            values: Some(values.iter().map(|v| v.to_string()).collect()),
        };
        let sel = LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![expr]),
        };
        assert_eq!(
            Selector::compile(&sel).matches(&labels(&[("zone", "a")])),
            want
        );
    }
}
