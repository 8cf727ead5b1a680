//! Test support shared by the integration tests, the benchmarks and the demo (a dev-only crate, issue 35 point 5): a real control plane (`cluster`), stand-in
//! nodes (`nodes`), real disks (`disks`) and disks that fail on command (`faulty`), agent and extender processes
//! (`agent`, `extender`), and the process plumbing under them (`proc`, `certs`, `cgroup`).
#![allow(dead_code)]

/// The localpv repository: the harness reads its scripts, chart, CRD and Dockerfile, and builds there.
pub fn repo_root() -> &'static std::path::Path {
    std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

pub mod agent;
pub mod audit;
pub mod certs;
pub mod cgroup;
pub mod cluster;
pub mod disks;
pub mod extender;
pub mod faulty;
pub mod nodes;
pub mod objects;
pub mod proc;
pub mod realnode;
pub mod reference;
pub mod sa;

/// A stand-in CRD for `kind` (plural `plural`) in `group`, version v1, namespaced, any content accepted: what a
/// chart's objects of another operator (ServiceMonitor, cert-manager's Certificate) need to be applied.
pub fn stand_in_crd(group: &str, kind: &str, plural: &str) -> String {
    let singular = kind.to_lowercase();
    format!(
        "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: {plural}.{group}
spec:
  group: {group}
  names: {{kind: {kind}, plural: {plural}, singular: {singular}, listKind: {kind}List}}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}
"
    )
}

/// The Prometheus Operator's ServiceMonitor CRD, for charts that render a ServiceMonitor (the chart's all-on
/// rendering, the reference chart's `baremetal-prometheus.yaml`).
pub fn service_monitor_crd() -> String {
    stand_in_crd("monitoring.coreos.com", "ServiceMonitor", "servicemonitors")
}

use std::future::Future;
use std::time::{Duration, Instant};

/// The samples of the series `name` in a Prometheus text exposition whose lines contain every one of `having`
/// (label matchers such as `verb="Filter"`), summed; 0 when there are none.
pub fn metric_sum(text: &str, name: &str, having: &[&str]) -> f64 {
    text.lines()
        .filter(|l| {
            let rest = l.strip_prefix(name).unwrap_or("");
            (rest.starts_with('{') || rest.starts_with(' ')) && having.iter().all(|h| l.contains(h))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Polls `check` every 100 ms until it returns `Some`, or panics after `timeout` with `what` and the last value.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match check().await {
            Ok(v) => return v,
            Err(last) if Instant::now() >= deadline => {
                panic!("timed out after {timeout:?} waiting for {what}: {last}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}
