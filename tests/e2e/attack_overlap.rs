//! Issue 39 point 0 as an attack on the real control plane with real mounts: a bind mount of a Bound volume's
//! sub-directory, of its parent or of its very root, put at a new entry whose name sorts before or after the Bound
//! one, on tmpfs, ext4 and xfs. None is ever published; none is ever wiped; the Bound tenants' files survive, also
//! once the Bound volumes' own entries are unmounted and their claims released.

use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolume;

use crate::node_agent::{claim_pv, one_class_plane, phase, pv_at, pvs_of, release, wait_event};
use crate::support::disks::{LoopDevice, Mount};

const CLASS: &str = "local-storage";

/// One filesystem the test attacks: the Bound entry, the binds put beside it, and the file its tenant wrote.
struct Target {
    fs: &'static str,
    bound: PathBuf,
    /// (entry, the directory it binds) for every bind of this filesystem.
    binds: Vec<(PathBuf, PathBuf)>,
    /// The tenant's file, as written through the Bound entry.
    secret: PathBuf,
    /// The same file reached without the Bound entry (its source, or the bind of its directory).
    secret_elsewhere: PathBuf,
}

#[tokio::test(flavor = "multi_thread")]
async fn binds_overlapping_a_bound_volume_are_never_published_or_wiped() {
    let (cp, ns, mut agent) = one_class_plane("attack-overlap").await;
    let client = cp.client();
    let reaper = cp.reaper();
    let hosts = cp.dir.join("hosts/node-1");
    let mut guards: Vec<Mount> = Vec::new();
    let mut bound_mounts: Vec<Mount> = Vec::new();
    let mut loops: Vec<LoopDevice> = Vec::new();
    let mut targets: Vec<Target> = Vec::new();

    // Per filesystem: the whole filesystem at a host directory outside the discovery directory, its `data`
    // directory bind-mounted as the Bound volume `m-<fs>` (so a bind of the parent is possible too).
    for fs_type in ["tmpfs", "ext4", "xfs"] {
        let base = hosts.join(format!("base-{fs_type}"));
        let mount = match fs_type {
            "tmpfs" => Mount::tmpfs(&base, "64M", reaper),
            _ => {
                let image = hosts.join(format!("{fs_type}.img"));
                let device = LoopDevice::new(&image, 320, Some(fs_type), reaper);
                let mount = Mount::device(&device.device, &base, reaper);
                loops.push(device);
                mount
            }
        };
        guards.push(mount);
        fs::create_dir_all(base.join("data/shared")).unwrap();
        let bound = agent.disk(&format!("m-{fs_type}"));
        bound_mounts.push(Mount::bind(&base.join("data"), &bound, reaper));
        let bind = |name: &str, source: PathBuf| (agent.disk(&format!("{name}-{fs_type}")), source);
        targets.push(Target {
            fs: fs_type,
            secret: bound.join("shared/secret"),
            secret_elsewhere: base.join("data/shared/secret"),
            binds: vec![
                bind("a-sub", base.join("data/shared")),
                bind("z-sub", base.join("data/shared")),
                bind("a-same", base.join("data")),
                bind("z-same", base.join("data")),
                bind("a-parent", base.clone()),
                bind("z-parent", base.clone()),
            ],
            bound,
        });
    }
    // The attack exactly as found: a whole filesystem mounted as the Bound entry, its sub-directory bound at an
    // entry sorting first (tmpfs and ext4).
    for fs_type in ["tmpfs", "ext4"] {
        let bound = agent.disk(&format!("vol-b-{fs_type}"));
        let mount = match fs_type {
            "tmpfs" => Mount::tmpfs(&bound, "64M", reaper),
            _ => {
                let image = hosts.join(format!("whole-{fs_type}.img"));
                let device = LoopDevice::new(&image, 64, Some(fs_type), reaper);
                let mount = Mount::device(&device.device, &bound, reaper);
                loops.push(device);
                mount
            }
        };
        bound_mounts.push(mount);
        fs::create_dir_all(bound.join("shared")).unwrap();
        let entry = agent.disk(&format!("vol-a-{fs_type}"));
        targets.push(Target {
            fs: fs_type,
            secret: bound.join("shared/secret"),
            secret_elsewhere: entry.join("secret"),
            binds: vec![(entry, bound.join("shared"))],
            bound,
        });
    }

    agent.start(&cp);
    agent.wait_ready().await;
    let mut bound_pvs: Vec<PersistentVolume> = Vec::new();
    for (i, t) in targets.iter().enumerate() {
        let pv = pv_at(
            &client,
            "node-1",
            &t.bound,
            "Available",
            Duration::from_secs(60),
        )
        .await;
        claim_pv(&client, &ns, &format!("c{i}"), &pv, CLASS, "1Mi").await;
        fs::write(&t.secret, format!("the {} tenant's secret", t.fs)).unwrap();
        bound_pvs.push(pv);
    }

    // The binds appear while the volumes are Bound.
    for t in &targets {
        for (entry, source) in &t.binds {
            guards.push(Mount::bind(source, entry, reaper));
        }
    }
    for pv in &bound_pvs {
        let name = pv.metadata.name.as_deref().expect("name");
        wait_event(&client, name, "OverlappingStorage", Duration::from_secs(45)).await;
    }
    // Nothing happens that would have to happen before the checks: bounded, then looked at.
    tokio::time::sleep(Duration::from_secs(3)).await;
    no_bind_published(
        &client,
        &targets,
        "while the volumes are Bound",
        &agent.log(),
    )
    .await;
    secrets_survive(&targets, "while the volumes are Bound");

    // The Bound volumes' own entries go (the binds stay), then their claims: the PVs are Released with their disks
    // missing, nothing is wiped, and the binds still expose nothing.
    drop(bound_mounts);
    for (i, _) in targets.iter().enumerate() {
        release(&client, &ns, &format!("c{i}")).await;
    }
    for pv in &bound_pvs {
        let name = pv.metadata.name.as_deref().expect("name");
        wait_event(&client, name, "DiskMissing", Duration::from_secs(45)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    no_bind_published(
        &client,
        &targets,
        "with the Bound entries gone",
        &agent.log(),
    )
    .await;
    for t in &targets {
        assert!(
            t.secret_elsewhere.exists(),
            "the {} tenant's file was wiped ({}):\n{}",
            t.fs,
            t.secret_elsewhere.display(),
            agent.log()
        );
    }
    agent.process.take();
    drop(guards);
    drop(loops);
}

async fn no_bind_published(client: &kube::Client, targets: &[Target], when: &str, log: &str) {
    let pvs = pvs_of(client, "node-1").await;
    for t in targets {
        for (entry, _) in &t.binds {
            let at = pvs.get(&entry.display().to_string());
            assert!(
                at.is_none(),
                "{when}: {} ({}) was published as {:?} ({}):\n{log}",
                entry.display(),
                t.fs,
                at.and_then(|pv| pv.metadata.name.clone()),
                at.map(phase).unwrap_or_default()
            );
        }
    }
}

fn secrets_survive(targets: &[Target], when: &str) {
    for t in targets {
        assert!(
            t.secret.exists(),
            "{when}: the {} tenant's file at {} is gone",
            t.fs,
            t.secret.display()
        );
    }
}
