//! Test support, not part of the product (included by `tests/holders_tls.rs`
//! and `benches/holders.rs`): TLS for a local cluster, for the tests and the
//! benchmark of `holders` over TLS: a CA and certificates made here (rcgen), the server's put in
//! its data directory, and `ssl = on` by `ALTER SYSTEM` and a reload (the
//! SSL settings take effect on SIGHUP: PostgreSQL docs, "SSL Support",
//! 19.9). Client certificates for `cert` authentication are signed by the
//! same CA, which the server trusts (`ssl_ca_file`).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose};

use locklab::server::Server;

/// A certificate authority of a test's own.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl TestCa {
    /// A new CA named `name` (its common name), with a fresh ECDSA P-256 key.
    ///
    /// # Errors
    /// rcgen cannot make the key or the certificate.
    pub fn new(name: &str) -> Result<TestCa> {
        let mut p = CertificateParams::new(Vec::<String>::new())?;
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, name);
        p.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        Ok(TestCa {
            issuer: CertifiedIssuer::self_signed(p, KeyPair::generate()?)?,
        })
    }

    /// The CA's certificate (PEM), for `sslrootcert`.
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A certificate this CA signs, and its private key (both PEM, the key
    /// PKCS#8): for the server, `names` are its host names and IP addresses
    /// (subjectAltName); for a client, `common_name` is the role (`cert`
    /// authentication compares it) and `names` may be empty.
    ///
    /// # Errors
    /// rcgen cannot make the key or the certificate.
    pub fn issue(&self, common_name: &str, names: &[&str]) -> Result<(String, String)> {
        let key = KeyPair::generate()?;
        let mut p = CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())?;
        p.distinguished_name.push(DnType::CommonName, common_name);
        Ok((p.signed_by(&key, &self.issuer)?.pem(), key.serialize_pem()))
    }
}

/// Turns on TLS in a running local cluster: a server certificate from `ca`
/// for `names` (e.g. `127.0.0.2` and a host name), written with the CA into
/// the data directory (owned by the server's user, mode 0600, as PostgreSQL
/// wants its key), then `ssl = on` and a reload; returns once a new session
/// sees `ssl` on (within 20 s). Roles and `pg_hba.conf` lines are the
/// caller's (`locklab::server::ServerOptions::hba_lines`).
///
/// # Errors
/// Not a local cluster (the data directory is not on this machine); the
/// files cannot be written; the server does not turn TLS on (its
/// `pg_file_settings` errors in the message).
pub async fn turn_on(server: &Server, ca: &TestCa, names: &[&str]) -> Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let (cert, key) = ca.issue(names.first().copied().unwrap_or("localhost"), names)?;
    let admin = server.admin().await?;
    let data: String = admin.client().query_one("show data_directory", &[]).await?.get(0);
    let owner = std::fs::metadata(&data)
        .with_context(|| format!("the data directory {data} is not on this machine (a local cluster only)"))?;
    for (name, text) in [("server.crt", &cert), ("server.key", &key), ("root.crt", &ca.pem())] {
        let path = Path::new(&data).join(name);
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
        std::os::unix::fs::chown(&path, Some(owner.uid()), Some(owner.gid()))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    }
    for sql in [
        "alter system set ssl_cert_file = 'server.crt'",
        "alter system set ssl_key_file = 'server.key'",
        "alter system set ssl_ca_file = 'root.crt'",
        "alter system set ssl = on",
        "select pg_reload_conf()",
    ] {
        admin.client().batch_execute(sql).await?;
    }
    admin.close().await;
    // The postmaster reads the settings on SIGHUP; sessions started after
    // that show them.
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let probe = server.admin().await?;
        let on: String = probe.client().query_one("show ssl", &[]).await?.get(0);
        if on == "on" {
            probe.close().await;
            return Ok(());
        }
        if Instant::now() > until {
            let errors = probe
                .client()
                .query(
                    "select name || ': ' || error from pg_file_settings where error is not null",
                    &[],
                )
                .await?;
            let errors: Vec<String> = errors.iter().map(|r| r.get(0)).collect();
            bail!("ssl is still off 20 s after the reload; pg_file_settings: {errors:?}");
        }
        probe.close().await;
        tokio::task::yield_now().await;
    }
}
