//! What the command line shows and writes: usage errors (exit 2), one-line warnings, progress bars, and outputs staged until the run succeeds.

use std::io::Write;
use std::path::Path;

use anyhow::{Result, anyhow};

use collsim::report;

/// A command line that cannot run as given (a missing input, flags that do not go together, an
/// output that would replace an input): exit 2, as clap's own usage errors.
#[derive(Debug)]
pub(crate) struct Usage(String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

pub(crate) fn usage(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Usage(msg.into()))
}

/// Whether `e` is a write to a closed pipe.
pub(crate) fn broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// This run's output files, complete and waiting: [`main`] moves them into place together once
/// the run has succeeded (or removes them when it failed).
pub(crate) static OUTPUTS: std::sync::Mutex<report::output::Outputs> =
    std::sync::Mutex::new(report::output::Outputs::new());

pub(crate) fn outputs() -> std::sync::MutexGuard<'static, report::output::Outputs> {
    OUTPUTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Stages `bytes` as the output `flag` names, written at the end of a successful run.
pub(crate) fn stage(flag: &str, path: &Path, bytes: &[u8]) -> Result<()> {
    let ready = report::output::Staged::bytes(path, bytes)?;
    outputs().add(flag, ready);
    Ok(())
}

/// Stages an SVG drawn by `draw` as `flag`'s output.
pub(crate) fn stage_svg(
    flag: &str,
    path: &Path,
    draw: impl FnOnce(&mut String) -> Result<(), String>,
) -> Result<()> {
    let mut svg = String::new();
    draw(&mut svg).map_err(|e| anyhow!("{flag} {}: {e}", path.display()))?;
    // Control characters a name brought in are no XML: written escaped, as in every report.
    stage(flag, path, &report::output::escape_controls(svg.as_bytes()))
}

/// Where a report goes: stdout, or a file written whole or not at all.
pub(crate) enum Out {
    Stdout(report::output::Stdout),
    File(report::output::Staged),
}

impl Write for Out {
    /// Control characters a name brought in (an escape sequence in a job or topology name, a
    /// carriage return in a price source) are written escaped, as `\u{1b}`: a report never
    /// drives the terminal it is read on. Reports hold no control characters of their own but
    /// newlines and tabs.
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let escaped = report::output::escape_controls(buf);
        match self {
            Out::Stdout(w) => w.write_all(&escaped)?,
            Out::File(w) => w.write_all(&escaped)?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Out::Stdout(w) => w.flush(),
            Out::File(w) => w.flush(),
        }
    }
}

impl Out {
    /// Flushes the report; a file is complete, and moved into place with the run's others.
    pub(crate) fn finish(self) -> Result<()> {
        match self {
            Out::Stdout(mut w) => Ok(w.flush()?),
            Out::File(f) => {
                let ready = f.finish()?;
                outputs().add("-o", ready);
                Ok(())
            }
        }
    }
}

pub(crate) fn open_output(path: Option<&Path>) -> Result<Out> {
    Ok(match path {
        Some(p) => Out::File(report::output::Staged::create(p)?),
        None => Out::Stdout(report::output::Stdout::new()),
    })
}

/// A message cut in the middle when it echoes a huge input value: its start (file, line,
/// field) and its end (what is wrong) are kept, and the line stays readable.
pub(crate) fn shorten(msg: &str) -> String {
    const HEAD: usize = 300;
    const TAIL: usize = 200;
    let chars = msg.chars().count();
    if chars <= HEAD + TAIL + 100 {
        return msg.to_string();
    }
    let head: String = msg.chars().take(HEAD).collect();
    let tail: String = msg.chars().skip(chars - TAIL).collect();
    format!("{head}… ({} characters cut) …{tail}", chars - HEAD - TAIL)
}

/// `msg` on one line: control characters a path or a value brought in (a newline in a file
/// name) written as escapes, so that an error or a warning stays the one line it is meant to be.
pub(crate) fn one_line(msg: &str) -> String {
    if !msg.chars().any(|c| c.is_control() && c != '\t') {
        return msg.to_string();
    }
    msg.chars()
        .map(
            |c| {
                if c.is_control() && c != '\t' {
                    c.escape_default().collect()
                } else {
                    c.to_string()
                }
            },
        )
        .collect()
}

/// Prints `msg` on stderr as one line of collsim's ([`one_line`]).
pub(crate) fn say(msg: String) {
    eprintln!("collsim: {}", one_line(&msg));
}

/// The most warnings of one kind printed one a line.
pub(crate) const MAX_WARNINGS: usize = 10;

/// `text` cut to its first 80 characters (with how many more there were), for echoing input
/// in a message.
pub(crate) fn clip(text: &str) -> String {
    const KEEP: usize = 80;
    match text.char_indices().nth(KEEP) {
        Some((at, _)) => {
            format!("{}… ({} more characters)", &text[..at], text[at..].chars().count())
        }
        None => text.to_string(),
    }
}

/// A progress bar on stderr for runs that take a while, with the time they may still take
/// (indicatif's estimate from the rate so far): drawn only when stderr is a terminal and once
/// the run has gone on for a second; stdout is never touched.
pub(crate) struct Progress {
    bar: indicatif::ProgressBar,
    /// Set when the bar is dropped: the timer that would draw it then leaves it hidden.
    done: std::sync::Arc<std::sync::Mutex<bool>>,
}

impl Progress {
    /// A bar of `len` steps, drawn on stderr (when it is a terminal) once the run has taken a
    /// second, whether or not a step has finished by then, and redrawn twice a second so that
    /// its clock and estimate move between steps.
    pub(crate) fn new(len: u64, what: &str) -> Progress {
        use std::io::IsTerminal;
        let bar = indicatif::ProgressBar::hidden();
        bar.set_length(len);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{msg} [{elapsed_precise}] {wide_bar} {pos}/{len}, about {eta} left",
        ) {
            bar.set_style(style);
        }
        bar.set_message(what.to_string());
        let done = std::sync::Arc::new(std::sync::Mutex::new(false));
        if std::io::stderr().is_terminal() {
            let (bar, done) = (bar.clone(), done.clone());
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_secs(1));
                let done = done.lock().unwrap_or_else(|e| e.into_inner());
                if !*done {
                    bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
                    bar.enable_steady_tick(std::time::Duration::from_millis(500));
                }
            });
        }
        Progress { bar, done }
    }

    pub(crate) fn tick(&self) {
        self.bar.inc(1);
    }
}

/// A spinner on stderr, when it is a terminal, for work whose length is not known ahead
/// (calibrate's fit); hidden otherwise. Clear it with `finish_and_clear`.
pub(crate) fn spinner(what: &str) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let s = indicatif::ProgressBar::new_spinner();
    s.set_message(what.to_string());
    s.enable_steady_tick(std::time::Duration::from_millis(120));
    s
}

/// Ticks a progress bar when it goes out of scope (whichever way a closure returns).
pub(crate) struct TickOnDrop<'a>(pub(crate) &'a Progress);

impl Drop for TickOnDrop<'_> {
    fn drop(&mut self) {
        self.0.tick();
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        *self.done.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.bar.finish_and_clear();
    }
}

/// A value parser that takes any text (collsim's own check then names the valid values, with a
/// "did you mean", in one line) and tells `--help` and the shell completion scripts which
/// names there are.
#[derive(Clone)]
pub(crate) struct Names(pub(crate) fn() -> Vec<&'static str>);

impl clap::builder::TypedValueParser for Names {
    type Value = String;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<String, clap::Error> {
        clap::builder::StringValueParser::new().parse_ref(cmd, arg, value)
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new((self.0)().into_iter().map(clap::builder::PossibleValue::new)))
    }
}

/// The topology presets and the instance types that name them (`--topology`; a path to a
/// topology file is taken too).
pub(crate) fn topology_names() -> Vec<&'static str> {
    let mut out = collsim::config::preset_names();
    out.extend(collsim::config::INSTANCE_TYPES.iter().map(|(t, _)| *t));
    out
}

/// NCCL_ALGO's and NCCL_PROTO's values as NCCL's docs spell them (`--nccl`, which takes any
/// NCCL_* variable: these are what completion offers).
pub(crate) fn nccl_names() -> Vec<&'static str> {
    collsim::comm::NCCL_SETTINGS.to_vec()
}

/// What completion offers `--sweep` (which takes any key): each model preset, each NCCL
/// algorithm and protocol, and the topology presets.
pub(crate) fn sweep_names() -> Vec<&'static str> {
    static NAMES: std::sync::LazyLock<Vec<&'static str>> = std::sync::LazyLock::new(|| {
        let models =
            collsim::workload::models::PRESETS.iter().map(|m| format!("workload.model={m}"));
        let nccl = nccl_names().into_iter().map(|n| format!("nccl.{n}"));
        let topologies =
            collsim::config::preset_names().into_iter().map(|t| format!("cluster.topology={t}"));
        models.chain(nccl).chain(topologies).map(|s| &*s.leak()).collect()
    });
    NAMES.clone()
}

/// nccl-tests' collectives.
pub(crate) fn collective_names() -> Vec<&'static str> {
    collsim::comm::Collective::NAMES.to_vec()
}

/// nccl-tests' data types.
pub(crate) fn dtype_names() -> Vec<&'static str> {
    collsim::workload::DataType::NAMES.to_vec()
}

/// nccl-tests' reductions.
pub(crate) fn op_names() -> Vec<&'static str> {
    collsim::workload::ReduceOp::NAMES.to_vec()
}
