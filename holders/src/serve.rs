//! `holders serve`: Prometheus metrics over HTTP, a fresh snapshot per scrape.
//!
//! - One server (`--dsn`): `/metrics` is its snapshot.
//! - Many (`--config FILE`, [`crate::config`]): `/probe?target=NAME` is the
//!   snapshot of the target of that name, every metric labelled `target`;
//!   an unknown or missing name answers 400 and no DSN is ever taken from
//!   the URL. `/metrics` is the exporter's own health
//!   ([`crate::metrics::EXPORTER_FAMILIES`]). Probes of different targets run
//!   at once; probes of one target one after the other. Each is bounded by
//!   the target's `timeout`, and by Prometheus's scrape timeout (the
//!   `X-Prometheus-Scrape-Timeout-Seconds` header) less 0.25 s, whichever
//!   is shorter: a target that never answers is `locklab_up{target=…} 0`
//!   by then, and delays nobody else.
//!
//! Both serve `/healthz` (`ok`: the process answers; what `holders health`
//! and the image's health check ask). Connections are not kept between
//! scrapes: each snapshot connects, reads and disconnects, so the exporter
//! holds no session between scrapes, a restarted or failed-over server is
//! simply reached again, and `pg_stat_activity` shows the exporter only
//! while it reads (the cost: one connection, with its TLS handshake, per
//! scrape; `just bench-holders` measures it).

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, anyhow};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use indexmap::IndexMap;
use prometheus::{Encoder, GaugeVec, IntCounterVec, IntGauge, Opts, Registry, TextEncoder};

use crate::metrics;
use crate::setup::Setup;
use locklab_core::signals::{Interrupted, Interrupts};

/// One server: the next snapshot is taken under the lock (scrapes of one
/// server are serialised; each is bounded by the timeout).
type One = Arc<tokio::sync::Mutex<Setup>>;

/// Serves one server's snapshot at `/metrics` until SIGINT or SIGTERM.
///
/// # Errors
/// The address cannot be bound; [`Interrupted`] when stopped.
pub(crate) async fn one(setup: Setup, listen: SocketAddr, interrupts: &mut Interrupts) -> Result<ExitCode> {
    let what = format!(
        "/metrics for {} (a snapshot per scrape, within {} s)",
        setup.target.spec.redacted(),
        setup.target.timeout.as_secs_f64()
    );
    let shared: One = Arc::new(tokio::sync::Mutex::new(setup));
    let app = axum::Router::new()
        .route("/metrics", get(scrape_one))
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/",
            get(|| async { "locklab holders: advisory lock holders as Prometheus metrics at /metrics; /healthz\n" }),
        )
        .with_state(shared);
    run(app, listen, &what, interrupts).await
}

async fn scrape_one(State(shared): State<One>, headers: HeaderMap) -> impl IntoResponse {
    let mut setup = shared.lock().await;
    let (body, _) = probe(&mut setup, None, scrape_timeout(&headers)).await;
    ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], body)
}

/// The exporter of many targets: each target's state behind its own lock,
/// and the exporter's own metrics.
struct Many {
    targets: IndexMap<String, tokio::sync::Mutex<Setup>>,
    registry: Registry,
    probes: IntCounterVec,
    last_duration: GaugeVec,
}

/// Serves `/probe?target=NAME` for every target, and the exporter's own
/// `/metrics`, until SIGINT or SIGTERM.
///
/// # Errors
/// The address cannot be bound; [`Interrupted`] when stopped.
pub(crate) async fn many(
    targets: Vec<(String, Setup)>,
    listen: SocketAddr,
    interrupts: &mut Interrupts,
) -> Result<ExitCode> {
    let registry = Registry::new();
    let info = GaugeVec::new(
        Opts::new("locklab_exporter_build_info", "The exporter's version (value 1)"),
        &["version"],
    )?;
    info.with_label_values(&[env!("CARGO_PKG_VERSION")]).set(1.0);
    let count = IntGauge::new("locklab_exporter_targets", "Targets in the exporter's --config file")?;
    count.set(i64::try_from(targets.len()).unwrap_or(i64::MAX));
    let probes = IntCounterVec::new(
        Opts::new(
            "locklab_exporter_probes_total",
            "Probes answered since start, by target and result (success: locklab_up 1, failure: 0)",
        ),
        &["target", "result"],
    )?;
    let last_duration = GaugeVec::new(
        Opts::new(
            "locklab_exporter_last_probe_duration_seconds",
            "Seconds the last probe of the target took to connect and take the snapshot",
        ),
        &["target"],
    )?;
    for collector in [
        Box::new(info) as Box<dyn prometheus::core::Collector>,
        Box::new(count),
        Box::new(probes.clone()),
        Box::new(last_duration.clone()),
    ] {
        registry.register(collector)?;
    }
    for (name, _) in &targets {
        for result in ["success", "failure"] {
            probes.with_label_values(&[name.as_str(), result]);
        }
    }
    let what = format!(
        "/probe?target=NAME for {} targets ({}) and the exporter's own /metrics",
        targets.len(),
        targets.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", ")
    );
    let state = Arc::new(Many {
        targets: targets
            .into_iter()
            .map(|(n, s)| (n, tokio::sync::Mutex::new(s)))
            .collect(),
        registry,
        probes,
        last_duration,
    });
    let app = axum::Router::new()
        .route("/probe", get(scrape_target))
        .route("/metrics", get(exporter_metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/", get(index))
        .with_state(state);
    run(app, listen, &what, interrupts).await
}

async fn scrape_target(
    State(state): State<Arc<Many>>,
    Query(params): Query<Vec<(String, String)>>,
    headers: HeaderMap,
) -> axum::response::Response {
    let names = || state.targets.keys().map(String::as_str).collect::<Vec<_>>().join(", ");
    let wanted: Vec<&String> = params.iter().filter(|(k, _)| k == "target").map(|(_, v)| v).collect();
    let [name] = wanted.as_slice() else {
        let text = format!("give one target: /probe?target=NAME (NAME one of: {})\n", names());
        return (StatusCode::BAD_REQUEST, text).into_response();
    };
    let Some(setup) = state.targets.get(name.as_str()) else {
        // The name is not echoed: it came from the URL.
        let text = format!("no such target in the --config file (targets: {})\n", names());
        return (StatusCode::BAD_REQUEST, text).into_response();
    };
    let mut setup = setup.lock().await;
    let (body, (ok, took)) = probe(&mut setup, Some(name), scrape_timeout(&headers)).await;
    state
        .probes
        .with_label_values(&[name.as_str(), if ok { "success" } else { "failure" }])
        .inc();
    state
        .last_duration
        .with_label_values(&[name.as_str()])
        .set(took.as_secs_f64());
    ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], body).into_response()
}

async fn exporter_metrics(State(state): State<Arc<Many>>) -> impl IntoResponse {
    let mut out = Vec::new();
    let _ = TextEncoder::new().encode(&state.registry.gather(), &mut out);
    ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], out)
}

async fn index(State(state): State<Arc<Many>>) -> String {
    let mut text = "locklab holders: one server's advisory lock holders per /probe?target=NAME; \
                    the exporter's own metrics at /metrics; /healthz\n\ntargets:\n"
        .to_owned();
    for name in state.targets.keys() {
        text.push_str(&format!("  /probe?target={name}\n"));
    }
    text
}

/// Prometheus's scrape timeout (its `X-Prometheus-Scrape-Timeout-Seconds`
/// header) less 0.25 s for the answer to travel, at least 0.05 s.
fn scrape_timeout(headers: &HeaderMap) -> Option<Duration> {
    let s: f64 = headers
        .get("x-prometheus-scrape-timeout-seconds")?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    s.is_finite().then(|| Duration::from_secs_f64((s - 0.25).max(0.05)))
}

/// One snapshot's metrics, within the target's timeout or `cap` when shorter;
/// whether it was taken, and how long it took.
async fn probe(setup: &mut Setup, target: Option<&str>, cap: Option<Duration>) -> (String, (bool, Duration)) {
    let own = setup.target.timeout;
    if let Some(cap) = cap {
        setup.target.timeout = own.min(cap);
    }
    let (result, took) = setup.snapshot().await;
    setup.target.timeout = own;
    if let Err(e) = &result {
        match target {
            Some(t) => tracing::warn!("probe of {t}: {e:#}"),
            None => tracing::warn!("scrape: {e:#}"),
        }
    }
    let body = metrics::encode_for(result.as_ref().map_err(|_| ()), took, target);
    (body, (result.is_ok(), took))
}

/// Binds `listen`, serves `app` until SIGINT or SIGTERM, then stops within 5 s.
async fn run(app: axum::Router, listen: SocketAddr, what: &str, interrupts: &mut Interrupts) -> Result<ExitCode> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| anyhow!("cannot listen on {listen}: {e}"))?;
    let local = listener.local_addr()?;
    eprintln!("locklab holders: serving http://{local}{what}");
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = axum::serve(listener, app).with_graceful_shutdown(async {
        let _ = stop_rx.await;
    });
    let server = tokio::spawn(async move { server.await });
    let signal: Interrupted = interrupts.next().await;
    let _ = stop_tx.send(());
    let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
    Err(signal.into())
}

/// `holders health`: asks `/healthz` of a running `serve` at `listen` (an
/// unspecified address, 0.0.0.0 or ::, is asked on loopback), within `timeout`.
///
/// # Errors
/// No answer, or not `200 OK`, with the reason.
pub fn health(listen: SocketAddr, timeout: Duration) -> Result<()> {
    let mut at = listen;
    if at.ip().is_unspecified() {
        at.set_ip(if at.is_ipv4() {
            std::net::Ipv4Addr::LOCALHOST.into()
        } else {
            std::net::Ipv6Addr::LOCALHOST.into()
        });
    }
    let url = format!("http://{at}/healthz");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .build()
        .into();
    let response = agent.get(&url).call().map_err(|e| anyhow!("{url}: {e}"))?;
    if response.status() != 200 {
        anyhow::bail!("{url} answered {}", response.status());
    }
    Ok(())
}
