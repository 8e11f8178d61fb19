//! `examples/serve` on the default model, on 127.0.0.1, against OpenAI's Python client
//! (`tests/serve/client.py`; `.ci/run` installs the `openai` package into a virtual
//! environment and names its python in `BRASS_TEST_PYTHON`).
//!
//! The replies are checked against `examples/decode` (the same greedy text, the same
//! token counts), eight clients at once against each alone, the bad requests against
//! their statuses, and a client that leaves mid-stream against the sequence it held.
//! Each server must log no panic and exit cleanly on SIGTERM.
//!
//! Unix only: the server is stopped with SIGTERM.
#![cfg(unix)]

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// An example's binary, built beside this test's (`cargo test` builds the examples;
/// `.ci/run` builds them first).
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps");
    let path = dir.join("examples").join(name);
    assert!(
        path.exists(),
        "{} is not built: cargo build --release --examples",
        path.display()
    );
    path
}

/// The Python with OpenAI's client, checked once per test process.
fn python() -> &'static str {
    static PYTHON: OnceLock<String> = OnceLock::new();
    PYTHON.get_or_init(checked_python)
}

fn checked_python() -> String {
    let python = std::env::var("BRASS_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let probe = Command::new(&python)
        .args(["-c", "import openai, httpx2"])
        .output()
        .unwrap_or_else(|e| panic!("{python}: {e}"));
    assert!(
        probe.status.success(),
        "{python} has no `openai` package: these tests need OpenAI's Python client. \
         .ci/run installs it (python3 -m venv V; V/bin/pip install -r \
         tests/serve/requirements.txt) and sets BRASS_TEST_PYTHON=V/bin/python\n{}",
        String::from_utf8_lossy(&probe.stderr)
    );
    python
}

/// A running server and what it logs.
struct Server {
    child: Child,
    url: String,
    log: JoinHandle<String>,
}

impl Server {
    fn start(args: &[&str]) -> Server {
        let mut child = Command::new(example("serve"))
            .args(["--port", "0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("serve starts");
        let mut stderr = child.stderr.take().expect("piped");
        let log = std::thread::spawn(move || {
            let mut log = String::new();
            let _ = stderr.read_to_string(&mut log);
            log
        });
        let stdout = child.stdout.take().expect("piped");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let line = match rx.recv_timeout(Duration::from_secs(300)) {
            Ok(line) => line,
            Err(e) => {
                let _ = child.kill();
                let log = log.join().unwrap_or_default();
                panic!("serve never said where it listens ({e}); its log:\n{log}");
            }
        };
        let url = line
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("serve's first line: {line}"))
            .to_string();
        Server { child, url, log }
    }

    /// Runs a check of `client.py` against the server; panics with its output if it fails.
    fn check(&self, check: &str, args: &[&str]) -> String {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/serve/client.py");
        let started = Instant::now();
        let out = Command::new(python())
            .arg(script)
            .arg(check)
            .args(["--base-url", &self.url, "--model", "smollm2-135m"])
            .args(args)
            .output()
            .expect("python runs");
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "client.py {check} failed:\n{said}");
        eprintln!(
            "{check} in {:.1} s: {said}",
            started.elapsed().as_secs_f64()
        );
        said
    }

    /// SIGTERM; the server must exit 0 having logged no panic. Returns its log.
    fn stop(mut self) -> String {
        assert!(
            self.child.try_wait().expect("wait").is_none(),
            "the server exited early"
        );
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                break status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("the server did not stop within 60 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let log = self.log.join().expect("log reader");
        assert!(
            status.success(),
            "the server exited with {status}; its log:\n{log}"
        );
        assert!(!log.contains("panicked"), "the server panicked:\n{log}");
        log
    }
}

/// What `decode` says for a prompt: its text and token counts, and why it stopped, as
/// the server's reply must say them.
fn decode(prompt: &str, chat: bool, n: usize) -> Value {
    let mut command = Command::new(example("decode"));
    command.args([
        "-p",
        prompt,
        "-n",
        &n.to_string(),
        "--json",
        "--context",
        "256",
    ]);
    if chat {
        command.arg("--chat");
    }
    let out = command.output().expect("decode runs");
    assert!(
        out.status.success(),
        "decode failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said: Value = serde_json::from_slice(&out.stdout).expect("decode --json");
    let generated = said["generated"].as_array().expect("generated").len();
    json!({
        "prompt": prompt,
        "n": n,
        "text": said["text"],
        "prompt_tokens": said["prompt_ids"].as_array().expect("prompt_ids").len(),
        "completion_tokens": generated,
        "finish": if generated == n { "length" } else { "stop" },
    })
}

#[test]
fn openai_clients_get_decodes_replies_at_once_and_clear_errors() {
    let expected = json!({
        "chat": decode("What is the capital of France?", true, 12),
        "plain": decode("The capital of France is", false, 4),
    });
    let file =
        std::env::temp_dir().join(format!("brass-serve-expected-{}.json", std::process::id()));
    std::fs::write(&file, expected.to_string()).expect("write the expected replies");
    let server = Server::start(&[
        "--sequences",
        "8",
        "--context",
        "256",
        "--max-body-bytes",
        "65536",
    ]);
    server.check(
        "replies",
        &["--expected", file.to_str().expect("utf-8 path")],
    );
    let _ = std::fs::remove_file(&file);
    server.check("concurrent", &["--max-tokens", "8"]);
    server.check("errors", &["--context", "256", "--max-body", "65536"]);
    let log = server.stop();
    // Every request the log shows counted its tokens; none failed.
    assert!(!log.contains("error:"), "{log}");
}

#[test]
fn a_client_that_leaves_frees_its_sequence_and_a_full_queue_says_503() {
    let server = Server::start(&["--sequences", "1", "--queue", "1", "--context", "512"]);
    server.check("disconnect", &["--long-tokens", "400"]);
    let log = server.stop();
    assert!(
        log.contains("the client left; its sequence is freed"),
        "no sequence was freed for the client that left:\n{log}"
    );
}
