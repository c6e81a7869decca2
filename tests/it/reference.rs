//! `docs/reference.md` lists exactly the keys the parsers accept (issue #14 item 6).
//!
//! The keys come from the code, not from a list kept here: each probe feeds the real parser a
//! file with an unknown key (`zz_probe`) in one table, and serde's `deny_unknown_fields` answers
//! "unknown field `zz_probe`, expected one of `a`, `b`, …" with every key that table takes. A
//! field added to a raw struct therefore fails this test until the reference documents it, and
//! a row left in the reference after its field is gone fails it too.

use collsim::config::{
    parse_placement_tiers, parse_plan, parse_profile, parse_scenario, parse_topology,
    parse_transports,
};

const PROBE: &str = "zz_probe";

#[derive(Clone, Copy)]
enum Parser {
    Scenario,
    Topology,
    Profile,
    Plan,
    Transports,
    Tiers,
}

/// How a probe's keys are compared with the reference section.
#[derive(Clone, Copy, PartialEq)]
enum Check {
    /// The section's table rows are exactly these keys.
    Rows,
    /// Each key is named (in backticks) somewhere in the section (map keys such as the
    /// profile's GPU architectures, listed in prose).
    Mentioned,
}

struct Probe {
    parser: Parser,
    /// The `## ` heading of the file's part of the reference.
    file: &'static str,
    /// The `### ` heading of the table's section.
    table: &'static str,
    text: String,
    check: Check,
}

fn read(path: &str) -> String {
    std::fs::read_to_string(format!("{}/{path}", env!("CARGO_MANIFEST_DIR")))
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// One unknown key in the table `header` ("" for the top level).
fn in_table(header: &str) -> String {
    if header.is_empty() { format!("{PROBE} = 1\n") } else { format!("{header}\n{PROBE} = 1\n") }
}

fn probes() -> Vec<Probe> {
    use Check::*;
    use Parser::*;
    let mut out = Vec::new();
    let mut serde = |parser, file, table, header: &str| {
        out.push(Probe { parser, file, table, text: in_table(header), check: Rows });
    };
    let sc = "Scenario file";
    serde(Scenario, sc, "Top level", "");
    serde(Scenario, sc, "`[cluster]`", "[cluster]");
    serde(Scenario, sc, "`[workload]`", "[workload]");
    serde(Scenario, sc, "`[workload]`", "[[job]]\n[job.workload]");
    serde(Scenario, sc, "`[workload.ddp]`", "[workload.ddp]");
    serde(Scenario, sc, "`[workload.dp]`", "[workload.dp]");
    serde(Scenario, sc, "`[workload.input]`", "[workload.input]");
    serde(Scenario, sc, "`[workload.fsdp]`", "[workload.fsdp]");
    serde(Scenario, sc, "`[workload.zero]`", "[workload.zero]");
    serde(Scenario, sc, "`[workload.parallel]`", "[workload.parallel]");
    serde(Scenario, sc, "`[workload.model]`", "[workload.model]");
    serde(Scenario, sc, "`[[workload.layer]]`", "[[workload.layer]]");
    serde(Scenario, sc, "`[placement]`", "[placement]");
    serde(Scenario, sc, "`[[placement.group]]`", "[[placement.group]]");
    serde(Scenario, sc, "`[[job]]`", "[[job]]");
    serde(Scenario, sc, "`[[background]]`", "[[background]]");
    let t = "Topology file";
    serde(Topology, t, "Top level", "");
    serde(Topology, t, "`[gpu]`", "[gpu]");
    serde(Topology, t, "`[gpu_model.<name>]`", "[gpu_model.x]");
    serde(Topology, t, "`[gpu_model.<name>.pcie]`", "[gpu_model.x.pcie]");
    serde(Topology, t, "`[nvlink]`", "[nvlink]");
    serde(Topology, t, "`[[nvlink.pair]]`", "[[nvlink.pair]]");
    serde(Topology, t, "`[nvswitch]`", "[nvswitch]");
    serde(Topology, t, "`[pcie]`", "[pcie]");
    serde(Topology, t, "`[[pcie.switch]]`", "[[pcie.switch]]");
    serde(Topology, t, "`[cpu]`", "[cpu]");
    serde(Topology, t, "`[nic]`", "[nic]");
    serde(Topology, t, "`[network]`", "[network]");
    serde(Topology, t, "`[[network.switch]]`", "[[network.switch]]");
    serde(Topology, t, "`[[network.link]]`", "[[network.link]]");
    serde(Topology, t, "`[price]`", "[price]");
    serde(Transports, "Transports file", "`[<transport>]`", "[x]");
    serde(Tiers, "Placement tiers file", "`[<tier>]`", "[x]");
    let p = "Profile file";
    serde(Profile, p, "Top level", "");
    serde(Profile, p, "`[overhead]`", "[overhead]");
    serde(Profile, p, "`[step_latency]`", "[step_latency]");
    for per_proto in [
        "[step_latency.nvlink]",
        "[step_latency.pcie]",
        "[step_latency.net]",
        "[gpu.x.sync]",
        "[gpu.x.nvlink_efficiency]",
    ] {
        serde(Profile, p, "`[step_latency.nvlink]`", per_proto);
    }
    serde(Profile, p, "`[bandwidth]`", "[bandwidth]");
    serde(Profile, p, "`[gpu.<arch>]`", "[gpu.x]");
    serde(Profile, p, "`[correction]`", "[correction]");
    serde(Profile, p, "`[[correction.mechanism]]`", "[[correction.mechanism]]");
    serde(Profile, p, "`[fitted_on]`", "[fitted_on]");
    let pl = "Plan file";
    serde(Plan, pl, "Top level", "");
    serde(Plan, pl, "`[train]`", "[train]");
    serde(Plan, pl, "`[candidates]`", "[candidates]");
    serde(Plan, pl, "`[objective]`", "[objective]");
    serde(Plan, pl, "`[instance.<name>]`", "[instance.x]");
    serde(Plan, pl, "`[neighbours]`", "[neighbours]");
    serde(Plan, sc, "`[workload]`", "[workload]");
    // Keys checked after serde, by validation: the precisions of peak_tflops and the profile's
    // GPU architectures. These need a file that is valid up to the probe.
    out.push(Probe {
        parser: Topology,
        file: t,
        table: "`[gpu_model.<name>.peak_tflops]`",
        text: read("topologies/dgx-h100.toml")
            + "\n[gpu_model.probe]\nsm = 90\nmemory = \"1 GiB\"\n\
               pcie = { generation = 5, lanes = 16 }\npeak_tflops = { zz_probe = 1.0 }\n",
        check: Rows,
    });
    out.push(Probe {
        parser: Profile,
        file: p,
        table: "`[gpu.<arch>]`",
        text: read("calibration/profiles/default.toml")
            + "\n[gpu.zz_probe]\nsync = { LL = \"0 us\", LL128 = \"0 us\", Simple = \"0 us\" }\n\
               nvlink_efficiency = { LL = 0.5, LL128 = 0.9375, Simple = 1.0 }\n",
        check: Mentioned,
    });
    out
}

/// The parser's error for a probe.
fn error(p: &Probe) -> String {
    let file = "probe.toml";
    let text = p.text.as_str();
    let r = match p.parser {
        Parser::Scenario => parse_scenario(file, text).map(|_| ()),
        Parser::Topology => parse_topology(file, text).map(|_| ()),
        Parser::Profile => parse_profile(file, text).map(|_| ()),
        Parser::Plan => parse_plan(file, text).map(|_| ()),
        Parser::Transports => parse_transports(file, text).map(|_| ()),
        Parser::Tiers => parse_placement_tiers(file, text).map(|_| ()),
    };
    match r {
        Ok(()) => panic!("{} {}: the probe key was accepted:\n{text}", p.file, p.table),
        Err(e) => e.to_string(),
    }
}

/// The keys an error lists: serde's "unknown field `zz_probe`, expected one of `a`, `b`" (or
/// "expected `a`", "expected `a` or `b`"), or validation's "(known: a, b)" / "(expected a, b or
/// c)" for map keys.
fn keys_from_error(e: &str) -> Option<Vec<String>> {
    if let Some(rest) = e.split_once(&format!("unknown field `{PROBE}`")).map(|(_, r)| r) {
        if rest.contains("there are no fields") {
            return Some(Vec::new());
        }
        let quoted = rest.split('`').skip(1).step_by(2).map(str::to_string).collect::<Vec<_>>();
        return (!quoted.is_empty()).then_some(quoted);
    }
    if !e.contains(PROBE) {
        return None;
    }
    let list = ["(known: ", "(expected "]
        .iter()
        .find_map(|open| e.split_once(open).map(|(_, r)| r))?
        .split(')')
        .next()?;
    Some(
        list.replace(" or ", ", ")
            .split(", ")
            .map(|k| k.trim().to_string())
            .filter(|k| !k.is_empty())
            .collect(),
    )
}

/// The text of the section `### table` under `## file`.
fn section<'a>(doc: &'a str, file: &str, table: &str) -> Option<&'a str> {
    let h2 = format!("\n## {file}\n");
    let start = doc.find(&h2)? + h2.len();
    let part = &doc[start..];
    let part = &part[..part.find("\n## ").unwrap_or(part.len())];
    let h3 = format!("\n### {table}\n");
    let s = part.find(&h3)? + h3.len();
    let body = &part[s..];
    Some(&body[..body.find("\n### ").unwrap_or(body.len())])
}

/// The first-column keys of a section's table rows (`` | `key` | … ``).
fn row_keys(section: &str) -> Vec<String> {
    section
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .map(str::to_string)
        .collect()
}

/// Everything the reference gets wrong against the code, one line each.
fn problems(doc: &str) -> Vec<String> {
    let mut out = Vec::new();
    for p in probes() {
        let e = error(&p);
        let Some(mut code) = keys_from_error(&e) else {
            out.push(format!("{} {}: no key list in the parser's error: {e}", p.file, p.table));
            continue;
        };
        code.sort();
        let Some(sec) = section(doc, p.file, p.table) else {
            out.push(format!("{} {}: no such section in docs/reference.md", p.file, p.table));
            continue;
        };
        match p.check {
            Check::Rows => {
                let mut doc_keys = row_keys(sec);
                doc_keys.sort();
                for k in code.iter().filter(|k| !doc_keys.contains(k)) {
                    out.push(format!(
                        "{} {}: `{k}` is accepted but not documented",
                        p.file, p.table
                    ));
                }
                for k in doc_keys.iter().filter(|k| !code.contains(k)) {
                    out.push(format!(
                        "{} {}: `{k}` is documented but not accepted",
                        p.file, p.table
                    ));
                }
            }
            Check::Mentioned => {
                for k in code.iter().filter(|k| !sec.contains(&format!("`{k}`"))) {
                    out.push(format!(
                        "{} {}: `{k}` is accepted but not documented",
                        p.file, p.table
                    ));
                }
            }
        }
    }
    // Every documented table is one the probes reach (no section for a table that is gone).
    let probed: Vec<(&str, &str)> = probes().iter().map(|p| (p.file, p.table)).collect();
    let (mut h2, mut h3) = ("", "");
    let mut reported = Vec::new();
    for line in doc.lines() {
        if let Some(h) = line.strip_prefix("## ") {
            (h2, h3) = (h, "");
        } else if let Some(h) = line.strip_prefix("### ") {
            h3 = h;
        } else if line.starts_with("| `")
            && !h3.is_empty()
            && h2 != COMMAND_LINE
            && !probed.contains(&(h2, h3))
            && !reported.contains(&(h2, h3))
        {
            reported.push((h2, h3));
            out.push(format!("{h2} {h3}: a documented table that no probe checks"));
        }
    }
    out
}

#[test]
fn the_reference_lists_every_key_the_parsers_accept() {
    let doc = read("docs/reference.md");
    let p = problems(&doc);
    assert!(p.is_empty(), "docs/reference.md is out of date:\n{}", p.join("\n"));
}

#[test]
fn a_key_missing_from_the_reference_is_caught() {
    let doc = read("docs/reference.md");
    for (row, want) in [
        ("| `compute_slowdown` |", "`compute_slowdown` is accepted but not documented"),
        ("| `nvls_call` |", "`nvls_call` is accepted but not documented"),
        ("| `per_stream` |", "`per_stream` is accepted but not documented"),
        ("| `numa_per_socket` |", "`numa_per_socket` is accepted but not documented"),
        ("| `bf16` |", "`bf16` is accepted but not documented"),
    ] {
        let at = doc.find(row).unwrap_or_else(|| panic!("{row} not in the reference"));
        let end = at + doc[at..].find('\n').unwrap_or(doc.len() - at);
        let cut = format!("{}{}", &doc[..at], &doc[end + 1..]);
        let p = problems(&cut);
        assert!(p.iter().any(|l| l.contains(want)), "{row}: {p:?}");
    }
    // A documented key the parsers do not take is caught too.
    let extra = doc.replacen("| `sockets` |", "| `sockets_typo` | x |\n| `sockets` |", 1);
    assert!(problems(&extra).iter().any(|l| l.contains("`sockets_typo` is documented but not")));
    // And an architecture missing from the profile's prose.
    let no_arch = doc.replace("`hopper` or `blackwell`", "`hopper`");
    assert!(problems(&no_arch).iter().any(|l| l.contains("`blackwell` is accepted")));
}

/// The reference's section of command-line flags, which [`problems`] leaves to
/// [`every_flag_of_every_subcommand_is_in_the_reference`].
const COMMAND_LINE: &str = "Command line";

/// The flags (`--name`, and `-x` where there is a short one) and positional arguments of one
/// option line of clap's short help (`  -b, --min-bytes <MIN_BYTES>  First size…`).
fn help_flags(help: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_list = false;
    for line in help.lines() {
        if !line.starts_with(' ') {
            in_list = matches!(line, "Options:" | "Arguments:");
            continue;
        }
        if !in_list {
            continue;
        }
        let head = line.trim_start().split("  ").next().unwrap_or("");
        for word in head.split([',', ' ']).filter(|w| !w.is_empty()) {
            let name = word.trim_end_matches("...");
            if name.starts_with('-')
                || name.starts_with('[')
                || (name.starts_with('<') && word == head)
            {
                out.push(name.to_string());
            }
        }
    }
    out.retain(|f| !matches!(f.as_str(), "-h" | "--help" | "-V" | "--version"));
    out
}

#[test]
fn every_flag_of_every_subcommand_is_in_the_reference() {
    // Issue #49 item 8: the reference lists the CLI's flags, subcommand by subcommand, and no
    // flag the CLI does not have.
    let doc = read("docs/reference.md");
    let subcommands: [&[&str]; 11] = [
        &["simulate"],
        &["explain"],
        &["presets"],
        &["topo", "show"],
        &["topo", "import"],
        &["calibrate"],
        &["validate"],
        &["plan"],
        &["plan", "merge"],
        &["profile"],
        &["completions"],
    ];
    let mut problems = Vec::new();
    for sub in subcommands {
        let mut args = sub.to_vec();
        args.push("-h");
        let help = super::collsim_ok(&args);
        let name = format!("`collsim {}`", sub.join(" "));
        let Some(sec) = section(&doc, COMMAND_LINE, &name) else {
            problems.push(format!("{name}: no section"));
            continue;
        };
        let documented: Vec<String> = sec
            .lines()
            .filter(|l| l.starts_with("| `"))
            .flat_map(|l| {
                let first = l.split(" | ").next().unwrap_or("");
                first.split('`').skip(1).step_by(2).map(str::to_string).collect::<Vec<_>>()
            })
            .map(|f| f.trim_end_matches("...").to_string())
            .collect();
        let flags = help_flags(&help);
        assert!(!flags.is_empty() || sub == ["completions"], "{name}: no flags in\n{help}");
        for f in flags.iter().filter(|f| !documented.contains(f)) {
            problems.push(format!("{name}: {f} is a flag but not in the reference"));
        }
        for f in documented.iter().filter(|f| !flags.contains(f)) {
            problems.push(format!("{name}: {f} is in the reference but not a flag"));
        }
    }
    assert!(problems.is_empty(), "docs/reference.md is out of date:\n{}", problems.join("\n"));
}
