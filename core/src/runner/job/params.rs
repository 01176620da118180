//! A job's own flags: each declared once as a typed [`Flag`], listed by [`super::Job::params`],
//! and given to a run as text ([`ParamValues`], in [`crate::RunConfig::params`]).
//!
//! The values travel as the text they were given in: the trace header records them, the
//! cluster's processes compare them, and a re-run reads them back, all without knowing
//! their types. Before a run starts, every value is checked against the job's declaration
//! ([`Params::resolve`]) and the flags not given take their defaults; a job then reads each
//! as its type with [`crate::RunConfig::get`].

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::ConfigError;

/// One flag of a job's own, `--NAME VALUE`, whose value is a `T`.
///
/// ```
/// use megaflux::job::params::Flag;
///
/// /// How long a user may pause before their session closes.
/// const GAP_MS: Flag<u64> = Flag::new("gap-ms", "200", "Pause that ends a session, in ms");
/// ```
pub struct Flag<T> {
    name: &'static str,
    default: &'static str,
    help: &'static str,
    value_name: &'static str,
    parse: fn(&str) -> Result<T, String>,
}

impl<T: FromStr> Flag<T>
where
    T::Err: fmt::Display,
{
    /// A flag `--name` whose value parses as `T` (`FromStr`), `default` when not given.
    pub const fn new(name: &'static str, default: &'static str, help: &'static str) -> Self {
        Flag {
            name,
            default,
            help,
            value_name: "",
            parse: from_str::<T>,
        }
    }
}

fn from_str<T: FromStr>(text: &str) -> Result<T, String>
where
    T::Err: fmt::Display,
{
    text.parse::<T>().map_err(|e| e.to_string())
}

impl<T> Flag<T> {
    /// A flag `--name` whose value `parse` reads (and checks), `default` when not given.
    pub const fn parsed_by(
        name: &'static str,
        default: &'static str,
        help: &'static str,
        parse: fn(&str) -> Result<T, String>,
    ) -> Self {
        Flag {
            name,
            default,
            help,
            value_name: "",
            parse,
        }
    }

    /// The same flag, its value called `value_name` in `--help` (`N`, `SECS`).
    pub const fn value_name(self, value_name: &'static str) -> Self {
        Flag { value_name, ..self }
    }

    /// Its name, without the dashes.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Its value in `values`, or its default if it is not there.
    ///
    /// # Panics
    /// If the text does not parse: values are checked against the job's declaration before
    /// a run starts ([`Params::resolve`]), so only a flag read through another parser than
    /// the one the job declared, or read undeclared with a default that does not parse, can.
    pub fn of(&self, values: &ParamValues) -> T {
        let text = values.text(self.name).unwrap_or(self.default);
        match (self.parse)(text) {
            Ok(value) => value,
            Err(why) => panic!(
                "--{} {text}: {why} (a flag the job reads must be the one its `params` declares)",
                self.name
            ),
        }
    }
}

/// A declared flag with its type hidden: what the command line and the checks need.
#[derive(Clone)]
pub struct Declared {
    /// The flag's name, without the dashes.
    pub name: &'static str,
    /// Its value when not given.
    pub default: &'static str,
    /// One line on what it sets.
    pub help: &'static str,
    /// What `--help` calls its value.
    pub value_name: &'static str,
    check: Check,
}

/// Why a text is not a value of a flag, if it is not: its parser, its type forgotten.
type Check = Arc<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

impl Declared {
    /// Why `text` is not a value of this flag, if it is not.
    pub fn check(&self, text: &str) -> Result<(), String> {
        (self.check)(text)
    }
}

impl fmt::Debug for Declared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "--{} (default {:?})", self.name, self.default)
    }
}

/// The flags a job declares ([`super::Job::params`]), in order.
#[derive(Clone, Debug, Default)]
pub struct Params {
    flags: Vec<Declared>,
}

impl Params {
    /// No flags.
    pub fn new() -> Self {
        Params::default()
    }

    /// These and `flag` (replacing one of the same name).
    pub fn with<T: 'static>(mut self, flag: &Flag<T>) -> Self {
        let parse = flag.parse;
        let declared = Declared {
            name: flag.name,
            default: flag.default,
            help: flag.help,
            value_name: flag.value_name,
            check: Arc::new(move |text| parse(text).map(|_| ())),
        };
        self.flags.retain(|f| f.name != flag.name);
        self.flags.push(declared);
        self
    }

    /// The flags, in the order declared.
    pub fn iter(&self) -> impl Iterator<Item = &Declared> {
        self.flags.iter()
    }

    /// Whether a flag `name` is declared.
    pub fn declares(&self, name: &str) -> bool {
        self.flags.iter().any(|f| f.name == name)
    }

    /// Whether no flag is declared.
    pub fn is_empty(&self) -> bool {
        self.flags.is_empty()
    }

    /// `given` checked against these flags for the job `job`, with every flag not given at
    /// its default: an error names a flag the job does not take, or a value its flag
    /// refuses.
    pub fn resolve(&self, job: &str, given: &ParamValues) -> Result<ParamValues, ConfigError> {
        let invalid = |m: String| ConfigError::Invalid(m);
        if let Some(name) = given.0.keys().find(|n| !self.declares(n)) {
            let takes = if self.flags.is_empty() {
                "no flags of its own".to_string()
            } else {
                let names: Vec<String> = self.flags.iter().map(|f| format!("--{}", f.name)).collect();
                names.join(", ")
            };
            return Err(invalid(format!("{job} takes no --{name} (it takes {takes})")));
        }
        let mut resolved = ParamValues::default();
        for flag in &self.flags {
            let (text, given) = match given.text(flag.name) {
                Some(text) => (text, true),
                None => (flag.default, false),
            };
            flag.check(text).map_err(|why| {
                invalid(if given {
                    format!("--{} {text}: {why}", flag.name)
                } else {
                    format!("{job}'s default --{} {text} does not parse: {why}", flag.name)
                })
            })?;
            resolved.0.insert(flag.name.to_string(), text.to_string());
        }
        Ok(resolved)
    }
}

/// The values of a run's job flags by name, as text (a flag not here takes its default).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ParamValues(BTreeMap<String, String>);

impl ParamValues {
    /// No values.
    pub fn new() -> Self {
        ParamValues::default()
    }

    /// These with `--name value`.
    pub fn with(mut self, name: &str, value: impl fmt::Display) -> Self {
        self.set(name, value);
        self
    }

    /// Sets `--name value`.
    pub fn set(&mut self, name: &str, value: impl fmt::Display) {
        self.0.insert(name.to_string(), value.to_string());
    }

    /// The text given for `--name`.
    pub fn text(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// Every value, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    /// Whether none is given.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Keeps only the values whose flag `keep` names.
    pub fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        self.0.retain(|name, _| keep(name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GAP: Flag<u64> = Flag::new("gap-ms", "200", "gap").value_name("MS");
    const SHIFT: Flag<Option<f64>> = Flag::parsed_by("shift", "", "shift", |t| {
        if t.is_empty() {
            Ok(None)
        } else {
            t.parse()
                .map(Some)
                .map_err(|e: std::num::ParseFloatError| e.to_string())
        }
    });

    #[test]
    fn values_are_checked_defaulted_and_read_as_their_type() {
        let params = Params::new().with(&GAP).with(&SHIFT);
        let none = params.resolve("sessions", &ParamValues::new()).unwrap();
        assert_eq!(GAP.of(&none), 200);
        assert_eq!(SHIFT.of(&none), None);
        let given = ParamValues::new().with("gap-ms", 500).with("shift", 1.5);
        let resolved = params.resolve("sessions", &given).unwrap();
        assert_eq!((GAP.of(&resolved), SHIFT.of(&resolved)), (500, Some(1.5)));
        let bad = params
            .resolve("sessions", &ParamValues::new().with("gap-ms", "soon"))
            .unwrap_err()
            .to_string();
        assert!(bad.contains("--gap-ms soon: invalid digit"), "{bad}");
        let unknown = params
            .resolve("sessions", &ParamValues::new().with("keys", 5))
            .unwrap_err()
            .to_string();
        assert!(
            unknown.contains("sessions takes no --keys (it takes --gap-ms, --shift)"),
            "{unknown}"
        );
        let none = Params::new()
            .resolve("words", &ParamValues::new().with("keys", 5))
            .unwrap_err()
            .to_string();
        assert!(
            none.contains("words takes no --keys (it takes no flags of its own)"),
            "{none}"
        );
    }
}
