//! Supervision, the allocator's timing rules: a worker silent past the timeout while NATS could
//! hear it is gone (`supervise`; the rule itself is `WorkerRegistry::expire`), a submitted job's
//! failed or stalled generation is restarted after a doubling backoff (`backoff_s`), and one
//! whose restarts are used up is ended. All on the `now_s` the shell passes.

use tracing::{debug, info, warn};

use super::state::{Allocator, Count, Effect};
use crate::protocol::{EndReason, Running};

/// Seconds before the first restart of a failed generation; doubled at each further restart,
/// up to `RESTART_BACKOFF_MAX_S`.
const RESTART_BACKOFF_S: f64 = 1.0;
const RESTART_BACKOFF_MAX_S: f64 = 60.0;

/// An unknown worker is asked to say hello again at most this often.
pub(super) const PROMPT_EVERY_S: f64 = 5.0;

/// Seconds before the `restart`-th restart (from 1) of a job's processes: 1, 2, 4, … 60.
pub(super) fn backoff_s(restart: u32) -> f64 {
    (RESTART_BACKOFF_S * 2f64.powi(restart.saturating_sub(1).min(64) as i32)).min(RESTART_BACKOFF_MAX_S)
}

impl Allocator {
    /// The epoch's supervision. A worker is silent for the timeout *while we can hear it*:
    /// during an outage nobody is expired, and after it every worker gets the full timeout
    /// again. A stall is counted only while reports can reach us.
    pub(super) fn supervise(&mut self, now_s: f64, connected: bool, fx: &mut Vec<Effect>) {
        if !connected {
            self.was_disconnected = true;
        } else {
            if std::mem::take(&mut self.was_disconnected) {
                self.registry.touch_all(now_s);
                info!("NATS is back: worker timeouts count from now");
            }
            let expired = self.registry.expire(now_s, self.settings.worker_timeout.as_secs_f64());
            if let Some((first, _)) = expired.first() {
                // One line per epoch, not per worker: a rack that goes takes thousands.
                info!(workers = expired.len(), first = %first, "workers silent too long, removed");
            }
            for (worker, job) in expired {
                debug!(worker = %worker, job = ?job.as_ref().map(|j| &j.id), "worker silent too long, removed");
                // Its job is told its new membership at this epoch (its list still names the
                // worker, so the change shows).
                if let Some(entry) = job.and_then(|j| self.jobs.get_mut(&j.id)) {
                    entry.lost_workers = true;
                }
                if self.persist {
                    fx.push(Effect::ForgetWorker(worker));
                }
            }
            for job in self.stalled(now_s) {
                self.fail(&job, "no report for the stall timeout", now_s, fx);
            }
        }
        self.prompted.retain(|_, at| now_s - *at < PROMPT_EVERY_S);
    }

    /// A submitted job's generation failed (a process exited non-zero, or it stalled): it is
    /// restarted after a backoff, or, its restarts used up, ended as failed.
    pub(super) fn fail(&mut self, job: &str, why: &str, now_s: f64, fx: &mut Vec<Effect>) {
        let Some(entry) = self.jobs.get_mut(job) else { return };
        let Some(command) = &entry.command else { return };
        let sup = &mut entry.supervision;
        if sup.ending || sup.failed_generation == Some(entry.generation) {
            return;
        }
        sup.failed_generation = Some(entry.generation);
        if sup.restarts >= command.max_restarts {
            warn!(job, why, restarts = sup.restarts, "the job's restarts are used up: it ends as failed");
            fx.push(Effect::Count(Count::JobFailed));
            self.end(job, EndReason::Failed, fx);
            return;
        }
        sup.restarts += 1;
        let backoff = backoff_s(sup.restarts);
        sup.restart_at_s = Some(now_s + backoff);
        fx.push(Effect::Count(Count::JobRestarted));
        warn!(
            job,
            why,
            restart = sup.restarts,
            generation = entry.generation,
            backoff_s = backoff,
            "restarting the job's processes"
        );
    }

    /// Asks the shell to end a submitted job (as a bye would), once.
    pub(super) fn end(&mut self, job: &str, reason: EndReason, fx: &mut Vec<Effect>) {
        let Some(entry) = self.jobs.get_mut(job).filter(|e| e.command.is_some()) else { return };
        let sup = &mut entry.supervision;
        if std::mem::replace(&mut sup.ending, true) {
            return;
        }
        sup.restart_at_s = None;
        fx.push(Effect::EndJob { job: job.to_string(), reason });
    }

    /// Submitted jobs whose current generation has reported nothing for the stall timeout.
    fn stalled(&self, now_s: f64) -> Vec<String> {
        let Some(stall) = self.settings.stall_timeout.map(|d| d.as_secs_f64()).filter(|_| self.submitted > 0) else {
            return Vec::new();
        };
        self.jobs
            .iter()
            .filter(|(_, e)| e.command.is_some() && !e.workers.is_empty())
            .filter(|(_, e)| {
                let sup = &e.supervision;
                sup.restart_at_s.is_none()
                    && !sup.ending
                    && sup.failed_generation != Some(e.generation)
                    && now_s - sup.generation_started_s.max(sup.progress_s) > stall
            })
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// A heartbeat says the process of the generation the worker should run exited by itself:
    /// non-zero, the generation failed; rank 0 exiting 0 ends the job as finished (as under
    /// torchrun: a command need not say bye).
    pub(super) fn exited(&mut self, worker: &str, running: &Running, now_s: f64, fx: &mut Vec<Effect>) {
        let Some(code) = running.exit else { return };
        let Some(entry) = self.registry.get(worker) else { return };
        let current = entry.launch.as_ref().map(|l| l.generation);
        let rank0 = entry.launch.as_ref().is_some_and(|l| l.rank == 0);
        let Some(job) = entry.job.as_ref().map(|j| j.id.clone()) else { return };
        // After a restart the scheduler has no ranks for its restored workers (agents keep
        // running what they ran): the generation their agents run is taken as the current one.
        if running.job.as_deref() != Some(job.as_str())
            || running.generation.is_none()
            || (current.is_some() && running.generation != current)
        {
            return;
        }
        match code {
            0 if rank0 => {
                info!(job, "the job's rank 0 exited 0: finished");
                self.end(&job, EndReason::Finished, fx);
            }
            0 => {}
            126 => self.fail(&job, "an agent refused or could not start the command", now_s, fx),
            _ => self.fail(&job, "a process exited non-zero", now_s, fx),
        }
    }
}
