//! `collsim plan`: the ranked table, JSON, CSV, and the time/cost Pareto plot.

use plotters::prelude::*;
use std::io::{self, Write};

use crate::config::plan::{Amount, Minimise, Pricing};
use crate::plan::shard::Summary;
use crate::plan::{Outcome, Ranked, Ranking, hours, label, usd};

fn amount(a: &Amount) -> String {
    match a {
        Amount::Samples(n) => format!("{n:.3e} samples"),
        Amount::Tokens(n) => format!("{n:.3e} tokens"),
        Amount::Steps(n) => format!("{n} steps"),
    }
}

fn opt(x: Option<f64>, f: impl Fn(f64) -> String) -> String {
    x.map_or("no price".into(), f)
}

/// Writes the ranked table, the recommendation and the rejected candidates.
pub fn table(s: &Summary, r: &Ranking, out: &mut dyn Write) -> io::Result<()> {
    let o = &s.objective;
    let rate = if s.collective { "calls/s" } else { "samples/s" };
    writeln!(
        out,
        "plan {}: {} candidates, {} solutions, {} rejected",
        s.plan,
        s.candidates,
        r.ranked.len(),
        r.rejected.len()
    )?;
    let mut prices = match o.pricing {
        Pricing::OnDemand => "on-demand",
        Pricing::Spot => "spot",
        Pricing::Committed => "committed-use",
    }
    .to_string();
    if let Some(r) = &o.region {
        prices += &format!(" {r}");
    }
    let amount = amount(&s.amount);
    let mut goal = match o.minimise {
        Minimise::Cost => format!("minimise cost to train {amount} at {prices} prices"),
        Minimise::Time => format!("minimise time to train {amount} at {prices} prices"),
        Minimise::CostWithin => format!(
            "minimise time to train {amount} among the solutions within {:.1} % of the cheapest cost, at {prices} prices",
            100.0 * o.within.unwrap_or(r.band)
        ),
        Minimise::Knee => {
            format!("the knee of time and cost to train {amount} at {prices} prices")
        }
    };
    if let Some(t) = o.throughput {
        goal += &format!("; at least {t} {rate}");
    }
    if let Some(d) = o.deadline_h {
        goal += &format!("; deadline {}", hours(d));
    }
    if let Some(b) = o.budget_usd {
        goal += &format!("; budget {}", usd(b));
    }
    if let Some(b) = o.budget_usd_per_hour {
        goal += &format!("; budget {}/h", usd(b));
    }
    if let Some(q) = o.max_nodes {
        goal += &format!("; quota {q} nodes");
    }
    writeln!(out, "{goal}")?;
    for p in &s.prices {
        match &p.1 {
            Some(x) => writeln!(out, "  price {}: {x:.2} USD/h per node ({})", p.0, p.2)?,
            None if !p.2.is_empty() => writeln!(out, "  price {}: no price ({})", p.0, p.2)?,
            None => writeln!(
                out,
                "  price {}: no price (give [instance.\"{}\"] hourly in the plan)",
                p.0, p.0
            )?,
        }
    }
    if !s.search.is_empty() {
        let what = match (o.deadline_h.is_some(), o.throughput.is_some()) {
            (true, true) => "the deadline and throughput",
            (true, false) => "the deadline",
            _ => "the throughput",
        };
        writeln!(
            out,
            "  search: each instance and placement's smallest node count that meets {what} (doubling from 1, then halving; {}), evaluated below with two doublings of it",
            match s.search.iter().map(|f| f.tried).sum::<usize>() {
                1 => "1 count simulated".to_string(),
                n => format!("{n} counts simulated"),
            }
        )?;
        for f in &s.search {
            let knobs = if f.knobs.is_empty() { String::new() } else { format!(" ({})", f.knobs) };
            let why = f.short.as_ref().map_or(String::new(), |(n, why)| format!(" ({n}: {why})"));
            match f.nodes {
                Some(n) => writeln!(
                    out,
                    "    {} {}{knobs}: {n} node{}{why}",
                    f.instance,
                    f.placement.name(),
                    if n == 1 { "" } else { "s" }
                )?,
                None => writeln!(
                    out,
                    "    {} {}{knobs}: none up to {} node{}, {}{why}",
                    f.instance,
                    f.placement.name(),
                    f.cap,
                    if f.cap == 1 { "" } else { "s" },
                    f.cap_why
                )?,
            }
        }
    }
    writeln!(out)?;
    // Columns as wide as their widest cell, at least as wide as they are usually.
    let cell =
        |least: usize, f: &dyn Fn(&Ranked) -> usize| r.ranked.iter().map(f).fold(least, usize::max);
    let wi = cell(20, &|k| k.outcome.instance.chars().count());
    let wk = cell(28, &|k| k.outcome.knobs.chars().count());
    let wb = cell(22, &|k| k.outcome.metrics.as_ref().map_or(0, |m| m.bound.chars().count()));
    writeln!(
        out,
        "{:>4} {:1} {:<wi$} {:>5} {:>5} {:<8} {:<wk$} {:>9} {:>10} {:>5} {:<wb$} {:>11} {:>9} {:>8} {:>9} {:>10} {:>6}",
        "rank",
        "P",
        "instance",
        "nodes",
        "GPUs",
        "place",
        "knobs",
        "step ms",
        rate,
        "eff",
        "bound",
        "mem GiB",
        "$/h",
        "$/1M smp",
        "time",
        "cost",
        "band"
    )?;
    // Every ranked candidate has metrics (rank keeps only those).
    for (k, m) in r.ranked.iter().filter_map(|k| Some((k, k.outcome.metrics.as_ref()?))) {
        let c = &k.outcome;
        writeln!(
            out,
            "{:>4} {:1} {:<wi$} {:>5} {:>5} {:<8} {:<wk$} {:>9.2} {:>10.1} {:>5.3} {:<wb$} {:>11} {:>9} {:>8} {:>9} {:>10} {:>6}",
            k.rank,
            if k.pareto { "*" } else { "" },
            c.instance,
            c.nodes,
            c.gpus,
            c.placement.name(),
            if c.knobs.is_empty() { "-" } else { &c.knobs },
            m.step_ms,
            m.samples_per_s,
            m.scaling_efficiency,
            m.bound,
            match m.memory_usable_gib > 0.0 {
                true => format!("{:.1}/{:.1}", m.memory_gib, m.memory_usable_gib),
                false => "-".into(),
            },
            opt(m.usd_per_hour, |x| format!("{x:.2}")),
            opt(m.usd_per_m_samples, |x| format!("{x:.2}")),
            hours(m.train_hours),
            opt(m.train_usd, usd),
            format!("{:.1}%", 100.0 * m.band),
        )?;
    }
    if !r.ranked.is_empty() {
        writeln!(out, "\n(P *: on the Pareto front of time and cost to train)")?;
        if !s.collective {
            writeln!(
                out,
                "(mem GiB: per GPU / what the GPU offers the job, its memory less workload.memory_headroom's share for the allocator)"
            )?;
        }
        // Each band once, widest first, with where it comes from.
        let mut bands: Vec<(f64, &str)> = r
            .ranked
            .iter()
            .filter_map(|k| k.outcome.metrics.as_ref().map(|m| (m.band, m.band_from.as_str())))
            .collect();
        bands.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
        bands.dedup();
        let m =
            if s.collective { crate::plan::band::COLLECTIVE } else { crate::plan::band::TRAINING };
        writeln!(
            out,
            "(band: how far the step, time and cost may be either way: collsim's held-out median error on the\n {} most like the candidate ({}):",
            if s.collective { "nccl-tests clusters" } else { "published training runs" },
            m.source
        )?;
        for (b, from) in bands {
            writeln!(out, "  {:>5.1} %  {from}", 100.0 * b)?;
        }
        let whose = if o.minimise == Minimise::Time { "fastest" } else { "cheapest" };
        writeln!(
            out,
            " the recommendation's margin is the {whose} solution's band, {:.1} %)",
            100.0 * r.band
        )?;
    }
    let beside: Vec<(&Ranked, &crate::plan::Metrics, &crate::plan::Beside)> = r
        .ranked
        .iter()
        .filter_map(|k| {
            let m = k.outcome.metrics.as_ref()?;
            Some((k, m, m.beside.as_ref()?))
        })
        .collect();
    if !beside.is_empty() {
        writeln!(
            out,
            "\nbeside the jobs already on the cluster (speed beside / speed alone: 1.00 unchanged; the step above is beside them):"
        )?;
        for (k, m, b) in beside {
            let theirs: Vec<String> =
                b.neighbours.iter().map(|(n, x)| format!("{n} {x:.3}")).collect();
            writeln!(
                out,
                "  {:>3} {}: itself {:.3} ({:.2} ms alone); {}",
                k.rank,
                label(&k.outcome),
                b.alone_step_ms / m.step_ms,
                b.alone_step_ms,
                theirs.join(", ")
            )?;
        }
    }
    if let Some(rec) = &r.recommendation {
        writeln!(out, "\nrecommendation: {rec}")?;
    }
    if !r.rejected.is_empty() {
        writeln!(out, "\nrejected ({}):", r.rejected.len())?;
        for c in &r.rejected {
            writeln!(out, "  {}: {}", label(c), c.rejected.as_deref().unwrap_or(""))?;
        }
    }
    Ok(())
}

/// Writes the summary, the ranked solutions, the rejected candidates and the recommendation
/// as one JSON document.
pub fn json(s: &Summary, r: &Ranking, out: &mut dyn Write) -> io::Result<()> {
    let v = serde_json::json!({
        "plan": s,
        "ranked": r.ranked,
        "rejected": r.rejected,
        "recommendation": r.recommendation,
        "recommended": r.recommended,
        "band": r.band,
    });
    super::write_json(&v, out)
}

#[derive(serde::Serialize)]
struct CsvRow<'a> {
    rank: Option<usize>,
    pareto: bool,
    index: usize,
    instance: &'a str,
    nodes: usize,
    gpus: usize,
    placement: &'a str,
    knobs: &'a str,
    step_ms: Option<f64>,
    samples_per_s: Option<f64>,
    tokens_per_s: Option<f64>,
    scaling_efficiency: Option<f64>,
    compute_ms: Option<f64>,
    exposed_comm_ms: Option<f64>,
    bound: Option<&'a str>,
    memory_gib: Option<f64>,
    memory_usable_gib: Option<f64>,
    usd_per_hour: Option<f64>,
    usd_per_m_samples: Option<f64>,
    train_hours: Option<f64>,
    train_usd: Option<f64>,
    rejected: Option<&'a str>,
}

fn csv_row(rank: Option<usize>, pareto: bool, o: &Outcome) -> CsvRow<'_> {
    let m = o.metrics.as_ref();
    CsvRow {
        rank,
        pareto,
        index: o.index,
        instance: &o.instance,
        nodes: o.nodes,
        gpus: o.gpus,
        placement: o.placement.name(),
        knobs: &o.knobs,
        step_ms: m.map(|m| m.step_ms),
        samples_per_s: m.map(|m| m.samples_per_s),
        tokens_per_s: m.and_then(|m| m.tokens_per_s),
        scaling_efficiency: m.map(|m| m.scaling_efficiency),
        compute_ms: m.map(|m| m.compute_ms),
        exposed_comm_ms: m.map(|m| m.exposed_comm_ms),
        bound: m.map(|m| m.bound.as_str()),
        memory_gib: m.map(|m| m.memory_gib),
        memory_usable_gib: m.map(|m| m.memory_usable_gib),
        usd_per_hour: m.and_then(|m| m.usd_per_hour),
        usd_per_m_samples: m.and_then(|m| m.usd_per_m_samples),
        train_hours: m.map(|m| m.train_hours),
        train_usd: m.and_then(|m| m.train_usd),
        rejected: o.rejected.as_deref(),
    }
}

/// One line per candidate, solutions in rank order, then the rejected (rank empty).
pub fn csv(r: &Ranking, out: &mut dyn Write) -> io::Result<()> {
    let mut w = ::csv::Writer::from_writer(out);
    for k in &r.ranked {
        w.serialize(csv_row(Some(k.rank), k.pareto, &k.outcome)).map_err(io::Error::other)?;
    }
    for o in &r.rejected {
        w.serialize(csv_row(None, false, o)).map_err(io::Error::other)?;
    }
    w.flush()
}

/// Tick positions for a log axis from `lo` to `hi`: 1-2-5 in each decade, or every integer
/// multiple of the decade where that leaves fewer than four.
fn ticks(lo: f64, hi: f64) -> Vec<f64> {
    let decades = lo.log10().floor() as i32..=hi.log10().ceil() as i32;
    let within = |steps: &[f64]| -> Vec<f64> {
        decades
            .clone()
            .flat_map(|d| steps.iter().map(move |m| m * 10f64.powi(d)))
            .filter(|&v| v >= lo && v <= hi)
            .collect()
    };
    let coarse = within(&[1.0, 2.0, 5.0]);
    if coarse.len() >= 4 {
        coarse
    } else {
        within(&[1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0])
    }
}

/// Draws cost to train against time to train for every priced solution, the Pareto front
/// highlighted, joined and labelled, as SVG into `svg`.
pub fn pareto_svg(svg: &mut String, s: &Summary, r: &Ranking) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let pts: Vec<(f64, f64, bool, &Outcome)> = r
        .ranked
        .iter()
        .filter_map(|k| {
            let m = k.outcome.metrics.as_ref()?;
            Some((m.train_hours, m.train_usd?, k.pareto, &k.outcome))
        })
        .collect();
    if pts.is_empty() {
        return Err("no priced solution to plot".into());
    }
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y, _, _) in &pts {
        (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
    }
    // Log axes: node counts spread points over decades.
    let pad = |a: f64, b: f64| {
        let (la, lb) = (a.max(1e-9).log10(), b.max(1e-9).log10());
        let p = ((lb - la) * 0.08).max(0.05);
        (10f64.powf(la - p), 10f64.powf(lb + p))
    };
    let (x0, x1) = pad(x0, x1);
    let (y0, y1) = pad(y0, y1);
    let root = SVGBackend::with_string(svg, (1100, 700)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let title = format!("{}: cost against time to train ({} solutions)", s.plan, pts.len());
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(80)
        .build_cartesian_2d(
            (x0..x1).log_scale().with_key_points(ticks(x0, x1)),
            (y0..y1).log_scale().with_key_points(ticks(y0, y1)),
        )
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("time to train (hours)")
        .y_desc("cost to train (USD)")
        .y_label_formatter(&|v| usd(*v))
        .x_label_formatter(&|v| {
            let t = format!("{v:.3}");
            t.trim_end_matches('0').trim_end_matches('.').to_string()
        })
        .draw()
        .map_err(|e| err(&e))?;
    let grey = super::palette::BACKGROUND;
    let (recommended, front_colour) = (super::palette::series(0), super::palette::series(1));
    chart
        .draw_series(pts.iter().filter(|p| !p.2).map(|p| Circle::new((p.0, p.1), 3, grey.filled())))
        .map_err(|e| err(&e))?
        .label("other solutions")
        .legend(move |(a, b)| Circle::new((a + 10, b), 3, grey.filled()));
    let mut front: Vec<&(f64, f64, bool, &Outcome)> = pts.iter().filter(|p| p.2).collect();
    front.sort_by(|a, b| a.0.total_cmp(&b.0));
    chart
        .draw_series(LineSeries::new(
            front.iter().map(|p| (p.0, p.1)),
            front_colour.stroke_width(2),
        ))
        .map_err(|e| err(&e))?
        .label("Pareto front (time vs cost)")
        .legend(move |(a, b)| {
            PathElement::new(vec![(a, b), (a + 20, b)], front_colour.stroke_width(2))
        });
    chart
        .draw_series(front.iter().map(|p| Circle::new((p.0, p.1), 5, front_colour.filled())))
        .map_err(|e| err(&e))?;
    if let Some(best) = r.ranked.first().and_then(|k| {
        let m = k.outcome.metrics.as_ref()?;
        Some((m.train_hours, m.train_usd?))
    }) {
        chart
            .draw_series(std::iter::once(Circle::new(best, 9, recommended.stroke_width(2))))
            .map_err(|e| err(&e))?
            .label("recommended")
            .legend(move |(a, b)| Circle::new((a + 10, b), 6, recommended.stroke_width(2)));
    }
    // Label the front's points, alternating above and below so neighbours do not collide.
    for (i, p) in front.iter().enumerate() {
        let o = p.3;
        let text = format!("{} x {} {}", o.nodes, o.instance, o.placement.name());
        let dy = if i % 2 == 0 { -18 } else { 8 };
        chart
            .draw_series(std::iter::once(
                EmptyElement::at((p.0, p.1))
                    + Text::new(text, (8, dy), ("sans-serif", 12).into_font().color(&BLACK)),
            ))
            .map_err(|e| err(&e))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.85))
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}
