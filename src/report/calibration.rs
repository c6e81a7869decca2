//! The report `collsim calibrate` prints: the parameters fitted (or held, and why), the size
//! bands, and every log's error at each stage.

use crate::calibrate::pipeline::Calibration;
use crate::units::Bytes;

/// The text report.
pub fn text(c: &Calibration) -> String {
    let pf = &c.params;
    let mut report = String::new();
    report.push_str(&format!(
        "calibrate: {} on {} x {} GPUs; fit on {} log(s) ({} sizes), checked on {}\n\n",
        c.machine,
        c.nodes,
        c.gpus_per_node,
        c.fitted_on.len(),
        c.fit_sizes,
        c.checked
    ));
    if pf.fitted.is_empty() {
        report.push_str("  no physical parameter fitted\n");
    } else {
        report.push_str(&format!(
            "  parameters (robust least squares on log time, {} iteration(s); Huber cost per size {:.5} -> {:.5}):\n",
            pf.iterations, pf.cost.0, pf.cost.1
        ));
        for p in &pf.fitted {
            report.push_str(&format!(
                "    {:<36} {} -> {}\n",
                p.name(),
                p.show(&c.base),
                p.show(&pf.params)
            ));
        }
    }
    for (p, why) in &pf.held {
        report.push_str(&format!("    {:<36} held: {why}\n", p.name()));
    }
    for w in &c.warnings {
        report.push_str(&format!("  warning: {w}\n"));
    }
    report.push_str(if c.factors {
        "\n  size bands, per mechanism the fit logs ran (every other: factor 1)\n"
    } else {
        "\n  size bands, per mechanism the fit logs ran (--no-correction: factors kept at 1)\n"
    });
    report.push_str("  mechanism            band from      factor  residual (95%)\n");
    let k = &c.correction;
    let mechanisms = k.mechanisms.iter().map(|(m, b)| (m.as_str(), b));
    for (m, b) in mechanisms.chain(std::iter::once(("others", &k.others))) {
        for (i, lo) in b.bands.iter().enumerate() {
            report.push_str(&format!(
                "  {:<18} {:>12}   {:>7.3}   {:>6.1} %\n",
                if i == 0 { m } else { "" },
                Bytes::new(*lo).to_string(),
                b.factor[i],
                100.0 * (b.residual[i].exp() - 1.0)
            ));
        }
    }
    for n in &c.notes {
        report.push_str(&format!("  note: {n}\n"));
    }
    report.push_str(&format!(
        "\n  median / p95 |error| %: base model, fitted parameters, and with the size bands too\n  {:<48} {:<5} {:>5} {:>5}  {:>15}  {:>15}  {:>15}\n",
        "log", "set", "ranks", "sizes", "model", "parameters", "calibrated"
    ));
    for l in &c.logs {
        let [(bm, bp), (mm, mp), (am, ap)] = l.errors;
        report.push_str(&format!(
            "  {:<48} {:<5} {:>5} {:>5}  {:>6.1} / {:>6.1}  {:>6.1} / {:>6.1}  {:>6.1} / {:>6.1}\n",
            l.name,
            if l.is_fit { "fit" } else { "check" },
            l.ranks,
            l.sizes,
            bm,
            bp,
            mm,
            mp,
            am,
            ap
        ));
    }
    report
}
