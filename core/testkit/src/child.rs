//! A child process that cannot outlive its test nor hang it.

use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, ChildStdin, Command, ExitStatus, Output, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process_group};

use crate::deadline;

/// How much of each stream a failure message shows (its end).
const TAIL_BYTES: usize = 6_000;

/// How often a wait looks at a child that has not ended.
const POLL: Duration = Duration::from_millis(20);

/// How long an ended child's pipes may take to reach their end.
const READERS_WAIT: Duration = Duration::from_secs(10);

/// What a child printed so far, with a condition variable rung at every read.
#[derive(Default)]
struct Printed {
    bytes: Mutex<(Vec<u8>, Vec<u8>)>,
    grew: Condvar,
}

/// A running child process, named for the failures that mention it.
///
/// Invariant: while a `Proc` lives, its stdout and stderr are being read (so the child
/// never blocks writing), and when it drops, the child's whole process group has been
/// sent SIGKILL and the child reaped.
pub struct Proc {
    name: String,
    child: Child,
    printed: Arc<Printed>,
    readers: Vec<JoinHandle<()>>,
    status: Option<ExitStatus>,
}

impl Proc {
    /// Starts `command` as `name`: in a new process group, stdout and stderr piped and read
    /// on threads, stdin as the command set it (set `Stdio::null()` or `Stdio::piped()`: an
    /// inherited one is the test runner's). Panics naming `name` if it cannot start.
    pub fn spawn(name: impl Into<String>, command: &mut Command) -> Proc {
        let name = name.into();
        command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("{name} did not start: {e} ({command:?})"));
        let printed = Arc::new(Printed::default());
        let mut readers = Vec::new();
        if let Some(out) = child.stdout.take() {
            readers.push(reader(out, printed.clone(), false));
        }
        if let Some(err) = child.stderr.take() {
            readers.push(reader(err, printed.clone(), true));
        }
        Proc {
            name,
            child,
            printed,
            readers,
            status: None,
        }
    }

    /// The child's name in failures.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The child's process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The child's stdin, once, if the command piped it.
    pub fn stdin(&mut self) -> Option<ChildStdin> {
        self.child.stdin.take()
    }

    /// What the child wrote to stdout so far.
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.lock().0).into_owned()
    }

    /// What the child wrote to stderr so far.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.lock().1).into_owned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (Vec<u8>, Vec<u8>)> {
        // A reader that panicked holding the lock left whole bytes behind; keep them.
        self.printed
            .bytes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The exit status, if the child has ended (reaps it, and kills what is left of its
    /// group at once: after the reap its id may be reused, by another test's child too).
    pub fn try_status(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
            if self.status.is_some() {
                self.kill_leftovers();
            }
        }
        self.status
    }

    /// Whether the child still runs.
    pub fn running(&mut self) -> bool {
        self.try_status().is_none()
    }

    /// Sends `signal` to the child alone (not its group).
    pub fn signal(&mut self, signal: Signal) {
        if self.try_status().is_some() {
            return;
        }
        if let Some(pid) = Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process(pid, signal);
        }
    }

    /// SIGKILL to the child, as a crash would end it.
    pub fn kill(&mut self) {
        self.signal(Signal::KILL);
    }

    /// SIGINT to the child, as Ctrl-C would.
    pub fn interrupt(&mut self) {
        self.signal(Signal::INT);
    }

    /// Waits until the child's stdout (`stderr` false) or stderr holds a line for which
    /// `line` holds, for at most `limit`; returns that line. Panics naming `what`, with what
    /// the child printed, if the child ends or the deadline passes first.
    pub fn wait_for_line(
        &mut self,
        stderr: bool,
        what: &str,
        limit: Duration,
        line: impl Fn(&str) -> bool,
    ) -> String {
        let limit = deadline(limit);
        let until = Instant::now() + limit;
        let mut seen = 0;
        loop {
            {
                let bytes = self.lock();
                let stream = if stderr { &bytes.1 } else { &bytes.0 };
                // Only whole lines; a partial last line is looked at again when it grows.
                let whole = stream.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
                let text = String::from_utf8_lossy(&stream[seen.min(whole)..whole]);
                if let Some(l) = text.lines().find(|l| line(l)) {
                    return l.to_string();
                }
                seen = whole;
                let wait = until.saturating_duration_since(Instant::now()).min(POLL);
                let _ = self.printed.grew.wait_timeout(bytes, wait);
            }
            if let Some(status) = self.try_status() {
                // The readers may still hold the last lines: look once more after they end.
                self.join_readers();
                let bytes = self.lock();
                let stream = if stderr { &bytes.1 } else { &bytes.0 };
                let text = String::from_utf8_lossy(&stream[seen.min(stream.len())..]);
                if let Some(l) = text.lines().find(|l| line(l)) {
                    return l.to_string();
                }
                drop(bytes);
                panic!(
                    "{}: ended ({}) before {what}\n{}",
                    self.name,
                    describe(status),
                    self.printed_tail()
                );
            }
            if Instant::now() >= until {
                let name = self.name.clone();
                let tail = self.printed_tail();
                self.kill_group();
                panic!("{name}: no {what} within {limit:?} (killed)\n{tail}");
            }
        }
    }

    /// As [`Proc::wait_for_line`] on stderr.
    pub fn wait_for_stderr(&mut self, what: &str, limit: Duration, line: impl Fn(&str) -> bool) -> String {
        self.wait_for_line(true, what, limit, line)
    }

    /// Waits for the child to end, for at most `limit`, and returns its status and all it
    /// printed. Past the deadline the child's group is killed and the test fails naming the
    /// child, the deadline and what it printed.
    pub fn wait(mut self, limit: Duration) -> Output {
        let limit = deadline(limit);
        let until = Instant::now() + limit;
        while self.try_status().is_none() {
            if Instant::now() >= until {
                let name = self.name.clone();
                let tail = self.printed_tail();
                self.kill_group();
                panic!("{name} still ran {limit:?} later (killed)\n{tail}");
            }
            std::thread::sleep(POLL);
        }
        self.finish()
    }

    /// The ended child's output, once its pipes are read to their end. A grandchild that
    /// kept the pipes open is killed with the group first.
    fn finish(mut self) -> Output {
        self.kill_group();
        self.join_readers();
        let status = self.status.expect("finish is called on an ended child");
        let bytes = std::mem::take(&mut *self.lock());
        Output {
            status,
            stdout: bytes.0,
            stderr: bytes.1,
        }
    }

    /// Joins the pipe readers once they reached the pipes' end, for at most
    /// [`READERS_WAIT`]: a descendant that left the group (a daemon) may hold a pipe open,
    /// and then what it printed last is not waited for.
    fn join_readers(&mut self) {
        let until = Instant::now() + deadline(READERS_WAIT);
        while self.readers.iter().any(|r| !r.is_finished()) && Instant::now() < until {
            std::thread::sleep(POLL);
        }
        for r in self.readers.drain(..) {
            if r.is_finished() {
                let _ = r.join();
            }
        }
    }

    /// The end of what the child printed, for a failure message.
    pub fn printed_tail(&self) -> String {
        let bytes = self.lock();
        format!(
            "--- {} stdout (end) ---\n{}\n--- {} stderr (end) ---\n{}",
            self.name,
            tail(&bytes.0),
            self.name,
            tail(&bytes.1)
        )
    }

    /// SIGKILL to the child's whole group, then reaps the child. A child already reaped had
    /// its group killed as it was reaped ([`Proc::try_status`]): its id may belong to
    /// another process by now, so nothing is sent again.
    fn kill_group(&mut self) {
        if self.status.is_none() {
            self.kill_leftovers();
            let _ = self.child.kill();
            self.status = self.child.wait().ok();
        }
    }

    /// SIGKILL to the child's group, while the child is not yet reaped or has just been:
    /// the group outlives its leader, and its members may hold the pipes.
    fn kill_leftovers(&self) {
        if let Some(pid) = Pid::from_raw(self.child.id() as i32) {
            let _ = kill_process_group(pid, Signal::KILL);
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill_group();
    }
}

/// Starts `command` as `name` and waits for it for at most `limit` (see [`Proc::wait`]).
pub fn run(name: impl Into<String>, command: &mut Command, limit: Duration) -> Output {
    Proc::spawn(name, command).wait(limit)
}

/// Waits for every one of `procs`, together for at most `limit`. If any still runs then,
/// every one is killed and the test fails naming those still running, with what each
/// printed.
pub fn wait_all(mut procs: Vec<Proc>, limit: Duration) -> Vec<Output> {
    let limit = deadline(limit);
    let until = Instant::now() + limit;
    loop {
        let running: Vec<usize> = (0..procs.len()).filter(|i| procs[*i].running()).collect();
        if running.is_empty() {
            return procs.into_iter().map(Proc::finish).collect();
        }
        if Instant::now() >= until {
            let names: Vec<&str> = running.iter().map(|i| procs[*i].name()).collect();
            let mut message = format!("{} still ran {limit:?} later (all killed)", names.join(", "));
            for p in &procs {
                message.push('\n');
                message.push_str(&p.printed_tail());
            }
            for p in &mut procs {
                p.kill_group();
            }
            panic!("{message}");
        }
        std::thread::sleep(POLL);
    }
}

fn reader(mut stream: impl Read + Send + 'static, printed: Arc<Printed>, stderr: bool) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        loop {
            match stream.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let mut bytes = printed
                        .bytes
                        .lock()
                        .unwrap_or_else(|poisoned| poisoned.into_inner());
                    let to = if stderr { &mut bytes.1 } else { &mut bytes.0 };
                    to.extend_from_slice(&buf[..n]);
                    printed.grew.notify_all();
                }
            }
        }
    })
}

fn tail(bytes: &[u8]) -> String {
    let from = bytes.len().saturating_sub(TAIL_BYTES);
    String::from_utf8_lossy(&bytes[from..]).into_owned()
}

fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        _ => status.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No process `pid`, or only its zombie.
    fn gone(pid: i32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            // The state follows the command's closing parenthesis.
            Ok(stat) => stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        }
    }

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        c
    }

    #[test]
    fn a_child_that_never_ends_is_killed_at_its_deadline_and_named() {
        let mut p = Proc::spawn("the sleeper", &mut sh("echo started; sleep 600"));
        let pid = p.id();
        p.wait_for_line(false, "its first line", Duration::from_secs(30), |l| {
            l == "started"
        });
        let failure = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            p.wait(Duration::from_millis(300))
        }))
        .expect_err("a wait past its deadline fails");
        let message = failure.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(message.contains("the sleeper still ran"), "{message}");
        assert!(message.contains("started"), "what it printed: {message}");
        assert!(gone(pid as i32), "the child was killed and reaped");
    }

    #[test]
    fn a_dropped_child_takes_its_group_with_it() {
        let mut p = Proc::spawn("the parent", &mut sh("sleep 600 & echo $!; wait"));
        let line = p.wait_for_line(false, "the grandchild's pid", Duration::from_secs(30), |l| {
            l.parse::<i32>().is_ok()
        });
        let grandchild: i32 = line.parse().expect("a pid");
        drop(p);
        // The killed grandchild is reaped by whoever adopts it; a zombie counts as gone.
        crate::wait_until(
            "the grandchild to be gone after its parent's guard dropped",
            Duration::from_secs(60),
            || gone(grandchild),
        );
    }

    #[test]
    fn a_child_that_prints_more_than_a_pipe_holds_still_ends() {
        // 1 MiB on each stream: more than a pipe's 64 KiB, read while the child runs.
        let out = run(
            "the chatterbox",
            &mut sh("head -c 1048576 /dev/zero; head -c 1048576 /dev/zero >&2"),
            Duration::from_secs(60),
        );
        assert!(out.status.success());
        assert_eq!((out.stdout.len(), out.stderr.len()), (1 << 20, 1 << 20));
    }

    #[test]
    fn a_line_that_never_comes_fails_naming_it_when_the_child_ends() {
        let mut p = Proc::spawn("the quitter", &mut sh("echo nothing here >&2; exit 4"));
        let failure = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            p.wait_for_stderr("the word formed", Duration::from_secs(30), |l| {
                l.contains("formed")
            })
        }))
        .expect_err("the line never comes");
        let message = failure.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(
            message.contains("the quitter: ended (exit status 4) before the word formed"),
            "{message}"
        );
        assert!(message.contains("nothing here"), "{message}");
    }

    #[test]
    fn wait_all_names_the_one_still_running() {
        let quick = Proc::spawn("quick", &mut sh("true"));
        let slow = Proc::spawn("slow", &mut sh("sleep 600"));
        let failure = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            wait_all(vec![quick, slow], Duration::from_millis(300))
        }))
        .expect_err("slow never ends");
        let message = failure.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(message.starts_with("slow still ran"), "{message}");
    }
}
