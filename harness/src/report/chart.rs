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
    std::panic::catch_unwind(|| draw(rows)).unwrap_or_else(|_| Err("the chart library panicked".to_owned()))
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
        chart
            .configure_mesh()
            .disable_y_mesh()
            .light_line_style(TRANSPARENT)
            .x_desc("ms")
            // One more than the rows: plotters' integer key points loop forever
            // (overflow) when asked for fewer than two.
            .y_labels(rows.len() + 1)
            .y_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => (n as i32 - 1 - *i)
                    .try_into()
                    .ok()
                    .and_then(|i: usize| labels.get(i))
                    .map(|s| (*s).to_owned())
                    .unwrap_or_default(),
                SegmentValue::Last => String::new(),
            })
            .label_style(("sans-serif", 12))
            .draw()
            .map_err(|e| e.to_string())?;
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

#[cfg(test)]
mod tests {
    use super::*;

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
