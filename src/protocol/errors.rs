//! Why a message is refused, and the protocol layer's errors.

/// Why an incoming message was refused. Counted per cause; never fatal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RejectCause {
    Undecodable,
    UnknownSubject,
    InvalidId,
    IdMismatch,
    NonFiniteLoss,
    BadIteration,
    NegativeTime,
    InvalidSpec,
    Oversized,
    UnknownJob,
    UnknownWorker,
    Duplicate,
    Overloaded,
    RateLimited,
    /// A reply subject that is not an inbox (see `valid_reply`): never answered.
    BadReply,
    /// A report or bye of a job that has ended (its bye was read), or of an earlier job of the
    /// same id: it never brings the job back; only a new hello does.
    Ended,
    /// A hello of a job whose tenant (the first token of its id, from its subject) is not one
    /// the scheduler serves (issue #32).
    UnknownTenant,
}

impl RejectCause {
    pub fn as_str(self) -> &'static str {
        match self {
            RejectCause::Undecodable => "undecodable",
            RejectCause::UnknownSubject => "unknown_subject",
            RejectCause::InvalidId => "invalid_id",
            RejectCause::IdMismatch => "id_mismatch",
            RejectCause::NonFiniteLoss => "non_finite_loss",
            RejectCause::BadIteration => "bad_iteration",
            RejectCause::NegativeTime => "negative_time",
            RejectCause::InvalidSpec => "invalid_spec",
            RejectCause::Oversized => "oversized",
            RejectCause::UnknownJob => "unknown_job",
            RejectCause::UnknownWorker => "unknown_worker",
            RejectCause::Duplicate => "duplicate",
            RejectCause::Overloaded => "overloaded",
            RejectCause::RateLimited => "rate_limited",
            RejectCause::BadReply => "bad_reply",
            RejectCause::Ended => "ended",
            RejectCause::UnknownTenant => "unknown_tenant",
        }
    }
}

/// Errors of the protocol layer.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("invalid subject prefix {0:?}")]
    InvalidPrefix(String),
    #[error("subject is not part of the slaq v1 contract")]
    UnknownSubject,
    #[error("id is not 1-64 characters from [A-Za-z0-9_-] (a job's: NAME or TENANT.NAME)")]
    InvalidId,
    /// `detail` is the decoder's message, which names the field when it can.
    #[error("cannot decode {what}: {detail}")]
    Decode { what: &'static str, detail: String },
    #[error("cannot encode message")]
    Encode { detail: String },
    #[error("{0}")]
    Invalid(&'static str, RejectCause),
}

impl ProtocolError {
    /// The counter this error is counted under.
    pub fn cause(&self) -> RejectCause {
        match self {
            ProtocolError::InvalidPrefix(_) | ProtocolError::UnknownSubject => RejectCause::UnknownSubject,
            ProtocolError::InvalidId => RejectCause::InvalidId,
            ProtocolError::Decode { .. } | ProtocolError::Encode { .. } => RejectCause::Undecodable,
            ProtocolError::Invalid(_, cause) => *cause,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names are metric labels and `status` keys, as docs/reference.md lists them.
    #[test]
    fn causes_have_their_documented_names() {
        let names = [RejectCause::BadReply, RejectCause::Oversized, RejectCause::IdMismatch].map(RejectCause::as_str);
        assert_eq!(names, ["bad_reply", "oversized", "id_mismatch"]);
    }
}
