//! Readers that turn an input's bytes into records, naming the line of anything they cannot
//! read.

use std::io::BufRead;
use std::marker::PhantomData;
use std::sync::Arc;

use serde::de::DeserializeOwned;

use super::InputError;

/// A parser of one line into a record, or the reason it is not one.
pub(crate) type Parse<R> = Arc<dyn Fn(&str) -> Result<R, String> + Send + Sync>;

/// The records of one input, in order.
pub trait Records<R>: Send {
    /// The next record; `None` at the end of the input. After an error the reader is done.
    fn next_record(&mut self) -> Option<Result<R, InputError>>;
}

/// One record per line, parsed by the job's function; blank lines are skipped.
pub(crate) struct Lines<R> {
    input: Box<dyn BufRead + Send>,
    name: String,
    parse: Parse<R>,
    /// The line read last (1-based).
    line: u64,
    buffer: String,
    done: bool,
}

impl<R> Lines<R> {
    pub(crate) fn new(input: Box<dyn BufRead + Send>, name: String, parse: Parse<R>) -> Self {
        Lines {
            input,
            name,
            parse,
            line: 0,
            buffer: String::new(),
            done: false,
        }
    }
}

impl<R> Records<R> for Lines<R> {
    fn next_record(&mut self) -> Option<Result<R, InputError>> {
        while !self.done {
            self.buffer.clear();
            self.line += 1;
            match self.input.read_line(&mut self.buffer) {
                Ok(0) => self.done = true,
                Ok(_) => {
                    let text = self.buffer.trim_end_matches(['\n', '\r']);
                    if text.trim().is_empty() {
                        continue;
                    }
                    let parsed = (self.parse)(text);
                    return Some(parsed.map_err(|reason| {
                        self.done = true;
                        InputError::at(&self.name, self.line, reason)
                    }));
                }
                Err(e) => {
                    self.done = true;
                    return Some(Err(InputError::at(&self.name, self.line, e.to_string())));
                }
            }
        }
        None
    }
}

/// CSV rows without a header, one per line, deserialized by serde: the fields of each
/// line are split by `csv_core` (quotes may hold commas), trimmed, and handed to `R`'s
/// `Deserialize` in order.
pub(crate) struct Csv<R> {
    lines: Lines<csv::StringRecord>,
    _records: PhantomData<fn() -> R>,
}

impl<R> Csv<R> {
    pub(crate) fn new(input: Box<dyn BufRead + Send>, name: String) -> Self {
        let splitter = std::sync::Mutex::new(Splitter::new());
        let split: Parse<csv::StringRecord> = Arc::new(move |line: &str| match splitter.lock() {
            Ok(mut s) => s.split(line),
            Err(_) => Err("the CSV splitter failed before".to_string()),
        });
        Csv {
            lines: Lines::new(input, name, split),
            _records: PhantomData,
        }
    }
}

impl<R: DeserializeOwned> Records<R> for Csv<R> {
    fn next_record(&mut self) -> Option<Result<R, InputError>> {
        let row = match self.lines.next_record()? {
            Ok(row) => row,
            Err(e) => return Some(Err(e)),
        };
        Some(row.deserialize::<R>(None).map_err(|e| {
            self.lines.done = true;
            let reason = match e.kind() {
                csv::ErrorKind::Deserialize { err, .. } => match err.field() {
                    Some(field) => format!("field {}: {}", field + 1, err.kind()),
                    None => err.kind().to_string(),
                },
                _ => e.to_string(),
            };
            InputError::at(&self.lines.name, self.lines.line, reason)
        }))
    }
}

/// Splits one line into trimmed CSV fields, reusing its buffers.
struct Splitter {
    reader: csv_core::Reader,
    line: Vec<u8>,
    fields: Vec<u8>,
    ends: Vec<usize>,
}

impl Splitter {
    fn new() -> Self {
        Splitter {
            // `Reader::default` has no parser built: the builder builds it.
            reader: csv_core::ReaderBuilder::new().build(),
            line: Vec::new(),
            fields: Vec::new(),
            ends: Vec::new(),
        }
    }

    fn split(&mut self, line: &str) -> Result<csv::StringRecord, String> {
        use csv_core::ReadRecordResult as Read;
        let Splitter {
            reader,
            line: text,
            fields,
            ends,
        } = self;
        reader.reset();
        text.clear();
        text.extend_from_slice(line.as_bytes());
        text.push(b'\n');
        fields.resize(fields.len().max(text.len()), 0);
        ends.resize(ends.len().max(16), 0);
        // An empty input tells csv_core the record ended, if the newline did not.
        let (mut input, mut out, mut n): (&[u8], usize, usize) = (text, 0, 0);
        loop {
            let (result, nin, nout, nend) = reader.read_record(input, &mut fields[out..], &mut ends[n..]);
            input = &input[nin..];
            out += nout;
            n += nend;
            match result {
                Read::OutputFull => fields.resize(fields.len() * 2, 0),
                Read::OutputEndsFull => ends.resize(ends.len() * 2, 0),
                Read::InputEmpty => {}
                Read::Record | Read::End => break,
            }
        }
        let mut record = csv::StringRecord::with_capacity(out, n);
        let mut start = 0;
        for &end in &ends[..n] {
            let field = std::str::from_utf8(&fields[start..end]).map_err(|e| format!("not UTF-8: {e}"))?;
            record.push_field(field.trim());
            start = end;
        }
        Ok(record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read<R>(mut records: impl Records<R>) -> Vec<Result<R, String>> {
        std::iter::from_fn(|| records.next_record())
            .map(|r| r.map_err(|e| e.to_string()))
            .collect()
    }

    #[test]
    fn lines_skip_blanks_and_name_the_bad_line() {
        let text = "1\n\n2\r\nx\n3\n";
        let parse = Arc::new(|s: &str| s.parse::<u64>().map_err(|e| e.to_string()));
        let got = read(Lines::new(Box::new(text.as_bytes()), "in.txt".into(), parse));
        assert_eq!(got[..2], [Ok(1), Ok(2)]);
        assert_eq!(got[2], Err("in.txt line 4: invalid digit found in string".into()));
        assert_eq!(got.len(), 3, "nothing after an error");
    }

    #[derive(Clone, Debug, PartialEq, serde::Deserialize)]
    struct View {
        user: String,
        page: String,
        ts_ms: u64,
    }

    #[test]
    fn csv_rows_become_records_and_bad_rows_say_where() {
        let text = "u1,home,5\n u2 ,\"a,b\",7\n\nu3,x,notanumber\n";
        let got = read(Csv::<View>::new(Box::new(text.as_bytes()), "views.csv".into()));
        assert_eq!(
            got[1],
            Ok(View {
                user: "u2".into(),
                page: "a,b".into(),
                ts_ms: 7
            })
        );
        let e = got[2].clone().unwrap_err();
        assert!(e.starts_with("views.csv line 4: field 3: "), "{e}");
        let short = read(Csv::<View>::new(Box::new("u1,home\n".as_bytes()), "v".into()));
        assert!(
            short[0].clone().unwrap_err().starts_with("v line 1: "),
            "{short:?}"
        );
    }
}
