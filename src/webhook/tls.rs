//! The serving certificate, read from two PEM files and read again when
//! they change.
//!
//! # Why polling the files' contents
//!
//! cert-manager writes a certificate into a Secret; the kubelet projects it
//! into the pod as a volume whose `tls.crt` and `tls.key` are symlinks into
//! a `..data` directory, and a rotation swaps `..data` to a new directory
//! in one `rename` (the kubelet's atomic writer). The files named never
//! change in place: OS notifications set on them keep watching the old
//! inodes (or must be set again after each `IN_DELETE_SELF`), and
//! modification times are those of files the swap brought in. Reading both
//! files again every [`certificate_check_interval`] and comparing their
//! bytes with the last seen ones holds for every way of replacing them
//! (the swap, a `rename`, a rewrite in place, a `ConfigMap` edit), and
//! costs two reads of a few kilobytes per interval.
//!
//! The two files are read one after the other, so a check can see a new
//! certificate with the old key: that pair fails (the key does not match),
//! the old certificate keeps serving, and the next check, seeing the key
//! changed too, loads the new pair. A new pair that cannot be loaded (bad
//! PEM, a key of another certificate) is logged and counted
//! (`tend_webhook_certificate_reloads_total{result="failed"}`) once per
//! change of the files, and the old one keeps serving.
//!
//! [`certificate_check_interval`]: super::WebhookServerBuilder::certificate_check_interval

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use tokio_rustls::rustls::crypto::CryptoProvider;
use tokio_rustls::rustls::pki_types::pem::{self, PemObject};
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;

use super::WebhookError;

/// Where the serving certificate (PEM, the leaf first, then any
/// intermediates) and its private key (PEM: PKCS#8, PKCS#1 or SEC1) are,
/// as cert-manager's Secret mounted in a pod has them (`tls.crt`,
/// `tls.key`).
///
/// # Examples
///
/// ```
/// use tend::webhook::CertificateFiles;
///
/// let files = CertificateFiles::new("/tls/tls.crt", "/tls/tls.key");
/// assert_eq!(files.cert(), std::path::Path::new("/tls/tls.crt"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateFiles {
    cert: PathBuf,
    key: PathBuf,
}

impl CertificateFiles {
    /// The certificate chain at `cert`, its key at `key`.
    pub fn new(cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        Self {
            cert: cert.into(),
            key: key.into(),
        }
    }

    /// `tls.crt` and `tls.key` in `dir`, cert-manager's names.
    pub fn in_dir(dir: impl AsRef<Path>) -> Self {
        let dir = dir.as_ref();
        Self::new(dir.join("tls.crt"), dir.join("tls.key"))
    }

    /// The certificate chain's file.
    #[must_use]
    pub fn cert(&self) -> &Path {
        &self.cert
    }

    /// The private key's file.
    #[must_use]
    pub fn key(&self) -> &Path {
        &self.key
    }
}

/// Both files' bytes as last read.
#[derive(Clone, PartialEq, Eq)]
struct Contents {
    cert: Vec<u8>,
    key: Vec<u8>,
}

impl fmt::Debug for Contents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the key's bytes.
        write!(
            f,
            "Contents({} + {} bytes)",
            self.cert.len(),
            self.key.len()
        )
    }
}

/// What a check of the files found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Checked {
    /// The same bytes as last time.
    Unchanged,
    /// A new certificate serves from now on.
    Reloaded,
}

/// The certificate every handshake gets, and the last bytes seen.
///
/// # Locks
///
/// `current` is held for a copy of an `Arc` (a handshake) or a swap (a
/// reload); `seen` for a comparison of the bytes. Neither is held with the
/// other, nor across an `.await` (there is none).
#[derive(Debug)]
pub(super) struct Reloader {
    files: CertificateFiles,
    provider: Arc<CryptoProvider>,
    current: RwLock<Arc<CertifiedKey>>,
    seen: Mutex<Contents>,
}

impl Reloader {
    /// Loads the files once.
    pub(super) fn load(
        files: CertificateFiles,
        provider: Arc<CryptoProvider>,
    ) -> Result<Self, WebhookError> {
        let contents = read(&files)?;
        let key = certified(&files, &contents, &provider)?;
        Ok(Self {
            files,
            provider,
            current: RwLock::new(Arc::new(key)),
            seen: Mutex::new(contents),
        })
    }

    /// Reads the files again and, when their bytes changed since the last
    /// look, serves the new certificate from the next handshake on.
    ///
    /// # Errors
    ///
    /// A file that cannot be read (each time), or a changed pair that
    /// cannot be loaded (once per change): the old certificate keeps
    /// serving.
    pub(super) fn check(&self) -> Result<Checked, WebhookError> {
        let contents = read(&self.files)?;
        {
            let mut seen = self.seen.lock();
            if *seen == contents {
                return Ok(Checked::Unchanged);
            }
            seen.clone_from(&contents);
        }
        let key = certified(&self.files, &contents, &self.provider)?;
        *self.current.write() = Arc::new(key);
        Ok(Checked::Reloaded)
    }
}

impl ResolvesServerCert for Reloader {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(&self.current.read()))
    }
}

fn read(files: &CertificateFiles) -> Result<Contents, WebhookError> {
    let cert = std::fs::read(&files.cert).map_err(WebhookError::read(&files.cert))?;
    let key = std::fs::read(&files.key).map_err(WebhookError::read(&files.key))?;
    Ok(Contents { cert, key })
}

/// The certificate chain and key of `contents`, checked to match.
fn certified(
    files: &CertificateFiles,
    contents: &Contents,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, WebhookError> {
    let pem_error = |path: &Path, what| {
        let path = path.to_owned();
        move |source| WebhookError::Pem { path, what, source }
    };
    let chain = CertificateDer::pem_slice_iter(&contents.cert)
        .collect::<Result<Vec<_>, _>>()
        .map_err(pem_error(&files.cert, "certificate"))?;
    if chain.is_empty() {
        return Err(pem_error(&files.cert, "certificate")(
            pem::Error::NoItemsFound,
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(&contents.key)
        .map_err(pem_error(&files.key, "private key"))?;
    CertifiedKey::from_der(chain, key, provider).map_err(|source| WebhookError::Key {
        cert: files.cert.clone(),
        key: files.key.clone(),
        source,
    })
}
