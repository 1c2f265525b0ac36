//! `locklab pooler-check`: the pooler conformance kit (the scenarios tagged
//! `pooler`) run through one pooler, a user's own at an address or one of
//! locklab's pooler columns, and the verdicts of the properties it decides,
//! each with what a violation means for a pooler's author
//! (`for_poolers:` in its file, else its advice).
//!
//! With `--pooler`, locklab starts nothing: the cells run on the server
//! `--dsn` names (each in a database of its own, which the pooler must
//! route to that server) and connect through the pooler as the server's
//! role. Before the run the server and the pooler are each asked for a
//! connection (5 s each), so that a wrong address or a refused role is one
//! line, not a matrix of failed cells.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use locklab::properties::{Mark, Scope};
use locklab::server::BackendChoice;
use locklab_drivers::PoolerMode;

use crate::cli::{PoolerCheckArgs, RunArgs};
use crate::execute::execute;
use crate::output::emit;
use crate::selection::load;

/// The tag of the kit's scenarios.
pub const KIT_TAG: &str = "pooler";

/// How long the server and the pooler each have to accept a connection
/// before the run.
const PROBE: Duration = Duration::from_secs(5);

/// Runs the kit through the pooler (or each `--column`) and prints the
/// verdicts of the properties its cells decide (one line each, then what a
/// violation means for a pooler), per column. Exit 1 when one of them is
/// violated or cannot be judged (a deciding cell failed) in a column, 0
/// when every one holds or does not apply.
///
/// # Errors
/// A `--pooler` that is not an address; no server DSN with `--pooler`; the
/// server or the pooler not answering, or refusing the role; a `--column`
/// that is not one of locklab's pooler columns; as [`execute`].
pub fn pooler_check(dir: &Path, args: &PoolerCheckArgs) -> Result<ExitCode> {
    let (columns, run) = match (&args.pooler, args.column.is_empty()) {
        (Some(address), _) => {
            let mode = args
                .mode
                .map(|m| m.0)
                .context("--pooler needs --mode session or --mode transaction (the pooler's pool mode)")?;
            let target = Target::parse(address)?;
            let dsn = args.server.dsn_for(BackendChoice::External).context(
                "--pooler needs the server behind the pooler: --dsn postgres://ROLE:PASSWORD@HOST:PORT/DB or LOCKLAB_DSN",
            )?;
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            rt.block_on(probe(&dsn, &target))?;
            let id = declare(&target, mode, !args.no_cancel)?;
            (
                vec![id.clone()],
                run_args(
                    vec![id],
                    args.server.with_backends(vec![BackendChoice::External]),
                    args.jobs,
                ),
            )
        }
        (None, false) => {
            let known: Vec<&'static str> = locklab_drivers::registry()
                .iter()
                .filter(|d| d.info().pooler.is_some())
                .map(|d| d.info().id)
                .collect();
            for c in &args.column {
                if !known.contains(&c.as_str()) {
                    bail!(
                        "--column {c}: not one of locklab's pooler columns ({})",
                        known.join(", ")
                    );
                }
            }
            (
                args.column.clone(),
                run_args(args.column.clone(), args.server.clone(), args.jobs),
            )
        }
        (None, true) => bail!("give --pooler HOST:PORT (a pooler you run) or --column ID (one of locklab's)"),
    };
    let kit: BTreeSet<String> = load(dir)?
        .into_iter()
        .filter(|s| s.tags.iter().any(|t| t == KIT_TAG))
        .map(|s| s.family)
        .collect();
    let report = execute(dir, &run)?;
    let mut text = String::new();
    let mut json = Vec::new();
    let mut bad_columns = 0;
    for column in &columns {
        let (out, value, bad) = judge(&report, column, &kit);
        text.push_str(&out);
        json.push(value);
        if bad > 0 {
            bad_columns += 1;
        }
    }
    if args.json {
        emit(&format!(
            "{}\n",
            serde_json::to_string_pretty(&serde_json::json!({ "columns": json }))?
        ))?;
    } else {
        emit(&text)?;
    }
    Ok(if bad_columns > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// One column's part of the output: the text, its JSON, and how many of the
/// kit's properties it violates or cannot be judged on.
fn judge(report: &locklab::report::Report, column: &str, kit: &BTreeSet<String>) -> (String, serde_json::Value, usize) {
    let mut out = String::new();
    let mut bad = 0;
    let mut judged = 0;
    let runs: Vec<&locklab::outcome::RunResult> = report.runs.iter().filter(|r| r.driver == column).collect();
    let failed: Vec<String> = runs
        .iter()
        .filter(|r| r.status() == locklab::outcome::Status::Fail)
        .map(|r| format!("{}: {}", r.scenario, r.failure.as_deref().unwrap_or("failed")))
        .collect();
    let configuration = report
        .drivers
        .iter()
        .find(|d| d.id == column)
        .map(|d| {
            format!(
                "{}{}",
                d.configuration,
                d.pooler_version
                    .as_deref()
                    .map(|v| format!(" ({v})"))
                    .unwrap_or_default()
            )
        })
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "# The pooler conformance kit through `{column}`\n\n{configuration}\n\n{} scenario file(s) tagged `{KIT_TAG}`, {} cell(s).\n",
        kit.len(),
        runs.len()
    );
    let mut json = Vec::new();
    let of_kit = |v: &locklab::properties::ColumnVerdict| v.evidence.iter().any(|e| kit.contains(family(&e.scenario)));
    for server in &report.verdicts {
        for p in server.properties.iter().filter(|p| p.scope == Scope::Column) {
            let Some(v) = p.of(column) else { continue };
            // A property of the kit: one its cells decide (here, or, when
            // a failed cell left it undecided here, in another column).
            if !(of_kit(v) || v.verdict == Mark::Undecided && p.columns.iter().any(of_kit)) {
                continue;
            }
            judged += 1;
            let declared = report.properties.iter().find(|q| q.id == p.id);
            let facts: Vec<String> = v
                .evidence
                .iter()
                .filter(|e| e.reads == v.verdict)
                .map(|e| {
                    format!(
                        "{} ({} · {})",
                        e.says.as_deref().unwrap_or(&e.reading),
                        e.scenario,
                        e.record.as_deref().unwrap_or("status")
                    )
                })
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            let _ = writeln!(
                out,
                "- {} **{}** ({}): {}",
                v.verdict.symbol(),
                p.id,
                p.severity.as_str(),
                if facts.is_empty() {
                    v.reasons.join("; ")
                } else {
                    facts.join("; ")
                }
            );
            let meaning = declared.map(|d| d.for_poolers.clone().unwrap_or_else(|| d.advice.clone()));
            if matches!(v.verdict, Mark::Violated | Mark::Undecided) {
                bad += 1;
                if let Some(m) = &meaning {
                    let _ = writeln!(out, "  - For a pooler: {m}");
                }
            }
            json.push(serde_json::json!({
                "property": p.id,
                "severity": p.severity.as_str(),
                "verdict": v.verdict.as_str(),
                "facts": facts,
                "for_poolers": meaning,
            }));
        }
    }
    if !failed.is_empty() {
        let _ = writeln!(out, "\nCells that failed (their properties cannot be judged):");
        for f in &failed {
            let _ = writeln!(out, "- {f}");
        }
    }
    let _ = writeln!(
        out,
        "\n`{column}`: {} of {judged} propert(y/ies) of the kit hold or do not apply; {bad} violated or not judged.\n",
        judged - bad
    );
    let value = serde_json::json!({
        "column": column,
        "configuration": configuration,
        "cells": runs.len(),
        "failed_cells": failed,
        "properties": json,
    });
    (out, value, bad)
}

/// The scenario file's name of a cell's scenario (`NAME[params]` → `NAME`).
fn family(scenario: &str) -> &str {
    scenario.split('[').next().unwrap_or(scenario)
}

/// The run: the kit's scenarios through `columns`.
fn run_args(columns: Vec<String>, server: crate::cli::ServerArgs, jobs: u16) -> RunArgs {
    RunArgs {
        scenario: Vec::new(),
        tag: vec![KIT_TAG.to_owned()],
        driver: columns,
        server,
        jobs,
        repeat: 1,
        trials: None,
        shard: None,
    }
}

/// Where the user's pooler listens, and the password it takes if not the
/// server's.
struct Target {
    host: String,
    port: u16,
    password: Option<String>,
}

impl Target {
    /// `HOST:PORT` or `postgres://[ROLE[:PASSWORD]@]HOST:PORT[/…]`.
    fn parse(s: &str) -> Result<Target> {
        let bad = || anyhow::anyhow!("--pooler {s:?}: expected HOST:PORT or postgres://[ROLE[:PASSWORD]@]HOST:PORT");
        let (password, rest) = match s
            .strip_prefix("postgres://")
            .or_else(|| s.strip_prefix("postgresql://"))
        {
            Some(url) => {
                let (auth, hostpart) = match url.rsplit_once('@') {
                    Some((a, h)) => (Some(a), h),
                    None => (None, url),
                };
                let password = auth.and_then(|a| a.split_once(':')).map(|(_, p)| p.to_owned());
                (password, hostpart.split(['/', '?']).next().unwrap_or_default())
            }
            None => (None, s),
        };
        let (host, port) = rest.rsplit_once(':').ok_or_else(bad)?;
        let port: u16 = port.parse().map_err(|_| bad())?;
        if host.is_empty() || port == 0 {
            return Err(bad());
        }
        Ok(Target {
            host: host.trim_matches(['[', ']']).to_owned(),
            port,
            password,
        })
    }
}

/// Asks the server (`dsn`) and then the pooler, as the server's role, for
/// a connection and a statement.
///
/// # Errors
/// Either does not answer within [`PROBE`], or refuses the role (one line).
async fn probe(dsn: &str, target: &Target) -> Result<()> {
    let config: tokio_postgres::Config = dsn
        .parse()
        .map_err(|e| anyhow::anyhow!("--dsn: not a PostgreSQL connection string: {e}"))?;
    let server = describe(&config);
    ask(&config)
        .await
        .map_err(|e| anyhow::anyhow!("the server at {server} (--dsn) does not answer: {e}"))?;
    // A new configuration: `Config::host` and `port` add to a list.
    let mut via = tokio_postgres::Config::new();
    via.host(&target.host)
        .port(target.port)
        .application_name("locklab-pooler-check");
    if let Some(u) = config.get_user() {
        via.user(u);
    }
    if let Some(db) = config.get_dbname() {
        via.dbname(db);
    }
    match (&target.password, config.get_password()) {
        (Some(p), _) => {
            via.password(p.as_bytes());
        }
        (None, Some(p)) => {
            via.password(p);
        }
        (None, None) => {}
    }
    let role = config.get_user().unwrap_or("(the default role)").to_owned();
    ask(&via).await.map(|_| ()).map_err(|e| {
        anyhow::anyhow!(
            "the pooler at {}:{} does not take the server's role '{role}': {e} (it must route every database to the server and accept that role)",
            target.host,
            target.port
        )
    })
}

/// `host:port` of a connection string, for messages.
fn describe(c: &tokio_postgres::Config) -> String {
    let host = c
        .get_hosts()
        .first()
        .map(|h| match h {
            tokio_postgres::config::Host::Tcp(h) => h.clone(),
            tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
        })
        .unwrap_or_else(|| "localhost".into());
    let port = c.get_ports().first().copied().unwrap_or(5432);
    format!("{host}:{port}")
}

/// One connection with `config`, `show server_version` on it, closed.
async fn ask(config: &tokio_postgres::Config) -> Result<String, String> {
    let attempt = async {
        let (client, conn) = config.connect(tokio_postgres::NoTls).await.map_err(|e| e.to_string())?;
        let driver = tokio::spawn(conn);
        let version = client
            .simple_query("show server_version")
            .await
            .map_err(|e| e.to_string())?
            .into_iter()
            .find_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
                _ => None,
            })
            .unwrap_or_default();
        drop(client);
        let _ = driver.await;
        Ok(version)
    };
    tokio::time::timeout(PROBE, attempt)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {} s", PROBE.as_secs())))
}

/// Declares the user's pooler as a column (a columns file in a temporary
/// directory, removed when this returns: the declaration is read at once)
/// and returns its id.
///
/// # Errors
/// The temporary file cannot be written; the declaration is refused.
fn declare(target: &Target, mode: PoolerMode, cancel: bool) -> Result<String> {
    let id = format!("your-pooler-{}", mode.as_str());
    let tmp = tempfile::tempdir().context("cannot make a temporary directory for the pooler's column")?;
    let file = tmp.path().join("pooler-check.yaml");
    let quote = |s: &str| serde_json::to_string(s).unwrap_or_default();
    let mut text = format!(
        "- id: {id}\n  kind: pooler\n  package: your pooler\n  version: unknown\n  configuration: {}\n  pooler: {{host: {}, port: {}, mode: {}, cancel: {cancel}",
        quote(&format!(
            "at {}:{}, pool_mode={}",
            target.host,
            target.port,
            mode.as_str()
        )),
        quote(&target.host),
        target.port,
        mode.as_str(),
    );
    if let Some(p) = &target.password {
        let _ = write!(text, ", password: {}", quote(p));
    }
    text.push_str("}\n");
    std::fs::write(&file, text).with_context(|| format!("cannot write {}", file.display()))?;
    locklab_drivers::external::add_columns_file(&file).map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(id)
}
