//! The subcommands' drivers and what they share; `main.rs` holds the flags.

pub(crate) mod common;
pub(crate) mod logs;
pub(crate) mod plan;
pub(crate) mod simulate;
pub(crate) mod sweep;
pub(crate) mod ui;
pub(crate) mod validate;

/// The examples each subcommand's `--help` ends with (a test runs those that write no file).
pub(crate) mod examples {
    pub(crate) const SIMULATE: &str = "Examples:
  collsim simulate scenarios/quickstart.toml
  collsim simulate --topology p5.48xlarge --nodes 2 -b 8 -e 1G -f 2
  collsim simulate --topology dgx-h100 -e 64M --sweep nccl.NCCL_ALGO=Ring,NVLS
  collsim simulate scenarios/llama7b-fsdp-p5-16node.toml --sweep cluster.nodes=2,4,8
  collsim simulate scenarios/quickstart.toml --format nccl-json -o predicted.json";
    pub(crate) const EXPLAIN: &str = "Examples:
  collsim explain --topology dgx-h100 --nodes 2 --bytes 256MiB
  collsim explain --topology aws-p5 --nodes 4 --collective all_gather --bytes 1GiB";
    pub(crate) const PRESETS: &str = "Examples:
  collsim presets
  collsim presets --gpu H100
  collsim presets --format json";
    pub(crate) const TOPO: &str = "Examples:
  collsim topo show aws-p5
  collsim topo import --nccl-xml nccl_topo.xml --nvidia-smi smi.txt -o mynode.toml";
    pub(crate) const CALIBRATE: &str = "Examples:
  collsim calibrate --from-log calibration/data/H100_2N8G_AR_AWSP5_A.log --check-log calibration/data/H100_2N8G_AR_AWSP5_B.log --topology aws-p5 --nodes 2 --gpus-per-node 8 -o p5.toml
  collsim calibrate --run -o this-machine.toml";
    pub(crate) const VALIDATE: &str = "Examples:
  collsim validate --log calibration/data/H100_1N8G_AR_RING_TOGETHER.log
  collsim validate --runs calibration/data/training/public.csv
  collsim validate --manifest calibration/data/manifest.csv --no-held-out";
    pub(crate) const PLAN: &str = "Examples:
  collsim plan scenarios/plan-llama7b-fsdp.toml
  collsim plan scenarios/plan-gpt2xl.toml --format csv
  collsim plan scenarios/plan-gpt2xl.toml --shard 2/3 -o b.jsonl";
    pub(crate) const PROFILE: &str = "Examples:
  collsim profile trace.json.gz -o model.toml --micro-batch 8 --sequence 1024";
}
