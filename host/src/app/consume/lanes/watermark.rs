//! The offset a partition split into lanes may store: the record before the
//! lowest one dispatched and not yet done (the contiguous watermark).

use std::collections::{BTreeSet, VecDeque};

/// The records dispatched to each lane and not yet done, in offset order.
pub(super) struct Open {
    /// Per lane, its open offsets in the order dispatched (ascending).
    lanes: Vec<VecDeque<i64>>,
    /// Every open offset, for the lowest.
    all: BTreeSet<i64>,
    /// The highest offset dispatched so far.
    dispatched: Option<i64>,
    /// The first offset dispatched (the partition's starting position).
    first: Option<i64>,
    /// The offset last stored (everything up to it done).
    stored: Option<i64>,
}

impl Open {
    pub fn new(lanes: usize) -> Self {
        Self {
            lanes: vec![VecDeque::new(); lanes],
            all: BTreeSet::new(),
            dispatched: None,
            first: None,
            stored: None,
        }
    }

    /// Records of `lane` dispatched and not done.
    pub fn waiting(&self, lane: usize) -> usize {
        self.lanes[lane].len()
    }

    /// Records dispatched past the watermark (done or not): what a crash now
    /// would deliver again.
    pub fn ahead(&self) -> i64 {
        match (self.dispatched, self.all.first()) {
            (Some(last), Some(first)) => last - first + 1,
            _ => 0,
        }
    }

    pub fn dispatched(&mut self, lane: usize, offset: i64) {
        self.lanes[lane].push_back(offset);
        self.all.insert(offset);
        self.dispatched = Some(self.dispatched.map_or(offset, |d| d.max(offset)));
        self.first.get_or_insert(offset);
    }

    /// `lane`'s records up to `offset` are done; returns the new watermark
    /// (the offset to store: it and everything before it done) when it moved.
    pub fn done(&mut self, lane: usize, offset: i64) -> Option<i64> {
        let open = &mut self.lanes[lane];
        while let Some(o) = open.front().copied().filter(|&o| o <= offset) {
            open.pop_front();
            self.all.remove(&o);
        }
        let through = match self.all.first() {
            Some(&first) => first - 1,
            None => self.dispatched?,
        };
        // Below the first record dispatched is the position the partition
        // started from: nothing of ours to store yet.
        if self.stored.is_some_and(|s| s >= through) || self.first.is_some_and(|f| through < f) {
            return None;
        }
        self.stored = Some(through);
        Some(through)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watermark_stays_below_the_lowest_record_not_done() {
        let mut open = Open::new(2);
        for (lane, offset) in [(0, 10), (1, 11), (1, 12), (0, 13)] {
            open.dispatched(lane, offset);
        }
        assert_eq!(open.done(1, 12), None, "10 is not done: nothing to store");
        assert_eq!(open.ahead(), 4);
        assert_eq!(open.done(0, 10), Some(12), "10 done: through 12");
        assert_eq!(open.waiting(0), 1);
        assert_eq!(open.done(0, 13), Some(13));
        assert_eq!(open.ahead(), 0);
        assert_eq!(open.done(0, 13), None, "no move, nothing stored again");
    }

    #[test]
    fn a_lane_done_through_an_offset_finishes_only_its_own_records() {
        let mut open = Open::new(3);
        for offset in 0..9 {
            open.dispatched((offset % 3) as usize, offset);
        }
        assert_eq!(open.done(2, 8), None);
        assert_eq!(open.done(0, 3), Some(0), "1 is lane 1's and open");
        assert_eq!(open.done(1, 7), Some(5), "6 is lane 0's and open");
        assert_eq!(open.done(0, 6), Some(8));
    }
}
