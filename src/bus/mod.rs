//! The NATS side: connecting (with the events async-nats only reports through a callback,
//! counted), and publishing encoded messages without ever blocking an actor. The only module
//! that knows async-nats besides the service and CLI shells that hold a client.

pub mod durable;
pub mod lease;
pub mod partitions;
pub mod provision;
mod publisher;

pub use publisher::{Outgoing, Publisher};

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use serde::Serialize;
use tracing::{debug, info, warn};

use crate::protocol::{self, Encoding};

/// Connection events worth counting (async-nats reports them only through a callback).
#[derive(Debug, Default)]
pub struct BusCounters {
    /// Messages dropped because a subscription's buffer was full. async-nats reports one
    /// `SlowConsumer` event per dropped message, so this counts messages (a lower bound if its
    /// own event queue overflowed).
    pub dropped_messages: AtomicU64,
    /// When a slow consumer was last logged (milliseconds since the Unix epoch): one line per
    /// 10 s, with the count, however many messages are dropped.
    slow_logged_ms: AtomicU64,
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
    #[error("{what}: {detail}")]
    Auth { what: String, detail: String },
    #[error("{what}: {detail}")]
    JetStream { what: String, detail: String },
}

/// How to prove who we are to NATS, and how to secure the connection. Every field is optional;
/// credentials in a URL (`nats://user:pass@host`, `nats://token@host`) count when no user or
/// token is set here.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NatsAuth {
    pub user: Option<String>,
    pub password: Option<String>,
    pub token: Option<String>,
    /// A file holding an NKey seed (`SU...`).
    pub nkey_seed_file: Option<PathBuf>,
    /// A `.creds` file (JWT and NKey seed), as `nsc` writes them.
    pub credentials_file: Option<PathBuf>,
    /// The prefix of this client's reply subjects (default `_INBOX`): with per-user
    /// permissions, each user may subscribe only to its own inbox prefix.
    pub inbox_prefix: Option<String>,
    pub tls_ca_file: Option<PathBuf>,
    pub tls_cert_file: Option<PathBuf>,
    pub tls_key_file: Option<PathBuf>,
    pub tls_required: bool,
    /// Connect only to the listed servers, never to those a cluster advertises.
    pub ignore_discovered_servers: bool,
}

/// Whether a client connecting to `urls` with `auth` authenticates (a user, token, NKey or
/// credentials file, in the settings or in a URL).
pub fn carries_credentials(auth: &NatsAuth, urls: &[String]) -> bool {
    auth.user.is_some()
        || auth.token.is_some()
        || auth.nkey_seed_file.is_some()
        || auth.credentials_file.is_some()
        || auth.tls_cert_file.is_some()
        || split_url_credentials(urls).map_or(true, |(_, found)| found.is_some())
}

/// A user and password, or a token alone, found in a URL.
type UrlCredentials = (String, Option<String>);

/// The URLs without their user information, and the credentials found in them.
fn split_url_credentials(urls: &[String]) -> Result<(Vec<String>, Option<UrlCredentials>), BusError> {
    let mut found = None;
    let mut clean = Vec::with_capacity(urls.len());
    for raw in urls {
        let with_scheme = if raw.contains("://") { raw.clone() } else { format!("nats://{raw}") };
        let mut url = url::Url::parse(&with_scheme)
            .map_err(|e| BusError::Auth { what: "server URL".into(), detail: format!("{raw}: {e}") })?;
        if !url.username().is_empty() {
            let decode =
                |s: &str| url::form_urlencoded::parse(format!("x={s}").as_bytes()).next().map(|(_, v)| v.into_owned());
            let user = decode(url.username()).unwrap_or_default();
            let password = url.password().and_then(decode);
            found.get_or_insert((user, password));
            let _ = url.set_username("");
            let _ = url.set_password(None);
        }
        clean.push(url.to_string().trim_end_matches('/').to_string());
    }
    Ok((clean, found))
}

/// Connects with a client name and a subscription buffer; counts connection events.
pub async fn connect(
    urls: &[String],
    name: &str,
    subscription_capacity: usize,
) -> Result<(async_nats::Client, Arc<BusCounters>), BusError> {
    connect_with(urls, name, subscription_capacity, &NatsAuth::default()).await
}

/// [`connect`] with credentials and TLS.
pub async fn connect_with(
    urls: &[String],
    name: &str,
    subscription_capacity: usize,
    auth: &NatsAuth,
) -> Result<(async_nats::Client, Arc<BusCounters>), BusError> {
    let counters = Arc::new(BusCounters::default());
    let client = connect_counting(urls, name, subscription_capacity, auth, counters.clone()).await?;
    Ok((client, counters))
}

/// Milliseconds since the Unix epoch (for rate-limiting log lines).
fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// The connection's options from `auth` and the credentials a URL carried (`user:password@`
/// or `token@`; a flag or setting wins over them).
async fn options_for(
    auth: &NatsAuth,
    from_url: Option<UrlCredentials>,
) -> Result<async_nats::ConnectOptions, BusError> {
    let mut options = match &auth.credentials_file {
        Some(path) => async_nats::ConnectOptions::with_credentials_file(path).await.map_err(|e| BusError::Auth {
            what: "credentials file".into(),
            detail: format!("{}: {e}", path.display()),
        })?,
        None => async_nats::ConnectOptions::new(),
    };
    match (&auth.user, &auth.token, from_url) {
        (Some(user), _, _) => {
            options = options.user_and_password(user.clone(), auth.password.clone().unwrap_or_default())
        }
        (None, Some(token), _) => options = options.token(token.clone()),
        (None, None, Some((user, Some(password)))) => options = options.user_and_password(user, password),
        (None, None, Some((token, None))) => options = options.token(token),
        (None, None, None) => {}
    }
    if let Some(path) = &auth.nkey_seed_file {
        let seed = std::fs::read_to_string(path).map_err(|e| BusError::Auth {
            what: "NKey seed file".into(),
            detail: format!("{}: {e}", path.display()),
        })?;
        options = options.nkey(seed.trim().to_string());
    }
    if let Some(ca) = &auth.tls_ca_file {
        options = options.add_root_certificates(ca.clone());
    }
    match (&auth.tls_cert_file, &auth.tls_key_file) {
        (Some(cert), Some(key)) => options = options.add_client_certificate(cert.clone(), key.clone()),
        (None, None) => {}
        _ => {
            return Err(BusError::Auth {
                what: "TLS client certificate".into(),
                detail: "a certificate needs its key and a key its certificate".into(),
            });
        }
    }
    if auth.tls_required {
        options = options.require_tls(true);
    }
    if let Some(prefix) = &auth.inbox_prefix {
        options = options.custom_inbox_prefix(prefix);
    }
    if auth.ignore_discovered_servers {
        options = options.ignore_discovered_servers();
    }
    Ok(options)
}

impl BusCounters {
    /// Counts a connection's event (a slow consumer logged at most once every 10 s).
    fn record(&self, event: async_nats::Event) {
        match event {
            async_nats::Event::SlowConsumer(sid) => {
                let dropped = self.dropped_messages.fetch_add(1, Ordering::Relaxed) + 1;
                let (now, last) = (now_ms(), self.slow_logged_ms.load(Ordering::Relaxed));
                if now.saturating_sub(last) >= 10_000
                    && self.slow_logged_ms.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
                {
                    warn!(
                        sid,
                        dropped, "slow consumer: NATS dropped messages for a subscription (logged once every 10 s)"
                    );
                }
            }
            async_nats::Event::Disconnected => {
                self.disconnects.fetch_add(1, Ordering::Relaxed);
                warn!("disconnected from NATS");
            }
            async_nats::Event::Connected if self.disconnects.load(Ordering::Relaxed) > 0 => {
                self.reconnects.fetch_add(1, Ordering::Relaxed);
                info!("reconnected to NATS");
            }
            async_nats::Event::ServerError(e) => {
                self.server_errors.fetch_add(1, Ordering::Relaxed);
                warn!(error = %e, "NATS server error");
            }
            other => debug!(event = %other, "NATS event"),
        }
    }
}

/// [`connect_with`], counting its events in `counters` (shared by several connections).
pub async fn connect_counting(
    urls: &[String],
    name: &str,
    subscription_capacity: usize,
    auth: &NatsAuth,
    events: Arc<BusCounters>,
) -> Result<async_nats::Client, BusError> {
    let (urls, from_url) = split_url_credentials(urls)?;
    let joined = urls.join(",");
    // One address each: async-nats does not split a comma-joined string.
    let addresses = urls
        .iter()
        .map(|u| u.parse::<async_nats::ServerAddr>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| BusError::Auth { what: "server URL".into(), detail: format!("{joined}: {e}") })?;
    options_for(auth, from_url)
        .await?
        .name(name)
        .subscription_capacity(subscription_capacity)
        .retry_on_initial_connect()
        .connection_timeout(Duration::from_secs(5))
        .event_callback(move |event| {
            let events = events.clone();
            async move { events.record(event) }
        })
        .connect(addresses.as_slice())
        .await
        .map_err(|source| BusError::Connect { urls: joined.clone(), source })
}

/// Subscribes `client` to `subject`; a refusal names the subject.
pub async fn subscribe(client: &async_nats::Client, subject: String) -> Result<async_nats::Subscriber, BusError> {
    client.subscribe(subject.clone()).await.map_err(|source| BusError::Subscribe { subject, source })
}

/// The encoding a received message says it is in (its `Content-Type` header; MessagePack
/// without one).
pub fn encoding_of(message: &async_nats::Message) -> Encoding {
    Encoding::from_content_type(message.headers.as_ref().and_then(|h| h.get("Content-Type")).map(|v| v.as_str()))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_in_urls_are_taken_out_and_used() {
        let urls = vec!["nats://alice:s%40cret@127.0.0.1:4222".to_string(), "nats://127.0.0.1:4223".to_string()];
        let (clean, found) = split_url_credentials(&urls).unwrap();
        assert_eq!(clean, vec!["nats://127.0.0.1:4222", "nats://127.0.0.1:4223"]);
        assert_eq!(found, Some(("alice".to_string(), Some("s@cret".to_string()))));
        let (clean, found) = split_url_credentials(&["tok123@localhost:4222".to_string()]).unwrap();
        assert_eq!((clean[0].as_str(), found), ("nats://localhost:4222", Some(("tok123".to_string(), None))));
        assert!(split_url_credentials(&["nats://[::1".to_string()]).is_err());
    }
}
