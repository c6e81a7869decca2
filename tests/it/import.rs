//! `collsim topo import` on real-format dumps (tests/data/topo, provenance in its README).

use super::{collsim, collsim_ok};

fn data(name: &str) -> String {
    format!("tests/data/topo/{name}")
}

/// Imports, writes the TOML to a temp file, and returns its path.
fn import(flag: &str, file: &str, tag: &str) -> String {
    let toml = collsim_ok(&["topo", "import", flag, &data(file)]);
    let path = super::scratch().join(format!("collsim-import-{tag}-{}.toml", std::process::id()));
    std::fs::write(&path, toml).unwrap();
    path.to_str().unwrap().to_string()
}

fn matrix(topology: &str) -> serde_json::Value {
    let out = collsim_ok(&["topo", "show", topology, "--format", "json"]);
    serde_json::from_str::<serde_json::Value>(&out).unwrap()["matrix"].clone()
}

#[test]
fn a_real_single_gpu_vm_dump_imports_with_its_quirks() {
    // numaid="-1", link_width="0", a virtio NIC attached to the CPU at 10 Gb/s.
    let toml = collsim_ok(&["topo", "import", "--nccl-xml", &data("h100-vm-1gpu.nccl-topo.xml")]);
    assert!(toml.contains("numaid=\"-1\""), "{toml}");
    assert!(toml.contains("count = 1") && toml.contains("speed = \"10 Gb/s\""), "{toml}");
    assert!(toml.contains("generation = 5\nlanes = 16"), "{toml}");
    let path = import("--nccl-xml", "h100-vm-1gpu.nccl-topo.xml", "vm-xml");
    let m = matrix(&path);
    assert_eq!(m[0][1], "PHB", "GPU and NIC both on the root complex: {m}");
    // The same VM's nvidia-smi output (header wrapped in terminal escapes).
    let path = import("--nvidia-smi", "h100-vm-1gpu.nvidia-smi-topo-m.txt", "vm-smi");
    assert_eq!(matrix(&path).as_array().unwrap().len(), 1);
}

#[test]
fn an_h200_baremetal_dump_imports_as_the_dgx_h100_layout() {
    let path = import("--nccl-xml", "h200-8gpu.nccl-topo.xml", "h200");
    assert_eq!(matrix(&path), matrix("dgx-h100"));
    let toml = std::fs::read_to_string(&path).unwrap();
    assert!(toml.contains("links_per_gpu = 18") && toml.contains("speed = \"400 Gb/s\""), "{toml}");
    assert!(
        toml.contains("transport = \"infiniband-ndr\"")
            && toml.contains("inter_socket = \"40 GB/s\"")
    );
}

#[test]
fn nvidia_smi_matrices_import_with_tabs_or_spaces() {
    for (file, tag) in [
        ("dgx-h100-class.nvidia-smi-topo-m.txt", "smi-tabs"),
        ("dgx-h100-class.spaces.nvidia-smi-topo-m.txt", "smi-spaces"),
    ] {
        let path = import("--nvidia-smi", file, tag);
        assert_eq!(matrix(&path), matrix("dgx-h100"), "{file}");
    }
}

#[test]
fn topo_show_output_imports_back_to_the_same_matrix() {
    // PXB pairs (DGX A100) rebuild a top switch with a switch per device below it.
    let text = collsim_ok(&["topo", "show", "dgx-a100"]);
    let path = super::scratch().join(format!("collsim-a100-smi-{}.txt", std::process::id()));
    std::fs::write(&path, text).unwrap();
    let toml = collsim_ok(&["topo", "import", "--nvidia-smi", path.to_str().unwrap()]);
    let back = super::scratch().join(format!("collsim-a100-back-{}.toml", std::process::id()));
    std::fs::write(&back, toml).unwrap();
    assert_eq!(matrix(back.to_str().unwrap()), matrix("dgx-a100"));
}

#[test]
fn bad_dumps_fail_on_one_line() {
    let dir = super::scratch().join(format!("collsim-bad-import-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text, flag, needle) in [
        (
            "broken.xml",
            "<system version=\"1\">\n  <cpu numaid=\"0\">\n</system>\n",
            "--nccl-xml",
            "broken.xml:3:",
        ),
        ("other.xml", "<graphs version=\"1\"/>\n", "--nccl-xml", "expected a <system> root"),
        (
            "nogpu.xml",
            "<system version=\"1\"><cpu numaid=\"0\"/></system>\n",
            "--nccl-xml",
            "no <gpu>",
        ),
        ("empty.txt", "hello\n", "--nvidia-smi", "no header line with GPU0"),
    ] {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        let out = collsim(&["topo", "import", flag, p.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{name}: {err}");
        assert!(err.contains(needle), "{name}: {err}");
    }
}

/// Writes `text` beside the test's other scratch files and returns its path.
fn scratch_file(name: &str, text: &str) -> String {
    let path = super::scratch().join(format!("collsim-import-{}-{name}", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn malformed_dumps_fail_where_they_are_wrong_instead_of_guessing() {
    let xml = std::fs::read_to_string(data("h200-8gpu.nccl-topo.xml")).unwrap();
    // Cut off after 50 lines: the error is at the end of what is there, not at 1:1.
    let cut: String = xml.lines().take(50).map(|l| format!("{l}\n")).collect();
    let p = scratch_file("cut.xml", &cut);
    crate::cli_errors::fails_with(
        &["topo", "import", "--nccl-xml", &p],
        &["cut.xml:50:", "stops before it is complete"],
    );
    // A compute capability that is not a number was an A100 (sm80) before.
    let p = scratch_file("sm.xml", &xml.replacen("sm=\"90\"", "sm=\"abc\"", 1));
    crate::cli_errors::fails_with(
        &["topo", "import", "--nccl-xml", &p],
        &["sm.xml:5:22: <gpu> sm=\"abc\": not a number"],
    );
    let p = scratch_file("width.xml", &xml.replacen("link_width=\"16\"", "link_width=\"x16\"", 1));
    crate::cli_errors::fails_with(&["topo", "import", "--nccl-xml", &p], &["link_width=\"x16\""]);
    // An NV cell that names no link count used to drop that NVLink silently.
    let smi = std::fs::read_to_string(data("dgx-h100-class.nvidia-smi-topo-m.txt")).unwrap();
    let p = scratch_file("nvxx.txt", &smi.replacen("NV18", "NVxx", 1));
    crate::cli_errors::fails_with(
        &["topo", "import", "--nvidia-smi", &p],
        &["nvxx.txt: GPU0 row, GPU1 column: \"NVxx\" is not NV<links>"],
    );
}

#[test]
fn link_counts_no_gpu_has_are_refused_before_they_add_up() {
    // 4294967295 links on every NVLink wrapped the sum round to 6 links per GPU.
    let xml = std::fs::read_to_string(data("h200-8gpu.nccl-topo.xml")).unwrap();
    assert!(xml.contains("count=\"5\""));
    let p = scratch_file("links.xml", &xml.replace("count=\"5\"", "count=\"4294967295\""));
    crate::cli_errors::fails_with(
        &["topo", "import", "--nccl-xml", &p],
        &["links.xml:", "count=\"4294967295\": more NVLinks than any GPU has"],
    );
    let smi = std::fs::read_to_string(data("dgx-h100-class.nvidia-smi-topo-m.txt")).unwrap();
    let p = scratch_file("nv-huge.txt", &smi.replacen("NV18", "NV4294967295", 1));
    crate::cli_errors::fails_with(&["topo", "import", "--nvidia-smi", &p], &["is not NV<links>"]);
}

#[test]
fn a_nic_slower_than_a_gigabit_keeps_its_speed() {
    // NCCL writes Mb/s; 100 Mb/s used to become 1 Gb/s (whole gigabits, at least one).
    let xml = std::fs::read_to_string(data("h100-vm-1gpu.nccl-topo.xml")).unwrap();
    for (mbps, want) in [("100", "speed = \"100 Mb/s\""), ("2500", "speed = \"2500 Mb/s\"")] {
        let text = xml.replace("speed=\"10000\"", &format!("speed=\"{mbps}\""));
        let path = scratch_file(&format!("slow-nic-{mbps}.xml"), &text);
        let toml = collsim_ok(&["topo", "import", "--nccl-xml", &path]);
        assert!(toml.contains(want), "{mbps}: {toml}");
    }
}

#[test]
fn values_no_topology_takes_are_refused_where_the_users_file_has_them() {
    let xml = std::fs::read_to_string(data("h200-8gpu.nccl-topo.xml")).unwrap();
    // Line 13 holds the first <net>; its speed attribute starts at column 41.
    let p = scratch_file("speed0.xml", &xml.replace("speed=\"400000\"", "speed=\"0\""));
    crate::cli_errors::fails_with(
        &["topo", "import", "--nccl-xml", &p],
        &[
            "speed0.xml:13:41: what it describes is no topology",
            "nic.speed",
            "speed = \\\"0 Gb/s\\\"",
        ],
    );
    let p = scratch_file("sm3.xml", &xml.replace(" sm=\"90\"", " sm=\"3\""));
    crate::cli_errors::fails_with(
        &["topo", "import", "--nccl-xml", &p],
        &["sm3.xml:5:22: ", "compute capability"],
    );
    // One NV17 among NV18s is no longer an NVSwitch: GPU0 (row 2) then has 126 links.
    let smi = std::fs::read_to_string(data("dgx-h100-class.nvidia-smi-topo-m.txt")).unwrap();
    let p = scratch_file("nv17.txt", &smi.replacen("NV18", "NV17", 1));
    crate::cli_errors::fails_with(
        &["topo", "import", "--nvidia-smi", &p],
        &["nv17.txt:2:1: ", "links_per_gpu", "got 126"],
    );
}

#[test]
fn a_source_name_with_quotes_and_backslashes_imports_and_reads_back() {
    let xml = std::fs::read_to_string(data("h200-8gpu.nccl-topo.xml")).unwrap();
    let p = scratch_file("q\"b\\x\nz.xml", &xml);
    let toml = collsim_ok(&["topo", "import", "--nccl-xml", &p]);
    assert!(toml.lines().next().unwrap().ends_with("z.xml. Check every value marked EDIT."));
    let out = super::scratch().join(format!("collsim-import-quoted-{}.toml", std::process::id()));
    std::fs::write(&out, &toml).unwrap();
    collsim_ok(&["topo", "show", out.to_str().unwrap()]);
}

#[test]
fn matrices_nvidia_smi_cannot_print_are_refused_at_their_row() {
    let head = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n";
    for (name, body, needle) in [
        (
            "foo.txt",
            "GPU0\t X \tFOO\t0-15\t0\nGPU1\tFOO\t X \t0-15\t0\n",
            "foo.txt:2:1: GPU0 row, GPU1 column: \"FOO\"",
        ),
        ("cut.txt", "GPU0\t X \t0-15\t0\nGPU1\tNV18\t X \t0-15\t0\n", "cut.txt:2:1: "),
        (
            "twice.txt",
            "GPU0\t X \tNV18\t0-15\t0\nGPU0\t X \tNV18\t0-15\t0\n",
            "twice.txt:3:1: a second row for GPU0",
        ),
        ("none.txt", "", "none.txt:1:1: the header names GPU0, but no row does"),
    ] {
        let p = scratch_file(name, &format!("{head}{body}"));
        crate::cli_errors::fails_with(&["topo", "import", "--nvidia-smi", &p], &[needle]);
    }
}

#[test]
fn nics_of_different_speeds_import_at_the_slowest_with_a_mark() {
    let xml = std::fs::read_to_string(data("h200-8gpu.nccl-topo.xml")).unwrap();
    let p = scratch_file("mixed.xml", &xml.replacen("speed=\"400000\"", "speed=\"100000\"", 1));
    let toml = collsim_ok(&["topo", "import", "--nccl-xml", &p]);
    assert!(toml.contains("speed = \"100 Gb/s\""), "{toml}");
    assert!(toml.contains("# EDIT: the NICs differ in speed (100000 to 400000 Mb/s)"), "{toml}");
}

#[test]
fn attributes_nccl_never_writes_are_refused_at_their_place() {
    let xml = std::fs::read_to_string(data("h200-8gpu.nccl-topo.xml")).unwrap();
    // Before, each was taken silently: the NUMA id ignored, an unreadable PCIe speed dropped,
    // 999 GT/s taken as PCIe 6, and GPU 0's NVSwitch links given to every GPU.
    for (name, from, to, needle) in [
        ("numa.xml", "numaid=\"0\"", "numaid=\"zero\"", "numa.xml:2:39: <cpu> numaid=\"zero\""),
        (
            "gts.xml",
            "link_speed=\"32.0 GT/s PCIe\"",
            "link_speed=\"fast\"",
            "gts.xml:3:80: <pci> link_speed=\"fast\": not a PCIe speed",
        ),
        (
            "gts999.xml",
            "link_speed=\"32.0 GT/s PCIe\"",
            "link_speed=\"999 GT/s\"",
            "gts999.xml:3:80:",
        ),
        (
            "down.xml",
            "count=\"5\"",
            "count=\"1\"",
            "GPU 1 has 18 NVLinks into NVSwitches where GPU 0 has 14",
        ),
    ] {
        let p = scratch_file(name, &xml.replacen(from, to, 1));
        crate::cli_errors::fails_with(&["topo", "import", "--nccl-xml", &p], &[needle]);
    }
    // What NCCL writes where sysfs has no speed stays accepted.
    let p = scratch_file(
        "nospeed.xml",
        &xml.replacen("link_speed=\"32.0 GT/s PCIe\"", "link_speed=\"\"", 1),
    );
    collsim_ok(&["topo", "import", "--nccl-xml", &p]);
}

#[test]
fn an_nvlink_listed_by_one_end_only_is_refused() {
    // Two GPUs joined by NVLink without an NVSwitch; the second lists fewer links back.
    let gpu = |bus: &str, peer: &str, n: u32| {
        format!(
            "    <pci busid=\"{bus}\" class=\"0x030200\" link_speed=\"16.0 GT/s PCIe\" link_width=\"16\">\n      <gpu dev=\"0\" sm=\"80\" rank=\"0\" gdr=\"1\">\n        <nvlink target=\"{peer}\" count=\"{n}\" tclass=\"0x030200\"/>\n      </gpu>\n    </pci>\n"
        )
    };
    let xml = |back: u32| {
        format!(
            "<system version=\"1\">\n  <cpu numaid=\"0\" arch=\"x86_64\" vendor=\"GenuineIntel\" familyid=\"6\" modelid=\"106\">\n{}{}  </cpu>\n</system>\n",
            gpu("0000:01:00.0", "0000:02:00.0", 4),
            gpu("0000:02:00.0", "0000:01:00.0", back)
        )
    };
    let p = scratch_file("pair.xml", &xml(4));
    let toml = collsim_ok(&["topo", "import", "--nccl-xml", &p]);
    assert!(toml.contains("pair = [{ gpus = [0, 1], links = 4 }]"), "{toml}");
    let p = scratch_file("pair2.xml", &xml(2));
    crate::cli_errors::fails_with(
        &["topo", "import", "--nccl-xml", &p],
        &["pair2.xml:5:", "GPU 0 lists 4 NVLinks to GPU 1, which lists 2 back"],
    );
}

#[test]
fn a_numa_affinity_that_is_not_one_node_is_refused_at_its_row() {
    let smi = std::fs::read_to_string(data("dgx-h100-class.nvidia-smi-topo-m.txt")).unwrap();
    let mut lines: Vec<String> = smi.lines().map(str::to_string).collect();
    for bad in ["x", "-1", "99999999999", "0-1"] {
        let mut cells: Vec<String> = lines[2].split('\t').map(str::to_string).collect();
        let n = cells.len();
        cells[n - 2] = bad.to_string();
        let row = cells.join("\t");
        let saved = std::mem::replace(&mut lines[2], row);
        let p = scratch_file("numa.txt", &(lines.join("\n") + "\n"));
        lines[2] = saved;
        crate::cli_errors::fails_with(
            &["topo", "import", "--nvidia-smi", &p],
            &[&format!("numa.txt:3:1: GPU1 row, NUMA Affinity: {bad:?} is not one NUMA node")],
        );
    }
}
