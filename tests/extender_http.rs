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
use localpv_test_support::objects::Pv;
use rstest::rstest;
use serde_json::{Value, json};
use tower::ServiceExt;

fn node_json(name: &str) -> Value {
    json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
           "status": {"capacity": {"cpu": "4"}}})
}

fn pv_json(name: &str, node: &str, capacity: &str) -> Value {
    let pv = Pv::local(name, node).class("local").path("/mnt/disks/x");
    pv.capacity(capacity).available().json()
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

/// A filter request: `nodes` Node objects (names when `names`) and a pod with `claims` claim volumes.
fn filter_body(nodes: usize, names: bool, claims: usize) -> String {
    let volumes: Vec<Value> = (0..claims)
        .map(|i| json!({"name": format!("v{i}"), "persistentVolumeClaim": {"claimName": "data"}}))
        .collect();
    let pod = json!({"metadata": {"name": "web", "namespace": "default"},
                     "spec": {"containers": [], "volumes": volumes}});
    let name = |i: usize| format!("n{}", i % 3 + 1);
    if names {
        let names: Vec<String> = (0..nodes).map(name).collect();
        json!({"Pod": pod, "NodeNames": names}).to_string()
    } else {
        let items: Vec<Value> = (0..nodes).map(|i| node_json(&name(i))).collect();
        json!({"Pod": pod, "Nodes": {"items": items}}).to_string()
    }
}

/// Whether a filter of `body` is answered while the runtime's one blocking thread is held: true when it was decoded
/// and decided on the runtime's thread, false when a step waited for a blocking thread.
fn answered_on_the_runtime_thread(body: String) -> bool {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(1)
        .build()
        .expect("a runtime");
    rt.block_on(async move {
        let (release, held) = std::sync::mpsc::channel::<()>();
        let gate = tokio::task::spawn_blocking(move || {
            let _ = held.recv();
        });
        let filter = tokio::spawn(async move { send(state(), "POST", "/filter", body).await.0 });
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
        let answered = filter.is_finished();
        release.send(()).expect("the gate waits");
        gate.await.expect("the gate ends");
        assert_eq!(filter.await.expect("the filter task"), StatusCode::OK);
        answered
    })
}

#[rstest]
// A large body is decoded on a blocking thread, so it never stalls the runtime.
#[case::five_thousand_nodes(filter_body(5_000, false, 1), false)]
#[case::three_nodes(filter_body(3, false, 1), true)]
#[case::five_thousand_names(filter_body(5_000, true, 1), true)]
// A hostile pod: 1,000 claim volumes in about 60 KiB. Small enough to decode on the runtime thread, but its decision
// (candidates times claims) must not run there, or a few such requests would starve every other answer and probe.
#[case::a_small_body_naming_a_thousand_claims(filter_body(100, true, 1_000), false)]
fn only_small_and_light_requests_are_answered_on_the_runtime_thread(
    #[case] body: String,
    #[case] on_runtime: bool,
) {
    assert_eq!(answered_on_the_runtime_thread(body), on_runtime);
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

    pub(super) fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
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

    pub(super) fn write_server_files(dir: &Path, ca: &CertifiedIssuer<'static, KeyPair>) {
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

mod limits {
    //! The bounds of `serve::listen` and `serve::guard` on a real loopback socket (the same code serves the agent,
    //! and the extender over HTTP and HTTPS): body limit from Content-Length, the shared body budget, slow
    //! bodies, slow headers, idle keep-alive, request slots, the connection cap, and a TLS client that never speaks.

    use axum::Router;
    use axum::body::Bytes;
    use axum::routing::{get, post};
    use localpv::serve::Limits;
    use localpv::serve::listen::serve_plain;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;

    fn small() -> Limits {
        Limits {
            max_connections: 64,
            max_requests: 4,
            body_limit: 80 << 10,
            body_budget: 100 << 10,
            header_timeout: Duration::from_millis(400),
            body_timeout: Duration::from_millis(400),
            idle_timeout: Duration::from_millis(400),
        }
    }

    fn router() -> Router {
        Router::new()
            .route(
                "/echo",
                post(|body: Bytes| async move { body.len().to_string() }),
            )
            .route(
                "/slow",
                get(|| async {
                    tokio::time::sleep(Duration::from_millis(800)).await;
                    "done"
                }),
            )
            .route("/readyz", get(|| async { "ok" }))
    }

    async fn start(limits: Limits) -> SocketAddr {
        serve(limits, router()).await
    }

    /// Serves `app` behind `limits` on a loopback port until the test ends.
    pub(super) async fn serve(limits: Limits, app: Router) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("bound address");
        tokio::spawn(serve_plain(listener, limits, app, std::future::pending()));
        addr
    }

    /// Reads until EOF or `within`; the text read and whether the server closed the connection.
    async fn read_until_closed(s: &mut TcpStream, within: Duration) -> (String, bool) {
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        let deadline = tokio::time::Instant::now() + within;
        loop {
            match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return (String::from_utf8_lossy(&out).into(), true),
                Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
                Err(_) => return (String::from_utf8_lossy(&out).into(), false),
            }
        }
    }

    async fn request(addr: SocketAddr, text: &str) -> String {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(text.as_bytes()).await.expect("write");
        read_until_closed(&mut s, Duration::from_secs(5)).await.0
    }

    fn status(response: &str) -> &str {
        response.split_whitespace().nth(1).unwrap_or("none")
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_refused_from_its_content_length_before_it_is_sent() {
        let addr = start(small()).await;
        let response = request(
            addr,
            "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10485760\r\n\r\n",
        )
        .await;
        assert_eq!(status(&response), "413", "{response}");
        assert!(
            response.contains("10485760 bytes exceed the limit of 81920"),
            "{response}"
        );
    }

    #[tokio::test]
    async fn bodies_beyond_the_shared_budget_get_503_with_the_reason_and_the_first_completes() {
        let addr = start(small()).await;
        let size = 70 << 10;
        let head = format!(
            "POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {size}\r\n\r\n"
        );
        let mut first = TcpStream::connect(addr).await.expect("connect");
        first.write_all(head.as_bytes()).await.expect("write");
        first.write_all(&vec![b'a'; 1024]).await.expect("write");
        tokio::time::sleep(Duration::from_millis(50)).await;
        let second = request(addr, &head).await;
        assert_eq!(status(&second), "503", "{second}");
        assert!(
            second.contains("budget of request bodies held at once"),
            "{second}"
        );
        first
            .write_all(&vec![b'a'; size - 1024])
            .await
            .expect("write");
        let (answer, _) = read_until_closed(&mut first, Duration::from_secs(5)).await;
        assert_eq!(status(&answer), "200", "{answer}");
        assert!(answer.ends_with(&size.to_string()), "{answer}");
    }

    /// A head of `headers` headers of `bytes` bytes each.
    fn head(headers: usize, bytes: usize) -> String {
        let pad = "p".repeat(bytes);
        let lines: String = (0..headers).map(|i| format!("x-{i}: {pad}\r\n")).collect();
        format!("GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{lines}\r\n")
    }

    #[rstest]
    #[case::one_large_header(head(1, 100 << 10))]
    #[case::many_headers(head(120, 8))]
    #[tokio::test]
    async fn a_request_head_past_the_header_bounds_gets_431(#[case] head: String) {
        let addr = start(small()).await;
        let response = request(addr, &head).await;
        assert_eq!(status(&response), "431", "{response}");
    }

    #[tokio::test]
    async fn a_request_head_within_the_header_bounds_is_answered() {
        let addr = start(small()).await;
        for head in [head(1, 60 << 10), head(90, 8)] {
            let response = request(addr, &head).await;
            assert_eq!(status(&response), "200", "{response}");
        }
    }

    #[tokio::test]
    async fn a_body_that_does_not_arrive_in_time_gets_408() {
        let addr = start(small()).await;
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789")
            .await
            .expect("write");
        let (response, _) = read_until_closed(&mut s, Duration::from_secs(3)).await;
        assert_eq!(status(&response), "408", "{response}");
    }

    #[tokio::test]
    async fn headers_that_never_finish_are_cut_off_after_the_header_timeout() {
        let addr = start(small()).await;
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\n")
            .await
            .expect("write");
        let started = std::time::Instant::now();
        let mut closed = false;
        while !closed && started.elapsed() < Duration::from_secs(3) {
            let _ = s.write_all(b"X-Slow: 1\r\n").await;
            let (_, c) = read_until_closed(&mut s, Duration::from_millis(100)).await;
            closed = c;
        }
        assert!(closed, "a slowloris client was never cut off");
    }

    #[tokio::test]
    async fn an_idle_connection_is_closed_after_the_idle_timeout() {
        let addr = start(small()).await;
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .expect("write");
        let (response, closed) = read_until_closed(&mut s, Duration::from_secs(3)).await;
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        assert!(closed, "an idle keep-alive connection stayed open");
        let mut never = TcpStream::connect(addr).await.expect("connect");
        let (_, closed) = read_until_closed(&mut never, Duration::from_secs(3)).await;
        assert!(closed, "a connection that never sent a byte stayed open");
    }

    #[tokio::test]
    async fn requests_beyond_the_slots_get_503_while_probes_still_answer() {
        let addr = start(Limits {
            max_requests: 1,
            ..small()
        })
        .await;
        let slow = tokio::spawn(request(
            addr,
            "GET /slow HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        ));
        tokio::time::sleep(Duration::from_millis(100)).await;
        let busy = request(
            addr,
            "GET /slow HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .await;
        assert_eq!(status(&busy), "503", "{busy}");
        assert!(busy.contains("1 requests are already in flight"), "{busy}");
        let probe = request(
            addr,
            "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .await;
        assert_eq!(status(&probe), "200", "{probe}");
        assert_eq!(status(&slow.await.expect("slow request")), "200");
    }

    #[tokio::test]
    async fn at_the_connection_cap_idle_connections_give_way_to_requests() {
        let limits = Limits {
            max_connections: 8,
            idle_timeout: Duration::from_secs(60),
            header_timeout: Duration::from_secs(60),
            ..small()
        };
        let addr = start(limits).await;
        let mut idle = Vec::new();
        for _ in 0..50 {
            idle.push(TcpStream::connect(addr).await.expect("connect"));
        }
        for _ in 0..5 {
            let ok = request(
                addr,
                "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            )
            .await;
            assert_eq!(status(&ok), "200", "{ok}");
        }
        let mut closed = 0;
        for s in &mut idle {
            closed += usize::from(read_until_closed(s, Duration::from_millis(20)).await.1);
        }
        assert!(
            closed >= 42,
            "only {closed} of 50 idle connections were closed at a cap of 8"
        );
    }

    #[tokio::test]
    async fn a_tls_client_that_never_says_hello_is_cut_off() {
        use localpv::extender::tls::{TlsFiles, serve_limited};
        let dir = tempfile::tempdir().expect("temp dir");
        let ca = super::https::ca("server");
        super::https::write_server_files(dir.path(), &ca);
        let files = TlsFiles {
            cert: dir.path().join("tls.crt"),
            key: dir.path().join("tls.key"),
            client_ca: None,
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("bound address");
        tokio::spawn(serve_limited(
            listener,
            files,
            router(),
            small(),
            std::future::pending(),
        ));
        let mut s = TcpStream::connect(addr).await.expect("connect");
        let (_, closed) = read_until_closed(&mut s, Duration::from_secs(3)).await;
        assert!(closed, "a TLS connection without a ClientHello stayed open");
    }

    /// A `Nodes` request of `nodes` nodes, each padded to about 40 KiB (so bodies and answers are large enough for
    /// warm buffers), the padding of each node made of `fill`.
    fn padded_nodes(nodes: usize, fill: char) -> String {
        let pad: String = std::iter::repeat_n(fill, 40 << 10).collect();
        let items: Vec<Value> = (1..=nodes)
            .map(|i| {
                let mut n = node_json(&format!("n{}", i % 3 + 1));
                n["metadata"]["annotations"] = json!({ "pad": pad });
                n
            })
            .collect();
        json!({"Pod": pod("data"), "Nodes": {"items": items}}).to_string()
    }

    /// One POST on a kept-alive connection; status and body (by Content-Length).
    async fn post_on(s: &mut TcpStream, path: &str, body: &str) -> (String, Vec<u8>) {
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes()).await.expect("write head");
        s.write_all(body.as_bytes()).await.expect("write body");
        let mut got = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        let (status, start, length) = loop {
            let n = s.read(&mut buf).await.expect("read");
            assert!(n > 0, "closed before answering");
            got.extend_from_slice(&buf[..n]);
            let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") else {
                continue;
            };
            let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .expect("a Content-Length");
            break (status(&head).to_string(), end + 4, length);
        };
        while got.len() < start + length {
            let n = s.read(&mut buf).await.expect("read");
            assert!(n > 0, "closed mid-answer");
            got.extend_from_slice(&buf[..n]);
        }
        (status, got[start..start + length].to_vec())
    }

    #[tokio::test]
    async fn warm_buffers_never_carry_one_requests_bytes_into_the_next() {
        // Large, then smaller, then truncated, then large again, on one connection: each answer must equal what
        // the handler answers in process, with nothing of an earlier body or answer in it.
        let addr = serve(Limits::extender(), app(state())).await;
        let mut s = TcpStream::connect(addr).await.expect("connect");
        let large = padded_nodes(60, 'a');
        let smaller = padded_nodes(30, 'b');
        let truncated = &padded_nodes(40, 'c')[..(40 << 10) * 30];
        for (body, want) in [
            (&large[..], "200"),
            (&smaller, "200"),
            (truncated, "400"),
            (&large, "200"),
        ] {
            let (status, answer) = post_on(&mut s, "/filter", body).await;
            assert_eq!(
                status,
                want,
                "{}",
                String::from_utf8_lossy(&answer[..answer.len().min(300)])
            );
            let (_, expected) = send(state(), "POST", "/filter", body.to_string()).await;
            assert!(
                answer == expected,
                "the served answer differs from the in-process one"
            );
        }
    }
}

mod fuzz {
    //! Property tests of the request decoder (`wire::ExtenderArgs::decode`, a hand-written JSON walker): arbitrary
    //! bytes and mutations of real requests never panic, are answered quickly, and a deep nesting bomb is refused
    //! without exhausting the stack. Case counts are modest so this runs in seconds.

    use std::time::Instant;

    use axum::body::Bytes;
    use localpv::extender::wire::ExtenderArgs;
    use proptest::prelude::*;

    use super::*;

    const BOUND: Duration = Duration::from_millis(500);

    fn samples() -> Vec<Vec<u8>> {
        let nodes = json!({"items": [node_json("n1"), node_json("n2")]});
        [
            json!({"Pod": pod("data"), "Nodes": null, "NodeNames": ["n1", "n2", "n3"]}),
            json!({"Pod": pod("data"), "Nodes": nodes, "NodeNames": null}),
            json!({"pod": pod("data"), "nodenames": ["n1"]}),
        ]
        .iter()
        .map(|v| v.to_string().into_bytes())
        .collect()
    }

    fn decode_timed(bytes: Vec<u8>) -> Duration {
        let started = Instant::now();
        let _ = ExtenderArgs::decode(Bytes::from(bytes));
        started.elapsed()
    }

    #[derive(Clone, Debug)]
    enum Mutation {
        Set(usize, u8),
        Insert(usize, Vec<u8>),
        Remove(usize, usize),
        Truncate(usize),
        Repeat(usize, usize, u8),
    }

    fn mutation() -> impl Strategy<Value = Mutation> {
        let token = prop::sample::select(vec![
            b"{".to_vec(),
            b"}".to_vec(),
            b"[".to_vec(),
            b"]".to_vec(),
            b"\"".to_vec(),
            b"\\".to_vec(),
            b",".to_vec(),
            b":".to_vec(),
            b"null".to_vec(),
            b"\"Nodes\":".to_vec(),
            b"\"items\":[".to_vec(),
            b"\\u0000".to_vec(),
            b"\\ud800".to_vec(),
            b"1e999999".to_vec(),
            vec![0xff, 0xfe],
        ]);
        prop_oneof![
            (any::<usize>(), any::<u8>()).prop_map(|(at, b)| Mutation::Set(at, b)),
            (any::<usize>(), token).prop_map(|(at, t)| Mutation::Insert(at, t)),
            (any::<usize>(), 0usize..40).prop_map(|(at, n)| Mutation::Remove(at, n)),
            any::<usize>().prop_map(Mutation::Truncate),
            (
                any::<usize>(),
                1usize..2000,
                prop::sample::select(b"[{\"".to_vec())
            )
                .prop_map(|(at, n, b)| Mutation::Repeat(at, n, b)),
        ]
    }

    fn apply(mut bytes: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
        for m in mutations {
            let len = bytes.len();
            match m.clone() {
                Mutation::Set(at, b) if len > 0 => bytes[at % len] = b,
                Mutation::Insert(at, t) => {
                    let at = at % (len + 1);
                    bytes.splice(at..at, t);
                }
                Mutation::Remove(at, n) if len > 0 => {
                    let at = at % len;
                    bytes.drain(at..(at + n).min(len));
                }
                Mutation::Truncate(at) => bytes.truncate(at % (len + 1)),
                Mutation::Repeat(at, n, b) => {
                    let at = at % (len + 1);
                    bytes.splice(at..at, std::iter::repeat_n(b, n));
                }
                _ => {}
            }
        }
        bytes
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

        #[test]
        fn arbitrary_bytes_never_panic_and_are_answered_quickly(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
            prop_assert!(decode_timed(bytes) < BOUND);
        }

        #[test]
        fn mutated_real_requests_never_panic_and_are_answered_quickly(
            which in 0usize..3,
            mutations in prop::collection::vec(mutation(), 1..6),
        ) {
            let bytes = apply(samples()[which].clone(), &mutations);
            prop_assert!(decode_timed(bytes) < BOUND);
        }
    }

    #[rstest]
    #[case::arrays_in_pod(format!("{{\"Pod\": {}", "[".repeat(1_000_000)))]
    #[case::objects_in_pod(format!("{{\"Pod\": {}", "{\"a\":".repeat(300_000)))]
    #[case::arrays_in_nodes(format!("{{\"Nodes\": {{\"items\": [{}", "[".repeat(1_000_000)))]
    #[case::arrays_in_node(format!("{{\"Nodes\": {{\"items\": [{{\"metadata\": {}", "[".repeat(1_000_000)))]
    fn a_nesting_bomb_is_refused_without_exhausting_the_stack(#[case] body: String) {
        let result = ExtenderArgs::decode(Bytes::from(body));
        assert!(result.is_err(), "a nesting bomb decoded");
    }
}

mod decoded_limits {
    //! The count limits and the decoded-memory charge as the scheduler meets them: a 413 whose body names the flag
    //! to raise, on both verbs and in both modes; a 503 naming the budget when what a body decodes into does not
    //! fit beside the others, on a real socket behind `serve::guard`; and a request within both answered as before.

    use localpv::extender::wire::DecodeLimits;
    use localpv::serve::Limits;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    fn tight() -> ServerConfig {
        ServerConfig {
            decode: DecodeLimits {
                max_nodes: 3,
                max_labels_per_node: 2,
                max_labels: 4,
                max_volumes: 1,
            },
            ..ServerConfig::default()
        }
    }

    fn labelled(name: &str, labels: usize) -> Value {
        let mut map = serde_json::Map::new();
        map.insert("kubernetes.io/hostname".into(), json!(name));
        for i in 1..labels {
            map.insert(format!("l{i}"), json!("v"));
        }
        json!({"metadata": {"name": name, "labels": map}})
    }

    #[rstest]
    #[case::names(json!({"Pod": pod("data"), "NodeNames": ["n1", "n2", "n1", "n2"]}), "--max-nodes")]
    #[case::nodes(json!({"Pod": pod("data"), "Nodes": {"items": [{}, {}, {}, {}]}}), "--max-nodes")]
    #[case::labels_on_a_node(
        json!({"Pod": pod("data"), "Nodes": {"items": [labelled("n1", 3)]}}),
        "--max-labels-per-node"
    )]
    #[case::labels_in_all(
        json!({"Pod": pod("data"), "Nodes": {"items": [labelled("n1", 2), labelled("n2", 2), labelled("n1", 2)]}}),
        "--max-labels"
    )]
    #[case::volumes(
        json!({"Pod": {"spec": {"volumes": [{"name": "a"}, {"name": "b"}]}}, "NodeNames": ["n1"]}),
        "--max-volumes"
    )]
    #[tokio::test]
    async fn a_request_over_a_count_limit_gets_413_naming_the_flag(
        #[case] args: Value,
        #[case] flag: &str,
    ) {
        for path in ["/filter", "/prioritize"] {
            let (status, body) =
                send(state_with(tight(), true), "POST", path, args.to_string()).await;
            let body = String::from_utf8_lossy(&body);
            assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{path}: {body}");
            assert!(
                body.contains(&format!("limit {flag} (env ")),
                "{path}: {body}"
            );
        }
    }

    #[tokio::test]
    async fn a_request_at_the_limits_is_answered_as_before() {
        let names = json!({"Pod": pod("data"), "NodeNames": ["n1", "n2", "n1"]});
        let (status, result) = post_json(state_with(tight(), true), "/filter", &names).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(result["NodeNames"], json!(["n1", "n2", "n1"]));
        let nodes =
            json!({"Pod": pod("data"), "Nodes": {"items": [labelled("n1", 2), labelled("n2", 2)]}});
        let (status, result) = post_json(state_with(tight(), true), "/filter", &nodes).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            result["Nodes"]["items"],
            json!([labelled("n1", 2), labelled("n2", 2)])
        );
    }

    /// The extender's app behind the guard with `budget` bytes of memory budget, on a loopback port.
    async fn serve(budget: usize) -> SocketAddr {
        let limits = Limits {
            body_budget: budget,
            ..Limits::extender()
        };
        super::limits::serve(limits, app(state())).await
    }

    async fn post(addr: SocketAddr, body: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let request = format!(
            "POST /filter HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        s.write_all(request.as_bytes()).await.expect("write");
        let mut answer = String::new();
        s.read_to_string(&mut answer).await.expect("read");
        answer
    }

    #[tokio::test]
    async fn a_body_that_fits_the_budget_but_decodes_past_it_gets_503_naming_the_budget() {
        // 3,000 names are 27 KiB on the wire and some hundreds of KiB once decoded and answered.
        let names: Vec<String> = (0..3_000).map(|i| format!("n{i}")).collect();
        let body = json!({"Pod": pod("data"), "NodeNames": names}).to_string();
        assert!(body.len() < 64 << 10);
        let refused = post(serve(64 << 10).await, &body).await;
        assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
        assert!(
            refused.contains("failed to admit the decoded request"),
            "{refused}"
        );
        assert!(refused.contains("--http-body-budget"), "{refused}");
        assert!(refused.contains("retry-after: 1"), "{refused}");
        let answered = post(serve(16 << 20).await, &body).await;
        assert!(answered.starts_with("HTTP/1.1 200"), "{answered}");
        assert!(answered.contains(r#""NodeNames":["n1""#), "{answered}");
    }
}
