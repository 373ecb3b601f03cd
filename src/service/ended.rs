//! Jobs that said bye, remembered for a while (pure: the time is an argument).
//!
//! The reports stream keeps a job's messages after its bye (slaq never purges part of the
//! stream: on nats-server before 2.10.11 that made the scheduler's consumer skip other jobs'
//! messages). So a report sent after the bye, or read again in a restarted scheduler's replay,
//! must not bring the job back, and a bye kept from an earlier job of the same id must not end
//! its successor. The ingest loop and a partition's owner keep an [`Ended`] for the first; a
//! job's spec carries `ended_before` (the sequence its predecessor ended at) for the second.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// Ended jobs and the stream sequence of each one's end, each kept for `keep`, at most `cap`.
#[derive(Debug)]
pub struct Ended {
    by_job: HashMap<String, (u64, Instant)>,
    /// When each entry was made, oldest first (an entry whose job ended again later is stale).
    order: VecDeque<(Instant, String)>,
    keep: Duration,
    cap: usize,
}

impl Ended {
    pub fn new(keep: Duration, cap: usize) -> Self {
        Ended { by_job: HashMap::new(), order: VecDeque::new(), keep, cap: cap.max(1) }
    }

    /// `job` ended at stream sequence `seq` (a later end of the same id keeps the larger).
    pub fn end(&mut self, job: &str, seq: u64, now: Instant) {
        let seq = self.by_job.get(job).map_or(seq, |(s, _)| seq.max(*s));
        self.by_job.insert(job.to_string(), (seq, now));
        self.order.push_back((now, job.to_string()));
        while self.by_job.len() > self.cap {
            self.pop_oldest();
        }
    }

    /// The sequence `job` ended at, if it ended (and has not said hello since).
    pub fn get(&self, job: &str) -> Option<u64> {
        self.by_job.get(job).map(|(seq, _)| *seq)
    }

    /// `job` said hello again: it is a new job, and this returns the sequence its predecessor
    /// ended at (what the new one's messages must be newer than).
    pub fn hello(&mut self, job: &str) -> Option<u64> {
        self.by_job.remove(job).map(|(seq, _)| seq)
    }

    /// Forgets ends older than `keep` (the stream no longer holds their messages).
    pub fn expire(&mut self, now: Instant) {
        while let Some((at, _)) = self.order.front() {
            if now.duration_since(*at) < self.keep {
                break;
            }
            self.pop_oldest();
        }
    }

    fn pop_oldest(&mut self) {
        if let Some((at, job)) = self.order.pop_front() {
            // Only the entry's own end: the job may have ended again (or said hello) since.
            if self.by_job.get(&job).is_some_and(|(_, t)| *t == at) {
                self.by_job.remove(&job);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.by_job.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_job.is_empty()
    }
}

/// Whether a stream message of a running job belongs to it: newer than its predecessor's end.
pub fn ours(ended_before: Option<u64>, seq: Option<u64>) -> bool {
    match (ended_before, seq) {
        (Some(bound), Some(seq)) => seq > bound,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_end_is_remembered_until_a_hello_or_its_time() {
        let t0 = Instant::now();
        let mut ended = Ended::new(Duration::from_secs(10), 100);
        ended.end("a", 7, t0);
        assert_eq!(ended.get("a"), Some(7));
        ended.expire(t0 + Duration::from_secs(9));
        assert_eq!(ended.get("a"), Some(7));
        assert_eq!(ended.hello("a"), Some(7));
        assert_eq!(ended.get("a"), None, "a hello starts the job again");
        ended.end("a", 9, t0);
        ended.end("b", 3, t0 + Duration::from_secs(5));
        ended.expire(t0 + Duration::from_secs(10));
        assert_eq!((ended.get("a"), ended.get("b")), (None, Some(3)));
    }

    #[test]
    fn a_later_end_keeps_the_larger_sequence_and_its_own_time() {
        let t0 = Instant::now();
        let mut ended = Ended::new(Duration::from_secs(10), 100);
        ended.end("a", 7, t0);
        ended.end("a", 5, t0 + Duration::from_secs(8));
        assert_eq!(ended.get("a"), Some(7));
        // The first entry's expiry does not forget the second end.
        ended.expire(t0 + Duration::from_secs(11));
        assert_eq!(ended.get("a"), Some(7));
        ended.expire(t0 + Duration::from_secs(18));
        assert!(ended.is_empty());
    }

    #[test]
    fn the_oldest_go_first_past_the_cap() {
        let t0 = Instant::now();
        let mut ended = Ended::new(Duration::from_secs(10), 2);
        for (i, job) in ["a", "b", "c"].iter().enumerate() {
            ended.end(job, i as u64, t0 + Duration::from_millis(i as u64));
        }
        assert_eq!((ended.get("a"), ended.get("b"), ended.get("c")), (None, Some(1), Some(2)));
        assert_eq!(ended.len(), 2);
    }

    #[test]
    fn a_message_is_ours_only_past_the_predecessors_end() {
        assert!(ours(None, Some(3)));
        assert!(ours(Some(3), None), "core NATS messages have no sequence");
        assert!(!ours(Some(3), Some(3)));
        assert!(ours(Some(3), Some(4)));
    }
}
