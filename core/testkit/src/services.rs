//! Real services for the end-to-end tests: a throwaway PostgreSQL server, started by
//! `tui/scripts/services.sh` (as `.ci/run` and a developer would) and stopped when its guard
//! drops, or the one `MEGAFLUX_PG_URL` names.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How long starting or stopping the server may take (initdb included).
const START_LIMIT: Duration = Duration::from_secs(120);
/// The variable that names a running server to use instead of starting one.
pub const PG_URL: &str = "MEGAFLUX_PG_URL";

/// A PostgreSQL server for a test: its URL (`postgresql://postgres@127.0.0.1:PORT/postgres`).
pub struct Postgres {
    url: String,
    /// The directory of a server this guard started, which it stops on drop.
    started: Option<PathBuf>,
}

/// The script that starts and stops the services.
fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tui/scripts/services.sh")
}

impl Postgres {
    /// The server `MEGAFLUX_PG_URL` names, or a new one on a free loopback port. Fails the
    /// test, naming what to install, where PostgreSQL is not installed.
    pub fn start() -> Postgres {
        if let Ok(url) = std::env::var(PG_URL)
            && !url.trim().is_empty()
        {
            return Postgres { url, started: None };
        }
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "megaflux-pg-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let out = crate::run(
            "services.sh start",
            Command::new("bash").arg(script()).arg("start").arg(&dir),
            START_LIMIT,
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let url = stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{PG_URL}=")))
            .map(str::to_string);
        let Some(url) = url.filter(|_| out.status.success()) else {
            let _ = std::fs::remove_dir_all(&dir);
            panic!(
                "PostgreSQL did not start for the test (it needs Debian's postgresql package, which .ci/run installs): {}{}",
                stdout,
                String::from_utf8_lossy(&out.stderr)
            );
        };
        Postgres {
            url,
            started: Some(dir),
        }
    }

    /// The server's URL, to which `?table=NAME` may be added.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        if let Some(dir) = self.started.take() {
            let mut stop = Command::new("bash");
            stop.arg(script()).arg("stop").arg(&dir);
            let _ = crate::child::Proc::spawn("services.sh stop", &mut stop).wait(START_LIMIT);
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}
