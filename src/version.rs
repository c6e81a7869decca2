//! The version of collsim's JSON documents: below every module that writes or reads one
//! ([`crate::report`] writes them, [`crate::plan`]'s shard files record it).

/// The version of every JSON document collsim writes (`simulate`, `plan`, `validate`, `explain`,
/// `topo show`, jobs, sweeps, DDP steps), as each document's `format_version`: one number for
/// the crate, bumped whenever a field is added, renamed, retyped or dropped. A test
/// (`tests/it/report.rs`) keeps the fields of each document and fails when they change and
/// this does not. 4: a replayed step's `samples_per_s`, `gemm_tflops`, `forward_ms` and
/// `backward_ms` are null (they were made-up numbers). 5: a 3-D step's `parallel.layout` has
/// `cp` (context parallelism), `distributed_optimizer` and `overlap_param_gather`; 6: and
/// `tp_comm_overlap`; 7: `memory` has `step_transient` and `measured`, and a model profile
/// that knows its micro-batch gives `samples_per_s`. 8: `parallel.layout` has
/// `align_grad_reduce`. 9: a training sweep's points have `from_first` (what each adds to the
/// first point's step, part by part, and its per-GPU rate); `validate --runs` writes one.
/// 10: every multi-GPU step (3-D ones too) has `skew`, and a DDP or FSDP step's buckets
/// `skew_wait_ms`, as it waits for its slowest rank under the default per-rank spread (before,
/// only where the scenario gave a spread or a straggler, and never on a 3-D step). 11: a
/// step's `breakdown` has `amax_comm_ms` (fp8's amax all-reduces under a Megatron layout).
/// 12: `skew` has `slowest_host_factor` (the slowest rank's launches, under
/// `rank_skew_host_cv`). 13: a simulated step has `comm_groups` (its process groups, their
/// ranks and nodes, and the tier each one's traffic crosses). 14: a plan's document has
/// `recommended` (the recommended candidate's number) and `band` (the relative error band),
/// and each ranked solution its `band` (step, time and cost low and high); `collsim presets`
/// writes one. 15: a sweep's document has `failed` (the points that could not run, each with
/// its `error`). 16: a plan's document has `plan.search` (without a node list: per instance,
/// placement and knobs, the smallest node count that meets the deadline or throughput, or the
/// most it could try and what set that), and
/// each solution's metrics `memory_usable_gib` (the GPU's memory less the headroom).
/// 17: with `[neighbours]`, each solution's metrics `beside` (its step alone, and each job
/// already on the cluster with its speed beside the candidate over its speed alone).
/// 18: each solution's metrics `band` (its relative error band) and `band_from` (the class of
/// measured runs it comes from); the plan's `band` is the margin its decision used;
/// `validate --runs` writes `by_class`, `validate --manifest` `by_generation`; a plan's
/// `objective.region`, `collsim presets`' `price_region`.
/// 19: a simulation's `communicator.tuner` (NCCL_TUNER_CONFIG_FILE's rows) and
/// `communicator.tuner_notes`, each row's `tuner_line` (the row that set its algorithm).
/// 20: a step's `breakdown` has `dp_replicate_ms`, `dp_scatter_gather_ms`, `dp_launcher_ms`
/// and `dp_reduce_ms` (DataParallel's parts, 0 elsewhere), its `memory` has `gathered`, and a
/// DataParallel step has `data_parallel` (its parts, and the same step under DDP).
pub const FORMAT_VERSION: u32 = 20;
