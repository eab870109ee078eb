//! The tests' own certificate authorities (rcgen) and a certificate volume
//! laid out as the kubelet mounts a Secret: `tls.crt` and `tls.key` are
//! symlinks into `..data`, itself a symlink to a versioned directory that
//! a rotation replaces in one `rename` (the kubelet's atomic writer).

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use tend::webhook::CertificateFiles;

/// A certificate authority of a test.
pub(crate) struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A serving certificate and its key, as PEM, and the certificate's DER.
pub(crate) struct Serving {
    pub(crate) cert_pem: String,
    pub(crate) key_pem: String,
    pub(crate) der: Vec<u8>,
}

impl Ca {
    pub(crate) fn new(name: &str) -> Self {
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().expect("a CA key");
        let issuer = CertifiedIssuer::self_signed(params, key).expect("a CA certificate");
        Self { issuer }
    }

    /// The CA's certificate (a webhook configuration's `caBundle`).
    pub(crate) fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// The CA's certificate, DER.
    pub(crate) fn der(&self) -> Vec<u8> {
        self.issuer.der().to_vec()
    }

    /// A new serving certificate for 127.0.0.1 (a new key, a new serial).
    pub(crate) fn serving(&self) -> Serving {
        let mut params =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
                .expect("serving parameters");
        params
            .distinguished_name
            .push(DnType::CommonName, "tend-webhook");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let key = KeyPair::generate().expect("a serving key");
        let cert = params.signed_by(&key, &self.issuer).expect("signed");
        Serving {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().to_vec(),
        }
    }
}

/// A directory laid out as a mounted Secret.
pub(crate) struct Volume {
    dir: PathBuf,
    version: u32,
}

impl Volume {
    /// A volume in `dir` holding `serving`.
    pub(crate) fn new(dir: &Path, serving: &Serving) -> Self {
        let mut volume = Self {
            dir: dir.to_owned(),
            version: 0,
        };
        volume.write(&serving.cert_pem, &serving.key_pem);
        for name in ["tls.crt", "tls.key"] {
            symlink(Path::new("..data").join(name), dir.join(name)).expect("a file symlink");
        }
        volume
    }

    pub(crate) fn files(&self) -> CertificateFiles {
        CertificateFiles::in_dir(&self.dir)
    }

    /// Replaces both files at once: a new versioned directory, then
    /// `..data` renamed over, as the kubelet does.
    pub(crate) fn write(&mut self, cert: &str, key: &str) {
        self.version += 1;
        let versioned = format!("..v{}", self.version);
        let target = self.dir.join(&versioned);
        fs::create_dir(&target).expect("a version directory");
        fs::write(target.join("tls.crt"), cert).expect("the certificate written");
        fs::write(target.join("tls.key"), key).expect("the key written");
        let staged = self.dir.join("..data_tmp");
        symlink(&versioned, &staged).expect("the staged symlink");
        fs::rename(&staged, self.dir.join("..data")).expect("the swap");
    }
}
