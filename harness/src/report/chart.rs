//! Inline SVG timing charts for `index.html`, drawn with plotters' SVG backend.

use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;

use crate::outcome::Stats;

/// Width of a chart in CSS px.
const WIDTH: u32 = 760;
/// Height of one column's row in px.
const ROW: u32 = 18;

/// A dot-and-whisker chart of one timing per column: a line from min to max,
/// a dot at p50 and a triangle at p95 (ms on the x axis, one row per
/// `(label, stats)`, top to bottom). Returns the `<svg>` element.
///
/// # Errors
/// A drawing error from plotters (not expected for finite values).
pub fn timing_chart(rows: &[(String, Stats)]) -> Result<String, String> {
    // A panic inside the plotting library must not take the report down.
    std::panic::catch_unwind(|| draw(rows))
        .unwrap_or_else(|_| Err("the chart library panicked".to_owned()))
        .map(compact)
}

/// plotters' SVG with what it writes on every element and SVG says anyway
/// left out: `opacity="1"`, `stroke-width="1"`, black text fill, the font
/// family (said once, on the `<svg>` element, and inherited), and font sizes
/// to 0.1 px. The drawing is the same; the page is lighter (143 charts were
/// 2.6 MB of the 6.2 MB report).
fn compact(svg: String) -> String {
    static FONT_SIZE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    static TEXT_FILL: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let font_size = FONT_SIZE.get_or_init(|| regex::Regex::new(r#"font-size="(\d+\.\d)\d+""#).expect("a valid regex"));
    let text_fill =
        TEXT_FILL.get_or_init(|| regex::Regex::new(r##"(<text[^>]*?) fill="#000000""##).expect("a valid regex"));
    let svg = svg
        .replace(" opacity=\"1\"", "")
        .replace(" stroke-width=\"1\"", "")
        .replace(" font-family=\"sans-serif\"", "")
        .replacen("<svg ", "<svg font-family=\"sans-serif\" ", 1);
    let svg = font_size.replace_all(&svg, r#"font-size="$1""#);
    text_fill.replace_all(&svg, "$1").into_owned()
}

fn draw(rows: &[(String, Stats)]) -> Result<String, String> {
    let n = rows.len() as u32;
    let height = 46 + ROW * n.max(1);
    let top = rows.iter().map(|(_, s)| s.max).fold(0.0_f64, f64::max).max(1.0) * 1.08;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut chart = ChartBuilder::on(&root)
            .margin(6)
            .x_label_area_size(26)
            .y_label_area_size(210)
            .build_cartesian_2d(0.0..top, (0..n as i32).into_segmented())
            .map_err(|e| e.to_string())?;
        let labels: Vec<&str> = rows.iter().map(|(l, _)| l.as_str()).collect();
        draw_mesh(&mut chart, &labels, "ms")?;
        // The first row at the top.
        let at = |i: usize| SegmentValue::CenterOf(n as i32 - 1 - i as i32);
        chart
            .draw_series(
                rows.iter()
                    .enumerate()
                    .map(|(i, (_, s))| PathElement::new(vec![(s.min, at(i)), (s.max, at(i))], BLACK.stroke_width(1))),
            )
            .map_err(|e| e.to_string())?;
        chart
            .draw_series(
                rows.iter()
                    .enumerate()
                    .map(|(i, (_, s))| Circle::new((s.p50, at(i)), 4, BLUE.filled())),
            )
            .map_err(|e| e.to_string())?;
        chart
            .draw_series(
                rows.iter()
                    .enumerate()
                    .filter(|(_, (_, s))| s.n > 1)
                    .map(|(i, (_, s))| TriangleMarker::new((s.p95, at(i)), 4, RED.filled())),
            )
            .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

/// The axes of a chart with one row per label (the first at the top) and
/// `x_desc` under the x axis.
fn draw_mesh<DB: DrawingBackend>(
    chart: &mut ChartContext<
        '_,
        DB,
        Cartesian2d<
            plotters::coord::types::RangedCoordf64,
            plotters::coord::ranged1d::SegmentedCoord<plotters::coord::types::RangedCoordi32>,
        >,
    >,
    labels: &[&str],
    x_desc: &str,
) -> Result<(), String> {
    let n = labels.len() as i32;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .light_line_style(TRANSPARENT)
        .x_desc(x_desc)
        // One more than the rows: plotters' integer key points loop forever
        // (overflow) when asked for fewer than two.
        .y_labels(labels.len() + 1)
        .y_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => (n - 1 - *i)
                .try_into()
                .ok()
                .and_then(|i: usize| labels.get(i))
                .map(|s| (*s).to_owned())
                .unwrap_or_default(),
            SegmentValue::Last => String::new(),
        })
        .label_style(("sans-serif", 12))
        .draw()
        .map_err(|e| e.to_string())
}

/// Colours of the outcomes of a distribution chart, in legend order.
const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// A stacked bar per column: each outcome's share of the trials (0–100 % on
/// the x axis, one row per `(label, outcome → count)`, top to bottom; the
/// outcomes in a legend, the ninth and later ones grey). Returns the `<svg>`.
///
/// # Errors
/// A drawing error from plotters.
pub fn distribution_chart(rows: &[(String, std::collections::BTreeMap<String, u64>)]) -> Result<String, String> {
    std::panic::catch_unwind(|| draw_distribution(rows))
        .unwrap_or_else(|_| Err("the chart library panicked".to_owned()))
        .map(compact)
}

fn draw_distribution(rows: &[(String, std::collections::BTreeMap<String, u64>)]) -> Result<String, String> {
    let mut outcomes: Vec<&String> = Vec::new();
    for (_, d) in rows {
        for k in d.keys() {
            if !outcomes.contains(&k) {
                outcomes.push(k);
            }
        }
    }
    let color = |k: &String| {
        outcomes
            .iter()
            .position(|o| *o == k)
            .and_then(|i| PALETTE.get(i).copied())
            .unwrap_or(RGBColor(190, 190, 190))
    };
    let n = rows.len() as u32;
    let height = 60 + ROW * n.max(1) + 16 * outcomes.len().min(PALETTE.len()) as u32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut chart = ChartBuilder::on(&root)
            .margin(6)
            .x_label_area_size(26)
            .y_label_area_size(210)
            .build_cartesian_2d(0.0..100.0, (0..n as i32).into_segmented())
            .map_err(|e| e.to_string())?;
        let labels: Vec<&str> = rows.iter().map(|(l, _)| l.as_str()).collect();
        draw_mesh(&mut chart, &labels, "% of trials")?;
        for (i, (_, d)) in rows.iter().enumerate() {
            let total: u64 = d.values().sum();
            let row = n as i32 - 1 - i as i32;
            let mut from = 0.0;
            for k in &outcomes {
                let Some(c) = d.get(*k) else { continue };
                let to = from + 100.0 * *c as f64 / total.max(1) as f64;
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [(from, SegmentValue::Exact(row)), (to, SegmentValue::Exact(row + 1))],
                        color(k).filled(),
                    )))
                    .map_err(|e| e.to_string())?;
                from = to;
            }
        }
        // The legend, under the chart.
        for (j, k) in outcomes.iter().take(PALETTE.len()).enumerate() {
            let y = (46 + ROW * n.max(1) + 16 * j as u32) as i32;
            root.draw(&Rectangle::new([(220, y), (232, y + 12)], color(k).filled()))
                .map_err(|e| e.to_string())?;
            root.draw(&Text::new((*k).clone(), (238, y), ("sans-serif", 12)))
                .map_err(|e| e.to_string())?;
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_distribution_chart_has_every_column_and_outcome() {
        let rows: Vec<(String, std::collections::BTreeMap<String, u64>)> = (0..3)
            .map(|i| {
                (
                    format!("column-{i}"),
                    [("55P03".to_owned(), 10 + i), ("true".to_owned(), 5)]
                        .into_iter()
                        .collect(),
                )
            })
            .collect();
        let svg = distribution_chart(&rows).unwrap();
        assert!(svg.starts_with("<svg"), "{svg:.80}");
        for label in ["column-0", "column-2", "55P03", "true", "% of trials"] {
            assert!(svg.contains(label), "no {label}");
        }
    }

    #[test]
    fn one_to_many_rows_draw_an_svg_with_every_label() {
        for n in [1usize, 2, 15, 75] {
            let rows: Vec<(String, Stats)> = (0..n)
                .map(|i| {
                    (
                        format!("column-{i}"),
                        Stats::of(&[i as f64, 2.0 * i as f64 + 1.0]).unwrap(),
                    )
                })
                .collect();
            let svg = timing_chart(&rows).unwrap();
            assert!(svg.starts_with("<svg"), "{n}: {svg:.80}");
            for (label, _) in &rows {
                assert!(svg.contains(&format!("\n{label}\n")), "{n}: no label {label}\n{svg}");
            }
        }
    }
}
