//! The library's top-level modules form a DAG: each knows only the ones below it (the crate
//! docs' "data flows one way"), and none reaches back to an item of the crate root (the root is
//! a facade over them). Test modules and comments are left out: a test may build a topology
//! from `config` in `hw`, a doc link may name a module above.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The source of `path` without comments and `#[cfg(test)]` items (each runs to the next `}`
/// at the start of a line).
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = String::new();
    let mut skipping = false;
    for line in text.lines() {
        if skipping {
            skipping = line != "}";
            continue;
        }
        if line.trim_start().starts_with("#[cfg(test)]") {
            skipping = true;
            continue;
        }
        let line = match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        };
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The names `text` reaches as `crate::NAME`, or inside `crate::{…}` at its top level.
fn crate_refs(text: &str) -> BTreeSet<String> {
    let ident = |s: &str| -> String {
        s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect()
    };
    let mut out = BTreeSet::new();
    for (i, _) in text.match_indices("crate::") {
        let rest = &text[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let (mut depth, mut start) = (0usize, 0usize);
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        out.insert(ident(group[start..j].trim()));
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.insert(ident(group[start..j].trim()));
                        start = j + 1;
                    }
                    _ => {}
                }
            }
        } else {
            out.insert(ident(rest));
        }
    }
    out.remove("");
    out
}

fn files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn top_level_modules_form_a_dag_below_the_crate_root() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let modules: BTreeSet<String> = lib
        .lines()
        .filter_map(|l| l.strip_prefix("pub mod ")?.strip_suffix(';').map(str::to_string))
        .collect();
    let mut deps: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut root_refs = Vec::new();
    for m in &modules {
        let mut paths = Vec::new();
        let (dir, file) = (src.join(m), src.join(format!("{m}.rs")));
        if dir.is_dir() {
            files(&dir, &mut paths);
        }
        if file.is_file() {
            paths.push(file);
        }
        for p in paths {
            for r in crate_refs(&code(&p)) {
                if modules.contains(&r) {
                    if &r != m {
                        deps.entry(m.clone()).or_default().insert(r);
                    }
                } else {
                    root_refs
                        .push(format!("{}: crate::{r}", p.strip_prefix(&src).unwrap().display()));
                }
            }
        }
    }
    assert!(
        root_refs.is_empty(),
        "modules reach the crate root (use the module that defines it): {root_refs:?}"
    );
    // Depth-first search for a cycle, reporting its path.
    fn visit(
        m: &str,
        deps: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == m) {
            let mut cycle = path[i..].to_vec();
            cycle.push(m.to_string());
            return Some(cycle);
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.to_string());
        for d in deps.get(m).into_iter().flatten() {
            if let Some(c) = visit(d, deps, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for m in &modules {
        if let Some(cycle) = visit(m, &deps, &mut Vec::new(), &mut done) {
            panic!("import cycle between top-level modules: {}", cycle.join(" -> "));
        }
    }
}

/// The crate root is a facade and `main.rs` the command line's flags and dispatch: what they
/// run lives in modules (`sim`, `cli/`), where it can be found and tested.
#[test]
fn the_crate_root_and_main_stay_small() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for (file, most) in [("lib.rs", 250), ("main.rs", 600)] {
        let lines = std::fs::read_to_string(src.join(file)).unwrap().lines().count();
        assert!(
            lines <= most,
            "src/{file} has {lines} lines, more than {most}: move what it runs into a module"
        );
    }
}
