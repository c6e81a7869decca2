//! Reader for nccl-tests text output, as people paste it: `[r,c]<stdout>:` tags from mpirun
//! (even in the middle of a row), thousands of `NCCL INFO` lines, lost `#` marks, old layouts,
//! several tests in one file. A file is split into tests at `# Collective test starting:` (or at
//! an `nThread` header after rows); a row is a line with at least 13 fields whose first two are
//! integers; rows of size 0 are dropped.
//!
//! nccl-tests' JSON (`-J`, reference ecosystem.md §2.2) and collsim-bench's `results.json`, which
//! uses the same layout, are read by [`parse_json`].

use crate::collective::Collective;
use crate::workload::DataType;

/// One printed row (out-of-place and in-place measurements).
#[derive(Debug, Clone, PartialEq)]
pub struct LogRow {
    /// `size` column, bytes.
    pub size_bytes: u64,
    /// `count` column.
    pub count: u64,
    /// `type` column.
    pub dtype: String,
    /// `redop` column.
    pub redop: String,
    /// Out-of-place time, µs.
    pub oop_time_us: f64,
    /// Out-of-place busbw, GB/s.
    pub oop_busbw: f64,
    /// In-place time, µs.
    pub ip_time_us: f64,
    /// In-place busbw, GB/s.
    pub ip_busbw: f64,
}

/// One test of a file.
#[derive(Debug, Clone, PartialEq)]
pub struct LogTest {
    /// The collective named in the header, if the header is there.
    pub collective: Option<Collective>,
    /// The rows, in file order.
    pub rows: Vec<LogRow>,
    /// The hosts of the ranks its "Using devices" block lists, one entry per rank (empty when
    /// the log does not list them).
    pub rank_hosts: Vec<String>,
    /// What else the log says about how it was run.
    pub setup: LogSetup,
}

/// How a test was run, as far as its log says: read from the nccl-tests header (`nThread 1
/// nGpus 8`, `nccl-library=22203`), the "Using devices" block (the GPU's name) and NCCL's INFO
/// lines (`NCCL version 2.22.3+cuda12.2`, `NCCL_BUFFSIZE set by environment to 8388608.`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogSetup {
    /// GPUs each host thread drives (`nGpus`; nccl-tests `-g`): its kernels are launched one
    /// after the other.
    pub gpus_per_process: Option<usize>,
    /// The GPU name of the first rank listed ("NVIDIA H100 80GB HBM3").
    pub gpu_name: Option<String>,
    /// The NCCL release ("2.22.3").
    pub nccl_version: Option<String>,
    /// NCCL_* variables NCCL reports as set by the environment, in first-seen order.
    pub env: Vec<(String, String)>,
}

impl LogTest {
    fn new(collective: Option<Collective>) -> LogTest {
        LogTest { collective, rows: Vec::new(), rank_hosts: Vec::new(), setup: LogSetup::default() }
    }

    /// Ranks and distinct hosts the log lists, if it lists them.
    pub fn layout(&self) -> Option<(usize, usize)> {
        if self.rank_hosts.is_empty() {
            return None;
        }
        let mut hosts: Vec<&String> = self.rank_hosts.iter().collect();
        hosts.sort();
        hosts.dedup();
        Some((self.rank_hosts.len(), hosts.len()))
    }
}

/// The host and GPU name of a `#  Rank  0 Group  0 Pid 1234 on HOST device  0 [0x07] NVIDIA
/// A100-SXM4-40GB` line (the name is empty when the line stops at the bus id).
fn rank_line(line: &str) -> Option<(String, String)> {
    let t: Vec<&str> = line.trim_start_matches('#').split_whitespace().collect();
    if t.first() != Some(&"Rank") {
        return None;
    }
    let on = t.iter().position(|&w| w == "on")?;
    let device = t.iter().position(|&w| w == "device")?;
    let host = t.get(on + 1).filter(|_| device > on + 1)?.to_string();
    // device N [bus id] NAME...
    let name = t.iter().skip(device + 2).skip_while(|w| w.starts_with('[')).copied();
    Some((host, name.collect::<Vec<_>>().join(" ")))
}

/// `nGpus` of an nccl-tests header line ("# nThread 1 nGpus 8 minBytes ..."): None where the
/// line has none, an error where it is not a count nccl-tests runs (1 to 1,024 GPUs a thread).
fn header_gpus(line: &str) -> Result<Option<usize>, String> {
    let t: Vec<&str> = line.split_whitespace().collect();
    let Some(at) = t.iter().position(|&w| w == "nGpus") else { return Ok(None) };
    let Some(v) = t.get(at + 1) else { return Ok(None) };
    match v.parse::<usize>() {
        Ok(g) if (1..=1024).contains(&g) => Ok(Some(g)),
        _ => Err(format!("the header's nGpus {v:?} is not a GPU count (1 to 1024)")),
    }
}

/// The NCCL release of "nccl-library=22203" (2.22.3; 0 means not known) or of an INFO line's
/// "NCCL version 2.22.3+cuda12.2".
fn nccl_version(line: &str) -> Option<String> {
    if let Some(at) = line.find("nccl-library=") {
        let digits: String = line[at + 13..].chars().take_while(|c| c.is_ascii_digit()).collect();
        let code: u64 = digits.parse().ok().filter(|&c| c > 0)?;
        let (major, minor, patch) = if code >= 10000 {
            (code / 10000, code % 10000 / 100, code % 100)
        } else {
            (code / 1000, code % 1000 / 100, code % 100)
        };
        return Some(format!("{major}.{minor}.{patch}"));
    }
    let at = line.find("NCCL version ")?;
    let v: String =
        line[at + 13..].chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
    (v.split('.').count() >= 2 && !v.ends_with('.')).then_some(v)
}

/// The variable and value of an INFO line "NCCL_BUFFSIZE set by environment to 8388608.".
fn env_setting(line: &str) -> Option<(String, String)> {
    let at = line.find(" set by environment to ")?;
    let key = line[..at].split_whitespace().last()?;
    if !key.starts_with("NCCL_")
        || !key.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
    {
        return None;
    }
    let value = line[at + 23..].trim().trim_end_matches('.');
    (!value.is_empty()).then(|| (key.to_string(), value.to_string()))
}

/// Removes every `[digits,digits]<stdout>:` or `<stderr>:` tag.
fn strip_tags(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(start) = rest.find('[') {
        out.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        let tag_len = after.find(']').and_then(|close| {
            let inner = &after[..close];
            let ok =
                inner.split(',').all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
            let tail = &after[close + 1..];
            let kind = ["<stdout>:", "<stderr>:"].iter().find(|k| tail.starts_with(*k));
            (ok && inner.contains(',')).then_some(()).and(kind).map(|k| close + 1 + k.len())
        });
        match tag_len {
            Some(n) => rest = &after[n..],
            None => {
                out.push('[');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// A line is a result row when it has at least 12 fields and its first two are integers; such a
/// row whose numbers do not read is an error (the reason), not a line to skip. Inside a table
/// (`in_table`: rows came before it), a line that starts with a size but stops short is a row cut
/// off, also an error.
fn parse_row(line: &str, in_table: bool) -> Result<Option<LogRow>, String> {
    let t: Vec<&str> = line.split_whitespace().collect();
    let cut = |t: &[&str]| format!("cut off: {} fields where a result row has 12 or more", t.len());
    let (Some(Ok(size)), Some(Ok(count))) =
        (t.first().map(|v| v.parse::<u64>()), t.get(1).map(|v| v.parse::<u64>()))
    else {
        if in_table && t.first().is_some_and(|v| v.parse::<u64>().is_ok()) {
            return Err(cut(&t));
        }
        return Ok(None);
    };
    if t.len() < 12 {
        // Size, count and a data type, or a size and count among rows: a row cut off, not a
        // line of something else.
        if in_table || t.get(2).is_some_and(|d| DataType::parse(d).is_some()) {
            return Err(cut(&t));
        }
        return Ok(None);
    }
    // With a root column: size count type redop root | time algbw busbw wrong | time algbw busbw
    // wrong. `-I 1` adds i_min i_max i_p99 i_cv% to each half (21 fields or more); `-S 1`
    // appends a timestamp.
    let base = if t.len() >= 13 { 5 } else { 4 };
    let half = if t.len() >= base + 16 { 8 } else { 4 };
    let f = |i: usize, what: &str| match t.get(i) {
        Some(v) => v.parse::<f64>().map_err(|_| format!("{what} {v:?} is not a number")),
        None => Err(format!("no {what} column")),
    };
    // A time's error quotes it as written.
    let time = |i: usize, what: &str| {
        let v = f(i, what)?;
        if v.is_finite() && v > 0.0 {
            Ok(v)
        } else {
            Err(format!("{what} {} is not a positive number of microseconds", t[i]))
        }
    };
    let row = LogRow {
        size_bytes: size,
        count,
        dtype: t[2].to_string(),
        redop: t[3].to_string(),
        oop_time_us: time(base, "out-of-place time")?,
        oop_busbw: f(base + 2, "out-of-place busbw")?,
        ip_time_us: time(base + half, "in-place time")?,
        ip_busbw: f(base + half + 2, "in-place busbw")?,
    };
    check_row(&row)?;
    Ok(Some(row))
}

/// The checks every row passes, whichever reader read it (text or `-J` JSON): its size fits a
/// GPU, its times are positive microseconds and its bus bandwidths finite and not negative.
fn check_row(row: &LogRow) -> Result<(), String> {
    if row.size_bytes == 0 {
        return Ok(()); // dropped by both readers: nothing moved, nothing timed
    }
    let max = crate::workload::sweep::MAX_CALL_BYTES;
    if row.size_bytes > max.get() {
        return Err(format!(
            "size {} is larger than {max}, more than any GPU holds",
            row.size_bytes
        ));
    }
    for (what, v) in [("out-of-place time", row.oop_time_us), ("in-place time", row.ip_time_us)] {
        if !(v.is_finite() && v > 0.0) {
            return Err(format!("{what} {v} is not a positive number of microseconds"));
        }
        if !(MIN_TIME_US..=MAX_TIME_US).contains(&v) {
            return Err(format!(
                "{what} {v:e} µs is no call's time: nccl-tests prints hundredths of a µs, and \
                 collsim holds calls up to 53 days ({MIN_TIME_US} to {MAX_TIME_US:e} µs)"
            ));
        }
    }
    for (what, v) in [("out-of-place busbw", row.oop_busbw), ("in-place busbw", row.ip_busbw)] {
        if !(v.is_finite() && v >= 0.0) {
            return Err(format!("{what} {v} is not a bandwidth (GB/s, zero or more)"));
        }
    }
    if DataType::parse(&row.dtype).is_none() {
        return Err(format!("data type {:?} is not one nccl-tests prints", row.dtype));
    }
    if !REDOPS.contains(&row.redop.as_str()) {
        return Err(format!(
            "reduction {:?} is not one nccl-tests prints ({})",
            row.redop,
            REDOPS.join(", ")
        ));
    }
    Ok(())
}

/// The shortest time a row may hold, µs: the least nccl-tests prints (`%7.2f`).
const MIN_TIME_US: f64 = 0.01;
/// The longest, µs: 53 days, past which collsim holds no simulated time.
const MAX_TIME_US: f64 = 53.0 * 86_400.0 * 1e6;

/// The reductions nccl-tests names in its `redop` column (`test_opnames` in its
/// `src/common.cu`, and "none" for collectives that do not reduce).
const REDOPS: [&str; 7] = ["sum", "prod", "max", "min", "avg", "mulsum", "none"];

/// Whether `row` belongs after `rows` in one test: sizes grow (a size repeated or smaller is a
/// row duplicated or out of place, or two runs pasted together without a header), and its
/// count is the size in elements of its type over the same number of ranks as the first row's
/// (nccl-tests prints per-rank counts for all_gather, reduce_scatter and alltoall).
fn fits_test(rows: &[LogRow], row: &LogRow) -> Result<(), String> {
    if let Some(last) = rows.last()
        && row.size_bytes <= last.size_bytes
    {
        return Err(format!(
            "size {} after size {}: a test's sizes grow (a row repeated or out of order, or two runs without a header between them?)",
            row.size_bytes, last.size_bytes
        ));
    }
    let Some(elt) = DataType::parse(&row.dtype).map(DataType::size) else { return Ok(()) };
    let per = row.count.saturating_mul(elt);
    let ratio = |r: &LogRow| r.count.checked_mul(elt).filter(|&b| b > 0).map(|b| r.size_bytes / b);
    if per == 0 || !row.size_bytes.is_multiple_of(per) {
        return Err(format!(
            "count {} of {} ({per} bytes) does not divide size {}",
            row.count, row.dtype, row.size_bytes
        ));
    }
    if let Some(first) = rows.first()
        && first.dtype == row.dtype
        && ratio(first) != ratio(row)
    {
        return Err(format!(
            "size {} is {} x count {} of {}, but the test's first row is {} x its count",
            row.size_bytes,
            row.size_bytes / per,
            row.count,
            row.dtype,
            ratio(first).unwrap_or(0)
        ));
    }
    Ok(())
}

/// A line that does not read (a result row, or the header's `nGpus`): its line (1-based) and
/// why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct LogError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub reason: String,
}

/// Splits a log into its tests.
pub fn parse(text: &str) -> Result<Vec<LogTest>, LogError> {
    let mut tests: Vec<LogTest> = Vec::new();
    // Said once for the whole file (NCCL's INFO lines, the version header): every test's.
    let mut version: Option<String> = None;
    let mut env: Vec<(String, String)> = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line = strip_tags(raw);
        let trimmed = line.trim();
        if version.is_none() {
            version = nccl_version(trimmed);
        }
        if let Some((k, v)) = env_setting(trimmed) {
            if !env.iter().any(|(key, _)| *key == k) {
                env.push((k, v));
            }
            continue;
        }
        if let Some(pos) = trimmed.find("Collective test starting:") {
            let name = trimmed[pos + "Collective test starting:".len()..].trim();
            tests.push(LogTest::new(Collective::parse(name)));
            continue;
        }
        if trimmed.contains("nThread") && trimmed.contains("minBytes") {
            if tests.last().is_none_or(|t| !t.rows.is_empty()) {
                tests.push(LogTest::new(None));
            }
            if let Some(t) = tests.last_mut() {
                t.setup.gpus_per_process =
                    header_gpus(trimmed).map_err(|reason| LogError { line: n + 1, reason })?;
            }
            continue;
        }
        // "Using devices": one line per rank, naming its host and GPU.
        if let Some((host, gpu)) = rank_line(trimmed) {
            if tests.is_empty() {
                tests.push(LogTest::new(None));
            }
            if let Some(t) = tests.last_mut().filter(|t| t.rows.is_empty()) {
                t.rank_hosts.push(host);
                if t.setup.gpu_name.is_none() && !gpu.is_empty() {
                    t.setup.gpu_name = Some(gpu);
                }
            }
            continue;
        }
        if trimmed.starts_with('#')
            || trimmed.contains("NCCL INFO")
            || trimmed.contains("NCCL WARN")
        {
            continue;
        }
        let in_table = tests.last().is_some_and(|t| !t.rows.is_empty());
        let row =
            parse_row(trimmed, in_table).map_err(|reason| LogError { line: n + 1, reason })?;
        if let Some(row) = row {
            if row.size_bytes == 0 {
                continue;
            }
            if tests.is_empty() {
                tests.push(LogTest::new(None));
            }
            if let Some(t) = tests.last_mut() {
                fits_test(&t.rows, &row).map_err(|reason| LogError { line: n + 1, reason })?;
                t.rows.push(row);
            }
        }
    }
    tests.retain(|t| !t.rows.is_empty());
    for t in &mut tests {
        t.setup.nccl_version = version.clone();
        t.setup.env = env.clone();
    }
    Ok(tests)
}

/// Why a JSON results file cannot be read: what is missing and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct JsonLogError(pub String);

/// The collective a `*_perf` binary name in `text` stands for.
fn collective_in(text: &str) -> Option<Collective> {
    let at = text.find("_perf")?;
    let start =
        text[..at].rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).map_or(0, |i| i + 1);
    Collective::parse(&text[start..at])
}

/// Reads nccl-tests' `-J` JSON (or collsim-bench's, the same layout with `collective`, `algo`
/// and `proto` on each result). Results are split into tests where the collective or the forced
/// algorithm and protocol change; without a per-result collective it is taken from the `*_perf`
/// binary named in `args`.
pub fn parse_json(text: &str) -> Result<Vec<LogTest>, JsonLogError> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| {
        JsonLogError(format!("line {}, column {}: not valid JSON: {e}", e.line(), e.column()))
    })?;
    let results = v.get("results").and_then(|r| r.as_array()).ok_or_else(|| {
        JsonLogError("no \"results\" array (expected nccl-tests -J output)".into())
    })?;
    // The command line: nccl-tests writes it as a list of arguments, collsim-bench as one
    // string.
    let args: Vec<String> = match v.get("args") {
        Some(serde_json::Value::Array(a)) => {
            a.iter().map(|x| x.as_str().map_or_else(|| x.to_string(), String::from)).collect()
        }
        Some(serde_json::Value::String(line)) => {
            line.split_whitespace().map(String::from).collect()
        }
        Some(other) => other.to_string().split_whitespace().map(String::from).collect(),
        None => Vec::new(),
    };
    let from_args = collective_in(&args.join(" "));
    // The ranks: collsim-bench lists every rank at the top; nccl-tests (JSON version 3) one
    // entry a process in `config`, the first of its nthreads x ngpus ranks (util.cu
    // `parseRankInfo` reads one line of each process's block), so each entry stands for that
    // many ranks on its host.
    let per_entry = match v.get("devices") {
        Some(_) => 1,
        None => {
            let count = |key: &str| v.pointer(key).and_then(|x| x.as_u64()).unwrap_or(1).max(1);
            (count("/config/nthreads") * count("/config/ngpus")).min(1 << 20) as usize
        }
    };
    let devices = v.get("devices").or_else(|| v.pointer("/config/devices"));
    let hosts: Vec<String> = devices
        .and_then(|d| d.as_array())
        .map(|d| {
            d.iter()
                .filter_map(|x| x.get("hostname").and_then(|h| h.as_str()))
                .flat_map(|h| std::iter::repeat_n(h.to_string(), per_entry))
                .collect()
        })
        .unwrap_or_default();
    // The NCCL variables of its environment (nccl-tests writes the whole environment).
    let mut env: Vec<(String, String)> = Vec::new();
    for e in v.get("env").and_then(|e| e.as_array()).into_iter().flatten() {
        if let Some((k, val)) = e.as_str().and_then(|e| e.split_once('='))
            && k.starts_with("NCCL_")
            && !env.iter().any(|(key, _)| key == k)
        {
            env.push((k.to_string(), val.to_string()));
        }
    }
    // config.ngpus, else `-g N` in the command line; the GPU of devices[0].device_info; the
    // NCCL release (an integer code or a dotted string).
    let from_flag = args
        .iter()
        .position(|a| a == "-g" || a == "--ngpus")
        .and_then(|at| args.get(at + 1)?.trim_matches('"').parse::<usize>().ok());
    // As the text reader's header: a count present but not 1 to 1,024 is an error.
    let ngpus = match v.pointer("/config/ngpus") {
        None => None,
        Some(g) => match g.as_u64() {
            Some(n @ 1..=1024) => Some(n as usize),
            _ => {
                return Err(JsonLogError(format!(
                    "config.ngpus: {g} is not a GPU count (1 to 1024)"
                )));
            }
        },
    };
    let gpus_per_process = ngpus.or(from_flag).filter(|&g| g > 0);
    let gpu_name = devices
        .and_then(|d| d.pointer("/0/device_info"))
        .and_then(|d| d.as_str())
        .map(|d| d.trim().to_string())
        .filter(|d| !d.is_empty());
    let nccl_version = match v.get("nccl_version") {
        Some(serde_json::Value::Number(n)) if n.as_u64().is_none() => {
            return Err(JsonLogError(format!(
                "nccl_version: {n} is no NCCL release code (2.22.3 is 22203)"
            )));
        }
        Some(serde_json::Value::Number(n)) => nccl_version(&format!("nccl-library={n}")),
        Some(serde_json::Value::String(s)) => nccl_version(&format!("NCCL version {s}")),
        _ => None,
    };
    let setup = LogSetup { gpus_per_process, gpu_name, nccl_version, env };
    let mut tests: Vec<LogTest> = Vec::new();
    let mut last_key: Option<(Option<Collective>, String)> = None;
    for (i, r) in results.iter().enumerate() {
        let field = |name: &str| {
            r.get(name).ok_or_else(|| JsonLogError(format!("results[{i}]: no \"{name}\"")))
        };
        let number =
            |obj: &serde_json::Value, path: &str, name: &str| -> Result<f64, JsonLogError> {
                obj.get(name)
                    .and_then(|x| x.as_f64())
                    .ok_or_else(|| JsonLogError(format!("results[{i}].{path}{name}: not a number")))
            };
        let uint = |name: &str| -> Result<u64, JsonLogError> {
            field(name)?
                .as_u64()
                .ok_or_else(|| JsonLogError(format!("results[{i}].{name}: not a whole number")))
        };
        let text_of = |name: &str| -> Result<String, JsonLogError> {
            Ok(field(name)?.as_str().unwrap_or_default().to_string())
        };
        let timing = |side: &str| -> Result<(f64, f64), JsonLogError> {
            let o = field(side)?;
            let time = o.get("time").or_else(|| o.get("cpu_time"));
            let t = time
                .and_then(|x| x.as_f64())
                .ok_or_else(|| JsonLogError(format!("results[{i}].{side}.time: not a number")))?;
            Ok((t, number(o, &format!("{side}."), "bus_bw")?))
        };
        let collective =
            match r.get("collective").and_then(|c| c.as_str()) {
                Some(c) => Some(Collective::parse(c).ok_or_else(|| {
                    JsonLogError(format!("results[{i}].collective: unknown {c:?}"))
                })?),
                None => from_args,
            };
        let combo = ["algo", "proto"]
            .map(|k| r.get(k).and_then(|x| x.as_str()).unwrap_or_default().to_string())
            .join("/");
        let size = uint("size")?;
        let (oop_time_us, oop_busbw) = timing("out_of_place")?;
        let (ip_time_us, ip_busbw) = timing("in_place")?;
        let row = LogRow {
            size_bytes: size,
            count: uint("count")?,
            dtype: text_of("type")?,
            redop: text_of("redop")?,
            oop_time_us,
            oop_busbw,
            ip_time_us,
            ip_busbw,
        };
        // The text reader's checks, so that a log reads the same in either form.
        let bad = |reason: String| JsonLogError(format!("results[{i}]: {reason}"));
        check_row(&row).map_err(bad)?;
        let key = (collective, combo);
        if last_key.as_ref() != Some(&key) {
            tests.push(LogTest {
                rank_hosts: hosts.clone(),
                setup: setup.clone(),
                ..LogTest::new(collective)
            });
            last_key = Some(key);
        }
        if size > 0 {
            let test = tests.last_mut().expect("a test was just pushed");
            fits_test(&test.rows, &row).map_err(bad)?;
            test.rows.push(row);
        }
    }
    tests.retain(|t| !t.rows.is_empty());
    Ok(tests)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_mpi_tags_even_mid_row() {
        let line = "[1,0]<stdout>:     1048576        262144     float     sum      -1[1,0]<stdout>:    122.7    8.55   16.03      0[1,0]<stdout>:    122.3    8.58   16.08      0";
        let tests = parse(line).unwrap();
        assert_eq!(tests.len(), 1);
        let r = &tests[0].rows[0];
        assert_eq!((r.size_bytes, r.count), (1_048_576, 262_144));
        assert_eq!((r.oop_time_us, r.oop_busbw, r.ip_time_us), (122.7, 16.03, 122.3));
        assert_eq!(strip_tags("[a]<stdout>: x [1,2] y"), "[a]<stdout>: x [1,2] y");
    }

    #[test]
    fn splits_tests_and_reads_headers() {
        let text = "# Collective test starting: all_reduce_perf\n# nThread 1 nGpus 1 minBytes 8\n\
                    8 2 float sum -1 10.0 0.00 0.00 0 10.0 0.00 0.00 0\n\
                    # Collective test starting: all_gather_perf\n# nThread 1 nGpus 1 minBytes 8\n\
                    0 0 float none -1 1.0 0.00 0.00 0 1.0 0.00 0.00 0\n\
                    16 4 float none -1 11.0 0.00 0.00 0 11.0 0.00 0.00 N/A\n";
        let tests = parse(text).unwrap();
        assert_eq!(tests.len(), 2);
        assert_eq!(tests[0].collective, Some(Collective::AllReduce));
        assert_eq!(tests[1].collective, Some(Collective::AllGather));
        assert_eq!(tests[1].rows.len(), 1);
        assert!(parse("NCCL INFO nothing here\n# just comments\n").unwrap().is_empty());
    }

    #[test]
    fn reads_nccl_tests_json() {
        let text = r#"{"version": "2.17", "args": "./build/all_gather_perf -b 8 -e 16 -J x.json",
            "results": [
              {"size": 8, "count": 2, "type": "float", "redop": "none", "root": -1,
               "out_of_place": {"time": 10.5, "alg_bw": 0.0, "bus_bw": 0.0, "nwrong": 0},
               "in_place": {"time": 9.5, "alg_bw": 0.0, "bus_bw": 0.0, "nwrong": "N/A"}},
              {"size": 16, "count": 4, "type": "float", "redop": "none", "root": -1,
               "out_of_place": {"cpu_time": 11.0, "alg_bw": 0.0, "bus_bw": 0.01, "nwrong": 0},
               "in_place": {"time": 11.0, "alg_bw": 0.0, "bus_bw": 0.01, "nwrong": 0}}]}"#;
        let tests = parse_json(text).unwrap();
        assert_eq!(tests.len(), 1);
        assert_eq!(tests[0].collective, Some(Collective::AllGather));
        assert_eq!(tests[0].rows[1].oop_time_us, 11.0);
        assert_eq!(tests[0].rows[0].ip_time_us, 9.5);
    }

    #[test]
    fn reads_nccl_tests_json_version_3() {
        // nccl-tests 2.19 (src/util.cu at a0b82b2): args as a list, the ranks under config.
        let text = r#"{"version": 3, "start_time": "2026-11-30 05:00:00",
            "args": ["./build/reduce_scatter_perf", "-b", "8", "-g", "4"],
            "nccl_version": 22807,
            "env": ["HOME=/root", "NCCL_ALGO=Ring", "NCCL_PROTO=Simple", "NCCL_ALGO=Tree"],
            "config": {"nthreads": 1, "ngpus": 4, "devices": [
              {"rank": 0, "group": 0, "pid": 1, "hostname": "a", "device": 0,
               "device_hex": "0000:18:00", "device_info": "NVIDIA H100 80GB HBM3"},
              {"rank": 4, "group": 0, "pid": 2, "hostname": "b", "device": 0,
               "device_hex": "0000:18:00", "device_info": "NVIDIA H100 80GB HBM3"}]},
            "results": [
              {"size": 8, "count": 2, "type": "float", "redop": "sum", "root": "    -1",
               "out_of_place": {"time": 10.5, "alg_bw": 0.0, "bus_bw": 0.0, "nwrong": 0.0},
               "in_place": {"time": 9.5, "alg_bw": 0.0, "bus_bw": 0.0, "nwrong": null},
               "actual_iterations": 20, "experiment_name": ""}]}"#;
        let tests = parse_json(text).unwrap();
        assert_eq!(tests.len(), 1);
        assert_eq!(tests[0].collective, Some(Collective::ReduceScatter));
        // One entry a process of -g 4: four ranks on each host.
        assert_eq!(tests[0].rank_hosts, ["a", "a", "a", "a", "b", "b", "b", "b"]);
        let env = &tests[0].setup.env;
        assert_eq!(
            env,
            &[("NCCL_ALGO".into(), "Ring".into()), ("NCCL_PROTO".into(), "Simple".into())]
        );
        assert_eq!(tests[0].setup.gpu_name.as_deref(), Some("NVIDIA H100 80GB HBM3"));
        assert_eq!(tests[0].setup.gpus_per_process, Some(4));
    }

    #[test]
    fn splits_collsim_bench_json_by_collective_and_combination() {
        let row = |c: &str, a: &str| {
            format!(
                r#"{{"collective": "{c}", "algo": "{a}", "proto": "default", "size": 1024,
                "count": 256, "type": "float", "redop": "sum", "root": -1,
                "out_of_place": {{"time": 7.0, "alg_bw": 0.1, "bus_bw": 0.2, "nwrong": 0}},
                "in_place": {{"time": 7.0, "alg_bw": 0.1, "bus_bw": 0.2, "nwrong": 0}}}}"#
            )
        };
        let text = format!(
            r#"{{"results": [{}, {}, {}]}}"#,
            row("all_reduce", "Ring"),
            row("all_reduce", "Tree"),
            row("broadcast", "Tree")
        );
        let tests = parse_json(&text).unwrap();
        assert_eq!(tests.len(), 3);
        assert_eq!(tests[2].collective, Some(Collective::Broadcast));
    }

    #[test]
    fn bad_json_names_where() {
        let e = parse_json("{\"results\": [\n{\"size\": 8}]}").unwrap_err().to_string();
        assert!(e.contains("results[0]"), "{e}");
        let e = parse_json("{\n  \"results\": [,]}").unwrap_err().to_string();
        assert!(e.starts_with("line 2, column"), "{e}");
        let e = parse_json("{}").unwrap_err().to_string();
        assert!(e.contains("no \"results\" array"), "{e}");
    }

    #[test]
    fn both_readers_refuse_the_same_rows() {
        let text_row = |t: &str| format!("8 2 float sum -1 {t} 0.00 0.00 0 10.0 0.00 0.00 0\n");
        let json_row = |t: &str| {
            format!(
                r#"{{"results": [{{"size": 8, "count": 2, "type": "float", "redop": "sum",
                "out_of_place": {{"time": {t}, "bus_bw": 0.0}},
                "in_place": {{"time": 10.0, "bus_bw": 0.0}}}}]}}"#
            )
        };
        for t in ["-5.0", "0"] {
            let e = parse(&text_row(t)).unwrap_err().to_string();
            assert!(e.contains("out-of-place time") && e.contains("positive"), "{e}");
            let e = parse_json(&json_row(t)).unwrap_err().to_string();
            assert!(e.starts_with("results[0]: out-of-place time"), "{e}");
        }
        // Sizes that shrink, and a count that is not the size over the type.
        let two = |a: &str, b: &str| format!(r#"{{"results": [{a}, {b}]}}"#,);
        let r = |size: u64, count: u64| {
            format!(
                r#"{{"size": {size}, "count": {count}, "type": "float", "redop": "sum",
                "out_of_place": {{"time": 10.0, "bus_bw": 0.0}},
                "in_place": {{"time": 10.0, "bus_bw": 0.0}}}}"#
            )
        };
        let e = parse_json(&two(&r(16, 4), &r(8, 2))).unwrap_err().to_string();
        assert!(e.starts_with("results[1]: size 8 after size 16"), "{e}");
        let e = parse_json(&two(&r(8, 2), &r(16, 3))).unwrap_err().to_string();
        assert!(e.contains("does not divide size 16"), "{e}");
    }

    #[test]
    fn a_row_cut_off_in_a_table_names_its_line() {
        let head = "# nThread 1 nGpus 1\n8 2 float sum -1 10.0 0.00 0.00 0 10.0 0.00 0.00 0\n";
        for cut in ["16 4", "16", "16 4 float sum -1 10.0"] {
            let e = parse(&format!("{head}{cut}\n")).unwrap_err();
            assert_eq!(e.line, 3, "{cut}");
            assert!(e.reason.starts_with("cut off"), "{e}");
        }
        // Before any row, a line of numbers is something else.
        assert!(parse("16 4\n").unwrap().is_empty());
    }

    #[test]
    fn interval_and_timestamp_columns() {
        // -I 1: i_min i_max i_p99 i_cv% after each half's #wrong; -S 1: a timestamp at the end.
        let text = "1024 256 float sum -1 10.0 0.10 0.19 0 9.0 11.0 10.5 2.0 \
                    12.0 0.09 0.16 0 11.0 13.0 12.5 3.0 2025-10-01 12:00:00\n";
        let r = &parse(text).unwrap()[0].rows[0];
        assert_eq!(
            (r.oop_time_us, r.oop_busbw, r.ip_time_us, r.ip_busbw),
            (10.0, 0.19, 12.0, 0.16)
        );
    }

    #[test]
    fn a_corrupt_row_names_its_line() {
        let text = "# nThread 1 nGpus 1\n8 2 float sum -1 10.0 0.00 0.00 0 10.0 0.00 0.00 0\n\
                    16 4 float sum -1 1O.5 0.00 0.00 0 10.0 0.00 0.00 0\n";
        let e = parse(text).unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.to_string().contains("out-of-place time \"1O.5\""), "{e}");
    }

    #[test]
    fn reads_the_ranks_and_hosts_a_log_lists() {
        let text = "# nThread 1 nGpus 1 minBytes 8\n# Using devices\n\
            [1,0]<stdout>:#  Rank  0 Group  0 Pid  25 on worker-0 device  0 [0x53] NVIDIA H100\n\
            #  Rank  1 Group  0 Pid  26 on worker-0 device  1 [0x64] NVIDIA H100\n\
            Rank  2 Group  0 Pid  27 on worker-1 device  0 [0x53] NVIDIA H100\n\
            8 2 float sum -1 10.0 0.00 0.00 0 10.0 0.00 0.00 0\n";
        let tests = parse(text).unwrap();
        assert_eq!(tests[0].layout(), Some((3, 2)));
        assert_eq!(
            parse("8 2 float sum -1 1.0 0.0 0.0 0 1.0 0.0 0.0 0\n").unwrap()[0].layout(),
            None
        );
    }

    #[test]
    fn reads_how_the_run_was_set_up() {
        // The header's nGpus and library code, the GPU name, NCCL's INFO lines (tagged).
        let text = "# nccl-tests version 2.17.8 nccl-headers=22902 nccl-library=22902\n\
            # nThread 1 nGpus 8 minBytes 8\n\
            #  Rank  0 Group  0 Pid  25 on node0 device  0 [0000:18:00] NVIDIA H100 80GB HBM3\n\
            [1,0]<stdout>:node0:25:25 [0] NCCL INFO NCCL_BUFFSIZE set by environment to 8388608.\n\
            node0:25:25 [0] NCCL INFO NCCL_BUFFSIZE set by environment to 8388608.\n\
            node0:25:25 [0] NCCL INFO NCCL_NVLS_CHUNKSIZE set by environment to 524288.\n\
            8 2 float sum -1 10.0 0.00 0.00 0 10.0 0.00 0.00 0\n";
        let setup = &parse(text).unwrap()[0].setup;
        assert_eq!(setup.gpus_per_process, Some(8));
        assert_eq!(setup.gpu_name.as_deref(), Some("NVIDIA H100 80GB HBM3"));
        assert_eq!(setup.nccl_version.as_deref(), Some("2.29.2"));
        let env: Vec<(&str, &str)> =
            setup.env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(env, [("NCCL_BUFFSIZE", "8388608"), ("NCCL_NVLS_CHUNKSIZE", "524288")]);
        // An INFO line's release; a zero library code says nothing; old bus ids.
        let text = "# nccl-tests version 2.19.6 nccl-headers=0 nccl-library=0\n\
            #  Rank  0 Group  0 Pid  1 on x device  0 [0x07] NVIDIA A100-SXM4-40GB\n\
            x:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.2\n\
            8 2 float sum -1 10.0 0.00 0.00 0 10.0 0.00 0.00 0\n";
        let setup = &parse(text).unwrap()[0].setup;
        assert_eq!(setup.nccl_version.as_deref(), Some("2.21.5"));
        assert_eq!(setup.gpu_name.as_deref(), Some("NVIDIA A100-SXM4-40GB"));
        assert_eq!(setup.gpus_per_process, None);
    }
}
