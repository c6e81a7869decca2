//! Blackwell presets (issue #14 item 7): the B200 and GB200 GPU models, `dgx-b200` and the
//! GB200 NVL72 rack `gb200-nvl72`.

use collsim::config::{gpu_library, resolve_topology};
use collsim::hw::Arch;

fn busbw_1gib(topology: &str, nodes: &str) -> (f64, String, u64) {
    let out = super::collsim_ok(&[
        "simulate",
        "--topology",
        topology,
        "--nodes",
        nodes,
        "--min-bytes",
        "1G",
        "--max-bytes",
        "1G",
        "--format",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let row = &v["rows"][0];
    (
        row["busbw_gbyte_per_s"].as_f64().unwrap(),
        row["algo"].as_str().unwrap().to_string(),
        v["communicator"]["nranks"].as_u64().unwrap(),
    )
}

#[test]
fn the_blackwell_presets_load_with_nvlink5() {
    for (preset, gpus, model, switches) in
        [("dgx-b200", 8, "B200-SXM-180GB", 2), ("gb200-nvl72", 72, "GB200-186GB", 18)]
    {
        let (_, spec) = resolve_topology(preset, None).unwrap();
        assert_eq!(spec.gpu.count, gpus, "{preset}");
        assert_eq!((spec.gpu.model.name.as_str(), spec.gpu.model.sm), (model, 100), "{preset}");
        assert_eq!(spec.gpu.arch, Arch::Blackwell, "{preset}");
        let nvswitch = spec.nvswitch.as_ref().unwrap();
        assert_eq!((nvswitch.count, nvswitch.generation, nvswitch.nvls), (switches, 4, true));
        // NVLink 5: 18 links of 50 GB/s each way, 900 GB/s per GPU per direction on the
        // datasheets; the model holds NCCL's effective per-link figure (SM100_NVLINK_BW 40.1),
        // as it holds 20.6 of NVLink 4's 25, so a GPU reaches the switch at 18 x 40.1.
        let nv = spec.nvlink.as_ref().unwrap();
        assert_eq!(nv.links_per_gpu, 18);
        assert!((nv.links_per_gpu as f64 * 50.0 - 900.0).abs() < 1e-9);
        let per_gpu = spec.nvswitch_bandwidth().unwrap().gbyte_per_s();
        assert!((per_gpu - 721.8).abs() < 1e-6, "{preset}: {per_gpu}");
        let nic = spec.nic.as_ref().unwrap();
        assert_eq!(
            (nic.count, nic.speed.gbyte_per_s()),
            (gpus, 50.0),
            "{preset}: one 400 Gb/s NIC per GPU"
        );
    }
    let (_, nvl72) = resolve_topology("gb200-nvl72", None).unwrap();
    assert_eq!(nvl72.cpu.sockets, 36, "36 Grace CPUs");
}

#[test]
fn the_gpu_library_has_b200_and_gb200() {
    let lib = gpu_library().unwrap();
    let get = |n: &str| lib.iter().find(|m| m.name == n).unwrap_or_else(|| panic!("{n}"));
    for (name, gb, tflops_bf16) in
        [("B200-SXM-180GB", 180e9, 2250.0), ("GB200-186GB", 186e9, 2500.0)]
    {
        let m = get(name);
        assert_eq!(m.sm, 100);
        assert_eq!(m.memory.get() as f64, gb, "{name}");
        assert_eq!(m.memory_bandwidth.unwrap().gbyte_per_s(), 8000.0, "{name}");
        assert_eq!(m.peak_tflops["bf16"], tflops_bf16, "{name}");
        assert_eq!(m.peak_tflops["fp8"], 2.0 * tflops_bf16, "{name}");
        assert!(m.multiprocessors.is_some() && m.l2_cache.is_some(), "{name}");
        // Blackwell's compute exceeds Hopper's (H100 SXM5 989.4 TFLOP/s BF16 dense).
        assert!(m.peak_tflops["bf16"] > 2.0 * get("H100-SXM5-80GB").peak_tflops["bf16"]);
    }
}

#[test]
fn a_dgx_b200_all_reduce_runs_faster_than_a_dgx_h100() {
    // 1 GiB all_reduce, NCCL's choice (NVLS on one node, NVLSTree on two). H100: 480 GB/s on
    // one node; B200 has twice the NVLink per GPU (NCCL's 721.8 against 370.8 GB/s) and NVLS
    // efficiency 0.74 against 0.85, so well above H100 and below about twice it.
    let (h100, _, _) = busbw_1gib("dgx-h100", "1");
    let (b200, algo, ranks) = busbw_1gib("dgx-b200", "1");
    assert_eq!((algo.as_str(), ranks), ("NVLS", 8));
    assert!(b200 > 1.4 * h100 && b200 < 2.0 * h100, "B200 {b200} GB/s, H100 {h100} GB/s");
    assert!((600.0..1000.0).contains(&b200), "{b200}");
    // Two nodes: the 8 x 400 Gb/s NICs are the same, yet NVLSTree still gains from NVLink 5.
    let (h100, _, _) = busbw_1gib("dgx-h100", "2");
    let (b200, _, ranks) = busbw_1gib("dgx-b200", "2");
    assert_eq!(ranks, 16);
    assert!(b200 > 1.1 * h100 && b200 < 2.0 * h100, "B200 {b200} GB/s, H100 {h100} GB/s");
}

#[test]
fn an_nvl72_rack_runs_72_ranks_in_one_nvlink_domain() {
    let (busbw, algo, ranks) = busbw_1gib("gb200-nvl72", "1");
    assert_eq!(ranks, 72);
    // A ring over the NVSwitch: busbw tends to a GPU's NVLink bandwidth (721.8 GB/s), less
    // the CTA's per-slice sync (the profile's Blackwell figures, assumed as Hopper's).
    assert_eq!(algo, "RING");
    assert!((600.0..722.0).contains(&busbw), "{busbw}");
    let out = super::collsim_ok(&["explain", "--topology", "gb200-nvl72", "--bytes", "1G"]);
    assert!(out.contains("NVLS graph search found no speed: 72 heads"), "{out}");
}
