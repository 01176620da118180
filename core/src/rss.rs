//! Resident memory of this process, read from `/proc` (Linux); `None` elsewhere.

/// Current resident set size in bytes.
pub fn current() -> Option<u64> {
    status_kib("VmRSS:").map(|kib| kib * 1024)
}

/// Peak resident set size of the process so far, in bytes.
pub fn peak() -> Option<u64> {
    status_kib("VmHWM:").map(|kib| kib * 1024)
}

fn status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line[field.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_own_memory_on_linux() {
        if cfg!(target_os = "linux") {
            let now = super::current().unwrap();
            let peak = super::peak().unwrap();
            assert!(now > 0 && peak >= now);
        }
    }
}
