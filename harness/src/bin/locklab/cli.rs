//! The command line: clap derive types, and the value parsers that give the
//! environment variables behind some options the meaning the book documents (`docs/src/getting-started.md`)
//! (an empty variable counts as unset; list items may carry spaces).

use std::ffi::OsStr;
use std::path::PathBuf;

use clap::builder::{EnumValueParser, TypedValueParser, ValueParserFactory};
use clap::error::ErrorKind;
use clap::parser::ValueSource;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use locklab::baseline::Tolerance;
use locklab::matrix::DEFAULT_JOBS;
use locklab::server::{self, BackendChoice, DEFAULT_START_TIMEOUT};

use crate::words::{BackendWord, FormatWord, PoolerModeWord, SeverityWord};
use locklab::shard::Shard;

/// `locklab`'s arguments.
#[derive(Parser)]
#[command(
    name = "locklab",
    version,
    about = "Behavioural conformance suite for PostgreSQL advisory locks through Rust connection pools"
)]
pub struct Cli {
    /// Directory of scenario files (*.yaml) [default: scenarios/ of this repository]
    #[arg(long, global = true, env = "LOCKLAB_SCENARIOS", hide_env_values = true)]
    pub scenarios: Option<PathBuf>,
    /// A columns file of your own (repeatable; LOCKLAB_COLUMNS: files
    /// separated by `:`): out-of-process columns in the format of
    /// drivers/adapters/adapters.yaml, paths relative to the file, after
    /// locklab's columns. `check` compares them only with --baseline FILE
    #[arg(
        long = "columns",
        global = true,
        env = "LOCKLAB_COLUMNS",
        hide_env_values = true,
        value_delimiter = ':',
        value_name = "FILE"
    )]
    pub columns: Vec<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Subcommand)]
pub enum Command {
    /// List scenarios and driver configurations.
    List,
    /// Check scenario files or directories (default: the scenario directory
    /// and properties/); a property file or a directory named `properties`
    /// is checked as properties, against the scenario directory.
    Validate {
        /// Files or directories to check.
        files: Vec<PathBuf>,
    },
    /// Print a JSON Schema: of scenario files (shipped as
    /// scenarios/scenario.schema.json), of the driver protocol's lines
    /// (shipped as drivers/adapters/protocol.schema.json) or of property
    /// files (shipped as properties/property.schema.json).
    Schema {
        /// Which schema.
        #[arg(value_enum, default_value_t = SchemaOf::Scenario)]
        of: SchemaOf,
    },
    /// Run scenarios × drivers and print the results.
    Run {
        #[command(flatten)]
        run: RunArgs,
        /// Also print the full results as JSON on stdout (the summary then goes to stderr).
        #[arg(long)]
        json: bool,
    },
    /// Run scenarios × drivers (default: all) and write matrix.json, matrix.md and index.html.
    Report(ReportArgs),
    /// The verdicts: each property (properties/*.yaml) judged per column, the
    /// server findings and a card per column, for a run or a matrix.json
    /// (--from); with --require or --require-severity, exit 1 when a
    /// selected column violates a required property.
    Verdict(VerdictArgs),
    /// Your stack in one command: reads the project in DIR (its lockfiles:
    /// Cargo.lock, requirements*.txt, poetry.lock, uv.lock, Pipfile.lock,
    /// go.mod, package-lock.json, yarn.lock, pnpm-lock.yaml, pom.xml,
    /// gradle.lockfile, Gemfile.lock; and pgbouncer.ini, pgpool.conf,
    /// pgagroal.conf, odyssey.conf), maps what it finds to locklab's columns
    /// (exact, or the nearest with the difference said) and prints their
    /// verdicts and cards, and what it could not map. With
    /// --require-severity, exit 1 when a mapped column violates a required
    /// property, as `verdict` does.
    Doctor(DoctorArgs),
    /// Run the whole matrix (or a selection) round after round and count the
    /// cells whose outcome differs between rounds; exit 1 if any differs or fails.
    Soak(SoakArgs),
    /// Run scenarios × drivers and compare the outcomes with the committed
    /// baseline (reports/baseline/, one file per scenario); exit 1 with a
    /// per-cell diff on any change, and write each changed scenario's cells
    /// as a pending file (NAME.json.new) for `locklab review`.
    Check(CheckArgs),
    /// Accept or reject the pending baseline files `check` wrote
    /// (NAME.json.new beside NAME.json): in a terminal one scenario at a
    /// time, its diff shown (verdict changes first) and a key pressed (a
    /// accept, r reject, s skip, q quit); or by name (--accept, --reject,
    /// --accept-all, --reject-all). Without a terminal and without those,
    /// prints the pending diffs and exits 1 if there are any.
    Review(ReviewArgs),
    /// Split a whole-matrix baseline.json (baseline_version 2, before the
    /// baseline was a directory) into a baseline directory, one file per
    /// scenario, then check that every value of every cell is in the new
    /// files; prints the counts.
    MigrateBaseline {
        /// The old baseline.json.
        file: PathBuf,
        /// The directory to write (new or empty).
        dir: PathBuf,
    },
    /// Another version of a Rust pool crate against the matrix, without
    /// editing locklab: builds locklab's driver for CRATE@VERSION in a
    /// scratch project (cached per crate and version), runs its columns next
    /// to the built-in ones and prints what changed, as `check --upgrade`
    /// does (verdicts first). Exit 1 when a cell differs.
    Try(TryArgs),
    /// Put the matrix.json files of `--shard 1/N` … `N/N` runs together into
    /// the report one unsharded run would have written (all N must be given).
    Merge(MergeArgs),
    /// The pooler conformance kit (the scenarios tagged `pooler`) through one
    /// pooler: one you run (--pooler, in front of the server --dsn names) or
    /// one of locklab's pooler columns (--column); prints the verdicts of the
    /// properties it decides, each with what a violation means for a pooler.
    /// Exit 1 when one is violated or cannot be judged (docs/src/poolers.md).
    PoolerCheck(PoolerCheckArgs),
    /// A cell of a report (default reports/matrix.json) as a reproduction
    /// that runs without locklab: for a direct or pooler column a bash script
    /// over psql, with a header naming the versions, the configuration and
    /// what to expect, that says at its end whether it read what locklab
    /// read; for a pool column the same steps in the pool's terms.
    Repro(ReproArgs),
    /// Adapters of the driver protocol (docs/src/protocol.md).
    #[command(subcommand)]
    Adapter(AdapterCommand),
    /// Show who holds and who awaits advisory locks on a running server, with a
    /// verdict per lock (leaked, stuck, waiting, expected); or serve them as
    /// Prometheus metrics (`holders serve`). Read-only; never ends a backend.
    Holders(locklab_holders::cli::HoldersArgs),
    /// A load run: W workers contending for K keys through each driver's pool
    /// (and pgbench with the same SQL) on a local cluster of its own; every
    /// critical section is checked for overlaps and lost updates afterwards.
    Stress(crate::stress::StressArgs),
    /// What a cell costs next to the same SQL from a bare client on the same
    /// server, per kind of cell (plain cells through a column of each family,
    /// a race cell, a fault cell) and backend (the local cluster, and a
    /// container when a Docker engine answers): wall time per run and per
    /// cell, CPU per cell, the matrix's cells per second. A benchmark: it
    /// judges nothing (docs/src/speed.md).
    Bench(BenchArgs),
    /// The load report (reports/load/: load.md, load.json, the curves' SVG
    /// charts): throughput next to pgbench, every pattern checked, and the
    /// contention curves; about eight minutes.
    LoadReport(crate::stress::LoadReportArgs),
}

/// `locklab adapter …`.
#[derive(Subcommand)]
pub enum AdapterCommand {
    /// Drive an adapter through every request of the driver protocol, bad
    /// sequences, requests in flight at once and the give-up requests,
    /// against a real server; validate every answer against the protocol's
    /// JSON Schema; print what is wrong by name. Exit 1 if a check fails.
    /// E.g. `locklab adapter check -- python3 my_adapter.py`.
    Check(AdapterCheckArgs),
}

/// `locklab adapter check`'s arguments.
#[derive(Args)]
pub struct AdapterCheckArgs {
    /// Where the server comes from: a local cluster (default), a container,
    /// or an existing server (--dsn / LOCKLAB_DSN); the check creates a
    /// database of its own there and drops it afterwards.
    #[arg(long, value_enum, default_value_t = BackendWord(BackendChoice::Local))]
    pub backend: BackendWord,
    /// PostgreSQL major version for the local and container backends.
    #[arg(long = "pg", default_value_t = server::DEFAULT_PG_MAJOR)]
    pub pg: u32,
    /// An existing server's connection string (with --backend external).
    #[arg(long, env = "LOCKLAB_DSN", hide_env_values = true)]
    pub dsn: Option<String>,
    /// Check the adapter of this out-of-process column instead of a command:
    /// one of drivers/adapters/adapters.yaml or of a `--columns FILE`,
    /// installed first if it needs to be, run in its base directory.
    #[arg(long, value_name = "ID", conflicts_with = "command")]
    pub column: Option<String>,
    /// Seconds one answer may take, unless a check sets its own bound
    /// (`hello` 20 s, `open_pool` and `close_pool` 30 s): a check of a
    /// request the adapter does not answer waits this out (0.1-600).
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0, value_parser = parse_answer_timeout)]
    pub answer_timeout: f64,
    /// The adapter's program and arguments, after `--`; run in the current directory.
    #[arg(last = true, required_unless_present = "column", value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// `locklab report`'s arguments.
#[derive(Args)]
pub struct ReportArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// Where to write the report (default: reports/ of this repository).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Also print the full results as JSON on stdout (the summary then goes to stderr).
    #[arg(long)]
    pub json: bool,
    /// Which files to write, comma-separated: json (matrix.json), md
    /// (matrix.md), html (index.html).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "json,md,html")]
    pub format: Vec<FormatWord>,
    /// Also screenshot index.html in headless Chromium into index.png
    /// (needs the html format and Chromium: LOCKLAB_CHROMIUM or chromium on PATH).
    #[arg(long)]
    pub screenshot: bool,
    /// Write the report files from this matrix.json instead of running
    /// anything (e.g. after a change of the templates), into --out or else
    /// the file's own directory; the selection and server options are not used.
    #[arg(long, value_name = "MATRIX_JSON")]
    pub from: Option<PathBuf>,
}

/// The CI gate of `verdict` and `doctor`.
#[derive(Args)]
pub struct GateArgs {
    /// Exit 1 when a selected column violates one of these properties (ids,
    /// comma-separated), or when a cell that decides one failed.
    #[arg(long, value_delimiter = ',', value_name = "ID")]
    pub require: Vec<String>,
    /// Exit 1 when a selected column violates a property of this severity or
    /// a graver one (`unsafe`; `surprising`: unsafe and surprising; …).
    #[arg(long, value_enum, value_name = "SEVERITY")]
    pub require_severity: Option<SeverityWord>,
}

impl GateArgs {
    /// Whether anything is required.
    pub fn any(&self) -> bool {
        !self.require.is_empty() || self.require_severity.is_some()
    }
}

/// `locklab verdict`'s arguments.
#[derive(Args)]
pub struct VerdictArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// Judge this matrix.json (e.g. reports/matrix.json) instead of running
    /// anything; -d then selects its columns, the other run options are not used.
    #[arg(long, value_name = "MATRIX_JSON")]
    pub from: Option<PathBuf>,
    #[command(flatten)]
    pub gate: GateArgs,
    /// Print the verdicts as JSON (matrix.json's `properties` and `verdicts`) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Print, per property (column and server ones) and selected column,
    /// what decided the verdict: the values of each dimension it was tried in
    /// (pool size, hand-back, give-up, pooler mode), those not tried, those
    /// that do not apply to the column, and the deciding cells with where
    /// each stands, instead of the cards.
    #[arg(long, conflicts_with = "json")]
    pub coverage: bool,
}

/// `locklab doctor`'s arguments.
#[derive(Args)]
pub struct DoctorArgs {
    /// The project's directory (its lockfiles and pooler configurations,
    /// up to four directories down).
    #[arg(default_value = ".", value_name = "DIR")]
    pub project: PathBuf,
    /// The report to judge by [default: reports/matrix.json of this repository].
    #[arg(long, value_name = "MATRIX_JSON", conflicts_with = "run_now")]
    pub from: Option<PathBuf>,
    /// Run the stack's columns now (every scenario, or those -s and --tag
    /// select) instead of reading the committed report.
    #[arg(long = "run")]
    pub run_now: bool,
    /// For each Rust pool crate locked at a version locklab does not ship,
    /// run `locklab try CRATE@VERSION` for that exact version too.
    #[arg(long = "try", conflicts_with = "json")]
    pub try_versions: bool,
    #[command(flatten)]
    pub gate: GateArgs,
    /// Print the stack, the mapping and the columns' verdicts and cards as JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub run: RunArgs,
}

/// `locklab pooler-check`'s arguments.
#[derive(Args)]
pub struct PoolerCheckArgs {
    /// The pooler you run: HOST:PORT, or postgres://ROLE:PASSWORD@HOST:PORT
    /// when it takes another password than the server's. It must route every
    /// database name to the server --dsn names (each cell makes a database
    /// of its own) and accept the server's role.
    #[arg(long, value_name = "ADDRESS", conflicts_with = "column")]
    pub pooler: Option<String>,
    /// Its pool mode: session or transaction.
    #[arg(long, value_enum)]
    pub mode: Option<PoolerModeWord>,
    /// Send no cancel requests through it (PgBouncer 1.18 exits on one).
    #[arg(long)]
    pub no_cancel: bool,
    /// One of locklab's own pooler columns instead of --pooler (repeatable;
    /// e.g. pgbouncer-transaction, pgpool, pgagroal-session,
    /// odyssey-session): the kit through the pooler locklab starts.
    #[arg(long, value_name = "ID")]
    pub column: Vec<String>,
    #[command(flatten)]
    pub server: ServerArgs,
    /// Cells in flight at once (1-256).
    #[arg(long, default_value_t = DEFAULT_JOBS as u16, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub jobs: u16,
    /// Print the verdicts as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `locklab repro`'s arguments.
#[derive(Args)]
pub struct ReproArgs {
    /// The cell's scenario (with its parameter set: `NAME[k=v]`).
    #[arg(short, long = "scenario", value_name = "SCENARIO")]
    pub scenario: String,
    /// The cell's column.
    #[arg(short, long = "driver", value_name = "COLUMN")]
    pub driver: String,
    /// The report whose readings the reproduction expects [default: reports/matrix.json].
    #[arg(long, value_name = "MATRIX_JSON")]
    pub from: Option<PathBuf>,
    /// Write it here (a script is made executable) instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

/// `locklab merge`'s arguments.
#[derive(Args)]
pub struct MergeArgs {
    /// The shards' matrix.json files (`report --shard I/N --out DIR` writes DIR/matrix.json).
    #[arg(required = true, value_name = "MATRIX_JSON")]
    pub files: Vec<PathBuf>,
    /// Where to write the merged report (matrix.json, matrix.md, index.html).
    #[arg(long)]
    pub out: PathBuf,
    /// Which files to write, comma-separated: json, md, html.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "json,md,html")]
    pub format: Vec<FormatWord>,
}

/// `locklab soak`'s arguments.
#[derive(Args)]
pub struct SoakArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// How many rounds (1-1000): each runs every selected cell once.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub rounds: u16,
    /// Also write the folded results as JSON to this file.
    #[arg(long)]
    pub json_out: Option<PathBuf>,
}

/// `locklab review`'s arguments.
#[derive(Args)]
pub struct ReviewArgs {
    /// The baseline directory (default: reports/baseline/ of this repository).
    #[arg(long, value_name = "DIR")]
    pub baseline: Option<PathBuf>,
    /// Accept these scenarios' pending files (repeatable, or comma-separated).
    #[arg(long, value_name = "NAME", value_delimiter = ',')]
    pub accept: Vec<String>,
    /// Reject (remove) these scenarios' pending files (repeatable, or comma-separated).
    #[arg(long, value_name = "NAME", value_delimiter = ',')]
    pub reject: Vec<String>,
    /// Accept every pending file (for CI bots).
    #[arg(long, conflicts_with_all = ["accept", "reject", "reject_all"])]
    pub accept_all: bool,
    /// Reject every pending file.
    #[arg(long, conflicts_with_all = ["accept", "reject"])]
    pub reject_all: bool,
    /// Print every changed cell of a diff (default: about one screen each).
    #[arg(long)]
    pub full: bool,
}

/// `locklab check`'s arguments.
#[derive(Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// The baseline directory, one NAME.json per scenario file (default:
    /// reports/baseline/ of this repository); give your own for your own
    /// scenarios (--scenarios) or columns (--columns). A directory that
    /// does not exist yet is one with no scenario accepted.
    #[arg(long, value_name = "DIR")]
    pub baseline: Option<PathBuf>,
    /// Write what differs into the accepted files (NAME.json) instead of
    /// pending ones: only the scenarios of this run whose cells differ by
    /// the comparison rules, and in them only those cells (`check --update
    /// -s NAME` rewrites NAME's); a scenario with a failed cell is not
    /// written.
    #[arg(long, conflicts_with = "review")]
    pub update: bool,
    /// After the comparison, review the pending files it wrote, as `locklab
    /// review` does in a terminal.
    #[arg(long)]
    pub review: bool,
    /// Timing tolerance: a p50 time t against the baseline's b passes when
    /// b/F - S <= t <= b*F + S, with F this factor (>= 1) ...
    #[arg(long, default_value_t = Tolerance::default().factor, value_parser = parse_factor)]
    pub timing_factor: f64,
    /// ... and S this slack in ms (>= 0).
    #[arg(long, default_value_t = Tolerance::default().slack_ms, value_parser = parse_slack)]
    pub timing_slack_ms: f64,
    /// Print every changed cell (default: about one screen, then a count of the rest).
    #[arg(long)]
    pub full: bool,
    /// Compare race cells' shares by the race rule (for a run on the same
    /// machine as the baseline's: shares move with load and latency). By
    /// default they are information, never a difference.
    #[arg(long)]
    pub compare_shares: bool,
    /// Compare this matrix.json (e.g. what `locklab merge` or `locklab
    /// report` wrote) with the baseline instead of running the matrix; the
    /// cells compared are those of its scenarios and drivers. With --update,
    /// rewrite the baseline from it.
    #[arg(long, value_name = "MATRIX_JSON")]
    pub from: Option<PathBuf>,
    /// Instead of the baseline, compare two columns of one run: what
    /// changes, cell by cell, when an application moves from column FROM to
    /// column TO (e.g. `--upgrade sqlx08 sqlx`, `--upgrade pgbouncer-session
    /// pgbouncer-trixie-session`). Runs only those two columns, or reads
    /// them from --from. Exit 1 when any cell differs.
    #[arg(long, num_args = 2, value_names = ["FROM", "TO"], conflicts_with_all = ["update", "baseline", "review"])]
    pub upgrade: Option<Vec<String>>,
}

fn parse_answer_timeout(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if (0.1..=600.0).contains(&f) => Ok(f),
        _ => Err(format!("'{s}' is not a number of seconds from 0.1 to 600")),
    }
}

fn parse_factor(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if f.is_finite() && f >= 1.0 => Ok(f),
        _ => Err(format!("'{s}' is not a number >= 1")),
    }
}

fn parse_slack(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if f.is_finite() && f >= 0.0 => Ok(f),
        _ => Err(format!("'{s}' is not a number of ms >= 0")),
    }
}

/// What selects and starts the runs (`run`, `report`, `soak`, `check`).
#[derive(Args, Clone)]
pub struct RunArgs {
    /// Only these scenarios (repeatable; default: all).
    #[arg(short, long = "scenario")]
    pub scenario: Vec<String>,
    /// Only the scenarios with this tag (`tags:` in their file; repeatable:
    /// any of them), e.g. `--tag pooler` for the pooler conformance kit.
    #[arg(long = "tag", value_name = "TAG")]
    pub tag: Vec<String>,
    /// Only these drivers (repeatable; default: all).
    #[arg(short, long = "driver")]
    pub driver: Vec<String>,
    #[command(flatten)]
    pub server: ServerArgs,
    /// Scenario × driver runs in flight at once (1-256), and as many again of
    /// the cells that mostly wait for the server's timers (restarts,
    /// partitions, `granted` steps).
    #[arg(long, default_value_t = DEFAULT_JOBS as u16, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub jobs: u16,
    /// Run each cell this many times (1-1000): timings become min / p50 / p95 /
    /// max, and a cell whose readings differ between repeats varies (each way
    /// it read is kept with its count; properties are judged over every repeat;
    /// never a failure by itself: the variation rule, docs/src/faults-and-races.md).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub repeat: u16,
    /// At most this many trials per race cell (scenarios with `trials:`, e.g.
    /// 1000; 1-10000; default: as each scenario says). A race cell runs once
    /// whatever --repeat says: its trials are its repeats.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=10000))]
    pub trials: Option<u32>,
    /// Run only part I of N of the cells (e.g. 2/4), for spreading the matrix
    /// over N machines: the split is stable (a cell's position in the matrix,
    /// round-robin), and `locklab merge` puts the shards' matrix.json files
    /// together. `report` then needs --out, `check` compares only the
    /// shard's cells.
    #[arg(long, value_name = "I/N", value_parser = parse_shard)]
    pub shard: Option<Shard>,
}

/// Where the server comes from (`run`, `report`, `soak`, `check`, `try`, `bench`).
#[derive(Args, Clone)]
pub struct ServerArgs {
    /// Where PostgreSQL runs: a container (testcontainers), a local cluster from
    /// binaries, an external server (--dsn), or auto: external with a DSN, else
    /// container when a Docker engine answers, else local.
    /// Several, comma-separated, give one column group per backend × version.
    /// [default: auto]
    #[arg(long, env = "LOCKLAB_BACKEND", hide_env_values = true)]
    backend: Vec<List<BackendWord>>,
    /// PostgreSQL major versions, comma-separated (14-18); each is a column group
    /// in the report [default: 17]
    #[arg(long = "pg", env = "LOCKLAB_PG", hide_env_values = true)]
    pg: Vec<List<Major>>,
    /// Container image; `{major}` is replaced by the version
    /// [default: postgres:{major}, else a local locklab/postgres:{major}]
    #[arg(long, env = "LOCKLAB_PG_IMAGE", hide_env_values = true)]
    pub image: Option<String>,
    /// Seconds a server may take to start and accept connections (1-3600).
    #[arg(long, default_value_t = DEFAULT_START_TIMEOUT.as_secs(), value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub start_timeout: u64,
    /// Use this running server instead of starting one; the role needs CREATEDB
    #[arg(long, env = "LOCKLAB_DSN", hide_env_values = true)]
    dsn: Option<Dsn>,
    /// Directory with postgres and initdb for the local backend
    #[arg(long, env = "LOCKLAB_PG_BIN", hide_env_values = true)]
    pub pg_bin: Option<PathBuf>,
}

impl ServerArgs {
    /// These options with `--backend` set to `backends`.
    pub fn with_backends(&self, backends: Vec<BackendChoice>) -> ServerArgs {
        ServerArgs {
            backend: vec![List(backends.into_iter().map(BackendWord).collect())],
            ..self.clone()
        }
    }

    /// The `--pg` / `LOCKLAB_PG` versions in the order given, duplicates
    /// included (empty: none asked for).
    pub fn majors(&self) -> Vec<u32> {
        self.pg.iter().flat_map(|l| l.0.iter().map(|m| m.0)).collect()
    }

    /// The `--backend` / `LOCKLAB_BACKEND` choices in the order given,
    /// duplicates included (empty: none asked for, i.e. auto).
    pub fn backends(&self) -> Vec<BackendChoice> {
        self.backend.iter().flat_map(|l| l.0.iter().map(|w| w.0)).collect()
    }

    /// The DSN that goes with `choice`: `--dsn` always (with `local` or
    /// `container` the server refuses it), `LOCKLAB_DSN` only for `auto` and
    /// `external`: an explicit `local` or `container` ignores the variable.
    pub fn dsn_for(&self, choice: BackendChoice) -> Option<String> {
        let dsn = self.dsn.as_ref()?;
        let applies = !dsn.from_env || matches!(choice, BackendChoice::Auto | BackendChoice::External);
        applies.then(|| dsn.value.clone())
    }
}

/// `--shard I/N`.
fn parse_shard(s: &str) -> Result<Shard, String> {
    s.parse()
}

/// Parses the command line (and the variables behind its options).
///
/// # Errors
/// clap's error for bad arguments (exit code 2), or its "error" for `--help`
/// and `--version` (exit code 0), to be printed by the caller.
pub fn parse() -> Result<Cli, clap::Error> {
    let matches = blank_env_is_unset(Cli::command()).try_get_matches()?;
    Cli::from_arg_matches(&matches)
}

/// clap takes a variable that is set but empty as a value (`LOCKLAB_PG_BIN=`
/// would name the directory ""); locklab counts it as unset, as the book
/// says. clap has no setting for that, so the binding to such a variable is
/// dropped before parsing (for this command and its subcommands).
fn blank_env_is_unset(cmd: clap::Command) -> clap::Command {
    cmd.mut_args(|arg| {
        let blank = arg.get_env().and_then(std::env::var_os).is_some_and(|v| v.is_empty());
        if blank { arg.env(None) } else { arg }
    })
    .mut_subcommands(blank_env_is_unset)
}

/// A PostgreSQL major version given to `--pg` (14-18).
#[derive(Clone, Copy)]
pub struct Major(u32);

/// One `--pg` / `--backend` value or its variable: a comma-separated list.
#[derive(Clone)]
pub struct List<T>(Vec<T>);

/// How [`ListParser`] reads one item of a variable (items are trimmed; empty
/// ones are skipped): the item, or what it should have been.
pub trait EnvItem: Sized {
    /// What an item must be, for the error message ("one of auto, …").
    const WANT: &'static str;
    /// The item, if it is one.
    fn from_env_item(item: &str) -> Option<Self>;
}

impl EnvItem for Major {
    const WANT: &'static str = "a PostgreSQL major version from 14 to 18";
    fn from_env_item(item: &str) -> Option<Major> {
        item.parse()
            .ok()
            .filter(|m| server::SUPPORTED_MAJORS.contains(m))
            .map(Major)
    }
}

impl EnvItem for BackendWord {
    const WANT: &'static str = "one of auto, container, local, external";
    fn from_env_item(item: &str) -> Option<BackendWord> {
        <BackendWord as clap::ValueEnum>::from_str(item, true).ok()
    }
}

/// Parses a comma-separated list. On the command line each item is parsed
/// by `item`, with clap's own messages, exactly like `value_delimiter = ','`
/// would. From the option's variable, items are trimmed, empty ones skipped
/// (`LOCKLAB_PG=' 16, 17 '`, `LOCKLAB_PG=' '`), backends are matched without
/// regard to case, and an error names the variable and its whole value
/// (`LOCKLAB_PG=16,13: '13' is not …`): `value_delimiter` cannot do these, as
/// clap would hand over the untrimmed items one by one.
#[derive(Clone)]
pub struct ListParser<P>(P);

impl<P> TypedValueParser for ListParser<P>
where
    P: TypedValueParser,
    P::Value: EnvItem,
{
    type Value = List<P::Value>;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<Self::Value, clap::Error> {
        self.parse_ref_(cmd, arg, value, ValueSource::CommandLine)
    }

    fn parse_ref_(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
        source: ValueSource,
    ) -> Result<Self::Value, clap::Error> {
        let env = arg
            .and_then(clap::Arg::get_env)
            .filter(|_| source == ValueSource::EnvVariable);
        let Some(name) = env else {
            // Not UTF-8: `item` says so in clap's words.
            let Some(items) = value.to_str() else {
                return self.0.parse_ref(cmd, arg, value).map(|item| List(vec![item]));
            };
            let items = items
                .split(',')
                .map(|item| self.0.parse_ref(cmd, arg, OsStr::new(item)));
            return items.collect::<Result<_, _>>().map(List);
        };
        let value = value.to_string_lossy();
        let items = value.split(',').map(str::trim).filter(|item| !item.is_empty());
        let parse = |item: &str| {
            P::Value::from_env_item(item).ok_or_else(|| {
                let name = name.to_string_lossy();
                let message = format!("{name}={value}: '{item}' is not {}\n", P::Value::WANT);
                clap::Error::raw(ErrorKind::ValueValidation, message).with_cmd(cmd)
            })
        };
        items.map(parse).collect::<Result<_, _>>().map(List)
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        self.0.possible_values()
    }
}

impl ValueParserFactory for List<Major> {
    type Parser = ListParser<clap::builder::MapValueParser<clap::builder::RangedI64ValueParser<u32>, fn(u32) -> Major>>;
    fn value_parser() -> Self::Parser {
        ListParser(clap::value_parser!(u32).range(14..=18).map(Major as fn(u32) -> Major))
    }
}

impl ValueParserFactory for List<BackendWord> {
    type Parser = ListParser<EnumValueParser<BackendWord>>;
    fn value_parser() -> Self::Parser {
        ListParser(EnumValueParser::new())
    }
}

/// `--dsn` or `LOCKLAB_DSN`, and which of the two it came from (see
/// [`ServerArgs::dsn_for`]).
#[derive(Clone)]
pub struct Dsn {
    value: String,
    from_env: bool,
}

/// Reads a [`Dsn`], noting whether clap took it from the variable.
#[derive(Clone)]
pub struct DsnParser;

impl TypedValueParser for DsnParser {
    type Value = Dsn;

    fn parse_ref(&self, cmd: &clap::Command, arg: Option<&clap::Arg>, value: &OsStr) -> Result<Dsn, clap::Error> {
        self.parse_ref_(cmd, arg, value, ValueSource::CommandLine)
    }

    fn parse_ref_(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
        source: ValueSource,
    ) -> Result<Dsn, clap::Error> {
        Ok(Dsn {
            value: clap::builder::StringValueParser::new().parse_ref(cmd, arg, value)?,
            from_env: source == ValueSource::EnvVariable,
        })
    }
}

impl ValueParserFactory for Dsn {
    type Parser = DsnParser;
    fn value_parser() -> DsnParser {
        DsnParser
    }
}

/// The schemas `locklab schema` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SchemaOf {
    /// Scenario files.
    Scenario,
    /// The driver protocol: one request or answer line.
    Protocol,
    /// Property files (properties/*.yaml).
    Property,
}

/// Lines of cell diffs `check` prints without `--full`: about one screen.
pub const DIFF_LINES: usize = 30;

/// The committed baseline directory of this repository.
pub fn default_baseline() -> PathBuf {
    locklab::server::workspace_root().join("reports").join("baseline")
}

/// `locklab try`'s arguments.
#[derive(Args)]
pub struct TryArgs {
    /// The crates and versions to try: CRATE@VERSION (a requirement as
    /// Cargo.toml takes it: `deadpool-postgres@0.12`, `sqlx@=0.7.3`),
    /// CRATE@git+URL[#REV] or CRATE@path:DIR. CRATE is a pool crate with
    /// Rust columns: deadpool-postgres, bb8-postgres (or bb8), sqlx,
    /// mobc-postgres (or mobc), r2d2_postgres, diesel-async.
    #[arg(required = true, value_name = "CRATE@VERSION")]
    pub crates: Vec<String>,
    #[command(flatten)]
    pub run: RunArgs,
    /// Where the scratch projects and their shared target directory live
    /// (a cache: delete it to start over) [default: $XDG_CACHE_HOME/locklab/try,
    /// else ~/.cache/locklab/try]
    #[arg(long, env = "LOCKLAB_TRY_DIR", hide_env_values = true, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Build only, print each program and the columns file, and run nothing.
    #[arg(long)]
    pub build_only: bool,
    /// Have cargo work offline: every crate must be in its cache already
    /// (a version of the workspace's Cargo.lock, or one fetched before).
    #[arg(long)]
    pub offline: bool,
    /// Print every changed cell (default: about one screen per pair of columns).
    #[arg(long)]
    pub full: bool,
}

/// `locklab bench`'s arguments.
#[derive(Args)]
pub struct BenchArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    /// Timed runs per cell, one at a time, after two that warm it up (3-1000).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u16).range(3..=1000))]
    pub runs: u16,
    /// Trials of the race cell (1-10000).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10000))]
    pub trials: u32,
    /// Runs in flight at once for the cells-per-second figure (1-256).
    #[arg(long, default_value_t = DEFAULT_JOBS as u16, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub jobs: u16,
    /// Only the cells whose kind, scenario or column contains this text
    /// (repeatable; e.g. `--only plain`, `--only deadpool`).
    #[arg(long, value_name = "TEXT")]
    pub only: Vec<String>,
}
