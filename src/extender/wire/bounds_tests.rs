//! Decoding within `DecodeLimits`: a request at a limit decodes as before, one entry past it is refused with the
//! limit's name, on one thread or several, and what a decoded request may cost stays proportional to its counts.

use rstest::rstest;

use super::items::Split;
use super::*;
use crate::selector::NodeLabels;

fn tight() -> DecodeLimits {
    DecodeLimits {
        max_nodes: 4,
        max_labels_per_node: 3,
        max_labels: 7,
        max_volumes: 2,
    }
}

fn names(n: usize) -> String {
    let names: Vec<String> = (0..n).map(|i| format!("\"n{i}\"")).collect();
    format!(r#"{{"Pod":null,"NodeNames":[{}]}}"#, names.join(","))
}

/// `labels[i]` labels on node `i`, the first of them its hostname.
fn nodes(labels: &[usize]) -> String {
    let items: Vec<String> = labels
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let mut l: Vec<String> = (1..n).map(|j| format!(r#""k{j}":"v""#)).collect();
            if n > 0 {
                l.insert(0, format!(r#""kubernetes.io/hostname":"n{i}""#));
            }
            format!(
                r#"{{"metadata":{{"name":"n{i}","labels":{{{}}}}}}}"#,
                l.join(",")
            )
        })
        .collect();
    format!(
        r#"{{"Pod":null,"Nodes":{{"items":[{}]}}}}"#,
        items.join(",")
    )
}

fn pod_with_volumes(n: usize) -> String {
    let volumes: Vec<String> = (0..n)
        .map(|i| format!(r#"{{"name":"v{i}","persistentVolumeClaim":{{"claimName":"c{i}"}}}}"#))
        .collect();
    format!(
        r#"{{"Pod":{{"metadata":{{"name":"p"}},"spec":{{"volumes":[{}]}}}},"NodeNames":["n0"]}}"#,
        volumes.join(",")
    )
}

fn decode(body: &str, threads: usize) -> Result<ExtenderArgs, DecodeError> {
    let split = Split {
        threads,
        min_part_bytes: 1,
    };
    ExtenderArgs::decode_split(Bytes::copy_from_slice(body.as_bytes()), split, &tight())
}

fn refused(body: &str, threads: usize) -> Limit {
    match decode(body, threads) {
        Err(DecodeError::TooMany { which, limit }) => {
            assert_eq!(limit, which.of(&tight()));
            which
        }
        Err(e) => panic!("malformed, not over a limit: {e}"),
        Ok(_) => panic!("decoded a request over a limit"),
    }
}

#[rstest]
#[case::names(names(4))]
#[case::nodes(nodes(&[3, 3, 1, 0]))]
#[case::volumes(pod_with_volumes(2))]
fn a_request_at_every_limit_decodes(#[case] body: String, #[values(1, 3)] threads: usize) {
    decode(&body, threads).expect("at the limits");
}

#[rstest]
#[case::names(names(5), Limit::Nodes)]
#[case::nodes(nodes(&[0, 0, 0, 0, 0]), Limit::Nodes)]
#[case::labels_on_one_node(nodes(&[4]), Limit::LabelsPerNode)]
#[case::labels_in_all(nodes(&[3, 3, 2]), Limit::Labels)]
#[case::volumes(pod_with_volumes(3), Limit::Volumes)]
fn one_entry_past_a_limit_is_refused_with_its_name(
    #[case] body: String,
    #[case] limit: Limit,
    #[values(1, 3)] threads: usize,
) {
    assert_eq!(refused(&body, threads), limit);
}

#[test]
fn names_and_nodes_count_against_the_same_limit() {
    let body = r#"{"NodeNames":["a","b","c"],"Nodes":{"items":[{},{}]}}"#;
    assert_eq!(refused(body, 1), Limit::Nodes);
}

#[test]
fn null_names_are_counted_and_skipped() {
    let args = decode(r#"{"NodeNames":["a",null,"b"]}"#, 1).expect("valid");
    assert_eq!(
        args.node_names,
        Some(vec!["a".to_string(), "b".to_string()])
    );
    assert_eq!(
        refused(r#"{"NodeNames":[null,null,null,null,null]}"#, 1),
        Limit::Nodes
    );
}

#[test]
fn the_refusal_names_the_flag_and_the_variable_to_raise() {
    let message = decode(&names(5), 1).expect_err("refused").to_string();
    assert!(
        message.contains("more than 4 NodeNames or Nodes.items entries"),
        "{message}"
    );
    assert!(message.contains("--max-nodes"), "{message}");
    assert!(message.contains("LOCALPV_EXTENDER_MAX_NODES"), "{message}");
}

#[test]
fn a_volume_list_over_the_limit_is_refused_before_serde_reads_it() {
    // A million empty volumes would each become a `PodVolume`; the count stops at the first past the limit.
    let body = format!(
        r#"{{"Pod":{{"spec":{{"volumes":[{}]}}}}}}"#,
        vec!["{}"; 1_000_000].join(",")
    );
    assert_eq!(refused(&body, 1), Limit::Volumes);
}

#[test]
fn malformed_bodies_are_still_malformed_not_over_a_limit() {
    for body in [
        r#"{"NodeNames":"n1"}"#,
        r#"{"NodeNames":[1]}"#,
        r#"{"Pod":{"spec":{"volumes":[{},]}}}"#,
        r#"{"Nodes":{"items":[{"metadata":{"labels":{"a":1}}}]}}"#,
    ] {
        assert!(
            matches!(decode(body, 1), Err(DecodeError::Malformed(_))),
            "{body}"
        );
    }
}

#[test]
fn the_hostname_and_labels_read_as_before_within_the_limits() {
    let args = decode(&nodes(&[3, 2]), 1).expect("valid");
    let nodes = args.nodes.expect("nodes");
    assert_eq!(nodes[1].labels.hostname(), Some("n1"));
    assert_eq!(nodes[0].labels.all().len(), 3);
}

#[test]
fn the_cost_of_a_request_grows_with_its_counts_not_only_its_bytes() {
    let few = decode(&names(1), 1).expect("valid").cost_bytes();
    let four = decode(&names(4), 1).expect("valid").cost_bytes();
    // Each name's `String` and answer entry are charged, though the name is 5 bytes of the body.
    assert!(
        four - few >= 3 * (std::mem::size_of::<String>() + 256),
        "{few} {four}"
    );
    let labelled = decode(&nodes(&[3, 3]), 1).expect("valid").cost_bytes();
    let bare = decode(&nodes(&[0, 0]), 1).expect("valid").cost_bytes();
    assert!(labelled - bare >= 6 * 96, "{bare} {labelled}");
    // A `Nodes` answer may echo every node's JSON.
    let body = nodes(&[3, 3]);
    assert!(labelled >= body.len() - 40, "{labelled} {}", body.len());
}

#[rstest]
#[case::empty_nodes(format!(r#"{{"Nodes":{{"items":[{}]}}}}"#, ["{}"; 4].join(",")), 4)]
#[case::null_nodes(format!(r#"{{"Nodes":{{"items":[{}]}}}}"#, ["null"; 4].join(",")), 4)]
#[case::names(names(4), 4)]
fn what_decoding_may_allocate_is_covered_by_the_charge_taken_before_it(
    #[case] body: String,
    #[case] entries: usize,
) {
    let args = decode(&body, 1).expect("at the limits");
    let listed =
        args.nodes.as_ref().map_or(0, Vec::len) + args.node_names.as_ref().map_or(0, Vec::len);
    assert_eq!(listed, entries);
    let bound = ExtenderArgs::decode_bound(body.len(), &tight());
    assert!(
        bound >= entries * std::mem::size_of::<WireNode>(),
        "{bound}"
    );
    // And no more than the limits allow, however long the body.
    let most = ExtenderArgs::decode_bound(usize::MAX / 2, &tight());
    assert!(
        most <= 4 * tight().max_nodes * 1024 + tight().max_volumes * 1024,
        "{most}"
    );
}

/// A `Nodes` request of `n` nodes of about 8 KiB each (the size Go writes for a real node), `labels` labels of about
/// 70 bytes on each.
fn real_nodes(n: usize, labels: usize) -> String {
    let items: Vec<String> = (0..n)
        .map(|i| {
            let mut l: Vec<String> = (0..labels)
                .map(|j| format!(r#""example.com/label-{j}":"value-{j:040}""#))
                .collect();
            l.push(format!(r#""kubernetes.io/hostname":"node-{i}""#));
            let labels = l.join(",");
            let status = "s".repeat(8_000 - labels.len().min(7_000));
            format!(
                r#"{{"metadata":{{"name":"node-{i}","labels":{{{labels}}}}},"status":{{"x":"{status}"}}}}"#
            )
        })
        .collect();
    format!(
        r#"{{"Pod":null,"Nodes":{{"items":[{}]}}}}"#,
        items.join(",")
    )
}

#[test]
fn the_extenders_default_budget_admits_a_label_heavy_five_thousand_node_request_or_two_ordinary_ones()
 {
    let budget = crate::serve::Limits::extender().body_budget;
    let held = |body: String| {
        let len = body.len();
        let args = ExtenderArgs::decode(body.into()).expect("a real request");
        assert_eq!(args.nodes.as_ref().map(Vec::len), Some(5_000));
        let bound = ExtenderArgs::decode_bound(len, &DecodeLimits::default());
        len + bound.max(args.cost_bytes())
    };
    let heavy = held(real_nodes(5_000, 60));
    assert!(heavy < budget, "{heavy} of {budget}");
    let ordinary = held(real_nodes(5_000, 15));
    assert!(2 * ordinary < budget, "{ordinary} twice, of {budget}");
}
