//! The scheduler's Prometheus metrics: one registry per running service (no global state, so
//! several services in one process, as in the tests, do not mix their figures). The names
//! follow Prometheus conventions: `slaq_…_total` for counters, `_seconds` for durations.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use prometheus::{Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts, Registry};

use crate::bus::BusCounters;
use crate::bus::durable::DurableCounters;
use crate::protocol::{EpochSummary, RejectCause};

/// Every metric the scheduler exports.
pub struct Metrics {
    registry: Registry,
    pub messages_accepted: IntCounterVec,
    pub messages_rejected: IntCounterVec,
    pub epoch_seconds: HistogramVec,
    pub epochs: IntCounter,
    pub jobs: IntGauge,
    pub workers: IntGauge,
    pub workers_assigned: IntGauge,
    pub workers_moved: IntCounter,
    pub last_epoch_moved: IntGauge,
    pub slo_jobs: prometheus::IntGaugeVec,
    /// Workers and busy workers per worker type.
    /// Jobs forgotten because they were silent for the idle timeout.
    pub jobs_expired: IntCounter,
    /// Reports stream messages the server skipped on the scheduler's consumer (a gap in the
    /// stream sequences that a read at the gap's start found filled): each is read and
    /// handled anyway.
    pub stream_skipped: IntCounter,
    /// Gaps in the reports stream's sequences that could not be checked (the read failed).
    pub stream_gaps_unchecked: IntCounter,
    /// Rendezvous ports held or cooling at the address whose ports are most used.
    pub rendezvous_ports_busy: IntGauge,
    /// Generations that ran without ranks: every rendezvous port at their address was busy.
    pub generations_without_ranks: IntCounter,
    /// Submitted jobs' generations restarted after a failure or a stall.
    pub job_restarts: IntCounter,
    /// Submitted jobs ended as failed (their restarts used up).
    pub jobs_failed: IntCounter,
    /// Assignments and commands agents refused (as their heartbeats say).
    pub agent_refusals: IntCounter,
    /// Seconds from a submitted job's new generation to its first new report (its restart).
    pub restart_seconds: prometheus::Histogram,
    /// Workers whose agent ran another job than the scheduler recorded (told again).
    pub assignment_mismatches: IntCounter,
    /// Epochs not run because the lease was not certainly held.
    pub epochs_skipped: IntCounter,
    /// The connections' and the state writer's counters.
    synced: Synced,
    fleet: Fleet,
    gains: Gains,
    pub nats_connected: IntGauge,
    pub ready: IntGauge,
    created: Instant,
    /// Milliseconds after `created` of the last epoch; `u64::MAX` before the first.
    last_epoch_ms: AtomicU64,
}

/// The phases of an epoch, as `phase` labels of `slaq_epoch_duration_seconds`.
pub const EPOCH_PHASES: [&str; 4] = ["collect", "policy", "publish", "total"];

/// The kinds of accepted messages, as `kind` labels of `slaq_messages_accepted_total`.
pub const MESSAGE_KINDS: [&str; 6] = ["loss", "job_hello", "job_bye", "worker_hello", "worker_beat", "status"];

/// A counter (the name and help are this file's constants: valid).
fn counter(name: &str, help: &str) -> IntCounter {
    IntCounter::new(name, help).expect("valid metric")
}

fn gauge(name: &str, help: &str) -> IntGauge {
    IntGauge::new(name, help).expect("valid metric")
}

fn float_counter(name: &str, help: &str) -> prometheus::Counter {
    prometheus::Counter::new(name, help).expect("valid metric")
}

fn float_gauge(name: &str, help: &str) -> prometheus::Gauge {
    prometheus::Gauge::new(name, help).expect("valid metric")
}

fn counter_vec(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric")
}

fn gauge_vec(name: &str, help: &str, labels: &[&str]) -> prometheus::IntGaugeVec {
    prometheus::IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric")
}

/// Each epoch phase's duration: from tens of microseconds to seconds (100,000 jobs).
fn epoch_histogram() -> HistogramVec {
    let buckets = prometheus::exponential_buckets(50e-6, 4.0, 10).unwrap_or_default();
    HistogramVec::new(
        HistogramOpts::new("slaq_epoch_duration_seconds", "Time an epoch spends in each phase").buckets(buckets),
        &["phase"],
    )
    .expect("valid metric")
}

/// Seconds from a submitted job's new generation to its first new report.
fn restart_histogram() -> prometheus::Histogram {
    prometheus::Histogram::with_opts(
        HistogramOpts::new(
            "slaq_job_restart_seconds",
            "Seconds from a submitted job's new generation to its first new report",
        )
        .buckets(vec![1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0]),
    )
    .expect("valid metric")
}

/// The counters kept outside the registry and brought into it: the NATS connections'
/// (`bus::BusCounters`, by `Metrics::sync_bus`) and the state writer's
/// (`bus::durable::DurableCounters`, by `Metrics::sync_state`).
struct Synced {
    state_writes: IntCounter,
    state_write_failures: IntCounter,
    state_write_conflicts: IntCounter,
    state_writes_fenced: IntCounter,
    state_writes_pending: IntGauge,
    nats_disconnects: IntCounter,
    nats_reconnects: IntCounter,
    nats_dropped_messages: IntCounter,
    nats_server_errors: IntCounter,
}

impl Synced {
    fn new() -> Self {
        Synced {
            state_writes: counter("slaq_state_writes_total", "State writes made"),
            state_write_failures: counter(
                "slaq_state_write_failures_total",
                "State write attempts that failed (each is retried until written or superseded)",
            ),
            state_write_conflicts: counter(
                "slaq_state_write_conflicts_total",
                "State writes refused because another writer had written the key",
            ),
            state_writes_fenced: counter(
                "slaq_state_writes_fenced_total",
                "State writes dropped because the scheduler lost its lease",
            ),
            state_writes_pending: gauge("slaq_state_writes_pending", "State writes queued and not yet made"),
            nats_disconnects: counter("slaq_nats_disconnects_total", "Connections to NATS lost"),
            nats_reconnects: counter("slaq_nats_reconnects_total", "Connections to NATS made again after a loss"),
            nats_dropped_messages: counter(
                "slaq_nats_dropped_messages_total",
                "Messages dropped because a subscription's buffer was full (one per message)",
            ),
            nats_server_errors: counter("slaq_nats_server_errors_total", "Errors the NATS server sent"),
        }
    }

    fn collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        vec![
            Box::new(self.state_writes.clone()),
            Box::new(self.state_write_failures.clone()),
            Box::new(self.state_write_conflicts.clone()),
            Box::new(self.state_writes_fenced.clone()),
            Box::new(self.state_writes_pending.clone()),
            Box::new(self.nats_disconnects.clone()),
            Box::new(self.nats_reconnects.clone()),
            Box::new(self.nats_dropped_messages.clone()),
            Box::new(self.nats_server_errors.clone()),
        ]
    }
}

/// The bids' predicted gains against the jobs' realised ones.
struct Gains {
    predicted_gain: prometheus::Gauge,
    realised_gain: prometheus::Gauge,
    predicted_gain_total: prometheus::Counter,
    realised_gain_total: prometheus::Counter,
    gain_epoch_jobs: IntGauge,
}

impl Gains {
    fn new() -> Self {
        Gains {
            predicted_gain: float_gauge(
                "slaq_epoch_predicted_gain",
                "Normalised loss reduction the bids predicted for the last completed epoch, summed over jobs",
            ),
            realised_gain: float_gauge(
                "slaq_epoch_realised_gain",
                "Normalised loss reduction the jobs reported over the last completed epoch, summed over jobs",
            ),
            predicted_gain_total: float_counter(
                "slaq_predicted_gain_total",
                "Predicted normalised loss reduction, summed over epochs and jobs",
            ),
            realised_gain_total: float_counter(
                "slaq_realised_gain_total",
                "Realised normalised loss reduction (negative drops count as zero), summed over epochs and jobs",
            ),
            gain_epoch_jobs: gauge(
                "slaq_epoch_gain_jobs",
                "Jobs whose predicted and realised gains the last epoch compared",
            ),
        }
    }

    fn collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        vec![
            Box::new(self.predicted_gain.clone()),
            Box::new(self.realised_gain.clone()),
            Box::new(self.predicted_gain_total.clone()),
            Box::new(self.realised_gain_total.clone()),
            Box::new(self.gain_epoch_jobs.clone()),
        ]
    }
}

/// Workers per tenant and per worker type, as the last epoch left them.
struct Fleet {
    accelerator_workers: prometheus::IntGaugeVec,
    tenant_workers: prometheus::IntGaugeVec,
    class_workers: prometheus::IntGaugeVec,
}

impl Fleet {
    fn new() -> Self {
        Fleet {
            tenant_workers: gauge_vec(
                "slaq_tenant_workers",
                "Per tenant ([tenants]): workers guaranteed, in its quota, held, borrowed and lent; jobs and jobs waiting",
                &["tenant", "kind"],
            ),
            class_workers: gauge_vec(
                "slaq_tenant_class_workers",
                "Per tenant and priority class (when a tenant's jobs use classes): workers held, jobs and jobs waiting",
                &["tenant", "class", "kind"],
            ),
            accelerator_workers: gauge_vec(
                "slaq_accelerator_workers",
                "Workers alive per worker type, all and those running a job",
                &["accelerator", "state"],
            ),
        }
    }

    fn collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        vec![
            Box::new(self.accelerator_workers.clone()),
            Box::new(self.tenant_workers.clone()),
            Box::new(self.class_workers.clone()),
        ]
    }
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let metrics = Metrics {
            messages_accepted: counter_vec("slaq_messages_accepted_total", "Messages accepted, by kind", &["kind"]),
            messages_rejected: counter_vec("slaq_messages_rejected_total", "Messages rejected, by cause", &["cause"]),
            epoch_seconds: epoch_histogram(),
            epochs: counter("slaq_epochs_total", "Epochs run"),
            jobs: gauge("slaq_jobs", "Jobs known to the scheduler"),
            workers: gauge("slaq_workers", "Workers registered and alive"),
            workers_assigned: gauge("slaq_workers_assigned", "Workers assigned to a job in the last epoch"),
            workers_moved: counter("slaq_workers_moved_total", "Worker assignments changed"),
            last_epoch_moved: gauge("slaq_last_epoch_workers_moved", "Workers moved in the last epoch"),
            slo_jobs: gauge_vec(
                "slaq_slo_jobs",
                "Running jobs with an iteration-time SLO whose chosen batch is predicted to meet or miss it",
                &["state"],
            ),
            fleet: Fleet::new(),
            gains: Gains::new(),
            jobs_expired: counter(
                "slaq_jobs_expired_total",
                "Jobs forgotten after sending nothing for the idle timeout",
            ),
            stream_skipped: counter(
                "slaq_stream_skipped_total",
                "Reports stream messages the server skipped on the scheduler's consumer, read and handled by sequence",
            ),
            stream_gaps_unchecked: counter(
                "slaq_stream_gaps_unchecked_total",
                "Gaps in the reports stream's sequences the scheduler could not check (the read failed)",
            ),
            rendezvous_ports_busy: gauge(
                "slaq_rendezvous_ports_busy",
                "Rendezvous ports held or cooling at the address whose ports are most used (of 1,000 per address)",
            ),
            generations_without_ranks: counter(
                "slaq_generations_without_ranks_total",
                "Job generations started without ranks: every rendezvous port at the rank-0 worker's address was busy",
            ),
            job_restarts: counter(
                "slaq_job_restarts_total",
                "Generations of submitted jobs restarted after a process failed or the job stalled",
            ),
            restart_seconds: restart_histogram(),
            agent_refusals: counter(
                "slaq_agent_refusals_total",
                "Assignments and commands the worker agents refused, as their heartbeats say",
            ),
            jobs_failed: counter("slaq_jobs_failed_total", "Submitted jobs ended as failed, restarts used up"),
            assignment_mismatches: counter(
                "slaq_assignment_mismatches_total",
                "Workers found running another job than the scheduler recorded, and told again",
            ),
            epochs_skipped: counter(
                "slaq_epochs_skipped_total",
                "Epochs not run because the leader's lease was not certainly held",
            ),
            synced: Synced::new(),
            nats_connected: gauge("slaq_nats_connected", "1 while connected to NATS"),
            ready: gauge("slaq_ready", "1 once subscriptions are confirmed"),
            registry,
            created: Instant::now(),
            last_epoch_ms: AtomicU64::new(u64::MAX),
        };
        for kind in MESSAGE_KINDS {
            metrics.messages_accepted.with_label_values(&[kind]);
        }
        for phase in EPOCH_PHASES {
            metrics.epoch_seconds.with_label_values(&[phase]);
        }
        metrics.register_all();
        metrics
    }

    fn register_all(&self) {
        let collectors: Vec<Box<dyn prometheus::core::Collector>> = vec![
            Box::new(self.messages_accepted.clone()),
            Box::new(self.messages_rejected.clone()),
            Box::new(self.epoch_seconds.clone()),
            Box::new(self.epochs.clone()),
            Box::new(self.jobs.clone()),
            Box::new(self.workers.clone()),
            Box::new(self.workers_assigned.clone()),
            Box::new(self.workers_moved.clone()),
            Box::new(self.last_epoch_moved.clone()),
            Box::new(self.slo_jobs.clone()),
            Box::new(self.jobs_expired.clone()),
            Box::new(self.stream_skipped.clone()),
            Box::new(self.stream_gaps_unchecked.clone()),
            Box::new(self.rendezvous_ports_busy.clone()),
            Box::new(self.generations_without_ranks.clone()),
            Box::new(self.job_restarts.clone()),
            Box::new(self.jobs_failed.clone()),
            Box::new(self.agent_refusals.clone()),
            Box::new(self.restart_seconds.clone()),
            Box::new(self.assignment_mismatches.clone()),
            Box::new(self.epochs_skipped.clone()),
            Box::new(self.nats_connected.clone()),
            Box::new(self.ready.clone()),
        ];
        for c in collectors
            .into_iter()
            .chain(self.synced.collectors())
            .chain(self.fleet.collectors())
            .chain(self.gains.collectors())
        {
            // Names are distinct constants: a clash is a bug here.
            self.registry.register(c).expect("metric names are unique");
        }
    }

    /// The counter of one accepted message kind (keep the handle: increments are then one
    /// atomic add, with no label lookup).
    pub fn accepted(&self, kind: &str) -> IntCounter {
        self.messages_accepted.with_label_values(&[kind])
    }

    pub fn rejected(&self, cause: RejectCause) -> IntCounter {
        self.messages_rejected.with_label_values(&[cause.as_str()])
    }

    /// Records one epoch's summary.
    pub fn observe_epoch(&self, summary: &EpochSummary) {
        self.last_epoch_ms.store(self.created.elapsed().as_millis() as u64, Ordering::Relaxed);
        self.epochs.inc();
        let phases = [summary.collect_ms, summary.policy_ms, summary.publish_ms, summary.total_ms];
        for (phase, ms) in EPOCH_PHASES.iter().zip(phases) {
            self.epoch_seconds.with_label_values(&[phase]).observe(ms / 1e3);
        }
        self.jobs.set(summary.num_jobs as i64);
        self.workers.set(summary.num_workers as i64);
        self.workers_assigned.set(summary.workers_assigned as i64);
        self.workers_moved.inc_by(summary.workers_moved as u64);
        self.last_epoch_moved.set(summary.workers_moved as i64);
        self.slo_jobs
            .with_label_values(&["met"])
            .set((summary.slo_jobs - summary.slo_missed.min(summary.slo_jobs)) as i64);
        self.slo_jobs.with_label_values(&["missed"]).set(summary.slo_missed as i64);
        for (name, used) in &summary.accelerators {
            self.fleet.accelerator_workers.with_label_values(&[name.as_str(), "all"]).set(used.workers as i64);
            self.fleet.accelerator_workers.with_label_values(&[name.as_str(), "busy"]).set(used.busy as i64);
        }
        for (name, u) in &summary.tenants {
            let kinds = [
                ("guaranteed", u.guaranteed as usize),
                ("quota", u.quota as usize),
                ("held", u.workers as usize),
                ("borrowed", u.borrowed as usize),
                ("lent", u.lent as usize),
                ("jobs", u.jobs),
                ("waiting", u.waiting),
            ];
            for (kind, v) in kinds {
                self.fleet.tenant_workers.with_label_values(&[name.as_str(), kind]).set(v as i64);
            }
            for (class, c) in &u.classes {
                for (kind, v) in [("held", c.workers as usize), ("jobs", c.jobs), ("waiting", c.waiting)] {
                    self.fleet.class_workers.with_label_values(&[name.as_str(), class.as_str(), kind]).set(v as i64);
                }
            }
        }
        if let Some(gains) = &summary.gains {
            self.gains.predicted_gain.set(gains.predicted);
            self.gains.realised_gain.set(gains.realised);
            self.gains.predicted_gain_total.inc_by(gains.predicted.max(0.0));
            self.gains.realised_gain_total.inc_by(gains.realised.max(0.0));
            self.gains.gain_epoch_jobs.set(gains.jobs as i64);
        }
    }

    /// Time since the last epoch, or since this registry was made if there was none yet.
    pub fn since_last_epoch(&self) -> Duration {
        match self.last_epoch_ms.load(Ordering::Relaxed) {
            u64::MAX => self.created.elapsed(),
            ms => self.created.elapsed().saturating_sub(Duration::from_millis(ms)),
        }
    }

    /// Brings the NATS event counters (kept by `bus::connect`'s callback) into the registry.
    pub fn sync_bus(&self, bus: &BusCounters) {
        let sync = |counter: &IntCounter, value: u64| counter.inc_by(value.saturating_sub(counter.get()));
        sync(&self.synced.nats_disconnects, bus.disconnects.load(Ordering::Relaxed));
        sync(&self.synced.nats_reconnects, bus.reconnects.load(Ordering::Relaxed));
        sync(&self.synced.nats_dropped_messages, bus.dropped_messages.load(Ordering::Relaxed));
        sync(&self.synced.nats_server_errors, bus.server_errors.load(Ordering::Relaxed));
    }

    /// Brings the state writer's counters (`bus::durable`) into the registry.
    pub fn sync_state(&self, state: &DurableCounters, pending: usize) {
        let sync = |counter: &IntCounter, value: &AtomicU64| {
            let value = value.load(Ordering::Relaxed);
            counter.inc_by(value.saturating_sub(counter.get()))
        };
        sync(&self.synced.state_writes, &state.written);
        sync(&self.synced.state_write_failures, &state.failed);
        sync(&self.synced.state_write_conflicts, &state.conflicts);
        sync(&self.synced.state_writes_fenced, &state.fenced);
        self.synced.state_writes_pending.set(pending as i64);
    }

    pub fn accepted_counts(&self) -> BTreeMap<String, u64> {
        counts(&self.messages_accepted)
    }

    /// Rejections by cause, with the NATS slow-consumer events beside them.
    pub fn rejected_counts(&self) -> BTreeMap<String, u64> {
        let mut rejected = counts(&self.messages_rejected);
        let slow = self.synced.nats_dropped_messages.get();
        if slow > 0 {
            rejected.insert("dropped_by_client".into(), slow);
        }
        rejected
    }

    /// The text exposition format (version 0.0.4).
    pub fn render(&self) -> String {
        let mut buffer = Vec::new();
        // Encoding our own well-formed families into a Vec cannot fail.
        let _ = prometheus::TextEncoder::new().encode(&self.registry.gather(), &mut buffer);
        String::from_utf8(buffer).unwrap_or_default()
    }
}

/// The non-zero values of a counter family with one label, by label value.
fn counts(family: &IntCounterVec) -> BTreeMap<String, u64> {
    use prometheus::core::Collector;
    let mut out = BTreeMap::new();
    for mf in family.collect() {
        for m in mf.get_metric() {
            let value = m.get_counter().get_value() as u64;
            if let (Some(label), true) = (m.get_label().first(), value > 0) {
                out.insert(label.value().to_string(), value);
            }
        }
    }
    out
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_epoch_shows_in_the_exposition() {
        let m = Metrics::new();
        m.accepted("loss").inc_by(3);
        m.rejected(RejectCause::Undecodable).inc();
        m.observe_epoch(&EpochSummary {
            epoch: 1,
            num_jobs: 2,
            num_workers: 4,
            workers_assigned: 4,
            workers_moved: 4,
            total_ms: 2.0,
            ..EpochSummary::default()
        });
        let text = m.render();
        assert!(text.contains("slaq_messages_accepted_total{kind=\"loss\"} 3"), "{text}");
        assert!(text.contains("slaq_messages_rejected_total{cause=\"undecodable\"} 1"), "{text}");
        assert!(text.contains("slaq_workers_moved_total 4"), "{text}");
        assert!(text.contains("slaq_epoch_duration_seconds_count{phase=\"total\"} 1"), "{text}");
    }
}
