//! The load report's files: `load.json` (the [`LoadReport`]), `load.md`
//! (the tables) and one SVG chart per key count of the curves
//! (`curve-keys-K.svg`, drawn with plotters' SVG backend).

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use plotters::prelude::*;

use super::LoadResult;
use super::suite::{CURVE_KEYS, CURVE_WORKERS, LoadReport};

/// Writes `load.json`, `load.md` and the charts into `dir` (made if missing).
///
/// # Errors
/// A file cannot be written, or a chart cannot be drawn.
pub fn write(report: &LoadReport, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot make {}", dir.display()))?;
    let json = serde_json::to_string_pretty(report)?;
    std::fs::write(dir.join("load.json"), json + "\n").context("cannot write load.json")?;
    for keys in CURVE_KEYS {
        let svg = chart(report, keys).map_err(|e| anyhow::anyhow!("cannot draw the curve of {keys} keys: {e}"))?;
        std::fs::write(dir.join(format!("curve-keys-{keys}.svg")), svg).context("cannot write a chart")?;
    }
    std::fs::write(dir.join("load.md"), markdown(report)).context("cannot write load.md")?;
    Ok(())
}

/// The mean throughput of `client`'s runs at `at`'s point (pattern,
/// workers, keys), if it ran there (pgbench runs twice per point).
fn mean_throughput(client: &str, at: &LoadResult, all: &[LoadResult]) -> Option<f64> {
    let runs: Vec<f64> = all
        .iter()
        .filter(|p| {
            p.client == client
                && p.spec.pattern == at.spec.pattern
                && p.spec.workers == at.spec.workers
                && p.spec.keys == at.spec.keys
        })
        .map(|p| p.throughput)
        .collect();
    (!runs.is_empty()).then(|| runs.iter().sum::<f64>() / runs.len() as f64)
}

/// The ratio of `r`'s throughput to pgbench's mean at the same point, if
/// pgbench ran there.
fn ratio(r: &LoadResult, all: &[LoadResult]) -> Option<f64> {
    let p = mean_throughput("pgbench", r, all)?;
    (p > 0.0).then(|| r.throughput / p)
}

/// The curve of `keys` keys: its points, and its clients in first-run order.
fn curve(report: &LoadReport, keys: u32) -> (Vec<&LoadResult>, Vec<&str>) {
    let points: Vec<&LoadResult> = report.curves.iter().filter(|r| r.spec.keys == keys).collect();
    let mut clients: Vec<&str> = Vec::new();
    for p in &points {
        if !clients.contains(&p.client.as_str()) {
            clients.push(&p.client);
        }
    }
    (points, clients)
}

fn opt(n: Option<u64>) -> String {
    n.map_or("–".into(), |n| n.to_string())
}

/// `load.md`.
pub fn markdown(report: &LoadReport) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# locklab load report\n");
    let _ = writeln!(
        md,
        "{} · written {}{} · regenerate with `just load` (see docs/src/load.md).\n",
        report.server,
        report.written_at,
        report.commit.as_ref().map_or(String::new(), |c| format!(" at {c}"))
    );
    let _ = writeln!(
        md,
        "Each run: W workers, each picking a key uniformly in 1..=K and running one critical section on it \
         (a read-modify-write of the key's counter row that breaks without the lock), through the pool under test \
         (pool size W; tokio-postgres: one connection per worker) or pgbench with the same SQL and W clients, \
         on one local cluster of the run's own. Every section is recorded on the server and checked afterwards: \
         overlaps (two sections on one key at once), lost updates (a counter short of its sections), double claims \
         (the queue). Latency is per attempt (checkout to return), client clock. pgbench runs before and after the \
         drivers of each point, and each ratio is to the mean of its two runs: how far those two differ shows \
         how much the shared machine moved in between (the curves show means).\n"
    );
    let _ = writeln!(md, "## Throughput next to pgbench (xact-wait, 1,000 keys)\n");
    table(&mut md, &report.headline, &report.headline);
    let _ = writeln!(
        md,
        "\n## Patterns (8 workers, 10 keys; the wrong one: 1 key, 1 ms of work in each section)\n"
    );
    table(&mut md, &report.patterns, &report.patterns);
    for r in report.patterns.iter().filter(|r| !r.spec.pattern.is_right()) {
        match r.mutual_exclusion.evidence.first() {
            Some(o) => {
                let _ = writeln!(
                    md,
                    "\n{} × {} (wrong on purpose): {} overlapping sections in {}, e.g. {o} (server clock).",
                    r.client,
                    r.spec.pattern.name(),
                    r.mutual_exclusion.violations,
                    r.sections
                );
            }
            None => {
                let _ = writeln!(
                    md,
                    "\n{} × {} (wrong on purpose): no overlap seen in {} sections ({} lock timeouts).",
                    r.client,
                    r.spec.pattern.name(),
                    r.sections,
                    r.counts.timeouts
                );
            }
        }
    }
    curves(&mut md, report);
    let bad: Vec<&LoadResult> = report
        .headline
        .iter()
        .chain(&report.patterns)
        .chain(&report.curves)
        .filter(|r| r.spec.pattern.is_right() && r.violations() > 0)
        .collect();
    let _ = writeln!(
        md,
        "Right patterns with a violation: {}.",
        if bad.is_empty() {
            "none".to_owned()
        } else {
            bad.iter()
                .map(|r| format!("{} × {} × {} workers", r.client, r.spec.pattern.name(), r.spec.workers))
                .collect::<Vec<_>>()
                .join(", ")
        }
    );
    md
}

/// The contention curves' section: per number of keys, a chart and a table
/// of sections per second (with the ratio to pgbench) by workers.
fn curves(md: &mut String, report: &LoadReport) {
    let _ = writeln!(md, "\n## Contention curves (xact-wait, sections per second)\n");
    for keys in CURVE_KEYS {
        let (points, clients) = curve(report, keys);
        let _ = writeln!(
            md,
            "### {keys} key(s)\n\n![sections per second, {keys} key(s)](curve-keys-{keys}.svg)\n"
        );
        let _ = writeln!(md, "| workers | {} |", clients.join(" | "));
        let _ = writeln!(md, "|---:|{}", "---:|".repeat(clients.len()));
        for w in CURVE_WORKERS {
            let cells: Vec<String> = clients
                .iter()
                .map(|c| {
                    points
                        .iter()
                        .find(|p| p.client == *c && p.spec.workers == w)
                        .map_or("–".into(), |p| {
                            let mean = mean_throughput(c, p, &report.curves).unwrap_or(p.throughput);
                            match ratio(p, &report.curves) {
                                Some(x) if p.client != "pgbench" => format!("{mean:.0} ({x:.2}×)"),
                                _ => format!("{mean:.0}"),
                            }
                        })
                })
                .collect();
            let _ = writeln!(md, "| {w} | {} |", cells.join(" | "));
        }
        let _ = writeln!(md);
    }
}

fn table(md: &mut String, rows: &[LoadResult], all: &[LoadResult]) {
    let _ = writeln!(
        md,
        "| client | pattern | workers | keys | sections/s | × pgbench | p50 ms | p95 ms | p99 ms | lock waits | busy | timeouts | errors | overlaps | lost updates | double claims |"
    );
    let _ = writeln!(
        md,
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for r in rows {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {:.0} | {} | {:.2} | {:.2} | {:.2} | {} | {} | {} | {} | {} | {} | {} |",
            r.client,
            r.spec.pattern.name(),
            r.spec.workers,
            r.spec.keys,
            r.throughput,
            ratio(r, all).map_or("–".into(), |x| format!("{x:.2}")),
            r.latency_ms.p50,
            r.latency_ms.p95,
            r.latency_ms.p99,
            opt(r.lock_waits),
            r.counts.busy,
            r.counts.timeouts,
            r.counts.errors,
            r.mutual_exclusion.violations,
            r.lost_updates.violations,
            opt(r.double_claims.as_ref().map(|v| v.violations)),
        );
    }
}

/// The curve of `keys` keys: sections per second against workers (one
/// line per client). Returns the SVG document.
///
/// # Errors
/// A drawing error from plotters (not expected for finite values).
pub fn chart(report: &LoadReport, keys: u32) -> Result<String, String> {
    std::panic::catch_unwind(|| draw(report, keys)).unwrap_or_else(|_| Err("the chart library panicked".to_owned()))
}

fn draw(report: &LoadReport, keys: u32) -> Result<String, String> {
    let (points, clients) = curve(report, keys);
    let top = points.iter().map(|p| p.throughput).fold(0.0_f64, f64::max).max(1.0) * 1.1;
    let last = (CURVE_WORKERS.len() - 1) as f64;
    let index = |w: u32| CURVE_WORKERS.iter().position(|x| *x == w).unwrap_or(0) as f64;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (640, 360)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut chart = ChartBuilder::on(&root)
            .caption(format!("xact-wait, {keys} key(s)"), ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(36)
            .y_label_area_size(64)
            .build_cartesian_2d(-0.2..last + 0.2, 0.0..top)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_labels(CURVE_WORKERS.len())
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() < 0.01 && i >= 0.0 {
                    CURVE_WORKERS.get(i as usize).map_or(String::new(), |w| w.to_string())
                } else {
                    String::new()
                }
            })
            .x_desc("workers")
            .y_desc("sections/s")
            .draw()
            .map_err(|e| e.to_string())?;
        for (i, c) in clients.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            let mut line: Vec<(f64, f64)> = Vec::new();
            for p in points.iter().filter(|p| p.client == *c) {
                let x = index(p.spec.workers);
                if !line.iter().any(|(lx, _)| *lx == x) {
                    line.push((x, mean_throughput(c, p, &report.curves).unwrap_or(p.throughput)));
                }
            }
            chart
                .draw_series(std::iter::once(PathElement::new(line.clone(), color.stroke_width(2))))
                .map_err(|e| e.to_string())?
                .label(*c)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2)));
            chart
                .draw_series(line.into_iter().map(|pt| Circle::new(pt, 3, color.filled())))
                .map_err(|e| e.to_string())?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed load report reads back and renders: its tables and one
    /// chart per key count.
    #[test]
    fn committed_load_report_renders() {
        let path = crate::server::workspace_root().join("reports/load/load.json");
        let text = std::fs::read_to_string(&path).expect("reports/load/load.json");
        let report: LoadReport = serde_json::from_str(&text).expect("a LoadReport");
        let md = markdown(&report);
        assert!(
            md.contains("## Contention curves") && md.contains("| pgbench | xact-wait | 8 | 1000 |"),
            "{md}"
        );
        for keys in CURVE_KEYS {
            assert!(chart(&report, keys).expect("chart").starts_with("<svg"));
        }
    }
}
