//! The extender's HTTP surface, exercised through `app(state).oneshot(..)` without a socket: the wire format in
//! both `nodeCacheCapable` modes, key case, nulls, malformed and oversized bodies, readiness and the deadline.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use localpv::extender::model::{Claim, Class, Volume, node_labels};
use localpv::extender::server::{AppState, Cache, ServerConfig, app};
use localpv::extender::snapshot::Snapshot;
use rstest::rstest;
use serde_json::{Value, json};
use tower::ServiceExt;

fn node_json(name: &str) -> Value {
    json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
           "status": {"capacity": {"cpu": "4"}}})
}

fn pv_json(name: &str, node: &str, capacity: &str) -> Value {
    json!({"metadata": {"name": name}, "spec": {
        "capacity": {"storage": capacity}, "accessModes": ["ReadWriteOnce"], "storageClassName": "local",
        "persistentVolumeReclaimPolicy": "Delete", "local": {"path": "/mnt/disks/x"},
        "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}},
        "status": {"phase": "Available"}})
}

/// Nodes n1, n2, n3; PVs of class `local`: 10Gi on n1, 20Gi on n2; claim default/data asks 8Gi.
fn snapshot() -> Snapshot {
    let pvs: Vec<PersistentVolume> = [pv_json("pv-a", "n1", "10Gi"), pv_json("pv-b", "n2", "20Gi")]
        .into_iter()
        .map(|v| serde_json::from_value(v).expect("valid PV"))
        .collect();
    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "data", "namespace": "default", "uid": "u1"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "local",
                 "resources": {"requests": {"storage": "8Gi"}}}}))
    .expect("valid PVC");
    let sc: StorageClass = serde_json::from_value(json!({
        "metadata": {"name": "local"}, "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "WaitForFirstConsumer"}))
    .expect("valid class");
    let nodes: Vec<Node> = ["n1", "n2", "n3"]
        .map(|n| serde_json::from_value(node_json(n)).expect("valid node"))
        .into();
    Snapshot::new(
        pvs.iter().map(|p| Volume::from_pv(p).expect("named")),
        [Claim::from_pvc(&pvc).expect("named")],
        [Class::from_storage_class(&sc).expect("named")],
        nodes.iter().map(|n| node_labels(n).expect("named")),
    )
}

fn pod(claim: &str) -> Value {
    json!({"metadata": {"name": "web", "namespace": "default"},
           "spec": {"containers": [{"name": "c", "image": "busybox"}],
                    "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": claim}}]}})
}

fn state_with(config: ServerConfig, synced: bool) -> AppState {
    AppState::new(Arc::new(Cache::new(snapshot(), synced)), config)
}

fn state() -> AppState {
    state_with(ServerConfig::default(), true)
}

async fn send(
    state: AppState,
    method: &str,
    path: &str,
    body: impl Into<Body>,
) -> (StatusCode, Vec<u8>) {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(body.into())
        .expect("valid request");
    let resp = app(state)
        .oneshot(req)
        .await
        .expect("the router is infallible");
    let status = resp.status();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .expect("body readable")
        .to_bytes();
    (status, bytes.to_vec())
}

async fn post_json(state: AppState, path: &str, body: &Value) -> (StatusCode, Value) {
    let (status, bytes) = send(state, "POST", path, body.to_string()).await;
    let value = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
        panic!(
            "{path} answered {status} with non-JSON ({e}): {}",
            String::from_utf8_lossy(&bytes)
        )
    });
    (status, value)
}

#[tokio::test]
async fn nodes_mode_returns_surviving_node_objects_unchanged() {
    let args = json!({"Pod": pod("data"), "Nodes": {"items": [node_json("n1"), node_json("n3")]}, "NodeNames": null});
    let (status, result) = post_json(state(), "/filter", &args).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(result["Nodes"]["items"], json!([node_json("n1")]));
    assert_eq!(result["NodeNames"], Value::Null);
    assert_eq!(
        result["FailedAndUnresolvableNodes"],
        json!({"n3": "claim default/data: no PV of class local on node"})
    );
    assert_eq!(result["FailedNodes"], json!({}));
    assert_eq!(result["Error"], "");
}

#[tokio::test]
async fn node_names_mode_uses_the_node_cache_and_answers_names() {
    let args =
        json!({"Pod": pod("data"), "Nodes": null, "NodeNames": ["n3", "n2", "n1", "unknown"]});
    let (status, result) = post_json(state(), "/filter", &args).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(result["NodeNames"], json!(["n2", "n1"]));
    assert_eq!(result["Nodes"], Value::Null);
    assert_eq!(
        result["FailedNodes"],
        json!({"unknown": "node not in extender cache"})
    );
    assert_eq!(
        result["FailedAndUnresolvableNodes"]["n3"],
        "claim default/data: no PV of class local on node"
    );
}

#[rstest]
#[case::nodes_mode(json!({"Pod": pod("data"), "Nodes": {"items": [node_json("n3")]}}), "/Nodes/items")]
#[case::node_names_mode(json!({"Pod": pod("data"), "NodeNames": ["n3"]}), "/NodeNames")]
#[tokio::test]
async fn no_survivors_is_an_empty_list_in_the_input_form(
    #[case] args: Value,
    #[case] pointer: &str,
) {
    let (_, result) = post_json(state(), "/filter", &args).await;
    assert_eq!(result.pointer(pointer), Some(&json!([])), "{result}");
}

#[tokio::test]
async fn lowercase_keys_are_accepted() {
    let args = json!({"pod": pod("data"), "nodes": null, "nodenames": ["n1", "n3"]});
    let (_, result) = post_json(state(), "/filter", &args).await;
    assert_eq!(result["NodeNames"], json!(["n1"]));
}

#[rstest]
#[case::null_pod(json!({"Pod": null, "Nodes": null, "NodeNames": ["n1", "n3"]}))]
#[case::null_volumes(json!({"Pod": {"metadata": {"name": "p"}, "spec": {"volumes": null}}, "NodeNames": ["n1", "n3"]}))]
#[case::null_metadata(json!({"Pod": {"metadata": null, "spec": null}, "NodeNames": ["n1", "n3"]}))]
#[tokio::test]
async fn nulls_are_tolerated_and_pods_without_claims_pass_untouched(#[case] args: Value) {
    let (status, result) = post_json(state(), "/filter", &args).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(result["NodeNames"], json!(["n1", "n3"]));
}

#[tokio::test]
async fn neither_nodes_nor_names_still_answers_an_empty_name_list() {
    let (_, result) = post_json(
        state(),
        "/filter",
        &json!({"Pod": pod("data"), "Nodes": null, "NodeNames": null}),
    )
    .await;
    assert_eq!(result["NodeNames"], json!([]));
}

#[rstest]
#[case::not_json("{not json")]
#[case::wrong_type(r#"{"NodeNames": "n1"}"#)]
#[case::array(r#"[1, 2]"#)]
#[case::empty("")]
#[tokio::test]
async fn malformed_bodies_get_400_with_the_reason(#[case] body: &'static str) {
    for path in ["/filter", "/prioritize"] {
        let (status, bytes) = send(state(), "POST", path, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(
            String::from_utf8_lossy(&bytes).starts_with("failed to decode ExtenderArgs: "),
            "{path}"
        );
    }
}

#[tokio::test]
async fn bodies_over_the_cap_get_413() {
    let config = ServerConfig {
        body_limit: 1024,
        ..ServerConfig::default()
    };
    let names: Vec<String> = (0..500).map(|i| format!("node-{i}")).collect();
    let body = json!({"Pod": pod("data"), "NodeNames": names}).to_string();
    let (status, _) = send(state_with(config, true), "POST", "/filter", body).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test]
async fn prioritize_scores_binpack_with_pascal_case_keys() {
    let args = json!({"Pod": pod("data"), "NodeNames": ["n1", "n2"]});
    let (status, result) = post_json(state(), "/prioritize", &args).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        result,
        json!([{"Host": "n1", "Score": 8}, {"Host": "n2", "Score": 4}])
    );
}

#[tokio::test]
async fn paths_are_configurable() {
    let config = ServerConfig {
        filter_path: "/x/f".into(),
        prioritize_path: "/x/p".into(),
        ..ServerConfig::default()
    };
    let args = json!({"Pod": pod("data"), "NodeNames": ["n1"]});
    let (status, _) = post_json(state_with(config.clone(), true), "/x/f", &args).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = send(
        state_with(config, true),
        "POST",
        "/filter",
        args.to_string(),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn readiness_follows_cache_sync_and_shutdown() {
    let cache = Arc::new(Cache::new(snapshot(), false));
    let state = AppState::new(cache.clone(), ServerConfig::default());
    assert_eq!(
        send(state.clone(), "GET", "/livez", "").await.0,
        StatusCode::OK
    );
    assert_eq!(
        send(state.clone(), "GET", "/readyz", "").await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
    let args = json!({"Pod": pod("data"), "NodeNames": ["n1"]}).to_string();
    let (status, body) = send(state.clone(), "POST", "/filter", args.clone()).await;
    assert_eq!(
        status,
        StatusCode::SERVICE_UNAVAILABLE,
        "never decide from an unsynced cache"
    );
    assert!(String::from_utf8_lossy(&body).contains("not synced"));
    cache.set_synced();
    assert_eq!(
        send(state.clone(), "GET", "/readyz", "").await.0,
        StatusCode::OK
    );
    assert_eq!(
        send(state.clone(), "POST", "/filter", args).await.0,
        StatusCode::OK
    );
    cache.set_stopping();
    assert_eq!(
        send(state, "GET", "/readyz", "").await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
}

#[tokio::test]
async fn a_missed_deadline_answers_with_an_error_field() {
    let config = ServerConfig {
        deadline: Duration::ZERO,
        ..ServerConfig::default()
    };
    let names: Vec<String> = (0..20_000).map(|i| format!("node-{i}")).collect();
    let (status, result) = post_json(
        state_with(config, true),
        "/filter",
        &json!({"Pod": pod("data"), "NodeNames": names}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        result["Error"]
            .as_str()
            .is_some_and(|e| e.starts_with("failed to decide within")),
        "{result}"
    );
    assert_eq!(result["NodeNames"], json!([]));
}

#[tokio::test]
async fn a_claim_the_watch_has_not_seen_yet_is_waited_for() {
    let cache = Arc::new(Cache::new(Snapshot::default(), true));
    let state = AppState::new(cache.clone(), ServerConfig::default());
    let late = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        cache.store(snapshot());
    });
    let args = json!({"Pod": pod("data"), "NodeNames": ["n1", "n3"]});
    let (status, result) = post_json(state, "/filter", &args).await;
    late.await.expect("store task ran");
    assert_eq!(status, StatusCode::OK);
    assert_eq!(result["NodeNames"], json!(["n1"]), "{result}");
}

#[tokio::test]
async fn a_claim_that_never_appears_is_a_retryable_failure() {
    let config = ServerConfig {
        deadline: Duration::from_millis(400),
        ..ServerConfig::default()
    };
    let started = std::time::Instant::now();
    let (status, result) = post_json(
        state_with(config, true),
        "/filter",
        &json!({"Pod": pod("ghost"), "NodeNames": ["n1"]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        result["FailedNodes"],
        json!({"n1": "claim default/ghost: not found"})
    );
    assert_eq!(result["NodeNames"], json!([]));
    assert!(
        started.elapsed() >= Duration::from_millis(100),
        "waited a quarter of the deadline for the watch"
    );
}

#[tokio::test]
async fn metrics_count_requests_with_bounded_labels() {
    let state = state();
    post_json(
        state.clone(),
        "/filter",
        &json!({"Pod": pod("data"), "NodeNames": ["n1", "n3"]}),
    )
    .await;
    let (status, body) = send(state, "GET", "/metrics", "").await;
    assert_eq!(status, StatusCode::OK);
    let text = String::from_utf8_lossy(&body);
    assert!(
        text.contains(r#"localpv_extender_requests_total{verb="Filter",outcome="Ok"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"localpv_extender_filter_nodes_total{result="Unresolvable"} 1"#),
        "{text}"
    );
    assert!(!text.contains("n3"), "no node names in labels");
}

mod https {
    //! HTTPS through `tls::serve_on` on a real loopback socket: server-only TLS, mTLS, and certificate reload.

    use std::path::Path;

    use localpv::extender::tls::{TlsFiles, serve_on};
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose,
        IsCa, KeyPair,
    };
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("valid params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        CertifiedIssuer::self_signed(params, KeyPair::generate().expect("keygen"))
            .expect("self-signed CA")
    }

    /// (certificate PEM, key PEM) for `localhost`, signed by `ca`.
    fn leaf(
        ca: &CertifiedIssuer<'static, KeyPair>,
        purpose: ExtendedKeyUsagePurpose,
    ) -> (String, String) {
        let mut params =
            CertificateParams::new(vec!["localhost".to_string()]).expect("valid params");
        params.extended_key_usages = vec![purpose];
        let key = KeyPair::generate().expect("keygen");
        let cert = params.signed_by(&key, ca).expect("signed leaf");
        (cert.pem(), key.serialize_pem())
    }

    fn write_server_files(dir: &Path, ca: &CertifiedIssuer<'static, KeyPair>) {
        let (cert, key) = leaf(ca, ExtendedKeyUsagePurpose::ServerAuth);
        std::fs::write(dir.join("tls.crt"), cert).expect("write cert");
        std::fs::write(dir.join("tls.key"), key).expect("write key");
    }

    /// GET /livez over TLS trusting `server_ca`, optionally presenting a client certificate; the status line or
    /// the error.
    async fn livez(
        addr: SocketAddr,
        server_ca: &CertifiedIssuer<'static, KeyPair>,
        client: Option<(String, String)>,
    ) -> String {
        call(addr, server_ca, client, "GET", "/livez", "").await
    }

    /// One HTTP/1.1 request over TLS; the status line, or the error.
    async fn call(
        addr: SocketAddr,
        server_ca: &CertifiedIssuer<'static, KeyPair>,
        client: Option<(String, String)>,
        method: &str,
        path: &str,
        body: &str,
    ) -> String {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(server_ca.der().clone()).expect("CA added");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_root_certificates(roots);
        let config = match client {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let chain =
                    vec![CertificateDer::from_pem_slice(cert.as_bytes()).expect("client cert")];
                let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).expect("client key");
                builder
                    .with_client_auth_cert(chain, key)
                    .expect("client auth")
            }
        };
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let name = ServerName::try_from("localhost").expect("valid name");
        let mut tls = match connector.connect(name, tcp).await {
            Ok(tls) => tls,
            Err(e) => return format!("handshake error: {e}"),
        };
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        if let Err(e) = tls.write_all(request.as_bytes()).await {
            return format!("write error: {e}");
        }
        let mut response = Vec::new();
        if let Err(e) = tls.read_to_end(&mut response).await {
            return format!("read error: {e}");
        }
        String::from_utf8_lossy(&response)
            .lines()
            .next()
            .unwrap_or("")
            .to_string()
    }

    async fn start(
        files: TlsFiles,
    ) -> (
        SocketAddr,
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<()>,
    ) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("bound address");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            serve_on(listener, files, app(state()), async {
                let _ = stopped.await;
            })
            .await
            .expect("server ran");
        });
        (addr, stop, task)
    }

    #[tokio::test]
    async fn https_decisions_require_a_client_certificate_signed_by_the_ca_when_one_is_configured()
    {
        let dir = tempfile::tempdir().expect("temp dir");
        let (server_ca, client_ca, stranger_ca) = (ca("server"), ca("clients"), ca("stranger"));
        write_server_files(dir.path(), &server_ca);
        std::fs::write(dir.path().join("ca.crt"), client_ca.pem()).expect("write CA");
        let files = TlsFiles {
            cert: dir.path().join("tls.crt"),
            key: dir.path().join("tls.key"),
            client_ca: Some(dir.path().join("ca.crt")),
        };
        let (addr, stop, task) = start(files).await;
        let good = leaf(&client_ca, ExtendedKeyUsagePurpose::ClientAuth);
        assert_eq!(
            livez(addr, &server_ca, Some(good.clone())).await,
            "HTTP/1.1 200 OK"
        );
        let filter = r#"{"Pod": null, "NodeNames": ["n1"]}"#;
        let ok = call(addr, &server_ca, Some(good), "POST", "/filter", filter).await;
        assert_eq!(ok, "HTTP/1.1 200 OK");
        let bad = leaf(&stranger_ca, ExtendedKeyUsagePurpose::ClientAuth);
        assert!(
            !livez(addr, &server_ca, Some(bad)).await.contains("200"),
            "an untrusted certificate is refused"
        );
        // Probes carry no client certificate: they get through, decisions do not.
        assert_eq!(livez(addr, &server_ca, None).await, "HTTP/1.1 200 OK");
        let anonymous = call(addr, &server_ca, None, "POST", "/filter", filter).await;
        assert_eq!(anonymous, "HTTP/1.1 403 Forbidden");
        stop.send(()).expect("server still running");
        task.await.expect("server joined");
    }

    #[tokio::test]
    async fn https_picks_up_new_certificate_files() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (first, second) = (ca("first"), ca("second"));
        write_server_files(dir.path(), &first);
        let files = TlsFiles {
            cert: dir.path().join("tls.crt"),
            key: dir.path().join("tls.key"),
            client_ca: None,
        };
        let (addr, stop, task) = start(files).await;
        assert_eq!(livez(addr, &first, None).await, "HTTP/1.1 200 OK");
        assert!(!livez(addr, &second, None).await.contains("200"));
        write_server_files(dir.path(), &second);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        while livez(addr, &second, None).await != "HTTP/1.1 200 OK" {
            assert!(
                tokio::time::Instant::now() < deadline,
                "new certificate not served within 15s"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        stop.send(()).expect("server still running");
        task.await.expect("server joined");
    }
}
