//! Connecting with the TLS settings of [`crate::conninfo`]: rustls (with
//! ring) through tokio-postgres-rustls, the verification libpq's `sslmode`
//! asks for, a client certificate when one is given, and one clear line for
//! each way TLS fails.

use std::sync::Arc;

use anyhow::{Context, Result, anyhow, bail};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres::Client;
use tokio_postgres::config::SslMode as PgSslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::conninfo::{Check, RootCert, SslMode, Tls};

/// A connector for one target: its settings, and the rustls configuration
/// made from them once (certificate files are read when the target is set
/// up, so a bad file is an error at start, not at each scrape).
#[derive(Clone)]
pub struct Connector {
    /// The settings.
    pub tls: Tls,
    make: Option<MakeRustlsConnect>,
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connector")
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

impl Connector {
    /// No TLS (`sslmode=disable`).
    pub fn plain() -> Connector {
        Connector {
            tls: Tls::disabled(),
            make: None,
        }
    }

    /// Reads the certificate files and builds the rustls configuration.
    ///
    /// # Errors
    /// A root, certificate or key file that cannot be read or holds no PEM
    /// item of its kind; a key that does not belong to the certificate; no
    /// platform roots for `sslrootcert=system`.
    pub fn new(tls: Tls) -> Result<Connector> {
        let make = match tls.mode {
            SslMode::Disable => None,
            _ => Some(MakeRustlsConnect::new(client_config(&tls)?)),
        };
        Ok(Connector { tls, make })
    }

    /// Connects with `config` (host, role, … without TLS settings), TLS as
    /// the settings say; the connection's task is spawned. Errors are
    /// tokio-postgres's, for [`explain`].
    pub async fn connect(
        &self,
        config: &mut tokio_postgres::Config,
    ) -> Result<(Client, tokio::task::JoinHandle<()>), tokio_postgres::Error> {
        let plain = async |config: &mut tokio_postgres::Config| {
            let (client, connection) = config
                .ssl_mode(PgSslMode::Disable)
                .connect(tokio_postgres::NoTls)
                .await?;
            Ok((client, tokio::spawn(async move { drop(connection.await) })))
        };
        let tls = async |config: &mut tokio_postgres::Config, mode: PgSslMode, make: &MakeRustlsConnect| {
            let (client, connection) = config.ssl_mode(mode).connect(make.clone()).await?;
            Ok((client, tokio::spawn(async move { drop(connection.await) })))
        };
        match (&self.make, self.tls.mode) {
            (None, _) | (_, SslMode::Disable) => plain(config).await,
            // libpq: a plain connection first, TLS when the server refuses it.
            (Some(make), SslMode::Allow) => match plain(config).await {
                Err(e) if e.as_db_error().is_some() => tls(config, PgSslMode::Require, make).await,
                other => other,
            },
            (Some(make), SslMode::Prefer) => tls(config, PgSslMode::Prefer, make).await,
            (Some(make), _) => tls(config, PgSslMode::Require, make).await,
        }
    }
}

fn client_config(tls: &Tls) -> Result<ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .context("the TLS provider")?;
    let builder = match tls.check() {
        Check::Nothing => builder.dangerous().with_custom_certificate_verifier(Arc::new(Lenient {
            provider: provider.clone(),
            chain: None,
        })),
        check => {
            let roots = roots(tls.root_cert.as_ref())?;
            let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .build()
                .map_err(|e| anyhow!("sslrootcert: {e}"))?;
            if check == Check::Full {
                builder.with_webpki_verifier(webpki)
            } else {
                builder.dangerous().with_custom_certificate_verifier(Arc::new(Lenient {
                    provider: provider.clone(),
                    chain: Some(webpki),
                }))
            }
        }
    };
    match &tls.client {
        None => Ok(builder.with_no_client_auth()),
        Some((cert, key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| anyhow!("sslcert: cannot read {}: {e}", cert.display()))?;
            if chain.is_empty() {
                bail!("sslcert: {} holds no PEM certificate", cert.display());
            }
            let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| {
                anyhow!(
                    "sslkey: {} is not a PEM private key (PKCS#8, PKCS#1 or SEC1): {e}",
                    key.display()
                )
            })?;
            builder.with_client_auth_cert(chain, key_der).map_err(|e| {
                match e.to_string().contains("parse private key") {
                    true => anyhow!(
                        "sslkey: {} is not a PEM private key rustls can use (RSA, ECDSA or Ed25519)",
                        key.display()
                    ),
                    false => anyhow!(
                        "sslcert/sslkey: {} and {} do not go together: {e}",
                        cert.display(),
                        key.display()
                    ),
                }
            })
        }
    }
}

fn roots(root: Option<&RootCert>) -> Result<RootCertStore> {
    let mut store = RootCertStore::empty();
    match root {
        Some(RootCert::File(path)) => {
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| anyhow!("sslrootcert: cannot read {}: {e}", path.display()))?;
            let (added, _) = store.add_parsable_certificates(certs);
            if added == 0 {
                bail!("sslrootcert: {} holds no usable PEM certificate", path.display());
            }
        }
        Some(RootCert::System) => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = store.add_parsable_certificates(found.certs);
            if added == 0 {
                bail!(
                    "sslrootcert=system: no trusted root certificates on this machine \
                     (install the ca-certificates package, or give sslrootcert=FILE)"
                );
            }
        }
        None => bail!("no root certificate (sslrootcert)"),
    }
    Ok(store)
}

/// The server-certificate check of `require`/`prefer`/`allow` without a root
/// certificate (`chain: None`: any certificate, as libpq) and of
/// `verify-ca` (the chain must lead to a trusted root; the name is not
/// checked). webpki checks the chain before the name, so a name error means
/// the chain was good. The handshake's signatures are verified either way.
#[derive(Debug)]
struct Lenient {
    provider: Arc<CryptoProvider>,
    chain: Option<Arc<WebPkiServerVerifier>>,
}

impl ServerCertVerifier for Lenient {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// The TLS reason a connection failed, as one sentence, when it failed for
/// one: a server without TLS under `require`, an unknown CA, a host name the
/// certificate does not name, an expired certificate, a refused client
/// certificate, or a server that accepts this role only over TLS. `None`
/// for other failures. Never holds a password (only host, modes and files).
pub fn explain(e: &tokio_postgres::Error, tls: &Tls, host: &str) -> Option<String> {
    if let Some(db) = e.as_db_error() {
        // PostgreSQL's ClientAuthentication: "no pg_hba.conf entry for host …,
        // user …, database …, no encryption" (28000).
        if db.code().code() == "28000" && db.message().ends_with("no encryption") {
            return Some(format!(
                "the server accepts this role from here only over TLS (pg_hba.conf: hostssl), \
                 and sslmode={} connected without it; use sslmode=verify-full with sslrootcert",
                tls.mode.as_str()
            ));
        }
        return None;
    }
    if locklab_core::with_sources(e).contains("server does not support TLS") {
        return Some(format!(
            "the server does not accept TLS connections (ssl = off), and sslmode={} needs TLS",
            tls.mode.as_str()
        ));
    }
    let rustls_error = chain_rustls_error(e)?;
    let roots = match &tls.root_cert {
        Some(RootCert::File(p)) => format!("sslrootcert {}", p.display()),
        Some(RootCert::System) => "the platform's roots (sslrootcert=system)".to_owned(),
        None => "sslrootcert".to_owned(),
    };
    Some(match rustls_error {
        rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer) => {
            format!(
                "the server's certificate is not signed by a CA in {roots} (sslmode={})",
                tls.mode.as_str()
            )
        }
        rustls::Error::InvalidCertificate(CertificateError::NotValidForNameContext { presented, .. }) => format!(
            "the server's certificate does not name the host '{host}' (it names {}); sslmode=verify-full \
             checks the name: connect by a name the certificate has",
            if presented.is_empty() {
                "no host".to_owned()
            } else {
                names(presented)
            }
        ),
        rustls::Error::InvalidCertificate(CertificateError::NotValidForName) => {
            format!("the server's certificate does not name the host '{host}'; sslmode=verify-full checks the name")
        }
        rustls::Error::InvalidCertificate(CertificateError::Expired | CertificateError::ExpiredContext { .. }) => {
            "the server's certificate has expired".to_owned()
        }
        rustls::Error::InvalidCertificate(
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. },
        ) => "the server's certificate is not valid yet (check this machine's clock)".to_owned(),
        rustls::Error::AlertReceived(alert) => match &tls.client {
            None => format!(
                "the server ended the TLS handshake ({alert:?}); does it ask for a client certificate \
                 (sslcert and sslkey)?"
            ),
            Some((cert, _)) => format!(
                "the server did not accept the client certificate sslcert {} (TLS alert {alert:?})",
                cert.display()
            ),
        },
        other => format!("TLS handshake failed: {other}"),
    })
}

/// rustls's presented names (`IpAddress(127.0.0.2)`, `DnsName("db")`) as
/// `127.0.0.2, db`.
fn names(presented: &[String]) -> String {
    presented
        .iter()
        .map(|p| match p.split_once('(') {
            Some((_, inner)) => inner.trim_end_matches(')').trim_matches('"'),
            None => p.as_str(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The rustls error in `e`'s chain of sources (tokio-rustls wraps it in an
/// `io::Error`, whose `source` skips it: looked for with `get_ref`).
fn chain_rustls_error<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut next: Option<&'a (dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = next {
        if let Some(r) = err.downcast_ref::<rustls::Error>() {
            return Some(r);
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && let Some(inner) = io.get_ref()
            && let Some(r) = inner.downcast_ref::<rustls::Error>()
        {
            return Some(r);
        }
        next = err.source();
    }
    None
}
