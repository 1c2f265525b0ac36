//! Validation: the serde types of a file ([`super::raw`]) become a
//! [`Scenario`] with typed steps, or a list of located errors. Split by
//! concern: the scenario as a whole and its settings (here), the rules
//! every step follows ([`step`]; what one kind alone checks is in its file
//! under `scenario/steps/`), the connection each actor has as the steps go
//! ([`conn`]), what a step refers to ([`refs`]) and expectations
//! ([`expect`]).

mod conn;
pub(crate) mod expect;
mod refs;
mod step;
mod trials;
pub(crate) mod validator;
pub(crate) mod walk;

use indexmap::IndexMap;
use serde_saphyr::Spanned;

use super::params::{instance_suffix, is_identifier};
use super::raw::{Network, Process, RawScenario, Scalar, Setting, Via};
use super::{
    Actor, DEFAULT_POOL_MAX_SIZE, DEFAULT_STEP_DEADLINE_MS, MAX_STEP_DEADLINE_MS, Pos, Scenario, ScenarioError,
    Settings, template,
};

pub(super) use validator::Validator;

/// Most actors a scenario may have.
const MAX_ACTORS: usize = 64;

impl Validator<'_> {
    /// Validates `raw` into a scenario.
    ///
    /// # Errors
    /// Every error found, each with its place in the file.
    pub(super) fn run(mut self, raw: RawScenario) -> Result<Scenario, Vec<ScenarioError>> {
        let name_pos = Pos::of(&raw.name.referenced);
        let name = raw.name.value.trim().to_owned();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            self.err(
                name_pos,
                format!("scenario name '{name}' must be non-empty and use only letters, digits, '-' and '_'"),
            );
        }
        let step_deadline = match &raw.step_deadline_ms {
            Some(d) => self.deadline(d),
            None => DEFAULT_STEP_DEADLINE_MS,
        };
        let pool_max_size = match &raw.pool.max_size {
            Some(s) if !(1..=100).contains(&s.value) => {
                self.err(
                    Pos::of(&s.referenced),
                    format!("pool.max_size must be between 1 and 100, got {}", s.value),
                );
                DEFAULT_POOL_MAX_SIZE
            }
            Some(s) => s.value as u32,
            None => DEFAULT_POOL_MAX_SIZE,
        };
        let pooler_server_connections = match &raw.pooler.server_connections {
            Some(s) if !(1..=16).contains(&s.value) => {
                self.err(
                    Pos::of(&s.referenced),
                    format!("pooler.server_connections must be between 1 and 16, got {}", s.value),
                );
                None
            }
            Some(s) => Some(s.value as u32),
            None => None,
        };
        let tags = self.tags(raw.tags);
        let pool_settings = self.settings(raw.pool.settings, "pool.settings");
        let server_settings = self.settings(raw.server_settings, "server_settings");
        let actors_pos = Pos::of(&raw.actors.referenced);
        let actors = self.actors(raw.actors);
        let setup = self.sql_list(raw.setup, "setup");
        let teardown = self.sql_list(raw.teardown, "teardown");
        self.actor_count(&actors, actors_pos);
        let random = self.random(raw.random.as_ref(), raw.trials.is_some());
        let preset: Vec<String> = random.iter().map(|r| r.name.clone()).collect();
        let pool_process = raw.pool.process;
        let steps = self.steps(
            raw.steps,
            &actors,
            step_deadline,
            &preset,
            raw.trials.is_some(),
            pool_process,
        );
        let trials = self.trials(
            raw.trials.as_ref(),
            random,
            raw.invariants,
            raw.outcomes,
            &actors,
            &steps,
        );
        let report = self.user_report(raw.report, &name, name_pos, &steps);
        let instance = if self.params.is_empty() {
            name.clone()
        } else {
            format!("{name}[{}]", instance_suffix(self.params))
        };
        if !self.errors.is_empty() {
            return Err(self.errors);
        }
        Ok(Scenario {
            name: instance,
            family: name,
            params: self.params.to_vec(),
            pool_settings,
            server_settings,
            setup,
            teardown,
            name_pos,
            description: raw.description.trim().to_owned(),
            source: raw.source,
            readings_vary: raw.readings_vary.map(|r| r.trim().to_owned()).filter(|r| !r.is_empty()),
            report,
            tags,
            file: self.file.to_owned(),
            pool_max_size,
            pooler_server_connections,
            pool_process,
            actors,
            steps,
            trials,
        })
    }

    /// `report:`: required of a `report-*` file; its tracker and what the
    /// user saw not empty; each alternative of `reproduced_when` names
    /// records of the steps, at least one.
    fn user_report(
        &mut self,
        raw: Option<Spanned<super::user_report::RawUserReport>>,
        name: &str,
        name_pos: Pos,
        steps: &[super::Step],
    ) -> Option<super::user_report::UserReport> {
        let Some(raw) = raw else {
            if name.starts_with("report-") {
                self.err(
                    name_pos,
                    format!("'{name}' re-enacts a user's report (its name starts with 'report-'): give 'report:' with 'tracker', 'saw' and 'reproduced_when'"),
                );
            }
            return None;
        };
        let pos = Pos::of(&raw.referenced);
        let raw = raw.value;
        if raw.tracker.trim().is_empty() || raw.saw.trim().is_empty() {
            self.err(pos, "report: 'tracker' and 'saw' must not be empty");
        }
        let records: Vec<&str> = steps.iter().filter_map(|s| s.record.as_deref()).collect();
        if raw.reproduced_when.value.is_empty() {
            self.err(
                Pos::of(&raw.reproduced_when.referenced),
                "report.reproduced_when: give at least one alternative (a map of record name to reading rule)",
            );
        }
        let mut alternatives = Vec::new();
        for alt in raw.reproduced_when.value {
            let apos = Pos::of(&alt.referenced);
            if alt.value.is_empty() {
                self.err(apos, "report.reproduced_when: an alternative names no record");
            }
            for (record, when) in &alt.value {
                if !records.contains(&record.as_str()) {
                    self.err(
                        apos,
                        format!(
                            "report.reproduced_when: no step records '{record}' (records: {})",
                            records.join(", ")
                        ),
                    );
                }
                if when.is_empty() {
                    self.err(
                        apos,
                        format!("report.reproduced_when: the rule for '{record}' is empty"),
                    );
                }
            }
            alternatives.push(alt.value);
        }
        Some(super::user_report::UserReport {
            tracker: raw.tracker.trim().to_owned(),
            saw: raw.saw.trim().to_owned(),
            reproduced_when: alternatives,
        })
    }

    /// `tags:`: each one of [`super::TAGS`], each once.
    fn tags(&mut self, raw: Vec<Spanned<String>>) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for t in raw {
            let pos = Pos::of(&t.referenced);
            if !super::TAGS.iter().any(|(k, _)| *k == t.value) {
                let known: Vec<&str> = super::TAGS.iter().map(|(k, _)| *k).collect();
                self.err(
                    pos,
                    format!("unknown tag '{}'; known tags: {}", t.value, known.join(", ")),
                );
            } else if out.contains(&t.value) {
                self.err(pos, format!("tag '{}' is listed twice", t.value));
            } else {
                out.push(t.value);
            }
        }
        out
    }

    /// The actors in file order: names, how they connect, their settings.
    fn actors(&mut self, raw: Spanned<IndexMap<String, Spanned<super::raw::RawActor>>>) -> Vec<Actor> {
        let mut actors: Vec<Actor> = Vec::new();
        for (n, a) in raw.value {
            let apos = Pos::of(&a.referenced);
            let a = a.value;
            if a.via == Via::Pool
                && let Some(st) = &a.settings
                && !st.value.is_empty()
            {
                self.err(
                    Pos::of(&st.referenced),
                    format!("actor '{n}': pool actors share the pool's connections; put their settings under 'pool.settings'"),
                );
            }
            if !is_identifier(&n) && !n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
                self.err(
                    apos,
                    format!("actor name '{n}' must use only letters, digits, '-' and '_'"),
                );
            }
            if a.via == Via::Pool && (a.process != Process::Harness || a.network != Network::Loopback) {
                self.err(
                    apos,
                    format!("actor '{n}': 'process' and 'network' apply to direct actors (a pool actor's connection is the pool's; 'pool: {{ process: child }}' puts the pool in a process of its own)"),
                );
            }
            if a.process == Process::Child && a.network == Network::Namespace {
                self.err(
                    apos,
                    format!("actor '{n}': 'process: child' and 'network: namespace' cannot be combined"),
                );
            }
            let settings = self.settings(a.settings, &format!("actors.{n}.settings"));
            actors.push(Actor {
                name: n,
                via: a.via,
                settings,
                process: a.process,
                network: a.network,
            });
        }
        actors
    }

    fn actor_count(&mut self, actors: &[Actor], pos: Pos) {
        if actors.is_empty() {
            self.err(pos, "a scenario needs at least one actor");
        }
        if actors.len() > MAX_ACTORS {
            self.err(
                pos,
                format!("{} actors; at most {MAX_ACTORS} are allowed", actors.len()),
            );
        }
    }

    /// Validates a settings map: names are PostgreSQL parameter names; values
    /// are sent in a connection's startup packet (`-c name=value`), so only
    /// `application_name` may contain spaces.
    pub(super) fn settings(&mut self, m: Option<Spanned<IndexMap<String, Setting>>>, what: &str) -> Settings {
        let Some(m) = m else { return Settings::default() };
        let pos = Pos::of(&m.referenced);
        let mut out = Vec::new();
        for (name, value) in m.value {
            let valid_name = name
                .split('.')
                .all(|part| is_identifier(part) && part.chars().all(|c| !c.is_ascii_uppercase()));
            if !valid_name {
                self.err(
                    pos,
                    format!("{what}: '{name}' is not a PostgreSQL parameter name (lower case, e.g. lock_timeout)"),
                );
                continue;
            }
            if value == Scalar::Null {
                self.err(pos, format!("{what}: '{name}' needs a value"));
                continue;
            }
            let text = value.text();
            if name != "application_name" && text.chars().any(|c| c.is_whitespace() || c == '\\' || c == '\'') {
                self.err(
                    pos,
                    format!("{what}: the value of '{name}' cannot contain spaces, quotes or backslashes"),
                );
                continue;
            }
            out.push((name, text));
        }
        Settings { list: out, pos }
    }

    fn sql_list(&mut self, list: Vec<Spanned<String>>, what: &str) -> Vec<(String, Pos)> {
        let mut out = Vec::new();
        for (i, sql) in list.into_iter().enumerate() {
            if sql.value.trim().is_empty() {
                self.err(Pos::of(&sql.referenced), format!("{what} statement {} is empty", i + 1));
            }
            if !template::names(&sql.value).is_empty() {
                self.err(
                    Pos::of(&sql.referenced),
                    format!(
                        "{what} statement {}: only parameters can be used here, not saved values",
                        i + 1
                    ),
                );
            }
            out.push((sql.value, Pos::of(&sql.referenced)));
        }
        out
    }

    pub(super) fn deadline(&mut self, d: &Spanned<i64>) -> u64 {
        match u64::try_from(d.value) {
            Ok(v) if (1..=MAX_STEP_DEADLINE_MS).contains(&v) => v,
            _ => {
                self.err(
                    Pos::of(&d.referenced),
                    format!(
                        "deadline must be between 1 and {MAX_STEP_DEADLINE_MS} ms, got {}",
                        d.value
                    ),
                );
                DEFAULT_STEP_DEADLINE_MS
            }
        }
    }
}
