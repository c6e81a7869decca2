//! Typed indices of the hardware a simulation names: nodes of a cluster, and GPUs and NICs
//! within a node. It is not an allocator or a registry: an id is a plain index, checked by
//! nothing but the code that indexes with it.
//!
//! Each is a `Copy` newtype over the index with a public field, as [`LinkId`] is, so that a
//! node, a GPU and a NIC cannot be passed for one another. They hold a `usize`, not `LinkId`'s
//! `u32`: they index per-node and per-device tables (`gpu_parent[gpu.0]`), and few are stored,
//! whereas link ids fill every path. They serialize as the bare number (`#[serde(transparent)]`).
//!
//! Ranks and ring positions are not ids of hardware and stay `usize`; so do PCIe switch and
//! NUMA domain indices, which no API between layers passes around.
//!
//! [`LinkId`]: crate::net::LinkId

/// A node, by its index in the [`Cluster`](super::Cluster) it is used with.
///
/// One type serves both numberings a node has. A job's view of the machine
/// ([`Cluster::subset`](super::Cluster::subset)) numbers its own nodes from 0, in the job's
/// rank order; the machine numbers all of them. A `NodeId` is always relative to the cluster it
/// is passed to, so every caller outside `hw` holds only one numbering: a collective its job's,
/// a scenario's jobs and background traffic the machine's (and the machine is the cluster they
/// use). Only `hw` translates, with [`Cluster::machine_node`](super::Cluster::machine_node), to
/// find a node's links. A second type for machine nodes would add a conversion at every job
/// boundary (a job's nodes are the machine's, handed to the machine's `subset`) and catch no
/// mistake a caller can make; the names (`members`, `machine_node`) say which numbering is
/// meant where `hw` holds both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct NodeId(pub usize);

/// A GPU, by its index within its node (as `nvidia-smi` and NCCL number them: GPU0, GPU1, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct GpuId(pub usize);

/// A compute NIC, by its index within its node (NIC `i` of every node is on rail `i`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct NicId(pub usize);
