//! Subject names and ids: building them, and parsing them without allocating.

use super::ProtocolError;

/// Longest job or worker id.
pub const MAX_ID_LEN: usize = 64;

/// Whether `id` is a valid job or worker id: 1–64 characters from `[A-Za-z0-9_-]`.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_ID_LEN && id.bytes().all(id_byte)
}

/// Whether `b` may be in an id: `[A-Za-z0-9_-]`.
fn id_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// Whether `id` is a valid job id: a name (as [`valid_id`]), or `tenant.name` (issue #32). The
/// tenant is then a token of every subject of the job (`<prefix>.v1.job.<tenant>.<name>.loss`),
/// so nats-server's permissions can confine a user to its tenant's jobs.
pub fn valid_job_id(id: &str) -> bool {
    // One pass over the bytes (the ingest checks every report's): at most one dot, and each
    // side of it an id.
    let mut dot = None;
    for (i, b) in id.bytes().enumerate() {
        match b {
            b'.' if dot.is_none() => dot = Some(i),
            b if id_byte(b) => {}
            _ => return false,
        }
    }
    let valid_len = |len: usize| (1..=MAX_ID_LEN).contains(&len);
    match dot {
        None => valid_len(id.len()),
        Some(at) => valid_len(at) && valid_len(id.len() - at - 1),
    }
}

/// A job's tenant: the first token of a two-token job id, read from the subject the job's
/// message came on, never from its payload. `None` for a one-token id.
pub fn tenant_of(job: &str) -> Option<&str> {
    job.split_once('.').map(|(tenant, _)| tenant)
}

/// Longest reply subject the scheduler answers on.
pub const MAX_REPLY_LEN: usize = 256;

/// Whether the scheduler may answer on `reply`: a client's inbox, that is a subject whose first
/// token starts with one of `inbox_prefixes` (NATS clients' `_INBOX`, or a custom inbox prefix
/// such as `_INBOX_job-a` or `_INBOX.job-a`), made of non-empty tokens without wildcards or
/// white space, and not under one of `own_inboxes` (the scheduler's own reply subjects).
///
/// A reply subject is chosen by whoever sends the request, and the answer is published with the
/// scheduler's permissions: answering on `$JS.API.STREAM.PURGE.…` purges a stream, answering on
/// `$KV.….job.x` overwrites a key, answering on `slaq.v1.worker.w1.assign` speaks as the
/// scheduler. Only inboxes are answered; everything else is refused (`bad_reply`).
pub fn valid_reply(reply: &str, inbox_prefixes: &[String], own_inboxes: &[String]) -> bool {
    if reply.is_empty() || reply.len() > MAX_REPLY_LEN {
        return false;
    }
    let clean = reply
        .split('.')
        .all(|token| !token.is_empty() && token != "*" && token != ">" && token.bytes().all(|b| b > b' ' && b != 0x7f));
    let first = reply.split('.').next().unwrap_or_default();
    let under = |prefix: &String| {
        !prefix.is_empty()
            && reply.strip_prefix(prefix.as_str()).is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
    };
    clean
        && inbox_prefixes.iter().any(|p| !p.is_empty() && first.starts_with(p.as_str()))
        && !own_inboxes.iter().any(under)
}

/// What a subject is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    JobHello,
    JobLoss,
    JobBye,
    JobAlloc,
    /// A job's own status request: only that job is answered (a job user may ask it under
    /// `deploy/nats/slaq-auth.conf`, where `ctl.status` is the operators').
    JobStatus,
    WorkerHello,
    WorkerBeat,
    WorkerAssign,
    CtlStatus,
    CtlEpoch,
}

/// Subject names under a prefix (`slaq` by default).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subjects {
    prefix: String,
}

impl Subjects {
    /// `prefix` must be one or more valid NATS tokens separated by dots.
    pub fn new(prefix: &str) -> Result<Self, ProtocolError> {
        let ok = !prefix.is_empty() && prefix.split('.').all(valid_id);
        if !ok {
            return Err(ProtocolError::InvalidPrefix(prefix.to_string()));
        }
        Ok(Subjects { prefix: prefix.to_string() })
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn job(&self, job: &str, what: &str) -> String {
        format!("{}.v1.job.{job}.{what}", self.prefix)
    }

    fn worker(&self, worker: &str, what: &str) -> String {
        format!("{}.v1.worker.{worker}.{what}", self.prefix)
    }

    pub fn job_hello(&self, job: &str) -> String {
        self.job(job, "hello")
    }
    pub fn job_loss(&self, job: &str) -> String {
        self.job(job, "loss")
    }
    pub fn job_bye(&self, job: &str) -> String {
        self.job(job, "bye")
    }
    pub fn job_alloc(&self, job: &str) -> String {
        self.job(job, "alloc")
    }
    pub fn job_status(&self, job: &str) -> String {
        self.job(job, "status")
    }
    pub fn worker_hello(&self, worker: &str) -> String {
        self.worker(worker, "hello")
    }
    pub fn worker_beat(&self, worker: &str) -> String {
        self.worker(worker, "beat")
    }
    pub fn worker_assign(&self, worker: &str) -> String {
        self.worker(worker, "assign")
    }
    pub fn ctl_status(&self) -> String {
        format!("{}.v1.ctl.status", self.prefix)
    }
    pub fn ctl_epoch(&self) -> String {
        format!("{}.v1.ctl.epoch", self.prefix)
    }
    /// A request for a job's curve (the page's `/api/v1/jobs/{id}`), answered in JSON by the
    /// process whose actor has the job: `<prefix>.v1.ctl.curve.<job>`.
    pub fn ctl_curve(&self, job: &str) -> String {
        format!("{}.v1.ctl.curve.{job}", self.prefix)
    }
    /// Every job's curve requests (a job's id is one token, or a tenant's two).
    pub fn ctl_curve_all(&self) -> String {
        format!("{}.v1.ctl.curve.>", self.prefix)
    }
    /// The job a curve request asks for, if `subject` is a valid one.
    pub fn curve_job<'a>(&self, subject: &'a str) -> Option<&'a str> {
        let job = subject.strip_prefix(self.prefix.as_str())?.strip_prefix(".v1.ctl.curve.")?;
        valid_job_id(job).then_some(job)
    }

    /// A job's reports in partition `p`, as the server's mapping rewrites them (`[cluster]
    /// shared`): `<prefix>.v1.part.<p>.job.<id>.loss`.
    pub fn part_job_loss(&self, p: u32, job: &str) -> String {
        format!("{}.v1.part.{p}.job.{job}.loss", self.prefix)
    }
    pub fn part_job_bye(&self, p: u32, job: &str) -> String {
        format!("{}.v1.part.{p}.job.{job}.bye", self.prefix)
    }
    /// A job's hello as the leader puts it into its partition (the server maps no hello: a job
    /// may not publish this): where the hello falls among the job's reports and byes.
    pub fn part_job_hello(&self, p: u32, job: &str) -> String {
        format!("{}.v1.part.{p}.job.{job}.hello", self.prefix)
    }
    /// Everything the stream keeps of partition `p`, a job's id one token or a tenant's two
    /// (one filter subject: 2.9 allows no more).
    pub fn part_filter(&self, p: u32) -> String {
        format!("{}.v1.part.{p}.job.>", self.prefix)
    }
    /// Where the owner of partition `p` sends its jobs' bids to the leader (replicas only: the
    /// state connection's account).
    pub fn part_bids(&self, p: u32) -> String {
        format!("{}.v1.ctl.bids.{p}", self.prefix)
    }
    /// The leader's wildcard subscription to every partition's bids.
    pub fn part_bids_all(&self) -> String {
        format!("{}.v1.ctl.bids.*", self.prefix)
    }
    /// A new leader asks every owner to send all its bids.
    pub fn part_bids_sync(&self) -> String {
        format!("{}.v1.ctl.bidsync", self.prefix)
    }

    /// A mapped subject (`<prefix>.v1.part.<p>.job.<id>.<kind>`) as the job sent it
    /// (`<prefix>.v1.job.<id>.<kind>`), with its partition; `None` if it is not one.
    pub fn unmap(&self, subject: &str) -> Option<(u32, String)> {
        let rest = subject.strip_prefix(self.prefix.as_str())?.strip_prefix(".v1.part.")?;
        let (p, rest) = rest.split_once('.')?;
        let p = p.parse().ok()?;
        rest.starts_with("job.").then(|| (p, format!("{}.v1.{rest}", self.prefix)))
    }

    /// The job subjects of tenants' jobs (`job.<tenant>.<name>.<kind>`), which the scheduler
    /// subscribes to beside [`Self::scheduler_subscriptions`]: hello, status, loss, bye.
    pub fn tenant_subscriptions(&self) -> [String; 4] {
        ["hello", "status", "loss", "bye"].map(|kind| format!("{}.v1.job.*.*.{kind}", self.prefix))
    }

    /// The wildcard subscriptions of the scheduler: one per message kind, not one per job.
    pub fn scheduler_subscriptions(&self) -> [String; 6] {
        [
            format!("{}.v1.job.*.hello", self.prefix),
            format!("{}.v1.job.*.status", self.prefix),
            format!("{}.v1.job.*.loss", self.prefix),
            format!("{}.v1.job.*.bye", self.prefix),
            format!("{}.v1.worker.*.hello", self.prefix),
            format!("{}.v1.worker.*.beat", self.prefix),
        ]
    }

    /// Splits a subject into its kind and id (empty for `ctl` subjects). Allocation-free: it
    /// runs once per message.
    pub fn parse<'a>(&self, subject: &'a str) -> Result<(Kind, &'a str), ProtocolError> {
        let rest = subject
            .strip_prefix(self.prefix.as_str())
            .and_then(|r| r.strip_prefix(".v1."))
            .ok_or(ProtocolError::UnknownSubject)?;
        match rest {
            "ctl.status" => return Ok((Kind::CtlStatus, "")),
            "ctl.epoch" => return Ok((Kind::CtlEpoch, "")),
            _ => {}
        }
        let (scope, rest) = rest.split_once('.').ok_or(ProtocolError::UnknownSubject)?;
        let (id, what) = rest.rsplit_once('.').ok_or(ProtocolError::UnknownSubject)?;
        let kind = match (scope, what) {
            ("job", "hello") => Kind::JobHello,
            ("job", "loss") => Kind::JobLoss,
            ("job", "bye") => Kind::JobBye,
            ("job", "alloc") => Kind::JobAlloc,
            ("job", "status") => Kind::JobStatus,
            ("worker", "hello") => Kind::WorkerHello,
            ("worker", "beat") => Kind::WorkerBeat,
            ("worker", "assign") => Kind::WorkerAssign,
            _ => return Err(ProtocolError::UnknownSubject),
        };
        // A worker's id is one token; a job's one, or two with its tenant first.
        let valid = if scope == "job" { valid_job_id(id) } else { valid_id(id) };
        if !valid {
            return Err(ProtocolError::InvalidId);
        }
        Ok((kind, id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use proptest::strategy::Strategy;

    proptest::proptest! {
        /// The one-pass check says what the definition says: a name, or `tenant.name`.
        #[test]
        fn a_job_id_is_a_name_or_a_tenant_and_a_name(id in proptest::prop_oneof![
            "[a-c._*-]{0,3}|[a-z.]{0,70}",
            // Lengths about the limit, with a dot or without.
            (0usize..=66).prop_map(|n| "a".repeat(n)),
            (0usize..=66, 0usize..=66).prop_map(|(t, n)| format!("{}.{}", "t".repeat(t), "n".repeat(n))),
        ]) {
            let defined = match id.split_once('.') {
                None => valid_id(&id),
                Some((tenant, name)) => valid_id(tenant) && valid_id(name),
            };
            proptest::prop_assert_eq!(valid_job_id(&id), defined, "{}", id);
        }
    }

    #[test]
    fn curve_requests_name_a_valid_job() {
        let s = Subjects::new("slaq").unwrap();
        assert_eq!(s.curve_job(&s.ctl_curve("j-1")), Some("j-1"));
        assert_eq!(s.curve_job(&s.ctl_curve("team.j-1")), Some("team.j-1"));
        for bad in ["slaq.v1.ctl.curve.", "slaq.v1.ctl.curve.a.b.c", "slaq.v1.ctl.curve.a*", "other.v1.ctl.curve.j"] {
            assert_eq!(s.curve_job(bad), None, "{bad}");
        }
    }

    #[test]
    fn ids() {
        assert!(valid_id("job-1_A"));
        assert!(!valid_id(""));
        assert!(!valid_id("a.b"));
        assert!(!valid_id("a*"));
        assert!(!valid_id(&"x".repeat(65)));
        assert!(valid_id(&"x".repeat(64)));
    }

    #[test]
    fn only_inboxes_are_answered() {
        let inbox = vec!["_INBOX".to_string()];
        let own = vec!["_INBOX_scheduler".to_string(), "_INBOX.slaq-state".to_string()];
        for ok in ["_INBOX.abc.1", "_INBOX_job-a.xyz.7", "_INBOX.job-a.q"] {
            assert!(valid_reply(ok, &inbox, &own), "{ok}");
        }
        for bad in [
            "$JS.API.STREAM.PURGE.slaq_reports",
            "$KV.slaq_state.job.b",
            "$KV.slaq_lease.leader",
            "slaq.v1.worker.w1.assign",
            "_INBOX_scheduler.abc",
            "_INBOX.slaq-state.abc",
            "_INBOX.*",
            "_INBOX.>",
            "_INBOX..a",
            "_INBOX. a",
            "",
            "inbox.x",
        ] {
            assert!(!valid_reply(bad, &inbox, &own), "{bad:?}");
        }
        assert!(!valid_reply(&format!("_INBOX.{}", "x".repeat(300)), &inbox, &own));
        // The longest reply answered, and one byte more.
        let longest = format!("_INBOX.{}", "x".repeat(MAX_REPLY_LEN - 7));
        assert!(valid_reply(&longest, &inbox, &own));
        assert!(!valid_reply(&format!("{longest}x"), &inbox, &own));
        // A deployment with its own inbox naming lists it.
        assert!(valid_reply("inbox.tenant1.x", &["inbox".to_string()], &own));
    }

    #[test]
    fn subjects_round_trip() {
        let s = Subjects::new("slaq").unwrap();
        assert_eq!(s.prefix(), "slaq");
        // The subjects the scheduler publishes on, spelled as the contract in docs/reference.md says.
        assert_eq!(
            [s.job_alloc("j1"), s.worker_assign("w1"), s.ctl_epoch()],
            ["slaq.v1.job.j1.alloc", "slaq.v1.worker.w1.assign", "slaq.v1.ctl.epoch"]
        );
        assert_eq!(s.parse(&s.job_alloc("j1")).unwrap(), (Kind::JobAlloc, "j1"));
        assert_eq!(s.parse(&s.worker_assign("w1")).unwrap(), (Kind::WorkerAssign, "w1"));
        assert_eq!(s.parse(&s.ctl_epoch()).unwrap(), (Kind::CtlEpoch, ""));
        assert_eq!(s.parse(&s.job_loss("j1")).unwrap(), (Kind::JobLoss, "j1"));
        assert_eq!(s.parse(&s.worker_beat("w-2")).unwrap(), (Kind::WorkerBeat, "w-2"));
        assert_eq!(s.parse(&s.ctl_status()).unwrap(), (Kind::CtlStatus, ""));
        assert!(s.parse("other.v1.job.j1.loss").is_err());
        assert!(s.parse("slaq.v1.job.j1.nope").is_err());
        // A job's id is one token, or two: its tenant and its name. A worker's is one.
        assert_eq!(s.parse("slaq.v1.job.team-a.j1.loss").unwrap(), (Kind::JobLoss, "team-a.j1"));
        assert_eq!(s.parse(&s.job_alloc("team-a.j1")).unwrap(), (Kind::JobAlloc, "team-a.j1"));
        assert_eq!(tenant_of("team-a.j1"), Some("team-a"));
        assert_eq!(tenant_of("j1"), None);
        assert!(s.parse("slaq.v1.job.a.b.c.loss").is_err(), "at most two tokens");
        assert!(s.parse("slaq.v1.job..b.loss").is_err());
        assert!(s.parse("slaq.v1.worker.a.b.beat").is_err(), "a worker's id is one token");
        assert!(!valid_job_id("a.b.c") && !valid_job_id(".b") && !valid_job_id("a.") && !valid_job_id("a*.b"));
        assert_eq!(s.tenant_subscriptions()[2], "slaq.v1.job.*.*.loss");
        assert!(s.parse("slaq.v1.job.loss").is_err());
        assert!(s.parse("slaq.v1.ctl.status.x").is_err());
        assert!(Subjects::new("a..b").is_err());
        assert!(Subjects::new("team-a.slaq").is_ok());
        // A mapped subject, back as the job sent it.
        assert_eq!(s.unmap(&s.part_job_loss(7, "j1")), Some((7, s.job_loss("j1"))));
        assert_eq!(s.unmap(&s.part_job_bye(0, "j1")), Some((0, s.job_bye("j1"))));
        assert_eq!(s.unmap(&s.job_loss("j1")), None);
        assert_eq!(s.unmap(&s.part_job_loss(3, "team-a.j1")), Some((3, s.job_loss("team-a.j1"))));
        assert_eq!(s.unmap("slaq.v1.part.x.job.j1.loss"), None);
        assert_eq!(s.unmap("slaq.v1.part.3.worker.w.beat"), None);
    }
}
