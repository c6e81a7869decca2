//! Every shipped scenario, every plan and the outputs the README shows, held to what they printed
//! when their figures were last checked: a CRC-32 and the length of each output, so that a change
//! meant to move no number (a refactor) is seen to move none, and one that moves some says which.
//! After a deliberate change, `COLLSIM_BLESS=1 cargo test --release --test it golden` rewrites
//! the list; the diff of `tests/data/golden-outputs.txt` then names every output that moved.
//! `COLLSIM_GOLDEN_DUMP=DIR` also writes each output to `DIR/<name>`, to compare two revisions'
//! figures file by file.

use std::path::Path;

/// One output: a name, the arguments, and the file the command writes (stdout where none).
struct Case {
    name: String,
    args: Vec<String>,
    file: Option<String>,
}

fn cases(dir: &Path) -> Vec<Case> {
    let mut scenarios: Vec<_> =
        std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".toml"))
            .collect();
    scenarios.sort();
    let mut out = Vec::new();
    let case = |name: &str, args: &[&str], file: Option<&str>| Case {
        name: name.to_string(),
        args: args.iter().map(|a| a.to_string()).collect(),
        file: file.map(|f| f.to_string()),
    };
    for s in &scenarios {
        let path = format!("scenarios/{s}");
        let stem = s.trim_end_matches(".toml");
        if stem.starts_with("plan-") {
            out.push(case(&format!("{stem} plan"), &["plan", &path], None));
            out.push(case(
                &format!("{stem} plan json"),
                &["plan", &path, "--format", "json"],
                None,
            ));
        } else {
            out.push(case(stem, &["simulate", &path], None));
            out.push(case(&format!("{stem} json"), &["simulate", &path, "--format", "json"], None));
        }
    }
    let file = |n: &str| dir.join(n).to_str().unwrap().to_string();
    let (trace, calls, gpt, three_d) = (
        file("r50.trace.json"),
        file("r50.calls.json"),
        file("gpt.trace.json"),
        file("3d.trace.json"),
    );
    out.extend([
        case(
            "flags nccl",
            &["simulate", "--topology", "dgx-h100", "--nodes", "4", "--format", "nccl"],
            None,
        ),
        case(
            "flags all_gather csv",
            &[
                "simulate",
                "--topology",
                "aws-p5",
                "--nodes",
                "2",
                "--collective",
                "all_gather",
                "--format",
                "csv",
            ],
            None,
        ),
        case(
            "explain",
            &["explain", "--topology", "dgx-h100", "--nodes", "2", "--bytes", "64M"],
            None,
        ),
        case(
            "sweep nodes",
            &["simulate", "scenarios/quickstart.toml", "--sweep", "cluster.nodes=1,2,4"],
            None,
        ),
        case(
            "sweep fsdp csv",
            &[
                "simulate",
                "scenarios/llama7b-fsdp-p5-16node.toml",
                "--sweep",
                "fsdp.limit_all_gathers=true,false",
                "--format",
                "csv",
            ],
            None,
        ),
        case(
            "trace resnet50",
            &["simulate", "scenarios/resnet50-dgx-a100-4node.toml", "--trace", &trace],
            Some(&trace),
        ),
        case(
            "calls resnet50",
            &["simulate", "scenarios/resnet50-dgx-a100-4node.toml", "--export-calls", &calls],
            Some(&calls),
        ),
        case(
            "trace gpt-1.4b profile",
            &["simulate", "scenarios/gpt-1.4b-profile-p5-16node.toml", "--trace", &gpt],
            Some(&gpt),
        ),
        case(
            "trace gpt-39b 3d",
            &["simulate", "scenarios/gpt-39b-3d-dgx-a100-32node.toml", "--trace", &three_d],
            Some(&three_d),
        ),
    ]);
    out
}

#[test]
fn golden_outputs_are_unchanged() {
    let dir = super::scratch().join("golden");
    std::fs::create_dir_all(&dir).unwrap();
    let cases = cases(&dir);
    let lines: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = cases
            .iter()
            .map(|c| {
                s.spawn(|| {
                    let args: Vec<&str> = c.args.iter().map(String::as_str).collect();
                    let stdout = super::collsim_ok(&args);
                    let bytes = match &c.file {
                        Some(f) => std::fs::read(f).unwrap(),
                        None => stdout.into_bytes(),
                    };
                    if let Some(dump) = std::env::var_os("COLLSIM_GOLDEN_DUMP") {
                        let dump = Path::new(&dump);
                        std::fs::create_dir_all(dump).unwrap();
                        std::fs::write(dump.join(c.name.replace(' ', "_")), &bytes).unwrap();
                    }
                    format!("{:08x} {:>8} {}", crc32fast::hash(&bytes), bytes.len(), c.name)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let list = lines.join("\n") + "\n";
    let kept_path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/golden-outputs.txt");
    if std::env::var_os("COLLSIM_BLESS").is_some() {
        std::fs::write(kept_path, &list).unwrap();
        return;
    }
    let kept = std::fs::read_to_string(kept_path).unwrap_or_default();
    let moved: Vec<&str> = list.lines().filter(|l| !kept.lines().any(|k| k == *l)).collect();
    assert!(
        moved.is_empty(),
        "outputs moved (crc, length, name): {moved:?}; if that was meant, rerun with COLLSIM_BLESS=1 and say what moved in the commit message"
    );
}
