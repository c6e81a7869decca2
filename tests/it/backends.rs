//! Process-group backends other than NCCL (issue #50): Gloo against NCCL on the same cluster.

use collsim::collective::Collective;
use collsim::collective::gloo::{self, GlooAlgo, GlooNet};
use collsim::config::resolve_topology;
use collsim::hw::Cluster;

use super::collsim_ok;

/// NCCL's time for one size on `topology`, µs, as `simulate` prints it.
fn nccl_us(topology: &str, nodes: &str, bytes: &str) -> f64 {
    let out = collsim_ok(&[
        "simulate",
        "--topology",
        topology,
        "--nodes",
        nodes,
        "--min-bytes",
        bytes,
        "--max-bytes",
        bytes,
        "--format",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["rows"][0]["time_us"].as_f64().unwrap()
}

#[test]
fn a_gloo_all_reduce_of_100_mib_on_one_dgx_h100_is_at_least_ten_times_nccls() {
    let (_, spec) = resolve_topology("dgx-h100", None).unwrap();
    let cluster = Cluster::new(&spec, 1, 8);
    let net = GlooNet::of(&cluster, 8);
    let t = gloo::time(&net, Collective::AllReduce, 100 << 20, 8, 1, GlooAlgo::Ring);
    let nccl = nccl_us("dgx-h100", "1", "100MiB");
    let gloo_us = t.total * 1e6;
    println!(
        "100 MiB all-reduce on one DGX-H100: NCCL {nccl:.0} us, Gloo {gloo_us:.0} us ({:.0}x; copies {:.0} + {:.0} us, host {:.0} us)",
        gloo_us / nccl,
        t.d2h * 1e6,
        t.h2d * 1e6,
        t.host * 1e6
    );
    assert!(gloo_us >= 10.0 * nccl, "Gloo {gloo_us} us against NCCL {nccl} us");
    // Each GPU copies over its own PCIe Gen5 link here, all at once: tens of GB/s, not NVLink's.
    assert!(net.pcie > 20e9 && net.pcie < 64e9, "{net:?}");
}

#[test]
fn gloos_tcp_figures_are_the_tcp_transports() {
    let lib = collsim::config::transport_library().unwrap();
    let tcp = lib.iter().find(|t| t.name == "tcp").unwrap();
    assert_eq!(tcp.per_stream.unwrap().bytes_per_sec(), gloo::STREAM_RATE);
    assert_eq!(tcp.message_overhead.as_secs_f64(), gloo::MESSAGE_OVERHEAD);
}

/// Each point's (iteration ms, comm ms, exposed ms) from a `--sweep` as JSON.
fn points(args: &[&str]) -> Vec<(f64, f64, f64)> {
    let mut all = vec!["simulate", "--format", "json"];
    all.extend_from_slice(args);
    let v: serde_json::Value = serde_json::from_str(&collsim_ok(&all)).unwrap();
    v["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let r = &p["result"];
            let f = |k: &str| r[k].as_f64().unwrap();
            (f("iteration_time_ms"), f("comm_ms"), f("exposed_comm_ms"))
        })
        .collect()
}

#[test]
fn a_ddp_step_on_gloo_exposes_more_and_the_gap_narrows_as_the_nic_gets_faster() {
    // ResNet-50 on 4 DGX-A100s, NCCL then Gloo, each at a 10 and a 200 Gb/s NIC.
    let p = points(&[
        "scenarios/resnet50-dgx-a100-4node.toml",
        "--sweep",
        "workload.backend=nccl,gloo",
        "--sweep",
        "topology.nic.speed=10 Gb/s,200 Gb/s",
    ]);
    let [nccl_slow, nccl_fast, gloo_slow, gloo_fast] = [p[0], p[1], p[2], p[3]];
    println!("nccl 10/200 Gb/s {nccl_slow:?} {nccl_fast:?}; gloo {gloo_slow:?} {gloo_fast:?}");
    for (n, g) in [(nccl_slow, gloo_slow), (nccl_fast, gloo_fast)] {
        assert!(g.2 > n.2 && g.1 > n.1, "Gloo exposes more: {g:?} against {n:?}");
    }
    // The step's gap: a slow NIC holds both back, but Gloo's one TCP stream and host copies
    // much more; a fast NIC leaves Gloo's fixed costs, mostly hidden behind the backward.
    let gap = |n: (f64, f64, f64), g: (f64, f64, f64)| g.0 / n.0;
    assert!(
        gap(nccl_fast, gloo_fast) < gap(nccl_slow, gloo_slow),
        "step gap {} at 200 Gb/s against {} at 10",
        gap(nccl_fast, gloo_fast),
        gap(nccl_slow, gloo_slow)
    );
}

#[test]
fn a_collective_sweep_on_gloo_times_each_size_as_a_gloo_step_does() {
    let dir = super::scratch().join(format!("collsim-gloo-sweep-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("gloo.toml");
    let text = "[cluster]\ntopology = \"dgx-h100\"\nnodes = 2\n\n[workload]\ncollective = \"all_reduce\"\nmin_bytes = \"1 MiB\"\nmax_bytes = \"100 MiB\"\nfactor = 10\nbackend = \"gloo\"\n";
    std::fs::write(&path, text).unwrap();
    let p = path.to_string_lossy();
    let out = collsim_ok(&["simulate", &p, "--format", "json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    let (_, spec) = resolve_topology("dgx-h100", None).unwrap();
    let net = GlooNet::of(&Cluster::new(&spec, 2, 8), 8);
    for r in rows {
        let bytes = r["size_bytes"].as_u64().unwrap();
        let t = gloo::time(&net, Collective::AllReduce, bytes, 16, 2, GlooAlgo::Ring);
        assert_eq!(r["algo"], "GLOO");
        assert!((r["time_us"].as_f64().unwrap() - t.total * 1e6).abs() < 1e-6, "{r}");
    }
    // The same sizes on NCCL, beside it in one sweep: at least ten times faster from 10 MiB.
    let swept = collsim_ok(&["simulate", &p, "--sweep", "workload.backend=nccl,gloo"]);
    println!("{swept}");
    let time = |backend: &str, size: &str| -> f64 {
        let line = swept
            .lines()
            .find(|l| l.split_whitespace().take(3).collect::<Vec<_>>() == [backend, size, "MiB"])
            .unwrap_or_else(|| panic!("no {backend} {size} MiB row in\n{swept}"));
        line.split_whitespace().nth(3).unwrap().parse().unwrap()
    };
    assert!(time("gloo", "100") >= 10.0 * time("nccl", "100"));
    // Gloo's streams beside other traffic are not modelled: refused, not silently ignored.
    let busy = dir.join("busy.toml");
    std::fs::write(
        &busy,
        format!("{text}\n[[background]]\npattern = \"all_to_all\"\nload = 0.5\n"),
    )
    .unwrap();
    super::cli_errors::fails_with(
        &["simulate", &busy.to_string_lossy()],
        &["gloo", "[[background]]"],
    );
}

#[test]
fn a_barrier_is_one_float_all_reduced_whatever_the_sizes_say() {
    let barrier = collsim_ok(&[
        "simulate",
        "scenarios/quickstart.toml",
        "--collective",
        "barrier",
        "--format",
        "json",
    ]);
    let one = collsim_ok(&[
        "simulate",
        "scenarios/quickstart.toml",
        "--min-bytes",
        "4",
        "--max-bytes",
        "4",
        "--format",
        "json",
    ]);
    let rows = |text: &str| {
        let v: serde_json::Value = serde_json::from_str(text).unwrap();
        v["rows"].clone()
    };
    assert_eq!(rows(&barrier), rows(&one));
    assert_eq!(rows(&barrier).as_array().unwrap().len(), 1);
    let text = collsim_ok(&["simulate", "scenarios/quickstart.toml", "--collective", "barrier"]);
    assert!(text.starts_with("barrier (an all_reduce of one float"), "{text}");
    // A scenario's own barrier, with sizes given that it does not use.
    let dir = super::scratch().join(format!("collsim-barrier-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("barrier.toml");
    let quick = std::fs::read_to_string("scenarios/quickstart.toml").unwrap();
    std::fs::write(&p, quick.replace("\"all_reduce\"", "\"barrier\"")).unwrap();
    let own = collsim_ok(&["simulate", &p.to_string_lossy(), "--format", "json"]);
    assert_eq!(rows(&own), rows(&one));
    // And back: --collective all_reduce on it sweeps again, from the barrier's 4 B.
    let swept = collsim_ok(&[
        "simulate",
        &p.to_string_lossy(),
        "--collective",
        "all_reduce",
        "--max-bytes",
        "64",
        "--format",
        "json",
    ]);
    assert_eq!(rows(&swept).as_array().unwrap().len(), 5);
}
