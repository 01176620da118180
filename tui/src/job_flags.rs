//! The jobs' own flags on `megaflux run`: `--workload` lists the binary's jobs, and each
//! job's [`Params`] become flags of `run`,
//! listed in `--help` under the names of the jobs that take them, and read back as text for
//! [`megaflux::RunConfig::params`]. The job that runs checks its values
//! ([`Params::resolve`]); one it does not take is refused then, naming the flags it has.

use clap::parser::ValueSource;
use clap::{Arg, ArgMatches, Command};
use megaflux::job::{Jobs, ParamValues, Params, params::Declared};

/// The subcommand that takes the jobs' flags.
const RUN: &str = "run";

/// Flags clap gives every subcommand itself.
const CLAP_OWN: &[&str] = &["help"];

/// Every flag any job of `jobs` declares, once (as the first job declares it), with the
/// jobs that take it and each one's default, in the order first declared.
fn declared(jobs: &Jobs) -> Vec<(Declared, Vec<(String, &'static str)>)> {
    let mut flags: Vec<(Declared, Vec<(String, &'static str)>)> = Vec::new();
    for name in jobs.names() {
        let Some(job) = jobs.get(name) else { continue };
        let params: Params = job.params();
        for flag in params.iter() {
            let taker = (name.to_string(), flag.default);
            match flags.iter_mut().find(|(f, _)| f.name == flag.name) {
                Some((_, takers)) => takers.push(taker),
                None => flags.push((flag.clone(), vec![taker])),
            }
        }
    }
    flags
}

/// What `--help` says of the defaults of a flag `takers` share: one, or each job's.
fn defaults(takers: &[(String, &'static str)]) -> String {
    let first = takers.first().map_or("", |t| t.1);
    if takers.iter().all(|t| t.1 == first) {
        return if first.is_empty() {
            String::new()
        } else {
            format!(" [default: {first}]")
        };
    }
    let each: Vec<String> = takers
        .iter()
        .map(|(job, d)| format!("{job}: {}", if d.is_empty() { "none" } else { d }))
        .collect();
    format!(" [default: {}]", each.join(", "))
}

/// `command` with the flags of `jobs`' own on its `run` subcommand; an error names a job's
/// flag that `run` has already.
pub(crate) fn add(command: Command, jobs: &Jobs) -> Result<Command, String> {
    let names = jobs.names().join(", ");
    let command = command.mut_subcommand(RUN, |run| {
        run.mut_arg("workload", |a| {
            a.help(format!(
                "The job to run, by name: one of this binary's ({names}) [default: its first]"
            ))
        })
    });
    let flags = declared(jobs);
    let Some(run) = command.find_subcommand(RUN) else {
        return Ok(command);
    };
    for (flag, takers) in &flags {
        if CLAP_OWN.contains(&flag.name)
            || run
                .get_arguments()
                .any(|a| a.get_long() == Some(flag.name) || a.get_id() == flag.name)
        {
            let names: Vec<&str> = takers.iter().map(|t| t.0.as_str()).collect();
            return Err(format!(
                "job {} declares --{}, a flag of `megaflux run` itself: give it another name",
                names.join(", "),
                flag.name
            ));
        }
    }
    Ok(command.mut_subcommand(RUN, |mut run| {
        for (flag, takers) in flags {
            let default = defaults(&takers);
            let names: Vec<&str> = takers.iter().map(|t| t.0.as_str()).collect();
            let value_name = if flag.value_name.is_empty() {
                "VALUE"
            } else {
                flag.value_name
            };
            run = run.arg(
                Arg::new(flag.name)
                    .long(flag.name)
                    .value_name(value_name)
                    .help(format!("{}{default}", flag.help))
                    .help_heading(format!("Flags of {}", names.join(", "))),
            );
        }
        run
    }))
}

/// The values of the jobs' flags given on the command line of `run`.
pub(crate) fn given(run: &ArgMatches, jobs: &Jobs) -> ParamValues {
    let mut values = ParamValues::new();
    for (flag, _) in declared(jobs) {
        if run.value_source(flag.name) == Some(ValueSource::CommandLine)
            && let Some(value) = run.get_one::<String>(flag.name)
        {
            values.set(flag.name, value);
        }
    }
    values
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_flag_says_each_jobs_default_where_they_differ() {
        let same = [("a".to_string(), "5"), ("b".to_string(), "5")];
        assert_eq!(defaults(&same), " [default: 5]");
        let differ = [("a".to_string(), "5"), ("b".to_string(), "")];
        assert_eq!(defaults(&differ), " [default: a: 5, b: none]");
        assert_eq!(defaults(&[("a".to_string(), "")]), "");
    }
}
