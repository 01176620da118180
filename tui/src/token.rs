//! The collector's token when none is given: one is made for each run, as Jupyter makes
//! its kernels' keys, and written to a file only this user can read, named by the
//! collector's port. `attach` and the exporters of a cluster on the same machine find it
//! there; any other local user can watch a loopback collector but not command it (a
//! `fail` of the only copy of some bins would end the job with them lost). The same care
//! for the cluster's secret: a `--cluster-token-file` that others can read is named.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;

/// Where the token files live: `$XDG_RUNTIME_DIR/megaflux`, else
/// `~/.local/share/megaflux/runtime` (Jupyter's choice for the same thing).
pub fn runtime_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir).join("megaflux"));
    }
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty())?;
    Some(PathBuf::from(home).join(".local/share/megaflux/runtime"))
}

/// The token file of the collector serving on `addr`, in `dir`.
fn path_in(dir: &Path, addr: SocketAddr) -> PathBuf {
    dir.join(format!("collector-{}.token", addr.port()))
}

/// The token a collector on this machine wrote for `addr`, if `addr` is loopback and the
/// file is there.
pub fn find(addr: SocketAddr) -> Option<String> {
    find_in(&runtime_dir()?, addr)
}

/// As [`find`], waiting up to `wait` for the file to appear (a loopback address only).
pub fn wait_for(addr: SocketAddr, wait: std::time::Duration) -> Option<String> {
    let since = std::time::Instant::now();
    loop {
        let found = find(addr);
        if found.is_some() || !addr.ip().is_loopback() || since.elapsed() >= wait {
            return found;
        }
        std::thread::sleep(FILE_POLL);
    }
}

/// How often [`wait_for`] looks.
const FILE_POLL: std::time::Duration = std::time::Duration::from_millis(20);

fn find_in(dir: &Path, addr: SocketAddr) -> Option<String> {
    if !addr.ip().is_loopback() {
        return None;
    }
    let text = std::fs::read_to_string(path_in(dir, addr)).ok()?;
    Some(text.trim().to_string()).filter(|t| !t.is_empty())
}

/// A fresh token: 32 hex digits from the system's random source.
pub fn generate() -> anyhow::Result<String> {
    let bytes = megaflux::membership::secret::nonce().context("making the collector's token")?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// A token file, removed when dropped.
#[derive(Debug)]
pub struct TokenFile {
    path: PathBuf,
}

impl TokenFile {
    /// Writes `token` for the collector on `addr`, readable by this user alone.
    pub fn write(addr: SocketAddr, token: &str) -> anyhow::Result<Self> {
        let dir = runtime_dir().context(
            "no runtime directory for the collector's token ($XDG_RUNTIME_DIR and $HOME are unset)",
        )?;
        Self::write_in(&dir, addr, token)
    }

    fn write_in(dir: &Path, addr: SocketAddr, token: &str) -> anyhow::Result<Self> {
        let path = path_in(dir, addr);
        create_private_dir(dir).with_context(|| format!("creating {}", dir.display()))?;
        // A file left by a run that was killed: its collector is gone, its port is ours.
        // (Created anew, exclusively: a link planted at its name is not written through.)
        let _ = std::fs::remove_file(&path);
        let mut file = create_private_file(&path).with_context(|| format!("writing {}", path.display()))?;
        writeln!(file, "{token}").with_context(|| format!("writing {}", path.display()))?;
        Ok(TokenFile { path })
    }

    /// Where it is.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }
}

impl Drop for TokenFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(unix)]
fn create_private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

#[cfg(not(unix))]
fn create_private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)
}

#[cfg(unix)]
fn create_private_file(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

#[cfg(not(unix))]
fn create_private_file(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
}

/// What to say of a secret's file that other users can read (its mode), if they can: the
/// secret is only as private as its file.
#[cfg(unix)]
pub fn readable_by_others(path: &Path) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).ok()?.permissions().mode();
    (mode & 0o044 != 0).then(|| {
        format!(
            "{} can be read by other users (mode {:o}): `chmod 600` it, or they can take the cluster's secret",
            path.display(),
            mode & 0o777
        )
    })
}

/// Elsewhere than Unix, files have no such mode to check.
#[cfg(not(unix))]
pub fn readable_by_others(_path: &Path) -> Option<String> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn a_secret_file_others_can_read_is_named() {
        use std::os::unix::fs::PermissionsExt;
        let scratch = tempfile::tempdir().unwrap();
        let path = scratch.path().join("cluster-token");
        std::fs::write(&path, "0123456789abcdef0123\n").unwrap();
        for (mode, named) in [
            (0o600, false),
            (0o400, false),
            (0o640, true),
            (0o644, true),
            (0o604, true),
        ] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let said = readable_by_others(&path);
            assert_eq!(said.is_some(), named, "{mode:o}: {said:?}");
            if let Some(said) = said {
                assert!(said.contains(&format!("mode {mode:o}")), "{said}");
            }
        }
        assert_eq!(readable_by_others(&scratch.path().join("none")), None);
    }

    #[test]
    fn a_token_file_is_private_found_by_port_and_removed_with_its_run() {
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path().join("megaflux");
        let addr: SocketAddr = "127.0.0.1:45999".parse().unwrap();
        let token = generate().unwrap();
        assert_eq!(token.len(), 32);
        assert_ne!(token, generate().unwrap());
        let file = TokenFile::write_in(&dir, addr, &token).unwrap();
        assert_eq!(find_in(&dir, addr).as_deref(), Some(token.as_str()));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(file.path()).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "{mode:o}");
        }
        assert_eq!(
            find_in(&dir, "10.0.0.1:45999".parse().unwrap()),
            None,
            "only loopback"
        );
        drop(file);
        assert_eq!(find_in(&dir, addr), None);
    }
}
