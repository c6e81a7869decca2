//! Output files written whole or not at all: everything goes to a temporary file beside the
//! target, renamed over it once complete, so that a run that fails or is killed midway leaves
//! the previous file as it was (and no half-written one).

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

/// A file being written: a temporary beside `path` until [`Staged::commit`] renames it there.
/// Dropped uncommitted, it removes the temporary.
#[derive(Debug)]
pub struct Staged {
    path: PathBuf,
    tmp: PathBuf,
    file: Option<BufWriter<File>>,
}

/// The temporary beside `path`: hidden, named after it and this process.
fn temporary(path: &Path) -> PathBuf {
    let name = path.file_name().map_or_else(|| "output".into(), |n| n.to_string_lossy());
    path.with_file_name(format!(".{name}.collsim-{}.tmp", std::process::id()))
}

/// `e` with `path` and what failed in front, of the same kind.
fn naming(path: &Path, what: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: cannot {what}: {e}", path.display()))
}

impl Staged {
    /// Starts writing `path` (nothing there changes until [`Staged::commit`]).
    pub fn create(path: &Path) -> io::Result<Staged> {
        let tmp = temporary(path);
        let file = File::create(&tmp).map_err(|e| naming(path, "create", e))?;
        Ok(Staged { path: path.to_path_buf(), tmp, file: Some(BufWriter::new(file)) })
    }

    /// The file it will replace.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Flushes the file to disk and moves it into place.
    pub fn commit(mut self) -> io::Result<()> {
        let file = self.file.take().expect("a staged file is committed once");
        let file = file.into_inner().map_err(|e| naming(&self.path, "write", e.into_error()))?;
        file.sync_all().map_err(|e| naming(&self.path, "write", e))?;
        drop(file);
        std::fs::rename(&self.tmp, &self.path).map_err(|e| {
            let _ = std::fs::remove_file(&self.tmp);
            naming(&self.path, "replace", e)
        })
    }
}

impl Write for Staged {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let f = self.file.as_mut().expect("a committed file is not written");
        f.write(buf).map_err(|e| naming(&self.path, "write", e))
    }

    fn flush(&mut self) -> io::Result<()> {
        let f = self.file.as_mut().expect("a committed file is not written");
        f.flush().map_err(|e| naming(&self.path, "write", e))
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Writes `path` through `draw`, which creates the file it is given (a drawing library that
/// opens its own file): it draws into the temporary, which replaces `path` only if it succeeds.
pub fn write_through<E: std::fmt::Display>(
    path: &Path,
    draw: impl FnOnce(&Path) -> Result<(), E>,
) -> Result<(), String> {
    let tmp = temporary(path);
    let done = draw(&tmp).map_err(|e| format!("{}: {e}", path.display())).and_then(|()| {
        std::fs::rename(&tmp, path).map_err(|e| format!("{}: cannot write: {e}", path.display()))
    });
    if done.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    done
}

/// Refuses outputs that would replace one of `inputs` or each other (`outputs`: each with the
/// flag that names it). Paths are compared as the file system resolves them (links, `..`), an
/// output that does not exist yet by its resolved directory.
pub fn check_paths(inputs: &[PathBuf], outputs: &[(&str, &Path)]) -> Result<(), String> {
    let resolve = |p: &Path| -> Option<PathBuf> {
        std::fs::canonicalize(p).ok().or_else(|| {
            let dir = p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
            Some(std::fs::canonicalize(dir).ok()?.join(p.file_name()?))
        })
    };
    let ins: Vec<(PathBuf, &PathBuf)> =
        inputs.iter().filter_map(|i| Some((resolve(i)?, i))).collect();
    let mut seen: Vec<(PathBuf, &str)> = Vec::new();
    for &(flag, out) in outputs {
        let Some(r) = resolve(out) else { continue };
        if let Some((_, i)) = ins.iter().find(|(c, _)| *c == r) {
            return Err(format!(
                "{flag} {}: is an input of this run ({}); write somewhere else",
                out.display(),
                i.display()
            ));
        }
        if let Some((_, other)) = seen.iter().find(|(c, _)| *c == r) {
            return Err(format!(
                "{flag} {}: {other} writes the same file; give each output its own path",
                out.display()
            ));
        }
        seen.push((r, flag));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("collsim-output-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
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
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "old");
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
        let mut s = Staged::create(&p).unwrap();
        s.write_all(b"new").unwrap();
        s.commit().unwrap();
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
}
