//! Which servers a run gets: each `--backend` resolved once, then one server
//! per backend × `--pg` version, started concurrently.

use anyhow::{Context, Result, bail};
use locklab::server::{self, Backend, BackendChoice, DEFAULT_PG_MAJOR, Server, ServerOptions};

use crate::cli::ServerArgs;

/// Resolves each `--backend` once, then starts one server per backend ×
/// `--pg` version (concurrently), printing what it does. With more than one
/// backend, server ids carry the backend (`pg17-container`, `pg17-local`).
///
/// # Errors
/// A backend that cannot be had (see [`ServerOptions::resolve_backend`]),
/// `--pg` with only an external server, several versions with one
/// `--pg-bin`, or a server that does not start (the others are stopped).
pub fn start_servers(args: &ServerArgs) -> Result<Vec<Server>> {
    let mut majors = distinct(&args.majors());
    let asked = args.backends();
    let choices = if asked.is_empty() {
        vec![BackendChoice::Auto]
    } else {
        asked
    };
    let backends = resolve_backends(args, &choices)?;
    if backends == [Backend::External] && !majors.is_empty() {
        bail!(
            "--pg / LOCKLAB_PG picks versions for the container and local backends; \
             an external server (--dsn / LOCKLAB_DSN) is whatever version it runs"
        );
    }
    // Without --pg, binaries from --pg-bin or an image named without {major}
    // are taken at whatever version they are; with it, a mismatch is an error.
    let explicit = !majors.is_empty();
    if majors.is_empty() {
        majors.push(DEFAULT_PG_MAJOR);
    }
    if majors.len() > 1 && backends.contains(&Backend::Local) && args.pg_bin.is_some() {
        bail!("--pg-bin / LOCKLAB_PG_BIN names the binaries of one version; give a single --pg with it");
    }
    let by_auto = choices == [BackendChoice::Auto];
    let mut opts = Vec::new();
    for b in &backends {
        announce(*b, &majors, by_auto);
        let choice = match b {
            Backend::Container => BackendChoice::Container,
            Backend::Local => BackendChoice::Local,
            Backend::External => BackendChoice::External,
        };
        let majors: &[u32] = if *b == Backend::External { &majors[..1] } else { &majors };
        for m in majors {
            opts.push(ServerOptions {
                pg_major: explicit.then_some(*m),
                ..options(args, choice)
            });
        }
    }
    let mut servers = server::start_all(&opts).context("no PostgreSQL server")?;
    label(&mut servers, backends.len() > 1);
    Ok(servers)
}

/// The options for `choice` from the arguments (no version picked).
fn options(args: &ServerArgs, choice: BackendChoice) -> ServerOptions {
    ServerOptions {
        backend: choice,
        dsn: args.dsn_for(choice),
        pg_bin: args.pg_bin.clone(),
        pg_major: None,
        image: args.image.clone(),
        start_timeout: std::time::Duration::from_secs(args.start_timeout),
        settings: Vec::new(),
        hba_lines: Vec::new(),
        from_template: false,
    }
}

/// The backend each choice stands for (printing why `auto` fell back to
/// `local`), each once, in order.
fn resolve_backends(args: &ServerArgs, choices: &[BackendChoice]) -> Result<Vec<Backend>> {
    let mut backends: Vec<Backend> = Vec::new();
    for choice in choices {
        let (b, why) = options(args, *choice).resolve_backend_with_reason()?;
        if let Some(why) = why {
            eprintln!("locklab: {why}");
        }
        if !backends.contains(&b) {
            backends.push(b);
        }
    }
    Ok(backends)
}

/// Prints what is started (or connected to) on `backend`.
fn announce(backend: Backend, majors: &[u32], by_auto: bool) {
    let versions: Vec<String> = majors.iter().map(u32::to_string).collect();
    eprintln!(
        "locklab: {} ({} backend{})",
        match backend {
            Backend::External => "connecting to PostgreSQL".to_owned(),
            _ => format!("starting PostgreSQL {}", versions.join(", ")),
        },
        backend.as_str(),
        if by_auto { ", chosen by --backend auto" } else { "" }
    );
}

/// Adds the backend to each server's id when there are several backends, or
/// when two servers would otherwise share an id.
fn label(servers: &mut [Server], several_backends: bool) {
    let mut seen = std::collections::HashSet::new();
    let unique = servers.iter().all(|s| seen.insert(s.id()));
    for s in servers {
        if several_backends || !unique {
            let id = format!("{}-{}", s.id(), s.backend().as_str());
            s.set_id(id);
        }
    }
}

/// `items` without repeats, each where it first appears.
fn distinct(items: &[u32]) -> Vec<u32> {
    let mut out: Vec<u32> = Vec::new();
    for m in items {
        if !out.contains(m) {
            out.push(*m);
        }
    }
    out
}
