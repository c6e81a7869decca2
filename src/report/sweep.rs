//! `simulate --sweep`: a scenario at every point of the swept keys, as a table, JSON or CSV. A
//! DDP scenario gives one step per point; a collective sweep one row per point and size.

use std::io::{self, Write};

use serde_json::{Value, json};

use super::ddp::SweepPoint;
use super::fit_number;
use crate::workload::sweep::Row;

/// One point of a collective sweep: the keys set and the rows there.
pub type RowsPoint = (Vec<(String, String)>, Vec<Row>);

fn point_object(point: &[(String, String)]) -> Value {
    Value::Object(point.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect())
}

/// "key=value key=value".
pub(crate) fn point_label(point: &[(String, String)]) -> String {
    point.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
}

fn keys(point: Option<&[(String, String)]>) -> Vec<String> {
    point.map_or(Vec::new(), |p| p.iter().map(|(k, _)| k.clone()).collect())
}

/// A point of a sweep that could not run, with why (an invalid combination of values).
pub type FailedPoint = (Vec<(String, String)>, String);

fn write_json(
    scenario: &str,
    swept: Vec<String>,
    points: Vec<Value>,
    failed: &[FailedPoint],
    out: &mut dyn Write,
) -> io::Result<()> {
    let failed: Vec<Value> =
        failed.iter().map(|(p, why)| json!({"point": point_object(p), "error": why})).collect();
    let doc = json!({
        "scenario": scenario,
        "swept": swept,
        "points": points,
        "failed": failed,
    });
    super::write_json(&doc, out)
}

/// The points of a sweep that could not run, each with why, after its table (nothing where
/// every point ran).
pub fn failed_table(failed: &[FailedPoint], out: &mut dyn Write) -> io::Result<()> {
    if failed.is_empty() {
        return Ok(());
    }
    writeln!(out, "\npoints that could not run ({}):", failed.len())?;
    for (p, why) in failed {
        writeln!(out, "  {}: {why}", point_label(p))?;
    }
    Ok(())
}

/// A DDP sweep as JSON: the scenario file, the swept keys and per point its values and the
/// step (timeline left to `--trace`), and the points that could not run with why.
pub fn ddp_json(
    scenario: &str,
    rows: &[SweepPoint],
    failed: &[FailedPoint],
    out: &mut dyn Write,
) -> io::Result<()> {
    let mut points = Vec::new();
    for (point, r, mem) in rows {
        let mut v = serde_json::to_value(r).map_err(io::Error::other)?;
        let mem = serde_json::to_value(mem).map_err(io::Error::other)?;
        if let Some(o) = v.as_object_mut() {
            o.remove("timeline");
            // As a single step's JSON carries it.
            o.insert("memory".into(), mem);
        }
        let mut p = json!({"point": point_object(point), "result": v});
        // What it adds to the first point's step, part by part, and its per-GPU rate.
        if let (Some(first), Some(o)) = (rows.first(), p.as_object_mut()) {
            let extra = super::ddp::from_first(r, &first.1);
            let mut d = serde_json::Map::new();
            d.insert("iteration_time_ms".into(), json!(extra.iteration_ms));
            for (_, key, ms) in extra.parts {
                d.insert(key.into(), json!(ms));
            }
            d.insert("per_gpu_rate".into(), json!(super::ddp::per_gpu_rate(r, &first.1)));
            o.insert("from_first".into(), Value::Object(d));
        }
        points.push(p);
    }
    write_json(scenario, keys(rows.first().map(|r| r.0.as_slice())), points, failed, out)
}

/// A DDP sweep as CSV: the swept keys, then the step's figures and its memory per GPU (bytes;
/// empty for a replayed list of calls), one line per point.
pub fn ddp_csv(rows: &[SweepPoint], out: &mut dyn Write) -> io::Result<()> {
    let mut w = ::csv::Writer::from_writer(out);
    let mut head = keys(rows.first().map(|r| r.0.as_slice()));
    head.extend(
        [
            "iteration_time_ms",
            "first_iteration_ms",
            "forward_ms",
            "backward_ms",
            "compute_ms",
            "comm_ms",
            "exposed_comm_ms",
            "overlap_fraction",
            "compute_slowdown",
            "samples_per_s",
            "scaling_efficiency",
            "world",
        ]
        .map(String::from),
    );
    // The breakdown's parts but exposed communication (a column already), and the GEMM rate.
    let parts = |r: &crate::workload::ddp::StepResult| {
        let b = r.breakdown.parts();
        b.into_iter().filter(|p| p.1 != "exposed_comm_ms").collect::<Vec<_>>()
    };
    if let Some((_, r, _)) = rows.first() {
        head.extend(parts(r).iter().map(|p| p.1.to_string()));
        head.push("gemm_tflops".into());
        head.push("memory_bytes".into());
    }
    w.write_record(&head).map_err(io::Error::other)?;
    for (point, r, mem) in rows {
        let mut rec: Vec<String> = point.iter().map(|(_, v)| v.clone()).collect();
        rec.extend(
            [
                r.iteration_time_ms,
                r.first_iteration_ms,
                r.forward_ms,
                r.backward_ms,
                r.compute_ms,
                r.comm_ms,
                r.exposed_comm_ms,
                r.overlap_fraction,
                r.compute_slowdown,
                r.samples_per_s,
                r.scaling_efficiency,
            ]
            .map(|x| x.to_string()),
        );
        rec.push(r.world.to_string());
        rec.extend(parts(r).iter().map(|p| p.2.to_string()));
        rec.push(r.gemm_tflops.to_string());
        // A replayed list of calls (the one step without a known memory) leaves out what it
        // does not say.
        if mem.is_none() {
            for (h, v) in head.iter().zip(rec.iter_mut()) {
                if super::ddp::REPLAY_UNKNOWN.contains(&h.as_str()) {
                    v.clear();
                }
            }
        }
        rec.push(mem.as_ref().map_or(String::new(), |m| m.total.to_string()));
        w.write_record(&rec).map_err(io::Error::other)?;
    }
    w.flush()
}

/// A collective sweep over keys as JSON: per point its values and the rows `--format json`
/// prints for one run.
pub fn rows_json(
    scenario: &str,
    rows: &[RowsPoint],
    failed: &[FailedPoint],
    out: &mut dyn Write,
) -> io::Result<()> {
    let mut points = Vec::new();
    for (point, r) in rows {
        let v = serde_json::to_value(r).map_err(io::Error::other)?;
        points.push(json!({"point": point_object(point), "rows": v}));
    }
    write_json(scenario, keys(rows.first().map(|r| r.0.as_slice())), points, failed, out)
}

/// A row's `--format csv` header and fields, in that layout's column order.
fn csv_fields(row: &Row) -> io::Result<(Vec<String>, Vec<String>)> {
    let mut w = ::csv::Writer::from_writer(Vec::new());
    w.serialize(row).map_err(io::Error::other)?;
    let bytes = w.into_inner().map_err(|e| io::Error::other(e.to_string()))?;
    let mut r = ::csv::Reader::from_reader(bytes.as_slice());
    let head = r.headers().map_err(io::Error::other)?.iter().map(String::from).collect();
    let fields = match r.records().next() {
        Some(rec) => rec.map_err(io::Error::other)?.iter().map(String::from).collect(),
        None => Vec::new(),
    };
    Ok((head, fields))
}

/// A collective sweep over keys as CSV: the swept keys, then the columns of `--format csv`.
pub fn rows_csv(rows: &[RowsPoint], out: &mut dyn Write) -> io::Result<()> {
    let mut w = ::csv::Writer::from_writer(out);
    let mut wrote_head = false;
    for (point, rs) in rows {
        for row in rs {
            let (head, fields) = csv_fields(row)?;
            if !wrote_head {
                let mut h: Vec<String> = point.iter().map(|(k, _)| k.clone()).collect();
                h.extend(head);
                w.write_record(&h).map_err(io::Error::other)?;
                wrote_head = true;
            }
            let mut rec: Vec<String> = point.iter().map(|(_, v)| v.clone()).collect();
            rec.extend(fields);
            w.write_record(&rec).map_err(io::Error::other)?;
        }
    }
    w.flush()
}

/// The swept values as right-aligned columns, each as wide as its key or its widest value:
/// the header's start and each point's.
pub(crate) fn key_columns(points: &[&[(String, String)]]) -> (String, Vec<String>) {
    let keys = keys(points.first().copied());
    let width =
        |i: usize| points.iter().map(|p| p[i].1.len()).chain([keys[i].len()]).max().unwrap_or(0);
    let head = keys.iter().enumerate().map(|(i, k)| format!("{k:>w$}  ", w = width(i))).collect();
    let leads = points
        .iter()
        .map(|p| {
            p.iter().enumerate().map(|(i, (_, v))| format!("{v:>w$}  ", w = width(i))).collect()
        })
        .collect();
    (head, leads)
}

/// A collective sweep over keys as a table: the swept values, then per size its time, busbw
/// and what ran.
pub fn rows_table(rows: &[RowsPoint], out: &mut dyn Write) -> io::Result<()> {
    let points: Vec<&[(String, String)]> = rows.iter().map(|r| r.0.as_slice()).collect();
    let (head, leads) = key_columns(&points);
    writeln!(
        out,
        "{head}{:>10} {:>11} {:>9} {:>9}  {:<9} {:<6} {:>3}",
        "size", "time(us)", "algbw", "busbw", "algo", "proto", "ch"
    )?;
    for ((_, rs), lead) in rows.iter().zip(&leads) {
        for r in rs {
            writeln!(
                out,
                "{lead}{:>10} {:>11} {:>9} {:>9}  {:<9} {:<6} {:>3}",
                crate::units::Bytes::new(r.size_bytes).to_string(),
                fit_number(r.time_us, 11),
                fit_number(r.algbw, 9),
                fit_number(r.busbw, 9),
                r.algo,
                r.proto,
                r.channels
            )?;
        }
    }
    Ok(())
}
