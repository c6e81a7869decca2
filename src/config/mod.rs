//! Configuration files, read in two stages: raw serde structs that mirror the TOML
//! (`deny_unknown_fields`, values kept as written with their spans), then validation into the
//! typed model ([`crate::hw::NodeSpec`], [`Scenario`], [`crate::collective::TimingParams`]).
//!
//! Every error names the file, the line and column, and the field path. Nothing here touches
//! the filesystem except [`load_text`] and [`load_bytes`]; parsing works on strings.

mod flags;
pub mod import;
mod jobs;
mod placement;
pub mod plan;
mod profile;
mod raw;
mod scenario;
mod topology;

pub use flags::{FlagError, Flags, Ignored, check_nodes, check_ranks};
pub use placement::{PlacementSpec, Policy, Tiers, nodes_per_rack, parse_placement_tiers};
pub use plan::{PlanSpec, parse_plan, parse_plan_with};
pub use profile::{
    CORRECTION_FACTOR_RANGE, DEFAULT_PROFILE, MAX_BANDWIDTH_FRACTION, MAX_CORRECTION_RESIDUAL,
    MAX_PROFILE_LATENCY, MIN_BANDWIDTH_FRACTION, parse_profile,
};
pub use scenario::{
    MAX_GRAD_ACCUMULATION, MAX_MICRO_BATCH, MAX_NODES, MAX_RANKS, MAX_SHARDED_ACCUMULATION,
    Scenario, Workload, bucket_cap_bytes, parse_scenario,
};
pub use topology::{
    INSTANCE_TYPES, TopologySource, gpu_library, parse_topology, parse_transports, preset_for,
    preset_names, resolve_topology, topology_text, transport_library,
};

use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

use crate::units::UnitError;

/// An input error: what is wrong and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{file}: cannot read: {reason}")]
    Io {
        /// The path as given.
        file: String,
        /// The operating system's reason.
        reason: String,
    },
    /// A problem at a known place in a file.
    #[error("{file}:{line}:{col}: {msg}")]
    At {
        /// The file name.
        file: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        col: usize,
        /// What is wrong, starting with the field path where there is one.
        msg: String,
    },
    /// A problem with a whole file or a missing field.
    #[error("{file}: {msg}")]
    File {
        /// The file name.
        file: String,
        /// What is wrong.
        msg: String,
    },
}

/// The largest input file collsim reads (scenario, topology, profile, plan, log, manifest,
/// XML, results): far above any real one, small enough that `/dev/zero` is refused in a
/// fraction of a second instead of being read until memory runs out.
pub const MAX_INPUT_BYTES: u64 = 256 << 20;

/// Reads a file to a string, with a [`ConfigError::Io`] naming it on failure; a file over
/// [`MAX_INPUT_BYTES`] (gzipped or, once unpacked) or not UTF-8 text is an error naming it,
/// read no further than the cap.
pub fn load_text(path: &Path) -> Result<String, ConfigError> {
    read_capped(path).map_err(|reason| ConfigError::Io { file: path.display().to_string(), reason })
}

/// Reads a file's bytes (a gzip file's once unpacked), with a [`ConfigError::Io`] naming it
/// on failure; a file over [`MAX_INPUT_BYTES`] is an error, read no further than the cap.
pub fn load_bytes(path: &Path) -> Result<Vec<u8>, ConfigError> {
    read_bytes_capped(path)
        .map_err(|reason| ConfigError::Io { file: path.display().to_string(), reason })
}

/// [`load_text`]'s reading, with the reason as text.
pub(crate) fn read_capped(path: &Path) -> Result<String, String> {
    let bytes = read_bytes_capped(path)?;
    String::from_utf8(bytes).map_err(|e| {
        format!("not UTF-8 text (invalid byte at offset {})", e.utf8_error().valid_up_to())
    })
}

/// A file on disk, whatever name it is reached by: its device and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId {
    dev: u64,
    ino: u64,
}

impl FileId {
    /// The file `m` describes.
    pub fn of(m: &std::fs::Metadata) -> FileId {
        use std::os::unix::fs::MetadataExt;
        FileId { dev: m.dev(), ino: m.ino() }
    }
}

/// Every regular file this process has read through [`load_text`] or [`load_bytes`], with the
/// name it was read by, in order: what a run's outputs must not replace.
static READ: std::sync::Mutex<Vec<(std::path::PathBuf, FileId)>> =
    std::sync::Mutex::new(Vec::new());

/// The regular files read so far, each once, with the name it was first read by.
pub fn files_read() -> Vec<(std::path::PathBuf, FileId)> {
    READ.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// [`load_bytes`]'s reading, with the reason as text.
fn read_bytes_capped(path: &Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    if let Ok(m) = file.metadata()
        && m.is_file()
    {
        let id = FileId::of(&m);
        let mut read = READ.lock().unwrap_or_else(|e| e.into_inner());
        if !read.iter().any(|(_, i)| *i == id) {
            read.push((path.to_path_buf(), id));
        }
    }
    let mut bytes = Vec::new();
    file.take(MAX_INPUT_BYTES + 1).read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    // A gzip file (PyTorch's trace handler writes `.json.gz`) is read as what it holds.
    if bytes.starts_with(&[0x1f, 0x8b]) && bytes.len() as u64 <= MAX_INPUT_BYTES {
        let mut text = Vec::new();
        // Every member, as zcat reads them (`cat a.gz b.gz`, pigz and bgzip write several).
        flate2::read::MultiGzDecoder::new(&bytes[..])
            .take(MAX_INPUT_BYTES + 1)
            .read_to_end(&mut text)
            .map_err(|e| format!("gzip: {e}"))?;
        bytes = text;
    }
    if bytes.len() as u64 > MAX_INPUT_BYTES {
        return Err(format!(
            "larger than {} (collsim reads input files up to that size)",
            crate::units::Bytes::new(MAX_INPUT_BYTES)
        ));
    }
    Ok(bytes)
}

/// A source text with its name, for turning byte spans into line and column.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Source<'a> {
    pub name: &'a str,
    pub text: &'a str,
}

impl Source<'_> {
    /// An error at byte offset `at`.
    pub fn error_at(&self, at: usize, msg: impl Into<String>) -> ConfigError {
        let (line, col) = self.line_col(at);
        ConfigError::At { file: self.name.to_string(), line, col, msg: msg.into() }
    }

    /// `file:line:col` of byte offset `at`, for an error found after parsing.
    pub fn place(&self, at: usize) -> String {
        let (line, col) = self.line_col(at);
        format!("{}:{line}:{col}", self.name)
    }

    fn line_col(&self, at: usize) -> (usize, usize) {
        let before = &self.text[..at.min(self.text.len())];
        let line = before.matches('\n').count() + 1;
        let col = before.rfind('\n').map_or(before.len(), |p| before.len() - p - 1) + 1;
        (line, col)
    }

    /// An error about the file as a whole.
    pub fn error(&self, msg: impl Into<String>) -> ConfigError {
        ConfigError::File { file: self.name.to_string(), msg: msg.into() }
    }

    /// Parses the text as TOML into `T`, mapping syntax and shape errors to one line.
    pub fn parse<T: for<'de> Deserialize<'de>>(&self) -> Result<T, ConfigError> {
        toml::from_str(self.text).map_err(|e| {
            let msg = e.message().trim().replace('\n', " ");
            match e.span() {
                Some(span) => {
                    // Name the key when the error points at a `key = value` line's value.
                    let at = span.start.min(self.text.len());
                    let line_start = self.text[..at].rfind('\n').map_or(0, |p| p + 1);
                    let before = &self.text[line_start..at];
                    let key = before.split_once('=').map(|(k, _)| k.trim()).filter(|k| {
                        !k.is_empty() && !k.starts_with('#') && !msg.contains(&format!("`{k}`"))
                    });
                    // Or the table when it points at a `[table]` / `[[table]]` header.
                    let line = self.text[line_start..].lines().next().unwrap_or("").trim();
                    let header = (key.is_none() && line.starts_with('['))
                        .then(|| line.trim_start_matches('[').split(']').next().unwrap_or(""))
                        .map(str::trim)
                        .filter(|h| !h.is_empty() && !msg.contains(&format!("`{h}`")));
                    // A key is named with the table it is in: the last header above it.
                    let table = self.text[..line_start]
                        .lines()
                        .rev()
                        .map(str::trim)
                        .find(|l| l.starts_with('['))
                        .map(|l| l.trim_start_matches('[').split(']').next().unwrap_or("").trim())
                        .filter(|t| !t.is_empty());
                    match (key, table, header) {
                        (Some(k), Some(t), _) => {
                            self.error_at(span.start, format!("{t}.{k}: {msg}"))
                        }
                        (Some(k), None, _) | (None, _, Some(k)) => {
                            self.error_at(span.start, format!("{k}: {msg}"))
                        }
                        (None, _, None) => self.error_at(span.start, msg),
                    }
                }
                None => self.error(msg),
            }
        })
    }

    /// Validates a spanned value with `f`, naming `field` and the value's position on error.
    pub fn check<T, U>(
        &self,
        field: &str,
        v: &Spanned<T>,
        f: impl FnOnce(&T) -> Result<U, String>,
    ) -> Result<U, ConfigError> {
        f(v.get_ref()).map_err(|msg| self.error_at(v.span().start, format!("{field}: {msg}")))
    }
}

/// "unknown data type "flaot" (did you mean float?; valid: int8, ..., f8e5m2)": what `given`
/// is not, the nearest of `valid` by edit distance where one is near (any letter case), and the
/// valid names.
pub fn unknown_name(what: &str, given: &str, valid: &[&str]) -> String {
    let lower = given.trim().to_ascii_lowercase();
    let nearest = valid
        .iter()
        .map(|v| (strsim::levenshtein(&lower, &v.to_ascii_lowercase()), *v))
        .filter(|&(d, v)| d <= (v.len() / 3).max(2))
        .min();
    let hint = nearest.map_or(String::new(), |(_, v)| format!("did you mean {v}?; "));
    format!("unknown {what} {given:?} ({hint}valid: {})", valid.join(", "))
}

/// Whether `text` is one line of plain text, as names and descriptions must be (they are
/// printed): no control characters (a newline, a tab, an escape) and no bidirectional
/// controls (U+200E, U+200F, U+202A to U+202E, U+2066 to U+2069), which reorder what a
/// terminal shows after them.
pub(crate) fn plain_text(text: &str) -> Result<(), String> {
    match text.chars().find(|&c| unprintable(c)) {
        Some(c) => Err(format!(
            "{text:?} holds the character U+{:04X}: names and descriptions are one line of \
             plain text",
            c as u32
        )),
        None => Ok(()),
    }
}

/// A control character, or a bidirectional control ([`plain_text`]).
pub(crate) fn unprintable(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// A quantity as written in a file: text with a unit, or a bare number (which is an error
/// wherever a unit belongs, reported with its position).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(crate) enum RawQuantity {
    /// "400 Gb/s", "1.5 us", "64 MiB".
    Text(String),
    /// A bare integer.
    Int(i64),
    /// A bare float.
    Float(f64),
}

impl RawQuantity {
    /// Parses with `parse`, turning bare numbers into the unit error they deserve.
    pub fn parse_with<U>(&self, parse: impl Fn(&str) -> Result<U, UnitError>) -> Result<U, String> {
        match self {
            RawQuantity::Text(s) => parse(s).map_err(|e| e.to_string()),
            RawQuantity::Int(i) => parse(&i.to_string()).map_err(|e| e.to_string()),
            RawQuantity::Float(x) => parse(&x.to_string()).map_err(|e| e.to_string()),
        }
    }
}

/// `text` (a TOML document) with each dotted key set to its value, read as TOML would read it
/// (an integer, a float, true/false, else a string; a value in double quotes is the string
/// inside them); under `nccl.` always a string, as NCCL reads its variables (so `2.26` is a
/// release, not a number). Tables on the way are created. Comments and the rest stay as they
/// were.
pub fn set_keys(text: &str, keys: &[(String, String)]) -> Result<String, String> {
    use toml_edit::{DocumentMut, Item, Table, value};
    let mut doc: DocumentMut = text.parse().map_err(|e| format!("{e}"))?;
    for (key, v) in keys {
        let parts: Vec<&str> = key.split('.').collect();
        let (last, path) = parts.split_last().ok_or_else(|| "empty key".to_string())?;
        let mut table: &mut Table = doc.as_table_mut();
        for p in path {
            let item = table.entry(p).or_insert_with(|| {
                let mut t = Table::new();
                t.set_implicit(true);
                Item::Table(t)
            });
            if let Some(inline) = item.as_inline_table() {
                *item = Item::Table(inline.clone().into_table());
            }
            // A preset's name becomes the specification it stands for, so that its keys can be
            // set: `model = "llama-7b"` with `model.hidden` is `[model] preset = "llama-7b"`.
            if *p == "model"
                && let Some(name) = item.as_str().map(str::to_string)
            {
                let mut t = Table::new();
                t.insert("preset", value(name));
                *item = Item::Table(t);
            }
            table = item.as_table_mut().ok_or_else(|| format!("{key}: {p} is not a table"))?;
        }
        let quoted = v.strip_prefix('"').and_then(|q| q.strip_suffix('"'));
        let item = if let Some(q) = quoted {
            value(q)
        } else if parts.first() == Some(&"nccl") {
            value(v.as_str())
        } else if let Ok(i) = v.parse::<i64>() {
            value(i)
        } else if let Ok(f) = v.parse::<f64>() {
            value(f)
        } else if let Ok(b) = v.parse::<bool>() {
            value(b)
        } else {
            value(v.as_str())
        };
        table.insert(last, item);
    }
    Ok(doc.to_string())
}

/// Checks a date as price tables give it: YYYY-MM or YYYY-MM-DD.
/// A cloud region as the cloud names it ("us-east-1", "us-central1", "westeurope"): lower-case
/// letters, digits and dashes, at most 40 characters.
pub(crate) fn check_region(r: &str) -> Result<String, String> {
    let ok = !r.is_empty()
        && r.len() <= 40
        && r.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(r.to_string())
    } else {
        Err(format!(
            "expected a region like \"us-east-1\" (lower-case letters, digits, dashes), got {r:?}"
        ))
    }
}

pub(crate) fn check_date(d: &str) -> Result<(), String> {
    let parts: Vec<&str> = d.split('-').collect();
    let ok = matches!(parts.len(), 2 | 3)
        && parts[0].len() == 4
        && parts.iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        && parts[1..].iter().all(|p| p.len() == 2)
        && (1..=12).contains(&parts[1].parse::<u32>().unwrap_or(0))
        && parts.get(2).is_none_or(|p| (1..=31).contains(&p.parse::<u32>().unwrap_or(0)));
    if ok {
        Ok(())
    } else {
        Err(format!("expected a date like \"2025-06\" or \"2025-06-05\", got {d:?}"))
    }
}
