//! NCCL environment variables as a scenario gives them (`NCCL_ALGO=Ring`, …), parsed the way
//! NCCL parses them. Variables the model uses change it; the others are kept as "ignored" so
//! the caller can list them.

use std::collections::BTreeMap;

use super::tuning::NcclVersion;
use super::{Algo, Proto};
use crate::hw::PathType;
use crate::units::Bytes;

/// The NCCL settings the model uses, with NCCL's defaults.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct NcclEnv {
    /// Algorithms allowed (NCCL_ALGO), in NCCL's index order.
    pub algos: Vec<Algo>,
    /// Protocols allowed by NCCL_PROTO (LL128 may still be off for hardware reasons).
    pub protos: Vec<Proto>,
    /// Whether NCCL_PROTO named LL128 explicitly (forces it on where NCCL would gate it).
    pub ll128_forced: bool,
    /// NCCL_MIN_NCHANNELS.
    pub min_nchannels: usize,
    /// NCCL_MAX_NCHANNELS.
    pub max_nchannels: usize,
    /// NCCL_BUFFSIZE: the Simple protocol's FIFO per connection.
    #[serde(serialize_with = "ser_bytes")]
    pub buffsize: Bytes,
    /// NCCL_NVLS_ENABLE: 0 off, 1 on, 2 auto.
    pub nvls_enable: u8,
    /// NCCL_P2P_LEVEL: the worst GPU–GPU path type that may use P2P (None: NCCL's default).
    pub p2p_level: Option<PathType>,
    /// NCCL_P2P_DISABLE=1.
    pub p2p_disable: bool,
    /// NCCL_NET_GDR_LEVEL: the worst GPU–NIC path type that may use GPUDirect RDMA (None:
    /// NCCL's default, PXB).
    pub gdr_level: Option<PathType>,
    /// Which NCCL release's cost-model tables to use (scenario `nccl.version`).
    pub version: NcclVersion,
    /// The 2.x release's minor number (scenario `nccl.version`; 30 by default): mechanisms that
    /// changed inside one range of cost-model tables (P2P channels per network peer, 2.29;
    /// Blackwell's NVLS channels and chunks across nodes, 2.30).
    pub minor: u32,
    /// The release with its patch (the minor's last collsim carries where the version names
    /// none): cost-model constants that changed between patches. Not in the JSON, whose
    /// `version` names it.
    #[serde(skip)]
    pub release: crate::comm::tuning::Release,
    /// NCCL_NCHANNELS_PER_NET_PEER: P2P channels to each peer on another node (None: NCCL's
    /// rule for the release).
    pub nchannels_per_net_peer: Option<usize>,
    /// NCCL_P2P_PER_CHANNEL_NET_BW (GB/s, 14 by default): what one P2P channel carries to a
    /// peer on another node. NCCL sizes a network peer's channels by it (from 2.29) and
    /// collsim caps each such channel at it (the proxy's per-channel rate).
    pub p2p_per_channel_net_bw: f64,
    /// NCCL_NTHREADS (Simple and LL threads per CTA) and NCCL_LL128_NTHREADS.
    pub nthreads: Option<u64>,
    /// NCCL_LL128_NTHREADS.
    pub ll128_nthreads: Option<u64>,
    /// NCCL_COLLNET_ENABLE=1.
    pub collnet_enable: bool,
    /// NCCL_NVLS_NCHANNELS.
    pub nvls_nchannels: Option<usize>,
    /// The communicator config's CTA bounds (NCCL_MIN_CTAS, NCCL_MAX_CTAS; 1 and 64 unset),
    /// which clamp NVLS's channels too (`src/transport/nvls.cc`).
    pub ctas: (usize, usize),
    /// NCCL_NVLS_CHUNKSIZE: the NVLS chunk before NCCL's reductions for small messages (None:
    /// NCCL's default, [`Communicator::nvls_layout`]).
    ///
    /// [`Communicator::nvls_layout`]: super::Communicator::nvls_layout
    #[serde(serialize_with = "ser_opt_bytes")]
    pub nvls_chunksize: Option<Bytes>,
    /// NCCL_NVLSTREE_MAX_CHUNKSIZE (None: NCCL's default, [`Communicator::nvls_layout`]).
    ///
    /// [`Communicator::nvls_layout`]: super::Communicator::nvls_layout
    #[serde(serialize_with = "ser_opt_bytes")]
    pub nvlstree_max_chunksize: Option<Bytes>,
    /// NCCL_PXN_DISABLE=1: no sending through an NVLink peer's NIC.
    pub pxn_disable: bool,
    /// NCCL_P2P_PXN_LEVEL (0-2, default 2): 0 keeps point-to-point sends on the sender's own
    /// NIC; otherwise they go out on the peer's rail through PXN (`Paths::p2p_send_nic`).
    pub p2p_pxn_level: u8,
    /// NCCL_SOCKET_NTHREADS × NCCL_NSOCKS_PERTHREAD: TCP streams per socket connection, if
    /// either is given (else the transport's default).
    pub socket_streams: Option<usize>,
    /// NCCL_TUNER_CONFIG_FILE's rows ([`super::tuner`]), read when the environment is built;
    /// with NCCL_TUNER_PLUGIN naming NCCL's example plugin, its binary's reading.
    #[serde(skip)]
    pub tuner: Option<std::sync::Arc<super::tuner::Tuner>>,
    /// Every NCCL_* variable given, as given (the resolved environment).
    pub given: BTreeMap<String, String>,
    /// The given variables the model does not use.
    pub ignored: Vec<String>,
}

fn ser_bytes<S: serde::Serializer>(b: &Bytes, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(b.get())
}

fn ser_opt_bytes<S: serde::Serializer>(b: &Option<Bytes>, s: S) -> Result<S::Ok, S::Error> {
    match b {
        Some(b) => s.serialize_u64(b.get()),
        None => s.serialize_none(),
    }
}

impl Default for NcclEnv {
    fn default() -> Self {
        NcclEnv {
            algos: Algo::ALL.to_vec(),
            protos: Proto::ALL.to_vec(),
            ll128_forced: false,
            min_nchannels: 1,
            max_nchannels: 64,
            buffsize: Bytes::from_mib(4),
            nvls_enable: 2,
            p2p_level: None,
            p2p_disable: false,
            gdr_level: None,
            socket_streams: None,
            pxn_disable: false,
            p2p_pxn_level: 2,
            nvls_nchannels: None,
            ctas: (1, 64),
            nvls_chunksize: None,
            nvlstree_max_chunksize: None,
            version: NcclVersion::V2_28,
            minor: 30,
            release: crate::comm::tuning::DEFAULT_RELEASE,
            nchannels_per_net_peer: None,
            p2p_per_channel_net_bw: 14.0,
            nthreads: None,
            ll128_nthreads: None,
            collnet_enable: false,
            tuner: None,
            given: BTreeMap::new(),
            ignored: Vec::new(),
        }
    }
}

/// Why an NCCL variable was rejected: `KEY: reason`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}={value}: {reason}")]
pub struct EnvError {
    /// The variable.
    pub key: String,
    /// Its value.
    pub value: String,
    /// What is wrong.
    pub reason: String,
}

/// The collectives a per-collective section of NCCL_ALGO / NCCL_PROTO may name (`allreduce:`),
/// as NCCL's function names, compared without case.
const NCCL_FUNCS: &[&str] =
    &["broadcast", "reduce", "allgather", "reducescatter", "allreduce", "sendrecv", "send", "recv"];

/// Picks the section of a per-collective list (`"LL,Simple;allreduce:^LL"`) that applies to
/// the collective NCCL calls `func` ("allreduce"): a section prefixed `func:` wins over the
/// unprefixed first one; with neither, the variable leaves that collective at NCCL's default.
fn section_for<'v>(value: &'v str, func: &str) -> Option<&'v str> {
    let mut default = None;
    for (i, sec) in value.split(';').enumerate() {
        match sec.split_once(':') {
            Some((f, list)) if f.trim().eq_ignore_ascii_case(func) => return Some(list),
            Some(_) => {}
            None if i == 0 => default = Some(sec),
            None => {}
        }
    }
    default
}

/// The section of `value` for AllReduce ("" where it leaves AllReduce alone).
fn section_for_allreduce(value: &str) -> &str {
    section_for(value, "allreduce").unwrap_or("")
}

/// What a checked NCCL-style list leaves enabled of `all` for the collective `func`: the
/// section's items, or all but them under `^`; all of them where no section applies.
fn list_for<T: Copy + PartialEq>(
    value: &str,
    func: &str,
    all: &[T],
    parse: impl Fn(&str) -> Option<Vec<T>>,
) -> Vec<T> {
    let Some(list) = section_for(value, func) else { return all.to_vec() };
    let list = list.trim();
    let (negate, list) = match list.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, list),
    };
    let named: Vec<T> = list
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .filter_map(&parse)
        .flatten()
        .collect();
    all.iter().copied().filter(|a| named.contains(a) != negate).collect()
}

/// NCCL's name of a collective in a per-collective section (`allgather:`).
pub fn nccl_func(coll: super::Collective) -> &'static str {
    use super::Collective as C;
    match coll {
        C::AllReduce => "allreduce",
        C::AllGather => "allgather",
        C::ReduceScatter => "reducescatter",
        C::Broadcast => "broadcast",
        C::Reduce => "reduce",
        C::AllToAll | C::SendRecv | C::Send { .. } => "sendrecv",
    }
}

/// Parses a NCCL-style list with optional `^` negation against `all`.
fn parse_list<T: Copy + PartialEq>(
    key: &str,
    value: &str,
    all: &[T],
    parse: impl Fn(&str) -> Option<Vec<T>>,
    names: &str,
) -> Result<Vec<T>, EnvError> {
    // Every section must name a collective NCCL knows and list only known values, whichever
    // section applies (NCCL refuses the whole variable otherwise).
    let bad = |reason: String| EnvError { key: key.into(), value: value.into(), reason };
    for sec in value.split(';') {
        let items = match sec.split_once(':') {
            Some((func, items)) => {
                let f = func.trim().to_ascii_lowercase();
                if !NCCL_FUNCS.contains(&f.as_str()) {
                    return Err(bad(format!(
                        "unknown collective `{}` (expected {})",
                        func.trim(),
                        NCCL_FUNCS.join(", ")
                    )));
                }
                items
            }
            None => sec,
        };
        let items = items.trim();
        for item in items.strip_prefix('^').unwrap_or(items).split(',').map(str::trim) {
            if !item.is_empty() && parse(item).is_none() {
                return Err(bad(format!("unknown value `{item}` (expected {names})")));
            }
        }
    }
    // Each collective a section names, and every other one where a first section without a
    // prefix applies to all: none may be left with nothing.
    for func in ["allreduce", "allgather", "reducescatter", "broadcast", "reduce"] {
        if section_for(value, func).is_some() && list_for(value, func, all, &parse).is_empty() {
            return Err(bad(format!("leaves nothing enabled for {func}")));
        }
    }
    Ok(list_for(value, "allreduce", all, &parse))
}

fn parse_int(key: &str, value: &str, lo: i64, hi: i64) -> Result<i64, EnvError> {
    let v: i64 = value.trim().parse().map_err(|_| EnvError {
        key: key.into(),
        value: value.into(),
        reason: "not an integer".into(),
    })?;
    if v < lo || v > hi {
        return Err(EnvError {
            key: key.into(),
            value: value.into(),
            reason: format!("must be in {lo}..={hi}"),
        });
    }
    Ok(v)
}

impl NcclEnv {
    /// The algorithms NCCL_ALGO leaves for `coll` (its own section, else the first unprefixed
    /// one, else all): [`NcclEnv::algos`] is AllReduce's.
    pub fn algos_for(&self, coll: super::Collective) -> Vec<Algo> {
        match self.given.get("NCCL_ALGO") {
            Some(v) => list_for(v, nccl_func(coll), &Algo::ALL, Algo::parse),
            None => self.algos.clone(),
        }
    }

    /// The protocols NCCL_PROTO leaves for `coll`, as [`NcclEnv::algos_for`].
    pub fn protos_for(&self, coll: super::Collective) -> Vec<Proto> {
        match self.given.get("NCCL_PROTO") {
            Some(v) => {
                list_for(v, nccl_func(coll), &Proto::ALL, |s| Proto::parse(s).map(|p| vec![p]))
            }
            None => self.protos.clone(),
        }
    }

    /// Applies `KEY=VALUE` pairs in order (a later one overrides an earlier one).
    pub fn from_pairs<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<NcclEnv, EnvError> {
        let mut env = NcclEnv::default();
        for (k, v) in pairs {
            env.given.insert(k.to_string(), v.to_string());
        }
        let given = env.given.clone();
        let (mut threads, mut socks) = (None, None);
        let (mut min_ctas, mut max_ctas): (Option<usize>, Option<usize>) = (None, None);
        for (key, value) in &given {
            let (k, v) = (key.as_str(), value.as_str());
            match k {
                "NCCL_ALGO" => {
                    env.algos = parse_list(
                        k,
                        v,
                        &Algo::ALL,
                        Algo::parse,
                        "Ring, Tree, CollNetDirect, CollNetChain, NVLS, NVLSTree, PAT",
                    )?;
                }
                "NCCL_PROTO" => {
                    env.protos = parse_list(
                        k,
                        v,
                        &Proto::ALL,
                        |s| Proto::parse(s).map(|p| vec![p]),
                        "LL, LL128, Simple",
                    )?;
                    let list = section_for_allreduce(v);
                    env.ll128_forced = !list.trim_start().starts_with('^')
                        && list.split(',').any(|s| s.trim().eq_ignore_ascii_case("ll128"));
                }
                // NCCL reads NRINGS, then NCHANNELS over it (`ncclMaxNchannels`,
                // `ncclMinNchannels` in `src/graph/connect.cc`); the CTA bounds of the
                // communicator's config (NCCL_MIN/MAX_CTAS) clamp on top.
                "NCCL_MIN_NCHANNELS" | "NCCL_MIN_NRINGS" | "NCCL_MIN_CTAS"
                | "NCCL_MAX_NCHANNELS" | "NCCL_MAX_NRINGS" | "NCCL_MAX_CTAS" => {
                    let n = parse_int(k, v, 1, 64)? as usize;
                    let (bound, what) = k["NCCL_".len()..].split_once('_').unwrap_or_default();
                    let max = bound == "MAX";
                    if what == "CTAS" {
                        *(if max { &mut max_ctas } else { &mut min_ctas }) = Some(n);
                    } else if what == "NCHANNELS"
                        || !given.contains_key(&format!("NCCL_{bound}_NCHANNELS"))
                    {
                        *(if max { &mut env.max_nchannels } else { &mut env.min_nchannels }) = n;
                    }
                }
                "NCCL_BUFFSIZE" => {
                    let b = parse_int(k, v, 1 << 14, 1 << 30)?;
                    if b % 8 != 0 {
                        return Err(EnvError {
                            key: k.into(),
                            value: v.into(),
                            reason: "must be a multiple of 8 bytes".into(),
                        });
                    }
                    env.buffsize = Bytes::new(b as u64);
                }
                "NCCL_NVLS_ENABLE" => env.nvls_enable = parse_int(k, v, 0, 2)? as u8,
                // Read below, once both are known.
                "NCCL_TUNER_CONFIG_FILE" | "NCCL_TUNER_PLUGIN" => {}
                "NCCL_NCHANNELS_PER_NET_PEER" => {
                    env.nchannels_per_net_peer = Some(parse_int(k, v, 1, 64)? as usize);
                }
                "NCCL_P2P_PER_CHANNEL_NET_BW" => {
                    env.p2p_per_channel_net_bw = parse_int(k, v, 1, 10_000)? as f64;
                }
                "NCCL_P2P_DISABLE" => env.p2p_disable = parse_int(k, v, 0, 1)? == 1,
                "version" => {
                    env.version = NcclVersion::parse(v).ok_or_else(|| EnvError {
                        key: "nccl.version".into(),
                        value: v.into(),
                        reason: "unknown NCCL version (2.18 to 2.30)".into(),
                    })?;
                    env.minor = NcclVersion::minor(v).unwrap_or(30);
                    env.release = crate::comm::tuning::Release::parse(v)
                        .unwrap_or(crate::comm::tuning::DEFAULT_RELEASE);
                }
                "NCCL_NTHREADS" | "NCCL_LL128_NTHREADS" => {
                    let (lo, hi) = if k == "NCCL_NTHREADS" { (64, 512) } else { (160, 640) };
                    let t = parse_int(k, v, lo, hi)?;
                    if t % 32 != 0 {
                        return Err(EnvError {
                            key: k.into(),
                            value: v.into(),
                            reason: "must be a multiple of 32 (a warp)".into(),
                        });
                    }
                    if k == "NCCL_NTHREADS" {
                        env.nthreads = Some(t as u64);
                    } else {
                        env.ll128_nthreads = Some(t as u64);
                    }
                }
                "NCCL_COLLNET_ENABLE" => env.collnet_enable = parse_int(k, v, 0, 1)? == 1,
                "NCCL_NVLS_NCHANNELS" => {
                    env.nvls_nchannels = Some(parse_int(k, v, 1, 64)? as usize)
                }
                "NCCL_NVLS_CHUNKSIZE" | "NCCL_NVLSTREE_MAX_CHUNKSIZE" => {
                    let b = Bytes::new(parse_int(k, v, 4096, 1 << 30)? as u64);
                    if k == "NCCL_NVLS_CHUNKSIZE" {
                        env.nvls_chunksize = Some(b);
                    } else {
                        env.nvlstree_max_chunksize = Some(b);
                    }
                }
                "NCCL_PXN_DISABLE" => env.pxn_disable = parse_int(k, v, 0, 1)? == 1,
                "NCCL_P2P_PXN_LEVEL" => env.p2p_pxn_level = parse_int(k, v, 0, 2)? as u8,
                "NCCL_SOCKET_NTHREADS" => threads = Some(parse_int(k, v, 1, 16)? as usize),
                "NCCL_NSOCKS_PERTHREAD" => socks = Some(parse_int(k, v, 1, 64)? as usize),
                "NCCL_P2P_LEVEL" | "NCCL_NET_GDR_LEVEL" => {
                    let level = PathType::parse_level(v).ok_or_else(|| EnvError {
                        key: k.into(),
                        value: v.into(),
                        reason: "unknown path type (LOC, NVL, NVB, PIX, PXB, PHB, SYS, or 0-5)"
                            .into(),
                    })?;
                    if k == "NCCL_P2P_LEVEL" {
                        env.p2p_level = Some(level);
                    } else {
                        env.gdr_level = Some(level);
                    }
                }
                _ => env.ignored.push(k.to_string()),
            }
        }
        if threads.is_some() || socks.is_some() {
            let (t, k) = (threads.unwrap_or(1), socks.unwrap_or(1));
            if t * k > 64 {
                return Err(EnvError {
                    key: "NCCL_NSOCKS_PERTHREAD".into(),
                    value: k.to_string(),
                    reason: format!(
                        "NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD = {} > 64",
                        t * k
                    ),
                });
            }
            env.socket_streams = Some(t * k);
        }
        env.tuner = tuner(&given)?;
        // The CTA bounds clamp the channel count as the config's minCTAs/maxCTAs do.
        if let Some(m) = max_ctas {
            env.max_nchannels = env.max_nchannels.min(m);
            env.ctas.1 = m;
        }
        if let Some(m) = min_ctas {
            env.min_nchannels = env.min_nchannels.max(m);
            env.ctas.0 = m;
        }
        if env.min_nchannels > env.max_nchannels {
            return Err(EnvError {
                key: "NCCL_MIN_NCHANNELS".into(),
                value: env.min_nchannels.to_string(),
                reason: format!("larger than NCCL_MAX_NCHANNELS={}", env.max_nchannels),
            });
        }
        Ok(env)
    }

    /// Whether an error is about a file's contents (NCCL_TUNER_CONFIG_FILE's), not the value
    /// as typed: bad input rather than a misused flag.
    pub fn is_file_error(e: &EnvError) -> bool {
        e.key == "NCCL_TUNER_CONFIG_FILE"
    }

    /// Splits `KEY=VALUE`; the key must start with `NCCL_`.
    pub fn split_pair(s: &str) -> Result<(String, String), String> {
        let (k, v) = s.split_once('=').ok_or_else(|| format!("--nccl {s}: expected KEY=VALUE"))?;
        if !k.starts_with("NCCL_") {
            return Err(format!("--nccl {s}: `{k}` is not an NCCL_* variable"));
        }
        Ok((k.to_string(), v.to_string()))
    }
}

/// The tuner NCCL_TUNER_CONFIG_FILE and NCCL_TUNER_PLUGIN give: the file in the example
/// plugin's format; with the example plugin named and no file, its default `nccl_tuner.conf`
/// where there is one (an empty configuration otherwise: the plugin still sets one channel).
fn tuner(
    given: &BTreeMap<String, String>,
) -> Result<Option<std::sync::Arc<super::tuner::Tuner>>, EnvError> {
    use super::tuner::{Tuner, names_example_plugin};
    let example = given.get("NCCL_TUNER_PLUGIN").is_some_and(|p| names_example_plugin(p));
    match given.get("NCCL_TUNER_CONFIG_FILE") {
        Some(f) if f.trim().is_empty() => Err(EnvError {
            key: "NCCL_TUNER_CONFIG_FILE".into(),
            value: f.clone(),
            reason: "names no file".into(),
        }),
        Some(f) => Tuner::load(f, example).map(Some).map_err(|reason| EnvError {
            key: "NCCL_TUNER_CONFIG_FILE".into(),
            value: f.clone(),
            reason,
        }),
        None if example => {
            let f = "nccl_tuner.conf";
            if std::path::Path::new(f).is_file() {
                Tuner::load(f, true).map(Some).map_err(|reason| EnvError {
                    key: "NCCL_TUNER_CONFIG_FILE".into(),
                    value: f.into(),
                    reason,
                })
            } else {
                let none = Tuner {
                    file: format!("{f} (not found)"),
                    rows: Vec::new(),
                    example_binary: true,
                };
                Ok(Some(std::sync::Arc::new(none)))
            }
        }
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nchannels_wins_over_nrings_and_ctas_clamp_both() {
        let max = |pairs: &[(&str, &str)]| NcclEnv::from_pairs(pairs.iter().copied()).unwrap();
        let e = max(&[("NCCL_MAX_NRINGS", "4"), ("NCCL_MAX_NCHANNELS", "8")]);
        assert_eq!(e.max_nchannels, 8);
        let e = max(&[("NCCL_MAX_NRINGS", "8"), ("NCCL_MAX_NCHANNELS", "4")]);
        assert_eq!(e.max_nchannels, 4);
        assert_eq!(max(&[("NCCL_MAX_NRINGS", "6")]).max_nchannels, 6);
        let e = max(&[("NCCL_MAX_CTAS", "4"), ("NCCL_MAX_NCHANNELS", "8")]);
        assert_eq!(e.max_nchannels, 4);
        let e = max(&[("NCCL_MIN_CTAS", "6"), ("NCCL_MIN_NRINGS", "2")]);
        assert_eq!(e.min_nchannels, 6);
    }

    #[test]
    fn parses_lists_like_nccl() {
        let env = NcclEnv::from_pairs([("NCCL_ALGO", "ring"), ("NCCL_PROTO", "^LL128")]).unwrap();
        assert_eq!(env.algos, vec![Algo::Ring]);
        assert_eq!(env.protos, vec![Proto::LL, Proto::Simple]);
        let env = NcclEnv::from_pairs([("NCCL_ALGO", "Tree;allreduce:Ring,NVLS")]).unwrap();
        assert_eq!(env.algos, vec![Algo::Ring, Algo::Nvls]);
        let env =
            NcclEnv::from_pairs([("NCCL_DEBUG", "INFO"), ("NCCL_BUFFSIZE", "8388608")]).unwrap();
        assert_eq!(env.ignored, vec!["NCCL_DEBUG"]);
        assert_eq!(env.buffsize, Bytes::from_mib(8));
    }

    #[test]
    fn thread_counts_and_collnet() {
        let env = NcclEnv::from_pairs([
            ("NCCL_NTHREADS", "256"),
            ("NCCL_LL128_NTHREADS", "320"),
            ("NCCL_COLLNET_ENABLE", "1"),
        ])
        .unwrap();
        assert_eq!(
            (env.nthreads, env.ll128_nthreads, env.collnet_enable),
            (Some(256), Some(320), true)
        );
        assert!(env.ignored.is_empty());
        assert!(NcclEnv::from_pairs([("NCCL_NTHREADS", "100")]).is_err());
        assert!(NcclEnv::from_pairs([("NCCL_LL128_NTHREADS", "64")]).is_err());
    }

    #[test]
    fn rejects_bad_values() {
        let e = NcclEnv::from_pairs([("NCCL_ALGO", "allreduce:tree;bogus:ring")]).unwrap_err();
        assert!(e.reason.contains("unknown collective `bogus`"), "{e}");
        let e = NcclEnv::from_pairs([("NCCL_ALGO", "allreduce:tree;allgather:Rong")]).unwrap_err();
        assert!(e.reason.contains("unknown value `Rong`"), "{e}");
        // Each collective takes its own section, else the first unprefixed one, else all.
        use crate::comm::Collective as C;
        let env = NcclEnv::from_pairs([("NCCL_ALGO", "ring;allgather:pat")]).unwrap();
        assert_eq!(env.algos_for(C::AllGather), vec![Algo::Pat]);
        assert_eq!(env.algos_for(C::AllReduce), vec![Algo::Ring]);
        let env = NcclEnv::from_pairs([("NCCL_ALGO", "allgather:ring")]).unwrap();
        assert_eq!(env.algos_for(C::AllReduce), Algo::ALL.to_vec());
        assert_eq!(env.algos_for(C::AllGather), vec![Algo::Ring]);
        let env = NcclEnv::from_pairs([("NCCL_PROTO", "allreduce:^LL")]).unwrap();
        assert_eq!(env.protos_for(C::ReduceScatter), Proto::ALL.to_vec());
        assert!(!env.protos_for(C::AllReduce).contains(&Proto::LL));
        let e = NcclEnv::from_pairs([("NCCL_ALGO", "Rong")]).unwrap_err();
        assert!(e.to_string().contains("unknown value `Rong`"), "{e}");
        assert!(NcclEnv::from_pairs([("NCCL_MAX_NCHANNELS", "0")]).is_err());
        assert!(NcclEnv::from_pairs([("NCCL_NVLS_ENABLE", "yes")]).is_err());
        assert!(
            NcclEnv::from_pairs([(
                "NCCL_ALGO",
                "^Ring,Tree,NVLS,NVLSTree,CollNetDirect,CollNetChain,PAT"
            )])
            .is_err()
        );
    }
}
