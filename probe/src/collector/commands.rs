//! Subscribers' commands, once the connection's task has let them through (token, size and
//! rate are checked there, before anything about a command is logged): checked against
//! the job as the model knows it, then passed to the job, which answers.

use megaflux::control::Command;

use super::limits::short;
use super::state::State;
use crate::event::{Event, Outcome};
use crate::wire::CommandRequest;

/// How often the recording may be resumed: each resumption writes a keyframe of the whole
/// job (tens of MB for a job of many bins), so no more often than keyframes come anyway.
pub(super) const RESUME_EVERY: std::time::Duration = super::KEYFRAME_EVERY;

impl State {
    /// Takes a subscriber's command: rejects what cannot be right, forwards the rest to the
    /// job. Either way the feed (and the trace) gets a `command` event: `rejected` with the
    /// reason, or `received` with the id under which the job will answer.
    pub(super) fn command(&mut self, subscriber: u64, request: u64, command: CommandRequest) {
        if let CommandRequest::Record { on } = command {
            return self.record(subscriber, request, on);
        }
        let describe = command.describe();
        let finished = self.model.workers.get(&0).is_some_and(|w| w.finished);
        let checked = self.check(command).and_then(|c| match self.control.as_ref() {
            _ if finished => Err("the job has finished".to_string()),
            Some(control) => Ok((c, control)),
            None => Err("this collector has no job to command".to_string()),
        });
        let (outcome, id, reason) = match checked {
            Err(reason) => {
                // A reason may quote the command (a target's whole spec).
                let reason = short(&reason);
                self.answer(subscriber, request, Outcome::Rejected, Some(reason.clone()));
                (Outcome::Rejected, None, Some(reason))
            }
            Ok((command, control)) => {
                let id = control.send(command);
                self.pending.insert(id, (subscriber, request));
                (Outcome::Received, Some(id), None)
            }
        };
        let event = self.own(Event::Command {
            outcome,
            id,
            time: None,
            command: describe,
            request: None,
            source: None,
            reason,
        });
        self.handle(vec![event]);
    }

    /// Pauses or resumes the trace: the collector's own command.
    fn record(&mut self, subscriber: u64, request: u64, on: bool) {
        let refused = match (&self.recorder, &self.report.recording_failed) {
            (None, Some(failed)) => Some(format!("the recording failed: {failed}")),
            (None, None) => Some("this job records nothing (start it with --record FILE)".into()),
            // Each resumption writes a keyframe of the whole job: resumptions are paced.
            (Some(_), _)
                if on
                    && self.model.recording != Some(true)
                    && self.resumed.is_some_and(|t| t.elapsed() < RESUME_EVERY) =>
            {
                Some(format!(
                    "the recording was resumed less than {RESUME_EVERY:?} ago"
                ))
            }
            (Some(_), _) => None,
        };
        if let Some(reason) = refused {
            self.answer(subscriber, request, Outcome::Rejected, Some(reason));
            return;
        }
        if self.model.recording != Some(on) {
            if on {
                self.resumed = Some(tokio::time::Instant::now());
            }
            let event = self.own(Event::Recording { on, failed: None });
            self.handle(vec![event]);
            // After a gap the trace's bin sizes and frontiers are stale: start it afresh.
            if on {
                self.keyframe(true);
            }
            self.flush();
        }
        self.answer(subscriber, request, Outcome::Applied, None);
    }

    /// What can be checked before the job sees the command (the job checks again).
    fn check(&self, command: CommandRequest) -> Result<Command, String> {
        let bins = self.model.bins();
        let peers = self.model.peers;
        let known = |worker: usize| {
            if peers > 0 && worker >= peers as usize {
                Err(format!(
                    "unknown worker {worker}: the job has workers 0 to {}",
                    peers - 1
                ))
            } else {
                Ok(())
            }
        };
        match &command {
            CommandRequest::MoveBins {
                bins: moved, worker, ..
            } => {
                if moved.is_empty() {
                    return Err("no bins to move".into());
                }
                known(*worker)?;
                if let (Some(n), Some(bad)) = (bins, moved.iter().find(|b| **b >= bins.unwrap_or(0) as usize))
                {
                    return Err(format!(
                        "unknown bin {bad}: the job has {n} bins, 0 to {}",
                        n.saturating_sub(1)
                    ));
                }
            }
            CommandRequest::Pin { bins: pinned, .. } => {
                if pinned.is_empty() {
                    return Err("no bins to pin".into());
                }
                if let (Some(n), Some(bad)) =
                    (bins, pinned.iter().find(|b| **b >= bins.unwrap_or(0) as usize))
                {
                    return Err(format!(
                        "unknown bin {bad}: the job has {n} bins, 0 to {}",
                        n.saturating_sub(1)
                    ));
                }
            }
            CommandRequest::Fail { worker }
            | CommandRequest::Rejoin { worker }
            | CommandRequest::Exclude { worker, .. } => known(*worker)?,
            _ => {}
        }
        command.to_command()
    }
}
