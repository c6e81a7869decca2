//! `validate --plot`: measured busbw (points) and predicted busbw (line, with its error band)
//! against size on a log2 axis, as SVG.

use std::path::Path;

use plotters::prelude::*;

use crate::calibrate::validate::Validation;
use crate::units::Bytes;

/// Draws `v` into an SVG file at `path` under `title`.
pub fn validation_svg(path: &Path, title: &str, v: &Validation) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let rows: Vec<_> = v.rows.iter().filter(|r| r.size_bytes > 0).collect();
    if rows.is_empty() {
        return Err("nothing to plot".into());
    }
    let x = |b: u64| (b as f64).log2();
    let (x0, x1) = (x(rows[0].size_bytes), x(rows[rows.len() - 1].size_bytes));
    let (x0, x1) = if x1 > x0 { (x0, x1) } else { (x0 - 1.0, x0 + 1.0) };
    // busbw scales as 1 / time: the band's high busbw comes from the low time.
    let band = |r: &&crate::calibrate::validate::ValidationRow, t: f64| {
        if t > 0.0 { r.predicted_busbw * r.predicted_time_us / t } else { r.predicted_busbw }
    };
    let ymax = rows
        .iter()
        .flat_map(|r| [r.measured_busbw, band(r, r.predicted_time_us_low)])
        .fold(0.0f64, f64::max)
        .max(1e-3)
        * 1.1;
    let root = SVGBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(x0..x1, 0.0..ymax)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("size")
        .y_desc("busbw (GB/s)")
        .x_label_formatter(&|v| Bytes::new(2f64.powf(*v).round() as u64).to_string())
        .draw()
        .map_err(|e| err(&e))?;
    let upper = rows.iter().map(|r| (x(r.size_bytes), band(r, r.predicted_time_us_low)));
    let lower = rows.iter().rev().map(|r| (x(r.size_bytes), band(r, r.predicted_time_us_high)));
    chart
        .draw_series(std::iter::once(Polygon::new(
            upper.chain(lower).collect::<Vec<_>>(),
            BLUE.mix(0.15),
        )))
        .map_err(|e| err(&e))?;
    chart
        .draw_series(LineSeries::new(
            rows.iter().map(|r| (x(r.size_bytes), r.predicted_busbw)),
            BLUE.stroke_width(2),
        ))
        .map_err(|e| err(&e))?
        .label("predicted (band: fitted residuals)")
        .legend(|(a, b)| PathElement::new(vec![(a, b), (a + 20, b)], BLUE.stroke_width(2)));
    chart
        .draw_series(
            rows.iter().map(|r| Circle::new((x(r.size_bytes), r.measured_busbw), 4, RED.filled())),
        )
        .map_err(|e| err(&e))?
        .label("measured")
        .legend(|(a, b)| Circle::new((a + 10, b), 4, RED.filled()));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}
