//! The window of a pipelined watch-list read: objects that arrived from the stream and are
//! not yet part of the *done prefix*. PATCHes finish in any order; the checkpoint may only
//! name a key below which everything is done, so the window keeps arrival order and hands
//! out the last key of the done prefix.
//!
//! That is a valid resume point only because kube-apiserver sends the initial events in key
//! order (recording 10b): everything at or below it has arrived, hence is done. The window
//! checks the order as the objects arrive; a stream out of order is reported, and the caller
//! gives the stream up for paging from the start.

use std::collections::VecDeque;

/// An object arrived at or below the key of the one before it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct OutOfOrder {
    pub previous: String,
    pub key: String,
}

#[derive(Debug, Default)]
pub(super) struct Window {
    /// Arrival order: (key, done), from the first object not yet in the done prefix.
    entries: VecDeque<(String, bool)>,
    /// Sequence number of `entries[0]`.
    first: u64,
    /// The last key of the done prefix (empty: none yet).
    through: String,
    /// The last key that arrived (skipped ones included).
    last: String,
}

impl Window {
    pub(super) fn new() -> Self {
        Self::default()
    }

    /// Objects arrived and not yet in the done prefix (what memory holds).
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The last key of the done prefix: everything that arrived at or below it is done.
    pub(super) fn through(&self) -> &str {
        &self.through
    }

    /// The sequence number of the first object not in the done prefix: every object admitted
    /// with a smaller one has joined it.
    pub(super) fn next_seq(&self) -> u64 {
        self.first
    }

    /// An object that needs no work (done before a restart) arrived: only its order counts.
    pub(super) fn pass(&mut self, key: String) -> Result<(), OutOfOrder> {
        self.check_order(&key)?;
        if self.entries.is_empty() {
            self.through.clone_from(&key);
        }
        self.last = key;
        Ok(())
    }

    /// An object to rewrite arrived: its sequence number, for [`Window::done`].
    pub(super) fn admit(&mut self, key: String) -> Result<u64, OutOfOrder> {
        self.check_order(&key)?;
        self.last.clone_from(&key);
        self.entries.push_back((key, false));
        Ok(self.first + self.entries.len() as u64 - 1)
    }

    /// The object `seq` is done: returns how many objects joined the done prefix.
    pub(super) fn done(&mut self, seq: u64) -> usize {
        let Some(index) = seq
            .checked_sub(self.first)
            .and_then(|i| usize::try_from(i).ok())
        else {
            return 0;
        };
        if let Some(entry) = self.entries.get_mut(index) {
            entry.1 = true;
        }
        let mut joined = 0;
        while self.entries.front().is_some_and(|(_, done)| *done) {
            if let Some((key, _)) = self.entries.pop_front() {
                self.through = key;
            }
            self.first += 1;
            joined += 1;
        }
        joined
    }

    fn check_order(&self, key: &str) -> Result<(), OutOfOrder> {
        if !self.last.is_empty() && key <= self.last.as_str() {
            return Err(OutOfOrder {
                previous: self.last.clone(),
                key: key.to_string(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checkpoint_is_the_end_of_the_done_prefix_whatever_order_patches_finish_in() {
        let mut window = Window::new();
        let a = window.admit("ns/a".into()).expect("in order");
        let b = window.admit("ns/b".into()).expect("in order");
        let c = window.admit("ns/c".into()).expect("in order");
        assert_eq!((window.len(), window.through()), (3, ""));
        // c and b finish before a: nothing is done below a, so nothing can be checkpointed.
        assert_eq!(window.done(c), 0);
        assert_eq!(window.done(b), 0);
        assert_eq!(window.through(), "");
        assert_eq!(window.done(a), 3);
        assert_eq!((window.len(), window.through()), (0, "ns/c"));
        let d = window.admit("ns/d".into()).expect("in order");
        assert_eq!(d, c + 1);
        assert_eq!(window.done(d), 1);
        assert_eq!(window.through(), "ns/d");
        // Unknown or repeated sequence numbers move nothing.
        assert_eq!(window.done(d), 0);
        assert_eq!(window.done(99), 0);
    }

    #[test]
    fn objects_done_before_a_restart_pass_and_move_the_prefix_only_when_nothing_waits() {
        let mut window = Window::new();
        window.pass("ns/a".into()).expect("in order");
        window.pass("ns/b".into()).expect("in order");
        assert_eq!(window.through(), "ns/b");
        let c = window.admit("ns/c".into()).expect("in order");
        assert_eq!(window.done(c), 1);
        assert_eq!(window.through(), "ns/c");
    }

    #[test]
    fn an_object_at_or_below_the_last_key_is_out_of_order() {
        let mut window = Window::new();
        window.admit("ns/b".into()).expect("in order");
        assert_eq!(
            window.admit("ns/a".into()),
            Err(OutOfOrder {
                previous: "ns/b".into(),
                key: "ns/a".into()
            })
        );
        assert!(window.pass("ns/b".into()).is_err(), "a repeated key");
        assert_eq!(window.len(), 1);
    }
}
