//! Outputs never destroy anything (issue #45): every output is checked against every file the
//! run read, including files named inside other files, and against the others; links are
//! followed, devices written through; a failed run changes none of its outputs; side outputs
//! are written when stdout closes early.

use std::path::{Path, PathBuf};
use std::process::Command;

use proptest::prelude::*;

use super::{collsim, collsim_ok};
use crate::cli_errors::{fails_with, misused_with};

/// A fresh scratch folder.
fn folder(name: &str) -> PathBuf {
    let d = crate::scratch().join(format!("collsim-outputs-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A DDP scenario on a topology file of its own, both in `d`.
fn ddp_with_topology_file(d: &Path) -> (PathBuf, PathBuf) {
    let topo = d.join("topo.toml");
    std::fs::copy("topologies/dgx-h100.toml", &topo).unwrap();
    let text = std::fs::read_to_string("scenarios/ddp-custom-layers.toml").unwrap();
    let line = text.lines().find(|l| l.trim_start().starts_with("topology")).unwrap();
    let scenario = d.join("ddp.toml");
    std::fs::write(&scenario, text.replacen(line, "topology = \"topo.toml\"", 1)).unwrap();
    (scenario, topo)
}

#[test]
fn an_input_named_on_the_command_line_or_inside_a_file_is_never_replaced() {
    let d = folder("nested");
    let trace = d.join("k.json.gz");
    std::fs::copy("calibration/data/2026-11-26-h200-kineto/run1-kineto-ddp.json.gz", &trace)
        .unwrap();
    let before = std::fs::read(&trace).unwrap();
    let run = ["simulate", "--workload-trace", s(&trace), "--topology", "aws-p5", "--nodes", "2"];
    for flag in ["-o", "--export-calls", "--plot", "--trace"] {
        let mut args = run.to_vec();
        args.extend([flag, s(&trace)]);
        misused_with(&args, &[flag, "is an input of this run"]);
        assert_eq!(std::fs::read(&trace).unwrap(), before, "{flag} replaced the trace");
    }
    // The topology a scenario names, and its hard link: found only once the scenario is read.
    let (scenario, topo) = ddp_with_topology_file(&d);
    let topo_text = std::fs::read(&topo).unwrap();
    let hard = d.join("hard.toml");
    std::fs::hard_link(&topo, &hard).unwrap();
    for (flag, out) in [("-o", &topo), ("--trace", &topo), ("--plot", &hard)] {
        misused_with(&["simulate", s(&scenario), flag, s(out)], &[flag, "is an input"]);
        assert_eq!(std::fs::read(&topo).unwrap(), topo_text, "{flag} replaced the topology");
    }
    // A step's calls file, named by `calls =`.
    let calls = d.join("calls.json");
    collsim_ok(&["simulate", s(&scenario), "--export-calls", s(&calls)]);
    let replay = d.join("replay.toml");
    std::fs::write(
        &replay,
        "[cluster]\ntopology = \"dgx-h100\"\nnodes = 2\n[workload]\nkind = \"trace\"\ncalls = \"calls.json\"\n",
    )
    .unwrap();
    let calls_text = std::fs::read(&calls).unwrap();
    misused_with(&["simulate", s(&replay), "-o", s(&calls)], &["-o", "is an input"]);
    assert_eq!(std::fs::read(&calls).unwrap(), calls_text);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_link_writes_its_target_and_a_device_is_written_through() {
    let d = folder("links");
    let (target, link) = (d.join("target.txt"), d.join("link.txt"));
    std::fs::write(&target, "old").unwrap();
    std::os::unix::fs::symlink("target.txt", &link).unwrap();
    collsim_ok(&["simulate", "scenarios/quickstart.toml", "-o", s(&link)]);
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    assert!(std::fs::read_to_string(&target).unwrap().starts_with("all_reduce on 1 x dgx-h100"));
    // A dangling link: its target is created, the link kept.
    let (gone, dangling) = (d.join("new.txt"), d.join("dangling.txt"));
    std::os::unix::fs::symlink("new.txt", &dangling).unwrap();
    collsim_ok(&["simulate", "scenarios/quickstart.toml", "-o", s(&dangling)]);
    assert!(std::fs::read_to_string(&gone).unwrap().starts_with("all_reduce"));
    // /dev/null stays the device; /dev/stdout reaches the pipe, not a file put in its place.
    collsim_ok(&["simulate", "scenarios/quickstart.toml", "-o", "/dev/null"]);
    assert!(!std::fs::metadata("/dev/null").unwrap().is_file());
    let out = collsim_ok(&["simulate", "scenarios/quickstart.toml", "-o", "/dev/stdout"]);
    assert!(out.starts_with("all_reduce on 1 x dgx-h100"), "{out}");
    assert!(std::fs::symlink_metadata("/dev/stdout").unwrap().file_type().is_symlink());
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_run_that_fails_changes_none_of_its_outputs() {
    let d = folder("failed");
    let (report, trace) = (d.join("report.txt"), d.join("trace.json"));
    std::fs::write(&report, "old report").unwrap();
    std::fs::write(&trace, "old trace").unwrap();
    // The report and the trace are complete when the plot cannot be written.
    let plot = d.join("no-such-folder/step.svg");
    fails_with(
        &[
            "simulate",
            "scenarios/ddp-custom-layers.toml",
            "-o",
            s(&report),
            "--trace",
            s(&trace),
            "--plot",
            s(&plot),
        ],
        &["step.svg: cannot create"],
    );
    assert_eq!(std::fs::read_to_string(&report).unwrap(), "old report");
    assert_eq!(std::fs::read_to_string(&trace).unwrap(), "old trace");
    let left: Vec<_> = std::fs::read_dir(&d).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left.len(), 2, "temporaries left: {left:?}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn side_outputs_are_written_when_stdout_closes_early() {
    let d = folder("closed");
    let (plot, trace) = (d.join("step.svg"), d.join("trace.json"));
    let out = crate::collsim_stdout_closed(&[
        "simulate",
        "scenarios/ddp-custom-layers.toml",
        "--plot",
        s(&plot),
        "--trace",
        s(&trace),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {err}");
    assert!(std::fs::read_to_string(&plot).unwrap().starts_with("<svg"));
    assert!(std::fs::read_to_string(&trace).unwrap().contains("traceEvents"));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_full_stdout_is_an_error_naming_stdout_not_a_panic() {
    for args in [&["completions", "bash"][..], &["simulate", "scenarios/quickstart.toml"]] {
        let out = Command::new(env!("CARGO_BIN_EXE_collsim"))
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdout(std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(err.contains("stdout: cannot write: No space left"), "{err}");
    }
}

/// How a test names a file: as made, through `./`, through `../FOLDER/`, by a symbolic link
/// or by a hard link made beside it.
#[derive(Debug, Clone, Copy)]
enum Spelling {
    Plain,
    Dot,
    DotDot,
    Symlink,
    HardLink,
}

fn spell(d: &Path, name: &str, how: Spelling, n: usize) -> PathBuf {
    let folder = d.file_name().unwrap().to_str().unwrap();
    match how {
        Spelling::Plain => d.join(name),
        Spelling::Dot => d.join(".").join(name),
        Spelling::DotDot => d.join("..").join(folder).join(name),
        Spelling::Symlink => {
            let l = d.join(format!("sym{n}-{name}"));
            let _ = std::os::unix::fs::symlink(name, &l);
            l
        }
        Spelling::HardLink => {
            let l = d.join(format!("hard{n}-{name}"));
            if d.join(name).exists() {
                let _ = std::fs::hard_link(d.join(name), &l);
            }
            l
        }
    }
}

fn spelling() -> impl Strategy<Value = Spelling> {
    prop_oneof![
        Just(Spelling::Plain),
        Just(Spelling::Dot),
        Just(Spelling::DotDot),
        Just(Spelling::Symlink),
        Just(Spelling::HardLink),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Any output (report, trace, plot, exported calls) on any spelling of any file the run
    /// reads (the scenario, the topology it names) or of a new file: no input's bytes change.
    #[test]
    fn no_spelling_of_an_input_lets_an_output_replace_it(
        outs in proptest::collection::vec((0usize..3, spelling()), 1..4),
        case in 0u32..1_000_000,
    ) {
        let d = folder(&format!("prop{case}"));
        let (scenario, topo) = ddp_with_topology_file(&d);
        let names = ["ddp.toml", "topo.toml", "new.txt"];
        let before: Vec<Vec<u8>> = [&scenario, &topo].iter().map(|p| std::fs::read(p).unwrap()).collect();
        let mut args: Vec<String> = vec!["simulate".into(), s(&scenario).into()];
        for (n, ((file, how), flag)) in outs.iter().zip(["-o", "--trace", "--export-calls"]).enumerate() {
            args.push(flag.into());
            args.push(s(&spell(&d, names[*file], *how, n)).into());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = collsim(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        prop_assert!(!err.contains("panicked"), "{}", err);
        let reads_an_input = outs.iter().any(|(f, _)| *f < 2);
        if reads_an_input {
            prop_assert_eq!(out.status.code(), Some(2), "{:?}: {}", args, err);
        }
        for (p, b) in [&scenario, &topo].iter().zip(&before) {
            prop_assert_eq!(&std::fs::read(p).unwrap(), b, "{:?} changed: {:?}", p, args);
        }
        let _ = std::fs::remove_dir_all(&d);
    }
}
