//! [`WebhookServer`]: the HTTPS server, its builder and its run loop.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::registry::Registry;
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::crypto::ring;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use super::metrics::Metrics;
use super::request::{self, Route, Shared};
use super::tls::{CertificateFiles, Checked, Reloader};
use super::{Webhook, WebhookError, WebhookSetting};
use crate::SettingError;

/// controller-runtime's limit on a request body (7 MiB): above the API
/// server's own 3 MiB limit on an object, with room for the old object.
pub const DEFAULT_MAX_BODY_BYTES: usize = 7 * 1024 * 1024;

/// How many requests run their handler at once unless set.
pub const DEFAULT_MAX_CONCURRENT_REQUESTS: NonZeroUsize = NonZeroUsize::new(64).unwrap();

/// How often the certificate files are read again unless set (as
/// controller-runtime's certificate watcher polls).
pub const DEFAULT_CERTIFICATE_CHECK_INTERVAL: Duration = Duration::from_secs(10);

/// How long a client may take for its TLS handshake, and for a request's
/// headers.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest certificate check interval used; a longer one (up to
/// `Duration::MAX`) means never in practice.
const LONGEST_CHECK_INTERVAL: Duration = Duration::from_secs(365 * 24 * 3600);

/// Configures a [`WebhookServer`]; made by [`WebhookServer::builder`].
#[derive(Debug)]
#[must_use]
pub struct WebhookServerBuilder {
    address: SocketAddr,
    files: CertificateFiles,
    routes: Vec<(String, Webhook)>,
    max_body: usize,
    max_concurrent: NonZeroUsize,
    check_interval: Duration,
    metrics: Metrics,
}

/// An HTTPS server for the API server's admission and conversion calls
/// (see the [module docs](super)): built bound to its address, with its
/// certificate loaded, then [`run`](Self::run).
#[derive(Debug)]
pub struct WebhookServer {
    listener: std::net::TcpListener,
    address: SocketAddr,
    tls: Arc<ServerConfig>,
    reloader: Arc<Reloader>,
    shared: Arc<Shared>,
    check_interval: Duration,
}

impl WebhookServer {
    /// A builder for a server on `address` (`127.0.0.1:0` picks a free
    /// port: read it with [`local_addr`](Self::local_addr)) serving the
    /// certificate in `files`.
    pub fn builder(address: SocketAddr, files: CertificateFiles) -> WebhookServerBuilder {
        WebhookServerBuilder {
            address,
            files,
            routes: Vec::new(),
            max_body: DEFAULT_MAX_BODY_BYTES,
            max_concurrent: DEFAULT_MAX_CONCURRENT_REQUESTS,
            check_interval: DEFAULT_CERTIFICATE_CHECK_INTERVAL,
            metrics: Metrics::new(),
        }
    }

    /// The address the server is bound to (with the port chosen when port
    /// 0 was asked for).
    #[must_use]
    pub fn local_addr(&self) -> SocketAddr {
        self.address
    }

    /// Serves until `stop` is cancelled, then stops accepting, lets the
    /// requests being served finish (each within its webhook's timeout)
    /// and closes idle connections. Reads the certificate files again
    /// every [`certificate_check_interval`](WebhookServerBuilder::certificate_check_interval).
    ///
    /// # Errors
    ///
    /// [`WebhookError::Serve`] when the listener cannot be registered with
    /// tokio's I/O driver. Call it inside a tokio runtime with I/O and time
    /// enabled: outside one it panics, as tokio's own types do. A
    /// connection's or a request's failure is not an error of the server:
    /// it is logged, answered and counted.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future closes the listener and aborts every
    /// connection's task.
    pub async fn run(self, stop: CancellationToken) -> Result<(), WebhookError> {
        let listener =
            tokio::net::TcpListener::from_std(self.listener).map_err(WebhookError::Serve)?;
        let acceptor = TlsAcceptor::from(self.tls);
        let checks = check_every(
            self.check_interval,
            Arc::clone(&self.reloader),
            Arc::clone(&self.shared),
        );
        let _checks = AbortOnDropHandle::new(tokio::spawn(checks));
        let mut connections = JoinSet::new();
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        let connection = serve_connection(
                            stream,
                            acceptor.clone(),
                            Arc::clone(&self.shared),
                            stop.clone(),
                        );
                        connections.spawn(connection);
                    }
                    Err(error) => {
                        // Out of file descriptors and the like: do not spin.
                        tracing::warn!(%error, "accepting a webhook connection failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
            }
        }
        drop(listener);
        while connections.join_next().await.is_some() {}
        Ok(())
    }
}

/// Looks at the certificate files every `interval`, the first time one
/// interval after the load, until dropped. The files are read on tokio's
/// blocking threads: a slow mount holds neither the accept loop nor a
/// runtime thread.
async fn check_every(interval: Duration, reloader: Arc<Reloader>, shared: Arc<Shared>) {
    // Capped: tokio's timers panic past their range; a year is never.
    let mut checks = tokio::time::interval(interval.min(LONGEST_CHECK_INTERVAL));
    checks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    checks.reset();
    loop {
        checks.tick().await;
        let (reloader, shared) = (Arc::clone(&reloader), Arc::clone(&shared));
        let checked = tokio::task::spawn_blocking(move || check(&reloader, &shared.metrics));
        if checked.await.is_err() {
            tracing::error!("checking the webhook certificate panicked");
        }
    }
}

/// One look at the certificate files, logged and counted.
fn check(reloader: &Reloader, metrics: &Metrics) {
    match reloader.check() {
        Ok(Checked::Unchanged) => {}
        Ok(Checked::Reloaded) => {
            tracing::info!("webhook serving certificate reloaded");
            metrics.reloaded(true);
        }
        Err(error) => {
            let error = crate::error::error_chain(&error);
            tracing::warn!(
                error,
                "webhook serving certificate not reloaded, the old one serves"
            );
            metrics.reloaded(false);
        }
    }
}

/// One client: the TLS handshake, then HTTP/1.1 requests until it closes
/// or the server stops (then the request being served finishes).
async fn serve_connection(
    stream: TcpStream,
    acceptor: TlsAcceptor,
    shared: Arc<Shared>,
    stop: CancellationToken,
) {
    let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(error)) => {
            tracing::debug!(%error, "webhook TLS handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!("webhook TLS handshake timed out");
            return;
        }
    };
    let service = service_fn(move |incoming| {
        let shared = Arc::clone(&shared);
        async move { Ok::<_, Infallible>(request::handle(&shared, incoming).await) }
    });
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HANDSHAKE_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    let served = tokio::select! {
        served = connection.as_mut() => served,
        () = stop.cancelled() => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(error) = served {
        tracing::debug!(%error, "webhook connection ended with an error");
    }
}

impl WebhookServerBuilder {
    /// Serves `webhook` on `path` (`/validate-configmaps`): the path of
    /// its configuration's `clientConfig` (`url` or `service.path`), and
    /// its `webhook` label in the metrics.
    pub fn route(mut self, path: impl Into<String>, webhook: Webhook) -> Self {
        self.routes.push((path.into(), webhook));
        self
    }

    /// Refuses a request body larger than `bytes` with `400 Bad Request`
    /// ([`DEFAULT_MAX_BODY_BYTES`] unless set); zero is refused by
    /// [`build`](Self::build).
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body = bytes;
        self
    }

    /// At most `requests` handlers run at once, over every webhook
    /// ([`DEFAULT_MAX_CONCURRENT_REQUESTS`] unless set). A request past
    /// them waits for a free slot within its webhook's timeout, then is
    /// answered `429 Too Many Requests` (the API server applies the
    /// webhook's failure policy).
    pub fn max_concurrent_requests(mut self, requests: NonZeroUsize) -> Self {
        self.max_concurrent = requests;
        self
    }

    /// How often the certificate files are read again
    /// ([`DEFAULT_CERTIFICATE_CHECK_INTERVAL`] unless set); zero is
    /// refused by [`build`](Self::build).
    pub fn certificate_check_interval(mut self, interval: Duration) -> Self {
        self.check_interval = interval;
        self
    }

    /// Registers the server's metrics in `registry` (for instance the
    /// manager's [`registry_mut`](crate::manager::Manager::registry_mut));
    /// see the [module docs](super) for their names.
    pub fn metrics(self, registry: &mut Registry) -> Self {
        self.metrics.register(registry);
        self
    }

    /// Checks the settings, loads the certificate and binds the address.
    ///
    /// # Errors
    ///
    /// [`WebhookError::InvalidConfig`] for a zero timeout, body limit or
    /// check interval; [`WebhookError::InvalidPath`];
    /// [`WebhookError::DuplicatePath`]; the certificate's errors
    /// ([`Read`](WebhookError::Read), [`Pem`](WebhookError::Pem),
    /// [`Key`](WebhookError::Key)); [`WebhookError::Bind`].
    pub fn build(self) -> Result<WebhookServer, WebhookError> {
        let routes = self.checked_routes()?;
        let invalid = |setting, error| WebhookError::InvalidConfig { setting, error };
        if self.max_body == 0 {
            return Err(invalid(WebhookSetting::MaxBodyBytes, SettingError::Zero));
        }
        if self.check_interval.is_zero() {
            return Err(invalid(
                WebhookSetting::CertificateCheckInterval,
                SettingError::Zero,
            ));
        }
        let provider = Arc::new(ring::default_provider());
        let reloader = Arc::new(Reloader::load(self.files, Arc::clone(&provider))?);
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(WebhookError::Tls)?
            .with_no_client_auth()
            .with_cert_resolver(Arc::clone(&reloader) as _);
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let listener = bind(self.address)?;
        let address = listener.local_addr().map_err(|source| WebhookError::Bind {
            address: self.address,
            source,
        })?;
        let shared = Shared {
            routes,
            max_body: self.max_body,
            permits: Semaphore::new(self.max_concurrent.get().min(Semaphore::MAX_PERMITS)),
            metrics: self.metrics,
        };
        Ok(WebhookServer {
            listener,
            address,
            tls: Arc::new(config),
            reloader,
            shared: Arc::new(shared),
            check_interval: self.check_interval,
        })
    }

    fn checked_routes(&self) -> Result<HashMap<String, Route>, WebhookError> {
        let mut routes = HashMap::new();
        for (path, webhook) in &self.routes {
            if !path.starts_with('/') {
                return Err(WebhookError::InvalidPath { path: path.clone() });
            }
            if webhook.timeout.is_zero() {
                let setting = WebhookSetting::Timeout { path: path.clone() };
                let error = SettingError::Zero;
                return Err(WebhookError::InvalidConfig { setting, error });
            }
            let route = Route {
                endpoint: Arc::clone(&webhook.endpoint),
                timeout: webhook.timeout,
            };
            if routes.insert(path.clone(), route).is_some() {
                return Err(WebhookError::DuplicatePath { path: path.clone() });
            }
        }
        Ok(routes)
    }
}

fn bind(address: SocketAddr) -> Result<std::net::TcpListener, WebhookError> {
    let bind_error = |source| WebhookError::Bind { address, source };
    let listener = std::net::TcpListener::bind(address).map_err(bind_error)?;
    listener.set_nonblocking(true).map_err(bind_error)?;
    Ok(listener)
}
