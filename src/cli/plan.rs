//! `plan`: a plan file's candidates, sharded or whole.

use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow, bail};

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
    let ranking = collsim::plan::rank(&summary.objective, outcomes);
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
    let flag = |name: &str, v: &Option<String>, parse: fn(&str) -> Result<f64, String>| {
        v.as_deref().map(|t| parse(t).map_err(|e| usage(format!("{name} {t:?}: {e}")))).transpose()
    };
    let over = config::plan::Overrides {
        deadline_h: flag("--deadline", &args.deadline, config::plan::parse_hours)?,
        budget_usd: flag("--budget", &args.budget, config::plan::parse_usd)?,
        region: match args.region.as_deref() {
            Some(t) => Some(
                config::plan::parse_region(t).map_err(|e| usage(format!("--region {t:?}: {e}")))?,
            ),
            None => None,
        },
    };
    let mut plan =
        config::parse_plan_with(&path.display().to_string(), &config::load_text(&path)?, &over)?;
    // The files the run reads, which its outputs must not replace.
    let mut inputs = vec![path.clone()];
    inputs.extend(args.profile.clone());
    inputs.extend(plan.instances.iter().filter_map(|i| match &i.topology {
        config::TopologySource::File(f) => Some(f.clone()),
        config::TopologySource::Preset(_) => None,
    }));
    inputs.extend(plan.scenario.clone());
    inputs.extend(plan.neighbours.as_ref().map(|(p, _)| p.clone()));
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
    // Without a node list, the search fills it in: every shard runs the same search.
    let found = match plan.search {
        Some(_) => {
            let progress = Progress::new(collsim::plan::groups(&plan) as u64, "node searches");
            let s = collsim::plan::search(&plan, &profile, m, &|| progress.tick());
            drop(progress);
            plan.nodes = s.nodes;
            s.found
        }
        None => Vec::new(),
    };
    let cands = collsim::plan::candidates(&plan);
    let run =
        format!("{profile_text}\0{m:?}\0{:?}", (over.deadline_h, over.budget_usd, &over.region));
    let mut summary = Summary::of(&plan, cands.len(), &run);
    summary.search = found;
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
    refuse_overwrite("-o", &out_path, &inputs)?;
    // What the file already holds: resume from it, or refuse to add to it.
    let (file, done) =
        shard::open_results(&out_path, &summary, &shard, args.resume).map_err(|e| anyhow!(e))?;
    let mine: Vec<_> =
        cands.into_iter().filter(|c| shard.owns(c.index) && !done.contains(&c.index)).collect();
    let progress = Progress::new(mine.len() as u64, "candidates");
    let sink = std::sync::Mutex::new(shard::OrderedLines::new(
        file,
        mine.iter().map(|c| c.index).collect(),
    ));
    collsim::plan::evaluate_all(&plan, &mine, &profile, m, &|o| {
        progress.tick();
        let line = shard::outcome_line(&summary, o);
        sink.lock().unwrap_or_else(|e| e.into_inner()).put(o.index, line);
    });
    drop(progress);
    if let Some(e) = sink.into_inner().unwrap_or_else(|e| e.into_inner()).finish() {
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
