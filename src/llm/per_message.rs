//! What was made of each message of a conversation, kept while the conversation only grows:
//! a request repeats every message before it, and making them all again each turn would
//! cost a long loop's late turns the most. Keyed by the exact shared message and the one
//! before it (which some translations read); a replaced message and what follows it are
//! made again.

use std::sync::{Arc, Mutex, PoisonError};

use super::Message;

pub struct PerMessage<T> {
    kept: Mutex<Vec<Kept<T>>>,
}

struct Kept<T> {
    previous: Option<Arc<Message>>,
    message: Arc<Message>,
    made: T,
}

impl<T> Default for PerMessage<T> {
    fn default() -> Self {
        PerMessage {
            kept: Mutex::new(Vec::new()),
        }
    }
}

impl<T: Clone> PerMessage<T> {
    /// What `make` makes of each message (given the one before it), reusing what it made
    /// of the same messages for an earlier call.
    pub fn made<E>(
        &self,
        messages: &[Arc<Message>],
        make: impl Fn(Option<&Message>, &Message) -> Result<T, E>,
    ) -> Result<Vec<T>, E> {
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        let previous_of = |index: usize| index.checked_sub(1).map(|at| &messages[at]);
        let reusable = kept
            .iter()
            .zip(messages.iter().enumerate())
            .take_while(|(kept, (index, message))| {
                let same_previous = match (&kept.previous, previous_of(*index)) {
                    (None, None) => true,
                    (Some(kept), Some(current)) => Arc::ptr_eq(kept, current),
                    _ => false,
                };
                same_previous && Arc::ptr_eq(&kept.message, message)
            })
            .count();
        kept.truncate(reusable);
        for (index, message) in messages.iter().enumerate().skip(reusable) {
            let previous = previous_of(index);
            let made = make(previous.map(|p| &**p), message)?;
            kept.push(Kept {
                previous: previous.cloned(),
                message: Arc::clone(message),
                made,
            });
        }
        Ok(kept.iter().map(|kept| kept.made.clone()).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::shared;
    use std::cell::Cell;

    #[test]
    fn only_new_and_replaced_messages_are_made_again() {
        let kept = PerMessage::default();
        let made = Cell::new(0);
        let make = |previous: Option<&Message>, message: &Message| {
            made.set(made.get() + 1);
            Ok::<_, ()>(format!(
                "{:?} after {:?}",
                message.content,
                previous.map(|p| p.role)
            ))
        };
        let mut messages = shared(vec![Message::user_text("one"), Message::user_text("two")]);
        kept.made(&messages, make).expect("made");
        messages.push(Arc::new(Message::user_text("three")));
        let again = kept.made(&messages, make).expect("made");
        assert_eq!(made.get(), 3, "each message made once");
        Arc::make_mut(&mut messages[1])
            .content
            .push(crate::llm::ContentBlock::text("more"));
        let replaced = kept.made(&messages, make).expect("made");
        assert_eq!(made.get(), 5, "the replaced message and the one after it");
        assert_eq!(again[0], replaced[0]);
        assert_ne!(again[1], replaced[1]);
    }
}
