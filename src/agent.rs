//! The reference worker agent (`slaq worker`): it says hello, sends heartbeats and follows its
//! assignments, optionally running a command for each one. A shell over NATS like `service`;
//! the binary only parses flags and passes the client and the shutdown signal in.

use std::future::Future;
use std::time::Duration;

use futures_util::StreamExt;
use tracing::{debug, info, warn};

use crate::bus::{self, BusError};
use crate::protocol::{self, Ack, Encoding, Heartbeat, Running, Subjects, WorkerAssignment, WorkerSpec};

/// What the agent is and does.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    pub subjects: Subjects,
    pub spec: WorkerSpec,
    pub beat_every: Duration,
    /// Run through `sh -c` whenever the worker is assigned a job, with `SLAQ_JOB`, `SLAQ_ROLE`,
    /// `SLAQ_WORKER` and `SLAQ_EPOCH` in its environment. The previous one is killed first.
    pub exec: Option<String>,
    /// How long one hello waits for the scheduler's answer before it is sent again.
    pub hello_timeout: Duration,
}

impl AgentConfig {
    pub fn new(subjects: Subjects, spec: WorkerSpec) -> Self {
        AgentConfig {
            subjects,
            spec,
            beat_every: Duration::from_secs(2),
            exec: None,
            hello_timeout: Duration::from_secs(5),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("invalid worker spec")]
    Spec(#[from] protocol::ProtocolError),
    #[error(transparent)]
    Bus(#[from] BusError),
}

/// Why an assignment is not followed.
/// Where an assignment stands in the order the agent follows them: by the term of the
/// scheduler that sent it (a leader's lease, or a restart's incarnation; none counts as 0),
/// then by epoch, which each scheduler counts from 1.
fn order(assignment: &WorkerAssignment) -> (u64, u64) {
    (assignment.term.unwrap_or(0), assignment.epoch)
}

fn check_assignment(assignment: &WorkerAssignment, me: &str, last: (u64, u64)) -> Result<(), &'static str> {
    if assignment.worker != me {
        return Err("addressed to another worker");
    }
    if assignment.job.as_deref().is_some_and(|j| !protocol::valid_id(j)) {
        return Err("job id is not 1-64 characters from [A-Za-z0-9_-]");
    }
    if order(assignment).0 < last.0 {
        return Err("from a scheduler deposed since (an older term)");
    }
    if order(assignment) < last {
        return Err("older than an assignment already followed");
    }
    Ok(())
}

/// Runs the agent until `shutdown` resolves or the connection closes for good. The scheduler
/// may not be up yet: hello is repeated until it is answered.
pub async fn run(
    client: async_nats::Client,
    config: AgentConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), AgentError> {
    let me = config.spec.worker.clone();
    config.spec.validate(&me)?;
    let subjects = &config.subjects;
    let assign_subject = subjects.worker_assign(&me);
    let mut assignments = client
        .subscribe(assign_subject.clone())
        .await
        .map_err(|source| BusError::Subscribe { subject: assign_subject, source })?;
    tokio::pin!(shutdown);
    // The term of the scheduler that answered, when it answered.
    let hello = || async {
        match bus::request::<_, Ack>(
            &client,
            subjects.worker_hello(&me),
            Encoding::MsgPack,
            &config.spec,
            config.hello_timeout,
        )
        .await
        {
            Ok(ack) if ack.ok => Some(ack.term.unwrap_or(0)),
            Ok(ack) => {
                warn!(error = ack.error.unwrap_or_default(), "the scheduler refused the worker; retrying");
                None
            }
            Err(e) => {
                warn!(error = %e, "hello not answered yet; retrying");
                None
            }
        }
    };
    // The largest term a scheduler has answered with: an assignment of a larger term is
    // followed only once a hello confirms it, so a forged one (any term, up to 2^64 − 1) cannot
    // make the agent ignore the real scheduler.
    let mut confirmed_term = loop {
        tokio::select! {
            _ = &mut shutdown => return Ok(()),
            answered = hello() => if let Some(term) = answered { break term },
        }
        tokio::select! {
            _ = &mut shutdown => return Ok(()),
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    };
    info!(worker = %me, term = confirmed_term, "registered");
    let mut beat = tokio::time::interval(config.beat_every);
    let mut child: Option<tokio::process::Child> = None;
    let mut last = (0, 0);
    // What it runs, as its heartbeats tell the scheduler.
    let mut running = Running { job: None, term: 0, epoch: 0 };
    let mut role = protocol::Role::Worker;
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = beat.tick() => {
                let beat = Heartbeat { running: Some(running.clone()), ..Heartbeat::new(&me) };
                if let Err(e) = bus::publish(&client, subjects.worker_beat(&me), Encoding::MsgPack, &beat).await {
                    warn!(error = %e, "heartbeat failed");
                }
            }
            message = assignments.next() => {
                let Some(message) = message else { break };
                let assignment: WorkerAssignment = match protocol::decode(Encoding::MsgPack, &message.payload, "assignment") {
                    Ok(a) => a,
                    Err(e) => { warn!(error = %e, "ignoring an undecodable assignment"); continue; }
                };
                if assignment.hello_again && assignment.worker == me {
                    // The scheduler lost track of us (a restart without state): register again.
                    // The job we run goes on until an assignment says otherwise.
                    info!(worker = %me, "the scheduler asked for a new hello");
                    if let Some(term) = hello().await {
                        confirmed_term = confirmed_term.max(term);
                    }
                    continue;
                }
                if let Err(why) = check_assignment(&assignment, &me, last) {
                    warn!(epoch = assignment.epoch, term = ?assignment.term, job = ?assignment.job, why, "ignoring an assignment");
                    continue;
                }
                let term = order(&assignment).0;
                if term > confirmed_term {
                    match hello().await {
                        Some(answered) if answered >= term => confirmed_term = answered,
                        answered => {
                            warn!(term, answered = ?answered, "ignoring an assignment of a term no scheduler confirms");
                            continue;
                        }
                    }
                }
                last = order(&assignment);
                let same = assignment.job == running.job && assignment.role == role;
                running = Running { job: assignment.job.clone(), term, epoch: assignment.epoch };
                if same {
                    // Told again what it runs (a new term's first epoch, or a correction that
                    // crossed a move): the process goes on untouched.
                    debug!(worker = %me, epoch = assignment.epoch, job = ?assignment.job, "assignment unchanged");
                    continue;
                }
                role = assignment.role;
                info!(worker = %me, epoch = assignment.epoch, job = ?assignment.job, "assignment");
                if let Some(mut old) = child.take() {
                    let _ = old.kill().await;
                }
                if let (Some(cmd), Some(job)) = (&config.exec, &assignment.job) {
                    let spawned = tokio::process::Command::new("sh")
                        .arg("-c")
                        .arg(cmd)
                        .env("SLAQ_JOB", job)
                        .env("SLAQ_WORKER", &me)
                        .env("SLAQ_EPOCH", assignment.epoch.to_string())
                        .env("SLAQ_TERM", assignment.term.unwrap_or(0).to_string())
                        .env("SLAQ_ROLE", if assignment.role == protocol::Role::Ps { "ps" } else { "worker" })
                        .kill_on_drop(true)
                        .spawn();
                    match spawned {
                        Ok(c) => child = Some(c),
                        Err(e) => warn!(error = %e, "cannot start the exec command"),
                    }
                }
            }
        }
    }
    if let Some(mut old) = child.take() {
        let _ = old.kill().await;
    }
    let _ = tokio::time::timeout(Duration::from_secs(2), client.flush()).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assignment(worker: &str, epoch: u64, job: Option<&str>) -> WorkerAssignment {
        WorkerAssignment {
            worker: worker.into(),
            epoch,
            job: job.map(str::to_string),
            role: Default::default(),
            hello_again: false,
            term: None,
        }
    }

    #[test]
    fn assignments_are_checked_before_they_are_followed() {
        assert!(check_assignment(&assignment("w1", 3, Some("j")), "w1", (0, 2)).is_ok());
        assert!(check_assignment(&assignment("w1", 3, None), "w1", (0, 3)).is_ok());
        assert!(check_assignment(&assignment("w2", 3, Some("j")), "w1", (0, 0)).is_err());
        assert!(check_assignment(&assignment("w1", 3, Some("j; rm -rf /")), "w1", (0, 0)).is_err());
        assert!(check_assignment(&assignment("w1", 1, Some("j")), "w1", (0, 2)).is_err());
    }

    #[test]
    fn a_newer_term_counts_epochs_afresh_and_an_older_one_is_ignored() {
        let with_term = |epoch, term| WorkerAssignment { term: Some(term), ..assignment("w1", epoch, Some("j")) };
        // A new leader (term 9) starts at epoch 1, after the old one (term 4) reached 500.
        assert!(check_assignment(&with_term(1, 9), "w1", (4, 500)).is_ok());
        // The deposed leader, still publishing, is not obeyed whatever its epoch.
        assert_eq!(
            check_assignment(&with_term(501, 4), "w1", (9, 1)),
            Err("from a scheduler deposed since (an older term)")
        );
        // A scheduler without terms after one with: older.
        assert!(check_assignment(&assignment("w1", 900, Some("j")), "w1", (9, 1)).is_err());
    }
}
