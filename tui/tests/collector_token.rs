//! A job that serves its events without `--token` makes one for the run: written to a file
//! only its user can read, named by the collector's port, and removed when the run ends.
//! Another user of the machine can watch but not command the job; one who reads the file
//! can.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use megaflux_probe::event::Outcome;
use megaflux_probe::wire::{self, ClientFrame, CommandRequest, ServerFrame, Subscription};

/// The answer to one command sent on `conn`.
async fn ask(conn: &mut Subscription, command: CommandRequest) -> (Outcome, String) {
    conn.send(&ClientFrame::Command { request: 7, command })
        .await
        .expect("the command is sent");
    let answer = async {
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
    };
    tokio::time::timeout(Duration::from_secs(60), answer)
        .await
        .expect("an answer in time")
}

#[test]
fn a_served_job_without_a_token_makes_one_only_its_user_can_read() {
    let runtime = tempfile::tempdir().expect("a scratch directory");
    let mut child = Command::new(env!("CARGO_BIN_EXE_megaflux"))
        .args(["run", "--headless", "--duration", "60", "--serve", "127.0.0.1:0"])
        .env("XDG_RUNTIME_DIR", runtime.path())
        .env_remove("MEGAFLUX_TOKEN")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    let stderr = child.stderr.take().expect("its standard error");
    let mut lines = BufReader::new(stderr).lines();
    let (mut addr, mut file) = (None::<SocketAddr>, None::<std::path::PathBuf>);
    while addr.is_none() || file.is_none() {
        let line = lines
            .next()
            .expect("the run says where it serves")
            .expect("a line");
        if let Some(rest) = line.strip_prefix("megaflux: collector serving on ") {
            addr = Some(rest.trim().parse().expect("an address"));
        }
        if let Some(rest) = line.strip_prefix("megaflux: commands need this run's token, in ") {
            file = Some(rest.split(" (").next().unwrap_or_default().into());
        }
    }
    let (addr, file) = (addr.unwrap(), file.unwrap());
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
        let mut user = wire::subscribe(addr, Some(token.clone()))
            .await
            .expect("the user");
        let (outcome, reason) = ask(&mut user, CommandRequest::CancelPlan).await;
        assert!(!reason.contains("token"), "{outcome:?} {reason}");
    });
    child.kill().expect("the run stops");
    let _ = child.wait();
    drop(lines);
    // A run killed leaves its file; the next run on the port replaces it (tested in the
    // module). One that ends removes it: here a run that ends by itself.
    let out = Command::new(env!("CARGO_BIN_EXE_megaflux"))
        .args(["run", "--headless", "--duration", "1", "--serve", "127.0.0.1:0"])
        .env("XDG_RUNTIME_DIR", runtime.path())
        .env_remove("MEGAFLUX_TOKEN")
        .output()
        .expect("the binary runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let left: Vec<_> = std::fs::read_dir(runtime.path().join("megaflux"))
        .expect("the runtime directory")
        .filter_map(Result::ok)
        .map(|e| e.file_name())
        .filter(|name| *name != file.file_name().unwrap_or_default())
        .collect();
    assert!(left.is_empty(), "a finished run left {left:?}");
}
