//! The `collsim` command line: parse flags, call the library, map errors to exit codes
//! (0 success, 1 input or simulation error, 2 usage).

use std::io::Write;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, anyhow, bail};
use clap::{Parser, Subcommand, ValueEnum};

use collsim::calibrate::{nccl_log, validate};
use collsim::collective::{Collective, Mode, TimingParams};
use collsim::comm::env::NcclEnv;
use collsim::config::{self, Scenario};
use collsim::report::{self, SimFormat, SimReport, ValidationFormat, ValidationReport};
use collsim::units::Bytes;
use collsim::workload::sweep::SweepSpec;
use collsim::workload::{DataType, ReduceOp};

#[derive(Parser)]
#[command(name = "collsim", version, about = "Simulate NCCL collectives on GPU clusters")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum SimFmt {
    Table,
    Nccl,
    Json,
    Csv,
}

#[derive(Clone, Copy, ValueEnum)]
enum ValFmt {
    Table,
    Json,
}

#[derive(Clone, Copy, ValueEnum)]
enum ModeArg {
    Auto,
    Aggregated,
    Detailed,
}

#[derive(clap::Args, Clone)]
struct Common {
    /// Topology preset or path to a topology TOML. Presets: aws-p4d, aws-p5, dgx-a100,
    /// dgx-b200, dgx-h100, dgx-h200, gb200-nvl72, gcp-a2-highgpu-8g, gcp-a2-ultragpu-8g,
    /// gcp-a3-highgpu-8g, gcp-a3-megagpu-8g, hgx-h100-roce, pcie-8gpu-2socket,
    /// pcie-a100-4gpu-2socket, polaris-a100-4gpu.
    #[arg(long)]
    topology: Option<String>,
    /// Number of nodes.
    #[arg(long)]
    nodes: Option<usize>,
    /// GPUs used per node (the first G of each node).
    #[arg(long)]
    gpus_per_node: Option<usize>,
    /// GPUs each process drives, as nccl-tests `-g N` (default 1: one process per GPU, as
    /// torchrun and mpirun run NCCL). One process launches its GPUs' kernels one after the
    /// other, so each call costs it more.
    #[arg(long, value_name = "N")]
    gpus_per_process: Option<usize>,
    /// An NCCL environment variable, KEY=VALUE (repeatable).
    #[arg(long = "nccl", value_name = "KEY=VALUE")]
    nccl: Vec<String>,
    /// Which NCCL release's cost-model tables choose algorithms (2.18 … 2.30; default 2.30).
    #[arg(long, value_name = "VERSION")]
    nccl_version: Option<String>,
    /// Timing profile TOML (default: the built-in calibration/profiles/default.toml).
    #[arg(long)]
    profile: Option<PathBuf>,
    /// detailed: every rank, channel and chunk; aggregated: every algorithm in its aggregated
    /// form (symmetry, steady-state rates); auto: detailed where that is small, else aggregated.
    #[arg(long, value_enum, default_value = "auto")]
    mode: ModeArg,
    /// Write the output to PATH instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "PATH")]
    output: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Command {
    /// Simulate a scenario (a file, flags, or both; flags override the file).
    Simulate(SimulateArgs),
    /// Take one call apart: NCCL's cost table, its choice, the simulated time and what bounds it.
    Explain(ExplainArgs),
    /// Hardware: show a topology as nvidia-smi and NCCL see it.
    Topo {
        #[command(subcommand)]
        command: TopoCommand,
    },
    /// Fit a profile's physical parameters and size-band correction to real runs (`--from-log`)
    /// or to a sweep of this machine's GPUs (`--run`), and report its error on runs it did not
    /// fit.
    Calibrate(CalibrateArgs),
    /// Compare the model with a real nccl-tests log.
    Validate(ValidateArgs),
    /// Size a cluster: every candidate instance × nodes × placement × knobs of a plan file,
    /// checked for memory, quota and budget, simulated, priced and ranked by time and cost to
    /// train (`collsim plan merge` joins the results of sharded runs).
    Plan(PlanArgs),
    /// Turn a PyTorch profiler trace of one rank's training step into a model profile: every
    /// kernel tagged by class (GEMM, attention, memory-bound, optimizer, copy, host) and by how
    /// it grows with the shape, in program order with the step's collectives; a scenario names
    /// it (`[workload] profile = "FILE"`) to time that step on other GPUs, clusters, micro-batches
    /// and sequences.
    Profile(ProfileArgs),
    /// Print a shell completion script for collsim (bash, zsh, fish, elvish, powershell), e.g.
    /// `collsim completions bash > /etc/bash_completion.d/collsim`.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum PlanFmt {
    Table,
    Json,
    Csv,
}

/// How a plan's report is written.
#[derive(clap::Args, Clone)]
struct PlanOut {
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    format: PlanFmt,
    /// Draw cost against time to train, the Pareto front highlighted, into this SVG file.
    #[arg(long, value_name = "SVG")]
    plot: Option<PathBuf>,
}

/// `collsim plan`.
#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
struct PlanArgs {
    #[command(subcommand)]
    command: Option<PlanCommand>,
    /// Plan TOML (scenarios/plan-gpt2xl.toml documents every key).
    #[arg(required = true)]
    plan: Option<PathBuf>,
    /// Evaluate only the K-th of N disjoint slices of the candidates (1-based, "2/3"), appending
    /// one JSON line per candidate to the -o file; "auto" reads a Slurm job array's
    /// SLURM_ARRAY_TASK_ID/COUNT or a Kubernetes Indexed Job's JOB_COMPLETION_INDEX.
    #[arg(long, value_name = "K/N|auto")]
    shard: Option<String>,
    /// With --shard auto on Kubernetes (or to override Slurm's count): how many shards.
    #[arg(long, value_name = "N")]
    shard_count: Option<usize>,
    /// With --shard: keep the candidates already in the -o file and evaluate only the rest.
    #[arg(long, requires = "shard")]
    resume: bool,
    /// Timing profile TOML (default: the built-in calibration/profiles/default.toml).
    #[arg(long)]
    profile: Option<PathBuf>,
    /// How collectives are simulated (as for simulate).
    #[arg(long, value_enum, default_value = "auto")]
    mode: ModeArg,
    #[command(flatten)]
    out: PlanOut,
    /// Write the report to PATH instead of stdout; with --shard, the results file (JSON lines).
    #[arg(short = 'o', long = "output", value_name = "PATH")]
    output: Option<PathBuf>,
}

#[derive(Subcommand)]
enum PlanCommand {
    /// Join the results files of a sharded plan into the report a single run prints.
    Merge {
        /// Results files written by `collsim plan --shard`.
        #[arg(required = true, num_args = 1..)]
        results: Vec<PathBuf>,
        #[command(flatten)]
        out: PlanOut,
        /// Write the report to PATH instead of stdout.
        #[arg(short = 'o', long = "output", value_name = "PATH")]
        output: Option<PathBuf>,
    },
}

/// `collsim simulate`.
#[derive(clap::Args)]
struct SimulateArgs {
    /// Scenario TOML.
    scenario: Option<PathBuf>,
    #[command(flatten)]
    common: Common,
    /// Collective, as nccl-tests names it: all_reduce (the default), all_gather,
    /// reduce_scatter, broadcast, reduce, alltoall, sendrecv.
    #[arg(long)]
    collective: Option<String>,
    /// First size, as nccl-tests -b (bare number = bytes; K/M/G binary; or "64 MiB").
    #[arg(long)]
    min_bytes: Option<String>,
    /// Last size, as nccl-tests -e.
    #[arg(long)]
    max_bytes: Option<String>,
    /// Multiplicative step, as nccl-tests -f.
    #[arg(long)]
    factor: Option<u64>,
    /// Data type, as nccl-tests -d.
    #[arg(long)]
    dtype: Option<String>,
    /// Reduction, as nccl-tests -o.
    #[arg(long)]
    op: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    format: SimFmt,
    /// Run the scenario at every value of a key (KEY=V1,V2,...; `ddp.X` means
    /// `workload.ddp.X`, as do `fsdp.X`, `zero.X` and `parallel.X` theirs, `topology.X` a key
    /// of its topology, `profile.X` one of the profile);
    /// several --sweep run their cross product, in parallel.
    #[arg(long, value_name = "KEY=VALUES")]
    sweep: Vec<String>,
    /// DDP workloads: write the step as a Chrome/Perfetto trace (JSON) here.
    #[arg(long, value_name = "JSON")]
    trace: Option<PathBuf>,
    /// DDP workloads: draw the step's compute and NCCL lanes into this SVG file (with --sweep:
    /// step time against the swept values).
    #[arg(long, value_name = "SVG")]
    plot: Option<PathBuf>,
    /// DDP and FSDP workloads: write the step as a list of calls (JSON) here, for a scenario
    /// with `kind = "trace"` to replay on another cluster.
    #[arg(long, value_name = "JSON")]
    export_calls: Option<PathBuf>,
    /// Replay one rank's step from a PyTorch profiler (Kineto) JSON trace, a Chakra execution
    /// trace (`NAME.RANK.et`, ASTRA-sim's input) or a list of calls: its compute kept, its
    /// collectives timed on this cluster (--topology, --nodes).
    #[arg(long, value_name = "FILE")]
    workload_trace: Option<PathBuf>,
}

/// `collsim explain`.
#[derive(clap::Args)]
struct ExplainArgs {
    #[command(flatten)]
    common: Common,
    /// Collective, as nccl-tests names it: all_reduce, all_gather, reduce_scatter, broadcast,
    /// reduce, alltoall, sendrecv.
    #[arg(long, default_value = "all_reduce")]
    collective: String,
    /// Bytes, as nccl-tests' size column (bare number = bytes; K/M/G binary; or "64 MiB").
    #[arg(long)]
    bytes: String,
    /// Data type, as nccl-tests -d.
    #[arg(long, default_value = "float")]
    dtype: String,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    format: ValFmt,
}

/// `collsim calibrate`.
#[derive(clap::Args)]
struct CalibrateArgs {
    /// nccl-tests logs (text or -J JSON) to fit; LOG@all_gather picks one test of a file
    /// holding several. Without --check-log, every second one is held out.
    #[arg(long = "from-log", visible_alias = "from-json", num_args = 1.., value_name = "LOG")]
    from_log: Vec<PathBuf>,
    /// Logs held out: reported, never fitted.
    #[arg(long = "check-log", num_args = 1.., value_name = "LOG")]
    check_log: Vec<PathBuf>,
    /// Run collsim-bench (calibration/bench) on this machine's GPUs and fit its results.
    #[arg(long)]
    run: bool,
    /// With --run: how to launch the bench on several nodes ("mpirun -np 16 ...").
    #[arg(long)]
    launcher: Option<String>,
    /// Which test of each log (default: the first).
    #[arg(long)]
    collective: Option<String>,
    /// Physical parameters to fit, comma-separated ("bandwidth.net,overhead.call"; "none":
    /// only the size-band correction). Default: every one the fit data determines; named
    /// here, one it does not determine is an error.
    #[arg(long, value_name = "LIST")]
    fit: Option<String>,
    /// Keep every size band's factor at 1: the profile is the fitted parameters alone, and
    /// the bands only carry the error band. For a profile meant for other clusters than
    /// the one measured (the factors correct what is particular to it).
    #[arg(long)]
    no_correction: bool,
    #[command(flatten)]
    common: Common,
}

/// `collsim profile`.
#[derive(clap::Args)]
struct ProfileArgs {
    /// The trace (`prof.export_chrome_trace`, or the trace handler's `.json.gz`), recorded with
    /// `record_shapes=True` (calibration/trace/capture_step.py records one).
    trace: PathBuf,
    /// Write the profile here (else to standard output); the summary goes to standard error.
    #[arg(short = 'o', long = "output", value_name = "PROFILE.toml")]
    output: Option<PathBuf>,
    /// The GPU model the trace ran on, as the GPU library names it (default: from the trace's
    /// deviceProperties).
    #[arg(long, value_name = "MODEL")]
    gpu: Option<String>,
    /// Samples in the traced micro-batch (default: the first embedding's indices).
    #[arg(long, value_name = "N")]
    micro_batch: Option<u64>,
    /// Tokens per sample (default: the first embedding's indices).
    #[arg(long, value_name = "S")]
    sequence: Option<u64>,
    /// The step's memory as the allocator measured it: the `steps.csv` that
    /// calibration/trace/profile_model.py writes beside the trace (peak allocated and reserved;
    /// allocated at the step's start and at its forward's end, to carry it to another shape).
    /// Without it a plan cannot tell which candidates fit.
    #[arg(long, value_name = "STEPS.csv")]
    memory: Option<PathBuf>,
}

/// `collsim validate`.
#[derive(clap::Args)]
struct ValidateArgs {
    /// nccl-tests output: its text, or its -J JSON (collsim-bench's results.json too); LOG@COLLECTIVE
    /// picks that test of a file holding several.
    #[arg(long, required_unless_present = "manifest", conflicts_with = "manifest")]
    log: Option<PathBuf>,
    /// Every curve a manifest CSV lists (calibration/data/manifest.csv), each on the setup its
    /// row records: per-curve and pooled error by size band and algorithm, and
    /// leave-one-cluster-out (each cluster predicted by a profile calibrated on the other
    /// clusters of its GPU generation).
    #[arg(long, value_name = "CSV")]
    manifest: Option<PathBuf>,
    /// With --manifest: the pooled figures only, without the leave-one-cluster-out refits.
    #[arg(long, requires = "manifest", conflicts_with_all = ["refit", "fits_dir"])]
    no_held_out: bool,
    /// With --manifest: calibrate every held-out cluster again (minutes), rather than use the
    /// fits kept for the same inputs (in the manifest's held-out-fits/ folder, then in
    /// $XDG_CACHE_HOME/collsim, or ~/.cache/collsim, where this build keeps its own).
    #[arg(long, requires = "manifest")]
    refit: bool,
    /// With --manifest: read and keep held-out fits in DIR only (as
    /// calibration/profiles/regenerate.sh makes the repository's).
    #[arg(long, value_name = "DIR", requires = "manifest")]
    fits_dir: Option<PathBuf>,
    #[command(flatten)]
    common: Common,
    /// Which test of the log (default: the first; its header names the collective).
    #[arg(long, conflicts_with = "manifest")]
    collective: Option<String>,
    /// Also draw measured and predicted busbw against size (log axes) and the error per size
    /// into this SVG file.
    #[arg(long, value_name = "SVG", conflicts_with = "manifest")]
    plot: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    format: ValFmt,
}

#[derive(Subcommand)]
enum TopoCommand {
    /// Print a node like `nvidia-smi topo -m`, NCCL's path types, and the network.
    Show {
        /// Topology preset or path to a topology TOML.
        topology: String,
        /// Nodes, for the network summary.
        #[arg(long, default_value_t = 1)]
        nodes: usize,
        /// Output format.
        #[arg(long, value_enum, default_value = "table")]
        format: ValFmt,
        /// Write the output to PATH instead of stdout.
        #[arg(short = 'o', long = "output", value_name = "PATH")]
        output: Option<PathBuf>,
    },
    /// Write a topology TOML from a real node's NCCL XML dump or `nvidia-smi topo -m` output.
    Import {
        /// An NCCL_TOPO_DUMP_FILE dump.
        #[arg(
            long,
            value_name = "FILE",
            conflicts_with = "nvidia_smi",
            required_unless_present = "nvidia_smi"
        )]
        nccl_xml: Option<PathBuf>,
        /// Saved `nvidia-smi topo -m` output.
        #[arg(long, value_name = "FILE")]
        nvidia_smi: Option<PathBuf>,
        /// Write the TOML to PATH instead of stdout.
        #[arg(short = 'o', long = "output", value_name = "PATH")]
        output: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The outputs move into place only once the whole run has succeeded.
    let done = run(cli).and_then(|()| {
        let read = config::files_read();
        outputs().commit(&read).map_err(|e| match e {
            report::output::CommitError::Clash(m) => usage(m),
            report::output::CommitError::Io(e) => e.into(),
        })
    });
    if done.is_err() {
        outputs().discard();
    }
    match done {
        Ok(()) => ExitCode::SUCCESS,
        // A reader that stopped early (`| head`) is not an error.
        Err(e) if broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("collsim: {}", shorten(&one_line(&format!("{e:#}"))));
            ExitCode::from(if e.downcast_ref::<Usage>().is_some() { 2 } else { 1 })
        }
    }
}

/// Returns a [`Usage`] error from a format string.
macro_rules! bail_usage {
    ($($t:tt)*) => {
        return Err(usage(format!($($t)*)))
    };
}

/// A command line that cannot run as given (a missing input, flags that do not go together, an
/// output that would replace an input): exit 2, as clap's own usage errors.
#[derive(Debug)]
struct Usage(String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

fn usage(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Usage(msg.into()))
}

/// Whether `e` is a write to a closed pipe.
fn broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// A profile's name and text: the file given, or the built-in default.
fn profile_source(path: Option<&Path>) -> Result<(String, String)> {
    Ok(match path {
        Some(p) => (p.display().to_string(), config::load_text(p)?),
        None => (config::DEFAULT_PROFILE.0.to_string(), config::DEFAULT_PROFILE.1.to_string()),
    })
}

/// [`load_profile`] for a run of `s`, warning where the profile was fitted on another setup.
fn load_profile_for(path: Option<&Path>, s: &Scenario) -> Result<TimingParams> {
    let p = load_profile(path)?;
    if let Some(w) = collsim::profile_mismatch(&p, s) {
        say(format!("warning: {w}"));
    }
    Ok(p)
}

fn load_profile(path: Option<&Path>) -> Result<TimingParams> {
    let (name, text) = profile_source(path)?;
    Ok(config::parse_profile(&name, &text)?)
}

/// This run's output files, complete and waiting: [`main`] moves them into place together once
/// the run has succeeded (or removes them when it failed).
static OUTPUTS: std::sync::Mutex<report::output::Outputs> =
    std::sync::Mutex::new(report::output::Outputs::new());

fn outputs() -> std::sync::MutexGuard<'static, report::output::Outputs> {
    OUTPUTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Stages `bytes` as the output `flag` names, written at the end of a successful run.
fn stage(flag: &str, path: &Path, bytes: &[u8]) -> Result<()> {
    let ready = report::output::Staged::bytes(path, bytes)?;
    outputs().add(flag, ready);
    Ok(())
}

/// Stages an SVG drawn by `draw` as `flag`'s output.
fn stage_svg(
    flag: &str,
    path: &Path,
    draw: impl FnOnce(&mut String) -> Result<(), String>,
) -> Result<()> {
    let mut svg = String::new();
    draw(&mut svg).map_err(|e| anyhow!("{flag} {}: {e}", path.display()))?;
    // Control characters a name brought in are no XML: written escaped, as in every report.
    stage(flag, path, &report::output::escape_controls(svg.as_bytes()))
}

/// Where a report goes: stdout, or a file written whole or not at all.
enum Out {
    Stdout(report::output::Stdout),
    File(report::output::Staged),
}

impl Write for Out {
    /// Control characters a name brought in (an escape sequence in a job or topology name, a
    /// carriage return in a price source) are written escaped, as `\u{1b}`: a report never
    /// drives the terminal it is read on. Reports hold no control characters of their own but
    /// newlines and tabs.
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let escaped = report::output::escape_controls(buf);
        match self {
            Out::Stdout(w) => w.write_all(&escaped)?,
            Out::File(w) => w.write_all(&escaped)?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Out::Stdout(w) => w.flush(),
            Out::File(w) => w.flush(),
        }
    }
}

impl Out {
    /// Flushes the report; a file is complete, and moved into place with the run's others.
    fn finish(self) -> Result<()> {
        match self {
            Out::Stdout(mut w) => Ok(w.flush()?),
            Out::File(f) => {
                let ready = f.finish()?;
                outputs().add("-o", ready);
                Ok(())
            }
        }
    }
}

fn open_output(path: Option<&Path>) -> Result<Out> {
    Ok(match path {
        Some(p) => Out::File(report::output::Staged::create(p)?),
        None => Out::Stdout(report::output::Stdout::new()),
    })
}

/// `--nodes n` within what collsim builds.
fn check_nodes(n: usize) -> Result<()> {
    if n == 0 {
        bail_usage!("--nodes 0: need at least one node");
    }
    if n > config::MAX_NODES {
        bail_usage!(
            "--nodes {n}: at most {} (and at most {} GPUs in all: a larger cluster's simulation does not keep to 10 s and 2 GB)",
            config::MAX_NODES,
            config::MAX_RANKS
        );
    }
    Ok(())
}

fn parse_size(flag: &str, s: &str) -> Result<Bytes> {
    let b = Bytes::parse_cli(s).map_err(|e| usage(format!("{flag} {s}: {e}")))?;
    let max = collsim::workload::sweep::MAX_CALL_BYTES;
    if b > max {
        bail_usage!("{flag} {s}: larger than {max}, more than any GPU holds");
    }
    Ok(b)
}

/// Applies the cluster flags to a scenario (or builds one from them).
fn apply_common(base: Option<Scenario>, c: &Common) -> Result<Scenario> {
    // The flags' NCCL settings together, before any file's: a bad value or two that do not go
    // together is a usage error naming the flag.
    let mut flagged: Vec<(String, String)> = Vec::new();
    for kv in &c.nccl {
        let (k, v) = NcclEnv::split_pair(kv).map_err(usage)?;
        NcclEnv::from_pairs([(k.as_str(), v.as_str())])
            .map_err(|e| usage(format!("--nccl {e}")))?;
        flagged.retain(|(key, _)| *key != k);
        flagged.push((k, v));
    }
    if let Some(v) = &c.nccl_version {
        NcclEnv::from_pairs([("version", v.as_str())])
            .map_err(|e| usage(format!("--nccl-version {v:?}: {}", e.reason)))?;
    }
    NcclEnv::from_pairs(flagged.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .map_err(|e| usage(format!("--nccl {e}")))?;
    let topology_flag = |t: &str| {
        config::resolve_topology(t, None).map_err(|e| {
            // A name that is neither a file nor a preset is the flag's fault; a file that does
            // not read is the file's.
            if std::path::Path::new(t).exists() {
                anyhow!(e)
            } else {
                usage(format!("--topology {e}"))
            }
        })
    };
    let mut s = match (base, &c.topology) {
        (Some(mut s), Some(t)) => {
            let (src, node) = topology_flag(t)?;
            s.topology = src;
            s.gpus_per_node = s.gpus_per_node.min(node.gpu.count);
            s.node = node;
            recarry(&mut s, &format!("--topology {t}"))?;
            s
        }
        (Some(s), None) => s,
        (None, Some(t)) => {
            let (topology, node) = topology_flag(t)?;
            let sweep = SweepSpec {
                collective: Collective::AllReduce,
                min_bytes: Bytes::new(8),
                max_bytes: Bytes::from_gib(8),
                factor: 2,
                dtype: DataType::Float,
                op: ReduceOp::Sum,
            };
            Scenario {
                topology,
                gpus_per_node: node.gpu.count,
                gpus_per_process: 1,
                node,
                nodes: 1,
                workload: config::Workload::Sweep(sweep),
                nccl: Vec::new(),
                nccl_at: Default::default(),
                placement: config::PlacementSpec::default(),
                jobs: Vec::new(),
                background: Vec::new(),
            }
        }
        (None, None) => bail_usage!(
            "no scenario file and no --topology: give one (try `collsim simulate scenarios/quickstart.toml`)"
        ),
    };
    if !s.jobs.is_empty() {
        let flags = [
            ("--topology", c.topology.is_some()),
            ("--nodes", c.nodes.is_some()),
            ("--gpus-per-node", c.gpus_per_node.is_some()),
        ];
        if let Some((f, _)) = flags.iter().find(|f| f.1) {
            bail_usage!(
                "{f}: the scenario's [[job]] tables place each job on its cluster's nodes; change [cluster] and the jobs in the file"
            );
        }
    }
    if let Some(n) = c.nodes {
        check_nodes(n)?;
        s.nodes = n;
    }
    match c.gpus_per_node {
        Some(0) => bail_usage!("--gpus-per-node 0: need at least one GPU per node"),
        Some(g) if g > s.node.gpu.count => {
            bail_usage!("--gpus-per-node {g}: a {} node has {} GPUs", s.node.name, s.node.gpu.count)
        }
        Some(g) => s.gpus_per_node = g,
        None => {}
    }
    if c.nodes.is_some() || c.gpus_per_node.is_some() {
        collsim::check_ranks(s.nodes, s.gpus_per_node)
            .map_err(|e| usage(format!("--nodes {}: {e}", s.nodes)))?;
    }
    if let Some(g) = c.gpus_per_process {
        if g == 0 || s.gpus_per_node % g != 0 {
            bail_usage!(
                "--gpus-per-process {g}: must divide the {} GPUs used per node (a process drives GPUs of one node)",
                s.gpus_per_node
            );
        }
        s.gpus_per_process = g;
    } else if s.gpus_per_node % s.gpus_per_process != 0 {
        bail_usage!(
            "--gpus-per-node {}: the scenario's cluster.gpus_per_process {} does not divide it",
            s.gpus_per_node,
            s.gpus_per_process
        );
    }
    if s.gpus_per_process > 1 && matches!(s.workload, config::Workload::Ddp(_)) {
        bail!("--gpus-per-process {}: PyTorch DDP runs one process per GPU", s.gpus_per_process);
    }
    let any_flag = !flagged.is_empty() || c.nccl_version.is_some();
    for (k, v) in flagged {
        // The command line wins over every job's own [job.nccl] too.
        for j in &mut s.jobs {
            j.nccl.retain(|(key, _)| *key != k);
        }
        s.nccl.retain(|(key, _)| *key != k);
        s.nccl_at.remove(&k);
        s.nccl.push((k, v));
    }
    if let Some(v) = &c.nccl_version {
        s.nccl.retain(|(key, _)| key != "version");
        s.nccl_at.remove("version");
        s.nccl.push(("version".into(), v.clone()));
    }
    // Reject bad values now and list the variables the model does not use. The file's own
    // values were checked together when it was read: a clash here involves a flag.
    let env =
        NcclEnv::from_pairs(s.nccl.iter().map(|(k, v)| (k.as_str(), v.as_str()))).map_err(|e| {
            match s.nccl_at.get(&e.key) {
                Some(at) if any_flag => anyhow!("{at}: nccl.{e} (with the --nccl flags)"),
                Some(at) => anyhow!("{at}: nccl.{e}"),
                None => anyhow!("--nccl {e}"),
            }
        })?;
    // Once a run: a sweep applies the flags at every point.
    static WARNED: std::sync::Once = std::sync::Once::new();
    // Each job's own variables too (they were taken without a word).
    let mut job_lines = Vec::new();
    for j in &s.jobs {
        let own = NcclEnv::from_pairs(j.nccl.iter().map(|(k, v)| (k.as_str(), v.as_str())))?;
        let name = &j.name;
        job_lines
            .extend(ignored_lines(&own.ignored).into_iter().map(|l| format!("job {name:?}: {l}")));
    }
    WARNED.call_once(|| {
        for line in ignored_lines(&env.ignored).into_iter().chain(job_lines) {
            say(line);
        }
    });
    Ok(s)
}

/// An error the built cluster raises about an NCCL variable (NCCL_ALGO leaving only algorithms
/// NCCL would refuse here), put on the scenario line that set it.
fn blame_nccl(e: collsim::Error, at: &std::collections::BTreeMap<String, String>) -> anyhow::Error {
    use collsim::workload::sweep::SweepError;
    match (&e, at.get("NCCL_ALGO")) {
        (collsim::Error::Sweep(SweepError::Impossible(..) | SweepError::NoRing(_)), Some(at)) => {
            anyhow!("{at}: nccl.{e}")
        }
        // Not from the file: from the command line.
        (collsim::Error::Sweep(SweepError::Impossible(..) | SweepError::NoRing(_)), None) => {
            anyhow!("--nccl {e}")
        }
        _ => e.into(),
    }
}

/// The warnings for NCCL variables the model does not use: one a variable up to
/// [`MAX_WARNINGS`], then one line counting the rest.
fn ignored_lines(ignored: &[String]) -> Vec<String> {
    let mut out: Vec<String> = ignored
        .iter()
        .take(MAX_WARNINGS)
        .map(|k| format!("ignoring {} (not used by the model)", clip(k)))
        .collect();
    if ignored.len() > MAX_WARNINGS {
        out.push(format!(
            "ignoring {} more NCCL variables the model does not use",
            ignored.len() - MAX_WARNINGS
        ));
    }
    out
}

/// A message cut in the middle when it echoes a huge input value: its start (file, line,
/// field) and its end (what is wrong) are kept, and the line stays readable.
fn shorten(msg: &str) -> String {
    const HEAD: usize = 300;
    const TAIL: usize = 200;
    let chars = msg.chars().count();
    if chars <= HEAD + TAIL + 100 {
        return msg.to_string();
    }
    let head: String = msg.chars().take(HEAD).collect();
    let tail: String = msg.chars().skip(chars - TAIL).collect();
    format!("{head}… ({} characters cut) …{tail}", chars - HEAD - TAIL)
}

/// `msg` on one line: control characters a path or a value brought in (a newline in a file
/// name) written as escapes, so that an error or a warning stays the one line it is meant to be.
fn one_line(msg: &str) -> String {
    if !msg.chars().any(|c| c.is_control() && c != '\t') {
        return msg.to_string();
    }
    msg.chars()
        .map(
            |c| {
                if c.is_control() && c != '\t' {
                    c.escape_default().collect()
                } else {
                    c.to_string()
                }
            },
        )
        .collect()
}

/// `eprintln!` with control characters escaped ([`one_line`]): a warning quotes names from the
/// user's files.
macro_rules! eprint_line {
    ($($arg:tt)*) => {
        eprintln!("{}", one_line(&format!($($arg)*)))
    };
}

/// Prints `msg` on stderr as one line of collsim's ([`one_line`]).
fn say(msg: String) {
    eprintln!("collsim: {}", one_line(&msg));
}

/// The most warnings of one kind printed one a line.
const MAX_WARNINGS: usize = 10;

/// `text` cut to its first 80 characters (with how many more there were), for echoing input
/// in a message.
fn clip(text: &str) -> String {
    const KEEP: usize = 80;
    match text.char_indices().nth(KEEP) {
        Some((at, _)) => {
            format!("{}… ({} more characters)", &text[..at], text[at..].chars().count())
        }
        None => text.to_string(),
    }
}

/// A progress bar on stderr for runs that take a while: drawn only when stderr is a terminal
/// and once the run has gone on for a second; stdout is never touched.
struct Progress {
    bar: indicatif::ProgressBar,
    start: std::time::Instant,
    terminal: bool,
    shown: std::sync::atomic::AtomicBool,
}

impl Progress {
    fn new(len: u64, what: &str) -> Progress {
        use std::io::IsTerminal;
        let bar = indicatif::ProgressBar::hidden();
        bar.set_length(len);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{msg} [{elapsed_precise}] {wide_bar} {pos}/{len}",
        ) {
            bar.set_style(style);
        }
        bar.set_message(what.to_string());
        Progress {
            bar,
            start: std::time::Instant::now(),
            terminal: std::io::stderr().is_terminal(),
            shown: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn tick(&self) {
        use std::sync::atomic::Ordering;
        self.bar.inc(1);
        if self.terminal
            && self.start.elapsed() > std::time::Duration::from_secs(1)
            && !self.shown.swap(true, Ordering::Relaxed)
        {
            self.bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
        }
    }
}

/// A spinner on stderr, when it is a terminal, for work whose length is not known ahead
/// (calibrate's fit); hidden otherwise. Clear it with `finish_and_clear`.
fn spinner(what: &str) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let s = indicatif::ProgressBar::new_spinner();
    s.set_message(what.to_string());
    s.enable_steady_tick(std::time::Duration::from_millis(120));
    s
}

/// Ticks a progress bar when it goes out of scope (whichever way a closure returns).
struct TickOnDrop<'a>(&'a Progress);

impl Drop for TickOnDrop<'_> {
    fn drop(&mut self) {
        self.0.tick();
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}

fn mode(m: ModeArg) -> Mode {
    match m {
        ModeArg::Auto => Mode::Auto,
        ModeArg::Aggregated => Mode::Aggregated,
        ModeArg::Detailed => Mode::Detailed,
    }
}

/// The scenario a log ran on: `s` with what the log says as defaults — nodes and GPUs per node
/// from its "Using devices" block (its distinct hosts), the GPU variant it names, the GPUs per
/// process of its header, its NCCL release and the NCCL_* variables NCCL reports. Flags win,
/// with a one-line warning where they disagree; every default taken is noted on stderr.
fn log_scenario(
    s: &Scenario,
    common: &Common,
    name: &str,
    test: &nccl_log::LogTest,
    layout_from_flags: bool,
    notes: bool,
) -> Result<Scenario> {
    // Notes say which default came from the log; warnings (flags that disagree) always print.
    let note = |m: String| {
        if notes {
            eprint_line!("{m}");
        }
    };
    let mut own = s.clone();
    let setup = &test.setup;
    // Layout: the ranks and hosts of the "Using devices" block.
    if let Some((ranks, hosts)) = test.layout() {
        let flags = layout_from_flags && (common.nodes.is_some() || common.gpus_per_node.is_some());
        if ranks != s.nodes * s.gpus_per_node || hosts != s.nodes {
            if flags {
                eprint_line!(
                    "collsim: warning: {name} lists {ranks} ranks on {hosts} host(s); using {} nodes x {} GPUs as the flags say",
                    s.nodes,
                    s.gpus_per_node
                );
            } else {
                let gpn = ranks / hosts;
                if gpn * hosts != ranks || gpn > s.node.gpu.count {
                    bail!(
                        "{name}: {ranks} ranks on {hosts} host(s) do not fit {} nodes of {} GPUs",
                        s.node.name,
                        s.node.gpu.count
                    );
                }
                own.nodes = hosts;
                own.gpus_per_node = gpn;
                if common.nodes.is_some() || common.gpus_per_node.is_some() {
                    // calibrate: the flags were given but each log keeps its own layout.
                    eprint_line!(
                        "collsim: warning: {name}: {ranks} ranks on {hosts} host(s): run on {hosts} nodes x {gpn} GPUs, as the log ran (calibrate takes each log's own layout, not --nodes/--gpus-per-node)"
                    );
                } else {
                    note(format!(
                        "collsim: {name}: {ranks} ranks on {hosts} host(s): {hosts} nodes x {gpn} GPUs (give --nodes/--gpus-per-node to override)"
                    ));
                }
            }
        }
    }
    // The GPU: a variant of the topology's own model (A100-SXM4-40GB on an 80 GB node) takes
    // its place; another kind of GPU is only noted.
    if let Some(gpu) = &setup.gpu_name {
        match collsim::hw::gpus::from_reported_name(gpu) {
            Some((model, _)) if model != own.node.gpu.model.name => {
                let library = config::gpu_library()?;
                match library.into_iter().find(|m| m.name == model) {
                    Some(m) if m.sm == own.node.gpu.model.sm => {
                        note(format!(
                            "collsim: {name}: the log's GPUs are {gpu}: {model} in place of the {}'s {}",
                            own.node.name, own.node.gpu.model.name
                        ));
                        own.node.gpu.model = m;
                    }
                    _ => eprint_line!(
                        "collsim: warning: {name}: the log's GPUs are {gpu}, the topology's {}",
                        own.node.gpu.model.name
                    ),
                }
            }
            _ => {}
        }
    }
    // Process layout: nccl-tests' nGpus.
    if let Some(g) = setup.gpus_per_process {
        match common.gpus_per_process {
            Some(f) if f != g => eprint_line!(
                "collsim: warning: {name} ran {g} GPU(s) per process; using {f} as --gpus-per-process says"
            ),
            Some(_) => {}
            None if own.gpus_per_node.is_multiple_of(g) => {
                if g > 1 {
                    note(format!(
                        "collsim: {name}: {g} GPUs per process (nccl-tests -g {g}; give --gpus-per-process to override)"
                    ));
                }
                own.gpus_per_process = g;
            }
            None => eprint_line!(
                "collsim: warning: {name} ran {g} GPUs per process, which does not divide {} GPUs per node; using 1",
                own.gpus_per_node
            ),
        }
    }
    // NCCL's release and the variables it says it read from the environment.
    if let Some(v) = &setup.nccl_version {
        let flag = common.nccl_version.is_some() || own.nccl.iter().any(|(k, _)| k == "version");
        match collsim::comm::tuning::NcclVersion::parse(v) {
            _ if flag => {}
            Some(_) => own.nccl.push(("version".into(), v.clone())),
            None => eprint_line!(
                "collsim: {name}: NCCL {v}: no cost-model tables for it; using NCCL 2.30's"
            ),
        }
    }
    let mut taken = Vec::new();
    for (k, v) in &setup.env {
        match own.nccl.iter().find(|(key, _)| key == k) {
            Some((_, given)) if given != v => {
                say(format!("warning: {name} ran with {k}={v}; using {k}={given} as given"))
            }
            Some(_) => {}
            None => {
                let mut trial = own.nccl.clone();
                trial.push((k.clone(), v.clone()));
                match NcclEnv::from_pairs(trial.iter().map(|(k, v)| (k.as_str(), v.as_str()))) {
                    Ok(env) if env.ignored.contains(k) => {}
                    Ok(_) => {
                        own.nccl = trial;
                        taken.push(format!("{k}={v}"));
                    }
                    Err(e) => say(format!("warning: {name}: {e}; left out")),
                }
            }
        }
    }
    if !taken.is_empty() {
        note(format!("collsim: {name}: the log's NCCL environment: {}", taken.join(" ")));
    }
    Ok(own)
}

/// The topology to use for `test` when none is given: the preset of the GPU its log names.
fn log_topology(name: &str, test: &nccl_log::LogTest, what: &str) -> Result<String> {
    let gpu = test.setup.gpu_name.as_deref().ok_or_else(|| {
        anyhow!("{what} needs --topology: {name} names no GPU (a preset name or a topology TOML)")
    })?;
    let (_, preset) = collsim::hw::gpus::from_reported_name(gpu).ok_or_else(|| {
        anyhow!("{what} needs --topology: {name}'s GPUs are {gpu}, which no preset has (a preset name or a topology TOML)")
    })?;
    eprint_line!(
        "collsim: {name}: topology {preset}, the preset for its {gpu} GPUs (give --topology to override)"
    );
    Ok(preset.to_string())
}

/// Fits the model's physical parameters (`fit`: a `--fit` list, or None for every one the data
/// determines), then a size-band correction on what is left, on the logs marked fit (for the
/// scenario `s`, or the one each log lists); checks the result on the others; prints the errors
/// of the base model, of the fitted parameters and of the whole calibration; and writes the
/// profile (`-o`, else stdout; the report then goes to stderr). Logs marked `None` are split
/// here: those at another GPU count than the first log are held out, and among the others every
/// second one.
fn calibrate_logs(
    s: &Scenario,
    common: &Common,
    logs: &[(PathBuf, Option<String>, Option<bool>)],
    fit_list: Option<&str>,
    factors: bool,
) -> Result<()> {
    use collsim::calibrate::pipeline::{self, LogInput};
    let (base_name, base_text) = profile_source(common.profile.as_deref())?;
    // The base profile's errors come first, before any log is read.
    config::parse_profile(&base_name, &base_text)?;
    // A log fitted and checked (or given twice) would report its fit error as held out.
    for (i, (path, coll, _)) in logs.iter().enumerate() {
        let same = |p: &PathBuf| match (std::fs::canonicalize(p), std::fs::canonicalize(path)) {
            (Ok(a), Ok(b)) => a == b,
            _ => p == path,
        };
        if logs[..i].iter().any(|(p, c, _)| same(p) && c == coll) {
            let at = coll.as_ref().map_or(String::new(), |c| format!("@{c}"));
            bail_usage!(
                "{}{at}: given twice (a log is fitted or checked, not both; a check on the fitted data is no held-out error)",
                path.display()
            );
        }
    }
    let mut inputs = Vec::new();
    for (path, coll, is_fit) in logs {
        let (test, c) = read_log(path, coll.as_deref(), Some(s))?;
        let name = match coll {
            Some(c) => format!("{}@{c}", path.display()),
            None => path.display().to_string(),
        };
        // Each log runs on its own layout: calibration may mix GPU counts.
        let scenario = log_scenario(s, common, &name, &test, false, true)?;
        inputs.push(LogInput { name, test, coll: c, is_fit: *is_fit, scenario });
    }
    let fitting = spinner("calibrating (simulating every log size for each trial)");
    let c = pipeline::calibrate(
        s,
        &base_name,
        &base_text,
        inputs,
        fit_list,
        factors,
        mode(common.mode),
    )
    .map_err(|e| anyhow!(e));
    fitting.finish_and_clear();
    let c = c?;
    for w in &c.warnings {
        say(format!("warning: {w}"));
    }
    let report = report::calibration::text(&c);
    match common.output.as_deref() {
        Some(p) => {
            stage("-o", p, c.profile.as_bytes())?;
            let mut out = report::output::Stdout::new();
            write!(out, "{report}\nprofile written to {}\n", p.display())?;
            out.flush()?;
        }
        None => {
            eprint!("{report}");
            let mut out = report::output::Stdout::new();
            out.write_all(c.profile.as_bytes())?;
            out.flush()?;
        }
    }
    Ok(())
}

/// Why a training step's model does not fit its GPU's memory, if it does not.
fn misfit_warning(
    s: &Scenario,
    spec: &collsim::workload::ddp::DdpSpec,
    world: usize,
) -> Option<String> {
    // A model profile's measured memory, or the model's; none for a bare list of calls.
    let mem = collsim::workload::memory::known_memory(spec, world, s.gpus_per_node)?;
    let why = mem.misfit(s.node.gpu.model.memory.get() as f64, spec.memory_headroom)?;
    if spec.profile.is_some() {
        return Some(format!(
            "the profiled step does not fit a {} as its allocator measured it: {why}",
            s.node.gpu.model.name
        ));
    }
    Some(format!(
        "the model does not fit a {} under {} with {}: {why}",
        s.node.gpu.model.name,
        match (&spec.sharding, &spec.parallel) {
            (Some(_), _) => "FSDP",
            (None, Some(_)) => "its 3-D layout",
            (None, None) => "plain DDP",
        },
        spec.optimizer.name()
    ))
}

/// What one point of a `--sweep` ran: a DDP step, its memory per GPU (and why its model does
/// not fit, if it does not), or an nccl-tests-like sweep's rows.
enum PointRun {
    Step(
        Box<collsim::workload::ddp::StepResult>,
        Option<Box<collsim::workload::memory::DdpMemory>>,
        Option<String>,
    ),
    Rows(Vec<collsim::workload::sweep::Row>),
}

/// The file a swept key edits.
#[derive(Clone, Copy, PartialEq)]
enum SweepFile {
    Scenario,
    Topology,
    Profile,
}

/// Which file a swept key (`ddp.X` and the like already made `workload.ddp.X`) edits, and the
/// key there:
/// `topology.KEY` the scenario's topology, `profile.KEY` the timing profile, anything else the
/// scenario.
fn sweep_target(key: &str) -> (SweepFile, &str) {
    if let Some(k) = key.strip_prefix("topology.") {
        (SweepFile::Topology, k)
    } else if let Some(k) = key.strip_prefix("profile.") {
        (SweepFile::Profile, k)
    } else {
        (SweepFile::Scenario, key)
    }
}

/// `simulate --sweep`: the scenario at every point of the cross product of the swept keys, run
/// in parallel, one row per point (or, for a collective sweep, per point and size) in the order
/// the values were given (the first key slowest). Keys edit the scenario, its topology
/// (`topology.nic.speed`) or the profile (`profile.bandwidth.net`).
fn simulate_sweep(
    scenario: Option<&Path>,
    common: &Common,
    flags: &SweepFlags,
    sweeps: &[String],
    format: SimFmt,
    plot: Option<&Path>,
) -> Result<()> {
    use rayon::prelude::*;
    let path = scenario.ok_or_else(|| usage("--sweep needs a scenario file"))?;
    let name = path.display().to_string();
    let text = config::load_text(path)?;
    let base = config::parse_scenario(&name, &text)?;
    if !base.jobs.is_empty() {
        bail_usage!("--sweep runs one job at a time; {name} has [[job]] tables");
    }
    let mut axes: Vec<(String, Vec<String>)> = Vec::new();
    for s in sweeps {
        let (k, v) = s.split_once('=').ok_or_else(|| {
            usage(format!("--sweep {s}: expected KEY=V1,V2,... (e.g. ddp.bucket_cap_mb=1,25)"))
        })?;
        // The workload's tables, short: `ddp.X` is `workload.ddp.X`.
        let short =
            ["ddp.", "fsdp.", "zero.", "parallel.", "model."].iter().any(|t| k.starts_with(t));
        let key = if short { format!("workload.{k}") } else { k.to_string() };
        if key.split('.').any(|p| p.trim().is_empty())
            || matches!(key.as_str(), "topology" | "profile")
        {
            bail_usage!("--sweep {s}: {k:?} is not a key (KEY is dotted, e.g. cluster.nodes)");
        }
        if key == "topology.gpu.count" {
            bail_usage!(
                "--sweep {s}: the node's GPU count sets the defaults the scenario was read with; sweep cluster.gpus_per_node, or give one topology file per count"
            );
        }
        // A flag sets its key at every point: the rows would be labelled with values that
        // never ran.
        let flag_keys = [
            ("--topology", "cluster.topology", common.topology.is_some()),
            ("--nodes", "cluster.nodes", common.nodes.is_some()),
            ("--gpus-per-node", "cluster.gpus_per_node", common.gpus_per_node.is_some()),
            ("--gpus-per-process", "cluster.gpus_per_process", common.gpus_per_process.is_some()),
            ("--nccl-version", "nccl.version", common.nccl_version.is_some()),
            ("--collective", "workload.collective", flags.collective.is_some()),
            ("--min-bytes", "workload.min_bytes", flags.min_bytes.is_some()),
            ("--max-bytes", "workload.max_bytes", flags.max_bytes.is_some()),
            ("--factor", "workload.factor", flags.factor.is_some()),
            ("--dtype", "workload.dtype", flags.dtype.is_some()),
            ("--op", "workload.op", flags.op.is_some()),
        ];
        if let Some((flag, _, _)) = flag_keys.iter().find(|(_, fk, given)| *given && *fk == key) {
            bail_usage!("--sweep {s}: {flag} sets {key} at every point; give one or the other");
        }
        if let Some(var) = key.strip_prefix("nccl.")
            && common.nccl.iter().any(|kv| kv.split_once('=').is_some_and(|(k, _)| k == var))
        {
            bail_usage!("--sweep {s}: --nccl sets {var} at every point; give one or the other");
        }
        let values: Vec<String> = v.split(',').map(|x| x.trim().to_string()).collect();
        if values.iter().all(String::is_empty) {
            bail_usage!("--sweep {s}: no values");
        }
        // An empty value was dropped, and with it the point the user meant by it.
        if let Some(i) = values.iter().position(String::is_empty) {
            bail_usage!("--sweep {s}: value {} is empty (a stray comma?)", i + 1);
        }
        // One axis per key: a second would set the key again, and the first axis' labels would
        // name values that never ran.
        if axes.iter().any(|(a, _)| *a == key) {
            bail_usage!("--sweep {s}: {k} is swept twice; give all its values in one --sweep");
        }
        if let Some(v) =
            values.iter().enumerate().find_map(|(i, v)| values[..i].contains(v).then_some(v))
        {
            bail_usage!("--sweep {s}: value {v} given twice");
        }
        axes.push((key, values));
    }
    let mut points: Vec<Vec<(String, String)>> = vec![Vec::new()];
    for (k, vs) in &axes {
        points = points
            .into_iter()
            .flat_map(|p| {
                vs.iter().map(move |v| {
                    let mut q = p.clone();
                    q.push((k.clone(), v.clone()));
                    q
                })
            })
            .collect();
    }
    let (profile_name, profile_text) = profile_source(common.profile.as_deref())?;
    let profile = config::parse_profile(&profile_name, &profile_text)?;
    if let Some(w) = collsim::profile_mismatch(&profile, &apply_common(Some(base), common)?) {
        say(format!("warning: {w}"));
    }
    let m = mode(common.mode);
    let progress = Progress::new(points.len() as u64, "points");
    let results: Vec<Result<PointRun>> = points
        .par_iter()
        .map(|point| {
            let _tick = TickOnDrop(&progress);
            let keys = |file: SweepFile| -> Vec<(String, String)> {
                point
                    .iter()
                    .filter_map(|(k, v)| {
                        let (f, key) = sweep_target(k);
                        (f == file).then(|| (key.to_string(), v.clone()))
                    })
                    .collect()
            };
            let edited = config::set_keys(&text, &keys(SweepFile::Scenario))
                .map_err(|e| anyhow!("{name}: {e}"))?;
            let s = config::parse_scenario(&name, &edited)?;
            let mut s = apply_common(Some(s), common)?;
            let topo_keys = keys(SweepFile::Topology);
            if !topo_keys.is_empty() {
                let (file, text) = config::topology_text(&s.topology)?;
                let edited =
                    config::set_keys(&text, &topo_keys).map_err(|e| anyhow!("{file}: {e}"))?;
                let node = config::parse_topology(&file, &edited)?;
                s.node = node;
                recarry(&mut s, "--sweep topology.*")?;
            }
            let prof_keys = keys(SweepFile::Profile);
            let edited_profile;
            let params = if prof_keys.is_empty() {
                &profile
            } else {
                let text = config::set_keys(&profile_text, &prof_keys)
                    .map_err(|e| anyhow!("{profile_name}: {e}"))?;
                edited_profile = config::parse_profile(&profile_name, &text)?;
                &edited_profile
            };
            if let Some(spec) = s.ddp() {
                if let Some(f) = flags.given().iter().find(|f| f.1) {
                    bail_usage!("{}: the scenario's workload is a training step, not a sweep", f.0);
                }
                let step = collsim::simulate_ddp(&s, params, m)?.0;
                let mem =
                    collsim::workload::memory::known_memory(spec, step.world, s.gpus_per_node);
                let misfit = misfit_warning(&s, spec, step.world);
                return Ok(PointRun::Step(Box::new(step), mem.map(Box::new), misfit));
            }
            apply_sweep_flags(&mut s, flags)?;
            Ok(PointRun::Rows(collsim::simulate(&s, params, m)?.0))
        })
        .collect();
    drop(progress);
    let mut steps = Vec::new();
    let mut sizes = Vec::new();
    for (p, r) in points.into_iter().zip(results) {
        let label = p.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ");
        // A parse error's line and column are in the file as edited for the point.
        let label = format!("--sweep point {label} (positions in the file with its values set)");
        match r.with_context(|| label)? {
            PointRun::Step(step, mem, misfit) => {
                if let Some(w) = misfit {
                    let at = p.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>();
                    say(format!("warning: at {}: {w}", at.join(" ")));
                }
                steps.push((p, *step, mem.map(|m| *m)))
            }
            PointRun::Rows(rows) => sizes.push((p, rows)),
        }
    }
    if !steps.is_empty() && !sizes.is_empty() {
        bail!("{name}: the swept values make some points DDP steps and others collective sweeps");
    }
    let mut out = open_output(common.output.as_deref())?;
    if sizes.is_empty() {
        match format {
            SimFmt::Table => report::ddp::sweep_table(&steps, &mut out)?,
            SimFmt::Json => report::sweep::ddp_json(&name, &steps, &mut out)?,
            SimFmt::Csv => report::sweep::ddp_csv(&steps, &mut out)?,
            SimFmt::Nccl => bail_usage!("--format nccl: a DDP sweep prints as table, json or csv"),
        }
    } else {
        if plot.is_some() {
            bail_usage!(
                "--plot with --sweep draws DDP steps; a collective sweep's rows go to --format csv or json"
            );
        }
        match format {
            SimFmt::Table => report::sweep::rows_table(&sizes, &mut out)?,
            SimFmt::Json => report::sweep::rows_json(&name, &sizes, &mut out)?,
            SimFmt::Csv => report::sweep::rows_csv(&sizes, &mut out)?,
            SimFmt::Nccl => {
                bail_usage!("--format nccl: a sweep over keys prints as table, json or csv")
            }
        }
    }
    out.finish()?;
    if let Some(p) = plot {
        stage_svg("--plot", p, |t| report::plot::sweep(&steps, t))?;
    }
    Ok(())
}

/// `calibrate --run`: runs collsim-bench on this machine's GPUs (built first if needed), then fits
/// its all_reduce results and checks them on its all_gather and reduce_scatter.
fn calibrate_run(
    launcher: Option<&str>,
    common: &Common,
    fit: Option<&str>,
    factors: bool,
) -> Result<()> {
    if !Path::new("/proc/driver/nvidia/version").exists() && !Path::new("/dev/nvidia0").exists() {
        bail!(
            "calibrate --run: no NVIDIA GPU on this machine (no NVIDIA driver); run it where the GPUs are, or fit logs you have with --from-log"
        );
    }
    let bench_dir = Path::new("calibration/bench");
    if !bench_dir.join("Makefile").exists() {
        bail!(
            "calibrate --run: calibration/bench not found here; run it from the root of a collsim checkout"
        );
    }
    let bench = bench_dir.join("build/collsim-bench");
    if !bench.exists() {
        let ok = std::process::Command::new("make")
            .arg("-C")
            .arg(bench_dir)
            .status()
            .context("calibrate --run: cannot run make")?
            .success();
        if !ok {
            bail!(
                "calibrate --run: building collsim-bench failed (see above; calibration/bench/README.md says what it needs)"
            );
        }
    }
    // Under a launcher the processes may run on other nodes: the output folder, where rank 0
    // leaves NCCL's unique id for them, must be one they share (the working directory).
    let dir = if launcher.is_some() { std::env::current_dir()? } else { std::env::temp_dir() };
    let out = dir.join(format!("collsim-calibrate-run-{}", std::process::id()));
    let sweep = ["-c", "all_reduce,all_gather,reduce_scatter", "-b", "8", "-e", "1G", "-f", "2"];
    let mut words: Vec<String> =
        launcher.map(|l| l.split_whitespace().map(String::from).collect()).unwrap_or_default();
    words.push(bench.display().to_string());
    words.extend(sweep.iter().map(|w| w.to_string()));
    words.push("-o".into());
    words.push(out.display().to_string());
    say(format!("running {}", words.join(" ")));
    // The bench's progress rows go to stderr: stdout is the report (or the profile).
    let progress = std::io::stderr().as_fd().try_clone_to_owned()?;
    let status = std::process::Command::new(&words[0])
        .args(&words[1..])
        .stdout(progress)
        .status()
        .with_context(|| format!("calibrate --run: cannot start {}", words[0]))?;
    match status.code() {
        Some(0) => {}
        Some(2) => bail!("calibrate --run: collsim-bench found no CUDA GPU (its message is above)"),
        _ => bail!("calibrate --run: collsim-bench failed ({status})"),
    }
    let results = out.join("results.txt");
    let mut c = common.clone();
    if c.topology.is_none() {
        // The machine as NCCL saw it.
        let xml = out.join("nccl_topo.xml");
        let source = xml.display().to_string();
        let imported = config::import::import_nccl_xml(&source, &config::load_text(&xml)?)?;
        check_imported(&source, &imported)?;
        let topo = out.join("topology.toml");
        std::fs::write(&topo, &imported.toml)
            .with_context(|| format!("{}: cannot write", topo.display()))?;
        say(format!("topology imported from NCCL's dump: {}", topo.display()));
        c.topology = Some(topo.display().to_string());
    }
    let s = apply_common(None, &c)?;
    let logs: Vec<(PathBuf, Option<String>, Option<bool>)> = vec![
        (results.clone(), Some("all_reduce".into()), Some(true)),
        (results.clone(), Some("all_gather".into()), Some(false)),
        (results, Some("reduce_scatter".into()), Some(false)),
    ];
    calibrate_logs(&s, &c, &logs, fit, factors)
}

/// Reads an nccl-tests log (text or -J JSON) and picks the test to compare: the one of
/// `collective` if given, else the first; returns it with the collective it measured.
fn read_log(
    log: &Path,
    collective: Option<&str>,
    s: Option<&Scenario>,
) -> Result<(nccl_log::LogTest, Collective)> {
    let log_name = log.display().to_string();
    let text = config::load_text(log)?;
    // nccl-tests' -J JSON (and collsim-bench's results.json) or its text output.
    let tests = if text.trim_start().starts_with('{') {
        nccl_log::parse_json(&text).map_err(|e| anyhow!("{log_name}: {e}"))?
    } else {
        nccl_log::parse(&text).map_err(|e| anyhow!("{log_name}:{}: {}", e.line, e.reason))?
    };
    if tests.is_empty() {
        bail!(
            "{log_name}: no nccl-tests result table found (expected rows of size, count, type, redop, root, time, algbw, busbw ...)"
        );
    }
    let wanted = match collective {
        Some(c) => Some(
            Collective::parse(c).ok_or_else(|| anyhow!("--collective {c}: unknown collective"))?,
        ),
        None => None,
    };
    let test = match wanted {
        Some(w) => tests
            .iter()
            .find(|t| t.collective == Some(w))
            .or_else(|| tests.iter().find(|t| t.collective.is_none()))
            .ok_or_else(|| anyhow!("{log_name}: no {} test in the log", w.name()))?,
        None => &tests[0],
    };
    let coll = match wanted.or(test.collective) {
        Some(c) => c,
        None => {
            // nccl-tests prints per-rank counts for all_gather and reduce_scatter:
            // size = count x element size x ranks. Refuse to guess those as all_reduce.
            // The ranks the log lists, else those of the scenario.
            let nranks =
                test.layout().map(|(r, _)| r).or(s.map(|s| s.nodes * s.gpus_per_node)).unwrap_or(1)
                    as u64;
            let per_rank = nranks > 1
                && test.rows.iter().all(|r| {
                    DataType::parse(&r.dtype)
                        .is_some_and(|d| r.size_bytes == r.count * d.size() * nranks)
                });
            if per_rank {
                bail!(
                    "{log_name}: no collective named in the log, and its counts are per rank (size = count x {nranks} ranks), as all_gather and reduce_scatter print them; pass --collective"
                );
            }
            say(format!("{log_name}: no collective named in the log; assuming all_reduce"));
            Collective::AllReduce
        }
    };
    // All-reduce, broadcast, reduce and sendrecv count the whole message; the others per rank.
    let whole = matches!(
        coll,
        Collective::AllReduce | Collective::Broadcast | Collective::Reduce | Collective::SendRecv
    );
    if let Some(r) = test.rows.first()
        && let Some(d) = DataType::parse(&r.dtype)
        && whole
        && r.count.checked_mul(d.size()) != Some(r.size_bytes)
    {
        bail!(
            "{log_name}: {} rows count the whole message (size = count x {} bytes of {}), but size {} has count {}: per-rank counts, as all_gather, reduce_scatter and alltoall print them; pass the right --collective",
            coll.name(),
            d.size(),
            r.dtype,
            r.size_bytes,
            r.count
        );
    }
    Ok((test.clone(), coll))
}

/// The files a command reads, and those it writes with the flag that names each.
fn io_paths(command: &Command) -> (Vec<PathBuf>, Vec<(&'static str, PathBuf)>) {
    let mut ins: Vec<PathBuf> = Vec::new();
    let mut outs: Vec<(&'static str, Option<PathBuf>)> = Vec::new();
    let common = |c: &Common, ins: &mut Vec<PathBuf>| {
        ins.extend(c.profile.clone());
        ins.extend(c.topology.as_ref().map(PathBuf::from).filter(|p| p.is_file()));
    };
    match command {
        Command::Simulate(a) => {
            ins.extend(a.scenario.iter().chain(&a.workload_trace).cloned());
            common(&a.common, &mut ins);
            outs.extend([
                ("-o", a.common.output.clone()),
                ("--trace", a.trace.clone()),
                ("--plot", a.plot.clone()),
                ("--export-calls", a.export_calls.clone()),
            ]);
        }
        Command::Explain(a) => {
            common(&a.common, &mut ins);
            outs.push(("-o", a.common.output.clone()));
        }
        Command::Calibrate(a) => {
            ins.extend(a.from_log.iter().chain(&a.check_log).cloned());
            common(&a.common, &mut ins);
            outs.push(("-o", a.common.output.clone()));
        }
        Command::Validate(a) => {
            ins.extend(a.log.iter().chain(&a.manifest).cloned());
            common(&a.common, &mut ins);
            outs.extend([("-o", a.common.output.clone()), ("--plot", a.plot.clone())]);
        }
        Command::Topo { command: TopoCommand::Show { topology, output, .. } } => {
            ins.extend(Some(PathBuf::from(topology)).filter(|p| p.is_file()));
            outs.push(("-o", output.clone()));
        }
        Command::Topo { command: TopoCommand::Import { nccl_xml, nvidia_smi, output } } => {
            ins.extend(nccl_xml.iter().chain(nvidia_smi).cloned());
            outs.push(("-o", output.clone()));
        }
        Command::Completions { .. } => {}
        Command::Profile(a) => {
            ins.push(a.trace.clone());
            outs.push(("-o", a.output.clone()));
        }
        Command::Plan(a) => match &a.command {
            Some(PlanCommand::Merge { results, out, output }) => {
                ins.extend(results.iter().cloned());
                outs.extend([("-o", output.clone()), ("--plot", out.plot.clone())]);
            }
            None => {
                ins.extend(a.plan.iter().chain(&a.profile).cloned());
                // A shard's -o is its own results file, which it appends to.
                if a.shard.is_none() {
                    outs.push(("-o", a.output.clone()));
                }
                outs.push(("--plot", a.out.plot.clone()));
            }
        },
    }
    (ins, outs.into_iter().filter_map(|(f, p)| Some((f, p?))).collect())
}

fn run(cli: Cli) -> Result<()> {
    let (ins, outs) = io_paths(&cli.command);
    let outs: Vec<(&str, &Path)> = outs.iter().map(|(f, p)| (*f, p.as_path())).collect();
    report::output::check_paths(&ins, &outs).map_err(usage)?;
    match cli.command {
        Command::Simulate(args) => simulate(args)?,
        Command::Topo { command } => topo(command)?,
        Command::Explain(args) => explain(args)?,
        Command::Calibrate(args) => calibrate(args)?,
        Command::Validate(args) => validate(args)?,
        Command::Plan(args) => plan(args)?,
        Command::Profile(args) => profile(args)?,
        Command::Completions { shell } => {
            use clap::CommandFactory;
            // Generated whole first: clap_complete panics on a failed write.
            let mut text = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "collsim", &mut text);
            let mut out = report::output::Stdout::new();
            out.write_all(&text)?;
            out.flush()?;
        }
    }
    Ok(())
}

/// Carries a model profile's step to the GPU the scenario's cluster has now (after `--topology`
/// or a topology sweep changed it); `what` names what changed it in errors.
fn recarry(s: &mut Scenario, what: &str) -> Result<()> {
    if let config::Workload::Ddp(spec) = &mut s.workload {
        collsim::workload::compute::rederive(spec, s.node.gpu.model.sm);
    }
    if let config::Workload::Ddp(spec) = &mut s.workload
        && let Some(p) = &spec.profile
    {
        let (name, calls) = p
            .replay(&s.node.gpu.model)
            .map_err(|(_, e)| anyhow!("{what}: workload.profile {}: {e}", p.path))?;
        spec.model.name = name;
        spec.calls = Some(calls);
    }
    Ok(())
}

/// `collsim profile`.
fn profile(args: ProfileArgs) -> Result<()> {
    use collsim::workload::profile::{self, Class};
    for (flag, v) in [("--micro-batch", args.micro_batch), ("--sequence", args.sequence)] {
        match v {
            Some(0) => bail_usage!("{flag} 0: at least 1"),
            Some(n) if n > profile::MAX_SHAPE => {
                bail_usage!("{flag} {n}: at most {}", profile::MAX_SHAPE)
            }
            _ => {}
        }
    }
    let name = args.trace.display().to_string();
    let bytes = config::load_bytes(&args.trace)?;
    let text = std::str::from_utf8(&bytes).map_err(|e| {
        anyhow!("{name}: not a PyTorch profiler trace (not UTF-8 at byte {})", e.valid_up_to())
    })?;
    let library = config::gpu_library()?;
    let memory = match &args.memory {
        Some(path) => {
            let file = path.display().to_string();
            let text = config::load_text(path)?;
            Some(profile::Memory::read_steps(&file, &text).map_err(|e| anyhow!(e))?)
        }
        None => None,
    };
    let opts = profile::Options {
        gpu: args.gpu.clone(),
        micro_batch: args.micro_batch,
        sequence: args.sequence,
        memory,
    };
    let p = profile::from_trace(&name, text, &library, &opts).map_err(|e| anyhow!(e))?;
    let body = p.to_toml().map_err(|e| anyhow!(e))?;
    // What a scenario will read back, checked before it is written.
    profile::ModelProfile::read(&name, &body).map_err(|e| anyhow!(e))?;
    let mut w = open_output(args.output.as_deref())?;
    w.write_all(body.as_bytes())?;
    w.finish()?;
    let mut e = String::new();
    let shape = match (p.micro_batch, p.sequence) {
        (Some(b), Some(s)) => format!("{b} x {s} tokens"),
        _ => "micro-batch and sequence unknown".to_string(),
    };
    e.push_str(&format!(
        "{name}: {} ({}), {}, {shape}; traced step {:.3} ms, GPU busy {:.3} ms, host's launches over {:.3} ms\n",
        if p.device.is_empty() { "an unnamed GPU" } else { &p.device }, p.gpu, p.precision, p.traced_step_ms, p.gpu_busy_ms, p.host_span_ms
    ));
    e.push_str(&format!(
        "{:<10} {:<12} {:>7} {:>10} {:>8} {:>8} {:>8} {:>8}\n",
        "phase", "class", "kernels", "time ms", "TFLOP", "of peak", "GB", "of bw"
    ));
    let opt = |x: Option<f64>, pct: bool| match x {
        Some(x) if pct => format!("{:.1} %", x * 100.0),
        Some(x) => format!("{x:.3}"),
        None => "-".to_string(),
    };
    for s in &p.summary {
        e.push_str(&format!(
            "{:<10} {:<12} {:>7} {:>10.3} {:>8} {:>8} {:>8} {:>8}\n",
            s.phase.name(),
            s.class.name(),
            s.kernels,
            s.time_ms,
            opt(s.tflop, false),
            opt(s.fraction_of_peak, true),
            opt(s.gbytes, false),
            opt(s.fraction_of_bandwidth, true),
        ));
    }
    // Per layer: the forward's and backward's repeated blocks.
    for b in &p.blocks {
        let mut classes: Vec<(&String, &f64)> = b.by_class.iter().collect();
        classes.sort_by(|x, y| y.1.total_cmp(x.1).then(x.0.cmp(y.0)));
        let classes =
            classes.iter().map(|(c, ms)| format!("{c} {ms:.3}")).collect::<Vec<_>>().join(", ");
        e.push_str(&format!(
            "{:<10} {} repeated blocks (layers) of {} kernels: {:.3} ms each ({classes}; {:.3} to {:.3}), {:.3} ms outside them\n",
            b.phase.name(),
            b.count,
            b.kernels,
            b.time_ms,
            b.min_ms,
            b.max_ms,
            b.outside_ms
        ));
    }
    // An empty sum is -0.
    let host = 0.0
        + p.step
            .iter()
            .filter_map(|x| match x {
                profile::Entry::Kernels { compute_us, class: Class::Host, .. } => Some(*compute_us),
                _ => None,
            })
            .sum::<f64>();
    e.push_str(&format!(
        "host gaps kept as time: {:.3} ms; {} collectives; {} entries{}\n",
        host / 1e3,
        p.collectives(),
        p.step.len(),
        args.output.as_ref().map(|o| format!(" written to {}", o.display())).unwrap_or_default()
    ));
    if !p.shapes {
        e.push_str("warning: the trace recorded no shapes (record_shapes=True): nothing in it will scale with micro-batch or sequence\n");
    }
    eprint!("{e}");
    Ok(())
}

/// `collsim simulate`.
fn simulate(
    SimulateArgs {
        scenario,
        common,
        collective,
        min_bytes,
        max_bytes,
        factor,
        dtype,
        op,
        format,
        trace,
        plot,
        sweep,
        export_calls,
        workload_trace,
    }: SimulateArgs,
) -> Result<()> {
    if !sweep.is_empty() {
        if export_calls.is_some() {
            bail_usage!("--export-calls writes one step; a --sweep runs many");
        }
        if workload_trace.is_some() {
            bail_usage!("--workload-trace replays one step; it does not take --sweep");
        }
        if trace.is_some() {
            bail_usage!(
                "--trace draws one DDP step; a --sweep runs many (simulate one point without --sweep to trace it)"
            );
        }
        let flags = SweepFlags { collective, min_bytes, max_bytes, factor, dtype, op };
        return simulate_sweep(
            scenario.as_deref(),
            &common,
            &flags,
            &sweep,
            format,
            plot.as_deref(),
        );
    }
    let base = match &scenario {
        Some(p) => Some(config::parse_scenario(&p.display().to_string(), &config::load_text(p)?)?),
        None => None,
    };
    let mut s = apply_common(base, &common)?;
    // A step too long to report names the file its workload came from.
    let source = workload_trace.as_ref().or(scenario.as_ref()).map(|p| p.display().to_string());
    let nccl_at = s.nccl_at.clone();
    let whose = |e: collsim::Error| match (&e, &source) {
        (collsim::Error::StepTooLong(m), Some(p)) => anyhow!("{p}: {m}"),
        // A job's error without a line of its own names the file at least.
        (collsim::Error::Ddp(m), Some(p))
            if m.starts_with("workload.") || m.starts_with("job ") =>
        {
            anyhow!("{p}: {m}")
        }
        _ => blame_nccl(e, &nccl_at),
    };
    if let Some(p) = &workload_trace {
        if !s.jobs.is_empty() {
            bail_usage!("--workload-trace: the scenario has [[job]] tables");
        }
        if s.ddp().is_some() {
            bail_usage!(
                "--workload-trace replaces the scenario's workload, and this one is a training step: give a scenario with only [cluster] (or none, with --topology)"
            );
        }
        if s.gpus_per_process > 1 {
            bail_usage!(
                "--workload-trace: a trace is one process per GPU (drop --gpus-per-process)"
            );
        }
        let step =
            collsim::workload::calls::read_step(&p.display().to_string(), &config::load_bytes(p)?)
                .map_err(|e| anyhow!("--workload-trace {e}"))?;
        for n in &step.notes {
            eprint_line!("warning: --workload-trace {n}");
        }
        let f = step.file;
        collsim::workload::calls::check(&f.calls)
            .map_err(|e| anyhow!("--workload-trace {}: {e}", p.display()))?;
        if !f.calls.iter().any(|c| matches!(c, collsim::workload::calls::Call::Nccl { .. })) {
            let why = if step.kind == "Kineto trace" {
                " (a one-GPU step may have none: FSDP2 issues none there)"
            } else {
                ""
            };
            eprint_line!(
                "warning: --workload-trace {}: no collectives in the trace{why}: the replay is its compute alone",
                p.display()
            );
        }
        let name = format!("{} {}", step.kind, p.display());
        s.workload =
            config::Workload::Ddp(Box::new(collsim::workload::ddp::DdpSpec::replay(name, f.calls)));
    }
    // The flags that shape a sweep, and those that draw a DDP step.
    let flags = SweepFlags { collective, min_bytes, max_bytes, factor, dtype, op };
    let sweep_flags = flags.given();
    let drawing = [
        ("--trace", trace.is_some()),
        ("--plot", plot.is_some()),
        ("--export-calls", export_calls.is_some()),
    ];
    if !s.jobs.is_empty() {
        if let Some(f) = sweep_flags.iter().chain(&drawing).find(|f| f.1) {
            bail_usage!(
                "{}: the scenario has [[job]] tables; set each job's workload in the file",
                f.0
            );
        }
        let profile = load_profile_for(common.profile.as_deref(), &s)?;
        let m = mode(common.mode);
        let progress = Progress::new(collsim::job_calls(&s), "jobs");
        let runs =
            collsim::simulate_jobs_with(&s, &profile, m, &|| progress.tick()).map_err(whose)?;
        drop(progress);
        let mut out = open_output(common.output.as_deref())?;
        match format {
            SimFmt::Table => report::jobs::table(&s, &runs, &profile, m, &mut out)?,
            SimFmt::Json => report::jobs::json(&s, &runs, &profile, m, &mut out)?,
            SimFmt::Nccl | SimFmt::Csv => {
                bail_usage!("--format: several jobs print as table or json")
            }
        }
        out.finish()?;
        return Ok(());
    }
    if let Some(spec) = s.ddp().cloned() {
        if let Some(f) = sweep_flags.iter().find(|f| f.1) {
            bail_usage!("{}: the scenario's workload is a training step, not a sweep", f.0);
        }
        let profile = load_profile_for(common.profile.as_deref(), &s)?;
        // What cannot be exported is refused before anything is printed.
        let exported = match &export_calls {
            Some(_) => Some(collsim::export_calls(&s, &profile, mode(common.mode))?),
            None => None,
        };
        let step = match trace {
            Some(_) => collsim::simulate_ddp_with_links,
            None => collsim::simulate_ddp,
        };
        let (r, _) = step(&s, &profile, mode(common.mode)).map_err(whose)?;
        if let Some(w) = misfit_warning(&s, &spec, r.world) {
            say(format!("warning: {w}"));
        }
        let mut out = open_output(common.output.as_deref())?;
        match format {
            SimFmt::Table => report::ddp::table(&s, &spec, &r, &mut out)?,
            SimFmt::Json => report::ddp::json(&s, &profile, &spec, &r, &mut out)?,
            SimFmt::Csv => {
                let mem = collsim::workload::memory::known_memory(&spec, r.world, s.gpus_per_node);
                report::sweep::ddp_csv(&[(Vec::new(), r.clone(), mem)], &mut out)?
            }
            SimFmt::Nccl => bail_usage!("--format nccl: a DDP step prints as table, json or csv"),
        }
        out.finish()?;
        if let Some(p) = trace {
            let mut f = Vec::new();
            report::trace::ddp_step(&r, &mut f)?;
            stage("--trace", &p, &f)?;
        }
        if let Some(p) = plot {
            stage_svg("--plot", &p, |t| {
                t.push_str(&report::gantt::ddp_step_svg(&r));
                Ok(())
            })?;
        }
        if let (Some(p), Some(calls)) = (export_calls, exported) {
            stage("--export-calls", &p, &serde_json::to_vec(&calls)?)?;
        }
        return Ok(());
    }
    if export_calls.is_some() {
        bail_usage!("--export-calls writes a training step; this scenario's workload is a sweep");
    }
    if trace.is_some() || plot.is_some() {
        bail_usage!("--trace and --plot draw a DDP step; this scenario's workload is a sweep");
    }
    let sweep = apply_sweep_flags(&mut s, &flags)?;
    let profile = load_profile_for(common.profile.as_deref(), &s)?;
    let m = mode(common.mode);
    let progress = Progress::new(collsim::workload::sweep::sizes(&sweep).len() as u64, "sizes");
    let (rows, communicator) =
        collsim::simulate_with(&s, &profile, m, &|| progress.tick()).map_err(whose)?;
    drop(progress);
    let report = SimReport {
        scenario: &s,
        sweep: &sweep,
        profile: &profile,
        mode: m,
        communicator,
        rows: &rows,
    };
    let fmt: &dyn SimFormat = match format {
        SimFmt::Table => &report::table::Table,
        SimFmt::Nccl => &report::nccl::Nccl,
        SimFmt::Json => &report::json::Json,
        SimFmt::Csv => &report::csv::Csv,
    };
    let mut out = open_output(common.output.as_deref())?;
    fmt.write_sim(&report, &mut out)?;
    out.finish()?;
    Ok(())
}

/// The flags that shape an nccl-tests-like sweep (`simulate --collective/--min-bytes/…`).
struct SweepFlags {
    collective: Option<String>,
    min_bytes: Option<String>,
    max_bytes: Option<String>,
    factor: Option<u64>,
    dtype: Option<String>,
    op: Option<String>,
}

impl SweepFlags {
    /// The flags given, by name.
    fn given(&self) -> [(&'static str, bool); 6] {
        [
            ("--collective", self.collective.is_some()),
            ("--min-bytes", self.min_bytes.is_some()),
            ("--max-bytes", self.max_bytes.is_some()),
            ("--factor", self.factor.is_some()),
            ("--dtype", self.dtype.is_some()),
            ("--op", self.op.is_some()),
        ]
    }
}

/// Sets the flags on the scenario's sweep and returns it, checked.
fn apply_sweep_flags(s: &mut Scenario, f: &SweepFlags) -> Result<SweepSpec> {
    let Some(sw) = s.sweep_mut() else {
        bail!("the scenario's workload is neither a sweep nor a DDP step");
    };
    if let Some(c) = &f.collective {
        sw.collective = Collective::parse(c)
            .ok_or_else(|| usage(format!("--collective {c}: unknown collective")))?;
    }
    if let Some(b) = &f.min_bytes {
        sw.min_bytes = parse_size("--min-bytes", b)?;
    }
    if let Some(b) = &f.max_bytes {
        sw.max_bytes = parse_size("--max-bytes", b)?;
    }
    if let Some(x) = f.factor {
        sw.factor = x;
    }
    if let Some(d) = &f.dtype {
        sw.dtype =
            DataType::parse(d).ok_or_else(|| usage(format!("--dtype {d}: unknown data type")))?;
    }
    if let Some(o) = &f.op {
        sw.op = ReduceOp::parse(o).ok_or_else(|| usage(format!("--op {o}: unknown reduction")))?;
    }
    if let Err((field, msg)) = sw.check() {
        let flag = field.replace("workload.", "--").replace('_', "-");
        // The flags given made the sweep what it is: a usage error. (A scenario's own sweep
        // was checked where it was read, on its line.)
        if f.given().iter().any(|g| g.1) {
            bail_usage!("{flag}: {msg}");
        }
        bail!("{flag}: {msg}");
    }
    Ok(sw.clone())
}

/// `collsim explain`.
fn explain(ExplainArgs { common, collective, bytes, dtype, format }: ExplainArgs) -> Result<()> {
    if common.topology.is_none() {
        bail_usage!("explain needs --topology (a preset name or a topology TOML)");
    }
    let s = apply_common(None, &common)?;
    let coll = Collective::parse(&collective)
        .ok_or_else(|| anyhow!("--collective {collective}: unknown collective"))?;
    let dt =
        DataType::parse(&dtype).ok_or_else(|| anyhow!("--dtype {dtype}: unknown data type"))?;
    let size = parse_size("--bytes", &bytes)?.get();
    if size == 0 {
        bail_usage!("--bytes {bytes}: nothing to move (sizes start at 1 byte, as nccl-tests' do)");
    }
    let spec = SweepSpec {
        collective: coll,
        min_bytes: Bytes::new(size),
        max_bytes: Bytes::new(size),
        factor: 2,
        dtype: dt,
        op: ReduceOp::Sum,
    };
    let profile = load_profile_for(common.profile.as_deref(), &s)?;
    let (cluster, comm, _) = collsim::build(&s)?;
    collsim::workload::sweep::check_supported(spec.collective, &comm)
        .map_err(|e| blame_nccl(e.into(), &s.nccl_at))?;
    let elt = dt.size();
    let n = comm.nranks() as u64;
    // NCCL's byte count: the total for all_gather / reduce_scatter, as the size column.
    let nbytes = match coll {
        Collective::AllGather | Collective::ReduceScatter => size / n / 16 * 16 / elt * elt * n,
        // nccl-tests trims AllToAll to 16 bytes per peer, as the sweep does.
        Collective::AllToAll => size / n / 16 * 16 / elt * elt * n,
        _ => size / elt * elt,
    };
    if nbytes != size {
        let why = format!(
            "--bytes {bytes}: nccl-tests trims it to {nbytes} bytes (whole {} elements{})",
            dt.name(),
            match coll {
                Collective::AllGather | Collective::ReduceScatter | Collective::AllToAll => {
                    ", 16 bytes a rank"
                }
                _ => "",
            }
        );
        if nbytes == 0 {
            bail_usage!("{why}: nothing to move");
        }
        say(why.clone());
    }
    let e = report::explain::Explanation::new(
        &cluster,
        &comm,
        coll,
        nbytes,
        elt,
        &profile,
        mode(common.mode),
    )
    .map_err(|m| anyhow!(m))?;
    collsim::units::Time::from_us_f64(e.time_us)
        .check(&format!("{} of {}", coll.name(), Bytes::new(nbytes)))
        .map_err(|m| anyhow!(m))?;
    let mut out = open_output(common.output.as_deref())?;
    match format {
        ValFmt::Table => e.write_text(&mut out)?,
        ValFmt::Json => report::write_json(&e, &mut out)?,
    }
    out.finish()?;
    Ok(())
}

/// `collsim calibrate`.
fn calibrate(
    CalibrateArgs { from_log, check_log, run, launcher, collective, fit, no_correction, common, }: CalibrateArgs,
) -> Result<()> {
    if let Some(f) = &fit {
        collsim::calibrate::params::check_list(f).map_err(usage)?;
    }
    if run {
        return calibrate_run(launcher.as_deref(), &common, fit.as_deref(), !no_correction);
    }
    if launcher.is_some() {
        bail_usage!("--launcher starts the bench: it goes with --run");
    }
    if from_log.is_empty() {
        bail_usage!(
            "calibrate needs --from-log LOG... (nccl-tests output), or --run on a machine with GPUs"
        );
    }
    // Without --check-log the split is made once the logs are read (None).
    let auto = check_log.is_empty() && from_log.len() >= 2;
    let mut common = common;
    // LOG@collective picks that test of a file holding several.
    let pick = |p: PathBuf, is_fit: Option<bool>| {
        let (file, c) = log_and_collective(p);
        (file, c.or_else(|| collective.clone()), is_fit)
    };
    if common.topology.is_none() {
        let (first, c, _) = pick(from_log[0].clone(), None);
        let (test, _) = read_log(&first, c.as_deref(), None)?;
        common.topology = Some(log_topology(&first.display().to_string(), &test, "calibrate")?);
    }
    let s = apply_common(None, &common)?;
    let logs: Vec<(PathBuf, Option<String>, Option<bool>)> = from_log
        .into_iter()
        .map(|p| pick(p, if auto { None } else { Some(true) }))
        .chain(check_log.into_iter().map(|p| pick(p, Some(false))))
        .collect();
    calibrate_logs(&s, &common, &logs, fit.as_deref(), !no_correction)?;
    Ok(())
}

/// A log path written `LOG@collective` (that test of a file holding several): the file and the
/// collective. A path that exists as written is a file, `@` and all.
fn log_and_collective(p: PathBuf) -> (PathBuf, Option<String>) {
    match p.to_str().and_then(|t| t.rsplit_once('@')) {
        Some((file, c)) if !p.exists() && !c.contains('/') => {
            (PathBuf::from(file), Some(c.to_string()))
        }
        _ => (p, None),
    }
}

/// `collsim validate`.
fn validate(
    ValidateArgs {
        log,
        manifest,
        no_held_out,
        refit,
        fits_dir,
        common,
        collective,
        plot,
        format,
    }: ValidateArgs,
) -> Result<()> {
    let log = match (log, manifest) {
        (_, Some(m)) => {
            let fits = (!no_held_out).then(|| held_out_fits(&m, refit, fits_dir));
            return validate_manifest(&m, &common, fits, format);
        }
        (Some(l), None) => l,
        (None, None) => bail_usage!("validate needs --log LOG or --manifest CSV"),
    };
    let (log, at) = log_and_collective(log);
    let collective = match (at, collective) {
        (Some(a), Some(c)) if a != c => {
            bail_usage!("--log {}@{a} and --collective {c}: two tests named", log.display())
        }
        (a, c) => a.or(c),
    };
    let log_name = log.display().to_string();
    // What the log says (its GPU's preset, layout, process layout, NCCL release and
    // environment) is the default; flags that say otherwise win, with a warning.
    let given = match &common.topology {
        Some(_) => Some(apply_common(None, &common)?),
        None => None,
    };
    let (test, coll) = read_log(&log, collective.as_deref(), given.as_ref())?;
    let test = &test;
    let s = match given {
        Some(s) => s,
        None => {
            let mut common = common.clone();
            common.topology = Some(log_topology(&log_name, test, "validate")?);
            apply_common(None, &common)?
        }
    };
    let s = log_scenario(&s, &common, &log_name, test, true, true)?;
    let profile = load_profile_for(common.profile.as_deref(), &s)?;
    let (cluster, comm, _) = collsim::build(&s)?;
    let v = validate::compare(&cluster, &comm, test, coll, &profile, mode(common.mode))
        .map_err(|e| anyhow!("{log_name}: {e}"))?;
    let report =
        ValidationReport { log: &log_name, scenario: &s, profile: &profile, validation: &v };
    let fmt: &dyn ValidationFormat = match format {
        ValFmt::Table => &report::table::Table,
        ValFmt::Json => &report::json::Json,
    };
    let mut out = open_output(common.output.as_deref())?;
    fmt.write_validation(&report, &mut out)?;
    out.finish()?;
    if let Some(svg) = plot {
        let title = format!(
            "{} on {} x {} ({} GPUs per node), profile {}",
            log_name, s.nodes, s.node.name, s.gpus_per_node, profile.name
        );
        stage_svg("--plot", &svg, |t| report::plot::validation_svg(t, &title, &v))?;
    }
    Ok(())
}

/// `validate --manifest`: every curve of the manifest on its recorded setup, then
/// leave-one-cluster-out.
fn validate_manifest(
    path: &Path,
    common: &Common,
    fits: Option<collsim::calibrate::accuracy::HeldOutFits>,
    format: ValFmt,
) -> Result<()> {
    use collsim::calibrate::accuracy::{self, Curve};
    use collsim::calibrate::pipeline::LogInput;
    for (flag, given) in [
        ("--topology", common.topology.is_some()),
        ("--nodes", common.nodes.is_some()),
        ("--gpus-per-node", common.gpus_per_node.is_some()),
        ("--gpus-per-process", common.gpus_per_process.is_some()),
    ] {
        if given {
            bail_usage!(
                "{flag}: --manifest runs each curve on the setup its row records; edit the manifest"
            );
        }
    }
    let name = path.display().to_string();
    let rows = accuracy::read_manifest(&name, &config::load_text(path)?).map_err(|e| anyhow!(e))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let (base_name, base_text) = profile_source(common.profile.as_deref())?;
    let profile = config::parse_profile(&base_name, &base_text)?;
    let mut curves: Vec<Curve> = Vec::new();
    let mut inputs = vec![path.to_path_buf()];
    for row in &rows {
        let at = format!("{name}:{}", row.line);
        let log = dir.join(&row.file);
        inputs.push(log.clone());
        let several = row.collectives.len() > 1;
        for coll in &row.collectives {
            let (test, c) =
                read_log(&log, Some(coll), None).map_err(|e| anyhow!("{at}: collective: {e}"))?;
            // The row's layout must be the log's where the log lists its ranks; where the
            // row states only one of the two counts, the log's layout is used.
            let (nodes, gpus_per_node) = match (row.nodes, row.gpus_per_node) {
                (Some(n), Some(g)) => (Some(n), Some(g)),
                _ => (None, None),
            };
            if let (Some(n), Some(g), Some((ranks, hosts))) = (nodes, gpus_per_node, test.layout())
                && (n * g != ranks || n != hosts)
            {
                bail!(
                    "{at}: nodes/gpus_per_node: {n} x {g}, but {} lists {ranks} ranks on {hosts} host(s)",
                    log.display()
                );
            }
            let topology = match &row.topology {
                Some(t) if config::preset_names().contains(&t.as_str()) => t.clone(),
                Some(t) => dir.join(t).display().to_string(),
                None => {
                    let gpu = test.setup.gpu_name.as_deref().unwrap_or("no GPU named");
                    match collsim::hw::gpus::from_reported_name(gpu) {
                        Some((_, preset)) => preset.to_string(),
                        None => bail!(
                            "{at}: collsim_topology: empty, and the log's GPUs ({gpu}) have no preset; name one"
                        ),
                    }
                }
            };
            let mut own = Common {
                topology: Some(topology),
                nodes,
                gpus_per_node,
                output: None,
                ..common.clone()
            };
            // The row's variables first; flags given to validate come after them and win.
            for kv in &row.nccl {
                let (k, v) = NcclEnv::split_pair(kv)
                    .map_err(|e| anyhow!("{at}: collsim_nccl: {kv}: {e}"))?;
                let env = NcclEnv::from_pairs([(k.as_str(), v.as_str())])
                    .map_err(|e| anyhow!("{at}: collsim_nccl: {e}"))?;
                if env.ignored.contains(&k) {
                    bail!("{at}: collsim_nccl: {k}: not a variable the model uses");
                }
            }
            own.nccl = row.nccl.iter().chain(&common.nccl).cloned().collect();
            let s = apply_common(None, &own).map_err(|e| anyhow!("{at}: {e}"))?;
            let id = if several { format!("{}@{coll}", row.id) } else { row.id.clone() };
            if curves.iter().any(|c| c.id == id) {
                bail!("{at}: curve_id: {id} is already a curve of this manifest");
            }
            let s = log_scenario(&s, &own, &id, &test, true, false)
                .map_err(|e| anyhow!("{at}: {e}"))?;
            let curve = Curve {
                id: id.clone(),
                cluster: row.cluster.clone(),
                input: LogInput {
                    name: format!("{at}: {}", log.display()),
                    test,
                    coll: c,
                    is_fit: None,
                    scenario: s,
                },
            };
            if let Some(other) = curves
                .iter()
                .find(|c| c.cluster == curve.cluster && c.generation() != curve.generation())
            {
                bail!(
                    "{at}: cluster: {} holds {} GPUs here and {} ones in {}; a cluster is one GPU generation",
                    curve.cluster,
                    curve.generation(),
                    other.generation(),
                    other.id
                );
            }
            curves.push(curve);
        }
    }
    if let Some(o) = &common.output {
        refuse_overwrite("-o", o, &inputs)?;
    }
    let m = mode(common.mode);
    let validations = {
        use rayon::prelude::*;
        // Every curve runs; the first failure in the manifest's order is the one reported.
        let all: Vec<_> =
            curves.par_iter().map(|c| accuracy::validate_curve(c, &profile, m)).collect();
        all.into_iter().collect::<Result<Vec<_>, _>>().map_err(|e| anyhow!(e))?
    };
    let acc = accuracy::accuracy(&curves, &validations);
    let clusters: std::collections::BTreeSet<&str> =
        curves.iter().map(|c| c.cluster.as_str()).collect();
    let loo = match fits {
        None => None,
        Some(fits) => {
            let progress = Progress::new(clusters.len() as u64, "leave-one-cluster-out");
            let (loo, reused) = accuracy::leave_one_cluster_out(
                &curves,
                &validations,
                &base_name,
                &base_text,
                m,
                &fits,
                &|| progress.tick(),
            )
            .map_err(|e| anyhow!(e))?;
            drop(progress);
            if reused > 0 {
                say(format!(
                    "note: {reused} of {} held-out calibrations were kept fits of the same inputs; --refit makes them again",
                    loo.clusters.iter().filter(|c| !c.calibrated_on.is_empty()).count()
                ));
            }
            Some(loo)
        }
    };
    let r = report::accuracy::AccuracyReport {
        manifest: &name,
        profile: &profile.name,
        accuracy: &acc,
        leave_one_cluster_out: loo.as_ref(),
    };
    let mut out = open_output(common.output.as_deref())?;
    match format {
        ValFmt::Table => out.write_all(report::accuracy::text(&r).as_bytes())?,
        ValFmt::Json => report::write_json(&r, &mut out)?,
    }
    out.finish()?;
    Ok(())
}

/// Where `validate --manifest` finds and keeps its held-out calibrations: `dir` alone where
/// given; else the manifest's `held-out-fits/` (the repository's, made by
/// calibration/profiles/regenerate.sh) and this build's cache, which new fits go to.
fn held_out_fits(
    manifest: &Path,
    refit: bool,
    dir: Option<PathBuf>,
) -> collsim::calibrate::accuracy::HeldOutFits {
    use collsim::calibrate::accuracy::HeldOutFits;
    if let Some(d) = dir {
        let write = Some((d.clone(), String::new()));
        return HeldOutFits { read: vec![(d, String::new())], write, refit, write_required: true };
    }
    let shipped = manifest.parent().unwrap_or(Path::new(".")).join("held-out-fits");
    let mut read = vec![(shipped, String::new())];
    // This build's own cache, salted with the build (a changed model reads none of it).
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")));
    let build = std::env::current_exe().and_then(std::fs::read).map(|b| {
        use std::hash::Hasher;
        let mut h = std::hash::DefaultHasher::new();
        h.write(&b);
        format!("{:016x}", h.finish())
    });
    let write = match (cache, build) {
        (Some(c), Ok(b)) => Some((c.join("collsim").join("held-out-fits"), b)),
        _ => None,
    };
    read.extend(write.clone());
    HeldOutFits { read, write, refit, write_required: false }
}

/// `collsim topo show` and `collsim topo import`.
fn topo(command: TopoCommand) -> Result<()> {
    match command {
        TopoCommand::Show { topology, nodes, format, output } => {
            check_nodes(nodes)?;
            let (_, spec) = config::resolve_topology(&topology, None)?;
            collsim::check_ranks(nodes, spec.gpu.count)
                .map_err(|e| usage(format!("--nodes {nodes}: {e}")))?;
            // A `links` network that leaves nodes unconnected has no bisection to report:
            // refuse it as simulate does.
            collsim::hw::fabric::check(&spec, nodes)
                .map_err(|e| anyhow!("{topology}: {e} (with {nodes} node(s))"))?;
            let cluster = collsim::hw::Cluster::new(&spec, nodes, spec.gpu.count);
            let view = report::topo::TopoView::new(&cluster);
            let mut out = open_output(output.as_deref())?;
            match format {
                ValFmt::Table => view.write_text(&mut out)?,
                ValFmt::Json => report::write_json(&view, &mut out)?,
            }
            out.finish()?;
        }
        TopoCommand::Import { nccl_xml, nvidia_smi, output } => {
            type Importer = fn(&str, &str) -> Result<config::import::Imported, config::ConfigError>;
            let (path, import): (&PathBuf, Importer) = match (&nccl_xml, &nvidia_smi) {
                (Some(p), _) => (p, config::import::import_nccl_xml),
                (None, Some(p)) => (p, config::import::import_nvidia_smi),
                (None, None) => {
                    bail_usage!("topo import needs --nccl-xml FILE or --nvidia-smi FILE")
                }
            };
            let source = path.display().to_string();
            let imported = import(&source, &config::load_text(path)?)?;
            check_imported(&source, &imported)?;
            let mut out = open_output(output.as_deref())?;
            out.write_all(imported.toml.as_bytes())?;
            out.finish()?;
        }
    }
    Ok(())
}

/// What `topo import` writes must read back. Where it does not, the cause is a value in the
/// user's file that no topology takes, so the error points there (`source:line:col`, where the
/// value has a place in it) and quotes the line it became.
fn check_imported(source: &str, imported: &config::import::Imported) -> Result<()> {
    let toml = &imported.toml;
    config::parse_topology("imported topology", toml).map_err(|e| {
        let what = "what it describes is no topology collsim can load";
        match e {
            config::ConfigError::At { line, msg, .. } => {
                let quote = toml.lines().nth(line.saturating_sub(1)).unwrap_or_default().trim();
                match imported.origin(line) {
                    Some((l, c)) => {
                        anyhow!("{source}:{l}:{c}: {what}: {msg} (imported as {quote:?})")
                    }
                    None => anyhow!(
                        "{source}: {what}: {msg} (in the imported TOML's line {line}: {quote:?})"
                    ),
                }
            }
            config::ConfigError::File { msg, .. } => anyhow!("{source}: {what}: {msg}"),
            other => anyhow!(other),
        }
    })?;
    Ok(())
}

/// A usage error if the output `flag` names, `out`, would replace one of `inputs` (as the run's
/// end would refuse it, but before the work).
fn refuse_overwrite(flag: &str, out: &Path, inputs: &[PathBuf]) -> Result<()> {
    report::output::check_paths(inputs, &[(flag, out)]).map_err(usage)
}

/// Ranks a plan's outcomes and writes the report; fails (exit 1) when no candidate meets the
/// plan, after the report, naming the closest candidates.
fn plan_report(
    summary: &collsim::plan::shard::Summary,
    outcomes: Vec<collsim::plan::Outcome>,
    out: &PlanOut,
    output: Option<&Path>,
) -> Result<()> {
    let ranking = collsim::plan::rank(summary.minimise(), outcomes);
    let mut w = open_output(output)?;
    match out.format {
        PlanFmt::Table => report::plan::table(summary, &ranking, &mut w)?,
        PlanFmt::Json => report::plan::json(summary, &ranking, &mut w)?,
        PlanFmt::Csv => report::plan::csv(&ranking, &mut w)?,
    }
    w.finish()?;
    if ranking.ranked.is_empty() {
        bail!("{}", collsim::plan::no_solution(&summary.plan, &ranking, &summary.objective));
    }
    if let Some(p) = &out.plot {
        stage_svg("--plot", p, |t| report::plan::pareto_svg(t, summary, &ranking))?;
    }

    Ok(())
}

/// `collsim plan` and `collsim plan merge`.
fn plan(args: PlanArgs) -> Result<()> {
    use collsim::plan::shard::{self, Shard, Summary};
    if let Some(PlanCommand::Merge { results, out, output }) = args.command {
        let mut files = Vec::new();
        for p in &results {
            let name = p.display().to_string();
            let text = config::load_text(p)?;
            files.push((name.clone(), shard::read(&name, &text).map_err(|e| anyhow!(e))?));
        }
        // The plan file the results name is kept too, where it is still there: merge does not
        // read it, but writing the report over it would lose the plan.
        let mut kept = results.clone();
        kept.extend(
            files.iter().map(|(_, f)| PathBuf::from(&f.summary.plan)).filter(|p| p.is_file()),
        );
        for (flag, o) in [("-o", &output), ("--plot", &out.plot)] {
            if let Some(o) = o {
                refuse_overwrite(flag, o, &kept)?;
            }
        }
        let (summary, outcomes) = shard::merge(&files).map_err(|e| anyhow!(e))?;
        return plan_report(&summary, outcomes, &out, output.as_deref());
    }
    let path = args.plan.ok_or_else(|| usage("plan needs a plan file"))?;
    let plan = config::parse_plan(&path.display().to_string(), &config::load_text(&path)?)?;
    // The files the run reads, which its outputs must not replace.
    let mut inputs = vec![path.clone()];
    inputs.extend(args.profile.clone());
    inputs.extend(plan.instances.iter().filter_map(|i| match &i.topology {
        config::TopologySource::File(f) => Some(f.clone()),
        config::TopologySource::Preset(_) => None,
    }));
    inputs.extend(plan.scenario.clone());
    let outs = [
        ("-o", args.output.as_ref().filter(|_| args.shard.is_none())),
        ("--plot", args.out.plot.as_ref()),
    ];
    for (flag, o) in outs.into_iter().filter_map(|(f, o)| Some((f, o?))) {
        refuse_overwrite(flag, o, &inputs)?;
        // Fail now, not after the evaluation, where the output cannot be written.
        let dir = o.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        if !dir.is_dir() {
            bail!("{}: no such directory {}", o.display(), dir.display());
        }
    }
    // One read of the profile: what the candidates run with is what the fingerprint takes in.
    let (profile_name, profile_text) = profile_source(args.profile.as_deref())?;
    let profile = config::parse_profile(&profile_name, &profile_text)?;
    let m = mode(args.mode);
    let cands = collsim::plan::candidates(&plan);
    let summary = Summary::of(&plan, cands.len(), &format!("{profile_text}\0{m:?}"));
    let Some(sh) = &args.shard else {
        if args.shard_count.is_some() {
            bail_usage!("--shard-count goes with --shard auto");
        }
        let progress = Progress::new(cands.len() as u64, "candidates");
        let outcomes =
            collsim::plan::evaluate_all(&plan, &cands, &profile, m, &|_| progress.tick());
        drop(progress);
        return plan_report(&summary, outcomes, &args.out, args.output.as_deref());
    };
    let shard = match sh.as_str() {
        "auto" => Shard::from_env(|k| std::env::var(k).ok(), args.shard_count),
        s => {
            if args.shard_count.is_some() {
                bail_usage!("--shard-count goes with --shard auto (K/N names the count)");
            }
            Shard::parse(s)
        }
    }
    .map_err(usage)?;
    if args.out.plot.is_some() || !matches!(args.out.format, PlanFmt::Table) {
        bail_usage!(
            "--shard writes results (JSON lines) to -o; --format and --plot go to `collsim plan merge`"
        );
    }
    let out_path = args
        .output
        .ok_or_else(|| usage("--shard needs -o RESULTS.jsonl (the file this shard appends to)"))?;
    let out_name = out_path.display().to_string();
    // What the file already holds: resume from it, or refuse to add to it.
    let mut done = std::collections::BTreeSet::new();
    if out_path.exists() && !out_path.is_file() {
        bail!("{out_name}: not a regular file; give a results file path");
    }
    refuse_overwrite("-o", &out_path, &inputs)?;
    let existing = if out_path.exists() {
        Some(config::load_text(&out_path)?).filter(|t| !t.is_empty())
    } else {
        None
    };
    let mut file = match existing {
        Some(text) => {
            if !args.resume {
                bail!(
                    "{out_name}: exists; pass --resume to continue this shard from it, or remove it"
                );
            }
            let f = shard::read(&out_name, &text).map_err(|e| anyhow!(e))?;
            if f.summary.fingerprint != summary.fingerprint
                || f.summary.candidates != summary.candidates
            {
                bail!(
                    "{out_name}: results of another plan ({}), not {}",
                    f.summary.plan,
                    summary.plan
                );
            }
            for o in &f.outcomes {
                if !shard.owns(o.index) {
                    bail!(
                        "{out_name}: candidate {} is not shard {}/{}'s",
                        o.index,
                        shard.k + 1,
                        shard.n
                    );
                }
                done.insert(o.index);
            }
            let file = std::fs::OpenOptions::new()
                .append(true)
                .open(&out_path)
                .with_context(|| format!("{out_name}: cannot write"))?;
            // Drop a line a killed run left half-written; appends go after what is left.
            file.set_len(f.complete as u64).with_context(|| format!("{out_name}: cannot write"))?;
            file
        }
        None => {
            let mut f = std::fs::File::create(&out_path)
                .with_context(|| format!("{out_name}: cannot create"))?;
            f.write_all(shard::header_line(&summary).as_bytes())
                .with_context(|| format!("{out_name}: cannot write"))?;
            f
        }
    };
    file.flush()?;
    let mine: Vec<_> =
        cands.into_iter().filter(|c| shard.owns(c.index) && !done.contains(&c.index)).collect();
    let progress = Progress::new(mine.len() as u64, "candidates");
    // Lines go out in candidate order, whatever order the threads finish in: an outcome that
    // finishes early waits in `held` for those before it (so the same shard writes the same
    // bytes every run; a killed shard loses at most the held ones, which --resume runs again).
    struct Sink {
        file: std::fs::File,
        failed: Option<std::io::Error>,
        next: usize,
        held: std::collections::BTreeMap<usize, String>,
    }
    let order: Vec<usize> = mine.iter().map(|c| c.index).collect();
    let sink =
        std::sync::Mutex::new(Sink { file, failed: None, next: 0, held: Default::default() });
    collsim::plan::evaluate_all(&plan, &mine, &profile, m, &|o| {
        progress.tick();
        let line = shard::outcome_line(&summary, o);
        let mut g = sink.lock().unwrap_or_else(|e| e.into_inner());
        g.held.insert(o.index, line);
        while let Some(line) = order.get(g.next).and_then(|i| g.held.remove(i)) {
            g.next += 1;
            if g.failed.is_none()
                && let Err(e) = g.file.write_all(line.as_bytes()).and_then(|()| g.file.flush())
            {
                g.failed = Some(e);
            }
        }
    });
    drop(progress);
    let failed = sink.into_inner().unwrap_or_else(|e| e.into_inner()).failed;
    if let Some(e) = failed {
        bail!("{out_name}: cannot write: {e}");
    }
    eprint_line!(
        "collsim: shard {}/{}: {} candidates evaluated, {} already in {out_name}",
        shard.k + 1,
        shard.n,
        mine.len(),
        done.len()
    );
    Ok(())
}
