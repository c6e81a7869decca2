//! Raw serde structs mirroring the TOML files, values kept as written with their spans.
//! Validation into typed values happens in the sibling modules.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

use super::RawQuantity;

type S<T> = Spanned<T>;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTopology {
    pub name: S<String>,
    pub description: Option<S<String>>,
    pub nccl_tuner: Option<S<String>>,
    pub gpu: RawGpu,
    pub gpu_model: Option<BTreeMap<S<String>, RawGpuModel>>,
    pub nvlink: Option<RawNvlink>,
    pub nvswitch: Option<RawNvswitch>,
    pub pcie: RawPcie,
    pub cpu: RawCpu,
    pub nic: Option<RawNic>,
    pub network: Option<RawNetwork>,
    pub price: Option<RawPrice>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPrice {
    pub on_demand: S<String>,
    pub spot: Option<S<String>>,
    pub region: Option<S<String>>,
    pub source: S<String>,
    pub date: S<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawGpu {
    pub model: S<String>,
    pub count: S<i64>,
    pub attach: Option<S<Vec<S<String>>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawGpuModel {
    pub sm: S<i64>,
    pub memory: S<RawQuantity>,
    pub memory_bandwidth: Option<S<RawQuantity>>,
    pub l2_cache: Option<S<RawQuantity>>,
    pub nvlink_bandwidth_per_link: Option<S<RawQuantity>>,
    pub pcie: RawPcieLink,
    pub p2p: Option<bool>,
    pub gdr: Option<bool>,
    pub multiprocessors: Option<S<i64>>,
    pub peak_tflops: Option<BTreeMap<String, S<f64>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPcieLink {
    pub generation: S<i64>,
    pub lanes: S<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawNvlink {
    pub links_per_gpu: S<i64>,
    pub bandwidth_per_link: Option<S<RawQuantity>>,
    pub latency: S<RawQuantity>,
    pub all_to_all: Option<S<bool>>,
    pub pair: Option<Vec<RawNvPair>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawNvPair {
    pub gpus: S<Vec<i64>>,
    pub links: S<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawNvswitch {
    pub count: S<i64>,
    pub generation: S<i64>,
    pub nvls: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPcie {
    pub generation: S<i64>,
    pub lanes: S<i64>,
    pub switches: Option<S<i64>>,
    pub switch: Option<Vec<RawSwitch>>,
    pub latency: S<RawQuantity>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSwitch {
    pub id: S<String>,
    pub parent: S<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCpu {
    pub sockets: S<i64>,
    pub numa_per_socket: Option<S<i64>>,
    pub cores_per_numa: Option<S<i64>>,
    pub threads_per_core: Option<S<i64>>,
    pub vendor: S<String>,
    pub family: Option<S<String>>,
    pub inter_socket: Option<S<RawQuantity>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawNic {
    pub count: S<i64>,
    pub speed: S<RawQuantity>,
    pub transport: S<String>,
    pub latency: S<RawQuantity>,
    pub attach: Option<S<Vec<S<String>>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawNetwork {
    pub kind: S<String>,
    pub latency: S<RawQuantity>,
    pub tiers: Option<S<i64>>,
    pub radix: Option<S<i64>>,
    pub oversubscription: Option<S<RawOversub>>,
    pub routing: Option<S<String>>,
    pub sharp: Option<bool>,
    pub switch: Option<Vec<RawNetSwitch>>,
    pub link: Option<Vec<RawNetLink>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawNetSwitch {
    pub id: S<String>,
    pub nodes: Option<S<Vec<i64>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawNetLink {
    pub between: S<Vec<String>>,
    pub bandwidth: S<RawQuantity>,
    pub latency: Option<S<RawQuantity>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum RawOversub {
    One(f64),
    PerTier(Vec<f64>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTransport {
    pub efficiency: S<f64>,
    pub message_overhead: S<RawQuantity>,
    pub proxy_op: Option<S<RawQuantity>>,
    pub per_stream: Option<S<RawQuantity>>,
    pub default_streams: Option<S<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawScenario {
    pub cluster: RawCluster,
    pub workload: Option<RawWorkload>,
    pub nccl: Option<BTreeMap<String, S<toml::Value>>>,
    pub placement: Option<RawPlacement>,
    pub job: Option<Vec<RawJob>>,
    pub background: Option<Vec<RawBackground>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawJob {
    pub name: S<String>,
    pub nodes: S<toml::Value>,
    pub placement: Option<S<String>>,
    pub gpus_per_node: Option<S<i64>>,
    pub workload: Option<RawWorkload>,
    pub nccl: Option<BTreeMap<String, S<toml::Value>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBackground {
    pub pattern: S<String>,
    pub nodes: Option<S<Vec<i64>>>,
    pub load: Option<S<f64>>,
    pub rate_per_node: Option<S<RawQuantity>>,
    pub target: Option<S<i64>>,
    pub class: Option<S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPlacement {
    pub policy: Option<S<String>>,
    pub tier: Option<S<String>>,
    pub group: Option<Vec<RawGroup>>,
    pub latency: Option<S<RawQuantity>>,
    pub bandwidth_per_node: Option<S<RawQuantity>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawGroup {
    pub name: S<String>,
    pub nodes: S<Vec<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTier {
    pub latency: S<RawQuantity>,
    pub bandwidth_per_node: Option<S<RawQuantity>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCluster {
    pub topology: S<String>,
    pub nodes: Option<S<i64>>,
    pub gpus_per_node: Option<S<i64>>,
    pub gpus_per_process: Option<S<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWorkload {
    pub kind: Option<S<String>>,
    pub collective: Option<S<String>>,
    pub min_bytes: Option<S<RawQuantity>>,
    pub max_bytes: Option<S<RawQuantity>>,
    pub factor: Option<S<i64>>,
    pub dtype: Option<S<String>>,
    pub op: Option<S<String>>,
    // kind = "ddp"
    pub model: Option<S<RawModel>>,
    pub sequence: Option<S<i64>>,
    pub micro_batch: Option<S<i64>>,
    pub grad_accumulation: Option<S<i64>>,
    pub grad_dtype: Option<S<String>>,
    pub optimizer: Option<S<String>>,
    pub optimizer_impl: Option<S<String>>,
    pub precision: Option<S<String>>,
    pub efficiency: Option<S<f64>>,
    pub mfu: Option<S<f64>>,
    pub tflops: Option<S<f64>>,
    pub input: Option<S<RawInput>>,
    pub compute_slowdown: Option<S<f64>>,
    pub launch_us: Option<S<f64>>,
    pub backend: Option<S<String>>,
    pub gemm_fixed_us: Option<S<f64>>,
    pub attention: Option<S<String>>,
    pub activation_checkpointing: Option<S<String>>,
    pub checkpoint_every: Option<S<i64>>,
    pub calls: Option<S<String>>,
    pub profile: Option<S<String>>,
    pub memory_headroom: Option<S<f64>>,
    pub rank_skew_cv: Option<S<f64>>,
    pub rank_skew_host_cv: Option<S<f64>>,
    pub straggler_speed: Option<S<f64>>,
    pub rank_speeds: Option<S<Vec<f64>>>,
    pub ddp: Option<S<RawDdp>>,
    pub dp: Option<S<RawDp>>,
    pub fsdp: Option<S<RawFsdp>>,
    pub zero: Option<S<RawZero>>,
    pub parallel: Option<S<RawParallel>>,
    pub layer: Option<Vec<RawLayer>>,
}

impl RawWorkload {
    /// Every key the table gives, in the order of the struct, with the byte where its value (or
    /// its table) starts; `layer` tables at their first `name`.
    pub fn given(&self) -> Vec<(&'static str, usize)> {
        fn at<T>(key: &'static str, v: &Option<S<T>>) -> Option<(&'static str, usize)> {
            v.as_ref().map(|v| (key, v.span().start))
        }
        // Taken apart field by field, so that a key added to the table is a compile error here
        // until it is listed.
        let RawWorkload {
            kind,
            collective,
            min_bytes,
            max_bytes,
            factor,
            dtype,
            op,
            model,
            sequence,
            micro_batch,
            grad_accumulation,
            grad_dtype,
            optimizer,
            optimizer_impl,
            precision,
            efficiency,
            mfu,
            tflops,
            input,
            compute_slowdown,
            launch_us,
            backend,
            gemm_fixed_us,
            attention,
            activation_checkpointing,
            checkpoint_every,
            calls,
            profile,
            memory_headroom,
            rank_skew_cv,
            rank_skew_host_cv,
            straggler_speed,
            rank_speeds,
            ddp,
            dp,
            fsdp,
            zero,
            parallel,
            layer,
        } = self;
        [
            at("kind", kind),
            at("collective", collective),
            at("min_bytes", min_bytes),
            at("max_bytes", max_bytes),
            at("factor", factor),
            at("dtype", dtype),
            at("op", op),
            at("model", model),
            at("sequence", sequence),
            at("micro_batch", micro_batch),
            at("grad_accumulation", grad_accumulation),
            at("grad_dtype", grad_dtype),
            at("optimizer", optimizer),
            at("optimizer_impl", optimizer_impl),
            at("precision", precision),
            at("efficiency", efficiency),
            at("mfu", mfu),
            at("tflops", tflops),
            at("input", input),
            at("compute_slowdown", compute_slowdown),
            at("launch_us", launch_us),
            at("backend", backend),
            at("gemm_fixed_us", gemm_fixed_us),
            at("attention", attention),
            at("activation_checkpointing", activation_checkpointing),
            at("checkpoint_every", checkpoint_every),
            at("calls", calls),
            at("profile", profile),
            at("memory_headroom", memory_headroom),
            at("rank_skew_cv", rank_skew_cv),
            at("rank_skew_host_cv", rank_skew_host_cv),
            at("straggler_speed", straggler_speed),
            at("rank_speeds", rank_speeds),
            at("ddp", ddp),
            at("dp", dp),
            at("fsdp", fsdp),
            at("zero", zero),
            at("parallel", parallel),
            layer.as_ref().and_then(|l| l.first()).map(|l| ("layer", l.name.span().start)),
        ]
        .into_iter()
        .flatten()
        .collect()
    }
}

/// `model`: a preset's name, or a `[workload.model]` table.
#[derive(Debug)]
pub enum RawModel {
    Name(String),
    Spec(Box<RawModelSpec>),
}

impl RawModel {
    /// The preset it names (as a name, or a table's `preset`).
    pub fn preset(&self) -> Option<&str> {
        match self {
            RawModel::Name(n) => Some(n),
            RawModel::Spec(s) => s.preset.as_ref().map(|p| p.get_ref().as_str()),
        }
    }
}

impl<'de> Deserialize<'de> for RawModel {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = RawModel;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a preset's name or a [workload.model] table")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<RawModel, E> {
                Ok(RawModel::Name(v.to_string()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<RawModel, A::Error> {
                // The table's own deserializer, so that its values keep their places.
                let spec =
                    RawModelSpec::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(RawModel::Spec(Box::new(spec)))
            }
        }
        d.deserialize_any(V)
    }
}

/// `[workload.model]`: a transformer's specification (see `workload::spec`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawModelSpec {
    pub preset: Option<S<String>>,
    pub name: Option<S<String>>,
    pub family: Option<S<String>>,
    pub implementation: Option<S<String>>,
    pub layers: Option<S<i64>>,
    pub hidden: Option<S<i64>>,
    pub heads: Option<S<i64>>,
    pub kv_heads: Option<S<i64>>,
    pub ffn: Option<S<i64>>,
    pub activation: Option<S<String>>,
    pub norm: Option<S<String>>,
    pub bias: Option<S<bool>>,
    pub position: Option<S<String>>,
    pub max_positions: Option<S<i64>>,
    pub vocab: Option<S<i64>>,
    pub vocab_multiple: Option<S<i64>>,
    pub tied: Option<S<bool>>,
    pub dropout: Option<S<bool>>,
    pub attention: Option<S<String>>,
    pub loss: Option<S<String>>,
    pub experts: Option<S<i64>>,
    pub top_k: Option<S<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawParallel {
    pub tp: Option<S<i64>>,
    pub pp: Option<S<i64>>,
    pub ep: Option<S<i64>>,
    pub cp: Option<S<i64>>,
    pub virtual_stages: Option<S<i64>>,
    pub sequence_parallel: Option<bool>,
    pub recompute: Option<S<String>>,
    pub overlap_grad_reduce: Option<bool>,
    pub align_grad_reduce: Option<bool>,
    pub distributed_optimizer: Option<bool>,
    pub overlap_param_gather: Option<bool>,
    pub tp_comm_overlap: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFsdp {
    pub sharding_strategy: Option<S<String>>,
    pub backward_prefetch: Option<S<String>>,
    pub forward_prefetch: Option<bool>,
    pub limit_all_gathers: Option<bool>,
    pub param_dtype: Option<S<String>>,
    pub reduce_dtype: Option<S<String>>,
    pub no_sync: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawZero {
    pub stage: Option<S<i64>>,
    pub reduce_bucket_size: Option<S<f64>>,
    pub allgather_bucket_size: Option<S<f64>>,
    pub overlap_comm: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawInput {
    pub gpu_samples_per_s: Option<S<f64>>,
    pub node_samples_per_s: Option<S<f64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDp {
    pub sample_bytes: Option<S<RawQuantity>>,
    pub output_bytes: Option<S<RawQuantity>>,
    pub loss: Option<S<String>>,
    pub gil_share: Option<S<f64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDdp {
    pub bucket_cap_mb: Option<S<f64>>,
    pub gradient_as_bucket_view: Option<bool>,
    pub static_graph: Option<bool>,
    pub find_unused_parameters: Option<bool>,
    pub broadcast_buffers: Option<bool>,
    pub comm_hook: Option<S<String>>,
    pub powersgd_rank: Option<S<i64>>,
    pub powersgd_start_iter: Option<S<i64>>,
    pub error_feedback: Option<bool>,
    pub warm_start: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLayer {
    pub name: S<String>,
    pub fwd_gflops: Option<S<f64>>,
    pub fwd_ms: Option<S<f64>>,
    pub bwd_ms: Option<S<f64>>,
    pub dtype: Option<S<String>>,
    pub params: S<Vec<Vec<i64>>>,
    pub activations: Option<S<RawQuantity>>,
    pub fwd_memory: Option<S<RawQuantity>>,
    pub bwd_memory: Option<S<RawQuantity>>,
    pub kernels: Option<S<i64>>,
    pub gemms: Option<S<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProfile {
    pub name: String,
    pub source: String,
    pub fitted_on: Option<RawFittedOn>,
    pub overhead: RawOverhead,
    pub step_latency: RawStepLatency,
    pub bandwidth: Option<RawBandwidth>,
    pub gpu: BTreeMap<S<String>, RawGpuParams>,
    pub correction: Option<RawCorrection>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFittedOn {
    pub topology: S<String>,
    pub gpu: S<String>,
    pub nccl: S<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBandwidth {
    pub nvlink: S<f64>,
    pub pcie: S<f64>,
    pub net: S<f64>,
    pub nvls: Option<S<f64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCorrection {
    pub fitted_on: Vec<String>,
    pub bands: S<Vec<S<RawQuantity>>>,
    pub factor: S<Vec<S<f64>>>,
    pub residual: S<Vec<S<f64>>>,
    #[serde(default)]
    pub mechanism: Vec<RawMechanismBands>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMechanismBands {
    pub name: S<String>,
    pub bands: S<Vec<S<RawQuantity>>>,
    pub factor: S<Vec<S<f64>>>,
    pub residual: S<Vec<S<f64>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawGpuParams {
    pub sync: RawPerProto,
    pub nvlink_efficiency: RawPerProtoNumber,
    pub nvls_call: Option<S<RawQuantity>>,
    pub p2p_channel: Option<S<RawQuantity>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPerProtoNumber {
    #[serde(rename = "LL")]
    pub ll: S<f64>,
    #[serde(rename = "LL128")]
    pub ll128: S<f64>,
    #[serde(rename = "Simple")]
    pub simple: S<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOverhead {
    pub call: S<RawQuantity>,
    pub launch: Option<S<RawQuantity>>,
    pub peer: Option<S<RawQuantity>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStepLatency {
    pub nvlink: RawPerProto,
    pub pcie: RawPerProto,
    pub net: RawPerProto,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPerProto {
    #[serde(rename = "LL")]
    pub ll: S<RawQuantity>,
    #[serde(rename = "LL128")]
    pub ll128: S<RawQuantity>,
    #[serde(rename = "Simple")]
    pub simple: S<RawQuantity>,
}
