//! Calibration profiles: the timing parameters of the model as data
//! (`calibration/profiles/*.toml`), validated into [`TimingParams`].

use super::raw::{RawPerProto, RawProfile};
use super::{ConfigError, Source};
use crate::collective::TimingParams;
use crate::units::Time;

/// The profile used when none is given (compiled in from `calibration/profiles/default.toml`).
pub const DEFAULT_PROFILE: (&str, &str) =
    ("calibration/profiles/default.toml", include_str!("../../calibration/profiles/default.toml"));

fn per_proto(src: &Source<'_>, class: &str, raw: &RawPerProto) -> Result<[Time; 3], ConfigError> {
    let t = |name: &str, v: &toml::Spanned<super::RawQuantity>| {
        src.check(&format!("step_latency.{class}.{name}"), v, |q| q.parse_with(Time::parse))
    };
    Ok([t("LL", &raw.ll)?, t("LL128", &raw.ll128)?, t("Simple", &raw.simple)?])
}

/// Parses and validates a profile's text; `file` names it in errors.
pub fn parse_profile(file: &str, text: &str) -> Result<TimingParams, ConfigError> {
    let src = Source { name: file, text };
    let raw: RawProfile = src.parse()?;
    Ok(TimingParams {
        name: raw.name,
        source: raw.source,
        call_overhead: src
            .check("overhead.call", &raw.overhead.call, |q| q.parse_with(Time::parse))?,
        step_latency: [
            per_proto(&src, "nvlink", &raw.step_latency.nvlink)?,
            per_proto(&src, "pcie", &raw.step_latency.pcie)?,
            per_proto(&src, "net", &raw.step_latency.net)?,
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
    }
}
