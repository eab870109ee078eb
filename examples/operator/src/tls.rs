//! `--embedded` only: a certificate authority of its own and a serving
//! certificate for 127.0.0.1, written as cert-manager's Secret mounts
//! them (`tls.crt`, `tls.key`). In a cluster, cert-manager issues them.

use std::path::Path;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

use crate::BoxError;

/// Writes a serving pair for 127.0.0.1 into `dir`; returns the CA's
/// certificate (PEM), the webhook configuration's `caBundle`.
pub fn issue(dir: &Path) -> Result<String, BoxError> {
    let mut ca = CertificateParams::default();
    ca.distinguished_name
        .push(DnType::CommonName, "website-operator CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let issuer = CertifiedIssuer::self_signed(ca, KeyPair::generate()?)?;
    let mut serving = CertificateParams::new(vec!["127.0.0.1".to_owned()])?;
    serving
        .distinguished_name
        .push(DnType::CommonName, "website-operator");
    serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate()?;
    let cert = serving.signed_by(&key, &issuer)?;
    std::fs::write(dir.join("tls.crt"), cert.pem())?;
    std::fs::write(dir.join("tls.key"), key.serialize_pem())?;
    Ok(issuer.pem())
}
