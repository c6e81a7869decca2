//! One colour, one meaning, in every plot collsim draws.
//!
//! Two sets, disjoint. What a part of a training step *is* (forward, exposed communication, an
//! input stall, …) has one colour wherever it is drawn — the step's timeline, its breakdown
//! bar, a sweep's stacked bars — from Paul Tol's colour-blind-safe "muted", "light" and
//! "vibrant" schemes and greys (Tol, *Colour Schemes*, SRON/EPS/TN/09-002, 2021). Series that
//! are only told apart within one plot (a collective plot's lines, a sweep's series, model
//! against measurement, the Pareto front against the recommendation) take Okabe and Ito's
//! colour-blind-safe palette (*Color Universal Design*, 2008) without its yellow, too pale
//! for a line, and without black, which marks events; the legend of that plot says what each
//! is. A test parses every plot's SVG and checks that no legend colour stands for two things.

use plotters::style::RGBColor;

/// What a part of a training step is, and its colour (`#rrggbb`): the step plot's bars and
/// legend, and the breakdown's parts ([`crate::workload::ddp::Breakdown::parts`], by name).
pub const MEANINGS: [(&str, &str); 25] = [
    ("no_sync micro-step", "#DDDDDD"),
    ("forward (per layer)", "#88CCEE"),
    ("backward (per layer)", "#332288"),
    ("DDP copies and hooks", "#117733"),
    ("optimizer step", "#999933"),
    ("bucket collective", "#CC6677"),
    ("other collective", "#882255"),
    ("hook compute (compute waits)", "#AA4499"),
    ("exposed communication", "#EE8866"),
    ("input stall", "#777777"),
    ("bucket ready", "#000000"),
    ("compute, FLOP-bound", "#44AA99"),
    ("compute, memory-bound", "#99DDFF"),
    ("kernel launch waits", "#DDCC77"),
    ("measured layer times", "#BBCC33"),
    ("tensor/expert-parallel comm", "#FFAABB"),
    ("fp8 amax all-reduces", "#EEDD88"),
    ("pipeline bubble and p2p", "#AAAAAA"),
    ("rank skew wait", "#EE3377"),
    // DataParallel's own parts (Tol's "vibrant").
    ("DP replication", "#0077BB"),
    ("DP scatter and gather", "#33BBEE"),
    ("DP single launcher (GIL)", "#CC3311"),
    ("DP reduce to GPU 0", "#009988"),
    // The second shade of a lane whose neighbouring bars alternate (no legend entry).
    ("backward (per layer), alternate", "#6655AA"),
    ("bucket collective, alternate", "#E8A6B2"),
];

/// The colour of `meaning` (one of [`MEANINGS`]); a mid grey for a name it does not list, which
/// a test keeps from happening.
pub fn of(meaning: &str) -> &'static str {
    MEANINGS.iter().find(|m| m.0 == meaning).map_or("#BBBBBB", |m| m.1)
}

/// [`of`] as plotters' colour.
pub fn rgb(meaning: &str) -> RGBColor {
    hex(of(meaning))
}

/// `#rrggbb` as plotters' colour (black for anything else).
pub fn hex(h: &str) -> RGBColor {
    let c = |i: usize| h.get(i..i + 2).and_then(|x| u8::from_str_radix(x, 16).ok()).unwrap_or(0);
    RGBColor(c(1), c(3), c(5))
}

/// Text drawn over a fill of colour `h` (`#rrggbb`): white on dark fills, black on light ones
/// (relative luminance, ITU-R BT.709 weights, below 0.35: dark).
pub fn ink(h: &str) -> &'static str {
    let RGBColor(r, g, b) = hex(h);
    let lum = (0.2126 * r as f64 + 0.7152 * g as f64 + 0.0722 * b as f64) / 255.0;
    if lum < 0.35 { "#ffffff" } else { "#000000" }
}

/// Okabe and Ito's palette without yellow and black: one colour per series of a plot, in
/// order (they repeat after six, the markers then telling the series apart).
pub const SERIES: [RGBColor; 6] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(230, 159, 0),
];

/// The colour of series `i`.
pub fn series(i: usize) -> RGBColor {
    SERIES[i % SERIES.len()]
}

/// Background candidates of a plot (the plan's solutions off the front): a light grey no
/// meaning uses.
pub const BACKGROUND: RGBColor = RGBColor(187, 187, 187);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_meaning_has_its_own_colour_and_no_series_takes_one() {
        let mut seen = std::collections::BTreeMap::new();
        for (m, c) in MEANINGS {
            assert!(c.len() == 7 && c.starts_with('#'), "{m}: {c}");
            if let Some(other) = seen.insert(c.to_ascii_uppercase(), m) {
                panic!("{c} means both {other} and {m}");
            }
        }
        for s in SERIES {
            let h = format!("#{:02X}{:02X}{:02X}", s.0, s.1, s.2);
            assert!(!seen.contains_key(&h), "series colour {h} is also {:?}", seen.get(&h));
        }
        let bg = format!("#{:02X}{:02X}{:02X}", BACKGROUND.0, BACKGROUND.1, BACKGROUND.2);
        assert!(!seen.contains_key(&bg));
        // Every part of a step's breakdown has its colour.
        let parts = crate::workload::ddp::Breakdown::default().parts();
        for (name, _, _) in parts {
            assert!(MEANINGS.iter().any(|m| m.0 == name), "{name} has no colour");
        }
    }
}
