//! GPU models as data: the library shipped in `topologies/gpus.toml` (compiled in), which a
//! topology file can extend with its own `[gpu_model.NAME]` tables.

use crate::units::{Bandwidth, Bytes};

/// The shipped library's file name and text.
pub const LIBRARY: (&str, &str) =
    ("topologies/gpus.toml", include_str!("../../topologies/gpus.toml"));

/// One GPU model.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct GpuModel {
    /// Name as topology files spell it ("H100-SXM5-80GB").
    pub name: String,
    /// Compute capability × 10 (80 for sm_80).
    pub sm: u32,
    /// Device memory.
    #[serde(serialize_with = "ser_display")]
    pub memory: Bytes,
    /// Device memory bandwidth (the datasheet figure), if known: a one-rank call copies its
    /// buffer at it.
    #[serde(serialize_with = "ser_opt_display")]
    pub memory_bandwidth: Option<Bandwidth>,
    /// L2 cache size, if known: a one-rank call whose send and receive buffers fit in it finds
    /// them there (nccl-tests reuses its buffers every iteration) and does not reach device
    /// memory.
    #[serde(serialize_with = "ser_opt_display")]
    pub l2_cache: Option<Bytes>,
    /// NCCL's effective bandwidth of one NVLink, one direction (`topo.h`), if the model has
    /// NVLink.
    #[serde(serialize_with = "ser_opt_display")]
    pub nvlink_bandwidth_per_link: Option<Bandwidth>,
    /// PCIe generation of the GPU's own link.
    pub pcie_generation: u32,
    /// PCIe lanes of the GPU's own link.
    pub pcie_lanes: u32,
    /// Whether the driver allows peer-to-peer access between two such GPUs over PCIe (GeForce
    /// cards: no).
    pub p2p: bool,
    /// Whether GPUDirect RDMA works (GeForce cards: no).
    pub gdr: bool,
    /// Streaming multiprocessors, if known (NCCL's CTAs take some while they run).
    pub multiprocessors: Option<u32>,
    /// Dense peak TFLOP/s by math precision ("fp32", "tf32", "fp16", "bf16", "fp8"), from the
    /// datasheet, where known.
    pub peak_tflops: std::collections::BTreeMap<String, f64>,
}

/// The precisions `peak_tflops` may list.
pub const PRECISIONS: [&str; 5] = ["fp32", "tf32", "fp16", "bf16", "fp8"];

fn ser_display<T: std::fmt::Display, S: serde::Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

fn ser_opt_display<T: std::fmt::Display, S: serde::Serializer>(
    v: &Option<T>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => s.collect_str(v),
        None => s.serialize_none(),
    }
}

/// NCCL's per-link NVLink figure for a compute capability (`topo.h`: SM60 18, SM70/80 20, SM86
/// 12, SM90 20.6, SM100 40.1 GB/s).
pub fn nccl_nvlink_bandwidth(sm: u32) -> Bandwidth {
    let gb = match sm {
        0..70 => 18.0,
        86..90 => 12.0,
        70..90 => 20.0,
        90..100 => 20.6,
        _ => 40.1,
    };
    Bandwidth::from_gbyte_per_s_f64(gb)
}

/// The library model and the topology preset for a GPU name as nvidia-smi and nccl-tests print
/// it ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"): the preset is the vendor's reference
/// node for that GPU (an H200 or a PCIe card in it is the closest collsim has). None for GPUs
/// without a preset (GeForce cards, older generations).
pub fn from_reported_name(name: &str) -> Option<(&'static str, &'static str)> {
    let n = name.to_ascii_uppercase();
    let pcie = n.contains("PCIE");
    let small = n.contains("40GB");
    if n.contains("GB200") {
        Some(("GB200-186GB", "gb200-nvl72"))
    } else if n.contains("B200") {
        Some(("B200-SXM-180GB", "dgx-b200"))
    } else if n.contains("H200") {
        Some(("H200-SXM-141GB", "dgx-h100"))
    } else if n.contains("H100") {
        Some(if pcie {
            ("H100-PCIe-80GB", "pcie-8gpu-2socket")
        } else {
            ("H100-SXM5-80GB", "dgx-h100")
        })
    } else if n.contains("A100") {
        Some(match (pcie, small) {
            (true, true) => ("A100-PCIe-40GB", "pcie-8gpu-2socket"),
            (true, false) => ("A100-PCIe-80GB", "pcie-8gpu-2socket"),
            (false, true) => ("A100-SXM4-40GB", "dgx-a100"),
            (false, false) => ("A100-SXM4-80GB", "dgx-a100"),
        })
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reported_names_map_to_models_and_presets() {
        assert_eq!(
            from_reported_name("NVIDIA H100 80GB HBM3"),
            Some(("H100-SXM5-80GB", "dgx-h100"))
        );
        assert_eq!(
            from_reported_name("NVIDIA A100-SXM4-40GB"),
            Some(("A100-SXM4-40GB", "dgx-a100"))
        );
        assert_eq!(from_reported_name("NVIDIA A100-SXM4-80GB").unwrap().0, "A100-SXM4-80GB");
        assert_eq!(from_reported_name("NVIDIA H100 PCIe").unwrap().1, "pcie-8gpu-2socket");
        assert_eq!(from_reported_name("NVIDIA GeForce RTX 4090"), None);
        assert_eq!(from_reported_name("NVIDIA B200"), Some(("B200-SXM-180GB", "dgx-b200")));
        assert_eq!(from_reported_name("NVIDIA GB200"), Some(("GB200-186GB", "gb200-nvl72")));
    }
}
