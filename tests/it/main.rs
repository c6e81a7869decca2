//! collsim's integration tests: the CLI as a user runs it, the model against closed forms and
//! against real nccl-tests logs.

mod accuracy;
mod backends;
mod blackwell;
mod calibrate;
mod cli_errors;
mod compute;
mod dataparallel;
mod ddp;
mod engine;
mod golden;
mod hardware;
mod import;
mod jobs;
mod megatron;
mod model;
mod modules;
mod outputs;
mod plan;
mod plots;
mod profile;
mod readme;
mod reference;
mod report;
mod scaling;
mod scenarios;
mod selection;
mod spec;
mod training;

use std::process::{Command, Output};

/// Runs the `collsim` binary with `args` from the repository root.
pub fn collsim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_collsim"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("the collsim binary runs")
}

/// Runs `collsim` with its stdout closed before it writes a byte, as `| head -1` closes it
/// once it has its line.
pub fn collsim_stdout_closed(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_collsim"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the collsim binary runs");
    drop(child.stdout.take());
    child.wait_with_output().expect("collsim ends")
}

/// Runs `collsim` and returns its stdout, asserting success.
pub fn collsim_ok(args: &[&str]) -> String {
    let out = collsim(args);
    assert!(
        out.status.success(),
        "collsim {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// The AWS p5 runs' NCCL environment, as their NCCL INFO lines show it (aws-ofi-nccl sets the
/// two NVLS chunk sizes on p5), in `--nccl` flags.
pub const P5_ENV: [&str; 6] = [
    "--nccl",
    "NCCL_BUFFSIZE=8388608",
    "--nccl",
    "NCCL_NVLS_CHUNKSIZE=524288",
    "--nccl",
    "NCCL_NVLSTREE_MAX_CHUNKSIZE=524288",
];

/// Where tests write their scratch files: Cargo's per-target temporary directory (under
/// `target/`), so that runs leave nothing behind in the system's temp directory.
pub fn scratch() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

/// The built-in timing profile, as `simulate` runs without `--profile`.
pub fn default_params() -> collsim::collective::TimingParams {
    collsim::config::parse_profile(
        collsim::config::DEFAULT_PROFILE.0,
        collsim::config::DEFAULT_PROFILE.1,
    )
    .expect("the built-in profile parses")
}
