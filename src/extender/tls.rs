//! HTTPS for the extender: rustls with the ring provider, optional client-certificate verification against a CA
//! (mTLS), and certificates reloaded when their files change.
//!
//! With a client CA, a presented certificate must verify; a connection without one is served only `/livez`,
//! `/readyz` and `/metrics` (kubelet probes and scrapers carry no client certificate) and gets 403 elsewhere.
//!
//! ```text
//!  files (cert, key, client CA) ──poll mtime/len──> load() ──> current: RwLock<Arc<ServerConfig>>
//!  serve::listen (cap, timeouts) ── accept ──> TlsAcceptor(current) ── handshake ──> hyper ──> axum Router
//! ```
//!
//! Reloading polls file metadata instead of using inotify: Kubernetes updates mounted Secrets by swapping a
//! symlinked directory, which `metadata` (following links) sees and inotify on the file does not. A reload that
//! fails keeps the previous configuration and logs why.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use anyhow::Context;
use axum::Router;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use rustls::RootCertStore;
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use tokio_rustls::TlsAcceptor;
use tracing::{debug, info, warn};

use crate::serve::{Limits, listen};

const RELOAD_EVERY: Duration = Duration::from_secs(5);

#[derive(Clone, Debug)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("failed to read PEM file {path}")]
    ReadPem {
        path: PathBuf,
        source: rustls::pki_types::pem::Error,
    },
    #[error("failed to find a certificate in {path}")]
    NoCertificate { path: PathBuf },
    #[error("failed to add a CA certificate from {path}")]
    AddCa {
        path: PathBuf,
        source: rustls::Error,
    },
    #[error("failed to build the client certificate verifier")]
    Verifier(#[source] rustls::server::VerifierBuilderError),
    #[error("failed to build the TLS configuration")]
    Config(#[source] rustls::Error),
}

fn certs(path: &PathBuf) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let read = |source| TlsError::ReadPem {
        path: path.clone(),
        source,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(read)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(read)?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate { path: path.clone() });
    }
    Ok(certs)
}

/// Reads the files and builds a server configuration (HTTP/1.1 and h2 via ALPN).
pub fn load(files: &TlsFiles) -> Result<ServerConfig, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = certs(&files.cert)?;
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|source| TlsError::ReadPem {
        path: files.key.clone(),
        source,
    })?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Config)?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for cert in certs(ca)? {
                roots.add(cert).map_err(|source| TlsError::AddCa {
                    path: ca.clone(),
                    source,
                })?;
            }
            // NB: connections without a certificate are let in so kubelet's probes work; `require_client_cert`
            // then limits them to the probe and metrics paths. A certificate that is presented must verify.
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .map_err(TlsError::Verifier)?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(TlsError::Config)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// Modification time and length of every file: a change in any means reload.
fn fingerprint(files: &TlsFiles) -> Vec<Option<(SystemTime, u64)>> {
    [
        Some(&files.cert),
        Some(&files.key),
        files.client_ca.as_ref(),
    ]
    .into_iter()
    .flatten()
    .map(|p| {
        std::fs::metadata(p)
            .ok()
            .and_then(|m| Some((m.modified().ok()?, m.len())))
    })
    .collect()
}

async fn reload_loop(
    files: TlsFiles,
    current: Arc<RwLock<Arc<ServerConfig>>>,
    mut stop: impl Future<Output = ()> + Unpin,
) {
    let mut seen = fingerprint(&files);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(RELOAD_EVERY) => {}
            _ = &mut stop => return,
        }
        let now = fingerprint(&files);
        if now == seen {
            continue;
        }
        match load(&files) {
            Ok(config) => {
                *current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(config);
                seen = now;
                info!(cert = %files.cert.display(), "reloaded TLS certificates");
            }
            // NB: `seen` stays old so a half-written pair is retried on the next tick.
            Err(error) => {
                warn!(error = %anyhow::Error::from(error), "failed to reload TLS certificates; keeping the old ones")
            }
        }
    }
}

/// For connections without a client certificate under mTLS: probes and metrics only.
async fn require_client_cert(req: Request, next: Next) -> Response {
    match req.uri().path() {
        "/livez" | "/readyz" | "/metrics" => next.run(req).await,
        _ => (
            StatusCode::FORBIDDEN,
            "failed to authorize: a client certificate signed by the extender's CA is required",
        )
            .into_response(),
    }
}

/// Serves `app` over HTTPS on `listen` within `limits` until `stopped` resolves, then drains open connections.
pub async fn serve(
    listen: SocketAddr,
    files: TlsFiles,
    app: Router,
    limits: Limits,
    stopped: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("failed to listen on {listen}"))?;
    serve_limited(listener, files, app, limits, stopped).await
}

/// `serve_limited` with the extender's default limits.
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    files: TlsFiles,
    app: Router,
    stopped: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    serve_limited(listener, files, app, Limits::extender(), stopped).await
}

/// The TLS handshake runs inside the connection's slot and within its header timeout (`serve::listen`), so a
/// client that connects and never says hello holds a slot only until then, or until a newcomer needs it.
pub async fn serve_limited(
    listener: tokio::net::TcpListener,
    files: TlsFiles,
    app: Router,
    limits: Limits,
    stopped: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let config = load(&files).context("failed to load the TLS certificates")?;
    let current = Arc::new(RwLock::new(Arc::new(config)));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let reload_stop = {
        let mut rx = stop_rx.clone();
        Box::pin(async move {
            let _ = rx.changed().await;
        })
    };
    let reloader = tokio::spawn(reload_loop(files.clone(), current.clone(), reload_stop));
    info!(listen = %listener.local_addr().context("failed to read the listen address")?, mtls = files.client_ca.is_some(), "serving the extender over HTTPS");
    let app = listen::guarded(app, &limits);
    let mtls = files.client_ca.is_some();
    let connect = move |tcp, peer: SocketAddr| {
        let acceptor = TlsAcceptor::from(current.read().unwrap_or_else(|e| e.into_inner()).clone());
        let app = app.clone();
        async move {
            let tls = match acceptor.accept(tcp).await {
                Ok(tls) => tls,
                Err(error) => {
                    debug!(%peer, %error, "TLS handshake failed");
                    return None;
                }
            };
            let verified = tls
                .get_ref()
                .1
                .peer_certificates()
                .is_some_and(|c| !c.is_empty());
            let app = if mtls && !verified {
                app.layer(middleware::from_fn(require_client_cert))
            } else {
                app
            };
            Some((tls, app))
        }
    };
    listen::serve(listener, limits, connect, stopped).await;
    let _ = stop_tx.send(true);
    reloader
        .await
        .context("failed to join the certificate reloader")?;
    Ok(())
}
