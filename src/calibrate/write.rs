//! Writing a calibrated profile: the base profile's text, comments and all, with the fitted
//! parameters set in place (each marked with the value it had) and a `[correction]` table.

use toml_edit::{Array, ArrayOfTables, DocumentMut, InlineTable, Item, Table, Value, value};

use super::params::{Param, proto_key};
use crate::collective::{Bands, SizeCorrection, TimingParams};
use crate::comm::{HopClass, Proto};
use crate::units::Bytes;

/// The first line of the header a written profile starts with.
const HEADER: &str = "# Written by `collsim calibrate`";

/// What `calibrate` found, to write into a profile.
pub struct Fitted<'a> {
    /// The profile's new name.
    pub name: &'a str,
    /// Where its numbers come from (one line).
    pub source: &'a str,
    /// The base profile's parameters.
    pub base: &'a TimingParams,
    /// The fitted parameters.
    pub params: &'a TimingParams,
    /// Which parameters were fitted.
    pub fitted: &'a [Param],
    /// Candidates the data did not determine, with the reason.
    pub held: &'a [(Param, String)],
    /// The size-band correction.
    pub correction: &'a SizeCorrection,
    /// The setup it is fitted on.
    pub fitted_on: &'a crate::collective::FittedOn,
}

fn marked(mut v: Value, was: &str) -> Value {
    v.decor_mut().set_suffix(format!("  # fitted; was {was}"));
    v
}

/// The table `key`, created if absent; one written inline (`key = { ... }`) becomes a
/// `[key]` table with the same entries.
fn table_mut<'d>(doc: &'d mut DocumentMut, key: &str) -> &'d mut Table {
    if !doc.get(key).is_some_and(Item::is_table) {
        // Re-inserted under a fresh key: the inline key's spacing would land inside `[key]`.
        let table = match doc.remove(key) {
            Some(Item::Value(Value::InlineTable(t))) => t.into_table(),
            _ => Table::new(),
        };
        doc.insert(key, Item::Table(table));
    }
    doc[key].as_table_mut().expect("a table was just inserted")
}

/// The base profile's `text` with `f` written in. Fails only if `text` is not TOML.
pub fn write(text: &str, f: &Fitted<'_>) -> Result<String, String> {
    // A header written by an earlier calibration is replaced, not stacked.
    let body = if text.starts_with(HEADER) {
        let mut lines = text.split_inclusive('\n');
        for l in lines.by_ref() {
            if l.trim_end() == "#" {
                break;
            }
        }
        lines.collect::<String>()
    } else {
        text.to_string()
    };
    let mut doc: DocumentMut = body.parse().map_err(|e| format!("{e}"))?;
    doc["name"] = value(f.name);
    doc["source"] = value(f.source);
    doc.remove("fitted_on");
    let mut on = Table::new();
    on.decor_mut().set_prefix(
        "\n# The setup the fit ran on: a run on another topology, GPU or NCCL release is warned\n\
         # that these values may not carry over.\n",
    );
    on["topology"] = value(f.fitted_on.topology.as_str());
    on["gpu"] = value(f.fitted_on.gpu.as_str());
    on["nccl"] = value(f.fitted_on.nccl.as_str());
    doc.insert("fitted_on", Item::Table(on));
    for &p in f.fitted {
        set(&mut doc, p, f.base, f.params);
    }
    doc.remove("correction");
    let c = f.correction;
    let mut t = Table::new();
    t.decor_mut().set_prefix(
        "\n# Size-band correction fitted by `collsim calibrate`, per mechanism (algorithm/protocol\n\
         # as `validate` prints them): in each band (from its lowest NCCL byte count) the model's\n\
         # time is multiplied by `factor`, the median of measured / model on the fit logs' sizes\n\
         # that ran that mechanism; `residual` is the 95th percentile of |ln(measured /\n\
         # corrected)| there, the half-width of the error band (time x exp(-residual) .. time x\n\
         # exp(residual)). The first bands, before any mechanism's, are for every mechanism\n\
         # without its own: factor 1, the fitted parameters' misfit over all the fit sizes.\n",
    );
    t.set_position(usize::MAX); // last, whatever was added above
    t.insert("fitted_on", value(c.fitted_on.iter().collect::<Array>()));
    let round = |v: &[f64]| v.iter().map(|x| (x * 1e6).round() / 1e6).collect::<Array>();
    let put = |t: &mut Table, k: &Bands| {
        t.insert(
            "bands",
            value(k.bands.iter().map(|&b| Bytes::new(b).to_string()).collect::<Array>()),
        );
        t.insert("factor", value(round(&k.factor)));
        t.insert("residual", value(round(&k.residual)));
    };
    put(&mut t, &c.others);
    let mut list = ArrayOfTables::new();
    for (m, k) in &c.mechanisms {
        let mut e = Table::new();
        e.insert("name", value(m.as_str()));
        put(&mut e, k);
        list.push(e);
    }
    if !list.is_empty() {
        t.insert("mechanism", Item::ArrayOfTables(list));
    }
    doc.insert("correction", Item::Table(t));

    let mut out = format!("{HEADER}: {}.\n", f.source);
    if f.fitted.is_empty() {
        out.push_str(
            "# No physical parameter fitted: the base profile's, with a size-band correction.\n",
        );
    } else {
        out.push_str(
            "# Fitted by robust least squares on log time (each marked `# fitted; was ...`):\n",
        );
        for &p in f.fitted {
            out.push_str(&format!(
                "#   {}: {} -> {}\n",
                p.name(),
                p.show(f.base),
                p.show(f.params)
            ));
        }
    }
    if !f.held.is_empty() {
        out.push_str("# Not determined by the fit data, left as they were:\n");
        for (p, why) in f.held {
            out.push_str(&format!("#   {}: {why}\n", p.name()));
        }
    }
    out.push_str("# Everything else is the base profile's, comments included.\n#\n");
    out.push_str(&doc.to_string());
    Ok(out)
}

/// Sets `p` in `doc` to its value in `params`, noting its value in `base`.
fn set(doc: &mut DocumentMut, p: Param, base: &TimingParams, params: &TimingParams) {
    match p {
        Param::CallOverhead => {
            let t = table_mut(doc, "overhead");
            t["call"] = value(marked(
                Value::from(params.call_overhead.to_string()),
                &base.call_overhead.to_string(),
            ));
        }
        Param::Bandwidth(c) => {
            let fresh = !doc.contains_table("bandwidth");
            let t = table_mut(doc, "bandwidth");
            if fresh {
                t.decor_mut().set_prefix(
                    "\n# Effective bandwidth of each link class as a fraction of the topology's figure.\n",
                );
                for k in HopClass::ALL {
                    t[k.name()] = value(base.bandwidth[k as usize]);
                }
            }
            t[c.name()] = value(marked(
                Value::from(params.bandwidth[c as usize]),
                &base.bandwidth[c as usize].to_string(),
            ));
        }
        Param::StepLatency(c) => {
            let mut inline = InlineTable::new();
            for q in Proto::ALL {
                inline.insert(proto_key(q), Value::from(params.step(c, q).to_string()));
            }
            let was = Proto::ALL
                .iter()
                .map(|&q| format!("{} {}", proto_key(q), base.step(c, q)))
                .collect::<Vec<_>>()
                .join(", ");
            let t = table_mut(doc, "step_latency");
            t[c.name()] = value(marked(Value::InlineTable(inline), &was));
        }
        Param::NvlinkEfficiency(a, q) => {
            let gpu = table_mut(doc, "gpu");
            if !gpu.contains_key(a.name()) {
                // The architecture's own table, starting from the default one.
                let mut t =
                    gpu.get("default").and_then(Item::as_table).cloned().unwrap_or_default();
                t.decor_mut().set_prefix(format!(
                    "\n# Written by calibrate for {} GPUs: [gpu.default] with the fitted values.\n",
                    a.name()
                ));
                t.set_position(usize::MAX);
                gpu.insert(a.name(), Item::Table(t));
            }
            let e = params.gpu(a).nvlink_efficiency[q as usize];
            let was = base.gpu(a).nvlink_efficiency[q as usize];
            let t = &mut gpu[a.name()];
            if let Some(inline) = t.get_mut("nvlink_efficiency").and_then(Item::as_inline_table_mut)
            {
                inline.insert(proto_key(q), Value::from(e));
                if let Some(v) = inline.get_mut(proto_key(q)) {
                    v.decor_mut().set_prefix(" ");
                }
                let v = t.get_mut("nvlink_efficiency").and_then(Item::as_value_mut);
                if let Some(v) = v {
                    v.decor_mut().set_suffix(format!("  # {} fitted; was {was}", proto_key(q)));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{DEFAULT_PROFILE, parse_profile};
    use crate::hw::Arch;
    use crate::units::Time;

    fn correction() -> SizeCorrection {
        SizeCorrection {
            others: Bands {
                bands: vec![0, 1 << 20],
                factor: vec![1.0, 1.0],
                residual: vec![0.3, 0.2],
            },
            mechanisms: vec![
                (
                    "NVLS_TREE/SIMPLE".into(),
                    Bands { bands: vec![0], factor: vec![1.5], residual: vec![0.05] },
                ),
                (
                    "RING/LL".into(),
                    Bands {
                        bands: vec![0, 64 << 10, 1 << 30],
                        factor: vec![0.5, 1.25, 1.0],
                        residual: vec![0.1, 0.0, 0.02],
                    },
                ),
            ],
            fitted_on: vec!["a.log".into(), "b \"quoted\".log".into()],
        }
    }

    #[test]
    fn a_written_profile_reads_back_with_what_was_fitted() {
        let base = parse_profile(DEFAULT_PROFILE.0, DEFAULT_PROFILE.1).unwrap();
        let mut params = base.clone();
        params.call_overhead = Time::from_us_f64(31.25);
        params.bandwidth[HopClass::Net as usize] = 0.93;
        params.step_latency[HopClass::Net as usize] =
            [Time::from_us_f64(3.0), Time::from_us_f64(4.5), Time::from_us_f64(15.0)];
        let mut volta = params.gpu_default;
        volta.nvlink_efficiency[Proto::LL128 as usize] = 0.7;
        params.gpu.push((Arch::Volta, volta));
        params.gpu.sort_by_key(|(a, _)| *a);
        params.correction = Some(correction());
        let fitted = [
            Param::CallOverhead,
            Param::Bandwidth(HopClass::Net),
            Param::StepLatency(HopClass::Net),
            Param::NvlinkEfficiency(Arch::Volta, Proto::LL128),
        ];
        let held = [(Param::Bandwidth(HopClass::Pcie), "no PCIe hop".to_string())];
        let on = crate::collective::FittedOn {
            topology: "aws-p5".into(),
            gpu: "H100-SXM5-80GB".into(),
            nccl: "2.23.4".into(),
        };
        let f = Fitted {
            fitted_on: &on,
            name: "fit",
            source: "fitted on a and b",
            base: &base,
            params: &params,
            fitted: &fitted,
            held: &held,
            correction: &correction(),
        };
        let text = write(DEFAULT_PROFILE.1, &f).unwrap();
        let back = parse_profile("fit.toml", &text).unwrap();
        assert_eq!(back.name, "fit");
        assert_eq!(back.call_overhead, params.call_overhead);
        assert_eq!(back.bandwidth, params.bandwidth);
        assert_eq!(back.step_latency, params.step_latency);
        assert_eq!(back.gpu, params.gpu);
        assert_eq!(back.correction, params.correction);
        assert!(text.contains("call = \"31.25 us\"  # fitted; was 3.04 us"), "{text}");
        assert!(text.contains("#   bandwidth.pcie: no PCIe hop"), "{text}");
        // The base profile's comments stay.
        assert!(text.contains("# Per-slice latency of one ring hop"));
        // Writing again replaces the header and the table instead of stacking them.
        let again = write(&text, &Fitted { name: "fit2", ..f }).unwrap();
        assert_eq!(again.matches("[correction]").count(), 1);
        assert_eq!(again.matches(HEADER).count(), 1);
        assert_eq!(parse_profile("fit2.toml", &again).unwrap().correction, Some(correction()));
        // A base profile writing its tables inline keeps their other entries.
        let inline = DEFAULT_PROFILE.1.replace(
            "[overhead]\n",
            "overhead = { call = \"3.04 us\", launch = \"3.12 us\", peer = \"2.8 us\" }\n[overhead_was_here]\n",
        );
        let inline = inline
            .replacen("call = \"3.04 us\"\nlaunch = \"3.12 us\"\n", "", 1)
            .replacen("peer = \"2.8 us\"\n", "", 1)
            .replace("[overhead_was_here]\n", "");
        assert!(parse_profile("inline.toml", &inline).is_ok(), "{inline}");
        let out = write(&inline, &f).unwrap();
        assert_eq!(parse_profile("out.toml", &out).unwrap().call_overhead, params.call_overhead);
        let bad = text.replace("factor = [0.5", "factor = [-1.0");
        let e = parse_profile("bad.toml", &bad).unwrap_err().to_string();
        assert!(e.contains("correction.mechanism[1].factor[0]"), "{e}");
        let bad = text.replace("name = \"RING/LL\"", "name = \"RING/FAST\"");
        let e = parse_profile("bad.toml", &bad).unwrap_err().to_string();
        assert!(
            e.starts_with("bad.toml:") && e.contains("\"RING/FAST\" is not a mechanism"),
            "{e}"
        );
        let bad = text.replace("name = \"RING/LL\"", "name = \"NVLS_TREE/SIMPLE\"");
        let e = parse_profile("bad.toml", &bad).unwrap_err().to_string();
        assert!(
            e.contains("correction.mechanism[1].name") && e.contains("has bands already"),
            "{e}"
        );
        // One [correction.mechanism] table where an array of them belongs: the table is named.
        let bad = text.replacen("[[correction.mechanism]]", "[correction.mechanism]", 1);
        let bad = &bad[..bad.find("[[correction.mechanism]]").unwrap()];
        let e = parse_profile("bad.toml", bad).unwrap_err().to_string();
        assert!(e.starts_with("bad.toml:") && e.contains("correction.mechanism: "), "{e}");
        let bad = text.replace("factor = [1.5]", "factor = [0.0]");
        let e = parse_profile("bad.toml", &bad).unwrap_err().to_string();
        let why = "correction.mechanism[0].factor[0]: must be between 0.1 and 10, got 0";
        assert!(e.ends_with(why), "{e}");
    }
}
