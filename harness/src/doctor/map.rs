//! A project's packages and pooler configurations against a report's
//! columns: for each, the columns that test it, exact or the nearest with
//! the difference said, and what cannot be mapped.

use serde::Serialize;

use super::packages::{self, Target};
use super::{Ecosystem, PoolerConfig, Project};
use crate::outcome::DriverColumn;

/// How close a column is to what the project has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Closeness {
    /// The same package at the same version, or the pooler in the same mode
    /// with the same check-in.
    Exact,
    /// The nearest locklab has; the difference is said.
    Nearest,
    /// A lock library or job queue: locklab's scenarios run it on the
    /// columns its steps apply to, so its verdicts are on those columns' cards.
    Library,
}

/// One part of the project's stack and the columns that answer for it.
#[derive(Clone, Debug, Serialize)]
pub struct StackLine {
    /// What was found, in words: `deadpool-postgres 0.14.2`, `PgBouncer pool_mode=transaction`.
    pub found: String,
    /// Where: `Cargo.lock:123`.
    pub source: String,
    /// The columns, in report order.
    pub columns: Vec<String>,
    /// Exact or nearest.
    pub closeness: Closeness,
    /// What differs between the project and the columns, for a nearest match.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub difference: Option<String>,
}

/// A package or setting `doctor` found but has no column for.
#[derive(Clone, Debug, Serialize)]
pub struct NotMapped {
    /// What: `org.postgresql:postgresql 42.7.3`, `pgbouncer.ini: listen_port (line 4)`.
    pub what: String,
    /// Where.
    pub source: String,
    /// Why.
    pub why: String,
}

/// `locklab try CRATE@VERSION` for a Rust pool crate at a version locklab
/// does not ship.
#[derive(Clone, Debug, Serialize)]
pub struct TryOffer {
    /// The crate.
    pub krate: String,
    /// The locked version.
    pub version: String,
    /// The command.
    pub command: String,
}

/// The whole mapping.
#[derive(Clone, Debug, Serialize)]
pub struct Mapping {
    /// The stack, packages first (in the files' order), then poolers.
    pub stack: Vec<StackLine>,
    /// Every column of the stack, once, in report order.
    pub columns: Vec<String>,
    /// What could not be mapped.
    pub not_mapped: Vec<NotMapped>,
    /// The `locklab try` runs that would test the exact versions.
    pub tries: Vec<TryOffer>,
}

/// A version's numeric parts: `0.14.2` → `[0, 14, 2]` (a pre-release or
/// build suffix ignored; `v5.7.1` → `[5, 7, 1]`).
fn parts(version: &str) -> Vec<u64> {
    version
        .trim_start_matches('v')
        .split(['.', '-', '+'])
        .map_while(|p| p.parse().ok())
        .collect()
}

/// A column's version: its `crate_version`'s first word (`0.9.0 (bb8 0.9.1)` → `0.9.0`).
fn column_version(c: &DriverColumn) -> &str {
    c.crate_version.split_whitespace().next().unwrap_or_default()
}

/// What differs between `yours` and `ours` in words, `None` when equal.
fn version_difference(yours: &str, ours: &str) -> Option<String> {
    if yours == ours {
        return None;
    }
    let (a, b) = (parts(yours), parts(ours));
    let which = if a.first() != b.first() {
        "major version"
    } else if a.get(1) != b.get(1) {
        "minor version"
    } else {
        "patch"
    };
    Some(format!("yours is {yours}, locklab ran {ours} (the {which} differs)"))
}

/// The versions nearest to `yours` among `versions`: equal parts first,
/// then the smallest distance in the first part that differs.
fn nearest<'a>(yours: &str, versions: &[&'a str]) -> Option<&'a str> {
    let y = parts(yours);
    versions.iter().copied().min_by_key(|v| {
        let p = parts(v);
        let common = y.iter().zip(&p).take_while(|(a, b)| a == b).count();
        let distance = match (y.get(common), p.get(common)) {
            (Some(a), Some(b)) => a.abs_diff(*b),
            _ => 0,
        };
        (std::cmp::Reverse(common), distance)
    })
}

/// The project's stack against `columns` (a report's, in report order).
pub fn map(project: &Project, columns: &[DriverColumn]) -> Mapping {
    let mut stack = Vec::new();
    let mut not_mapped = Vec::new();
    let mut tries = Vec::new();
    let mut families: Vec<&'static str> = Vec::new();
    let rust_pool_found = project.packages.iter().any(|p| {
        p.ecosystem == Ecosystem::Cargo
            && packages::known(p.ecosystem, &p.name).is_some_and(
                |k| matches!(k.target, Target::Columns(f) if f != "tokio-postgres" && f != "pg-advisory-lock"),
            )
    });
    for p in &project.packages {
        let source = match p.line {
            Some(l) => format!("{}:{l}", p.file),
            None => p.file.clone(),
        };
        let Some(known) = packages::known(p.ecosystem, &p.name) else {
            if let Some(why) = packages::related(p.ecosystem, &p.name) {
                not_mapped.push(NotMapped {
                    what: format!("{} {}", p.name, p.version.as_deref().unwrap_or("(no version)")),
                    source,
                    why: why.to_owned(),
                });
            }
            continue;
        };
        let family = match known.target {
            Target::Library(name) => {
                stack.push(StackLine {
                    found: format!("{} {}", p.name, p.version.as_deref().unwrap_or("(no version)")),
                    source,
                    columns: Vec::new(),
                    closeness: Closeness::Library,
                    difference: Some(format!(
                        "locklab's scenarios run it (`library: {name}`) on the columns it applies to; the library-*, job-* and migrators-* verdicts of those columns are its"
                    )),
                });
                continue;
            }
            Target::Columns(family) => family,
        };
        // A secondary name of a family whose primary package is also locked (bb8's
        // bb8-postgres, psycopg's psycopg-pool) adds nothing.
        let primary = packages::normalise(p.ecosystem, family);
        if packages::normalise(p.ecosystem, &p.name) != primary
            && project
                .packages
                .iter()
                .any(|q| q.ecosystem == p.ecosystem && packages::normalise(q.ecosystem, &q.name) == primary)
        {
            continue;
        }
        if family == "tokio-postgres" && rust_pool_found {
            continue;
        }
        let candidates: Vec<&DriverColumn> = columns
            .iter()
            .filter(|c| c.crate_name == family && c.pooler.is_none())
            .collect();
        if candidates.is_empty() {
            not_mapped.push(NotMapped {
                what: format!("{} {}", p.name, p.version.as_deref().unwrap_or("")),
                source,
                why: format!("the report has no column of {family}"),
            });
            continue;
        }
        families.push(family);
        let Some(version) = p.version.as_deref() else {
            stack.push(StackLine {
                found: p.name.clone(),
                source,
                columns: candidates.iter().map(|c| c.id.clone()).collect(),
                closeness: Closeness::Nearest,
                difference: Some(format!(
                    "{}; every version locklab ran is shown",
                    p.unresolved.as_deref().unwrap_or("no version")
                )),
            });
            continue;
        };
        let versions: Vec<&str> = {
            let mut v: Vec<&str> = candidates.iter().map(|c| column_version(c)).collect();
            v.dedup();
            v
        };
        let best = nearest(version, &versions).unwrap_or_default();
        let chosen: Vec<String> = candidates
            .iter()
            .filter(|c| column_version(c) == best)
            .map(|c| c.id.clone())
            .collect();
        let difference = version_difference(version, best);
        if difference.is_some() && known.tryable {
            tries.push(TryOffer {
                krate: p.name.clone(),
                version: version.to_owned(),
                command: format!("locklab try {}@{version}", p.name),
            });
        }
        stack.push(StackLine {
            found: format!("{} {version}", p.name),
            source,
            columns: chosen,
            closeness: if difference.is_none() {
                Closeness::Exact
            } else {
                Closeness::Nearest
            },
            difference,
        });
    }
    for config in &project.poolers {
        map_pooler(config, columns, &families, &mut stack, &mut not_mapped);
    }
    let mut ids: Vec<String> = Vec::new();
    for c in columns {
        if stack.iter().any(|s| s.columns.contains(&c.id)) && !ids.contains(&c.id) {
            ids.push(c.id.clone());
        }
    }
    Mapping {
        stack,
        columns: ids,
        not_mapped,
        tries,
    }
}

/// The columns of a pooler configuration: the pooler's columns in its mode
/// with the same check-in, through the project's own Rust pool where
/// locklab has that combination, else through its plain client.
fn map_pooler(
    config: &PoolerConfig,
    columns: &[DriverColumn],
    families: &[&str],
    stack: &mut Vec<StackLine>,
    not_mapped: &mut Vec<NotMapped>,
) {
    let source = match config.mode_line {
        Some(l) => format!("{}:{l}", config.file),
        None => config.file.clone(),
    };
    let scope = config.scope.as_deref().map(|s| format!(" ({s})")).unwrap_or_default();
    let mut differences = Vec::new();
    // The mode locklab has for this one, and what differs.
    let mode = match (config.pooler, config.mode.as_str()) {
        ("pgbouncer", "statement") => {
            differences.push(
                "statement mode: locklab runs transaction mode, the nearest (statement mode hands the server connection back after every statement, so a session-level lock is no safer)"
                    .to_owned(),
            );
            "transaction"
        }
        ("pgpool", "none") => {
            differences.push(
                "connection_cache = off: locklab runs it on (off closes the server connection when the client disconnects, so a lock ends with its client)"
                    .to_owned(),
            );
            "session"
        }
        ("pgagroal", m @ ("auto" | "performance")) => {
            differences.push(format!(
                "pipeline = {m}: locklab runs session and transaction; the nearest is session (performance keeps a client on one server connection without DISCARD ALL at its end)"
            ));
            "session"
        }
        (_, m) => m,
    };
    let reset = config.reset_query.as_deref().unwrap_or("").to_lowercase();
    let cleans =
        config.reset_query.is_none() || reset.contains("discard all") || reset.contains("pg_advisory_unlock_all");
    // Which of the pooler's columns: its check-in variants are told by id.
    let variant = |id: &str| -> bool {
        let special_reset_all = id.contains("-reset-all");
        let special_discard_always = id.contains("-discard-always");
        match config.pooler {
            "pgbouncer" if mode == "session" => {
                if cleans {
                    !special_reset_all && !special_discard_always
                } else {
                    special_reset_all
                }
            }
            "pgbouncer" => match (config.reset_always, cleans) {
                (false, _) => !special_reset_all && !special_discard_always,
                (true, true) => special_discard_always,
                (true, false) => special_reset_all,
            },
            _ => true,
        }
    };
    if config.pooler == "pgbouncer" && !cleans {
        let ours = "RESET ROLE; RESET ALL; DEALLOCATE ALL; CLOSE ALL;";
        if !reset.replace(' ', "").contains(&ours.to_lowercase().replace(' ', "")) {
            differences.push(format!(
                "server_reset_query = '{}': the nearest column sends '{ours}' (neither ends advisory locks)",
                config.reset_query.as_deref().unwrap_or_default()
            ));
        }
    }
    let pooler_columns: Vec<&DriverColumn> = columns
        .iter()
        .filter(|c| {
            let kind = c.pooler_kind.as_deref().unwrap_or_default();
            (kind == config.pooler || kind.strip_prefix(config.pooler).is_some_and(|r| r.starts_with('-')))
                && c.pooler.as_deref() == Some(mode)
                && c.crate_name != "pg-advisory-lock"
                && variant(&c.id)
        })
        .collect();
    if pooler_columns.is_empty() {
        not_mapped.push(NotMapped {
            what: format!("{} mode {}{scope}", config.pooler, config.mode),
            source,
            why: "the report has no column of this pooler in this mode".into(),
        });
        return;
    }
    // Through the project's own pool where there is such a column.
    let own: Vec<&DriverColumn> = pooler_columns
        .iter()
        .copied()
        .filter(|c| families.contains(&c.crate_name.as_str()) && c.crate_name != "tokio-postgres")
        .collect();
    let chosen: Vec<&DriverColumn> = if own.is_empty() {
        let plain: Vec<&DriverColumn> = pooler_columns
            .iter()
            .copied()
            .filter(|c| c.crate_name == "tokio-postgres")
            .collect();
        differences.push(if families.is_empty() {
            "locklab's client through the pooler is tokio-postgres without a pool: the verdicts are the pooler's own".into()
        } else {
            format!(
                "locklab has no column of {} through this pooler: these go through tokio-postgres without a pool, so the verdicts are the pooler's own",
                families.join(", ")
            )
        });
        if plain.is_empty() { pooler_columns } else { plain }
    } else {
        own
    };
    let versions: Vec<String> = {
        let mut v: Vec<String> = chosen.iter().filter_map(|c| c.pooler_version.clone()).collect();
        v.sort();
        v.dedup();
        v
    };
    if !versions.is_empty() {
        differences.push(format!(
            "the file does not say the pooler's version; locklab ran {}",
            versions.join(" and ")
        ));
    }
    let product = match config.pooler {
        "pgbouncer" => "PgBouncer",
        "pgpool" => "Pgpool-II",
        "pgagroal" => "pgagroal",
        _ => "Odyssey",
    };
    let setting = match config.pooler {
        "pgpool" => format!("connection_cache {}", if config.mode == "none" { "off" } else { "on" }),
        "pgagroal" => format!("pipeline = {}", config.mode),
        "odyssey" => format!("pool \"{}\"", config.mode),
        _ => format!("pool_mode = {}", config.mode),
    };
    let reset_words = match &config.reset_query {
        Some(q) => format!(", check-in: {q}"),
        None => String::new(),
    };
    let always = if config.reset_always {
        ", server_reset_query_always = 1"
    } else {
        ""
    };
    stack.push(StackLine {
        found: format!("{product} {setting}{reset_words}{always}{scope}"),
        source,
        columns: chosen.iter().map(|c| c.id.clone()).collect(),
        closeness: if differences.iter().all(|d| d.starts_with("the file does not say")) {
            Closeness::Exact
        } else {
            Closeness::Nearest
        },
        difference: (!differences.is_empty()).then(|| differences.join("; ")),
    });
    if !config.not_read.is_empty() {
        not_mapped.push(NotMapped {
            what: format!("{product}'s other settings"),
            source: config.file.clone(),
            why: format!(
                "not read (doctor reads the pool mode and the check-in): {}",
                config.not_read.join(", ")
            ),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nearest_version_shares_the_most_leading_parts() {
        assert_eq!(nearest("0.13.1", &["0.14.2", "0.13.2"]), Some("0.13.2"));
        assert_eq!(nearest("0.12.0", &["0.14.2", "0.13.2"]), Some("0.13.2"));
        assert_eq!(nearest("0.9.0", &["0.9.0", "0.8.6"]), Some("0.9.0"));
        assert_eq!(
            version_difference("0.13.1", "0.13.2").as_deref(),
            Some("yours is 0.13.1, locklab ran 0.13.2 (the patch differs)")
        );
        assert_eq!(version_difference("1.0.0", "1.0.0"), None);
    }
}
