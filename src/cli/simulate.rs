//! `simulate`, `profile`, `explain` and `topo`.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Result, anyhow};

use collsim::collective::Collective;
use collsim::config;
use collsim::report::{self, SimFormat, SimReport};
use collsim::units::Bytes;
use collsim::workload::sweep::SweepSpec;
use collsim::workload::{DataType, ReduceOp};

use super::common::*;
use super::sweep::*;
use super::ui::*;
use crate::*;

/// `collsim profile`.
pub(crate) fn profile(args: ProfileArgs) -> Result<()> {
    use collsim::workload::profile;
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
    let host = 0.0 + p.step.iter().map(profile::host_us).sum::<f64>();
    let cut = p
        .memory
        .as_ref()
        .and_then(|m| m.step_ms)
        .filter(|&ms| ms < p.traced_step_ms)
        .map(|ms| format!(" (cut to what the step timed without the profiler, {ms:.3} ms, leaves)"))
        .unwrap_or_default();
    e.push_str(&format!(
        "host gaps kept as time: {:.3} ms{cut}; {} collectives; {} entries{}\n",
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
pub(crate) fn simulate(
    SimulateArgs {
        scenario,
        common,
        collective,
        min_bytes,
        max_bytes,
        factor,
        dtype,
        op,
        iters,
        warmup_iters,
        check,
        format,
        trace,
        plot,
        sweep,
        export_calls,
        workload_trace,
        comms,
    }: SimulateArgs,
) -> Result<()> {
    // The flags that shape a sweep (and what the nccl layouts print of it).
    let flags = SweepFlags {
        collective,
        min_bytes,
        max_bytes,
        factor,
        dtype,
        op,
        iters,
        warmup_iters,
        check,
    };
    if !sweep.is_empty() {
        if comms.is_some() {
            bail_usage!(
                "--comms: a --sweep times each point's step alone (simulate one point without --sweep)"
            );
        }
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
        if let Some(f) = flags.run_flag() {
            bail_usage!(
                "{f}: the nccl layouts print it (--format nccl, nccl-json); a --sweep prints as table, json or csv"
            );
        }
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
        (collsim::Error::Field(m), Some(p)) => anyhow!("{p}: {m}"),
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
        let policy = match comms {
            Some(CommsArg::Cached) => collsim::workload::Policy::Cached,
            _ => collsim::workload::Policy::Shared,
        };
        let runs = collsim::simulate_jobs_with(&s, &profile, m, policy, &|| progress.tick())
            .map_err(whose)?;
        drop(progress);
        let mut out = open_output(common.output.as_deref())?;
        match format {
            SimFmt::Table => report::jobs::table(&s, &runs, &profile, m, &mut out)?,
            SimFmt::Json => report::jobs::json(&s, &runs, &profile, m, &mut out)?,
            SimFmt::Nccl | SimFmt::NcclJson | SimFmt::Csv => {
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
        let step = match (comms, &trace) {
            (Some(CommsArg::Shared), _) => collsim::simulate_ddp_shared,
            (_, Some(_)) => collsim::simulate_ddp_with_links,
            (_, None) => collsim::simulate_ddp,
        };
        let (r, _) = step(&s, &profile, mode(common.mode)).map_err(whose)?;
        if let Some(w) = collsim::sim::misfit_warning(&s, &spec, r.world) {
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
            SimFmt::Nccl | SimFmt::NcclJson => {
                bail_usage!(
                    "--format {}: a DDP step prints as table, json or csv",
                    nccl_name(format)
                )
            }
        }
        out.finish()?;
        if let Some(p) = trace {
            let mut f = Vec::new();
            report::trace::ddp_step(&r, &mut f)?;
            stage("--trace", &p, &f)?;
        }
        if let Some(p) = plot {
            stage_svg("--plot", &p, |t| {
                t.push_str(&report::gantt::ddp_step_svg(&r, report::ddp::step_kind(&spec)));
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
    if trace.is_some() {
        bail_usage!(
            "--trace draws a DDP step; this scenario's workload is a sweep (--plot draws it)"
        );
    }
    if !matches!(format, SimFmt::Nccl | SimFmt::NcclJson)
        && let Some(f) = flags.run_flag()
    {
        bail_usage!(
            "{f}: only the nccl layouts print it (--format nccl or nccl-json); the predicted times do not depend on it"
        );
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
        run: flags.test_run(),
    };
    let fmt: &dyn SimFormat = match format {
        SimFmt::Table => &report::table::Table,
        SimFmt::Nccl => &report::nccl::Nccl,
        SimFmt::NcclJson => &report::nccl::NcclJson,
        SimFmt::Json => &report::json::Json,
        SimFmt::Csv => &report::csv::Csv,
    };
    let mut out = open_output(common.output.as_deref())?;
    fmt.write_sim(&report, &mut out)?;
    out.finish()?;
    if let Some(p) = plot {
        let label = format!(
            "{} on {} x {} ({} GPUs), {}",
            sweep.collective.name(),
            s.nodes,
            s.node.name,
            s.nodes * s.gpus_per_node,
            if s.nccl.is_empty() { "NCCL's choice per size".to_string() } else { nccl_vars(&s) }
        );
        let title =
            format!("{} busbw against size, as nccl-tests prints it", sweep.collective.name());
        stage_svg("--plot", &p, |t| report::plot::collective_svg(&title, &[(label, &rows)], t))?;
    }
    Ok(())
}

/// The scenario's NCCL variables, "NCCL_ALGO=Ring NCCL_PROTO=Simple".
fn nccl_vars(s: &collsim::config::Scenario) -> String {
    s.nccl.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
}

/// `collsim explain`.
pub(crate) fn explain(
    ExplainArgs { common, collective, bytes, dtype, format }: ExplainArgs,
) -> Result<()> {
    if common.topology.is_none() {
        bail_usage!("explain needs --topology (a preset name or a topology TOML)");
    }
    let s = apply_common(None, &common)?;
    let coll = Collective::parse(&collective).ok_or_else(|| {
        usage(format!(
            "--collective: {}",
            config::unknown_name("collective", &collective, &Collective::NAMES)
        ))
    })?;
    let dt = DataType::parse(&dtype).ok_or_else(|| {
        usage(format!("--dtype: {}", config::unknown_name("data type", &dtype, &DataType::NAMES)))
    })?;
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
        backend: Default::default(),
        barrier: false,
    };
    let profile = load_profile_for(common.profile.as_deref(), &s)?;
    let (cluster, comm, _) = collsim::build(&s)?;
    collsim::workload::sweep::check_supported(spec.collective, &comm)
        .map_err(|e| blame_nccl(e.into(), &s.nccl_at))?;
    let elt = dt.size();
    // NCCL's byte count (the total for all_gather / reduce_scatter, as the size column), as
    // nccl-tests trims it and the sweep does.
    let (_, nbytes) = collsim::workload::sweep::counts(coll, size, elt, comm.nranks());
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

/// `collsim topo show` and `collsim topo import`.
pub(crate) fn topo(command: TopoCommand) -> Result<()> {
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

/// `collsim presets`: every shipped topology preset (those whose GPU holds `gpu`), with the
/// instance type each models.
pub(crate) fn presets(gpu: Option<&str>, format: ValFmt, output: Option<PathBuf>) -> Result<()> {
    use collsim::config::{INSTANCE_TYPES, preset_names};
    let mut entries = Vec::new();
    for name in preset_names() {
        let (_, node) = config::resolve_topology(name, None)?;
        let instance = INSTANCE_TYPES.iter().find(|(_, p)| *p == name).map(|(t, _)| *t);
        entries.push(report::presets::Entry::of(name, instance, &node));
    }
    if let Some(g) = gpu {
        let want = g.trim().to_ascii_lowercase();
        let models: std::collections::BTreeSet<String> =
            entries.iter().map(|e| e.gpu.clone()).collect();
        entries.retain(|e| e.gpu.to_ascii_lowercase().contains(&want));
        if entries.is_empty() || want.is_empty() {
            bail_usage!(
                "--gpu {g:?}: no preset's GPU holds it (GPUs: {})",
                models.into_iter().collect::<Vec<_>>().join(", ")
            );
        }
    }
    let mut out = open_output(output.as_deref())?;
    match format {
        ValFmt::Table => report::presets::table(&entries, &mut out)?,
        ValFmt::Json => report::presets::json(&entries, &mut out)?,
    }
    out.finish()?;
    Ok(())
}
