//! The webhook server's error and the settings it names.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;

use crate::SettingError;

/// A setting of a [`WebhookServerBuilder`](super::WebhookServerBuilder) or
/// of a [`Webhook`](super::Webhook), as [`WebhookError::InvalidConfig`]
/// names it; displayed as the method's name (and the webhook's path).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WebhookSetting {
    /// [`WebhookServerBuilder::max_body_bytes`](super::WebhookServerBuilder::max_body_bytes).
    MaxBodyBytes,
    /// [`WebhookServerBuilder::certificate_check_interval`](super::WebhookServerBuilder::certificate_check_interval).
    CertificateCheckInterval,
    /// [`Webhook::timeout`](super::Webhook::timeout) of the webhook on `path`.
    Timeout {
        /// The webhook's path.
        path: String,
    },
}

impl fmt::Display for WebhookSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MaxBodyBytes => f.write_str("max_body_bytes"),
            Self::CertificateCheckInterval => f.write_str("certificate_check_interval"),
            Self::Timeout { path } => write!(f, "timeout of {path}"),
        }
    }
}

/// What went wrong building or running a
/// [`WebhookServer`](super::WebhookServer).
///
/// Errors of single requests are not here: a request is answered with an
/// HTTP status (see the [module docs](super)) and counted in the metrics,
/// and the server goes on serving.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tend::webhook::{CertificateFiles, Verdict, Webhook, WebhookError, WebhookServer};
/// use tend::SettingError;
///
/// let allow = Webhook::validating(|_: tend::webhook::AdmissionRequest<k8s_openapi::api::core::v1::ConfigMap>| async {
///     Verdict::allow()
/// });
/// let built = WebhookServer::builder("127.0.0.1:0".parse().unwrap(), CertificateFiles::new("tls.crt", "tls.key"))
///     .route("/validate", allow.timeout(Duration::ZERO))
///     .build();
/// let Err(WebhookError::InvalidConfig { setting, error }) = built else { unreachable!() };
/// assert_eq!((setting.to_string(), error), ("timeout of /validate".to_owned(), SettingError::Zero));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WebhookError {
    /// The builder was given a setting that cannot work.
    #[error("webhook server is misconfigured: {setting} {error}")]
    InvalidConfig {
        /// The setting that was wrong.
        setting: WebhookSetting,
        /// What is wrong with it.
        error: SettingError,
    },
    /// A webhook was routed on a path that does not start with `/`.
    #[error("webhook path {path:?} does not start with /")]
    InvalidPath {
        /// The path as given.
        path: String,
    },
    /// Two webhooks were routed on one path.
    #[error("two webhooks are routed on {path}")]
    DuplicatePath {
        /// The path.
        path: String,
    },
    /// A certificate or key file could not be read.
    #[error("reading {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A certificate or key file holds no PEM block of its kind, or a
    /// malformed one.
    #[error("{path} holds no valid PEM {what}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// `certificate` or `private key`.
        what: &'static str,
        /// Why.
        #[source]
        source: tokio_rustls::rustls::pki_types::pem::Error,
    },
    /// The key cannot be used, or does not match the certificate.
    #[error("the key in {key} cannot serve the certificate in {cert}")]
    Key {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// Why (rustls's error).
        #[source]
        source: tokio_rustls::rustls::Error,
    },
    /// The TLS configuration could not be made.
    #[error("configuring TLS failed")]
    Tls(#[source] tokio_rustls::rustls::Error),
    /// The address could not be bound.
    #[error("binding {address} failed")]
    Bind {
        /// The address asked for.
        address: SocketAddr,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The bound listener could not be handed to tokio (no runtime).
    #[error("serving the bound listener failed")]
    Serve(#[source] io::Error),
}

impl WebhookError {
    pub(super) fn read(path: &std::path::Path) -> impl FnOnce(io::Error) -> Self + '_ {
        move |source| Self::Read {
            path: path.to_owned(),
            source,
        }
    }
}
