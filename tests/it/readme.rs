//! The README and the guides in `docs/` are a contract: every `cargo run --release -- …`
//! command in their fenced blocks runs here, and where the next fenced block shows what it
//! prints, every line shown (but `...`) is a line of the output.

use std::collections::BTreeSet;

/// A command of the README or a guide, and the output block shown after it, if any.
struct Example {
    file: String,
    line: usize,
    args: Vec<String>,
    shown: Vec<String>,
}

/// The fenced blocks of `text`: (line of the opening fence, the lines inside, indent stripped).
fn blocks(text: &str) -> Vec<(usize, Vec<String>)> {
    let mut out = Vec::new();
    let mut open: Option<(usize, usize, Vec<String>)> = None;
    for (i, line) in text.lines().enumerate() {
        let indent = line.len() - line.trim_start().len();
        if line.trim_start().starts_with("```") {
            match open.take() {
                Some((at, _, lines)) => out.push((at, lines)),
                None => open = Some((i + 1, indent, Vec::new())),
            }
        } else if let Some((_, ind, lines)) = open.as_mut() {
            lines.push(line.get(*ind..).unwrap_or(line.trim_start()).to_string());
        }
    }
    out
}

/// The commands of a block: `cargo run --release -- ARGS`, continuation lines joined, a
/// trailing `# comment` and optional `[...]` groups dropped. Other lines (a synopsis, `cargo
/// test`) are not commands to run.
fn commands(lines: &[String]) -> Vec<Vec<String>> {
    let mut joined = Vec::new();
    let mut cur = String::new();
    for l in lines {
        let l = l.trim();
        match l.strip_suffix('\\') {
            Some(head) => cur.push_str(head),
            None => {
                cur.push_str(l);
                joined.push(std::mem::take(&mut cur));
            }
        }
    }
    joined
        .iter()
        .filter_map(|c| c.strip_prefix("cargo run --release -- "))
        .map(|c| {
            let c = c.split(" #").next().unwrap_or(c);
            let mut out = String::new();
            let mut depth = 0;
            for ch in c.chars() {
                match ch {
                    '[' => depth += 1,
                    ']' if depth > 0 => depth -= 1,
                    _ if depth == 0 => out.push(ch),
                    _ => {}
                }
            }
            out.split_whitespace().map(str::to_string).collect()
        })
        .collect()
}

/// The README, then every guide in `docs/`, by name.
fn documents() -> Vec<String> {
    let root = env!("CARGO_MANIFEST_DIR");
    let mut guides: Vec<String> = std::fs::read_dir(format!("{root}/docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    guides.sort();
    let mut out = vec!["README.md".to_string()];
    out.extend(guides);
    out
}

fn examples() -> Vec<Example> {
    documents().iter().flat_map(|f| examples_of(f)).collect()
}

fn examples_of(file: &str) -> Vec<Example> {
    let text = std::fs::read_to_string(format!("{}/{file}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let blocks = blocks(&text);
    let mut out = Vec::new();
    for (k, (at, lines)) in blocks.iter().enumerate() {
        let cmds = commands(lines);
        let Some(last) = cmds.len().checked_sub(1) else { continue };
        // The block after a command block shows its last command's output, unless it is a
        // command block itself.
        let shown = blocks
            .get(k + 1)
            .filter(|(_, next)| {
                commands(next).is_empty() && !next.iter().any(|l| l.contains("cargo "))
            })
            .map(|(_, next)| next.clone())
            .unwrap_or_default();
        for (j, args) in cmds.into_iter().enumerate() {
            let shown = if j == last { shown.clone() } else { Vec::new() };
            out.push(Example { file: file.to_string(), line: *at, args, shown });
        }
    }
    out
}

/// The manifest's accuracy run: `accuracy::the_pooled_and_held_out_figures_do_not_get_worse`
/// runs it (as JSON, with the user's cache pointed at scratch, since a fit not kept would be
/// made and cached) and checks the README's figures.
fn covered_elsewhere(args: &[String]) -> bool {
    args == ["validate", "--manifest", "calibration/data/manifest.csv"]
}

#[test]
fn the_readme_fits_on_a_few_screens_and_links_to_every_guide() {
    // Issue #49 item 8: about 300 lines, and every guide reachable from it.
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let lines = text.lines().count();
    assert!(lines <= 300, "README.md has {lines} lines");
    for g in documents().iter().skip(1) {
        assert!(text.contains(&format!("]({g})")), "README.md does not link to {g}");
    }
}

#[test]
fn the_readme_picture_is_what_its_command_draws() {
    // The picture at the top is the output of the command under it, as of this build.
    let root = env!("CARGO_MANIFEST_DIR");
    let shipped = std::fs::read_to_string(format!("{root}/docs/img/fsdp-step.svg")).unwrap();
    let out = super::scratch().join("readme-fsdp-step.svg");
    let out = out.to_str().unwrap();
    super::collsim_ok(&["simulate", "scenarios/llama7b-fsdp-p5-16node.toml", "--plot", out]);
    let drawn = std::fs::read_to_string(out).unwrap();
    assert!(
        drawn == shipped,
        "docs/img/fsdp-step.svg is out of date: cargo run --release -- simulate scenarios/llama7b-fsdp-p5-16node.toml --plot docs/img/fsdp-step.svg"
    );
}

#[test]
fn every_readme_command_runs_and_prints_what_the_readme_shows() {
    let examples = examples();
    // The quick start, calibrate and its check, two shared-network scenarios, the plan, a
    // validate with the layout from its log, the manifest.
    assert!(examples.len() >= 8, "found {} README commands", examples.len());
    let mut shown_checked = 0;
    for e in &examples {
        if covered_elsewhere(&e.args) {
            continue;
        }
        let args: Vec<&str> = e.args.iter().map(String::as_str).collect();
        let out = super::collsim(&args);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{} line {}: collsim {} failed: {}",
            e.file,
            e.line,
            e.args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        let printed: BTreeSet<&str> = stdout.lines().map(str::trim_end).collect();
        for l in e.shown.iter().map(|l| l.trim_end()) {
            if l.trim().is_empty() || l.trim() == "..." {
                continue;
            }
            assert!(
                printed.contains(l),
                "{} line {}: `collsim {}` does not print the line shown:\n{l}\nit prints:\n{stdout}",
                e.file,
                e.line,
                e.args.join(" ")
            );
            shown_checked += 1;
        }
    }
    assert!(shown_checked >= 15, "only {shown_checked} output lines checked");
}

#[test]
fn the_readme_parser_finds_commands_and_drops_what_is_not_one() {
    let lines: Vec<String> = [
        "cargo run --release -- validate --log a.log \\",
        "    --nccl X=1    # from the log",
        "cargo test --release",
        "collsim simulate [SCENARIO.toml] [--nodes N]",
        "cargo run --release -- validate --manifest m.csv [--format json]",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let c = commands(&lines);
    assert_eq!(c.len(), 2);
    assert_eq!(c[0], ["validate", "--log", "a.log", "--nccl", "X=1"]);
    assert_eq!(c[1], ["validate", "--manifest", "m.csv"]);
}

#[test]
fn the_simulate_guide_quotes_the_format_version_of_this_build() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/simulate.md"))
        .unwrap()
        .replace('\n', " ");
    let want = format!("one number for the crate ({})", collsim::version::FORMAT_VERSION);
    assert!(text.contains(&want), "docs/simulate.md does not say {want:?}");
}
