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
/// Largest configuration an exporter's hello may carry, as JSON (a job's is about 1 kB):
/// the model keeps it, and every keyframe and snapshot carries it.
pub const CONFIG_BYTES: usize = 16 << 10;
/// Longest `loads` of a `bin_loads` event from an exporter: a sample names at most 512 bins.
pub const LOADS_BYTES: usize = 32 << 10;
/// How far an exporter's clock may stand from the collector's, in seconds, at its hello
/// (its process started that much earlier or later).
pub const CLOCK_OFFSET_S: f64 = 86_400.0;
/// How far an exporter's event may run ahead of the collector's clock (shifted by the
/// offset its hello showed), in seconds: one further ahead is stamped back to this.
pub const AHEAD_S: f64 = 60.0;

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
    /// Its clock less the collector's, as its hello showed (`None` before the hello).
    offset_s: Option<f64>,
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
            offset_s: None,
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

    /// Whether the exporter may send `event`, received when the collector's clock read
    /// `now_s`; `Err` says why not. An event stamped too far ahead of the exporter's clock
    /// (as its hello placed it) is stamped back to the latest time it could have.
    pub fn check(&mut self, event: &mut Stamped, now_s: f64) -> Result<(), String> {
        if event.process != self.process {
            return Err(format!(
                "exporter of process {} sent an event of process {}",
                self.process, event.process
            ));
        }
        if !event.at_s.is_finite() || event.at_s < 0.0 {
            return Err(format!("an event stamped {} s", event.at_s));
        }
        let Some(offset) = self.offset_s else {
            let Event::Hello { config, .. } = &event.event else {
                return Err("the first event must be the process's hello".into());
            };
            let offset = event.at_s - now_s;
            if offset.abs() > CLOCK_OFFSET_S {
                return Err(format!("its clock stands {offset:.0} s from the collector's"));
            }
            let config_bytes = serde_json::to_vec(config).map_or(usize::MAX, |c| c.len());
            if config_bytes > CONFIG_BYTES {
                return Err(format!(
                    "a hello's configuration of {config_bytes} bytes (at most {CONFIG_BYTES})"
                ));
            }
            return match JobShape::of(event) {
                Some(shape) if shape == self.job => {
                    self.offset_s = Some(offset);
                    Ok(())
                }
                shape => Err(format!(
                    "its hello describes another job ({shape:?}; this one is {:?})",
                    self.job
                )),
            };
        };
        event.at_s = event.at_s.min(now_s + offset + AHEAD_S);
        match &event.event {
            Event::Hello { .. } => Err("a second hello".into()),
            e => self.may_say(e),
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
                phase: phase @ (Phase::Extracted | Phase::Received | Phase::Installed),
                worker: Some(worker),
                bin,
                operator,
                from,
                to,
                ..
            } => {
                self.owns(*worker)?;
                self.operator(operator.as_deref().unwrap_or(""))?;
                self.bin(*bin)?;
                // A worker tells of its own side of a move only: what it sent (from itself)
                // or what it received and installed.
                let own_side = match phase {
                    Phase::Extracted => {
                        from.is_none_or(|f| f == *worker) && to.is_none_or(|t| t < self.job.peers)
                    }
                    _ => from.is_none() && to.is_none_or(|t| t == *worker),
                };
                if own_side {
                    Ok(())
                } else {
                    Err(format!(
                        "worker {worker} told of a move between workers {from:?} and {to:?}, not its own side"
                    ))
                }
            }
            Event::BinLoads {
                worker,
                operator,
                loads,
                ..
            } => {
                self.owns(*worker)?;
                self.operator(operator)?;
                // At most 512 bins a sample, each `bin:records:busy_ns:s` in under 64 bytes.
                if loads.len() > LOADS_BYTES {
                    return Err(format!("a bin_loads event of {} bytes", loads.len()));
                }
                Ok(())
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

    /// Checks `event` at the collector's time 0.
    fn check(s: &mut Speaker, mut event: Stamped) -> Result<(), String> {
        s.check(&mut event, 0.0)
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
            outputs_total: None,
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
        assert!(check(&mut s, of(1, stats(2))).is_err(), "before the hello");
        let mut s = Speaker::new(1, JOB).unwrap();
        assert!(check(&mut s, of(1, hello(4))).is_ok());
        assert!(check(&mut s, of(1, stats(2))).is_ok());
        assert!(check(&mut s, of(1, stats(3))).is_ok());
        assert!(check(&mut s, of(1, stats(1))).is_err(), "process 0's worker");
        assert!(check(&mut s, of(1, stats(70_000))).is_err());
        assert!(check(&mut s, of(0, stats(2))).is_err(), "another process");
        assert!(check(&mut s, of(1, hello(4))).is_err(), "a second hello");
        let finished = Event::JobFinished {
            outputs: None,
            worker: 0,
            records: 0,
        };
        assert!(check(&mut s, of(1, finished)).is_err());
        let size = |bin, operator: &str| Event::BinSize {
            worker: 2,
            operator: operator.into(),
            bin,
            keys: 1,
            bytes: 1,
            standby: false,
        };
        assert!(check(&mut s, of(1, size(15, "count"))).is_ok());
        assert!(check(&mut s, of(1, size(16, "count"))).is_err());
        assert!(check(&mut s, of(1, size(1, &"x".repeat(65)))).is_err());
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
            assert!(check(&mut s, of(1, refused)).is_err());
        }
    }

    #[test]
    fn an_exporter_tells_of_its_own_workers_bin_loads_within_bounds() {
        let mut s = Speaker::new(1, JOB).unwrap();
        assert!(check(&mut s, of(1, hello(4))).is_ok());
        let loads = |worker, loads: String| Event::BinLoads {
            applied: None,
            worker,
            operator: "count".into(),
            interval_ns: 1,
            loads,
        };
        assert!(check(&mut s, of(1, loads(2, "3:10:400 4:1:2:s".into()))).is_ok());
        assert!(
            check(&mut s, of(1, loads(1, "3:10:400".into()))).is_err(),
            "process 0's worker"
        );
        assert!(check(&mut s, of(1, loads(2, "1:1:1 ".repeat(LOADS_BYTES)))).is_err());
    }

    #[test]
    fn clocks_and_configurations_are_bounded() {
        let mut s = Speaker::new(1, JOB).unwrap();
        let mut far = of(1, hello(4));
        far.at_s = 1e300;
        assert!(s.check(&mut far, 0.0).is_err());
        let mut big = of(1, hello(4));
        if let Event::Hello { config, .. } = &mut big.event {
            *config = serde_json::json!({ "x": "y".repeat(CONFIG_BYTES) });
        }
        assert!(s.check(&mut big, 0.0).is_err());
        let mut nan = of(1, hello(4));
        nan.at_s = f64::NAN;
        assert!(s.check(&mut nan, 0.0).is_err());
        // A hello 5 s ahead of the collector: its events may be up to a minute ahead of that.
        let mut greeted = of(1, hello(4));
        greeted.at_s = 5.0;
        assert!(s.check(&mut greeted, 0.0).is_ok());
        let mut ahead = of(1, stats(2));
        ahead.at_s = 1e300;
        assert!(s.check(&mut ahead, 10.0).is_ok());
        assert_eq!(ahead.at_s, 10.0 + 5.0 + AHEAD_S);
        let mut fine = of(1, stats(2));
        fine.at_s = 14.0;
        assert!(s.check(&mut fine, 10.0).is_ok());
        assert_eq!(fine.at_s, 14.0);
    }

    #[test]
    fn a_hello_of_another_job_is_refused() {
        let mut s = Speaker::new(1, JOB).unwrap();
        assert!(check(&mut s, of(1, hello(1 << 30))).is_err());
    }
}
