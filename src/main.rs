//! The `collsim` command line: parse flags, call the library, map errors to exit codes
//! (0 success, 1 input or simulation error, 2 usage).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand, ValueEnum};

use collsim::{config, report};

/// Returns a [`Usage`] error from a format string.
macro_rules! bail_usage {
    ($($t:tt)*) => {
        return Err(usage(format!($($t)*)))
    };
}

/// `eprintln!` with control characters escaped ([`one_line`]): a warning quotes names from the
/// user's files.
macro_rules! eprint_line {
    ($($arg:tt)*) => {
        eprintln!("{}", one_line(&format!($($arg)*)))
    };
}

mod cli;

use cli::logs::*;
use cli::plan::*;
use cli::simulate::*;
use cli::ui::*;
use cli::validate::*;

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
    /// nccl-tests' `-J` JSON (version 3).
    NcclJson,
    Json,
    Csv,
}

/// `simulate --comms`: how a training step's collectives take their time.
#[derive(Clone, Copy, PartialEq, ValueEnum)]
enum CommsArg {
    /// Each call's flows join the network and share its links with whatever else is in
    /// flight (the step's other calls, other jobs', the background).
    Shared,
    /// Each call takes the time it takes alone.
    Cached,
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
    /// Topology preset, cloud instance type, or path to a topology TOML (`collsim presets`).
    #[arg(long, value_parser = cli::ui::Names(cli::ui::topology_names))]
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
    #[arg(short = 'g', long, visible_alias = "ngpus", value_name = "N")]
    gpus_per_process: Option<usize>,
    /// An NCCL environment variable, KEY=VALUE (repeatable).
    #[arg(long = "nccl", value_name = "KEY=VALUE", hide_possible_values = true, value_parser = cli::ui::Names(cli::ui::nccl_names))]
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
    #[command(after_help = cli::examples::SIMULATE)]
    Simulate(SimulateArgs),
    /// Take one call apart: NCCL's cost table, its choice, the simulated time and what bounds it.
    #[command(after_help = cli::examples::EXPLAIN)]
    Explain(ExplainArgs),
    /// The catalogue of topology presets: GPUs, NVLink, NICs, network and price per node-hour
    /// with its source and date; cloud instance types (p5.48xlarge, a3-megagpu-8g) name their
    /// preset wherever a topology is asked for.
    #[command(after_help = cli::examples::PRESETS)]
    Presets {
        /// Only presets whose GPU model holds this text (any letter case): H100, A100, B200.
        #[arg(long, value_name = "TEXT")]
        gpu: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value = "table")]
        format: ValFmt,
        /// Write the output to PATH instead of stdout.
        #[arg(short = 'o', long = "output", value_name = "PATH")]
        output: Option<PathBuf>,
    },
    /// Hardware: show a topology as nvidia-smi and NCCL see it.
    #[command(after_help = cli::examples::TOPO)]
    Topo {
        #[command(subcommand)]
        command: TopoCommand,
    },
    /// Fit a profile's physical parameters and size-band correction to real runs (`--from-log`)
    /// or to a sweep of this machine's GPUs (`--run`), and report its error on runs it did not
    /// fit.
    #[command(after_help = cli::examples::CALIBRATE)]
    Calibrate(CalibrateArgs),
    /// Compare the model with a real nccl-tests log.
    #[command(after_help = cli::examples::VALIDATE)]
    Validate(ValidateArgs),
    /// Size a cluster: every candidate instance × nodes × placement × knobs of a plan file,
    /// checked for memory, quota and budget, simulated, priced and ranked by time and cost to
    /// train (`collsim plan merge` joins the results of sharded runs).
    #[command(after_help = cli::examples::PLAN)]
    Plan(PlanArgs),
    /// Turn a PyTorch profiler trace of one rank's training step into a model profile: every
    /// kernel tagged by class (GEMM, attention, memory-bound, optimizer, copy, host) and by how
    /// it grows with the shape, in program order with the step's collectives; a scenario names
    /// it (`[workload] profile = "FILE"`) to time that step on other GPUs, clusters, micro-batches
    /// and sequences.
    #[command(after_help = cli::examples::PROFILE)]
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
    /// Train within this ("21 d", "72 h"), over [objective] deadline; with no node list,
    /// the plan finds each instance's smallest node count that meets it.
    #[arg(long, value_name = "TIME")]
    deadline: Option<String>,
    /// Most the training may cost ("50000 USD"), over [objective] budget.
    #[arg(long, value_name = "USD")]
    budget: Option<String>,
    /// Price in this cloud region ("eu-west-1"), over [objective] region: a preset's price
    /// for another region is not used.
    #[arg(long, value_name = "REGION")]
    region: Option<String>,
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
    /// Collective, as nccl-tests names it (default all_reduce).
    #[arg(long, value_parser = cli::ui::Names(cli::ui::collective_names))]
    collective: Option<String>,
    /// First size, as nccl-tests -b (bare number = bytes; K/M/G binary; or "64 MiB").
    #[arg(short = 'b', long, visible_alias = "minbytes")]
    min_bytes: Option<String>,
    /// Last size, as nccl-tests -e.
    #[arg(short = 'e', long, visible_alias = "maxbytes")]
    max_bytes: Option<String>,
    /// Multiplicative step, as nccl-tests -f.
    #[arg(short = 'f', long, visible_alias = "stepfactor")]
    factor: Option<u64>,
    /// Data type, as nccl-tests -d.
    #[arg(short = 'd', long, visible_alias = "datatype", value_parser = cli::ui::Names(cli::ui::dtype_names))]
    dtype: Option<String>,
    /// Reduction, as nccl-tests -o (spelled out here: collsim's -o is --output).
    #[arg(long, value_parser = cli::ui::Names(cli::ui::op_names))]
    op: Option<String>,
    /// Timed iterations a size, as nccl-tests -n (default 20): the nccl layouts print it; a
    /// prediction's time is the same whatever the count.
    #[arg(short = 'n', long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    iters: Option<u32>,
    /// Warm-up iterations, as nccl-tests -w (default 1): the nccl layouts print it.
    #[arg(short = 'w', long, visible_alias = "warmup_iters", value_name = "N")]
    warmup_iters: Option<u32>,
    /// Data check, as nccl-tests -c (default 1; any other number is on): with 0 the nccl layouts
    /// print `#wrong` as N/A and fit sizes in two buffers instead of three, as nccl-tests does; a
    /// prediction has nothing wrong either way.
    #[arg(short = 'c', long, value_name = "0|1")]
    check: Option<u32>,
    /// Output format: `nccl` is nccl-tests' text, `nccl-json` its -J JSON.
    #[arg(long, value_enum, default_value = "table")]
    format: SimFmt,
    /// Run the scenario at every value of a key (KEY=V1,V2,...; `ddp.X` means
    /// `workload.ddp.X`, as do `dp.X`, `fsdp.X`, `zero.X` and `parallel.X` theirs, `topology.X` a key
    /// of its topology, `profile.X` one of the profile);
    /// several --sweep run their cross product, in parallel.
    #[arg(long, value_name = "KEY=VALUES", hide_possible_values = true, value_parser = cli::ui::Names(cli::ui::sweep_names))]
    sweep: Vec<String>,
    /// Training steps: how their collectives take their time. `shared`: posted into one
    /// network, where a step's calls (a pipeline's sends beside its data-parallel
    /// all-reduces) and other jobs' meet; `cached`: each as long as alone. Default: cached
    /// for one step, shared for [[job]] tables.
    #[arg(long, value_enum, value_name = "POLICY")]
    comms: Option<CommsArg>,
    /// DDP workloads: write the step as a Chrome/Perfetto trace (JSON) here.
    #[arg(long, value_name = "JSON")]
    trace: Option<PathBuf>,
    /// Draw into this SVG file: a DDP step's compute and NCCL lanes (with --sweep: step time
    /// against the swept values); a collective's busbw and time against size, log axes (with
    /// --sweep: one line per point, e.g. `--sweep nccl.NCCL_ALGO=Ring,NVLS`).
    #[arg(long, value_name = "SVG")]
    plot: Option<PathBuf>,
    /// DDP and FSDP workloads: write the step as a list of calls (JSON) here, for a scenario
    /// with `kind = "trace"` to replay on another cluster.
    #[arg(long, value_name = "JSON")]
    export_calls: Option<PathBuf>,
    /// Replay one rank's step from a PyTorch profiler (Kineto) JSON trace, an Nsight Systems
    /// JSON export (`nsys export --type json`), a Chakra execution trace (`NAME.RANK.et`,
    /// ASTRA-sim's input) or a list of calls: its compute kept, its collectives timed on this
    /// cluster (--topology, --nodes).
    #[arg(long, value_name = "FILE")]
    workload_trace: Option<PathBuf>,
}

/// `collsim explain`.
#[derive(clap::Args)]
struct ExplainArgs {
    #[command(flatten)]
    common: Common,
    /// Collective, as nccl-tests names it.
    #[arg(long, default_value = "all_reduce", value_parser = cli::ui::Names(cli::ui::collective_names))]
    collective: String,
    /// Bytes, as nccl-tests' size column (bare number = bytes; K/M/G binary; or "64 MiB").
    #[arg(long)]
    bytes: String,
    /// Data type, as nccl-tests -d.
    #[arg(long, default_value = "float", value_parser = cli::ui::Names(cli::ui::dtype_names))]
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
    #[arg(
        long,
        required_unless_present_any = ["manifest", "runs"],
        conflicts_with_all = ["manifest", "runs"]
    )]
    log: Option<PathBuf>,
    /// Every curve a manifest CSV lists (calibration/data/manifest.csv), each on the setup its
    /// row records: per-curve and pooled error by size band and algorithm, and
    /// leave-one-cluster-out (each cluster predicted by a profile calibrated on the other
    /// clusters of its GPU generation).
    #[arg(long, value_name = "CSV", conflicts_with = "runs")]
    manifest: Option<PathBuf>,
    /// Published training runs (calibration/data/training/public.csv): each row's step
    /// replayed from the scenario keys its columns set, against its measured step; per run,
    /// per source, per weak-scaling series (the loss of per-GPU throughput captured), pooled
    /// and leave-one-source-out.
    #[arg(long, value_name = "CSV")]
    runs: Option<PathBuf>,
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
    #[arg(long, conflicts_with_all = ["manifest", "runs"])]
    collective: Option<String>,
    /// Also draw measured and predicted busbw against size (log axes) and the error per size
    /// into this SVG file.
    #[arg(long, value_name = "SVG", conflicts_with_all = ["manifest", "runs"])]
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
        Command::Presets { output, .. } => outs.push(("-o", output.clone())),
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
        Command::Presets { gpu, format, output } => presets(gpu.as_deref(), format, output)?,
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
