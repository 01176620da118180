//! What the replay crate's tests share.

use std::path::PathBuf;

/// The sample traces in `traces/`, in name order.
pub fn samples() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../traces");
    let mut traces: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("traces/ is there")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    traces.sort();
    assert!(!traces.is_empty(), "no sample traces in {}", dir.display());
    traces
}

/// The sample trace whose file name is `name`.
#[allow(dead_code)] // Not every test crate picks one sample.
pub fn sample(name: &str) -> PathBuf {
    samples()
        .into_iter()
        .find(|p| p.ends_with(name))
        .unwrap_or_else(|| panic!("no sample {name}"))
}
