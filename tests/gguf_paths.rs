//! `GgufFile::open` on paths that are not regular files, and on a file that changes
//! after it was opened.

use std::io::Write;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

use brass::gguf::{GgufBuilder, GgufFile};

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("brass-paths-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn small_gguf() -> Vec<u8> {
    let mut b = GgufBuilder::new();
    b.set("general.architecture", "llama");
    b.add_tensor("t", brass::quant::GgmlType::F32, &[4], vec![0u8; 16])
        .unwrap();
    b.to_bytes()
}

/// Opens `path` on another thread, so that a blocking open fails the test rather than
/// hanging it.
fn open_within(path: PathBuf, limit: Duration) -> brass::Result<GgufFile> {
    let (send, receive) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = send.send(GgufFile::open(&path));
    });
    receive
        .recv_timeout(limit)
        .unwrap_or_else(|_| panic!("GgufFile::open blocked for more than {limit:?}"))
}

#[test]
fn a_directory_is_named_as_one() {
    let dir = temp_dir("dir");
    let err = open_within(dir.clone(), Duration::from_secs(30))
        .unwrap_err()
        .to_string();
    assert!(err.contains("is a directory"), "{err}");
    assert!(err.contains(dir.to_str().unwrap()), "{err}");
}

#[cfg(unix)]
#[test]
fn a_fifo_is_refused_without_blocking() {
    let fifo = temp_dir("fifo").join("model.gguf");
    let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    let err = open_within(fifo, Duration::from_secs(30))
        .unwrap_err()
        .to_string();
    assert!(err.contains("is not a regular file (a FIFO)"), "{err}");
}

#[test]
fn a_file_that_grows_after_open_is_detected() {
    let path = temp_dir("grow").join("model.gguf");
    std::fs::write(&path, small_gguf()).unwrap();
    let file = GgufFile::open(&path).unwrap();
    file.check_unchanged().unwrap();
    let mut append = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    append.write_all(&[0u8; 100]).unwrap();
    drop(append);
    let err = file.check_unchanged().unwrap_err().to_string();
    let size = small_gguf().len();
    assert!(
        err.contains("changed while brass had it open")
            && err.contains(&format!("{size} bytes"))
            && err.contains(&format!("now {} bytes", size + 100)),
        "{err}"
    );
}
