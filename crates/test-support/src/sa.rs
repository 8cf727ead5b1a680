//! ServiceAccount identities for tests: a token from the TokenRequest API and a kubeconfig that presents it, so a
//! component runs with exactly the RBAC a manifest grants its ServiceAccount (user
//! `system:serviceaccount:<namespace>:<name>` in the audit log).

use std::fs;
use std::path::{Path, PathBuf};

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};

use super::audit::{completed, entries, text, user};
use super::cluster::ControlPlane;

/// The user name the API server gives a ServiceAccount's tokens.
pub fn username(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// A kubeconfig for ServiceAccount `namespace/name` (which must exist), with a one-hour token.
pub async fn token_kubeconfig(cp: &ControlPlane, namespace: &str, name: &str) -> PathBuf {
    let api: Api<ServiceAccount> = Api::namespaced(cp.client(), namespace);
    let request: TokenRequest = serde_json::from_value(serde_json::json!({
        "spec": {"audiences": [], "expirationSeconds": 3600}
    }))
    .expect("token request literal is valid");
    let issued = api
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| panic!("failed to request a token for {namespace}/{name}: {e}"));
    let token = issued.status.and_then(|s| s.token).unwrap_or_default();
    assert!(
        !token.is_empty(),
        "TokenRequest for {namespace}/{name} returned no token"
    );
    write(cp, &format!("sa-{namespace}-{name}"), &token)
}

/// A kubeconfig for ServiceAccount `namespace/name` with a one-hour token bound to pod `pod` (which must exist, run
/// as that ServiceAccount, and have this UID), as the kubelet projects into the pod: the API server puts the pod's
/// node into the token's user (`authentication.kubernetes.io/node-name`, Kubernetes 1.30+).
pub async fn pod_token_kubeconfig(
    cp: &ControlPlane,
    namespace: &str,
    name: &str,
    pod: &str,
    pod_uid: &str,
) -> PathBuf {
    let api: Api<ServiceAccount> = Api::namespaced(cp.client(), namespace);
    let request: TokenRequest = serde_json::from_value(serde_json::json!({
        "spec": {"audiences": [], "expirationSeconds": 3600,
                 "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": pod, "uid": pod_uid}}
    }))
    .expect("token request literal is valid");
    let issued = api
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| {
            panic!("failed to request a token for {namespace}/{name} bound to {pod}: {e}")
        });
    let token = issued.status.and_then(|s| s.token).unwrap_or_default();
    assert!(
        !token.is_empty(),
        "TokenRequest for {namespace}/{name} bound to {pod} returned no token"
    );
    write(cp, &format!("sa-{namespace}-{name}-{pod}"), &token)
}

/// A kubeconfig for ServiceAccount `namespace/name` with a token bound to a pod `agent-<node>` on `node`, created
/// here and never run: what the kubelet gives a DaemonSet's pod on that node.
pub async fn node_agent_kubeconfig(
    cp: &ControlPlane,
    namespace: &str,
    name: &str,
    node: String,
) -> PathBuf {
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("agent-{node}")},
        "spec": {"nodeName": node, "serviceAccountName": name,
                 "containers": [{"name": "agent", "image": "localpv"}]}}))
    .expect("pod literal");
    let pod = Api::namespaced(cp.client(), namespace)
        .create(&PostParams::default(), &pod)
        .await
        .expect("agent pod created");
    let uid = pod.metadata.uid.expect("a created pod has a UID");
    pod_token_kubeconfig(cp, namespace, name, &format!("agent-{node}"), &uid).await
}

fn write(cp: &ControlPlane, file: &str, token: &str) -> PathBuf {
    let path = cp.dir.join(format!("{file}.kubeconfig"));
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {server}\n    certificate-authority: {ca:?}\n\
         users:\n- name: sa\n  user:\n    token: {token}\n\
         contexts:\n- name: test\n  context:\n    cluster: test\n    user: sa\ncurrent-context: test\n",
        server = cp.api_url,
        ca = cp.certs.ca_cert.display().to_string(),
    );
    fs::write(&path, text).expect("kubeconfig written");
    path
}

/// Requests by users whose name starts with `prefix` that the API server answered with `code`, as
/// (user, verb, resource, namespace, name).
pub fn answered_with(audit_log: &Path, prefix: &str, code: u64) -> Vec<[String; 5]> {
    completed(audit_log)
        .into_iter()
        .filter(|e| {
            user(e).starts_with(prefix) && e["responseStatus"]["code"].as_u64() == Some(code)
        })
        .map(|e| {
            let o = &e["objectRef"];
            [
                user(&e).to_string(),
                text(&e["verb"]),
                text(&o["resource"]),
                text(&o["namespace"]),
                text(&o["name"]),
            ]
        })
        .collect()
}

/// How many requests users starting with `prefix` made (any answer).
pub fn request_count(audit_log: &Path, prefix: &str) -> usize {
    completed(audit_log)
        .iter()
        .filter(|e| user(e).starts_with(prefix))
        .count()
}

/// The distinct (verb, resource) pairs `user` requested, whatever the answer (watches still open count too).
pub fn verbs_used(audit_log: &Path, who: &str) -> std::collections::BTreeSet<(String, String)> {
    entries(audit_log)
        .into_iter()
        .filter(|e| user(e) == who)
        .map(|e| (text(&e["verb"]), text(&e["objectRef"]["resource"])))
        .collect()
}
