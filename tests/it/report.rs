//! Plots and traces as a user opens them (issue #14 item 5, "plots and traces people can
//! read"): the SVGs parsed as XML, the traces as JSON, each checked for what a reader needs.

use serde_json::Value;

use super::{collsim_ok, scratch};

const R50: &str = "scenarios/resnet50-dgx-a100-4node.toml";
/// 32 micro-steps, the first 31 under no_sync.
const BERT: &str = "scenarios/bert-large-dgx-a100-8node.toml";
/// The fp16 compression hook: hook compute on the NCCL stream.
const GPT2_FP16: &str = "scenarios/gpt2-xl-a3-16node-fp16.toml";

/// Runs `collsim simulate scenario` with `--trace` and `--plot` to files named after `tag`;
/// returns (trace text, SVG text).
fn draw(scenario: &str, tag: &str) -> (String, String) {
    let dir = scratch();
    let (trace, svg) = (dir.join(format!("{tag}.json")), dir.join(format!("{tag}.svg")));
    collsim_ok(&[
        "simulate",
        scenario,
        "--trace",
        trace.to_str().unwrap(),
        "--plot",
        svg.to_str().unwrap(),
    ]);
    (std::fs::read_to_string(&trace).unwrap(), std::fs::read_to_string(&svg).unwrap())
}

/// An SVG element: its tag, attributes and text (its own and its `<title>`'s).
#[derive(Debug)]
struct El {
    tag: String,
    attr: std::collections::BTreeMap<String, String>,
    text: String,
    title: String,
}

impl El {
    fn num(&self, k: &str) -> f64 {
        self.attr.get(k).and_then(|v| v.parse().ok()).unwrap_or(f64::NAN)
    }
}

/// Every element of `svg`, which must be well-formed XML.
fn elements(svg: &str) -> Vec<El> {
    let doc = roxmltree::Document::parse(svg).expect("the SVG is well-formed XML");
    doc.descendants()
        .filter(|n| n.is_element())
        .map(|n| El {
            tag: n.tag_name().name().to_string(),
            attr: n.attributes().map(|a| (a.name().to_string(), a.value().to_string())).collect(),
            text: n
                .children()
                .filter(|c| c.is_text())
                .filter_map(|c| c.text())
                .collect::<String>()
                .trim()
                .to_string(),
            title: n
                .children()
                .find(|c| c.has_tag_name("title"))
                .and_then(|t| t.text())
                .unwrap_or_default()
                .to_string(),
        })
        .collect()
}

fn texts(els: &[El]) -> Vec<&str> {
    els.iter().filter(|e| e.tag == "text").map(|e| e.text.as_str()).collect()
}

#[test]
fn ddp_plot_has_legend_lane_labels_layer_names_and_tooltips() {
    let (_, svg) = draw(R50, "report-r50");
    let els = elements(&svg);
    let t = texts(&els);
    for needle in [
        "compute stream",
        "NCCL stream",
        "forward (per layer)",
        "backward (per layer)",
        "bucket collective",
        "exposed communication",
        "bucket ready",
        "time (ms)",
    ] {
        assert!(t.contains(&needle), "{needle} missing from {t:?}");
    }
    // Every bar has a tooltip: ResNet-50's 18 layers forward and backward, 5 buckets and the
    // buffer broadcast, with the layer names and the collectives' facts.
    let bars: Vec<&El> = els.iter().filter(|e| e.tag == "rect" && !e.title.is_empty()).collect();
    let titled = |p: &str| bars.iter().filter(|e| e.title.starts_with(p)).count();
    assert_eq!(titled("fwd "), 18);
    assert_eq!(titled("bwd "), 18);
    assert_eq!(titled("bucket "), 5);
    assert!(bars.iter().any(|e| e.title.starts_with("bwd layer4.0: ")));
    let coll = bars.iter().find(|e| e.title.starts_with("bucket 0 all_reduce")).unwrap();
    assert!(coll.title.contains("float") && coll.title.contains("channels"), "{}", coll.title);
    // Layer names on the bars wide enough to hold them.
    assert!(t.iter().any(|s| s.starts_with("layer")), "{t:?}");
    // Exposed communication: orange bands with their own tooltips.
    let exposed: Vec<&&El> =
        bars.iter().filter(|e| e.title.starts_with("exposed communication: ")).collect();
    assert!(!exposed.is_empty());
    assert!(
        exposed
            .iter()
            .all(|e| e.attr["fill"] == collsim::report::palette::of("exposed communication"))
    );
    assert!(t.iter().any(|s| {
        s.starts_with("exposed = compute waiting for NCCL (the exposed-communication bands, ")
    }));
}

#[test]
fn accumulation_plot_zooms_on_the_last_micro_step() {
    let (_, svg) = draw(BERT, "report-bert");
    let els = elements(&svg);
    let t = texts(&els);
    assert!(t.iter().any(|s| s.starts_with("whole step (32 micro-steps")), "{t:?}");
    assert!(t.iter().any(|s| s.starts_with("last micro-step (synchronising)")), "{t:?}");
    // In the whole step each backward layer of the last micro-step is a sliver; the zoom draws
    // it wide.
    let widths: Vec<f64> = els
        .iter()
        .filter(|e| e.tag == "rect" && e.title.starts_with("bwd ") && !e.title.contains("no_sync"))
        .map(|e| e.num("width"))
        .collect();
    assert!(widths.iter().any(|w| *w < 3.0), "{widths:?}");
    assert!(widths.iter().any(|w| *w > 15.0), "{widths:?}");
}

/// The trace's events.
fn events(trace: &str) -> Vec<Value> {
    let t: Value = serde_json::from_str(trace).unwrap();
    t["traceEvents"].as_array().unwrap().clone()
}

/// A number of an event (0 where it has none, as a flow event's `dur`).
fn f(e: &Value, k: &str) -> f64 {
    e[k].as_f64().unwrap_or(0.0)
}

/// Complete events on the same thread nest: any two are disjoint or one holds the other.
fn assert_nested(events: &[Value]) {
    let x: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X").collect();
    let eps = 1e-6;
    for (i, a) in x.iter().enumerate() {
        for b in &x[i + 1..] {
            if a["tid"] != b["tid"] {
                continue;
            }
            let (a0, a1) = (f(a, "ts"), f(a, "ts") + f(a, "dur"));
            let (b0, b1) = (f(b, "ts"), f(b, "ts") + f(b, "dur"));
            let disjoint = a1 <= b0 + eps || b1 <= a0 + eps;
            let a_in_b = b0 <= a0 + eps && a1 <= b1 + eps;
            let b_in_a = a0 <= b0 + eps && b1 <= a1 + eps;
            assert!(disjoint || a_in_b || b_in_a, "partial overlap: {a} and {b}");
        }
    }
}

/// The complete event named `name` (the only one).
fn named<'a>(events: &'a [Value], name: &str) -> &'a Value {
    let all: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X" && e["name"] == name).collect();
    assert_eq!(all.len(), 1, "{name}");
    all[0]
}

/// Whether `outer` holds `inner` in time.
fn holds(outer: &Value, inner: &Value) -> bool {
    let eps = 1e-6;
    f(outer, "ts") <= f(inner, "ts") + eps
        && f(inner, "ts") + f(inner, "dur") <= f(outer, "ts") + f(outer, "dur") + eps
}

#[test]
fn trace_has_args_flows_parent_spans_and_counters() {
    let (trace, _) = draw(R50, "report-r50-trace");
    let t: Value = serde_json::from_str(&trace).unwrap();
    assert_eq!(t["otherData"]["ranks"], 32);
    assert_eq!(t["otherData"]["format_version"], collsim::report::FORMAT_VERSION);
    let ev = events(&trace);
    assert_nested(&ev);
    // Collectives carry their facts.
    let colls: Vec<&Value> = ev.iter().filter(|e| e["cat"] == "collective").collect();
    assert_eq!(colls.len(), 6);
    for c in &colls {
        for k in ["bytes", "algo", "proto", "channels", "dtype", "algbw_gbyte_per_s"] {
            assert!(!c["args"][k].is_null(), "{k} missing: {c}");
        }
        assert!(c["args"]["channels"].as_u64().unwrap() > 0);
    }
    let buckets: Vec<&&Value> = colls.iter().filter(|c| !c["args"]["bucket"].is_null()).collect();
    assert_eq!(buckets.len(), 5);
    for c in &buckets {
        for k in ["bucket_grad_bytes", "bucket_wire_bytes", "ready_ms"] {
            assert!(c["args"][k].is_u64() || c["args"][k].is_f64(), "{k} missing: {c}");
        }
    }
    // Parents: the iteration holds every compute event; forward and backward their layers.
    let iteration = named(&ev, "iteration");
    let (forward, backward) = (named(&ev, "forward"), named(&ev, "backward"));
    let compute: Vec<&Value> = ev.iter().filter(|e| e["ph"] == "X" && e["tid"] == 0).collect();
    assert!(compute.iter().all(|e| holds(iteration, e)));
    let layers = |p: &'static str| {
        compute.iter().filter(move |e| e["name"].as_str().unwrap().starts_with(p))
    };
    assert_eq!(layers("fwd ").count(), 18);
    assert_eq!(layers("bwd ").count(), 18);
    assert!(layers("fwd ").all(|e| holds(forward, e)));
    assert!(layers("bwd ").all(|e| holds(backward, e)));
    assert!(compute.iter().any(|e| e["cat"] == "exposed_comm"));
    // Flow arrows: one per bucket, from a backward layer on the compute stream to the
    // bucket's collective on the NCCL stream, each pair sharing its id.
    let starts: Vec<&Value> = ev.iter().filter(|e| e["ph"] == "s").collect();
    assert_eq!(starts.len(), 5);
    for s in &starts {
        let fin: Vec<&Value> = ev.iter().filter(|e| e["ph"] == "f" && e["id"] == s["id"]).collect();
        assert_eq!(fin.len(), 1, "{s}");
        let fin = fin[0];
        assert_eq!(
            (s["tid"].as_u64(), fin["tid"].as_u64(), &fin["bp"]),
            (Some(0), Some(1), &"e".into())
        );
        assert!(f(s, "ts") <= f(fin, "ts"));
        let from = compute.iter().filter(|e| e["cat"] == "backward" && holds(e, s)).count();
        assert!(from >= 1, "{s}");
        let bucket = s["id"].as_u64().unwrap() - 1;
        let to = buckets.iter().find(|c| c["args"]["bucket"] == bucket).unwrap();
        assert!(holds(to, fin), "{fin} outside {to}");
    }
    assert!(ev.iter().any(|e| e["ph"] == "C"));
    // Per-link counters, in a process of their own: the four busiest links, named by node and
    // ends. On 4 DGX-A100s the buckets' rings run LL128, held across nodes to NCCL's
    // per-channel LL128 maximum (Ampere: 20 GB/s a channel), below what the GPUs' PCIe uplinks
    // carry; their NVLink hops, at A100's measured LL128 efficiency (0.6 data bytes per wire
    // byte), are the busiest: 97 % while each moves its bytes, 0 between.
    let links: Vec<&Value> = ev.iter().filter(|e| e["ph"] == "C" && e["pid"] == 1).collect();
    let mut names: Vec<&str> = links.iter().map(|e| e["name"].as_str().unwrap()).collect();
    names.dedup();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), 4, "{names:?}");
    assert!(names.iter().all(|n| n.starts_with("node 0 GPU") && n.contains("nvlink")), "{names:?}");
    let pct = |e: &Value| e["args"]["%"].as_f64().unwrap();
    assert!(links.iter().all(|e| (0.0..=100.0).contains(&pct(e))));
    assert!(links.iter().any(|e| pct(e) >= 90.0));
    for n in &names {
        let last = links
            .iter()
            .filter(|e| e["name"] == *n)
            .max_by(|a, b| f(a, "ts").total_cmp(&f(b, "ts")));
        assert_eq!(pct(last.unwrap()), 0.0, "{n} ends busy");
    }
}

#[test]
fn trace_nests_micro_steps_and_hook_compute() {
    let (trace, _) = draw(BERT, "report-bert-trace");
    let ev = events(&trace);
    assert_nested(&ev);
    let sync = named(&ev, "micro-step 32/32 (sync)");
    assert!(holds(sync, named(&ev, "forward")) && holds(sync, named(&ev, "backward")));
    let first = named(&ev, "micro-step 1/32 (no_sync)");
    assert!(holds(named(&ev, "iteration"), first) && !holds(first, named(&ev, "forward")));
    // The fp16 hook's casts run on the NCCL stream, between its collectives, nested.
    let (trace, _) = draw(GPT2_FP16, "report-gpt2-fp16");
    let ev = events(&trace);
    assert_nested(&ev);
    let hooks: Vec<&Value> = ev.iter().filter(|e| e["cat"] == "hook").collect();
    assert!(!hooks.is_empty());
    assert!(hooks.iter().all(|h| h["tid"] == 1 && !h["args"]["bucket"].is_null()));
}

#[test]
fn trace_and_plot_are_byte_identical_across_runs() {
    let a = draw(R50, "report-det-a");
    let b = draw(R50, "report-det-b");
    assert!(a == b);
}

/// Runs a sweep with `--plot` and returns the SVG's elements and its size.
fn sweep_plot(tag: &str, sweeps: &[&str]) -> (Vec<El>, f64, f64) {
    let path = scratch().join(format!("{tag}.svg"));
    let mut args = vec!["simulate", R50];
    for s in sweeps {
        args.extend(["--sweep", s]);
    }
    args.extend(["--plot", path.to_str().unwrap()]);
    collsim_ok(&args);
    let els = elements(&std::fs::read_to_string(&path).unwrap());
    let (w, h) = (els[0].num("width"), els[0].num("height"));
    (els, w, h)
}

#[test]
fn categorical_sweeps_are_bars_with_a_legend_inside_the_canvas() {
    let sweeps = ["ddp.comm_hook=none,fp16", "ddp.gradient_as_bucket_view=true,false"];
    let (els, w, h) = sweep_plot("report-sweep-bars", &sweeps);
    assert!(texts(&els).iter().any(|t| t.contains("bars: categorical values")));
    // Four points: four bars (one colour per series), none joined by a line.
    let bars = |fill: &str| {
        els.iter()
            .filter(|e| e.tag == "rect" && e.attr.get("fill").is_some_and(|f| f == fill))
            .count()
    };
    assert_eq!((bars("#0072B2"), bars("#D55E00")), (2 + 1, 2 + 1), "bars and legend swatches");
    // The legend's labels lie wholly inside the canvas (about 6 px a glyph at 13 px).
    for label in
        ["workload.ddp.gradient_as_bucket_view=true", "workload.ddp.gradient_as_bucket_view=false"]
    {
        let e = els.iter().find(|e| e.tag == "text" && e.text == label).expect(label);
        assert!(e.num("x") + 7.0 * label.len() as f64 <= w && e.num("y") + 14.0 <= h, "{e:?}");
    }
}

#[test]
fn a_sweep_says_where_each_points_extra_time_goes() {
    // Issue #48 item 3: per point, the step's parts; per point after the first, what it adds to
    // the first's, part by part (they add up to the step's change); in the table, the JSON
    // and the plot's second panel.
    let sweep = ["simulate", R50, "--sweep", "cluster.nodes=1,2,4"];
    let table = collsim_ok(&sweep);
    assert!(table.contains("where the step goes, ms"), "{table}");
    assert!(table.contains("what each point adds to the first (cluster.nodes=1)"), "{table}");
    assert!(table.contains("  cluster.nodes=4: +"), "{table}");
    let mut args = sweep.to_vec();
    args.extend(["--format", "json"]);
    let v: Value = serde_json::from_str(&collsim_ok(&args)).unwrap();
    let points = v["points"].as_array().unwrap();
    for (i, p) in points.iter().enumerate() {
        let d = p["from_first"].as_object().unwrap();
        let step = d["iteration_time_ms"].as_f64().unwrap();
        let parts: f64 = d
            .iter()
            .filter(|(k, _)| k.ends_with("_ms") && *k != "iteration_time_ms")
            .map(|(_, x)| x.as_f64().unwrap())
            .sum();
        assert!((parts - step).abs() < 1e-6, "point {i}: {parts} against {step}");
        // The same batch a GPU: the per-GPU rate is the first step over this one.
        let rate = d["per_gpu_rate"].as_f64().unwrap();
        let first = points[0]["result"]["iteration_time_ms"].as_f64().unwrap();
        assert!((rate - first / (first + step)).abs() < 1e-9, "{d:?}");
        if i == 0 {
            assert!(step == 0.0 && rate == 1.0, "{d:?}");
        }
    }
    let (els, w, h) = sweep_plot("report-sweep-parts", &["cluster.nodes=1,2,4"]);
    assert!(texts(&els).iter().any(|t| t.contains("where the step goes, ms, at each point")));
    for label in ["compute, FLOP-bound", "exposed communication"] {
        let e = els.iter().find(|e| e.tag == "text" && e.text == label).expect(label);
        assert!(e.num("x") + 7.0 * label.len() as f64 <= w && e.num("y") + 14.0 <= h, "{e:?}");
    }
    // Under the bars, each point's process groups and the tier their traffic crosses, as the
    // table's "process groups" row says them, inside the canvas: one node on NVLink, more on
    // the network.
    let t = texts(&els);
    let line = |point: &str| {
        let e = els.iter().find(|e| e.tag == "text" && e.text.starts_with(point)).expect(point);
        assert!(e.num("x") + 7.0 * e.text.len() as f64 <= w && e.num("y") + 14.0 <= h, "{e:?}");
        e.text.clone()
    };
    assert!(t.contains(&"process groups and the tier their traffic crosses:"), "{t:?}");
    assert!(line("cluster.nodes=1:").contains("(nvlink)"));
    assert!(line("cluster.nodes=4:").contains("on 4 nodes (net"));
}

#[test]
fn numeric_sweeps_stay_lines() {
    let (els, _, _) = sweep_plot("report-sweep-lines", &["ddp.bucket_cap_mb=1,25,100"]);
    assert!(!texts(&els).iter().any(|t| t.contains("bars")));
    assert!(texts(&els).iter().any(|t| t.contains("values in the order given")));
    assert_eq!(els.iter().filter(|e| e.tag == "circle").count(), 3);
}

#[test]
fn validate_plot_has_log_axes_and_an_error_panel() {
    let svg = scratch().join("report-validate.svg");
    let mut args = vec!["validate", "--log", "calibration/data/H100_2N8G_AR_AWSP5_B.log"];
    args.extend(["--topology", "aws-p5", "--nodes", "2", "--gpus-per-node", "8"]);
    args.extend(super::P5_ENV);
    args.extend(["--plot", svg.to_str().unwrap()]);
    collsim_ok(&args);
    let els = elements(&std::fs::read_to_string(&svg).unwrap());
    let t = texts(&els);
    // Size ticks at powers of two from 8 B; busbw ticks at powers of ten from 0.001 GB/s.
    for tick in ["8 B", "64 B", "512 B", "4 KiB", "1 GiB", "0.001", "0.01", "0.1", "1", "10", "100"]
    {
        assert!(t.contains(&tick), "tick {tick} missing from {t:?}");
    }
    assert!(t.iter().any(|s| s.starts_with("prediction error per size: median |error|")));
    assert!(t.contains(&"error (%): predicted vs measured time"));
    // Every measured point sits above the busbw panel's floor: 8 B reads 0.00 GB/s in the log,
    // but the plot takes busbw from the time.
    let floor = els
        .iter()
        .filter(|e| e.tag == "text" && e.text == "0.001")
        .map(|e| e.num("y"))
        .next()
        .unwrap();
    // Measured: the second series colour (palette::SERIES).
    let red: Vec<&El> = els
        .iter()
        .filter(|e| e.tag == "circle" && e.attr.get("fill").is_some_and(|f| f == "#D55E00"))
        .collect();
    assert!(red.len() >= 2 * 31, "measured points and error points: {}", red.len());
    assert!(red.iter().filter(|c| c.num("cy") < 540.0).all(|c| c.num("cy") < floor + 60.0));
}

/// Issue #45: every JSON document collsim writes carries `format_version`, one number for the
/// crate, and its fields change only with it. The fields of each document (paths and types,
/// array elements merged) are kept in tests/data/json-fields.txt under the version they belong
/// to: a change of fields without a bump of `collsim::report::FORMAT_VERSION` fails here. After
/// a bump, `COLLSIM_BLESS=1 cargo test --release --test it json_fields` writes the new list.
#[test]
fn json_fields_change_only_with_the_format_version() {
    fn fields(path: &str, v: &Value, out: &mut std::collections::BTreeSet<String>) {
        let kind = match v {
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        };
        out.insert(format!("{path}: {kind}"));
        match v {
            Value::Array(a) => a.iter().for_each(|x| fields(&format!("{path}[]"), x, out)),
            Value::Object(o) => o.iter().for_each(|(k, x)| fields(&format!("{path}.{k}"), x, out)),
            _ => {}
        }
    }
    let small = "--max-bytes=1KiB";
    let documents: [(&str, &[&str]); 13] = [
        ("simulate", &["simulate", "scenarios/quickstart.toml", small]),
        ("simulate-ddp", &["simulate", "scenarios/resnet50-dgx-a100-1node.toml"]),
        ("simulate-3d", &["simulate", "scenarios/mixtral-ep-dgx-h100-8node.toml"]),
        ("simulate-jobs", &["simulate", "scenarios/two-jobs-shared-spine.toml"]),
        (
            "simulate-sweep",
            &["simulate", "scenarios/quickstart.toml", small, "--sweep", "cluster.nodes=1,2"],
        ),
        (
            "simulate-ddp-sweep",
            &[
                "simulate",
                "scenarios/resnet50-dgx-a100-1node.toml",
                "--sweep",
                "ddp.bucket_cap_mb=1,25",
            ],
        ),
        ("plan", &["plan", "tests/data/plan/small.toml"]),
        ("validate", &["validate", "--log", "calibration/data/H100_1N8G_AR_RING_TOGETHER.log"]),
        ("validate-runs", &["validate", "--runs", "tests/data/training/two-runs.csv"]),
        (
            "validate-manifest",
            &["validate", "--manifest", "calibration/data/manifest.csv", "--no-held-out"],
        ),
        ("explain", &["explain", "--topology", "dgx-h100", "--bytes", "1MiB"]),
        ("topo-show", &["topo", "show", "dgx-h100"]),
        ("presets", &["presets"]),
    ];
    let mut list = format!("format_version {}\n", collsim::report::FORMAT_VERSION);
    for (name, args) in documents {
        let mut args = args.to_vec();
        args.extend(["--format", "json"]);
        let v: Value = serde_json::from_str(&super::collsim_ok(&args)).unwrap();
        assert_eq!(v["format_version"], collsim::report::FORMAT_VERSION, "{name}");
        let mut set = std::collections::BTreeSet::new();
        fields(name, &v, &mut set);
        for f in set {
            list.push_str(&f);
            list.push('\n');
        }
    }
    let kept_path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/json-fields.txt");
    if std::env::var_os("COLLSIM_BLESS").is_some() {
        std::fs::write(kept_path, &list).unwrap();
        return;
    }
    let kept = std::fs::read_to_string(kept_path).unwrap_or_default();
    if kept == list {
        return;
    }
    let version = |t: &str| t.lines().next().unwrap_or_default().to_string();
    let (old, new): (std::collections::BTreeSet<&str>, std::collections::BTreeSet<&str>) =
        (kept.lines().skip(1).collect(), list.lines().skip(1).collect());
    let gone: Vec<&&str> = old.difference(&new).take(5).collect();
    let added: Vec<&&str> = new.difference(&old).take(5).collect();
    assert_ne!(
        version(&kept),
        version(&list),
        "JSON fields changed without a new format_version (gone: {gone:?}; added: {added:?}): bump collsim::report::FORMAT_VERSION, then run with COLLSIM_BLESS=1"
    );
    panic!(
        "{} is for {}; rerun with COLLSIM_BLESS=1 to write the fields of {}",
        kept_path,
        version(&kept),
        version(&list)
    );
}

#[test]
fn a_collective_plots_busbw_and_time_against_size_one_line_per_point() {
    // Issue #49 item 4: `simulate --plot` for a collective: busbw and time against size on log
    // axes, one line per point of a --sweep (here one per algorithm), each in its own colour,
    // the legend inside the canvas.
    let path = scratch().join("report-collective.svg");
    let args = ["simulate", "scenarios/quickstart.toml", "-e", "64M"];
    let sweep = ["--sweep", "nccl.NCCL_ALGO=Ring,NVLS", "--plot", path.to_str().unwrap()];
    collsim_ok(&[&args[..], &sweep[..]].concat());
    let els = elements(&std::fs::read_to_string(&path).unwrap());
    let (w, h) = (els[0].num("width"), els[0].num("height"));
    let t = texts(&els);
    for label in ["busbw (GB/s, log axis)", "time (µs, log axis)", "8 B", "2 KiB", "32 MiB"] {
        assert!(t.contains(&label), "{label} missing from {t:?}");
    }
    for label in ["nccl.NCCL_ALGO=Ring", "nccl.NCCL_ALGO=NVLS"] {
        let e = els.iter().find(|e| e.tag == "text" && e.text == label).expect(label);
        assert!(e.num("x") + 7.0 * label.len() as f64 <= w && e.num("y") + 14.0 <= h, "{e:?}");
    }
    // Two lines in each panel and their two legend swatches, two colours, each its own: 24
    // sizes a line, each a point, and a point on each swatch.
    let lines: Vec<&El> = els
        .iter()
        .filter(|e| e.tag == "polyline" && e.attr.get("stroke-width").is_some_and(|s| s == "2"))
        .collect();
    assert_eq!(lines.len(), 4 + 2, "{lines:?}");
    let colours: std::collections::BTreeSet<&String> =
        lines.iter().filter_map(|e| e.attr.get("stroke")).collect();
    assert_eq!(colours.len(), 2, "{colours:?}");
    assert_eq!(els.iter().filter(|e| e.tag == "circle").count(), 4 * 24 + 2);
    // Past seven lines the colours repeat and the markers change; a long label is broken to
    // fit; a point with nothing to draw says so.
    let many = scratch().join("report-collective-many.svg");
    let sweep = [
        "--sweep",
        "nccl.NCCL_MAX_NCHANNELS=1,2,3,4,5,6,7,8",
        "--sweep",
        "nccl.NCCL_BUFFSIZE=4194304,8388608",
        "--sweep",
        "cluster.gpus_per_node=1,8",
        "--plot",
        many.to_str().unwrap(),
    ];
    collsim_ok(&[&args[..], &sweep[..]].concat());
    let els = elements(&std::fs::read_to_string(&many).unwrap());
    let (w, h) = (els[0].num("width"), els[0].num("height"));
    assert!(els.iter().any(|e| e.tag == "polygon"), "triangle markers past seven lines");
    for e in els.iter().filter(|e| e.tag == "text" && e.text.starts_with("nccl.")) {
        assert!(e.num("x") + 7.0 * e.text.len() as f64 <= w && e.num("y") + 14.0 <= h, "{e:?}");
    }
    assert!(texts(&els).iter().any(|t| t.contains("nothing to draw")), "{:?}", texts(&els));
    // One scenario without --sweep: one line, named by what it runs.
    let one = scratch().join("report-collective-one.svg");
    collsim_ok(&[&args[..], &["--plot", one.to_str().unwrap()]].concat());
    let els = elements(&std::fs::read_to_string(&one).unwrap());
    let t = texts(&els);
    assert!(t.iter().any(|s| s.starts_with("all_reduce on 1 x dgx-h100 (8 GPUs)")), "{t:?}");
}

#[test]
fn a_step_plot_is_titled_with_its_kind() {
    // Issue #49 item 7: an FSDP step is titled "FSDP step", not "DDP step"; a sweep's plot
    // names no kind it may not be.
    let path = scratch().join("report-fsdp-title.svg");
    collsim_ok(&[
        "simulate",
        "scenarios/llama7b-fsdp-p5-16node.toml",
        "--plot",
        path.to_str().unwrap(),
    ]);
    let els = elements(&std::fs::read_to_string(&path).unwrap());
    assert!(texts(&els).iter().any(|t| t.starts_with("FSDP step ")), "{:?}", texts(&els));
    assert!(!texts(&els).iter().any(|t| t.starts_with("DDP step")));
    let (els, _, _) = sweep_plot("report-sweep-title", &["ddp.bucket_cap_mb=1,25"]);
    assert!(texts(&els).iter().any(|t| t.starts_with("training step time against")));
}

#[test]
fn a_cross_product_keeps_going_past_a_point_that_cannot_run() {
    // Issue #49 item 5: ZeRO stage 3 with overlap_comm = false is refused; the other three
    // points of the product still run, and the report says which point did not and why.
    let base = ["simulate", "scenarios/llama7b-zero2-p5-16node.toml"];
    let sweep = ["--sweep", "zero.stage=2,3", "--sweep", "zero.overlap_comm=true,false"];
    let table = collsim_ok(&[&base[..], &sweep[..]].concat());
    assert!(table.contains("points that could not run (1):"), "{table}");
    assert!(
        table.contains("  workload.zero.stage=3 workload.zero.overlap_comm=false: "),
        "{table}"
    );
    let v: Value =
        serde_json::from_str(&collsim_ok(&[&base[..], &sweep[..], &["--format", "json"]].concat()))
            .unwrap();
    assert_eq!(v["points"].as_array().unwrap().len(), 3);
    let failed = v["failed"].as_array().unwrap();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["point"]["workload.zero.stage"], "3");
    assert!(failed[0]["error"].as_str().unwrap().contains("overlap_comm"));
    // Where no point can run, the first point's error is the run's.
    let none = ["--sweep", "zero.stage=3", "--sweep", "zero.overlap_comm=false"];
    super::cli_errors::fails_with(
        &[&base[..], &none[..]].concat(),
        &["--sweep point", "overlap_comm"],
    );
}

#[test]
fn table_columns_are_as_wide_as_their_widest_cell() {
    // Issue #49 item 6: NVLS_TREE is wider than the algo column's header; the proto column
    // still starts where its header does on every row.
    let out = super::collsim_ok(&[
        "simulate",
        "--topology",
        "dgx-h100",
        "--nodes",
        "4",
        "-b",
        "64M",
        "-e",
        "1G",
        "-f",
        "4",
    ]);
    let header = out.lines().find(|l| l.contains("NCCL would pick")).unwrap();
    let at = header.find("proto").unwrap();
    let rows: Vec<&str> = out.lines().filter(|l| l.contains(" SIMPLE ")).collect();
    assert!(rows.iter().any(|r| r.contains("NVLS_TREE")), "{out}");
    for r in rows {
        assert_eq!(r.get(at..at + 6), Some("SIMPLE"), "{header}\n{r}");
    }
}
