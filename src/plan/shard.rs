//! Sharding a plan over a Slurm job array or a Kubernetes Indexed Job: which candidates a
//! shard owns, the results file each shard appends to (one JSON line per finished candidate,
//! after a header line naming the plan), resuming a killed shard, and merging the files.

use std::collections::BTreeMap;

use super::Outcome;
use crate::config::plan::{Amount, Objective, PlanSpec};

/// One of `n` disjoint slices of a plan's candidates: candidate i belongs to slice i mod n
/// (dealt round-robin, so that slow and fast candidates spread evenly).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// 0-based slice.
    pub k: usize,
    /// Slices.
    pub n: usize,
}

impl Shard {
    /// "K/N", 1-based as people count shards ("1/3", "2/3", "3/3").
    pub fn parse(s: &str) -> Result<Shard, String> {
        let bad = || format!("--shard {s}: expected K/N with 1 <= K <= N (e.g. 2/3), or auto");
        let (k, n) = s.split_once('/').ok_or_else(bad)?;
        let (k, n): (usize, usize) =
            (k.trim().parse().map_err(|_| bad())?, n.trim().parse().map_err(|_| bad())?);
        if k == 0 || n == 0 || k > n {
            return Err(bad());
        }
        Ok(Shard { k: k - 1, n })
    }

    /// The shard a Slurm array task or a Kubernetes Indexed Job pod is: Slurm's
    /// SLURM_ARRAY_TASK_ID (counted from SLURM_ARRAY_TASK_MIN) of SLURM_ARRAY_TASK_COUNT, or
    /// Kubernetes' JOB_COMPLETION_INDEX (0-based) of `count` (the Job's `completions`, which
    /// Kubernetes does not pass to the pod).
    pub fn from_env(
        env: impl Fn(&str) -> Option<String>,
        count: Option<usize>,
    ) -> Result<Shard, String> {
        let num = |k: &str| -> Result<Option<usize>, String> {
            env(k)
                .map(|v| {
                    v.trim().parse::<usize>().map_err(|_| format!("{k}={v:?}: not a whole number"))
                })
                .transpose()
        };
        if let Some(id) = num("SLURM_ARRAY_TASK_ID")? {
            let min = num("SLURM_ARRAY_TASK_MIN")?.unwrap_or(0);
            let n = match (num("SLURM_ARRAY_TASK_COUNT")?, count) {
                (_, Some(c)) => c,
                (Some(c), None) => c,
                (None, None) => return Err("--shard auto: SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_COUNT is not; give --shard-count".into()),
            };
            let k = id.checked_sub(min).ok_or_else(|| {
                format!(
                    "--shard auto: SLURM_ARRAY_TASK_ID {id} is below SLURM_ARRAY_TASK_MIN {min}"
                )
            })?;
            if n == 0 {
                return Err("--shard auto: SLURM_ARRAY_TASK_COUNT is 0".into());
            }
            if k >= n {
                return Err(format!(
                    "--shard auto: array task {id} (from {min}) is not one of {n} shards; the array must be {min}-{}",
                    min + n.saturating_sub(1)
                ));
            }
            return Ok(Shard { k, n });
        }
        if let Some(k) = num("JOB_COMPLETION_INDEX")? {
            let n = count.ok_or("--shard auto: JOB_COMPLETION_INDEX is set; give --shard-count (the Job's completions)")?;
            if k >= n {
                return Err(format!(
                    "--shard auto: JOB_COMPLETION_INDEX {k} is not one of {n} shards (0..{})",
                    n.saturating_sub(1)
                ));
            }
            return Ok(Shard { k, n });
        }
        Err("--shard auto: neither SLURM_ARRAY_TASK_ID (a Slurm job array) nor JOB_COMPLETION_INDEX (a Kubernetes Indexed Job) is set".into())
    }

    /// Whether candidate `index` is this shard's.
    pub fn owns(&self, index: usize) -> bool {
        index % self.n == self.k
    }
}

/// What a results file says about its plan (its first line), and all that ranking and
/// reporting need besides the outcomes.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Summary {
    /// The plan file, as given.
    pub plan: String,
    /// The plan's fingerprint: files of different plans do not merge.
    pub fingerprint: String,
    /// Candidates in the whole plan.
    pub candidates: usize,
    /// How much training.
    pub amount: Amount,
    /// The objective and constraints.
    pub objective: Objective,
    /// Whether the workload is a collective (its unit of work is a call).
    pub collective: bool,
    /// Per instance: its name, USD per node-hour at the plan's pricing (None: no price), and
    /// where the price comes from (without one: why, where it has a price for another region).
    pub prices: Vec<(String, Option<f64>, String)>,
    /// Without a node list: what the search for the smallest node count found, per group
    /// (empty: the plan lists its node counts).
    #[serde(default)]
    pub search: Vec<super::Found>,
}

impl Summary {
    /// The summary of `plan` evaluated under `run` (what else decides the outcomes: the
    /// profile's text and the simulation mode), which the fingerprint takes in.
    pub fn of(plan: &PlanSpec, candidates: usize, run: &str) -> Summary {
        let collective = plan
            .instances
            .iter()
            .filter_map(|i| i.workload.as_ref().ok())
            .any(|w| matches!(w, crate::config::Workload::Sweep(_)));
        Summary {
            plan: plan.name.clone(),
            fingerprint: crate::config::plan::fingerprint(&[
                &plan.fingerprint,
                run,
                env!("CARGO_PKG_VERSION"),
            ]),
            candidates,
            amount: plan.amount,
            objective: plan.objective.clone(),
            collective,
            prices: plan
                .instances
                .iter()
                .map(|i| match &i.price {
                    Some((p, src)) => (i.name.clone(), Some(*p), src.clone()),
                    None => (i.name.clone(), None, i.unpriced.clone().unwrap_or_default()),
                })
                .collect(),
            search: Vec::new(),
        }
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct HeaderLine {
    /// [`crate::version::FORMAT_VERSION`] of the collsim that wrote the file (0: written before
    /// headers carried it).
    #[serde(default)]
    format_version: u32,
    collsim_plan: Summary,
}

/// The header line of a results file (with its newline).
pub fn header_line(s: &Summary) -> String {
    let mut l = serde_json::to_string(&HeaderLine {
        format_version: crate::version::FORMAT_VERSION,
        collsim_plan: s.clone(),
    })
    .expect("serialisable");
    l.push('\n');
    l
}

/// The check an outcome's line carries: a fingerprint of the plan's and of the outcome as
/// written, so that a line edited by hand, or one from another plan, is refused when read.
fn outcome_check(plan_fingerprint: &str, o: &Outcome) -> String {
    let text = serde_json::to_string(o).expect("serialisable");
    crate::config::plan::fingerprint(&[plan_fingerprint, &text])
}

/// One outcome's line (with its newline), for the plan of `summary`: the outcome's fields and
/// its `check`.
pub fn outcome_line(summary: &Summary, o: &Outcome) -> String {
    #[derive(serde::Serialize)]
    struct Line<'a> {
        #[serde(flatten)]
        outcome: &'a Outcome,
        check: String,
    }
    let line = Line { outcome: o, check: outcome_check(&summary.fingerprint, o) };
    let mut l = serde_json::to_string(&line).expect("serialisable");
    l.push('\n');
    l
}

/// Why an outcome's numbers cannot be what a simulation gave: each a finite number; the step,
/// the rate and the scaling efficiency above 0, the rest 0 or more.
fn check_metrics(m: &super::Metrics) -> Result<(), String> {
    let positive = [
        ("step_ms", m.step_ms),
        ("samples_per_s", m.samples_per_s),
        ("scaling_efficiency", m.scaling_efficiency),
    ];
    let not_negative = [
        ("compute_ms", Some(m.compute_ms)),
        ("exposed_comm_ms", Some(m.exposed_comm_ms)),
        ("memory_gib", Some(m.memory_gib)),
        ("memory_usable_gib", Some(m.memory_usable_gib)),
        ("train_hours", Some(m.train_hours)),
        ("tokens_per_s", m.tokens_per_s),
        ("usd_per_hour", m.usd_per_hour),
        ("usd_per_m_samples", m.usd_per_m_samples),
        ("train_usd", m.train_usd),
    ];
    for (k, v) in positive {
        if !(v.is_finite() && v > 0.0) {
            return Err(format!("metrics.{k}: {v} is not a positive number"));
        }
    }
    for (k, v) in not_negative.into_iter().filter_map(|(k, v)| Some((k, v?))) {
        if !(v.is_finite() && v >= 0.0) {
            return Err(format!("metrics.{k}: {v} is not a number of 0 or more"));
        }
    }
    Ok(())
}

/// A results file read back: its summary, its outcomes, and the length of its complete
/// lines (a shard killed mid-write leaves a partial last line, which is not an outcome).
#[derive(Debug, Clone)]
pub struct ResultsFile {
    /// From the header line.
    pub summary: Summary,
    /// Outcomes, in file order.
    pub outcomes: Vec<Outcome>,
    /// Bytes of complete lines.
    pub complete: usize,
}

/// Reads a results file's text; `name` names it in errors.
pub fn read(name: &str, text: &str) -> Result<ResultsFile, String> {
    // A last line without its newline was cut off mid-write.
    let complete = text.rfind('\n').map_or(0, |p| p + 1);
    let mut lines = text[..complete].lines().enumerate();
    let summary = match lines.next() {
        Some((_, l)) => {
            let h = serde_json::from_str::<HeaderLine>(l)
                .map_err(|e| format!("{name}:1: not a collsim plan results file ({e})"))?;
            if h.format_version != crate::version::FORMAT_VERSION {
                return Err(format!(
                    "{name}:1: written in results format {}, this collsim writes {}: run the shard again",
                    h.format_version,
                    crate::version::FORMAT_VERSION
                ));
            }
            h.collsim_plan
        }
        None => {
            return Err(format!(
                "{name}: empty (no header line: was it written by `collsim plan --shard`?)"
            ));
        }
    };
    let mut outcomes = Vec::new();
    for (i, l) in lines {
        if l.trim().is_empty() {
            continue;
        }
        let at = format!("{name}:{}", i + 1);
        let mut v: serde_json::Value = serde_json::from_str(l)
            .map_err(|e| format!("{at}: not a candidate's outcome ({e})"))?;
        let check = v.as_object_mut().and_then(|o| o.remove("check"));
        let o: Outcome = serde_json::from_value(v)
            .map_err(|e| format!("{at}: not a candidate's outcome ({e})"))?;
        if let Some(m) = &o.metrics {
            check_metrics(m).map_err(|e| format!("{at}: candidate {}: {e}", o.index))?;
        }
        match check.as_ref().and_then(|c| c.as_str()) {
            Some(c) if c == outcome_check(&summary.fingerprint, &o) => {}
            Some(_) => {
                return Err(format!(
                    "{at}: candidate {} does not match its check: the line was edited, or belongs to another plan's file",
                    o.index
                ));
            }
            None => {
                return Err(format!(
                    "{at}: candidate {} has no check (written by an older collsim?); run its shard again",
                    o.index
                ));
            }
        }

        if o.index >= summary.candidates {
            return Err(format!(
                "{name}:{}: candidate {} of a plan of {}",
                i + 1,
                o.index,
                summary.candidates
            ));
        }
        outcomes.push(o);
    }
    Ok(ResultsFile { summary, outcomes, complete })
}

/// A shard's results file, ready for its next lines: created with its header, or (with
/// `resume`) an existing one of the same plan and shard, a line a killed run left half-written
/// dropped. Returns it with the candidates it already holds. Errors name the file.
pub fn open_results(
    path: &std::path::Path,
    summary: &Summary,
    shard: &Shard,
    resume: bool,
) -> Result<(std::fs::File, std::collections::BTreeSet<usize>), String> {
    use std::io::Write;
    let name = path.display().to_string();
    let mut done = std::collections::BTreeSet::new();
    if path.exists() && !path.is_file() {
        return Err(format!("{name}: not a regular file; give a results file path"));
    }
    let existing = if path.exists() {
        Some(crate::config::load_text(path).map_err(|e| e.to_string())?).filter(|t| !t.is_empty())
    } else {
        None
    };
    let cannot = |what: &'static str| {
        let name = name.clone();
        move |e: std::io::Error| format!("{name}: cannot {what}: {e}")
    };
    let mut file = match existing {
        Some(text) => {
            if !resume {
                return Err(format!(
                    "{name}: exists; pass --resume to continue this shard from it, or remove it"
                ));
            }
            let f = read(&name, &text)?;
            if f.summary.fingerprint != summary.fingerprint
                || f.summary.candidates != summary.candidates
            {
                return Err(format!(
                    "{name}: results of another plan ({}), not {}",
                    f.summary.plan, summary.plan
                ));
            }
            for o in &f.outcomes {
                if !shard.owns(o.index) {
                    return Err(format!(
                        "{name}: candidate {} is not shard {}/{}'s",
                        o.index,
                        shard.k + 1,
                        shard.n
                    ));
                }
                done.insert(o.index);
            }
            let file = std::fs::OpenOptions::new()
                .append(true)
                .open(path)
                .map_err(|e| format!("{name}: cannot write: {e}"))?;
            // Drop a line a killed run left half-written; appends go after what is left.
            file.set_len(f.complete as u64).map_err(cannot("write"))?;
            file
        }
        None => {
            let mut f = std::fs::File::create(path).map_err(cannot("create"))?;
            f.write_all(header_line(summary).as_bytes()).map_err(cannot("write"))?;
            f
        }
    };
    file.flush().map_err(cannot("write"))?;
    Ok((file, done))
}

/// Writes a shard's outcome lines in candidate order, whatever order the threads finish in: an
/// outcome that finishes early waits for those before it (so the same shard writes the same
/// bytes every run; a killed shard loses at most the held ones, which `--resume` runs again).
pub struct OrderedLines {
    file: std::fs::File,
    failed: Option<std::io::Error>,
    next: usize,
    order: Vec<usize>,
    held: BTreeMap<usize, String>,
}

impl OrderedLines {
    /// Lines for the candidates of `order` (their indices), in that order, into `file`.
    pub fn new(file: std::fs::File, order: Vec<usize>) -> OrderedLines {
        OrderedLines { file, failed: None, next: 0, order, held: BTreeMap::new() }
    }

    /// Takes candidate `index`'s line, writing it and every held one it was holding up.
    pub fn put(&mut self, index: usize, line: String) {
        use std::io::Write;
        self.held.insert(index, line);
        while let Some(line) = self.order.get(self.next).and_then(|i| self.held.remove(i)) {
            self.next += 1;
            if self.failed.is_none()
                && let Err(e) =
                    self.file.write_all(line.as_bytes()).and_then(|()| self.file.flush())
            {
                self.failed = Some(e);
            }
        }
    }

    /// The first write that failed, if one did.
    pub fn finish(self) -> Option<std::io::Error> {
        self.failed
    }
}

/// Merges results files into one plan's outcomes, each candidate once; an error names what
/// is missing or inconsistent.
pub fn merge(files: &[(String, ResultsFile)]) -> Result<(Summary, Vec<Outcome>), String> {
    let Some((first_name, first)) = files.first() else {
        return Err("plan merge: no results files".into());
    };
    let mut by_index: BTreeMap<usize, (&str, &Outcome)> = BTreeMap::new();
    for (name, f) in files {
        if f.summary.fingerprint != first.summary.fingerprint
            || f.summary.candidates != first.summary.candidates
        {
            return Err(format!(
                "{name}: results of another plan than {first_name} ({} with {} candidates, fingerprint {}, against {} with {}, {})",
                f.summary.plan,
                f.summary.candidates,
                f.summary.fingerprint,
                first.summary.plan,
                first.summary.candidates,
                first.summary.fingerprint
            ));
        }
        for o in &f.outcomes {
            if let Some((other, prev)) = by_index.insert(o.index, (name, o))
                && prev != o
            {
                return Err(format!("candidate {} differs between {other} and {name}", o.index));
            }
        }
    }
    let missing: Vec<usize> =
        (0..first.summary.candidates).filter(|i| !by_index.contains_key(i)).collect();
    if !missing.is_empty() {
        let shown: Vec<String> = missing.iter().take(8).map(|i| i.to_string()).collect();
        return Err(format!(
            "plan merge: {} of {} candidates missing (#{}{}): a shard has not finished or its file is not listed; resume it with --resume",
            missing.len(),
            first.summary.candidates,
            shown.join(", #"),
            if missing.len() > 8 { ", ..." } else { "" }
        ));
    }
    Ok((first.summary.clone(), by_index.into_values().map(|(_, o)| o.clone()).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_split_every_candidate_once() {
        let shards: Vec<Shard> =
            (1..=3).map(|k| Shard::parse(&format!("{k}/3")).unwrap()).collect();
        for i in 0..100 {
            assert_eq!(shards.iter().filter(|s| s.owns(i)).count(), 1);
        }
        for bad in ["0/3", "4/3", "1/0", "x/3", "3"] {
            assert!(Shard::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn auto_shards_read_slurm_and_kubernetes() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        };
        let slurm = env(&[
            ("SLURM_ARRAY_TASK_ID", "3"),
            ("SLURM_ARRAY_TASK_MIN", "1"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
        ]);
        assert_eq!(Shard::from_env(slurm, None), Ok(Shard { k: 2, n: 4 }));
        let k8s = env(&[("JOB_COMPLETION_INDEX", "0")]);
        assert_eq!(Shard::from_env(k8s, Some(5)), Ok(Shard { k: 0, n: 5 }));
        assert!(Shard::from_env(env(&[("JOB_COMPLETION_INDEX", "0")]), None).is_err());
        assert!(Shard::from_env(env(&[("JOB_COMPLETION_INDEX", "5")]), Some(5)).is_err());
        assert!(Shard::from_env(env(&[]), Some(5)).is_err());
    }
}
