use rstest::rstest;
use serde_json::json;

use super::*;
use crate::selector::{Labels, NodeLabels};

fn decode(body: &str) -> Result<ExtenderArgs, DecodeError> {
    ExtenderArgs::from_slice(body.as_bytes())
}

fn nodes_of(body: &str) -> Vec<WireNode> {
    decode(body)
        .expect("valid args")
        .nodes
        .expect("nodes given")
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn keys_match_ignoring_case_and_nulls_are_tolerated() {
    let body = r#"{"pod":{"metadata":{"name":"p","namespace":null},"spec":{"volumes":[null,
        {"name":"v","persistentVolumeClaim":{"claimName":"data"}},{"name":"e","ephemeral":{}}]}},
        "NODENAMES":["n1",null],"nodes":null,"Extra":1}"#;
    let args = decode(body).expect("valid args");
    assert_eq!(args.pod.namespace(), "default");
    assert_eq!(args.pod.claim_names(), ["data", "p-e"]);
    assert_eq!(args.node_names, Some(vec!["n1".to_string()]));
    assert!(args.nodes.is_none());
}

#[test]
fn nodes_keep_their_raw_json_and_expose_name_and_labels() {
    let body = r#"{"Pod":null,"Nodes":{"items":[{"metadata":{"name":"n1","labels":{"a":"b","c":null}},
        "status":{"capacity":{"cpu":"4"}}}]},"NodeNames":null}"#;
    let args = decode(body).expect("valid args");
    let nodes = args.nodes.expect("nodes given");
    assert_eq!(nodes[0].name, "n1");
    assert_eq!(nodes[0].labels.all(), &labels(&[("a", "b"), ("c", "")]));
    assert!(
        std::str::from_utf8(nodes[0].raw.json())
            .expect("utf-8")
            .contains(r#""cpu":"4""#)
    );
    assert!(args.pod.claim_names().is_empty());
}

#[rstest]
#[case::metadata_first(r#"{"metadata":{"name":"n1","labels":{"k":"v"}},"spec":{},"status":{}}"#)]
#[case::after_kind_and_api_version(
    r#"{"kind":"Node","apiVersion":"v1","metadata":{"name":"n1","labels":{"k":"v"}},"spec":{}}"#
)]
#[case::after_spec_and_status(
    r#"{"spec":{"taints":[{"key":"}{][\"","value":"x"}]},"status":{"images":[{"names":["a","b"],"sizeBytes":12e3}],
       "ok":true,"no":false,"nil":null,"n":-1.5},"metadata":{"name":"n1","labels":{"k":"v"}}}"#
)]
#[case::with_whitespace_everywhere(
    "\n{ \"spec\" : { \"a\" : [ 1 , 2 ] } ,\r\n\t\"metadata\"\t:\n{ \"labels\" : { \"k\" : \"v\" } , \"name\" : \"n1\" } }\n"
)]
#[case::escaped_metadata_key(r#"{"spec":{},"meta\u0064ata":{"name":"n1","labels":{"k":"v"}}}"#)]
#[case::lookalike_keys_first(
    r#"{"metadata2":{"name":"x"},"Xmetadata":{"name":"y"},"md":"metadata","metadata":{"name":"n1","labels":{"k":"v"}}}"#
)]
fn metadata_is_found_wherever_it_is(#[case] node: &str) {
    let nodes = nodes_of(&format!(r#"{{"Nodes":{{"items":[{node}]}}}}"#));
    assert_eq!(nodes[0].name, "n1");
    assert_eq!(nodes[0].labels.all(), &labels(&[("k", "v")]));
    assert_eq!(nodes[0].raw.json(), node.as_bytes().trim_ascii());
}

#[rstest]
#[case::labels_null(r#"{"metadata":{"name":"n1","labels":null}}"#, "n1")]
#[case::labels_missing(r#"{"metadata":{"name":"n1"}}"#, "n1")]
#[case::labels_empty(r#"{"metadata":{"labels":{},"name":"n1"}}"#, "n1")]
#[case::metadata_null(r#"{"metadata":null,"spec":{}}"#, "")]
#[case::metadata_missing(r#"{"spec":{"a":1},"status":{}}"#, "")]
#[case::empty_object(r#"{}"#, "")]
#[case::node_null(r#"null"#, "")]
#[case::name_null(r#"{"metadata":{"name":null}}"#, "")]
fn missing_or_null_parts_read_as_empty(#[case] node: &str, #[case] name: &str) {
    let nodes = nodes_of(&format!(r#"{{"Nodes":{{"items":[{node}]}}}}"#));
    assert_eq!(nodes[0].name, name);
    assert!(nodes[0].labels.all().is_empty());
    assert_eq!(nodes[0].raw.json(), node.as_bytes());
}

#[rstest]
#[case::escaped_quote_and_backslash(r#""n\"1\\""#, "n\"1\\")]
#[case::unicode_escape(r#""n\u00e9""#, "né")]
#[case::surrogate_pair(r#""n\ud83d\ude00""#, "n😀")]
#[case::raw_unicode(r#""nœud-日本""#, "nœud-日本")]
fn names_and_labels_are_unescaped(#[case] json_string: &str, #[case] text: &str) {
    let node = format!(
        r#"{{"metadata":{{"name":{json_string},"labels":{{{json_string}:{json_string}}}}},"status":{{"x":{json_string}}}}}"#
    );
    let nodes = nodes_of(&format!(r#"{{"Nodes":{{"items":[{node}]}}}}"#));
    assert_eq!(nodes[0].name, text);
    assert_eq!(nodes[0].labels.all(), &labels(&[(text, text)]));
    assert_eq!(nodes[0].raw.json(), node.as_bytes());
}

#[rstest]
#[case::plain(r#"{"kubernetes.io/hostname":"h1","zone":"a"}"#, Some("h1"))]
#[case::escaped_key_and_value(r#"{"kubernetes.io\/hostname":"h\u0031"}"#, Some("h1"))]
#[case::null_value(r#"{"kubernetes.io/hostname":null}"#, Some(""))]
#[case::absent(r#"{"zone":"a"}"#, None)]
#[case::no_labels("null", None)]
fn the_hostname_is_read_without_building_the_label_map(
    #[case] labels: &str,
    #[case] hostname: Option<&str>,
) {
    let nodes = nodes_of(&format!(
        r#"{{"Nodes":{{"items":[{{"metadata":{{"name":"n1","labels":{labels}}}}}]}}}}"#
    ));
    assert_eq!(nodes[0].labels.hostname(), hostname);
    assert!(!nodes[0].labels.is_built());
    let map = nodes[0].labels.all();
    assert_eq!(
        map.get("kubernetes.io/hostname").map(String::as_str),
        hostname
    );
    assert!(nodes[0].labels.is_built());
}

#[rstest]
#[case::items_null(r#"{"Nodes":{"items":null}}"#, Some(0))]
#[case::items_missing(r#"{"Nodes":{"metadata":{}}}"#, Some(0))]
#[case::nodes_null(r#"{"Nodes":null}"#, None)]
#[case::nodes_missing(r#"{"NodeNames":["a"]}"#, None)]
#[case::two_nodes(
    r#"{"Nodes":{"items":[{"metadata":{"name":"a"}}, {"metadata":{"name":"b"}}]}}"#,
    Some(2)
)]
fn node_lists_tolerate_nulls(#[case] body: &str, #[case] count: Option<usize>) {
    let args = decode(body).expect("valid args");
    assert_eq!(args.nodes.map(|n| n.len()), count);
}

#[rstest]
#[case::not_json("?", "expected value")]
#[case::not_an_object("[1]", "ExtenderArgs object")]
#[case::trailing_garbage(r#"{"Pod":null} x"#, "trailing characters")]
#[case::node_not_an_object(r#"{"Nodes":{"items":[1]}}"#, "Nodes.items[0]")]
#[case::node_a_string(r#"{"Nodes":{"items":["n1"]}}"#, "Nodes.items[0]")]
#[case::second_node_bad(r#"{"Nodes":{"items":[{},[]]}}"#, "Nodes.items[1]")]
#[case::metadata_not_an_object(r#"{"Nodes":{"items":[{"metadata":"x"}]}}"#, "Nodes.items[0]")]
#[case::name_a_number(r#"{"Nodes":{"items":[{"metadata":{"name":1}}]}}"#, "invalid type")]
#[case::label_a_number(
    r#"{"Nodes":{"items":[{"metadata":{"labels":{"a":1}}}]}}"#,
    "invalid type"
)]
#[case::labels_a_list(
    r#"{"Nodes":{"items":[{"metadata":{"labels":["a"]}}]}}"#,
    "invalid type"
)]
#[case::items_an_object(r#"{"Nodes":{"items":{}}}"#, "list of Nodes")]
#[case::nodes_a_list(r#"{"Nodes":[]}"#, "NodeList")]
#[case::bad_escape_in_node(r#"{"Nodes":{"items":[{"spec":"\q"}]}}"#, "escape")]
#[case::control_character_in_node(
    "{\"Nodes\":{\"items\":[{\"spec\":\"a\u{1}\"}]}}",
    "control character"
)]
#[case::control_character_after_metadata(
    "{\"Nodes\":{\"items\":[{\"metadata\":{},\"spec\":\"\u{0}\"}]}}",
    "control character"
)]
fn malformed_bodies_are_errors_with_a_reason(#[case] body: &str, #[case] reason: &str) {
    let err = decode(body).expect_err("malformed").to_string();
    assert!(err.contains(reason), "{err:?} lacks {reason:?}");
}

#[test]
fn invalid_utf8_inside_a_node_is_an_error() {
    let mut body = br#"{"Nodes":{"items":[{"metadata":{"name":"n1"},"spec":"XX"}]}}"#.to_vec();
    let at = body.iter().rposition(|b| *b == b'X').expect("marker");
    body[at - 1] = 0xc3;
    body[at] = 0x28;
    assert!(ExtenderArgs::decode(Bytes::from(body)).is_err());
}

/// A body like the scheduler's, with escapes and unicode in the nodes, cut at every byte: each prefix must be an
/// error, never a panic nor a partial success.
#[test]
fn every_truncation_of_a_body_is_an_error() {
    let body = json!({
        "Pod": {"metadata": {"name": "p", "namespace": "ns"},
                "spec": {"volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "c"}}]}},
        "Nodes": {"items": [
            {"kind": "Node", "metadata": {"name": "n\"1", "labels": {"zone": "é😀", "k\\": null}},
             "status": {"images": [{"names": ["a\u{1}b"], "sizeBytes": 1.5e3}]}},
            {"spec": {"x": [true, false, null, -0.5]}, "metadata": {"name": "n2"}},
        ]},
        "NodeNames": null,
    })
    .to_string();
    let full = decode(&body).expect("the whole body is valid");
    assert_eq!(full.nodes.as_ref().map(Vec::len), Some(2));
    let bytes = body.as_bytes();
    for cut in 0..bytes.len() {
        let prefix = Bytes::copy_from_slice(&bytes[..cut]);
        assert!(
            ExtenderArgs::decode(prefix).is_err(),
            "prefix of {cut} bytes decoded"
        );
    }
}

/// The walk over a node's keys sees only validated text, but must not panic even on text the scan would refuse.
#[rstest]
#[case::empty("")]
#[case::open_brace("{")]
#[case::key_without_colon(r#"{"a" 1}"#)]
#[case::unterminated_key(r#"{"ab"#)]
#[case::unterminated_value(r#"{"a":[1,{"b":"c"#)]
#[case::dangling_escape(r#"{"a\"#)]
#[case::unbalanced(r#"{"a":]]]}"#)]
#[case::no_comma(r#"{"a":1 "metadata":{}}"#)]
#[case::multibyte_cut("{\"é")]
fn the_node_walk_never_panics(#[case] text: &str) {
    let _ = node::read(text);
}

#[test]
fn nodes_share_the_body_instead_of_copying_it() {
    let body = Bytes::from_static(br#"{"Nodes":{"items":[{"metadata":{"name":"n1"}}]}}"#);
    let args = ExtenderArgs::decode(body.clone()).expect("valid args");
    let raw = args.nodes.expect("nodes")[0].raw.json().as_ptr();
    let start = body.as_ptr() as usize;
    assert!((start..start + body.len()).contains(&(raw as usize)));
}

fn filter_result(nodes: Option<&[&str]>) -> ExtenderFilterResult {
    let items: Option<NodeListOut> = nodes.map(|n| NodeListOut {
        items: n
            .iter()
            .map(|j| serde_json::from_str::<RawNode>(j).expect("valid node"))
            .collect(),
    });
    ExtenderFilterResult {
        node_names: items.is_none().then(|| vec!["n1".into(), "é\"".into()]),
        nodes: items,
        failed_nodes: [("n2".into(), "claim \"a\" too small".into())].into(),
        failed_and_unresolvable_nodes: [("n3".into(), "no PV\n".into())].into(),
        error: "x\\y".into(),
    }
}

#[rstest]
#[case::names(None)]
#[case::no_survivors(Some(&[][..]))]
#[case::survivors(Some(&[r#"{"metadata":{"name":"n1"}}"#, r#"{ "metadata" : { "name" : "é" } , "spec" : [ ] }"#, "null"][..]))]
fn to_json_writes_what_serde_writes(#[case] nodes: Option<&[&str]>) {
    let result = filter_result(nodes);
    let fast = result.to_json().expect("encodes");
    let slow = serde_json::to_vec(&result).expect("encodes");
    assert_eq!(
        String::from_utf8(fast).expect("utf-8"),
        String::from_utf8(slow).expect("utf-8")
    );
}

#[test]
fn surviving_nodes_are_echoed_byte_for_byte() {
    let node = r#"{ "metadata" : {"name":"n1","labels":{"a":"\u00e9"}}, "status" : {"n": 1.50} }"#;
    let args = decode(&format!(r#"{{"Nodes":{{"items":[{node}]}}}}"#)).expect("valid args");
    let items = args.nodes.expect("nodes").into_iter().map(|n| n.raw);
    let result = ExtenderFilterResult {
        nodes: Some(NodeListOut {
            items: items.collect(),
        }),
        ..Default::default()
    };
    let out = String::from_utf8(result.to_json().expect("encodes")).expect("utf-8");
    assert!(
        out.starts_with(&format!(r#"{{"Nodes":{{"items":[{node}]}}"#)),
        "{out}"
    );
}

#[test]
fn results_use_pascal_case_keys() {
    let r = ExtenderFilterResult::error("boom".into(), true);
    let json = serde_json::to_string(&r).expect("serialisable");
    assert_eq!(
        json,
        r#"{"Nodes":null,"NodeNames":[],"FailedNodes":{},"FailedAndUnresolvableNodes":{},"Error":"boom"}"#
    );
    assert_eq!(r.to_json().expect("encodes"), json.as_bytes());
    let p = serde_json::to_string(&HostPriority {
        host: "n1".into(),
        score: 7,
    })
    .expect("serialisable");
    assert_eq!(p, r#"{"Host":"n1","Score":7}"#);
}

#[test]
fn a_watched_pod_converts_to_the_same_claims_as_its_json() {
    let json = serde_json::json!({
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"containers": [], "volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": "data-0"}},
            {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
            {"name": "config", "configMap": {"name": "cfg"}},
        ]}
    });
    let watched: k8s_openapi::api::core::v1::Pod =
        serde_json::from_value(json.clone()).expect("a v1 Pod");
    let wire: Pod = serde_json::from_value(json).expect("a wire pod");
    let converted = Pod::from(&watched);
    assert_eq!(converted.claim_names(), ["data-0", "web-scratch"]);
    assert_eq!(converted.claim_names(), wire.claim_names());
    assert_eq!((converted.namespace(), converted.name()), ("shop", "web"));
}
