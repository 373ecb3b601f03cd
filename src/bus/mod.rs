//! The NATS side: connecting (with the events async-nats only reports through a callback,
//! counted), and publishing encoded messages without ever blocking an actor. The only module
//! that knows async-nats besides the service and CLI shells that hold a client.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use serde::Serialize;
use tracing::{debug, info, warn};

use crate::protocol::{self, Encoding, Subjects};

/// Connection events worth counting (async-nats reports them only through a callback).
#[derive(Debug, Default)]
pub struct BusCounters {
    /// Subscriptions whose buffer overflowed: NATS dropped messages silently.
    pub slow_consumer: AtomicU64,
    pub disconnects: AtomicU64,
    /// Connections made again after one was lost.
    pub reconnects: AtomicU64,
    pub server_errors: AtomicU64,
}

#[derive(Debug, thiserror::Error)]
pub enum BusError {
    #[error("cannot connect to NATS at {urls}")]
    Connect { urls: String, source: async_nats::ConnectError },
    #[error("cannot subscribe to {subject}")]
    Subscribe { subject: String, source: async_nats::SubscribeError },
    #[error("no answer from {subject} within {timeout:?}")]
    Timeout { subject: String, timeout: Duration },
    #[error("request to {subject} failed")]
    Request { subject: String, source: async_nats::RequestError },
    #[error("publish to {subject} failed")]
    Publish { subject: String, source: async_nats::PublishError },
    #[error(transparent)]
    Protocol(#[from] protocol::ProtocolError),
}

/// Connects with a client name and a subscription buffer; counts connection events.
pub async fn connect(
    urls: &[String],
    name: &str,
    subscription_capacity: usize,
) -> Result<(async_nats::Client, Arc<BusCounters>), BusError> {
    let counters = Arc::new(BusCounters::default());
    let events = counters.clone();
    let joined = urls.join(",");
    let client = async_nats::ConnectOptions::new()
        .name(name)
        .subscription_capacity(subscription_capacity)
        .retry_on_initial_connect()
        .connection_timeout(Duration::from_secs(5))
        .event_callback(move |event| {
            let events = events.clone();
            async move {
                match event {
                    async_nats::Event::SlowConsumer(sid) => {
                        events.slow_consumer.fetch_add(1, Ordering::Relaxed);
                        warn!(sid, "slow consumer: NATS dropped messages for a subscription");
                    }
                    async_nats::Event::Disconnected => {
                        events.disconnects.fetch_add(1, Ordering::Relaxed);
                        warn!("disconnected from NATS");
                    }
                    async_nats::Event::Connected if events.disconnects.load(Ordering::Relaxed) > 0 => {
                        events.reconnects.fetch_add(1, Ordering::Relaxed);
                        info!("reconnected to NATS");
                    }
                    async_nats::Event::ServerError(e) => {
                        events.server_errors.fetch_add(1, Ordering::Relaxed);
                        warn!(error = %e, "NATS server error");
                    }
                    other => debug!(event = %other, "NATS event"),
                }
            }
        })
        .connect(joined.as_str())
        .await
        .map_err(|source| BusError::Connect { urls: joined.clone(), source })?;
    Ok((client, counters))
}

/// A subject and its encoded payload, ready to send.
pub type Outgoing = (String, Bytes);

/// Encodes and publishes. Publishing happens on a spawned task so the caller (an actor)
/// never waits, even while NATS is disconnected.
#[derive(Clone, Debug)]
pub struct Publisher {
    client: async_nats::Client,
    subjects: Subjects,
    encoding: Encoding,
}

impl Publisher {
    pub fn new(client: async_nats::Client, subjects: Subjects) -> Self {
        Publisher { client, subjects, encoding: Encoding::MsgPack }
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
        let client = self.client.clone();
        tokio::task::spawn_local(async move {
            for (subject, payload) in messages {
                if let Err(e) = client.publish(subject.clone(), payload).await {
                    warn!(error = %e, subject, "publish failed");
                }
            }
        });
    }
}

/// A request with a deadline (async-nats' own can wait forever while disconnected); the reply
/// is decoded with the request's encoding.
pub async fn request<Req: Serialize, Rep: serde::de::DeserializeOwned>(
    client: &async_nats::Client,
    subject: String,
    encoding: Encoding,
    message: &Req,
    timeout: Duration,
) -> Result<Rep, BusError> {
    let payload = Bytes::from(protocol::encode(encoding, message)?);
    let request = async {
        match encoding {
            Encoding::MsgPack => client.request(subject.clone(), payload).await,
            Encoding::Json => {
                let mut headers = async_nats::HeaderMap::new();
                headers.insert("Content-Type", Encoding::JSON_CONTENT_TYPE);
                client.request_with_headers(subject.clone(), headers, payload).await
            }
        }
    };
    let reply = tokio::time::timeout(timeout, request)
        .await
        .map_err(|_| BusError::Timeout { subject: subject.clone(), timeout })?
        .map_err(|source| BusError::Request { subject: subject.clone(), source })?;
    Ok(protocol::decode(encoding, &reply.payload, "reply")?)
}

/// Publishes one message and waits (with a deadline) until the server has it.
pub async fn publish<T: Serialize>(
    client: &async_nats::Client,
    subject: String,
    encoding: Encoding,
    message: &T,
) -> Result<(), BusError> {
    let payload = Bytes::from(protocol::encode(encoding, message)?);
    let result = match encoding {
        Encoding::MsgPack => client.publish(subject.clone(), payload).await,
        Encoding::Json => {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert("Content-Type", Encoding::JSON_CONTENT_TYPE);
            client.publish_with_headers(subject.clone(), headers, payload).await
        }
    };
    result.map_err(|source| BusError::Publish { subject, source })
}
