//! `write_synthetic`'s output path: only a new path or a regular file is replaced, and a
//! mistyped shape is refused at once with its numbers.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use brass::gguf::synthetic::{write_synthetic, Arch, QuantMix, SyntheticSpec, MAX_LAYERS};
use brass::quant::GgmlType;

fn tiny() -> SyntheticSpec {
    SyntheticSpec {
        name: "tiny".into(),
        hidden: 256,
        ffn: 512,
        layers: 1,
        heads: 4,
        kv_heads: 2,
        vocab: 300,
        context: 64,
        rope_base: 10_000.0,
        mix: QuantMix::Single(GgmlType::Q8_0),
        lm_head: None,
        seed: 1,
        arch: Arch::Llama,
        head_dim: None,
        sliding_window: None,
    }
}

/// A fresh, empty folder for one test.
fn folder(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("brass-synth-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn refused(path: &Path, kind: &str) {
    let err = write_synthetic(&tiny(), path, |_, _| {})
        .expect_err("a non-regular output was accepted")
        .to_string();
    assert!(
        err.contains(kind) && err.contains(&path.display().to_string()),
        "{err}"
    );
}

#[test]
fn a_fifo_a_directory_or_a_symlink_as_output_is_refused_and_left_alone() {
    let dir = folder("special");
    let fifo = dir.join("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let link = dir.join("null-link");
    std::os::unix::fs::symlink("/dev/null", &link).unwrap();
    let sub = dir.join("sub");
    std::fs::create_dir(&sub).unwrap();
    let before = names_in(&dir);

    refused(&fifo, "a FIFO");
    refused(&link, "a symbolic link (to /dev/null)");
    refused(&sub, "a directory");

    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
    assert_eq!(std::fs::read_link(&link).unwrap(), Path::new("/dev/null"));
    assert!(std::fs::symlink_metadata(&sub).unwrap().is_dir());
    assert_eq!(names_in(&sub), Vec::<String>::new());
    // Nothing written beside them either: no temporary file left behind.
    assert_eq!(names_in(&dir), before);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A link to a regular file is refused too (the documented choice): a rename would
/// replace the link, not the file it names.
#[test]
fn a_symlink_to_a_regular_file_is_refused_and_both_are_left_alone() {
    let dir = folder("link-to-file");
    let target = dir.join("target.gguf");
    std::fs::write(&target, b"old").unwrap();
    let link = dir.join("link.gguf");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    refused(&link, "a symbolic link");
    assert_eq!(std::fs::read_link(&link).unwrap(), target);
    assert_eq!(std::fs::read(&target).unwrap(), b"old");
    assert_eq!(names_in(&dir), ["link.gguf", "target.gguf"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_regular_file_is_replaced_by_a_rename() {
    let dir = folder("regular");
    let path = dir.join("model.gguf");
    std::fs::write(&path, b"old").unwrap();
    let old = std::fs::File::open(&path).unwrap();
    write_synthetic(&tiny(), &path, |_, _| {}).unwrap();
    // A reader of the old file keeps it whole: the new one is a new inode, renamed in.
    let mut kept = String::new();
    std::io::Read::read_to_string(&mut &old, &mut kept).unwrap();
    assert_eq!(kept, "old");
    let file = brass::gguf::GgufFile::open(&path).unwrap();
    assert_eq!(file.tensors().len(), tiny().tensors().len());
    assert_eq!(names_in(&dir), ["model.gguf"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

fn refused_quickly(spec: &SyntheticSpec, numbers: &[&str]) {
    let dir = folder(&format!("huge-{}", spec.name));
    let path = dir.join("huge.gguf");
    let t = Instant::now();
    let err = write_synthetic(spec, &path, |_, _| {})
        .expect_err("an absurd shape was accepted")
        .to_string();
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t.elapsed()
    );
    for n in numbers {
        assert!(err.contains(n), "`{err}` lacks {n}");
    }
    assert_eq!(spec.tensor_bytes().unwrap_err().to_string(), err);
    assert_eq!(names_in(&dir), Vec::<String>::new());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn absurd_shapes_are_refused_at_once_with_their_numbers() {
    let mut spec = SyntheticSpec::preset("llama3-8b").unwrap();
    spec.layers = u64::MAX;
    refused_quickly(
        &spec,
        &["18446744073709551615 layers", &MAX_LAYERS.to_string()],
    );
    // Fits llama.block_count's u32, so only the layer bound stops it.
    spec.layers = u32::MAX as u64;
    refused_quickly(&spec, &["4294967295 layers"]);
    // Within the layer bound, but 2.2 TB of tensors.
    let mut wide = SyntheticSpec::preset("hidden-12288").unwrap();
    wide.layers = 2000;
    refused_quickly(&wide, &["2000 layers", "1099511627776"]);
    // A row length whose element count overflows u64.
    let overflow = SyntheticSpec {
        name: "overflow".into(),
        hidden: 1 << 62,
        heads: 2,
        kv_heads: 1,
        ..tiny()
    };
    refused_quickly(&overflow, &["token_embd.weight", "2^64"]);
}
