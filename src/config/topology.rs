//! Topology files: validation of [`super::raw::RawTopology`] into [`NodeSpec`], and the
//! presets shipped in `topologies/` (compiled into the binary, so they work from any
//! directory).

use std::path::{Path, PathBuf};

use toml::Spanned;

use super::raw::RawTopology;
use super::{ConfigError, Source, load_text};
use crate::hw::{
    Arch, CpuSpec, CpuVendor, GpuSpec, NetworkSpec, NicSpec, NodeSpec, NvlinkSpec, NvswitchSpec,
    PcieSpec,
};
use crate::units::{Bandwidth, Time};

const PRESETS: &[(&str, &str)] = &[
    ("dgx-a100", include_str!("../../topologies/dgx-a100.toml")),
    ("dgx-h100", include_str!("../../topologies/dgx-h100.toml")),
];

/// The names of the shipped presets.
pub fn preset_names() -> Vec<&'static str> {
    PRESETS.iter().map(|(n, _)| *n).collect()
}

/// Where a topology came from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TopologySource {
    /// A shipped preset, by name.
    Preset(String),
    /// A file.
    File(PathBuf),
}

/// Resolves a preset name or a path (relative paths against `base`) and parses it.
pub fn resolve_topology(
    name_or_path: &str,
    base: Option<&Path>,
) -> Result<(TopologySource, NodeSpec), ConfigError> {
    if let Some((name, text)) = PRESETS.iter().find(|(n, _)| *n == name_or_path) {
        let file = format!("topologies/{name}.toml");
        let spec = parse_topology(&file, text)?;
        return Ok((TopologySource::Preset(name.to_string()), spec));
    }
    let looks_like_path = name_or_path.contains('/') || name_or_path.ends_with(".toml");
    let path = match base {
        Some(b) if Path::new(name_or_path).is_relative() => b.join(name_or_path),
        _ => PathBuf::from(name_or_path),
    };
    if !looks_like_path && !path.exists() {
        return Err(ConfigError::File {
            file: name_or_path.to_string(),
            msg: format!(
                "unknown topology preset (presets: {}; or give a path to a topology .toml)",
                preset_names().join(", ")
            ),
        });
    }
    let text = load_text(&path)?;
    let spec = parse_topology(&path.display().to_string(), &text)?;
    Ok((TopologySource::File(path), spec))
}

fn count(src: &Source<'_>, field: &str, v: &Spanned<i64>, max: i64) -> Result<usize, ConfigError> {
    src.check(field, v, |&n| {
        if n <= 0 {
            Err(format!("must be at least 1 (got {n})"))
        } else if n > max {
            Err(format!("must be at most {max} (got {n})"))
        } else {
            Ok(n as usize)
        }
    })
}

fn bandwidth(
    src: &Source<'_>,
    field: &str,
    v: &Spanned<super::RawQuantity>,
) -> Result<Bandwidth, ConfigError> {
    src.check(field, v, |q| q.parse_with(Bandwidth::parse))
}

fn time(
    src: &Source<'_>,
    field: &str,
    v: &Spanned<super::RawQuantity>,
) -> Result<Time, ConfigError> {
    src.check(field, v, |q| q.parse_with(Time::parse))
}

/// Parses and validates a topology file's text; `file` names it in errors.
pub fn parse_topology(file: &str, text: &str) -> Result<NodeSpec, ConfigError> {
    let src = Source { name: file, text };
    let raw: RawTopology = src.parse()?;
    let arch = src.check("gpu.arch", &raw.gpu.arch, |a| {
        Arch::parse(a)
            .ok_or_else(|| format!("unknown architecture {a:?} (volta, ampere, hopper, blackwell)"))
    })?;
    let gpu = GpuSpec {
        model: raw.gpu.model,
        arch,
        count: count(&src, "gpu.count", &raw.gpu.count, 64)?,
    };
    let nvlink = match &raw.nvlink {
        None => None,
        Some(n) => Some(NvlinkSpec {
            generation: count(&src, "nvlink.generation", &n.generation, 5)? as u32,
            links_per_gpu: count(&src, "nvlink.links_per_gpu", &n.links_per_gpu, 64)? as u32,
            bandwidth_per_link: bandwidth(
                &src,
                "nvlink.bandwidth_per_link",
                &n.bandwidth_per_link,
            )?,
            latency: time(&src, "nvlink.latency", &n.latency)?,
        }),
    };
    let nvswitch = match &raw.nvswitch {
        None => None,
        Some(s) => {
            if nvlink.is_none() {
                return Err(src.error_at(
                    s.count.span().start,
                    "nvswitch: an NVSwitch needs an [nvlink] table",
                ));
            }
            Some(NvswitchSpec {
                count: count(&src, "nvswitch.count", &s.count, 64)? as u32,
                generation: count(&src, "nvswitch.generation", &s.generation, 5)? as u32,
                nvls: s.nvls,
            })
        }
    };
    if nvswitch.is_none() {
        let at = raw.gpu.count.span().start;
        return Err(src.error_at(
            at,
            "nvswitch: nodes without an NVSwitch (PCIe-only or NVLink-bridge boxes) are not modelled yet",
        ));
    }
    let pcie = PcieSpec {
        generation: count(&src, "pcie.generation", &raw.pcie.generation, 6)? as u32,
        lanes: src.check("pcie.lanes", &raw.pcie.lanes, |&l| match l {
            1 | 2 | 4 | 8 | 16 => Ok(l as u32),
            _ => Err(format!("must be 1, 2, 4, 8 or 16 (got {l})")),
        })?,
        switches: count(&src, "pcie.switches", &raw.pcie.switches, 64)?,
        latency: time(&src, "pcie.latency", &raw.pcie.latency)?,
    };
    let vendor =
        src.check("cpu.vendor", &raw.cpu.vendor, |v| match v.to_ascii_lowercase().as_str() {
            "intel" => Ok(CpuVendor::Intel),
            "amd" => Ok(CpuVendor::Amd),
            "arm" | "power" | "other" => Ok(CpuVendor::Other),
            _ => Err(format!("unknown vendor {v:?} (intel, amd, arm, power)")),
        })?;
    let cpu = CpuSpec {
        sockets: count(&src, "cpu.sockets", &raw.cpu.sockets, 8)?,
        vendor,
        inter_socket: bandwidth(&src, "cpu.inter_socket", &raw.cpu.inter_socket)?,
    };
    if pcie.switches < cpu.sockets {
        return Err(src.error_at(
            raw.pcie.switches.span().start,
            "pcie.switches: need at least one switch per CPU socket",
        ));
    }
    let nic = match &raw.nic {
        None => None,
        Some(n) => Some(NicSpec {
            count: count(&src, "nic.count", &n.count, 64)?,
            speed: bandwidth(&src, "nic.speed", &n.speed)?,
            kind: n.kind.clone(),
            latency: time(&src, "nic.latency", &n.latency)?,
        }),
    };
    let network = match &raw.network {
        None => NetworkSpec { kind: "non_blocking".into(), latency: Time::ZERO },
        Some(n) => NetworkSpec {
            kind: src.check("network.kind", &n.kind, |k| match k.as_str() {
                "non_blocking" => Ok(k.clone()),
                _ => Err(format!("unknown network kind {k:?} (only \"non_blocking\" so far)")),
            })?,
            latency: time(&src, "network.latency", &n.latency)?,
        },
    };
    Ok(NodeSpec {
        name: raw.name.into_inner(),
        description: raw.description.unwrap_or_default(),
        gpu,
        nvlink,
        nvswitch,
        pcie,
        cpu,
        nic,
        network,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_parse() {
        for name in preset_names() {
            let (_, spec) = resolve_topology(name, None).unwrap();
            assert_eq!(spec.gpu.count, 8);
        }
    }

    #[test]
    fn bad_values_name_file_line_and_field() {
        let text = PRESETS[1].1.replace("speed = \"400 Gb/s\"", "speed = 400");
        let err = parse_topology("t.toml", &text).unwrap_err().to_string();
        assert!(
            err.starts_with("t.toml:") && err.contains("nic.speed") && err.contains("bare number"),
            "{err}"
        );
        let text = PRESETS[1].1.replace("speed = \"400 Gb/s\"", "speed = \"0 Gb/s\"");
        let err = parse_topology("t.toml", &text).unwrap_err().to_string();
        assert!(err.contains("greater than zero"), "{err}");
        let text = PRESETS[1].1.replace("count = 8\n", "count = 0\n");
        let err = parse_topology("t.toml", &text).unwrap_err().to_string();
        assert!(err.contains("gpu.count") && err.contains("at least 1"), "{err}");
    }
}
