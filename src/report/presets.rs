//! `collsim presets`: the catalogue of shipped topology presets — GPU, NVLink, NICs, network and
//! price with its source and date — as a table or JSON.

use std::io::{self, Write};

use crate::hw::{FabricKind, NodeSpec, Routing};

/// One preset as the catalogue lists it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Entry {
    /// The preset's name.
    pub preset: String,
    /// The cloud instance type it models, if it is one (also accepted as its name).
    pub instance_type: Option<String>,
    /// The preset's own description.
    pub description: String,
    /// GPU model.
    pub gpu: String,
    /// GPUs per node.
    pub gpus: usize,
    /// Memory of one GPU, GiB.
    pub gpu_memory_gib: f64,
    /// NVLink of one GPU: "18x 20.6 GB/s, NVSwitch gen3, NVLS" (None: none).
    pub nvlink: Option<String>,
    /// Compute NICs: "8x 400 Gb/s infiniband-ndr" (None: none).
    pub nics: Option<String>,
    /// The network between nodes: "non-blocking, adaptive routing".
    pub network: String,
    /// USD per node-hour on demand (or amortised), if published.
    pub on_demand_usd_per_hour: Option<f64>,
    /// USD per node-hour on spot, if published.
    pub spot_usd_per_hour: Option<f64>,
    /// The cloud region the prices are for, where stated.
    pub price_region: Option<String>,
    /// Where the price comes from.
    pub price_source: Option<String>,
    /// When it was read.
    pub price_date: Option<String>,
}

impl Entry {
    /// The catalogue line of preset `name` (`instance_type`: the instance type it models).
    pub fn of(name: &str, instance_type: Option<&str>, n: &NodeSpec) -> Entry {
        let nvlink = n.nvlink.as_ref().map(|l| {
            let mut s = format!("{}x {}", l.links_per_gpu, l.bandwidth_per_link);
            if let Some(sw) = &n.nvswitch {
                s += &format!(", NVSwitch gen{}", sw.generation);
                if sw.nvls {
                    s += ", NVLS";
                }
            }
            s
        });
        // NICs in Gb/s, as their makers and clouds rate them.
        let nics = n.nic.as_ref().map(|c| {
            let gbit = c.speed.bits_per_sec() as f64 / 1e9;
            format!("{}x {gbit} Gb/s {}", c.count, c.transport.name)
        });
        let routing = match n.network.routing {
            Routing::Adaptive => "adaptive routing",
            Routing::Ecmp => "ECMP",
        };
        let fabric = match &n.network.fabric {
            FabricKind::NonBlocking => "non-blocking".to_string(),
            FabricKind::FatTree { tiers, radix, oversubscription } => {
                let o: f64 = oversubscription.iter().product();
                format!("fat tree, {tiers} tiers of {radix} ports, {o}:1")
            }
            FabricKind::Rail { radix, oversubscription } => {
                format!("rail-optimised, {radix}-port rail leaves, {oversubscription}:1")
            }
            FabricKind::Links { switches, .. } => {
                format!("{} switches, explicit links", switches.len())
            }
        };
        let sharp = if n.network.sharp { ", SHARP" } else { "" };
        Entry {
            preset: name.to_string(),
            instance_type: instance_type.map(String::from),
            description: n.description.clone(),
            gpu: n.gpu.model.name.clone(),
            gpus: n.gpu.count,
            gpu_memory_gib: n.gpu.model.memory.get() as f64 / (1u64 << 30) as f64,
            nvlink,
            nics,
            network: format!("{fabric}, {routing}{sharp}"),
            on_demand_usd_per_hour: n.price.as_ref().map(|p| p.on_demand_usd_per_hour),
            spot_usd_per_hour: n.price.as_ref().and_then(|p| p.spot_usd_per_hour),
            price_region: n.price.as_ref().and_then(|p| p.region.clone()),
            price_source: n.price.as_ref().map(|p| p.source.clone()),
            price_date: n.price.as_ref().map(|p| p.date.clone()),
        }
    }
}

/// The catalogue as a table, each column as wide as its widest cell, then each price's source.
pub fn table(entries: &[Entry], out: &mut dyn Write) -> io::Result<()> {
    let usd = |x: Option<f64>| x.map_or("-".to_string(), |x| format!("{x:.2}"));
    let head = [
        "preset",
        "instance type",
        "GPUs",
        "GiB",
        "NVLink a GPU",
        "NICs",
        "network",
        "$/h",
        "spot $/h",
        "region",
        "price date",
    ];
    let rows: Vec<[String; 11]> = entries
        .iter()
        .map(|e| {
            [
                e.preset.clone(),
                e.instance_type.clone().unwrap_or_else(|| "-".into()),
                format!("{}x {}", e.gpus, e.gpu),
                format!("{:.0}", e.gpu_memory_gib),
                e.nvlink.clone().unwrap_or_else(|| "none (PCIe)".into()),
                e.nics.clone().unwrap_or_else(|| "none".into()),
                e.network.clone(),
                usd(e.on_demand_usd_per_hour),
                usd(e.spot_usd_per_hour),
                e.price_region.clone().unwrap_or_else(|| "-".into()),
                e.price_date.clone().unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    let widths: Vec<usize> = (0..head.len())
        .map(|i| {
            rows.iter().map(|r| r[i].chars().count()).chain([head[i].len()]).max().unwrap_or(0)
        })
        .collect();
    // Numbers right-aligned, text left.
    let right = |i: usize| matches!(i, 3 | 7 | 8);
    let line = |cells: &[&str]| {
        let parts: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if right(i) {
                    format!("{c:>w$}", w = widths[i])
                } else {
                    format!("{c:<w$}", w = widths[i])
                }
            })
            .collect();
        parts.join("  ").trim_end().to_string()
    };
    writeln!(out, "{}", line(&head))?;
    for r in &rows {
        let cells: Vec<&str> = r.iter().map(String::as_str).collect();
        writeln!(out, "{}", line(&cells))?;
    }
    let mut sources: Vec<(String, Vec<&str>)> = Vec::new();
    for e in entries {
        if let Some(s) = &e.price_source {
            match sources.iter_mut().find(|(x, _)| x == s) {
                Some((_, names)) => names.push(&e.preset),
                None => sources.push((s.clone(), vec![&e.preset])),
            }
        }
    }
    if !sources.is_empty() {
        writeln!(out, "\nprices per node-hour, USD (a plan's [instance.\"NAME\"] replaces them):")?;
        for (s, names) in sources {
            writeln!(out, "  {}: {s}", names.join(", "))?;
        }
    }
    let unpriced: Vec<&str> = entries
        .iter()
        .filter(|e| e.on_demand_usd_per_hour.is_none())
        .map(|e| e.preset.as_str())
        .collect();
    if !unpriced.is_empty() {
        writeln!(
            out,
            "  no price (systems one buys; give a plan [instance.\"NAME\"] hourly): {}",
            unpriced.join(", ")
        )?;
    }
    Ok(())
}

/// The catalogue as one JSON document.
pub fn json(entries: &[Entry], out: &mut dyn Write) -> io::Result<()> {
    #[derive(serde::Serialize)]
    struct Doc<'a> {
        presets: &'a [Entry],
    }
    super::write_json(&Doc { presets: entries }, out)
}
