//! `validate --plot`: measured busbw (points) and predicted busbw (line, with its error band)
//! against size on a log2 axis, as SVG.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::calibrate::validate::Validation;
use crate::units::Bytes;

/// A busbw tick label, GB/s: plain from 1 up, then as many decimals as the tick needs.
fn gbps_label(v: f64) -> String {
    if v >= 1.0 {
        format!("{v:.0}")
    } else if v > 0.0 {
        let decimals = (-v.log10()).ceil().max(1.0) as usize;
        format!("{v:.decimals$}")
    } else {
        "0".into()
    }
}

/// Draws `v` as SVG into `svg` under `title`: above, busbw (log10 axis) against size
/// (log2 axis), measured points over the predicted line and its band; below, the prediction's
/// error per size, 100·(predicted − measured)/measured time (%). Measured busbw is taken from
/// the measured time (busbw scales as 1 / time), because logs print it with two decimals and
/// small sizes would read 0.00, which a log axis cannot show.
pub fn validation_svg(svg: &mut String, title: &str, v: &Validation) -> Result<(), String> {
    let (model_colour, measured_colour) = (super::palette::series(0), super::palette::series(1));
    use crate::calibrate::validate::ValidationRow;
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let rows: Vec<_> = v
        .rows
        .iter()
        .filter(|r| r.size_bytes > 0 && r.predicted_time_us > 0.0 && r.measured_time_us > 0.0)
        .collect();
    if rows.is_empty() {
        return Err("nothing to plot".into());
    }
    // busbw at time t of row r (the predicted busbw scaled by predicted time / t).
    let at = |r: &ValidationRow, t: f64| {
        if t > 0.0 { r.predicted_busbw * r.predicted_time_us / t } else { r.predicted_busbw }
    };
    let measured = |r: &ValidationRow| at(r, r.measured_time_us);
    let (x0, x1) = (rows[0].size_bytes as f64, rows[rows.len() - 1].size_bytes as f64);
    let (x0, x1) = if x1 > x0 { (x0, x1) } else { (x0 / 2.0, x0 * 2.0) };
    let (ymin, ymax) = decades(rows.iter().flat_map(|r| {
        [measured(r), at(r, r.predicted_time_us_low), at(r, r.predicted_time_us_high)]
    }));
    let root = SVGBackend::with_string(svg, (960, 780)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let (top, bottom) = root.split_vertically(540);
    let size_label = |b: &f64| Bytes::new(b.round() as u64).to_string();
    let mut chart = ChartBuilder::on(&top)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d((x0..x1).log_scale().base(2.0), (ymin..ymax).log_scale())
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("size (bytes per rank, log2 axis)")
        .y_desc("busbw (GB/s, log axis)")
        .x_labels(14)
        .y_labels(12)
        .x_label_formatter(&size_label)
        .y_label_formatter(&|y| gbps_label(*y))
        .draw()
        .map_err(|e| err(&e))?;
    let sz = |r: &&ValidationRow| r.size_bytes as f64;
    let upper = rows.iter().map(|r| (sz(r), at(r, r.predicted_time_us_low)));
    let lower = rows.iter().rev().map(|r| (sz(r), at(r, r.predicted_time_us_high)));
    chart
        .draw_series(std::iter::once(Polygon::new(
            upper.chain(lower).collect::<Vec<_>>(),
            model_colour.mix(0.15),
        )))
        .map_err(|e| err(&e))?;
    chart
        .draw_series(LineSeries::new(
            rows.iter().map(|r| (sz(r), r.predicted_busbw)),
            model_colour.stroke_width(2),
        ))
        .map_err(|e| err(&e))?
        .label("predicted (band: fitted residuals)")
        .legend(move |(a, b)| {
            PathElement::new(vec![(a, b), (a + 20, b)], model_colour.stroke_width(2))
        });
    chart
        .draw_series(
            rows.iter().map(|r| Circle::new((sz(r), measured(r)), 4, measured_colour.filled())),
        )
        .map_err(|e| err(&e))?
        .label("measured")
        .legend(move |(a, b)| Circle::new((a + 10, b), 4, measured_colour.filled()));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.9))
        .draw()
        .map_err(|e| err(&e))?;
    // The error panel.
    let emax = rows.iter().map(|r| r.error_pct.abs()).filter(|e| e.is_finite()).fold(5.0, f64::max);
    let emax = (emax * 1.15).min(1e6);
    let mut errs = ChartBuilder::on(&bottom)
        .caption(
            format!(
                "prediction error per size: median |error| {:.1} %, p95 {:.1} %",
                v.median_abs_error_pct, v.p95_abs_error_pct
            ),
            ("sans-serif", 14),
        )
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d((x0..x1).log_scale().base(2.0), -emax..emax)
        .map_err(|e| err(&e))?;
    errs.configure_mesh()
        .x_desc("size (bytes per rank, log2 axis)")
        .y_desc("error (%): predicted vs measured time")
        .x_labels(14)
        .y_labels(7)
        .x_label_formatter(&size_label)
        .y_label_formatter(&|e| if e.abs() < 1e-9 { "0".into() } else { format!("{e:+.0}") })
        .draw()
        .map_err(|e| err(&e))?;
    errs.draw_series(LineSeries::new([(x0, 0.0), (x1, 0.0)], BLACK.stroke_width(1)))
        .map_err(|e| err(&e))?;
    let pts: Vec<(f64, f64)> = rows
        .iter()
        .filter(|r| r.error_pct.is_finite())
        .map(|r| (sz(r), r.error_pct.clamp(-emax, emax)))
        .collect();
    errs.draw_series(LineSeries::new(
        pts.iter().copied(),
        measured_colour.mix(0.6).stroke_width(1),
    ))
    .map_err(|e| err(&e))?;
    errs.draw_series(pts.iter().map(|&p| Circle::new(p, 3, measured_colour.filled())))
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}

/// A categorical axis's tick label: the `labels` entry at a whole-number `v`, else none.
fn index_label(labels: &[String], v: f64) -> String {
    let i = v.round();
    if (v - i).abs() < 1e-6 && i >= 0.0 {
        labels.get(i as usize).cloned().unwrap_or_default()
    } else {
        String::new()
    }
}

/// The height of a sweep plot's breakdown panel, px, before its list of process groups.
const BREAKDOWN_H: u32 = 480;

/// Characters a line of the process-group list holds at 12 px on the 960 px canvas.
const GROUPS_LINE_CHARS: usize = 130;

/// The lines under a sweep's breakdown panel that name, point by point, each process group that
/// communicates and the tier its traffic crosses (nothing where no point communicates): a
/// point's groups, broken between groups to fit the canvas.
fn group_lines(rows: &[crate::report::ddp::SweepPoint]) -> Vec<String> {
    if rows.iter().all(|r| r.1.comm_groups.is_empty()) {
        return Vec::new();
    }
    let mut lines = vec!["process groups and the tier their traffic crosses:".to_string()];
    for (p, r, _) in rows {
        let mut line = format!("{}:", crate::report::sweep::point_label(p));
        if r.comm_groups.is_empty() {
            line.push_str(" none (one GPU)");
        }
        for (i, g) in crate::report::ddp::group_phrases(&r.comm_groups).into_iter().enumerate() {
            let sep = if i == 0 { " " } else { "; " };
            if line.len() + sep.len() + g.len() > GROUPS_LINE_CHARS {
                lines.push(std::mem::replace(&mut line, format!("    {g}")));
            } else {
                line.push_str(sep);
                line.push_str(&g);
            }
        }
        lines.push(line);
    }
    lines
}

/// The height of a sweep plot's breakdown panel with its process-group list, px.
fn breakdown_height(rows: &[crate::report::ddp::SweepPoint]) -> u32 {
    let n = group_lines(rows).len() as u32;
    BREAKDOWN_H + if n > 0 { 12 + 16 * n } else { 0 }
}

/// A sweep's breakdown panel: one stacked bar per point (in the order run), each part of the
/// step (`Breakdown::parts`, those any point has) in its colour, named in a legend below, and
/// under it each point's process groups with the tier their traffic crosses.
fn sweep_breakdown<DB: DrawingBackend>(
    rows: &[crate::report::ddp::SweepPoint],
    area: &DrawingArea<DB, plotters::coord::Shift>,
) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let parts = |i: usize| rows[i].1.breakdown.parts();
    let shown: Vec<usize> = (0..parts(0).len())
        .filter(|&k| (0..rows.len()).any(|i| parts(i)[k].2.abs() >= 5e-4))
        .collect();
    let labels: Vec<String> = rows
        .iter()
        .map(|r| r.0.iter().map(|(_, v)| v.as_str()).collect::<Vec<_>>().join(", "))
        .collect();
    let ymax = (0..rows.len())
        .map(|i| parts(i).iter().map(|p| p.2.max(0.0)).sum::<f64>())
        .fold(0.0, f64::max)
        .max(1e-6)
        * 1.1;
    let (bars_area, groups) = area.split_vertically(BREAKDOWN_H);
    let (chart_area, legend) = bars_area.split_vertically(BREAKDOWN_H - 64);
    let n = rows.len();
    let mut chart = ChartBuilder::on(&chart_area)
        .caption("where the step goes, ms, at each point", ("sans-serif", 16))
        .margin(24)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(-0.5..n as f64 - 0.5, 0.0..ymax)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .y_desc("ms")
        .disable_x_mesh()
        .x_labels(2 * n + 2)
        .x_label_formatter(&|v| index_label(&labels, *v))
        .draw()
        .map_err(|e| err(&e))?;
    for i in 0..n {
        let mut base = 0.0;
        for &k in &shown {
            let ms = parts(i)[k].2.max(0.0);
            let c = super::palette::rgb(parts(0)[k].0);
            let (x0, x1) = (i as f64 - 0.35, i as f64 + 0.35);
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(x0, base), (x1, base + ms)],
                    c.filled(),
                )))
                .map_err(|e| err(&e))?;
            base += ms;
        }
    }
    let font = ("sans-serif", 12).into_font().color(&BLACK);
    for (j, &k) in shown.iter().enumerate() {
        let (x, y) = (24 + 234 * (j as i32 % 4), 8 + 18 * (j as i32 / 4));
        let c = super::palette::rgb(parts(0)[k].0);
        legend
            .draw(&Rectangle::new([(x, y + 1), (x + 16, y + 11)], c.filled()))
            .map_err(|e| err(&e))?;
        legend.draw(&Text::new(parts(0)[k].0, (x + 22, y), font.clone())).map_err(|e| err(&e))?;
    }
    for (j, line) in group_lines(rows).into_iter().enumerate() {
        let y = 4 + 16 * j as i32;
        groups.draw(&Text::new(line, (24, y), font.clone())).map_err(|e| err(&e))?;
    }
    Ok(())
}

/// `simulate --sweep ... --plot`: step time against the first swept key's values (in the order
/// given), one series per value of the other keys; below, where each point's step goes. Categorical values (a hook, a bool, a
/// name) are grouped bars, each labelled with its time; numbers are lines with points. The
/// legend sits below the chart, one series a line, so it never covers or clips anything.
pub fn sweep(rows: &[crate::report::ddp::SweepPoint], svg: &mut String) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let Some(first) = rows.first() else { return Err(err(&"nothing to plot")) };
    let key = first.0.first().map_or(String::new(), |k| k.0.clone());
    let mut xs: Vec<String> = Vec::new();
    let mut series: Vec<(String, Vec<(usize, f64)>)> = Vec::new();
    for (p, r, _) in rows {
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
    let numeric = xs.iter().all(|v| v.trim().parse::<f64>().is_ok_and(f64::is_finite));
    let ymax = rows.iter().map(|r| r.1.iteration_time_ms).fold(0.0, f64::max).max(1e-6) * 1.15;
    let legend_h = if series.len() > 1 { 30 + 18 * series.len() as u32 } else { 0 };
    let parts_h = if rows.len() > 1 { breakdown_height(rows) } else { 0 };
    let root = SVGBackend::with_string(svg, (960, 600 + parts_h + legend_h)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let (top, rest) = root.split_vertically(600);
    let (parts_area, bottom) = rest.split_vertically(parts_h);
    if rows.len() > 1 {
        sweep_breakdown(rows, &parts_area)?;
    }
    let n = xs.len().max(1);
    let (lo, hi) = if numeric { (-0.25, n as f64 - 0.75) } else { (-0.5, n as f64 - 0.5) };
    let kind = if numeric { " (values in the order given)" } else { " (bars: categorical values)" };
    let mut chart = ChartBuilder::on(&top)
        .caption(format!("training step time against {key}{kind}"), ("sans-serif", 18))
        .margin(24)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(lo..hi, 0.0..ymax)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc(key.as_str())
        .y_desc("iteration (ms)")
        .disable_x_mesh()
        .x_labels(2 * n + 2)
        .x_label_formatter(&|v| index_label(&xs, *v))
        .draw()
        .map_err(|e| err(&e))?;
    let width = 0.8 / series.len().max(1) as f64;
    for (i, (_, pts)) in series.iter().enumerate() {
        let c = super::palette::series(i);
        if numeric {
            let line = pts.iter().map(|&(x, y)| (x as f64, y));
            chart.draw_series(LineSeries::new(line, c.stroke_width(2))).map_err(|e| err(&e))?;
            chart
                .draw_series(pts.iter().map(|&(x, y)| Circle::new((x as f64, y), 3, c.filled())))
                .map_err(|e| err(&e))?;
        } else {
            let x0 = |x: usize| x as f64 - 0.4 + i as f64 * width;
            chart
                .draw_series(pts.iter().map(|&(x, y)| {
                    Rectangle::new([(x0(x), 0.0), (x0(x) + width * 0.9, y)], c.mix(0.8).filled())
                }))
                .map_err(|e| err(&e))?;
            let font = ("sans-serif", 11).into_font().color(&BLACK);
            let style = font.pos(Pos::new(HPos::Center, VPos::Bottom));
            chart
                .draw_series(pts.iter().map(|&(x, y)| {
                    Text::new(format!("{y:.1}"), (x0(x) + width * 0.45, y), style.clone())
                }))
                .map_err(|e| err(&e))?;
        }
    }
    // The legend, below the chart: one line per series.
    if series.len() > 1 {
        let font = ("sans-serif", 13).into_font().color(&BLACK);
        bottom.draw(&Text::new("series:", (24, 6), font.clone())).map_err(|e| err(&e))?;
        for (i, (label, _)) in series.iter().enumerate() {
            let c = super::palette::series(i);
            let y = 26 + 18 * i as i32;
            bottom
                .draw(&Rectangle::new([(90, y + 1), (110, y + 11)], c.mix(0.8).filled()))
                .map_err(|e| err(&e))?;
            bottom.draw(&Text::new(label.clone(), (118, y), font.clone())).map_err(|e| err(&e))?;
        }
    }
    root.present().map_err(|e| err(&e))
}

/// The log10 axis range, whole decades below and above, that holds the positive, finite `ys`
/// (at least ten times the smallest; 0.001 to 1000 where there are none).
fn decades(ys: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = ys
        .filter(|y| y.is_finite() && *y > 0.0)
        .fold((f64::INFINITY, 0.0f64), |(lo, hi), y| (lo.min(y), hi.max(y)));
    if lo.is_finite() && hi > 0.0 {
        (10f64.powf(lo.log10().floor()), 10f64.powf(hi.log10().ceil()).max(lo * 10.0))
    } else {
        (1e-3, 1e3)
    }
}

/// `simulate --plot` for a collective: busbw (GB/s, as nccl-tests prints it) and time (µs),
/// each on a log10 axis, against size (bytes per rank, log2 axis), one line per series — the
/// scenario's sweep, or each point of a `--sweep` (`nccl.NCCL_ALGO=Ring,NVLS`: one line per
/// algorithm) — in colour-blind-safe colours, the legend below the panels.
pub fn collective_svg(
    title: &str,
    series: &[(String, &[crate::workload::sweep::Row])],
    svg: &mut String,
) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let lines: Vec<(&str, Vec<&crate::workload::sweep::Row>)> = series
        .iter()
        .map(|(label, rows)| {
            let kept = rows
                .iter()
                .filter(|r| r.size_bytes > 0 && r.time_us > 0.0 && r.busbw > 0.0)
                .collect();
            (label.as_str(), kept)
        })
        .collect();
    let all = || lines.iter().flat_map(|l| l.1.iter());
    let Some(first) = all().next() else {
        return Err(
            "nothing to plot: no size has a time and a busbw above 0 (one rank moves nothing)"
                .into(),
        );
    };
    let (x0, x1) = all().fold((first.size_bytes as f64, first.size_bytes as f64), |(a, b), r| {
        (a.min(r.size_bytes as f64), b.max(r.size_bytes as f64))
    });
    let (x0, x1) = if x1 > x0 { (x0, x1) } else { (x0 / 2.0, x0 * 2.0) };
    // The legend: each series' label, broken between words to fit the canvas, and marked
    // where it has nothing to draw.
    let legend: Vec<Vec<String>> = lines
        .iter()
        .map(|(label, rows)| {
            let label = if rows.is_empty() {
                format!("{label} (nothing to draw: no busbw above 0)")
            } else {
                label.to_string()
            };
            wrap(&label, LEGEND_CHARS)
        })
        .collect();
    let legend_h = 30 + 18 * legend.iter().map(Vec::len).sum::<usize>() as u32;
    let root = SVGBackend::with_string(svg, (960, 900 + legend_h)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let (top, rest) = root.split_vertically(460);
    let (middle, legend_area) = rest.split_vertically(440);
    let size_label = |b: &f64| Bytes::new(b.round() as u64).to_string();
    type Value = fn(&crate::workload::sweep::Row) -> f64;
    let panels: [(_, &str, &str, Value); 2] = [
        (&top, title, "busbw (GB/s, log axis)", |r| r.busbw),
        (&middle, "time per call", "time (µs, log axis)", |r| r.time_us),
    ];
    for (area, caption, y_desc, value) in panels {
        let (y0, y1) = decades(all().map(|r| value(r)));
        let mut chart = ChartBuilder::on(area)
            .caption(caption, ("sans-serif", if caption == title { 18 } else { 14 }))
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(70)
            .build_cartesian_2d((x0..x1).log_scale().base(2.0), (y0..y1).log_scale())
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc("size (bytes per rank, log2 axis)")
            .y_desc(y_desc)
            .x_labels(14)
            .y_labels(12)
            .x_label_formatter(&size_label)
            .y_label_formatter(&|y| gbps_label(*y))
            .draw()
            .map_err(|e| err(&e))?;
        for (i, (_, rows)) in lines.iter().enumerate() {
            let c = super::palette::series(i);
            let pts: Vec<(f64, f64)> =
                rows.iter().map(|r| (r.size_bytes as f64, value(r))).collect();
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))
                .map_err(|e| err(&e))?;
            match marker(i) {
                Marker::Circle => {
                    chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))
                }
                Marker::Triangle => {
                    chart.draw_series(pts.iter().map(|&p| TriangleMarker::new(p, 4, c.filled())))
                }
                Marker::Cross => {
                    chart.draw_series(pts.iter().map(|&p| Cross::new(p, 4, c.stroke_width(2))))
                }
            }
            .map_err(|e| err(&e))?;
        }
    }
    let font = ("sans-serif", 13).into_font().color(&BLACK);
    legend_area.draw(&Text::new("lines:", (24, 6), font.clone())).map_err(|e| err(&e))?;
    let mut y = 26;
    for (i, label) in legend.iter().enumerate() {
        let c = super::palette::series(i);
        legend_area
            .draw(&PathElement::new(vec![(80, y + 6), (110, y + 6)], c.stroke_width(2)))
            .map_err(|e| err(&e))?;
        let at = (95, y + 6);
        match marker(i) {
            Marker::Circle => legend_area.draw(&Circle::new(at, 3, c.filled())),
            Marker::Triangle => legend_area.draw(&TriangleMarker::new(at, 4, c.filled())),
            Marker::Cross => legend_area.draw(&Cross::new(at, 4, c.stroke_width(2))),
        }
        .map_err(|e| err(&e))?;
        for part in label {
            legend_area
                .draw(&Text::new(part.clone(), (118, y), font.clone()))
                .map_err(|e| err(&e))?;
            y += 18;
        }
    }
    root.present().map_err(|e| err(&e))
}

/// Characters a legend line of a collective's plot holds at 13 px beside its swatch.
const LEGEND_CHARS: usize = 110;

/// `text` broken between words into lines of at most `width` characters (a word longer than
/// that on a line of its own).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split(' ') {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    lines.push(line);
    lines
}

/// A line's point marker: the colours repeat after [`super::palette::SERIES`], the shapes tell those
/// lines apart.
enum Marker {
    Circle,
    Triangle,
    Cross,
}

/// The marker of line `i`.
fn marker(i: usize) -> Marker {
    match (i / super::palette::SERIES.len()) % 3 {
        0 => Marker::Circle,
        1 => Marker::Triangle,
        _ => Marker::Cross,
    }
}
