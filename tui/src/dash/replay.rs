//! The time machine (to come).
use std::path::Path;

pub fn run(path: &Path) -> anyhow::Result<()> {
    anyhow::bail!("not yet: {}", path.display())
}
