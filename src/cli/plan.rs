//! `plan`: a plan file's candidates, sharded or whole.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};

use collsim::config;
use collsim::report;

use super::common::*;
use super::ui::*;
use crate::*;

/// Ranks a plan's outcomes and writes the report; fails (exit 1) when no candidate meets the
/// plan, after the report, naming the closest candidates.
pub(crate) fn plan_report(
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
pub(crate) fn plan(args: PlanArgs) -> Result<()> {
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
