//! Calibration profiles: the timing parameters of the model as data
//! (`calibration/profiles/*.toml`), validated into [`TimingParams`].

use super::raw::{RawCorrection, RawGpuParams, RawPerProto, RawProfile};
use super::{ConfigError, Source};
use crate::collective::{Bands, GpuParams, SizeCorrection, TimingParams};
use crate::comm::{Algo, Proto};
use crate::hw::Arch;
use crate::units::{Bandwidth, Bytes, Time};

/// The profile used when none is given (compiled in from `calibration/profiles/default.toml`).
pub const DEFAULT_PROFILE: (&str, &str) =
    ("calibration/profiles/default.toml", include_str!("../../calibration/profiles/default.toml"));

/// Largest effective-bandwidth fraction a profile may give a link class: the topology files
/// hold NCCL's effective figures, so a fit far above them means the topology is wrong.
pub const MAX_BANDWIDTH_FRACTION: f64 = 2.0;

/// Smallest effective-bandwidth fraction (and NVLink payload efficiency) a profile may give: a
/// link at a twentieth of its NCCL figure is broken, not slow, and `calibrate` fits no lower.
pub const MIN_BANDWIDTH_FRACTION: f64 = 0.05;

/// Longest latency a profile may give a call, a step or a hand-over: 10 ms, a hundred times
/// the slowest per-call cost NCCL's own tables carry (TCP sockets, tens of µs) and five times
/// the most `calibrate` fits (50 x the default 40 µs network step).
pub const MAX_PROFILE_LATENCY: Time = Time::from_ns(10_000_000);

/// The range a size-band correction factor may take: one order of magnitude either way. A
/// band whose measured times are more than 10x off the model's, or less than a tenth of them,
/// shows a mechanism the model lacks or a measurement that is wrong (a flat log of 50 µs at
/// every size asked `calibrate` for 0.009), not a scale to correct; the largest misfit of any
/// curve in the repository's manifest is 4.6x (Polaris's Tree). Applies to profiles read and to
/// factors `calibrate` fits.
pub const CORRECTION_FACTOR_RANGE: (f64, f64) = (0.1, 10.0);

/// The largest residual a band may record: the p95 of |ln(measured / model)|, so 5 is an
/// error band of e^5 ≈ 150x either way, past any fit worth keeping; it keeps the band's
/// exponential finite.
pub const MAX_CORRECTION_RESIDUAL: f64 = 5.0;

fn per_proto(src: &Source<'_>, field: &str, raw: &RawPerProto) -> Result<[Time; 3], ConfigError> {
    let t = |name: &str, v: &toml::Spanned<super::RawQuantity>| {
        src.check(&format!("{field}.{name}"), v, latency)
    };
    Ok([t("LL", &raw.ll)?, t("LL128", &raw.ll128)?, t("Simple", &raw.simple)?])
}

fn gpu_params(src: &Source<'_>, key: &str, raw: &RawGpuParams) -> Result<GpuParams, ConfigError> {
    let e = &raw.nvlink_efficiency;
    let eff = |name: &str, v: &toml::Spanned<f64>| {
        src.check(&format!("gpu.{key}.nvlink_efficiency.{name}"), v, |&x| {
            if (MIN_BANDWIDTH_FRACTION..=1.0).contains(&x) {
                Ok(x)
            } else {
                Err(format!("must be in [{MIN_BANDWIDTH_FRACTION}, 1], got {x}"))
            }
        })
    };
    Ok(GpuParams {
        sync: per_proto(src, &format!("gpu.{key}.sync"), &raw.sync)?,
        nvlink_efficiency: [eff("LL", &e.ll)?, eff("LL128", &e.ll128)?, eff("Simple", &e.simple)?],
        nvls_call: match &raw.nvls_call {
            Some(t) => src.check(&format!("gpu.{key}.nvls_call"), t, latency)?,
            None => Time::ZERO,
        },
        p2p_channel: match &raw.p2p_channel {
            Some(r) => src
                .check(&format!("gpu.{key}.p2p_channel"), r, |q| q.parse_with(Bandwidth::parse))?
                .bytes_per_sec(),
            None => f64::INFINITY,
        },
    })
}

/// One set of size bands (`field` names it in errors: "correction", whose first band must
/// start at 0, or "correction.mechanism[i]").
fn bands(
    src: &Source<'_>,
    field: &str,
    from_zero: bool,
    raw_bands: &toml::Spanned<Vec<toml::Spanned<super::RawQuantity>>>,
    raw_factor: &toml::Spanned<Vec<toml::Spanned<f64>>>,
    raw_residual: &toml::Spanned<Vec<toml::Spanned<f64>>>,
) -> Result<Bands, ConfigError> {
    let mut bands = Vec::new();
    for (i, b) in raw_bands.get_ref().iter().enumerate() {
        let v = src.check(&format!("{field}.bands[{i}]"), b, |q| q.parse_with(Bytes::parse))?;
        let v = v.get();
        let ok = if i == 0 { v == 0 || !from_zero } else { bands.last().is_some_and(|&p| v > p) };
        if !ok {
            let why = if i == 0 { "the first band must start at 0 B" } else { "bands must ascend" };
            return Err(src.error_at(b.span().start, format!("{field}.bands[{i}]: {why}")));
        }
        bands.push(v);
    }
    let numbers =
        |name: &str, list: &toml::Spanned<Vec<toml::Spanned<f64>>>, (min, max): (f64, f64)| {
            if list.get_ref().len() != bands.len() {
                return Err(src.error_at(
                    list.span().start,
                    format!(
                        "{field}.{name}: {} values for {} bands",
                        list.get_ref().len(),
                        bands.len()
                    ),
                ));
            }
            list.get_ref()
                .iter()
                .enumerate()
                .map(|(i, x)| {
                    src.check(&format!("{field}.{name}[{i}]"), x, |&v| {
                        if (min..=max).contains(&v) {
                            Ok(v)
                        } else {
                            Err(format!("must be between {min} and {max}, got {v}"))
                        }
                    })
                })
                .collect::<Result<Vec<f64>, _>>()
        };
    if bands.is_empty() {
        return Err(src.error_at(raw_bands.span().start, format!("{field}.bands: empty")));
    }
    Ok(Bands {
        factor: numbers("factor", raw_factor, CORRECTION_FACTOR_RANGE)?,
        residual: numbers("residual", raw_residual, (0.0, MAX_CORRECTION_RESIDUAL))?,
        bands,
    })
}

/// Whether `name` is a mechanism as `validate` prints it: an algorithm ("RING", "NVLS_TREE",
/// "P2P" …), a slash, a protocol ("LL", "LL128", "SIMPLE").
fn is_mechanism(name: &str) -> bool {
    name.split_once('/').is_some_and(|(a, p)| {
        (a == "P2P" || Algo::ALL.iter().any(|x| x.name() == a))
            && Proto::ALL.iter().any(|x| x.name() == p)
    })
}

fn correction(
    src: &Source<'_>,
    raw: Option<&RawCorrection>,
) -> Result<Option<SizeCorrection>, ConfigError> {
    let Some(raw) = raw else { return Ok(None) };
    let others = bands(src, "correction", true, &raw.bands, &raw.factor, &raw.residual)?;
    let mut mechanisms: Vec<(String, Bands)> = Vec::new();
    for (i, m) in raw.mechanism.iter().enumerate() {
        let field = format!("correction.mechanism[{i}]");
        let name = src.check(&format!("{field}.name"), &m.name, |n| {
            if !is_mechanism(n) {
                Err(format!(
                    "\"{n}\" is not a mechanism (ALGORITHM/PROTOCOL as validate prints them, \
                     e.g. \"RING/LL128\" or \"NVLS_TREE/SIMPLE\")"
                ))
            } else if mechanisms.iter().any(|(x, _)| x == n) {
                Err(format!("\"{n}\" has bands already"))
            } else {
                Ok(n.clone())
            }
        })?;
        mechanisms.push((name, bands(src, &field, false, &m.bands, &m.factor, &m.residual)?));
    }
    mechanisms.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(Some(SizeCorrection { others, mechanisms, fitted_on: raw.fitted_on.clone() }))
}

/// A `[bandwidth]` fraction: in [[`MIN_BANDWIDTH_FRACTION`], [`MAX_BANDWIDTH_FRACTION`]].
fn fraction(src: &Source<'_>, name: &str, v: &toml::Spanned<f64>) -> Result<f64, ConfigError> {
    src.check(&format!("bandwidth.{name}"), v, |&x| {
        if (MIN_BANDWIDTH_FRACTION..=MAX_BANDWIDTH_FRACTION).contains(&x) {
            Ok(x)
        } else {
            Err(format!("must be in [{MIN_BANDWIDTH_FRACTION}, {MAX_BANDWIDTH_FRACTION}], got {x}"))
        }
    })
}

/// A latency of a profile: a time up to [`MAX_PROFILE_LATENCY`].
fn latency(q: &super::RawQuantity) -> Result<Time, String> {
    let t = q.parse_with(Time::parse)?;
    if t > MAX_PROFILE_LATENCY {
        return Err(format!(
            "{t} is past the {MAX_PROFILE_LATENCY} a profile's latencies may take (NCCL's slowest per-call costs are tens of µs)"
        ));
    }
    Ok(t)
}

/// Parses and validates a profile's text; `file` names it in errors.
pub fn parse_profile(file: &str, text: &str) -> Result<TimingParams, ConfigError> {
    let src = Source { name: file, text };
    let raw: RawProfile = src.parse()?;
    let mut gpu_default = None;
    let mut gpu = Vec::new();
    for (key, params) in &raw.gpu {
        let name = key.get_ref();
        let p = gpu_params(&src, name, params)?;
        if name == "default" {
            gpu_default = Some(p);
        } else if let Some(arch) = Arch::parse(name) {
            gpu.push((arch, p));
        } else {
            return Err(src.error_at(
                key.span().start,
                format!(
                    "gpu.{name}: unknown GPU architecture (expected default, volta, ampere, \
                     hopper or blackwell)"
                ),
            ));
        }
    }
    let Some(gpu_default) = gpu_default else {
        return Err(src.error(
            "missing table [gpu.default] (parameters for architectures \
                              without their own [gpu.<arch>] table)",
        ));
    };
    gpu.sort_by_key(|(a, _)| *a);
    Ok(TimingParams {
        gpu_default,
        gpu,
        name: raw.name,
        source: raw.source,
        fitted_on: match &raw.fitted_on {
            // Printed in warnings and compared with the run's: plain names, a 2.x release.
            Some(f) => Some(crate::collective::FittedOn {
                topology: src.check("fitted_on.topology", &f.topology, |t| {
                    super::plain_text(t).map(|()| t.clone())
                })?,
                gpu: src
                    .check("fitted_on.gpu", &f.gpu, |t| super::plain_text(t).map(|()| t.clone()))?,
                nccl: src.check("fitted_on.nccl", &f.nccl, |v| {
                    match crate::comm::tuning::NcclVersion::minor(v) {
                        Some(_) if super::plain_text(v).is_ok() => Ok(v.clone()),
                        _ => Err(format!("{v:?} is no NCCL 2.x release (\"2.22.3\")")),
                    }
                })?,
            }),
            None => None,
        },
        call_overhead: src.check("overhead.call", &raw.overhead.call, latency)?,
        launch: match &raw.overhead.launch {
            Some(l) => src.check("overhead.launch", l, latency)?,
            None => Time::ZERO,
        },
        p2p_peer: match &raw.overhead.peer {
            Some(l) => src.check("overhead.peer", l, latency)?,
            None => Time::ZERO,
        },
        correction: correction(&src, raw.correction.as_ref())?,
        bandwidth: match &raw.bandwidth {
            None => [1.0; 3],
            Some(b) => [
                fraction(&src, "nvlink", &b.nvlink)?,
                fraction(&src, "pcie", &b.pcie)?,
                fraction(&src, "net", &b.net)?,
            ],
        },
        nvls_bandwidth: match raw.bandwidth.as_ref().and_then(|b| b.nvls.as_ref()) {
            None => 1.0,
            Some(v) => fraction(&src, "nvls", v)?,
        },
        step_latency: [
            per_proto(&src, "step_latency.nvlink", &raw.step_latency.nvlink)?,
            per_proto(&src, "step_latency.pcie", &raw.step_latency.pcie)?,
            per_proto(&src, "step_latency.net", &raw.step_latency.net)?,
        ],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_profile_parses() {
        let p = parse_profile(DEFAULT_PROFILE.0, DEFAULT_PROFILE.1).unwrap();
        assert!(p.call_overhead > Time::ZERO);
        assert_ne!(p.gpu(Arch::Ampere), p.gpu(Arch::Hopper));
        assert_eq!(p.gpu(Arch::Volta), &p.gpu_default);
    }

    fn with_gpu_tables(tables: &str) -> String {
        let base = DEFAULT_PROFILE.1;
        format!("{}{tables}", &base[..base.find("[gpu.default]").unwrap()])
    }

    const DEFAULT_TABLE: &str = "[gpu.default]\n\
        sync = { LL = \"0 us\", LL128 = \"0 us\", Simple = \"0 us\" }\n\
        nvlink_efficiency = { LL = 0.5, LL128 = 0.9, Simple = 1.0 }\n";

    #[test]
    fn gpu_tables_are_validated() {
        let err = |text: &str| parse_profile("p.toml", text).unwrap_err().to_string();
        let e = err(&with_gpu_tables(&DEFAULT_TABLE.replace("gpu.default", "gpu.kepler")));
        assert!(
            e.starts_with("p.toml:") && e.contains("gpu.kepler: unknown GPU architecture"),
            "{e}"
        );
        let e = err(&with_gpu_tables(&DEFAULT_TABLE.replace("LL128 = 0.9", "LL128 = 1.5")));
        assert!(e.contains("gpu.default.nvlink_efficiency.LL128: must be in [0.05, 1]"), "{e}");
        let e = err(&with_gpu_tables(&DEFAULT_TABLE.replace("gpu.default", "gpu.hopper")));
        assert!(e.contains("missing table [gpu.default]"), "{e}");
        let e = err(&with_gpu_tables(&DEFAULT_TABLE.replace("\"0 us\" }", "\"fast\" }")));
        assert!(e.contains("gpu.default.sync.Simple"), "{e}");
        let line = e.split(':').nth(1).unwrap().parse::<usize>().unwrap();
        assert_eq!(line, with_gpu_tables(DEFAULT_TABLE).lines().count() - 1);
        for bad in ["\"fast\"", "\"0 GB/s\"", "\"20\""] {
            let e = err(&with_gpu_tables(&format!("{DEFAULT_TABLE}p2p_channel = {bad}\n")));
            assert!(e.starts_with("p.toml:") && e.contains("gpu.default.p2p_channel"), "{e}");
        }
        let ok = parse_profile(
            "p.toml",
            &with_gpu_tables(&format!("{DEFAULT_TABLE}p2p_channel = \"20 GB/s\"\n")),
        )
        .unwrap();
        assert_eq!(ok.gpu_default.p2p_channel, 20e9);
        let none = parse_profile("p.toml", &with_gpu_tables(DEFAULT_TABLE)).unwrap();
        assert_eq!(none.gpu_default.p2p_channel, f64::INFINITY, "absent: uncapped");
    }
}
