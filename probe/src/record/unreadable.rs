//! Event lines a trace reader cannot read, and what it does with them.

use std::fmt;

/// The most line numbers an [`Unreadable`] keeps; it counts the rest.
pub const KEPT_LINES: usize = 32;

/// What a [`super::TraceReader`] does with an event line it cannot read: one that is not
/// UTF-8, not JSON, not an event (a known kind without its fields), or longer than
/// [`super::MAX_LINE_BYTES`]. The header line is never skipped: a trace whose header cannot
/// be read is refused.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BadLines {
    /// An error naming the line (what a player stops at).
    #[default]
    Refuse,
    /// Skipped; the reader notes its number in its [`Unreadable`]. A line that is a JSON
    /// event with a clock and a kind, of a kind read whole, comes back from
    /// [`super::TraceReader::next_skimmed`] as its head (so that it is counted as an event).
    Skip,
}

/// The event lines a reader skipped because it could not read them: the first
/// [`KEPT_LINES`] numbers, how many in all, and why the first one was unreadable.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Unreadable {
    lines: Vec<usize>,
    count: u64,
    /// The last line noted: a line read again after a seek back is not noted twice.
    last: usize,
    first_reason: Option<String>,
}

impl Unreadable {
    /// Notes that line `line` could not be read, for `reason`. Lines are noted in order; one
    /// at or before the last noted (read again after a seek back) is already counted.
    pub(super) fn note(&mut self, line: usize, reason: String) {
        if line <= self.last {
            return;
        }
        self.last = line;
        self.count += 1;
        if self.lines.len() < KEPT_LINES {
            self.lines.push(line);
        }
        self.first_reason.get_or_insert(reason);
    }

    /// Whether every line was read.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// How many lines were skipped.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The numbers of the first [`KEPT_LINES`] lines skipped (the header is line 1).
    pub fn lines(&self) -> &[usize] {
        &self.lines
    }

    /// Why the first line skipped could not be read.
    pub fn first_reason(&self) -> Option<&str> {
        self.first_reason.as_deref()
    }
}

/// `skipped 1 unreadable line: 248 (line 248: not an event: ...)`; past [`KEPT_LINES`],
/// `... and N more`.
impl fmt::Display for Unreadable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let plural = if self.count == 1 { "" } else { "s" };
        write!(f, "skipped {} unreadable line{plural}: ", self.count)?;
        for (i, line) in self.lines.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{line}")?;
        }
        let more = self.count.saturating_sub(self.lines.len() as u64);
        if more > 0 {
            write!(f, " and {more} more")?;
        }
        if let (Some(first), Some(reason)) = (self.lines.first(), &self.first_reason) {
            write!(f, " (line {first}: {reason})")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_kept_up_to_the_cap_and_counted_past_it() {
        let mut u = Unreadable::default();
        assert!(u.is_empty());
        u.note(248, "not an event: oops".into());
        assert_eq!(
            u.to_string(),
            "skipped 1 unreadable line: 248 (line 248: not an event: oops)"
        );
        // Read again after a seek back: not counted twice.
        u.note(248, "again".into());
        assert_eq!(u.count(), 1);
        for line in 300..400 {
            u.note(line, "bad".into());
        }
        assert_eq!(u.count(), 101);
        assert_eq!(u.lines().len(), KEPT_LINES);
        assert_eq!(u.lines()[..2], [248, 300]);
        let text = u.to_string();
        assert!(
            text.starts_with("skipped 101 unreadable lines: 248, 300, 301"),
            "{text}"
        );
        assert!(
            text.contains(&format!(" and {} more", 101 - KEPT_LINES)),
            "{text}"
        );
        assert_eq!(u.first_reason(), Some("not an event: oops"));
    }
}
