//! Output files written whole or not at all, and never over anything the run reads.
//!
//! Each output is written to a temporary first ([`Staged`]); once complete it is [`Ready`], and
//! a run's ready outputs are moved into place together ([`Outputs::commit`]) only when the run
//! has succeeded, after every output has been compared with every file the run read (by device
//! and inode: hard links and other spellings of one file are one file) and with the others. A
//! run that fails or is killed midway leaves every previous file as it was, and no half-written
//! one.
//!
//! Where an output goes: a regular file (or a new one) is replaced by renaming the temporary
//! over it; a symbolic link is followed and its target replaced, the link kept; a character
//! device, a FIFO, a socket, or anything reached through `/proc` (`/dev/stdout` is a link to
//! `/proc/self/fd/1`, behind which a shell's redirection holds its file open) is written through,
//! appended to and never renamed over.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::config::FileId;

/// Where an output's bytes end up.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    /// A regular file (or one to be created) at this real path, replaced by a rename.
    Replace(PathBuf),
    /// A device, FIFO, socket or `/proc` file, written through at this path.
    Through(PathBuf),
}

/// The most symbolic links followed from an output path (Linux's own limit is 40).
const MAX_LINKS: usize = 40;

/// `p` with its directory resolved by the file system (links, `.` and `..`), its last part kept.
fn resolve_dir(p: &Path) -> io::Result<PathBuf> {
    let dir = p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = p.file_name().ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidInput, "not a file name (ends in `..` or `/`)")
    })?;
    Ok(std::fs::canonicalize(dir)?.join(name))
}

/// Where writing `path` lands: links followed to their end.
fn target(path: &Path) -> io::Result<Target> {
    let mut p = resolve_dir(path)?;
    for _ in 0..MAX_LINKS {
        if p.starts_with("/proc") {
            return Ok(Target::Through(p));
        }
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                let to = std::fs::read_link(&p)?;
                let next = if to.is_absolute() {
                    to
                } else {
                    p.parent().unwrap_or(Path::new("/")).join(to)
                };
                p = resolve_dir(&next)?;
            }
            Ok(m) if m.is_dir() => {
                return Err(io::Error::new(io::ErrorKind::IsADirectory, "is a directory"));
            }
            Ok(m) if m.is_file() => return Ok(Target::Replace(p)),
            Ok(_) => return Ok(Target::Through(p)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Target::Replace(p)),
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other(format!("more than {MAX_LINKS} symbolic links")))
}

/// A distinct name for each temporary this process makes.
fn temporary(dir: &Path, path: &Path) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let name = path.file_name().map_or_else(|| "output".into(), |n| n.to_string_lossy());
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    dir.join(format!(".{name}.collsim-{}-{n}.tmp", std::process::id()))
}

/// `e` with `path` and what failed in front, of the same kind.
fn naming(path: &Path, what: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: cannot {what}: {e}", path.display()))
}

/// A file being written: a temporary (beside the file it will replace, or in the system's
/// temporary folder for one written through) until [`Staged::finish`]. Dropped unfinished, it
/// removes the temporary.
#[derive(Debug)]
pub struct Staged {
    ready: Ready,
    file: BufWriter<File>,
}

impl Staged {
    /// Starts writing `path` (nothing there changes until the run commits its outputs).
    pub fn create(path: &Path) -> io::Result<Staged> {
        let target = target(path).map_err(|e| naming(path, "create", e))?;
        let tmp = match &target {
            Target::Replace(real) => temporary(real.parent().unwrap_or(Path::new(".")), real),
            Target::Through(_) => temporary(&std::env::temp_dir(), path),
        };
        let file = File::create(&tmp).map_err(|e| naming(path, "create", e))?;
        let ready = Ready { path: path.to_path_buf(), target, tmp, pending: true };
        Ok(Staged { ready, file: BufWriter::new(file) })
    }

    /// The path as given.
    pub fn path(&self) -> &Path {
        &self.ready.path
    }

    /// Flushes the temporary to disk: the file is complete, waiting for [`Outputs::commit`].
    pub fn finish(self) -> io::Result<Ready> {
        let Staged { ready, file } = self;
        // On a failure `ready` drops here and removes the temporary.
        let file = file.into_inner().map_err(|e| naming(&ready.path, "write", e.into_error()))?;
        file.sync_all().map_err(|e| naming(&ready.path, "write", e))?;
        Ok(ready)
    }

    /// Writes all of `bytes` to `path` as one staged file.
    pub fn bytes(path: &Path, bytes: &[u8]) -> io::Result<Ready> {
        let mut s = Staged::create(path)?;
        s.write_all(bytes)?;
        s.finish()
    }
}

impl Write for Staged {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.write(buf).map_err(|e| naming(&self.ready.path, "write", e))
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush().map_err(|e| naming(&self.ready.path, "write", e))
    }
}

/// A complete output waiting in its temporary; dropped uncommitted, it removes the temporary.
#[derive(Debug)]
pub struct Ready {
    path: PathBuf,
    target: Target,
    tmp: PathBuf,
    /// Whether the temporary is still this one's to move or remove.
    pending: bool,
}

impl Ready {
    /// The path as given.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Moves the file into place (or writes it through).
    fn commit(mut self) -> io::Result<()> {
        self.pending = false;
        let done = match &self.target {
            Target::Replace(real) => std::fs::rename(&self.tmp, real),
            Target::Through(at) => (|| {
                let mut to = std::fs::OpenOptions::new().append(true).open(at)?;
                io::copy(&mut File::open(&self.tmp)?, &mut to)?;
                to.flush()
            })(),
        };
        let _ = std::fs::remove_file(&self.tmp);
        done.map_err(|e| naming(&self.path, "write", e))
    }
}

impl Drop for Ready {
    fn drop(&mut self) {
        if self.pending {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Why a run's outputs were not committed.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// An output would replace a file the run read, or another output.
    #[error("{0}")]
    Clash(String),
    /// The file system refused.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// The outputs of one run, each with the flag that names it, committed together.
#[derive(Debug, Default)]
pub struct Outputs {
    ready: Vec<(String, Ready)>,
}

/// What a regular file is on disk, where it is one.
fn regular(p: &Path) -> Option<FileId> {
    std::fs::metadata(p).ok().filter(|m| m.is_file()).map(|m| FileId::of(&m))
}

impl Outputs {
    /// No outputs yet.
    pub const fn new() -> Outputs {
        Outputs { ready: Vec::new() }
    }

    /// Adds a complete output, named by `flag` (`-o`, `--plot`, …) in errors.
    pub fn add(&mut self, flag: &str, r: Ready) {
        self.ready.push((flag.to_string(), r));
    }

    /// Drops every output, removing their temporaries.
    pub fn discard(&mut self) {
        self.ready.clear();
    }

    /// Moves every output into place, once each has been checked against `read` (the files
    /// the run read, with the names it read them by) and against the others: on a clash
    /// nothing is written.
    pub fn commit(&mut self, read: &[(PathBuf, FileId)]) -> Result<(), CommitError> {
        let ready = std::mem::take(&mut self.ready);
        let outs: Vec<(&str, &Path, &Target)> =
            ready.iter().map(|(flag, r)| (flag.as_str(), r.path.as_path(), &r.target)).collect();
        clash(&outs, read).map_err(CommitError::Clash)?;
        for (_, r) in ready {
            r.commit()?;
        }
        Ok(())
    }
}

/// The first output (flag, path as given, where it lands) that would replace one of `read` or
/// land where an earlier one does, as an error naming both. Only regular files are compared:
/// a device or `/dev/stdout` may take several outputs.
fn clash(outs: &[(&str, &Path, &Target)], read: &[(PathBuf, FileId)]) -> Result<(), String> {
    let mut seen: Vec<(&Path, Option<FileId>, &str)> = Vec::new();
    for &(flag, given, target) in outs {
        let Target::Replace(real) = target else { continue };
        let id = regular(real);
        if let Some(id) = id
            && let Some((name, _)) = read.iter().find(|(_, i)| *i == id)
        {
            return Err(format!(
                "{flag} {}: is an input of this run ({}); write somewhere else",
                given.display(),
                name.display()
            ));
        }
        if let Some((_, _, other)) =
            seen.iter().find(|(p, i, _)| *p == real.as_path() || (id.is_some() && *i == id))
        {
            return Err(format!(
                "{flag} {}: {other} writes the same file; give each output its own path",
                given.display()
            ));
        }
        seen.push((real, id, flag));
    }
    Ok(())
}

/// Refuses, before a run starts, outputs that would replace one of `inputs` or each other
/// (`outputs`: each with the flag that names it), as [`Outputs::commit`] will at its end.
pub fn check_paths(inputs: &[PathBuf], outputs: &[(&str, &Path)]) -> Result<(), String> {
    let read: Vec<(PathBuf, FileId)> =
        inputs.iter().filter_map(|i| Some((i.clone(), regular(i)?))).collect();
    let targets: Vec<(&str, &Path, Target)> =
        outputs.iter().filter_map(|&(flag, out)| Some((flag, out, target(out).ok()?))).collect();
    let outs: Vec<(&str, &Path, &Target)> = targets.iter().map(|(f, p, t)| (*f, *p, t)).collect();
    clash(&outs, &read)
}

/// Standard output for a report. A reader that went away (`| head`) ends the report quietly:
/// the rest is dropped and the run goes on to its other outputs; any other failure names
/// stdout.
#[derive(Debug)]
pub struct Stdout {
    out: BufWriter<RawStdout>,
}

/// The unbuffered side of [`Stdout`].
#[derive(Debug)]
struct RawStdout {
    closed: bool,
}

impl Write for RawStdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.closed {
            return Ok(buf.len());
        }
        match io::stdout().lock().write(buf) {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(buf.len())
            }
            Err(e) => Err(io::Error::new(e.kind(), format!("stdout: cannot write: {e}"))),
            ok => ok,
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.closed {
            return Ok(());
        }
        match io::stdout().lock().flush() {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(())
            }
            Err(e) => Err(io::Error::new(e.kind(), format!("stdout: cannot write: {e}"))),
            ok => ok,
        }
    }
}

impl Stdout {
    /// Buffered standard output.
    pub fn new() -> Stdout {
        Stdout { out: BufWriter::new(RawStdout { closed: false }) }
    }
}

impl Default for Stdout {
    fn default() -> Self {
        Stdout::new()
    }
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.out.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// `text` with its control characters written as `\u{..}` escapes, but newlines and tabs: C0
/// controls (escape sequences, carriage returns, bells), DEL and the C1 controls (U+0080 to
/// U+009F, which some terminals obey). Bytes that are not UTF-8 text pass unchanged.
pub fn escape_controls(text: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    let c1 = |w: &[u8]| w[0] == 0xC2 && (0x80..=0x9F).contains(&w[1]);
    let control = |b: u8| (b < 0x20 && b != b'\n' && b != b'\t') || b == 0x7F;
    if !text.iter().any(|&b| control(b)) && !text.windows(2).any(c1) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = Vec::with_capacity(text.len() + 16);
    let mut i = 0;
    while i < text.len() {
        let b = text[i];
        if control(b) {
            out.extend_from_slice(format!("\\u{{{b:x}}}").as_bytes());
            i += 1;
        } else if i + 1 < text.len() && c1(&text[i..i + 2]) {
            out.extend_from_slice(format!("\\u{{{:x}}}", text[i + 1]).as_bytes());
            i += 2;
        } else {
            out.push(b);
            i += 1;
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("collsim-output-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn read_as_input(p: &Path) -> (PathBuf, FileId) {
        (p.to_path_buf(), regular(p).unwrap())
    }

    #[test]
    fn an_uncommitted_file_leaves_the_old_one_and_no_temporary() {
        let d = dir("uncommitted");
        let p = d.join("out.txt");
        std::fs::write(&p, "old").unwrap();
        {
            let mut s = Staged::create(&p).unwrap();
            s.write_all(b"new, half").unwrap();
        }
        {
            let _ready = Staged::bytes(&p, b"new, not committed").unwrap();
        }
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "old");
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
        let mut all = Outputs::new();
        all.add("-o", Staged::bytes(&p, b"new").unwrap());
        all.commit(&[]).unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "new");
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn outputs_may_not_replace_inputs_or_each_other() {
        let d = dir("paths");
        let input = d.join("s.toml");
        std::fs::write(&input, "").unwrap();
        let via_dots = d.join(".").join("s.toml");
        let e = check_paths(std::slice::from_ref(&input), &[("-o", &via_dots)]).unwrap_err();
        assert!(e.starts_with("-o ") && e.contains("is an input"), "{e}");
        let (a, b) = (d.join("x.svg"), d.join("./x.svg"));
        let e = check_paths(&[], &[("--trace", &a), ("--plot", &b)]).unwrap_err();
        assert!(e.contains("--trace writes the same file"), "{e}");
        assert!(check_paths(&[input], &[("--trace", &a), ("--plot", &d.join("y.svg"))]).is_ok());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_clash_at_commit_writes_nothing() {
        let d = dir("clash");
        let (input, other) = (d.join("in.json"), d.join("out.txt"));
        std::fs::write(&input, "trace").unwrap();
        std::fs::hard_link(&input, d.join("hard.json")).unwrap();
        let read = [read_as_input(&input)];
        let mut all = Outputs::new();
        all.add("-o", Staged::bytes(&other, b"report").unwrap());
        all.add("--plot", Staged::bytes(&d.join("hard.json"), b"svg").unwrap());
        let e = all.commit(&read).unwrap_err().to_string();
        assert!(e.starts_with("--plot ") && e.contains("is an input"), "{e}");
        assert_eq!(std::fs::read_to_string(&input).unwrap(), "trace");
        assert!(!other.exists());
        // Only the input, its hard link: no temporary left.
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 2);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_link_is_followed_and_kept() {
        let d = dir("link");
        let (to, link) = (d.join("target.txt"), d.join("link.txt"));
        std::fs::write(&to, "old").unwrap();
        std::os::unix::fs::symlink("target.txt", &link).unwrap();
        let mut all = Outputs::new();
        all.add("-o", Staged::bytes(&link, b"new").unwrap());
        all.commit(&[]).unwrap();
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read_to_string(&to).unwrap(), "new");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_device_is_written_through() {
        assert_eq!(target(Path::new("/dev/null")).unwrap(), Target::Through("/dev/null".into()));
        assert!(matches!(target(Path::new("/dev/stdout")).unwrap(), Target::Through(_)));
        let mut all = Outputs::new();
        all.add("-o", Staged::bytes(Path::new("/dev/null"), b"gone").unwrap());
        all.commit(&[]).unwrap();
        assert!(!std::fs::metadata("/dev/null").unwrap().file_type().is_file());
    }

    #[test]
    fn control_characters_are_escaped_but_newlines_and_tabs() {
        let text = "a\x1b[31mb\tc\rd\u{9b}e\u{7f}\n";
        let out = escape_controls(text.as_bytes());
        assert_eq!(
            String::from_utf8(out.into_owned()).unwrap(),
            "a\\u{1b}[31mb\tc\\u{d}d\\u{9b}e\\u{7f}\n"
        );
        assert!(matches!(escape_controls(b"plain\n"), std::borrow::Cow::Borrowed(_)));
    }
}
