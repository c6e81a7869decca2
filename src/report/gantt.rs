//! `simulate --plot` for a DDP step: the compute and NCCL streams against time, as SVG written
//! by hand (plotters has no tooltips).
//!
//! Each lane is labelled; each bar (a layer's forward or backward, a copy, a collective, a
//! hook's compute) carries its name where it fits and a `<title>` tooltip with its times and,
//! for collectives, bytes, dtype, algorithm, protocol and channels. Orange bands mark exposed
//! communication (the compute stream waiting for the NCCL stream), small marks the moments
//! buckets became ready, and a legend names the colours. With gradient accumulation a second
//! panel zooms on the last (synchronising) micro-step, which the whole step squeezes to a
//! sliver. It is not a per-rank or per-link view: every rank runs the same step in this model.

use std::fmt::Write as _;

use crate::units::Bytes;
use crate::workload::ddp::{Span, StepResult};

/// Canvas width, the lane-label column, the right margin, px.
const WIDTH: f64 = 1200.0;
const LEFT: f64 = 130.0;
const RIGHT: f64 = 24.0;
/// A lane's height and the gap between lanes, px.
const LANE: f64 = 34.0;
const GAP: f64 = 8.0;
/// Average glyph width of the 10 px labels, px (no font metrics without a font library).
const GLYPH: f64 = 6.0;

// Colours, by what a bar is (super::palette: one colour, one meaning, in every plot).
use super::palette::of as colour;
/// The legend's name for the exposed-communication bands.
const WAITS: &str = "exposed communication";
/// The legend's name for the input-stall bands.
const STALLS: &str = "input stall";

/// Whether a wait band is an input stall (else exposed communication).
fn is_stall(s: &Span) -> bool {
    s.lane == "wait" && s.name.starts_with("input stall")
}

/// Escapes text for SVG.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// Each span's place among the spans of its lane, so neighbours alternate colours.
fn ordinals(r: &StepResult) -> Vec<usize> {
    let mut seen = std::collections::BTreeMap::new();
    r.timeline
        .iter()
        .map(|s| {
            let n = seen.entry(s.lane).or_insert(0usize);
            *n += 1;
            *n
        })
        .collect()
}

/// What a span is drawn as (`i`: its place in its lane): its lane (0 compute, 1 NCCL, 2 the
/// second NCCL stream), colour and legend entry.
fn style(i: usize, s: &Span) -> (usize, &'static str, &'static str) {
    let nccl = 1 + usize::from(s.stream);
    match s.lane {
        "nccl" => match s.bucket {
            Some(b) if b % 2 == 1 => {
                (nccl, colour("bucket collective, alternate"), "bucket collective")
            }
            Some(_) => (nccl, colour("bucket collective"), "bucket collective"),
            None => (nccl, colour("other collective"), "other collective"),
        },
        "hook" => (nccl, colour("hook compute (compute waits)"), "hook compute (compute waits)"),
        _ if s.name.contains("(no_sync)") => {
            (0, colour("no_sync micro-step"), "no_sync micro-step")
        }
        _ if s.name.starts_with("fwd") => (0, colour("forward (per layer)"), "forward (per layer)"),
        _ if s.name.starts_with("bwd") && i.is_multiple_of(2) => {
            (0, colour("backward (per layer), alternate"), "backward (per layer)")
        }
        _ if s.name.starts_with("bwd") => {
            (0, colour("backward (per layer)"), "backward (per layer)")
        }
        _ if s.name.starts_with("optimizer") => (0, colour("optimizer step"), "optimizer step"),
        _ => (0, colour("DDP copies and hooks"), "DDP copies and hooks"),
    }
}

/// A tick step near `range / 8`: 1, 2 or 5 times a power of ten.
fn tick_step(range: f64) -> f64 {
    let raw = (range / 8.0).max(1e-9);
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * p).find(|s| *s >= raw).unwrap_or(10.0 * p)
}

/// A span's tooltip.
fn tooltip(s: &Span) -> String {
    let mut t = format!(
        "{}: {:.3} to {:.3} ms ({:.3} ms)",
        s.name,
        s.start_ms,
        s.end_ms,
        s.end_ms - s.start_ms
    );
    if s.lane == "nccl" {
        let _ = write!(t, "; {} {}", Bytes::new(s.bytes).approx(), s.dtype);
        if !s.algo.is_empty() {
            let _ = write!(t, ", {}/{}", s.algo, s.proto);
        }
        if s.channels > 0 {
            let _ = write!(t, ", {} channels", s.channels);
        }
    }
    if is_stall(s) {
        t = format!("input stall: {t}");
    } else if s.lane == "wait" {
        t = format!("exposed communication: {t}");
    }
    t
}

/// Draws one panel of lanes over `[t0, t1]` ms with its top at `top`; returns its height.
fn panel(svg: &mut String, r: &StepResult, title: &str, t0: f64, t1: f64, top: f64) -> f64 {
    let span = (t1 - t0).max(1e-9);
    let pw = WIDTH - LEFT - RIGHT;
    let x = |t: f64| LEFT + (t.clamp(t0, t1) - t0) / span * pw;
    let lane_y = |l: usize| top + 20.0 + l as f64 * (LANE + GAP);
    let _ = writeln!(
        svg,
        r#"<text x="{LEFT}" y="{:.1}" font-size="13" font-weight="bold">{}</text>"#,
        top + 13.0,
        esc(title)
    );
    // A second NCCL stream (HYBRID_SHARD's all-reduce) gets a lane of its own where it ran.
    let names: &[&str] = if r.timeline.iter().any(|s| s.stream == 1) {
        &["compute stream", "NCCL stream", "NCCL stream 2"]
    } else {
        &["compute stream", "NCCL stream"]
    };
    let lanes = names.len();
    for (l, name) in names.iter().enumerate() {
        let y = lane_y(l);
        let _ = writeln!(
            svg,
            r##"<rect x="{LEFT}" y="{y:.1}" width="{pw:.1}" height="{LANE}" fill="#f4f4f4"/>"##
        );
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="end">{name}</text>"#,
            LEFT - 8.0,
            y + LANE / 2.0 + 4.0
        );
    }
    for (s, i) in r.timeline.iter().zip(ordinals(r)) {
        if s.lane == "wait" || s.end_ms < t0 || s.start_ms > t1 {
            continue;
        }
        let (lane, color, _) = style(i, s);
        let (x0, x1) = (x(s.start_ms), x(s.end_ms));
        // Collectives are often thinner than a pixel: draw them at least that wide.
        let w = (x1 - x0).max(if lane >= 1 { 1.0 } else { 0.0 });
        let y = lane_y(lane) + 3.0;
        let _ = writeln!(
            svg,
            r##"<rect x="{x0:.2}" y="{y:.1}" width="{w:.2}" height="{:.1}" fill="{color}" stroke="#ffffff" stroke-width="0.5"><title>{}</title></rect>"##,
            LANE - 6.0,
            esc(&tooltip(s))
        );
        let label = s.name.strip_prefix("bwd ").or(s.name.strip_prefix("fwd ")).unwrap_or(&s.name);
        if w >= label.chars().count() as f64 * GLYPH + 6.0 {
            let fill = super::palette::ink(color);
            let _ = writeln!(
                svg,
                r#"<text x="{:.2}" y="{:.1}" font-size="10" text-anchor="middle" fill="{fill}" pointer-events="none">{}</text>"#,
                x0 + w / 2.0,
                y + (LANE - 6.0) / 2.0 + 3.5,
                esc(label)
            );
        }
    }
    // Exposed communication: a band over the lanes where compute waits for NCCL.
    for s in r.timeline.iter().filter(|s| s.lane == "wait" && s.end_ms >= t0 && s.start_ms <= t1) {
        let (x0, x1) = (x(s.start_ms), x(s.end_ms));
        let c = colour(if is_stall(s) { STALLS } else { WAITS });
        let _ = writeln!(
            svg,
            r#"<rect x="{x0:.2}" y="{:.1}" width="{:.2}" height="{:.1}" fill="{c}" fill-opacity="0.35" stroke="{c}" stroke-width="1"><title>{}</title></rect>"#,
            lane_y(0),
            (x1 - x0).max(1.0),
            lanes as f64 * LANE + (lanes - 1) as f64 * GAP,
            esc(&tooltip(s))
        );
    }
    // Buckets ready: a mark on the NCCL lane's top edge.
    for b in r.buckets.iter().filter(|b| b.ready_ms >= t0 && b.ready_ms <= t1) {
        let (bx, by) = (x(b.ready_ms), lane_y(1));
        let _ = writeln!(
            svg,
            r##"<path d="M{:.2},{:.1} L{:.2},{:.1} L{bx:.2},{:.1} Z" fill="#000000"><title>bucket {} ready at {:.3} ms ({}, {} tensors); all-reduce started {:.3} ms</title></path>"##,
            bx - 3.5,
            by - 1.0,
            bx + 3.5,
            by - 1.0,
            by + 5.0,
            b.index,
            b.ready_ms,
            Bytes::new(b.bytes),
            b.tensors,
            b.start_ms
        );
    }
    // The time axis.
    let axis_y = lane_y(lanes - 1) + LANE + 4.0;
    let _ = writeln!(
        svg,
        r##"<line x1="{LEFT}" y1="{axis_y:.1}" x2="{:.1}" y2="{axis_y:.1}" stroke="#000000"/>"##,
        LEFT + pw
    );
    let step = tick_step(span);
    let decimals = (-step.log10().floor()).max(0.0) as usize;
    let mut k = (t0 / step).ceil() as i64;
    while (k as f64) * step <= t1 + step * 1e-9 {
        let t = k as f64 * step;
        let tx = x(t);
        let _ = writeln!(
            svg,
            r##"<line x1="{tx:.2}" y1="{axis_y:.1}" x2="{tx:.2}" y2="{:.1}" stroke="#000000"/><text x="{tx:.2}" y="{:.1}" font-size="10" text-anchor="middle">{t:.decimals$}</text>"##,
            axis_y + 4.0,
            axis_y + 15.0
        );
        k += 1;
    }
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="end">time (ms)</text>"#,
        LEFT + pw,
        axis_y + 28.0
    );
    axis_y + 34.0 - top
}

/// The plot of `r`, a step of `kind` ([`super::ddp::step_kind`]: "DDP", "FSDP", …), as SVG text.
pub fn ddp_step_svg(r: &StepResult, kind: &str) -> String {
    let end = r.iteration_time_ms.max(1e-6);
    // With accumulation, the synchronising micro-step starts where the last no_sync one ends.
    let sync_start = r
        .timeline
        .iter()
        .filter(|s| s.name == "bwd (no_sync)")
        .map(|s| s.end_ms)
        .fold(None, |a: Option<f64>, t| Some(a.map_or(t, |a| a.max(t))));
    let micro = r.timeline.iter().filter(|s| s.name == "fwd (no_sync)").count() + 1;
    let mut body = String::new();
    let mut y = 52.0;
    let whole = if micro > 1 {
        format!("whole step ({micro} micro-steps, the first {} under no_sync)", micro - 1)
    } else {
        "whole step".to_string()
    };
    y += panel(&mut body, r, &whole, 0.0, end, y) + 10.0;
    if let Some(a) = sync_start.filter(|a| *a < end) {
        let title = format!("last micro-step (synchronising): {a:.3} to {end:.3} ms");
        y += panel(&mut body, r, &title, a, end, y) + 10.0;
    }
    // The legend: the kinds of bar present, in a fixed order, wrapped to the width.
    let legend = [
        "no_sync micro-step",
        "forward (per layer)",
        "backward (per layer)",
        "DDP copies and hooks",
        "optimizer step",
        "bucket collective",
        "other collective",
        "hook compute (compute waits)",
        WAITS,
        STALLS,
        "bucket ready",
    ]
    .map(|n| (n, colour(n)));
    let present = |name: &str| {
        let kind = |s: &Span, i: usize| match s.lane {
            "wait" if is_stall(s) => STALLS,
            "wait" => WAITS,
            _ => style(i, s).2,
        };
        (name == "bucket ready" && !r.buckets.is_empty())
            || r.timeline.iter().zip(ordinals(r)).any(|(s, i)| kind(s, i) == name)
    };
    let kinds: Vec<(&str, &str)> =
        legend.iter().filter(|k| present(k.0)).map(|&(n, c)| (c, n)).collect();
    y = swatches(&mut body, &kinds, y);
    y += 24.0;
    y += breakdown_bar(&mut body, r, y);
    let height = y + 10.0;
    let mut svg = format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0}" viewBox="0 0 {WIDTH} {height:.0}" font-family="sans-serif">
<rect width="100%" height="100%" fill="#ffffff"/>
<text x="{:.0}" y="26" font-size="16" text-anchor="middle">{}</text>
"##,
        WIDTH / 2.0,
        esc(&format!(
            "{kind} step {:.3} ms on {} ranks: compute {:.3} ms, communication {:.3} ms, exposed {:.3} ms",
            r.iteration_time_ms, r.world, r.compute_ms, r.comm_ms, r.exposed_comm_ms
        ))
    );
    // The bands show the waits; the rest of the exposed time is compute slowed while NCCL
    // kernels take SMs, spread over the bars.
    let waits: f64 = r
        .timeline
        .iter()
        .filter(|s| s.lane == "wait" && !is_stall(s))
        .map(|s| s.end_ms - s.start_ms)
        .sum();
    let _ = writeln!(
        svg,
        r##"<text x="{:.0}" y="42" font-size="11" text-anchor="middle" fill="#555555">exposed = compute waiting for NCCL (the exposed-communication bands, {waits:.3} ms) + compute slowed while NCCL kernels run ({:.3} ms)</text>"##,
        WIDTH / 2.0,
        (r.exposed_comm_ms - waits).max(0.0)
    );
    svg.push_str(&body);
    svg.push_str("</svg>\n");
    svg
}

/// Where the step goes: one bar of the breakdown's parts, each labelled below with its ms and
/// share (parts of no time left out); returns its height.
fn breakdown_bar(svg: &mut String, r: &StepResult, top: f64) -> f64 {
    let total = r.breakdown.parts().iter().map(|p| p.2.max(0.0)).sum::<f64>().max(1e-9);
    let pw = WIDTH - LEFT - RIGHT;
    let _ = writeln!(
        svg,
        r#"<text x="{LEFT}" y="{:.1}" font-size="13" font-weight="bold">where the step goes</text>"#,
        top + 13.0
    );
    let (bar_y, mut x) = (top + 20.0, LEFT);
    let mut labels = Vec::new();
    for (label, _, ms) in r.breakdown.parts() {
        if ms <= 0.0 {
            continue;
        }
        let color = colour(label);
        let w = ms / total * pw;
        let text = format!("{label}: {ms:.3} ms ({:.1} %)", 100.0 * ms / total);
        let _ = writeln!(
            svg,
            r#"<rect x="{x:.2}" y="{bar_y:.1}" width="{w:.2}" height="{LANE}" fill="{color}"><title>{}</title></rect>"#,
            esc(&text)
        );
        labels.push((color, text));
        x += w;
    }
    // The labels below, wrapped to the width.
    let labels: Vec<(&str, &str)> = labels.iter().map(|(c, t)| (*c, t.as_str())).collect();
    let ly = swatches(svg, &labels, bar_y + LANE + 8.0);
    ly + 18.0 - top
}

/// Colour swatches with their names from `top`, wrapped to the width; returns the last
/// row's top.
fn swatches(svg: &mut String, items: &[(&str, &str)], top: f64) -> f64 {
    let (mut lx, mut y) = (LEFT, top);
    let _ = writeln!(svg, r#"<g font-size="11">"#);
    for (color, name) in items {
        let w = 22.0 + name.chars().count() as f64 * GLYPH + 18.0;
        if lx + w > WIDTH - RIGHT {
            lx = LEFT;
            y += 18.0;
        }
        let _ = writeln!(
            svg,
            r#"<rect x="{lx:.1}" y="{y:.1}" width="14" height="10" fill="{color}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            lx + 20.0,
            y + 9.5,
            esc(name)
        );
        lx += w;
    }
    let _ = writeln!(svg, "</g>");
    y
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round() {
        assert_eq!(tick_step(10.0), 2.0);
        assert_eq!(tick_step(0.8), 0.1);
        assert_eq!(tick_step(400.0), 50.0);
    }

    #[test]
    fn text_is_escaped() {
        assert_eq!(esc("a<b & \"c\">"), "a&lt;b &amp; &quot;c&quot;&gt;");
    }
}
