//! What crosses processes must survive the trip. Within a process timely hands records over
//! without encoding them and bins are handed over as they are, so a type whose serde form
//! bincode cannot read (untagged or internally tagged enums, `#[serde(flatten)]`,
//! `skip_serializing_if`, `serde_json::Value`: anything that needs a self-describing format)
//! passes every test on one process, then fails, or decodes wrong, in a cluster.
//!
//! So debug builds, and runs with `--check-serde`, round-trip the first record, output and
//! bin state each operator sees on each worker through bincode 1, the encoding timely's
//! exchange and a moving bin use between processes: encoded, decoded and encoded again, it
//! must come back as long as it was (not byte for byte: a hash map encodes in its own
//! order, which a decoded copy does not keep). One that fails stops the job naming the
//! operator and the type.

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::Bin;
use crate::Time;

/// What a type needs to cross processes, for the message that says it did not.
const NEEDS: &str = "types crossing processes travel in bincode 1, which cannot read untagged or internally tagged enums, #[serde(flatten)], skip_serializing_if or serde_json::Value (anything that needs a self-describing format)";

/// Whether `value` comes back the same from bincode 1; why not, if not.
pub(crate) fn round_trip<T: Serialize + DeserializeOwned>(value: &T) -> Result<(), String> {
    let bytes = bincode::serialize(value).map_err(|e| format!("encoding it failed: {e}"))?;
    let back: T = bincode::deserialize(&bytes).map_err(|e| format!("decoding it failed: {e}"))?;
    let again = bincode::serialize(&back).map_err(|e| format!("encoding it again failed: {e}"))?;
    if again.len() != bytes.len() {
        return Err(format!(
            "it decodes to another value ({} bytes encoded, {} once decoded and encoded again)",
            bytes.len(),
            again.len()
        ));
    }
    Ok(())
}

/// Stops the job if `value`, the first of `operator`'s `what`, does not survive the trip.
fn check<T: Serialize + DeserializeOwned>(operator: &str, what: &str, value: &T) {
    if let Err(why) = round_trip(value) {
        panic!(
            "operator {operator}: its {what} ({}) cannot cross processes: {why}; {NEEDS}",
            std::any::type_name::<T>()
        );
    }
}

/// `logic`, with the first record, output and bin state it sees round-tripped (when `on`).
pub(crate) fn checked<R, S, O>(
    on: bool,
    operator: &str,
    mut logic: impl FnMut(Time, &mut Bin<S>, &mut Vec<R>, &mut Vec<O>) + 'static,
) -> impl FnMut(Time, &mut Bin<S>, &mut Vec<R>, &mut Vec<O>) + 'static
where
    R: Serialize + DeserializeOwned,
    S: Serialize + DeserializeOwned,
    O: Serialize + DeserializeOwned,
{
    let operator = operator.to_string();
    let (mut records, mut outputs, mut state) = (on, on, on);
    move |time, bin, input, out| {
        if records && let Some(first) = input.first() {
            records = false;
            check(&operator, "records", first);
        }
        let from = out.len();
        logic(time, bin, input, out);
        if outputs && let Some(first) = out.get(from) {
            outputs = false;
            check(&operator, "outputs", first);
        }
        if state {
            state = false;
            check(&operator, "bin state", bin);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Serialize, Deserialize)]
    #[serde(untagged)]
    enum Untagged {
        A(u64),
        B(String),
    }

    #[derive(Serialize, Deserialize)]
    #[serde(tag = "kind")]
    enum Tagged {
        Click { user: u64 },
    }

    #[derive(Serialize, Deserialize)]
    struct Inner {
        x: u64,
    }

    #[derive(Serialize, Deserialize)]
    struct Flat {
        #[serde(flatten)]
        inner: Inner,
    }

    #[derive(Serialize, Deserialize)]
    struct Skips {
        #[serde(skip_serializing_if = "Option::is_none")]
        maybe: Option<u32>,
        n: u64,
    }

    #[test]
    fn plain_types_survive_and_self_describing_ones_are_caught() {
        assert_eq!(round_trip(&(7u64, "a".to_string(), vec![1.5f64])), Ok(()));
        assert_eq!(
            round_trip(&Some(std::collections::BTreeMap::from([(1u8, 2u8)]))),
            Ok(())
        );
        for why in [
            round_trip(&Untagged::B("x".into())),
            round_trip(&Tagged::Click { user: 3 }),
            round_trip(&Flat {
                inner: Inner { x: 1 },
            }),
            round_trip(&Skips { maybe: None, n: 5 }),
            round_trip(&serde_json::json!({"a": 1})),
        ] {
            assert!(why.is_err());
        }
    }

    #[test]
    fn the_first_record_that_cannot_cross_stops_the_job_naming_operator_and_type() {
        let mut logic = checked(
            true,
            "joins",
            |_t, _bin: &mut Bin<u64>, r: &mut Vec<Untagged>, _out: &mut Vec<u64>| {
                r.clear();
            },
        );
        let mut bin = Bin::new(0u64);
        let stopped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            logic(1, &mut bin, &mut vec![Untagged::A(1)], &mut Vec::new());
        }));
        let message = *stopped.unwrap_err().downcast::<String>().unwrap();
        assert!(message.starts_with("operator joins: its records ("), "{message}");
        assert!(
            message.contains("Untagged) cannot cross processes: decoding it failed"),
            "{message}"
        );
        // Off: nothing is checked.
        let mut quiet = checked(
            false,
            "joins",
            |_t, _bin: &mut Bin<u64>, r: &mut Vec<Untagged>, _out: &mut Vec<u64>| {
                r.clear();
            },
        );
        quiet(1, &mut bin, &mut vec![Untagged::A(1)], &mut Vec::new());
    }
}
