//! A node list checked in parts on several threads must decode exactly as one walk does: same nodes, same spans,
//! same first error, whatever the guessed cuts hit.

use rstest::rstest;

use super::items::{Split, guess_cuts};
use super::*;
use crate::selector::NodeLabels;

fn parts(threads: usize) -> Split {
    Split {
        threads,
        min_part_bytes: 1,
    }
}

fn body(nodes: &[String]) -> String {
    format!(
        r#"{{"Pod":null,"Nodes":{{"metadata":{{}},"items":[{}]}},"NodeNames":null}}"#,
        nodes.join(",")
    )
}

/// A node whose own JSON holds the boundary text one level down, where a cut must not be taken.
fn node(i: usize, extra: &str) -> String {
    format!(
        r#"{{"metadata":{{"name":"n{i}","labels":{{"kubernetes.io/hostname":"n{i}"}}}},"spec":{{"x":[{{"a":1}},{{"metadata":{{}}}}]}},"status":{{"images":[{{"names":["a{i}"{extra}]}}]}}}}"#
    )
}

/// Names, raw JSON and hostnames of the nodes, or the error's message.
fn outcome(body: &str, split: Split) -> Result<Vec<(String, String, Option<String>)>, String> {
    let args = ExtenderArgs::decode_split(
        Bytes::copy_from_slice(body.as_bytes()),
        split,
        &DecodeLimits::default(),
    )
    .map_err(|e| e.to_string())?;
    let nodes = args.nodes.expect("nodes given");
    Ok(nodes
        .iter()
        .map(|n| {
            let raw = String::from_utf8(n.raw.json().to_vec()).expect("utf-8");
            (n.name.clone(), raw, n.labels.hostname().map(str::to_owned))
        })
        .collect())
}

fn nodes(count: usize, bad: &[usize]) -> Vec<String> {
    (0..count)
        .map(|i| node(i, if bad.contains(&i) { ",tru" } else { "" }))
        .collect()
}

#[rstest]
fn a_split_list_decodes_as_one_walk_does(#[values(2, 3, 4, 7)] threads: usize) {
    let body = body(&nodes(40, &[]));
    let start = body.find("\"items\":[").expect("items") + 9;
    assert!(
        !guess_cuts(body.as_bytes(), start, parts(threads)).is_empty(),
        "the test must exercise cuts"
    );
    let whole = outcome(&body, parts(1)).expect("valid body");
    assert_eq!(whole.len(), 40);
    assert_eq!(outcome(&body, parts(threads)), Ok(whole));
}

#[rstest]
#[case::in_the_last_part(&[37])]
#[case::in_the_first_part(&[2])]
#[case::in_two_parts(&[12, 33])]
fn a_split_list_reports_the_first_bad_node_by_its_index(#[case] bad: &[usize]) {
    let body = body(&nodes(40, bad));
    let whole = outcome(&body, parts(1)).expect_err("a bad node");
    assert!(
        whole.contains(&format!("Nodes.items[{}]", bad[0])),
        "{whole}"
    );
    for threads in [2, 4] {
        assert_eq!(
            outcome(&body, parts(threads)).expect_err("a bad node"),
            whole
        );
    }
}

#[test]
fn cuts_inside_a_node_fall_back_to_one_walk() {
    // One node of many KiB, with the boundary text inside it wherever a cut is looked for.
    let inner: Vec<String> = (0..400)
        .map(|i| format!(r#"{{"a":{i}}},{{"metadata":{{}}}}"#))
        .collect();
    let big = format!(
        r#"{{"metadata":{{"name":"big"}},"spec":{{"x":[{}]}}}}"#,
        inner.join(",")
    );
    let body = body(&[big, node(1, "")]);
    let whole = outcome(&body, parts(1)).expect("valid body");
    assert_eq!(outcome(&body, parts(4)), Ok(whole));
}

#[test]
fn every_truncation_of_a_split_list_is_an_error() {
    let body = body(&nodes(6, &[]));
    for cut in 0..body.len() {
        let prefix = &body[..cut];
        assert!(
            outcome(prefix, parts(3)).is_err(),
            "prefix of {cut} bytes decoded"
        );
    }
}

#[test]
fn errors_name_the_line_and_column_in_the_whole_body() {
    let body = "{\"Pod\":null,\n \"Nodes\":{\"items\":[{\"metadata\":{\"name\":\"n1\"}},\n  {\"spec\":x}]}}";
    let err = outcome(body, parts(1)).expect_err("bad value");
    assert!(err.contains("Nodes.items[1]"), "{err}");
    assert!(err.ends_with("at line 3 column 11"), "{err}");
    let err = outcome("{\"Pod\":null,\n \"Extra\": ?}", parts(1)).expect_err("bad value");
    assert!(err.ends_with("at line 2 column 11"), "{err}");
}
