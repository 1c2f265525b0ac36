//! Expectations of steps that run SQL, checked against the statement's
//! outcome, and how a value is shown in a report cell.

use locklab_drivers::{DriverError, Rows};

use crate::scenario::{RowsExpect, SqlExpect};

/// Checks an SQL step's outcome against its expectation.
///
/// # Errors
/// A sentence saying what was expected and what happened.
pub fn check_sql(e: &SqlExpect, result: &Result<Rows, DriverError>, elapsed_ms: f64) -> Result<(), String> {
    match (&e.error, result) {
        (Some(code), Err(err)) if err.sqlstate() == Some(code.as_str()) => {
            if let Some(pattern) = &e.message {
                let message = match err {
                    DriverError::Db(db) => db.message.clone(),
                    other => other.to_string(),
                };
                let re = regex::Regex::new(pattern).map_err(|x| x.to_string())?;
                if !re.is_match(&message) {
                    return Err(format!(
                        "SQLSTATE {code} as expected, but its message {message:?} does not match /{pattern}/"
                    ));
                }
            }
        }
        // A driver that hides the SQLSTATE (diesel-async maps all but a few to
        // DatabaseErrorKind::Unknown, diesel-async src/pg/error_helper.rs):
        // the code cannot be checked, the error and its message can.
        (Some(code), Err(DriverError::Db(db))) if db.sqlstate.is_empty() => {
            if let Some(pattern) = &e.message {
                let re = regex::Regex::new(pattern).map_err(|x| x.to_string())?;
                if !re.is_match(&db.message) {
                    return Err(format!(
                        "expected SQLSTATE {code}; the driver gives none, and the message {:?} does not match /{pattern}/",
                        db.message
                    ));
                }
            }
        }
        (Some(code), Err(err)) => return Err(format!("expected SQLSTATE {code}, got {err}")),
        (Some(code), Ok(rows)) => {
            return Err(format!(
                "expected SQLSTATE {code}, but the statement succeeded ({})",
                show_first(rows)
            ));
        }
        (None, Err(err)) => return Err(format!("unexpected error: {err}")),
        (None, Ok(rows)) => check_rows(e, rows)?,
    }
    if let Some(patterns) = &e.notices {
        let got: &[String] = result.as_ref().map(|r| r.notices.as_slice()).unwrap_or(&[]);
        let mut ok = got.len() == patterns.len();
        for (p, n) in patterns.iter().zip(got) {
            ok &= regex::Regex::new(p).map_err(|x| x.to_string())?.is_match(n);
        }
        if !ok {
            let got = if got.is_empty() {
                "none (a pool actor's notices reach the step only where the column's client library passes them \
                 on; a column of your own whose library does not says `notices: false` in its columns file)"
                    .to_owned()
            } else {
                format!("[{}]", got.join(" | "))
            };
            return Err(format!(
                "expected notices [{}], got {got}",
                patterns.iter().map(|p| format!("/{p}/")).collect::<Vec<_>>().join(", "),
            ));
        }
    }
    if let Some(b) = e.elapsed_ms {
        let (min, max) = (b.min.unwrap_or(0.0), b.max.unwrap_or(f64::INFINITY));
        if elapsed_ms < min || elapsed_ms > max {
            return Err(format!("took {elapsed_ms:.1} ms, expected between {min} and {max} ms"));
        }
    }
    Ok(())
}

/// `value` and `rows` of a statement that succeeded.
fn check_rows(e: &SqlExpect, rows: &Rows) -> Result<(), String> {
    if let Some(want) = &e.value {
        match rows.first_value() {
            None => {
                return Err(format!("expected {want}, but the statement returned no row"));
            }
            Some(got) if !want.matches(got) => {
                return Err(format!("expected {want}, got {}", show_first(rows)));
            }
            Some(_) => {}
        }
    }
    match &e.rows {
        Some(RowsExpect::Count(n)) if rows.rows.len() as u64 != *n => {
            return Err(format!("expected {n} row(s), got {}", rows.rows.len()));
        }
        Some(RowsExpect::Exact(want)) => {
            let same = want.len() == rows.rows.len()
                && want
                    .iter()
                    .zip(&rows.rows)
                    .all(|(w, g)| w.len() == g.len() && w.iter().zip(g).all(|(w, g)| w.matches(g.as_deref())));
            if !same {
                let show = |r: &Vec<Option<String>>| {
                    let cells: Vec<String> = r.iter().map(|v| v.as_deref().unwrap_or("NULL").to_owned()).collect();
                    format!("[{}]", cells.join(", "))
                };
                let wanted: Vec<String> = want
                    .iter()
                    .map(|r| format!("[{}]", r.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", ")))
                    .collect();
                let got: Vec<String> = rows.rows.iter().map(show).collect();
                return Err(format!("expected rows {}, got {}", wanted.join(" "), got.join(" ")));
            }
        }
        _ => {}
    }
    Ok(())
}

fn show_first(rows: &Rows) -> String {
    match rows.first_value() {
        None => "no rows".into(),
        Some(None) => "NULL".into(),
        Some(Some(v)) => crate::outcome::Value::of_text(v).to_string(),
    }
}
