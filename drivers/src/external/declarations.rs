//! The out-of-process columns: those declared in
//! `drivers/adapters/adapters.yaml` and those a user declares in a columns
//! file of their own ([`add_columns_file`], `locklab --columns FILE`), an
//! [`AdapterSpec`] each, and the install command each runs once per
//! process before its adapter starts.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, RwLock};

use serde::Deserialize;

use super::ExternalDriver;

/// One declared out-of-process column (an entry of
/// `drivers/adapters/adapters.yaml` or of a user's columns file).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdapterSpec {
    /// Column id, e.g. `asyncpg-0.31`.
    pub id: String,
    /// The package under test, e.g. `asyncpg`.
    pub package: String,
    /// The pinned version; the adapter's `hello` reports the installed one,
    /// which the report shows once the adapter has run.
    pub version: String,
    /// The configuration, in the library's own terms.
    pub configuration: String,
    /// Program and arguments that install the adapter's program, run once per
    /// process before the adapter first starts, in the file's base directory
    /// ([`AdapterSpec::base`]): it must be idempotent, quick when there is
    /// nothing to do, and safe to run from several processes at once. Its
    /// stderr is shown; a non-zero exit fails the column's cells with the
    /// last line of its stderr.
    #[serde(default)]
    pub install: Vec<String>,
    /// What the column is: `adapter` (the default: a program speaking the
    /// driver protocol) or `pooler` (a pooler you run, [`PoolerSpec`]).
    #[serde(default)]
    pub kind: ColumnKind,
    /// Program and arguments of the adapter. A program with a `/` is
    /// relative to the base directory; one without is looked up on `PATH`.
    /// Required for an adapter; none for a pooler.
    #[serde(default)]
    pub command: Vec<String>,
    /// For `kind: pooler`: where your pooler listens and how it pools.
    #[serde(default)]
    pub pooler: Option<PoolerSpec>,
    /// The program the column needs on this machine (a language's
    /// toolchain) and how to install it. Without it on `PATH`, the column's
    /// cells are `n/a` with that command, not failed.
    #[serde(default)]
    pub toolchain: Option<Toolchain>,
    /// Whether the library hands the server's notices to its caller, so that
    /// the adapter answers them in `query`'s `notices` (default true).
    /// `false` makes a scenario that expects notices on a pool actor `n/a`
    /// on this column instead of failed.
    #[serde(default = "yes")]
    pub notices: bool,
    /// What the library runs on a new connection before the caller's first
    /// statement, if anything (settings, a type map's catalog queries), as
    /// a phrase with its source. A pool `statement_timeout` of tens of ms
    /// can cancel those queries, so a race cell bounded by one is `n/a` on
    /// this column ([`crate::Driver::queries_at_connect`]).
    #[serde(default)]
    pub queries_at_connect: Option<String>,
    /// The directory the paths of `install` and `command` are relative to,
    /// and their working directory: the declaring file's directory for a
    /// user's columns file, the workspace root for `drivers/adapters/adapters.yaml`.
    #[serde(skip)]
    pub base: Option<PathBuf>,
}

/// What a declared column is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ColumnKind {
    /// An adapter program speaking the driver protocol.
    #[default]
    Adapter,
    /// A pooler the user runs (PgBouncer with their settings, …), in front
    /// of the server `--backend external` names; the harness starts nothing.
    Pooler,
}

/// A pooler of your own (`kind: pooler`): it must route every database name
/// to the server locklab runs on (the harness creates a database per cell;
/// PgBouncer: a `* = host=… port=…` line under `[databases]`) and accept
/// the server's role with the server's password.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolerSpec {
    /// Host it listens on, e.g. `127.0.0.1`.
    pub host: String,
    /// Port it listens on, e.g. 6432.
    pub port: u16,
    /// How it assigns server connections to clients: `session` or `transaction`.
    pub mode: crate::PoolerMode,
    /// The client in front of it: `tokio-postgres` (the default: no client
    /// pool, a connection per checkout) or `deadpool` (deadpool-postgres,
    /// `RecyclingMethod::Fast`).
    #[serde(default)]
    pub client: PoolerClient,
    /// Whether cancel requests are sent through it (default true, as an
    /// application's are). `false` for a pooler that cannot take them:
    /// PgBouncer 1.18 exits on one (`disconnect_client(): bad client
    /// state`), failing every later cell.
    #[serde(default = "yes")]
    pub cancel: bool,
    /// The password it takes from the server's role, when it is not the
    /// server's own (default: the server's).
    #[serde(default)]
    pub password: Option<String>,
}

fn yes() -> bool {
    true
}

/// The client side of a pooler column.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PoolerClient {
    /// tokio-postgres, a connection per checkout.
    #[default]
    TokioPostgres,
    /// deadpool-postgres, `RecyclingMethod::Fast`.
    Deadpool,
}

/// A program a column needs, and the command that installs it.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Toolchain {
    /// A program looked up on `PATH`, e.g. `python3`, `node`, `java`.
    pub program: String,
    /// What installs it, shown in the `n/a`, e.g. `apt-get install python3 python3-venv`.
    pub install: String,
}

impl AdapterSpec {
    /// The base directory of the column's relative paths ([`AdapterSpec::base`]).
    pub fn base_dir(&self) -> PathBuf {
        self.base.clone().unwrap_or_else(root)
    }

    /// Why the column cannot run on this machine, if it cannot: its
    /// [`Toolchain`] program, or the bare program of its `install` or
    /// `command`, is not on `PATH`. The text names the program and, where
    /// the column says, the command that installs it.
    pub fn unavailable(&self) -> Option<String> {
        let hint = |program: &str| match &self.toolchain {
            Some(t) => format!(
                "driver '{}' needs `{program}`, which is not on PATH; install it with: {}",
                self.id, t.install
            ),
            None => format!("driver '{}' needs `{program}`, which is not on PATH", self.id),
        };
        if let Some(t) = &self.toolchain
            && !on_path(&t.program)
        {
            return Some(hint(&t.program));
        }
        for program in [self.install.first(), self.command.first()].into_iter().flatten() {
            if !program.contains('/') && !on_path(program) {
                return Some(hint(program));
            }
        }
        None
    }
}

/// Whether `program` (no `/`) is an executable file in a directory of `PATH`.
fn on_path(program: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            std::fs::metadata(dir.join(program)).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// The workspace root, or `LOCKLAB_HOME` ([`locklab_core::home`]): the
/// paths of `drivers/adapters/adapters.yaml` are relative to it.
pub(super) fn root() -> PathBuf {
    locklab_core::home()
}

/// The declarations file.
pub fn declarations_file() -> PathBuf {
    root().join("drivers/adapters/adapters.yaml")
}

/// Reads `path` as a list of [`AdapterSpec`] (their [`AdapterSpec::base`]
/// unset: the workspace root).
///
/// # Errors
/// The file cannot be read, or is not such a list (with the line and
/// column), or repeats an id, or has an entry with an empty command.
pub fn read_declarations(path: &Path) -> Result<Vec<AdapterSpec>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let specs: Vec<AdapterSpec> = serde_saphyr::from_str(&text)
        .map_err(|e| locklab_core::located::yaml_error(path, &e, "columns file", &[]).to_string())?;
    for (i, s) in specs.iter().enumerate() {
        let at =
            entry_line(&text, &s.id).map_or_else(|| path.display().to_string(), |l| format!("{}:{l}", path.display()));
        if specs[..i].iter().any(|o| o.id == s.id) {
            return Err(format!("{at}: driver id '{}' is declared twice", s.id));
        }
        match (s.kind, s.command.is_empty(), s.pooler.is_some()) {
            (ColumnKind::Adapter, true, _) => return Err(format!("{at}: driver '{}' has an empty command", s.id)),
            (ColumnKind::Adapter, false, true) => {
                return Err(format!("{at}: driver '{}': `pooler` is for `kind: pooler`", s.id));
            }
            (ColumnKind::Pooler, _, false) => {
                return Err(format!(
                    "{at}: driver '{}' (kind: pooler) needs `pooler: {{host, port, mode}}`",
                    s.id
                ));
            }
            (ColumnKind::Pooler, false, _) => {
                return Err(format!(
                    "{at}: driver '{}' (kind: pooler) has a command: a pooler column runs no adapter",
                    s.id
                ));
            }
            _ => {}
        }
        if s.kind == ColumnKind::Pooler && !s.notices {
            return Err(format!(
                "{at}: driver '{}' (kind: pooler): `notices` is for an adapter; a pooler column's notices are its \
                 client's (`pooler.client`)",
                s.id
            ));
        }
        if s.id.is_empty()
            || !s
                .id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '+'))
        {
            return Err(format!(
                "{at}: driver id '{}' must be letters, digits, `-`, `_`, `.` and `+` (it names the column, a database and files)",
                s.id
            ));
        }
    }
    Ok(specs)
}

/// The line (1-based) of the entry `- id: ID` in `text`, for messages.
fn entry_line(text: &str, id: &str) -> Option<usize> {
    text.lines()
        .position(|l| {
            let l = l.trim_start().trim_start_matches('-').trim_start();
            l.strip_prefix("id:")
                .is_some_and(|v| v.trim().trim_matches(|c| c == '"' || c == '\'') == id)
        })
        .map(|i| i + 1)
}

/// The declared columns, read once; a broken file is reported once on
/// stderr and gives no columns.
pub fn declared() -> Vec<ExternalDriver> {
    static SPECS: OnceLock<Vec<AdapterSpec>> = OnceLock::new();
    SPECS
        .get_or_init(|| {
            read_declarations(&declarations_file()).unwrap_or_else(|e| {
                eprintln!("locklab: no out-of-process drivers: {e}");
                Vec::new()
            })
        })
        .iter()
        .cloned()
        .map(ExternalDriver::new)
        .collect()
}

/// A user's columns: each with the file that declared it.
fn user_specs() -> &'static RwLock<Vec<(AdapterSpec, PathBuf)>> {
    static USER: OnceLock<RwLock<Vec<(AdapterSpec, PathBuf)>>> = OnceLock::new();
    USER.get_or_init(Default::default)
}

/// Adds the columns a user's columns file declares (the format of
/// `drivers/adapters/adapters.yaml`; paths relative to the file's
/// directory) after every other column of [`crate::registry`], for the
/// rest of the process, and returns their ids. Adding the same file again
/// adds nothing.
///
/// # Errors
/// As [`read_declarations`], with the file's line; an id that another
/// column already has.
pub fn add_columns_file(path: &Path) -> Result<Vec<String>, String> {
    let file = std::fs::canonicalize(path).map_err(|e| format!("--columns {}: {e}", path.display()))?;
    if user_specs()
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .any(|(_, f)| *f == file)
    {
        return Ok(Vec::new());
    }
    let base = file.parent().map_or_else(|| PathBuf::from("/"), Path::to_path_buf);
    let mut specs = read_declarations(&file)?;
    let taken: Vec<&'static str> = crate::ids();
    for s in &mut specs {
        if taken.contains(&s.id.as_str()) {
            let at = entry_line(&std::fs::read_to_string(&file).unwrap_or_default(), &s.id)
                .map_or_else(|| file.display().to_string(), |l| format!("{}:{l}", file.display()));
            return Err(format!(
                "{at}: driver id '{}' is already a column{}; choose another id",
                s.id,
                user_column_file(&s.id).map_or_else(String::new, |f| format!(" (declared in {})", f.display()))
            ));
        }
        s.base = Some(base.clone());
    }
    let ids = specs.iter().map(|s| s.id.clone()).collect();
    user_specs()
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .extend(specs.into_iter().map(|s| (s, file.clone())));
    Ok(ids)
}

/// The columns added by [`add_columns_file`], in the order added: an
/// [`ExternalDriver`] for an adapter, a client behind the user's pooler
/// ([`crate::PoolerKind::External`]) for a pooler.
pub fn user_columns() -> Vec<Box<dyn crate::Driver>> {
    user_specs()
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|(s, _)| column(s))
        .collect()
}

/// The driver a user's column declares.
fn column(s: &AdapterSpec) -> Box<dyn crate::Driver> {
    let Some(p) = s.pooler.as_ref().filter(|_| s.kind == ColumnKind::Pooler) else {
        return Box::new(ExternalDriver::new(s.clone()));
    };
    let pooler = crate::Pooler::external(p.mode, super::leak(&p.host), p.port, p.cancel)
        .with_password(p.password.as_deref().map(super::leak));
    let (id, configuration) = (
        super::leak(&s.id),
        super::leak(&format!("{} {}: {}", s.package, s.version, s.configuration)),
    );
    match p.client {
        PoolerClient::TokioPostgres => Box::new(crate::poolers::ViaPooler::new(
            id,
            configuration,
            pooler,
            crate::direct::TokioPostgresDirect,
        )),
        PoolerClient::Deadpool => Box::new(crate::poolers::ViaPooler::new(
            id,
            configuration,
            pooler,
            crate::deadpool_pg::Deadpool::fast(),
        )),
    }
}

/// The columns file that declared column `id`, when a user's file did
/// ([`add_columns_file`]); `None` for locklab's own columns.
pub fn user_column_file(id: &str) -> Option<PathBuf> {
    user_specs()
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .find(|(s, _)| s.id == id)
        .map(|(_, f)| f.clone())
}

/// The declaration of out-of-process column `id`: one of
/// `drivers/adapters/adapters.yaml` or of a user's columns file
/// ([`add_columns_file`]); `None` for an unknown id or a Rust column.
pub fn declaration(id: &str) -> Option<AdapterSpec> {
    static SPECS: OnceLock<Vec<AdapterSpec>> = OnceLock::new();
    let ours = SPECS.get_or_init(|| read_declarations(&declarations_file()).unwrap_or_default());
    ours.iter().find(|s| s.id == id).cloned().or_else(|| {
        user_specs()
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|(s, _)| s.id == id)
            .map(|(s, _)| s.clone())
    })
}

impl AdapterSpec {
    /// The adapter's command, ready to run in [`AdapterSpec::base_dir`],
    /// after its `install` ran (once per process).
    ///
    /// # Errors
    /// The install command cannot be run or fails (its last line of stderr).
    pub fn installed_command(&self) -> Result<Vec<String>, String> {
        if self.command.is_empty() {
            return Err(format!("driver '{}' runs no adapter (kind: pooler)", self.id));
        }
        install(self)
    }
}

/// The adapter's command with its program made absolute, after running its
/// `install` command (once per process and column: an install command must
/// return at once when it has nothing to do). It runs even when the program
/// exists, since another process may be installing it right now (a virtual
/// environment's `python` exists before its packages do); the install
/// command's own lock makes this one wait.
pub(super) fn install(spec: &AdapterSpec) -> Result<Vec<String>, String> {
    static TRIED: OnceLock<Mutex<HashMap<String, Result<(), String>>>> = OnceLock::new();
    let base = spec.base_dir();
    let mut command = spec.command.clone();
    if command[0].contains('/') {
        command[0] = base.join(&command[0]).to_string_lossy().into_owned();
    }
    if spec.install.is_empty() {
        return Ok(command);
    }
    let tried = TRIED.get_or_init(Default::default);
    let mut tried = tried.lock().unwrap_or_else(|p| p.into_inner());
    let outcome = tried.entry(spec.id.clone()).or_insert_with(|| {
        // (A program looked up on PATH says nothing of the install: its
        // install script speaks for itself, on stderr, when it has work.)
        if command[0].contains('/') && !Path::new(&command[0]).exists() {
            eprintln!(
                "locklab: installing the adapter of driver '{}' (once, in {}): {}",
                spec.id,
                base.display(),
                spec.install.join(" ")
            );
        }
        let out = std::process::Command::new(&spec.install[0])
            .args(&spec.install[1..])
            .current_dir(&base)
            .output()
            .map_err(|e| {
                format!(
                    "driver '{}': cannot run its install ({}): {e}",
                    spec.id, spec.install[0]
                )
            })?;
        let err = String::from_utf8_lossy(&out.stderr);
        if out.status.success() {
            eprint!("{err}");
            Ok(())
        } else {
            let last = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no output");
            let line = format!(
                "driver '{}' is not available: its install ({}) failed ({}): {last}",
                spec.id,
                spec.install.join(" "),
                out.status
            );
            eprintln!("locklab: {line}");
            Err(line)
        }
    });
    outcome.clone().map(|()| command)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<Vec<AdapterSpec>, String> {
        let dir = tempfile_dir();
        let file = dir.join("columns.yaml");
        std::fs::write(&file, text).unwrap();
        let out = read_declarations(&file);
        let _ = std::fs::remove_dir_all(&dir);
        out
    }

    fn tempfile_dir() -> PathBuf {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let d = std::env::temp_dir().join(format!(
            "locklab-declarations-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    const HEAD: &str = "- id: mine+deadpool\n  package: p\n  version: \"1\"\n  configuration: c\n";

    #[test]
    fn a_pooler_column_needs_its_address_and_no_command() {
        let ok = read(&format!(
            "{HEAD}  kind: pooler\n  pooler: {{host: 127.0.0.1, port: 6432, mode: transaction, client: deadpool}}\n"
        ))
        .unwrap();
        let p = ok[0].pooler.as_ref().unwrap();
        assert_eq!(
            (ok[0].kind, p.port, p.mode, p.client, p.cancel),
            (
                ColumnKind::Pooler,
                6432,
                crate::PoolerMode::Transaction,
                PoolerClient::Deadpool,
                true
            )
        );
        let e = read(&format!("{HEAD}  kind: pooler\n")).unwrap_err();
        assert!(
            e.contains("columns.yaml:1: driver 'mine+deadpool' (kind: pooler) needs `pooler"),
            "{e}"
        );
        let e = read(&format!(
            "{HEAD}  kind: pooler\n  command: [x]\n  pooler: {{host: h, port: 1, mode: session}}\n"
        ))
        .unwrap_err();
        assert!(e.contains("runs no adapter"), "{e}");
        let e = read(&format!(
            "{HEAD}  command: [x]\n  pooler: {{host: h, port: 1, mode: session}}\n"
        ))
        .unwrap_err();
        assert!(e.contains("`pooler` is for `kind: pooler`"), "{e}");
        let e = read(&format!(
            "{HEAD}  kind: pooler\n  notices: false\n  pooler: {{host: h, port: 1, mode: session}}\n"
        ))
        .unwrap_err();
        assert!(e.contains("`notices` is for an adapter"), "{e}");
    }

    /// An adapter's column says whether its library passes notices on
    /// (default: it does).
    #[test]
    fn an_adapter_column_may_say_its_library_keeps_notices() {
        let default = read(&format!("{HEAD}  command: [x]\n")).unwrap();
        assert!(default[0].notices);
        let not = read(&format!("{HEAD}  command: [x]\n  notices: false\n")).unwrap();
        assert!(!not[0].notices);
    }

    #[test]
    fn mistakes_are_located() {
        let e = read(&format!(
            "{HEAD}  command: [x]\n  toolchian: {{program: x, install: y}}\n"
        ))
        .unwrap_err();
        assert!(e.contains("columns.yaml:6:3: unknown field `toolchian`"), "{e}");
        let e = read(&format!("{HEAD}  command: []\n")).unwrap_err();
        assert!(
            e.contains("columns.yaml:1: driver 'mine+deadpool' has an empty command"),
            "{e}"
        );
        let e = read("- id: a b\n  package: p\n  version: \"1\"\n  configuration: c\n  command: [x]\n").unwrap_err();
        assert!(e.contains("driver id 'a b' must be"), "{e}");
    }

    #[test]
    fn a_missing_toolchain_names_its_install_command() {
        let mut spec = read(&format!(
            "{HEAD}  command: [x]\n  toolchain: {{program: locklab-no-such-program, install: \"get it\"}}\n"
        ))
        .unwrap()
        .remove(0);
        assert_eq!(
            spec.unavailable().as_deref(),
            Some(
                "driver 'mine+deadpool' needs `locklab-no-such-program`, which is not on PATH; install it with: get it"
            )
        );
        spec.toolchain = None;
        spec.command = vec!["sh".into()];
        assert_eq!(spec.unavailable(), None, "sh is on PATH");
    }
}
