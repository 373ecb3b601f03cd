//! The job routing table both shells keep (pure: the time is an argument): the leader's ingest
//! loop (`ingest`) and a partition's owner (`shard`). It decides, for each job, whether a
//! message may reach it (an earlier job's, one after its bye, a replay, an unknown job), how
//! fast its reports may come, what a hello does (a late hello of an ended job, a known job's new
//! spec, a new job after an end), what an end leaves behind, and which jobs a sweep finds
//! silent. The shells keep only their I/O: actors, NATS and the durable state.
//!
//! `A` is what a shell reaches a job's actor by (an actor's address; nothing where the job runs
//! on another replica).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use governor::clock::{Clock, FakeRelativeClock};
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::{InMemoryState, NotKeyed};

use super::ServeConfig;
use super::ended::{self, Ended};
use crate::protocol::{JobCommand, JobSpec, ProtocolError, RejectCause};

/// A job's report-rate limiter, on the time the shell passes in.
type Limiter = governor::RateLimiter<NotKeyed, InMemoryState, FakeRelativeClock, NoOpMiddleware<Nanos>>;

/// The time the shell passes in, for the rate limiters: governor's `FakeRelativeClock` reads
/// no clock, it shows what it was set to (here, the time since the first call).
#[derive(Debug, Default)]
struct GivenClock {
    clock: FakeRelativeClock,
    origin: Option<Instant>,
}

impl GivenClock {
    fn set(&mut self, now: Instant) {
        let origin = *self.origin.get_or_insert(now);
        let since = now.saturating_duration_since(origin);
        let shown = Duration::from(self.clock.now());
        if since > shown {
            self.clock.advance(since - shown);
        }
    }
}

/// At most this many ended jobs are remembered (see `ended`), the oldest forgotten first.
const ENDED_CAP: usize = 200_000;

/// How long the end of a job whose hello was not read yet waits for that hello (see `ended`):
/// far past any delay between a job's hello and its bye, short enough that a new job of the
/// same id is seldom taken for the old one's late hello.
pub(crate) const LATE_HELLO_WAIT: Duration = Duration::from_secs(60);

/// How long an ended job is remembered: as long as the stream keeps its messages.
fn ended_keep(config: &ServeConfig) -> Duration {
    config.durable.report_retention.max(Duration::from_secs(60))
}

/// The table's rules, from `[scheduler]`.
#[derive(Debug, Clone)]
pub struct RouteRules {
    /// Each job's report rate.
    pub quota: governor::Quota,
    /// Jobs silent this long are forgotten (submitted jobs are supervised instead).
    pub idle_timeout: Option<Duration>,
    /// Jobs silent this long are quiet (the allocator is told).
    pub stale: Option<Duration>,
    /// A report of an unknown job registers it.
    pub register_on_report: bool,
    /// At most this many jobs (checked where a job is admitted, [`Routes::room`]).
    pub max_jobs: usize,
}

/// A job as the table sees it.
#[derive(Debug)]
pub struct Route<A> {
    /// How the shell reaches its actor.
    pub addr: A,
    limiter: Limiter,
    /// Its reports refused for its rate or a full mailbox (its own excess only).
    pub dropped: u64,
    /// Its last report or hello (or its start).
    last_heard: Instant,
    /// Silent for longer than `stale` (the allocator was told).
    quiet: bool,
    /// A submitted job's command: kept when a later hello has none; such a job is supervised
    /// (restarted when it fails or stalls), not forgotten for silence.
    pub command: Option<JobCommand>,
    /// The stream sequence its predecessor of the same id ended at (`JobSpec::ended_before`):
    /// stream messages up to it are not its own.
    pub ended_before: Option<u64>,
    /// Its hello was read (not only its reports).
    pub announced: bool,
}

impl<A> Route<A> {
    /// Whether a message at stream sequence `seq` is this job's, not an earlier job's of its id.
    fn takes(&self, seq: Option<u64>) -> Result<(), ProtocolError> {
        match ended::ours(self.ended_before, seq) {
            true => Ok(()),
            false => Err(ProtocolError::Invalid("a report of an earlier job of this id", RejectCause::Ended)),
        }
    }

    /// Passes a report on within the job's rate (`send` hands it to its actor; a refusal is the
    /// job's own excess, counted) and ends its silence: whether it was quiet.
    fn pass_on(
        &mut self,
        now: Instant,
        send: impl FnOnce(&A) -> Result<(), ProtocolError>,
    ) -> Result<bool, ProtocolError> {
        // A job flooding reports loses its own excess, never another job's reports.
        if self.limiter.check().is_err() {
            self.dropped += 1;
            return Err(ProtocolError::Invalid("job over its report rate", RejectCause::RateLimited));
        }
        if let Err(e) = send(&self.addr) {
            self.dropped += 1;
            return Err(e);
        }
        self.last_heard = now;
        Ok(std::mem::take(&mut self.quiet))
    }
}

/// What a hello of a job that is not a late one does.
#[derive(Debug, PartialEq, Eq)]
pub enum Greeting {
    /// A job running here: its spec was completed (the submitted command stays when the job's
    /// own process says hello without one; `command_changed` when it came with another).
    Known { command_changed: bool },
    /// A new job: its spec says where its predecessor of the same id ended; the shell starts
    /// it and [`Routes::insert`]s it as greeted.
    New,
}

/// What a sweep found.
#[derive(Debug)]
pub struct Swept<A> {
    /// Jobs silent past the idle timeout, removed (no end is remembered for them).
    pub idle: Vec<(String, Route<A>)>,
    /// Jobs that just went quiet.
    pub quiet: Vec<String>,
}

impl<A> Default for Swept<A> {
    fn default() -> Self {
        Swept { idle: Vec::new(), quiet: Vec::new() }
    }
}

/// The jobs here and those that ended (see the module's documentation).
#[derive(Debug)]
pub struct Routes<A> {
    /// By id, hashed with a per-process random seed (foldhash, cheaper than SipHash on the ingest's
    /// hot path; ids from the wire cannot aim collisions at a seed they do not know).
    jobs: foldhash::HashMap<String, Route<A>>,
    ended: Ended,
    rules: RouteRules,
    /// NATS was unreachable at the last sweep: silence then is nobody's fault.
    was_disconnected: bool,
    clock: GivenClock,
}

impl<A> Routes<A> {
    /// A routing table with the scheduler's rules (see `routes`).
    pub fn for_config(config: &ServeConfig) -> Self {
        let rules = RouteRules {
            quota: config.report_quota,
            idle_timeout: config.idle_job_timeout,
            stale: config.stale_job,
            register_on_report: config.register_on_report,
            max_jobs: config.max_jobs,
        };
        Routes::new(rules, Ended::new(ended_keep(config), ENDED_CAP, LATE_HELLO_WAIT))
    }

    pub fn new(rules: RouteRules, ended: Ended) -> Self {
        Routes {
            jobs: foldhash::HashMap::default(),
            ended,
            rules,
            was_disconnected: false,
            clock: GivenClock::default(),
        }
    }

    pub fn get(&self, id: &str) -> Option<&Route<A>> {
        self.jobs.get(id)
    }

    pub fn contains(&self, id: &str) -> bool {
        self.jobs.contains_key(id)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &Route<A>)> {
        self.jobs.iter()
    }

    /// Room for one more job (`max_jobs`).
    pub fn room(&self) -> Result<(), ProtocolError> {
        match self.jobs.len() < self.rules.max_jobs {
            true => Ok(()),
            false => Err(ProtocolError::Invalid("too many jobs (max_jobs)", RejectCause::Overloaded)),
        }
    }

    /// Adds a job just started. `greeted`: by its hello, so an end remembered of its id is its
    /// predecessor's (now forgotten); otherwise (a restore, a report, a saved spec) the end
    /// stays. `announced`: its hello was read (a job registered by its reports alone has not).
    pub fn insert(&mut self, spec: &JobSpec, addr: A, now: Instant, greeted: bool, announced: bool) {
        if greeted {
            self.ended.hello(&spec.job);
        }
        self.clock.set(now);
        let route = Route {
            addr,
            limiter: governor::RateLimiter::direct_with_clock(self.rules.quota, self.clock.clock.clone()),
            dropped: 0,
            last_heard: now,
            quiet: false,
            command: spec.command.clone(),
            ended_before: spec.ended_before,
            announced,
        };
        self.jobs.insert(spec.job.clone(), route);
    }

    /// Whether a message of `id` at stream sequence `seq` (`None`: core NATS) may reach a job:
    /// `Ok(true)` the job is here, `Ok(false)` it is unknown (the shell may register or adopt
    /// it). Refused: an earlier job's message, one after the job's bye, and a replayed one
    /// (up to `replay_until`) of a job no longer known.
    pub fn admit(&self, id: &str, seq: Option<u64>, replay_until: u64) -> Result<bool, ProtocolError> {
        match self.jobs.get(id) {
            Some(route) => route.takes(seq).map(|()| true),
            None if self.ended.get(id).is_some() => {
                Err(ProtocolError::Invalid("a report after the job's bye", RejectCause::Ended))
            }
            None if seq.is_some_and(|s| s <= replay_until) => {
                Err(ProtocolError::Invalid("a kept report of a job no longer known", RejectCause::UnknownJob))
            }
            None => Ok(false),
        }
    }

    /// Whether a report may register a job never heard of.
    pub fn may_register(&self) -> Result<(), ProtocolError> {
        match self.rules.register_on_report {
            true => Ok(()),
            false => Err(ProtocolError::Invalid("no such job (say hello first)", RejectCause::UnknownJob)),
        }
    }

    /// Passes a report of a known job on: within its rate, `send` hands it to its actor (a
    /// refusal is the job's own excess, counted). Returns whether the job's quiet ended.
    pub fn deliver(
        &mut self,
        id: &str,
        now: Instant,
        send: impl FnOnce(&A) -> Result<(), ProtocolError>,
    ) -> Result<bool, ProtocolError> {
        self.clock.set(now);
        match self.jobs.get_mut(id) {
            Some(route) => route.pass_on(now, send),
            None => Err(ProtocolError::Invalid("no such job", RejectCause::UnknownJob)),
        }
    }

    /// [`Routes::admit`], [`Routes::deliver`] and [`Routes::heard`] of a report of a job
    /// known here, in one lookup (at hundreds of thousands of reports a second, the three
    /// lookups by id were a hash of it each): `None` when the job is not known here, for the
    /// caller to admit, register or refuse it as a new job.
    pub fn deliver_known(
        &mut self,
        id: &str,
        seq: Option<u64>,
        now: Instant,
        send: impl FnOnce(&A) -> Result<(), ProtocolError>,
    ) -> Option<Result<bool, ProtocolError>> {
        let route = self.jobs.get_mut(id)?;
        Some(route.takes(seq).and_then(|()| {
            // Only a report that reaches the limiter moves its clock, as `deliver`'s.
            self.clock.set(now);
            route.pass_on(now, send)
        }))
    }

    /// A job was heard from: its silence ends. Returns whether it was quiet.
    pub fn heard(&mut self, id: &str, now: Instant) -> bool {
        match self.jobs.get_mut(id) {
            Some(route) => {
                route.last_heard = now;
                std::mem::take(&mut route.quiet)
            }
            None => false,
        }
    }

    /// Whether a hello of `id` now is the late hello of its ended job (its bye was read first):
    /// such a hello starts nothing.
    pub fn late_hello(&mut self, id: &str, now: Instant) -> bool {
        !self.jobs.contains_key(id) && self.ended.late_hello(id, now)
    }

    /// Whether `id` runs here and said hello: a new hello of it may follow its own bye, not
    /// read yet (the shell reads the first unread bye and [`Routes::end`]s the job with it).
    pub fn announced(&self, id: &str) -> bool {
        self.jobs.get(id).is_some_and(|r| r.announced)
    }

    /// Whether a stream message at `seq` belongs to `id` running here (not to an earlier job).
    pub fn ours(&self, id: &str, seq: Option<u64>) -> bool {
        self.jobs.get(id).is_some_and(|r| ended::ours(r.ended_before, seq))
    }

    /// A hello (not a late one, see [`Routes::late_hello`]): a known job's spec is completed
    /// (its command, its predecessor's end; the shell calls [`Routes::heard`]); a new job's spec gets
    /// its predecessor's end: that end and `read` (what has been read of the stream, its late
    /// reports refused), never the stream's end (its own reports and bye may be there, unread).
    pub fn greet(&mut self, spec: &mut JobSpec, read: u64) -> Greeting {
        let Some(route) = self.jobs.get_mut(&spec.job) else {
            spec.ended_before = self.ended.get(&spec.job).map(|end| end.max(read));
            return Greeting::New;
        };
        route.announced = true;
        let command_changed = match spec.command.is_none() {
            true => {
                spec.command = route.command.clone();
                false
            }
            false => spec.command != route.command,
        };
        route.command = spec.command.clone();
        spec.ended_before = route.ended_before;
        Greeting::Known { command_changed }
    }

    /// A job here ended at stream sequence `at`: it leaves the table and its end is remembered
    /// (its later messages bring nothing back). Returns its route (`None`: it was not here).
    pub fn end(&mut self, id: &str, at: u64, now: Instant) -> Option<Route<A>> {
        let route = self.jobs.remove(id)?;
        self.ended.end(id, at, now, route.announced);
        Some(route)
    }

    /// A job not here ended at `at` (its bye read first, a replay, another replica's job): its
    /// end is remembered, with `announced` (`false`: a hello of it may still be on its way).
    pub fn remember_end(&mut self, id: &str, at: u64, now: Instant, announced: bool) {
        self.ended.end(id, at, now, announced);
    }

    /// Whether `id` ended (and has not said hello since).
    pub fn has_ended(&self, id: &str) -> bool {
        self.ended.get(id).is_some()
    }

    /// Removes the jobs `leaves` picks.
    pub fn remove_where(&mut self, mut leaves: impl FnMut(&Route<A>) -> bool) -> Vec<(String, Route<A>)> {
        let ids: Vec<String> = self.jobs.iter().filter(|(_, r)| leaves(r)).map(|(id, _)| id.clone()).collect();
        ids.into_iter().filter_map(|id| self.jobs.remove(&id).map(|r| (id, r))).collect()
    }

    /// Forgets ends older than the stream keeps.
    pub fn expire_ends(&mut self, now: Instant) {
        self.ended.expire(now);
    }

    /// Every few seconds (`connected`: NATS is reachable): jobs silent past the idle timeout
    /// leave, and those silent past `stale` go quiet; a submitted job (with a command) is
    /// supervised instead. While NATS is unreachable nobody is silent by their own fault: after
    /// an outage every job's clock starts again.
    pub fn sweep(&mut self, now: Instant, connected: bool) -> Swept<A> {
        self.ended.expire(now);
        if !connected {
            self.was_disconnected = true;
            return Swept::default();
        }
        if std::mem::take(&mut self.was_disconnected) {
            self.jobs.values_mut().for_each(|r| r.last_heard = now);
            return Swept::default();
        }
        let silent = |r: &Route<A>, limit: Duration| r.command.is_none() && now.duration_since(r.last_heard) > limit;
        let idle = match self.rules.idle_timeout {
            Some(timeout) => self.remove_where(|r| silent(r, timeout)),
            None => Vec::new(),
        };
        let mut quiet = Vec::new();
        if let Some(stale) = self.rules.stale {
            for (id, route) in self.jobs.iter_mut() {
                if !route.quiet && silent(route, stale) {
                    route.quiet = true;
                    quiet.push(id.clone());
                }
            }
        }
        Swept { idle, quiet }
    }
}

/// Logs a refusal at most once per cause every `every`.
#[derive(Debug)]
pub struct LogOnce {
    every: Duration,
    last: HashMap<RejectCause, Instant>,
}

impl LogOnce {
    pub fn new(every: Duration) -> Self {
        LogOnce { every, last: HashMap::new() }
    }

    /// Whether a refusal for `cause` now is to be logged.
    pub fn first(&mut self, cause: RejectCause, now: Instant) -> bool {
        if self.last.get(&cause).is_some_and(|t| now.duration_since(*t) < self.every) {
            return false;
        }
        self.last.insert(cause, now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn routes() -> Routes<u32> {
        let rules = RouteRules {
            quota: governor::Quota::per_hour(std::num::NonZeroU32::MIN)
                .allow_burst(std::num::NonZeroU32::new(3).unwrap()),
            idle_timeout: Some(600 * S),
            stale: Some(120 * S),
            register_on_report: false,
            max_jobs: 2,
        };
        Routes::new(rules, Ended::new(3600 * S, 100, 60 * S))
    }

    fn command(program: &str) -> Option<JobCommand> {
        Some(JobCommand::new(vec![program.into()]))
    }

    fn cause<T>(result: Result<T, ProtocolError>) -> Result<T, RejectCause> {
        result.map_err(|e| e.cause())
    }

    #[test]
    fn a_report_reaches_only_its_own_job() {
        let t0 = Instant::now();
        let mut r = routes();
        assert_eq!(cause(r.admit("a", Some(5), 0)), Ok(false), "unknown");
        assert!(r.may_register().is_err(), "registering by report is off");
        r.insert(&JobSpec { ended_before: Some(10), ..JobSpec::new("a") }, 1, t0, true, true);
        assert_eq!(cause(r.admit("a", None, 0)), Ok(true), "core NATS carries no sequence");
        assert_eq!(cause(r.admit("a", Some(11), 0)), Ok(true));
        assert_eq!(cause(r.admit("a", Some(10), 0)), Err(RejectCause::Ended), "its predecessor's");
        r.end("a", 20, t0);
        assert_eq!(cause(r.admit("a", Some(21), 0)), Err(RejectCause::Ended), "after its bye");
        assert_eq!(cause(r.admit("b", Some(7), 7)), Err(RejectCause::UnknownJob), "a replay");
        assert_eq!(cause(r.admit("b", Some(8), 7)), Ok(false));
    }

    #[derive(Clone, Debug)]
    enum Op {
        /// Job `j` says hello, its predecessor's reports ending before `seq`.
        Hello(u8, Option<u64>),
        /// Job `j`'s bye at `seq`.
        Bye(u8, u64),
        /// A report of job `j` at `seq`, `s` seconds in, its actor taking it or not.
        Report(u8, Option<u64>, u16, bool),
        /// A sweep `s` seconds in.
        Sweep(u16),
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        let seq = || proptest::option::of(0u64..40);
        prop_oneof![
            1 => (0u8..3, seq()).prop_map(|(j, s)| Op::Hello(j, s)),
            1 => (0u8..3, 0u64..40).prop_map(|(j, s)| Op::Bye(j, s)),
            6 => (0u8..4, seq(), 0u16..8000, proptest::bool::weighted(0.9)).prop_map(|(j, q, t, ok)| Op::Report(j, q, t, ok)),
            1 => (0u16..8000).prop_map(Op::Sweep),
        ]
    }

    proptest::proptest! {
        /// A report through `deliver_known` (one lookup) is decided as through `admit` then
        /// `deliver` (three): the same answer, the same drops and quiet, whatever came before.
        #[test]
        fn one_lookup_decides_a_report_as_three_do(ops in proptest::collection::vec(op(), 0..120)) {
            let t0 = Instant::now();
            let (mut one, mut three) = (routes(), routes());
            for op in ops {
                for r in [&mut one, &mut three] {
                    match op {
                        Op::Hello(j, ended) => {
                            let spec = JobSpec { ended_before: ended, ..JobSpec::new(&format!("j{j}")) };
                            if !r.contains(&spec.job) && r.room().is_ok() {
                                r.insert(&spec, u32::from(j), t0, true, true);
                            }
                        }
                        Op::Bye(j, seq) => {
                            r.end(&format!("j{j}"), seq, t0);
                        }
                        Op::Sweep(s) => {
                            r.sweep(t0 + u32::from(s) * S, true);
                        }
                        Op::Report(..) => {}
                    }
                }
                let Op::Report(j, seq, s, ok) = op else { continue };
                let (id, now) = (format!("j{j}"), t0 + u32::from(s) * S);
                let send = |_: &u32| if ok { Ok(()) } else { Err(ProtocolError::Invalid("full", RejectCause::Overloaded)) };
                let fast = match one.deliver_known(&id, seq, now, send) {
                    Some(result) => cause(result),
                    None => {
                        let admitted = cause(one.admit(&id, seq, 0));
                        proptest::prop_assert_ne!(admitted, Ok(true), "a job it does not find is not known");
                        admitted.map(|_| false)
                    }
                };
                let slow = match cause(three.admit(&id, seq, 0)) {
                    Ok(true) => cause(three.deliver(&id, now, send)),
                    Ok(false) => Ok(false),
                    Err(e) => Err(e),
                };
                proptest::prop_assert_eq!(fast, slow);
                let state = |r: &Routes<u32>| r.get(&id).map(|x| (x.dropped, x.quiet, x.last_heard));
                proptest::prop_assert_eq!(state(&one), state(&three));
            }
        }
    }

    #[test]
    fn a_job_over_its_rate_loses_its_own_excess_and_a_report_ends_its_quiet() {
        let t0 = Instant::now();
        let mut r = routes();
        r.insert(&JobSpec::new("a"), 1, t0, true, true);
        r.insert(&JobSpec::new("b"), 2, t0, true, true);
        for _ in 0..3 {
            assert_eq!(cause(r.deliver("a", t0, |_| Ok(()))), Ok(false));
        }
        assert_eq!(cause(r.deliver("a", t0, |_| Ok(()))), Err(RejectCause::RateLimited));
        let full = || ProtocolError::Invalid("job actor mailbox full", RejectCause::Overloaded);
        assert_eq!(cause(r.deliver("b", t0, |_| Err(full()))), Err(RejectCause::Overloaded));
        assert_eq!((r.get("a").map(|x| x.dropped), r.get("b").map(|x| x.dropped)), (Some(1), Some(1)));
        assert_eq!(cause(r.room()), Err(RejectCause::Overloaded), "max_jobs is 2");
        // Quiet past `stale`; the next report ends it.
        let swept = r.sweep(t0 + 121 * S, true);
        assert_eq!(swept.quiet.len(), 2);
        assert!(r.sweep(t0 + 122 * S, true).quiet.is_empty(), "told once");
        assert_eq!(cause(r.deliver("b", t0 + 123 * S, |_| Ok(()))), Ok(true));
        // One report an hour: the next is allowed an hour after the burst, not before.
        let hour = 3600 * S;
        assert_eq!(cause(r.deliver("a", t0 + hour - S, |_| Ok(()))), Err(RejectCause::RateLimited));
        assert_eq!(cause(r.deliver("a", t0 + hour, |_| Ok(()))), Ok(true), "and it ends a's quiet");
    }

    #[test]
    fn a_sweep_forgets_the_silent_but_not_the_supervised_nor_during_an_outage() {
        let t0 = Instant::now();
        let mut r = routes();
        r.insert(&JobSpec::new("a"), 1, t0, false, true);
        r.insert(&JobSpec { command: command("train"), ..JobSpec::new("s") }, 2, t0, false, true);
        assert!(r.sweep(t0 + 600 * S, true).idle.is_empty(), "exactly the timeout is not past it");
        // Unreachable across the timeout, then back: the clocks start again.
        assert!(r.sweep(t0 + 601 * S, false).idle.is_empty());
        assert!(r.sweep(t0 + 700 * S, true).idle.is_empty());
        assert!(r.sweep(t0 + 1300 * S, true).idle.is_empty());
        let swept = r.sweep(t0 + 1301 * S, true);
        let idle: Vec<&str> = swept.idle.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(idle, ["a"], "the submitted job is supervised, not forgotten");
        assert!(!r.has_ended("a"), "a job forgotten for silence may come back");
    }

    #[test]
    fn a_hello_keeps_the_submitted_command_and_reports_a_new_one() {
        let t0 = Instant::now();
        let mut r = routes();
        let mut spec = JobSpec { command: command("train"), ..JobSpec::new("a") };
        assert_eq!(r.greet(&mut spec, 0), Greeting::New);
        r.insert(&spec, 1, t0, true, true);
        let mut own = JobSpec::new("a");
        assert_eq!(r.greet(&mut own, 0), Greeting::Known { command_changed: false });
        assert_eq!(own.command, command("train"), "the job's own hello keeps the submitted command");
        let mut other = JobSpec { command: command("eval"), ..own };
        assert_eq!(r.greet(&mut other, 0), Greeting::Known { command_changed: true });
        assert_eq!(r.get("a").and_then(|x| x.command.clone()), other.command);
    }

    #[test]
    fn an_end_read_before_its_hello_swallows_that_hello_and_the_next_is_a_new_job() {
        let t0 = Instant::now();
        let mut r = routes();
        // A bye of a job whose hello is still on its way.
        assert!(r.end("a", 7, t0).is_none(), "not here");
        r.remember_end("a", 7, t0, false);
        assert!(r.late_hello("a", t0 + S), "its own hello starts nothing");
        assert!(!r.late_hello("a", t0 + 2 * S));
        let mut spec = JobSpec::new("a");
        assert_eq!(r.greet(&mut spec, 12), Greeting::New);
        assert_eq!(spec.ended_before, Some(12), "what has been read is not the new job's");
        r.insert(&spec, 1, t0, true, true);
        assert!(!r.has_ended("a"), "the new job's hello forgets the end");
        assert_eq!(cause(r.admit("a", Some(12), 0)), Err(RejectCause::Ended));
        // A job that said hello and ended: its next hello is a new job's at once.
        assert!(r.end("a", 30, t0).is_some());
        assert!(!r.late_hello("a", t0 + S), "its end keeps that its hello was read");
    }

    #[test]
    fn a_refusal_is_logged_once_per_cause_every_interval() {
        let t0 = Instant::now();
        let mut log = LogOnce::new(10 * S);
        assert!(log.first(RejectCause::Ended, t0));
        assert!(!log.first(RejectCause::Ended, t0 + 9 * S));
        assert!(log.first(RejectCause::UnknownJob, t0 + 9 * S));
        assert!(log.first(RejectCause::Ended, t0 + 10 * S));
    }
}
