//! A Chakra execution trace (the interchange format of ASTRA-sim and MLCommons' Chakra tools)
//! of one rank's step as a list of calls ([`super::calls`]).
//!
//! The file (`NAME.RANK.et`, optionally gzipped) is a sequence of protobuf messages, each
//! preceded by its length as a varint: one `GlobalMetadata`, then `Node`s. The message
//! layouts are those of Chakra's schema, `et_def.proto` (package `ChakraProtoMsg`, as shipped
//! in MLCommons' `mlc-chakra` 1.0.0 on PyPI); only the fields read here are declared, the
//! others are skipped as protobuf skips unknown fields.
//!
//! What is read:
//! * `COMP_NODE`: GPU compute of `duration_micros` µs on the compute stream. Host work
//!   (attribute `is_cpu_op` true, as Chakra's PyTorch converter marks CPU ops) takes no GPU
//!   time: it is kept as a point in the dependency graph and counted in [`Chakra::host_ops`].
//! * `COMM_COLL_NODE`: one NCCL launch of the collective in attribute `comm_type` (Chakra's
//!   `CollectiveCommType`) of attribute `comm_size` bytes, the collective's input on each rank
//!   as Chakra's PyTorch converter records it (the sum of its input tensors): nccl-tests' size
//!   for all but the all-gather, whose nccl-tests size is that times its group's ranks. Its
//!   element type is float unless the node's input types name another; a barrier is an
//!   all-reduce of one float, as ProcessGroupNCCL runs it. Attribute `pg_name` names its
//!   process group, whose ranks come from the trace's `process_group:init` metadata node;
//!   without one, the collective is on every rank.
//! * The trace's ranks: its process groups' (the largest), else the number of files
//!   `NAME.0.et`, `NAME.1.et`, ... beside it ([`ranks_beside`]).
//! * `METADATA_NODE`: nothing but the process groups.
//! * Dependencies: `data_deps` and `ctrl_deps` alike.
//!
//! How the graph becomes a list: nodes are taken in an order that keeps every dependency, a
//! ready collective first (it is launched as soon as what it needs is done, as ASTRA-sim issues
//! a ready node), else the ready node earliest in the file. Compute runs in that order on one
//! stream; collectives run in that order on one NCCL stream (NCCL runs a communicator's
//! launches in order); a compute node that needs a collective waits for it.
//!
//! Refused, each with the node named: point-to-point nodes (`COMM_SEND_NODE`,
//! `COMM_RECV_NODE`: the replay runs one rank's step on every rank, and a send has no matching
//! receive on the same rank), remote memory nodes, compute given only as operation counts
//! (`num_ops` without `duration_micros`: ASTRA-sim's roofline input), collectives collsim does
//! not time (gather, scatter, `REDUCE_SCATTER_BLOCK`), groups whose ranks are not evenly
//! spaced, and dependency cycles.

use std::collections::{BinaryHeap, HashMap};

use prost::Message;

use super::calls::{Call, CallsFile, GroupShape, NcclOp, VERSION};

/// `GlobalMetadata` (et_def.proto).
#[derive(Clone, PartialEq, Message)]
struct GlobalMetadata {
    #[prost(string, tag = "1")]
    version: String,
    #[prost(message, repeated, tag = "2")]
    attr: Vec<Attr>,
}

/// `Node` (et_def.proto), the fields collsim reads.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct Node {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(string, tag = "2")]
    pub name: String,
    /// `NodeType`.
    #[prost(int32, tag = "3")]
    pub kind: i32,
    #[prost(uint64, repeated, tag = "4")]
    pub ctrl_deps: Vec<u64>,
    #[prost(uint64, repeated, tag = "5")]
    pub data_deps: Vec<u64>,
    #[prost(uint64, tag = "7")]
    pub duration_micros: u64,
    #[prost(message, optional, tag = "8")]
    pub inputs: Option<IoInfo>,
    #[prost(message, repeated, tag = "10")]
    pub attr: Vec<Attr>,
}

/// `IOInfo` (et_def.proto).
#[derive(Clone, PartialEq, Message)]
pub(crate) struct IoInfo {
    #[prost(string, tag = "1")]
    pub values: String,
    #[prost(string, tag = "2")]
    pub shapes: String,
    #[prost(string, tag = "3")]
    pub types: String,
}

/// `AttributeProto` (et_def.proto): its name and, of its `value`, the scalar kinds (the
/// list kinds are skipped, and read as no value).
#[derive(Clone, PartialEq, Message)]
pub(crate) struct Attr {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(oneof = "Value", tags = "3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29")]
    pub value: Option<Value>,
}

/// An attribute's scalar value.
#[derive(Clone, PartialEq, prost::Oneof)]
pub(crate) enum Value {
    #[prost(double, tag = "3")]
    Double(f64),
    #[prost(float, tag = "5")]
    Float(f32),
    #[prost(int32, tag = "7")]
    Int32(i32),
    #[prost(int64, tag = "9")]
    Int64(i64),
    #[prost(uint32, tag = "11")]
    Uint32(u32),
    #[prost(uint64, tag = "13")]
    Uint64(u64),
    #[prost(sint32, tag = "15")]
    Sint32(i32),
    #[prost(sint64, tag = "17")]
    Sint64(i64),
    #[prost(fixed32, tag = "19")]
    Fixed32(u32),
    #[prost(fixed64, tag = "21")]
    Fixed64(u64),
    #[prost(sfixed32, tag = "23")]
    Sfixed32(i32),
    #[prost(sfixed64, tag = "25")]
    Sfixed64(i64),
    #[prost(bool, tag = "27")]
    Bool(bool),
    #[prost(string, tag = "29")]
    Str(String),
}

impl Value {
    /// The value as a whole number, if it is one.
    fn int(&self) -> Option<i128> {
        Some(match *self {
            Value::Int32(x) | Value::Sint32(x) | Value::Sfixed32(x) => x.into(),
            Value::Int64(x) | Value::Sint64(x) | Value::Sfixed64(x) => x.into(),
            Value::Uint32(x) | Value::Fixed32(x) => x.into(),
            Value::Uint64(x) | Value::Fixed64(x) => x.into(),
            _ => return None,
        })
    }
}

/// `NodeType` values (et_def.proto).
pub(crate) mod node_type {
    pub const METADATA: i32 = 1;
    pub const MEM_LOAD: i32 = 2;
    pub const MEM_STORE: i32 = 3;
    pub const COMP: i32 = 4;
    pub const COMM_SEND: i32 = 5;
    pub const COMM_RECV: i32 = 6;
    pub const COMM_COLL: i32 = 7;
}

/// The longest compute node read, µs (an hour: a node is a kernel or a layer's work, and a
/// larger figure is a unit mistaken).
const MAX_NODE_US: u64 = super::calls::MAX_ENTRY_US as u64;

/// nccl-tests' collective for a `CollectiveCommType` value, and Chakra's name for it.
fn collective(comm_type: i128) -> Result<&'static str, String> {
    Ok(match comm_type {
        0 => "all_reduce",
        1 => "reduce",
        2 => "all_gather",
        5 => "broadcast",
        6 => "alltoall",
        7 => "reduce_scatter",
        // A barrier: an all-reduce of one float.
        9 => "barrier",
        3 | 4 | 8 => {
            let name = match comm_type {
                3 => "GATHER",
                4 => "SCATTER",
                _ => "REDUCE_SCATTER_BLOCK",
            };
            return Err(format!(
                "{name} is not a collective collsim times (it times all_reduce, reduce, all_gather, broadcast, alltoall, reduce_scatter and barrier)"
            ));
        }
        _ => return Err(format!("{comm_type} is not a CollectiveCommType (0 to 9)")),
    })
}

/// A Chakra trace as a list of calls, with what the replay leaves out.
#[derive(Debug, Clone, PartialEq)]
pub struct Chakra {
    /// The calls.
    pub file: CallsFile,
    /// Host (CPU) nodes, which take no GPU time in the replay.
    pub host_ops: usize,
    /// Their recorded time, µs.
    pub host_us: f64,
}

/// Whether `bytes` look like a Chakra trace rather than JSON (a list of calls or a Kineto
/// trace): its first byte is a message's length, never `{`, `[` or white space.
pub fn looks_like_chakra(bytes: &[u8]) -> bool {
    !bytes.starts_with(b"\xef\xbb\xbf")
        && bytes.first().is_some_and(|b| !matches!(b, b'{' | b'[' | b' ' | b'\t' | b'\r' | b'\n'))
}

/// Decodes the messages of a trace: its metadata and its nodes.
fn decode(file: &str, bytes: &[u8]) -> Result<Vec<Node>, String> {
    let mut buf = bytes;
    let at = |buf: &[u8]| bytes.len() - buf.len();
    GlobalMetadata::decode_length_delimited(&mut buf).map_err(|e| {
        format!(
            "{file}: byte 0: not a Chakra execution trace (its GlobalMetadata does not decode: {e})"
        )
    })?;
    let mut nodes = Vec::new();
    while !buf.is_empty() {
        let off = at(buf);
        let n = Node::decode_length_delimited(&mut buf).map_err(|e| {
            format!("{file}: byte {off}: node {}: does not decode ({e}; the file is cut short or not a Chakra trace)", nodes.len())
        })?;
        nodes.push(n);
    }
    Ok(nodes)
}

/// A node as errors name it.
fn who(file: &str, k: usize, n: &Node) -> String {
    format!("{file}: node {k} (id {}, {:?})", n.id, n.name)
}

/// A node's attribute (None if absent); an error if the node gives it more than once, as no
/// trace writer does, rather than replaying one of them.
fn attr<'a>(file: &str, k: usize, n: &'a Node, name: &str) -> Result<Option<&'a Attr>, String> {
    let mut given = n.attr.iter().filter(|a| a.name == name);
    let first = given.next();
    match given.next() {
        Some(_) => Err(format!("{}: attribute {name} given more than once", who(file, k, n))),
        None => Ok(first),
    }
}

/// A node's whole-number attribute: None if absent, an error if not a number.
fn int_attr(file: &str, k: usize, n: &Node, name: &str) -> Result<Option<i128>, String> {
    match attr(file, k, n, name)? {
        None => Ok(None),
        Some(a) => a.value.as_ref().and_then(Value::int).map(Some).ok_or_else(|| {
            format!("{}: attribute {name}: not a whole number ({:?})", who(file, k, n), a.value)
        }),
    }
}

/// nccl-tests' dtype of a collective from its input types as Chakra's PyTorch converter
/// records them (`Tensor(c10::BFloat16)`), float where they name none.
fn dtype(n: &Node) -> &'static str {
    let types = n.inputs.as_ref().map_or("", |i| i.types.as_str());
    if types.contains("BFloat16") {
        "bfloat16"
    } else if types.contains("Half") {
        "half"
    } else if types.contains("Double") || types.contains("(double)") {
        "double"
    } else {
        "float"
    }
}

/// The process groups of a `process_group:init` metadata node: each `pg_name` and its ranks.
/// PyTorch records them as a JSON list of objects (`[{"pg_name": "0", ..., "ranks": [0, 1]},
/// ...]`), which Chakra's converter keeps inside the node's input values; also read where a
/// writer escaped that JSON as a string (`[{\"pg_name\": ...`) or wrote the list as Python
/// prints it (`[{'pg_name': '0', ..., 'ranks': [0, 1]}]`).
fn process_groups(file: &str, k: usize, n: &Node) -> Result<Vec<(String, Vec<u64>)>, String> {
    let values = n.inputs.as_ref().map_or("", |i| i.values.as_str());
    let list = match (values.find("[{"), values.rfind("}]")) {
        (Some(a), Some(b)) if a < b => &values[a..b + 2],
        // No group recorded.
        _ => return Ok(Vec::new()),
    };
    let bad = |why: String| format!("{}: inputs.values: {why}", who(file, k, n));
    let v: serde_json::Value = serde_json::from_str(list)
        .or_else(|e| relaxed_groups(list).ok_or(e))
        .map_err(|e| bad(format!("the process groups do not read as JSON ({e})")))?;
    let mut groups = Vec::new();
    for (i, g) in v.as_array().into_iter().flatten().enumerate() {
        let name = match g.get("pg_name") {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(x @ serde_json::Value::Number(_)) => x.to_string(),
            _ => return Err(bad(format!("group {i}: no pg_name"))),
        };
        let ranks = g
            .get("ranks")
            .and_then(serde_json::Value::as_array)
            .ok_or_else(|| bad(format!("group {name:?}: no list of ranks")))?
            .iter()
            .map(serde_json::Value::as_u64)
            .collect::<Option<Vec<u64>>>()
            .ok_or_else(|| bad(format!("group {name:?}: a rank that is not a rank number")))?;
        let mut sorted = ranks.clone();
        sorted.sort_unstable();
        if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
            return Err(bad(format!("group {name:?}: rank {} listed more than once", w[0])));
        }
        groups.push((name, ranks));
    }
    Ok(groups)
}

/// The process groups' list where it is not plain JSON: JSON escaped as a string's contents
/// (`\"` for each quote), or Python's printing of the list (single quotes, `None`, `True`,
/// `False`, and no double quote anywhere).
fn relaxed_groups(list: &str) -> Option<serde_json::Value> {
    let text = if list.contains("\\\"") {
        serde_json::from_str::<String>(&format!("\"{list}\"")).ok()?
    } else if list.contains('\'') && !list.contains('"') {
        let quoted = list.replace('\'', "\"");
        let words = |w: &str, json: &str, t: String| {
            t.replace(&format!(": {w}"), &format!(": {json}"))
                .replace(&format!(", {w}"), &format!(", {json}"))
        };
        words("None", "null", words("True", "true", words("False", "false", quoted)))
    } else {
        return None;
    };
    serde_json::from_str(&text).ok()
}

/// A group's ranks (None: an empty list, which PyTorch may record for the default group) and
/// its shape on a `world` of ranks (None: the world's).
fn shape(ranks: &[u64], world: u64) -> Result<(Option<u64>, Option<GroupShape>), String> {
    // Sorted: the trace's groups list each rank once ([`process_groups`] checks).
    let mut r = ranks.to_vec();
    r.sort_unstable();
    let g = r.len() as u64;
    let members = (g > 0).then_some(g);
    if g == 0 || g == world {
        return Ok((members, None));
    }
    let stride = if g == 1 { 1 } else { r[1] - r[0] };
    if r.windows(2).any(|w| w[1] - w[0] != stride) {
        return Err(format!(
            "ranks {r:?} are not evenly spaced; collsim replays groups of ranks a stride apart"
        ));
    }
    let size = if g.checked_mul(stride) == Some(world) { None } else { Some(g as usize) };
    let shape = GroupShape { size, stride: stride as usize };
    // The trace's own ranks must hold it, as the replay's will.
    let world = usize::try_from(world).unwrap_or(usize::MAX);
    shape.on(world).map_err(|e| format!("on the trace's {world} ranks: {e}"))?;
    Ok((members, Some(shape)))
}

/// A node's part in the replay.
enum Role {
    /// GPU compute, µs.
    Compute(f64),
    /// A collective's NCCL launch.
    Coll(NcclOp),
    /// Nothing but a point in the graph (host work, metadata).
    Point,
}

/// The ranks of a trace from its file name: `NAME.RANK.et` (or `.et.gz`) beside the files of
/// ranks 0, 1, ... of the same NAME, as Chakra's tools write one per rank (None where the name
/// is not so, or no file of rank 0 is there).
pub fn ranks_beside(path: &std::path::Path) -> Option<u64> {
    let name = path.file_name()?.to_str()?;
    let (stem, ext) = name
        .strip_suffix(".et")
        .map(|s| (s, ".et"))
        .or_else(|| name.strip_suffix(".et.gz").map(|s| (s, ".et.gz")))?;
    let (prefix, rank) = stem.rsplit_once('.')?;
    rank.parse::<u64>().ok()?;
    let dir = path.parent().unwrap_or_else(|| std::path::Path::new(""));
    let n =
        (0u64..).take_while(|k| dir.join(format!("{prefix}.{k}{ext}")).is_file()).count() as u64;
    (n > 0).then_some(n)
}

/// Converts a Chakra trace of one rank (`file` names it in errors) into a list of calls;
/// `ranks`, the ranks it ran on where its process groups do not say ([`ranks_beside`]),
/// sizes its all-gathers.
pub fn import(file: &str, bytes: &[u8], ranks: Option<u64>) -> Result<Chakra, String> {
    let nodes = decode(file, bytes)?;
    let mut index = HashMap::with_capacity(nodes.len());
    for (k, n) in nodes.iter().enumerate() {
        if let Some(j) = index.insert(n.id, k) {
            return Err(format!("{}: id {} is also node {j}'s", who(file, k, n), n.id));
        }
    }
    // Process groups, and the world as the largest of them.
    let mut groups: HashMap<String, Vec<u64>> = HashMap::new();
    for (k, n) in nodes.iter().enumerate() {
        if n.kind == node_type::METADATA && n.name.contains("process_group:init") {
            for (name, ranks) in process_groups(file, k, n)? {
                match groups.get(&name) {
                    Some(r) if *r != ranks => {
                        return Err(format!(
                            "{}: pg_name {name:?}: ranks {ranks:?}, where an earlier definition gives {r:?}",
                            who(file, k, n)
                        ));
                    }
                    _ => {
                        groups.insert(name, ranks);
                    }
                }
            }
        }
    }
    let world =
        groups.values().flatten().map(|&r| r.saturating_add(1)).max().or(ranks).filter(|&w| w > 0);
    let (mut host_ops, mut host_us) = (0, 0.0);
    let mut roles = Vec::with_capacity(nodes.len());
    for (k, n) in nodes.iter().enumerate() {
        let fail = |why: String| format!("{}: {why}", who(file, k, n));
        // A bool as Chakra writes it, or a number (nonzero: true).
        let cpu = match attr(file, k, n, "is_cpu_op")?.and_then(|a| a.value.as_ref()) {
            Some(Value::Bool(b)) => *b,
            Some(v) => v.int().is_some_and(|x| x != 0),
            None => false,
        };
        roles.push(match n.kind {
            node_type::METADATA => Role::Point,
            node_type::COMP if cpu => {
                host_ops += 1;
                host_us += n.duration_micros as f64;
                Role::Point
            }
            node_type::COMP => {
                let ops = int_attr(file, k, n, "num_ops")?.unwrap_or(0);
                if n.duration_micros == 0 && ops > 0 {
                    return Err(fail(format!(
                        "compute given as {ops} operations without duration_micros; collsim replays measured compute times (ASTRA-sim's roofline input is not read)"
                    )));
                }
                if n.duration_micros > MAX_NODE_US {
                    return Err(fail(format!(
                        "duration_micros {}: more than an hour of compute in one node (the field is in µs)",
                        n.duration_micros
                    )));
                }
                Role::Compute(n.duration_micros as f64)
            }
            node_type::COMM_COLL => {
                let t = int_attr(file, k, n, "comm_type")?
                    .ok_or_else(|| fail("no comm_type attribute".into()))?;
                let c = collective(t).map_err(|e| fail(format!("comm_type: {e}")))?;
                let size = match int_attr(file, k, n, "comm_size")? {
                    Some(x) => x,
                    // A barrier moves no data of its own.
                    None if t == 9 => 0,
                    None => return Err(fail("no comm_size attribute".into())),
                };
                let max = super::sweep::MAX_CALL_BYTES.get();
                let bytes = u64::try_from(size).ok().filter(|&b| b <= max).ok_or_else(|| {
                    fail(format!(
                        "comm_size {size}: must be a size in bytes from 0 to {}",
                        super::sweep::MAX_CALL_BYTES
                    ))
                })?;
                // The group's ranks (None: the world's) and shape.
                let (members, group) = match attr(file, k, n, "pg_name")? {
                    None => (None, None),
                    Some(a) => {
                        let name = match &a.value {
                            Some(Value::Str(s)) => s.clone(),
                            Some(v) => match v.int() {
                                Some(x) => x.to_string(),
                                None => return Err(fail(format!("pg_name: {v:?} is not a name"))),
                            },
                            None => return Err(fail("pg_name: no value".into())),
                        };
                        let ranks = groups.get(&name).ok_or_else(|| {
                            fail(format!(
                                "pg_name {name:?}: the trace's process_group:init metadata node gives no such group (collsim needs its ranks)"
                            ))
                        })?;
                        shape(ranks, world.unwrap_or(1))
                            .map_err(|e| fail(format!("pg_name {name:?}: {e}")))?
                    }
                };
                let (c, bytes, dtype) = match c {
                    "barrier" => ("all_reduce", 4, "float"),
                    // Each rank's part, as Chakra's PyTorch converter records it (the
                    // collective's input): nccl-tests' size is the gathered buffer.
                    "all_gather" => {
                        let g = members.or(world).ok_or_else(|| {
                            fail(
                                "ALL_GATHER: comm_size is each rank's part, and the trace's ranks are unknown (no process_group:init node, no files NAME.0.et, NAME.1.et, ... beside it)".into(),
                            )
                        })?;
                        let total = bytes.checked_mul(g).filter(|&b| b <= max).ok_or_else(|| {
                            fail(format!(
                                "comm_size {size} on each of {g} ranks: more than {} gathered",
                                super::sweep::MAX_CALL_BYTES
                            ))
                        })?;
                        (c, total.max(1), dtype(n))
                    }
                    c => (c, bytes.max(1), dtype(n)),
                };
                Role::Coll(NcclOp::Collective {
                    collective: c.to_string(),
                    bytes,
                    dtype: dtype.to_string(),
                    name: (!n.name.is_empty()).then(|| n.name.clone()),
                    group,
                })
            }
            node_type::COMM_SEND | node_type::COMM_RECV => {
                return Err(fail(
                    "a point-to-point node; collsim replays one rank's step on every rank, where a send has no receive to meet, so send and receive nodes are not replayed".into(),
                ));
            }
            node_type::MEM_LOAD | node_type::MEM_STORE => {
                return Err(fail("a remote memory node, which collsim does not model".into()));
            }
            t => return Err(fail(format!("type {t} is not a node type collsim reads"))),
        });
    }
    // Dependencies, as node indices.
    let mut needs: Vec<Vec<usize>> = Vec::with_capacity(nodes.len());
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for (k, n) in nodes.iter().enumerate() {
        let mut d = Vec::with_capacity(n.data_deps.len() + n.ctrl_deps.len());
        for id in n.data_deps.iter().chain(&n.ctrl_deps) {
            let j = *index.get(id).ok_or_else(|| {
                format!("{}: depends on id {id}, which no node has", who(file, k, n))
            })?;
            if j == k {
                return Err(format!("{}: depends on itself", who(file, k, n)));
            }
            d.push(j);
            users[j].push(k);
        }
        d.sort_unstable();
        d.dedup();
        needs.push(d);
    }
    for u in &mut users {
        u.sort_unstable();
        u.dedup();
    }
    // Kahn's order: a ready collective first, else the ready node earliest in the file.
    let mut left: Vec<usize> = needs.iter().map(Vec::len).collect();
    let coll = |k: usize| matches!(roles[k], Role::Coll(_));
    let mut ready: BinaryHeap<std::cmp::Reverse<(bool, usize)>> = (0..nodes.len())
        .filter(|&k| left[k] == 0)
        .map(|k| std::cmp::Reverse((!coll(k), k)))
        .collect();
    let mut calls = Vec::new();
    // Per node, the NCCL launches (counted from 1) it needs done; the compute stream's wait.
    let mut launch_of: Vec<usize> = vec![0; nodes.len()];
    let mut needs_launch: Vec<usize> = vec![0; nodes.len()];
    let (mut launches, mut waited) = (0usize, 0usize);
    let mut done = 0usize;
    while let Some(std::cmp::Reverse((_, k))) = ready.pop() {
        done += 1;
        let need = needs[k].iter().map(|&j| launch_of[j].max(needs_launch[j])).max().unwrap_or(0);
        needs_launch[k] = need;
        match &roles[k] {
            Role::Compute(us) => {
                if need > waited {
                    calls.push(Call::Wait { wait: need });
                    waited = need;
                }
                if *us > 0.0 {
                    calls.push(Call::Compute {
                        compute_us: *us,
                        name: (!nodes[k].name.is_empty()).then(|| nodes[k].name.clone()),
                    });
                }
            }
            Role::Coll(op) => {
                launches += 1;
                launch_of[k] = launches;
                calls.push(Call::Nccl { nccl: vec![op.clone()], slowdown: None, stream: None });
            }
            Role::Point => {}
        }
        for &u in &users[k] {
            left[u] -= 1;
            if left[u] == 0 {
                ready.push(std::cmp::Reverse((!coll(u), u)));
            }
        }
    }
    if done < nodes.len() {
        let k = (0..nodes.len()).find(|&k| left[k] > 0).unwrap_or(0);
        return Err(format!(
            "{}: its dependencies form a cycle (it waits on a node that waits on it)",
            who(file, k, &nodes[k])
        ));
    }
    let ranks = world.and_then(|w| usize::try_from(w).ok());
    Ok(Chakra { file: CallsFile { collsim_calls: VERSION, ranks, calls }, host_ops, host_us })
}

/// Writes nodes as a Chakra trace (metadata first), for tests.
#[cfg(test)]
pub(crate) fn encode(nodes: &[Node]) -> Vec<u8> {
    let mut out = Vec::new();
    let meta = GlobalMetadata { version: "0.0.4".into(), attr: Vec::new() };
    // Writing into a Vec cannot run out of room.
    let _ = meta.encode_length_delimited(&mut out);
    for n in nodes {
        let _ = n.encode_length_delimited(&mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: u64, kind: i32, us: u64, deps: &[u64], attrs: Vec<Attr>) -> Node {
        Node {
            id,
            name: format!("n{id}"),
            kind,
            ctrl_deps: Vec::new(),
            data_deps: deps.to_vec(),
            duration_micros: us,
            inputs: None,
            attr: attrs,
        }
    }

    fn import_(file: &str, bytes: &[u8]) -> Result<Chakra, String> {
        import(file, bytes, None)
    }

    fn int(name: &str, x: i64) -> Attr {
        Attr { name: name.into(), value: Some(Value::Int64(x)) }
    }

    fn ar(id: u64, bytes: i64, deps: &[u64]) -> Node {
        node(id, node_type::COMM_COLL, 0, deps, vec![int("comm_type", 0), int("comm_size", bytes)])
    }

    #[test]
    fn a_compute_that_needs_a_collective_waits_for_its_launch() {
        // fwd -> grad -> all-reduce; other grad independent; update needs the all-reduce.
        let nodes = vec![
            node(10, node_type::COMP, 100, &[], vec![]),
            node(11, node_type::COMP, 50, &[10], vec![]),
            ar(12, 1 << 20, &[11]),
            node(13, node_type::COMP, 70, &[11], vec![]),
            node(14, node_type::COMP, 5, &[12, 13], vec![]),
        ];
        let c = import_("t.0.et", &encode(&nodes)).unwrap();
        let kinds: Vec<String> = c
            .file
            .calls
            .iter()
            .map(|c| match c {
                Call::Compute { compute_us, .. } => format!("c{compute_us}"),
                Call::Nccl { .. } => "ar".into(),
                Call::Wait { wait } => format!("w{wait}"),
                _ => "?".into(),
            })
            .collect();
        assert_eq!(kinds, ["c100", "c50", "ar", "c70", "w1", "c5"]);
        // A collective is launched once what it needs is done, ahead of compute that was
        // ready before it (id 21) and of the file's order (its node comes last).
        let nodes = vec![
            ar(23, 1 << 20, &[20]),
            node(20, node_type::COMP, 10, &[], vec![]),
            node(21, node_type::COMP, 20, &[], vec![]),
            node(22, node_type::COMP, 30, &[23], vec![]),
        ];
        let c = import_("t.0.et", &encode(&nodes)).unwrap();
        let order: Vec<String> = c
            .file
            .calls
            .iter()
            .map(|c| match c {
                Call::Compute { name, .. } => name.clone().unwrap(),
                Call::Nccl { .. } => "ar".into(),
                Call::Wait { wait } => format!("w{wait}"),
                _ => "?".into(),
            })
            .collect();
        assert_eq!(order, ["n20", "ar", "n21", "w1", "n22"]);
    }

    #[test]
    fn groups_come_from_the_process_group_metadata() {
        let mut meta = node(1, node_type::METADATA, 0, &[], vec![]);
        meta.name = "## process_group:init ##".into();
        meta.inputs = Some(IoInfo {
            values: r#"['[{"pg_name": "0", "ranks": [0, 1, 2, 3, 4, 5, 6, 7]}, {"pg_name": "1", "ranks": [0, 1]}, {"pg_name": "2", "ranks": [0, 2, 4, 6]}, {"pg_name": "3", "ranks": [0, 1, 3]}]']"#.into(),
            ..IoInfo::default()
        });
        let pg = |id, name: &str| {
            let mut n = ar(id, 1024, &[]);
            n.attr.push(Attr { name: "pg_name".into(), value: Some(Value::Str(name.into())) });
            n
        };
        let c =
            import_("t.et", &encode(&[meta.clone(), pg(2, "0"), pg(3, "1"), pg(4, "2")])).unwrap();
        assert_eq!(c.file.ranks, Some(8));
        let groups: Vec<Option<GroupShape>> = c
            .file
            .calls
            .iter()
            .filter_map(|c| match c {
                Call::Nccl { nccl, .. } => match &nccl[0] {
                    NcclOp::Collective { group, .. } => Some(*group),
                    NcclOp::Hook { .. } | NcclOp::Barrier { .. } => None,
                },
                _ => None,
            })
            .collect();
        assert_eq!(
            groups,
            [
                None,
                Some(GroupShape { size: Some(2), stride: 1 }),
                Some(GroupShape { size: None, stride: 2 })
            ]
        );
        // The same groups escaped as a string, and as Python prints them.
        for values in [
            r#"['[{\"pg_name\": \"0\", \"ranks\": [0, 1, 2, 3, 4, 5, 6, 7]}, {\"pg_name\": \"1\", \"ranks\": [0, 1]}, {\"pg_name\": \"2\", \"ranks\": [0, 2, 4, 6]}]']"#,
            r#"[[{'pg_name': '0', 'pg_desc': None, 'ranks': [0, 1, 2, 3, 4, 5, 6, 7]}, {'pg_name': '1', 'ranks': [0, 1]}, {'pg_name': '2', 'ranks': [0, 2, 4, 6]}]]"#,
        ] {
            let mut m = meta.clone();
            m.inputs = Some(IoInfo { values: values.into(), ..IoInfo::default() });
            let again = import_("t.et", &encode(&[m, pg(2, "0"), pg(3, "1"), pg(4, "2")]));
            assert_eq!(again.map(|c| c.file), Ok(c.file.clone()), "{values}");
        }
        let e = import_("t.et", &encode(&[meta.clone(), pg(5, "3")])).unwrap_err();
        assert!(e.contains("node 1 (id 5") && e.contains("not evenly spaced"), "{e}");
        let e = import_("t.et", &encode(&[meta.clone(), pg(6, "9")])).unwrap_err();
        assert!(e.contains("pg_name \"9\"") && e.contains("no such group"), "{e}");
        // A group that does not tile the trace's own ranks, and one defined twice over.
        let mut odd = meta.clone();
        odd.inputs = Some(IoInfo {
            values: r#"[{"pg_name": "0", "ranks": [0, 1, 2, 3, 4, 5, 6, 7]}, {"pg_name": "1", "ranks": [0, 1, 2]}]"#.into(),
            ..IoInfo::default()
        });
        let e = import_("t.et", &encode(&[odd, pg(7, "1")])).unwrap_err();
        assert!(e.contains("on the trace's 8 ranks") && e.contains("do not tile"), "{e}");
        let mut again = meta.clone();
        again.id = 8;
        again.inputs = Some(IoInfo {
            values: r#"[{"pg_name": "1", "ranks": [0, 4]}]"#.into(),
            ..IoInfo::default()
        });
        let e = import_("t.et", &encode(&[meta, again, pg(9, "1")])).unwrap_err();
        assert!(e.contains("an earlier definition gives [0, 1]"), "{e}");
    }

    #[test]
    fn bad_traces_name_the_node_and_field() {
        let mut cases: Vec<(Vec<Node>, &str)> = vec![
            (
                vec![
                    node(1, node_type::COMP, 5, &[2], vec![]),
                    node(2, node_type::COMP, 5, &[1], vec![]),
                ],
                "cycle",
            ),
            (vec![node(1, node_type::COMP, 5, &[7], vec![])], "id 7, which no node has"),
            (
                vec![
                    node(1, node_type::COMP, 5, &[], vec![]),
                    node(1, node_type::COMP, 5, &[], vec![]),
                ],
                "also node 0",
            ),
            (
                vec![node(1, node_type::COMM_COLL, 0, &[], vec![int("comm_size", 8)])],
                "no comm_type",
            ),
            (
                vec![node(1, node_type::COMM_COLL, 0, &[], vec![int("comm_type", 3)])],
                "GATHER is not",
            ),
            (
                vec![node(1, node_type::COMM_COLL, 0, &[], vec![int("comm_type", 42)])],
                "42 is not a CollectiveCommType",
            ),
            (vec![ar(1, -5, &[])], "comm_size -5"),
            (vec![node(1, node_type::COMM_SEND, 0, &[], vec![])], "point-to-point"),
            (vec![node(1, node_type::MEM_LOAD, 0, &[], vec![])], "remote memory"),
            (vec![node(1, 0, 0, &[], vec![])], "type 0"),
            (vec![node(1, node_type::COMP, 0, &[], vec![int("num_ops", 1000)])], "roofline"),
            (vec![node(1, node_type::COMP, u64::MAX, &[], vec![])], "more than an hour"),
            (
                vec![node(1, node_type::COMM_COLL, 0, &[], vec![int("comm_type", 8)])],
                "REDUCE_SCATTER_BLOCK is not",
            ),
            (
                vec![node(1, node_type::COMM_COLL, 0, &[], vec![int("comm_type", 0)])],
                "no comm_size",
            ),
            (
                vec![node(
                    1,
                    node_type::COMM_COLL,
                    0,
                    &[],
                    vec![Attr { name: "comm_type".into(), value: Some(Value::Str("x".into())) }],
                )],
                "comm_type: not a whole number",
            ),
        ];
        let twice = vec![int("comm_type", 0), int("comm_size", 8), int("comm_size", 16)];
        cases.push((
            vec![node(1, node_type::COMM_COLL, 0, &[], twice)],
            "attribute comm_size given more than once",
        ));
        let mut meta = node(1, node_type::METADATA, 0, &[], vec![]);
        meta.name = "process_group:init".into();
        meta.inputs = Some(IoInfo {
            values: r#"[{"pg_name": "0", "ranks": [0, 1, 1, 3]}]"#.into(),
            ..IoInfo::default()
        });
        cases.push((vec![meta], "group \"0\": rank 1 listed more than once"));
        for (nodes, want) in cases {
            let e = import_("bad.et", &encode(&nodes)).unwrap_err();
            assert!(e.starts_with("bad.et: node ") && e.contains(want), "{e} (wanted {want})");
        }
        // Cut short, and not a trace.
        let whole = encode(&[ar(1, 1 << 20, &[])]);
        let e = import_("cut.et", &whole[..whole.len() - 3]).unwrap_err();
        assert!(e.contains("byte ") && e.contains("cut short"), "{e}");
        let e = import_("x.et", b"\x05\xff\xff\xff\xff\xff").unwrap_err();
        assert!(e.contains("not a Chakra execution trace"), "{e}");
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_give_a_trace_or_an_error(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
            let _ = import_("x.et", &bytes);
        }

        #[test]
        fn a_damaged_trace_gives_a_trace_or_an_error(at in 0usize..400, byte in proptest::prelude::any::<u8>()) {
            let mut meta = node(1, node_type::METADATA, 0, &[], vec![]);
            meta.name = "process_group:init".into();
            meta.inputs = Some(IoInfo { values: r#"[{"pg_name": "1", "ranks": [0, 2]}]"#.into(), ..IoInfo::default() });
            let mut g = ar(3, 77, &[2]);
            g.attr.push(Attr { name: "pg_name".into(), value: Some(Value::Str("1".into())) });
            let mut bytes = encode(&[meta, node(2, node_type::COMP, 9, &[1], vec![]), g]);
            let n = bytes.len();
            bytes[at % n] = byte;
            let _ = import_("x.et", &bytes);
        }
    }

    #[test]
    fn an_all_gather_gathers_each_ranks_part() {
        let ag = |pg: Option<&str>| {
            let mut n = node(
                1,
                node_type::COMM_COLL,
                0,
                &[],
                vec![int("comm_type", 2), int("comm_size", 1000)],
            );
            if let Some(pg) = pg {
                n.attr.push(Attr { name: "pg_name".into(), value: Some(Value::Str(pg.into())) });
            }
            n
        };
        let bytes = |c: &Chakra| match &c.file.calls[0] {
            Call::Nccl { nccl, .. } => match &nccl[0] {
                NcclOp::Collective { bytes, .. } => *bytes,
                NcclOp::Hook { .. } | NcclOp::Barrier { .. } => 0,
            },
            _ => 0,
        };
        // On the ranks beside it; on a group of the trace's; unknown.
        assert_eq!(bytes(&import("t.et", &encode(&[ag(None)]), Some(8)).unwrap()), 8000);
        let mut meta = node(2, node_type::METADATA, 0, &[], vec![]);
        meta.name = "process_group:init".into();
        meta.inputs = Some(IoInfo {
            values:
                r#"[{"pg_name": "0", "ranks": [0, 1, 2, 3]}, {"pg_name": "1", "ranks": [0, 1]}]"#
                    .into(),
            ..IoInfo::default()
        });
        let c = import("t.et", &encode(&[meta.clone(), ag(Some("1"))]), Some(16)).unwrap();
        assert_eq!((bytes(&c), c.file.ranks), (2000, Some(4)));
        let c = import("t.et", &encode(&[meta, ag(None)]), None).unwrap();
        assert_eq!(bytes(&c), 4000);
        let e = import_("t.et", &encode(&[ag(None)])).unwrap_err();
        assert!(e.contains("ALL_GATHER: comm_size is each rank's part"), "{e}");
    }

    #[test]
    fn host_nodes_are_points_in_the_graph() {
        let cpu = Attr { name: "is_cpu_op".into(), value: Some(Value::Bool(true)) };
        let nodes = vec![
            node(1, node_type::COMP, 900, &[], vec![cpu]),
            ar(2, 4096, &[1]),
            node(3, node_type::COMP, 40, &[2], vec![]),
        ];
        let c = import_("t.et", &encode(&nodes)).unwrap();
        assert_eq!((c.host_ops, c.host_us), (1, 900.0));
        assert!(matches!(
            c.file.calls[..],
            [Call::Nccl { .. }, Call::Wait { wait: 1 }, Call::Compute { .. }]
        ));
    }
}
