//! The table and JSON forms of a judged snapshot.

use std::fmt::Write;

use comfy_table::presets::UTF8_FULL_CONDENSED;
use comfy_table::{ContentArrangement, Table};

use super::age_text;
use super::verdict::{Judged, JudgedLock, Verdict};

/// The table: one row per lock, then a summary line per verdict, what an
/// operator could do about each leaked or stuck lock, and what this role
/// could not see. `width`: the terminal's, if known (columns wrap to it).
pub fn table(j: &Judged, width: Option<u16>) -> String {
    let mut out = String::new();
    let s = &j.snapshot;
    let held = j.judged.iter().filter(|l| l.lock.granted).count();
    let _ = writeln!(
        out,
        "PostgreSQL {} as role {} at {} (query {:.1} ms): {} advisory lock(s), {held} held, {} awaited",
        s.server_version,
        s.role,
        s.taken_at,
        s.query_ms,
        j.judged.len(),
        j.judged.len() - held
    );
    if !j.judged.is_empty() {
        let _ = writeln!(out, "{}", lock_table(j, width));
    }
    for v in Verdict::ALL {
        let of: Vec<&JudgedLock> = j.judged.iter().filter(|l| l.verdict == v).collect();
        let pids: std::collections::BTreeSet<i32> = of.iter().filter_map(|l| l.lock.pid).collect();
        let pids: Vec<String> = pids.iter().map(i32::to_string).collect();
        let detail = if pids.is_empty() {
            String::new()
        } else {
            format!(" (pid {})", pids.join(", "))
        };
        let _ = writeln!(out, "{:<10}{}{detail}", format!("{}:", v.as_str()), of.len());
    }
    let expected: Vec<&JudgedLock> = j.judged.iter().filter(|l| l.verdict == Verdict::Expected).collect();
    if !expected.is_empty() {
        let _ = writeln!(out, "\nExpected (the --keys allow-list):");
        for l in expected {
            let key = l
                .name
                .as_ref()
                .map_or_else(|| l.lock.key.to_string(), |n| format!("{} [{n}]", l.lock.key));
            let _ = writeln!(out, "- pid {}: {key}, {}", l.lock.pid.unwrap_or_default(), l.why);
        }
    }
    actions(&mut out, j);
    if let Some(note) = &j.not_visible {
        let _ = writeln!(out, "\nNot visible: {note}");
    }
    out
}

/// One row per lock, as [`table`] shows them.
fn lock_table(j: &Judged, width: Option<u16>) -> Table {
    let mut t = Table::new();
    t.load_style(UTF8_FULL_CONDENSED);
    match width {
        Some(w) => {
            t.set_content_arrangement(ContentArrangement::Dynamic).set_width(w);
        }
        None => {
            t.set_content_arrangement(ContentArrangement::Disabled);
        }
    }
    let names = j.judged.iter().any(|l| l.name.is_some());
    let mut header = vec!["verdict", "key"];
    if names {
        header.push("name");
    }
    header.extend([
        "mode",
        "granted",
        "database",
        "pid",
        "application",
        "user",
        "client",
        "state (for)",
        "xact age",
        "blocks",
        "blocked by",
        "query",
    ]);
    t.set_header(header);
    for l in &j.judged {
        t.add_row(row(l, names));
    }
    t
}

/// "What an operator could do": one action per session (ending it releases
/// every lock it holds), for the locks with one.
fn actions(out: &mut String, j: &Judged) {
    // One action per session: ending it releases every lock it holds.
    let mut actions: Vec<(i32, Vec<&JudgedLock>)> = Vec::new();
    for l in j.judged.iter().filter(|l| l.terminate.is_some()) {
        let pid = l.lock.pid.unwrap_or_default();
        match actions.iter_mut().find(|(p, _)| *p == pid) {
            Some((_, ls)) => ls.push(l),
            None => actions.push((pid, vec![l])),
        }
    }
    if !actions.is_empty() {
        let _ = writeln!(out, "\nWhat an operator could do (locklab never ends a backend):");
        for (pid, ls) in actions {
            let who = if pid == 0 {
                "a prepared transaction".to_owned()
            } else {
                format!("pid {pid}")
            };
            let first = ls[0];
            let keys: Vec<String> = ls
                .iter()
                .map(|l| match &l.name {
                    Some(n) => format!("{} [{n}]", l.lock.key),
                    None => l.lock.key.to_string(),
                })
                .collect();
            let app = first
                .lock
                .application_name
                .as_deref()
                .filter(|a| !a.is_empty())
                .map_or("no application_name".into(), |a| format!("application_name '{a}'"));
            let _ = writeln!(
                out,
                "- {who} ({app}, user {}) holds advisory lock(s) {}: {}, {}.\n  {}",
                first.lock.user.as_deref().unwrap_or("?"),
                keys.join(", "),
                first.verdict.as_str(),
                first.why,
                first.terminate.as_deref().unwrap_or_default()
            );
        }
    }
}

fn row(l: &JudgedLock, names: bool) -> Vec<String> {
    let k = &l.lock;
    let hidden = || "(not visible)".to_owned();
    let mut r = vec![l.verdict.as_str().to_owned(), k.key.to_string()];
    if names {
        r.push(l.name.clone().unwrap_or_default());
    }
    let state = match (&k.state, k.pid) {
        (_, None) => format!(
            "prepared '{}' ({})",
            k.prepared.as_deref().unwrap_or("?"),
            k.state_s.map(age_text).unwrap_or_default()
        ),
        (Some(s), _) => format!("{s} ({})", k.state_s.map(age_text).unwrap_or_default()),
        (None, _) if !k.visible => hidden(),
        (None, _) => String::new(),
    };
    let xact = if k.visible || k.pid.is_none() {
        k.xact_s.map(age_text).unwrap_or_else(|| "-".into())
    } else {
        hidden()
    };
    let list = |p: &[i32]| {
        p.iter()
            .map(|p| if *p == 0 { "prepared".to_owned() } else { p.to_string() })
            .collect::<Vec<_>>()
            .join(", ")
    };
    r.extend([
        k.mode.as_str().to_owned(),
        if k.granted {
            "held".into()
        } else {
            format!("waits {}", k.wait_s.or(k.state_s).map(age_text).unwrap_or_default())
        },
        k.database.clone().unwrap_or_default(),
        k.pid.map(|p| p.to_string()).unwrap_or_default(),
        k.application_name.clone().unwrap_or_default(),
        k.user.clone().unwrap_or_default(),
        if k.visible {
            k.client_addr.clone().unwrap_or_else(|| "local".into())
        } else {
            hidden()
        },
        state,
        xact,
        list(&k.blocks),
        list(&k.blocked_by),
        if k.visible {
            k.query
                .as_deref()
                .map(|q| q.split_whitespace().collect::<Vec<_>>().join(" "))
                .unwrap_or_default()
        } else {
            hidden()
        },
    ]);
    r
}

/// The JSON form: the snapshot's fields, the thresholds, `locks` (each with
/// `verdict`, `name`, `why`, `terminate`), `not_visible` and `summary`
/// (verdict → count).
pub fn json(j: &Judged) -> String {
    let mut v = serde_json::to_value(j).unwrap_or_default();
    let summary: serde_json::Map<String, serde_json::Value> = Verdict::ALL
        .iter()
        .map(|v| (v.as_str().to_owned(), j.count(*v).into()))
        .collect();
    if let Some(o) = v.as_object_mut() {
        o.insert("summary".into(), summary.into());
    }
    serde_json::to_string_pretty(&v).unwrap_or_default()
}
