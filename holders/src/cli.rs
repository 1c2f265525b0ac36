//! The command line of `locklab-holders` (and `locklab holders`): a snapshot of who holds and who awaits advisory locks
//! on a running server, with a verdict per lock; once,
//! every few seconds (`--watch`), into a node_exporter textfile, or served
//! over HTTP (`holders serve`).
//!
//! Exit codes: 0 the snapshot was taken (and nothing `--fail-on` names was
//! found); 1 `--fail-on` found something; 2 no snapshot (bad arguments, a
//! broken `--keys` file, an unreachable server, a refused role).

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::names::KeyNames;
use crate::setup::Setup;
use crate::snapshot::Target;
use crate::tls::Connector;
use crate::{Judged, Thresholds, Verdict, metrics, render};
use anyhow::{Result, bail};
use clap::{Args, Subcommand, ValueEnum};

use locklab_core::output::emit;
use locklab_core::signals::Interrupts;

/// The default `holders serve --listen`: loopback only, and not
/// postgres_exporter's 9187.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9544";

/// `locklab holders`'s arguments.
#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct HoldersArgs {
    // (Options of every form: [`Common`]. No doc comment here: clap would
    // read it as help text.)
    #[allow(missing_docs)]
    #[command(flatten)]
    pub common: Common,
    /// Output: table, json or prometheus (the text format /metrics serves)
    /// [default: table; with --textfile: none]
    #[arg(long, value_enum)]
    pub format: Option<HoldersFormat>,
    /// Take a snapshot every SECONDS and redraw, like watch(1), until Ctrl-C.
    #[arg(long, value_name = "SECONDS", value_parser = parse_interval, allow_hyphen_values = true)]
    pub watch: Option<f64>,
    /// Exit 1 when a snapshot finds any of these verdicts (comma-separated:
    /// leaked, stuck, waiting); with --watch, at the first such snapshot.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub fail_on: Vec<FailOn>,
    /// Also write the metrics to this file for node_exporter's textfile
    /// collector (written atomically; `locklab_up 0` when the server cannot be read).
    #[arg(long, value_name = "PATH")]
    pub textfile: Option<PathBuf>,
    /// Serve the metrics over HTTP instead.
    #[command(subcommand)]
    pub command: Option<HoldersCommand>,
}

/// Options of every `holders` form.
#[derive(Args, Clone)]
pub struct Common {
    /// The server to inspect (libpq connection string or URL, with libpq's
    /// sslmode, sslrootcert, sslcert and sslkey; PGHOST, PGUSER, PGSSLMODE, …
    /// fill what it leaves out); a superuser or a role with pg_monitor sees
    /// every session. Never printed.
    #[arg(long, env = "LOCKLAB_DSN", hide_env_values = true, global = true)]
    pub dsn: Option<String>,
    /// Only locks in this database [default: every database]
    #[arg(long, global = true)]
    pub database: Option<String>,
    /// Key names and the allow-list of expected holders (YAML; see docs/src/holders.md).
    #[arg(long, value_name = "FILE", global = true)]
    pub keys: Option<PathBuf>,
    /// A holder idle (outside a transaction) this many seconds is leaked;
    /// idle in transaction, stuck.
    #[arg(long, value_name = "SECONDS", default_value = "60", value_parser = parse_seconds, allow_hyphen_values = true, global = true)]
    pub idle_after: f64,
    /// A waiter waiting this many seconds is reported as waiting.
    #[arg(long, value_name = "SECONDS", default_value = "10", value_parser = parse_seconds, allow_hyphen_values = true, global = true)]
    pub wait_after: f64,
    /// Seconds a snapshot may take, connecting and the query together (also its
    /// statement_timeout). Computing a --keys file's hashtext keys, until it
    /// succeeds once, gets as long again.
    #[arg(long, value_name = "SECONDS", default_value = "3", value_parser = parse_interval, allow_hyphen_values = true, global = true)]
    pub timeout: f64,
}

/// `holders`'s subcommands.
#[derive(Subcommand)]
pub enum HoldersCommand {
    /// Serve Prometheus metrics (text format, a fresh snapshot per scrape) and
    /// /healthz: one server's at /metrics (--dsn), or many servers' at
    /// /probe?target=NAME (--config FILE), with the exporter's own at /metrics.
    Serve {
        /// Address to listen on.
        #[arg(long, env = "LOCKLAB_LISTEN", default_value = DEFAULT_LISTEN)]
        listen: SocketAddr,
        /// A targets file (YAML: named servers, each with its DSN or where to
        /// read it, databases, keys file and thresholds; see docs/src/operators.md).
        #[arg(long, value_name = "FILE", env = "LOCKLAB_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Exit 0 when a `serve` at --listen answers /healthz with 200 within 2 s,
    /// else 1 with the reason (the container image's health check).
    Health {
        /// The address `serve` listens on (0.0.0.0 is asked on 127.0.0.1).
        #[arg(long, env = "LOCKLAB_LISTEN", default_value = DEFAULT_LISTEN)]
        listen: SocketAddr,
    },
}

/// `--format`.
#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum HoldersFormat {
    /// One row per lock, a summary line per verdict, what an operator could do.
    Table,
    /// The snapshot, verdicts and summary as one JSON object.
    Json,
    /// The Prometheus text format (as /metrics serves it).
    Prometheus,
}

/// `--fail-on` items.
#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum FailOn {
    /// Leaked session-level locks.
    Leaked,
    /// Locks of stuck (idle in transaction) sessions.
    Stuck,
    /// Waiters past --wait-after.
    Waiting,
}

impl FailOn {
    fn verdict(self) -> Verdict {
        match self {
            FailOn::Leaked => Verdict::Leaked,
            FailOn::Stuck => Verdict::Stuck,
            FailOn::Waiting => Verdict::Waiting,
        }
    }
}

fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if f.is_finite() && (0.0..=31_536_000.0).contains(&f) => Ok(f),
        _ => Err(format!("'{s}' is not a number of seconds (0 or more)")),
    }
}

fn parse_interval(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if f.is_finite() && (0.05..=86_400.0).contains(&f) => Ok(f),
        _ => Err(format!("'{s}' is not a number of seconds from 0.05 to 86400")),
    }
}

impl Setup {
    fn new(c: &Common) -> Result<Setup> {
        let env = crate::conninfo::ProcessEnv;
        let dsn = match c.dsn.as_deref().filter(|d| !d.is_empty()) {
            Some(dsn) => dsn,
            None if crate::conninfo::env_names_a_server(&env) => "",
            None => bail!(
                "holders needs a server: give --dsn or set LOCKLAB_DSN (or libpq's PGHOST, PGPORT, PGUSER, PGDATABASE)"
            ),
        };
        let info = crate::conninfo::parse(dsn, &env)?;
        let spec = info.spec;
        let connector = Connector::new(info.tls)?;
        let names = match &c.keys {
            Some(path) => KeyNames::load(path)?,
            None => KeyNames::default(),
        };
        Ok(Setup {
            target: Target {
                spec,
                connector,
                databases: c.database.iter().cloned().collect(),
                timeout: Duration::from_secs_f64(c.timeout),
            },
            thresholds: Thresholds {
                idle_after: Duration::from_secs_f64(c.idle_after),
                wait_after: Duration::from_secs_f64(c.wait_after),
            },
            names,
        })
    }
}

/// Runs `holders` (one snapshot, `--watch`, or `serve`).
///
/// # Errors
/// No DSN, a DSN that does not parse, a broken keys file, and (for one
/// snapshot) a server that cannot be read; [`Interrupted`](locklab_core::signals::Interrupted) on Ctrl-C.
pub fn holders(args: &HoldersArgs) -> Result<ExitCode> {
    if let Some(HoldersCommand::Health { listen }) = &args.command {
        return Ok(match crate::serve::health(*listen, Duration::from_secs(2)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("locklab holders: unhealthy: {e:#}");
                ExitCode::from(1)
            }
        });
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    if let Some(HoldersCommand::Serve {
        listen,
        config: Some(path),
    }) = &args.command
    {
        let c = &args.common;
        if c.dsn.as_deref().is_some_and(|d| !d.is_empty()) || c.database.is_some() || c.keys.is_some() {
            bail!(
                "serve --config takes every server, its databases and keys file from the targets file: \
                 leave out --dsn/LOCKLAB_DSN, --database and --keys"
            );
        }
        let defaults = crate::config::Defaults {
            thresholds: Thresholds {
                idle_after: Duration::from_secs_f64(c.idle_after),
                wait_after: Duration::from_secs_f64(c.wait_after),
            },
            timeout: Duration::from_secs_f64(c.timeout),
        };
        let targets = crate::config::load(path, defaults, &crate::conninfo::ProcessEnv)?
            .into_iter()
            .map(|t| {
                let setup = Setup {
                    target: t.target,
                    thresholds: t.thresholds,
                    names: t.names,
                };
                (t.name, setup)
            })
            .collect();
        return rt.block_on(async {
            let mut interrupts = Interrupts::install();
            crate::serve::many(targets, *listen, &mut interrupts).await
        });
    }
    let mut setup = Setup::new(&args.common)?;
    rt.block_on(async {
        let mut interrupts = Interrupts::install();
        match &args.command {
            Some(HoldersCommand::Serve { listen, .. }) => crate::serve::one(setup, *listen, &mut interrupts).await,
            Some(HoldersCommand::Health { .. }) => unreachable!("answered above"),
            None => match args.watch {
                None => once(&mut setup, args, &mut interrupts).await,
                Some(every) => watch(&mut setup, args, Duration::from_secs_f64(every), &mut interrupts).await,
            },
        }
    })
}

async fn once(setup: &mut Setup, args: &HoldersArgs, interrupts: &mut Interrupts) -> Result<ExitCode> {
    let (result, took) = tokio::select! {
        r = setup.snapshot() => r,
        signal = interrupts.next() => return Err(signal.into()),
    };
    if let Some(path) = &args.textfile {
        metrics::write_textfile(path, &metrics::encode(result.as_ref().map_err(|_| ()), took))?;
    }
    // The metrics of a failed snapshot say so (`locklab_up 0`), as --textfile's do.
    if result.is_err() && args.format == Some(HoldersFormat::Prometheus) {
        emit(&metrics::encode(Err(()), took))?;
    }
    let judged = result?;
    show(&judged, args, took)?;
    Ok(verdict_exit(&judged, &args.fail_on))
}

fn show(judged: &Judged, args: &HoldersArgs, took: Duration) -> Result<()> {
    let format = args.format.or(args.textfile.is_none().then_some(HoldersFormat::Table));
    let text = match format {
        None => {
            if let Some(path) = &args.textfile {
                eprintln!(
                    "locklab holders: wrote {} ({} advisory locks, {} leaked, {} stuck, {} waiting)",
                    path.display(),
                    judged.judged.len(),
                    judged.count(Verdict::Leaked),
                    judged.count(Verdict::Stuck),
                    judged.count(Verdict::Waiting)
                );
            }
            return Ok(());
        }
        Some(HoldersFormat::Table) => {
            let width = std::io::stdout().is_terminal().then(terminal_width).flatten();
            render::table(judged, width)
        }
        Some(HoldersFormat::Json) => render::json(judged) + "\n",
        Some(HoldersFormat::Prometheus) => metrics::encode(Ok(judged), took),
    };
    emit(&text)
}

/// `COLUMNS`, or 120 (comfy-table then wraps to it).
fn terminal_width() -> Option<u16> {
    std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok()).or(Some(120))
}

fn verdict_exit(judged: &Judged, fail_on: &[FailOn]) -> ExitCode {
    let found: Vec<&str> = fail_on
        .iter()
        .filter(|f| judged.count(f.verdict()) > 0)
        .map(|f| f.verdict().as_str())
        .collect();
    if found.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!("locklab holders: found {} (--fail-on)", found.join(", "));
        ExitCode::from(1)
    }
}

async fn watch(
    setup: &mut Setup,
    args: &HoldersArgs,
    every: Duration,
    interrupts: &mut Interrupts,
) -> Result<ExitCode> {
    let clear = std::io::stdout().is_terminal();
    loop {
        let (result, took) = tokio::select! {
            r = setup.snapshot() => r,
            signal = interrupts.next() => return Err(signal.into()),
        };
        if let Some(path) = &args.textfile {
            let text = metrics::encode(result.as_ref().map_err(|_| ()), took);
            if let Err(e) = metrics::write_textfile(path, &text) {
                eprintln!("locklab holders: {e:#}");
            }
        }
        if clear {
            emit("\x1b[H\x1b[2J")?;
        }
        emit(&format!(
            "Every {:.1} s: locklab holders (Ctrl-C to stop)\n\n",
            every.as_secs_f64()
        ))?;
        match &result {
            Ok(judged) => {
                show(judged, args, took)?;
                if verdict_exit(judged, &args.fail_on) != ExitCode::SUCCESS {
                    return Ok(ExitCode::from(1));
                }
            }
            Err(e) => emit(&format!("locklab holders: error: {e:#}\n"))?,
        }
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            signal = interrupts.next() => return Err(signal.into()),
        }
    }
}
