//! Megatron-DeepSpeed GPT steps on one 8 x A100 node (calibration/data/training, vTrain's
//! measurements) against the 3-D step model.

use collsim::collective::Mode;
use collsim::workload::Workload;
use collsim::workload::models::{Attention, gpt, gpt_torch_loss, with_attention};

/// Megatron-DeepSpeed's attention in these runs: its CoreAttention without flash attention
/// (`--use-flash-attn` is off by default).
fn attention() -> Attention {
    match std::env::var("MEGATRON_ATTN").as_deref() {
        Ok("flash") => Attention::Flash,
        _ => Attention::Unfused,
    }
}

/// One measured iteration.
#[derive(Debug, Clone)]
pub struct Run {
    pub gpus: usize,
    pub global: u64,
    pub micro: u64,
    pub hidden: u64,
    pub heads: u64,
    pub layers: u64,
    pub seq: u64,
    pub tp: usize,
    pub dp: usize,
    pub pp: usize,
    pub ms: f64,
}

pub fn runs() -> Vec<Run> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/calibration/data/training/megatron_a100_single_node.csv"
    );
    let mut r = csv::Reader::from_path(path).expect("the Megatron set is in the repository");
    r.records()
        .map(|rec| {
            let rec = rec.expect("a row");
            let f = |i: usize| rec[i].trim().parse::<f64>().expect("a number");
            Run {
                gpus: f(0) as usize,
                global: f(1) as u64,
                micro: f(2) as u64,
                hidden: f(3) as u64,
                heads: f(4) as u64,
                layers: f(5) as u64,
                seq: f(6) as u64,
                tp: f(7) as usize,
                dp: f(8) as usize,
                pp: f(9) as usize,
                ms: f(10),
            }
        })
        .collect()
}

/// What the Megatron fit sets: the GEMMs' fraction of the fp16 peak (`efficiency`), the host
/// time per kernel (`launch_us`) and the GPU time each GEMM takes beyond its FLOPs
/// (`gemm_fixed_us`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fit {
    pub eff: f64,
    pub launch_us: f64,
    pub gemm_us: f64,
}

/// The simulated iteration of `run` with `fit`: the run's GPT written down in the scenario
/// (`[workload.model]`, Megatron's implementation: its vocabulary padded to 128 x tp).
pub fn simulate_with(run: &Run, fit: Fit, recompute: &str) -> f64 {
    step_of(run, fit, recompute).iteration_time_ms
}

/// The scenario of `run` with `fit`, as a user would write it.
pub fn scenario_of(run: &Run, fit: Fit, recompute: &str) -> String {
    let Fit { eff, launch_us, gemm_us } = fit;
    let m = run.global / (run.micro * run.dp as u64);
    let attention = match attention() {
        Attention::Flash => "flash",
        Attention::Unfused => "unfused",
    };
    format!(
        r#"
[cluster]
topology = "dgx-a100"
nodes = 1
gpus_per_node = {gpus}
[workload]
kind = "ddp"
sequence = {seq}
micro_batch = {micro}
grad_accumulation = {m}
grad_dtype = "half"
precision = "fp16"
efficiency = {eff}
launch_us = {launch_us}
gemm_fixed_us = {gemm_us}
optimizer = "adam"
[workload.model]
family = "gpt"
implementation = "megatron"
layers = {layers}
hidden = {hidden}
heads = {heads}
attention = "{attention}"
[workload.parallel]
tp = {tp}
pp = {pp}
recompute = "{recompute}"
overlap_grad_reduce = false
"#,
        gpus = run.gpus,
        seq = run.seq,
        micro = run.micro,
        layers = run.layers,
        hidden = run.hidden,
        heads = run.heads,
        tp = run.tp,
        pp = run.pp,
    )
}

/// As [`simulate_with`], the whole simulated step.
pub fn step_of(run: &Run, fit: Fit, recompute: &str) -> collsim::workload::ddp::StepResult {
    let toml = scenario_of(run, fit, recompute);
    let mut s = collsim::config::parse_scenario("megatron.toml", &toml).expect("parses");
    if let Some(tb) = std::env::var("MEGATRON_MEMBW").ok().and_then(|v| v.parse::<f64>().ok()) {
        s.node.gpu.model.memory_bandwidth =
            Some(collsim::units::Bandwidth::from_gbyte_per_s_f64(tb * 1e3));
    }
    let params = collsim::config::parse_profile(
        collsim::config::DEFAULT_PROFILE.0,
        collsim::config::DEFAULT_PROFILE.1,
    )
    .expect("the default profile parses");
    let (r, _) = collsim::simulate_ddp(&s, &params, Mode::Auto).expect("simulates");
    r
}

/// |error| percentiles (median, p95) of `sim` against the runs, %.
fn errors(runs: &[Run], sim: impl Fn(&Run) -> f64 + Sync) -> (f64, f64, f64) {
    use rayon::prelude::*;
    let mut e: Vec<f64> = runs.par_iter().map(|r| (sim(r) / r.ms - 1.0) * 100.0).collect();
    let mut abs: Vec<f64> = e.iter().map(|x| x.abs()).collect();
    abs.sort_by(f64::total_cmp);
    e.sort_by(f64::total_cmp);
    (abs[abs.len() / 2], abs[abs.len() * 95 / 100], e[e.len() / 2])
}

/// What [`megatron_steps_fitted_on_two_depths_predict_the_other_two`] fits: the values the
/// other tests carry to other runs (that test checks the fit still lands here).
const FIT: Fit = Fit { eff: 0.8, launch_us: 52.5, gemm_us: 60.0 };

/// The fits' first grid: GEMM efficiency, host µs per kernel, GPU µs per GEMM.
const COARSE: [&[f64]; 3] = [&[0.6, 0.7, 0.8, 0.9], &[45.0, 55.0, 65.0], &[0.0, 30.0, 60.0, 90.0]];

/// The fits' second grid: three points this far apart around the first's best.
const FINE: [f64; 3] = [0.05, 2.5, 15.0];

/// Three points `step` apart around `x`.
fn around(x: f64, step: f64) -> [f64; 3] {
    [x - step, x, x + step]
}

/// [`FIT`], with `MEGATRON_EFF`, `MEGATRON_LAUNCH` and `MEGATRON_GEMM` (µs) in its place where
/// set: for the studies below.
fn env_fit() -> Fit {
    let var = |k: &str, d: f64| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
    Fit {
        eff: var("MEGATRON_EFF", FIT.eff),
        launch_us: var("MEGATRON_LAUNCH", FIT.launch_us),
        gemm_us: var("MEGATRON_GEMM", FIT.gemm_us),
    }
}

/// Root-mean-square relative error of `sim` against the runs, %.
fn rms_error(runs: &[Run], sim: impl Fn(&Run) -> f64 + Sync) -> f64 {
    use rayon::prelude::*;
    // Summed in order: a parallel sum's order, and its last bits, vary with the threads.
    let e: Vec<f64> = runs.par_iter().map(|r| (sim(r) / r.ms - 1.0).powi(2)).collect();
    (e.iter().sum::<f64>() / e.len() as f64).sqrt() * 100.0
}

/// The point of the grid (efficiencies, µs per kernel, µs per GEMM) with the least squares
/// (relative error) on `fit`. (Not the median: most runs are bound by the host, so the median
/// hardly moves with the GEMMs' efficiency, and its flat, bumpy minimum chose 0.45 once
/// Megatron's loss was counted, leaving the GEMM-bound runs 50 % slow. The mean |error| lands
/// on 0.85, 55 µs and 75 µs a GEMM: held-out median 4.9 %, p95 23.9 % (before the default
/// per-rank spread; not refitted since), its few large errors
/// weighing less than least squares weighs them.)
fn search(fit: &[Run], grid: [&[f64]; 3]) -> Fit {
    let mut best = (f64::MAX, FIT);
    for &gemm_us in grid[2] {
        for &launch_us in grid[1] {
            for &eff in grid[0] {
                let point = Fit { eff, launch_us, gemm_us };
                let rms = rms_error(fit, |r| simulate_with(r, point, "full"));
                if rms < best.0 {
                    best = (rms, point);
                }
            }
        }
    }
    best.1
}

/// [`search`] on the coarse grid, then on the fine one around its best point.
fn fit_on(runs: &[Run]) -> Fit {
    let c = search(runs, COARSE);
    let fine = [around(c.eff, FINE[0]), around(c.launch_us, FINE[1]), around(c.gemm_us, FINE[2])];
    search(runs, [&fine[0], &fine[1], &fine[2]])
}

/// The fast tier's guard on the Megatron set: the held-out error (the 20- and 24-layer
/// models) at the fit [`megatron_steps_fitted_on_two_depths_predict_the_other_two`] lands on,
/// without the grid search (which the long tier runs).
#[test]
fn megatron_held_out_error_at_the_pinned_fit() {
    let held: Vec<Run> = runs().into_iter().filter(|r| r.layers > 16).collect();
    assert_eq!(held.len(), 720);
    let (median, p95, signed) = errors(&held, |r| simulate_with(r, FIT, "full"));
    println!(
        "Megatron at {FIT:?}: held-out median |error| {median:.1} %, p95 {p95:.1} %, signed median {signed:+.1} %"
    );
    // Issue #16's 6 % and 20 %; the model gives 5.1 % and 18.7 %.
    assert!(median < 6.0 && p95 < 20.0, "median {median:.1} %, p95 {p95:.1} %");
}

#[ignore = "long: a grid search of three parameters over 160 Megatron runs, about 90 s on two cores"]
#[test]
fn megatron_steps_fitted_on_two_depths_predict_the_other_two() {
    // Three free parameters, fitted on the 12- and 16-layer models (every third row, least
    // squares), the error reported on the 20- and 24-layer ones (720 runs not fitted): the
    // GEMMs' fraction of the A100's fp16 peak, the host time per kernel (Megatron-DeepSpeed
    // runs eager PyTorch with activation checkpointing: below a few samples per micro-batch the
    // step is bound by the CPU issuing kernels, which the measurements show as a floor of about
    // 3 ms per layer and micro-batch), and the GPU time each GEMM takes beyond its FLOPs. That
    // last is what the GPU-bound runs ask for: the 2,048-wide layer at tp 1 and 8 samples
    // costs 17.0 ms measured, its GEMMs at the full 312 TFLOP/s and its memory traffic 15.9,
    // so the GEMMs run near the peak there, while the 1,024-wide layer's (8.2 measured, 6.8
    // at the peak) run at 0.69 of it. Without it (two parameters) the fit gave 0.65 and 55 µs,
    // held-out median 6.3 %, p95 21.0 % (least squares: 0.6 and 55 µs, 7.4 % and 24.2 %;
    // both before the default per-rank spread, not refitted since);
    // with it the same 16 H200 steps that check the fit below (another GPU and framework, none
    // fitted) went from a median 10.9 % (largest 27.2 %) to 8.7 % (22.2 %). It is an
    // effective term: on the H200 traces the GEMM kernels themselves take their FLOPs at 0.83
    // of the peak plus 10 µs; the rest stands for per-layer work the model under-counts (the
    // 2,048-wide GPT's memory-bound kernels take 45.7 ms in run 2's trace, the model 15.3).
    // The earlier fits below had two parameters (mean |error|). Attention is Megatron's
    // unfused CoreAttention, whose scores' memory
    // traffic does not grow with the hidden size: without it the fit lowered the GEMMs'
    // efficiency to 0.6 to make up for the 1,024-wide models, and the 2,048-wide ones came
    // out slow (held-out median 8.4 %, p95 32.3 %). At tp 8 with one sample a micro-batch the
    // scores miss Megatron's fused softmax (2 matrices, not a multiple of 4): without PyTorch's
    // ops in its place those runs came out 20-29 % fast (p95 25.3 %). The loss is Megatron's
    // own, 52 bytes a logit where PyTorch's cross entropy moves 40: with PyTorch's the fit
    // gave held-out median 8.2 %, p95 24.7 %. The optimizer is Apex's fused
    // Adam, as Megatron runs it (the default under [workload.parallel]): with PyTorch's
    // foreach Adam (88 bytes a parameter, not 40) the per-iteration cost, read off the
    // measurements as the intercept of step time against micro-batches, came out 1.6 to 3.3
    // times the measured one without pipeline stages (fused: 0.89 to 1.23), and the fit gave
    // 0.70 and 55 µs, 6.5 % and 21.9 %.
    let runs = runs();
    assert_eq!(runs.len(), 1440);
    let (fit, held): (Vec<Run>, Vec<Run>) = runs.into_iter().partition(|r| r.layers <= 16);
    let fit: Vec<Run> = fit.into_iter().step_by(3).collect();
    let got = fit_on(&fit);
    let (median, p95, signed) = errors(&held, |r| simulate_with(r, got, "full"));
    println!(
        "Megatron, fitted {got:?}: held-out median |error| {median:.1} %, p95 {p95:.1} %, signed median {signed:+.1} %"
    );
    // Issue #16 asks for 6 % and 20 %. Since every multi-GPU step waits for its slowest rank
    // under the default per-rank spread (1.43 %, issue #48), the fit lands on 0.85, 52.5 µs a
    // kernel and 60 µs a GEMM: held-out median 4.8 %, p95 17.2 % (at the pinned 0.8: 5.1 % and
    // 18.7 %); before, on 0.8 (5.4 % and 17.5 %). The default stays at 0.8, one step of the
    // fine grid below, because the other sources it meets do worse at 0.85: torchtitan's five
    // FSDP steps on 64 A100s come out median 9.0 % fast against 3.9 %, and the 16 H200 GPT
    // steps below median 10.4 % (largest 23.2 %) against 8.7 % (22.2 %). Those two sources
    // so chose between two fits vTrain's least squares hardly tells apart.
    assert!(median < 6.0 && p95 < 20.0, "median {median:.1} %, p95 {p95:.1} %");
    let same = |a: f64, b: f64| (a - b).abs() < 1e-9;
    assert!(
        (got.eff - FIT.eff).abs() <= FINE[0] + 1e-9
            && same(got.launch_us, FIT.launch_us)
            && same(got.gemm_us, FIT.gemm_us),
        "the other tests carry {FIT:?}, more than a step of the fine grid from {got:?}"
    );
}

/// The least-squares line's intercept through `points` (x, y).
fn intercept(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxy: f64 = points.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    let sxx: f64 = points.iter().map(|(x, _)| (x - mx).powi(2)).sum();
    my - sxy / sxx * mx
}

#[test]
fn the_per_iteration_cost_is_a_fused_optimizers() {
    // Megatron runs a step's micro-batches back to back, then its gradient all-reduce and the
    // optimizer once: step time against micro-batches is a line whose intercept is that
    // per-iteration cost. Read off the 24-layer models without pipeline stages (one hidden
    // size, tp and micro-batch at two to four numbers of micro-batches, data-parallel degrees
    // averaged), it is what Apex's fused Adam gives (40 bytes a parameter with the fp32
    // masters): 0.90 to 1.23 times the measured one. PyTorch's foreach Adam (88 bytes) gave
    // 1.6 to 3.3 times.
    use rayon::prelude::*;
    use std::collections::BTreeMap;
    let runs: Vec<Run> = runs().into_iter().filter(|r| r.pp == 1 && r.layers == 24).collect();
    let sims: Vec<f64> = runs.par_iter().map(|r| simulate_with(r, FIT, "full")).collect();
    // (hidden, tp, micro-batch) -> micro-batches -> (measured ms, simulated ms, runs), summed.
    type Cells = BTreeMap<(u64, usize, u64), BTreeMap<u64, (f64, f64, f64)>>;
    let mut cells = Cells::new();
    for (r, sim) in runs.iter().zip(&sims) {
        let m = r.global / (r.micro * r.dp as u64);
        let e = cells.entry((r.hidden, r.tp, r.micro)).or_default().entry(m).or_default();
        *e = (e.0 + r.ms, e.1 + sim, e.2 + 1.0);
    }
    let mut checked = 0;
    for (cell, by_m) in cells.iter().filter(|(_, by_m)| by_m.len() >= 2) {
        let line = |f: fn(&(f64, f64, f64)) -> f64| {
            let points: Vec<(f64, f64)> =
                by_m.iter().map(|(&m, sums)| (m as f64, f(sums) / sums.2)).collect();
            intercept(&points)
        };
        let (measured, simulated) = (line(|s| s.0), line(|s| s.1));
        let ratio = simulated / measured;
        assert!(
            measured > 0.0 && (0.85..1.3).contains(&ratio),
            "(hidden, tp, micro-batch) {cell:?}: {simulated:.1} ms simulated, {measured:.1} measured"
        );
        checked += 1;
    }
    assert!(checked >= 24, "{checked} cells");
}

#[test]
fn the_3d_scenario_runs_with_every_output() {
    use crate::collsim_ok;
    let f = "scenarios/llama70b-3d-dgx-h100-64node.toml";
    let table = collsim_ok(&["simulate", f]);
    assert!(
        table.contains("3-D parallel (Megatron) step") && table.contains("tp 8 x pp 8 x dp 8"),
        "{table}"
    );
    assert!(table.contains("<- slowest"), "{table}");
    let json: serde_json::Value =
        serde_json::from_str(&collsim_ok(&["simulate", f, "--format", "json"])).unwrap();
    let p = &json["parallel"];
    assert_eq!(p["dp"], 8, "{json}");
    assert_eq!(p["stages"].as_array().map(Vec::len), Some(8));
    let csv = collsim_ok(&[
        "simulate",
        f,
        "--format",
        "csv",
        "--sweep",
        "workload.parallel.virtual_stages=1,2",
    ]);
    assert!(csv.lines().next().unwrap().contains("pipeline_ms"), "{csv}");
    assert_eq!(csv.lines().count(), 3);
    // One chunk per stage: twice the bubble of two.
    let rows: Vec<Vec<&str>> = csv.lines().map(|l| l.split(',').collect()).collect();
    let col = rows[0].iter().position(|c| *c == "pipeline_ms").unwrap();
    let (one, two): (f64, f64) = (rows[1][col].parse().unwrap(), rows[2][col].parse().unwrap());
    assert!(one > 1.5 * two, "{one} vs {two}");
}

#[test]
fn a_megatron_layout_steps_a_fused_optimizer_unless_told_otherwise() {
    use collsim::workload::memory::OptimizerImpl;
    let text = std::fs::read_to_string("scenarios/llama70b-3d-dgx-h100-64node.toml").unwrap();
    let imp = |t: &str| match collsim::config::parse_scenario("x.toml", t).unwrap().workload {
        Workload::Ddp(d) => d.optimizer_impl,
        w => panic!("{w:?}"),
    };
    assert_eq!(imp(&text), OptimizerImpl::Fused);
    let told =
        text.replace("optimizer = \"adam\"", "optimizer = \"adam\"\noptimizer_impl = \"foreach\"");
    assert_eq!(imp(&told), OptimizerImpl::Foreach);
    let plain = &text[..text.find("[workload.parallel]").unwrap()];
    assert_eq!(imp(plain), OptimizerImpl::Foreach);
}

#[test]
fn layouts_that_do_not_fit_the_cluster_are_refused_on_their_line() {
    let text = std::fs::read_to_string("scenarios/llama70b-3d-dgx-h100-64node.toml").unwrap();
    let bad = text.replace("nodes = 64", "nodes = 63");
    let e = collsim::config::parse_scenario("x.toml", &bad).unwrap_err().to_string();
    assert!(
        e.contains("x.toml:") && e.contains("workload.parallel") && e.contains("does not divide"),
        "{e}"
    );
    let bad = text.replace("pp = 8", "pp = 16").replace("nodes = 64", "nodes = 128");
    let e = collsim::config::parse_scenario("x.toml", &bad).unwrap_err().to_string();
    assert!(e.contains("transformer layers"), "{e}");
    let bad = text.replace("recompute = \"none\"", "recompute = \"some\"");
    let e = collsim::config::parse_scenario("x.toml", &bad).unwrap_err().to_string();
    assert!(e.contains("workload.parallel.recompute"), "{e}");
}

#[test]
fn the_expert_parallel_scenario_divides_the_experts() {
    use crate::collsim_ok;
    let f = "scenarios/mixtral-ep-dgx-h100-8node.toml";
    let table = collsim_ok(&["simulate", f]);
    assert!(table.contains("tp 2 x pp 2 x dp 16 (ep 8 of it)"), "{table}");
    let json: serde_json::Value =
        serde_json::from_str(&collsim_ok(&["simulate", f, "--format", "json"])).unwrap();
    // A rank holds its stage's dense weights, split over tp, and one expert in eight.
    let params: u64 = json["parallel"]["stages"][0]["params"].as_u64().unwrap();
    assert!(params < 46_702_792_704 / 2 / 2 / 4, "{params}");
    let mem = json["memory"]["total"].as_f64().unwrap() / (1u64 << 30) as f64;
    assert!(mem < 80.0, "{mem} GiB");
    let bad = std::fs::read_to_string(f).unwrap().replace("ep = 8", "ep = 3");
    let e = collsim::config::parse_scenario("x.toml", &bad).unwrap_err().to_string();
    assert!(e.contains("workload.parallel") && e.contains("ep = 3"), "{e}");
}

/// Every run's measured and simulated step, for study: `MEGATRON_EFF=0.6 MEGATRON_LAUNCH=70
/// MEGATRON_GEMM=0 cargo test --release megatron_dump -- --ignored --nocapture` (unset: the
/// fit's values). Each row: the run's shape, micro-batches, measured and simulated ms, then
/// the step's FLOP-bound, memory-bound, launch wait, tensor-parallel and pipeline ms. `MEGATRON_MEMBW` (TB/s) replaces the A100's memory
/// bandwidth (the set does not say 40 or 80 GB: 1.555 or 2.039).
#[test]
#[ignore]
fn megatron_dump() {
    use rayon::prelude::*;
    let fit = env_fit();
    let runs = runs();
    let sims: Vec<_> = runs.par_iter().map(|r| step_of(r, fit, "full")).collect();
    for (r, s) in runs.iter().zip(sims) {
        let b = &s.breakdown;
        println!(
            "ROW,{},{},{},{},{},{},{},{},{},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3}",
            r.gpus,
            r.global,
            r.micro,
            r.hidden,
            r.layers,
            r.tp,
            r.dp,
            r.pp,
            r.global / (r.micro * r.dp as u64),
            r.ms,
            s.iteration_time_ms,
            b.flop_ms,
            b.memory_ms,
            b.launch_ms,
            b.tp_comm_ms,
            b.pipeline_ms
        );
    }
}

#[test]
fn unfused_attention_costs_time_and_memory_and_refuses_a_fixed_mfu() {
    let text = std::fs::read_to_string("scenarios/llama70b-3d-dgx-h100-64node.toml").unwrap();
    let e = collsim::config::parse_scenario(
        "x.toml",
        &text.replace("optimizer = \"adam\"", "optimizer = \"adam\"\nattention = \"unfused\""),
    )
    .unwrap_err()
    .to_string();
    assert!(e.starts_with("x.toml:") && e.contains("workload.mfu: with attention"), "{e}");
    // At a fixed GEMM efficiency, unfused attention's scores cost time and memory.
    let fixed = text.replace("mfu = 0.45", "efficiency = 0.5");
    let run = |attention: &str| {
        let t = fixed.replace(
            "optimizer = \"adam\"",
            &format!("optimizer = \"adam\"\nattention = \"{attention}\""),
        );
        let s = collsim::config::parse_scenario("x.toml", &t).unwrap();
        let params = collsim::config::parse_profile(
            collsim::config::DEFAULT_PROFILE.0,
            collsim::config::DEFAULT_PROFILE.1,
        )
        .unwrap();
        let (r, _) = collsim::simulate_ddp(&s, &params, Mode::Auto).unwrap();
        let Workload::Ddp(spec) = &s.workload else { unreachable!() };
        let mem = collsim::workload::memory::ddp_memory(spec, 512, 8);
        (r.iteration_time_ms, mem.activations)
    };
    let ((flash_ms, flash_act), (unfused_ms, unfused_act)) = (run("flash"), run("unfused"));
    assert!(unfused_ms > flash_ms, "{unfused_ms} vs {flash_ms}");
    // Per stage layer, 5 bytes a score (64 heads / tp 8 x 4,096²) on top of the 34·s·h/tp
    // of sequence parallelism.
    let per_layer = 5.0 * 8.0 * 4096.0 * 4096.0;
    assert!(unfused_act > flash_act + per_layer, "{unfused_act} vs {flash_act}");
}

#[test]
fn a_micro_batch_too_small_for_the_fused_softmax_runs_slower_than_a_larger_one() {
    // At tp 8 a rank holds 2 of the 16 heads: one sample a micro-batch leaves 2 score matrices,
    // which Megatron's fused softmax does not take, and PyTorch's ops run instead. The
    // measurements show it: a one-sample micro-batch takes longer than a two-sample one of
    // the same model. The model must show it too (without the fallback it does not).
    let runs = runs();
    let per_micro = |r: &Run, ms: f64| ms / (r.global / (r.micro * r.dp as u64)) as f64;
    let mut pairs = 0;
    for one in runs.iter().filter(|r| r.tp == 8 && r.micro == 1) {
        let same = |r: &&Run| {
            r.tp == 8 && r.micro == 2 && (r.hidden, r.layers) == (one.hidden, one.layers)
        };
        for two in runs.iter().filter(same).filter(|r| r.global == one.global) {
            let measured = per_micro(one, one.ms) / per_micro(two, two.ms);
            let simulated = per_micro(one, simulate_with(one, FIT, "full"))
                / per_micro(two, simulate_with(two, FIT, "full"));
            assert!(measured > 1.1, "{one:?} vs {two:?}: measured {measured:.3}");
            assert!(simulated > 1.05, "{one:?} vs {two:?}: simulated {simulated:.3}");
            pairs += 1;
        }
    }
    assert!(pairs >= 8, "{pairs} pairs");
}

/// The fit of [`megatron_steps_fitted_on_two_depths_predict_the_other_two`] on other splits of
/// the set, for study: `cargo test --release megatron_other_splits -- --ignored --nocapture`.
#[test]
#[ignore]
fn megatron_other_splits() {
    type Split = (&'static str, fn(&Run) -> bool);
    let splits: [Split; 3] = [
        ("1,024-wide -> 2,048-wide", |r| r.hidden == 1024),
        ("2,048-wide -> 1,024-wide", |r| r.hidden == 2048),
        ("tp <= 2 -> tp >= 4", |r| r.tp <= 2),
    ];
    for (name, fits) in splits {
        let (fit, held): (Vec<Run>, Vec<Run>) = runs().into_iter().partition(fits);
        let fit: Vec<Run> = fit.into_iter().step_by(3).collect();
        let got = search(&fit, COARSE);
        let (median, p95, _) = errors(&held, |r| simulate_with(r, got, "full"));
        println!("{name}, coarse grid: {got:?}: {median:.1} %, p95 {p95:.1} %");
        let got = fit_on(&fit);
        let (median, p95, _) = errors(&held, |r| simulate_with(r, got, "full"));
        println!("{name}, fine grid: {got:?}: {median:.1} %, p95 {p95:.1} %");
    }
}

#[test]
fn a_sweep_warns_of_each_point_whose_model_does_not_fit() {
    let f = "scenarios/mixtral-ep-dgx-h100-8node.toml";
    let out =
        crate::collsim(&["simulate", f, "--sweep", "workload.parallel.ep=1,8", "--format", "csv"]);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    // ep 1 holds every expert on each rank (210 GiB); ep 8 fits.
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("does not fit")).collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(warnings[0].contains("at workload.parallel.ep=1:"), "{err}");
}

#[test]
fn data_parallel_groups_that_share_a_nic_reduce_at_its_shared_rate() {
    // tp 8: eight data-parallel groups, one GPU a node each, reduce their gradients at once.
    // On AWS p4d two GPUs share each NIC, so each group's all-reduce takes twice what the same
    // all-reduce takes alone on one GPU a node; on DGX H100, a NIC a GPU, it takes the same.
    let params = collsim::config::parse_profile(
        collsim::config::DEFAULT_PROFILE.0,
        collsim::config::DEFAULT_PROFILE.1,
    )
    .unwrap();
    // A 2:1 oversubscribed spine with the 16 nodes dealt over its two racks: every ring hop
    // crosses it, and the eight groups' traffic meets there, at half the line rate.
    let spine = "../topologies/user/dgx-h100-spine-2to1.toml";
    let spread = "\n[placement]\npolicy = \"spread\"\n";
    for (topology, nodes, placement, ratio) in
        [("aws-p4d", 4, "", 2.0), ("dgx-h100", 4, "", 1.0), (spine, 16, spread, 2.0)]
    {
        let step = format!(
            "[cluster]\ntopology = \"{topology}\"\nnodes = {nodes}\n{placement}[workload]\nkind = \"ddp\"\nmodel = \"llama-7b\"\nsequence = 2048\nmicro_batch = 1\ngrad_accumulation = 8\nprecision = \"bf16\"\nefficiency = 0.5\noptimizer = \"adam\"\n[workload.parallel]\ntp = 8\noverlap_grad_reduce = false\n"
        );
        let s = collsim::config::parse_scenario("scenarios/step.toml", &step).unwrap();
        let (r, _) = collsim::simulate_ddp(&s, &params, Mode::Auto).unwrap();
        let [bucket] = r.buckets.as_slice() else { panic!("{:?}", r.buckets) };
        let alone = format!(
            "[cluster]\ntopology = \"{topology}\"\nnodes = {nodes}\ngpus_per_node = 1\n{placement}[workload]\ncollective = \"all_reduce\"\nmin_bytes = \"{b} B\"\nmax_bytes = \"{b} B\"\ndtype = \"float\"\n",
            b = bucket.bytes
        );
        let s = collsim::config::parse_scenario("scenarios/alone.toml", &alone).unwrap();
        let (rows, _) = collsim::simulate(&s, &params, Mode::Auto).unwrap();
        let got = (bucket.end_ms - bucket.start_ms) / (rows[0].time_us / 1e3);
        assert!((got / ratio - 1.0).abs() < 0.02, "{topology}: {got:.3} times alone");
    }
}

/// Step times of 24-layer GPTs under DDP on one H200 (eager PyTorch 2.11, flash attention
/// through `scaled_dot_product_attention`, bf16 autocast, fused AdamW, no activation
/// recomputation; `calibration/data/2026-11-26-h200-kineto/run1-steps.csv`) against the DDP
/// model with the GEMM efficiency and host time per kernel given.
fn h200_errors(fit: Fit, rows: &[(u64, u64, u64, u64, f64)]) -> Vec<f64> {
    let sim = h200_steps(fit, "", rows);
    sim.iter().zip(rows).map(|(s, r)| (s / r.4 - 1.0) * 100.0).collect()
}

/// A node of H200s (dgx-h100's topology with the GPU swapped), written to a scratch file of
/// its own for each call, and the default timing profile.
fn h200_node() -> (std::path::PathBuf, collsim::collective::TimingParams) {
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let topo = super::scratch().join(format!("h200-{}-{n}.toml", std::process::id()));
    let text = std::fs::read_to_string("topologies/dgx-h100.toml")
        .unwrap()
        .replace("model = \"H100-SXM5-80GB\"", "model = \"H200-SXM-141GB\"");
    std::fs::write(&topo, text).unwrap();
    let params = collsim::config::parse_profile(
        collsim::config::DEFAULT_PROFILE.0,
        collsim::config::DEFAULT_PROFILE.1,
    )
    .unwrap();
    (topo, params)
}

/// The DDP model's steps (ms) for `rows` on one H200, `extra` appended to the scenario.
fn h200_steps(fit: Fit, extra: &str, rows: &[(u64, u64, u64, u64, f64)]) -> Vec<f64> {
    let Fit { eff, launch_us, gemm_us } = fit;
    let rate = format!("efficiency = {eff}\nlaunch_us = {launch_us}\ngemm_fixed_us = {gemm_us}\n");
    h200_steps_with(&rate, extra, rows)
}

/// [`h200_steps`] with the compute rate's keys written out (`rate`: TOML lines of [workload]
/// beside `precision = "bf16"`; empty for collsim's default compute model).
pub(crate) fn h200_steps_with(
    rate: &str,
    extra: &str,
    rows: &[(u64, u64, u64, u64, f64)],
) -> Vec<f64> {
    h200_results_with(rate, extra, rows).iter().map(|r| r.iteration_time_ms).collect()
}

/// [`h200_steps_with`]'s whole simulated steps.
fn h200_results_with(
    rate: &str,
    extra: &str,
    rows: &[(u64, u64, u64, u64, f64)],
) -> Vec<collsim::workload::ddp::StepResult> {
    let (topo, params) = h200_node();
    let steps = rows
        .iter()
        .map(|&(layers, h, seq, micro, _)| {
            let toml = format!(
                "[cluster]\ntopology = \"{}\"\nnodes = 1\ngpus_per_node = 1\n[workload]\nkind = \"ddp\"\nmodel = \"gpt2-xl\"\nmicro_batch = {micro}\nprecision = \"bf16\"\n{rate}optimizer = \"adamw\"\noptimizer_impl = \"fused\"\n{extra}",
                topo.display()
            );
            let mut s = collsim::config::parse_scenario("h200.toml", &toml).expect("parses");
            if let Workload::Ddp(d) = &mut s.workload {
                let fp32 = collsim::workload::DataType::Float;
                d.model = gpt_torch_loss(layers, h, 16, 50_304, seq, fp32);
                d.sequence = Some(seq);
            }
            collsim::simulate_ddp(&s, &params, Mode::Auto).expect("simulates").0
        })
        .collect();
    std::fs::remove_file(&topo).ok();
    steps
}

/// One row of a calibration CSV file, its fields read as numbers by column.
struct Row(Vec<String>);

impl Row {
    fn int(&self, i: usize) -> u64 {
        self.0[i].parse().expect("a whole number")
    }

    fn num(&self, i: usize) -> f64 {
        self.0[i].parse().expect("a number")
    }
}

/// The rows of a calibration CSV file after its header.
fn data_rows(path: &str) -> Vec<Row> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines().skip(1).map(|l| Row(l.split(',').map(String::from).collect())).collect()
}

pub(crate) fn h200_rows() -> Vec<(u64, u64, u64, u64, f64)> {
    data_rows("calibration/data/2026-11-26-h200-kineto/run1-steps.csv")
        .into_iter()
        .filter(|r| r.0[2] == "24")
        .map(|r| (24, r.int(3), r.int(5), r.int(6), r.num(8)))
        .collect()
}

/// Median and largest |error|, %.
pub(crate) fn spread(e: &[f64]) -> (f64, f64) {
    let mut abs: Vec<f64> = e.iter().map(|x| x.abs()).collect();
    abs.sort_by(f64::total_cmp);
    (abs[abs.len() / 2], abs[abs.len() - 1])
}

#[test]
fn the_megatron_fit_carries_to_gpt_steps_on_an_h200() {
    // Fitted on Megatron-DeepSpeed on A100s (GEMM efficiency 0.8, 52.5 µs of host a kernel,
    // 60 µs of GPU a GEMM beyond its FLOPs: the README's fit), checked on 16 DDP steps of
    // 24-layer GPTs in eager PyTorch on one H200, none of them fitted: median 8.7 %, from
    // -22.2 % to +1.0 % (one rank: its in-place all-reduces cost nothing, as NCCL launches
    // nothing for them). Fitted without the GEMMs' fixed time (0.65, 55 µs), 10.9 % and
    // -27.2 % to +5.4 %. Their loss is
    // PyTorch's cross entropy, not Megatron's, their head untied, their optimizer fused AdamW.
    // The model is fast where the GPU bounds the step: its memory-bound kernels run below the
    // datasheet's bandwidth there (the fused AdamW of the 2,048-wide GPT takes 11.8 ms in run
    // 2's trace, 3.4 of 4.8 TB/s; the model 8.3). Counted as foreach Adam, as this test once
    // did by mistake, the optimizer's excess hid that: median 7.7 %, -21.7 % to +22.4 %.
    let (median, max) = spread(&h200_errors(FIT, &h200_rows()));
    assert!(median < 10.0 && max < 23.0, "median {median:.1} %, largest {max:.1} %");
}

#[test]
#[ignore = "exploration: prints the DDP model's error on one H200's GPT steps"]
fn h200_gpt_steps() {
    let rows = h200_rows();
    for fit in [FIT, env_fit()] {
        let e = h200_errors(fit, &rows);
        let (median, max) = spread(&e);
        let e: Vec<f64> = e.iter().map(|x| (x * 10.0).round() / 10.0).collect();
        println!("{fit:?}: median |e| {median:.1} %, max {max:.1} %; {e:?}");
    }
}

/// One H200 run: layers, hidden size, sequence, micro-batch, measured ms.
type H200Row = (u64, u64, u64, u64, f64);

/// The H200 hook runs (run3-steps.csv): the hook and its run.
fn h200_hook_rows() -> Vec<(String, H200Row)> {
    data_rows("calibration/data/2026-11-26-h200-kineto/run3-steps.csv")
        .into_iter()
        .map(|r| {
            let hook = r.0[0].trim_start_matches("ddp-").to_string();
            (hook, (r.int(2), r.int(3), r.int(5), r.int(6), r.num(8)))
        })
        .collect()
}

/// What `hook` adds to the step of `row` (against no hook), measured and modelled, ms, with
/// the Megatron fit ([`FIT`]).
fn hook_cost(rows: &[(String, H200Row)], hook: &str, layers: u64) -> (f64, f64) {
    let find = |h: &str| rows.iter().find(|(x, r)| x == h && r.0 == layers).unwrap().1;
    let (plain, hooked) = (find("none"), find(hook));
    let extra = format!("[workload.ddp]\ncomm_hook = \"{hook}\"\n");
    let extra = if hook == "powersgd" { format!("{extra}powersgd_rank = 4\n") } else { extra };
    let model = h200_steps(FIT, &extra, &[hooked])[0] - h200_steps(FIT, "", &[plain])[0];
    (hooked.4 - plain.4, model)
}

#[test]
fn hook_costs_on_one_h200_carry_from_one_gpt_to_the_other() {
    // On one rank a hook communicates nothing: what it adds to a step is its kernels and the
    // host's launches (calibration/data/2026-11-26-h200-kineto, run 3). PowerSGD rank 4 runs
    // three products and a QR factorisation per matrix; the QR's host ops were fitted on the
    // 24-layer, 2,048-wide GPT (85.1 ms measured, 85.6 modelled) and this checks them on the
    // 12-layer, 768-wide one (32.6 measured, 35.5 modelled). The fp16 hook's three passes over
    // the gradients (a cast, the division, the copy back) give 8.6 ms where 8.7 are measured;
    // on the small, host-bound GPT 1.3 against 1.9 (not asserted: the model runs a hook's
    // launches on the NCCL stream's side, not on the host thread that launches the backward).
    let rows = h200_hook_rows();
    let (measured, model) = hook_cost(&rows, "powersgd", 12);
    assert!(
        (model / measured - 1.0).abs() < 0.15,
        "PowerSGD, 768 wide: {measured:.1} measured, {model:.1} modelled"
    );
    let (measured, model) = hook_cost(&rows, "powersgd", 24);
    assert!(
        (model / measured - 1.0).abs() < 0.05,
        "PowerSGD, 2,048 wide: {measured:.1} measured, {model:.1} modelled"
    );
    let (measured, model) = hook_cost(&rows, "fp16", 24);
    assert!(
        (model / measured - 1.0).abs() < 0.15,
        "fp16, 2,048 wide: {measured:.1} measured, {model:.1} modelled"
    );
}

#[test]
#[ignore = "exploration: prints what each hook adds on one H200, measured and modelled"]
fn h200_hooks() {
    let rows = h200_hook_rows();
    for (hook, r) in rows.iter().filter(|(h, _)| h != "none") {
        let (measured, model) = hook_cost(&rows, hook, r.0);
        println!(
            "{hook:>10} L{} h{}: adds {measured:.1} ms measured, {model:.1} ms modelled",
            r.0, r.1
        );
    }
}

/// One Megatron-style micro-batch measured on one H200 (calibration/data/2026-11-27-h200-megatron):
/// layers, hidden size, sequence, micro-batch, recompute, ms per micro-batch (host syncing at
/// each micro-batch's start), optimizer ms.
type MegatronH200 = (u64, u64, u64, u64, bool, f64, f64);

fn megatron_h200_rows() -> Vec<MegatronH200> {
    data_rows("calibration/data/2026-11-27-h200-megatron/steps.csv")
        .into_iter()
        .map(|r| (r.int(0), r.int(1), r.int(3), r.int(4), r.0[5] == "1", r.num(6), r.num(8)))
        .collect()
}

/// The model's (ms per micro-batch, optimizer ms) for a Megatron-style GPT on one H200: the
/// step at one and at two micro-batches, their difference the micro-batch.
fn megatron_h200_sim(row: &MegatronH200, fit: Fit) -> (f64, f64) {
    let (layers, h, seq, micro, recompute, _, _) = *row;
    let Fit { eff, launch_us, gemm_us } = fit;
    let (topo, params) = h200_node();
    let recompute = if recompute { "full" } else { "none" };
    let step = |m: u64| {
        let toml = format!(
            "[cluster]\ntopology = \"{}\"\nnodes = 1\ngpus_per_node = 1\n[workload]\nkind = \"ddp\"\nmodel = \"llama-7b\"\nmicro_batch = {micro}\ngrad_accumulation = {m}\ngrad_dtype = \"half\"\nprecision = \"fp16\"\nefficiency = {eff}\nlaunch_us = {launch_us}\ngemm_fixed_us = {gemm_us}\noptimizer = \"adamw\"\n[workload.parallel]\ntp = 1\npp = 1\nrecompute = \"{recompute}\"\noverlap_grad_reduce = false\n",
            topo.display()
        );
        let mut s = collsim::config::parse_scenario("h200-megatron.toml", &toml).expect("parses");
        if let Workload::Ddp(d) = &mut s.workload {
            let half = collsim::workload::DataType::Half;
            let model = gpt(layers, h, 16, 50_304, seq, half);
            d.model =
                if layers > 0 { with_attention(model, Attention::Unfused).unwrap() } else { model };
            d.sequence = Some(seq);
        }
        let (r, _) = collsim::simulate_ddp(&s, &params, Mode::Auto).expect("simulates");
        r.iteration_time_ms
    };
    let (one, two) = (step(1), step(2));
    std::fs::remove_file(&topo).ok();
    (two - one, 2.0 * one - two)
}

/// The model with the Megatron fit against our Megatron-style micro-batches on one H200, for
/// study: `cargo test --release megatron_h200 -- --ignored --nocapture`. The 0-layer rows are
/// what lies outside the layers, Megatron's own code path there; the layers run PyTorch's
/// unfused kernels where Megatron fuses, so the GEMM-bound rows are not Megatron's.
#[test]
#[ignore = "exploration: the model against Megatron-style micro-batches on one H200"]
fn megatron_h200() {
    let fit = env_fit();
    for r in megatron_h200_rows() {
        let (micro, opt) = megatron_h200_sim(&r, fit);
        println!(
            "L{} h{} s{} mb{} rc{}: micro {:.2} ms measured {:.2} ({:+.1} %), optimizer {:.2} measured {:.2}",
            r.0,
            r.1,
            r.2,
            r.3,
            r.4 as u8,
            micro,
            r.5,
            (micro / r.5 - 1.0) * 100.0,
            opt,
            r.6
        );
    }
}

/// The Megatron set's GPTs are written down in their scenarios (`[workload.model]`), and that
/// gives the model a Rust-built GPT gives: the same step to the bit, at every layout.
#[test]
fn the_megatron_gpts_written_in_scenario_files_are_the_rust_built_ones() {
    let params = collsim::config::parse_profile(
        collsim::config::DEFAULT_PROFILE.0,
        collsim::config::DEFAULT_PROFILE.1,
    )
    .expect("the default profile parses");
    let all = runs();
    for run in all.iter().step_by(61) {
        for recompute in ["none", "full"] {
            let toml = scenario_of(run, FIT, recompute);
            let from_file = collsim::config::parse_scenario("megatron.toml", &toml).unwrap();
            // The same scenario with a preset, its model swapped for the Rust-built GPT.
            let start = toml.find("[workload.model]").unwrap();
            let end = toml.find("[workload.parallel]").unwrap();
            let preset = format!("{}{}", &toml[..start], &toml[end..])
                .replace("sequence = ", "model = \"llama-7b\"\nsequence = ");
            let mut swapped = collsim::config::parse_scenario("megatron.toml", &preset).unwrap();
            let pad = 128 * run.tp as u64;
            let vocab = 50_257u64.div_ceil(pad) * pad;
            if let Workload::Ddp(d) = &mut swapped.workload {
                let half = collsim::workload::DataType::Half;
                let model = gpt(run.layers, run.hidden, run.heads, vocab, run.seq, half);
                d.model = with_attention(model, attention()).unwrap();
            }
            let (a, _) = collsim::simulate_ddp(&from_file, &params, Mode::Auto).unwrap();
            let (b, _) = collsim::simulate_ddp(&swapped, &params, Mode::Auto).unwrap();
            assert_eq!(a.iteration_time_ms, b.iteration_time_ms, "{run:?} {recompute}");
            assert_eq!(a.backward_ms, b.backward_ms, "{run:?} {recompute}");
            let model = |s: &collsim::config::Scenario| match &s.workload {
                Workload::Ddp(d) => d.model.clone(),
                _ => unreachable!(),
            };
            assert_eq!(model(&from_file), model(&swapped), "{run:?}");
        }
    }
}

#[test]
fn context_parallelism_runs_from_a_scenario_file_and_its_misfits_name_their_line() {
    // Llama 3.1 8B as NVIDIA's DGX Cloud recipe lays it out (tp 1, cp 2, dp 4 on 8 H100s).
    let dir = crate::scratch();
    let text = "[cluster]\ntopology = \"dgx-h100\"\nnodes = 1\n[workload]\nkind = \"ddp\"\nsequence = 8192\nmicro_batch = 1\ngrad_accumulation = 4\nprecision = \"bf16\"\n[workload.model]\npreset = \"llama-3-8b\"\nimplementation = \"megatron\"\n[workload.parallel]\ncp = 2\ndistributed_optimizer = true\n";
    let f = dir.join("megatron-cp.toml");
    std::fs::write(&f, text).unwrap();
    let f = f.to_str().unwrap();
    let out = crate::collsim_ok(&["simulate", f]);
    assert!(out.contains("tp 1 x pp 1 x cp 2 x dp 4;"), "{out}");
    // A sweep of the degree: cp 1 is dp 8 over the same four micro-batches a replica.
    let swept = crate::collsim_ok(&[
        "simulate",
        f,
        "--sweep",
        "workload.parallel.cp=1,2",
        "--format",
        "csv",
    ]);
    assert_eq!(swept.lines().count(), 3, "{swept}");
    // A degree that does not divide the ranks names its line.
    let bad = dir.join("megatron-cp3.toml");
    std::fs::write(&bad, text.replace("cp = 2", "cp = 3")).unwrap();
    crate::cli_errors::fails_with(
        &["simulate", bad.to_str().unwrap()],
        &[
            "megatron-cp3.toml:14:6",
            "workload.parallel.cp",
            "tp x pp x cp = 3 does not divide the 8 ranks",
        ],
    );
    // Tensor-parallel overlap is sequence parallelism's; Megatron asserts it.
    let lone = dir.join("megatron-tp-overlap.toml");
    let overlap = "[workload.parallel]\ntp = 2\ntp_comm_overlap = true\n";
    std::fs::write(&lone, text.replace("[workload.parallel]\ncp = 2\n", overlap)).unwrap();
    crate::cli_errors::fails_with(
        &["simulate", lone.to_str().unwrap()],
        &["megatron-tp-overlap.toml:13", "tp_comm_overlap: goes with sequence_parallel = true"],
    );
    let with_sp = overlap.replace("tp = 2\n", "tp = 2\nsequence_parallel = true\n");
    std::fs::write(&lone, text.replace("[workload.parallel]\ncp = 2\n", &with_sp)).unwrap();
    let out = crate::collsim_ok(&["simulate", lone.to_str().unwrap()]);
    assert!(out.contains("sequence parallel, its collectives overlapped with the GEMMs"), "{out}");
    let odd = dir.join("megatron-cp-odd.toml");
    std::fs::write(&odd, text.replace("sequence = 8192", "sequence = 8190")).unwrap();
    crate::cli_errors::fails_with(
        &["simulate", odd.to_str().unwrap()],
        &["workload.parallel.cp", "not a multiple of 2 x cp = 4"],
    );
}

/// The allocator's peak on our Megatron-style step (`calibration/data/2026-11-27-h200-megatron`,
/// `torch.cuda.max_memory_allocated` over two steps, eight micro-batches and three optimizer
/// steps): layers, hidden, sequence, micro-batch, recompute, GiB. The H100 capture
/// (`2026-11-27-h100-megatron`) measured the same peaks to the MiB. The 0-layer rows are not a
/// model a scenario can write down.
fn megatron_peaks() -> Vec<(u64, u64, u64, u64, bool, f64)> {
    data_rows("calibration/data/2026-11-27-h200-megatron/steps.csv")
        .into_iter()
        .filter(|r| r.int(0) > 0)
        .map(|r| (r.int(0), r.int(1), r.int(3), r.int(4), r.0[5] == "1", r.num(9)))
        .collect()
}

#[test]
fn memory_per_gpu_is_within_a_tenth_of_the_allocators_peak_on_megatron_style_steps() {
    // The step as megatron_step.py runs it, written down as a scenario: fp16 parameters and
    // gradients with fp32 masters, fused AdamW, unfused attention, Megatron's loss, full
    // recompute one layer a chunk (or none). collsim's memory less its runtime reserve (the
    // CUDA context and NCCL's buffers, which the allocator does not hand out) against the
    // measured peak allocated, 2026-11-29: from -9.1 % (24 layers, 4 samples) to -0.6 %,
    // median 3.6 %. Before the optimizer step's fp32 gradient copy was counted and the loss's
    // kept logits were cut to Megatron's 4 bytes, the same rows were -19.4 % to +13.7 %.
    let mut errors = Vec::new();
    for (layers, hidden, seq, micro, recompute, peak_gib) in megatron_peaks() {
        let recompute = if recompute { "full" } else { "none" };
        let text = format!(
            "[cluster]\ntopology = \"dgx-h200\"\nnodes = 1\ngpus_per_node = 1\n[workload]\nkind = \"ddp\"\nsequence = {seq}\nmicro_batch = {micro}\ngrad_dtype = \"half\"\nprecision = \"fp16\"\noptimizer = \"adamw\"\nactivation_checkpointing = \"{recompute}\"\n[workload.model]\nfamily = \"gpt\"\nimplementation = \"megatron\"\nlayers = {layers}\nhidden = {hidden}\nheads = 16\nvocab = 50304\nattention = \"unfused\"\n[workload.parallel]\ntp = 1\npp = 1\n"
        );
        let s = collsim::config::parse_scenario("megatron-style.toml", &text).expect("parses");
        let Workload::Ddp(spec) = &s.workload else { unreachable!() };
        let mem = collsim::workload::memory::ddp_memory(spec, 1, 1);
        let gib = (mem.total - mem.runtime) / (1u64 << 30) as f64;
        let e = 100.0 * (gib / peak_gib - 1.0);
        eprintln!(
            "L{layers} h{hidden} s{seq} mb{micro} {recompute}: {gib:.2} of {peak_gib} GiB, {e:+.1} %"
        );
        errors.push(e);
    }
    assert_eq!(errors.len(), 12);
    let (median, worst) = spread(&errors);
    assert!(worst < 10.0 && median < 5.0, "median {median:.1} %, worst {worst:.1} %");
}

#[test]
fn host_bound_steps_on_an_h200_spread_more_than_gpu_bound_ones() {
    // Issue #48: host-bound steps jitter more than GPU-bound ones. Each of the H200's DDP steps
    // of run 1 was timed 10 times: its median over its fastest, over 1.539 (how far the
    // fastest of 10 normal draws falls below their median, in standard deviations), is its
    // per-step spread. Where the model's launch waits are at least 5 % of the step (the host
    // paces it) the median spread is the measured host spread, where they are under 1 % below
    // the default GPU spread (fitted on MLPerf's whole clusters, it errs slow). Why the
    // default host spread is the GPU's, not this: `skew::DEFAULT_HOST_CV`.
    // The plain DDP steps timed 10 times (24 layers, 16 heads: `h200_rows`' shape).
    let rows: Vec<Row> = data_rows("calibration/data/2026-11-26-h200-kineto/run1-steps.csv")
        .into_iter()
        .filter(|r| r.0[0] == "ddp" && r.int(7) == 10)
        .collect();
    assert!(rows.iter().all(|r| r.int(2) == 24 && r.int(4) == 16));
    let shapes: Vec<_> =
        rows.iter().map(|r| (24, r.int(3), r.int(5), r.int(6), r.num(8))).collect();
    let (mut host, mut gpu) = (Vec::new(), Vec::new());
    for (r, step) in rows.iter().zip(h200_results_with("", "", &shapes)) {
        let launch = step.breakdown.launch_ms / step.iteration_time_ms;
        let spread = (1.0 - r.num(9) / r.num(8)) / 1.539;
        if launch >= 0.05 {
            host.push(spread);
        } else if launch < 0.01 {
            gpu.push(spread);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        let n = v.len();
        (v[(n - 1) / 2] + v[n / 2]) / 2.0
    };
    assert_eq!((host.len(), gpu.len()), (6, 10));
    let (h, g) = (median(&mut host), median(&mut gpu));
    assert!((h - collsim::workload::skew::MEASURED_HOST_CV).abs() < 5e-4, "{h}");
    assert!(g < collsim::workload::skew::DEFAULT_CV && h > 4.0 * g, "{g}");
}
