//! What an input may make the job hold: a line at most `--max-line-bytes` long (a stream
//! that never sends a newline is stopped, not buffered whole), and at most
//! [`READ_AHEAD_BYTES`] of lines read and not yet taken by the job.

use std::io::{self, BufRead, Read};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// The longest line an input may have unless `--max-line-bytes` says otherwise: 1 MiB.
pub const DEFAULT_MAX_LINE_BYTES: usize = 1 << 20;
/// The bytes of lines the input thread may have read ahead of the job.
pub const READ_AHEAD_BYTES: u64 = 64 << 20;
/// How often a reader waiting for room looks whether the job went away.
const ROOM_POLL: Duration = Duration::from_millis(100);

/// A reader that fails a line longer than `max` bytes (its line end not counted) rather
/// than hold it, and counts every byte it hands on in `read`.
pub(crate) struct LineCap<R> {
    inner: R,
    max: usize,
    /// Bytes of the current line handed on so far.
    run: usize,
    /// What the last `fill_buf` gave: its length, and whether it ends a line.
    last: (usize, bool),
    read: Arc<AtomicU64>,
}

impl<R: BufRead> LineCap<R> {
    pub(crate) fn new(inner: R, max: usize, read: Arc<AtomicU64>) -> Self {
        LineCap {
            inner,
            max,
            run: 0,
            last: (0, false),
            read,
        }
    }
}

impl<R: BufRead> Read for LineCap<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let n = {
            let available = self.fill_buf()?;
            let n = available.len().min(out.len());
            out[..n].copy_from_slice(&available[..n]);
            n
        };
        self.consume(n);
        Ok(n)
    }
}

impl<R: BufRead> BufRead for LineCap<R> {
    /// At most up to the end of the current line, and never past `max` bytes of it.
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        let room = self.max - self.run;
        let (max, run) = (self.max, self.run);
        let buffer = self.inner.fill_buf()?;
        let window = &buffer[..buffer.len().min(room + 1)];
        let (len, ends) = match window.iter().position(|b| *b == b'\n') {
            Some(at) => (at + 1, true),
            None if buffer.len() > room => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "a line longer than {max} bytes ({} so far; --max-line-bytes raises the limit)",
                        run + window.len()
                    ),
                ));
            }
            None => (buffer.len(), false),
        };
        self.last = (len, ends);
        Ok(&self.inner.fill_buf()?[..len])
    }

    fn consume(&mut self, amount: usize) {
        let (len, ends) = self.last;
        if ends && amount == len {
            self.run = 0;
        } else {
            self.run += amount;
        }
        self.last = (len.saturating_sub(amount), ends);
        self.read.fetch_add(amount as u64, Ordering::Relaxed);
        self.inner.consume(amount);
    }
}

/// The bytes an input thread has read and the job has not yet taken: the thread waits for
/// room before it reads more than [`READ_AHEAD_BYTES`] ahead.
#[derive(Default)]
pub(crate) struct ReadAhead {
    held: Mutex<u64>,
    room: Condvar,
    /// The job no longer takes anything: the thread stops waiting.
    closed: AtomicBool,
}

impl ReadAhead {
    /// The reader holds `bytes` more; waits while it holds more than `limit`, unless the
    /// job went away. Returns whether the job still takes records.
    pub(crate) fn hold(&self, bytes: u64, limit: u64) -> bool {
        let Ok(mut held) = self.held.lock() else {
            return false;
        };
        *held += bytes;
        while *held > limit && !self.closed.load(Ordering::Acquire) {
            held = match self.room.wait_timeout(held, ROOM_POLL) {
                Ok((h, _)) => h,
                Err(_) => return false,
            };
        }
        !self.closed.load(Ordering::Acquire)
    }

    /// The job took `bytes`.
    pub(crate) fn took(&self, bytes: u64) {
        if let Ok(mut held) = self.held.lock() {
            *held = held.saturating_sub(bytes);
            self.room.notify_all();
        }
    }

    /// The job takes nothing more.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.room.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn capped(text: &str, max: usize) -> (LineCap<&[u8]>, Arc<AtomicU64>) {
        let read = Arc::new(AtomicU64::new(0));
        (LineCap::new(text.as_bytes(), max, Arc::clone(&read)), read)
    }

    fn lines(reader: &mut impl BufRead) -> Vec<Result<String, String>> {
        let mut got = Vec::new();
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) => return got,
                Ok(_) => got.push(Ok(line)),
                Err(e) => {
                    got.push(Err(e.to_string()));
                    return got;
                }
            }
        }
    }

    #[test]
    fn lines_up_to_the_limit_pass_and_a_longer_one_fails() {
        let (mut r, read) = capped("abc\nabcd\n\nab", 4);
        assert_eq!(
            lines(&mut r),
            vec![
                Ok("abc\n".into()),
                Ok("abcd\n".into()),
                Ok("\n".into()),
                Ok("ab".into())
            ]
        );
        assert_eq!(read.load(Ordering::Relaxed), 12);
        let (mut r, _) = capped("abc\nabcde\nabc\n", 4);
        let got = lines(&mut r);
        assert_eq!(got[0], Ok("abc\n".into()));
        let e = got[1].clone().unwrap_err();
        assert!(e.starts_with("a line longer than 4 bytes"), "{e}");
        assert_eq!(got.len(), 2, "reading stops at the long line");
    }

    #[test]
    fn a_line_longer_than_the_buffer_is_caught_across_reads() {
        let text = format!("{}\n", "x".repeat(100));
        let inner = std::io::BufReader::with_capacity(8, text.as_bytes());
        let mut r = LineCap::new(inner, 50, Arc::default());
        let got = lines(&mut r);
        assert!(
            got[0].as_ref().is_err_and(|e| e.contains("longer than 50")),
            "{got:?}"
        );
        let inner = std::io::BufReader::with_capacity(8, text.as_bytes());
        let mut r = LineCap::new(inner, 100, Arc::default());
        assert_eq!(lines(&mut r), vec![Ok(text.clone())]);
    }

    #[test]
    fn a_reader_waits_for_room_until_the_job_takes_or_goes() {
        let ahead = Arc::new(ReadAhead::default());
        assert!(ahead.hold(60, 100));
        let waiting = {
            let ahead = Arc::clone(&ahead);
            std::thread::spawn(move || ahead.hold(60, 100))
        };
        ahead.took(60);
        assert!(waiting.join().unwrap(), "room made");
        let stuck = {
            let ahead = Arc::clone(&ahead);
            std::thread::spawn(move || ahead.hold(200, 100))
        };
        ahead.close();
        assert!(!stuck.join().unwrap(), "the job went away");
    }
}
