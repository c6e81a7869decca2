//! `collsim topo show`: a node as `nvidia-smi topo -m` prints it, NCCL's own path types and
//! bandwidths beside it, and a summary of the network for a number of nodes.

use std::io::{self, Write};

use crate::hw::{Cluster, FabricKind, GpuId, NicId, NodeSpec, Parent, PathType, Routing, Vertex};

/// One node and its network, ready to print.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TopoView {
    /// Topology name.
    pub name: String,
    /// Free text.
    pub description: String,
    /// Row and column labels: GPU0…, NIC0….
    pub labels: Vec<String>,
    /// `nvidia-smi topo -m` cells: X, NV#, PIX, PXB, PHB, NODE, SYS.
    pub matrix: Vec<Vec<String>>,
    /// NCCL's path type between the same devices.
    pub nccl_path_type: Vec<Vec<String>>,
    /// NCCL's path bandwidth (bottleneck), GB/s.
    pub nccl_path_bw_gbyte_per_s: Vec<Vec<f64>>,
    /// CPU affinity per GPU ("0-55,112-167", or "N/A").
    pub cpu_affinity: Vec<String>,
    /// NUMA domain per GPU.
    pub numa_affinity: Vec<usize>,
    /// NIC descriptions.
    pub nic_legend: Vec<String>,
    /// The network for `nodes` nodes.
    pub network: NetworkView,
}

/// A summary of the network between nodes.
#[derive(Debug, Clone, serde::Serialize)]
pub struct NetworkView {
    /// Nodes.
    pub nodes: usize,
    /// Kind ("non_blocking").
    pub kind: String,
    /// NICs per node.
    pub nics_per_node: usize,
    /// One NIC's line rate, Gb/s.
    pub nic_gbit_per_s: f64,
    /// Every NIC's bandwidth into the network, GB/s.
    pub injection_gbyte_per_s: f64,
    /// Bandwidth across the worst cut into two halves of the nodes, GB/s (one direction).
    pub bisection_gbyte_per_s: f64,
    /// Oversubscription of the network (1 = non-blocking).
    pub oversubscription: f64,
    /// NIC-to-NIC latency through the network.
    pub latency: String,
}

/// The chain of parents from a device up to (not including) its NUMA domain.
fn ancestors(spec: &NodeSpec, mut p: Parent) -> Vec<usize> {
    let mut out = Vec::new();
    while let Parent::Switch(s) = p {
        out.push(s);
        p = spec.pcie.switches[s].parent;
    }
    out
}

/// nvidia-smi's PCIe class between two devices hanging off `a` and `b`.
fn pcie_class(spec: &NodeSpec, a: Parent, b: Parent) -> &'static str {
    if spec.numa_of(a) != spec.numa_of(b) {
        return "SYS";
    }
    let (ua, ub) = (ancestors(spec, a), ancestors(spec, b));
    match ua.iter().position(|s| ub.contains(s)) {
        Some(i) => {
            let j = ub.iter().position(|s| *s == ua[i]).unwrap_or(0);
            // Switches crossed: a's up to the common one, the common one, b's below it.
            if i + j == 0 { "PIX" } else { "PXB" }
        }
        None if ua.is_empty() && ub.is_empty() => "PHB",
        None => "NODE",
    }
}

fn affinity(spec: &NodeSpec, numa: usize) -> String {
    let Some(c) = spec.cpu.cores_per_numa else { return "N/A".into() };
    let total = c * spec.cpu.numa_domains();
    (0..spec.cpu.threads_per_core)
        .map(|t| {
            let first = t * total + numa * c;
            format!("{}-{}", first, first + c - 1)
        })
        .collect::<Vec<_>>()
        .join(",")
}

impl TopoView {
    /// Builds the view of `cluster`'s node and network.
    pub fn new(cluster: &Cluster) -> TopoView {
        let spec = cluster.spec();
        let gpus = spec.gpu.count;
        let nics = spec.nic.as_ref().map_or(0, |n| n.count);
        let devices: Vec<Vertex> = (0..gpus)
            .map(|g| Vertex::Gpu(GpuId(g)))
            .chain((0..nics).map(|n| Vertex::Nic(NicId(n))))
            .collect();
        let parent = |v: Vertex| match v {
            Vertex::Gpu(GpuId(i)) => spec.gpu_parent[i],
            Vertex::Nic(NicId(i)) => spec.nic_parent[i],
            _ => Parent::Numa(0),
        };
        let labels: Vec<String> = devices
            .iter()
            .map(|v| match v {
                Vertex::Gpu(GpuId(i)) => format!("GPU{i}"),
                Vertex::Nic(NicId(i)) => format!("NIC{i}"),
                _ => String::new(),
            })
            .collect();
        let mut matrix = Vec::new();
        let mut types = Vec::new();
        let mut bws = Vec::new();
        for &a in &devices {
            let mut row = Vec::new();
            let mut trow = Vec::new();
            let mut brow = Vec::new();
            for &b in &devices {
                let cell = match (a, b) {
                    _ if a == b => " X ".to_string(),
                    (Vertex::Gpu(x), Vertex::Gpu(y)) if spec.nvlinks_between(x, y) > 0 => {
                        format!("NV{}", spec.nvlinks_between(x, y))
                    }
                    _ => pcie_class(spec, parent(a), parent(b)).to_string(),
                };
                row.push(cell);
                let r = cluster.graph().route(a, b);
                trow.push(r.map_or(PathType::Loc, |r| r.ty).name().to_string());
                brow.push(if a == b {
                    0.0
                } else {
                    r.map_or(0.0, |r| (r.bw.gbyte_per_s() * 1000.0).round() / 1000.0)
                });
            }
            matrix.push(row);
            types.push(trow);
            bws.push(brow);
        }
        let numa_affinity: Vec<usize> =
            (0..gpus).map(|g| cluster.numa_of(Vertex::Gpu(GpuId(g)))).collect();
        let nic_legend = (0..nics)
            .map(|i| {
                let n = spec.nic.as_ref().map(|n| {
                    format!("{} Gb/s {}", n.speed.bits_per_sec() / 1_000_000_000, n.transport.name)
                });
                format!("NIC{i}: {}", n.unwrap_or_default())
            })
            .collect();
        let nic = spec.nic.as_ref();
        let nic_gb = nic.map_or(0.0, |n| n.speed.gbyte_per_s());
        let nodes = cluster.nodes();
        let injection = nic_gb * nics as f64;
        let endpoints = nodes * nics;
        let (kind, oversub, one_leaf) = match &spec.network.fabric {
            FabricKind::NonBlocking => ("non_blocking".to_string(), 1.0, true),
            FabricKind::FatTree { tiers, radix, oversubscription } => {
                let o = oversubscription.first().copied().unwrap_or(1.0);
                let leaf = (*radix as f64 * o / (1.0 + o)).floor() as usize;
                (
                    format!("fat_tree, {tiers} tier(s) of {radix}-port switches"),
                    oversubscription.iter().product::<f64>(),
                    *tiers == 1 || endpoints <= leaf,
                )
            }
            FabricKind::Links { switches, links } => (
                format!(
                    "links, {} switches, {} switch-to-switch links",
                    switches.len(),
                    links.len()
                ),
                1.0,
                true,
            ),
            FabricKind::Rail { radix, oversubscription } => (
                format!("rail, {radix}-port rail switches and a spine"),
                *oversubscription,
                nodes <= radix / 2,
            ),
        };
        // Static ECMP is worth saying: the bisection is the ports', not what hashed flows get.
        let kind = match (&spec.network.fabric, spec.network.routing) {
            (FabricKind::FatTree { .. } | FabricKind::Rail { .. }, Routing::Ecmp) => {
                format!("{kind}, ECMP routing (each flow hashed onto one up-port)")
            }
            _ => kind,
        };
        let half = injection * (nodes / 2) as f64;
        let bisection = if one_leaf { half } else { half / oversub };
        TopoView {
            name: spec.name.clone(),
            description: spec.description.clone(),
            labels,
            matrix,
            nccl_path_type: types,
            nccl_path_bw_gbyte_per_s: bws,
            cpu_affinity: numa_affinity.iter().map(|&n| affinity(spec, n)).collect(),
            numa_affinity,
            nic_legend,
            network: NetworkView {
                nodes,
                kind,
                nics_per_node: nics,
                nic_gbit_per_s: nic.map_or(0.0, |n| n.speed.bits_per_sec() as f64 / 1e9),
                injection_gbyte_per_s: injection * nodes as f64,
                bisection_gbyte_per_s: bisection,
                oversubscription: oversub,
                latency: spec.network.latency.to_string(),
            },
        }
    }

    /// The text form: the nvidia-smi matrix, its legend, NCCL's view, the network.
    pub fn write_text(&self, out: &mut dyn Write) -> io::Result<()> {
        writeln!(out, "{}: {}", self.name, self.description)?;
        writeln!(out)?;
        let gpus = self.numa_affinity.len();
        write!(out, "\t{}", self.labels.join("\t"))?;
        writeln!(out, "\tCPU Affinity\tNUMA Affinity")?;
        for (i, row) in self.matrix.iter().enumerate() {
            write!(out, "{}\t{}", self.labels[i], row.join("\t"))?;
            if i < gpus {
                write!(out, "\t{}\t{}", self.cpu_affinity[i], self.numa_affinity[i])?;
            }
            writeln!(out)?;
        }
        writeln!(out)?;
        writeln!(out, "Legend:")?;
        writeln!(out)?;
        for line in [
            "  X    = Self",
            "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)",
            "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node",
            "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
            "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)",
            "  PIX  = Connection traversing at most a single PCIe bridge",
            "  NV#  = Connection traversing a bonded set of # NVLinks",
        ] {
            writeln!(out, "{line}")?;
        }
        if !self.nic_legend.is_empty() {
            writeln!(out)?;
            writeln!(out, "NIC Legend:")?;
            writeln!(out)?;
            for l in &self.nic_legend {
                writeln!(out, "  {l}")?;
            }
        }
        writeln!(out)?;
        writeln!(out, "NCCL's view (path type / bottleneck GB/s):")?;
        write!(out, "\t{}", self.labels.join("\t"))?;
        writeln!(out)?;
        for (i, row) in self.nccl_path_type.iter().enumerate() {
            let cells: Vec<String> = row
                .iter()
                .zip(&self.nccl_path_bw_gbyte_per_s[i])
                .enumerate()
                .map(|(j, (t, b))| if i == j { "-".into() } else { format!("{t}/{b}") })
                .collect();
            writeln!(out, "{}\t{}", self.labels[i], cells.join("\t"))?;
        }
        let n = &self.network;
        writeln!(out)?;
        writeln!(
            out,
            "Network: {} node(s), {}, {} NIC(s) per node x {} Gb/s; injection {:.1} GB/s, \
             bisection {:.1} GB/s, oversubscription {}:1, NIC to NIC {}",
            n.nodes,
            n.kind,
            n.nics_per_node,
            n.nic_gbit_per_s,
            n.injection_gbyte_per_s,
            n.bisection_gbyte_per_s,
            n.oversubscription,
            n.latency
        )
    }
}
