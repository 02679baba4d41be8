//! The same thing going wrong turn after turn: the same calls failing with the same errors,
//! the same unreadable answer, the same note for an answer that did nothing. A weak model can
//! repeat one mistake until the turn limit (seven times in a row against a small local model);
//! the turn engine tells it plainly from `TELL_AT` on and ends the loop at `GIVE_UP_AT`. Pure:
//! the turn engine says what each turn's setback was.

use serde_json::Value;

/// From the third identical setback in a row the model is told it is repeating itself: twice
/// can be bad luck, a third time is a pattern.
pub const TELL_AT: u32 = 3;

/// At the fifth identical setback in a row the loop ends: two plain warnings went unheeded, and
/// every further turn costs the same again for nothing.
pub const GIVE_UP_AT: u32 = 5;

/// One call of a turn, as far as repeating it matters.
#[derive(Clone, Debug, PartialEq)]
pub struct CallOutcome {
    pub name: String,
    pub input: Value,
    /// What the call got back, if it failed.
    pub error: Option<String>,
}

/// What went wrong in a turn.
#[derive(Clone, Debug, PartialEq)]
pub enum Setback {
    /// The turn's calls, of which at least one failed.
    FailedCalls(Vec<CallOutcome>),
    /// An answer a text protocol could not read, and the feedback it got.
    Unreadable(String),
    /// An answer that ran no call (none made, or only ones cut off by the token limit), and
    /// the note it got.
    NothingDone(String),
}

impl Setback {
    /// A turn's calls: a setback if any failed.
    pub fn of_calls(calls: Vec<CallOutcome>) -> Option<Setback> {
        calls
            .iter()
            .any(|call| call.error.is_some())
            .then_some(Setback::FailedCalls(calls))
    }

    /// The first failing call, for saying what kept failing.
    pub fn first_failure(&self) -> Option<(&str, &Value, &str)> {
        let Setback::FailedCalls(calls) = self else {
            return None;
        };
        calls.iter().find_map(|call| {
            call.error
                .as_deref()
                .map(|error| (call.name.as_str(), &call.input, error))
        })
    }
}

/// How many turns in a row had the same setback.
#[derive(Debug, Default)]
pub struct Repetition {
    last: Option<Setback>,
    in_a_row: u32,
}

impl Repetition {
    /// Records a turn: its setback, or none when it went well. Returns how many turns in a row
    /// (this one included) had this setback; 0 for a turn that went well.
    pub fn record(&mut self, setback: Option<Setback>) -> u32 {
        self.record_setback(setback);
        self.in_a_row
    }

    /// The setback the last turns repeated, if the last one had one.
    pub fn current(&self) -> Option<&Setback> {
        self.last.as_ref()
    }

    fn record_setback(&mut self, setback: Option<Setback>) {
        match setback {
            None => {
                self.last = None;
                self.in_a_row = 0;
            }
            Some(setback) if self.last.as_ref() == Some(&setback) => {
                self.in_a_row = self.in_a_row.saturating_add(1);
            }
            Some(setback) => {
                self.last = Some(setback);
                self.in_a_row = 1;
            }
        }
    }
}

/// `3` as "third", `22` as "22nd": how often the model did the same thing.
pub fn ordinal(count: u32) -> String {
    const WORDS: [&str; 10] = [
        "first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth",
        "tenth",
    ];
    if let Some(word) = count
        .checked_sub(1)
        .and_then(|index| WORDS.get(usize::try_from(index).ok()?))
    {
        return (*word).to_owned();
    }
    let suffix = match (count % 10, count % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{count}{suffix}")
}

/// Characters of a call's input, and of an error, kept in the message that ends a loop; the
/// whole text is in the journal.
const INPUT_CHARS: usize = 120;
const ERROR_CHARS: usize = 300;

/// What kept going wrong, `times` times in a row, for the error that ends the loop.
pub fn describe(setback: &Setback, times: u32) -> String {
    if let Some((tool, input, error)) = setback.first_failure() {
        return format!(
            "the same {tool} call ({}) failed with the same error {times} times in a row: {}",
            super::short_text::one_line(&input.to_string(), INPUT_CHARS),
            super::short_text::one_line(error, ERROR_CHARS)
        );
    }
    match setback {
        Setback::Unreadable(feedback) => format!(
            "the model's answer could not be read for the same reason {times} times in a row: \
             {}",
            super::short_text::one_line(feedback, ERROR_CHARS)
        ),
        _ => format!(
            "the model answered {times} times in a row without a call that ran; it was told \
             each time: {}",
            super::short_text::one_line(setback_note(setback), ERROR_CHARS)
        ),
    }
}

fn setback_note(setback: &Setback) -> &str {
    match setback {
        Setback::Unreadable(note) | Setback::NothingDone(note) => note,
        Setback::FailedCalls(_) => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn failed(input: Value, error: &str) -> Option<Setback> {
        Setback::of_calls(vec![CallOutcome {
            name: "create_plan".to_owned(),
            input,
            error: Some(error.to_owned()),
        }])
    }

    #[test]
    fn only_the_same_setback_in_consecutive_turns_counts() {
        let mut repetition = Repetition::default();
        let same = || failed(json!({"title": "x"}), "specs must not be empty");
        assert_eq!(repetition.record(same()), 1);
        assert_eq!(repetition.record(same()), 2);
        assert_eq!(repetition.record(same()), 3);
        assert_eq!(
            repetition.record(failed(json!({"title": "y"}), "specs must not be empty")),
            1,
            "another input is another attempt"
        );
        assert_eq!(repetition.record(same()), 1, "and the count starts over");
        assert_eq!(repetition.record(same()), 2);
        assert_eq!(
            repetition.record(failed(json!({"title": "x"}), "another error")),
            1,
            "another error is progress of a kind"
        );
        assert_eq!(repetition.record(None), 0, "a turn that went well");
        assert_eq!(repetition.record(same()), 1);
        let nudge = || Some(Setback::NothingDone("call create_plan".to_owned()));
        assert_eq!(repetition.record(nudge()), 1);
        assert_eq!(repetition.record(nudge()), 2);
    }

    #[test]
    fn calls_that_all_succeeded_are_no_setback_and_the_first_failure_is_named() {
        let ok = CallOutcome {
            name: "read_file".to_owned(),
            input: json!({"path": "a"}),
            error: None,
        };
        assert_eq!(Setback::of_calls(vec![ok.clone()]), None);
        let bad = CallOutcome {
            name: "create_plan".to_owned(),
            input: json!({}),
            error: Some("missing title".to_owned()),
        };
        let setback = Setback::of_calls(vec![ok, bad]).expect("a failure");
        assert_eq!(
            setback.first_failure(),
            Some(("create_plan", &json!({}), "missing title"))
        );
        assert_eq!(
            Setback::Unreadable("no call".to_owned()).first_failure(),
            None
        );
    }

    #[test]
    fn counts_read_as_words() {
        assert_eq!(ordinal(3), "third");
        assert_eq!(ordinal(5), "fifth");
        assert_eq!(ordinal(12), "12th");
        assert_eq!(ordinal(21), "21st");
        assert_eq!(ordinal(22), "22nd");
        assert_eq!(ordinal(113), "113th");
        assert_eq!(ordinal(0), "0th");
    }
}
