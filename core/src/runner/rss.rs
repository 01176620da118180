//! Resident memory of this process, and the machine's memory, read from `/proc` (Linux);
//! `None` elsewhere.

/// Current resident set size in bytes.
pub fn current() -> Option<u64> {
    status_kib("VmRSS:").map(|kib| kib * 1024)
}

/// Peak resident set size of the process so far, in bytes.
pub fn peak() -> Option<u64> {
    status_kib("VmHWM:").map(|kib| kib * 1024)
}

/// The machine's memory in bytes.
pub fn total_memory() -> Option<u64> {
    kib_of("/proc/meminfo", "MemTotal:").map(|kib| kib * 1024)
}

fn status_kib(field: &str) -> Option<u64> {
    kib_of("/proc/self/status", field)
}

/// A `Field:   123 kB` line of a `/proc` file.
fn kib_of(file: &str, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(file).ok()?;
    let line = text.lines().find(|l| l.starts_with(field))?;
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
            assert!(super::total_memory().unwrap() > peak);
        }
    }
}
