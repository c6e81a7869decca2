//! The model's accuracy over a set of real curves (`collsim validate --manifest`): every curve
//! run with the setup its manifest row records, its |error| per size pooled per curve, by size
//! band and by algorithm; and leave-one-cluster-out, where each cluster is predicted by a
//! profile calibrated on the other clusters of its GPU generation — the figure a new user meets
//! on a cluster collsim has never seen.

use std::collections::BTreeMap;

use super::pipeline::{self, LogInput};
use super::validate::{self, Validation};
use crate::collective::{Mode, TimingParams};

/// One row of a manifest: where a curve's log is and what it ran on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestRow {
    /// Its line in the manifest (1-based, the header is line 1).
    pub line: usize,
    /// The curve's name.
    pub id: String,
    /// The log, relative to the manifest's directory.
    pub file: String,
    /// The collectives it holds (one test each).
    pub collectives: Vec<String>,
    /// Nodes, when the manifest states it.
    pub nodes: Option<usize>,
    /// GPUs per node, when stated.
    pub gpus_per_node: Option<usize>,
    /// The cluster it ran on: leave-one-cluster-out leaves out every curve of one cluster.
    pub cluster: String,
    /// collsim's topology for it (a preset or a path relative to the manifest); None: the
    /// preset of the GPU the log names.
    pub topology: Option<String>,
    /// NCCL variables the run set that its log does not print (KEY=VALUE).
    pub nccl: Vec<String>,
}

/// The most nodes (or GPUs per node) a manifest row may state: the bound scenario files have.
const MAX_COUNT: usize = 1 << 20;

/// Reads a manifest CSV (`calibration/data/manifest.csv`'s columns: curve_id, file, collective,
/// gpus_per_node, nodes, cluster, collsim_topology, collsim_nccl; others are ignored). Errors
/// are one line naming the file, the line and the column.
pub fn read_manifest(name: &str, text: &str) -> Result<Vec<ManifestRow>, String> {
    let mut reader = csv::ReaderBuilder::new().from_reader(text.as_bytes());
    let headers = reader.headers().map_err(|e| format!("{name}:1: {e}"))?.clone();
    let col = |h: &str| {
        headers.iter().position(|c| c.trim() == h).ok_or_else(|| {
            format!("{name}:1: no column {h:?} (a manifest names curve_id, file, collective, gpus_per_node, nodes, cluster, collsim_topology, collsim_nccl)")
        })
    };
    let id = col("curve_id")?;
    let file = col("file")?;
    let coll = col("collective")?;
    let gpn = col("gpus_per_node")?;
    let nodes = col("nodes")?;
    let cluster = col("cluster")?;
    let topo = col("collsim_topology")?;
    let nccl = col("collsim_nccl")?;
    let mut rows = Vec::new();
    for rec in reader.records() {
        let rec = rec.map_err(|e| {
            let line = e.position().map_or(0, |p| p.line());
            format!("{name}:{line}: {e}")
        })?;
        let line = rec.position().map_or(0, |p| p.line()) as usize;
        let field = |i: usize| rec.get(i).unwrap_or("").trim().to_string();
        let count = |i: usize, what: &str| -> Result<Option<usize>, String> {
            let v = field(i);
            match v.parse::<usize>() {
                Ok(0) => Err(format!("{name}:{line}: {what}: 0; need at least 1")),
                Ok(n) if n > MAX_COUNT => {
                    Err(format!("{name}:{line}: {what}: {n}; at most {MAX_COUNT}"))
                }
                Ok(n) => Ok(Some(n)),
                Err(_) if v.is_empty() || v.starts_with("n/a") || v.starts_with("not stated") => {
                    Ok(None)
                }
                Err(_) => Err(format!("{name}:{line}: {what}: {v:?} is not a count")),
            }
        };
        let row = ManifestRow {
            line,
            id: field(id),
            file: field(file),
            collectives: field(coll)
                .split(',')
                .map(|c| c.trim().to_string())
                .filter(|c| !c.is_empty())
                .collect(),
            nodes: count(nodes, "nodes")?,
            gpus_per_node: count(gpn, "gpus_per_node")?,
            cluster: field(cluster),
            topology: Some(field(topo)).filter(|t| !t.is_empty()),
            nccl: field(nccl).split_whitespace().map(str::to_string).collect(),
        };
        for (v, what) in [(&row.id, "curve_id"), (&row.file, "file"), (&row.cluster, "cluster")] {
            if v.is_empty() {
                return Err(format!("{name}:{line}: {what}: empty"));
            }
        }
        if row.collectives.is_empty() {
            return Err(format!("{name}:{line}: collective: empty"));
        }
        if let Some(dup) = rows.iter().find(|r: &&ManifestRow| r.id == row.id) {
            return Err(format!(
                "{name}:{line}: curve_id: {} already on line {}",
                row.id, dup.line
            ));
        }
        rows.push(row);
    }
    if rows.is_empty() {
        return Err(format!("{name}: no curves"));
    }
    Ok(rows)
}

/// One curve, read and set up: its log's test on its own scenario.
#[derive(Debug, Clone)]
pub struct Curve {
    /// Its name ("H100_2N8G_AR_AWSP5_A", with "@all_gather" for one test of several).
    pub id: String,
    /// Its cluster.
    pub cluster: String,
    /// The log's test and the scenario it ran on.
    pub input: LogInput,
}

impl Curve {
    /// Its GPU generation, by compute capability ("sm90"): calibration carries over between
    /// clusters of one generation.
    pub fn generation(&self) -> String {
        format!("sm{}", self.input.scenario.node.gpu.model.sm)
    }

    /// Ranks it ran on.
    pub fn ranks(&self) -> usize {
        self.input.scenario.nodes * self.input.scenario.gpus_per_node
    }
}

/// Median and p95 |error| % over a set of sizes.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Stats {
    /// Sizes.
    pub sizes: usize,
    /// Median |error| %.
    pub median_abs_error_pct: f64,
    /// 95th percentile (nearest rank) |error| %.
    pub p95_abs_error_pct: f64,
}

impl Stats {
    /// No sizes (a figure over nothing; a log always has sizes, so it is never printed).
    const NONE: Stats = Stats { sizes: 0, median_abs_error_pct: 0.0, p95_abs_error_pct: 0.0 };

    /// Of these errors (%); None when there are none.
    pub fn of(errors: &[f64]) -> Option<Stats> {
        if errors.is_empty() {
            return None;
        }
        let (m, p) = validate::summary(errors);
        Some(Stats { sizes: errors.len(), median_abs_error_pct: m, p95_abs_error_pct: p })
    }
}

/// Size bands of the report: (label, largest size in it).
pub const BANDS: [(&str, u64); 5] = [
    ("<= 64 KiB", 64 << 10),
    ("<= 1 MiB", 1 << 20),
    ("<= 16 MiB", 16 << 20),
    ("<= 256 MiB", 256 << 20),
    ("> 256 MiB", u64::MAX),
];

/// The band index of a size.
fn band(bytes: u64) -> usize {
    BANDS.iter().position(|&(_, top)| bytes <= top).unwrap_or(BANDS.len() - 1)
}

/// One group per size band that has sizes, from the errors gathered per band.
fn band_groups(bands: &[Vec<f64>]) -> Vec<Group> {
    BANDS
        .iter()
        .zip(bands)
        .filter_map(|((l, _), e)| Stats::of(e).map(|stats| Group { name: l.to_string(), stats }))
        .collect()
}

/// A group of sizes and its errors.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Group {
    /// Its name (a size band, "Ring/LL128", a curve).
    pub name: String,
    /// Its errors.
    #[serde(flatten)]
    pub stats: Stats,
}

/// One curve's accuracy.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CurveAccuracy {
    /// The curve.
    pub id: String,
    /// Its cluster.
    pub cluster: String,
    /// Its GPU generation.
    pub generation: String,
    /// Its collective.
    pub collective: &'static str,
    /// Ranks.
    pub ranks: usize,
    /// Over all its sizes.
    #[serde(flatten)]
    pub stats: Stats,
    /// By size band (None: no size in it).
    pub bands: Vec<Option<Stats>>,
}

/// A set of curves' accuracy under one profile.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Accuracy {
    /// Per curve, in the manifest's order.
    pub curves: Vec<CurveAccuracy>,
    /// Every size of every curve.
    pub pooled: Stats,
    /// Pooled by size band.
    pub by_band: Vec<Group>,
    /// Pooled by the algorithm and protocol simulated.
    pub by_algorithm: Vec<Group>,
}

/// Validates `curve` with `params`.
pub fn validate_curve(
    curve: &Curve,
    params: &TimingParams,
    mode: Mode,
) -> Result<Validation, String> {
    // The input's name says where the curve comes from (the manifest's line and the log).
    let (cluster, comm, _) = crate::sim::build(&curve.input.scenario)
        .map_err(|e| format!("{}: {e}", curve.input.name))?;
    validate::compare(&cluster, &comm, &curve.input.test, curve.input.coll, params, mode)
        .map_err(|e| format!("{}: {e}", curve.input.name))
}

/// The accuracy of `validations` (one per curve, in order).
pub fn accuracy(curves: &[Curve], validations: &[Validation]) -> Accuracy {
    let mut all = Vec::new();
    let mut bands: Vec<Vec<f64>> = vec![Vec::new(); BANDS.len()];
    let mut algos: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut out = Vec::new();
    for (c, v) in curves.iter().zip(validations) {
        let mut own: Vec<Vec<f64>> = vec![Vec::new(); BANDS.len()];
        for r in &v.rows {
            all.push(r.error_pct);
            own[band(r.size_bytes)].push(r.error_pct);
            bands[band(r.size_bytes)].push(r.error_pct);
            algos.entry(format!("{}/{}", r.algo, r.proto)).or_default().push(r.error_pct);
        }
        let errors: Vec<f64> = v.rows.iter().map(|r| r.error_pct).collect();
        out.push(CurveAccuracy {
            id: c.id.clone(),
            cluster: c.cluster.clone(),
            generation: c.generation(),
            collective: v.collective.name(),
            ranks: c.ranks(),
            stats: Stats::of(&errors).unwrap_or(Stats::NONE),
            bands: own.iter().map(|e| Stats::of(e)).collect(),
        });
    }
    Accuracy {
        curves: out,
        pooled: Stats::of(&all).unwrap_or(Stats::NONE),
        by_band: band_groups(&bands),
        by_algorithm: algos
            .iter()
            .filter_map(|(a, e)| Stats::of(e).map(|stats| Group { name: a.clone(), stats }))
            .collect(),
    }
}

/// One cluster predicted by a profile calibrated on the others of its generation.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct HeldOutCluster {
    /// The cluster left out.
    pub cluster: String,
    /// Its GPU generation.
    pub generation: String,
    /// The clusters calibrated on (empty: none of its generation; the base profile predicts it).
    pub calibrated_on: Vec<String>,
    /// The parameters the calibration fitted: (name, base value, fitted value).
    pub fitted: Vec<(String, String, String)>,
    /// Its curves under the base profile.
    pub base: Stats,
    /// Its curves under the calibrated profile.
    pub held_out: Stats,
    /// Per curve, held out.
    pub curves: Vec<Group>,
}

/// One cluster held out, its errors under the base profile, and its validations.
type HeldOut = (HeldOutCluster, Vec<f64>, Vec<Validation>);

/// Leave-one-cluster-out over `curves`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LeaveOneOut {
    /// Per cluster, in the order of first appearance.
    pub clusters: Vec<HeldOutCluster>,
    /// Every size of every cluster, under the base profile.
    pub base: Stats,
    /// Every size of every cluster, held out.
    pub held_out: Stats,
    /// Held out, by size band.
    pub by_band: Vec<Group>,
    /// Held out, by GPU generation (the classes of a collective plan's error bands,
    /// [`crate::plan::band`]).
    pub by_generation: Vec<Group>,
}

/// For each cluster, calibrates `base` (the profile named `base_name`, its text `base_text`) on
/// the curves of every other cluster of the same GPU generation — the physical parameters only,
/// no size-band factors, as a profile meant for other clusters is made — and predicts the
/// cluster's curves with it. A cluster alone in its generation is predicted by `base`.
/// `uncalibrated` are the curves' validations under `base` (as [`accuracy`] took them), in the
/// same order. A calibration `fits` keeps for the same inputs is used instead of fitting again
/// (see [`HeldOutFits`]); returns how many were. `done` is called as each cluster is finished
/// (for a progress bar).
pub fn leave_one_cluster_out(
    curves: &[Curve],
    uncalibrated: &[Validation],
    base_name: &str,
    base_text: &str,
    mode: Mode,
    fits: &HeldOutFits,
    done: &(dyn Fn() + Sync),
) -> Result<(LeaveOneOut, usize), String> {
    let reused = std::sync::atomic::AtomicUsize::new(0);
    use rayon::prelude::*;
    let mut clusters: Vec<&str> = Vec::new();
    for c in curves {
        if !clusters.contains(&c.cluster.as_str()) {
            clusters.push(&c.cluster);
        }
    }
    // Every cluster runs; the first failure in order is the one reported.
    let held: Vec<Result<HeldOut, String>> = clusters
        .par_iter()
        .map(|&name| -> Result<_, String> {
            let own: Vec<(&Curve, &Validation)> =
                curves.iter().zip(uncalibrated).filter(|(c, _)| c.cluster == name).collect();
            let generation = own[0].0.generation();
            // The others, with their predictions under the base profile: those enter the key,
            // so a changed model (which moves them) reads no fit kept before it.
            let (others, predicted): (Vec<&Curve>, Vec<&Validation>) = curves
                .iter()
                .zip(uncalibrated)
                .filter(|(c, _)| c.cluster != name && c.generation() == generation)
                .unzip();
            let mut calibrated_on: Vec<String> = Vec::new();
            for c in &others {
                if !calibrated_on.contains(&c.cluster) {
                    calibrated_on.push(c.cluster.clone());
                }
            }
            let key = fit_key(&others, &predicted, base_text, mode);
            let kept = if fits.refit { None } else { fits.find(&key) };
            let (params, fitted) = if others.is_empty() {
                (None, Vec::new())
            } else if let Some(k) = kept {
                reused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let p = crate::config::parse_profile("a kept held-out fit", &k.profile)
                    .map_err(|e| format!("leaving out {name}: {e}"))?;
                (Some(p), k.fitted)
            } else {
                let inputs: Vec<LogInput> = others
                    .iter()
                    .map(|c| LogInput { is_fit: Some(true), name: c.id.clone(), ..c.input.clone() })
                    .collect();
                let cal = pipeline::calibrate(
                    &others[0].input.scenario,
                    base_name,
                    base_text,
                    inputs,
                    None,
                    false,
                    mode,
                )
                .map_err(|e| format!("leaving out {name}: {e}"))?;
                let fitted: Vec<(String, String, String)> = cal
                    .params
                    .fitted
                    .iter()
                    .map(|p| (p.name(), p.show(&cal.base), p.show(&cal.params.params)))
                    .collect();
                let p = crate::config::parse_profile("the calibrated profile", &cal.profile)
                    .map_err(|e| format!("leaving out {name}: {e}"))?;
                fits.keep(&KeptFit {
                    key: key.clone(),
                    cluster: name.to_string(),
                    profile: cal.profile.clone(),
                    fitted: fitted.clone(),
                })
                .map_err(|e| format!("leaving out {name}: {e}"))?;
                (Some(p), fitted)
            };
            let mut before = Vec::new();
            let mut after = Vec::new();
            let mut per_curve = Vec::new();
            let mut validations = Vec::new();
            for &(c, b) in &own {
                // Alone in its generation: the profile as given, already run.
                let a = match &params {
                    Some(p) => validate_curve(c, p, mode)?,
                    None => b.clone(),
                };
                before.extend(b.rows.iter().map(|r| r.error_pct));
                let e: Vec<f64> = a.rows.iter().map(|r| r.error_pct).collect();
                after.extend(&e);
                if let Some(stats) = Stats::of(&e) {
                    per_curve.push(Group { name: c.id.clone(), stats });
                }
                validations.push(a);
            }
            done();
            let empty = || format!("{name}: no sizes");
            Ok((
                HeldOutCluster {
                    cluster: name.to_string(),
                    generation,
                    calibrated_on,
                    fitted,
                    base: Stats::of(&before).ok_or_else(empty)?,
                    held_out: Stats::of(&after).ok_or_else(empty)?,
                    curves: per_curve,
                },
                before,
                validations,
            ))
        })
        .collect();
    let held: Vec<HeldOut> = held.into_iter().collect::<Result<_, _>>()?;
    let mut before = Vec::new();
    let mut after = Vec::new();
    let mut bands: Vec<Vec<f64>> = vec![Vec::new(); BANDS.len()];
    let mut by_generation: std::collections::BTreeMap<String, Vec<f64>> = Default::default();
    for (h, b, vs) in &held {
        before.extend(b);
        for r in vs.iter().flat_map(|v| &v.rows) {
            after.push(r.error_pct);
            bands[band(r.size_bytes)].push(r.error_pct);
            by_generation.entry(h.generation.clone()).or_default().push(r.error_pct);
        }
    }
    let none = || "no sizes".to_string();
    let loo = LeaveOneOut {
        base: Stats::of(&before).ok_or_else(none)?,
        held_out: Stats::of(&after).ok_or_else(none)?,
        by_band: band_groups(&bands),
        by_generation: by_generation
            .into_iter()
            .filter_map(|(name, e)| Stats::of(&e).map(|stats| Group { name, stats }))
            .collect(),
        clusters: held.into_iter().map(|(h, _, _)| h).collect(),
    };
    Ok((loo, reused.into_inner()))
}

/// A held-out calibration kept on disk: what it fitted, for the inputs its key names.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct KeptFit {
    /// [`fit_key`] of the fit's inputs.
    pub key: String,
    /// The cluster held out.
    pub cluster: String,
    /// The calibrated profile's text.
    pub profile: String,
    /// (name, base value, fitted value) of each fitted parameter.
    pub fitted: Vec<(String, String, String)>,
}

/// Where leave-one-cluster-out finds the calibrations it made before (each the same function of
/// the same inputs: the curves fitted on, their scenarios, the base profile and the mode) and
/// keeps those it makes. A kept fit is used only where its key matches; `refit` ignores them.
/// Each directory has a salt mixed into the key: a cache of one build's fits salts with the
/// build, so that a changed model does not read them; the repository's fits (made by
/// `calibration/profiles/regenerate.sh`, checked in the long tier) have none.
#[derive(Debug, Clone, Default)]
pub struct HeldOutFits {
    /// Directories read, in order, each with its salt.
    pub read: Vec<(std::path::PathBuf, String)>,
    /// Where new fits are written, with its salt (a failed write only costs the next run time).
    pub write: Option<(std::path::PathBuf, String)>,
    /// Fit again, whatever is kept.
    pub refit: bool,
    /// A fit that cannot be written is an error (the directory was asked for), not a cache
    /// miss next time.
    pub write_required: bool,
}

impl HeldOutFits {
    fn path(dir: &std::path::Path, key: &str, salt: &str) -> std::path::PathBuf {
        dir.join(format!("{}.json", crate::config::plan::fingerprint(&[key, salt])))
    }

    /// The kept fit of `key`, if a directory holds one.
    fn find(&self, key: &str) -> Option<KeptFit> {
        self.read.iter().find_map(|(dir, salt)| {
            let text = std::fs::read_to_string(Self::path(dir, key, salt)).ok()?;
            let k: KeptFit = serde_json::from_str(&text).ok()?;
            (k.key == key).then_some(k)
        })
    }

    /// Writes `fit` where new fits go (staged and renamed: a reader never sees half a file). A
    /// failure is an error only where [`HeldOutFits::write_required`].
    fn keep(&self, fit: &KeptFit) -> Result<(), String> {
        let Some((dir, salt)) = &self.write else { return Ok(()) };
        let path = Self::path(dir, &fit.key, salt);
        let tmp = path.with_extension(format!("json.{}.tmp", std::process::id()));
        let text = serde_json::to_string_pretty(fit).expect("serialisable") + "\n";
        let written = std::fs::create_dir_all(dir)
            .and_then(|()| std::fs::write(&tmp, text))
            .and_then(|()| std::fs::rename(&tmp, &path));
        match written {
            Ok(()) => Ok(()),
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                if self.write_required { Err(format!("{}: {e}", path.display())) } else { Ok(()) }
            }
        }
    }
}

/// The key of a held-out calibration: a fingerprint of everything it is a function of (each
/// curve fitted on, with its scenario but for the node's price, and measured rows; the base
/// profile's text; the mode; collsim's version), and of the model as it stands: each curve's
/// predicted times under the base profile (`predicted`, in the order of `others`).
pub fn fit_key(
    others: &[&Curve],
    predicted: &[&Validation],
    base_text: &str,
    mode: Mode,
) -> String {
    let curves: Vec<String> = others
        .iter()
        .zip(predicted)
        .map(|(c, v)| {
            let times: Vec<f64> = v.rows.iter().map(|r| r.predicted_time_us).collect();
            // The node's price changes no fit: left out, so that a price edit keeps the fits.
            let mut scenario = c.input.scenario.clone();
            scenario.node.price = None;
            format!("{}|{:?}|{:?}|{:?}|{:?}", c.id, c.input.coll, c.input.test, scenario, times)
        })
        .collect();
    let mut parts: Vec<&str> = vec![env!("CARGO_PKG_VERSION"), base_text];
    let mode = format!("{mode:?}");
    parts.push(&mode);
    parts.extend(curves.iter().map(String::as_str));
    crate::config::plan::fingerprint(&parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str =
        "curve_id,file,collective,gpus_per_node,nodes,cluster,collsim_topology,collsim_nccl\n";

    #[test]
    fn reads_a_manifest() {
        let text = format!(
            "{HEADER}A,a.log,all_reduce,8,2,X,aws-p5,NCCL_ALGO=Ring NCCL_PROTO=Simple\nB,b.txt,\"all_reduce,all_gather\",n/a (single node),1,Y,,\n"
        );
        let rows = read_manifest("m.csv", &text).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].line, 2);
        assert_eq!(rows[0].nccl, ["NCCL_ALGO=Ring", "NCCL_PROTO=Simple"]);
        assert_eq!(rows[0].topology.as_deref(), Some("aws-p5"));
        assert_eq!((rows[0].nodes, rows[0].gpus_per_node), (Some(2), Some(8)));
        assert_eq!(rows[1].collectives, ["all_reduce", "all_gather"]);
        assert_eq!((rows[1].gpus_per_node, rows[1].topology.as_deref()), (None, None));
    }

    #[test]
    fn manifest_errors_name_the_line_and_column() {
        let bad = format!("{HEADER}A,a.log,all_reduce,eight,2,X,,\n");
        assert_eq!(
            read_manifest("m.csv", &bad).unwrap_err(),
            "m.csv:2: gpus_per_node: \"eight\" is not a count"
        );
        let dup = format!("{HEADER}A,a.log,all_reduce,8,2,X,,\nA,b.log,all_reduce,8,2,X,,\n");
        assert_eq!(
            read_manifest("m.csv", &dup).unwrap_err(),
            "m.csv:3: curve_id: A already on line 2"
        );
        let no_cluster = format!("{HEADER}A,a.log,all_reduce,8,2,,,\n");
        assert_eq!(read_manifest("m.csv", &no_cluster).unwrap_err(), "m.csv:2: cluster: empty");
        let e = read_manifest("m.csv", "curve_id,file\nA,a.log\n").unwrap_err();
        assert!(e.starts_with("m.csv:1: no column \"collective\""), "{e}");
    }

    #[test]
    fn bands_hold_their_upper_edge() {
        assert_eq!(band(8), 0);
        assert_eq!(band(64 << 10), 0);
        assert_eq!(band((64 << 10) + 1), 1);
        assert_eq!(band(256 << 20), 3);
        assert_eq!(band(1 << 30), 4);
    }
}
