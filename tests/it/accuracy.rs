//! The model against real nccl-tests runs (calibration/data, provenance in its manifest).
//!
//! The default profile was fitted on H100_1N8G_AR_RING_TOGETHER only; A100SXM80_1N8G_AR_THANOS_G8
//! is held out. Issue #2's targets are |error| ≤ 10 % at every size ≥ 1 MiB and ≤ 25 % below;
//! the bounds asserted here are what the model reaches today (see the notes), so that a
//! change that makes it worse fails.

use super::collsim_ok;

fn validate(log: &str, topo: &str, extra: &[&str]) -> serde_json::Value {
    let log = format!("calibration/data/{log}.log");
    let mut args = vec![
        "validate",
        "--log",
        &log,
        "--topology",
        topo,
        "--nodes",
        "1",
        "--gpus-per-node",
        "8",
        "--format",
        "json",
    ];
    args.extend_from_slice(extra);
    serde_json::from_str(&collsim_ok(&args)).unwrap()
}

fn worst(v: &serde_json::Value, big: bool) -> f64 {
    v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| (r["size_bytes"].as_u64().unwrap() >= 1 << 20) == big)
        .map(|r| r["error_pct"].as_f64().unwrap().abs())
        .fold(0.0, f64::max)
}

#[test]
fn h100_ring_together_fit_curve() {
    let v = validate(
        "H100_1N8G_AR_RING_TOGETHER",
        "dgx-h100",
        &["--nccl", "NCCL_ALGO=Ring", "--nccl", "NCCL_NVLS_ENABLE=0"],
    );
    assert_eq!(v["rows"].as_array().unwrap().len(), 31);
    assert!(worst(&v, false) <= 25.0, "below 1 MiB: {}", worst(&v, false));
    assert!(worst(&v, true) <= 12.0, "from 1 MiB: {}", worst(&v, true));
    assert!(v["median_abs_error_pct"].as_f64().unwrap() <= 4.0);
}

#[test]
fn a100_thanos_held_out_curve() {
    let v = validate("A100SXM80_1N8G_AR_THANOS_G8", "dgx-a100", &[]);
    assert_eq!(v["rows"].as_array().unwrap().len(), 30);
    assert!(worst(&v, false) <= 25.0, "below 1 MiB: {}", worst(&v, false));
    // Mid sizes (4 MiB – 512 MiB) run 15–42 % slower on this machine than the model predicts.
    assert!(worst(&v, true) <= 45.0, "from 1 MiB: {}", worst(&v, true));
    assert!(v["median_abs_error_pct"].as_f64().unwrap() <= 12.0);
}

fn validate_nodes(log: &str, nodes: &str, g: &str) -> serde_json::Value {
    let log = format!("calibration/data/{log}.log");
    let args = [
        "validate",
        "--log",
        &log,
        "--topology",
        "dgx-h100",
        "--nodes",
        nodes,
        "--gpus-per-node",
        g,
        "--collective",
        "all_reduce",
        "--format",
        "json",
    ];
    serde_json::from_str(&collsim_ok(&args)).unwrap()
}

#[test]
fn h100_held_out_ring_curves() {
    // Four GPUs of one node (NCCL keeps Ring: NVLS gains nothing at 4 GPUs).
    let v = validate_nodes("H100_1N4G_ALL_REDUCE_XXRJUN", "1", "4");
    assert_eq!(v["rows"].as_array().unwrap().len(), 10);
    assert!(worst(&v, true) <= 10.0, "{}", worst(&v, true));
    // Ten nodes, one GPU each: the ring runs through one 400 Gb/s NIC per node.
    let v = validate_nodes("H100_10N1G_ALL_REDUCE_XXRJUN", "10", "1");
    assert_eq!(v["rows"].as_array().unwrap().len(), 10);
    assert!(worst(&v, true) <= 5.0, "{}", worst(&v, true));
}
