//! The Kubernetes client of every long-running part (agent, extender) and of `localpv disks`: kube's own layers
//! (base URI, credentials that refresh, extra headers, timeouts) over an HTTP client that speaks HTTP/2 when the
//! API server offers it in the TLS handshake, as client-go does.
//!
//! Why (issue 34): kube-client builds an HTTP/1.1-only client, where every open watch holds a TCP and TLS
//! connection of its own. An agent with four watches then keeps four or five connections, each a TLS session with
//! its buffers and goroutines in the API server and a full handshake after every restart. Over HTTP/2 one
//! connection carries every watch and request of the process as its own stream. When the server does not offer
//! `h2` (a proxy that speaks only HTTP/1.1) the same client falls back to HTTP/1.1; with a proxy configured
//! (`HTTPS_PROXY`), kube's own client is used unchanged.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::{Connect, HttpConnector};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::{Body, ConfigExt};
use kube::{Client, Config};
use tower::ServiceBuilder;

/// How often an idle HTTP/2 connection is pinged, and how long the answer may take before the connection is
/// dropped and every watch on it restarts (client-go: 30 s and 15 s).
const PING_EVERY: Duration = Duration::from_secs(30);
const PING_TIMEOUT: Duration = Duration::from_secs(15);

/// A client from the environment (in-cluster service account or kubeconfig), as `Client::try_default` would.
pub async fn infer() -> Result<Client, kube::Error> {
    let config = Config::infer().await.map_err(kube::Error::InferConfig)?;
    build(config)
}

/// A client from `config`, over HTTP/2 where the server offers it.
pub fn build(config: Config) -> Result<Client, kube::Error> {
    if config.proxy_url.is_some() {
        // NB: kube's client tunnels through the proxy; ours would not, so a proxied client keeps HTTP/1.1.
        return Client::try_from(config);
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(config.connect_timeout);
    let tls = config.rustls_client_config()?;
    let builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    let builder = match config.tls_server_name.as_deref() {
        Some(name) => {
            let name = rustls::pki_types::ServerName::try_from(name.to_string()).map_err(|e| {
                kube::Error::Service(format!("invalid tls-server-name {name:?}: {e}").into())
            })?;
            builder.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name))
        }
        None => builder,
    };
    let https = builder.enable_http1().enable_http2().wrap_connector(http);
    let mut connector = hyper_timeout::TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let http: HttpClient<_, Body> = HttpClient::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .http2_keep_alive_interval(PING_EVERY)
        .http2_keep_alive_timeout(PING_TIMEOUT)
        .build(connector);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(tower::BoxError::from)
        .service(FirstAlone::new(http));
    Ok(Client::new(service, config.default_namespace))
}

/// The HTTP client, sending its first request alone: requests that start together before any connection exists
/// (a process opening its watches) would each open one, and hyper keeps every one that came up as HTTP/2 before
/// the others were pooled. Once one request has had its answer, its connection is in the pool and every later
/// request shares it; after a request fails (the connection may be gone) the next ones go alone again.
#[derive(Clone)]
struct FirstAlone<C> {
    client: HttpClient<C, Body>,
    connected: Arc<AtomicBool>,
    gate: Arc<tokio::sync::Mutex<()>>,
}

impl<C> FirstAlone<C> {
    fn new(client: HttpClient<C, Body>) -> Self {
        FirstAlone {
            client,
            connected: Arc::new(AtomicBool::new(false)),
            gate: Arc::new(tokio::sync::Mutex::new(())),
        }
    }
}

type Answer = Result<Response<Incoming>, hyper_util::client::legacy::Error>;

impl<C> tower::Service<Request<Body>> for FirstAlone<C>
where
    C: Connect + Clone + Send + Sync + 'static,
{
    type Response = Response<Incoming>;
    type Error = hyper_util::client::legacy::Error;
    type Future = Pin<Box<dyn Future<Output = Answer> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // NB: hyper's pooled client is always ready; it connects inside the request's future.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let (client, connected, gate) = (
            self.client.clone(),
            self.connected.clone(),
            self.gate.clone(),
        );
        Box::pin(async move {
            if connected.load(Ordering::Acquire) {
                let answer = client.request(req).await;
                if answer.is_err() {
                    // NB: the connection may be gone (an API server restarted): the requests after this one
                    // go alone again until one has an answer, so they do not each open a connection.
                    connected.store(false, Ordering::Release);
                }
                return answer;
            }
            let _alone = gate.lock().await;
            let answer = client.request(req).await;
            connected.store(answer.is_ok(), Ordering::Release);
            answer
        })
    }
}
