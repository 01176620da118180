//! The files a run writes (`--output`, and the probe's `--record`): created anew, or with
//! `--force` replaced, but never through a symbolic link, and never the file the run reads.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

/// Creates `path` for writing; an existing file is replaced (emptied) only if `replace`. A
/// symbolic link is refused, replace or not: `--force` replaces a file, not what a link
/// points at (which may be anything the user can write).
pub fn create(path: &Path, replace: bool) -> io::Result<File> {
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "it is a symbolic link: give the file itself (--force replaces files, not what links point at)",
        ));
    }
    let mut options = OpenOptions::new();
    options.write(true);
    if replace {
        options.create(true).truncate(true);
    } else {
        options.create_new(true);
    }
    #[cfg(unix)]
    {
        // A link made between the look above and the open is refused too.
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NOFOLLOW);
    }
    options.open(path)
}

/// The path as it would be resolved once it exists: its directory made absolute, links and
/// all (a file that does not exist yet has no path of its own to resolve).
fn resolved(path: &Path) -> Option<PathBuf> {
    if let Ok(p) = std::fs::canonicalize(path) {
        return Some(p);
    }
    let name = path.file_name()?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    Some(std::fs::canonicalize(dir).ok()?.join(name))
}

/// Whether `a` and `b` name the same file: the same path once resolved, or, both existing,
/// the same file on disk (hard links).
pub fn same_file(a: &Path, b: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if let (Ok(x), Ok(y)) = (std::fs::metadata(a), std::fs::metadata(b))
            && (x.dev(), x.ino()) == (y.dev(), y.ino())
        {
            return true;
        }
    }
    matches!((resolved(a), resolved(b)), (Some(x), Some(y)) if x == y)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_not_followed_and_files_are_kept_unless_replaced() {
        let dir = std::env::temp_dir().join(format!("megaflux-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let precious = dir.join("precious.txt");
        std::fs::write(&precious, "keep me").unwrap();
        let out = dir.join("out.jsonl");
        let _ = std::fs::remove_file(&out);
        assert!(create(&out, false).is_ok());
        assert_eq!(
            create(&out, false).unwrap_err().kind(),
            io::ErrorKind::AlreadyExists
        );
        assert!(create(&out, true).is_ok());
        #[cfg(unix)]
        {
            let link = dir.join("link.jsonl");
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(&precious, &link).unwrap();
            for replace in [false, true] {
                let e = create(&link, replace).unwrap_err();
                assert!(e.to_string().contains("symbolic link"), "{e}");
            }
            assert_eq!(std::fs::read_to_string(&precious).unwrap(), "keep me");
            assert!(same_file(&link, &precious));
        }
        assert!(same_file(&out, &dir.join(".").join("out.jsonl")));
        assert!(!same_file(&out, &precious));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
