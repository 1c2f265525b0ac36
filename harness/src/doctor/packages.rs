//! Which packages locklab has columns for: per ecosystem, the package a
//! lockfile names and the family of columns that test it (the columns'
//! `crate_name` in a report), or the lock library or job queue its
//! scenarios run. A test keeps this table and the registry in step: every
//! family of the registry's columns is here, or said to be no user's
//! package.

use super::Ecosystem;

/// What a package is to locklab.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// A pool or client with columns: those whose `crate_name` is this.
    Columns(&'static str),
    /// A lock library or job queue that locklab's scenarios run (on the
    /// columns its `library` steps apply to): its name in scenarios.
    Library(&'static str),
}

/// One row of the table.
#[derive(Clone, Copy, Debug)]
pub struct Known {
    /// The ecosystem.
    pub ecosystem: Ecosystem,
    /// The package's names there (lower case; Python's normalised: `-` for `_` and `.`).
    pub names: &'static [&'static str],
    /// What locklab has for it.
    pub target: Target,
    /// A Rust pool crate `locklab try CRATE@VERSION` builds at another version.
    pub tryable: bool,
}

const fn columns(ecosystem: Ecosystem, names: &'static [&'static str], family: &'static str, tryable: bool) -> Known {
    Known {
        ecosystem,
        names,
        target: Target::Columns(family),
        tryable,
    }
}

const fn library(ecosystem: Ecosystem, names: &'static [&'static str], name: &'static str) -> Known {
    Known {
        ecosystem,
        names,
        target: Target::Library(name),
        tryable: false,
    }
}

/// The table. Order matters only for output: the first row that names a
/// package decides it.
pub const KNOWN: &[Known] = &[
    columns(Ecosystem::Cargo, &["deadpool-postgres"], "deadpool-postgres", true),
    columns(Ecosystem::Cargo, &["bb8-postgres"], "bb8-postgres", true),
    columns(Ecosystem::Cargo, &["sqlx", "sqlx-postgres"], "sqlx", true),
    columns(Ecosystem::Cargo, &["mobc-postgres"], "mobc-postgres", true),
    columns(Ecosystem::Cargo, &["r2d2_postgres"], "r2d2_postgres", true),
    columns(Ecosystem::Cargo, &["diesel-async"], "diesel-async", true),
    columns(Ecosystem::Cargo, &["pg-advisory-lock"], "pg-advisory-lock", false),
    columns(Ecosystem::Cargo, &["tokio-postgres"], "tokio-postgres", false),
    library(
        Ecosystem::Cargo,
        &["distributed-lock-postgres"],
        "distributed-lock-postgres",
    ),
    library(Ecosystem::Cargo, &["prax-sqlx"], "prax-sqlx"),
    library(Ecosystem::Cargo, &["underway"], "underway"),
    library(Ecosystem::Cargo, &["apalis-postgres", "apalis-sql"], "apalis-postgres"),
    library(Ecosystem::Cargo, &["graphile_worker"], "graphile-worker"),
    columns(Ecosystem::Python, &["asyncpg"], "asyncpg", false),
    columns(Ecosystem::Python, &["psycopg-pool", "psycopg"], "psycopg", false),
    columns(Ecosystem::Python, &["psycopg2", "psycopg2-binary"], "psycopg2", false),
    columns(Ecosystem::Python, &["sqlalchemy"], "SQLAlchemy", false),
    columns(Ecosystem::Npm, &["pg", "pg-pool"], "pg", false),
    columns(Ecosystem::Go, &["github.com/jackc/pgx/v5"], "pgx", false),
    columns(Ecosystem::Maven, &["com.zaxxer:hikaricp"], "HikariCP", false),
    columns(Ecosystem::Ruby, &["activerecord"], "activerecord", false),
];

/// A package name as the table spells it: lower case; for Python,
/// `_` and `.` as `-` (PEP 503's normal form).
pub fn normalise(ecosystem: Ecosystem, name: &str) -> String {
    let lower = name.to_lowercase();
    match ecosystem {
        Ecosystem::Python => lower.replace(['_', '.'], "-"),
        _ => lower,
    }
}

/// The row for `name` in `ecosystem`, if locklab has one.
pub fn known(ecosystem: Ecosystem, name: &str) -> Option<&'static Known> {
    let name = normalise(ecosystem, name);
    KNOWN
        .iter()
        .find(|k| k.ecosystem == ecosystem && k.names.contains(&name.as_str()))
}

/// Packages that matter to advisory locks but have no column: said as
/// not mapped with why, rather than passed over (pgjdbc, the pg gem,
/// pgx v4, …).
pub const RELATED: &[(Ecosystem, &str, &str)] = &[
    (
        Ecosystem::Maven,
        "org.postgresql:postgresql",
        "pgjdbc: the hikaricp column's driver (42.7.7); no column of its own",
    ),
    (
        Ecosystem::Ruby,
        "pg",
        "the pg gem: the activerecord column's client (1.4.5); no column of its own",
    ),
    (
        Ecosystem::Go,
        "github.com/jackc/pgx/v4",
        "pgx v4: locklab's Go column is pgx v5's pgxpool",
    ),
    (
        Ecosystem::Go,
        "github.com/lib/pq",
        "lib/pq: no column (database/sql pooling is not modelled)",
    ),
    (
        Ecosystem::Python,
        "django",
        "Django: no column; its PostgreSQL backend is psycopg's (the psycopg columns)",
    ),
    (
        Ecosystem::Cargo,
        "diesel",
        "diesel (blocking): no column; diesel-async's is its async pool",
    ),
    (
        Ecosystem::Cargo,
        "postgres",
        "the blocking postgres crate: r2d2_postgres's client; no column of its own",
    ),
    (Ecosystem::Npm, "postgres", "postgres.js: no column"),
    (
        Ecosystem::Maven,
        "org.flywaydb:flyway-core",
        "Flyway: no column (a migration runner's lock is modelled for sqlx and Rails)",
    ),
    (Ecosystem::Maven, "org.liquibase:liquibase-core", "Liquibase: no column"),
];

/// The [`RELATED`] note for `name`, if any.
pub fn related(ecosystem: Ecosystem, name: &str) -> Option<&'static str> {
    let name = normalise(ecosystem, name);
    RELATED
        .iter()
        .find(|(e, n, _)| *e == ecosystem && normalise(*e, n) == name)
        .map(|(_, _, why)| *why)
}
