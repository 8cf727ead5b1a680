//! Attacks on ownership (issue 14, points 1 and 5), on the real control plane with real tmpfs disks: PVs the
//! agent did not create (copies of ours with its label and annotations, odd spellings of a Bound PV's path, no
//! label, another node's affinity, the discovery dir itself, a mount outside it, our very name after ours was
//! deleted) must never make it patch, wipe or delete; and a whole claim lifetime while the agent was down must
//! not leak the tenant's files to the next PV.

use std::fs;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

use crate::node_agent::{
    claim_pv, obj, phase, plane_with_agent, pv_at, pvs_of, wait_claim, wait_event,
};
use crate::support::agent::Agent;
use crate::support::cluster::{ControlPlane, Options};
use crate::support::disks::Mount;
use crate::support::eventually;
use crate::support::objects::Pv;

const FOREIGN: &str = "ForeignPersistentVolume";

fn uid(pv: &PersistentVolume) -> String {
    pv.metadata.uid.clone().unwrap_or_default()
}

fn name(pv: &PersistentVolume) -> String {
    pv.metadata.name.clone().unwrap_or_default()
}

/// A PV someone made by hand (no label of ours, an annotation of nobody's) for `path`, with an affinity to `node`
/// and no claim: the PV controller keeps it Available for any tenant.
fn by_hand(new_name: &str, path: &str, node: &str) -> PersistentVolume {
    let pv = Pv::local(new_name, node).capacity("10Mi").path(path);
    pv.provisioned_by("example.com/by-hand").build()
}

/// A PV as someone with PV rights would copy ours: same labels and annotations, spec with `path`, affinity to
/// `node`, and a claimRef to a claim that does not exist (the PV controller then marks it Released).
fn copy_of(
    ours: &PersistentVolume,
    new_name: &str,
    path: &str,
    node: &str,
    labelled: bool,
) -> PersistentVolume {
    let mut pv = by_hand(new_name, path, node);
    pv.spec.as_mut().expect("spec").claim_ref = Some(obj(json!({
        "kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": "default",
        "name": format!("missing-{new_name}"), "uid": "00000000-0000-4000-8000-00000000dead"})));
    let by = pv.metadata.annotations.take().unwrap_or_default();
    pv.metadata.annotations = ours.metadata.annotations.clone();
    if labelled {
        pv.metadata.labels = ours.metadata.labels.clone();
    } else {
        // NB: without any provisioned-by the PV controller marks a released Delete PV Failed, not Released.
        pv.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .extend(by);
    }
    pv
}

struct World {
    cp: ControlPlane,
    ns: String,
    agent: Agent,
}

impl World {
    /// The plane with the PV controller, node-1's agent with one Delete class over `disks`.
    async fn one_class() -> World {
        let opts = Options {
            controller_manager: true,
            ..Default::default()
        };
        World::start(
            opts,
            &[("local-storage", "disks", "")],
            &[("local-storage", "Delete")],
        )
        .await
    }

    async fn start(
        opts: Options,
        classes: &[(&str, &str, &str)],
        policies: &[(&str, &str)],
    ) -> World {
        let (cp, ns, agent) =
            plane_with_agent(opts, "attack", policies, &["node-1", "node-2"], classes).await;
        World { cp, ns, agent }
    }

    fn pvs(&self) -> Api<PersistentVolume> {
        Api::all(self.cp.client())
    }

    fn pvcs(&self) -> Api<PersistentVolumeClaim> {
        Api::namespaced(self.cp.client(), &self.ns)
    }

    async fn pv_at(&self, path: &Path, want: &str) -> PersistentVolume {
        pv_at(
            &self.cp.client(),
            "node-1",
            path,
            want,
            Duration::from_secs(60),
        )
        .await
    }

    /// Binds a claim straight to `pv` (pre-bound by volumeName), waits for Bound.
    async fn claim(&self, claim: &str, pv: &PersistentVolume) {
        claim_pv(
            &self.cp.client(),
            &self.ns,
            claim,
            pv,
            "local-storage",
            "10Mi",
        )
        .await;
    }

    async fn wait_claim(&self, claim: &str, want: &str) {
        wait_claim(&self.cp.client(), &self.ns, claim, want).await;
    }

    async fn wait_phase(&self, pv: &str, want: &str) {
        eventually(
            &format!("PV {pv} to be {want}"),
            Duration::from_secs(60),
            || async {
                let got = self.pvs().get(pv).await.map_err(|e| e.to_string())?;
                if phase(&got) == want {
                    Ok(())
                } else {
                    Err(phase(&got))
                }
            },
        )
        .await;
    }

    async fn wait_event(&self, pv: &str, reason: &str) {
        wait_event(&self.cp.client(), pv, reason, Duration::from_secs(45)).await;
    }

    /// The PV exists with this UID and carries no wipe phase of ours.
    async fn untouched(&self, pv: &PersistentVolume) {
        let now =
            self.pvs().get(&name(pv)).await.unwrap_or_else(|e| {
                panic!("PV {} was deleted: {e}\n{}", name(pv), self.agent.log())
            });
        assert_eq!(uid(&now), uid(pv), "PV {} was replaced", name(pv));
        let ann = now.metadata.annotations.unwrap_or_default();
        assert!(
            !ann.contains_key("localpv.io/wipe-phase"),
            "PV {} was patched for a wipe: {ann:?}",
            name(pv)
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn forged_pvs_never_make_the_agent_patch_wipe_or_delete() {
    let mut w = World::one_class().await;
    let vol1 = w.agent.disk("vol1");
    let outside = w.cp.dir.join("hosts/node-1/outside");
    let _m1 = Mount::tmpfs(&vol1, "64M", w.cp.reaper());
    let _mo = Mount::tmpfs(&outside, "64M", w.cp.reaper());
    fs::write(outside.join("elsewhere.txt"), "not a localpv disk").unwrap();
    w.agent.start(&w.cp);
    w.agent.wait_ready().await;

    let ours = w.pv_at(&vol1, "Available").await;
    w.claim("tenant", &ours).await;
    fs::write(vol1.join("secret.txt"), "tenant data").unwrap();

    let dir = w.agent.disks_dir.display().to_string();
    let v = vol1.display().to_string();
    let forged = [
        copy_of(&ours, "forged-same-path", &v, "node-1", true),
        copy_of(
            &ours,
            "forged-dot",
            &format!("{dir}/./vol1"),
            "node-1",
            true,
        ),
        copy_of(
            &ours,
            "forged-double-slash",
            &format!("{dir}//vol1"),
            "node-1",
            true,
        ),
        copy_of(
            &ours,
            "forged-trailing-slash",
            &format!("{v}/"),
            "node-1",
            true,
        ),
        copy_of(&ours, "forged-unlabelled", &v, "node-1", false),
        copy_of(&ours, "forged-other-node", &v, "node-2", true),
        copy_of(&ours, "forged-discovery-dir", &dir, "node-1", true),
        copy_of(
            &ours,
            "forged-outside",
            &outside.display().to_string(),
            "node-1",
            true,
        ),
    ];
    let mut made = Vec::new();
    for pv in &forged {
        made.push(
            w.pvs()
                .create(&PostParams::default(), pv)
                .await
                .expect("forged PV created"),
        );
    }
    for pv in &made {
        w.wait_phase(&name(pv), "Released").await;
    }
    for pv in made.iter().filter(|pv| name(pv) != "forged-unlabelled") {
        w.wait_event(&name(pv), FOREIGN).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        vol1.join("secret.txt").exists(),
        "the Bound tenant's disk was wiped:\n{}",
        w.agent.log()
    );
    assert!(
        outside.join("elsewhere.txt").exists(),
        "a mount outside the discovery dir was wiped"
    );
    for pv in &made {
        w.untouched(pv).await;
    }
    w.untouched(&ours).await;
    assert_eq!(phase(&w.pvs().get(&name(&ours)).await.unwrap()), "Bound");

    // Our own PV released: not wiped while PVs we did not make reach its disk.
    w.pvcs()
        .delete("tenant", &DeleteParams::default())
        .await
        .expect("PVC deleted");
    w.wait_phase(&name(&ours), "Released").await;
    w.wait_event(&name(&ours), "WipeRefused").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        vol1.join("secret.txt").exists(),
        "wiped while foreign PVs reach the disk"
    );
    for pv in &made {
        w.untouched(pv).await;
    }

    // The labelled ones gone, the unlabelled one still blocks: the agent's watch cannot see it, the fresh list of
    // every PV it takes before a wipe does.
    let (unlabelled, labelled): (Vec<_>, Vec<_>) =
        made.iter().partition(|pv| name(pv) == "forged-unlabelled");
    for pv in &labelled {
        w.pvs()
            .delete(&name(pv), &DeleteParams::default())
            .await
            .expect("forged PV deleted");
    }
    w.wait_event("forged-unlabelled", FOREIGN).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        vol1.join("secret.txt").exists(),
        "wiped while an unlabelled PV reaches the disk"
    );
    w.untouched(unlabelled[0]).await;

    // Once it is gone too, our Released PV is wiped and the disk comes back as a new PV.
    w.pvs()
        .delete("forged-unlabelled", &DeleteParams::default())
        .await
        .expect("forged PV deleted");
    eventually(
        "vol1 to come back as a new Available PV",
        Duration::from_secs(60),
        || async {
            match pvs_of(&w.cp.client(), "node-1").await.get(&v) {
                Some(pv) if uid(pv) != uid(&ours) && phase(pv) == "Available" => Ok(()),
                other => Err(format!("{:?}", other.map(|p| (uid(p), phase(p))))),
            }
        },
    )
    .await;
    assert!(!vol1.join("secret.txt").exists());
    w.agent.process.take();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_copy_of_our_pv_made_while_the_agent_was_down_is_left_alone() {
    let mut w = World::one_class().await;
    let vol1 = w.agent.disk("vol1");
    let _m1 = Mount::tmpfs(&vol1, "64M", w.cp.reaper());
    w.agent.start(&w.cp);
    w.agent.wait_ready().await;
    let ours = w.pv_at(&vol1, "Available").await;
    w.claim("tenant", &ours).await;
    fs::write(vol1.join("secret.txt"), "tenant data").unwrap();
    // Let the agent see it Bound (the ledger marks the disk dirty), then stop it.
    tokio::time::sleep(Duration::from_secs(2)).await;
    w.agent
        .process
        .as_mut()
        .expect("agent running")
        .stop(Duration::from_secs(5));

    // Ours is deleted by hand; a PV with our very name, labels, annotations and path takes its place.
    w.pvs()
        .delete(&name(&ours), &DeleteParams::default())
        .await
        .expect("PV deleted");
    w.pvcs()
        .delete("tenant", &DeleteParams::default())
        .await
        .expect("PVC deleted");
    eventually("our PV to be gone", Duration::from_secs(30), || async {
        match w
            .pvs()
            .get_opt(&name(&ours))
            .await
            .map_err(|e| e.to_string())?
        {
            None => Ok(()),
            Some(_) => Err("still there".to_string()),
        }
    })
    .await;
    let copy = copy_of(
        &ours,
        &name(&ours),
        &vol1.display().to_string(),
        "node-1",
        true,
    );
    let copy = w
        .pvs()
        .create(&PostParams::default(), &copy)
        .await
        .expect("copy created");
    w.wait_phase(&name(&copy), "Released").await;

    w.agent.start(&w.cp);
    w.agent.wait_ready().await;
    w.wait_event(&name(&copy), FOREIGN).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    w.untouched(&copy).await;
    assert!(
        vol1.join("secret.txt").exists(),
        "the disk under a PV we did not make was wiped"
    );
    w.agent.process.take();
}

/// Binds `claim` through a pod placed on node-1 by kube-scheduler (WaitForFirstConsumer), as a tenant would.
async fn bind_through_a_pod(w: &World, claim: &str, class: &str) -> String {
    let pvc: PersistentVolumeClaim = obj(json!({"metadata": {"name": claim}, "spec": {
        "accessModes": ["ReadWriteOnce"], "storageClassName": class,
        "resources": {"requests": {"storage": "10Mi"}}}}));
    w.pvcs()
        .create(&PostParams::default(), &pvc)
        .await
        .expect("PVC created");
    let pod: Pod = obj(
        json!({"metadata": {"name": format!("{claim}-pod")}, "spec": {
        "nodeSelector": {"kubernetes.io/hostname": "node-1"},
        "containers": [{"name": "app", "image": "busybox", "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]}}),
    );
    let pods: Api<Pod> = Api::namespaced(w.cp.client(), &w.ns);
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("pod created");
    w.wait_claim(claim, "Bound").await;
    let bound = w.pvcs().get(claim).await.expect("PVC");
    let pv = bound
        .spec
        .and_then(|s| s.volume_name)
        .expect("a bound PVC names its PV");
    pods.delete(
        &format!("{claim}-pod"),
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        },
    )
    .await
    .expect("pod deleted");
    pv
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claim_lifetime_while_the_agent_was_down_does_not_leak_into_the_next_pv() {
    let mut w = World::start(
        Options::full(),
        &[("local-storage", "disks", ""), ("keep-storage", "keep", "")],
        &[("local-storage", "Delete"), ("keep-storage", "Retain")],
    )
    .await;
    let vol1 = w.agent.disk("vol1");
    let kept = w.cp.dir.join("hosts/node-1/keep/vol1");
    let _m1 = Mount::tmpfs(&vol1, "64M", w.cp.reaper());
    let _mk = Mount::tmpfs(&kept, "64M", w.cp.reaper());
    w.agent.start(&w.cp);
    w.agent.wait_ready().await;
    w.pv_at(&vol1, "Available").await;
    w.pv_at(&kept, "Available").await;
    w.agent
        .process
        .as_mut()
        .expect("agent running")
        .stop(Duration::from_secs(5));

    // The whole lifetime while the agent is stopped: bind through a pod, write, release, delete the PV by hand.
    for (claim, class, path) in [
        ("data", "local-storage", &vol1),
        ("keep", "keep-storage", &kept),
    ] {
        let pv = bind_through_a_pod(&w, claim, class).await;
        fs::write(path.join("tenant.txt"), "tenant data").unwrap();
        w.pvcs()
            .delete(claim, &DeleteParams::default())
            .await
            .expect("PVC deleted");
        w.wait_phase(&pv, "Released").await;
        w.pvs()
            .delete(&pv, &DeleteParams::default())
            .await
            .expect("PV deleted");
        eventually(
            &format!("PV {pv} to be gone"),
            Duration::from_secs(30),
            || async {
                match w.pvs().get_opt(&pv).await.map_err(|e| e.to_string())? {
                    None => Ok(()),
                    Some(_) => Err("still there".to_string()),
                }
            },
        )
        .await;
    }

    w.agent.start(&w.cp);
    // Whenever a PV exposes vol1 again, the tenant's file must already be gone.
    let v = vol1.display().to_string();
    let k = kept.display().to_string();
    eventually(
        "vol1 to be published again",
        Duration::from_secs(60),
        || async {
            let pvs = pvs_of(&w.cp.client(), "node-1").await;
            let leaked = vol1.join("tenant.txt").exists();
            assert!(
                !(pvs.contains_key(&v) && leaked),
                "vol1 was published with the tenant's file still on it:\n{}",
                w.agent.log()
            );
            assert!(
                !pvs.contains_key(&k),
                "a disk that served a claim under Retain was published again"
            );
            if pvs.contains_key(&v) {
                Ok(())
            } else {
                Err(format!("{:?}", pvs.keys()))
            }
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        !pvs_of(&w.cp.client(), "node-1").await.contains_key(&k),
        "Retain: not published again"
    );
    assert!(kept.join("tenant.txt").exists(), "Retain: the data is kept");
    w.agent.process.take();
}

/// The agent reads other PVs through its cluster-wide PV index rather than a list before each create. A PV without
/// our label that already exposes a path must hold the disk mounted there later: a second PV for it would hand one
/// disk to two tenants. Ordering makes this exact: the index shows the agent's own create of `first` only after
/// every earlier watch event, so once `first` is published the hand-made PV is in the index.
#[tokio::test(flavor = "multi_thread")]
async fn a_hand_made_pv_for_a_path_holds_the_disk_mounted_there_later() {
    let mut w = World::one_class().await;
    w.agent.start(&w.cp);
    w.agent.wait_ready().await;
    let held = w.agent.disk("held");
    let hand = w
        .pvs()
        .create(
            &PostParams::default(),
            &by_hand("by-hand", &held.display().to_string(), "node-1"),
        )
        .await
        .expect("hand-made PV created");

    let first = w.agent.disk("first");
    let _m1 = Mount::tmpfs(&first, "64M", w.cp.reaper());
    w.pv_at(&first, "Available").await;

    let _mh = Mount::tmpfs(&held, "64M", w.cp.reaper());
    fs::write(held.join("owner.txt"), "the hand-made PV's tenant").unwrap();
    let second = w.agent.disk("second");
    let _m2 = Mount::tmpfs(&second, "64M", w.cp.reaper());
    // `second`, mounted after `held`, is published: the agent has looked at `held` by then.
    w.pv_at(&second, "Available").await;
    w.wait_event("by-hand", FOREIGN).await;
    let path = held.display().to_string();
    assert!(
        !pvs_of(&w.cp.client(), "node-1").await.contains_key(&path),
        "a second PV was published for a disk a hand-made PV exposes:\n{}",
        w.agent.log()
    );
    w.untouched(&hand).await;
    assert!(held.join("owner.txt").exists());

    // Once the hand-made PV is gone the disk is free: published, its files left as they were (never wiped: the
    // agent did not make the PV that used it).
    w.pvs()
        .delete("by-hand", &DeleteParams::default())
        .await
        .expect("hand-made PV deleted");
    w.pv_at(&held, "Available").await;
    w.agent.process.take();
}
