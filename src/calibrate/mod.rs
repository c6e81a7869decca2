//! Calibration against real measurements: reading nccl-tests logs ([`nccl_log`]) and comparing
//! the model with them ([`validate`]).

pub mod accuracy;
pub mod bench;
pub mod fit;
pub mod logs;
pub mod manifest;
pub mod nccl_log;
pub mod params;
pub mod pipeline;
pub mod training;
pub mod validate;
pub mod write;
