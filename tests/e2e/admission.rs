//! The chart's admission policy (issue 34) on a real API server: the forged PVs of `attack_ownership` (copies of
//! ours, other spellings of the path, no label, hostPath, the discovery directory itself, its parent, the root) are
//! refused for a user, for the agent's ServiceAccount without a pod-bound token and for the agent of another node;
//! the agent creates its own node's PVs; the PV binder still binds; and once the policy or its binding is deleted
//! the forged PVs are admitted again (the agent's own check is then what holds: `attack_ownership`).

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolume, PersistentVolumeClaim};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::node_agent::{claim_pv, fresh_pv_at, obj, phase, pv_at};
use crate::packaging::{NAMESPACE, apply, documents, render};
use crate::support::agent::{Agent, install_crd};
use crate::support::cluster::{ControlPlane, Options, client_for};
use crate::support::disks::Mount;
use crate::support::eventually;
use crate::support::nodes::create_node;
use crate::support::objects::{Pv, on_host};
use crate::support::sa;

/// The node agent's ServiceAccount in the default rendering.
const AGENT_SA: &str = "localpv-node";
const POLICY: &str = "localpv-discovery-dirs";
/// The policy's messages (`charts/localpv/templates/admission-policy.yaml`).
const NOT_AGENT: &str = "only the localpv node agent of the node it is for may create it";
const WRONG_NODE: &str = "only inside a discovery directory and only for its own node";

/// The chart's defaults plus a second class whose PVs also carry a selector term (storage reachable from a zone).
const VALUES: &str = "classes:
  - name: local-storage
    hostDir: /mnt/disks
  - name: zoned
    hostDir: /mnt/zoned/
    selector:
      - matchExpressions:
          - {key: topology.kubernetes.io/zone, operator: In, values: [zone-a]}
";

/// A PV as the agent writes it, or as someone copies it: `source` is `local` or `hostPath`, `label` the value of
/// `localpv.io/node` (none: unlabelled), `terms` the node affinity terms.
fn pv(name: &str, source: &str, path: &str, label: Option<&str>, terms: Value) -> PersistentVolume {
    let pv = Pv::local(name, "")
        .capacity("10Mi")
        .reclaim("Retain")
        .terms(terms);
    let pv = match source {
        "hostPath" => pv.host_path(path),
        _ => pv.path(path),
    };
    match label {
        Some(node) => pv.label("localpv.io/node", node).build(),
        None => pv.build(),
    }
}

fn zone(z: &str) -> Value {
    json!({"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": [z]}]})
}

/// The agent's PV for `node` at `path`.
fn agents(name: &str, path: &str, node: &str) -> PersistentVolume {
    pv(name, "local", path, Some(node), json!([on_host(node)]))
}

/// A dry-run create (admission runs, nothing is stored): Ok, or the answer's code and message.
async fn attempt(client: &Client, pv: &PersistentVolume) -> Result<(), (u16, String)> {
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    match Api::<PersistentVolume>::all(client.clone())
        .create(&dry, pv)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) => Err((e.code, e.message)),
        Err(e) => Err((0, e.to_string())),
    }
}

async fn refused(who: &str, client: &Client, pv: &PersistentVolume, why: &str) {
    let name = pv.metadata.name.as_deref().unwrap_or_default();
    match attempt(client, pv).await {
        Err((403, m)) if m.contains(why) && m.contains(POLICY) => {}
        other => panic!("{who}: {name} should be refused by the policy ({why}), got {other:?}"),
    }
}

async fn admitted(who: &str, client: &Client, pv: &PersistentVolume) {
    let name = pv.metadata.name.as_deref().unwrap_or_default();
    if let Err(e) = attempt(client, pv).await {
        panic!("{who}: {name} should be admitted, got {e:?}");
    }
}

/// A plane with the PV binder, Nodes node-1 and node-2, the chart rendered with `VALUES` and applied (roles,
/// StorageClasses, the policy), and clients for the agent's ServiceAccount with tokens bound to a pod on each node.
struct Door {
    cp: ControlPlane,
    admin: Client,
    node1: Client,
    node2: Client,
    /// The agent's ServiceAccount with a token bound to no pod (no node in it).
    unbound: Client,
    /// The rendered policy and binding, to apply again.
    policy_file: PathBuf,
    /// The kubeconfigs of `node1` and `node2`.
    kubeconfigs: Vec<PathBuf>,
    /// A PV the policy refuses to anyone but node-1's agent.
    probe: PersistentVolume,
}

impl Door {
    /// `before` is created (as the admin) before the chart is applied.
    async fn open(before: &[PersistentVolume]) -> Door {
        let cp = ControlPlane::start(Options {
            controller_manager: true,
            ..Options::default()
        })
        .await;
        Door::open_on(cp, before, VALUES, "/mnt/disks").await
    }

    /// The same on a started plane, with the chart rendered from `values_text`, whose first class is on `dir`.
    async fn open_on(
        cp: ControlPlane,
        before: &[PersistentVolume],
        values_text: &str,
        dir: &str,
    ) -> Door {
        let admin = cp.client();
        for n in ["node-1", "node-2"] {
            create_node(&admin, n, &[]).await;
        }
        let ns: Namespace = obj(json!({"metadata": {"name": NAMESPACE}}));
        Api::all(admin.clone())
            .create(&PostParams::default(), &ns)
            .await
            .expect("namespace created");
        for p in before {
            Api::<PersistentVolume>::all(admin.clone())
                .create(&PostParams::default(), p)
                .await
                .expect("PV created before the policy");
        }
        let values = cp.dir.join("admission-values.yaml");
        fs::write(&values, values_text).expect("written");
        let yaml = render("localpv", &["-f", values.to_str().expect("utf-8")]);
        let rendered = cp.dir.join("rendered.yaml");
        fs::write(&rendered, &yaml).expect("written");
        let policy: Vec<String> = documents(&yaml)
            .into_iter()
            .filter(|d| {
                d["kind"]
                    .as_str()
                    .is_some_and(|k| k.starts_with("ValidatingAdmissionPolicy"))
            })
            .map(|d| serde_yaml_ng::to_string(&d).expect("serialises"))
            .collect();
        assert_eq!(
            policy.len(),
            2,
            "the defaults render a policy and its binding"
        );
        let policy_file = cp.dir.join("policy.yaml");
        fs::write(&policy_file, policy.join("---\n")).expect("written");
        apply(&cp, &rendered);

        let mut kubeconfigs = Vec::new();
        let mut clients = Vec::new();
        for n in ["node-1", "node-2"] {
            let kc = crate::packaging::node_token(&cp, n).await;
            clients.push(client_for(&kc).await);
            kubeconfigs.push(kc);
        }
        let unbound = client_for(&sa::token_kubeconfig(&cp, NAMESPACE, AGENT_SA).await).await;
        let node2 = clients.pop().expect("two clients");
        let node1 = clients.pop().expect("two clients");
        let door = Door {
            cp,
            admin,
            node1,
            node2,
            unbound,
            policy_file,
            kubeconfigs,
            probe: agents("probe", &format!("{dir}/probe"), "node-1"),
        };
        door.wait_enforced(true).await;
        door
    }

    /// Waits until the API server enforces the policy (`true`) or no longer does: policies reach admission
    /// through an informer, a moment after they are stored.
    async fn wait_enforced(&self, yes: bool) {
        let probe = &self.probe;
        eventually(
            &format!("the policy to be enforced: {yes}"),
            Duration::from_secs(30),
            || async {
                match (attempt(&self.admin, probe).await, yes) {
                    (Err((403, m)), true) if m.contains(NOT_AGENT) => Ok(()),
                    (Ok(()), false) => Ok(()),
                    (other, _) => Err(format!("{other:?}")),
                }
            },
        )
        .await;
    }
}

/// Copies of the agent's PV at `/mnt/disks/vol1` on node-1 as `attack_ownership` forges them, and the other PVs
/// that reach a discovery directory.
fn forged() -> Vec<PersistentVolume> {
    let copy = |name: &str, path: &str| agents(name, path, "node-1");
    vec![
        copy("forged-same-path", "/mnt/disks/vol1"),
        copy("forged-dot", "/mnt/disks/./vol1"),
        copy("forged-double-slash", "/mnt/disks//vol1"),
        copy("forged-trailing-slash", "/mnt/disks/vol1/"),
        copy("forged-double-slash-above", "/mnt//disks/vol1"),
        copy("forged-dot-dir", "/mnt/disks/."),
        copy("forged-inside-a-disk", "/mnt/disks/vol1/sub"),
        pv(
            "forged-unlabelled",
            "local",
            "/mnt/disks/vol1",
            None,
            json!([on_host("node-1")]),
        ),
        agents("forged-other-node", "/mnt/disks/vol1", "node-2"),
        copy("forged-discovery-dir", "/mnt/disks"),
        copy("forged-parent", "/mnt"),
        copy("forged-zoned", "/mnt/zoned/vol1"),
        pv(
            "forged-host-path",
            "hostPath",
            "/mnt/disks/vol1",
            Some("node-1"),
            json!([on_host("node-1")]),
        ),
        pv(
            "forged-host-root",
            "hostPath",
            "/",
            None,
            json!([on_host("node-1")]),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn the_policy_refuses_foreign_pvs_and_admits_the_agents_own() {
    let before = pv(
        "made-before",
        "local",
        "/mnt/disks/vol9",
        None,
        json!([on_host("node-1")]),
    );
    let d = Door::open(std::slice::from_ref(&before)).await;

    // What the API server (1.30 and later) puts in the user of a pod-bound token: the pod's node.
    let review = Api::<SelfSubjectReview>::all(d.node1.clone())
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .expect("self subject review");
    let user = review.status.and_then(|s| s.user_info).expect("user info");
    let extra = user.extra.unwrap_or_default();
    println!("agent on node-1: {:?} {extra:?}", user.username);
    assert_eq!(
        extra.get("authentication.kubernetes.io/node-name"),
        Some(&vec!["node-1".to_string()]),
        "a pod-bound token names the pod's node: {extra:?}"
    );

    // (a) a user (the admin), (c) the agent of node-2, the agent without a pod-bound token: every forged PV refused.
    for p in forged() {
        refused("admin", &d.admin, &p, NOT_AGENT).await;
    }
    for p in forged()
        .iter()
        .filter(|p| p.metadata.name.as_deref() != Some("forged-other-node"))
    {
        refused("the agent of node-2", &d.node2, p, WRONG_NODE).await;
        refused("the agent, unbound token", &d.unbound, p, WRONG_NODE).await;
    }
    // `..` never reaches the policy: the API server's own validation refuses it in both kinds of PV.
    for source in ["local", "hostPath"] {
        let dots = pv(
            "forged-dot-dot",
            source,
            "/mnt/disks/x/../vol1",
            Some("node-1"),
            json!([on_host("node-1")]),
        );
        match attempt(&d.admin, &dots).await {
            Err((422, m)) if m.contains("must not contain '..'") => {}
            other => panic!("{source} with '..': {other:?}"),
        }
    }

    // (b) the agent of node-1: its own PVs, not PVs for another node, not the directories themselves.
    admitted(
        "agent node-1",
        &d.node1,
        &agents("own", "/mnt/disks/vol1", "node-1"),
    )
    .await;
    let zoned = pv(
        "own-zoned",
        "local",
        "/mnt/zoned/vol1",
        Some("node-1"),
        json!([on_host("node-1"), zone("zone-a")]),
    );
    admitted("agent node-1", &d.node1, &zoned).await;
    let refusals = [
        agents("for-node-2", "/mnt/disks/vol1", "node-2"),
        pv(
            "labelled-node-2",
            "local",
            "/mnt/disks/vol1",
            Some("node-2"),
            json!([on_host("node-1")]),
        ),
        pv(
            "affine-node-2",
            "local",
            "/mnt/disks/vol1",
            Some("node-1"),
            json!([on_host("node-2")]),
        ),
        pv(
            "unlabelled",
            "local",
            "/mnt/disks/vol1",
            None,
            json!([on_host("node-1")]),
        ),
        pv(
            "two-nodes",
            "local",
            "/mnt/disks/vol1",
            Some("node-1"),
            json!([on_host("node-1"), on_host("node-2")]),
        ),
        pv(
            "zoned-without-its-term",
            "local",
            "/mnt/zoned/vol1",
            Some("node-1"),
            json!([on_host("node-1")]),
        ),
        pv(
            "zoned-other-zone",
            "local",
            "/mnt/zoned/vol1",
            Some("node-1"),
            json!([on_host("node-1"), zone("zone-b")]),
        ),
        agents("the-dir", "/mnt/disks", "node-1"),
        agents("the-dir-spelled", "/mnt/./disks/", "node-1"),
        agents("the-parent", "/mnt", "node-1"),
    ];
    for p in &refusals {
        refused("agent node-1", &d.node1, p, WRONG_NODE).await;
    }

    // Paths beside a discovery directory are nobody's business: a name that merely starts like it, elsewhere.
    for (name, path) in [
        ("beside", "/mnt/disks2/vol1"),
        ("prefix", "/mnt/disksvol1"),
        ("elsewhere", "/srv/data"),
    ] {
        let p = pv(name, "local", path, None, json!([on_host("node-1")]));
        admitted("admin", &d.admin, &p).await;
    }

    // The agent's PV created for real, its labels patched by the agent, bound by the PV binder (claimRef in the
    // spec, then the status); a PV made before the policy still takes label patches.
    let own = Api::<PersistentVolume>::all(d.node1.clone())
        .create(
            &PostParams::default(),
            &agents("own", "/mnt/disks/vol1", "node-1"),
        )
        .await
        .expect("the agent creates its PV");
    // NB: keys of ours only from the agent of the PV's node (a narrow agent's watch depends on it); others from
    // anyone.
    let ours = Patch::Merge(json!({"metadata": {"annotations": {"localpv.io/test": "x"}}}));
    let theirs = Patch::Merge(json!({"metadata": {"annotations": {"example.com/note": "x"}}}));
    for (who, client, name, patch) in [
        ("agent node-1", &d.node1, "own", &ours),
        ("admin", &d.admin, "own", &theirs),
        ("admin", &d.admin, "made-before", &theirs),
    ] {
        Api::<PersistentVolume>::all(client.clone())
            .patch(name, &PatchParams::default(), patch)
            .await
            .unwrap_or_else(|e| panic!("{who} patches {name}: {e}"));
    }
    let app = d.cp.namespace("app").await;
    claim_pv(&d.admin, &app, "data", &own, "local-storage", "10Mi").await;
    claim_pv(&d.admin, &app, "before", &before, "local-storage", "10Mi").await;
    for name in ["own", "made-before"] {
        let now = Api::<PersistentVolume>::all(d.admin.clone())
            .get(name)
            .await
            .expect("PV");
        assert_eq!(phase(&now), "Bound", "{name} bound by the PV binder");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn forged_pvs_are_admitted_again_once_the_policy_or_its_binding_is_deleted() {
    let d = Door::open(&[]).await;
    let probe = |client: &Client| {
        let client = client.clone();
        async move {
            for p in forged() {
                if let Err(e) = attempt(&client, &p).await {
                    panic!("{:?} refused without the policy: {e:?}", p.metadata.name);
                }
            }
        }
    };
    d.cp.kubectl(&["delete", "validatingadmissionpolicybinding", POLICY]);
    d.wait_enforced(false).await;
    probe(&d.admin).await;
    probe(&d.node2).await;

    apply(&d.cp, &d.policy_file);
    d.wait_enforced(true).await;
    d.cp.kubectl(&["delete", "validatingadmissionpolicy", POLICY]);
    d.wait_enforced(false).await;
    probe(&d.admin).await;
    // With the policy gone the forged PV is stored: from here only the agent's own check keeps it off our disks.
    Api::<PersistentVolume>::all(d.admin.clone())
        .create(&PostParams::default(), &forged()[0])
        .await
        .expect("a forged PV is stored once the policy is gone");
    Api::<PersistentVolume>::all(d.admin.clone())
        .delete("forged-same-path", &DeleteParams::default())
        .await
        .expect("deleted");
}

/// A plane with the chart's policy over node-1's discovery directory, and node-1's agent (started with `args`)
/// under a token bound to a pod on node-1, its disk `vol1` (a tmpfs) published: the door, the agent, the disk's
/// path, its mount and its Available PV.
async fn agent_under_the_policy(args: &[&str]) -> (Door, Agent, PathBuf, Mount, PersistentVolume) {
    let cp = ControlPlane::start(Options {
        controller_manager: true,
        ..Options::default()
    })
    .await;
    install_crd(&cp).await;
    let mut agent = Agent::new(&cp, "node-1", "local-storage");
    agent.extra_args.extend(args.iter().map(|a| a.to_string()));
    let values = format!(
        "classes:\n  - name: local-storage\n    hostDir: {}\n",
        agent.disks_dir.display()
    );
    let dir = agent.disks_dir.display().to_string();
    let d = Door::open_on(cp, &[], &values, &dir).await;
    agent.set_kubeconfig(&d.kubeconfigs[0]);
    let vol1 = agent.disk("vol1");
    let mount = Mount::tmpfs(&vol1, "64M", d.cp.reaper());
    agent.start(&d.cp);
    agent.wait_ready().await;
    let ours = available_at(&d, &vol1).await;
    (d, agent, vol1, mount, ours)
}

/// node-1's Available PV at `path`.
async fn available_at(d: &Door, path: &Path) -> PersistentVolume {
    pv_at(
        &d.admin,
        "node-1",
        path,
        "Available",
        Duration::from_secs(60),
    )
    .await
}

/// The real agent under the policy, with a token bound to a pod on its node as the kubelet gives it: it publishes,
/// its PV is bound, released, wiped (patched), deleted and published again; a copy of its PV is refused.
#[tokio::test(flavor = "multi_thread")]
async fn the_agent_runs_a_claim_lifetime_under_the_policy_with_its_pod_bound_token() {
    let (d, mut agent, vol1, _m, ours) = agent_under_the_policy(&[]).await;

    let mut copy = ours.clone();
    copy.metadata = kube::api::ObjectMeta {
        name: Some("forged-copy".into()),
        labels: ours.metadata.labels.clone(),
        annotations: ours.metadata.annotations.clone(),
        ..Default::default()
    };
    copy.status = None;
    refused("admin", &d.admin, &copy, NOT_AGENT).await;
    refused("the agent of node-2", &d.node2, &copy, WRONG_NODE).await;

    let app = d.cp.namespace("app").await;
    claim_pv(&d.admin, &app, "data", &ours, "local-storage", "10Mi").await;
    fs::write(vol1.join("secret.txt"), "tenant data").expect("written");
    Api::<PersistentVolumeClaim>::namespaced(d.admin.clone(), &app)
        .delete("data", &DeleteParams::default())
        .await
        .expect("claim deleted");
    fresh_pv_at(&d.admin, &vol1, &ours, Duration::from_secs(60)).await;
    assert!(!vol1.join("secret.txt").exists(), "the disk was wiped");
    assert!(
        !agent.log().contains(POLICY),
        "the policy refused the agent:\n{}",
        agent.log()
    );
    agent.process.take();
}

/// The agent's `localpv_node_pv_watch_narrow` gauge (`None` while it does not answer).
fn narrow_gauge(agent: &Agent) -> Option<f64> {
    let (_, text) = agent.get("/metrics")?;
    Some(crate::support::metric_sum(
        &text,
        "localpv_node_pv_watch_narrow",
        &[],
    ))
}

async fn wait_narrow(agent: &Agent, want: f64, what: &str) {
    eventually(what, Duration::from_secs(60), || async {
        match narrow_gauge(agent) {
            Some(v) if v == want => Ok(()),
            other => Err(format!("localpv_node_pv_watch_narrow = {other:?}")),
        }
    })
    .await;
}

/// `agent_under_the_policy` given the policy's name, once its PV watch is narrow.
async fn narrow_agent_under_the_policy() -> (Door, Agent, PathBuf, Mount, PersistentVolume) {
    let policy = format!("--admission-policy={POLICY}");
    let under = agent_under_the_policy(&[&policy]).await;
    wait_narrow(
        &under.1,
        1.0,
        "the agent narrows its PV watch under the policy",
    )
    .await;
    under
}

/// Issue 34: the agent given the policy's name watches only its own node's PVs once the policy has held (and at
/// once after a restart under the same policy); the policy refuses what such a watch would miss (our annotations
/// set, our node label changed); and when the policy is gone and a forged PV reaches a Released disk, the agent
/// checks the policy before the wipe, watches every PV again, and does not wipe while the forged PV exists.
#[tokio::test(flavor = "multi_thread")]
async fn a_narrow_agent_checks_the_policy_before_a_wipe_and_widens_once_it_is_gone() {
    let (d, mut agent, vol1, _m, ours) = narrow_agent_under_the_policy().await;
    let pvs: Api<PersistentVolume> = Api::all(d.admin.clone());
    let name = ours.metadata.name.clone().expect("named");

    // What a narrow watch would miss is refused: our identity annotation set on another PV, our label removed
    // from (or changed on) ours, by anyone but this node's agent.
    let mut elsewhere = pv(
        "elsewhere",
        "local",
        "/srv/data",
        None,
        json!([on_host("node-1")]),
    );
    let annotated = elsewhere.metadata.annotations.get_or_insert_default();
    annotated.insert("localpv.io/fs-uuid".into(), "0000-1111".into());
    refused(
        "admin",
        &d.admin,
        &elsewhere,
        "may set localpv.io/ annotations",
    )
    .await;
    for (who, client) in [("admin", &d.admin), ("the agent of node-2", &d.node2)] {
        for label in [Value::Null, json!("node-2")] {
            let patch = json!({"metadata": {"labels": {"localpv.io/node": label}}});
            let got = Api::<PersistentVolume>::all(client.clone())
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await;
            match got {
                // NB: the first rule that fails speaks (for our PV, the path rule).
                Err(kube::Error::Api(s)) if s.code == 403 && s.message.contains(POLICY) => {}
                other => panic!(
                    "{who}: changing our node label to {label} should be refused, got {other:?}"
                ),
            }
        }
    }

    // A restart under the same policy narrows at once, from its record.
    agent.process.take();
    agent.start(&d.cp);
    agent.wait_ready().await;
    wait_narrow(&agent, 1.0, "the restarted agent is narrow").await;
    assert!(
        agent
            .log()
            .contains("resuming the narrow PV watch recorded"),
        "{}",
        agent.log()
    );

    // A claim lifetime on the narrow watch: the policy checked before the wipe and the new PV, both done.
    let app = d.cp.namespace("app").await;
    let claims = Api::<PersistentVolumeClaim>::namespaced(d.admin.clone(), &app);
    claim_pv(&d.admin, &app, "first", &ours, "local-storage", "10Mi").await;
    fs::write(vol1.join("first.txt"), "tenant data").expect("written");
    claims
        .delete("first", &DeleteParams::default())
        .await
        .expect("claim deleted");
    fresh_pv_at(&d.admin, &vol1, &ours, Duration::from_secs(60)).await;
    assert!(!vol1.join("first.txt").exists(), "the disk was wiped");
    let ours = available_at(&d, &vol1).await;
    assert_eq!(narrow_gauge(&agent), Some(1.0), "still narrow");
    let name = ours.metadata.name.clone().expect("named");

    claim_pv(&d.admin, &app, "data", &ours, "local-storage", "10Mi").await;
    fs::write(vol1.join("secret.txt"), "tenant data").expect("written");

    // The policy goes; a copy of our PV (no label: the narrow watch cannot see it) is stored.
    d.cp.kubectl(&["delete", "validatingadmissionpolicybinding", POLICY]);
    d.wait_enforced(false).await;
    store_forged_copy(&d, &ours).await;

    release_and_see_the_wipe_refused(&d, &agent, &app, &name, &vol1).await;
    let now = pvs.get(&name).await.expect("our PV is there");
    assert_eq!(phase(&now), "Released");

    // The forged PV gone, the wide agent wipes and publishes again.
    pvs.delete("forged-copy", &DeleteParams::default())
        .await
        .expect("deleted");
    fresh_pv_at(&d.admin, &vol1, &ours, Duration::from_secs(60)).await;
    assert!(!vol1.join("secret.txt").exists(), "the disk was wiped");
    agent.process.take();
}

/// Stores a copy of `ours` without our label or a claim (`forged-copy`): the narrow watch cannot see it, and only
/// a cluster without the policy's binding admits it.
async fn store_forged_copy(d: &Door, ours: &PersistentVolume) {
    let mut copy = ours.clone();
    copy.metadata = kube::api::ObjectMeta {
        name: Some("forged-copy".into()),
        ..Default::default()
    };
    copy.spec.as_mut().expect("a spec").claim_ref = None;
    copy.status = None;
    Api::<PersistentVolume>::all(d.admin.clone())
        .create(&PostParams::default(), &copy)
        .await
        .expect("a forged PV is stored once the binding is gone");
}

/// Releases claim `data` of namespace `app` on our PV `name` at `vol`, which the forged copy also reaches: the
/// agent checks the policy before the wipe, says it is not in force on the Node, widens, and refuses the wipe; the
/// tenant's `secret.txt` stays.
async fn release_and_see_the_wipe_refused(
    d: &Door,
    agent: &Agent,
    app: &str,
    name: &str,
    vol: &Path,
) {
    Api::<PersistentVolumeClaim>::namespaced(d.admin.clone(), app)
        .delete("data", &DeleteParams::default())
        .await
        .expect("claim deleted");
    crate::node_agent::wait_event(
        &d.admin,
        "node-1",
        "AdmissionPolicyNotInForce",
        Duration::from_secs(60),
    )
    .await;
    wait_narrow(agent, 0.0, "the agent widens its PV watch").await;
    crate::node_agent::wait_event(&d.admin, name, "WipeRefused", Duration::from_secs(60)).await;
    assert!(
        vol.join("secret.txt").exists(),
        "the disk was not wiped while the forged PV reaches it"
    );
}

/// Issue 34, point 2: what a narrow agent's restart costs the API server. Every request node-1's agent makes from
/// its start until it is ready and narrow, and for the settle time after (as `verb resource`), counted from the
/// audit log: one streaming watch per kind it watches (its first events are the objects: no list); the
/// StorageClasses and its LocalDisks (polled, not watched) taken from what the clean stop left in the state
/// directory (`agent::warmstart`), so not listed until a period later; no probe for the LocalDisk CRD and no read of the policy (resumed from the record, read before the
/// first wipe or new PV). Then the attack that resuming unread invites: the policy's binding deleted while the agent
/// is down and a copy of its PV stored; restarted narrow, the agent reads the policy before the wipe the released
/// claim asks for, widens and refuses the wipe; the tenant's file stays.
#[tokio::test(flavor = "multi_thread")]
async fn a_narrow_agents_restart_costs_one_request_per_watch_and_its_first_wipe_checks_the_policy()
{
    let (d, mut agent, vol1, _m, ours) = narrow_agent_under_the_policy().await;
    agent.process.take();
    let audit = d.cp.dir.join("logs/audit.log");
    let before: std::collections::BTreeSet<String> = crate::support::audit::entries(&audit)
        .iter()
        .map(|e| crate::support::audit::text(&e["auditID"]))
        .collect();
    agent.start(&d.cp);
    agent.wait_ready().await;
    wait_narrow(&agent, 1.0, "the restarted agent is narrow").await;
    // NB: past the 10 s the agent waits before it narrows (plan::narrow::SETTLE), had it started wide.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let mut seen = std::collections::BTreeSet::new();
    let mut requests: Vec<String> = Vec::new();
    for e in crate::support::audit::entries(&audit) {
        let id = crate::support::audit::text(&e["auditID"]);
        let user = crate::support::audit::user(&e);
        if before.contains(&id) || !seen.insert(id) || !user.ends_with(&format!(":{AGENT_SA}")) {
            continue;
        }
        let watch = e["requestURI"]
            .as_str()
            .unwrap_or_default()
            .contains("watch=true");
        let verb = match (crate::support::audit::text(&e["verb"]).as_str(), watch) {
            ("list", true) => "watch".to_string(),
            (verb, _) => verb.to_string(),
        };
        requests.push(format!(
            "{verb} {}",
            crate::support::audit::text(&e["objectRef"]["resource"])
        ));
    }
    requests.sort();
    // NB: before issue 34's part 3 the same restart made 13: a list and a watch per kind, a probe for the CRD and
    // two reads of the policy.
    assert_eq!(
        requests,
        ["watch nodes", "watch persistentvolumes"],
        "one streaming watch per watched kind; StorageClasses and LocalDisks from what the clean stop left (listed a \
         period later), no probe, no read of the policy"
    );

    let app = d.cp.namespace("app").await;
    claim_pv(&d.admin, &app, "data", &ours, "local-storage", "10Mi").await;
    fs::write(vol1.join("secret.txt"), "tenant data").expect("written");
    agent.process.take();
    d.cp.kubectl(&["delete", "validatingadmissionpolicybinding", POLICY]);
    d.wait_enforced(false).await;
    store_forged_copy(&d, &ours).await;
    agent.start(&d.cp);
    agent.wait_ready().await;
    wait_narrow(&agent, 1.0, "the agent resumes narrow from its record").await;
    let name = ours.metadata.name.clone().expect("named");
    release_and_see_the_wipe_refused(&d, &agent, &app, &name, &vol1).await;
    agent.process.take();
}
