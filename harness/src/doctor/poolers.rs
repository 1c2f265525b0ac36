//! The pooler configuration readers: PgBouncer's `pgbouncer.ini`,
//! Pgpool-II's `pgpool.conf`, pgagroal's `pgagroal.conf` and Odyssey's
//! `odyssey.conf`. Each reads what decides which of locklab's pooler
//! columns the file is: the pool mode and what is sent at check-in. Every
//! other setting is listed as not read, never an error; an invalid value
//! of a setting read is an error naming its line.

use super::{LineError, PoolerConfig};

/// A reader of one pooler's configuration file.
pub struct Reader {
    /// The pooler.
    pub pooler: &'static str,
    /// The file names it reads, for messages.
    pub names: &'static str,
    /// Whether a file of this name is one.
    pub matches: fn(&str) -> bool,
    /// Reads the file's text into one configuration per scope (the
    /// pooler's own, and a database or pool that sets its own mode).
    pub read: fn(&str) -> Result<Vec<PoolerConfig>, LineError>,
}

/// Every pooler configuration `doctor` reads: a line each.
pub const READERS: &[Reader] = &[
    Reader {
        pooler: "pgbouncer",
        names: "pgbouncer.ini",
        matches: |n| n == "pgbouncer.ini",
        read: pgbouncer,
    },
    Reader {
        pooler: "pgpool",
        names: "pgpool.conf",
        matches: |n| n == "pgpool.conf",
        read: pgpool,
    },
    Reader {
        pooler: "pgagroal",
        names: "pgagroal.conf",
        matches: |n| n == "pgagroal.conf",
        read: pgagroal,
    },
    Reader {
        pooler: "odyssey",
        names: "odyssey.conf",
        matches: |n| n == "odyssey.conf",
        read: odyssey,
    },
];

/// One `key = value` line of an INI-style file, with its section and line.
struct Setting {
    section: String,
    key: String,
    value: String,
    line: usize,
}

/// The settings of an INI-style file (`[section]`, `key = value`, `;` and
/// `#` comments; a value's quotes removed; `%include` as a setting of that
/// name).
fn ini(text: &str) -> Result<Vec<Setting>, LineError> {
    let mut section = String::new();
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with(';') || line.starts_with('#') {
            continue;
        }
        // PgBouncer's `%include FILE` (PgBouncer docs, "Include
        // directive"): not followed, listed as not read.
        if let Some(rest) = line.strip_prefix("%include") {
            out.push(Setting {
                section: section.clone(),
                key: "%include".into(),
                value: rest.trim().to_owned(),
                line: i + 1,
            });
            continue;
        }
        if let Some(name) = line.strip_prefix('[') {
            let Some(name) = name.strip_suffix(']') else {
                return Err(LineError::at(i + 1, format!("a section header without `]`: `{line}`")));
            };
            section = name.trim().to_lowercase();
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            return Err(LineError::at(i + 1, format!("not `name = value`: `{line}`")));
        };
        let value = value.split(" #").next().unwrap_or(value).trim();
        out.push(Setting {
            section: section.clone(),
            key: key.trim().to_lowercase(),
            value: value.trim_matches(|c| c == '\'' || c == '"').to_owned(),
            line: i + 1,
        });
    }
    Ok(out)
}

/// `value` if it is one of `allowed`, else an error naming the setting and its line.
fn one_of(s: &Setting, allowed: &[&str]) -> Result<String, LineError> {
    let v = s.value.to_lowercase();
    if allowed.contains(&v.as_str()) {
        Ok(v)
    } else {
        Err(LineError::at(
            s.line,
            format!("{} = '{}': expected {}", s.key, s.value, allowed.join(", ")),
        ))
    }
}

/// A boolean as the poolers write them.
fn boolean(s: &Setting) -> Result<bool, LineError> {
    match s.value.to_lowercase().as_str() {
        "1" | "on" | "yes" | "true" => Ok(true),
        "0" | "off" | "no" | "false" => Ok(false),
        _ => Err(LineError::at(
            s.line,
            format!("{} = '{}': expected a boolean (1/0, on/off, yes/no)", s.key, s.value),
        )),
    }
}

fn not_read(s: &Setting) -> String {
    format!("{} (line {})", s.key, s.line)
}

/// PgBouncer: `[pgbouncer]`'s `pool_mode` (default session),
/// `server_reset_query` (default `DISCARD ALL`, sent in session mode, and
/// in transaction mode with `server_reset_query_always`), and a
/// `pool_mode=` in a `[databases]` entry's connection string (PgBouncer
/// docs, "Section [databases]"), as a configuration of its own.
///
/// # Errors
/// A malformed line; a `pool_mode` other than session, transaction or
/// statement; a `server_reset_query_always` that is no boolean.
pub fn pgbouncer(text: &str) -> Result<Vec<PoolerConfig>, LineError> {
    const MODES: &[&str] = &["session", "transaction", "statement"];
    let mut main = PoolerConfig {
        pooler: "pgbouncer",
        file: String::new(),
        mode: "session".into(),
        mode_line: None,
        reset_query: None,
        reset_always: false,
        scope: None,
        not_read: Vec::new(),
    };
    let mut databases = Vec::new();
    for s in ini(text)? {
        match (s.section.as_str(), s.key.as_str()) {
            ("pgbouncer", "pool_mode") => {
                main.mode = one_of(&s, MODES)?;
                main.mode_line = Some(s.line);
            }
            ("pgbouncer", "server_reset_query") => main.reset_query = Some(s.value.clone()),
            ("pgbouncer", "server_reset_query_always") => main.reset_always = boolean(&s)?,
            ("databases", _) => {
                // `name = host=… pool_mode=transaction`: libpq-style words.
                let mode = s.value.split_whitespace().find_map(|w| w.strip_prefix("pool_mode="));
                if let Some(mode) = mode {
                    let m = Setting {
                        value: mode.to_owned(),
                        key: "pool_mode".into(),
                        section: s.section.clone(),
                        line: s.line,
                    };
                    databases.push((s.key.clone(), one_of(&m, MODES)?, s.line));
                }
            }
            _ => main.not_read.push(not_read(&s)),
        }
    }
    let mut out = vec![main.clone()];
    for (db, mode, line) in databases {
        out.push(PoolerConfig {
            mode,
            mode_line: Some(line),
            scope: Some(format!("database {db}")),
            not_read: Vec::new(),
            ..main.clone()
        });
    }
    Ok(out)
}

/// Pgpool-II: `connection_cache` (default on: a client's server
/// connections are kept for the next client of the same user and
/// database, a session each; off: closed at disconnect) and
/// `reset_query_list` (default `ABORT; DISCARD ALL`; Pgpool-II docs,
/// "Connection Pooling").
///
/// # Errors
/// A malformed line; a `connection_cache` that is no boolean.
pub fn pgpool(text: &str) -> Result<Vec<PoolerConfig>, LineError> {
    let mut c = PoolerConfig {
        pooler: "pgpool",
        file: String::new(),
        mode: "session".into(),
        mode_line: None,
        reset_query: None,
        reset_always: false,
        scope: None,
        not_read: Vec::new(),
    };
    for s in ini(text)? {
        match s.key.as_str() {
            "connection_cache" => {
                c.mode = if boolean(&s)? { "session" } else { "none" }.into();
                c.mode_line = Some(s.line);
            }
            "reset_query_list" => c.reset_query = Some(s.value.clone()),
            _ => c.not_read.push(not_read(&s)),
        }
    }
    Ok(vec![c])
}

/// pgagroal: `[pgagroal]`'s `pipeline` (`auto` by default, which picks
/// `performance` or `session` by the other settings; pgagroal docs,
/// CONFIGURATION.md).
///
/// # Errors
/// A malformed line; a `pipeline` other than auto, performance, session or transaction.
pub fn pgagroal(text: &str) -> Result<Vec<PoolerConfig>, LineError> {
    let mut c = PoolerConfig {
        pooler: "pgagroal",
        file: String::new(),
        mode: "auto".into(),
        mode_line: None,
        reset_query: None,
        reset_always: false,
        scope: None,
        not_read: Vec::new(),
    };
    for s in ini(text)? {
        match (s.section.as_str(), s.key.as_str()) {
            ("pgagroal", "pipeline") => {
                c.mode = one_of(&s, &["auto", "performance", "session", "transaction"])?;
                c.mode_line = Some(s.line);
            }
            _ => c.not_read.push(not_read(&s)),
        }
    }
    Ok(vec![c])
}

/// Odyssey: each `database … { user … { pool "session"|"transaction" } }`
/// block's `pool` (Odyssey docs, "Routing rules"), with its
/// `pool_discard` and `pool_smart_discard` (what is sent at check-in);
/// one configuration per `pool` line.
///
/// # Errors
/// A `pool` other than "session" or "transaction"; a `pool_discard` that is no yes/no.
pub fn odyssey(text: &str) -> Result<Vec<PoolerConfig>, LineError> {
    let mut out = Vec::new();
    let mut not_read = Vec::new();
    let mut scope: Vec<String> = Vec::new();
    let mut discard: Option<bool> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let unquote = |w: &str| w.trim_matches('"').to_owned();
        match words.as_slice() {
            [kind @ ("database" | "user" | "storage" | "listen"), rest @ ..] if line.ends_with('{') => {
                let name = rest
                    .iter()
                    .take_while(|w| **w != "{")
                    .map(|w| unquote(w))
                    .collect::<Vec<_>>();
                scope.push(format!("{kind} {}", name.join(" ")).trim().to_owned());
            }
            [_, .., "{"] | ["{"] => scope.push(String::new()),
            ["}"] => {
                scope.pop();
            }
            ["pool", mode] => {
                let m = Setting {
                    section: String::new(),
                    key: "pool".into(),
                    value: unquote(mode),
                    line: i + 1,
                };
                let mode = one_of(&m, &["session", "transaction"])?;
                let named: Vec<&String> = scope
                    .iter()
                    .filter(|s| !s.is_empty() && !s.starts_with("storage"))
                    .collect();
                out.push(PoolerConfig {
                    pooler: "odyssey",
                    file: String::new(),
                    mode,
                    mode_line: Some(i + 1),
                    reset_query: None,
                    reset_always: false,
                    scope: (!named.is_empty()).then(|| named.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")),
                    not_read: Vec::new(),
                });
            }
            ["pool_discard", value] => {
                let s = Setting {
                    section: String::new(),
                    key: "pool_discard".into(),
                    value: unquote(value),
                    line: i + 1,
                };
                discard = Some(boolean(&s)?);
            }
            [key, ..] => not_read.push(format!("{key} (line {})", i + 1)),
            [] => {}
        }
    }
    for c in &mut out {
        c.reset_query = discard.map(|d| {
            if d {
                "DISCARD ALL (pool_discard yes)"
            } else {
                "nothing (pool_discard no)"
            }
            .into()
        });
    }
    if let Some(first) = out.first_mut() {
        first.not_read = not_read;
    }
    Ok(out)
}
