//! Every plot collsim draws, parsed back from its SVG: one colour, one meaning (issue #49's
//! must-hold). Within a plot no legend colour stands for two things; across plots a colour of
//! [`collsim::report::palette::MEANINGS`] always stands for its own meaning, and the series
//! colours never take one of those.

use std::collections::{BTreeMap, BTreeSet};

use collsim::report::palette::{BACKGROUND, MEANINGS, SERIES};

use super::{collsim_ok, scratch};

/// `#RRGGBB`, upper case.
fn norm(c: &str) -> String {
    c.to_ascii_uppercase()
}

fn rgb_hex(c: plotters::style::RGBColor) -> String {
    format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
}

/// The colours a legend may use: every meaning's, every series', the background grey. Black,
/// which draws axes, ticks and text as well as the one event marker, is left out.
fn palette() -> BTreeSet<String> {
    let mut out: BTreeSet<String> = MEANINGS.iter().map(|m| norm(m.1)).collect();
    out.extend(SERIES.iter().map(|&c| rgb_hex(c)));
    out.insert(rgb_hex(BACKGROUND));
    out.remove("#000000");
    out
}

/// The SVG's elements in order: (tag, attributes, text content).
fn elements(svg: &str) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    let mut rest = svg;
    while let Some(at) = rest.find('<') {
        rest = &rest[at + 1..];
        let end = rest.find('>').unwrap_or(rest.len());
        let tag_and_attrs = &rest[..end];
        rest = &rest[(end + 1).min(rest.len())..];
        if tag_and_attrs.starts_with('/') || tag_and_attrs.starts_with('?') {
            continue;
        }
        let (tag, attrs) = tag_and_attrs.split_once(' ').unwrap_or((tag_and_attrs, ""));
        let text = if tag == "text" {
            rest[..rest.find('<').unwrap_or(0)].trim().to_string()
        } else {
            String::new()
        };
        out.push((tag.to_string(), attrs.to_string(), text));
    }
    out
}

/// An attribute's value.
fn attr(attrs: &str, name: &str) -> Option<String> {
    let key = format!("{name}=\"");
    let at = attrs.find(&key)? + key.len();
    Some(attrs[at..].split('"').next()?.to_string())
}

/// Where a swatch is drawn, (left x, centre y), if the element is one: a small rect, a small
/// circle, a short line or polyline (a legend's sample of a series).
fn swatch(tag: &str, attrs: &str) -> Option<(f64, f64)> {
    let num = |a: &str| attr(attrs, a)?.parse::<f64>().ok();
    match tag {
        "rect" => {
            let (w, h) = (num("width")?, num("height")?);
            (w <= 30.0 && h <= 20.0).then_some((num("x")?, num("y")? + h / 2.0))
        }
        "circle" => (num("r")? <= 8.0).then_some((num("cx")? - num("r")?, num("cy")?)),
        "line" => {
            let (x1, x2) = (num("x1")?, num("x2")?);
            ((x2 - x1).abs() <= 40.0).then_some((x1.min(x2), num("y1")?))
        }
        "polyline" | "path" => {
            let raw = attr(attrs, if tag == "path" { "d" } else { "points" })?;
            let nums: Vec<f64> = raw
                .split(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-'))
                .filter_map(|t| t.parse::<f64>().ok())
                .collect();
            let xs: Vec<f64> = nums.iter().step_by(2).copied().collect();
            let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            (nums.len() >= 2 && hi - lo <= 40.0).then_some((lo, nums[1]))
        }
        _ => None,
    }
}

/// A legend text's (left x, centre y): start-anchored text only (a caption or a tick label is
/// centred or end-anchored), its centre from its baseline (`dy="0.76em"`: y is its top).
fn legend_text(attrs: &str) -> Option<(f64, f64)> {
    let anchor = attr(attrs, "text-anchor").unwrap_or_else(|| "start".into());
    if anchor != "start" {
        return None;
    }
    let num = |a: &str| attr(attrs, a)?.parse::<f64>().ok();
    let size = num("font-size").unwrap_or(11.0);
    let down = if attr(attrs, "dy").is_some_and(|d| d == "0.76em") { 0.76 * size } else { 0.0 };
    Some((num("x")?, num("y")? + down - 0.35 * size))
}

/// The legend of an SVG: each swatch (a small shape filled or stroked in a palette colour)
/// with a start-anchored text just to its right on its row, as (colour, what the text names:
/// before any ": figures").
fn legend(svg: &str) -> Vec<(String, String)> {
    let palette = palette();
    let els = elements(svg);
    let texts: Vec<((f64, f64), &str)> = els
        .iter()
        .filter(|(tag, _, text)| tag == "text" && !text.is_empty() && text.parse::<f64>().is_err())
        .filter_map(|(_, attrs, text)| Some((legend_text(attrs)?, text.as_str())))
        .collect();
    let mut out = Vec::new();
    for (tag, attrs, _) in &els {
        let colour = ["fill", "stroke"]
            .iter()
            .filter_map(|a| attr(attrs, a))
            .map(|c| norm(&c))
            .find(|c| palette.contains(c));
        let (Some(colour), Some((sx, sy))) = (colour, swatch(tag, attrs)) else { continue };
        let named = texts
            .iter()
            .filter(|((tx, ty), _)| (15.0..=60.0).contains(&(tx - sx)) && (ty - sy).abs() <= 6.0)
            .min_by(|a, b| (a.0.0 - sx).total_cmp(&(b.0.0 - sx)));
        if let Some((_, text)) = named {
            let name = text.split(": ").next().unwrap_or(text).to_string();
            out.push((colour, name));
        }
    }
    out
}

/// Runs collsim writing a plot into scratch and returns the SVG.
fn plot(name: &str, args: &[&str]) -> String {
    let path = scratch().join(format!("plots-{name}.svg"));
    let _ = std::fs::remove_file(&path);
    let mut all: Vec<&str> = args.to_vec();
    let p = path.to_str().unwrap().to_string();
    all.extend(["--plot", &p]);
    collsim_ok(&all);
    std::fs::read_to_string(&path).unwrap()
}

#[test]
fn every_plot_uses_each_legend_colour_for_one_meaning() {
    let plots = [
        ("ddp-step", plot("ddp-step", &["simulate", "scenarios/resnet50-dgx-a100-4node.toml"])),
        ("fsdp-step", plot("fsdp-step", &["simulate", "scenarios/llama7b-fsdp-p5-16node.toml"])),
        ("3d-step", plot("3d-step", &["simulate", "scenarios/gpt-39b-3d-dgx-a100-32node.toml"])),
        (
            "ddp-sweep",
            plot(
                "ddp-sweep",
                &[
                    "simulate",
                    "scenarios/resnet50-dgx-a100-4node.toml",
                    "--sweep",
                    "ddp.comm_hook=none,fp16",
                    "--sweep",
                    "ddp.bucket_cap_mb=5,25",
                ],
            ),
        ),
        ("collective", plot("collective", &["simulate", "scenarios/quickstart.toml"])),
        (
            "collective-sweep",
            plot(
                "collective-sweep",
                &[
                    "simulate",
                    "--topology",
                    "dgx-h100",
                    "--nodes",
                    "2",
                    "--sweep",
                    "nccl.NCCL_ALGO=Ring,Tree,NVLSTree",
                ],
            ),
        ),
        (
            "validate",
            plot(
                "validate",
                &[
                    "validate",
                    "--log",
                    "calibration/data/H100_1N8G_AR_RING_TOGETHER.log",
                    "--nccl",
                    "NCCL_ALGO=Ring",
                ],
            ),
        ),
        ("plan", plot("plan", &["plan", "scenarios/plan-llama7b-fsdp.toml"])),
    ];
    let meaning_of: BTreeMap<String, &str> = MEANINGS.iter().map(|m| (norm(m.1), m.0)).collect();
    let mut problems = Vec::new();
    for (name, svg) in &plots {
        let entries = legend(svg);
        // The reader finds each plot's legend (a test of the test).
        let expected: &[&str] = match *name {
            "ddp-step" | "fsdp-step" => {
                &["forward (per layer)", "exposed communication", "compute, FLOP-bound"]
            }
            "3d-step" => &["pipeline bubble and p2p", "compute, FLOP-bound"],
            "ddp-sweep" => &["compute, FLOP-bound", "workload.ddp.bucket_cap_mb=25"],
            "collective" => &["all_reduce on 1 x dgx-h100 (8 GPUs), NCCL's choice per size"],
            "collective-sweep" => &["nccl.NCCL_ALGO=Ring", "nccl.NCCL_ALGO=NVLSTree"],
            "validate" => &["predicted (band", "measured"],
            _ => &["Pareto front (time vs cost)"],
        };
        for e in expected {
            assert!(
                entries.iter().any(|(_, l)| l.replace("&apos;", "'") == *e),
                "{name}: no legend entry {e:?} in {entries:?}"
            );
        }
        let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
        for (colour, label) in &entries {
            if let Some(other) = seen.insert(colour, label)
                && other != label
            {
                problems.push(format!("{name}: {colour} means both {other:?} and {label:?}"));
            }
            if let Some(m) = meaning_of.get(colour)
                && !label.starts_with(m)
            {
                problems.push(format!("{name}: {colour} is {m:?} everywhere, here {label:?}"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_legend_reader_sees_a_colour_used_twice() {
    let svg = r##"<svg><rect x="1" y="5" width="14" height="10" fill="#0072B2"/><text x="21" y="14">forward</text>
<rect x="1" y="30" width="14" height="10" fill="#0072b2"/><text x="21" y="39">backward: 3 ms</text>
<circle cx="300" cy="300" r="3" fill="#0072B2"/><text x="308" y="304" text-anchor="middle">a tick</text>
<rect x="1" y="60" width="300" height="28" fill="#0072B2"/><text x="21" y="78">a bar's label</text></svg>"##;
    let l = legend(svg);
    assert_eq!(
        l,
        [("#0072B2".to_string(), "forward".to_string()), ("#0072B2".into(), "backward".into())]
    );
}
