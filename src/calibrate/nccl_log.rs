//! Reader for nccl-tests text output, as people paste it: `[r,c]<stdout>:` tags from mpirun
//! (even in the middle of a row), thousands of `NCCL INFO` lines, lost `#` marks, old layouts,
//! several tests in one file. A file is split into tests at `# Collective test starting:` (or at
//! an `nThread` header after rows); a row is a line with at least 13 fields whose first two are
//! integers; rows of size 0 are dropped.

use crate::collective::Collective;

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

fn parse_row(line: &str) -> Option<LogRow> {
    let t: Vec<&str> = line.split_whitespace().collect();
    if t.len() < 12 {
        return None;
    }
    let size: u64 = t[0].parse().ok()?;
    let count: u64 = t[1].parse().ok()?;
    // With a root column: size count type redop root | time algbw busbw wrong | time algbw busbw wrong.
    let base = if t.len() >= 13 { 5 } else { 4 };
    let f = |i: usize| t.get(i).and_then(|s| s.parse::<f64>().ok());
    Some(LogRow {
        size_bytes: size,
        count,
        dtype: t[2].to_string(),
        redop: t[3].to_string(),
        oop_time_us: f(base)?,
        oop_busbw: f(base + 2)?,
        ip_time_us: f(base + 4)?,
        ip_busbw: f(base + 6)?,
    })
}

/// Splits a log into its tests.
pub fn parse(text: &str) -> Vec<LogTest> {
    let mut tests: Vec<LogTest> = Vec::new();
    for raw in text.lines() {
        let line = strip_tags(raw);
        let trimmed = line.trim();
        if let Some(pos) = trimmed.find("Collective test starting:") {
            let name = trimmed[pos + "Collective test starting:".len()..].trim();
            tests.push(LogTest { collective: Collective::parse(name), rows: Vec::new() });
            continue;
        }
        if trimmed.contains("nThread") && trimmed.contains("minBytes") {
            if tests.last().is_none_or(|t| !t.rows.is_empty()) {
                tests.push(LogTest { collective: None, rows: Vec::new() });
            }
            continue;
        }
        if trimmed.starts_with('#')
            || trimmed.contains("NCCL INFO")
            || trimmed.contains("NCCL WARN")
        {
            continue;
        }
        if let Some(row) = parse_row(trimmed) {
            if row.size_bytes == 0 {
                continue;
            }
            if tests.is_empty() {
                tests.push(LogTest { collective: None, rows: Vec::new() });
            }
            if let Some(t) = tests.last_mut() {
                t.rows.push(row);
            }
        }
    }
    tests.retain(|t| !t.rows.is_empty());
    tests
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_mpi_tags_even_mid_row() {
        let line = "[1,0]<stdout>:     1048576        262144     float     sum      -1[1,0]<stdout>:    122.7    8.55   16.03      0[1,0]<stdout>:    122.3    8.58   16.08      0";
        let tests = parse(line);
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
        let tests = parse(text);
        assert_eq!(tests.len(), 2);
        assert_eq!(tests[0].collective, Some(Collective::AllReduce));
        assert_eq!(tests[1].collective, Some(Collective::AllGather));
        assert_eq!(tests[1].rows.len(), 1);
        assert!(parse("NCCL INFO nothing here\n# just comments\n").is_empty());
    }
}
