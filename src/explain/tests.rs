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
    let pods = pods_from(Path::new("pod.json"), pod)?;
    explain_all(&snap, pods, Strategy::Binpack, output)
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
    let yaml: serde_yaml_ng::Value = serde_yaml_ng::Deserializer::from_str(SNAPSHOT_YAML)
        .map(|d| serde_yaml_ng::Value::deserialize(d).expect("valid yaml"))
        .fold(serde_yaml_ng::Value::Sequence(vec![]), |mut acc, v| {
            if let serde_yaml_ng::Value::Sequence(s) = &mut acc {
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
    let bad_yaml =
        run_on("kind: Node\nmetadata: [unclosed", POD_JSON, Output::Table).expect_err("bad yaml");
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
    assert!(
        no_pod
            .expect_err("not a pod")
            .to_string()
            .starts_with("failed to read Service \"s\" in pod.json: is not a Pod"),
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

/// What `kubectl get pods -A -o yaml` prints: a `List` whose first pod has no claims.
const PODS_LIST_YAML: &str = r#"
apiVersion: v1
kind: List
metadata: {resourceVersion: ""}
items:
- apiVersion: v1
  kind: Pod
  metadata: {name: coredns-1, namespace: kube-system}
  spec: {containers: [{name: c, image: coredns}]}
- apiVersion: v1
  kind: Pod
  metadata: {name: app, namespace: web}
  spec:
    containers: [{name: c, image: busybox}]
    volumes: [{name: d, persistentVolumeClaim: {claimName: data}}]
- apiVersion: v1
  kind: Pod
  metadata: {name: other, namespace: web}
  spec:
    containers: [{name: c, image: busybox}]
    volumes: [{name: d, persistentVolumeClaim: {claimName: missing}}]
"#;

#[test]
fn a_pod_list_explains_every_pod_not_just_the_first() {
    let out = run_on(SNAPSHOT_YAML, PODS_LIST_YAML, Output::Table).expect("explains");
    assert!(
        out.contains("pod kube-system/coredns-1: no local claims to place; fits every node"),
        "{out}"
    );
    let app = out
        .split("pod web/app:\n")
        .nth(1)
        .expect("web/app has a table");
    let app_rows: Vec<Vec<&str>> = app
        .lines()
        .take(3)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        app_rows[1],
        ["n1", "Fits", "8", "web/data", "->", "pv-small"]
    );
    assert_eq!(app_rows[2][..2], ["n2", "Unresolvable"]);
    let other = out
        .split("pod web/other:\n")
        .nth(1)
        .expect("web/other has a table");
    assert!(!other.contains("Fits"), "{other}");
}

#[test]
fn an_api_pod_list_in_json_gives_one_decision_per_pod() {
    let yaml: serde_yaml_ng::Value = serde_yaml_ng::from_str(PODS_LIST_YAML).expect("valid yaml");
    let mut list: Value = serde_yaml_ng::from_value(yaml).expect("json value");
    list["kind"] = "PodList".into();
    for item in list["items"].as_array_mut().expect("items") {
        item.as_object_mut().expect("pod").remove("kind");
    }
    let out = run_on(SNAPSHOT_YAML, &list.to_string(), Output::Json).expect("explains");
    let docs: Vec<Value> = serde_json::from_str(&out).expect("a JSON array");
    let pods: Vec<&str> = docs.iter().filter_map(|d| d["pod"].as_str()).collect();
    assert_eq!(pods, ["kube-system/coredns-1", "web/app", "web/other"]);
    assert_eq!(
        docs[1]["assignments"],
        serde_json::json!({"n1": {"web/data": "pv-small"}})
    );
    assert_eq!(docs[1]["filter"]["NodeNames"], serde_json::json!(["n1"]));
}

#[test]
fn several_pod_documents_are_explained_like_a_list() {
    let two =
        format!("{POD_JSON}\n---\nkind: Pod\nmetadata: {{name: b, namespace: web}}\nspec: {{}}\n");
    let out = run_on(SNAPSHOT_YAML, &two, Output::Table).expect("explains");
    assert!(out.contains("pod web/app:\n"), "{out}");
    assert!(out.contains("pod web/b: no local claims"), "{out}");
}

#[test]
fn input_that_is_not_a_pod_is_refused_instead_of_fitting_everywhere() {
    let refused = |pod: &str| {
        run_on(SNAPSHOT_YAML, pod, Output::Table)
            .expect_err("refused")
            .to_string()
    };
    let empty = refused("apiVersion: v1\nkind: List\nitems: []\n");
    assert_eq!(empty, "failed to find a Pod in pod.json");
    let deployment = refused("kind: List\nitems:\n- {kind: Deployment, metadata: {name: web}}\n");
    assert!(
        deployment.starts_with("failed to read Deployment \"web\" in pod.json: is not a Pod"),
        "{deployment}"
    );
    let mixed = refused(&format!(
        "{POD_JSON}\n---\nkind: PersistentVolumeClaim\nmetadata: {{name: c}}\n"
    ));
    assert!(mixed.contains("PersistentVolumeClaim \"c\""), "{mixed}");
    let junk = refused("hello: world\n");
    assert!(junk.contains("has neither a kind nor a pod spec"), "{junk}");
    let scalar = refused("just some text\n");
    assert!(
        scalar.contains("has neither a kind nor a pod spec"),
        "{scalar}"
    );
}
