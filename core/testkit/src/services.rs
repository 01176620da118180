//! Real services for the end-to-end tests: a throwaway PostgreSQL server and a Kafka-protocol
//! broker, started by `tui/scripts/services.sh` (as a developer would) and stopped when their
//! guard drops, or the ones `MEGAFLUX_PG_URL` and `MEGAFLUX_KAFKA` name.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How long starting or stopping a service may take (initdb included).
const START_LIMIT: Duration = Duration::from_secs(120);
/// The variable that names a running PostgreSQL server to use instead of starting one.
pub const PG_URL: &str = "MEGAFLUX_PG_URL";
/// The variable that names a running Kafka broker (`HOST:PORT`) to use instead of starting one.
pub const KAFKA: &str = "MEGAFLUX_KAFKA";

/// A service for a test, and where it is.
struct Service {
    at: String,
    /// The directory of a service this guard started, which it stops on drop.
    started: Option<PathBuf>,
}

/// The script that starts and stops the services.
fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tui/scripts/services.sh")
}

impl Service {
    /// The one `variable` names, or `which` started by the script, which prints
    /// `variable=...`. Fails the test naming what to install if it cannot start.
    fn start(which: &str, variable: &str, needs: &str) -> Service {
        if let Ok(at) = std::env::var(variable)
            && !at.trim().is_empty()
        {
            return Service { at, started: None };
        }
        Service::start_own(which, variable, needs)
    }

    /// A new `which` of this guard's own, whatever the environment names.
    fn start_own(which: &str, variable: &str, needs: &str) -> Service {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "megaflux-{which}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let out = crate::run(
            format!("services.sh start {which}"),
            Command::new("bash")
                .arg(script())
                .arg("start")
                .arg(&dir)
                .arg(which),
            START_LIMIT,
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let at = stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{variable}=")))
            .map(str::to_string);
        let service = Service {
            at: at.clone().unwrap_or_default(),
            started: Some(dir),
        };
        if at.is_none() || !out.status.success() {
            drop(service);
            panic!(
                "{which} did not start for the test ({needs}; .ci/run installs it): {stdout}{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        service
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if let Some(dir) = self.started.take() {
            let mut stop = Command::new("bash");
            stop.arg(script()).arg("stop").arg(&dir);
            let _ = crate::child::Proc::spawn("services.sh stop", &mut stop).wait(START_LIMIT);
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

/// A PostgreSQL server for a test: its URL (`postgresql://postgres@127.0.0.1:PORT/postgres`).
pub struct Postgres(Service);

impl Postgres {
    /// The server `MEGAFLUX_PG_URL` names, or a new one on a free loopback port. Fails the
    /// test, naming what to install, where PostgreSQL is not installed.
    pub fn start() -> Postgres {
        Postgres(Service::start(
            "pg",
            PG_URL,
            "it needs Debian's postgresql package",
        ))
    }

    /// The server's URL, to which `?table=NAME` may be added.
    pub fn url(&self) -> &str {
        &self.0.at
    }
}

/// What a Kafka broker for the tests needs.
const TANSU: &str =
    "it needs tansu: cargo install tansu --version 0.6.0 --locked --no-default-features --features dynostore";

/// A Kafka-protocol broker for a test (tansu, in memory): its `HOST:PORT`.
pub struct Kafka(Service);

impl Kafka {
    /// The broker `MEGAFLUX_KAFKA` names, or a new one on a free loopback port. Fails the
    /// test, naming what to install, where tansu is not installed.
    pub fn start() -> Kafka {
        Kafka(Service::start("kafka", KAFKA, TANSU))
    }

    /// A new broker of this guard's own, which the test may stop (by dropping the guard),
    /// whatever `MEGAFLUX_KAFKA` names.
    pub fn start_own() -> Kafka {
        Kafka(Service::start_own("kafka", KAFKA, TANSU))
    }

    /// The broker's `HOST:PORT`.
    pub fn address(&self) -> &str {
        &self.0.at
    }
}
