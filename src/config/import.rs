//! `collsim topo import`: a real node's topology, from NCCL's XML dump (`NCCL_TOPO_DUMP_FILE`)
//! or from `nvidia-smi topo -m`, written as a topology TOML to edit (`reference/ecosystem.md`
//! §3.2–3.3).
//!
//! What the source does not say (PCIe generation from nvidia-smi, NIC speeds, the GPU's exact
//! model) is filled with a default and a comment saying so.

use std::collections::BTreeMap;

use super::ConfigError;

/// A node as an import finds it.
#[derive(Debug, Clone, Default, PartialEq)]
struct Found {
    name: String,
    vendor: String,
    inter_socket_gbps: f64,
    numas: usize,
    /// (id, parent) where parent is "numaN" or another switch id.
    switches: Vec<(String, String)>,
    /// (parent, sm).
    gpus: Vec<(String, u32)>,
    /// (parent, name, speed in Mb/s, if known).
    nics: Vec<(String, String, Option<u64>)>,
    nvswitch_links: Option<u32>,
    pairs: Vec<(usize, usize, u32)>,
    pcie_generation: Option<u32>,
    pcie_lanes: Option<u32>,
    notes: Vec<String>,
    /// Where each value came from in the user's file, parallel to the lists above, or for the
    /// one value it names: the place an error in the imported topology points to.
    at: Origins,
}

/// A 1-based line and column of the user's file.
type Origin = Option<(usize, usize)>;

/// Where the values of a [`Found`] came from.
#[derive(Debug, Clone, Default, PartialEq)]
struct Origins {
    gpus: Vec<Origin>,
    nics: Vec<Origin>,
    switches: Vec<Origin>,
    pairs: Vec<Origin>,
    nvswitch: Origin,
    /// The element that set the PCIe generation, and the lanes.
    generation: Origin,
    lanes: Origin,
    /// The CPU that set the vendor, the one that set the inter-socket bandwidth, the last one.
    vendor: Origin,
    inter_socket: Origin,
    last_cpu: Origin,
}

/// A topology TOML made from the user's file, with the place in that file each of its lines
/// came from (where one did).
#[derive(Debug, Clone)]
pub struct Imported {
    /// The topology TOML.
    pub toml: String,
    origins: Vec<Origin>,
}

impl Imported {
    /// The line and column of the user's file that TOML line `line` (1-based) came from.
    pub fn origin(&self, line: usize) -> Option<(usize, usize)> {
        self.origins.get(line.checked_sub(1)?).copied().flatten()
    }
}

/// Where `node`'s attribute `attr` starts (the element where it has none).
fn xml_at(node: roxmltree::Node<'_, '_>, attr: &str) -> Origin {
    let start = node.attribute_node(attr).map_or(node.range(), |a| a.range()).start;
    let p = node.document().text_pos_at(start);
    Some((p.row as usize, p.col as usize))
}

fn err(file: &str, msg: impl Into<String>) -> ConfigError {
    ConfigError::File { file: file.to_string(), msg: msg.into() }
}

/// An error at a place in the user's file (its start where the place is not known).
fn err_at(file: &str, at: Origin, msg: impl Into<String>) -> ConfigError {
    let (line, col) = at.unwrap_or((1, 1));
    ConfigError::At { file: file.to_string(), line, col, msg: msg.into() }
}

/// The fastest PCIe lane rate, GT/s: PCIe 7.0's 128.
const MAX_GTS: f64 = 128.0;

/// PCIe generation from NCCL's `link_speed` ("32.0 GT/s PCIe").
fn generation(speed: &str) -> Option<u32> {
    let gts: f64 = speed.split_whitespace().next()?.parse().ok()?;
    Some(match gts {
        x if x >= 60.0 => 6,
        x if x >= 30.0 => 5,
        x if x >= 15.0 => 4,
        x if x >= 7.0 => 3,
        x if x >= 4.0 => 2,
        _ => 1,
    })
}

/// NCCL's inter-socket bandwidth for a CPU (`topo.cc`): Intel by model, AMD 16 GB/s.
fn inter_socket(vendor: &str, family: u32, model: u32) -> f64 {
    match vendor {
        "GenuineIntel" if family == 6 && model >= 0xCF => 40.0,
        "GenuineIntel" if family == 6 && model >= 0x8F => 22.0,
        "GenuineIntel" if family == 6 && model >= 0x55 => 10.0,
        "GenuineIntel" => 6.0,
        "AuthenticAMD" => 16.0,
        _ => 6.0,
    }
}

fn parse_u32(s: Option<&str>) -> Option<u32> {
    let s = s?.trim();
    match s.strip_prefix("0x") {
        Some(h) => u32::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// A numeric attribute of `node`: `None` where it is absent, an error naming the element, the
/// attribute and its place where it is there but not a number (NCCL writes decimal or 0x hex).
fn number_attr(
    file: &str,
    node: roxmltree::Node<'_, '_>,
    attr: &str,
) -> Result<Option<u32>, ConfigError> {
    let Some(v) = node.attribute(attr) else { return Ok(None) };
    parse_u32(Some(v)).map(Some).ok_or_else(|| {
        let p = node
            .document()
            .text_pos_at(node.attribute_node(attr).map_or(node.range(), |a| a.range()).start);
        ConfigError::At {
            file: file.into(),
            line: p.row as usize,
            col: p.col as usize,
            msg: format!("<{}> {attr}={v:?}: not a number", node.tag_name().name()),
        }
    })
}

/// An `<nvlink>`'s `count`: 1 when absent; over [`MAX_LINKS`] is no GPU's and an error (sums of
/// such counts would overflow).
fn link_count(file: &str, node: roxmltree::Node<'_, '_>) -> Result<u32, ConfigError> {
    let n = number_attr(file, node, "count")?.unwrap_or(1);
    if n > MAX_LINKS {
        let p = node.document().text_pos_at(node.range().start);
        return Err(ConfigError::At {
            file: file.into(),
            line: p.row as usize,
            col: p.col as usize,
            msg: format!(
                "<nvlink> count=\"{n}\": more NVLinks than any GPU has (at most {MAX_LINKS})"
            ),
        });
    }
    Ok(n)
}

/// The most NVLinks a GPU is taken to have (18 on Hopper and Blackwell), with room to spare.
const MAX_LINKS: u32 = 64;

/// Reads an NCCL topology XML dump.
fn from_nccl_xml(file: &str, text: &str) -> Result<Found, ConfigError> {
    let doc = roxmltree::Document::parse(text).map_err(|e| match e {
        // roxmltree places these at 1:1; they happen where the text stops.
        roxmltree::Error::UnclosedRootNode | roxmltree::Error::UnexpectedEndOfStream => {
            let line = text.lines().count().max(1);
            let col = text.lines().last().map_or(0, |l| l.chars().count()) + 1;
            ConfigError::At {
                file: file.into(),
                line,
                col,
                msg: format!("the XML stops before it is complete (a cut-off file?): {e}"),
            }
        }
        _ => {
            let p = e.pos();
            ConfigError::At {
                file: file.into(),
                line: p.row as usize,
                col: p.col as usize,
                msg: e.to_string(),
            }
        }
    })?;
    let root = doc.root_element();
    if root.tag_name().name() != "system" {
        return Err(err(
            file,
            format!(
                "expected a <system> root (NCCL_TOPO_DUMP_FILE format), found <{}>",
                root.tag_name().name()
            ),
        ));
    }
    let mut f = Found { name: "imported".into(), ..Found::default() };
    let mut gpu_bus: BTreeMap<String, usize> = BTreeMap::new();
    let mut nvlinks: Vec<NvlinkFound> = Vec::new();
    for cpu in root.children().filter(|n| n.has_tag_name("cpu")) {
        let numa = f.numas;
        f.numas += 1;
        if let Some(v) = cpu.attribute("numaid").filter(|v| v.trim().parse::<i64>().is_err()) {
            return Err(err_at(
                file,
                xml_at(cpu, "numaid"),
                format!(
                    "<cpu> numaid={v:?}: not a number (NCCL writes the node's NUMA id, -1 where there is none)"
                ),
            ));
        }
        if cpu.attribute("numaid") == Some("-1") {
            f.notes.push(format!("a <cpu> has numaid=\"-1\" (a VM); it becomes numa{numa}"));
        }
        let vendor = cpu.attribute("vendor").unwrap_or("").to_string();
        let bw = inter_socket(
            &vendor,
            number_attr(file, cpu, "familyid")?.unwrap_or(0),
            number_attr(file, cpu, "modelid")?.unwrap_or(0),
        );
        if bw > f.inter_socket_gbps {
            f.inter_socket_gbps = bw;
            f.at.inter_socket = xml_at(cpu, "modelid");
        }
        if f.vendor.is_empty() {
            f.vendor = vendor;
            f.at.vendor = xml_at(cpu, "vendor");
        }
        f.at.last_cpu = xml_at(cpu, "numaid");
        walk(file, &mut f, cpu, &format!("numa{numa}"), &mut gpu_bus, &mut nvlinks)?;
    }
    if f.numas == 0 {
        return Err(err(file, "no <cpu> element: nothing to import"));
    }
    // GPU-to-GPU links as each end lists them: NCCL's dump lists every link from both ends.
    let mut gpu_links: BTreeMap<(usize, usize), (u32, Origin)> = BTreeMap::new();
    // NVLinks into NVSwitches, per GPU: the topology gives every GPU GPU 0's.
    let mut switch_links: BTreeMap<usize, (u32, Origin)> = BTreeMap::new();
    for (gpu, target, count, tclass, at) in nvlinks {
        if tclass == 0x068000 {
            *f.nvswitch_links.get_or_insert(0) += if gpu == 0 { count } else { 0 };
            let e = switch_links.entry(gpu).or_insert((0, at));
            e.0 += count;
            f.at.nvswitch = f.at.nvswitch.or(at);
        } else if let Some(&peer) = gpu_bus.get(&target.to_ascii_lowercase()) {
            let e = gpu_links.entry((gpu, peer)).or_insert((0, at));
            e.0 += count;
        } else {
            f.notes.push(format!(
                "GPU {gpu}: NVLink to unknown target {target:?} (a VM's placeholder?) ignored"
            ));
        }
    }
    let first = switch_links.get(&0).map_or(0, |l| l.0);
    if let Some((gpu, &(n, at))) = switch_links.iter().find(|(_, l)| l.0 != first) {
        return Err(err_at(
            file,
            at,
            format!(
                "GPU {gpu} has {n} NVLinks into NVSwitches where GPU 0 has {first}: collsim's node gives every GPU the same (a link down? edit the counts to what the GPUs should have)"
            ),
        ));
    }
    for (&(gpu, peer), &(count, at)) in &gpu_links {
        let back = gpu_links.get(&(peer, gpu)).map_or(0, |b| b.0);
        if back != count {
            return Err(err_at(
                file,
                at,
                format!(
                    "GPU {gpu} lists {count} NVLinks to GPU {peer}, which lists {back} back (an NVLink joins both ends: fix one side)"
                ),
            ));
        }
        if gpu < peer {
            f.pairs.push((gpu, peer, count));
            f.at.pairs.push(at);
        }
    }
    Ok(f)
}

/// An `<nvlink>` as the walk finds it: its GPU, target bus id, link count, target class and
/// place.
type NvlinkFound = (usize, String, u32, u32, Origin);

fn walk(
    file: &str,
    f: &mut Found,
    node: roxmltree::Node<'_, '_>,
    parent: &str,
    gpu_bus: &mut BTreeMap<String, usize>,
    nvlinks: &mut Vec<NvlinkFound>,
) -> Result<(), ConfigError> {
    for child in node.children().filter(|n| n.is_element()) {
        match child.tag_name().name() {
            "pci" => {
                let class = number_attr(file, child, "class")?.unwrap_or(0);
                let busid = child.attribute("busid").unwrap_or("").to_ascii_lowercase();
                let speed = child.attribute("link_speed");
                // NCCL writes sysfs's text ("32.0 GT/s PCIe"), "Unknown" where sysfs has none.
                // NCCL writes "" where it reads no speed (`src/graph/xml.cc`).
                if let Some(v) = speed.filter(|v| {
                    generation(v).is_none()
                        && !v.trim().is_empty()
                        && !v.trim().to_ascii_lowercase().starts_with("unknown")
                        || v.split_whitespace()
                            .next()
                            .and_then(|x| x.parse::<f64>().ok())
                            .is_some_and(|x| !(0.0..=MAX_GTS).contains(&x))
                }) {
                    return Err(err_at(
                        file,
                        xml_at(child, "link_speed"),
                        format!(
                            "<pci> link_speed={v:?}: not a PCIe speed (\"32.0 GT/s PCIe\", at most {MAX_GTS} GT/s)"
                        ),
                    ));
                }
                if let Some(g) = speed.and_then(generation)
                    && f.pcie_generation.is_none_or(|x| g > x)
                {
                    f.pcie_generation = Some(g);
                    f.at.generation = xml_at(child, "link_speed");
                }
                if let Some(w) = number_attr(file, child, "link_width")? {
                    let w = if w == 0 { 16 } else { w };
                    if f.pcie_lanes.is_none_or(|x| w > x) {
                        f.pcie_lanes = Some(w);
                        f.at.lanes = xml_at(child, "link_width");
                    }
                }
                if class >> 8 == 0x0604 {
                    let id = format!("sw{}", f.switches.len());
                    f.switches.push((id.clone(), parent.to_string()));
                    f.at.switches.push(xml_at(child, "busid"));
                    walk(file, f, child, &id, gpu_bus, nvlinks)?;
                } else {
                    walk(file, f, child, parent, gpu_bus, nvlinks)?;
                    if let Some(gpu) = child.children().find(|n| n.has_tag_name("gpu")) {
                        let index = f.gpus.len();
                        let place = |node: roxmltree::Node<'_, '_>, attr: &str, msg: String| {
                            err_at(file, xml_at(node, attr), msg)
                        };
                        if gpu_bus.insert(busid.clone(), index).is_some() {
                            return Err(place(
                                child,
                                "busid",
                                format!("a second GPU at PCI bus id {busid:?}"),
                            ));
                        }
                        let sm = match number_attr(file, gpu, "sm")? {
                            Some(0) => {
                                return Err(place(
                                    gpu,
                                    "sm",
                                    "<gpu> sm=\"0\": no compute capability".into(),
                                ));
                            }
                            Some(sm) => sm,
                            None => {
                                f.notes
                                    .push(format!("GPU {index}: no sm attribute: taken as sm80"));
                                80
                            }
                        };
                        f.gpus.push((parent.to_string(), sm));
                        f.at.gpus.push(xml_at(gpu, "sm"));
                        for l in gpu.children().filter(|n| n.has_tag_name("nvlink")) {
                            nvlinks.push((
                                index,
                                l.attribute("target").unwrap_or("").to_string(),
                                link_count(file, l)?,
                                number_attr(file, l, "tclass")?.unwrap_or(0),
                                xml_at(l, "count"),
                            ));
                        }
                    }
                }
            }
            "nic" => {
                for net in child.children().filter(|n| n.has_tag_name("net")) {
                    let name = net.attribute("name").unwrap_or("nic").to_string();
                    let speed = match net.attribute("speed") {
                        Some(_) => Some(u64::from(number_attr(file, net, "speed")?.unwrap_or(0))),
                        None => None,
                    };
                    f.nics.push((parent.to_string(), name, speed));
                    f.at.nics.push(xml_at(net, "speed"));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Reads `nvidia-smi topo -m` output.
fn from_nvidia_smi(file: &str, text: &str) -> Result<Found, ConfigError> {
    // Drop terminal escapes (the header is underlined) and stop at the legend.
    let clean: String = {
        let mut out = String::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            if c == '\u{1b}' {
                for d in chars.by_ref() {
                    if d.is_ascii_alphabetic() {
                        break;
                    }
                }
            } else {
                out.push(c);
            }
        }
        out
    };
    let lines: Vec<&str> =
        clean.lines().take_while(|l| !l.trim_start().starts_with("Legend")).collect();
    let split = |l: &str| -> Vec<String> {
        if l.contains('\t') {
            l.split('\t').map(|c| c.trim().to_string()).collect()
        } else {
            let l = l
                .replace("CPU Affinity", "CPU_Affinity")
                .replace("NUMA Affinity", "NUMA_Affinity")
                .replace("GPU NUMA ID", "GPU_NUMA_ID");
            let mut v: Vec<String> = l.split_whitespace().map(str::to_string).collect();
            // The header has an empty first cell; rows start with their label.
            if v.first().is_some_and(|c| c.starts_with("GPU0"))
                && l.starts_with(char::is_whitespace)
            {
                v.insert(0, String::new());
            }
            v
        }
    };
    let header_at = lines
        .iter()
        .position(|l| l.contains("GPU0"))
        .ok_or_else(|| err(file, "no header line with GPU0: not `nvidia-smi topo -m` output"))?;
    let header = split(lines[header_at]);
    let labels: Vec<String> = header
        .iter()
        .skip(1)
        .take_while(|h| !h.is_empty() && !h.contains("Affinity") && !h.contains("NUMA"))
        .cloned()
        .collect();
    let numa_col = header.iter().position(|h| h.replace('_', " ") == "NUMA Affinity");
    let mut rows: BTreeMap<String, Vec<String>> = BTreeMap::new();
    // Each row's line in the file (1-based; escapes removed keep the lines where they were).
    let mut row_at: BTreeMap<String, Origin> = BTreeMap::new();
    let at_line =
        |line: usize, msg: String| ConfigError::At { file: file.into(), line, col: 1, msg };
    if let Some(dup) = labels.iter().enumerate().find(|(i, l)| labels[..*i].contains(l)) {
        return Err(at_line(header_at + 1, format!("the header names {} twice", dup.1)));
    }
    for (i, l) in lines.iter().enumerate().skip(header_at + 1) {
        let cells = split(l);
        let Some(label) = cells.first().filter(|c| !c.is_empty()) else { continue };
        if labels.contains(label) {
            if rows.contains_key(label) {
                return Err(at_line(i + 1, format!("a second row for {label}")));
            }
            // One cell for each device of the header, each a path nvidia-smi names.
            if cells.len() < labels.len() + 1 {
                return Err(at_line(
                    i + 1,
                    format!(
                        "the {label} row has {} cells where the header names {} devices (a row cut off?)",
                        cells.len() - 1,
                        labels.len()
                    ),
                ));
            }
            for (j, c) in cells[1..=labels.len()].iter().enumerate() {
                let known =
                    matches!(c.as_str(), "X" | "SYS" | "SOC" | "NODE" | "PHB" | "PXB" | "PIX")
                        || c.strip_prefix("NV").is_some_and(|k| !k.is_empty());
                if !known {
                    return Err(at_line(
                        i + 1,
                        format!(
                            "{label} row, {} column: {c:?} is none of nvidia-smi's paths (X, SYS, NODE, PHB, PXB, PIX, NV<links>)",
                            labels[j]
                        ),
                    ));
                }
            }
            // A GPU's NUMA node: a number, or N/A where the machine reports none.
            if let Some(v) =
                numa_col.and_then(|c| cells.get(c)).filter(|_| label.starts_with("GPU"))
            {
                let max = super::topology::MAX_SOCKETS as usize;
                if v != "N/A" && !v.parse::<usize>().is_ok_and(|n| n < max) {
                    return Err(at_line(
                        i + 1,
                        format!(
                            "{label} row, NUMA Affinity: {v:?} is not one NUMA node (a number below {max}, or N/A)"
                        ),
                    ));
                }
            }
            row_at.insert(label.clone(), Some((i + 1, 1)));
            rows.insert(label.clone(), cells);
        }
    }
    if let Some(missing) = labels.iter().find(|l| !rows.contains_key(*l)) {
        return Err(at_line(header_at + 1, format!("the header names {missing}, but no row does")));
    }
    let at = |label: &str| row_at.get(label).copied().flatten();
    let gpus: Vec<&String> = labels.iter().filter(|l| l.starts_with("GPU")).collect();
    let nics: Vec<&String> = labels.iter().filter(|l| !l.starts_with("GPU")).collect();
    if gpus.is_empty() {
        return Err(err(file, "no GPU rows found"));
    }
    let legend: BTreeMap<String, String> = clean
        .lines()
        .filter_map(|l| {
            l.trim().split_once(": ").map(|(a, b)| (a.trim().to_string(), b.trim().to_string()))
        })
        .filter(|(a, _)| a.starts_with("NIC"))
        .collect();
    let cell = |a: &str, b: &str| -> String {
        let j = labels.iter().position(|l| l == b).map_or(0, |j| j + 1);
        rows.get(a).and_then(|r| r.get(j)).cloned().unwrap_or_default()
    };
    let mut f = Found { name: "imported".into(), ..Found::default() };
    // NUMA of each GPU from its row; NICs take the NUMA of a GPU they are not SYS from.
    let gpu_numa: Vec<usize> = gpus
        .iter()
        .map(|g| {
            numa_col
                .and_then(|c| rows.get(*g).and_then(|r| r.get(c)))
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(0)
        })
        .collect();
    f.numas = gpu_numa.iter().max().map_or(1, |m| m + 1);
    if numa_col.is_none()
        || rows
            .get(gpus[0])
            .and_then(|r| numa_col.and_then(|c| r.get(c)))
            .is_none_or(|v| v == "N/A")
    {
        f.notes.push("no NUMA affinity given: every GPU placed on numa0".into());
    }
    let devices: Vec<&String> = gpus.iter().chain(nics.iter()).copied().collect();
    let numa_of = |d: &String| -> usize {
        if let Some(i) = gpus.iter().position(|g| *g == d) {
            return gpu_numa[i];
        }
        gpus.iter()
            .position(|g| cell(d, g) != "SYS" && !cell(d, g).is_empty())
            .map_or(0, |i| gpu_numa[i])
    };
    // PIX neighbours share a leaf switch; PXB neighbours share a switch above the leaves.
    let mut leaf: Vec<Option<usize>> = vec![None; devices.len()];
    let mut leaves = 0;
    for i in 0..devices.len() {
        if leaf[i].is_some() {
            continue;
        }
        let group: Vec<usize> = (0..devices.len())
            .filter(|&j| j == i || cell(devices[i], devices[j]) == "PIX")
            .collect();
        if group.len() > 1 {
            for j in group {
                leaf[j].get_or_insert(leaves);
            }
            leaves += 1;
        }
    }
    // Devices joined by PXB (directly or through PIX neighbours) share a top switch.
    let mut comp: Vec<usize> = (0..devices.len()).collect();
    fn find(c: &mut [usize], x: usize) -> usize {
        let mut r = x;
        while c[r] != r {
            r = c[r];
        }
        c[x] = r;
        r
    }
    for i in 0..devices.len() {
        for j in 0..devices.len() {
            if matches!(cell(devices[i], devices[j]).as_str(), "PXB" | "PIX") {
                let (a, b) = (find(&mut comp, i), find(&mut comp, j));
                comp[a] = b;
            }
        }
    }
    let has_pxb = |i: usize, c: &mut [usize]| {
        let r = find(c, i);
        (0..devices.len()).any(|x| {
            find(c, x) == r && (0..devices.len()).any(|y| cell(devices[x], devices[y]) == "PXB")
        })
    };
    let mut parent_of: Vec<String> = vec![String::new(); devices.len()];
    let mut tops: BTreeMap<usize, String> = BTreeMap::new();
    for i in 0..devices.len() {
        let numa = numa_of(devices[i]);
        let leaf_id = leaf[i].map(|l| format!("sw{l}"));
        if !has_pxb(i, &mut comp) {
            parent_of[i] = match leaf_id {
                Some(id) => {
                    if !f.switches.iter().any(|(s, _)| *s == id) {
                        f.switches.push((id.clone(), format!("numa{numa}")));
                        f.at.switches.push(at(devices[i]));
                    }
                    id
                }
                None => format!("numa{numa}"),
            };
            continue;
        }
        let root = find(&mut comp, i);
        let top = tops
            .entry(root)
            .or_insert_with(|| {
                let t = format!("top{root}");
                f.switches.push((t.clone(), format!("numa{numa}")));
                f.at.switches.push(at(devices[i]));
                t
            })
            .clone();
        let id = leaf_id.unwrap_or_else(|| format!("dev{i}"));
        if !f.switches.iter().any(|(s, _)| *s == id) {
            f.switches.push((id.clone(), top));
            f.at.switches.push(at(devices[i]));
        }
        parent_of[i] = id;
    }
    for (i, g) in gpus.iter().enumerate() {
        f.gpus.push((parent_of[i].clone(), 0));
        f.at.gpus.push(at(g));
    }
    for (k, n) in nics.iter().enumerate() {
        let name = legend.get(*n).cloned().unwrap_or_else(|| n.to_string());
        f.nics.push((parent_of[gpus.len() + k].clone(), name, None));
        f.at.nics.push(at(n));
    }
    // NVLink: all pairs NV<k> alike and more than two GPUs means an NVSwitch.
    let mut counts = BTreeMap::new();
    for a in 0..gpus.len() {
        for b in a + 1..gpus.len() {
            let c = cell(gpus[a], gpus[b]);
            if let Some(k) = c.strip_prefix("NV") {
                match k.parse::<u32>() {
                    Ok(k) if k > 0 && k <= MAX_LINKS => counts.insert((a, b), k),
                    _ => {
                        return Err(err(
                            file,
                            format!(
                                "{} row, {} column: {c:?} is not NV<links> (NV1 … NV18)",
                                gpus[a], gpus[b]
                            ),
                        ));
                    }
                };
            }
        }
    }
    let all_pairs = gpus.len() * (gpus.len() - 1) / 2;
    let uniform = counts.values().collect::<std::collections::BTreeSet<_>>().len() == 1;
    if gpus.len() > 2 && counts.len() == all_pairs && uniform {
        f.nvswitch_links = counts.values().next().copied();
        f.at.nvswitch = at(gpus[0]);
    } else {
        f.pairs = counts.iter().map(|(&(a, b), &k)| (a, b, k)).collect();
        f.at.pairs = counts.keys().map(|&(a, _)| at(gpus[a])).collect();
    }
    f.notes.push(
        "nvidia-smi gives no PCIe generation, NIC speed or GPU model: defaults below, edit them"
            .into(),
    );
    Ok(f)
}

fn gpu_model(sm: u32, nvswitch: bool) -> Option<&'static str> {
    match (sm, nvswitch) {
        (0, true) => Some("H100-SXM5-80GB"),
        (0, false) => Some("H100-PCIe-80GB"),
        (90, true) => Some("H100-SXM5-80GB"),
        (90, false) => Some("H100-PCIe-80GB"),
        (80, true) => Some("A100-SXM4-80GB"),
        (80, false) => Some("A100-PCIe-80GB"),
        _ => None,
    }
}

/// Lines of TOML, each with the place in the user's file it came from.
#[derive(Default)]
struct Lines {
    text: String,
    origins: Vec<Origin>,
}

impl Lines {
    /// Appends `text` (one or more lines), every line from `origin`.
    fn put(&mut self, origin: Origin, text: impl AsRef<str>) {
        for line in text.as_ref().split('\n') {
            self.text.push_str(line);
            self.text.push('\n');
            self.origins.push(origin);
        }
    }
}

/// `text` for a TOML comment or a description: control characters (a newline would end a
/// comment) and bidirectional controls escaped.
fn comment(text: &str) -> String {
    text.chars()
        .map(|c| if super::unprintable(c) { c.escape_unicode().to_string() } else { c.to_string() })
        .collect()
}

/// `text` as a TOML basic string, quoted and escaped.
fn quoted(text: &str) -> String {
    toml::Value::String(text.to_string()).to_string()
}

fn to_toml(f: &Found, source: &str) -> Imported {
    let mut s = Lines::default();
    let at = &f.at;
    s.put(
        None,
        format!(
            "# Imported by `collsim topo import` from {}. Check every value marked EDIT.",
            comment(source)
        ),
    );
    for n in &f.notes {
        s.put(None, format!("# Note: {}", comment(n)));
    }
    s.put(None, format!("name = {}", quoted(&f.name)));
    s.put(
        None,
        format!("description = {}\n", quoted(&format!("imported from {}", comment(source)))),
    );
    let first_sm = f.gpus.iter().position(|g| g.1 > 0);
    let sm_at = first_sm.map_or(at.gpus.first().copied().flatten(), |i| at.gpus[i]);
    let sm = first_sm.map(|i| f.gpus[i].1).or(Some(0));
    let model = sm.and_then(|sm| gpu_model(sm, f.nvswitch_links.is_some()));
    let generation = f.pcie_generation.unwrap_or(4).clamp(1, 6);
    let lanes = f.pcie_lanes.unwrap_or(16);
    match (model, sm) {
        (Some(m), _) => {
            s.put(None, "[gpu]\n# EDIT: guessed from the compute capability and NVLink; any model of topologies/gpus.toml");
            s.put(sm_at, format!("model = \"{m}\""));
        }
        (None, sm) => {
            let sm = sm.unwrap_or(80);
            s.put(None, format!("[gpu_model.\"sm{sm}\"]\n# EDIT: name and memory of this GPU"));
            s.put(sm_at, format!("sm = {sm}"));
            s.put(None, "memory = \"80 GiB\"");
            s.put(
                at.generation.or(at.lanes),
                format!("pcie = {{ generation = {generation}, lanes = {lanes} }}"),
            );
            s.put(None, format!("\n[gpu]\nmodel = \"sm{sm}\""));
        }
    }
    s.put(at.gpus.last().copied().flatten(), format!("count = {}", f.gpus.len()));
    let attach: Vec<String> = f.gpus.iter().map(|g| format!("\"{}\"", g.0)).collect();
    s.put(None, format!("attach = [{}]\n", attach.join(", ")));
    if let Some(k) = f.nvswitch_links {
        s.put(None, "[nvlink]");
        s.put(at.nvswitch, format!("links_per_gpu = {k}"));
        s.put(None, "latency = \"0.2 us\"\n");
        let nvls = sm.is_some_and(|sm| sm >= 90) || (sm == Some(0) && k >= 18);
        s.put(
            None,
            format!(
                "[nvswitch]\n# EDIT: count and generation are not in the source\ncount = 4\ngeneration = {}\nnvls = {nvls}\n",
                if nvls { 3 } else { 2 }
            ),
        );
    } else if !f.pairs.is_empty() {
        let links =
            |g: usize| f.pairs.iter().filter(|p| p.0 == g || p.1 == g).map(|p| p.2).sum::<u32>();
        // The GPU with the most links, and the first of its pairs in the file.
        let busiest = (0..f.gpus.len()).max_by_key(|&g| (links(g), std::cmp::Reverse(g)));
        let per_gpu = busiest.map_or(1, links);
        let busiest_at = busiest
            .and_then(|g| f.pairs.iter().position(|p| p.0 == g || p.1 == g))
            .and_then(|i| at.pairs.get(i).copied().flatten());
        s.put(None, "[nvlink]");
        s.put(busiest_at, format!("links_per_gpu = {per_gpu}"));
        s.put(None, "latency = \"0.2 us\"");
        let pairs: Vec<String> = f
            .pairs
            .iter()
            .map(|(a, b, k)| format!("{{ gpus = [{a}, {b}], links = {k} }}"))
            .collect();
        s.put(at.pairs.first().copied().flatten(), format!("pair = [{}]\n", pairs.join(", ")));
    }
    s.put(None, "[pcie]");
    if f.pcie_generation.is_none() {
        s.put(None, "# EDIT: generation and lanes are not in the source");
    }
    s.put(at.generation, format!("generation = {generation}"));
    s.put(at.lanes, format!("lanes = {lanes}"));
    s.put(None, "latency = \"0.1 us\"");
    for (k, (id, parent)) in f.switches.iter().enumerate() {
        let origin = at.switches.get(k).copied().flatten();
        s.put(origin, format!("[[pcie.switch]]\nid = \"{id}\"\nparent = \"{parent}\""));
    }
    let vendor = match f.vendor.as_str() {
        "GenuineIntel" => "intel",
        "AuthenticAMD" => "amd",
        "" => "intel",
        _ => "other",
    };
    s.put(None, "\n[cpu]");
    if f.vendor.is_empty() {
        s.put(None, "# EDIT: vendor and inter-socket bandwidth are not in the source");
    }
    let bw = if f.inter_socket_gbps > 0.0 { f.inter_socket_gbps } else { 22.0 };
    s.put(at.last_cpu, format!("sockets = {}", f.numas.max(1)));
    s.put(at.vendor, format!("vendor = \"{vendor}\""));
    s.put(at.inter_socket, format!("inter_socket = \"{bw} GB/s\""));
    if !f.nics.is_empty() {
        // One speed for every NIC: the slowest, where they differ (a ring runs at its slowest).
        let slowest =
            (0..f.nics.len()).filter(|&i| f.nics[i].2.is_some()).min_by_key(|&i| f.nics[i].2);
        let speed = slowest.and_then(|i| f.nics[i].2);
        // NCCL gives Mb/s: write it in Gb/s where it is whole gigabits, else in Mb/s (a
        // 100 Mb/s port is not 1 Gb/s).
        let mbps = speed.unwrap_or(400_000);
        let gbps = mbps / 1000;
        let speed_text =
            if mbps % 1000 == 0 { format!("{gbps} Gb/s") } else { format!("{mbps} Mb/s") };
        let names: Vec<&str> = f.nics.iter().map(|n| n.1.as_str()).collect();
        let transport = match names.first().copied().unwrap_or("") {
            n if n.starts_with("mlx5") && gbps >= 400 => "infiniband-ndr",
            n if n.starts_with("mlx5") => "infiniband-hdr",
            n if n.starts_with("efa") || n.starts_with("rdmap") => "efa",
            _ => "tcp",
        };
        s.put(None, format!("\n[nic]\n# {}", comment(&names.join(", "))));
        if speed.is_none() {
            s.put(None, "# EDIT: the speed is not in the source");
        }
        let fastest = f.nics.iter().filter_map(|n| n.2).max();
        if let (Some(lo), Some(hi)) = (speed, fastest)
            && lo != hi
        {
            s.put(
                None,
                format!(
                    "# EDIT: the NICs differ in speed ({lo} to {hi} Mb/s); a topology gives them one, and this is the slowest"
                ),
            );
        }
        s.put(at.nics.last().copied().flatten(), format!("count = {}", f.nics.len()));
        let speed_at = slowest.and_then(|i| at.nics.get(i).copied().flatten());
        s.put(speed_at, format!("speed = \"{speed_text}\""));
        s.put(None, "# EDIT if needed: guessed from the device names");
        s.put(at.nics.first().copied().flatten(), format!("transport = \"{transport}\""));
        s.put(None, "latency = \"0.5 us\"");
        let attach: Vec<String> = f.nics.iter().map(|n| format!("\"{}\"", n.0)).collect();
        s.put(None, format!("attach = [{}]", attach.join(", ")));
        s.put(None, "\n[network]\nkind = \"non_blocking\"\nlatency = \"0.6 us\"");
    }
    Imported { toml: s.text, origins: s.origins }
}

/// Imports an NCCL topology XML dump; returns topology TOML.
pub fn import_nccl_xml(file: &str, text: &str) -> Result<Imported, ConfigError> {
    let f = from_nccl_xml(file, text)?;
    if f.gpus.is_empty() {
        return Err(err(file, "no <gpu> in the dump: nothing to import"));
    }
    Ok(to_toml(&f, file))
}

/// Imports `nvidia-smi topo -m` output; returns topology TOML.
pub fn import_nvidia_smi(file: &str, text: &str) -> Result<Imported, ConfigError> {
    Ok(to_toml(&from_nvidia_smi(file, text)?, file))
}
