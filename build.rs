//! Names the commit the binaries are built from (`BRASS_GIT_COMMIT`, with `-dirty` when
//! tracked files differed from it when the commit or the sources last changed), for the results `examples/compare` writes. Those
//! binaries are often built on one machine and run on another, whose copy of the
//! checkout, if it has one, may be at another commit. A value set in the environment
//! at build time is kept. A packaged crate (crates.io's, or `cargo package`'s) has no
//! repository: it names the commit `cargo package` recorded in `.cargo_vcs_info.json`.
//! Otherwise nothing is named.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    println!("cargo:rerun-if-env-changed=BRASS_GIT_COMMIT");
    if std::env::var_os("BRASS_GIT_COMMIT").is_some() {
        return;
    }
    // Named again when the commit moves or the kernels' sources change (not on every
    // edit elsewhere, which would rebuild the library each time).
    for path in ["src", "wgsl", "Cargo.toml"] {
        println!("cargo:rerun-if-changed={path}");
    }
    // Only brass's own repository: not one that holds it as a folder or a dependency.
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    let top = git(&["rev-parse", "--show-toplevel"]).map(|t| Path::new(&t).canonicalize().ok());
    if top.flatten() != Path::new(&manifest_dir).canonicalize().ok() {
        if let Some(commit) =
            packaged_commit(&Path::new(&manifest_dir).join(".cargo_vcs_info.json"))
        {
            println!("cargo:rustc-env=BRASS_GIT_COMMIT={commit}");
        }
        return;
    }
    let Some(git_dir) = git(&["rev-parse", "--git-dir"]) else {
        return;
    };
    let git_dir = Path::new(&git_dir);
    let head_ref = git(&["symbolic-ref", "-q", "HEAD"]).map(|r| git_dir.join(r));
    // A fresh clone keeps its refs in packed-refs; naming a missing file would rerun
    // this on every build.
    for path in [
        Some(git_dir.join("HEAD")),
        head_ref,
        Some(git_dir.join("packed-refs")),
    ]
    .into_iter()
    .flatten()
    .filter(|p| p.exists())
    {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    let Some(mut commit) = git(&["rev-parse", "HEAD"]) else {
        return;
    };
    if git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty()) {
        commit.push_str("-dirty");
    }
    println!("cargo:rustc-env=BRASS_GIT_COMMIT={commit}");
}

/// The commit `cargo package` packaged from, as its `.cargo_vcs_info.json` records it:
/// `{"git": {"sha1": "<40 hex>", "dirty": true}, ...}` (`dirty` only when packaged with
/// uncommitted changes). Read by hand: a JSON parser here would be a build dependency
/// every dependent compiles.
fn packaged_commit(vcs_info: &Path) -> Option<String> {
    let text = std::fs::read_to_string(vcs_info).ok()?;
    // Only once it exists: a missing file named here reruns the script on every build.
    println!("cargo:rerun-if-changed={}", vcs_info.display());
    let value_after = |key: &str| {
        let rest = &text[text.find(&format!("\"{key}\""))? + key.len() + 2..];
        Some(rest.trim_start().strip_prefix(':')?.trim_start())
    };
    let sha1 = value_after("sha1")?.strip_prefix('"')?.get(..40)?;
    if !sha1.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let dirty = value_after("dirty").is_some_and(|v| v.starts_with("true"));
    Some(format!("{sha1}{}", if dirty { "-dirty" } else { "" }))
}
