//! Jobs that said bye, remembered for a while (pure: the time is an argument).
//!
//! The reports stream keeps a job's messages after its bye (slaq never purges part of the
//! stream: on nats-server before 2.10.11 that made the scheduler's consumer skip other jobs'
//! messages). So a report sent after the bye, or read again in a restarted scheduler's replay,
//! must not bring the job back, and a bye kept from an earlier job of the same id must not end
//! its successor. The ingest loop and a partition's owner keep an [`Ended`] for the first; a
//! job's spec carries `ended_before` (the sequence its predecessor ended at) for the second.
//!
//! A job's hello comes on core NATS and its reports and bye through the stream, so a job that
//! says hello, reports and bye at once may have its bye read before its hello. An end is
//! remembered with whether the job's hello had been read: if not, the job's hello is still on
//! its way, and when it comes (within `wait`) it is that ended job's, and starts nothing.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// Ended jobs and the stream sequence of each one's end, each kept for `keep`, at most `cap`.
#[derive(Debug)]
pub struct Ended {
    by_job: HashMap<String, End>,
    /// When each entry was made, oldest first (an entry whose job ended again later is stale).
    order: VecDeque<(Instant, String)>,
    keep: Duration,
    cap: usize,
    /// How long an end whose job's hello was not read waits for that hello.
    wait: Duration,
}

#[derive(Debug, Clone, Copy)]
struct End {
    seq: u64,
    at: Instant,
    /// The job's hello had been read (or no hello of it is on its way).
    announced: bool,
}

impl Ended {
    pub fn new(keep: Duration, cap: usize, wait: Duration) -> Self {
        Ended { by_job: HashMap::new(), order: VecDeque::new(), keep, cap: cap.max(1), wait }
    }

    /// `job` ended at stream sequence `seq` (a later end of the same id keeps the larger);
    /// `announced`: its hello had been read. An end already known keeps its `announced`.
    pub fn end(&mut self, job: &str, seq: u64, now: Instant, announced: bool) {
        let (seq, announced) = match self.by_job.get(job) {
            Some(e) => (seq.max(e.seq), announced || e.announced),
            None => (seq, announced),
        };
        self.by_job.insert(job.to_string(), End { seq, at: now, announced });
        self.order.push_back((now, job.to_string()));
        while self.by_job.len() > self.cap {
            self.pop_oldest();
        }
    }

    /// The sequence `job` ended at, if it ended (and has not said hello since).
    pub fn get(&self, job: &str) -> Option<u64> {
        self.by_job.get(job).map(|e| e.seq)
    }

    /// Whether a hello of `job` now is the late hello of its ended job: it ended within `wait`
    /// before its hello was read. Such a hello starts nothing; the next one is a new job's.
    pub fn late_hello(&mut self, job: &str, now: Instant) -> bool {
        let wait = self.wait;
        match self.by_job.get_mut(job) {
            Some(e) if !e.announced && now.duration_since(e.at) < wait => {
                e.announced = true;
                true
            }
            _ => false,
        }
    }

    /// `job` said hello again: it is a new job, and this returns the sequence its predecessor
    /// ended at (what the new one's messages must be newer than).
    pub fn hello(&mut self, job: &str) -> Option<u64> {
        self.by_job.remove(job).map(|e| e.seq)
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
            if self.by_job.get(&job).is_some_and(|e| e.at == at) {
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

    const WAIT: Duration = Duration::from_secs(60);

    #[test]
    fn a_hello_read_after_its_jobs_bye_is_that_jobs_and_the_next_is_new() {
        let t0 = Instant::now();
        let mut ended = Ended::new(Duration::from_secs(600), 100, WAIT);
        // Bye read before the hello: the first hello within the wait is the ended job's.
        ended.end("a", 7, t0, false);
        assert!(ended.late_hello("a", t0 + Duration::from_secs(1)));
        assert!(!ended.late_hello("a", t0 + Duration::from_secs(1)), "the next hello is a new job's");
        assert_eq!(ended.hello("a"), Some(7), "a new job after the bye: its predecessor ended at 7");
        // A job whose hello was read: its next hello is a new job's.
        ended.end("b", 9, t0, true);
        assert!(!ended.late_hello("b", t0));
        // Past the wait, a hello is a new job's: no hello is that late.
        ended.end("c", 11, t0, false);
        assert!(!ended.late_hello("c", t0 + WAIT));
        // An end known as announced stays so when the same end is read again.
        ended.end("b", 9, t0, false);
        assert!(!ended.late_hello("b", t0));
    }

    #[test]
    fn an_end_is_remembered_until_a_hello_or_its_time() {
        let t0 = Instant::now();
        let mut ended = Ended::new(Duration::from_secs(10), 100, WAIT);
        ended.end("a", 7, t0, true);
        assert_eq!(ended.get("a"), Some(7));
        ended.expire(t0 + Duration::from_secs(9));
        assert_eq!(ended.get("a"), Some(7));
        assert_eq!(ended.hello("a"), Some(7));
        assert_eq!(ended.get("a"), None, "a hello starts the job again");
        ended.end("a", 9, t0, true);
        ended.end("b", 3, t0 + Duration::from_secs(5), true);
        ended.expire(t0 + Duration::from_secs(10));
        assert_eq!((ended.get("a"), ended.get("b")), (None, Some(3)));
    }

    #[test]
    fn a_later_end_keeps_the_larger_sequence_and_its_own_time() {
        let t0 = Instant::now();
        let mut ended = Ended::new(Duration::from_secs(10), 100, WAIT);
        ended.end("a", 7, t0, true);
        ended.end("a", 5, t0 + Duration::from_secs(8), true);
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
        let mut ended = Ended::new(Duration::from_secs(10), 2, WAIT);
        for (i, job) in ["a", "b", "c"].iter().enumerate() {
            ended.end(job, i as u64, t0 + Duration::from_millis(i as u64), true);
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
