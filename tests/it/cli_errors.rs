//! Bad input: one line on stderr naming what is wrong (file:line:col and field where there is
//! one), exit code 1, never a panic.

use std::path::PathBuf;

use super::{collsim, collsim_ok};

/// A file of the repository, as text.
fn repo_file(rel: &str) -> String {
    std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)).unwrap()
}

/// A scenario of the repository whose relative topology path still resolves from scratch.
fn repo_scenario(name: &str) -> String {
    repo_file(&format!("scenarios/{name}"))
        .replace("\"../topologies/", &format!("\"{}/topologies/", env!("CARGO_MANIFEST_DIR")))
}

fn tmp(name: &str, text: &str) -> PathBuf {
    let dir = super::scratch().join(format!("collsim-it-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

const GOOD: &str = r#"
[cluster]
topology = "dgx-h100"
nodes = 1
gpus_per_node = 8

[workload]
collective = "all_reduce"
min_bytes = "8 B"
max_bytes = "1 MiB"
"#;

fn topo_with(old: &str, new: &str) -> String {
    let text = repo_file("topologies/dgx-h100.toml");
    assert!(text.contains(old));
    text.replacen(old, new, 1)
}

/// Asserts exit code 1 (bad input) and a single stderr line containing every `needles`.
pub fn fails_with(args: &[&str], needles: &[&str]) -> String {
    exits_with(1, args, needles)
}

/// Asserts exit code 2 (a command line that cannot run as given, as clap's own usage errors)
/// and a single stderr line containing every `needles`.
pub fn misused_with(args: &[&str], needles: &[&str]) -> String {
    exits_with(2, args, needles)
}

fn exits_with(code: i32, args: &[&str], needles: &[&str]) -> String {
    let out = collsim(args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(code), "args {args:?}: stderr {err}");
    assert!(!err.contains("panicked"), "panic: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "not one line: {err}");
    for n in needles {
        assert!(err.contains(n), "{n:?} not in {err:?}");
    }
    err
}

#[test]
fn missing_file() {
    fails_with(&["simulate", "no/such/scenario.toml"], &["no/such/scenario.toml", "cannot read"]);
}

#[test]
fn a_newline_in_a_file_name_stays_on_the_error_line() {
    fails_with(
        &["simulate", "no/such\nscenario.toml"],
        &["no/such\\nscenario.toml", "cannot read"],
    );
    let p = tmp("line\nbreak.toml", &GOOD.replace("nodes = 1", "nodes = 0"));
    fails_with(&["simulate", p.to_str().unwrap()], &["line\\nbreak.toml:4:", "cluster.nodes"]);
    // A warning too: an NCCL variable the model does not use, named with a newline.
    let p = tmp("nccl-newline.toml", &format!("{GOOD}[nccl]\n\"NCCL_FOO\\nBAR\" = \"1\"\n"));
    let out = collsim(&["simulate", p.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(
        err.trim_end().lines().collect::<Vec<_>>(),
        ["collsim: ignoring NCCL_FOO\\nBAR (not used by the model)"]
    );
}

#[test]
fn dotted_keys_read_as_their_tables_do() {
    // `parallel.tp = 8` under [workload] is TOML for [workload.parallel] tp = 8: the same
    // scenario, the same step; a wrong key among them is named on its line.
    let f = "scenarios/llama70b-3d-dgx-h100-64node.toml";
    let text = std::fs::read_to_string(f).unwrap();
    let (head, table) = text.split_once("[workload.parallel]\n").unwrap();
    let dotted: String = table.lines().map(|l| format!("parallel.{l}\n")).collect();
    let p = tmp("dotted.toml", &format!("{head}{dotted}"));
    let at = p.to_str().unwrap();
    assert_eq!(collsim_ok(&["simulate", at]), collsim_ok(&["simulate", f]));
    let line = head.lines().count() + 1;
    let p = tmp("dotted-bad.toml", &format!("{head}parallel.tq = 8\n{dotted}"));
    fails_with(&["simulate", p.to_str().unwrap()], &[&format!("dotted-bad.toml:{line}:10"), "tq"]);
}

#[test]
fn toml_syntax_error() {
    let p = tmp("syntax.toml", "[cluster\ntopology = 1\n");
    fails_with(&["simulate", p.to_str().unwrap()], &["syntax.toml:1:"]);
}

#[test]
fn unknown_key() {
    let p = tmp("unknown.toml", &GOOD.replace("nodes = 1", "nodes = 1\nnodez = 2"));
    fails_with(&["simulate", p.to_str().unwrap()], &["unknown.toml:5:1", "nodez"]);
}

#[test]
fn bare_number_for_a_bandwidth() {
    let t = tmp("bare-topo.toml", &topo_with("speed = \"400 Gb/s\"", "speed = 400"));
    let p = tmp("bare.toml", &GOOD.replace("\"dgx-h100\"", "\"bare-topo.toml\""));
    fails_with(
        &["simulate", p.to_str().unwrap()],
        &[t.to_str().unwrap(), "nic.speed", "bare number"],
    );
}

#[test]
fn zero_and_negative_bandwidth() {
    let t = tmp("zero-topo.toml", &topo_with("speed = \"400 Gb/s\"", "speed = \"0 Gb/s\""));
    fails_with(
        &["simulate", "--topology", t.to_str().unwrap()],
        &["zero-topo.toml:", "nic.speed", "greater than zero"],
    );
    let t = tmp(
        "neg-topo.toml",
        &topo_with("bandwidth_per_link = \"20.6 GB/s\"", "bandwidth_per_link = \"-20 GB/s\""),
    );
    fails_with(
        &["simulate", "--topology", t.to_str().unwrap()],
        &["nvlink.bandwidth_per_link", "greater than zero"],
    );
}

#[test]
fn zero_gpus() {
    let t = tmp("zero-gpus.toml", &topo_with("count = 8", "count = 0"));
    fails_with(&["simulate", "--topology", t.to_str().unwrap()], &["zero-gpus.toml:", "gpu.count"]);
    let p = tmp("zero-g.toml", &GOOD.replace("gpus_per_node = 8", "gpus_per_node = 0"));
    fails_with(&["simulate", p.to_str().unwrap()], &["zero-g.toml:5:", "cluster.gpus_per_node"]);
    misused_with(
        &["simulate", "--topology", "dgx-h100", "--gpus-per-node", "0"],
        &["--gpus-per-node 0"],
    );
}

#[test]
fn more_gpus_per_node_than_the_node_has() {
    misused_with(
        &["simulate", "--topology", "dgx-h100", "--gpus-per-node", "9"],
        &["--gpus-per-node 9", "8 GPUs"],
    );
    let p = tmp("nine.toml", &GOOD.replace("gpus_per_node = 8", "gpus_per_node = 9"));
    fails_with(&["simulate", p.to_str().unwrap()], &["nine.toml:5:17", "cluster.gpus_per_node"]);
}

#[test]
fn unknown_preset() {
    // A name on the command line that is neither a preset nor a file is the flag's fault.
    misused_with(
        &["simulate", "--topology", "dgx-z900"],
        &["--topology dgx-z900", "unknown topology preset", "dgx-h100"],
    );
    let p = tmp("preset.toml", &GOOD.replace("dgx-h100", "dgx-z900"));
    fails_with(&["simulate", p.to_str().unwrap()], &["preset.toml:3:12", "cluster.topology"]);
}

#[test]
fn unknown_nccl_algo() {
    // A bad value on the command line is a usage error (exit 2, issue #45).
    misused_with(
        &["simulate", "--topology", "dgx-h100", "--nccl", "NCCL_ALGO=Rong"],
        &["NCCL_ALGO=Rong", "unknown value"],
    );
    // Choices NCCL would refuse on this hardware are one-line errors too.
    fails_with(
        &["simulate", "--topology", "dgx-a100", "--nccl", "NCCL_ALGO=NVLS"],
        &["NCCL_ALGO=NVLS", "NCCL would refuse it", "NVLink SHARP"],
    );
    fails_with(
        &[
            "simulate",
            "--topology",
            "dgx-h100",
            "--nodes",
            "2",
            "--nccl",
            "NCCL_ALGO=CollNetDirect",
        ],
        &["NCCL_ALGO=CollNetDirect", "SHARP-capable switches"],
    );
    // And ones NCCL accepts but collsim cannot time yet name what it can.
    fails_with(
        &[
            "simulate",
            "--topology",
            "dgx-h100",
            "--nodes",
            "2",
            "--gpus-per-node",
            "8",
            "--collective",
            "all_gather",
            "--nccl",
            "NCCL_ALGO=PAT",
        ],
        &["NCCL_ALGO=PAT", "PAT needs exactly one GPU per node"],
    );
}

#[test]
fn log_with_no_table() {
    let p = tmp(
        "empty.log",
        "# nccl-tests version 2.19.6\nNCCL INFO hello\n# Out of bounds values : 0 OK\n",
    );
    fails_with(
        &[
            "validate",
            "--log",
            p.to_str().unwrap(),
            "--topology",
            "dgx-h100",
            "--nodes",
            "1",
            "--gpus-per-node",
            "8",
        ],
        &["empty.log", "no nccl-tests result table"],
    );
}

#[test]
fn ignored_nccl_variables_are_listed() {
    let out = collsim(&[
        "simulate",
        "--topology",
        "dgx-h100",
        "--max-bytes",
        "1K",
        "--nccl",
        "NCCL_DEBUG=INFO",
    ]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("ignoring NCCL_DEBUG"));
}

#[test]
fn placement_of_a_missing_node() {
    let text = format!(
        "{GOOD}[placement]\ntier = \"zone\"\n[[placement.group]]\nname = \"a\"\nnodes = [0]\n\
         [[placement.group]]\nname = \"b\"\nnodes = [9]\n"
    );
    let text = text.replace("nodes = 1\n", "nodes = 4\n");
    let p = tmp("place.toml", &text);
    let path = p.to_str().unwrap();
    fails_with(
        &["simulate", path],
        &["place.toml:", "placement.group.nodes: node 9 does not exist"],
    );
    // A node listed in the file that the command line removes: still one line.
    let p = tmp("place2.toml", &text.replace("nodes = [9]", "nodes = [3]"));
    fails_with(
        &["simulate", p.to_str().unwrap(), "--nodes", "3"],
        &["placement.group \"b\": node 3 does not exist"],
    );
}

#[test]
fn multi_node_without_a_path_to_any_nic() {
    // A node with no NIC cannot reach another node: its GPUs have no path to any NIC.
    fails_with(
        &["simulate", "--topology", "topologies/user/rtx4090-epyc-8gpu.toml", "--nodes", "2"],
        &["2 nodes need NICs"],
    );
}

#[test]
fn a_headerless_all_gather_log_is_not_taken_for_all_reduce() {
    // The dstack A3 High log lost every '#' line: its collective shows only in its counts.
    fails_with(
        &[
            "validate",
            "--log",
            "calibration/data/H100_2N8G_AG_GCPA3HIGH_DSTACK.log",
            "--topology",
            "gcp-a3-highgpu-8g",
            "--nodes",
            "2",
        ],
        &["counts are per rank", "pass --collective"],
    );
}

#[test]
fn a_broken_json_log_is_one_line_naming_the_file_and_place() {
    let p = tmp("broken.json", "{\"results\": [\n  {\"size\": 8, \"count\": 2}\n]}\n");
    fails_with(
        &["validate", "--log", p.to_str().unwrap(), "--topology", "dgx-h100", "--nodes", "1"],
        &["broken.json: results[0]"],
    );
}

#[test]
fn a_corrupt_text_log_is_one_line_with_its_line_number() {
    let p = tmp(
        "corrupt.log",
        "# nThread 1 nGpus 8 minBytes 8\n\
         8 2 float sum -1 36.4 0.00 0.00 0 36.0 0.00 0.00 0\n\
         16 4 float sum -1 3x.1 0.00 0.00 0 36.0 0.00 0.00 0\n",
    );
    fails_with(
        &["validate", "--log", p.to_str().unwrap(), "--topology", "dgx-h100", "--nodes", "1"],
        &["corrupt.log:3: out-of-place time \"3x.1\" is not a number"],
    );
}

#[test]
fn bad_manifest_rows_name_their_line_and_column() {
    let head =
        "curve_id,file,collective,gpus_per_node,nodes,cluster,collsim_topology,collsim_nccl\n";
    let m = tmp("m1.csv", &format!("{head}A,a.log,all_reduce,eight,2,X,,\n"));
    let m = m.to_str().unwrap();
    fails_with(&["validate", "--manifest", m], &["m1.csv:2: gpus_per_node: \"eight\""]);
    let m = tmp("m2.csv", &format!("{head}A,missing.log,all_reduce,8,2,X,,\n"));
    fails_with(&["validate", "--manifest", m.to_str().unwrap()], &["m2.csv:2: ", "missing.log"]);
    let m = tmp("m3.csv", "curve_id,file\nA,a.log\n");
    fails_with(&["validate", "--manifest", m.to_str().unwrap()], &["m3.csv:1: no column"]);
    let d = concat!(env!("CARGO_MANIFEST_DIR"), "/calibration/data");
    let four = format!("{d}/H100_1N4G_ALL_REDUCE_XXRJUN.log");
    // A layout the log contradicts, a cluster of two GPU generations, the report over an input.
    let m = tmp("m4.csv", &format!("{head}A,{four},all_reduce,8,2,X,,\n"));
    fails_with(
        &["validate", "--manifest", m.to_str().unwrap()],
        &["m4.csv:2: nodes/gpus_per_node: 2 x 8, but ", "lists 4 ranks on 1 host(s)"],
    );
    let thanos = format!("{d}/A100SXM80_1N8G_AR_THANOS_G8.log");
    let mixed = format!("{head}A,{four},all_reduce,4,1,X,,\nB,{thanos},all_reduce,8,1,X,,\n");
    let m = tmp("m5.csv", &mixed);
    fails_with(
        &["validate", "--manifest", m.to_str().unwrap()],
        &["m5.csv:3: cluster: X holds sm80"],
    );
    let m = tmp("m6.csv", &format!("{head}A,{four},all_reduce,4,1,X,,\n"));
    let m = m.to_str().unwrap();
    misused_with(&["validate", "--manifest", m, "-o", m], &["is an input of this run"]);
    let real = "calibration/data/manifest.csv";
    misused_with(
        &["validate", "--manifest", real, "--topology", "dgx-h100"],
        &["--topology: --manifest runs each curve on the setup its row records"],
    );
}

#[test]
fn a_cluster_too_big_to_build_is_refused_before_it_is_built() {
    misused_with(
        &["simulate", "--topology", "dgx-h100", "--nodes", "2000000"],
        &["--nodes 2000000: at most 65536"],
    );
    misused_with(&["topo", "show", "dgx-h100", "--nodes", "65537"], &["--nodes 65537"]);
    let p = tmp("huge.toml", "[cluster]\ntopology = \"dgx-h100\"\nnodes = 65537\n");
    fails_with(&["simulate", p.to_str().unwrap()], &["huge.toml:3:", "cluster.nodes", "65536"]);
}

#[test]
fn a_detailed_run_too_long_to_wait_for_is_refused_up_front() {
    // It printed nothing in 500 s; the estimate refuses it at once and says what to do.
    let e = fails_with(
        &[
            "explain",
            "--topology",
            "dgx-h100",
            "--nodes",
            "64",
            "--bytes",
            "8G",
            "--mode",
            "detailed",
        ],
        &["--mode detailed would simulate about 1.7e8 transfers", "8 GiB all_reduce on 512 ranks"],
    );
    assert!(e.contains("use --mode auto or aggregated"), "{e}");
    // A sweep counts every size; a DDP step every bucket.
    fails_with(
        &[
            "simulate",
            "--topology",
            "dgx-h100",
            "--nodes",
            "64",
            "--max-bytes",
            "1G",
            "--mode",
            "detailed",
        ],
        &["transfers in all", "all_reduce on 512 ranks"],
    );
    fails_with(
        &[
            "simulate",
            "scenarios/bert-large-dgx-a100-8node.toml",
            "--nodes",
            "64",
            "--mode",
            "detailed",
        ],
        &["--mode detailed would simulate about"],
    );
    // What fits runs.
    let out = crate::collsim(&[
        "explain",
        "--topology",
        "dgx-h100",
        "--nodes",
        "2",
        "--bytes",
        "64M",
        "--mode",
        "detailed",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn missing_inputs_and_clashing_flags_are_usage_errors() {
    misused_with(&["simulate"], &["no scenario file and no --topology"]);
    misused_with(&["explain", "--bytes", "1M"], &["explain needs --topology"]);
    misused_with(&["calibrate"], &["calibrate needs --from-log"]);
}

#[test]
fn outputs_never_replace_inputs_or_each_other() {
    let dir = crate::scratch().join(format!("collsim-outputs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let s = dir.join("s.toml");
    let text = std::fs::read_to_string("scenarios/quickstart.toml").unwrap();
    std::fs::write(&s, &text).unwrap();
    let s = s.to_str().unwrap();
    misused_with(&["simulate", s, "-o", s], &["-o ", "is an input of this run"]);
    let dotted = dir.join(".").join("s.toml");
    misused_with(&["simulate", s, "-o", dotted.to_str().unwrap()], &["is an input of this run"]);
    assert_eq!(std::fs::read_to_string(s).unwrap(), text, "the scenario was touched");
    let svg = dir.join("step.svg");
    let svg = svg.to_str().unwrap();
    misused_with(
        &["simulate", "scenarios/gpt2-xl-a3-16node.toml", "--trace", svg, "--plot", svg],
        &["--plot ", "--trace writes the same file"],
    );
    let log = "calibration/data/H100_1N8G_ALL_REDUCE_XXRJUN.log";
    misused_with(
        &["validate", "--log", log, "--topology", "dgx-h100", "--plot", log],
        &["--plot ", "is an input of this run"],
    );
    // A report replaces the file only once it is whole, and leaves no temporary behind.
    let out = dir.join("out.txt");
    std::fs::write(&out, "old").unwrap();
    fails_with(&["simulate", "no/such.toml", "-o", out.to_str().unwrap()], &["no/such.toml"]);
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "old");
    collsim_ok(&["simulate", s, "-o", out.to_str().unwrap()]);
    assert!(std::fs::read_to_string(&out).unwrap().starts_with("all_reduce on 1 x dgx-h100"));
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
    fails_with(
        &["simulate", s, "-o", dir.join("no/such/dir/out.txt").to_str().unwrap()],
        &["no/such/dir/out.txt: cannot create"],
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_reader_that_stops_early_is_not_an_error() {
    // The reading end closes before collsim writes a byte (as `| head -1` does once it has its
    // line): the write fails with a broken pipe, which ends the run quietly with exit 0.
    let out = crate::collsim_stdout_closed(&["simulate", "scenarios/quickstart.toml"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {err}");
    assert!(err.is_empty(), "stderr: {err}");
}

#[test]
fn bad_measurements_and_misplaced_rows_name_their_line() {
    let head =
        "# nThread 1 nGpus 8 minBytes 8\n8 2 float sum -1 36.4 0.00 0.00 0 36.0 0.00 0.00 0\n";
    let cases = [
        (
            "16 4 float sum -1 nan 0.00 0.00 0 36.0 0.00 0.00 0\n",
            "out-of-place time nan is not a positive",
        ),
        ("16 4 float sum -1 inf 0.00 0.00 0 36.0 0.00 0.00 0\n", "out-of-place time inf"),
        ("16 4 float sum -1 0.00 0.00 0.00 0 36.0 0.00 0.00 0\n", "out-of-place time 0.00"),
        ("16 4 float sum -1 36.1 0.00 0.00 0 -3.0 0.00 0.00 0\n", "in-place time -3.0"),
        ("16 4 float sum -1 36.1 0.00\n", "cut off: 7 fields"),
        ("8 2 float sum -1 36.4 0.00 0.00 0 36.0 0.00 0.00 0\n", "size 8 after size 8"),
        ("4 1 float sum -1 36.4 0.00 0.00 0 36.0 0.00 0.00 0\n", "size 4 after size 8"),
        ("16 3 float sum -1 36.4 0.00 0.00 0 36.0 0.00 0.00 0\n", "count 3 of float (12 bytes)"),
        ("32 4 float sum -1 36.4 0.00 0.00 0 36.0 0.00 0.00 0\n", "size 32 is 2 x count 4"),
    ];
    for (i, (row, want)) in cases.iter().enumerate() {
        let name = format!("bad-row-{i}.log");
        let p = tmp(&name, &format!("{head}{row}"));
        fails_with(
            &["validate", "--log", p.to_str().unwrap(), "--topology", "dgx-h100", "--nodes", "1"],
            &[&format!("{name}:3: "), want],
        );
    }
    // all_gather's per-rank counts are not an all_reduce.
    fails_with(
        &[
            "validate",
            "--log",
            "calibration/data/A100SXM40_8N4G_ALL_GATHER_POLARIS.log",
            "--topology",
            "polaris-a100-4gpu",
            "--collective",
            "all_reduce",
        ],
        &["all_reduce rows count the whole message", "size 512 has count 4"],
    );
}

#[test]
fn sizes_that_trim_away_are_said_or_refused() {
    misused_with(
        &["explain", "--topology", "dgx-h100", "--bytes", "3"],
        &["--bytes 3: nccl-tests trims it to 0 bytes (whole float elements)", "nothing to move"],
    );
    // Zero itself was explained as a call, where 3 bytes (0 once trimmed) was refused.
    misused_with(
        &["explain", "--topology", "dgx-h100", "--bytes", "0"],
        &["--bytes 0: nothing to move"],
    );
    let out = collsim(&["explain", "--topology", "dgx-h100", "--bytes", "6"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("trims it to 4 bytes"));
    // From 0 bytes, 1 and 2 bytes of float are both 0 elements: one row, not three.
    let csv = collsim_ok(&[
        "simulate",
        "--topology",
        "dgx-h100",
        "--min-bytes",
        "0",
        "--max-bytes",
        "64",
        "--format",
        "csv",
    ]);
    let sizes: Vec<&str> =
        csv.lines().skip(1).map(|l| l.split(',').next().unwrap_or_default()).collect();
    let mut unique = sizes.clone();
    unique.dedup();
    assert_eq!(sizes, unique, "{csv}");
    assert_eq!(sizes.len(), 6, "{csv}");
}

#[test]
fn endless_inputs_are_refused_at_the_read_cap() {
    // A device that never ends, and random bytes: one line naming the file, not memory
    // exhaustion.
    fails_with(&["simulate", "/dev/zero"], &["/dev/zero", "larger than 256 MiB"]);
    fails_with(
        &["validate", "--log", "/dev/urandom", "--topology", "dgx-h100"],
        &["/dev/urandom", "larger than 256 MiB"],
    );
    let p = tmp("latin1.toml", "name = \"caf\u{e9}\"\n");
    std::fs::write(&p, b"name = \"caf\xe9\"\n").unwrap();
    fails_with(&["simulate", p.to_str().unwrap()], &["latin1.toml", "not UTF-8 text", "offset 11"]);
}

#[test]
fn sizes_past_any_gpu_memory_are_refused_up_front() {
    misused_with(
        &["simulate", "--topology", "dgx-h100", "--min-bytes", "4611686018427387904"],
        &["--min-bytes 4611686018427387904: larger than 1 TiB"],
    );
    misused_with(&["explain", "--topology", "dgx-h100", "--bytes", "2T"], &["--bytes 2T"]);
    misused_with(
        &["simulate", "--topology", "dgx-h100", "--max-bytes", "abc"],
        &["--max-bytes abc"],
    );
    let p = tmp("huge-sweep.toml", &GOOD.replace("\"1 MiB\"", "\"2 TiB\""));
    fails_with(
        &["simulate", p.to_str().unwrap()],
        &["huge-sweep.toml:10:13: workload.max_bytes", "1 TiB"],
    );
}

#[test]
fn a_link_too_slow_to_time_is_an_error_not_a_number() {
    // 1 b/s used to wrap simulated time round to 6 us and 71,902 GB/s busbw.
    let p = tmp("one-bit.toml", &topo_with("speed = \"400 Gb/s\"", "speed = \"1 b/s\""));
    fails_with(
        &["simulate", "--topology", p.to_str().unwrap(), "--nodes", "2"],
        &["one-bit.toml:", "nic.speed", "below 1 Mb/s"],
    );
    // The slowest rate allowed still gives a time, and one too large to hold is refused.
    let p = tmp("one-mbit.toml", &topo_with("speed = \"400 Gb/s\"", "speed = \"1 Mb/s\""));
    let t = p.to_str().unwrap();
    let out = collsim_ok(&[
        "simulate",
        "--topology",
        t,
        "--nodes",
        "2",
        "--min-bytes",
        "2M",
        "--max-bytes",
        "2M",
        "--format",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let us = v["rows"][0]["time_us"].as_f64().unwrap();
    // 2 MiB over a ring of 16 GPUs on 1 Mb/s NICs: at least the 2 x 15/16 x 2 MiB each NIC
    // carries, at 125 kB/s (eight NICs a node).
    assert!(us > 2.0 * 15.0 / 16.0 * 2097152.0 / 8.0 / 125e3 * 1e6 * 0.99, "{us} us");
    fails_with(
        &["simulate", "--topology", t, "--nodes", "2", "--min-bytes", "1T", "--max-bytes", "1T"],
        &["all_reduce of 1 TiB: simulated time passes 53 days"],
    );
}

#[test]
fn a_tensor_larger_than_any_model_is_refused() {
    let text = repo_file("scenarios/ddp-custom-layers.toml")
        .replace("params = [[50000, 1024]]", "params = [[1000000000, 1000000000]]");
    let p = tmp("huge-layer.toml", &text);
    fails_with(
        &["simulate", p.to_str().unwrap()],
        &["huge-layer.toml:", "workload.layer[0].params", "more than 10000000000000 parameters"],
    );
    let text = text.replace("[[1000000000, 1000000000]]", "[[4294967296, 4294967296, 4294967296]]");
    let p = tmp("overflowing-layer.toml", &text);
    fails_with(&["simulate", p.to_str().unwrap()], &["overflowing-layer.toml:", "params"]);
}

#[test]
fn every_section_of_an_nccl_list_is_checked() {
    // NCCL refuses the variable whose other section names no collective; collsim used to read
    // the allreduce section and drop the rest silently.
    misused_with(
        &["simulate", "--topology", "dgx-h100", "--nccl", "NCCL_ALGO=allreduce:tree;bogus:ring"],
        &["NCCL_ALGO=allreduce:tree;bogus:ring", "unknown collective `bogus`"],
    );
    misused_with(
        &["simulate", "--topology", "dgx-h100", "--nccl", "NCCL_PROTO=allgather:LL;allreduce:Rong"],
        &["unknown value `Rong`"],
    );
    // A scenario's [nccl] value names its line, as every other key does.
    let p = tmp("rong.toml", &format!("{GOOD}\n[nccl]\nNCCL_ALGO = \"Rong\"\n"));
    fails_with(
        &["simulate", p.to_str().unwrap()],
        &["rong.toml:13:13: nccl.NCCL_ALGO=Rong: unknown value `Rong`"],
    );
}

#[test]
fn floods_of_warnings_and_huge_values_stay_readable() {
    let mut args = vec!["simulate", "--topology", "dgx-h100", "--max-bytes", "8"];
    let pairs: Vec<String> = (0..25).map(|i| format!("NCCL_UNUSED_{i:02}=1")).collect();
    for p in &pairs {
        args.extend(["--nccl", p.as_str()]);
    }
    let out = collsim(&args);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 11, "{err}");
    assert!(err.ends_with("collsim: ignoring 15 more NCCL variables the model does not use\n"));
    // A 100 kB value is not echoed whole: the error keeps its start and its reason.
    let huge = format!("NCCL_ALGO={}", "x".repeat(100_000));
    let err =
        misused_with(&["simulate", "--topology", "dgx-h100", "--nccl", &huge], &["NCCL_ALGO=xxx"]);
    assert!(err.len() < 1000, "{} bytes", err.len());
    assert!(err.contains("characters cut") && err.trim_end().ends_with("NVLSTree, PAT)"), "{err}");
}

#[test]
fn help_names_every_preset_and_collective() {
    // --topology's help listed 2 of 12 presets and --collective's one collective.
    for cmd in ["simulate", "explain", "validate", "calibrate"] {
        let help = crate::collsim_ok(&[cmd, "--help"]);
        let flat = help.split_whitespace().collect::<Vec<_>>().join(" ");
        for p in collsim::config::preset_names() {
            assert!(flat.contains(&format!(" {p}")), "{cmd} --help lacks preset {p}");
        }
        if cmd != "validate" && cmd != "calibrate" {
            for c in [
                "all_reduce",
                "all_gather",
                "reduce_scatter",
                "broadcast",
                "reduce,",
                "alltoall",
                "sendrecv",
            ] {
                assert!(flat.contains(c), "{cmd} --help lacks {c}");
            }
        }
    }
}

#[test]
fn times_too_long_to_hold_are_errors_everywhere() {
    // A profile that left the network 1e-13 of its speed gave a call past 53 days (before
    // that, a call that ended in 6 us): the fraction is now held to the range calibrate fits.
    let text = collsim::config::DEFAULT_PROFILE.1.replace("\nnet = 1.0\n", "\nnet = 1e-13\n");
    assert_ne!(text, collsim::config::DEFAULT_PROFILE.1);
    let p = tmp("crawl.toml", &text);
    let prof = p.to_str().unwrap();
    fails_with(
        &["simulate", "--topology", "dgx-h100", "--nodes", "2", "--profile", prof],
        &["crawl.toml:", "bandwidth.net: must be in [0.05, 2], got 0.0000000000001"],
    );
    let text =
        collsim::config::DEFAULT_PROFILE.1.replacen("{ LL = \"0.4 us\"", "{ LL = \"20 ms\"", 1);
    let p = tmp("late.toml", &text);
    fails_with(
        &["simulate", "--topology", "dgx-h100", "--nodes", "2", "--profile", p.to_str().unwrap()],
        &["late.toml:", "past the 10 ms a profile's latencies may take"],
    );
    // A time past the limit from values each within bounds: NICs at the slowest speed and
    // 1 TiB, in simulate and explain.
    let p = tmp("one-mbit-x.toml", &topo_with("speed = \"400 Gb/s\"", "speed = \"1 Mb/s\""));
    let call = ["--topology", p.to_str().unwrap(), "--nodes", "2"];
    let mut args = vec!["simulate", "--min-bytes", "1T", "--max-bytes", "1T"];
    args.extend(call);
    fails_with(&args, &["all_reduce of 1 TiB: simulated time passes 53 days"]);
    let mut args = vec!["explain", "--bytes", "1T"];
    args.extend(call);
    fails_with(&args, &["all_reduce of 1 TiB: simulated time passes 53 days"]);
    // A training step past the limit names its file and the fields that set its compute.
    let text = repo_file("scenarios/ddp-custom-layers.toml")
        .replace("tflops = 300 ", "tflops = 0.1 #")
        .replace("fwd_gflops = 25 ", "fwd_gflops = 1e9 #")
        .replace("micro_batch = 16", "micro_batch = 100000");
    let p = tmp("eons.toml", &text);
    fails_with(
        &["simulate", p.to_str().unwrap()],
        &["eons.toml: the training step passes 53 days", "workload.micro_batch", "workload.tflops"],
    );
}

#[test]
fn a_log_row_past_any_gpu_memory_names_its_line() {
    // It used to run for ever (validate) or give +13,456,612 % (2 TiB).
    let log = crate::collsim_ok(&[
        "simulate",
        "--topology",
        "dgx-h100",
        "--max-bytes",
        "64",
        "--format",
        "nccl",
    ]);
    let log = log.replace("\n          64 ", "\n4611686018427387904 ");
    let line = log.lines().position(|l| l.starts_with("4611")).unwrap() + 1;
    let p = tmp("huge-row.log", &log);
    fails_with(
        &["validate", "--log", p.to_str().unwrap()],
        &[&format!("huge-row.log:{line}: size 4611686018427387904 is larger than 1 TiB")],
    );
}

#[test]
fn a_flag_and_a_sweep_of_the_same_key_are_refused() {
    // Both rows ran 4 nodes while labelled 1 and 2.
    let s = "scenarios/resnet50-dgx-a100-1node.toml";
    misused_with(
        &["simulate", s, "--sweep", "cluster.nodes=1,2", "--nodes", "4"],
        &["--nodes sets cluster.nodes at every point"],
    );
    let q = "scenarios/quickstart.toml";
    misused_with(
        &["simulate", q, "--sweep", "nccl.NCCL_ALGO=Ring,NVLS", "--nccl", "NCCL_ALGO=Tree"],
        &["--nccl sets NCCL_ALGO at every point"],
    );
    misused_with(
        &["simulate", q, "--sweep", "workload.max_bytes=1M,2M", "--max-bytes", "64M"],
        &["--max-bytes sets workload.max_bytes"],
    );
    misused_with(&["simulate", q, "--sweep", "topology.=1,2"], &["is not a key"]);
    misused_with(&["simulate", q, "--sweep", "cluster..nodes=1"], &["is not a key"]);
    misused_with(&["simulate", s, "--sweep", "topology.gpu.count=2,4"], &["cluster.gpus_per_node"]);
    // Warnings about the flags come once, not once a point.
    let out = crate::collsim(&[
        "simulate",
        q,
        "--max-bytes",
        "8",
        "--nccl",
        "NCCL_FOO=1",
        "--sweep",
        "cluster.nodes=1,2,3",
    ]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1);
}

#[test]
fn shell_completions_cover_the_commands_and_their_flags() {
    for shell in ["bash", "zsh", "fish"] {
        let script = crate::collsim_ok(&["completions", shell]);
        for word in ["simulate", "validate", "topology", "sweep", "gpus-per-process"] {
            assert!(script.contains(word), "{shell} completion lacks {word}");
        }
        // Issue #49 item 6: the names a value may take, not file names: presets and instance
        // types for --topology, nccl-tests' collectives, data types and reductions.
        // --nccl and --sweep take any text but offer NCCL's algorithms and protocols, the
        // model presets and the topologies.
        for name in [
            "aws-p5",
            "p5.48xlarge",
            "gcp-a3-megagpu-8g",
            "reduce_scatter",
            "bfloat16",
            "prod",
            "NCCL_ALGO=NVLSTree",
            "NCCL_PROTO=LL128",
            "workload.model=llama-2-70b",
            "nccl.NCCL_ALGO=Ring",
        ] {
            assert!(script.contains(name), "{shell} completion lacks {name}");
        }
    }
    // Names in the completions, but any text taken as a topology path or checked by collsim
    // itself: one line, with what it may have meant.
    let out = collsim(&["simulate", "--topology", "dgx-h100", "--collective", "all_redcue"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("did you mean all_reduce"), "{err}");
    // Any NCCL variable still goes through --nccl, any key through --sweep: the names offered
    // are not the only ones taken.
    let out = crate::collsim_ok(&[
        "simulate",
        "--topology",
        "dgx-h100",
        "--nccl",
        "NCCL_MIN_NCHANNELS=4",
        "--max-bytes",
        "1KiB",
        "--sweep",
        "nccl.NCCL_PROTO=LL,Simple",
    ]);
    assert!(out.contains("LL"), "{out}");
    // clap's own usage error (several lines, as clap prints them), exit 2.
    let out = collsim(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid value 'tcsh'"));
}

#[test]
fn a_routing_the_fabric_cannot_take_names_its_file_line_and_field() {
    // The quick start's DGX-H100 is one non-blocking switch: nothing to hash over (with
    // adaptive beside it, that point runs and this one is listed with why).
    fails_with(
        &["simulate", "scenarios/quickstart.toml", "--sweep", "topology.network.routing=ecmp"],
        &["topologies/dgx-h100.toml:", "network.routing: \"ecmp\" needs equal-cost paths"],
    );
    let both = super::collsim_ok(&[
        "simulate",
        "scenarios/quickstart.toml",
        "--max-bytes",
        "1K",
        "--sweep",
        "topology.network.routing=adaptive,ecmp",
    ]);
    assert!(both.contains("points that could not run (1):"), "{both}");
    assert!(both.contains("network.routing: \"ecmp\" needs equal-cost paths"), "{both}");
    fails_with(
        &[
            "simulate",
            "scenarios/gpt2-xl-256gpu-roce-ecmp.toml",
            "--sweep",
            "topology.network.routing=random",
        ],
        &["hgx-h100-roce-ecmp-2tier.toml:54:", "network.routing: unknown routing \"random\""],
    );
}

#[test]
fn a_table_or_key_out_of_place_is_named_on_its_own_line() {
    let fsdp = repo_file("scenarios/llama7b-fsdp-p5-16node.toml");
    let line_of = |text: &str, needle: &str| {
        text.lines().position(|l| l.starts_with(needle)).map(|i| i + 1).unwrap()
    };
    // DDP's table on an FSDP step: its header's line, not the file's first.
    let text = format!("{fsdp}\n[workload.ddp]\nbucket_cap_mb = 25\n");
    let p = tmp("ddp-on-fsdp.toml", &text);
    let at = format!("ddp-on-fsdp.toml:{}:", line_of(&text, "[workload.ddp]"));
    fails_with(&["simulate", p.to_str().unwrap()], &[&at, "workload.ddp: not for kind"]);
    // ZeRO without its stage: the [workload.zero] header's line.
    let cut = fsdp.find("[workload.fsdp]").unwrap();
    let text = format!(
        "{}[workload.zero]\nreduce_bucket_size = 5e8\n",
        fsdp[..cut].replace("kind = \"fsdp\"", "kind = \"zero\"")
    );
    let p = tmp("zero-no-stage.toml", &text);
    let at = format!("zero-no-stage.toml:{}:", line_of(&text, "[workload.zero]"));
    fails_with(&["simulate", p.to_str().unwrap()], &[&at, "workload.zero.stage: missing"]);
    // A tensor-parallel degree that does not fit: the tp line.
    let three_d = repo_file("scenarios/llama70b-3d-dgx-h100-64node.toml");
    let text = three_d.replacen("\ntp = 8", "\ntp = 3", 1);
    let p = tmp("tp3.toml", &text);
    let at = format!("tp3.toml:{}:", line_of(&text, "tp = 3"));
    fails_with(&["simulate", p.to_str().unwrap()], &[&at, "workload.parallel.tp: tp x pp"]);
    // A layout whose data-parallel groups lie unevenly on the nodes (3 nodes, tp 2 x pp 2: six
    // ranks, four on one node and two on the next): the tp line, before anything runs.
    let text = three_d
        .replacen("nodes = 64", "nodes = 3", 1)
        .replacen("\ntp = 8", "\ntp = 2", 1)
        .replacen("\npp = 8", "\npp = 2", 1);
    let p = tmp("uneven.toml", &text);
    let at = format!("uneven.toml:{}:", line_of(&text, "tp = 2"));
    fails_with(
        &["simulate", p.to_str().unwrap()],
        &[&at, "workload.parallel.tp: a data-parallel group of 6 ranks lies 4 + 2"],
    );
    // A value of the wrong type: the key with its table.
    let p = tmp("nodes-two.toml", &GOOD.replace("nodes = 1", "nodes = \"two\""));
    fails_with(
        &["simulate", p.to_str().unwrap()],
        &["nodes-two.toml:4:", "cluster.nodes: invalid type"],
    );
}

#[test]
fn flags_that_cannot_run_as_given_are_usage_errors() {
    // Issue #45: each of these exited 1, as if a file were wrong.
    let sweep = ["simulate", "--topology", "dgx-h100"];
    for (extra, needle) in [
        (&["--min-bytes", "1G", "--max-bytes", "1M"][..], "--min-bytes: 1 GiB is larger than"),
        (&["--factor", "0"][..], "--factor: must be at least 2"),
        (&["--min-bytes", "0", "--max-bytes", "0"][..], "--max-bytes: 0 B: no size to run"),
        (&["--nccl", "NCCL_ALGO"][..], "--nccl NCCL_ALGO: expected KEY=VALUE"),
    ] {
        misused_with(&[&sweep[..], extra].concat(), &[needle]);
    }
    let plan = ["plan", "scenarios/plan-gpt2xl.toml", "-o", "/nonexistent/results.jsonl"];
    for (extra, needle) in [
        (&["--shard", "3"][..], "--shard"),
        (&["--shard", "0/2"][..], "--shard"),
        (&["--shard", "3/2"][..], "--shard"),
        (&["--shard", "a/b"][..], "--shard"),
        (&["--shard", "auto", "--shard-count", "0"][..], "shard"),
    ] {
        misused_with(&[&plan[..], extra].concat(), &[needle]);
    }
}

#[test]
fn correction_factors_are_bounded_where_read_and_where_fitted() {
    // Issue #45: 1e-300 gave a 1 GiB all-reduce in 4e-297 µs, 1e300 a time past 53 days.
    let text = std::fs::read_to_string("calibration/profiles/dgx-h100.toml").unwrap();
    let line = text.lines().position(|l| l.starts_with("factor = [1.0, 1.0]")).unwrap() + 1;
    let at = format!("bad-factor.toml:{line}:");
    for bad in ["1e-300", "1e300", "0.05", "11.0"] {
        let p = tmp(
            "bad-factor.toml",
            &text.replacen("factor = [1.0, 1.0]", &format!("factor = [{bad}, 1.0]"), 1),
        );
        fails_with(
            &["simulate", "scenarios/quickstart.toml", "--profile", p.to_str().unwrap()],
            &[&at, "correction.factor[0]: must be between 0.1 and 10"],
        );
    }
    // A log whose times are flat (50 µs at every size, 8 B to 8 GiB): calibrate refuses the
    // band that asks for a factor of about 0.05 and names the log (it wrote factors of 0.009).
    let mut log = String::from(
        "# nThread 1 nGpus 8 minBytes 8 maxBytes 1073741824 step: 2(factor)\n# Using devices\n",
    );
    log.push_str("#  Rank  0 Group  0 Pid 1 on host device  0 [0x00] NVIDIA H100 80GB HBM3\n");
    log.push_str("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n");
    let mut size = 8u64;
    while size <= 8 << 30 {
        log.push_str(&format!(
            "{size:>12} {:>12} float sum -1 50.00 0.00 0.00 0 50.00 0.00 0.00 0\n",
            size / 4
        ));
        size *= 2;
    }
    let flat = tmp("flat.log", &log);
    let out = collsim(&[
        "calibrate",
        "--from-log",
        &format!("{}@all_reduce", flat.display()),
        "--topology",
        "dgx-h100",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let last = err.trim_end().lines().last().unwrap_or_default();
    assert!(
        last.contains("outside the 0.1-10 a size-band correction may take")
            && last.contains("flat.log@all_reduce"),
        "{err}"
    );
}

/// Issue #45 item 3: a key or table another kind of workload reads is refused on its own line,
/// whichever kind the scenario is, and the same for a `--sweep` key that adds one.
#[test]
fn a_key_of_another_kind_is_refused_on_its_line_never_ignored() {
    let line_of = |text: &str, needle: &str| {
        text.lines().position(|l| l.starts_with(needle)).map(|i| i + 1).unwrap()
    };
    for (extra, key) in [
        ("[workload.ddp]\ncomm_hook = \"fp16\"\n", "workload.ddp"),
        ("[workload.fsdp]\nsharding_strategy = \"FULL_SHARD\"\n", "workload.fsdp"),
        ("[workload.input]\ngpu_samples_per_s = 100\n", "workload.input"),
        ("[workload.parallel]\ntp = 2\n", "workload.parallel"),
    ] {
        let text = format!("{GOOD}{extra}");
        let p = tmp("sweep-with-other-kind.toml", &text);
        let at = format!(
            "sweep-with-other-kind.toml:{}:",
            line_of(&text, extra.lines().next().unwrap())
        );
        fails_with(&["simulate", p.to_str().unwrap()], &[&at, key]);
    }
    let p = tmp("sweep-plain.toml", GOOD);
    fails_with(
        &["simulate", p.to_str().unwrap(), "--sweep", "ddp.comm_hook=none,fp16"],
        &["workload.ddp: only for a training step", "not a collective sweep"],
    );
    // A sweep's keys on a training step, and a key of a training step on a replay.
    let ddp = repo_file("scenarios/llama7b-dgx-h100-16node.toml");
    let at = ddp.find("[workload]\n").unwrap() + "[workload]\n".len();
    for (key, line) in [
        ("dtype", "dtype = \"half\"\n"),
        ("factor", "factor = 4\n"),
        ("calls", "calls = \"x.json\"\n"),
    ] {
        let text = format!("{}{line}{}", &ddp[..at], &ddp[at..]);
        let p = tmp("ddp-with-sweep-key.toml", &text);
        let at = format!("ddp-with-sweep-key.toml:{}:", line_of(&text, line.trim_end()));
        fails_with(
            &["simulate", p.to_str().unwrap()],
            &[&at, &format!("workload.{key}: not for kind")],
        );
    }
}

/// Issue #45 item 4: nccl-tests' `-J` JSON is held to the text reader's row checks, and a row
/// cut off in a text table is an error with its line.
#[test]
fn both_log_readers_refuse_what_the_other_refuses() {
    let json = r#"{"args": "./build/all_reduce_perf -b 8 -e 16 -g 8", "results": [
        {"size": 8, "count": 2, "type": "float", "redop": "sum", "root": -1,
         "out_of_place": {"time": -10.5, "alg_bw": 0.0, "bus_bw": 0.0, "nwrong": 0},
         "in_place": {"time": 9.5, "alg_bw": 0.0, "bus_bw": 0.0, "nwrong": 0}}]}"#;
    let p = tmp("negative.json", json);
    fails_with(
        &["validate", "--log", p.to_str().unwrap(), "--topology", "dgx-h100"],
        &["negative.json: results[0]: out-of-place time -10.5 is not a positive number"],
    );
    // Header counts parity: nGpus 0 in the text's header, config.ngpus 0 or a negative NCCL
    // release code in the JSON's.
    let good = json.replace("-10.5", "10.5");
    for (name, with, needle) in [
        (
            "ngpus0.json",
            good.replacen("{\"args\"", "{\"config\": {\"ngpus\": 0}, \"args\"", 1),
            "config.ngpus: 0",
        ),
        (
            "release.json",
            good.replacen("{\"args\"", "{\"nccl_version\": -1, \"args\"", 1),
            "nccl_version: -1",
        ),
    ] {
        let p = tmp(name, &with);
        fails_with(
            &["validate", "--log", p.to_str().unwrap(), "--topology", "dgx-h100"],
            &[needle],
        );
    }
    let text = "# nThread 1 nGpus 8 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5 iters: 20\n\
                8 2 float sum -1 10.0 0.00 0.00 0 10.0 0.00 0.00 0\n\
                16 4\n";
    let p = tmp("cut.log", text);
    fails_with(
        &["validate", "--log", p.to_str().unwrap(), "--topology", "dgx-h100"],
        &["cut.log:3: cut off"],
    );
}

/// Issue #45 item 2: numbers that cannot be are refused where they are read, on their line:
/// `links` reservations that together take a whole link, a fabric whose switches cannot hold
/// the nodes' NICs, NVLink all-to-all links that do not split among the peers.
#[test]
fn impossible_fabrics_and_reservations_are_refused_where_read() {
    let links = |load_a: f64, load_b: f64| {
        format!(
            "{GOOD}\n[[background]]\npattern = \"links\"\nclass = \"net\"\nload = {load_a}\n\n\
             [[background]]\npattern = \"links\"\nclass = \"net\"\nnodes = [0]\nload = {load_b}\n"
        )
    };
    let p = tmp("links-sum.toml", &links(0.6, 0.6));
    let line = links(0.6, 0.6).lines().position(|l| l == "load = 0.6").unwrap() + 1;
    let second = links(0.6, 0.6).lines().skip(line).position(|l| l == "load = 0.6").unwrap();
    fails_with(
        &["simulate", p.to_str().unwrap()],
        &[&format!("links-sum.toml:{}:", line + second + 1), "reserved 1.200 of their capacity"],
    );
    let p = tmp("links-ok.toml", &links(0.5, 0.4));
    super::collsim_ok(&["simulate", p.to_str().unwrap(), "--max-bytes", "1KiB"]);
    // Fabrics: a one-tier fat-tree of 16 ports under 64 nodes; 2-port switches for 8 nodes;
    // a rail fabric of radix 2 for 64 nodes.
    for (network, nodes, holds) in [
        (
            "kind = \"fat_tree\"\ntiers = 1\nradix = 16",
            "64",
            "holds 16 NIC ports, and 64 nodes of 8 NICs need 512",
        ),
        ("kind = \"fat_tree\"\ntiers = 2\nradix = 2", "8", "holds 2 NIC ports"),
        ("kind = \"rail\"\nradix = 2", "64", "holds 0 NIC ports"),
    ] {
        let p = tmp("small-fabric.toml", &topo_with("kind = \"non_blocking\"", network));
        for cmd in [
            vec![
                "simulate",
                "--topology",
                p.to_str().unwrap(),
                "--nodes",
                nodes,
                "--max-bytes",
                "1MiB",
            ],
            vec!["topo", "show", p.to_str().unwrap(), "--nodes", nodes],
        ] {
            fails_with(&cmd, &["network.radix", holds]);
        }
    }
    // A two-tier fat-tree of 64-port switches holds 2,048 NICs: 256 DGX-H100s.
    let p = tmp(
        "fat-tree-64.toml",
        &topo_with("kind = \"non_blocking\"", "kind = \"fat_tree\"\ntiers = 2\nradix = 64"),
    );
    super::collsim_ok(&["topo", "show", p.to_str().unwrap(), "--nodes", "256"]);
    fails_with(&["topo", "show", p.to_str().unwrap(), "--nodes", "257"], &["holds 2048 NIC ports"]);
    // NVLink all-to-all: 6 links among 8 GPUs' 7 peers.
    let text = repo_file("topologies/polaris-a100-4gpu.toml");
    let bad = text.replace("links_per_gpu = 12", "links_per_gpu = 7");
    assert_ne!(bad, text);
    let p = tmp("a2a.toml", &bad);
    let at =
        format!("a2a.toml:{}:", bad.lines().position(|l| l.starts_with("all_to_all")).unwrap() + 1);
    fails_with(
        &["topo", "show", p.to_str().unwrap()],
        &[&at, "links_per_gpu = 7 does not split evenly among each GPU's 3 peers"],
    );
}

/// Issue #45 item 6: values whose step would pass what collsim reports are refused where they
/// are read, naming their line and field.
#[test]
fn rates_and_times_out_of_reach_are_refused_on_their_line() {
    let ddp = repo_file("scenarios/llama7b-dgx-h100-16node.toml");
    let at = ddp.find("[workload]\n").unwrap() + "[workload]\n".len();
    for (line, field) in [
        ("straggler_speed = 1e-12\n", "workload.straggler_speed"),
        ("rank_speeds = [1.0, 0.001]\n", "workload.rank_speeds"),
    ] {
        let text = format!("{}{line}{}", &ddp[..at], &ddp[at..]);
        let p = tmp("slow-rank.toml", &text);
        let at = format!(
            "slow-rank.toml:{}:",
            text.lines().position(|l| l == line.trim_end()).unwrap() + 1
        );
        fails_with(&["simulate", p.to_str().unwrap()], &[&at, field, "failed rather than slowed"]);
    }
    let mfu = ddp.lines().find(|l| l.starts_with("mfu") || l.starts_with("efficiency")).unwrap();
    let key = mfu.split_whitespace().next().unwrap();
    let text = ddp.replacen(mfu, &format!("{key} = 1e-300"), 1);
    let p = tmp("slow-gpu.toml", &text);
    fails_with(&["simulate", p.to_str().unwrap()], &[&format!("workload.{key}"), "[0.01, 1]"]);
    // A replayed entry of more than an hour.
    let calls = tmp("long.json", r#"{"collsim_calls": 1, "calls": [{"compute_us": 1e30}]}"#);
    let scenario = format!(
        "[cluster]\ntopology = \"dgx-h100\"\nnodes = 1\n[workload]\nkind = \"trace\"\ncalls = \"{}\"\n",
        calls.file_name().unwrap().to_str().unwrap()
    );
    let p = tmp("long-replay.toml", &scenario);
    fails_with(
        &["simulate", p.to_str().unwrap()],
        &["long-replay.toml:6:", "calls[0].compute_us", "an hour"],
    );
}

/// Issue #45 item 8: PCIe switches nest at most 8 deep (a chain of 1,200 took 3.4 GB).
#[test]
fn pcie_switches_nest_at_most_eight_deep() {
    let base = repo_file("topologies/pcie-8gpu-2socket.toml");
    assert!(base.contains("switches = 4\n"));
    let chain = |n: usize| {
        let mut t = base.replacen("switches = 4\n", "", 1);
        for i in 0..n {
            let parent = if i == 0 { "numa0".to_string() } else { format!("s{}", i - 1) };
            t.push_str(&format!("\n[[pcie.switch]]\nid = \"s{i}\"\nparent = \"{parent}\"\n"));
        }
        t
    };
    let ok = tmp("pcie-8.toml", &chain(8));
    super::collsim_ok(&["topo", "show", ok.to_str().unwrap()]);
    let deep = tmp("pcie-9.toml", &chain(9));
    fails_with(
        &["topo", "show", deep.to_str().unwrap()],
        &["pcie-9.toml:", "pcie.switch.parent: switch \"s8\" sits 9 switches below its CPU"],
    );
}

#[test]
fn flags_that_cannot_run_are_usage_errors_naming_the_flag() {
    misused_with(
        &["simulate", "--topology", "dgx-h100", "--max-bytes", "1M", "--nccl-version", "2.17"],
        &["--nccl-version \"2.17\"", "unknown NCCL version"],
    );
    misused_with(
        &[
            "simulate",
            "--topology",
            "dgx-h100",
            "--nodes",
            "2",
            "--max-bytes",
            "1M",
            "--nccl",
            "NCCL_MIN_NCHANNELS=64",
            "--nccl",
            "NCCL_MAX_NCHANNELS=1",
        ],
        &["--nccl NCCL_MIN_NCHANNELS=64", "NCCL_MAX_NCHANNELS=1"],
    );
    misused_with(
        &["explain", "--topology", "", "--bytes", "1M"],
        &["--topology", "no topology named"],
    );
    let p = tmp("empty-topology.toml", &GOOD.replace("topology = \"dgx-h100\"", "topology = \"\""));
    fails_with(&["simulate", p.to_str().unwrap()], &["empty-topology.toml:3:12: cluster.topology"]);
}

#[test]
fn log_rows_with_times_no_call_takes_or_unknown_reductions_are_refused() {
    let log = repo_file("calibration/data/H100_1N8G_AR_RING_TOGETHER.log");
    // Line 18 holds the first row (8 B, out-of-place 37.33 µs).
    for (name, from, to, needle) in [
        ("huge-time.log", "37.33", "1e308", "out-of-place time 1e308 µs is no call's time"),
        ("tiny-time.log", "37.33", "1e-300", "out-of-place time 1e-300 µs is no call's time"),
        ("xor.log", "float     sum", "float     xor", "reduction \"xor\""),
        ("dtype.log", "float     sum", "bogusty     sum", "data type \"bogusty\""),
    ] {
        let p = tmp(name, &log.replacen(from, to, 1));
        fails_with(&["validate", "--log", p.to_str().unwrap()], &[&format!("{name}:18: "), needle]);
        fails_with(&["calibrate", "--from-log", p.to_str().unwrap()], &[&format!("{name}:18: ")]);
    }
    let p = tmp("ngpus0.log", &log.replacen("nGpus 8", "nGpus 0", 1));
    fails_with(&["validate", "--log", p.to_str().unwrap()], &["ngpus0.log:3: ", "nGpus \"0\""]);
}

#[test]
fn topology_names_are_one_line_of_plain_text() {
    let text = repo_file("topologies/dgx-h100.toml");
    for (from, to, needle) in [
        ("name = \"dgx-h100\"", "name = \"a\\nb\"", "name: \"a\\nb\" holds the character U+000A"),
        ("name = \"dgx-h100\"", "name = \"a\\u202eb\"", "U+202E"),
    ] {
        let p = tmp("named.toml", &text.replacen(from, to, 1));
        fails_with(&["topo", "show", p.to_str().unwrap()], &["named.toml:", needle]);
    }
}

#[test]
fn keys_of_another_kind_of_thing_are_refused_on_their_line() {
    // A non-blocking network has no switches to size.
    let p = tmp(
        "nb-radix.toml",
        &topo_with("kind = \"non_blocking\"", "kind = \"non_blocking\"\nradix = 64"),
    );
    fails_with(
        &["topo", "show", p.to_str().unwrap()],
        &["nb-radix.toml:", "network.radix: does not apply to kind = \"non_blocking\""],
    );
    // What separates placement groups, with no groups.
    let p = tmp("no-groups.toml", &format!("{GOOD}[placement]\nlatency = \"5 ms\"\n"));
    fails_with(
        &["simulate", p.to_str().unwrap()],
        &["no-groups.toml:", "placement.latency: applies between [[placement.group]]"],
    );
    // A FLOP-given layer's backward is twice its forward: a bwd_ms beside it did nothing.
    let layers = "[cluster]\ntopology = \"dgx-h100\"\nnodes = 1\n\n[workload]\nkind = \"ddp\"\n\
                  tflops = 100.0\nmicro_batch = 1\n\n[[workload.layer]]\nname = \"a\"\n\
                  fwd_gflops = 25.0\nbwd_ms = 1000.0\nparams = [[1024, 1024]]\n";
    let p = tmp("bwd.toml", layers);
    fails_with(
        &["simulate", p.to_str().unwrap()],
        &["bwd.toml:13:10: ", "workload.layer[0].bwd_ms: goes with fwd_ms"],
    );
}

#[test]
fn a_trace_timestamp_no_clock_gives_is_refused_at_its_event() {
    let text = repo_file("tests/data/kineto-synthetic.json");
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let events = v["traceEvents"].as_array_mut().unwrap();
    let i = events.iter().position(|e| e["cat"] == "kernel" && e.get("ts").is_some()).unwrap();
    events[i]["ts"] = serde_json::json!(1e300);
    let p = tmp("far-ts.json", &v.to_string());
    fails_with(
        &["simulate", "--workload-trace", p.to_str().unwrap(), "--topology", "dgx-h100"],
        &[&format!("traceEvents[{i}].ts: 1e300 µs is no timestamp")],
    );
}

#[test]
fn an_nsight_systems_export_collsim_cannot_read_is_one_line() {
    let fails = |p: &std::path::Path, needles: &[&str]| {
        let trace = p.to_str().unwrap();
        fails_with(&["simulate", "--workload-trace", trace, "--topology", "dgx-h100"], needles);
    };
    // An SQLite export and a raw report: export JSON instead.
    let mut sqlite = b"SQLite format 3\0".to_vec();
    sqlite.extend([0x10, 0x00, 0x01, 0x01, 0x00, 0x40, 0x20, 0x20]);
    let p = tmp("report.sqlite", "");
    std::fs::write(&p, &sqlite).unwrap();
    fails(&p, &["report.sqlite: an SQLite database", "nsys export --type json"]);
    let p = tmp("report.nsys-rep", "");
    std::fs::write(&p, b"\x00\x01\x02 not JSON").unwrap();
    fails(&p, &["report.nsys-rep: an Nsight Systems report", "nsys export --type json"]);
    // An export cut short in its last line, and a line that is not an object: their lines.
    let text = repo_file("tests/data/nsys-synthetic.json");
    let lines: Vec<&str> = text.lines().collect();
    let last = lines.len();
    let cut = format!("{}\n{}", lines[..last - 1].join("\n"), &lines[last - 1][..60]);
    let p = tmp("cut.json", &cut);
    fails(&p, &[&format!("cut.json:{last}:60: EOF while parsing"), "is the file cut short?"]);
    let mut broken = lines.clone();
    broken[4] = "[1, 2]";
    let p = tmp("broken.json", &broken.join("\n"));
    fails(&p, &["broken.json:5: not a JSON object"]);
}

#[test]
fn nccl_settings_wrong_for_the_cluster_name_the_scenario_line() {
    // GOOD has 10 lines from its leading newline; [nccl] is line 12, its first key line 13.
    let bounds =
        format!("{GOOD}\n[nccl]\nNCCL_MIN_NCHANNELS = \"16\"\nNCCL_MAX_NCHANNELS = \"4\"\n");
    let p = tmp("min-max.toml", &bounds);
    fails_with(
        &["simulate", p.to_str().unwrap()],
        &["min-max.toml:13:22: nccl.NCCL_MIN_NCHANNELS=16: larger than NCCL_MAX_NCHANNELS=4"],
    );
    // A flag that makes the file's value clash says so.
    let min = format!("{GOOD}\n[nccl]\nNCCL_MIN_NCHANNELS = \"16\"\n");
    let p = tmp("min.toml", &min);
    fails_with(
        &["simulate", p.to_str().unwrap(), "--nccl", "NCCL_MAX_NCHANNELS=2"],
        &["min.toml:13:22: nccl.NCCL_MIN_NCHANNELS=16", "(with the --nccl flags)"],
    );
    // An algorithm NCCL would refuse on this hardware: the NCCL_ALGO line, or the flag.
    let collnet = format!("{GOOD}\n[nccl]\nNCCL_ALGO = \"CollNet\"\n");
    let p = tmp("collnet.toml", &collnet);
    fails_with(
        &["simulate", p.to_str().unwrap()],
        &["collnet.toml:13:13: nccl.NCCL_ALGO=CollNet: NCCL would refuse it"],
    );
    fails_with(
        &["simulate", p.to_str().unwrap(), "--nccl", "NCCL_ALGO=NVLSTree"],
        &["--nccl NCCL_ALGO=NVLSTree: NCCL would refuse it: NVLSTree needs more than one node"],
    );
    fails_with(
        &["explain", "--topology", "dgx-h100", "--nccl", "NCCL_ALGO=NVLSTree", "--bytes", "1M"],
        &["--nccl NCCL_ALGO=NVLSTree: NCCL would refuse it"],
    );
}

#[test]
fn measured_rank_speeds_longer_than_the_job_name_their_line() {
    let text = repo_file("scenarios/resnet50-straggler-dgx-a100-8node.toml");
    let ten = "rank_speeds = [0.8, 0.9, 1.0, 0.95, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9]";
    let line = text.lines().position(|l| l.starts_with("straggler_speed")).unwrap() + 1;
    let speeds: String = text
        .lines()
        .map(|l| if l.starts_with("straggler_speed") { ten.to_string() } else { l.to_string() })
        .collect::<Vec<_>>()
        .join("\n");
    let p = tmp("speeds.toml", &speeds.replacen("nodes = 8", "nodes = 1", 1));
    fails_with(
        &["simulate", p.to_str().unwrap()],
        &[&format!(
            "speeds.toml:{line}:15: workload.rank_speeds lists 10 ranks, but the job has 8"
        )],
    );
    // Shrunk by a flag: the file, since the list's line is not what is wrong.
    let p = tmp("speeds8.toml", &speeds);
    fails_with(
        &["simulate", p.to_str().unwrap(), "--nodes", "1"],
        &["speeds8.toml: workload.rank_speeds lists 10 ranks"],
    );
}

#[test]
fn a_jobs_nccl_settings_wrong_for_its_nodes_name_the_line() {
    let text = repo_scenario("two-jobs-shared-spine.toml");
    let job_b = "name = \"b\"\nnodes = 8\nplacement = \"spread\"\n";
    assert!(text.contains(job_b));
    let line_of = |text: &str, needle: &str| {
        text.lines().position(|l| l.starts_with(needle)).map(|i| i + 1).unwrap()
    };
    // Job b asks for NVLS across nodes: its NCCL_ALGO line (was "job \"b\": NCCL_ALGO=NVLS: ...").
    let nvls = text.replace(job_b, &format!("{job_b}[job.nccl]\nNCCL_ALGO = \"NVLS\"\n"));
    let p = tmp("job-nvls.toml", &nvls);
    let at = format!(
        "job-nvls.toml:{}:13: job \"b\": nccl.NCCL_ALGO=NVLS",
        line_of(&nvls, "NCCL_ALGO = \"NVLS\"")
    );
    fails_with(&["simulate", p.to_str().unwrap()], &[&at, "NCCL would refuse it"]);
    // The scenario's minimum above the job's maximum: the minimum's line in [nccl].
    let clash = nvls.replace("NCCL_ALGO = \"NVLS\"", "NCCL_MAX_NCHANNELS = \"2\"").replacen(
        "NCCL_ALGO = \"Ring\"",
        "NCCL_ALGO = \"Ring\"\nNCCL_MIN_NCHANNELS = \"4\"",
        1,
    );
    let p = tmp("job-clash.toml", &clash);
    let at = format!(
        "job-clash.toml:{}:22: job \"b\": nccl.NCCL_MIN_NCHANNELS=4",
        line_of(&clash, "NCCL_MIN_NCHANNELS")
    );
    fails_with(&["simulate", p.to_str().unwrap()], &[&at, "larger than NCCL_MAX_NCHANNELS=2"]);
}

#[test]
fn round_four_inputs_are_refused_where_they_are_wrong() {
    // A ZeRO all-gather bucket of 3 elements was 2.2e9 all-gathers: 24 GB, then killed.
    let zero = repo_file("scenarios/llama7b-zero2-p5-16node.toml");
    let text = zero.replacen("allgather_bucket_size = 5e8", "allgather_bucket_size = 3", 1);
    let line = text.lines().position(|l| l.starts_with("allgather_bucket_size")).unwrap() + 1;
    let p = tmp("zero-tiny.toml", &text);
    fails_with(
        &["simulate", p.to_str().unwrap()],
        &[
            &format!("zero-tiny.toml:{line}:25: workload.zero.allgather_bucket_size"),
            "at most 100000",
        ],
    );
    // An empty --sweep value dropped its point silently.
    misused_with(
        &["simulate", "scenarios/quickstart.toml", "--sweep", "nccl.NCCL_ALGO=,Ring"],
        &["value 1 is empty"],
    );
    // calibrate: a log fitted and checked reported its fit error as held out; odd --fit lists
    // and a --launcher without --run were taken.
    let log = "calibration/data/H100_1N8G_AR_RING_TOGETHER.log";
    let dotted = format!("./{log}");
    for (args, needle) in [
        (vec!["--check-log", &dotted], "given twice"),
        (vec!["--fit", "none,overhead.call"], "\"none\" fits no parameter"),
        (vec!["--fit", "overhead.call,"], "entry 2 is empty"),
        (vec!["--launcher", "mpirun"], "it goes with --run"),
    ] {
        let mut all = vec!["calibrate", "--from-log", log, "--topology", "dgx-h100"];
        all.extend(args);
        misused_with(&all, &[needle]);
    }
    // A profile's NCCL release is compared with the run's: a string that is none was taken and
    // silenced the warning.
    let profile = repo_file("calibration/profiles/aws-p5.toml");
    let p = tmp("nccl999.toml", &profile.replacen("nccl = \"2.22.3\"", "nccl = \"9.99\"", 1));
    fails_with(
        &["simulate", "--topology", "aws-p5", "--nodes", "2", "--profile", p.to_str().unwrap()],
        &["nccl999.toml:", "fitted_on.nccl: \"9.99\" is no NCCL 2.x release"],
    );
}

#[test]
fn calibrate_says_it_runs_each_log_on_its_own_layout_whatever_the_flags() {
    let out = collsim(&[
        "calibrate",
        "--from-log",
        "calibration/data/H100_1N8G_AR_RING_TOGETHER.log",
        "--topology",
        "dgx-h100",
        "--nodes",
        "2",
        "--gpus-per-node",
        "4",
        "--fit",
        "none",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    // It said "give --nodes/--gpus-per-node to override" though both were given.
    assert!(err.contains("warning:"), "{err}");
    assert!(
        err.contains("calibrate takes each log's own layout, not --nodes/--gpus-per-node"),
        "{err}"
    );
    assert!(!err.contains("--gpus-per-node to override"), "{err}");
}

#[test]
fn a_jobs_unused_nccl_variable_is_said_and_its_step_ratio_error_names_the_file() {
    let text = repo_scenario("two-jobs-shared-spine.toml");
    let job_b = "name = \"b\"\nnodes = 8\nplacement = \"spread\"\n";
    let p = tmp(
        "job-foo.toml",
        &text.replace(job_b, &format!("{job_b}[job.nccl]\nNCCL_FOO = \"1\"\n")),
    );
    let out = collsim(&["simulate", p.to_str().unwrap()]);
    assert!(out.status.success());
    // It was taken without a word, where the scenario's own [nccl] warns.
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("job \"b\": ignoring NCCL_FOO (not used by the model)"), "{err}");
    let ddp = repo_scenario("two-ddp-jobs-shared-spine.toml").replacen(
        "micro_batch = 4",
        "micro_batch = 1000000",
        1,
    );
    let p = tmp("job-ratio.toml", &ddp);
    fails_with(
        &["simulate", p.to_str().unwrap()],
        &["job-ratio.toml: job \"a\"'s step", "over 1000 times"],
    );
}

#[test]
fn an_unknown_name_lists_the_valid_ones_and_the_nearest() {
    // Issue #49 item 6: every "unknown X" names the valid values, and the nearest where one is
    // near, on the command line (exit 2) and in a scenario file (exit 1, at its line).
    misused_with(
        &["simulate", "--topology", "dgx-h100", "--dtype", "flaot"],
        &["--dtype: unknown data type \"flaot\" (did you mean float?; valid: int8,", "f8e5m2)"],
    );
    misused_with(
        &["simulate", "--topology", "dgx-h100", "--collective", "all_redcue"],
        &["did you mean all_reduce?", "valid: all_reduce, all_gather, reduce_scatter"],
    );
    misused_with(
        &["explain", "--topology", "dgx-h100", "--collective", "bcast", "--bytes", "1M"],
        &["unknown collective \"bcast\" (valid: all_reduce"],
    );
    misused_with(
        &["simulate", "--topology", "dgx-h100", "--op", "avgg"],
        &["unknown reduction \"avgg\" (did you mean avg?; valid: sum, prod, min, max, avg)"],
    );
    let text = repo_file("scenarios/quickstart.toml").replace("op = \"sum\"", "op = \"summ\"");
    let p = tmp("unknown-op.toml", &text);
    let line = text.lines().position(|l| l.starts_with("op = ")).unwrap() + 1;
    fails_with(
        &["simulate", p.to_str().unwrap()],
        &[&format!(":{line}:"), "workload.op: unknown reduction \"summ\" (did you mean sum?"],
    );
}

#[test]
fn every_subcommand_shows_examples_that_run() {
    // Issue #49 item 6: each subcommand's --help ends with examples; those that write no file
    // and need no GPU or long study run as shown, from the repository's root.
    let subcommands: [&[&str]; 8] = [
        &["simulate"],
        &["explain"],
        &["presets"],
        &["topo"],
        &["calibrate"],
        &["validate"],
        &["plan"],
        &["profile"],
    ];
    let mut ran = 0;
    for sub in subcommands {
        let mut args = sub.to_vec();
        args.push("--help");
        let help = super::collsim_ok(&args);
        let (_, examples) =
            help.split_once("\nExamples:\n").unwrap_or_else(|| panic!("{sub:?}: {help}"));
        for line in examples.lines().filter_map(|l| l.trim().strip_prefix("collsim ")) {
            let skip = ["-o ", "--run", "--manifest", "trace.json", "--shard", "nccl_topo.xml"];
            if skip.iter().any(|s| line.contains(s)) {
                continue;
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            super::collsim_ok(&words);
            ran += 1;
        }
    }
    assert!(ran >= 12, "{ran} examples ran");
}

#[test]
fn a_bad_tuner_row_is_one_line_naming_the_file_line_and_field() {
    let bad = tmp(
        "tuner-bad.csv",
        "# rows\nallreduce,0,98304,tree,ll,-1\nallreduce,98305,12MB,ring,ll128,-1\n",
    );
    let at = format!("{}:3: max_bytes `12MB`: expected a whole number of bytes", bad.display());
    let flag = format!("NCCL_TUNER_CONFIG_FILE={}", bad.display());
    // A file's contents are input (exit 1), on the command line as in a scenario.
    fails_with(&["simulate", "scenarios/quickstart.toml", "--nccl", &flag], &[&at]);
    let upper = tmp("tuner-upper.csv", "allreduce,0,100,Tree,ll,-1\n");
    fails_with(
        &[
            "simulate",
            "scenarios/quickstart.toml",
            "--nccl",
            &format!("NCCL_TUNER_CONFIG_FILE={}", upper.display()),
        ],
        &["tuner-upper.csv:1: algorithm `Tree`", "write `tree`"],
    );
    fails_with(
        &[
            "simulate",
            "scenarios/quickstart.toml",
            "--nccl",
            "NCCL_TUNER_CONFIG_FILE=no/such/tuner.csv",
        ],
        &["NCCL_TUNER_CONFIG_FILE=no/such/tuner.csv: cannot read it"],
    );
    // In a scenario the file is beside it, and the error names the scenario's line too.
    let s = tmp(
        "tuned.toml",
        "[cluster]\ntopology = \"dgx-h100\"\nnodes = 1\n\n[workload]\ncollective = \"all_reduce\"\nmin_bytes = \"8 B\"\nmax_bytes = \"1 MiB\"\n\n[nccl]\nNCCL_TUNER_CONFIG_FILE = \"tuner-bad.csv\"\n",
    );
    fails_with(
        &["simulate", s.to_str().unwrap()],
        &["tuned.toml:11:", "tuner-bad.csv:3: max_bytes `12MB`"],
    );
}
