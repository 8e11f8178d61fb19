//! The cache directory: where it is, which files in it are verified (the SHA-256
//! markers), and the cleaning of what interrupted fetches left.

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};

use super::{io_error, KnownModel};
use crate::{Error, Result};

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

pub(super) enum Cached {
    Missing,
    Verified,
    /// What is wrong with it, as `is 0 bytes, expected ...`.
    Wrong(String),
}

pub(super) fn check_cached(model: &KnownModel, path: &Path) -> Result<Cached> {
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

pub(super) fn sha256_of(path: &Path) -> Result<String> {
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
pub(super) fn marker_matches(model: &KnownModel, path: &Path, meta: &fs::Metadata) -> bool {
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
pub(super) fn write_marker(model: &KnownModel, path: &Path, meta: &fs::Metadata, tag: &str) {
    let Some(line) = marker_line(model.sha256, meta) else {
        return;
    };
    let tmp = path.with_file_name(format!("{}.partial-{tag}.sha256", model.file));
    if fs::write(&tmp, line).is_err() || fs::rename(&tmp, marker_path(path)).is_err() {
        let _ = fs::remove_file(&tmp);
    }
}

/// `PID-N`, unique to this call among all processes sharing the cache.
pub(super) fn unique_tag() -> String {
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
/// fetched now (see the [`hub`](super) docs).
pub(super) fn remove_stale_temporaries(model: &KnownModel, dir: &Path) {
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
}
