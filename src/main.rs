//! The `collsim` command line: parse flags, call the library, map errors to exit codes
//! (0 success, 1 input or simulation error, 2 usage).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, anyhow, bail};
use clap::{Parser, Subcommand, ValueEnum};

use collsim::calibrate::{nccl_log, validate};
use collsim::collective::{Collective, Mode, TimingParams};
use collsim::comm::env::NcclEnv;
use collsim::config::{self, Scenario, SweepSpec};
use collsim::report::{self, SimFormat, SimReport, ValidationFormat, ValidationReport};
use collsim::units::Bytes;
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
    Aggregated,
    Detailed,
}

#[derive(clap::Args)]
struct Common {
    /// Topology preset (dgx-a100, dgx-h100) or path to a topology TOML.
    #[arg(long)]
    topology: Option<String>,
    /// Number of nodes.
    #[arg(long)]
    nodes: Option<usize>,
    /// GPUs used per node (the first G of each node).
    #[arg(long)]
    gpus_per_node: Option<usize>,
    /// An NCCL environment variable, KEY=VALUE (repeatable).
    #[arg(long = "nccl", value_name = "KEY=VALUE")]
    nccl: Vec<String>,
    /// Which NCCL release's cost-model tables choose algorithms (2.18 … 2.30; default 2.30).
    #[arg(long, value_name = "VERSION")]
    nccl_version: Option<String>,
    /// Timing profile TOML (default: the built-in calibration/profiles/default.toml).
    #[arg(long)]
    profile: Option<PathBuf>,
    /// Simulate every rank and channel (detailed) or one node and channel by symmetry.
    #[arg(long, value_enum, default_value = "aggregated")]
    mode: ModeArg,
    /// Write the output to PATH instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "PATH")]
    output: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Command {
    /// Simulate a scenario (a file, flags, or both; flags override the file).
    Simulate {
        /// Scenario TOML.
        scenario: Option<PathBuf>,
        #[command(flatten)]
        common: Common,
        /// Collective (all_reduce).
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
    },
    /// Take one call apart: NCCL's cost table, its choice, the simulated time and what bounds it.
    Explain {
        #[command(flatten)]
        common: Common,
        /// Collective (all_reduce, all_gather, reduce_scatter).
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
    },
    /// Hardware: show a topology as nvidia-smi and NCCL see it.
    Topo {
        #[command(subcommand)]
        command: TopoCommand,
    },
    /// Compare the model with a real nccl-tests log.
    Validate {
        /// nccl-tests output: its text, or its -J JSON (collsim-bench's results.json too).
        #[arg(long)]
        log: PathBuf,
        #[command(flatten)]
        common: Common,
        /// Which test of the log (default: the first; its header names the collective).
        #[arg(long)]
        collective: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value = "table")]
        format: ValFmt,
    },
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
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("collsim: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn load_profile(path: Option<&Path>) -> Result<TimingParams> {
    Ok(match path {
        Some(p) => config::parse_profile(&p.display().to_string(), &config::load_text(p)?)?,
        None => config::parse_profile(config::DEFAULT_PROFILE.0, config::DEFAULT_PROFILE.1)?,
    })
}

fn open_output(path: Option<&Path>) -> Result<Box<dyn Write>> {
    Ok(match path {
        Some(p) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("{}: cannot create", p.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    })
}

fn parse_size(flag: &str, s: &str) -> Result<Bytes> {
    Bytes::parse_cli(s).map_err(|e| anyhow!("{flag} {s}: {e}"))
}

/// Applies the cluster flags to a scenario (or builds one from them).
fn apply_common(base: Option<Scenario>, c: &Common) -> Result<Scenario> {
    let mut s = match (base, &c.topology) {
        (Some(mut s), Some(t)) => {
            let (src, node) = config::resolve_topology(t, None)?;
            s.topology = src;
            s.gpus_per_node = s.gpus_per_node.min(node.gpu.count);
            s.node = node;
            s
        }
        (Some(s), None) => s,
        (None, Some(t)) => {
            let (topology, node) = config::resolve_topology(t, None)?;
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
                node,
                nodes: 1,
                sweep,
                nccl: Vec::new(),
                placement: config::PlacementSpec::default(),
            }
        }
        (None, None) => bail!(
            "no scenario file and no --topology: give one (try `collsim simulate scenarios/quickstart.toml`)"
        ),
    };
    if let Some(n) = c.nodes {
        if n == 0 {
            bail!("--nodes 0: need at least one node");
        }
        s.nodes = n;
    }
    match c.gpus_per_node {
        Some(0) => bail!("--gpus-per-node 0: need at least one GPU per node"),
        Some(g) if g > s.node.gpu.count => {
            bail!("--gpus-per-node {g}: a {} node has {} GPUs", s.node.name, s.node.gpu.count)
        }
        Some(g) => s.gpus_per_node = g,
        None => {}
    }
    for kv in &c.nccl {
        let (k, v) = NcclEnv::split_pair(kv).map_err(|e| anyhow!(e))?;
        s.nccl.retain(|(key, _)| *key != k);
        s.nccl.push((k, v));
    }
    if let Some(v) = &c.nccl_version {
        s.nccl.retain(|(key, _)| key != "version");
        s.nccl.push(("version".into(), v.clone()));
    }
    // Reject bad values now and list the variables the model does not use.
    let env = NcclEnv::from_pairs(s.nccl.iter().map(|(k, v)| (k.as_str(), v.as_str())))?;
    for k in &env.ignored {
        eprintln!("collsim: ignoring {k} (not used by the model)");
    }
    Ok(s)
}

fn mode(m: ModeArg) -> Mode {
    match m {
        ModeArg::Aggregated => Mode::Aggregated,
        ModeArg::Detailed => Mode::Detailed,
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Simulate {
            scenario,
            common,
            collective,
            min_bytes,
            max_bytes,
            factor,
            dtype,
            op,
            format,
        } => {
            let base = match &scenario {
                Some(p) => {
                    Some(config::parse_scenario(&p.display().to_string(), &config::load_text(p)?)?)
                }
                None => None,
            };
            let mut s = apply_common(base, &common)?;
            if let Some(c) = collective {
                s.sweep.collective = Collective::parse(&c)
                    .ok_or_else(|| anyhow!("--collective {c}: unknown collective"))?;
            }
            if let Some(b) = min_bytes {
                s.sweep.min_bytes = parse_size("--min-bytes", &b)?;
            }
            if let Some(b) = max_bytes {
                s.sweep.max_bytes = parse_size("--max-bytes", &b)?;
            }
            if let Some(f) = factor {
                s.sweep.factor = f;
            }
            if let Some(d) = dtype {
                s.sweep.dtype =
                    DataType::parse(&d).ok_or_else(|| anyhow!("--dtype {d}: unknown data type"))?;
            }
            if let Some(o) = op {
                s.sweep.op =
                    ReduceOp::parse(&o).ok_or_else(|| anyhow!("--op {o}: unknown reduction"))?;
            }
            if let Err((field, msg)) = s.sweep.check() {
                bail!("{}: {msg}", field.replace("workload.", "--").replace('_', "-"));
            }
            let profile = load_profile(common.profile.as_deref())?;
            let m = mode(common.mode);
            let (rows, communicator) = collsim::simulate(&s, &profile, m)?;
            let report =
                SimReport { scenario: &s, profile: &profile, mode: m, communicator, rows: &rows };
            let fmt: &dyn SimFormat = match format {
                SimFmt::Table => &report::table::Table,
                SimFmt::Nccl => &report::nccl::Nccl,
                SimFmt::Json => &report::json::Json,
                SimFmt::Csv => &report::csv::Csv,
            };
            let mut out = open_output(common.output.as_deref())?;
            fmt.write_sim(&report, &mut out)?;
            out.flush()?;
        }
        Command::Topo { command: TopoCommand::Show { topology, nodes, format, output } } => {
            if nodes == 0 {
                bail!("--nodes 0: need at least one node");
            }
            let (_, spec) = config::resolve_topology(&topology, None)?;
            let cluster = collsim::hw::Cluster::new(&spec, nodes, spec.gpu.count);
            let view = report::topo::TopoView::new(&cluster);
            let mut out = open_output(output.as_deref())?;
            match format {
                ValFmt::Table => view.write_text(&mut out)?,
                ValFmt::Json => {
                    serde_json::to_writer_pretty(&mut out, &view)?;
                    writeln!(out)?;
                }
            }
            out.flush()?;
        }
        Command::Topo { command: TopoCommand::Import { nccl_xml, nvidia_smi, output } } => {
            let toml = match (&nccl_xml, &nvidia_smi) {
                (Some(p), _) => config::import::import_nccl_xml(
                    &p.display().to_string(),
                    &config::load_text(p)?,
                )?,
                (None, Some(p)) => config::import::import_nvidia_smi(
                    &p.display().to_string(),
                    &config::load_text(p)?,
                )?,
                (None, None) => bail!("topo import needs --nccl-xml FILE or --nvidia-smi FILE"),
            };
            // What is written must read back.
            config::parse_topology("imported topology", &toml)?;
            let mut out = open_output(output.as_deref())?;
            out.write_all(toml.as_bytes())?;
            out.flush()?;
        }
        Command::Explain { common, collective, bytes, dtype, format } => {
            if common.topology.is_none() {
                bail!("explain needs --topology (a preset name or a topology TOML)");
            }
            let s = apply_common(None, &common)?;
            let coll = Collective::parse(&collective)
                .ok_or_else(|| anyhow!("--collective {collective}: unknown collective"))?;
            let dt = DataType::parse(&dtype)
                .ok_or_else(|| anyhow!("--dtype {dtype}: unknown data type"))?;
            let size = parse_size("--bytes", &bytes)?.get();
            let spec = SweepSpec {
                collective: coll,
                min_bytes: Bytes::new(size),
                max_bytes: Bytes::new(size),
                factor: 2,
                dtype: dt,
                op: ReduceOp::Sum,
            };
            let profile = load_profile(common.profile.as_deref())?;
            let (cluster, comm, _) = collsim::build(&s)?;
            collsim::workload::sweep::check_supported(&spec, &comm)?;
            let elt = dt.size();
            let n = comm.nranks() as u64;
            // NCCL's byte count: the total for all_gather / reduce_scatter, as the size column.
            let nbytes = match coll {
                Collective::AllGather | Collective::ReduceScatter => {
                    size / n / 16 * 16 / elt * elt * n
                }
                // nccl-tests trims AllToAll to 16 bytes per peer, as the sweep does.
                Collective::AllToAll => size / n / 16 * 16 / elt * elt * n,
                _ => size / elt * elt,
            };
            let e = report::explain::Explanation::new(
                &cluster,
                &comm,
                coll,
                nbytes,
                elt,
                &profile,
                mode(common.mode),
            );
            let mut out = open_output(common.output.as_deref())?;
            match format {
                ValFmt::Table => e.write_text(&mut out)?,
                ValFmt::Json => {
                    serde_json::to_writer_pretty(&mut out, &e)?;
                    writeln!(out)?;
                }
            }
            out.flush()?;
        }
        Command::Validate { log, common, collective, format } => {
            let log_name = log.display().to_string();
            let text = config::load_text(&log)?;
            // nccl-tests' -J JSON (and collsim-bench's results.json) or its text output.
            let tests = if text.trim_start().starts_with('{') {
                nccl_log::parse_json(&text).map_err(|e| anyhow!("{log_name}: {e}"))?
            } else {
                nccl_log::parse(&text)
            };
            if tests.is_empty() {
                bail!(
                    "{log_name}: no nccl-tests result table found (expected rows of size, count, type, redop, root, time, algbw, busbw ...)"
                );
            }
            let wanted = match &collective {
                Some(c) => Some(
                    Collective::parse(c)
                        .ok_or_else(|| anyhow!("--collective {c}: unknown collective"))?,
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
            if common.topology.is_none() {
                bail!("validate needs --topology (a preset name or a topology TOML)");
            }
            let s = apply_common(None, &common)?;
            let coll = match wanted.or(test.collective) {
                Some(c) => c,
                None => {
                    // nccl-tests prints per-rank counts for all_gather and reduce_scatter:
                    // size = count x element size x ranks. Refuse to guess those as all_reduce.
                    let nranks = (s.nodes * s.gpus_per_node) as u64;
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
                    eprintln!(
                        "collsim: {log_name}: no collective named in the log; assuming all_reduce"
                    );
                    Collective::AllReduce
                }
            };
            let profile = load_profile(common.profile.as_deref())?;
            let (cluster, comm, _) = collsim::build(&s)?;
            let v = validate::compare(&cluster, &comm, test, coll, &profile, mode(common.mode))
                .map_err(|e| anyhow!("{log_name}: {e}"))?;
            let report = ValidationReport {
                log: &log_name,
                scenario: &s,
                profile: &profile,
                validation: &v,
            };
            let fmt: &dyn ValidationFormat = match format {
                ValFmt::Table => &report::table::Table,
                ValFmt::Json => &report::json::Json,
            };
            let mut out = open_output(common.output.as_deref())?;
            fmt.write_validation(&report, &mut out)?;
            out.flush()?;
        }
    }
    Ok(())
}
