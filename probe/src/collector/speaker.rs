//! What an exporter may say: the events its own process's workers emit, about its own
//! workers and the job's real bins, after exactly one hello that agrees with the job.
//!
//! Everything else comes from process 0 alone (the control plane, latency and commands run
//! on worker 0) or from the collector itself (recording, keyframes, the summary), and
//! `bin_sizes` never travels (exporters expand it). An exporter that says anything else is
//! closed: its events would otherwise stop the trace, end the job in every view, or make
//! the model allocate what the job cannot have.

use crate::event::{Event, Phase, Stamped};

/// Longest operator name an exporter may use (core's are a word).
pub const OPERATOR_CHARS: usize = 64;

/// The job's shape as a process's hello gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JobShape {
    /// Timely processes in the job.
    pub processes: u32,
    /// Workers per process.
    pub workers: u32,
    /// Workers in the whole job.
    pub peers: u32,
    /// Bins per operator.
    pub bins: u32,
}

impl JobShape {
    /// The shape `hello` names (`None` for another kind of event).
    pub fn of(hello: &Stamped) -> Option<JobShape> {
        match hello.event {
            Event::Hello {
                processes,
                workers,
                peers,
                bins,
                ..
            } => Some(JobShape {
                processes,
                workers,
                peers,
                bins,
            }),
            _ => None,
        }
    }
}

/// One exporter's right to speak, checked event by event.
#[derive(Debug)]
pub struct Speaker {
    process: u32,
    job: JobShape,
    greeted: bool,
}

impl Speaker {
    /// An exporter of `process` in `job`; `Err` if the job has no such process.
    pub fn new(process: u32, job: JobShape) -> Result<Speaker, String> {
        if process >= job.processes {
            return Err(format!(
                "the job has processes 0 to {}, not {process}",
                job.processes.saturating_sub(1)
            ));
        }
        Ok(Speaker {
            process,
            job,
            greeted: false,
        })
    }

    /// The process it speaks for.
    pub fn process(&self) -> u32 {
        self.process
    }

    fn owns(&self, worker: u32) -> Result<(), String> {
        if self.job.workers > 0 && worker / self.job.workers == self.process {
            Ok(())
        } else {
            Err(format!(
                "exporter of process {} spoke for worker {worker}, which is not one of its own",
                self.process
            ))
        }
    }

    fn bin(&self, bin: u32) -> Result<(), String> {
        if bin < self.job.bins {
            Ok(())
        } else {
            Err(format!("bin {bin}: the job has {} bins", self.job.bins))
        }
    }

    fn operator(&self, name: &str) -> Result<(), String> {
        if name.len() <= OPERATOR_CHARS {
            Ok(())
        } else {
            Err(format!("an operator name of {} bytes", name.len()))
        }
    }

    /// Whether the exporter may send `event`; `Err` says why not.
    pub fn check(&mut self, event: &Stamped) -> Result<(), String> {
        if event.process != self.process {
            return Err(format!(
                "exporter of process {} sent an event of process {}",
                self.process, event.process
            ));
        }
        let first = !self.greeted;
        self.greeted = true;
        match (&event.event, first) {
            (Event::Hello { .. }, true) => match JobShape::of(event) {
                Some(shape) if shape == self.job => Ok(()),
                shape => Err(format!(
                    "its hello describes another job ({shape:?}; this one is {:?})",
                    self.job
                )),
            },
            (Event::Hello { .. }, false) => Err("a second hello".into()),
            (_, true) => Err("the first event must be the process's hello".into()),
            (e, false) => self.may_say(e),
        }
    }

    fn may_say(&self, event: &Event) -> Result<(), String> {
        match event {
            Event::JobStarted { worker, peers, .. } if *peers == self.job.peers => self.owns(*worker),
            Event::JobFinished { worker, .. } | Event::WorkerStats { worker, .. } => self.owns(*worker),
            Event::BinSize {
                worker,
                operator,
                bin,
                ..
            }
            | Event::Takeover {
                worker,
                operator,
                bin,
                ..
            } => {
                self.owns(*worker)?;
                self.operator(operator)?;
                self.bin(*bin)
            }
            Event::Sampled { worker, operator, .. } | Event::Frontier { worker, operator, .. } => {
                self.owns(*worker)?;
                self.operator(operator)
            }
            Event::Migration {
                phase: Phase::Extracted | Phase::Received | Phase::Installed,
                worker: Some(worker),
                bin,
                operator,
                ..
            } => {
                self.owns(*worker)?;
                self.operator(operator.as_deref().unwrap_or(""))?;
                self.bin(*bin)
            }
            Event::Dropped { place, .. } if place == "queue" => Ok(()),
            other => Err(format!(
                "an exporter may not send `{}` events (those are process 0's or the collector's)",
                other.kind()
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const JOB: JobShape = JobShape {
        processes: 2,
        workers: 2,
        peers: 4,
        bins: 16,
    };

    fn of(process: u32, event: Event) -> Stamped {
        Stamped {
            at_s: 0.0,
            process,
            event,
        }
    }

    fn hello(peers: u32) -> Event {
        Event::Hello {
            processes: 2,
            workers: 2,
            peers,
            bins: 16,
            config: serde_json::json!({}),
            anchor_unix_s: None,
        }
    }

    fn stats(worker: u32) -> Event {
        Event::WorkerStats {
            worker,
            records: 1,
            applied: None,
            busy_ns: 1,
            interval_ns: 1,
        }
    }

    #[test]
    fn an_exporter_speaks_for_its_own_workers_after_one_true_hello() {
        assert!(Speaker::new(2, JOB).is_err());
        let mut s = Speaker::new(1, JOB).unwrap();
        assert!(s.check(&of(1, stats(2))).is_err(), "before the hello");
        let mut s = Speaker::new(1, JOB).unwrap();
        assert!(s.check(&of(1, hello(4))).is_ok());
        assert!(s.check(&of(1, stats(2))).is_ok());
        assert!(s.check(&of(1, stats(3))).is_ok());
        assert!(s.check(&of(1, stats(1))).is_err(), "process 0's worker");
        assert!(s.check(&of(1, stats(70_000))).is_err());
        assert!(s.check(&of(0, stats(2))).is_err(), "another process");
        assert!(s.check(&of(1, hello(4))).is_err(), "a second hello");
        let finished = Event::JobFinished {
            worker: 0,
            records: 0,
        };
        assert!(s.check(&of(1, finished)).is_err());
        let size = |bin, operator: &str| Event::BinSize {
            worker: 2,
            operator: operator.into(),
            bin,
            keys: 1,
            bytes: 1,
            standby: false,
        };
        assert!(s.check(&of(1, size(15, "count"))).is_ok());
        assert!(s.check(&of(1, size(16, "count"))).is_err());
        assert!(s.check(&of(1, size(1, &"x".repeat(65)))).is_err());
        for refused in [
            Event::Recording {
                on: false,
                failed: None,
            },
            Event::Summary {
                summary: serde_json::json!({}),
            },
            Event::Keyframe {
                model: serde_json::json!({}),
            },
            Event::BinSizes {
                worker: 2,
                operator: "count".into(),
                sizes: String::new(),
            },
            Event::Dropped {
                place: "subscriber 1".into(),
                count: 1,
            },
        ] {
            assert!(s.check(&of(1, refused)).is_err());
        }
    }

    #[test]
    fn a_hello_of_another_job_is_refused() {
        let mut s = Speaker::new(1, JOB).unwrap();
        assert!(s.check(&of(1, hello(1 << 30))).is_err());
    }
}
