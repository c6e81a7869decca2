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

/// `simulate --plot` for a DDP step: the compute and NCCL stream lanes against time, one bar
/// per layer, copy, hook step and collective.
pub fn timeline(r: &crate::workload::ddp::StepResult, path: &Path) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let end = r.iteration_time_ms.max(1e-6);
    let root = SVGBackend::new(path, (1200, 320)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "DDP step {:.2} ms: compute {:.2} ms, communication {:.2} ms, exposed {:.2} ms",
                r.iteration_time_ms, r.compute_ms, r.comm_ms, r.exposed_comm_ms
            ),
            ("sans-serif", 16),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(110)
        .build_cartesian_2d(0.0..end, 0.0..2.0)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("time (ms)")
        .y_labels(2)
        .y_label_formatter(&|v| if *v < 1.0 { "compute".into() } else { "NCCL".into() })
        .disable_y_mesh()
        .draw()
        .map_err(|e| err(&e))?;
    // Forward light, backward layers alternating two blues so each layer shows, copies green,
    // hook work magenta, collectives red; a white outline separates compute neighbours.
    let bars = r.timeline.iter().enumerate().flat_map(|(i, s)| {
        let (lane, color) = match (s.lane, s.name.contains("hook")) {
            ("nccl", _) => (1.0, RED.mix(0.75)),
            (_, true) => (0.0, MAGENTA.mix(0.75)),
            _ if s.name.starts_with("copy") => (0.0, GREEN.mix(0.75)),
            _ if s.name.starts_with("bwd") => {
                (0.0, if i % 2 == 0 { BLUE.mix(0.75) } else { BLUE.mix(0.45) })
            }
            _ => (0.0, CYAN.mix(0.5)),
        };
        let corners = [(s.start_ms, lane + 0.15), (s.end_ms, lane + 0.85)];
        // Collectives are often thinner than a pixel: no white outline to hide them.
        let outline = if lane == 0.0 { WHITE.stroke_width(1) } else { color.stroke_width(1) };
        [Rectangle::new(corners, color.filled()), Rectangle::new(corners, outline)]
    });
    chart.draw_series(bars).map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}

/// `simulate --sweep ... --plot`: step time against the first swept key's values (in the order
/// given), one line per value of the other keys.
pub fn sweep(rows: &[crate::report::ddp::SweepPoint], path: &Path) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let Some(first) = rows.first() else { return Err(err(&"nothing to plot")) };
    let key = first.0.first().map_or(String::new(), |k| k.0.clone());
    let mut xs: Vec<String> = Vec::new();
    let mut series: Vec<(String, Vec<(usize, f64)>)> = Vec::new();
    for (p, r) in rows {
        let x = p.first().map_or(String::new(), |k| k.1.clone());
        let xi = xs.iter().position(|v| *v == x).unwrap_or_else(|| {
            xs.push(x);
            xs.len() - 1
        });
        let rest = p.iter().skip(1).map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ");
        match series.iter_mut().find(|s| s.0 == rest) {
            Some(s) => s.1.push((xi, r.iteration_time_ms)),
            None => series.push((rest, vec![(xi, r.iteration_time_ms)])),
        }
    }
    let ymax = rows.iter().map(|r| r.1.iteration_time_ms).fold(0.0, f64::max).max(1e-6) * 1.1;
    let root = SVGBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let n = xs.len().max(2) - 1;
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("DDP step time against {key}"), ("sans-serif", 18))
        .margin(24)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(-0.25..n as f64 + 0.25, 0.0..ymax)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc(key.as_str())
        .y_desc("iteration (ms)")
        .disable_x_mesh()
        .x_labels(xs.len() + 2)
        .x_label_formatter(&|v| {
            let i = v.round();
            if (v - i).abs() < 1e-6 && i >= 0.0 {
                xs.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .draw()
        .map_err(|e| err(&e))?;
    let colors = [BLUE, RED, GREEN, MAGENTA, CYAN, BLACK];
    for (i, (label, pts)) in series.iter().enumerate() {
        let c = colors[i % colors.len()];
        let line = pts.iter().map(|&(x, y)| (x as f64, y));
        chart
            .draw_series(LineSeries::new(line, c.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(if label.is_empty() { "step".to_string() } else { label.clone() })
            .legend(move |(a, b)| PathElement::new(vec![(a, b), (a + 20, b)], c.stroke_width(2)));
        chart
            .draw_series(pts.iter().map(|&(x, y)| Circle::new((x as f64, y), 3, c.filled())))
            .map_err(|e| err(&e))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}
