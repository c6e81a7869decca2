//! NCCL tuner plugin configurations: `NCCL_TUNER_CONFIG_FILE`, the CSV file of NCCL's example
//! tuner plugin (`plugins/tuner/example/plugin.c` and its README at NVIDIA/nccl 5067397c, the
//! form the plugin has had since 2.27.5), applied where NCCL applies a tuner.
//!
//! A row is `collective,min_bytes,max_bytes,algorithm,protocol,channels` followed by
//! `nNodes,nRanks` and optionally `numPipeOps,regBuff` (each `-1` for any). NCCL builds its
//! cost table for a call, then asks the plugin (`ncclGetAlgoInfo`, `src/enqueue.cc`): the
//! first row that matches the collective, the size (NCCL's `nBytes`, inclusive bounds), the
//! communicator's nodes and ranks, the group's operations and the buffer registration, and
//! whose algorithm and protocol the table has not marked ignored (disabled by NCCL_ALGO,
//! NCCL_PROTO or the hardware), gets cost 0, so NCCL picks it; a row whose pair is ignored is
//! passed over for the next. A row's positive channel count replaces the channels NCCL chose
//! (`info->nMaxChannels`, still capped by the communicator's channels and 32 KiB of traffic a
//! channel when the work is scheduled).
//!
//! Two readings, because the plugin's code and its documentation differ:
//! * The format's (the default): `channels = -1` keeps NCCL's channel count and a call no row
//!   matches is NCCL's own choice, as the README says. The seed's six-column rows are read
//!   too, matching any node and rank count.
//! * The example plugin's binary (`NCCL_TUNER_PLUGIN` naming `libnccl-tuner-example.so`):
//!   `pluginGetCollInfo` sets `*nChannels = 1` before it looks, so a `-1` row and a call no row
//!   matches both run on **one channel** (its own test asserts "keep default channels (1)"),
//!   and `loadConfig` skips rows of fewer than 8 fields. Its `pluginInit` also lowers three
//!   Blackwell cost-model constants, which collsim does not model (said in the report).
//!
//! collsim reads the file more strictly than the plugin: the plugin maps a name it does not
//! know (`Tree`, `allReduce`) silently to ring, simple or allreduce, and reads `12MB` as 12;
//! collsim stops at that field with the file and line.
//!
//! What a call is here: every call is its own group (`numPipeOps = 1`) on unregistered
//! buffers (`regBuff = 0`), as nccl-tests without `-R` and PyTorch without NCCL buffer
//! registration run them; a row that needs otherwise never matches, and the report says so.

use std::sync::Arc;

use super::{Algo, Collective, Proto};

/// The largest tuner file read (the plugin reads lines of up to 255 characters; thousands of
/// rows fit easily).
const MAX_FILE_BYTES: u64 = 4 << 20;

/// The operations in a call's group, as collsim issues calls.
pub const PIPE_OPS: usize = 1;

/// Whether collsim's calls are on registered buffers.
pub const REG_BUFF: bool = false;

/// One row of a tuner file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TunerRow {
    /// Its line in the file (1-based).
    pub line: usize,
    /// The collective it tunes.
    #[serde(serialize_with = "ser_coll")]
    pub coll: Collective,
    /// Smallest `nBytes` it matches, inclusive.
    pub min_bytes: u64,
    /// Largest `nBytes` it matches, inclusive.
    pub max_bytes: u64,
    /// The algorithm it makes NCCL pick.
    #[serde(serialize_with = "ser_algo")]
    pub algo: Algo,
    /// The protocol it makes NCCL pick.
    #[serde(serialize_with = "ser_proto")]
    pub proto: Proto,
    /// Channels it sets (None: `-1`).
    pub channels: Option<usize>,
    /// Nodes it matches (None: any).
    pub nnodes: Option<usize>,
    /// Ranks it matches (None: any).
    pub nranks: Option<usize>,
    /// Operations in the group it matches (None: any).
    pub pipe_ops: Option<usize>,
    /// Buffer registration it matches (None: any).
    pub reg_buff: Option<bool>,
    /// How many fields the row has (6, 8, 9 or 10).
    pub fields: usize,
}

fn ser_coll<S: serde::Serializer>(c: &Collective, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(super::env::nccl_func(*c))
}
fn ser_algo<S: serde::Serializer>(a: &Algo, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(a.name())
}
fn ser_proto<S: serde::Serializer>(p: &Proto, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(p.name())
}

impl TunerRow {
    /// Whether the row applies to `coll` of `bytes` on `nnodes` nodes and `nranks` ranks, for
    /// a call as collsim issues it.
    pub fn matches(&self, coll: Collective, bytes: u64, nnodes: usize, nranks: usize) -> bool {
        self.coll == coll
            && (self.min_bytes..=self.max_bytes).contains(&bytes)
            && self.nnodes.is_none_or(|n| n == nnodes)
            && self.nranks.is_none_or(|n| n == nranks)
            && self.pipe_ops.is_none_or(|n| n == PIPE_OPS)
            && self.reg_buff.is_none_or(|r| r == REG_BUFF)
    }

    /// The row as the file's columns, for the report: `allreduce 0-98304 tree/ll ch -1`.
    pub fn describe(&self) -> String {
        let any = |v: Option<usize>| v.map_or("any".to_string(), |n| n.to_string());
        let mut s = format!(
            "{} {}-{} {}/{} channels {}",
            super::env::nccl_func(self.coll),
            self.min_bytes,
            self.max_bytes,
            algo_name(self.algo),
            proto_name(self.proto),
            self.channels.map_or("-1".to_string(), |c| c.to_string())
        );
        if self.fields > 6 {
            s += &format!(" nodes {} ranks {}", any(self.nnodes), any(self.nranks));
        }
        if self.fields > 8 {
            s += &format!(" pipeOps {}", any(self.pipe_ops));
        }
        if self.fields > 9 {
            s +=
                &format!(" regBuff {}", self.reg_buff.map_or("any", |r| if r { "1" } else { "0" }));
        }
        s
    }
}

/// A tuner configuration: the file's rows and which reading applies.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Tuner {
    /// The file, as given.
    pub file: String,
    /// Its rows, in order.
    pub rows: Vec<TunerRow>,
    /// Whether the example plugin's binary is modelled (one channel by default, rows of fewer
    /// than 8 fields skipped).
    pub example_binary: bool,
}

/// What the tuner did for one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TunerHit {
    /// The line of the row that set the algorithm and protocol (None: no row did).
    pub line: Option<usize>,
    /// The algorithm and protocol it set.
    pub choice: Option<(Algo, Proto)>,
    /// The channels it set (None: NCCL's own).
    pub channels: Option<usize>,
}

/// The example plugin's names of the algorithms (`parseAlgorithm`).
const ALGOS: [(&str, Algo); 7] = [
    ("tree", Algo::Tree),
    ("ring", Algo::Ring),
    ("collnet_direct", Algo::CollNetDirect),
    ("collnet_chain", Algo::CollNetChain),
    ("nvls", Algo::Nvls),
    ("nvls_tree", Algo::NvlsTree),
    ("pat", Algo::Pat),
];

/// Its names of the protocols (`parseProtocol`).
const PROTOS: [(&str, Proto); 3] =
    [("ll", Proto::LL), ("ll128", Proto::LL128), ("simple", Proto::Simple)];

/// Its names of the collectives (`parseCollType`).
const COLLS: [(&str, Collective); 5] = [
    ("broadcast", Collective::Broadcast),
    ("reduce", Collective::Reduce),
    ("allgather", Collective::AllGather),
    ("reducescatter", Collective::ReduceScatter),
    ("allreduce", Collective::AllReduce),
];

fn algo_name(a: Algo) -> &'static str {
    ALGOS.iter().find(|(_, x)| *x == a).map_or("?", |(n, _)| n)
}

fn proto_name(p: Proto) -> &'static str {
    PROTOS.iter().find(|(_, x)| *x == p).map_or("?", |(n, _)| n)
}

/// Whether `NCCL_TUNER_PLUGIN`'s value names NCCL's example plugin (`libnccl-tuner-example.so`,
/// a path to it, or the short name NCCL expands: `example`).
pub fn names_example_plugin(plugin: &str) -> bool {
    let base = plugin.rsplit('/').next().unwrap_or(plugin);
    base == "example" || base.starts_with("libnccl-tuner-example")
}

impl Tuner {
    /// Reads `file` (as NCCL does, relative to the working directory).
    pub fn load(file: &str, example_binary: bool) -> Result<Arc<Tuner>, String> {
        let meta = std::fs::metadata(file).map_err(|e| format!("cannot read it: {e}"))?;
        if meta.is_dir() {
            return Err("is a directory, not a tuner file".into());
        }
        if meta.len() > MAX_FILE_BYTES {
            return Err(format!("larger than {MAX_FILE_BYTES} bytes: not a tuner file"));
        }
        let bytes = std::fs::read(file).map_err(|e| format!("cannot read it: {e}"))?;
        let text = String::from_utf8(bytes).map_err(|e| {
            format!("{file}: not text (invalid UTF-8 at byte {})", e.utf8_error().valid_up_to())
        })?;
        Tuner::parse(file, &text, example_binary).map(Arc::new)
    }

    /// Parses a tuner file's text; `file` names it in errors (`file:line: field ...`).
    pub fn parse(file: &str, text: &str, example_binary: bool) -> Result<Tuner, String> {
        let mut rows = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let l = raw.trim();
            if l.is_empty() || l.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = l.split(',').map(str::trim).collect();
            // A spreadsheet's header row (the README suggests one): the plugin would read it as
            // an allreduce row for 0 bytes; it tunes nothing either way.
            if fields[0].eq_ignore_ascii_case("collective_type")
                || fields[0].eq_ignore_ascii_case("collective")
            {
                continue;
            }
            rows.push(row(file, line, &fields)?);
        }
        Ok(Tuner { file: file.to_string(), rows, example_binary })
    }

    /// The rows the plugin reads: all, or under the example binary those of 8 fields or more.
    pub fn read_rows(&self) -> impl Iterator<Item = &TunerRow> {
        self.rows.iter().filter(|r| !self.example_binary || r.fields >= 8)
    }

    /// What the tuner does for `coll` of `bytes` (NCCL's nBytes) on `nnodes` nodes and
    /// `nranks` ranks, where `usable` says which algorithm and protocol NCCL's cost table has
    /// not marked ignored. None: it leaves NCCL's choice whole (and under the format's
    /// reading, a call no row matches).
    pub fn apply(
        &self,
        coll: Collective,
        bytes: u64,
        nnodes: usize,
        nranks: usize,
        usable: impl Fn(Algo, Proto) -> bool,
    ) -> Option<TunerHit> {
        // NCCL calls the tuner for collectives only, not point-to-point.
        if !COLLS.iter().any(|(_, c)| *c == coll) {
            return None;
        }
        let hit = self
            .read_rows()
            .find(|r| r.matches(coll, bytes, nnodes, nranks) && usable(r.algo, r.proto));
        let default_channels = self.example_binary.then_some(1);
        match hit {
            Some(r) => Some(TunerHit {
                line: Some(r.line),
                choice: Some((r.algo, r.proto)),
                channels: r.channels.or(default_channels),
            }),
            None if self.example_binary => {
                Some(TunerHit { line: None, choice: None, channels: default_channels })
            }
            None => None,
        }
    }

    /// What the report should say of the file beyond which rows matched: rows the plugin
    /// skips, rows no call of collsim's can match.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if self.example_binary {
            let short: Vec<String> =
                self.rows.iter().filter(|r| r.fields < 8).map(|r| r.line.to_string()).collect();
            if !short.is_empty() {
                notes.push(format!(
                    "{}: NCCL's example plugin skips rows of fewer than 8 fields (loadConfig): line(s) {} tune nothing; add nNodes,nRanks (-1,-1 for any)",
                    self.file,
                    short.join(", ")
                ));
            }
            notes.push(
                "NCCL's example plugin runs every call on 1 channel where its row says -1 or no row matches (pluginGetCollInfo sets *nChannels = 1, which NCCL takes); collsim does not hold one ring (Simple) or NVLS channel to what one SM can copy, so these times are a lower bound; its constants for Blackwell 4-node trees and NVLS network latency are not modelled".into(),
            );
        }
        for r in self.read_rows() {
            if r.pipe_ops.is_some_and(|n| n != PIPE_OPS) {
                notes.push(format!(
                    "{}:{}: matches groups of {} operations; collsim issues each call alone (numPipeOps 1), so it never matches",
                    self.file,
                    r.line,
                    r.pipe_ops.unwrap_or(0)
                ));
            }
            if r.reg_buff.is_some_and(|b| b != REG_BUFF) {
                notes.push(format!(
                    "{}:{}: matches registered buffers only; collsim's calls are unregistered (nccl-tests without -R, PyTorch without NCCL buffer registration), so it never matches",
                    self.file, r.line
                ));
            }
        }
        notes
    }
}

/// One row's fields, checked.
fn row(file: &str, line: usize, f: &[&str]) -> Result<TunerRow, String> {
    let at =
        |field: &str, value: &str, why: String| format!("{file}:{line}: {field} `{value}`: {why}");
    if !matches!(f.len(), 6 | 8..=10) {
        return Err(format!(
            "{file}:{line}: {} fields; a row is collective,min_bytes,max_bytes,algorithm,protocol,channels (6), then nNodes,nRanks (8) and optionally numPipeOps (9) and regBuff (10)",
            f.len()
        ));
    }
    let name = |field: &str, value: &str, names: &[&str]| {
        at(
            field,
            value,
            if names.iter().any(|n| n.eq_ignore_ascii_case(value)) {
                format!(
                    "NCCL's example plugin compares names with case and would read it as its default; write `{}`",
                    value.to_ascii_lowercase()
                )
            } else {
                format!("expected one of {}", names.join(", "))
            },
        )
    };
    let coll = COLLS.iter().find(|(n, _)| *n == f[0]).map(|&(_, c)| c).ok_or_else(|| {
        name("collective", f[0], &COLLS.iter().map(|(n, _)| *n).collect::<Vec<_>>())
    })?;
    let bytes = |field: &str, v: &str| {
        v.parse::<u64>()
            .map_err(|_| at(field, v, "expected a whole number of bytes (no units)".into()))
    };
    let min_bytes = bytes("min_bytes", f[1])?;
    let max_bytes = bytes("max_bytes", f[2])?;
    if min_bytes > max_bytes {
        return Err(at("min_bytes", f[1], format!("larger than max_bytes {max_bytes}")));
    }
    let algo = ALGOS.iter().find(|(n, _)| *n == f[3]).map(|&(_, a)| a).ok_or_else(|| {
        name("algorithm", f[3], &ALGOS.iter().map(|(n, _)| *n).collect::<Vec<_>>())
    })?;
    let proto = PROTOS.iter().find(|(n, _)| *n == f[4]).map(|&(_, p)| p).ok_or_else(|| {
        name("protocol", f[4], &PROTOS.iter().map(|(n, _)| *n).collect::<Vec<_>>())
    })?;
    // -1 for any (or NCCL's own channels), else a positive count.
    let count = |field: &str, v: &str, max: usize| -> Result<Option<usize>, String> {
        match v.parse::<i64>() {
            Ok(-1) => Ok(None),
            Ok(n) if n >= 1 && n as usize <= max => Ok(Some(n as usize)),
            _ => Err(at(field, v, format!("expected -1 or 1 to {max}"))),
        }
    };
    let channels = count("channels", f[5], 64)?;
    let (nnodes, nranks) = match f.len() {
        6 => (None, None),
        _ => (count("nNodes", f[6], 1 << 20)?, count("nRanks", f[7], 1 << 24)?),
    };
    let pipe_ops = match f.get(8) {
        Some(v) => count("numPipeOps", v, 1 << 20)?,
        None => None,
    };
    let reg_buff = match f.get(9).copied() {
        None | Some("-1") => None,
        Some("0") => Some(false),
        Some("1") => Some(true),
        Some(v) => return Err(at("regBuff", v, "expected -1, 0 or 1".into())),
    };
    Ok(TunerRow {
        line,
        coll,
        min_bytes,
        max_bytes,
        algo,
        proto,
        channels,
        nnodes,
        nranks,
        pipe_ops,
        reg_buff,
        fields: f.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED: &str = "# collective,minBytes,maxBytes,algorithm,protocol,channels
allreduce,0,98304,tree,ll,-1
allreduce,98305,12582912,tree,ll128,-1
allreduce,12582913,100663296,ring,ll128,-1
allreduce,100663297,4294967296,ring,simple,-1
";

    #[test]
    fn reads_the_seed_and_the_plugins_own_example() {
        let t = Tuner::parse("seed.csv", SEED, false).unwrap();
        assert_eq!(t.rows.len(), 4);
        assert_eq!(t.rows[0].line, 2);
        assert_eq!((t.rows[3].algo, t.rows[3].proto), (Algo::Ring, Proto::Simple));
        // The plugin's own nccl_tuner.conf rows (8 to 10 fields).
        let conf = "allreduce,0,65536,tree,simple,2,1,-1,-1,1
allreduce,65537,1048576,ring,simple,4,4,32,1,0
broadcast,0,32768,tree,simple,-1,1,-1
reduce,0,4294967295,tree,simple,-1,-1,-1";
        let t = Tuner::parse("c", conf, false).unwrap();
        assert_eq!(t.rows[0].reg_buff, Some(true));
        assert_eq!(
            (t.rows[1].nnodes, t.rows[1].nranks, t.rows[1].pipe_ops),
            (Some(4), Some(32), Some(1))
        );
        assert_eq!(t.rows[2].channels, None);
        assert_eq!(t.notes().len(), 1, "{:?}", t.notes()); // line 1 needs registered buffers
    }

    #[test]
    fn the_first_usable_row_wins_and_bounds_are_inclusive() {
        let t = Tuner::parse("seed.csv", SEED, false).unwrap();
        let any = |_: Algo, _: Proto| true;
        let at = |b: u64| t.apply(Collective::AllReduce, b, 1, 8, any).unwrap();
        assert_eq!(at(98304).line, Some(2));
        assert_eq!(at(98305).line, Some(3));
        assert_eq!(at(100663297).choice, Some((Algo::Ring, Proto::Simple)));
        assert_eq!(at(100663297).channels, None);
        assert!(t.apply(Collective::AllReduce, 5 << 30, 1, 8, any).is_none());
        assert!(t.apply(Collective::AllGather, 1024, 1, 8, any).is_none());
        // A row whose pair NCCL ignores is passed over: no tree here, so nothing matches.
        let no_tree = |a: Algo, _: Proto| a != Algo::Tree;
        assert!(t.apply(Collective::AllReduce, 1024, 1, 8, no_tree).is_none());
        assert_eq!(t.apply(Collective::AllReduce, 50 << 20, 1, 8, no_tree).unwrap().line, Some(4));
    }

    #[test]
    fn the_example_binary_gives_one_channel_and_skips_short_rows() {
        let t = Tuner::parse("seed.csv", SEED, true).unwrap();
        let hit = t.apply(Collective::AllReduce, 1 << 30, 2, 16, |_, _| true).unwrap();
        assert_eq!(hit, TunerHit { line: None, choice: None, channels: Some(1) });
        let t = Tuner::parse(
            "x",
            "allreduce,0,100,ring,ll,-1,-1,-1\nallreduce,101,200,ring,ll,4,-1,-1",
            true,
        )
        .unwrap();
        assert_eq!(
            t.apply(Collective::AllReduce, 50, 1, 8, |_, _| true).unwrap().channels,
            Some(1)
        );
        assert_eq!(
            t.apply(Collective::AllReduce, 150, 1, 8, |_, _| true).unwrap().channels,
            Some(4)
        );
        assert!(names_example_plugin("libnccl-tuner-example.so"));
        assert!(names_example_plugin("/opt/nccl/lib/libnccl-tuner-example.so"));
        assert!(!names_example_plugin("libnccl-ofi-tuner.so"));
    }

    #[test]
    fn bad_rows_name_the_file_line_and_field() {
        let err = |text: &str| Tuner::parse("t.csv", text, false).unwrap_err();
        let e = err("allreduce,0,100,Tree,ll,-1");
        assert!(e.starts_with("t.csv:1: algorithm `Tree`:") && e.contains("write `tree`"), "{e}");
        let e = err("# c\n\nallreduce,0,12MB,ring,ll,-1");
        assert!(e.starts_with("t.csv:3: max_bytes `12MB`:"), "{e}");
        assert!(err("allreduce,0,100,ring,ll").contains("5 fields"));
        assert!(err("allreduce,0,100,ring,ll,-1,1").contains("7 fields"));
        assert!(err("alltoall,0,100,ring,ll,-1").contains("collective `alltoall`"));
        assert!(err("allreduce,200,100,ring,ll,-1").contains("larger than max_bytes"));
        assert!(err("allreduce,0,100,ring,ll,0").contains("channels `0`"));
        assert!(err("allreduce,0,100,ring,ll,-1,1,8,1,2").contains("regBuff `2`"));
        assert!(err("allreduce,0,100,ring,ll128x,-1").contains("protocol `ll128x`"));
    }
}
