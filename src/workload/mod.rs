//! What issues the collectives: an nccl-tests-like sweep ([`sweep`]), a DDP training step
//! ([`ddp`]), and several jobs side by side with background traffic ([`jobs`]).

pub mod calls;
pub mod chakra;
pub mod compute;
pub mod ddp;
pub mod dp;
pub mod jobs;
pub mod kineto;
pub mod memory;
pub mod models;
pub mod nsys;
pub mod parallel;
pub mod profile;
pub mod skew;
pub mod spec;
pub(crate) mod step;
pub use step::Policy;
pub mod sweep;
pub mod timeline;

/// Cost of one kernel launch: collsim-bench measured 3.8–4.3 µs back to back on an H100
/// (calibration/data/2026-11-22-h100-single).
pub const KERNEL_LAUNCH_SECS: f64 = 4e-6;

/// What a scenario (or one of its jobs) runs.
#[derive(Debug, Clone, PartialEq)]
pub enum Workload {
    /// An nccl-tests-like sweep of one collective.
    Sweep(sweep::SweepSpec),
    /// A PyTorch DDP training step (`kind = "ddp"`).
    Ddp(Box<ddp::DdpSpec>),
    /// A job that holds its nodes and sends nothing (`kind = "idle"`, jobs only).
    Idle,
}

/// In reports, one entry: `{"sweep": {...}}`, `{"ddp": "model name"}` or `{"idle": true}` (a
/// map, so that a scenario can flatten it).
impl serde::Serialize for Workload {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(1))?;
        match self {
            Workload::Sweep(sweep) => m.serialize_entry("sweep", sweep)?,
            Workload::Ddp(d) => m.serialize_entry("ddp", &d.model.name)?,
            Workload::Idle => m.serialize_entry("idle", &true)?,
        }
        m.end()
    }
}

/// nccl-tests data types (`-d`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DataType {
    /// int8.
    Int8,
    /// uint8.
    Uint8,
    /// int32.
    Int32,
    /// uint32.
    Uint32,
    /// int64.
    Int64,
    /// uint64.
    Uint64,
    /// half.
    Half,
    /// float.
    Float,
    /// double.
    Double,
    /// bfloat16.
    Bfloat16,
    /// fp8 e4m3 (NCCL ≥ 2.24 on sm90+).
    F8e4m3,
    /// fp8 e5m2.
    F8e5m2,
}

impl DataType {
    /// nccl-tests' names, as [`DataType::parse`] takes them (with a few aliases besides).
    pub const NAMES: [&'static str; 12] = [
        "int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double",
        "bfloat16", "f8e4m3", "f8e5m2",
    ];

    /// Parses nccl-tests' names (and a few aliases).
    pub fn parse(s: &str) -> Option<DataType> {
        Some(match s.to_ascii_lowercase().as_str() {
            "int8" | "char" => DataType::Int8,
            "uint8" => DataType::Uint8,
            "int32" | "int" => DataType::Int32,
            "uint32" => DataType::Uint32,
            "int64" => DataType::Int64,
            "uint64" => DataType::Uint64,
            "half" | "float16" | "fp16" => DataType::Half,
            "float" | "float32" | "fp32" => DataType::Float,
            "double" | "float64" | "fp64" => DataType::Double,
            "bfloat16" | "bf16" => DataType::Bfloat16,
            "f8e4m3" | "fp8_e4m3" | "fp8e4m3" | "float8e4m3" => DataType::F8e4m3,
            "f8e5m2" | "fp8_e5m2" | "fp8e5m2" | "float8e5m2" => DataType::F8e5m2,
            _ => return None,
        })
    }

    /// nccl-tests' name.
    pub fn name(self) -> &'static str {
        match self {
            DataType::Int8 => "int8",
            DataType::Uint8 => "uint8",
            DataType::Int32 => "int32",
            DataType::Uint32 => "uint32",
            DataType::Int64 => "int64",
            DataType::Uint64 => "uint64",
            DataType::Half => "half",
            DataType::Float => "float",
            DataType::Double => "double",
            DataType::Bfloat16 => "bfloat16",
            DataType::F8e4m3 => "f8e4m3",
            DataType::F8e5m2 => "f8e5m2",
        }
    }

    /// Bytes per element.
    pub fn size(self) -> u64 {
        match self {
            DataType::Int8 | DataType::Uint8 | DataType::F8e4m3 | DataType::F8e5m2 => 1,
            DataType::Half | DataType::Bfloat16 => 2,
            DataType::Int32 | DataType::Uint32 | DataType::Float => 4,
            DataType::Int64 | DataType::Uint64 | DataType::Double => 8,
        }
    }
}

/// Reduction operations (`-o`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ReduceOp {
    /// sum.
    Sum,
    /// prod.
    Prod,
    /// min.
    Min,
    /// max.
    Max,
    /// avg.
    Avg,
}

impl ReduceOp {
    /// nccl-tests' names, as [`ReduceOp::parse`] takes them.
    pub const NAMES: [&'static str; 5] = ["sum", "prod", "min", "max", "avg"];

    /// Parses nccl-tests' names.
    pub fn parse(s: &str) -> Option<ReduceOp> {
        Some(match s.to_ascii_lowercase().as_str() {
            "sum" => ReduceOp::Sum,
            "prod" => ReduceOp::Prod,
            "min" => ReduceOp::Min,
            "max" => ReduceOp::Max,
            "avg" => ReduceOp::Avg,
            _ => return None,
        })
    }

    /// nccl-tests' name.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
            ReduceOp::Avg => "avg",
        }
    }
}
