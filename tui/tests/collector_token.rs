//! A job that serves its events without `--token` makes one for the run: written to a file
//! only its user can read, named by the collector's port, and removed when the run ends.
//! Another user of the machine can watch but not command the job; one who reads the file
//! can.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use megaflux_probe::event::Outcome;
use megaflux_probe::wire::{self, ClientFrame, CommandRequest, ServerFrame, Subscription};
use megaflux_testkit::Proc;

/// A bound on each wait of the test (the run's first lines, the collector's answers, a run
/// of 1 s): against a hang, not a judgement of speed.
const LIMIT: Duration = Duration::from_secs(300);

/// A headless run of `duration` seconds serving its events on a free loopback port, with no
/// token given and `runtime` as its runtime directory.
fn serving(runtime: &std::path::Path, duration: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_megaflux"));
    command
        .args([
            "run",
            "--headless",
            "--duration",
            duration,
            "--serve",
            "127.0.0.1:0",
        ])
        .env("XDG_RUNTIME_DIR", runtime)
        .env_remove("MEGAFLUX_TOKEN")
        .stdin(Stdio::null());
    command
}

/// The answer to one command sent on `conn`.
async fn ask(conn: &mut Subscription, command: CommandRequest) -> (Outcome, String) {
    conn.send(&ClientFrame::Command { request: 7, command })
        .await
        .expect("the command is sent");
    loop {
        match conn.recv().await.expect("the collector answers") {
            Some(ServerFrame::Answer {
                request: 7,
                outcome,
                reason,
            }) => return (outcome, reason.unwrap_or_default()),
            Some(_) => {}
            None => panic!("the collector closed the connection"),
        }
    }
}

#[test]
fn a_served_job_without_a_token_makes_one_only_its_user_can_read() {
    let runtime = tempfile::tempdir().expect("a scratch directory");
    let mut run = Proc::spawn("the served run", &mut serving(runtime.path(), "60"));
    let line = run.wait_for_stderr("the address it serves on", LIMIT, |l| {
        l.starts_with("megaflux: collector serving on ")
    });
    let addr: SocketAddr = line["megaflux: collector serving on ".len()..]
        .trim()
        .parse()
        .expect("an address");
    const TOKEN_IN: &str = "megaflux: commands need this run's token, in ";
    let line = run.wait_for_stderr("the token file's path", LIMIT, |l| l.starts_with(TOKEN_IN));
    let file: PathBuf = line[TOKEN_IN.len()..]
        .split(" (")
        .next()
        .unwrap_or_default()
        .into();
    assert!(file.starts_with(runtime.path()), "{}", file.display());
    let token = std::fs::read_to_string(&file)
        .expect("the token file")
        .trim()
        .to_string();
    assert_eq!(token.len(), 32, "{token}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "readable by others: {mode:o}");
    }
    megaflux_testkit::within("watching and commanding the run", LIMIT, move |_| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        rt.block_on(async {
            // Anyone may watch, but not command.
            let mut stranger = wire::subscribe(addr, None).await.expect("a watcher is let in");
            let (outcome, reason) = ask(&mut stranger, CommandRequest::CancelPlan).await;
            assert_eq!(outcome, Outcome::Rejected);
            assert!(reason.contains("token"), "{reason}");
            // The user, with the file's token, may.
            let mut user = wire::subscribe(addr, Some(token)).await.expect("the user");
            let (outcome, reason) = ask(&mut user, CommandRequest::CancelPlan).await;
            assert!(!reason.contains("token"), "{outcome:?} {reason}");
        })
    });
    run.kill();
    let killed = run.wait(LIMIT);
    assert!(!killed.status.success(), "the run was killed: {}", killed.status);
    // A run killed leaves its file; the next run on the port replaces it (tested in the
    // module). One that ends removes it: here a run that ends by itself.
    let out = megaflux_testkit::run("the run of 1 s", &mut serving(runtime.path(), "1"), LIMIT);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let left: Vec<_> = std::fs::read_dir(runtime.path().join("megaflux"))
        .expect("the runtime directory")
        .filter_map(Result::ok)
        .map(|e| e.file_name())
        .filter(|name| *name != file.file_name().unwrap_or_default())
        .collect();
    assert!(left.is_empty(), "a finished run left {left:?}");
}
