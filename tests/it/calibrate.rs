//! `collsim calibrate`: fitting a profile's physical parameters and size-band correction on some
//! real runs and checking them on others.

use super::cli_errors::fails_with;
use super::{P5_ENV, collsim, collsim_ok, scratch};

fn p5(args: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    v.extend(["--topology", "aws-p5", "--nodes", "2", "--gpus-per-node", "8"].map(String::from));
    v.extend(P5_ENV.map(String::from));
    v
}

fn median(v: &serde_json::Value) -> f64 {
    v["median_abs_error_pct"].as_f64().unwrap()
}

#[test]
fn a_profile_fitted_on_p5_run_a_predicts_runs_b_and_c() {
    // Issue #5's target: fit on one run of a system, held-out median |error| <= 5 %.
    let profile = scratch().join("p5-fit.toml");
    let profile = profile.to_str().unwrap();
    let report = collsim_ok(
        &p5(&[
            "calibrate",
            "--from-log",
            "calibration/data/H100_2N8G_AR_AWSP5_A.log",
            "-o",
            profile,
        ])
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>(),
    );
    assert!(report.contains("profile written to"), "{report}");
    // The network's effective bandwidth is fitted; PCIe, which no p5 call crosses, is held.
    assert!(report.contains("    bandwidth.net                        1.000 -> 0.7"), "{report}");
    assert!(report.contains("bandwidth.pcie                       held: the fitted times hardly"));
    let text = std::fs::read_to_string(profile).unwrap();
    assert!(text.contains("net = 0.7") && text.contains("  # fitted; was 1"), "{text}");
    for run in ["B", "C"] {
        let log = format!("calibration/data/H100_2N8G_AR_AWSP5_{run}.log");
        let args = p5(&["validate", "--log", &log, "--format", "json"]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let before: serde_json::Value = serde_json::from_str(&collsim_ok(&args)).unwrap();
        let with: Vec<&str> = args.iter().copied().chain(["--profile", profile]).collect();
        let after: serde_json::Value = serde_json::from_str(&collsim_ok(&with)).unwrap();
        assert!(median(&after) <= 5.0, "{run}: {}", median(&after));
        assert!(median(&after) < median(&before), "{run}");
    }
    // The overlay plot of a held-out run: measured points, predicted line and band.
    let svg = scratch().join("p5-b.svg");
    let args = p5(&[
        "validate",
        "--log",
        "calibration/data/H100_2N8G_AR_AWSP5_B.log",
        "--profile",
        profile,
        "--plot",
        svg.to_str().unwrap(),
    ]);
    collsim_ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg") && text.contains("measured") && text.contains("<circle"));
    // The correction's error band reaches the simulation's rows.
    let sim = collsim_ok(&[
        "simulate",
        "--topology",
        "aws-p5",
        "--nodes",
        "2",
        "--min-bytes",
        "1MiB",
        "--max-bytes",
        "1MiB",
        "--profile",
        profile,
        "--format",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&sim).unwrap();
    let row = &v["rows"][0];
    let (t, lo, hi) = (
        row["time_us"].as_f64().unwrap(),
        row["time_us_low"].as_f64().unwrap(),
        row["time_us_high"].as_f64().unwrap(),
    );
    assert!(lo < t && t < hi, "{lo} {t} {hi}");
}

#[test]
fn every_second_log_is_held_out_and_the_fit_is_deterministic() {
    let args = p5(&[
        "calibrate",
        "--from-log",
        "calibration/data/H100_2N8G_AR_AWSP5_A.log",
        "calibration/data/H100_2N8G_AR_AWSP5_B.log",
        "calibration/data/H100_2N8G_AR_AWSP5_C.log",
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = collsim(&args);
    assert!(out.status.success());
    let report = String::from_utf8_lossy(&out.stderr);
    assert!(report.contains("fit on 2 log(s) (64 sizes), checked on 1"), "{report}");
    assert!(report.contains("_B.log") && report.contains("check"), "{report}");
    // Without -o the profile goes to stdout, the same bytes every time.
    let again = collsim(&args);
    assert_eq!(out.stdout, again.stdout);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("[correction]") && text.contains("AWSP5_A.log"), "{text}");
}

#[test]
fn a_parameter_the_data_cannot_determine_is_an_error_when_asked_for() {
    let base = ["calibrate", "--from-log", "calibration/data/H100_2N8G_AR_AWSP5_A.log@all_reduce"];
    let args = p5(&[&base[..], &["--fit", "bandwidth.net,bandwidth.pcie"]].concat());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    fails_with(
        &args,
        &["cannot fit: bandwidth.pcie is not determined by the fit data: the fitted times hardly"],
    );
    let args = p5(&[&base[..], &["--fit", "bandwith.net"]].concat());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    fails_with(&args, &["--fit bandwith.net: unknown parameter (known: none, bandwidth.net"]);
    // `--fit none --no-correction`: the base model as it is, with its error band only.
    let args = p5(&[&base[..], &["--fit", "none", "--no-correction"]].concat());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let text = collsim_ok(&args);
    assert!(text.contains("factor = [1.0, 1.0, 1.0, 1.0, 1.0]"), "{text}");
    assert!(!text.contains("# fitted; was"), "{text}");
}

#[test]
fn too_little_data_is_a_clear_error() {
    let log = scratch().join("two-rows.log");
    std::fs::write(
        &log,
        "# Collective test starting: all_reduce_perf\n\
         1048576 262144 float sum -1 50.0 20.97 36.70 0 50.0 20.97 36.70 0\n\
         2097152 524288 float sum -1 60.0 34.95 61.17 0 60.0 34.95 61.17 0\n",
    )
    .unwrap();
    fails_with(
        &[
            "calibrate",
            "--from-log",
            log.to_str().unwrap(),
            "--topology",
            "dgx-h100",
            "--nodes",
            "1",
        ],
        &["cannot fit: 2 usable size(s)"],
    );
}

#[test]
fn calibrate_run_refuses_without_a_gpu() {
    if std::path::Path::new("/proc/driver/nvidia/version").exists() {
        eprintln!("SKIPPED calibrate_run_refuses_without_a_gpu: this machine has an NVIDIA driver");
        return;
    }
    fails_with(&["calibrate", "--run"], &["no NVIDIA GPU on this machine"]);
}

#[test]
fn shipped_profiles_regenerate_from_their_logs() {
    // calibration/profiles/aws-p5.toml and dgx-h100.toml are calibrate's output on the logs they
    // name: running it again gives the same bytes.
    let d = "calibration/data";
    let cases: [(&str, Vec<String>); 2] = [
        (
            "calibration/profiles/aws-p5.toml",
            p5(&[
                "calibrate",
                "--from-log",
                &format!("{d}/H100_2N8G_AR_AWSP5_A.log"),
                "--check-log",
                &format!("{d}/H100_2N8G_AR_AWSP5_B.log"),
                &format!("{d}/H100_2N8G_AR_AWSP5_C.log"),
            ]),
        ),
        (
            "calibration/profiles/dgx-h100.toml",
            [
                "calibrate",
                "--from-log",
                &format!("{d}/H100_1N8G_ALL_REDUCE_XXRJUN.log@all_reduce"),
                "--check-log",
                &format!("{d}/H100_1N8G_ALL_REDUCE_XXRJUN.log@all_gather"),
                &format!("{d}/H100_1N8G_ALL_REDUCE_XXRJUN.log@reduce_scatter"),
                "--topology",
                "dgx-h100",
                "--nodes",
                "1",
                "--gpus-per-node",
                "8",
            ]
            .map(String::from)
            .to_vec(),
        ),
    ];
    for (file, args) in cases {
        let out = collsim(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let shipped = std::fs::read_to_string(file).unwrap();
        assert_eq!(String::from_utf8(out.stdout).unwrap(), shipped, "{file}");
    }
    // Every shipped profile loads and corrects a simulation.
    for p in ["aws-p5", "dgx-h100", "dgx-a100", "gcp-a3-mega"] {
        let path = format!("calibration/profiles/{p}.toml");
        let sim = collsim_ok(&[
            "simulate",
            "--topology",
            "dgx-h100",
            "--max-bytes",
            "1MiB",
            "--profile",
            &path,
        ]);
        assert!(sim.contains("±band"), "{p}");
    }
}

#[test]
fn logs_at_another_gpu_count_run_on_their_own_layout_and_are_held_out() {
    // The 4-GPU XXRJUN run lists 4 ranks on one host: calibrate simulates it on 4 GPUs (not the
    // flags' 8) and, without --check-log, holds it out as a different GPU count.
    let d = "calibration/data";
    let out = collsim(&[
        "calibrate",
        "--from-log",
        &format!("{d}/H100_1N8G_ALL_REDUCE_XXRJUN.log@all_reduce"),
        &format!("{d}/H100_1N4G_ALL_REDUCE_XXRJUN.log@all_reduce"),
        "--topology",
        "dgx-h100",
        "--nodes",
        "1",
        "--gpus-per-node",
        "8",
    ]);
    let report = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{report}");
    let line = report.lines().find(|l| l.contains("1N4G") && l.contains(" check ")).unwrap();
    let cols: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(&cols[1..3], &["check", "4"], "{line}");
    // Uncalibrated, on 4 GPUs, the model is within 2.9 % (median) of that run.
    assert_eq!(cols[4], "2.9", "{line}");
}

#[test]
fn validate_takes_the_layout_the_log_lists_unless_the_flags_say_otherwise() {
    // 80 ranks on 10 hosts: without --nodes/--gpus-per-node the log's layout is used, the same
    // as giving it; flags that disagree win, with a warning.
    let log = "calibration/data/H100_10N8G_ALL_REDUCE_XXRJUN.log";
    let inferred = collsim(&["validate", "--log", log, "--topology", "dgx-h100"]);
    assert!(inferred.status.success());
    assert!(
        String::from_utf8_lossy(&inferred.stderr)
            .contains("80 ranks on 10 host(s): 10 nodes x 8 GPUs")
    );
    let given = collsim_ok(&[
        "validate",
        "--log",
        log,
        "--topology",
        "dgx-h100",
        "--nodes",
        "10",
        "--gpus-per-node",
        "8",
    ]);
    assert_eq!(String::from_utf8_lossy(&inferred.stdout), given);
    let out = collsim(&["validate", "--log", log, "--topology", "dgx-h100", "--nodes", "1"]);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("warning") && err.contains("lists 80 ranks on 10 host(s)"), "{err}");
    assert_ne!(String::from_utf8_lossy(&out.stdout), given);
    // Without --topology: the preset for the GPU the log names, said on stderr.
    let bare = collsim(&["validate", "--log", log]);
    assert!(bare.status.success());
    let err = String::from_utf8_lossy(&bare.stderr);
    assert!(err.contains("topology dgx-h100, the preset for its NVIDIA H100 80GB HBM3"), "{err}");
    assert_eq!(String::from_utf8_lossy(&bare.stdout), given);
}

#[test]
fn validate_takes_the_process_layout_gpu_and_nccl_environment_the_log_gives() {
    // The p5 run's NCCL INFO lines name three variables the model uses: the same rows as giving
    // them, and they are listed.
    let log = "calibration/data/H100_2N8G_AR_AWSP5_B.log";
    let base = ["validate", "--log", log, "--topology", "aws-p5", "--format", "json"];
    let bare = collsim(&base);
    assert!(bare.status.success());
    let err = String::from_utf8_lossy(&bare.stderr);
    assert!(
        err.contains("the log's NCCL environment: NCCL_BUFFSIZE=8388608 NCCL_NVLS_CHUNKSIZE=524288 NCCL_NVLSTREE_MAX_CHUNKSIZE=524288"),
        "{err}"
    );
    let given = collsim_ok(&[&base[..], &super::P5_ENV[..]].concat());
    let rows = |t: &[u8]| serde_json::from_slice::<serde_json::Value>(t).unwrap()["rows"].clone();
    assert_eq!(rows(&bare.stdout), rows(given.as_bytes()));
    // A flag that disagrees wins, with a warning.
    let other = collsim(&[&base[..], &["--nccl", "NCCL_BUFFSIZE=4194304"]].concat());
    let err = String::from_utf8_lossy(&other.stderr);
    assert!(err.contains("warning") && err.contains("ran with NCCL_BUFFSIZE=8388608"), "{err}");
    // One process driving 8 GPUs (nGpus 8): each call costs 7 more kernel launches than with
    // one process per GPU, as --gpus-per-process 1 asks (with a warning).
    let together = "calibration/data/H100_1N8G_AR_RING_TOGETHER.log";
    let ring = ["--nccl", "NCCL_ALGO=Ring", "--format", "json"];
    let time = |extra: &[&str]| {
        let out = collsim(
            &[&["validate", "--log", together, "--topology", "dgx-h100"][..], &ring, extra]
                .concat(),
        );
        assert!(out.status.success());
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (
            v["rows"][0]["predicted_time_us"].as_f64().unwrap(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (g8, err8) = time(&[]);
    let (g1, err1) = time(&["--gpus-per-process", "1"]);
    assert!(err8.contains("8 GPUs per process (nccl-tests -g 8"), "{err8}");
    assert!(err1.contains("warning") && err1.contains("ran 8 GPU(s) per process"), "{err1}");
    assert!((g8 - g1 - 7.0 * 3.12).abs() < 0.01, "{g8} {g1}");
    // An A100-SXM4-40GB log on the dgx-a100 preset runs on the 40 GB part.
    let polaris = collsim(&[
        "validate",
        "--log",
        "calibration/data/A100SXM40_2N4G_ALL_REDUCE_POLARIS.log",
        "--topology",
        "dgx-a100",
    ]);
    let err = String::from_utf8_lossy(&polaris.stderr);
    assert!(err.contains("A100-SXM4-40GB in place of the dgx-a100's A100-SXM4-80GB"), "{err}");
}

#[test]
fn bands_fitted_on_one_mechanism_leave_another_alone() {
    // A3 Mega: NCCL runs the all_reduce with NVLSTree at 16-256 MiB, where the model is 2.3x
    // fast, and the all_gather with the ring, where it is not. Bands by size alone carried that
    // factor to the all_gather (held-out p95 58 -> 230 %); per mechanism, the all_gather's
    // sizes keep the fitted parameters' prediction.
    let profile = scratch().join("a3m-fit.toml");
    let profile = profile.to_str().unwrap();
    let report = collsim_ok(&[
        "calibrate",
        "--from-log",
        "calibration/data/H100_2N8G_AR_GCPA3MEGA_ZTAN.log@all_reduce",
        "--check-log",
        "calibration/data/H100_2N8G_AG_GCPA3MEGA_DSTACK.log@all_gather",
        "--topology",
        "gcp-a3-megagpu-8g",
        "--nodes",
        "2",
        "--gpus-per-node",
        "8",
        "-o",
        profile,
    ]);
    let text = std::fs::read_to_string(profile).unwrap();
    assert!(text.contains("[[correction.mechanism]]\nname = \"NVLS_TREE/SIMPLE\""), "{text}");
    assert!(!text.contains("name = \"RING/"), "the all_reduce ran no ring sizes: {text}");
    // The held-out all_gather: parameters alone and calibrated agree exactly.
    let line = report.lines().find(|l| l.contains("AG_GCPA3MEGA_DSTACK")).unwrap();
    let cols: Vec<&str> = line.split_whitespace().collect();
    let n = cols.len();
    assert_eq!(cols[n - 6..n - 3], cols[n - 3..], "{line}");
    let p95: f64 = cols[n - 1].parse().unwrap();
    assert!(p95 < 60.0, "{line}");
    // The fit log's own NVLSTree sizes do take the factor.
    let fit = report.lines().find(|l| l.contains("AR_GCPA3MEGA_ZTAN")).unwrap();
    let c: Vec<f64> = fit.split_whitespace().filter_map(|w| w.parse().ok()).collect::<Vec<f64>>();
    let k = c.len();
    assert!(c[k - 1] < c[k - 3] - 10.0, "p95 after bands vs parameters alone: {fit}");
}

#[test]
fn nccl_layout_output_reads_back_as_the_setup_that_made_it() {
    // `--format nccl` prints what nccl-tests prints (version line, nGpus, one Pid a process,
    // bus ids, CUDA's GPU name), so validate with no layout flags finds the topology, the
    // nodes, the process layout and the NCCL release, and predicts its own numbers.
    let dir = super::scratch().join(format!("collsim-ncclfmt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("two-nodes.log");
    let l = log.to_str().unwrap();
    super::collsim_ok(&[
        "simulate",
        "--topology",
        "dgx-h100",
        "--nodes",
        "2",
        "--min-bytes",
        "1K",
        "--max-bytes",
        "1G",
        "--factor",
        "8",
        "--nccl-version",
        "2.26",
        "--format",
        "nccl",
        "-o",
        l,
    ]);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.starts_with("# nccl-tests version 2.19.6 nccl-headers=22602 nccl-library=22602\n")
    );
    assert!(text.contains("Pid  10015 on      node1 device  7 [0000:08:00] NVIDIA H100 80GB HBM3"));
    let avg = text.lines().find(|l| l.starts_with("# Avg bus bandwidth")).unwrap();
    assert!(!avg.contains("000 "), "printed as %g: {avg}");
    let out = super::collsim(&["validate", "--log", l, "--format", "json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("topology dgx-h100"), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // Within the log's two-decimal rounding.
    let median = v["median_abs_error_pct"].as_f64().unwrap();
    assert!(median < 0.05 && v["p95_abs_error_pct"].as_f64().unwrap() < 0.1, "{median}");
    // One process driving all eight GPUs of a node: nGpus 8, one Pid, read back as -g 8.
    let log = dir.join("one-process.log");
    let l = log.to_str().unwrap();
    super::collsim_ok(&[
        "simulate",
        "--topology",
        "dgx-a100",
        "--gpus-per-process",
        "8",
        "--max-bytes",
        "1M",
        "--format",
        "nccl",
        "-o",
        l,
    ]);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("# nThread 1 nGpus 8 "), "{text}");
    assert!(text.contains("Pid  10000 on      node0 device  7 [0000:08:00] NVIDIA A100-SXM4-80GB"));
    let out = super::collsim(&["validate", "--log", l]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("8 GPUs per process (nccl-tests -g 8"));
}

/// Issue #45: `LOG@collective` names one test of a log wherever a log is named: the first log
/// of `calibrate` (whose GPU and layout give the topology) and `validate --log`.
#[test]
fn log_at_collective_works_wherever_a_log_is_named() {
    let log = "calibration/data/H100_1N8G_AR_RING_TOGETHER.log";
    let out = super::scratch().join("log-at.toml");
    let at = format!("{log}@all_reduce");
    super::collsim_ok(&["calibrate", "--from-log", &at, "-o", out.to_str().unwrap()]);
    let plain = super::collsim_ok(&["validate", "--log", log]);
    assert_eq!(super::collsim_ok(&["validate", "--log", &at]), plain);
    super::cli_errors::fails_with(
        &["validate", "--log", &format!("{log}@all_gather")],
        &["no all_gather test in the log"],
    );
}
