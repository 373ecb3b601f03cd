//! `Publisher`: encodes messages and publishes them on a spawned task, so an actor never waits
//! on NATS, and only while the leader's lease (`lease::Fence`) holds.

use bytes::Bytes;
use serde::Serialize;
use tracing::{debug, warn};

use super::lease;
use crate::protocol::{self, Encoding, Subjects};

/// A subject and its encoded payload, ready to send.
pub type Outgoing = (String, Bytes);

/// Encodes and publishes. Publishing happens on a spawned task so the caller (an actor)
/// never waits, even while NATS is disconnected.
#[derive(Clone, Debug)]
pub struct Publisher {
    client: async_nats::Client,
    subjects: Subjects,
    encoding: Encoding,
    /// Nothing is published once this scheduler may have lost its lease.
    fence: lease::Fence,
}

impl Publisher {
    pub fn new(client: async_nats::Client, subjects: Subjects) -> Self {
        Publisher { client, subjects, encoding: Encoding::MsgPack, fence: lease::Fence::unfenced() }
    }

    /// Publishes only while `fence` holds.
    pub fn fenced(self, fence: lease::Fence) -> Self {
        Publisher { fence, ..self }
    }

    /// Whether the connection to NATS is up now.
    pub fn connected(&self) -> bool {
        self.client.connection_state() == async_nats::connection::State::Connected
    }

    pub fn subjects(&self) -> &Subjects {
        &self.subjects
    }

    /// Encodes a message for `subject`; `None` (logged) if it cannot be encoded.
    pub fn message<T: Serialize>(&self, subject: String, message: &T) -> Option<Outgoing> {
        match protocol::encode(self.encoding, message) {
            Ok(bytes) => Some((subject, Bytes::from(bytes))),
            Err(e) => {
                warn!(error = %e, subject, "cannot encode an outgoing message");
                None
            }
        }
    }

    /// Publishes all messages in order on a background task.
    pub fn send_all(&self, messages: Vec<Outgoing>) {
        if messages.is_empty() {
            return;
        }
        let (client, fence) = (self.client.clone(), self.fence.clone());
        tokio::task::spawn_local(async move {
            for (subject, payload) in messages {
                if !fence.holds() {
                    debug!("the lease is not certainly held: publishing stopped");
                    return;
                }
                if let Err(e) = client.publish(subject.clone(), payload).await {
                    warn!(error = %e, subject, "publish failed");
                }
            }
        });
    }
}
