//! `validate`: the model against nccl-tests logs, one by one or from a manifest.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow};

use collsim::calibrate::validate;
use collsim::config;
use collsim::report::{self, ValidationFormat, ValidationReport};

use super::common::*;
use super::logs::*;
use super::ui::*;
use crate::*;

/// `collsim validate`.
pub(crate) fn validate(
    ValidateArgs {
        log,
        manifest,
        runs,
        no_held_out,
        refit,
        fits_dir,
        common,
        collective,
        plot,
        format,
    }: ValidateArgs,
) -> Result<()> {
    if let Some(r) = runs {
        return validate_runs(&r, &common, format);
    }
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
pub(crate) fn validate_manifest(
    path: &Path,
    common: &Common,
    fits: Option<collsim::calibrate::accuracy::HeldOutFits>,
    format: ValFmt,
) -> Result<()> {
    use collsim::calibrate::accuracy::{self};

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
    use collsim::calibrate::manifest::{self, Told};
    let rows = manifest::read(path).map_err(|e| anyhow!(e))?;
    let (base_name, base_text) = profile_source(common.profile.as_deref())?;
    let profile = config::parse_profile(&base_name, &base_text)?;
    let resolved = manifest::resolve(path, &rows, &flags(common), &mut |told| match told {
        Told::Said(line) => tell(vec![line], false),
        Told::Ignored(ignored) => warn_ignored(&ignored),
    })
    .map_err(|e| anyhow!(e))?;
    let (curves, inputs) = (resolved.curves, resolved.inputs);
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
    write_report(common, format, || report::accuracy::text(&r), &r)
}

/// `validate --runs`: every published training run of a CSV replayed on the setup its row
/// records, then leave-one-source-out.
pub(crate) fn validate_runs(path: &Path, common: &Common, format: ValFmt) -> Result<()> {
    use collsim::calibrate::training;
    for (flag, given) in [
        ("--topology", common.topology.is_some()),
        ("--nodes", common.nodes.is_some()),
        ("--gpus-per-node", common.gpus_per_node.is_some()),
        ("--gpus-per-process", common.gpus_per_process.is_some()),
        ("--nccl", !common.nccl.is_empty()),
        ("--nccl-version", common.nccl_version.is_some()),
    ] {
        if given {
            bail_usage!(
                "{flag}: --runs replays each run on the setup its row records; edit the file"
            );
        }
    }
    let name = path.display().to_string();
    let runs = training::read_runs(&name, &config::load_text(path)?).map_err(|e| anyhow!(e))?;
    if let Some(o) = &common.output {
        refuse_overwrite("-o", o, &[path.to_path_buf()])?;
    }
    let profile = load_profile(common.profile.as_deref())?;
    let m = mode(common.mode);
    let replayed = {
        use rayon::prelude::*;
        let progress = Progress::new(runs.len() as u64, "runs");
        // Every run is replayed; the first failure in the file's order is the one reported.
        let all: Vec<_> = runs
            .par_iter()
            .map(|r| {
                let _tick = TickOnDrop(&progress);
                training::replay(&name, r, &profile, m)
            })
            .collect();
        all.into_iter().collect::<Result<Vec<_>, _>>().map_err(|e| anyhow!(e))?
    };
    let acc = training::accuracy(&runs, &replayed);
    let r = report::training::TrainingReport {
        runs_file: &name,
        profile: &profile.name,
        accuracy: &acc,
    };
    write_report(common, format, || report::training::text(&r), &r)
}

/// Writes a report as its text or as JSON to `-o` or stdout.
fn write_report<T: serde::Serialize>(
    common: &Common,
    format: ValFmt,
    text: impl FnOnce() -> String,
    doc: &T,
) -> Result<()> {
    let mut out = open_output(common.output.as_deref())?;
    match format {
        ValFmt::Table => out.write_all(text().as_bytes())?,
        ValFmt::Json => report::write_json(doc, &mut out)?,
    }
    out.finish()?;
    Ok(())
}

/// Where `validate --manifest` finds and keeps its held-out calibrations: `dir` alone where
/// given; else the manifest's `held-out-fits/` (the repository's, made by
/// calibration/profiles/regenerate.sh) and this build's cache, which new fits go to.
pub(crate) fn held_out_fits(
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
