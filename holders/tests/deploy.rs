//! The shipped deploy files (`deploy/`): the Grafana dashboard, the Prometheus
//! alerting rules, their unit tests and the example scrape config.
//!
//! - `promtool check rules`, `promtool test rules` and `promtool check config`
//!   pass on them (promtool: `LOCKLAB_PROMTOOL`, else
//!   `.cache/promtool/bin/promtool`, else `promtool` on PATH, else installed
//!   by `harness/scripts/install-promtool.sh` first, unless
//!   `LOCKLAB_NO_INSTALL` is set: then these tests are reported as ignored,
//!   `[needs promtool]`, with the reason on stderr).
//! - Every PromQL expression of the dashboard and the rules names only metrics
//!   the exporter serves, taken from the code (`metrics::encode_for` on a
//!   judged snapshot, and `metrics::EXPORTER_FAMILIES`), and only labels those
//!   metrics carry; any other identifier must be a PromQL function or keyword.
//! - The dashboard is valid JSON with a `${datasource}` Prometheus variable, a
//!   multi-select `target` variable, and a datasource, a target and a
//!   description on every panel; its expressions parse (`promtool check rules`
//!   on them as recording rules).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;

use locklab_core::keys::AdvisoryKey;
use locklab_holders::names::KeyNames;
use locklab_holders::{Lock, Mode, Snapshot, Thresholds, judge, metrics};
use serde_json::Value;

const INSTALL_SCRIPT: &str = "harness/scripts/install-promtool.sh";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

fn deploy(rel: &str) -> PathBuf {
    root().join("deploy").join(rel)
}

fn no_install() -> bool {
    std::env::var("LOCKLAB_NO_INSTALL").is_ok_and(|v| !v.is_empty() && v != "0")
}

fn find_promtool() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("LOCKLAB_PROMTOOL").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        assert!(p.is_file(), "LOCKLAB_PROMTOOL={} is not a file", p.display());
        return Some(p);
    }
    let cached = root().join(".cache/promtool/bin/promtool");
    if cached.is_file() {
        return Some(cached);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("promtool"))
        .find(|p| p.is_file())
}

/// promtool, installed on first use (`main` marks the tests that need it
/// ignored when there is none and `LOCKLAB_NO_INSTALL` forbids installing it).
fn promtool() -> &'static Path {
    static PROMTOOL: OnceLock<PathBuf> = OnceLock::new();
    PROMTOOL.get_or_init(|| {
        if let Some(p) = find_promtool() {
            return p;
        }
        eprintln!("deploy: no promtool found; installing it with {INSTALL_SCRIPT}");
        let status = Command::new("bash")
            .arg(root().join(INSTALL_SCRIPT))
            .status()
            .unwrap_or_else(|e| panic!("cannot run bash {INSTALL_SCRIPT}: {e}"));
        let installed = root().join(".cache/promtool/bin/promtool");
        assert!(
            status.success() && installed.is_file(),
            "{INSTALL_SCRIPT} could not install promtool ({status}; its output is above): run it as root on Debian, \
             set LOCKLAB_PROMTOOL to a promtool binary, or set LOCKLAB_NO_INSTALL=1 to skip these tests"
        );
        installed
    })
}

/// The tests that run promtool.
const NEEDS_PROMTOOL: [&str; 3] = [
    "promtool_checks_and_unit_tests_the_rules",
    "promtool_checks_the_example_config",
    "the_dashboards_expressions_parse",
];

fn main() {
    let args = libtest_mimic::Arguments::from_args();
    let trial = |name: &str, f: fn()| {
        libtest_mimic::Trial::test(name, move || {
            f();
            Ok(())
        })
    };
    let mut trials = vec![
        trial(
            "promtool_checks_and_unit_tests_the_rules",
            promtool_checks_and_unit_tests_the_rules,
        ),
        trial("promtool_checks_the_example_config", promtool_checks_the_example_config),
        trial("the_dashboards_expressions_parse", the_dashboards_expressions_parse),
        trial(
            "the_lexer_sees_metrics_functions_and_labels",
            the_lexer_sees_metrics_functions_and_labels,
        ),
        trial(
            "the_dashboard_uses_only_what_the_exporter_serves",
            the_dashboard_uses_only_what_the_exporter_serves,
        ),
        trial(
            "the_rules_and_their_tests_use_only_what_the_exporter_serves",
            the_rules_and_their_tests_use_only_what_the_exporter_serves,
        ),
    ];
    if find_promtool().is_none() && no_install() {
        eprintln!(
            "{} test(s) ignored, needs promtool: none found (LOCKLAB_PROMTOOL, .cache/promtool/bin/promtool, PATH), \
             and LOCKLAB_NO_INSTALL forbids running {INSTALL_SCRIPT}",
            NEEDS_PROMTOOL.len()
        );
        trials = trials
            .into_iter()
            .map(|t| match NEEDS_PROMTOOL.contains(&t.name()) {
                true => t.with_ignored_flag(true).with_kind("needs promtool"),
                false => t,
            })
            .collect();
    }
    libtest_mimic::run(&args, trials).exit();
}

/// Runs promtool in `deploy/prometheus` (the files name each other relative to
/// it) and asserts that it succeeds (its output in the failure).
fn run_promtool(promtool: &Path, args: &[&str], dir: &Path) -> Output {
    let out = Command::new(promtool)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", promtool.display()));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "`promtool {}` in {} failed ({}):\n{text}",
        args.join(" "),
        dir.display(),
        out.status
    );
    out
}

fn promtool_checks_and_unit_tests_the_rules() {
    let promtool = promtool();
    let dir = deploy("prometheus");
    run_promtool(promtool, &["check", "rules", "locklab-holders.rules.yml"], &dir);
    let out = run_promtool(promtool, &["test", "rules", "locklab-holders.rules.test.yml"], &dir);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("SUCCESS"),
        "promtool test rules did not say SUCCESS"
    );
}

fn promtool_checks_the_example_config() {
    let promtool = promtool();
    let out = run_promtool(
        promtool,
        &["check", "config", "prometheus.example.yml"],
        &deploy("prometheus"),
    );
    // The config names the rules file, and promtool read it.
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("1 rule files found"), "{text}");
}

fn the_dashboards_expressions_parse() {
    let promtool = promtool();
    // As recording rules, with the variables given a value.
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (panel, expr) in dashboard_exprs() {
        let expr = expr
            .replace("$__rate_interval", "5m")
            .replace("${target}", ".*")
            .replace("$target", ".*");
        rules.push_str(&format!(
            "      - record: dashboard:{}\n        expr: {}\n",
            panel.to_lowercase().replace(|c: char| !c.is_ascii_alphanumeric(), "_"),
            serde_json::to_string(&expr).unwrap()
        ));
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("dashboard.rules.yml"), &rules).unwrap();
    run_promtool(promtool, &["check", "rules", "dashboard.rules.yml"], dir.path());
}

/// The families a probe serves, from the code: name → label names.
fn served() -> &'static BTreeMap<String, Option<BTreeSet<String>>> {
    static SERVED: OnceLock<BTreeMap<String, Option<BTreeSet<String>>>> = OnceLock::new();
    SERVED.get_or_init(|| {
        let lock = |key: i64, granted: bool, state: &str, state_s: f64, wait_s: Option<f64>, pid: i32| Lock {
            key: AdvisoryKey::Big(key),
            mode: Mode::Exclusive,
            granted,
            database: Some("orders".into()),
            pid: Some(pid),
            application_name: Some("billing-worker".into()),
            user: Some("app".into()),
            client_addr: Some("10.0.0.7".into()),
            state: Some(state.into()),
            state_s: Some(state_s),
            xact_s: (state != "idle").then_some(state_s),
            wait_s,
            query: Some("select pg_advisory_lock(42)".into()),
            visible: true,
            blocked_by: if granted { vec![] } else { vec![101] },
            blocks: if granted && key == 42 { vec![102] } else { vec![] },
            prepared: None,
        };
        let snapshot = Snapshot {
            taken_at: "2026-12-01T12:00:00Z".into(),
            server_version: "17.6".into(),
            role: "monitor".into(),
            sees_all_sessions: true,
            query_ms: 1.0,
            locks: vec![
                // Held by a session idle for 100 s: leaked.
                lock(42, true, "idle", 100.0, None, 101),
                // Waiting for it for 20 s: waiting.
                lock(42, false, "active", 20.0, Some(20.0), 102),
                // Held by an active session: ok.
                lock(7, true, "active", 1.0, None, 103),
            ],
        };
        let judged = judge(
            snapshot,
            Thresholds {
                idle_after: Duration::from_secs(60),
                wait_after: Duration::from_secs(10),
            },
            &KeyNames::default(),
        );
        assert_eq!(judged.count(locklab_holders::Verdict::Leaked), 1);
        assert_eq!(judged.count(locklab_holders::Verdict::Waiting), 1);
        let text = metrics::encode_for(Ok(&judged), Duration::from_millis(5), Some("t"));
        let mut families: BTreeMap<String, Option<BTreeSet<String>>> = BTreeMap::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let name = rest.split_whitespace().next().unwrap();
                families.insert(name.to_owned(), Some(BTreeSet::new()));
            } else if !line.starts_with('#') && !line.is_empty() {
                // name{a="x",b="y"} value
                let (name, rest) = line.split_at(line.find(['{', ' ']).unwrap());
                let labels = families
                    .get_mut(name)
                    .and_then(Option::as_mut)
                    .unwrap_or_else(|| panic!("a sample of no # TYPE family: {line}"));
                if let Some(inner) = rest.strip_prefix('{') {
                    for pair in inner[..inner.rfind('}').unwrap()].split("\",") {
                        labels.insert(pair.split('=').next().unwrap().to_owned());
                    }
                }
            }
        }
        // Every probe series carries `target`.
        for (name, labels) in &families {
            assert!(
                labels.as_ref().unwrap().contains("target"),
                "{name} has no target label:\n{text}"
            );
        }
        assert!(families.len() >= 9, "too few families served:\n{text}");
        // The exporter's own /metrics: names from the code; their labels are
        // not checked (only its documentation lists them).
        for name in metrics::EXPORTER_FAMILIES {
            families.insert((*name).to_owned(), None);
        }
        families
    })
}

/// PromQL's functions, aggregations and keywords (Prometheus 2.x/3.x).
const PROMQL_WORDS: &[&str] = &[
    // aggregation operators
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
    // keywords
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "atan2",
    "inf",
    "nan",
    // functions
    "abs",
    "absent",
    "absent_over_time",
    "ceil",
    "changes",
    "clamp",
    "clamp_max",
    "clamp_min",
    "day_of_month",
    "day_of_week",
    "day_of_year",
    "days_in_month",
    "delta",
    "deriv",
    "exp",
    "floor",
    "histogram_avg",
    "histogram_count",
    "histogram_fraction",
    "histogram_quantile",
    "histogram_stddev",
    "histogram_stdvar",
    "histogram_sum",
    "holt_winters",
    "double_exponential_smoothing",
    "hour",
    "idelta",
    "increase",
    "irate",
    "label_join",
    "label_replace",
    "ln",
    "log2",
    "log10",
    "minute",
    "month",
    "predict_linear",
    "rate",
    "resets",
    "round",
    "scalar",
    "sgn",
    "sort",
    "sort_desc",
    "sort_by_label",
    "sort_by_label_desc",
    "sqrt",
    "time",
    "timestamp",
    "vector",
    "year",
    "avg_over_time",
    "min_over_time",
    "max_over_time",
    "sum_over_time",
    "count_over_time",
    "quantile_over_time",
    "stddev_over_time",
    "stdvar_over_time",
    "last_over_time",
    "present_over_time",
    "mad_over_time",
    "acos",
    "acosh",
    "asin",
    "asinh",
    "atan",
    "atanh",
    "cos",
    "cosh",
    "sin",
    "sinh",
    "tan",
    "tanh",
    "deg",
    "rad",
    "pi",
];

/// The words of a PromQL expression: metric names and functions/keywords
/// (`words`), and the label names it uses (in `{…}` matchers and in
/// `by`/`without`/`on`/`ignoring`/`group_*` lists). Strings and durations are
/// skipped.
fn lex(expr: &str) -> (Vec<String>, Vec<String>) {
    let chars: Vec<char> = expr.chars().collect();
    let (mut words, mut labels) = (Vec::new(), Vec::new());
    let mut i = 0;
    // Inside `{…}` or a label list after a grouping keyword.
    let mut in_braces = false;
    let mut label_list = false;
    let mut after_grouping = false;
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' || c == '`' {
            i += 1;
            while i < chars.len() && chars[i] != c {
                if chars[i] == '\\' && c != '`' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
        } else if c == '[' {
            while i < chars.len() && chars[i] != ']' {
                i += 1;
            }
            i += 1;
        } else if c == '{' {
            in_braces = true;
            i += 1;
        } else if c == '}' {
            in_braces = false;
            i += 1;
        } else if c == '(' {
            label_list = after_grouping;
            after_grouping = false;
            i += 1;
        } else if c == ')' {
            label_list = false;
            i += 1;
        } else if c.is_ascii_digit() || c == '.' {
            // A number or a duration (5m, 1e3, 0x1f).
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            if in_braces || label_list {
                labels.push(word);
            } else {
                after_grouping = matches!(
                    word.as_str(),
                    "by" | "without" | "on" | "ignoring" | "group_left" | "group_right"
                );
                words.push(word);
            }
        } else if c == '$' {
            // A Grafana variable outside a string ($__rate_interval in a range is skipped above).
            i += 1;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
        } else {
            if !c.is_whitespace() && c != ',' {
                after_grouping = false;
            }
            i += 1;
        }
    }
    (words, labels)
}

/// What is wrong with `expr`'s names: unknown identifiers, metrics the
/// exporter does not serve, labels its metrics do not carry.
fn check_expr(expr: &str) -> Vec<String> {
    let served = served();
    let (words, labels) = lex(expr);
    let mut problems = Vec::new();
    let mut metrics_used = Vec::new();
    for w in &words {
        if PROMQL_WORDS.contains(&w.as_str()) {
            continue;
        }
        if served.contains_key(w) {
            metrics_used.push(w);
        } else if w.starts_with("locklab_") {
            problems.push(format!("`{w}` is not a metric the exporter serves"));
        } else {
            problems.push(format!(
                "`{w}` is neither a served metric nor a PromQL function or keyword"
            ));
        }
    }
    if metrics_used.is_empty() {
        problems.push("no metric of the exporter".into());
    }
    // Labels: known when every metric used is a probe family.
    let known: Option<BTreeSet<&String>> = metrics_used
        .iter()
        .map(|m| served[*m].as_ref())
        .collect::<Option<Vec<_>>>()
        .map(|sets| sets.into_iter().flatten().collect());
    if let Some(known) = known {
        for l in labels {
            // Prometheus adds job and instance to every scraped series.
            if !["__name__", "job", "instance"].contains(&l.as_str()) && !known.contains(&l) {
                problems.push(format!("label `{l}` is on none of {metrics_used:?}"));
            }
        }
    }
    problems
}

fn dashboard() -> Value {
    let path = deploy("grafana/locklab-holders.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not valid JSON: {e}", path.display()))
}

/// (panel title, expression) for every query of every panel.
fn dashboard_exprs() -> Vec<(String, String)> {
    let d = dashboard();
    let mut out = Vec::new();
    for p in d["panels"].as_array().expect("panels") {
        for t in p["targets"].as_array().into_iter().flatten() {
            out.push((
                p["title"].as_str().unwrap_or("?").to_owned(),
                t["expr"].as_str().unwrap_or_default().to_owned(),
            ));
        }
    }
    out
}

fn the_lexer_sees_metrics_functions_and_labels() {
    let (words, labels) = lex(
        r#"sum by (target, result) (rate(locklab_exporter_probes_total{target=~"$target", result="failure"}[5m])) > 0.5"#,
    );
    assert_eq!(words, ["sum", "by", "rate", "locklab_exporter_probes_total"]);
    assert_eq!(labels, ["target", "result", "target", "result"]);
    assert!(check_expr("locklab_up == 0").is_empty());
    assert!(check_expr("locklab_advisory_oldest_waiter_seconds{target=\"x\"} > 300").is_empty());
    // A misspelt metric, a metric of another exporter, a label no metric has.
    let has = |expr: &str, problem: &str| {
        let found = check_expr(expr);
        assert!(found.iter().any(|p| p.contains(problem)), "{expr}: {found:?}");
    };
    has(
        "locklab_advisory_leaked > 0",
        "`locklab_advisory_leaked` is not a metric the exporter serves",
    );
    has("pg_locks_count > 0", "`pg_locks_count` is neither a served metric");
    has(
        "sum by (verdict) (locklab_advisory_waiters)",
        "label `verdict` is on none of",
    );
    has("locklab_up{verdict=\"ok\"}", "label `verdict` is on none of");
}

fn the_dashboard_uses_only_what_the_exporter_serves() {
    let d = dashboard();
    assert!(d["schemaVersion"].as_u64().expect("schemaVersion") >= 39);
    let vars = d["templating"]["list"].as_array().expect("templating.list");
    let var = |name: &str| {
        vars.iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no template variable {name}"))
    };
    let ds = var("datasource");
    assert_eq!(ds["type"], "datasource");
    assert_eq!(ds["query"], "prometheus");
    let target = var("target");
    assert_eq!(target["type"], "query");
    assert_eq!(target["multi"], true);
    assert_eq!(target["includeAll"], true);
    let query = target["query"]["query"]
        .as_str()
        .or(target["query"].as_str())
        .unwrap_or_default();
    assert_eq!(query, "label_values(locklab_up, target)");
    assert_eq!(target["datasource"]["uid"], "${datasource}");

    let panels = d["panels"].as_array().expect("panels");
    assert!(panels.len() >= 10, "only {} panels", panels.len());
    let mut problems = Vec::new();
    let mut ids = BTreeSet::new();
    for p in panels {
        let title = p["title"].as_str().unwrap_or("(untitled)");
        if !ids.insert(p["id"].as_u64()) {
            problems.push(format!("{title}: id {} used twice", p["id"]));
        }
        if p["datasource"]["uid"] != "${datasource}" || p["datasource"]["type"] != "prometheus" {
            problems.push(format!(
                "{title}: datasource is not the ${{datasource}} Prometheus variable"
            ));
        }
        if p["description"].as_str().is_none_or(|s| s.len() < 40) {
            problems.push(format!("{title}: no description telling the operator what to do"));
        }
        let targets = p["targets"].as_array().cloned().unwrap_or_default();
        if targets.is_empty() {
            problems.push(format!("{title}: no target"));
        }
        for t in targets {
            if t["datasource"]["uid"] != "${datasource}" {
                problems.push(format!("{title}: a query's datasource is not ${{datasource}}"));
            }
            let expr = t["expr"].as_str().unwrap_or_default();
            if !expr.contains("$target") {
                problems.push(format!("{title}: `{expr}` ignores the target variable"));
            }
            problems.extend(check_expr(expr).into_iter().map(|e| format!("{title}: `{expr}`: {e}")));
        }
    }
    // The metrics the brief asks for each have a panel.
    let exprs: String = dashboard_exprs().into_iter().map(|(_, e)| e).collect();
    for m in [
        "locklab_up",
        "locklab_advisory_leaked_locks",
        "locklab_advisory_stuck_locks",
        "locklab_advisory_waiters",
        "locklab_advisory_verdict_locks",
        "locklab_advisory_oldest_idle_holder_seconds",
        "locklab_advisory_oldest_waiter_seconds",
        "locklab_advisory_locks",
        "locklab_snapshot_duration_seconds",
        "locklab_exporter_probes_total",
    ] {
        if !exprs.contains(m) {
            problems.push(format!("no panel shows {m}"));
        }
    }
    assert!(problems.is_empty(), "the dashboard:\n{}", problems.join("\n"));
}

fn the_rules_and_their_tests_use_only_what_the_exporter_serves() {
    let path = deploy("prometheus/locklab-holders.rules.yml");
    let text = std::fs::read_to_string(&path).unwrap();
    let rules: Value = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut problems = Vec::new();
    let mut alerts = BTreeSet::new();
    for group in rules["groups"].as_array().expect("groups") {
        for rule in group["rules"].as_array().expect("rules") {
            let name = rule["alert"].as_str().expect("an alerting rule");
            alerts.insert(name.to_owned());
            let expr = rule["expr"].as_str().expect("expr");
            problems.extend(check_expr(expr).into_iter().map(|e| format!("{name}: `{expr}`: {e}")));
            if rule["labels"]["severity"].as_str().is_none() {
                problems.push(format!("{name}: no severity label"));
            }
            for a in ["summary", "description"] {
                let text = rule["annotations"][a].as_str().unwrap_or_default();
                if !text.contains("{{ $labels.target }}") {
                    problems.push(format!("{name}: its {a} does not name the target"));
                }
            }
            if !rule["annotations"]["description"]
                .as_str()
                .unwrap_or_default()
                .contains("docs/src/operators.md")
            {
                problems.push(format!("{name}: its description does not point at the book"));
            }
        }
    }
    assert_eq!(
        alerts,
        BTreeSet::from(
            [
                "LocklabTargetDown",
                "LocklabAdvisoryLockLeaked",
                "LocklabTransactionStuck",
                "LocklabAdvisoryWaiterOld"
            ]
            .map(String::from)
        )
    );

    // The unit tests' series are served metrics, and every alert is tested.
    let path = deploy("prometheus/locklab-holders.rules.test.yml");
    let tests: Value = serde_saphyr::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut tested = BTreeSet::new();
    for t in tests["tests"].as_array().expect("tests") {
        for s in t["input_series"].as_array().expect("input_series") {
            let series = s["series"].as_str().expect("series");
            problems.extend(
                check_expr(series)
                    .into_iter()
                    .map(|e| format!("test series `{series}`: {e}")),
            );
        }
        for a in t["alert_rule_test"].as_array().expect("alert_rule_test") {
            if a["exp_alerts"].as_array().is_some_and(|x| !x.is_empty()) {
                tested.insert(a["alertname"].as_str().unwrap().to_owned());
            }
        }
    }
    assert_eq!(tested, alerts, "alerts with a test that fires them");
    assert!(problems.is_empty(), "the rules:\n{}", problems.join("\n"));
}
