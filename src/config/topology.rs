//! Topology files: validation of [`super::raw::RawTopology`] into [`NodeSpec`], and the
//! presets shipped in `topologies/` (compiled into the binary, so they work from any
//! directory).

use std::path::{Path, PathBuf};

use toml::Spanned;

use std::collections::BTreeMap;

use super::raw::{RawGpuModel, RawNetwork, RawOversub, RawTopology, RawTransport};
use super::{ConfigError, Source, load_text};
use crate::hw::gpus::{self, nccl_nvlink_bandwidth};
use crate::hw::{
    Arch, CpuSpec, CpuVendor, FabricKind, GpuId, GpuModel, GpuSpec, NetworkSpec, NicSpec, NodeId,
    NodeSpec, NvlinkSpec, NvswitchSpec, Parent, PcieSpec, PcieSwitch, Price, Routing, Transport,
};
use crate::units::{Bandwidth, Bytes, Time};

const PRESETS: &[(&str, &str)] = &[
    ("aws-p4d", include_str!("../../topologies/aws-p4d.toml")),
    ("aws-p5", include_str!("../../topologies/aws-p5.toml")),
    ("dgx-a100", include_str!("../../topologies/dgx-a100.toml")),
    ("dgx-b200", include_str!("../../topologies/dgx-b200.toml")),
    ("dgx-h100", include_str!("../../topologies/dgx-h100.toml")),
    ("dgx-h200", include_str!("../../topologies/dgx-h200.toml")),
    ("gb200-nvl72", include_str!("../../topologies/gb200-nvl72.toml")),
    ("gcp-a2-highgpu-8g", include_str!("../../topologies/gcp-a2-highgpu-8g.toml")),
    ("gcp-a2-ultragpu-8g", include_str!("../../topologies/gcp-a2-ultragpu-8g.toml")),
    ("gcp-a3-highgpu-8g", include_str!("../../topologies/gcp-a3-highgpu-8g.toml")),
    ("gcp-a3-megagpu-8g", include_str!("../../topologies/gcp-a3-megagpu-8g.toml")),
    ("hgx-h100-roce", include_str!("../../topologies/hgx-h100-roce.toml")),
    ("pcie-8gpu-2socket", include_str!("../../topologies/pcie-8gpu-2socket.toml")),
    ("pcie-a100-4gpu-2socket", include_str!("../../topologies/pcie-a100-4gpu-2socket.toml")),
    ("polaris-a100-4gpu", include_str!("../../topologies/polaris-a100-4gpu.toml")),
];

/// Most GPUs one node may have (also its most NICs and PCIe switches): a GB200 NVL72 rack, one
/// NVLink domain of 72 GPUs, is one node, with room for larger domains.
const MAX_GPUS: i64 = 128;

/// Most CPU sockets one node may have (a GB200 NVL72 rack has 36 Grace CPUs).
pub(crate) const MAX_SOCKETS: i64 = 64;

/// The names of the shipped presets.
pub fn preset_names() -> Vec<&'static str> {
    PRESETS.iter().map(|(n, _)| *n).collect()
}

/// Cloud instance types as their providers name them, and the preset that models each: a
/// topology may be given by either (`--topology p5.48xlarge`, `instances = ["a3-megagpu-8g"]`),
/// in any letter case.
pub const INSTANCE_TYPES: &[(&str, &str)] = &[
    ("p4d.24xlarge", "aws-p4d"),
    ("p5.48xlarge", "aws-p5"),
    ("a2-highgpu-8g", "gcp-a2-highgpu-8g"),
    ("a2-ultragpu-8g", "gcp-a2-ultragpu-8g"),
    ("a3-highgpu-8g", "gcp-a3-highgpu-8g"),
    ("a3-megagpu-8g", "gcp-a3-megagpu-8g"),
];

/// Instance types users ask for that no preset models, with what is nearest and why.
const NO_PRESET: &[(&str, &str)] = &[
    (
        "nd96isr_h100_v5",
        "Azure ND H100 v5 has no preset; its node (8x H100 SXM on NVSwitch, 8x 400 Gb/s InfiniBand NDR) is dgx-h100's: use dgx-h100 with your price in a plan's [instance.\"dgx-h100\"]",
    ),
    (
        "nd96amsr_a100_v4",
        "Azure ND A100 v4 has no preset; its node (8x A100 80 GB SXM on NVSwitch, 8x 200 Gb/s InfiniBand HDR) is nearest gcp-a2-ultragpu-8g's GPUs and dgx-a100's network",
    ),
    (
        "p5e.48xlarge",
        "AWS p5e has no preset: aws-p5 has its network (32x 100 Gb/s EFA) with H100s, dgx-h200 its H200s with InfiniBand",
    ),
    (
        "p5en.48xlarge",
        "AWS p5en has no preset: aws-p5 has its H100 network generation, dgx-h200 its H200s",
    ),
];

/// The preset `name` stands for: itself, or the preset an instance type is modelled by (any
/// letter case).
pub fn preset_for(name: &str) -> Option<&'static str> {
    let lower = name.trim().to_ascii_lowercase();
    PRESETS
        .iter()
        .map(|(n, _)| *n)
        .find(|n| *n == lower)
        .or_else(|| INSTANCE_TYPES.iter().find(|(t, _)| *t == lower).map(|(_, p)| *p))
}

/// Why `name` is no preset: what it may have meant (the nearest preset or instance type by
/// edit distance, or what stands nearest an instance type no preset models), and the list.
fn unknown_preset(name: &str) -> String {
    let lower = name.trim().to_ascii_lowercase();
    if let Some((_, why)) = NO_PRESET.iter().find(|(t, _)| *t == lower) {
        return format!("{why} (presets: {})", preset_names().join(", "));
    }
    let names = || PRESETS.iter().map(|(n, _)| *n).chain(INSTANCE_TYPES.iter().map(|(t, _)| *t));
    // The nearest by edit distance, else the shortest name holding what was typed.
    let nearest = names()
        .map(|n| (strsim::levenshtein(&lower, n), n))
        .filter(|&(d, n)| d <= (n.len() / 3).max(2))
        .min()
        .or_else(|| {
            names()
                .filter(|n| lower.len() >= 3 && n.contains(lower.as_str()))
                .map(|n| (n.len(), n))
                .min()
        });
    let hint = nearest.map_or(String::new(), |(_, n)| format!(" (did you mean {n}?)"));
    let types: Vec<String> = INSTANCE_TYPES.iter().map(|(t, p)| format!("{t} = {p}")).collect();
    format!(
        "unknown topology preset{hint}; presets: {}; instance types: {}; or give a path to a topology .toml",
        preset_names().join(", "),
        types.join(", ")
    )
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

/// The text of a topology and the file name its errors carry, for editing it before parsing
/// (`simulate --sweep topology.KEY=…`).
pub fn topology_text(source: &TopologySource) -> Result<(String, String), ConfigError> {
    match source {
        TopologySource::Preset(name) => PRESETS
            .iter()
            .find(|(n, _)| n == name)
            .map(|(n, text)| (format!("topologies/{n}.toml"), text.to_string()))
            .ok_or_else(|| ConfigError::File {
                file: name.clone(),
                msg: "unknown topology preset".into(),
            }),
        TopologySource::File(path) => Ok((path.display().to_string(), load_text(path)?)),
    }
}

/// Resolves a preset name or a path (relative paths against `base`) and parses it.
pub fn resolve_topology(
    name_or_path: &str,
    base: Option<&Path>,
) -> Result<(TopologySource, NodeSpec), ConfigError> {
    let preset = preset_for(name_or_path).and_then(|p| PRESETS.iter().find(|(n, _)| *n == p));
    if let Some((name, text)) = preset {
        let file = format!("topologies/{name}.toml");
        let spec = parse_topology(&file, text)?;
        return Ok((TopologySource::Preset(name.to_string()), spec));
    }
    if name_or_path.trim().is_empty() {
        return Err(ConfigError::File {
            file: format!("{name_or_path:?}"),
            msg: format!(
                "no topology named: give a preset ({}) or a path to a topology .toml",
                preset_names().join(", ")
            ),
        });
    }
    let looks_like_path = name_or_path.contains('/') || name_or_path.ends_with(".toml");
    let path = match base {
        Some(b) if Path::new(name_or_path).is_relative() => b.join(name_or_path),
        _ => PathBuf::from(name_or_path),
    };
    if !looks_like_path && !path.exists() {
        return Err(ConfigError::File {
            file: name_or_path.to_string(),
            msg: unknown_preset(name_or_path),
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

fn gpu_model(src: &Source<'_>, name: &str, raw: &RawGpuModel) -> Result<GpuModel, ConfigError> {
    let f = |field: &str| format!("gpu_model.{name}.{field}");
    let sm = src.check(&f("sm"), &raw.sm, |&sm| {
        if (60..=120).contains(&sm) {
            Ok(sm as u32)
        } else {
            Err(format!("compute capability x 10 expected, 60 to 120 (got {sm})"))
        }
    })?;
    let memory = src.check(&f("memory"), &raw.memory, |q| q.parse_with(Bytes::parse))?;
    let memory_bandwidth = match &raw.memory_bandwidth {
        Some(b) => Some(bandwidth(src, &f("memory_bandwidth"), b)?),
        None => None,
    };
    let l2_cache = match &raw.l2_cache {
        Some(q) => Some(src.check(&f("l2_cache"), q, |q| q.parse_with(Bytes::parse))?),
        None => None,
    };
    let nvlink_bandwidth_per_link = match &raw.nvlink_bandwidth_per_link {
        Some(b) => Some(bandwidth(src, &f("nvlink_bandwidth_per_link"), b)?),
        None => None,
    };
    Ok(GpuModel {
        name: name.to_string(),
        sm,
        memory,
        memory_bandwidth,
        l2_cache,
        nvlink_bandwidth_per_link,
        pcie_generation: count(src, &f("pcie.generation"), &raw.pcie.generation, 6)? as u32,
        pcie_lanes: lanes(src, &f("pcie.lanes"), &raw.pcie.lanes)?,
        p2p: raw.p2p.unwrap_or(true),
        gdr: raw.gdr.unwrap_or(true),
        multiprocessors: match &raw.multiprocessors {
            Some(m) => Some(count(src, &f("multiprocessors"), m, 1024)? as u32),
            None => None,
        },
        peak_tflops: {
            let mut out = std::collections::BTreeMap::new();
            for (k, v) in raw.peak_tflops.iter().flatten() {
                let x = src.check(&f(&format!("peak_tflops.{k}")), v, |&x| {
                    if !crate::hw::gpus::PRECISIONS.contains(&k.as_str()) {
                        Err(format!(
                            "unknown precision (known: {})",
                            crate::hw::gpus::PRECISIONS.join(", ")
                        ))
                    } else if x.is_finite() && x > 0.0 {
                        Ok(x)
                    } else {
                        Err(format!("must be a positive number of TFLOP/s, got {x}"))
                    }
                })?;
                out.insert(k.clone(), x);
            }
            out
        },
    })
}

fn lanes(src: &Source<'_>, field: &str, v: &Spanned<i64>) -> Result<u32, ConfigError> {
    src.check(field, v, |&l| match l {
        1 | 2 | 4 | 8 | 16 => Ok(l as u32),
        _ => Err(format!("must be 1, 2, 4, 8 or 16 (got {l})")),
    })
}

/// The shipped GPU library.
pub fn gpu_library() -> Result<Vec<GpuModel>, ConfigError> {
    let src = Source { name: gpus::LIBRARY.0, text: gpus::LIBRARY.1 };
    let raw: BTreeMap<Spanned<String>, RawGpuModel> = src.parse()?;
    raw.iter().map(|(k, m)| gpu_model(&src, k.get_ref(), m)).collect()
}

/// The most PCIe switches between a device and its CPU: servers nest 1 to 3 (a GPU board's
/// switch under the host's, sometimes a retimer switch between); each level adds routes that
/// every path enumerates, and a chain of 1,200 took 3.4 GB (issue #45).
pub const MAX_PCIE_DEPTH: usize = 8;

/// Resolves `attach` names ("numa1", a switch id) to parents, or spreads `n` devices evenly
/// over the leaf switches (over the NUMA domains when there are no switches).
fn attachments(
    src: &Source<'_>,
    field: &str,
    raw: Option<&Spanned<Vec<Spanned<String>>>>,
    n: usize,
    switches: &[PcieSwitch],
    numas: usize,
) -> Result<Vec<Parent>, ConfigError> {
    let Some(list) = raw else {
        let leaves: Vec<usize> = (0..switches.len())
            .filter(|&i| !switches.iter().any(|s| s.parent == Parent::Switch(i)))
            .collect();
        return Ok((0..n)
            .map(|d| {
                if leaves.is_empty() {
                    Parent::Numa(d * numas / n)
                } else {
                    Parent::Switch(leaves[d * leaves.len() / n])
                }
            })
            .collect());
    };
    if list.get_ref().len() != n {
        return Err(src.error_at(
            list.span().start,
            format!("{field}: {} entries for {n} devices (one per device)", list.get_ref().len()),
        ));
    }
    list.get_ref().iter().map(|name| parent(src, field, name, switches, numas)).collect()
}

fn parent(
    src: &Source<'_>,
    field: &str,
    name: &Spanned<String>,
    switches: &[PcieSwitch],
    numas: usize,
) -> Result<Parent, ConfigError> {
    let n = name.get_ref();
    if let Some(i) = n.strip_prefix("numa").and_then(|d| d.parse::<usize>().ok())
        && i < numas
    {
        return Ok(Parent::Numa(i));
    }
    if let Some(i) = switches.iter().position(|s| s.id == *n) {
        return Ok(Parent::Switch(i));
    }
    Err(src.error_at(
        name.span().start,
        format!(
            "{field}: no switch or NUMA domain named {n:?} (NUMA domains are numa0..numa{}{})",
            numas - 1,
            if switches.is_empty() { String::new() } else { ", or a [[pcie.switch]] id".into() }
        ),
    ))
}

/// NCCL's inter-socket (SYS) bandwidth by CPU family, GB/s (`nccl-model.md` §3.2, topo.h).
const CPU_FAMILIES: &[(&str, f64)] = &[
    ("broadwell", 6.0),
    ("skylake", 10.0),
    ("cascade-lake", 10.0),
    ("ice-lake", 10.0),
    ("sapphire-rapids", 22.0),
    ("emerald-rapids", 40.0),
    ("amd", 16.0),
    ("power9", 32.0),
    ("arm", 6.0),
];

fn cpu_family_bandwidth(family: &str) -> Option<Bandwidth> {
    let f = family.to_ascii_lowercase();
    CPU_FAMILIES.iter().find(|(n, _)| *n == f).map(|(_, gb)| Bandwidth::from_gbyte_per_s_f64(*gb))
}

/// The shipped transports (`topologies/transports.toml`).
pub fn transport_library() -> Result<Vec<Transport>, ConfigError> {
    parse_transports(TRANSPORTS.0, TRANSPORTS.1)
}

/// Parses and validates a transports file's text (the format of `topologies/transports.toml`);
/// `file` names it in errors.
pub fn parse_transports(file: &str, text: &str) -> Result<Vec<Transport>, ConfigError> {
    let src = Source { name: file, text };
    let raw: BTreeMap<String, RawTransport> = src.parse()?;
    raw.iter()
        .map(|(name, t)| {
            Ok(Transport {
                name: name.clone(),
                efficiency: src.check(&format!("{name}.efficiency"), &t.efficiency, |&e| {
                    if e > 0.0 && e <= 1.0 {
                        Ok(e)
                    } else {
                        Err(format!("must be in (0, 1], got {e}"))
                    }
                })?,
                message_overhead: time(
                    &src,
                    &format!("{name}.message_overhead"),
                    &t.message_overhead,
                )?,
                proxy_op: match &t.proxy_op {
                    Some(q) => time(&src, &format!("{name}.proxy_op"), q)?,
                    None => Time::ZERO,
                },
                per_stream: match &t.per_stream {
                    Some(b) => Some(bandwidth(&src, &format!("{name}.per_stream"), b)?),
                    None => None,
                },
                default_streams: match &t.default_streams {
                    Some(n) => count(&src, &format!("{name}.default_streams"), n, 64)?,
                    None => 1,
                },
            })
        })
        .collect()
}

const TRANSPORTS: (&str, &str) =
    ("topologies/transports.toml", include_str!("../../topologies/transports.toml"));

fn network(src: &Source<'_>, n: &RawNetwork) -> Result<NetworkSpec, ConfigError> {
    let need = |v: &Option<Spanned<i64>>, field: &str| {
        v.clone().ok_or_else(|| {
            src.error_at(
                n.kind.span().start,
                format!("network.{field}: required for kind = {:?}", n.kind.get_ref()),
            )
        })
    };
    let radix = |v: &Spanned<i64>| {
        src.check("network.radix", v, |&r| {
            if (2..=1024).contains(&r) {
                Ok(r as usize)
            } else {
                Err(format!("must be 2 to 1024 ports (got {r})"))
            }
        })
    };
    let ratios = |want: usize| -> Result<Vec<f64>, ConfigError> {
        let Some(o) = &n.oversubscription else { return Ok(vec![1.0; want]) };
        let list = match o.get_ref() {
            RawOversub::One(x) => vec![*x; want],
            RawOversub::PerTier(v) => v.clone(),
        };
        src.check("network.oversubscription", o, |_| {
            if list.len() != want {
                Err(format!("{} values for {want} tier boundaries", list.len()))
            } else if let Some(x) = list.iter().find(|&&x| !(1.0..=64.0).contains(&x)) {
                Err(format!("must be at least 1 (down:up), at most 64; got {x}"))
            } else {
                Ok(list.clone())
            }
        })
    };
    let fabric = src.check("network.kind", &n.kind, |k| match k.as_str() {
        "non_blocking" | "fat_tree" | "rail" | "links" => Ok(k.clone()),
        _ => Err(format!("unknown network kind {k:?} (non_blocking, fat_tree, rail, links)")),
    })?;
    // A key of another kind of fabric would be read and ignored: refused on its line.
    let applies: &[&str] = match fabric.as_str() {
        "fat_tree" => &["tiers", "radix", "oversubscription"],
        "rail" => &["radix", "oversubscription"],
        "links" => &["switch", "link"],
        _ => &[],
    };
    let given: [(&str, Option<usize>); 5] = [
        ("tiers", n.tiers.as_ref().map(|v| v.span().start)),
        ("radix", n.radix.as_ref().map(|v| v.span().start)),
        ("oversubscription", n.oversubscription.as_ref().map(|v| v.span().start)),
        ("switch", n.switch.as_ref().and_then(|v| v.first()).map(|s| s.id.span().start)),
        ("link", n.link.as_ref().and_then(|v| v.first()).map(|l| l.between.span().start)),
    ];
    if let Some((key, Some(at))) = given.iter().find(|(k, at)| at.is_some() && !applies.contains(k))
    {
        return Err(src.error_at(
            *at,
            format!(
                "network.{key}: does not apply to kind = {fabric:?}{}",
                if applies.is_empty() {
                    String::new()
                } else {
                    format!(" (which takes {})", applies.join(", "))
                }
            ),
        ));
    }
    let fabric = match fabric.as_str() {
        "fat_tree" => {
            let tiers = src.check("network.tiers", &need(&n.tiers, "tiers")?, |&t| {
                if (1..=4).contains(&t) {
                    Ok(t as usize)
                } else {
                    Err(format!("must be 1 to 4 (got {t})"))
                }
            })?;
            FabricKind::FatTree {
                tiers,
                radix: radix(&need(&n.radix, "radix")?)?,
                oversubscription: ratios(tiers - 1)?,
            }
        }
        "rail" => FabricKind::Rail {
            radix: radix(&need(&n.radix, "radix")?)?,
            oversubscription: ratios(1)?[0],
        },
        "links" => {
            let mut switches: Vec<(String, Vec<NodeId>)> = Vec::new();
            for sw in n.switch.iter().flatten() {
                if switches.iter().any(|(id, _)| id == sw.id.get_ref()) {
                    return Err(src.error_at(
                        sw.id.span().start,
                        format!("network.switch.id: duplicate id {:?}", sw.id.get_ref()),
                    ));
                }
                let nodes = match &sw.nodes {
                    Some(v) => src.check("network.switch.nodes", v, |v| {
                        v.iter()
                            .map(|&x| {
                                usize::try_from(x)
                                    .map(NodeId)
                                    .map_err(|_| format!("node indices are 0 or more (got {x})"))
                            })
                            .collect::<Result<Vec<NodeId>, String>>()
                    })?,
                    None => Vec::new(),
                };
                switches.push((sw.id.get_ref().clone(), nodes));
            }
            if switches.is_empty() {
                return Err(src.error_at(
                    n.kind.span().start,
                    "network.switch: kind = \"links\" needs [[network.switch]] entries",
                ));
            }
            let mut links = Vec::new();
            for l in n.link.iter().flatten() {
                let ends = src.check("network.link.between", &l.between, |v| {
                    let idx = |name: &String| {
                        switches
                            .iter()
                            .position(|(id, _)| id == name)
                            .ok_or_else(|| format!("no [[network.switch]] with id {name:?}"))
                    };
                    match v.as_slice() {
                        [a, b] if a != b => Ok((idx(a)?, idx(b)?)),
                        _ => Err("two different switch ids expected".to_string()),
                    }
                })?;
                let bw = bandwidth(src, "network.link.bandwidth", &l.bandwidth)?;
                let lat = match &l.latency {
                    Some(t) => time(src, "network.link.latency", t)?,
                    None => Time::ZERO,
                };
                links.push((ends.0, ends.1, bw, lat));
            }
            FabricKind::Links { switches, links }
        }
        _ => FabricKind::NonBlocking,
    };
    // Explicit networks hash every flow onto one of their equal paths; fat-trees and rail
    // fabrics spread it evenly unless told they hash (ECMP).
    let links = matches!(fabric, FabricKind::Links { .. });
    let routing = match &n.routing {
        None if links => Routing::Ecmp,
        None => Routing::Adaptive,
        Some(r) => src.check("network.routing", r, |r| {
            let routing = match r.as_str() {
                "adaptive" => Routing::Adaptive,
                "ecmp" => Routing::Ecmp,
                _ => return Err(format!("unknown routing {r:?} (adaptive, ecmp)")),
            };
            let paths = match &fabric {
                FabricKind::FatTree { tiers, .. } => *tiers > 1,
                FabricKind::Rail { .. } | FabricKind::Links { .. } => true,
                FabricKind::NonBlocking => false,
            };
            if !paths && routing == Routing::Ecmp {
                Err("\"ecmp\" needs equal-cost paths between switches: a fat_tree of 2 tiers \
                     or more, or a rail fabric (one switch layer has a single path)"
                    .to_string())
            } else if links && routing == Routing::Adaptive {
                Err("a links network hashes each flow onto one of its shortest paths \
                     (ecmp); adaptive routing is modelled for fat_tree and rail"
                    .to_string())
            } else {
                Ok(routing)
            }
        })?,
    };
    Ok(NetworkSpec {
        fabric,
        routing,
        latency: time(src, "network.latency", &n.latency)?,
        sharp: n.sharp.unwrap_or(false),
    })
}

/// Parses and validates a topology file's text; `file` names it in errors.
pub fn parse_topology(file: &str, text: &str) -> Result<NodeSpec, ConfigError> {
    let src = Source { name: file, text };
    let raw: RawTopology = src.parse()?;
    // Names and descriptions are printed: one line of plain text each.
    src.check("name", &raw.name, |n| super::plain_text(n))?;
    if let Some(d) = &raw.description {
        src.check("description", d, |d| super::plain_text(d))?;
    }
    let mut library = gpu_library()?;
    for (name, m) in raw.gpu_model.iter().flatten() {
        src.check("gpu_model", name, |n| super::plain_text(n))?;
        let model = gpu_model(&src, name.get_ref(), m)?;
        library.retain(|g| g.name != model.name);
        library.push(model);
    }
    let model = src.check("gpu.model", &raw.gpu.model, |name| {
        library.iter().find(|g| g.name == *name).cloned().ok_or_else(|| {
            let known: Vec<&str> = library.iter().map(|g| g.name.as_str()).collect();
            format!(
                "unknown GPU model {name:?} (known: {}; or define it under [gpu_model.\"{name}\"])",
                known.join(", ")
            )
        })
    })?;
    let gpus = count(&src, "gpu.count", &raw.gpu.count, MAX_GPUS)?;
    let gpu = GpuSpec { arch: Arch::from_sm(model.sm), model, count: gpus };

    let nvlink = match &raw.nvlink {
        None => None,
        Some(n) => {
            let links_per_gpu = count(&src, "nvlink.links_per_gpu", &n.links_per_gpu, 64)? as u32;
            let bandwidth_per_link = match &n.bandwidth_per_link {
                Some(b) => bandwidth(&src, "nvlink.bandwidth_per_link", b)?,
                None => gpu
                    .model
                    .nvlink_bandwidth_per_link
                    .unwrap_or(nccl_nvlink_bandwidth(gpu.model.sm)),
            };
            let mut pairs = Vec::new();
            if let Some(a) = n.all_to_all.as_ref().filter(|a| *a.get_ref()) {
                // Each GPU's links shared evenly among its peers: a share of none would leave
                // GPUs unjoined, and links left over would be links the GPU has and never uses.
                let peers = (gpus as u32 - 1).max(1);
                if links_per_gpu < peers || !links_per_gpu.is_multiple_of(peers) {
                    return Err(src.error_at(
                        a.span().start,
                        format!(
                            "nvlink.all_to_all: links_per_gpu = {links_per_gpu} does not split evenly among each GPU's {peers} peers; give a multiple of {peers}, or list the pairs with nvlink.pair"
                        ),
                    ));
                }
                let per = links_per_gpu / peers;
                for a in 0..gpus {
                    for b in a + 1..gpus {
                        pairs.push((GpuId(a), GpuId(b), per));
                    }
                }
            }
            for p in n.pair.iter().flatten() {
                let (a, b) = src.check("nvlink.pair.gpus", &p.gpus, |v| match v.as_slice() {
                    [a, b]
                        if a != b
                            && (0..gpus as i64).contains(a)
                            && (0..gpus as i64).contains(b) =>
                    {
                        Ok((GpuId(*a as usize), GpuId(*b as usize)))
                    }
                    _ => Err(format!("two different GPU indices below {gpus} expected, got {v:?}")),
                })?;
                let links = count(&src, "nvlink.pair.links", &p.links, 64)? as u32;
                pairs.push((a.min(b), a.max(b), links));
            }
            for g in 0..gpus {
                let used: u32 =
                    pairs.iter().filter(|p| p.0 == GpuId(g) || p.1 == GpuId(g)).map(|p| p.2).sum();
                if used > links_per_gpu {
                    return Err(src.error_at(
                        n.links_per_gpu.span().start,
                        format!("nvlink.pair: GPU {g} uses {used} links, more than links_per_gpu = {links_per_gpu}"),
                    ));
                }
            }
            Some(NvlinkSpec {
                links_per_gpu,
                bandwidth_per_link,
                latency: time(&src, "nvlink.latency", &n.latency)?,
                pairs,
            })
        }
    };
    let nvswitch = match &raw.nvswitch {
        None => None,
        Some(s) => {
            match &nvlink {
                None => {
                    return Err(src.error_at(
                        s.count.span().start,
                        "nvswitch: an NVSwitch needs an [nvlink] table",
                    ));
                }
                Some(nv) if !nv.pairs.is_empty() => {
                    return Err(src.error_at(
                        s.count.span().start,
                        "nvswitch: GPUs hang off the NVSwitch; drop nvlink.pair / nvlink.all_to_all",
                    ));
                }
                Some(_) => {}
            }
            Some(NvswitchSpec {
                count: count(&src, "nvswitch.count", &s.count, 64)? as u32,
                generation: count(&src, "nvswitch.generation", &s.generation, 5)? as u32,
                nvls: s.nvls,
            })
        }
    };

    let vendor =
        src.check("cpu.vendor", &raw.cpu.vendor, |v| match v.to_ascii_lowercase().as_str() {
            "intel" => Ok(CpuVendor::Intel),
            "amd" => Ok(CpuVendor::Amd),
            "arm" | "power" | "other" => Ok(CpuVendor::Other),
            _ => Err(format!("unknown vendor {v:?} (intel, amd, arm, power)")),
        })?;
    let cpu = CpuSpec {
        sockets: count(&src, "cpu.sockets", &raw.cpu.sockets, MAX_SOCKETS)?,
        numa_per_socket: match &raw.cpu.numa_per_socket {
            Some(n) => count(&src, "cpu.numa_per_socket", n, 8)?,
            None => 1,
        },
        vendor,
        inter_socket: match (&raw.cpu.inter_socket, &raw.cpu.family) {
            (Some(b), _) => bandwidth(&src, "cpu.inter_socket", b)?,
            (None, Some(f)) => src.check("cpu.family", f, |f| {
                cpu_family_bandwidth(f).ok_or_else(|| {
                    format!(
                        "unknown CPU family {f:?} ({})",
                        CPU_FAMILIES.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
                    )
                })
            })?,
            (None, None) => {
                return Err(src.error_at(
                    raw.cpu.vendor.span().start,
                    "cpu.inter_socket: give the link bandwidth between sockets, or cpu.family to take NCCL's figure",
                ));
            }
        },
        cores_per_numa: match &raw.cpu.cores_per_numa {
            Some(n) => Some(count(&src, "cpu.cores_per_numa", n, 1024)?),
            None => None,
        },
        threads_per_core: match &raw.cpu.threads_per_core {
            Some(n) => count(&src, "cpu.threads_per_core", n, 8)?,
            None => 1,
        },
    };
    let numas = cpu.numa_domains();

    let rp = &raw.pcie;
    let switches = match (&rp.switches, &rp.switch) {
        (Some(n), Some(_)) => {
            return Err(src.error_at(
                n.span().start,
                "pcie.switches: give either a switch count or [[pcie.switch]] entries, not both",
            ));
        }
        (Some(n), None) => {
            let k = src.check("pcie.switches", n, |&k| {
                if (0..=MAX_GPUS).contains(&k) {
                    Ok(k as usize)
                } else {
                    Err(format!("must be 0 to {MAX_GPUS} (got {k})"))
                }
            })?;
            (0..k)
                .map(|i| PcieSwitch { id: format!("sw{i}"), parent: Parent::Numa(i * numas / k) })
                .collect()
        }
        (None, Some(list)) => {
            let mut out: Vec<PcieSwitch> = Vec::new();
            for s in list {
                if out.iter().any(|o| o.id == *s.id.get_ref()) || s.id.get_ref().starts_with("numa")
                {
                    return Err(src.error_at(
                        s.id.span().start,
                        format!("pcie.switch.id: duplicate or reserved id {:?}", s.id.get_ref()),
                    ));
                }
                out.push(PcieSwitch { id: s.id.get_ref().clone(), parent: Parent::Numa(0) });
            }
            for (i, s) in list.iter().enumerate() {
                let p = parent(&src, "pcie.switch.parent", &s.parent, &out, numas)?;
                out[i].parent = p;
            }
            // No cycles: every switch must reach a NUMA domain, within MAX_PCIE_DEPTH switches.
            for (i, s) in list.iter().enumerate() {
                let mut p = Parent::Switch(i);
                let mut depth = 0;
                for _ in 0..=out.len() {
                    if let Parent::Switch(j) = p {
                        p = out[j].parent;
                        depth += 1;
                    }
                }
                if !matches!(p, Parent::Switch(_)) && depth > MAX_PCIE_DEPTH {
                    return Err(src.error_at(
                        s.parent.span().start,
                        format!(
                            "pcie.switch.parent: switch {:?} sits {depth} switches below its CPU, more than {MAX_PCIE_DEPTH} (servers nest 1 to 3)",
                            s.id.get_ref()
                        ),
                    ));
                }
                if matches!(p, Parent::Switch(_)) {
                    return Err(src.error_at(
                        s.parent.span().start,
                        format!(
                            "pcie.switch.parent: switch {:?} is its own ancestor",
                            s.id.get_ref()
                        ),
                    ));
                }
            }
            out
        }
        (None, None) => Vec::new(),
    };
    let pcie = PcieSpec {
        generation: count(&src, "pcie.generation", &rp.generation, 6)? as u32,
        lanes: lanes(&src, "pcie.lanes", &rp.lanes)?,
        switches,
        latency: time(&src, "pcie.latency", &rp.latency)?,
    };
    let gpu_parent =
        attachments(&src, "gpu.attach", raw.gpu.attach.as_ref(), gpus, &pcie.switches, numas)?;

    let nic = match &raw.nic {
        None => None,
        Some(n) => Some(NicSpec {
            count: count(&src, "nic.count", &n.count, MAX_GPUS)?,
            speed: bandwidth(&src, "nic.speed", &n.speed)?,
            transport: {
                let lib = transport_library()?;
                src.check("nic.transport", &n.transport, |t| {
                    lib.iter().find(|x| x.name == *t).cloned().ok_or_else(|| {
                        let names: Vec<&str> = lib.iter().map(|x| x.name.as_str()).collect();
                        format!("unknown transport {t:?} (known: {})", names.join(", "))
                    })
                })?
            },
            latency: time(&src, "nic.latency", &n.latency)?,
        }),
    };
    let nic_parent = match (&nic, &raw.nic) {
        (Some(n), Some(r)) => {
            attachments(&src, "nic.attach", r.attach.as_ref(), n.count, &pcie.switches, numas)?
        }
        _ => Vec::new(),
    };
    let network = match &raw.network {
        None => NetworkSpec {
            fabric: FabricKind::NonBlocking,
            routing: Routing::Adaptive,
            latency: Time::ZERO,
            sharp: false,
        },
        Some(n) => network(&src, n)?,
    };
    let usd = |field: &str, v: &Spanned<String>| {
        src.check(field, v, |t| {
            let num = t
                .trim()
                .strip_suffix("USD/h")
                .map(str::trim)
                .ok_or_else(|| format!("expected a price like \"32.77 USD/h\", got {t:?}"))?;
            match num.parse::<f64>() {
                Ok(x) if x >= 0.0 && x.is_finite() => Ok(x),
                _ => Err(format!("expected a non-negative number of USD/h, got {t:?}")),
            }
        })
    };
    let price = match &raw.price {
        None => None,
        Some(p) => Some(Price {
            on_demand_usd_per_hour: usd("price.on_demand", &p.on_demand)?,
            spot_usd_per_hour: match &p.spot {
                Some(s) => Some(usd("price.spot", s)?),
                None => None,
            },
            region: match &p.region {
                Some(r) => Some(src.check("price.region", r, |r| super::check_region(r))?),
                None => None,
            },
            source: src
                .check("price.source", &p.source, |t| super::plain_text(t).map(|()| t.clone()))?,
            date: src.check("price.date", &p.date, |d| super::check_date(d).map(|()| d.clone()))?,
        }),
    };
    let nccl_tuner = match &raw.nccl_tuner {
        None => None,
        Some(t) => {
            Some(src.check("nccl_tuner", t, |t| crate::comm::preset_tuner(t).map(|_| t.clone()))?)
        }
    };
    Ok(NodeSpec {
        price,
        nccl_tuner,
        name: raw.name.into_inner(),
        description: raw.description.map(Spanned::into_inner).unwrap_or_default(),
        gpu,
        nvlink,
        nvswitch,
        pcie,
        cpu,
        nic,
        gpu_parent,
        nic_parent,
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
            assert!(spec.gpu.count >= 4, "{name}");
        }
    }

    fn err(text: &str) -> String {
        parse_topology("t.toml", text).unwrap_err().to_string()
    }

    fn preset(name: &str) -> &'static str {
        PRESETS.iter().find(|(n, _)| *n == name).unwrap().1
    }

    #[test]
    fn a_nic_attached_to_a_missing_switch() {
        let text = preset("dgx-a100").replace(r#""top3", "top3"]"#, r#""top3", "top9"]"#);
        let e = err(&text);
        assert!(
            e.starts_with("t.toml:")
                && e.contains("nic.attach: no switch or NUMA domain named \"top9\""),
            "{e}"
        );
        let text = preset("polaris-a100-4gpu")
            .replace(r#"attach = ["numa3", "numa1"]"#, r#"attach = ["numa3", "numa4"]"#);
        assert!(err(&text).contains("nic.attach: no switch or NUMA domain named \"numa4\""));
        let text = preset("polaris-a100-4gpu")
            .replace(r#"attach = ["numa3", "numa1"]"#, r#"attach = ["numa3"]"#);
        assert!(err(&text).contains("nic.attach: 1 entries for 2 devices"));
    }

    #[test]
    fn duplicate_and_cyclic_switch_ids() {
        let text = preset("dgx-a100").replace("id = \"gsw7\"", "id = \"gsw6\"");
        assert!(err(&text).contains("pcie.switch.id: duplicate or reserved id \"gsw6\""));
        let text = preset("dgx-a100")
            .replace("id = \"top0\"\nparent = \"numa3\"", "id = \"top0\"\nparent = \"gsw0\"");
        assert!(
            err(&text).contains("pcie.switch.parent: switch \"top0\" is its own ancestor"),
            "{}",
            err(&text)
        );
        let text = preset("pcie-8gpu-2socket").replace(
            "switches = 4",
            "switches = 4\n[[pcie.switch]]\nid = \"x\"\nparent = \"numa0\"",
        );
        assert!(err(&text).contains("either a switch count or [[pcie.switch]] entries"));
    }

    #[test]
    fn nvlink_pairs_are_checked() {
        let base = preset("polaris-a100-4gpu");
        let text = base.replace("all_to_all = true", "pair = [{ gpus = [0, 4], links = 4 }]");
        assert!(err(&text).contains("nvlink.pair.gpus: two different GPU indices below 4"));
        let text = base.replace(
            "all_to_all = true",
            "all_to_all = true\npair = [{ gpus = [0, 1], links = 4 }]",
        );
        assert!(err(&text).contains("GPU 0 uses 16 links, more than links_per_gpu = 12"));
        let text =
            base.replace("[pcie]", "[nvswitch]\ncount = 1\ngeneration = 2\nnvls = false\n[pcie]");
        assert!(err(&text).contains("drop nvlink.pair / nvlink.all_to_all"));
    }

    #[test]
    fn gpu_models_come_from_the_library_or_the_file() {
        let e = err(&preset("dgx-h100").replace("H100-SXM5-80GB", "H900"));
        assert!(
            e.contains("gpu.model: unknown GPU model \"H900\"") && e.contains("A100-SXM4-80GB"),
            "{e}"
        );
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/topologies/user/rtx4090-epyc-8gpu.toml"
        ))
        .unwrap();
        let spec = parse_topology("rtx.toml", &text).unwrap();
        assert_eq!(
            (spec.gpu.model.sm, spec.gpu.arch, spec.gpu.model.p2p),
            (89, Arch::Ampere, false)
        );
        assert_eq!(spec.cpu.numa_domains(), 8);
        let e = err(&text.replace("sm = 89", "sm = 8.9"));
        assert!(e.starts_with("t.toml:") && e.contains("sm"), "{e}");
    }

    fn with_network(net: &str) -> String {
        preset("dgx-h100").replace("kind = \"non_blocking\"", net)
    }

    #[test]
    fn fabric_parameters_are_checked() {
        let e = err(&with_network("kind = \"fat_tree\"\ntiers = 2\nradix = 0"));
        assert!(
            e.starts_with("t.toml:")
                && e.contains("network.radix: must be 2 to 1024 ports (got 0)"),
            "{e}"
        );
        let e = err(&with_network(
            "kind = \"fat_tree\"\ntiers = 2\nradix = 64\noversubscription = 0.5",
        ));
        assert!(e.contains("network.oversubscription: must be at least 1"), "{e}");
        let e = err(&with_network(
            "kind = \"fat_tree\"\ntiers = 3\nradix = 64\noversubscription = [1.0]",
        ));
        assert!(e.contains("network.oversubscription: 1 values for 2 tier boundaries"), "{e}");
        let e = err(&with_network("kind = \"fat_tree\"\nradix = 64"));
        assert!(e.contains("network.tiers: required for kind = \"fat_tree\""), "{e}");
        let e = err(&with_network("kind = \"rail\"\nradix = 1"));
        assert!(e.contains("network.radix"), "{e}");
        let e = err(&with_network("kind = \"torus\""));
        assert!(e.contains("unknown network kind \"torus\""), "{e}");
        let ok = parse_topology(
            "t.toml",
            &with_network("kind = \"rail\"\nradix = 64\noversubscription = 2"),
        )
        .unwrap();
        assert_eq!(ok.network.fabric, FabricKind::Rail { radix: 64, oversubscription: 2.0 });
        assert_eq!(ok.network.routing, Routing::Adaptive);
    }

    #[test]
    fn routing_is_checked() {
        let tree = "kind = \"fat_tree\"\ntiers = 2\nradix = 64\n";
        let ok =
            parse_topology("t.toml", &with_network(&format!("{tree}routing = \"ecmp\""))).unwrap();
        assert_eq!(ok.network.routing, Routing::Ecmp);
        let e = err(&with_network(&format!("{tree}routing = \"random\"")));
        assert!(
            e.starts_with("t.toml:")
                && e.contains("network.routing: unknown routing \"random\" (adaptive, ecmp)"),
            "{e}"
        );
        let e = err(&with_network(&format!("{tree}routing = 1")));
        assert!(e.starts_with("t.toml:") && e.contains("routing"), "{e}");
        // One switch (layer) has one path between two NICs: nothing to hash.
        let e = err(&with_network("kind = \"non_blocking\"\nrouting = \"ecmp\""));
        assert!(e.contains("network.routing: \"ecmp\" needs equal-cost paths"), "{e}");
        parse_topology("t.toml", &with_network("kind = \"non_blocking\"\nrouting = \"adaptive\""))
            .unwrap();
        let e =
            err(&with_network("kind = \"fat_tree\"\ntiers = 1\nradix = 64\nrouting = \"ecmp\""));
        assert!(e.contains("network.routing"), "{e}");
        // Explicit link lists hash; they cannot be told to spread.
        let links =
            |net: &str| with_network(net) + "\n[[network.switch]]\nid = \"s\"\nnodes = [0]\n";
        let ok = parse_topology("t.toml", &links("kind = \"links\"")).unwrap();
        assert_eq!(ok.network.routing, Routing::Ecmp);
        let e = err(&links("kind = \"links\"\nrouting = \"adaptive\""));
        assert!(e.contains("network.routing: a links network hashes each flow"), "{e}");
    }

    #[test]
    fn inter_socket_bandwidth_from_the_cpu_family() {
        let spec = parse_topology("t.toml", preset("aws-p5")).unwrap();
        assert!((spec.cpu.inter_socket.gbyte_per_s() - 16.0).abs() < 1e-9);
        let e = err(&preset("aws-p5").replace("family = \"amd\"", "family = \"z80\""));
        assert!(e.contains("cpu.family: unknown CPU family \"z80\""), "{e}");
        let e = err(&preset("aws-p5").replace("family = \"amd\"\n", ""));
        assert!(e.contains("cpu.inter_socket: give the link bandwidth"), "{e}");
    }

    #[test]
    fn transports_come_from_the_library() {
        let e = err(&preset("dgx-h100").replace("infiniband-ndr", "carrier-pigeon"));
        assert!(
            e.contains("nic.transport: unknown transport \"carrier-pigeon\"") && e.contains("efa"),
            "{e}"
        );
        for t in transport_library().unwrap() {
            assert!(t.efficiency > 0.0 && t.efficiency <= 1.0, "{}", t.name);
        }
    }

    #[test]
    fn bad_values_name_file_line_and_field() {
        let text = preset("dgx-h100").replace("speed = \"400 Gb/s\"", "speed = 400");
        let err = parse_topology("t.toml", &text).unwrap_err().to_string();
        assert!(
            err.starts_with("t.toml:") && err.contains("nic.speed") && err.contains("bare number"),
            "{err}"
        );
        let text = preset("dgx-h100").replace("speed = \"400 Gb/s\"", "speed = \"0 Gb/s\"");
        let err = parse_topology("t.toml", &text).unwrap_err().to_string();
        assert!(err.contains("greater than zero"), "{err}");
        let text = preset("dgx-h100").replace("count = 8\n", "count = 0\n");
        let err = parse_topology("t.toml", &text).unwrap_err().to_string();
        assert!(err.contains("gpu.count") && err.contains("at least 1"), "{err}");
    }
}
