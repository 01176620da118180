//! `--output` as given: a file's path, or `postgresql://USER@HOST:PORT/DB?table=NAME`.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use crate::error::ConfigError;

/// How long connecting to a database may take, unless its URL says (`connect_timeout`).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest name PostgreSQL keeps whole.
const MAX_NAME: usize = 63;

/// Where a run's outputs go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// A JSON-lines file.
    File(PathBuf),
    /// A PostgreSQL table.
    Postgres(PgTarget),
}

/// A PostgreSQL table to write outputs to: `postgresql://USER@HOST:PORT/DB?table=NAME`, and
/// optionally `&sink=NAME` (the name its progress is kept under; the table's by default).
/// Other parameters are the connection's, as libpq reads them (`connect_timeout=10`, say).
#[derive(Clone, PartialEq, Eq)]
pub struct PgTarget {
    /// The URL without `table` and `sink`: what the client connects with.
    pub(crate) connect: String,
    /// The table outputs go to (created if missing).
    pub table: String,
    /// The name of this sink's row in the progress table.
    pub sink: String,
    /// The URL as messages name it: without a password.
    shown: String,
}

impl std::fmt::Debug for PgTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PgTarget({})", self.shown)
    }
}

impl From<PathBuf> for Output {
    fn from(path: PathBuf) -> Self {
        Output::File(path)
    }
}

impl Output {
    /// `file` or `postgresql`.
    pub fn kind(&self) -> &'static str {
        match self {
            Output::File(_) => "file",
            Output::Postgres(_) => "postgresql",
        }
    }

    /// The output as messages name it (a URL without its password).
    pub fn name(&self) -> String {
        match self {
            Output::File(path) => path.display().to_string(),
            Output::Postgres(t) => t.shown.clone(),
        }
    }

    /// The file, for a file output.
    pub fn file(&self) -> Option<&Path> {
        match self {
            Output::File(path) => Some(path),
            Output::Postgres(_) => None,
        }
    }
}

impl FromStr for Output {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, ConfigError> {
        if s.trim().is_empty() {
            return Err(ConfigError::Invalid(
                "--output is empty: give a file, or postgresql://USER@HOST:PORT/DB?table=NAME".into(),
            ));
        }
        if s.starts_with("postgresql://") || s.starts_with("postgres://") {
            return PgTarget::parse(s).map(Output::Postgres);
        }
        if let Some((scheme, _)) = s.split_once("://") {
            return Err(ConfigError::Invalid(format!(
                "--output {s}: {scheme}:// is not an output megaflux writes: give a file, or postgresql://USER@HOST:PORT/DB?table=NAME"
            )));
        }
        Ok(Output::File(PathBuf::from(s)))
    }
}

impl PgTarget {
    fn parse(url: &str) -> Result<PgTarget, ConfigError> {
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let shown = hide_password(url);
        let bad = |why: String| ConfigError::Invalid(format!("--output {shown}: {why}"));
        let (mut table, mut sink, mut rest) = (None, None, Vec::new());
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("table", v)) => table = Some(v.to_string()),
                Some(("sink", v)) => sink = Some(v.to_string()),
                _ => rest.push(pair),
            }
        }
        let table = table.ok_or_else(|| bad("name the table to write: add ?table=NAME".into()))?;
        check_name("table", &table).map_err(&bad)?;
        let sink = sink.unwrap_or_else(|| table.clone());
        if sink.is_empty() || sink.len() > MAX_NAME {
            return Err(bad(format!("sink={sink:?} must have 1 to {MAX_NAME} characters")));
        }
        let timeout = format!("connect_timeout={}", CONNECT_TIMEOUT.as_secs());
        if !rest.iter().any(|p| p.starts_with("connect_timeout=")) {
            rest.push(&timeout);
        }
        let connect = format!("{base}?{}", rest.join("&"));
        let config: postgres::Config = connect
            .parse()
            .map_err(|e| bad(format!("not a PostgreSQL URL: {e}")))?;
        if config.get_hosts().is_empty() {
            return Err(bad(
                "name the server: postgresql://USER@HOST:PORT/DB?table=NAME".into()
            ));
        }
        if config.get_user().is_none() {
            return Err(bad(
                "name the user: postgresql://USER@HOST:PORT/DB?table=NAME".into()
            ));
        }
        Ok(PgTarget {
            connect,
            table,
            sink,
            shown,
        })
    }
}

/// `what` must be a plain SQL name: a letter or `_`, then letters, digits or `_`.
fn check_name(what: &str, name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let plain = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !plain || name.len() > MAX_NAME {
        return Err(format!(
            "{what}={name:?} is not a plain name (a letter or _, then letters, digits or _, at most {MAX_NAME})"
        ));
    }
    Ok(())
}

/// The URL with any password replaced by `***`.
fn hide_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_parse_by_their_form_and_a_bad_url_is_named() {
        assert_eq!(
            "out.jsonl".parse::<Output>(),
            Ok(Output::File("out.jsonl".into()))
        );
        let Ok(Output::Postgres(t)) =
            "postgresql://me:secret@db:5433/jobs?table=counts&connect_timeout=9".parse()
        else {
            panic!("a PostgreSQL URL")
        };
        assert_eq!(t.table, "counts");
        assert_eq!(t.sink, "counts");
        assert_eq!(t.connect, "postgresql://me:secret@db:5433/jobs?connect_timeout=9");
        assert_eq!(
            Output::Postgres(t).name(),
            "postgresql://me:***@db:5433/jobs?table=counts&connect_timeout=9"
        );
        let Ok(Output::Postgres(t)) = "postgres://me@db/jobs?table=t&sink=t_day2".parse() else {
            panic!("a PostgreSQL URL")
        };
        assert_eq!((t.table.as_str(), t.sink.as_str()), ("t", "t_day2"));
        assert!(t.connect.ends_with("?connect_timeout=5"), "{}", t.connect);
        for (bad, says) in [
            ("", "--output is empty"),
            ("postgresql://me@db/jobs", "add ?table=NAME"),
            ("postgresql://me@db/jobs?table=a-b", "not a plain name"),
            ("postgresql://me@db/jobs?table=t;drop", "not a plain name"),
            ("postgresql://db/jobs?table=t", "name the user"),
            ("postgresql://me@db:port/jobs?table=t", "not a PostgreSQL URL"),
            ("mysql://me@db/jobs?table=t", "mysql:// is not an output"),
        ] {
            let e = bad.parse::<Output>().unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
