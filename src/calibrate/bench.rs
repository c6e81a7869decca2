//! `calibrate --run`: the bench program (`calibration/bench`, collsim-bench) built and run on
//! this machine's GPUs, under a launcher where one is given (`srun`, `mpirun`), for a sweep of
//! all_reduce, all_gather and reduce_scatter that `calibrate` then fits and checks.

use std::path::{Path, PathBuf};

/// The bench program's folder in a collsim checkout, from its root.
pub const BENCH_DIR: &str = "calibration/bench";

/// The sweep collsim-bench runs: what `calibrate` fits (all_reduce) and checks (the others),
/// as nccl-tests' `-b 8 -e 1G -f 2`.
pub const SWEEP: [&str; 8] =
    ["-c", "all_reduce,all_gather,reduce_scatter", "-b", "8", "-e", "1G", "-f", "2"];

/// collsim-bench, built with `make` first where it is not: errors where this machine has no
/// NVIDIA driver, this is not a checkout's root, or the build fails.
pub fn build_here() -> Result<PathBuf, String> {
    if !Path::new("/proc/driver/nvidia/version").exists() && !Path::new("/dev/nvidia0").exists() {
        return Err(
            "calibrate --run: no NVIDIA GPU on this machine (no NVIDIA driver); run it where the GPUs are, or fit logs you have with --from-log".into(),
        );
    }
    let dir = Path::new(BENCH_DIR);
    if !dir.join("Makefile").exists() {
        return Err(
            "calibrate --run: calibration/bench not found here; run it from the root of a collsim checkout".into(),
        );
    }
    let bench = dir.join("build/collsim-bench");
    if !bench.exists() {
        let ok = std::process::Command::new("make")
            .arg("-C")
            .arg(dir)
            .status()
            .map_err(|e| format!("calibrate --run: cannot run make: {e}"))?
            .success();
        if !ok {
            return Err(
                "calibrate --run: building collsim-bench failed (see above; calibration/bench/README.md says what it needs)".into(),
            );
        }
    }
    Ok(bench)
}

/// The command line that runs `bench` under `launcher` (its words first), and the folder it
/// writes to: under a launcher the processes may run on other nodes, so the folder, where rank
/// 0 leaves NCCL's unique id for them, is one they share (the working directory); else a
/// temporary one.
pub fn command(bench: &Path, launcher: Option<&str>) -> Result<(Vec<String>, PathBuf), String> {
    let dir = if launcher.is_some() {
        std::env::current_dir().map_err(|e| e.to_string())?
    } else {
        std::env::temp_dir()
    };
    let out = dir.join(format!("collsim-calibrate-run-{}", std::process::id()));
    let mut words: Vec<String> =
        launcher.map(|l| l.split_whitespace().map(String::from).collect()).unwrap_or_default();
    words.push(bench.display().to_string());
    words.extend(SWEEP.iter().map(|w| w.to_string()));
    words.push("-o".into());
    words.push(out.display().to_string());
    Ok((words, out))
}

/// Runs `words` ([`command`]), its stdout (the bench's progress rows) to `progress`.
pub fn run(words: &[String], progress: std::process::Stdio) -> Result<(), String> {
    let Some((program, args)) = words.split_first() else {
        return Err("calibrate --run: no command to run".into());
    };
    let status = std::process::Command::new(program)
        .args(args)
        .stdout(progress)
        .status()
        .map_err(|e| format!("calibrate --run: cannot start {program}: {e}"))?;
    match status.code() {
        Some(0) => Ok(()),
        Some(2) => {
            Err("calibrate --run: collsim-bench found no CUDA GPU (its message is above)".into())
        }
        _ => Err(format!("calibrate --run: collsim-bench failed ({status})")),
    }
}
