//! What the scheduler receives, parsed and validated in one pure step: a subject and a payload
//! become an [`Inbound`] message, or a [`ProtocolError`] whose cause is counted. The ingest loop
//! acts on the result; the fuzz tests call this very function.

use super::{
    Encoding, Heartbeat, JobEnd, JobSpec, Kind, LossPoint, ProtocolError, RejectCause, Running, StatusRequest,
    Subjects, WorkerSpec, decode,
};

/// A valid message for the scheduler, borrowing its id from the subject.
#[derive(Clone, Debug, PartialEq)]
pub enum Inbound<'a> {
    JobLoss {
        job: &'a str,
        point: LossPoint,
    },
    /// Boxed: a hello is rare and large, a loss report frequent and small.
    JobHello(Box<JobSpec>),
    JobBye(JobEnd),
    WorkerHello(WorkerSpec),
    WorkerBeat {
        worker: &'a str,
        /// What the agent says it runs (newer agents).
        running: Option<Running>,
    },
    /// A status request (any payload; a `StatusRequest` narrows it).
    Status(StatusRequest),
    /// A job's request for its own status (`job.<id>.status`, any payload).
    JobStatus {
        job: &'a str,
    },
}

impl Inbound<'_> {
    /// The `kind` label it is counted under when accepted.
    pub fn kind(&self) -> &'static str {
        match self {
            Inbound::JobLoss { .. } => "loss",
            Inbound::JobHello(_) => "job_hello",
            Inbound::JobBye(_) => "job_bye",
            Inbound::WorkerHello(_) => "worker_hello",
            Inbound::WorkerBeat { .. } => "worker_beat",
            Inbound::Status(_) | Inbound::JobStatus { .. } => "status",
        }
    }
}

/// Limits the scheduler puts on what it accepts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct InboundLimits<'a> {
    pub max_payload_bytes: usize,
    pub max_min_workers: u32,
    pub tenants: Tenants<'a>,
}

/// Which tenants' jobs the scheduler serves (issue #32). A job's tenant is the first token of
/// its id, read from the subject, which nats-server's permissions decide; never from a payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tenants<'a> {
    /// No `[tenants]`: any id; a two-token id's first token names its tenant, for information.
    Any,
    /// `[tenants]`: only these (in order); a one-token id is tenant `default`'s.
    Only(&'a [String]),
}

impl Tenants<'_> {
    /// The tenant of `job` this scheduler serves it as, or why not.
    pub fn of<'j>(&self, job: &'j str) -> Result<Option<&'j str>, ProtocolError> {
        let tenant = super::tenant_of(job);
        match self {
            Tenants::Any => Ok(tenant),
            Tenants::Only(names) => {
                let t = tenant.unwrap_or(DEFAULT_TENANT);
                match names.iter().any(|n| n == t) {
                    true => Ok(Some(t)),
                    false => Err(ProtocolError::Invalid(
                        "a job of a tenant this scheduler does not serve",
                        RejectCause::UnknownTenant,
                    )),
                }
            }
        }
    }
}

/// The tenant of a job whose id has one token, when `[tenants]` is configured.
pub const DEFAULT_TENANT: &str = "default";

/// Parses and validates one incoming message.
pub fn inbound<'a>(
    subjects: &Subjects,
    subject: &'a str,
    payload: &'a [u8],
    encoding: Encoding,
    limits: &InboundLimits<'_>,
) -> Result<Inbound<'a>, ProtocolError> {
    if payload.len() > limits.max_payload_bytes {
        return Err(ProtocolError::Invalid("payload larger than max_payload_bytes", RejectCause::Oversized));
    }
    let (kind, id) = subjects.parse(subject)?;
    Ok(match kind {
        Kind::JobLoss => {
            let report = super::report_reader::decode(encoding, payload)?;
            Inbound::JobLoss { job: id, point: report.validate(id)? }
        }
        Kind::JobHello => {
            let mut spec: JobSpec = decode(encoding, payload, "job spec")?;
            spec.validate(id)?;
            // The scheduler's own fields: a job cannot hide its predecessor's messages, and its
            // tenant is where nats-server let it publish, whatever its payload says.
            spec.ended_before = None;
            spec.tenant = limits.tenants.of(id)?.map(str::to_string);
            if spec.min_workers > limits.max_min_workers {
                return Err(ProtocolError::Invalid(
                    "min_workers above scheduler.max_min_workers",
                    RejectCause::InvalidSpec,
                ));
            }
            Inbound::JobHello(Box::new(spec))
        }
        Kind::JobBye => {
            let end: JobEnd = decode(encoding, payload, "job end")?;
            end.validate(id)?;
            Inbound::JobBye(end)
        }
        Kind::WorkerHello => {
            let spec: WorkerSpec = decode(encoding, payload, "worker spec")?;
            spec.validate(id)?;
            Inbound::WorkerHello(spec)
        }
        Kind::WorkerBeat => {
            let beat: Heartbeat = decode(encoding, payload, "heartbeat")?;
            beat.validate(id)?;
            Inbound::WorkerBeat { worker: id, running: beat.running }
        }
        Kind::CtlStatus => Inbound::Status(decode(encoding, payload, "status request").unwrap_or_default()),
        // Whatever the payload: the job's own status, nothing else.
        Kind::JobStatus => Inbound::JobStatus { job: id },
        // What the scheduler itself publishes is not for it to receive.
        Kind::JobAlloc | Kind::WorkerAssign | Kind::CtlEpoch => return Err(ProtocolError::UnknownSubject),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{JobSpec, encode};

    #[test]
    fn a_jobs_own_status_and_a_hello_cannot_set_the_schedulers_fields() {
        let subjects = Subjects::new("slaq").unwrap();
        let limits = InboundLimits { max_payload_bytes: 1 << 16, max_min_workers: 4, tenants: Tenants::Any };
        let status = inbound(&subjects, "slaq.v1.job.j-1.status", b"\xc1anything", Encoding::MsgPack, &limits);
        assert_eq!(status.unwrap(), Inbound::JobStatus { job: "j-1" });
        let bad = inbound(&subjects, "slaq.v1.job.a.b.c.status", b"", Encoding::MsgPack, &limits);
        assert_eq!(bad.err().map(|e| e.cause()), Some(RejectCause::InvalidId));
        let forged = JobSpec { ended_before: Some(u64::MAX), ..JobSpec::new("j") };
        let payload = encode(Encoding::MsgPack, &forged).unwrap();
        match inbound(&subjects, "slaq.v1.job.j.hello", &payload, Encoding::MsgPack, &limits) {
            Ok(Inbound::JobHello(spec)) => assert_eq!(spec.ended_before, None),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_limits_are_inclusive() {
        let subjects = Subjects::new("slaq").unwrap();
        let spec = |min| encode(Encoding::MsgPack, &JobSpec { min_workers: min, ..JobSpec::new("j") }).unwrap();
        let payload = spec(4);
        let exact = InboundLimits { max_payload_bytes: payload.len(), max_min_workers: 4, tenants: Tenants::Any };
        let hello = subjects.job_hello("j");
        assert!(inbound(&subjects, &hello, &payload, Encoding::MsgPack, &exact).is_ok());
        let smaller = InboundLimits { max_payload_bytes: payload.len() - 1, ..exact };
        let err = inbound(&subjects, &hello, &payload, Encoding::MsgPack, &smaller).err().map(|e| e.cause());
        assert_eq!(err, Some(RejectCause::Oversized));
        let payload = spec(5);
        let err = inbound(&subjects, &hello, &payload, Encoding::MsgPack, &exact).err().map(|e| e.cause());
        assert_eq!(err, Some(RejectCause::InvalidSpec));
    }

    /// A job's tenant is the first token of its subject's id: no field of a payload can name
    /// or change it, whatever the payload says.
    #[test]
    fn a_tenant_is_read_from_the_subject_never_from_a_payload() {
        let subjects = Subjects::new("slaq").unwrap();
        let names = ["default".to_string(), "team-a".to_string()];
        let only = InboundLimits { max_payload_bytes: 1 << 16, max_min_workers: 4, tenants: Tenants::Only(&names) };
        let hello = |subject: &str, spec: &JobSpec, limits: &InboundLimits<'_>| {
            let payload = encode(Encoding::MsgPack, spec).unwrap();
            match inbound(&subjects, subject, &payload, Encoding::MsgPack, limits) {
                Ok(Inbound::JobHello(spec)) => Ok(spec.tenant),
                Ok(other) => panic!("{other:?}"),
                Err(e) => Err(e.cause()),
            }
        };
        // A payload naming another tenant, on team-a's subject: team-a's.
        let forged = JobSpec { tenant: Some("team-b".into()), ..JobSpec::new("team-a.j") };
        assert_eq!(hello("slaq.v1.job.team-a.j.hello", &forged, &only), Ok(Some("team-a".into())));
        // Its id must be the subject's: it cannot name team-b's job either.
        let other = JobSpec::new("team-b.j");
        assert_eq!(hello("slaq.v1.job.team-a.j.hello", &other, &only), Err(RejectCause::IdMismatch));
        // A tenant the scheduler does not serve, and a one-token id: tenant `default`.
        assert_eq!(hello("slaq.v1.job.team-b.j.hello", &other, &only), Err(RejectCause::UnknownTenant));
        let plain = JobSpec { tenant: Some("team-a".into()), ..JobSpec::new("j") };
        assert_eq!(hello("slaq.v1.job.j.hello", &plain, &only), Ok(Some("default".into())));
        let without_default = ["team-a".to_string()];
        let strict = InboundLimits { tenants: Tenants::Only(&without_default), ..only };
        assert_eq!(hello("slaq.v1.job.j.hello", &plain, &strict), Err(RejectCause::UnknownTenant));
        // Without [tenants]: any, read from the subject all the same.
        let any = InboundLimits { tenants: Tenants::Any, ..only };
        assert_eq!(hello("slaq.v1.job.j.hello", &plain, &any), Ok(None));
        assert_eq!(hello("slaq.v1.job.team-a.j.hello", &forged, &any), Ok(Some("team-a".into())));
    }
}
