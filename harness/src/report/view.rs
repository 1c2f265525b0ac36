//! What the Markdown and HTML writers show, computed once from a [`Report`]:
//! the columns (server × driver, server-major) with their headers, and per
//! scenario family (a file's parameter sets together) one row per recorded
//! observation, a "locks left after run" row and an "expectations" row, each
//! cell with what it shows, the status it is coloured by and its evidence.
//! The writers only word and format it.

use std::collections::HashMap;

use super::{Report, ScenarioInfo};
use crate::outcome::{Observation, RunResult, Stats, Status};

/// A report's matrix, as both writers show it.
pub(super) struct View<'a> {
    /// The columns, server-major.
    pub columns: Vec<Column<'a>>,
    /// One per scenario file, in report order.
    pub families: Vec<Family<'a>>,
}

/// One server × driver column.
pub(super) struct Column<'a> {
    /// Server id, e.g. `pg17`.
    pub server: &'a str,
    /// Driver id.
    pub driver: &'a str,
    /// The driver id, or `server · driver` with several servers.
    pub header: String,
    /// The product of the pooler it goes through (`Pgpool-II`), else `None`.
    pub pooler: Option<&'static str>,
}

/// The rows of one scenario file.
pub(super) struct Family<'a> {
    /// The file's first scenario: its `family`, description, source and file
    /// name the section.
    pub first: &'a ScenarioInfo,
    /// One per recorded observation of each parameter set, in order.
    pub rows: Vec<ObservationRow<'a>>,
    /// The "locks left after run" row, per column.
    pub locks_left: Vec<LocksLeft>,
    /// With several servers: whether the locks-left row (as Markdown shows
    /// it) differs between servers for some driver.
    pub locks_left_differ_between_servers: bool,
    /// The "expectations" row, per column (also the family's overview row).
    pub expectations: Vec<Verdict>,
}

/// One recorded observation of one parameter set.
pub(super) struct ObservationRow<'a> {
    /// The `record:` name.
    pub name: &'a str,
    /// The parameter set, e.g. `[k=1]` (the scenario name after the family's).
    pub suffix: &'a str,
    /// Whether the file has parameters (rows then name their parameter set).
    pub parameterised: bool,
    /// The recording step with its SQL.
    pub step: &'a str,
    /// Per column.
    pub cells: Vec<ObservationCell<'a>>,
    /// With several servers: whether the displayed value differs between
    /// servers for some driver.
    pub differs_between_servers: bool,
}

/// One observation cell.
pub(super) struct ObservationCell<'a> {
    /// The observation; `None` when the run recorded none (or did not run).
    pub observation: Option<&'a Observation>,
    /// What the cell shows ([`Observation::shown_through`] its column's
    /// pooler); empty without an observation.
    pub shown: String,
    /// The status of the cell's run; `None` without a run.
    pub status: Option<Status>,
    /// Whether the value differs from the reference column of its server
    /// (its first driver); a step that does not apply (`n/a…`) to either is
    /// not a difference.
    pub differs: bool,
    /// The hover text, line by line: step and SQL, value, SQLSTATE, holders
    /// and waiters, timings, notices and the run's notes.
    pub evidence: Vec<String>,
}

/// One "locks left after run" cell: the family's leftovers in one column.
pub(super) struct LocksLeft {
    /// Each parameter set's leftovers, named by its suffix: locks, then leaks.
    pub parts: Vec<String>,
    /// Whether every parameter set of the family ran in this column.
    pub complete: bool,
    /// The most severe of the runs' statuses (a passed run with locks left
    /// counting as differing); `None` when none is worse than a clean pass.
    pub status: Option<Status>,
    /// With `status`: whether that run left locks.
    pub differs: bool,
    /// The hover text: each lock with mode, backend pid, state and
    /// application name, backends ended, the leak guard's finds.
    pub evidence: Vec<String>,
}

impl LocksLeft {
    /// As Markdown shows it: `None` (`—`) unless every parameter set ran,
    /// else the parts (each trimmed) or `none`.
    pub fn summary(&self) -> Option<String> {
        self.complete.then(|| {
            let parts: Vec<&str> = self.parts.iter().map(|p| p.trim()).collect();
            if parts.is_empty() {
                "none".to_owned()
            } else {
                parts.join("; ")
            }
        })
    }

    /// As HTML shows it: the parts of the runs there are, or `none`.
    pub fn text(&self) -> String {
        if self.parts.is_empty() {
            "none".to_owned()
        } else {
            self.parts.join("; ")
        }
    }
}

/// One "expectations" cell: how the family's runs in one column went.
pub(super) struct Verdict {
    /// `None` without runs; else fail if any run failed, varies if any
    /// varied, n/a if every run was skipped, deviates if any deviated, pass.
    pub status: Option<Status>,
    /// The family's runs in this column.
    pub runs: usize,
    /// How many of them failed, varied or deviated (for that status).
    pub count: usize,
    /// Observations whose value differs from the reference column.
    pub differing: usize,
    /// Whether some run left locks.
    pub locks_left: bool,
    /// The hover text: the differing observations, each run's status and notes.
    pub evidence: Vec<String>,
}

/// Where severity is concerned: a clean pass, a pass that differs, n/a,
/// deviates, varies, fail.
fn severity(status: Status, differs: bool) -> u8 {
    match status {
        Status::Pass => u8::from(differs),
        Status::NotApplicable => 2,
        Status::Deviates => 3,
        Status::Varies => 4,
        Status::Fail => 5,
    }
}

fn stats_line(s: &Stats) -> String {
    if s.n > 1 {
        format!(
            "{:.1} ms p50; min {:.1}, p95 {:.1}, max {:.1} over {} repeats",
            s.p50, s.min, s.p95, s.max, s.n
        )
    } else {
        format!("{:.1} ms", s.p50)
    }
}

/// The notes every cell of a run carries in its hover text.
fn run_notes(run: &RunResult, lines: &mut Vec<String>) {
    if run.repeats > 1 {
        lines.push(format!("repeats: {}", run.repeats));
    }
    for u in &run.varied {
        lines.push(format!("varies: {u}"));
    }
    for note in [&run.failure, &run.deviation, &run.skipped].into_iter().flatten() {
        lines.push(note.clone());
    }
    if let Some(t) = &run.trials {
        lines.push(format!("trials: {}", t.n));
        for i in &t.invariants {
            lines.push(format!("invariant {}: {}", i.name, i.text()));
            if let Some(first) = &i.first_violation {
                lines.push(format!("  first violation: {first}"));
            }
        }
    }
    if let Some(on) = &run.ran_on {
        lines.push(format!("ran on {on}"));
    }
}

/// Hover text of an observation cell: value, SQLSTATE, holders and waiters
/// with backend pid and state, timings, notices, and what went wrong in the
/// run (a failure, a deviation, repeats that read differently). The step and its SQL
/// are the row's (the same for every column), and the run's other notes
/// (repeats, trials, where it ran) its expectations cell's: each said once.
fn evidence(header: &str, o: &Observation, run: &RunResult) -> Vec<String> {
    let mut lines = vec![format!("{header} · {}", o.name), format!("value: {}", o.seen())];
    if let Some(state) = &o.sqlstate {
        lines.push(format!("SQLSTATE: {state}"));
    }
    if let Some(snapshot) = o.value.locks() {
        for (list, what) in [(&snapshot.holders, "holder"), (&snapshot.waiters, "waiter")] {
            for h in list {
                lines.push(format!(
                    "{what}: {} (backend pid {}, {})",
                    h.actor.as_deref().unwrap_or("?"),
                    h.pid,
                    h.state.as_deref().unwrap_or("?"),
                ));
            }
        }
    }
    if let Some(s) = &o.elapsed_stats {
        lines.push(format!("time: {}", stats_line(s)));
    }
    if let Some(w) = &o.waited_stats {
        lines.push(format!("at await: {}", stats_line(w)));
    }
    lines.extend(o.notices.iter().cloned());
    for u in &run.varied {
        lines.push(format!("varies: {u}"));
    }
    for note in [&run.failure, &run.deviation].into_iter().flatten() {
        lines.push(note.clone());
    }
    lines
}

/// The report's runs by cell, and its shape: what building the view looks up.
struct Cells<'a> {
    report: &'a Report,
    columns: Vec<Column<'a>>,
    runs: HashMap<(&'a str, &'a str, &'a str), &'a RunResult>,
}

impl<'a> Cells<'a> {
    fn new(report: &'a Report) -> Cells<'a> {
        let several = report.servers.len() > 1;
        let columns = report
            .servers
            .iter()
            .flat_map(|v| report.drivers.iter().map(move |d| (v.id.as_str(), d)))
            .map(|(server, d)| {
                // A pooler column names the pooler's exact version.
                let driver = match &d.pooler_version {
                    Some(v) => format!("{} ({v})", d.id),
                    None => d.id.clone(),
                };
                Column {
                    server,
                    driver: d.id.as_str(),
                    pooler: d.pooler_product(),
                    header: if several {
                        format!("{server} · {driver}")
                    } else {
                        driver
                    },
                }
            })
            .collect();
        let mut runs = HashMap::new();
        for r in &report.runs {
            // The first run of a cell, as a search in report order finds it.
            runs.entry((r.server.as_str(), r.scenario.as_str(), r.driver.as_str()))
                .or_insert(r);
        }
        Cells { report, columns, runs }
    }

    /// The run of one cell.
    fn run(&self, column: &Column<'_>, scenario: &str) -> Option<&'a RunResult> {
        self.runs.get(&(column.server, scenario, column.driver)).copied()
    }

    /// The reference column of a column's server: the server's first driver.
    fn reference(&self, column: usize) -> Option<&Column<'a>> {
        let drivers = self.report.drivers.len();
        (drivers > 0).then(|| &self.columns[column - column % drivers])
    }

    /// Whether, with several servers, `value` (per column) differs between
    /// servers for some driver.
    fn differ_between_servers<T: PartialEq>(&self, value: impl Fn(usize) -> T) -> bool {
        let drivers = self.report.drivers.len();
        self.report.servers.len() > 1
            && (0..drivers).any(|d| {
                let mut seen = (0..self.report.servers.len()).map(|v| value(v * drivers + d));
                let first = seen.next();
                seen.any(|x| Some(x) != first)
            })
    }

    /// The scenarios grouped by file (a file's parameter sets together), in order.
    fn families(&self) -> Vec<Vec<&'a ScenarioInfo>> {
        let mut families: Vec<Vec<&ScenarioInfo>> = Vec::new();
        for s in &self.report.scenarios {
            match families.last_mut() {
                Some(f) if f[0].family == s.family => f.push(s),
                _ => families.push(vec![s]),
            }
        }
        families
    }
}

impl<'a> View<'a> {
    /// The view of `report`.
    pub fn of(report: &'a Report) -> View<'a> {
        let cells = Cells::new(report);
        let families = cells.families().iter().map(|f| cells.family(f)).collect();
        View {
            columns: cells.columns,
            families,
        }
    }
}

impl<'a> Cells<'a> {
    fn family(&self, family: &[&'a ScenarioInfo]) -> Family<'a> {
        let first = family[0];
        let parameterised = family.len() > 1 || !first.params.is_empty();
        let mut rows = Vec::new();
        for s in family {
            let suffix = s.name.strip_prefix(&s.family).unwrap_or_default();
            for (k, name) in s.observations.iter().enumerate() {
                let step = s.observation_steps.get(k).map(String::as_str).unwrap_or_default();
                let cells: Vec<ObservationCell> = (0..self.columns.len())
                    .map(|c| self.observation_cell(c, s, name))
                    .collect();
                let differs_between_servers =
                    self.differ_between_servers(|c| cells[c].observation.map(Observation::seen));
                rows.push(ObservationRow {
                    name,
                    suffix,
                    parameterised,
                    step,
                    cells,
                    differs_between_servers,
                });
            }
        }
        let locks_left: Vec<LocksLeft> = self.columns.iter().map(|c| self.locks_left(c, family)).collect();
        let expectations = (0..self.columns.len())
            .map(|c| self.verdict(c, family, &rows))
            .collect();
        Family {
            first,
            locks_left_differ_between_servers: self.differ_between_servers(|c| locks_left[c].summary()),
            rows,
            locks_left,
            expectations,
        }
    }

    fn observation_cell(&self, c: usize, s: &ScenarioInfo, name: &str) -> ObservationCell<'a> {
        let column = &self.columns[c];
        let run = self.run(column, &s.name);
        let Some((run, o)) = run.and_then(|r| r.observation(name).map(|o| (r, o))) else {
            let mut evidence = vec![format!("{} · {name}: not recorded", column.header)];
            if let Some(r) = run {
                run_notes(r, &mut evidence);
            }
            return ObservationCell {
                observation: None,
                shown: String::new(),
                status: run.map(RunResult::status),
                differs: false,
                evidence,
            };
        };
        let reference = self
            .reference(c)
            .and_then(|rc| self.run(rc, &s.name))
            .and_then(|r| r.observation(name))
            .map(Observation::seen);
        let seen = o.seen();
        let differs = reference.is_some_and(|r| r != seen && !r.is_not_applicable() && !seen.is_not_applicable());
        ObservationCell {
            observation: Some(o),
            shown: o.shown_through(column.pooler),
            status: Some(run.status()),
            differs,
            evidence: evidence(&column.header, o, run),
        }
    }

    fn locks_left(&self, column: &Column<'_>, family: &[&ScenarioInfo]) -> LocksLeft {
        let mut cell = LocksLeft {
            parts: Vec::new(),
            complete: true,
            status: None,
            differs: false,
            evidence: vec![format!("{} · locks left after run", column.header)],
        };
        let mut worst = 0;
        for s in family {
            let Some(r) = self.run(column, &s.name) else {
                cell.complete = false;
                continue;
            };
            let suffix = s.name.strip_prefix(&s.family).unwrap_or_default();
            if !r.locks_left.is_empty() {
                cell.parts
                    .push(format!("{}{suffix}", crate::outcome::LocksLeft::of(&r.locks_left)));
            }
            for l in &r.locks_left {
                cell.evidence.push(format!(
                    "{suffix} key {} {} {} by backend pid {} ({}, application_name {})",
                    l.key,
                    l.mode,
                    if l.granted { "held" } else { "waited for" },
                    l.pid,
                    l.state.as_deref().unwrap_or("?"),
                    l.application_name.as_deref().unwrap_or("?")
                ));
            }
            if !r.cleaned_backends.is_empty() {
                cell.evidence.push(format!(
                    "{suffix} backends ended after the run: {:?}",
                    r.cleaned_backends
                ));
            }
            if !r.backends_left.is_empty() {
                cell.parts
                    .push(format!("LEAK once over: {}{suffix}", r.backends_left.join(", ")));
                cell.evidence.push(format!(
                    "{suffix} leak guard: still in the run's database once it was over: {}",
                    r.backends_left.join(", ")
                ));
            }
            let (status, differs) = (r.status(), !r.locks_left.is_empty());
            if severity(status, differs) > worst {
                worst = severity(status, differs);
                (cell.status, cell.differs) = (Some(status), differs);
            }
        }
        cell
    }

    fn verdict(&self, c: usize, family: &[&ScenarioInfo], rows: &[ObservationRow<'_>]) -> Verdict {
        let column = &self.columns[c];
        let first = family[0];
        let runs: Vec<&RunResult> = family.iter().filter_map(|s| self.run(column, &s.name)).collect();
        let n = runs.len();
        let statuses: Vec<Status> = runs.iter().map(|r| r.status()).collect();
        let (status, count) = match Status::of_family(&statuses) {
            Some((status, count)) => (Some(status), count),
            None => (None, 0),
        };
        let mut evidence = vec![format!("{} · {}", column.header, first.family)];
        let mut differing = 0;
        for row in rows {
            let cell = &row.cells[c];
            if let (true, Some(o)) = (cell.differs, cell.observation) {
                differing += 1;
                evidence.push(format!(
                    "differs from the first column: {}{}: {}",
                    row.name,
                    row.suffix,
                    o.seen()
                ));
            }
        }
        for r in &runs {
            let suffix = r.scenario.strip_prefix(&first.family).unwrap_or_default();
            evidence.push(format!("{suffix} {}", r.status()).trim().to_owned());
            run_notes(r, &mut evidence);
        }
        Verdict {
            status,
            runs: n,
            count,
            differing,
            locks_left: runs.iter().any(|r| !r.locks_left.is_empty()),
            evidence,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{DriverColumn, Environment, ServerInfo, Summary};
    use super::*;

    /// One server, drivers `a` and `b`, a file with parameter sets `[k=1]` and
    /// `[k=2]` recording `held`; `b` has no run of `[k=2]`.
    fn report(runs: Vec<RunResult>) -> Report {
        let scenario = |k: &str| ScenarioInfo {
            name: format!("f[k={k}]"),
            family: "f".into(),
            params: vec![("k".into(), k.into())],
            description: String::new(),
            source: None,
            tags: Vec::new(),
            report: None,
            file: "scenarios/f.yaml".into(),
            observations: vec!["held".into()],
            observation_steps: vec!["step 1 (a: select 1)".into()],
        };
        let driver = |id: &str| DriverColumn {
            id: id.into(),
            crate_name: "c".into(),
            crate_version: "1".into(),
            configuration: String::new(),
            kind: "pooled".into(),
            pooler: None,
            pooler_kind: None,
            pooler_version: None,
        };
        Report {
            schema_version: super::super::SCHEMA_VERSION,
            generated_at: String::new(),
            locklab_version: String::new(),
            repeat: 1,
            shard: None,
            environment: Environment {
                os: String::new(),
                kernel: None,
                arch: String::new(),
                cpus: 1,
                git_commit: None,
                git_dirty: false,
            },
            servers: vec![ServerInfo {
                id: "pg17".into(),
                major: 17,
                version: String::new(),
                backend: "local".into(),
                image: None,
                startup_ms: 0.0,
                image_ms: 0.0,
            }],
            drivers: vec![driver("a"), driver("b")],
            scenarios: vec![scenario("1"), scenario("2")],
            runs,
            summary: Summary {
                runs: 0,
                passed: 0,
                deviated: 0,
                not_applicable: 0,
                failed: 0,
                varied: 0,
                varied_why: Vec::new(),
                elapsed_ms: 0.0,
            },
            properties: Vec::new(),
            verdicts: Vec::new(),
        }
    }

    fn run(scenario: &str, driver: &str, held: &str) -> RunResult {
        let mut r = RunResult::new("pg17", scenario, driver);
        r.observations.push(Observation {
            name: "held".into(),
            step: 1,
            value: crate::outcome::Value::of_text(held),
            sqlstate: None,
            elapsed_ms: None,
            waited_ms: None,
            notices: Vec::new(),
            notices_read: Default::default(),
            elapsed_stats: None,
            waited_stats: None,
            distribution: None,
            time_varies: false,
        });
        r
    }

    #[test]
    fn cells_compare_with_the_first_column_and_verdicts_count_runs() {
        let mut failed = run("f[k=1]", "b", "false");
        failed.failure = Some("step 1 failed".into());
        let r = report(vec![run("f[k=1]", "a", "true"), run("f[k=2]", "a", "true"), failed]);
        let view = View::of(&r);
        let f = &view.families[0];
        assert_eq!(
            view.columns.iter().map(|c| c.header.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert_eq!(
            (f.rows.len(), f.rows[0].suffix, f.rows[0].parameterised),
            (2, "[k=1]", true)
        );
        let b = &f.rows[0].cells[1];
        assert_eq!((b.status, b.differs), (Some(Status::Fail), true));
        assert!(f.rows[1].cells[1].observation.is_none(), "no run of [k=2] in b");
        // Markdown shows `—` for a column missing a parameter set; HTML what ran.
        assert_eq!(f.locks_left[0].summary().as_deref(), Some("none"));
        assert_eq!(
            (f.locks_left[1].summary(), f.locks_left[1].text()),
            (None, "none".to_owned())
        );
        assert_eq!(
            (f.locks_left[1].status, f.locks_left[1].differs),
            (Some(Status::Fail), false)
        );
        let (a, b) = (&f.expectations[0], &f.expectations[1]);
        assert_eq!((a.status, a.runs, a.differing), (Some(Status::Pass), 2, 0));
        assert_eq!((b.status, b.runs, b.count, b.differing), (Some(Status::Fail), 1, 1, 1));
        assert!(
            b.evidence
                .contains(&"differs from the first column: held[k=1]: false".to_owned())
        );
    }
}
