//! Inputs and outputs that could hurt: a stream that never sends a newline is stopped at
//! `--max-line-bytes` with an error naming the input and the line; a named pipe is read as
//! a stream (never hashed to its end, never read twice); `--output` or `--record` naming
//! the file the run reads or another of its files is refused; `--force` does not write
//! through a symbolic link.

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::Duration;

mod common;

use common::{example, summary};

/// A bound on one run of the example, or on a helper thread's end once the run is over:
/// against a hang, not a judgement of speed.
const HUNG: Duration = Duration::from_secs(120);

fn pageviews(cwd: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(example("pageviews"));
    c.arg("run")
        .arg("--headless")
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null());
    c
}

/// Runs `command` (the example) to its end, for at most [`HUNG`].
fn finished(command: &mut Command) -> Output {
    let args: Vec<String> = command
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    megaflux_testkit::run(format!("pageviews {}", args.join(" ")), command, HUNG)
}

/// A helper thread (a server, a pipe's writer) whose end the test receives with a
/// deadline: never joined, so that one blocked for ever cannot hang the test.
struct Helper {
    what: &'static str,
    done: Receiver<Result<(), String>>,
}

impl Helper {
    fn spawn(what: &'static str, body: impl FnOnce() -> Result<(), String> + Send + 'static) -> Self {
        let (tx, done) = channel();
        std::thread::spawn(move || {
            let _ = tx.send(body());
        });
        Helper { what, done }
    }

    /// Waits for the thread's end for at most [`HUNG`]; fails naming it if it erred,
    /// panicked or still runs.
    fn ended(&self) {
        let limit = megaflux_testkit::deadline(HUNG);
        match self.done.recv_timeout(limit) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!("{}: {e}", self.what),
            Err(RecvTimeoutError::Disconnected) => panic!("{} panicked", self.what),
            Err(RecvTimeoutError::Timeout) => panic!("{} still ran {limit:?} after the run ended", self.what),
        }
    }
}

/// A FIFO made at `path` for the test, whose writer ([`Fifo::write`]) blocks in its open
/// until a reader opens the pipe. If the test ends with the writer still waiting, the drop
/// opens the pipe for reading and writing, which does not block (on Linux): the writer's
/// open returns and its writes fail, and no thread is left blocked.
struct Fifo {
    path: PathBuf,
}

impl Fifo {
    fn make(path: PathBuf) -> Self {
        let made = megaflux_testkit::run(
            "mkfifo",
            Command::new("mkfifo").arg(&path).stdin(Stdio::null()),
            HUNG,
        );
        assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
        Fifo { path }
    }

    /// A thread that opens the pipe for writing and writes `text` into it.
    fn write(&self, text: String) -> Helper {
        let path = self.path.clone();
        Helper::spawn("the pipe's writer", move || {
            let mut pipe = std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .map_err(|e| format!("opening the pipe: {e}"))?;
            pipe.write_all(text.as_bytes())
                .map_err(|e| format!("writing into the pipe: {e}"))
        })
    }
}

impl Drop for Fifo {
    fn drop(&mut self) {
        let _ = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.path);
    }
}

/// The one `error` line of a run that failed with `status`.
fn error_line(out: &Output, status: i32) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(status), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    errors[0].to_string()
}

#[test]
fn a_stream_without_a_newline_stops_at_the_line_limit() {
    let dir = tempfile::tempdir().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // Two good lines, then 3 MiB without a newline (the server would send for ever). Its
    // writes fail once the run has closed the connection.
    let server = Helper::spawn("the server", move || {
        let (mut peer, _) = listener.accept().map_err(|e| format!("accept: {e}"))?;
        let _ = peer.write_all(b"u1,/home,1\nu2,/home,2\n");
        let chunk = vec![b'x'; 1 << 16];
        for _ in 0..48 {
            if peer.write_all(&chunk).is_err() {
                break;
            }
        }
        Ok(())
    });
    let input = format!("tcp:127.0.0.1:{port}");
    let out = finished(&mut pageviews(
        dir.path(),
        &["--input", &input, "--output", "out.jsonl"],
    ));
    let error = error_line(&out, 2);
    assert!(error.contains(&input) && error.contains("line 3"), "{error}");
    assert!(error.contains("a line longer than 1048576 bytes"), "{error}");
    // The lines before it were taken, and their outputs written.
    let written = std::fs::read_to_string(dir.path().join("out.jsonl")).unwrap();
    assert_eq!(written.lines().count(), 2, "{written}");
    server.ended();
}

#[test]
fn a_file_with_a_long_line_is_stopped_at_the_limit_given() {
    let dir = tempfile::tempdir().unwrap();
    let long = "y".repeat(300);
    std::fs::write(
        dir.path().join("views.csv"),
        format!("u1,/a,1\nu2,/{long},2\nu3,/c,3\n"),
    )
    .unwrap();
    let out = finished(&mut pageviews(
        dir.path(),
        &["--input", "views.csv", "--max-line-bytes", "100"],
    ));
    let error = error_line(&out, 2);
    assert!(error.contains("line 2: a line longer than 100 bytes"), "{error}");
    // With room for it, the same file runs.
    let fine = finished(&mut pageviews(
        dir.path(),
        &["--input", "views.csv", "--max-line-bytes", "400"],
    ));
    assert!(fine.status.success(), "{}", String::from_utf8_lossy(&fine.stderr));
    assert_eq!(summary(&fine)["records_in"], 3);
}

#[cfg(unix)]
#[test]
fn a_named_pipe_is_read_as_a_stream() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = Fifo::make(dir.path().join("views.pipe"));
    let lines: String = (0..500).map(|i| format!("u{},/p,{i}\n", i % 7)).collect();
    let writer = fifo.write(lines);
    let out = finished(&mut pageviews(
        dir.path(),
        &[
            "--input",
            "views.pipe",
            "--record",
            "trace.jsonl",
            "--output",
            "out.jsonl",
        ],
    ));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // The run read the pipe to its end: the writer wrote it all and closed it.
    writer.ended();
    assert!(stderr.contains("is not recorded"), "{stderr}");
    assert!(stderr.contains("as records arrive"), "{stderr}");
    assert_eq!(summary(&out)["records_in"], 500);
    let written = std::fs::read_to_string(dir.path().join("out.jsonl")).unwrap();
    assert_eq!(written.lines().count(), 500);
    // Its trace says it cannot be re-run, rather than read the pipe again.
    let rerun = finished(
        Command::new(example("pageviews"))
            .args(["replay", "trace.jsonl", "--rerun"])
            .current_dir(dir.path())
            .stdin(Stdio::null()),
    );
    assert!(
        !rerun.status.success(),
        "{}",
        String::from_utf8_lossy(&rerun.stderr)
    );
}

#[test]
fn the_runs_own_files_cannot_be_written_over() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    std::fs::write(cwd.join("views.csv"), "u1,/a,1\n").unwrap();
    let output_is_input = finished(&mut pageviews(
        cwd,
        &["--input", "views.csv", "--output", "./views.csv", "--force"],
    ));
    let error = error_line(&output_is_input, 2);
    assert!(error.contains("is the --input file"), "{error}");
    let record_is_output = finished(&mut pageviews(
        cwd,
        &[
            "--input",
            "views.csv",
            "--output",
            "out.jsonl",
            "--record",
            "out.jsonl",
        ],
    ));
    assert!(error_line(&record_is_output, 2).contains("--record out.jsonl is the --output file"));
    let record_is_input = finished(&mut pageviews(
        cwd,
        &["--input", "views.csv", "--record", "views.csv", "--force"],
    ));
    assert!(error_line(&record_is_input, 2).contains("is the --input file"));
    assert_eq!(
        std::fs::read_to_string(cwd.join("views.csv")).unwrap(),
        "u1,/a,1\n"
    );
}

#[cfg(unix)]
#[test]
fn force_does_not_write_through_a_symbolic_link() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    std::fs::write(cwd.join("views.csv"), "u1,/a,1\n").unwrap();
    std::fs::write(cwd.join("precious.txt"), "keep me").unwrap();
    std::os::unix::fs::symlink(cwd.join("precious.txt"), cwd.join("out.jsonl")).unwrap();
    std::os::unix::fs::symlink(cwd.join("precious.txt"), cwd.join("trace.jsonl")).unwrap();
    for flag in ["--output", "--record"] {
        let file = if flag == "--output" {
            "out.jsonl"
        } else {
            "trace.jsonl"
        };
        let out = finished(&mut pageviews(
            cwd,
            &["--input", "views.csv", flag, file, "--force"],
        ));
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("symbolic link"), "{flag}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    assert_eq!(
        std::fs::read_to_string(cwd.join("precious.txt")).unwrap(),
        "keep me"
    );
}
