//! The control plane's certificates, generated for each plane: a CA and the
//! API server's serving certificate for 127.0.0.1 and `localhost`; a client
//! CA and an admin client certificate in `system:masters`; and a key pair
//! that signs service-account tokens. All keys are ECDSA P-256 (PKCS#8),
//! which kube-apiserver accepts everywhere it takes a key.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};

use crate::testing::HarnessError;

/// The files written by [`Certs::generate`].
#[derive(Debug)]
pub(super) struct Certs {
    /// The CA that signed the serving certificate (clients trust it).
    pub(super) ca: PathBuf,
    /// The API server's serving certificate and key.
    pub(super) serving_cert: PathBuf,
    pub(super) serving_key: PathBuf,
    /// The CA the API server trusts for client certificates.
    pub(super) client_ca: PathBuf,
    /// The admin's client certificate and key (`O=system:masters`).
    pub(super) admin_cert: PathBuf,
    pub(super) admin_key: PathBuf,
    /// The service-account token signing key and its public half.
    pub(super) service_account_key: PathBuf,
    pub(super) service_account_pub: PathBuf,
}

impl Certs {
    /// Generates every certificate and key into `dir` (keys readable by
    /// the owner only).
    pub(super) fn generate(dir: &Path) -> Result<Self, HarnessError> {
        let certs = Self {
            ca: dir.join("ca.crt"),
            serving_cert: dir.join("apiserver.crt"),
            serving_key: dir.join("apiserver.key"),
            client_ca: dir.join("client-ca.crt"),
            admin_cert: dir.join("admin.crt"),
            admin_key: dir.join("admin.key"),
            service_account_key: dir.join("sa.key"),
            service_account_pub: dir.join("sa.pub"),
        };
        let ca = certificate_authority("tend-test-ca")?;
        write(&certs.ca, &ca.pem(), false)?;
        let serving = leaf(
            "kube-apiserver",
            None,
            ExtendedKeyUsagePurpose::ServerAuth,
            &["127.0.0.1", "localhost"],
        )?;
        let key = signed(&serving, &ca, &certs.serving_cert)?;
        write(&certs.serving_key, &key.serialize_pem(), true)?;

        let client_ca = certificate_authority("tend-test-client-ca")?;
        write(&certs.client_ca, &client_ca.pem(), false)?;
        let admin = leaf(
            "admin",
            Some("system:masters"),
            ExtendedKeyUsagePurpose::ClientAuth,
            &[],
        )?;
        let key = signed(&admin, &client_ca, &certs.admin_cert)?;
        write(&certs.admin_key, &key.serialize_pem(), true)?;

        let service_accounts = KeyPair::generate().map_err(HarnessError::Certificates)?;
        write(
            &certs.service_account_key,
            &service_accounts.serialize_pem(),
            true,
        )?;
        write(
            &certs.service_account_pub,
            &service_accounts.public_key_pem(),
            false,
        )?;
        Ok(certs)
    }
}

/// A self-signed CA named `name`.
fn certificate_authority(name: &str) -> Result<CertifiedIssuer<'static, KeyPair>, HarnessError> {
    let mut params = CertificateParams::default();
    params.distinguished_name = distinguished_name(name, None);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let key = KeyPair::generate().map_err(HarnessError::Certificates)?;
    CertifiedIssuer::self_signed(params, key).map_err(HarnessError::Certificates)
}

/// The parameters of an end-entity certificate for `usage`, valid for the
/// IP addresses or DNS names `names`.
fn leaf(
    common_name: &str,
    organization: Option<&str>,
    usage: ExtendedKeyUsagePurpose,
    names: &[&str],
) -> Result<CertificateParams, HarnessError> {
    let names: Vec<String> = names.iter().map(|&name| name.to_owned()).collect();
    let mut params = CertificateParams::new(names).map_err(HarnessError::Certificates)?;
    params.distinguished_name = distinguished_name(common_name, organization);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![usage];
    Ok(params)
}

/// Signs `params` for a new key with `issuer`, writes the certificate to
/// `path`, and returns the key.
fn signed(
    params: &CertificateParams,
    issuer: &CertifiedIssuer<'static, KeyPair>,
    path: &Path,
) -> Result<KeyPair, HarnessError> {
    let key = KeyPair::generate().map_err(HarnessError::Certificates)?;
    let cert = params
        .signed_by(&key, issuer)
        .map_err(HarnessError::Certificates)?;
    write(path, &cert.pem(), false)?;
    Ok(key)
}

fn distinguished_name(common_name: &str, organization: Option<&str>) -> DistinguishedName {
    let mut name = DistinguishedName::new();
    if let Some(organization) = organization {
        name.push(DnType::OrganizationName, organization);
    }
    name.push(DnType::CommonName, common_name);
    name
}

/// Writes `contents` to a new file at `path`; mode 0600 when `private`.
fn write(path: &Path, contents: &str, private: bool) -> Result<(), HarnessError> {
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, if private { 0o600 } else { 0o644 });
    #[cfg(not(unix))]
    let _ = private;
    options
        .open(path)
        .and_then(|mut file| file.write_all(contents.as_bytes()))
        .map_err(HarnessError::io("writing a certificate"))
}
