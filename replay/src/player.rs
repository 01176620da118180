//! The time machine's source: a trace's events at the pace they were recorded (times a
//! speed), and seeking, stepping and jumping between marks on request.
//!
//! [`Player`] is a state machine, requests and elapsed time in, [`Output`]s out, so that tests
//! drive it without a clock; [`Player::run`] drives it with one. Its invariant: the
//! outputs sent so far, applied in order (a [`Output::Reset`] starting over), make the model
//! of the trace's first [`Position::events`] events.

use std::io::{BufRead, Seek};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use megaflux_probe::event::Stamped;
use megaflux_probe::model::JobModel;
use megaflux_probe::record::TraceReader;

use crate::error::ReplayError;
use crate::seek::{Clock, Index, Mark};

/// The speeds playing goes through, slowest first.
pub const SPEEDS: [f64; 9] = [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0];
/// Where in [`SPEEDS`] playing starts: 1×.
pub const FIRST_SPEED: usize = 2;
/// The most events sent in one batch; a trace too dense for the speed plays slower.
pub const BATCH: usize = 4096;
/// How often [`Player::run`] sends what became due while playing.
pub const FRAME: Duration = Duration::from_millis(50);

/// What a person asks of the player.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Request {
    /// Pause, or play on; at the end of the trace, play it again from the start.
    PlayPause,
    /// The next speed up in [`SPEEDS`] (the fastest stays).
    Faster,
    /// The next speed down in [`SPEEDS`] (the slowest stays).
    Slower,
    /// To the trace's clock reading, in seconds.
    SeekTo(f64),
    /// That many seconds on (or back, when negative).
    SeekBy(f64),
    /// One event on (and pause).
    Step,
    /// One event back (and pause).
    StepBack,
    /// To just after the next mark's event (or nowhere, past the last mark).
    NextMark,
    /// To just after the previous mark's event before the position, or to the start.
    PrevMark,
}

/// The whole trace, as the timeline shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct Timeline {
    /// The trace's clock at its first event, in seconds.
    pub start_s: f64,
    /// The trace's clock at its last event, in seconds.
    pub end_s: f64,
    /// Events in the trace, keyframes included.
    pub events: u64,
    /// The places worth jumping to, in the trace's order.
    pub marks: Vec<Mark>,
}

/// Where the player stands.
#[derive(Clone, Debug, PartialEq)]
pub struct Position {
    /// Events applied.
    pub events: u64,
    /// The trace's clock where playing has got to.
    pub at_s: f64,
    /// Playing (`false`: paused).
    pub playing: bool,
    /// Trace seconds played per second of the viewer's, one of [`SPEEDS`].
    pub speed: f64,
}

/// What the player sends to whoever shows the trace.
#[derive(Clone, Debug)]
pub enum Output {
    /// The whole trace's extent and marks, sent first.
    Timeline(Timeline),
    /// The model at the new position: the view starts over from it.
    Reset(Box<JobModel>),
    /// Events to apply, in order.
    Events(Vec<Stamped>),
    /// Where the player stands, after the outputs of every request and every tick.
    Position(Position),
    /// Reading the trace failed (a line the index skimmed does not parse, say): the player
    /// pauses before that line. Also sent first when the index skipped lines it could not
    /// read, naming them.
    Problem(String),
}

/// Plays one trace.
pub struct Player<R> {
    reader: TraceReader<R>,
    index: Index,
    /// Events applied so far, and the clock after them.
    done: u64,
    clock: Clock,
    /// The next event, read but not yet due.
    next: Option<Stamped>,
    /// Where playing has got to on the trace's clock (ahead of `clock` between events).
    play_at: f64,
    playing: bool,
    speed: usize,
}

impl<R: BufRead + Seek> Player<R> {
    /// Indexes the trace `reader` reads (one pass, skipping the lines it cannot read) and
    /// stands at its start, playing. Playing stops before a line that cannot be read, as it
    /// does at any line that does not read.
    pub fn new(mut reader: TraceReader<R>) -> Result<Self, ReplayError> {
        let index = Index::build(&mut reader)?;
        reader.seek(reader.header_bytes(), 1)?;
        Ok(Player {
            play_at: index.start_s,
            reader,
            index,
            done: 0,
            clock: Clock::default(),
            next: None,
            playing: true,
            speed: FIRST_SPEED,
        })
    }

    /// The trace's index, built when the player was made.
    pub fn index(&self) -> &Index {
        &self.index
    }

    /// What a viewer needs first: the timeline, the lines the index skipped (if any), and
    /// the (empty) start.
    pub fn start(&self) -> Vec<Output> {
        let mut out = vec![Output::Timeline(Timeline {
            start_s: self.index.start_s,
            end_s: self.index.end_s,
            events: self.index.events,
            marks: self.index.marks.clone(),
        })];
        if !self.index.unreadable.is_empty() {
            out.push(Output::Problem(format!(
                "{}; playing stops before each",
                self.index.unreadable
            )));
        }
        out.push(Output::Reset(Box::new(JobModel::from_header(
            self.reader.header(),
        ))));
        out.push(self.position());
        out
    }

    /// Where the player stands now, as an [`Output::Position`] (its clock reading kept
    /// within the trace's).
    pub fn position(&self) -> Output {
        Output::Position(Position {
            events: self.done,
            at_s: self
                .play_at
                .clamp(self.index.start_s, self.index.end_s.max(self.index.start_s)),
            playing: self.playing,
            speed: SPEEDS[self.speed],
        })
    }

    /// Takes a request.
    pub fn request(&mut self, request: Request) -> Vec<Output> {
        let result = match request {
            Request::PlayPause => {
                self.playing = !self.playing;
                if self.playing && self.done >= self.index.events {
                    // At the end, play starts over.
                    self.seek_to_event(0)
                } else {
                    self.play_at = self.here();
                    Ok(Vec::new())
                }
            }
            Request::Faster => {
                self.speed = (self.speed + 1).min(SPEEDS.len() - 1);
                Ok(Vec::new())
            }
            Request::Slower => {
                self.speed = self.speed.saturating_sub(1);
                Ok(Vec::new())
            }
            Request::SeekTo(at_s) => self.seek_to_time(at_s),
            Request::SeekBy(by) => self.seek_to_time(self.here() + by),
            Request::Step => {
                self.playing = false;
                self.step()
            }
            Request::StepBack => {
                self.playing = false;
                self.seek_to_event(self.done.saturating_sub(1))
            }
            Request::NextMark => match self.index.marks.iter().find(|m| m.events_before >= self.done) {
                Some(m) => self.seek_to_event(m.events_before + 1),
                None => Ok(Vec::new()),
            },
            Request::PrevMark => match self
                .index
                .marks
                .iter()
                .rev()
                .find(|m| m.events_before + 1 < self.done)
            {
                Some(m) => self.seek_to_event(m.events_before + 1),
                None => self.seek_to_event(0),
            },
        };
        self.finish(result)
    }

    /// Plays on for `wall` of the viewer's time: sends the events that became due.
    pub fn advance(&mut self, wall: Duration) -> Vec<Output> {
        if !self.playing {
            return Vec::new();
        }
        self.play_at += wall.as_secs_f64() * SPEEDS[self.speed];
        let mut out = self.play_due();
        out.push(self.position());
        out
    }

    /// The outputs of a request or a tick, the position last. A failed read is reported and
    /// stops playing; the player stands where it stood before it.
    fn finish(&mut self, result: Result<Vec<Output>, ReplayError>) -> Vec<Output> {
        let mut out = match result {
            Ok(out) => out,
            Err(e) => {
                self.playing = false;
                vec![Output::Problem(e.to_string())]
            }
        };
        out.push(self.position());
        out
    }

    /// The clock reading the position shows when not playing between events.
    fn here(&self) -> f64 {
        if self.done == 0 {
            self.index.start_s
        } else {
            self.clock.0.max(self.index.start_s)
        }
    }

    /// The next event. A line that cannot be read leaves the reader where it was.
    fn read(&mut self) -> Result<Option<Stamped>, ReplayError> {
        if let Some(e) = self.next.take() {
            return Ok(Some(e));
        }
        let (offset, line) = (self.reader.offset(), self.reader.line());
        match self.reader.next_event() {
            Ok(e) => Ok(e),
            Err(e) => {
                self.reader.seek(offset, line)?;
                Err(e.into())
            }
        }
    }

    /// Puts the reader back after the events applied, when a seek failed half way.
    fn stand_back(&mut self, e: ReplayError) -> ReplayError {
        self.next = None;
        match self.index.model_and_clock_after(&mut self.reader, self.done) {
            Ok(_) => e,
            Err(again) => again,
        }
    }

    /// Sends the events that are due; at a line that cannot be read, those before it and
    /// the problem, and pauses there.
    fn play_due(&mut self) -> Vec<Output> {
        let mut batch = Vec::new();
        let mut clock = self.clock;
        let mut ended = false;
        let mut failed = None;
        while batch.len() < BATCH {
            let event = match self.read() {
                Ok(Some(event)) => event,
                Ok(None) => {
                    ended = true;
                    break;
                }
                // The events before it are played; the player stops before it.
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            };
            let mut after = clock;
            if after.tick(&event) > self.play_at {
                self.next = Some(event);
                break;
            }
            clock = after;
            batch.push(event);
        }
        self.clock = clock;
        self.done += batch.len() as u64;
        if ended {
            // The end: stop there.
            self.playing = false;
            self.play_at = self.index.end_s;
        }
        if failed.is_some() {
            self.playing = false;
            self.play_at = self.here();
        }
        if batch.len() == BATCH {
            // Too dense to keep up: play on from here rather than fall further behind.
            self.play_at = self.here();
        }
        let mut out = Vec::new();
        if !batch.is_empty() {
            out.push(Output::Events(batch));
        }
        if let Some(e) = failed {
            out.push(Output::Problem(e.to_string()));
        }
        out
    }

    fn step(&mut self) -> Result<Vec<Output>, ReplayError> {
        let Some(event) = self.read()? else {
            return Ok(Vec::new());
        };
        self.clock.tick(&event);
        self.done += 1;
        self.play_at = self.here();
        Ok(vec![Output::Events(vec![event])])
    }

    fn seek_to_time(&mut self, at_s: f64) -> Result<Vec<Output>, ReplayError> {
        let at_s = at_s.clamp(self.index.start_s, self.index.end_s.max(self.index.start_s));
        let n = match self.index.events_until(&mut self.reader, at_s) {
            Ok(n) => n,
            Err(e) => return Err(self.stand_back(e)),
        };
        let out = self.seek_to_event(n)?;
        // Between events: the position is where it was asked to be.
        self.play_at = at_s.max(self.here());
        Ok(out)
    }

    fn seek_to_event(&mut self, n: u64) -> Result<Vec<Output>, ReplayError> {
        // Whatever happens, the reader no longer stands after a pending event.
        self.next = None;
        let (model, clock) = match self.index.model_and_clock_after(&mut self.reader, n) {
            Ok(found) => found,
            Err(e) => return Err(self.stand_back(e)),
        };
        self.done = n.min(self.index.events);
        self.clock = clock;
        self.play_at = self.here();
        Ok(vec![Output::Reset(Box::new(model))])
    }

    /// Plays until `requests` or `out` hang up: requests are taken as they come, due
    /// events sent every [`FRAME`] while playing.
    pub fn run(mut self, requests: Receiver<Request>, mut out: impl FnMut(Output) -> bool) {
        for o in self.start() {
            if !out(o) {
                return;
            }
        }
        let mut last = Instant::now();
        loop {
            let was_playing = self.playing;
            let wait = if was_playing {
                FRAME
            } else {
                Duration::from_secs(3600)
            };
            let mut outputs = match requests.recv_timeout(wait) {
                Ok(r) => self.request(r),
                Err(RecvTimeoutError::Timeout) => Vec::new(),
                Err(RecvTimeoutError::Disconnected) => return,
            };
            // A pause is not played through: playing resumes from the moment it resumed.
            let now = Instant::now();
            if was_playing {
                outputs.extend(self.advance(now - last));
            }
            last = now;
            for o in outputs {
                if !out(o) {
                    return;
                }
            }
        }
    }
}
