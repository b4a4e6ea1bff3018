// SPDX-License-Identifier: GPL-2.0-only
//! A *reader's* read: a page of a volume this node does not write (another member's
//! store does, [`crate::store`]), so the reader has no record of where its copies are or
//! which version was acknowledged. It asks replica 0 ([`crate::replica`]) through the
//! page's directory, then the next while one misses or is older than a version the
//! reader knows was written (`floor`), with the writer's retry numbers
//! ([`StoreConfig::read_tries`], [`StoreConfig::read_passes`],
//! [`StoreConfig::retry_delay_ns`]):
//!
//! - a getpage that got no answer ([`Heard::NoAnswer`]: a timeout, a refusal, a reply
//!   that did not decode) is asked again, `read_tries` times in all, before the read
//!   moves on to the next replica;
//! - when the last replica missed and some replica never answered in this pass, the
//!   read makes another pass from replica 0 after the retry delay, `read_passes` in all;
//! - it ends with the first current copy ([`ReaderEnd::Hit`]), or as a miss: every
//!   replica answered it has no current copy — [`ReaderEnd::NotFound`], or
//!   [`StoreError::Lost`] when the reader knows the page was written — or some replica
//!   never answered in the last pass ([`StoreError::Unreachable`]).
//!
//! Sans-IO like the store: [`Reader::poll_ask`] says which replica to ask and from when,
//! [`Reader::handle`] takes what it answered; time is a parameter (ns), nothing is
//! allocated, and the runtime keeps one `Reader` per page it reads.

use super::page::Version;
use super::store::{StoreConfig, StoreError};
use super::types::MissReason;

/// What a getpage of one replica came back with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Heard {
    /// A copy at `version`.
    Hit(Version),
    /// The cluster answered it holds no copy (or has no directory node for it).
    NotFound,
    /// No answer: the call timed out or failed, the reply was malformed, the member
    /// asked does not count this node as one (it may later), or the page's directory is
    /// still being rebuilt after a membership change (its holders may not have
    /// registered their copies yet).
    NoAnswer,
}

impl Heard {
    /// A getpage's miss, by its reason.
    pub const fn of_miss(reason: MissReason) -> Heard {
        match reason {
            MissReason::NotCached | MissReason::NoDirectory => Heard::NotFound,
            MissReason::Failed(_) | MissReason::Malformed | MissReason::Refused | MissReason::Rebuilding => {
                Heard::NoAnswer
            }
        }
    }
}

/// How a reader's read ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReaderEnd {
    /// Replica `replica`'s copy, at `version`, is the answer.
    Hit { replica: u8, version: Version },
    /// Every replica answered it has no current copy, and no version was known to be
    /// written: never written, or gone without a record the reader could see.
    NotFound,
    /// [`StoreError::Lost`] (written, every replica answered it has none) or
    /// [`StoreError::Unreachable`] (a replica never answered).
    Failed(StoreError),
}

/// What the read does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadNext {
    /// Ask replica `replica`, not before `at` (ns).
    Ask {
        replica: u8,
        at: u64,
    },
    /// A getpage is out: wait for its answer.
    Wait,
    Done(ReaderEnd),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Replica `k` is to be asked from `at`.
    Ready {
        at: u64,
    },
    /// Replica `k`'s getpage is out.
    Asked,
    Done(ReaderEnd),
}

/// One page's read (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reader {
    replicas: u8,
    tries_max: u8,
    passes: u8,
    delay: u64,
    /// The version the reader knows was written, if any: an older copy is a miss.
    floor: Option<Version>,
    k: u8,
    /// Getpages of replica `k` that got no answer.
    tries: u8,
    pass: u8,
    /// A replica never answered in this pass: that nothing was found proves nothing.
    silent: bool,
    state: State,
}

impl Reader {
    /// A read of a page kept as `cfg.replicas` copies, starting at `now`.
    pub const fn new(cfg: &StoreConfig, floor: Option<Version>, now: u64) -> Reader {
        Reader {
            replicas: if cfg.replicas == 0 { 1 } else { cfg.replicas },
            tries_max: if cfg.read_tries == 0 { 1 } else { cfg.read_tries },
            passes: if cfg.read_passes == 0 { 1 } else { cfg.read_passes },
            delay: cfg.retry_delay_ns,
            floor,
            k: 0,
            tries: 0,
            pass: 0,
            silent: false,
            state: State::Ready { at: now },
        }
    }

    /// The replica to ask now, if any (the read then waits for [`Self::handle`]).
    pub fn poll_ask(&mut self, now: u64) -> Option<u8> {
        match self.state {
            State::Ready { at } if at <= now => {
                self.state = State::Asked;
                Some(self.k)
            }
            _ => None,
        }
    }

    /// When [`Self::poll_ask`] next has a replica to ask (`None`: waiting for an answer,
    /// or done).
    pub fn wake(&self) -> Option<u64> {
        match self.state {
            State::Ready { at } => Some(at),
            State::Asked | State::Done(_) => None,
        }
    }

    /// How the read ended, once it has.
    pub fn end(&self) -> Option<ReaderEnd> {
        match self.state {
            State::Done(e) => Some(e),
            _ => None,
        }
    }

    /// Replica `replica` answered `heard` at `now`. An answer for a replica not asked
    /// (a late one from an earlier try) changes nothing.
    pub fn handle(&mut self, replica: u8, heard: Heard, now: u64) -> ReadNext {
        if self.state != State::Asked || replica != self.k {
            return self.next();
        }
        match heard {
            Heard::Hit(v) if self.floor.is_none_or(|f| v >= f) => {
                self.state = State::Done(ReaderEnd::Hit { replica, version: v });
            }
            Heard::NoAnswer if self.tries + 1 < self.tries_max => {
                self.tries += 1;
                self.state = State::Ready { at: now };
            }
            Heard::NoAnswer => {
                self.silent = true;
                self.on_to(self.k + 1, now);
            }
            Heard::Hit(_) | Heard::NotFound => self.on_to(self.k + 1, now),
        }
        self.next()
    }

    /// What is next, as [`Self::handle`] says it.
    pub fn next(&self) -> ReadNext {
        match self.state {
            State::Ready { at } => ReadNext::Ask { replica: self.k, at },
            State::Asked => ReadNext::Wait,
            State::Done(e) => ReadNext::Done(e),
        }
    }

    /// On to replica `k`; past the last, another pass or the end.
    fn on_to(&mut self, k: u8, now: u64) {
        (self.k, self.tries) = (k, 0);
        if k < self.replicas {
            self.state = State::Ready { at: now };
        } else if self.silent && self.pass + 1 < self.passes {
            (self.k, self.pass, self.silent) = (0, self.pass + 1, false);
            self.state = State::Ready { at: now.saturating_add(self.delay) };
        } else {
            self.state = State::Done(match (self.silent, self.floor) {
                (true, _) => ReaderEnd::Failed(StoreError::Unreachable),
                (false, Some(_)) => ReaderEnd::Failed(StoreError::Lost),
                (false, None) => ReaderEnd::NotFound,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::net::prelude::RpcError;
    use super::*;

    const CFG: StoreConfig =
        StoreConfig { replicas: 2, read_tries: 2, read_passes: 2, retry_delay_ns: 100, ..StoreConfig::DEFAULT };

    /// Ask, at `now`, the replica the read wants and answer it with `heard`.
    fn ask(r: &mut Reader, now: u64, heard: Heard) -> (u8, ReadNext) {
        let k = r.poll_ask(now).expect("a replica to ask");
        assert_eq!(r.next(), ReadNext::Wait);
        (k, r.handle(k, heard, now))
    }

    #[test]
    fn the_first_current_copy_is_the_answer() {
        let mut r = Reader::new(&CFG, None, 0);
        assert_eq!(
            ask(&mut r, 0, Heard::Hit(Version(7))),
            (0, ReadNext::Done(ReaderEnd::Hit { replica: 0, version: Version(7) }))
        );
        assert_eq!(r.poll_ask(10), None, "done: nothing more to ask");

        let mut r = Reader::new(&CFG, None, 0);
        assert_eq!(ask(&mut r, 0, Heard::NotFound), (0, ReadNext::Ask { replica: 1, at: 0 }));
        assert_eq!(
            ask(&mut r, 0, Heard::Hit(Version(3))).1,
            ReadNext::Done(ReaderEnd::Hit { replica: 1, version: Version(3) })
        );
    }

    #[test]
    fn a_copy_older_than_the_floor_is_a_miss_and_written_pages_are_lost() {
        let mut r = Reader::new(&CFG, Some(Version(10)), 0);
        assert_eq!(ask(&mut r, 0, Heard::Hit(Version(9))), (0, ReadNext::Ask { replica: 1, at: 0 }), "stale");
        assert_eq!(ask(&mut r, 0, Heard::NotFound).1, ReadNext::Done(ReaderEnd::Failed(StoreError::Lost)));
        let mut r = Reader::new(&CFG, Some(Version(10)), 0);
        assert_eq!(
            ask(&mut r, 0, Heard::Hit(Version(11))).1,
            ReadNext::Done(ReaderEnd::Hit { replica: 0, version: Version(11) })
        );
    }

    #[test]
    fn every_replica_answering_none_is_not_found_in_one_pass() {
        let mut r = Reader::new(&CFG, None, 5);
        assert_eq!(r.wake(), Some(5));
        assert_eq!(r.poll_ask(4), None, "not before its time");
        ask(&mut r, 5, Heard::NotFound);
        assert_eq!(ask(&mut r, 5, Heard::NotFound).1, ReadNext::Done(ReaderEnd::NotFound));
        assert_eq!(r.end(), Some(ReaderEnd::NotFound));
        assert_eq!(r.wake(), None);
    }

    #[test]
    fn no_answer_is_asked_again_then_the_next_replica_then_another_pass() {
        let mut r = Reader::new(&CFG, None, 0);
        // Replica 0: two tries without an answer, then replica 1.
        assert_eq!(ask(&mut r, 0, Heard::NoAnswer), (0, ReadNext::Ask { replica: 0, at: 0 }));
        assert_eq!(ask(&mut r, 1, Heard::NoAnswer), (0, ReadNext::Ask { replica: 1, at: 1 }));
        // Replica 1 has none: a replica was silent, so another pass after the delay.
        assert_eq!(ask(&mut r, 2, Heard::NotFound), (1, ReadNext::Ask { replica: 0, at: 102 }));
        assert_eq!(r.poll_ask(101), None);
        ask(&mut r, 102, Heard::NoAnswer);
        ask(&mut r, 103, Heard::NoAnswer);
        // The last pass: still silent, so unreachable, not "not found".
        assert_eq!(ask(&mut r, 104, Heard::NotFound).1, ReadNext::Done(ReaderEnd::Failed(StoreError::Unreachable)));
    }

    #[test]
    fn the_second_pass_finds_a_copy_that_came_back() {
        let mut r = Reader::new(&CFG, None, 0);
        for _ in 0..4 {
            ask(&mut r, 0, Heard::NoAnswer);
        }
        assert_eq!(r.next(), ReadNext::Ask { replica: 0, at: 100 });
        assert_eq!(
            ask(&mut r, 100, Heard::Hit(Version(2))).1,
            ReadNext::Done(ReaderEnd::Hit { replica: 0, version: Version(2) })
        );
    }

    #[test]
    fn an_answer_for_a_replica_not_asked_changes_nothing() {
        let mut r = Reader::new(&CFG, None, 0);
        assert_eq!(r.handle(0, Heard::Hit(Version(1)), 0), ReadNext::Ask { replica: 0, at: 0 }, "not asked yet");
        let k = r.poll_ask(0).unwrap();
        assert_eq!(r.handle(k + 1, Heard::Hit(Version(1)), 0), ReadNext::Wait);
        assert_eq!(r.handle(k, Heard::NotFound, 0), ReadNext::Ask { replica: 1, at: 0 });
    }

    #[test]
    fn one_replica_one_try_one_pass() {
        let cfg = StoreConfig { replicas: 1, read_tries: 1, read_passes: 1, ..CFG };
        let mut r = Reader::new(&cfg, None, 0);
        assert_eq!(ask(&mut r, 0, Heard::NoAnswer).1, ReadNext::Done(ReaderEnd::Failed(StoreError::Unreachable)));
        // Zeros in the configuration mean "once".
        let cfg = StoreConfig { replicas: 0, read_tries: 0, read_passes: 0, ..CFG };
        let mut r = Reader::new(&cfg, None, 0);
        assert_eq!(ask(&mut r, 0, Heard::NotFound).1, ReadNext::Done(ReaderEnd::NotFound));
    }

    #[test]
    fn misses_are_heard_by_their_reason() {
        assert_eq!(Heard::of_miss(MissReason::NotCached), Heard::NotFound);
        assert_eq!(Heard::of_miss(MissReason::NoDirectory), Heard::NotFound);
        assert_eq!(Heard::of_miss(MissReason::Failed(RpcError::Cancelled)), Heard::NoAnswer);
        assert_eq!(Heard::of_miss(MissReason::Malformed), Heard::NoAnswer);
        assert_eq!(Heard::of_miss(MissReason::Refused), Heard::NoAnswer);
        assert_eq!(Heard::of_miss(MissReason::Rebuilding), Heard::NoAnswer, "nothing known yet");
    }
}
