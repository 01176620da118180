//! What every process of one job must agree on: the settings that shape its dataflow, its
//! records, their times or its outputs, each by the flag that sets it. A process started
//! with another value of any of them is refused, and told which.

use serde::{Deserialize, Serialize};

/// The most settings a hello carries.
pub const MAX_SETTINGS: usize = 64;
/// A value longer than this travels as its hash (a frame is at most
/// [`super::wire::MAX_FRAME`] bytes).
const MAX_VALUE: usize = 64;

/// A job's settings, by flag, in a fixed order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settings(Vec<(String, String)>);

impl Settings {
    /// No settings yet.
    pub fn new() -> Self {
        Settings::default()
    }

    /// Adds the setting of `flag` (its value as the flag takes it); a long value is kept as
    /// its hash, which compares the same.
    pub fn with(mut self, flag: &str, value: impl ToString) -> Self {
        let value = value.to_string();
        let value = if value.len() > MAX_VALUE {
            format!("xxh3:{:016x}", xxhash_rust::xxh3::xxh3_64(value.as_bytes()))
        } else {
            value
        };
        self.0.push((flag.to_string(), value));
        self
    }

    /// Whether it could have come from a megaflux process (a bounded number of settings).
    pub fn is_plausible(&self) -> bool {
        self.0.len() <= MAX_SETTINGS
    }

    /// The first setting in which `theirs` (process `process`'s) differs from these
    /// (process 0's), said for people: `--rate is 10000 on process 1, 20000 on process 0`.
    pub fn differs(&self, theirs: &Settings, process: usize) -> Option<String> {
        let value = |s: &Settings, flag: &str| {
            s.0.iter()
                .find(|(f, _)| f == flag)
                .map_or_else(|| "not set".to_string(), |(_, v)| v.clone())
        };
        let flags = self.0.iter().chain(theirs.0.iter()).map(|(f, _)| f.as_str());
        for flag in flags {
            let (ours, other) = (value(self, flag), value(theirs, flag));
            if ours != other {
                return Some(format!(
                    "{} is {} on process {process}, {} on process 0",
                    shown(flag),
                    shown(&other),
                    shown(&ours)
                ));
            }
        }
        None
    }
}

/// A value as a message quotes it: printable and short (it came from the network).
fn shown(value: &str) -> String {
    let printable: String = value
        .chars()
        .take(MAX_VALUE)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if printable.is_empty() {
        "empty".to_string()
    } else {
        printable
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(rate: u64) -> Settings {
        Settings::new().with("--workload", "q4").with("--rate", rate)
    }

    #[test]
    fn the_first_setting_that_differs_is_named_with_both_values() {
        assert_eq!(job(20_000).differs(&job(20_000), 1), None);
        assert_eq!(
            job(20_000).differs(&job(10_000), 2).as_deref(),
            Some("--rate is 10000 on process 2, 20000 on process 0")
        );
        let more = job(20_000).with("--drain", "all");
        assert_eq!(
            job(20_000).differs(&more, 1).as_deref(),
            Some("--drain is all on process 1, not set on process 0")
        );
    }

    #[test]
    fn long_values_compare_by_hash_and_strange_ones_are_quoted_harmlessly() {
        let long = |c: char| Settings::new().with("--input", c.to_string().repeat(500));
        assert_eq!(long('a'), long('a'));
        assert!(long('a').differs(&long('b'), 1).unwrap().contains("xxh3:"));
        let odd = Settings(vec![("--seed".into(), "\u{1b}[2J".into())]);
        let said = Settings::new().with("--seed", 1).differs(&odd, 1).unwrap();
        assert!(!said.contains('\u{1b}'), "{said}");
    }
}
