//! Answers `<prefix>.v1.ctl.curve.<job>` (a job's curve for the page of any replica) where the
//! job's actor runs: the leader's ingest loop, or with `[cluster] shared` the owner of the
//! job's partition. Every other process stays silent, so the request gets one answer. The
//! answer is the actor's `JobCurve` in JSON, sent from a task of its own: the loop never waits
//! on the actor.

use actix::Addr;
use tracing::debug;

use crate::actors::job::{GetCurve, JobActor};

/// Answers `message` if `actor` is the job's actor here; drops it otherwise (and a reply
/// subject that is not a client's inbox: `valid_reply`).
pub(super) fn answer(
    client: &async_nats::Client,
    message: async_nats::Message,
    actor: Option<Addr<JobActor>>,
    ahead_s: f64,
    valid_reply: impl Fn(&str) -> bool,
) {
    let (Some(actor), Some(reply)) = (actor, message.reply) else { return };
    if !valid_reply(reply.as_str()) {
        debug!(subject = %message.subject, reply = %reply, "a curve request with a reply subject not answered");
        return;
    }
    let client = client.clone();
    actix::spawn(async move {
        let Ok(curve) = actor.send(GetCurve { ahead_s }).await else { return };
        match serde_json::to_vec(&curve) {
            Ok(body) => {
                if let Err(e) = client.publish(reply, body.into()).await {
                    debug!(error = %e, "cannot answer a curve request");
                }
            }
            Err(e) => debug!(error = %e, "cannot encode a curve"),
        }
    });
}
