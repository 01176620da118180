//! The jobs a binary can run, by name: [`Jobs`], each behind [`AnyJob`], which hides its
//! record types from the command line that picks it.

use std::sync::Arc;

use super::{Job, Params};
use crate::control::ControlHandle;
use crate::error::ConfigError;
use crate::harness::{self, RunConfig, RunError};
use crate::source::Source;
use crate::summary::Summary;

/// A [`Job`] seen without its record types: what a command line needs to check, describe
/// and run it.
pub trait AnyJob: Send + Sync {
    /// The job's name.
    fn name(&self) -> &str;
    /// See [`Job::params`].
    fn params(&self) -> Params;
    /// How it takes its records in the run `run` describes.
    fn input(&self, run: &RunConfig) -> Takes;
    /// See [`Job::describe`].
    fn describe(&self, run: &RunConfig) -> Option<String>;
    /// Why it may not run with adaptive epochs in the run `run` describes
    /// ([`harness::why_not_adaptive`]); `None` if it may.
    fn why_not_adaptive(&self, run: &RunConfig) -> Option<String>;
    /// Checks `run` for this job without starting anything: the settings, and that the job
    /// gets the input it needs (and only then).
    fn check(&self, run: &RunConfig) -> Result<(), ConfigError>;
    /// Runs it: [`harness::run_job`].
    fn run(self: Arc<Self>, run: RunConfig, control: ControlHandle) -> Result<Option<Summary>, RunError>;
}

/// How a job takes its records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Takes {
    /// It makes them.
    Generated,
    /// It reads them from `--input`; `event_time`: its records have an event time.
    Input {
        /// Whether `--pace event-time` can pace them.
        event_time: bool,
    },
}

impl<J: Job> AnyJob for J {
    fn name(&self) -> &str {
        Job::name(self)
    }

    fn params(&self) -> Params {
        Job::params(self)
    }

    fn input(&self, run: &RunConfig) -> Takes {
        match self.source(run) {
            Source::Generated(_) => Takes::Generated,
            Source::Read(r) => Takes::Input {
                event_time: r.has_event_time(),
            },
        }
    }

    fn describe(&self, run: &RunConfig) -> Option<String> {
        Job::describe(self, run)
    }

    fn why_not_adaptive(&self, run: &RunConfig) -> Option<String> {
        harness::why_not_adaptive(self, run)
    }

    fn check(&self, run: &RunConfig) -> Result<(), ConfigError> {
        harness::check_job(self, run)
    }

    fn run(self: Arc<Self>, run: RunConfig, control: ControlHandle) -> Result<Option<Summary>, RunError> {
        harness::run_job(self, run, control)
    }
}

/// The jobs a binary offers, by name, in the order they were added (the first is the one
/// `megaflux run` runs when `--workload` names none).
#[derive(Clone, Default)]
pub struct Jobs {
    jobs: Vec<Arc<dyn AnyJob>>,
}

impl Jobs {
    /// No jobs yet.
    pub fn new() -> Self {
        Jobs::default()
    }

    /// Adds `job`; a job of the same name is replaced, keeping its place.
    pub fn with(mut self, job: impl Job) -> Self {
        let job: Arc<dyn AnyJob> = Arc::new(job);
        match self.jobs.iter_mut().find(|j| j.name() == job.name()) {
            Some(same) => *same = job,
            None => self.jobs.push(job),
        }
        self
    }

    /// Every job of `other` added after these.
    pub fn and(mut self, other: Jobs) -> Self {
        for job in other.jobs {
            match self.jobs.iter_mut().find(|j| j.name() == job.name()) {
                Some(same) => *same = job,
                None => self.jobs.push(job),
            }
        }
        self
    }

    /// The job called `name`.
    pub fn get(&self, name: &str) -> Option<Arc<dyn AnyJob>> {
        self.jobs.iter().find(|j| j.name() == name).cloned()
    }

    /// The job called `name`, or an error that lists the jobs there are.
    pub fn find(&self, name: &str) -> Result<Arc<dyn AnyJob>, ConfigError> {
        self.get(name).ok_or_else(|| {
            ConfigError::Invalid(format!(
                "unknown workload `{name}` (this binary runs {})",
                self.names().join(", ")
            ))
        })
    }

    /// The jobs' names, in order.
    pub fn names(&self) -> Vec<&str> {
        self.jobs.iter().map(|j| j.name()).collect()
    }

    /// The first job added.
    pub fn first(&self) -> Option<Arc<dyn AnyJob>> {
        self.jobs.first().cloned()
    }

    /// Runs the job `run.workload` names.
    pub fn run(&self, run: RunConfig, control: ControlHandle) -> Result<Option<Summary>, RunError> {
        self.find(&run.workload)?.run(run, control)
    }
}

impl<J: Job> From<J> for Jobs {
    fn from(job: J) -> Self {
        Jobs::new().with(job)
    }
}
