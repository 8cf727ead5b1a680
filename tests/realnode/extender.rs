//! The extender as users wire it: the chart's Deployment serving HTTPS with the certificates the chart generates
//! (`extender.tls.source: generate`) and requiring the scheduler's client certificate (mTLS), called by a real
//! kube-scheduler; a pod it places runs and writes, and a pod that fits nowhere gets our `NoLocalVolume` reasons.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim, Pod, Secret};
use kube::api::{Api, ListParams};
use serde_json::json;

use crate::common::*;
use crate::support::cluster::Extender;
use crate::support::realnode::{POD_TIMEOUT, RealCluster};

const SCHEDULER: &str = "localpv-scheduler";

fn secret_file(c: &RealCluster, s: &Secret, key: &str, name: &str) -> std::path::PathBuf {
    let data = s
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .unwrap_or_else(|| panic!("secret has {key}"));
    let path = c.run_dir().join(name);
    std::fs::write(&path, &data.0).expect("secret file written");
    path
}

/// The extender pod's address once it is Ready (the host reaches pod IPs over the bridge; there is no kube-proxy
/// for the Service, so the scheduler verifies the certificate against the Service's name instead).
async fn extender_ip(c: &RealCluster) -> String {
    let api: Api<Pod> = Api::namespaced(c.client(), NAMESPACE);
    let deadline = Instant::now() + POD_TIMEOUT;
    loop {
        let pods = api
            .list(&ListParams::default().labels("app.kubernetes.io/component=extender"))
            .await
            .expect("extender pods list")
            .items;
        let ready = pods.iter().find_map(|p| {
            let st = p.status.as_ref()?;
            let ok = st
                .conditions
                .as_ref()?
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            ok.then(|| st.pod_ip.clone()).flatten()
        });
        if let Some(ip) = ready {
            return ip;
        }
        assert!(
            Instant::now() < deadline,
            "extender not Ready: {:#?}\n{}",
            pods.iter().map(|p| &p.status).collect::<Vec<_>>(),
            c.container_logs(NAMESPACE, &format!("{RELEASE}-extender"))
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn real_scheduler_calls_the_extender_over_mtls_and_pods_that_fit_nowhere_get_our_reasons() {
    let mut c = RealCluster::start(2).await;
    c.tmpfs("node-1", "vol1", "64M");
    c.tmpfs("node-2", "vol1", "64M");
    install(
        &c,
        json!({"extender": {"enabled": true, "replicas": 1,
                            "podDisruptionBudget": {"enabled": false},
                            "tls": {"enabled": true, "source": "generate", "clientAuth": true}}}),
    )
    .await;
    let ip = extender_ip(&c).await;
    let secrets: Api<Secret> = Api::namespaced(c.client(), NAMESPACE);
    let server = secrets
        .get(&format!("{RELEASE}-extender-tls"))
        .await
        .expect("chart-generated serving Secret");
    let client = secrets
        .get(&format!("{RELEASE}-scheduler-client"))
        .await
        .expect("chart-generated client Secret");
    let mut ext = Extender::new(&format!("https://{ip}:8888"));
    ext.ca_file = Some(secret_file(&c, &server, "ca.crt", "extender-ca.crt"));
    ext.server_name = Some(format!("{RELEASE}-extender.{NAMESPACE}.svc"));
    ext.client_cert = Some((
        secret_file(&c, &client, "tls.crt", "scheduler-client.crt"),
        secret_file(&c, &client, "tls.key", "scheduler-client.key"),
    ));
    c.plane.start_scheduler(SCHEDULER, &[ext]).await;

    let disks = c.disk_root().join("disks/vol1").display().to_string();
    for node in ["node-1", "node-2"] {
        wait_pv(&c, node, &disks, "Available").await;
    }
    let ns = c.plane.namespace("extender").await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.client(), &ns);
    let pods: Api<Pod> = Api::namespaced(c.client(), &ns);
    create(&claims, &claim("fits", "local-storage", "16Mi", false)).await;
    let mut placed = busybox_pod(
        "placed",
        "echo placed > /data/who && sync",
        "fits",
        false,
        None,
    );
    placed.spec.as_mut().expect("spec").scheduler_name = Some(SCHEDULER.into());
    create(&pods, &placed).await;
    let (phase, node) = wait_pod(&c, &ns, "placed", &["Succeeded", "Failed"]).await;
    assert_eq!(phase, "Succeeded", "{}", c.plane.log_tails(20));
    let (_, pv) = claim_state(&c, &ns, "fits").await;
    let pv = pvs(&c).await.remove(&pv.expect("bound")).expect("PV");
    assert_eq!(pv_node(&pv), node);
    let who = host_path(&c, &node, &pv_path(&pv)).join("who");
    assert_eq!(
        std::fs::read_to_string(&who).expect("pod's file on the host"),
        "placed\n"
    );
    let sched_log = std::fs::read_to_string(
        c.plane
            .log_dir()
            .join(format!("kube-scheduler-{SCHEDULER}.log")),
    )
    .unwrap_or_default();
    assert!(
        !sched_log.contains("extender") || !sched_log.to_lowercase().contains("tls: "),
        "no TLS errors talking to the extender:\n{sched_log}"
    );

    // Fits nowhere: the extender's Lease holder puts our per-node reasons on the pod.
    create(&claims, &claim("huge", "local-storage", "50Gi", false)).await;
    let mut huge = busybox_pod("huge", "true", "huge", false, None);
    huge.spec.as_mut().expect("spec").scheduler_name = Some(SCHEDULER.into());
    create(&pods, &huge).await;
    let events: Api<Event> = Api::namespaced(c.client(), &ns);
    let deadline = Instant::now() + POD_TIMEOUT;
    let note = loop {
        let list = events
            .list(&ListParams::default().fields("involvedObject.name=huge,reason=NoLocalVolume"))
            .await
            .expect("events list");
        if let Some(m) = list.items.into_iter().find_map(|e| e.message) {
            break m;
        }
        assert!(
            Instant::now() < deadline,
            "no NoLocalVolume event on huge\n{}",
            c.container_logs(NAMESPACE, &format!("{RELEASE}-extender"))
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    for node in ["node-1", "node-2"] {
        assert!(note.contains(node), "the event names {node}: {note}");
    }
    assert!(note.contains("claim asks 50Gi"), "{note}");
}
