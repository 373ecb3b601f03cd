//! `slaq serve` configuration: a raw serde struct read from TOML (unknown keys are errors),
//! overridden by environment variables and flags, then validated into [`ServeConfig`].

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::actors::tenants::Tenants;
use crate::bus::NatsAuth;
use crate::bus::lease::Fence;
use crate::policy::PolicyKind;
use crate::protocol::Subjects;
use crate::quality::PredictorConfig;
use crate::schedule::tenants::TenantSet;

/// As written in `config/slaq.toml`; every key optional.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawConfig {
    pub nats: RawNats,
    pub scheduler: RawScheduler,
    pub http: RawHttp,
    pub state: RawState,
    pub ha: RawHa,
    pub cluster: RawCluster,
    pub predictor: PredictorConfig,
    /// `[tenants.<name>]`: teams sharing the cluster (issue #32, docs/teams.md). A job's tenant
    /// is the first token of its id, `TENANT.NAME`, from the subject it publishes on; a
    /// one-token id is tenant `default`'s. Empty: one flat pool, every job accepted.
    pub tenants: std::collections::BTreeMap<String, crate::schedule::tenants::TenantConfig>,
}

/// `[cluster]`: replicas that share the work (issue #19). With `shared`, the jobs are split
/// into `partitions` by id (the server's subject mapping `{{partition(partitions,1)}}`, see
/// `deploy/nats/slaq-shared.conf`); every replica runs the job actors of the partitions it
/// holds (`bus::partitions`) and sends their bids to the leader, which alone allocates. Needs
/// `[ha] enabled` and the server's mapping with the same number of partitions.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawCluster {
    pub shared: bool,
    pub partitions: u32,
}

impl Default for RawCluster {
    fn default() -> Self {
        RawCluster { shared: false, partitions: 32 }
    }
}

/// `[ha]`: several `slaq serve` replicas, one allocating at a time (`bus::lease`), the others
/// standing by to take over from the durable state. Needs JetStream.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawHa {
    pub enabled: bool,
    /// The leader's lease: a standby takes over at most this long after the leader stops
    /// renewing (plus its start-up); the leader gives up after half of it without a renewal.
    pub lease_ms: u64,
    /// This replica's name in the lease (default: `<hostname>-<pid>`).
    pub replica_id: String,
}

impl Default for RawHa {
    fn default() -> Self {
        RawHa { enabled: false, lease_ms: 4_000, replica_id: String::new() }
    }
}

/// Leader election settings (see [`RawHa`]).
#[derive(Clone, Debug, PartialEq)]
pub struct HaSettings {
    pub lease: Duration,
    pub replica: String,
}

/// `[state]`: where the scheduler keeps what must survive a restart.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawState {
    /// `auto` (JetStream when the server offers it), `jetstream` (required) or `none` (core
    /// NATS only: at most once, nothing survives a restart).
    pub mode: String,
    /// Loss reports the stream keeps per job.
    pub report_history: i64,
    /// Seconds the stream keeps a report or bye (what a scheduler down for longer missed is
    /// gone; ended jobs' messages leave the stream this way, never by a purge).
    pub report_retention_s: u64,
    /// A job saves its predictor at most this often (when it has new points).
    pub snapshot_ms: u64,
    /// Copies of the stream and buckets in a NATS cluster (1, or 3 to survive a node).
    pub replicas: usize,
}

impl Default for RawState {
    fn default() -> Self {
        RawState { mode: "auto".into(), report_history: 512, report_retention_s: 900, snapshot_ms: 2_000, replicas: 1 }
    }
}

/// Whether and how state is kept (see [`RawState`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateMode {
    Auto,
    JetStream,
    None,
}

/// The HTTP listener for `/metrics`, `/healthz` and `/readyz`.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawHttp {
    /// `host:port` to listen on; empty: no HTTP listener.
    pub listen: String,
    /// A bearer token the listener asks of every request but `/healthz` (the page, its JSON,
    /// `/metrics`, `/readyz`); empty: none (keep `listen` on loopback then).
    pub token: String,
}

#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawNats {
    pub urls: Vec<String>,
    pub prefix: String,
    pub name: String,
    /// Messages a subscription may buffer before NATS drops (and we count) the rest.
    pub subscription_capacity: usize,
    /// Whether to use the other servers a cluster advertises when the listed ones go
    /// (`false`: only `urls`, for clusters whose advertised addresses are not reachable).
    pub discover_servers: bool,
    /// The first token of a reply subject the scheduler answers on must start with one of
    /// these (clients' inboxes); any other reply subject is refused (`bad_reply`).
    pub reply_prefixes: Vec<String>,
    pub auth: RawNatsAuth,
    /// Credentials of the scheduler's second connection, which does every JetStream and
    /// key-value operation (empty: those of `auth`). With `deploy/nats/slaq-auth.conf` it is a
    /// user of another account, so no reply subject chosen by a client reaches the state.
    pub state_auth: RawNatsAuth,
    pub tls: RawNatsTls,
}

/// `[nats.auth]`: how the scheduler proves who it is. Empty strings are unset.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawNatsAuth {
    pub user: String,
    pub password: String,
    pub token: String,
    pub nkey_seed_file: String,
    pub credentials_file: String,
    pub inbox_prefix: String,
}

/// `[nats.tls]`.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawNatsTls {
    pub ca_file: String,
    pub cert_file: String,
    pub key_file: String,
    pub required: bool,
}

impl RawNatsAuth {
    fn is_empty(&self) -> bool {
        *self == RawNatsAuth::default()
    }
}

impl RawNats {
    /// The state connection's credentials: `state_auth` if set, else those of the bus.
    fn state_auth(&self, bus: &NatsAuth) -> NatsAuth {
        if self.state_auth.is_empty() {
            return bus.clone();
        }
        let own = RawNats { auth: self.state_auth.clone(), ..self.clone() };
        own.auth(&NatsAuth::default())
    }

    /// The file's credentials and TLS settings, overridden field by field by `over`.
    fn auth(&self, over: &NatsAuth) -> NatsAuth {
        let text = |s: &str| (!s.is_empty()).then(|| s.to_string());
        let path = |s: &str| (!s.is_empty()).then(|| std::path::PathBuf::from(s));
        let (a, t) = (&self.auth, &self.tls);
        NatsAuth {
            user: over.user.clone().or_else(|| text(&a.user)),
            password: over.password.clone().or_else(|| text(&a.password)),
            token: over.token.clone().or_else(|| text(&a.token)),
            nkey_seed_file: over.nkey_seed_file.clone().or_else(|| path(&a.nkey_seed_file)),
            credentials_file: over.credentials_file.clone().or_else(|| path(&a.credentials_file)),
            inbox_prefix: over.inbox_prefix.clone().or_else(|| text(&a.inbox_prefix)),
            tls_ca_file: over.tls_ca_file.clone().or_else(|| path(&t.ca_file)),
            tls_cert_file: over.tls_cert_file.clone().or_else(|| path(&t.cert_file)),
            tls_key_file: over.tls_key_file.clone().or_else(|| path(&t.key_file)),
            tls_required: over.tls_required || t.required,
            ignore_discovered_servers: over.ignore_discovered_servers || !self.discover_servers,
        }
    }
}

#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawScheduler {
    pub epoch_ms: u64,
    pub horizon_s: f64,
    pub policy: PolicyKind,
    pub worker_timeout_ms: u64,
    /// Whether a loss report from an unknown job registers it with a default spec. `None`: on, unless the scheduler connects with credentials (a secured deployment, where
    /// a job must say hello with its own credentials first).
    pub register_on_report: Option<bool>,
    pub job_mailbox: usize,
    pub max_jobs: usize,
    pub max_payload_bytes: usize,
    /// Threads of their own for the job actors; 0 runs them on the scheduler's thread, which
    /// is fastest on small machines (no cross-thread wake-up per report; figures in
    /// docs/evaluation.md).
    pub job_threads: usize,
    /// A job refits its predictor at most this often (a refit costs ~50 µs; bids use the
    /// latest fit, so with 5 s epochs once a second keeps them fresh at a fraction of a core).
    pub refit_interval_ms: u64,
    /// Fairness floor f in [0, 1] (see `schedule`): every job gets at least f times its fair
    /// share of worker-seconds over the last `floor_window` epochs.
    pub floor: f64,
    pub floor_window: usize,
    /// The finish-time bound `K` (see `schedule::slowdown`): no job is planned to finish more
    /// than `K` times later than under fair sharing. 0: off.
    pub max_slowdown: f64,
    /// The weight λ of the completion term in slaq's bids (`schedule::finish`, issue #41): a
    /// worker's value to a job is its quality gain plus λ times the share of its remaining
    /// work (declared, or predicted from its curve) it gets done over the horizon. 0: off.
    pub completion_weight: f64,
    /// A loss report more than this many iterations past the job's last is refused
    /// (`bad_iteration`): one forged `iter = 2^64 − 1` must not freeze a job.
    pub max_iter_jump: u64,
    /// Loss reports a job may send per second, and in one burst (a burst must hold a replay of
    /// `state.report_history` reports after a restart); its excess is refused (`rate_limited`).
    pub max_reports_per_s: u32,
    pub report_burst: u32,
    /// A job that has sent nothing (no report, no hello) for this long is forgotten, whatever
    /// its history (a bye lost in a restart must not leave a job for ever). 0: never.
    pub idle_job_timeout_ms: u64,
    /// A job that has held workers for this long and sent nothing for as long bids for no
    /// workers until it reports again: a dead job's last prediction must not keep winning
    /// workers until it expires. Set it above the longest iteration (and start-up) of a job.
    /// 0: never.
    pub stale_job_ms: u64,
    /// A submitted job (`slaq submit`) whose processes send no report for this long after a
    /// generation starts, or since their last report, is restarted as if they had failed
    /// (`max_restarts` of them, then it ends as failed). Set it above the job's start-up and
    /// longest iteration. 0: never.
    pub stall_timeout_ms: u64,
    /// A submitted job's workers are not changed again within this long of its last change
    /// (unless it loses one): each change restarts all its processes, and a policy's
    /// tie-breaks must not restart a job every epoch. 0: no such rule.
    pub min_generation_ms: u64,
    /// A job that reports its checkpoint age and saves at most this far apart keeps exactly its
    /// workers between two saves, and changes right after one (unless a guarantee needs its
    /// workers): a stop loses the work since its last save. 0: changes never wait for a save.
    pub save_wait_max_ms: u64,
    /// ... and at least this many times its measured restart cost (the time from a new
    /// generation to its first new report), so that restarts take at most about 1/(1 + this)
    /// of its time. 0: the fixed `min_generation_ms` only.
    pub restart_amortisation: f64,
    /// The largest `min_workers` a job may ask for (a larger one is refused as `invalid_spec`).
    pub max_min_workers: u32,
    /// The rendezvous ports (`MASTER_PORT`), `FIRST-LAST`: each address's jobs share them, one
    /// per running generation whose rank 0 is there, and one per generation that ended there
    /// within `rendezvous_cooldown_ms` (its processes may still be stopping).
    pub rendezvous_ports: String,
    pub rendezvous_cooldown_ms: u64,
    /// What moving a job to other machines costs it (a restart, seconds), and the horizon over
    /// which a move must pay for it (placement; `schedule::place`).
    pub restart_s: f64,
    pub move_horizon_s: f64,
}

impl Default for RawNats {
    fn default() -> Self {
        RawNats {
            urls: vec!["nats://127.0.0.1:4222".into()],
            prefix: "slaq".into(),
            name: "slaq-scheduler".into(),
            subscription_capacity: 65_536,
            discover_servers: true,
            reply_prefixes: vec!["_INBOX".into()],
            auth: RawNatsAuth::default(),
            state_auth: RawNatsAuth::default(),
            tls: RawNatsTls::default(),
        }
    }
}

impl Default for RawScheduler {
    fn default() -> Self {
        RawScheduler {
            epoch_ms: 5_000,
            horizon_s: 60.0,
            policy: PolicyKind::Slaq,
            worker_timeout_ms: 15_000,
            register_on_report: None,
            job_mailbox: 1_024,
            max_jobs: 200_000,
            max_payload_bytes: 64 * 1024,
            job_threads: 0,
            refit_interval_ms: 1_000,
            floor: crate::schedule::PlanSettings::default().floor,
            floor_window: crate::schedule::PlanSettings::default().floor_window,
            max_slowdown: crate::schedule::PlanSettings::default().max_slowdown,
            completion_weight: crate::schedule::DEFAULT_COMPLETION_WEIGHT,
            max_iter_jump: 1_000_000,
            max_reports_per_s: 1_000,
            report_burst: 2_000,
            idle_job_timeout_ms: 600_000,
            stale_job_ms: 120_000,
            stall_timeout_ms: 300_000,
            min_generation_ms: 30_000,
            save_wait_max_ms: 1_800_000,
            restart_amortisation: 4.0,
            max_min_workers: 1_024,
            rendezvous_ports: "29500-30499".into(),
            rendezvous_cooldown_ms: 60_000,
            restart_s: 30.0,
            move_horizon_s: 120.0,
        }
    }
}

/// Validated settings.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    pub nats_urls: Vec<String>,
    pub nats_auth: NatsAuth,
    /// The state connection's credentials (see [`RawNats::state_auth`]).
    pub state_auth: NatsAuth,
    pub reply_prefixes: Vec<String>,
    pub subjects: Subjects,
    pub client_name: String,
    pub subscription_capacity: usize,
    pub epoch: Duration,
    pub horizon_s: f64,
    pub completion_weight: f64,
    pub policy: PolicyKind,
    pub worker_timeout: Duration,
    pub register_on_report: bool,
    pub job_mailbox: usize,
    pub max_jobs: usize,
    pub max_payload_bytes: usize,
    pub job_threads: usize,
    pub refit_interval: Duration,
    pub plan: crate::schedule::PlanSettings,
    pub place: crate::schedule::PlaceSettings,
    pub predictor: PredictorConfig,
    /// Where `/metrics`, `/healthz`, `/readyz` and the page are served, if anywhere.
    pub http_listen: Option<std::net::SocketAddr>,
    /// The bearer token of `[http] token`, if set.
    pub http_token: Option<String>,
    pub state_mode: StateMode,
    pub max_iter_jump: u64,
    pub report_quota: governor::Quota,
    pub idle_job_timeout: Option<Duration>,
    pub stale_job: Option<Duration>,
    pub stall_timeout: Option<Duration>,
    pub min_generation: Duration,
    pub save_wait_max: Duration,
    pub restart_amortisation: f64,
    pub max_min_workers: u32,
    /// First rendezvous port, ports per address, and how long a port given back cools.
    pub rendezvous: (u16, u16, Duration),
    pub durable: crate::bus::durable::DurableSettings,
    pub snapshot_interval: Duration,
    /// Replicas with a leader lease, if enabled.
    pub ha: Option<HaSettings>,
    /// The term this scheduler's assignments carry: set by the lease when replicated,
    /// otherwise taken from the state bucket at start (`Durable::incarnation`).
    pub term: Option<u64>,
    /// While this scheduler may act: the replica loop's lease ([`Fence::unfenced`] without
    /// replicas).
    pub fence: Fence,
    /// `[tenants]`, checked (`None`: one flat pool); replaced by a reload (SIGHUP).
    pub tenants: Tenants,
}

/// `[tenants]` of a configuration file, checked as `slaq serve` starts with it (for a reload).
pub fn tenants_of(raw: &RawConfig) -> Result<Option<TenantSet>, ConfigError> {
    match raw.tenants.is_empty() {
        true => Ok(None),
        false => TenantSet::new(raw.tenants.clone()).map(Some).map_err(|e| ConfigError::Invalid(e.to_string())),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    File(#[from] crate::settings::FileError),
    #[error("{name}={value:?}: {problem}")]
    Env { name: &'static str, value: String, problem: &'static str },
    #[error("invalid setting: {0}")]
    Invalid(String),
}

/// The environment variables `slaq serve` reads.
pub const ENV_VARS: [&str; 14] = [
    "SLAQ_NATS_URL",
    "SLAQ_PREFIX",
    "SLAQ_EPOCH_MS",
    "SLAQ_REFIT_MS",
    "SLAQ_POLICY",
    "SLAQ_HTTP_LISTEN",
    "SLAQ_HTTP_TOKEN",
    "SLAQ_STATE_MODE",
    "SLAQ_STATE_NATS_USER",
    "SLAQ_STATE_NATS_PASSWORD",
    "SLAQ_STATE_NATS_TOKEN",
    "SLAQ_STATE_NATS_NKEY_SEED_FILE",
    "SLAQ_STATE_NATS_CREDENTIALS_FILE",
    "SLAQ_STATE_NATS_INBOX_PREFIX",
];

/// Overrides given on the command line.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    pub nats: Vec<String>,
    pub prefix: Option<String>,
    pub epoch_ms: Option<u64>,
    pub policy: Option<PolicyKind>,
    pub refit_ms: Option<u64>,
    pub floor: Option<f64>,
    /// `--horizon-s`: seconds ahead over which bids are predicted (scale it with the epoch when
    /// time is accelerated).
    pub horizon_s: Option<f64>,
    pub http_listen: Option<String>,
    /// Credentials and TLS from the flags (or their environment variables).
    pub nats_auth: NatsAuth,
    /// `--replica-id`: run as a replica with a leader lease (`[ha]`), named so.
    pub replica_id: Option<String>,
}

impl RawConfig {
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        Ok(crate::settings::read_toml(path)?)
    }

    /// Applies `SLAQ_NATS_URL` (comma-separated), `SLAQ_PREFIX`, `SLAQ_EPOCH_MS`,
    /// `SLAQ_REFIT_MS`, `SLAQ_POLICY`, `SLAQ_HTTP_LISTEN` and `SLAQ_HTTP_TOKEN` from `env` (see [`ENV_VARS`]),
    /// then the flags, and validates.
    pub fn resolve(mut self, env: &BTreeMap<String, String>, flags: &Overrides) -> Result<ServeConfig, ConfigError> {
        if let Some(v) = env.get("SLAQ_NATS_URL") {
            self.nats.urls = v.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
        }
        if let Some(v) = env.get("SLAQ_PREFIX") {
            self.nats.prefix = v.clone();
        }
        if let Some(v) = env.get("SLAQ_EPOCH_MS") {
            self.scheduler.epoch_ms = v.parse().map_err(|_| ConfigError::Env {
                name: "SLAQ_EPOCH_MS",
                value: v.clone(),
                problem: "not a whole number",
            })?;
        }
        if let Some(v) = env.get("SLAQ_REFIT_MS") {
            self.scheduler.refit_interval_ms = v.parse().map_err(|_| ConfigError::Env {
                name: "SLAQ_REFIT_MS",
                value: v.clone(),
                problem: "not a whole number",
            })?;
        }
        if let Some(v) = env.get("SLAQ_POLICY") {
            self.scheduler.policy = parse_policy(v).ok_or_else(|| ConfigError::Env {
                name: "SLAQ_POLICY",
                value: v.clone(),
                problem: "expected slaq or fair",
            })?;
        }
        if let Some(v) = env.get("SLAQ_STATE_MODE") {
            self.state.mode = v.clone();
        }
        if let Some(v) = env.get("SLAQ_HTTP_LISTEN") {
            self.http.listen = v.clone();
        }
        if let Some(v) = env.get("SLAQ_HTTP_TOKEN") {
            self.http.token = v.clone();
        }
        let state_auth = &mut self.nats.state_auth;
        for (name, field) in [
            ("SLAQ_STATE_NATS_USER", &mut state_auth.user),
            ("SLAQ_STATE_NATS_PASSWORD", &mut state_auth.password),
            ("SLAQ_STATE_NATS_TOKEN", &mut state_auth.token),
            ("SLAQ_STATE_NATS_NKEY_SEED_FILE", &mut state_auth.nkey_seed_file),
            ("SLAQ_STATE_NATS_CREDENTIALS_FILE", &mut state_auth.credentials_file),
            ("SLAQ_STATE_NATS_INBOX_PREFIX", &mut state_auth.inbox_prefix),
        ] {
            if let Some(v) = env.get(name) {
                *field = v.clone();
            }
        }
        if !flags.nats.is_empty() {
            self.nats.urls = flags.nats.clone();
        }
        if let Some(p) = &flags.prefix {
            self.nats.prefix = p.clone();
        }
        if let Some(e) = flags.epoch_ms {
            self.scheduler.epoch_ms = e;
        }
        if let Some(p) = flags.policy {
            self.scheduler.policy = p;
        }
        if let Some(r) = flags.refit_ms {
            self.scheduler.refit_interval_ms = r;
        }
        if let Some(f) = flags.floor {
            self.scheduler.floor = f;
        }
        if let Some(h) = flags.horizon_s {
            self.scheduler.horizon_s = h;
        }
        if let Some(h) = &flags.http_listen {
            self.http.listen = h.clone();
        }
        if let Some(id) = &flags.replica_id {
            self.ha.enabled = true;
            self.ha.replica_id = id.clone();
        }
        self.validate(&flags.nats_auth)
    }

    fn validate(self, over_auth: &NatsAuth) -> Result<ServeConfig, ConfigError> {
        let auth = self.nats.auth(over_auth);
        // Credentials of its own mean a secured deployment (see `register_on_report`); the
        // same test the connection makes (a URL that does not parse never connects).
        let secured = crate::bus::carries_credentials(&auth, &self.nats.urls);
        let s = &self.scheduler;
        if self.nats.urls.is_empty() {
            return invalid("nats.urls is empty");
        }
        if self.nats.reply_prefixes.iter().all(|p| p.is_empty() || p.starts_with('$')) {
            return invalid("nats.reply_prefixes needs an inbox prefix (such as \"_INBOX\"), none starting with $");
        }
        let state_auth = self.nats.state_auth(&auth);
        let (first_port, last_port, plan, place) = s.checked()?;
        let subjects = Subjects::new(&self.nats.prefix).map_err(|e| ConfigError::Invalid(e.to_string()))?;
        let job_threads = s.job_threads;
        let http_listen = self.http.address()?;
        let (state_mode, ha, partitions) = self.durability()?;
        let (Some(rate), Some(burst)) =
            (std::num::NonZeroU32::new(s.max_reports_per_s), std::num::NonZeroU32::new(s.report_burst))
        else {
            return invalid("max_reports_per_s and report_burst must be positive");
        };
        let tenants = Tenants::new(tenants_of(&self)?);
        Ok(ServeConfig {
            tenants,
            place,
            max_iter_jump: s.max_iter_jump.max(1),
            report_quota: governor::Quota::per_second(rate).allow_burst(burst),
            idle_job_timeout: (s.idle_job_timeout_ms > 0).then(|| Duration::from_millis(s.idle_job_timeout_ms)),
            stale_job: (s.stale_job_ms > 0).then(|| Duration::from_millis(s.stale_job_ms)),
            stall_timeout: (s.stall_timeout_ms > 0).then(|| Duration::from_millis(s.stall_timeout_ms)),
            min_generation: Duration::from_millis(s.min_generation_ms),
            save_wait_max: Duration::from_millis(s.save_wait_max_ms),
            restart_amortisation: s.restart_amortisation,
            max_min_workers: s.max_min_workers,
            rendezvous: (first_port, last_port - first_port + 1, Duration::from_millis(s.rendezvous_cooldown_ms)),
            state_mode,
            durable: crate::bus::durable::DurableSettings {
                report_history: self.state.report_history,
                report_retention: Duration::from_secs(self.state.report_retention_s),
                max_message_bytes: s.max_payload_bytes,
                replicas: self.state.replicas,
                partitions,
                ..Default::default()
            },
            snapshot_interval: Duration::from_millis(self.state.snapshot_ms),
            ha,
            term: None,
            fence: Fence::unfenced(),
            nats_auth: auth,
            state_auth,
            reply_prefixes: self
                .nats
                .reply_prefixes
                .into_iter()
                .filter(|p| !p.is_empty() && !p.starts_with('$'))
                .collect(),
            nats_urls: self.nats.urls,
            subjects,
            client_name: self.nats.name,
            subscription_capacity: self.nats.subscription_capacity.max(1),
            epoch: Duration::from_millis(s.epoch_ms),
            horizon_s: s.horizon_s,
            completion_weight: s.completion_weight,
            policy: s.policy,
            worker_timeout: Duration::from_millis(s.worker_timeout_ms),
            register_on_report: s.register_on_report.unwrap_or(!secured),
            job_mailbox: s.job_mailbox,
            max_jobs: s.max_jobs,
            max_payload_bytes: s.max_payload_bytes,
            job_threads,
            refit_interval: Duration::from_millis(s.refit_interval_ms),
            plan,
            predictor: self.predictor,
            http_listen,
            http_token: Some(self.http.token.trim().to_string()).filter(|t| !t.is_empty()),
        })
    }

    /// `[state]`, `[ha]` and `[cluster]` checked: the state's mode, the replicas' lease and
    /// name, and the partitions of shared work.
    fn durability(&self) -> Result<(StateMode, Option<HaSettings>, Option<u32>), ConfigError> {
        let state_mode = match self.state.mode.as_str() {
            "auto" => StateMode::Auto,
            "jetstream" => StateMode::JetStream,
            "none" => StateMode::None,
            other => return invalid(&format!("state.mode {other:?}: expected auto, jetstream or none")),
        };
        if self.state.report_history < 1
            || self.state.snapshot_ms == 0
            || self.state.replicas == 0
            || self.state.report_retention_s == 0
        {
            return invalid(
                "state.report_history, state.report_retention_s, state.snapshot_ms and state.replicas must be positive",
            );
        }
        let ha = if self.ha.enabled {
            if state_mode == StateMode::None {
                return invalid("ha.enabled needs the durable state (state.mode auto or jetstream)");
            }
            if self.ha.lease_ms < 200 {
                return invalid("ha.lease_ms must be at least 200");
            }
            let replica = match self.ha.replica_id.trim() {
                "" => format!(
                    "{}-{}",
                    std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()).unwrap_or_else(|| "slaq".into()),
                    std::process::id()
                ),
                id => id.to_string(),
            };
            Some(HaSettings { lease: Duration::from_millis(self.ha.lease_ms), replica })
        } else {
            None
        };
        let partitions = if self.cluster.shared {
            if ha.is_none() {
                return invalid("cluster.shared needs [ha] enabled (the leader's lease)");
            }
            if !(1..=4096).contains(&self.cluster.partitions) {
                return invalid("cluster.partitions must be between 1 and 4096");
            }
            Some(self.cluster.partitions)
        } else {
            None
        };
        Ok((state_mode, ha, partitions))
    }
}

/// A configuration error saying `message`.
fn invalid<T>(message: &str) -> Result<T, ConfigError> {
    Err(ConfigError::Invalid(message.to_string()))
}

impl RawHttp {
    /// Where `/metrics` is served (`None`: nowhere).
    fn address(&self) -> Result<Option<std::net::SocketAddr>, ConfigError> {
        match self.listen.trim() {
            "" => Ok(None),
            addr => Ok(Some(addr.parse().map_err(|_| {
                ConfigError::Invalid(format!("http.listen {addr:?} is not host:port (e.g. 0.0.0.0:9464)"))
            })?)),
        }
    }
}

impl RawScheduler {
    /// `[scheduler]` checked: its periods, rendezvous ports (first and last), horizon, limits,
    /// the planner's settings and the placement's.
    fn checked(
        &self,
    ) -> Result<(u16, u16, crate::schedule::PlanSettings, crate::schedule::PlaceSettings), ConfigError> {
        let s = self;
        if s.epoch_ms == 0 || s.worker_timeout_ms == 0 {
            return invalid("epoch_ms and worker_timeout_ms must be positive");
        }
        let ports = s
            .rendezvous_ports
            .split_once('-')
            .and_then(|(a, b)| Some((a.trim().parse::<u16>().ok()?, b.trim().parse::<u16>().ok()?)));
        let Some((first_port, last_port)) = ports.filter(|(a, b)| *a >= 1024 && a <= b) else {
            return invalid(
                "rendezvous_ports must be FIRST-LAST, 1024 <= FIRST <= LAST <= 65535 (e.g. \"29500-30499\")",
            );
        };
        if !(s.horizon_s.is_finite() && s.horizon_s > 0.0) {
            return invalid("horizon_s must be positive");
        }
        if s.job_mailbox == 0 || s.max_jobs == 0 || s.max_payload_bytes < 64 {
            return invalid("job_mailbox and max_jobs must be positive, max_payload_bytes at least 64");
        }
        let plan = crate::schedule::PlanSettings {
            floor: s.floor,
            floor_window: s.floor_window,
            max_slowdown: s.max_slowdown,
        };
        plan.validate().map_err(|e| ConfigError::Invalid(e.to_string()))?;
        if !(s.completion_weight.is_finite() && s.completion_weight >= 0.0) {
            return invalid("completion_weight must be at least 0");
        }
        if !(s.restart_s.is_finite() && s.restart_s >= 0.0 && s.move_horizon_s.is_finite() && s.move_horizon_s > 0.0) {
            return invalid("restart_s must be at least 0 and move_horizon_s positive");
        }
        let place = crate::schedule::PlaceSettings {
            placer: crate::schedule::Placer::Lp,
            restart_s: s.restart_s,
            horizon_s: s.move_horizon_s,
        };
        Ok((first_port, last_port, plan, place))
    }
}

/// `slaq` or `fair`.
pub fn parse_policy(name: &str) -> Option<PolicyKind> {
    match name {
        "slaq" => Some(PolicyKind::Slaq),
        "fair" => Some(PolicyKind::Fair),
        _ => None,
    }
}

impl ServeConfig {
    /// What the scheduler accepts of a message (`[scheduler]` limits); `tenants`: the tenants
    /// a hello may name (read for hellos only).
    pub(crate) fn inbound_limits<'t>(&self, tenants: Option<&'t TenantSet>) -> crate::protocol::InboundLimits<'t> {
        crate::protocol::InboundLimits {
            max_payload_bytes: self.max_payload_bytes,
            max_min_workers: self.max_min_workers,
            tenants: match tenants {
                Some(t) => crate::protocol::Tenants::Only(&t.names),
                None => crate::protocol::Tenants::Any,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environment_then_flags_override_the_file() {
        let env: BTreeMap<String, String> =
            [("SLAQ_NATS_URL", "nats://a:1, nats://b:2"), ("SLAQ_EPOCH_MS", "250"), ("SLAQ_POLICY", "fair")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        let c = RawConfig::default().resolve(&env, &Overrides::default()).unwrap();
        assert_eq!(c.nats_urls, vec!["nats://a:1", "nats://b:2"]);
        assert_eq!(c.epoch, Duration::from_millis(250));
        assert_eq!(c.policy, PolicyKind::Fair);
        let flags = Overrides { epoch_ms: Some(100), nats: vec!["nats://c:3".into()], ..Overrides::default() };
        let c = RawConfig::default().resolve(&env, &flags).unwrap();
        assert_eq!((c.epoch, c.nats_urls), (Duration::from_millis(100), vec!["nats://c:3".to_string()]));
    }

    #[test]
    fn bad_values_are_named() {
        let env: BTreeMap<String, String> = [("SLAQ_EPOCH_MS".to_string(), "soon".to_string())].into();
        let err = RawConfig::default().resolve(&env, &Overrides::default()).unwrap_err().to_string();
        assert!(err.contains("SLAQ_EPOCH_MS"), "{err}");
        let flags = Overrides { prefix: Some("a b".into()), ..Overrides::default() };
        assert!(RawConfig::default().resolve(&BTreeMap::new(), &flags).is_err());
        for weight in [-0.1, f64::NAN, f64::INFINITY] {
            let mut raw = RawConfig::default();
            raw.scheduler.completion_weight = weight;
            let err = raw.resolve(&BTreeMap::new(), &Overrides::default()).unwrap_err().to_string();
            assert!(err.contains("completion_weight"), "{weight}: {err}");
        }
        let flags = Overrides { horizon_s: Some(0.0), ..Overrides::default() };
        let err = RawConfig::default().resolve(&BTreeMap::new(), &flags).unwrap_err().to_string();
        assert!(err.contains("horizon_s"), "{err}");
    }

    #[test]
    fn flags_override_the_file_s_credentials_field_by_field() {
        let mut raw = RawConfig::default();
        raw.nats.auth.user = "scheduler".into();
        raw.nats.auth.password = "from-file".into();
        raw.nats.tls.ca_file = "/etc/ca.pem".into();
        let flags = Overrides {
            nats_auth: NatsAuth { password: Some("from-flag".into()), ..NatsAuth::default() },
            ..Overrides::default()
        };
        let c = raw.resolve(&BTreeMap::new(), &flags).unwrap();
        assert_eq!(c.nats_auth.user.as_deref(), Some("scheduler"));
        assert_eq!(c.nats_auth.password.as_deref(), Some("from-flag"));
        assert_eq!(c.nats_auth.tls_ca_file, Some("/etc/ca.pem".into()));
        assert_eq!(c.nats_auth.token, None);
    }

    #[test]
    fn reports_register_jobs_unless_the_deployment_is_secured() {
        let open = RawConfig::default().resolve(&BTreeMap::new(), &Overrides::default()).unwrap();
        assert!(open.register_on_report);
        let flags = Overrides {
            nats_auth: NatsAuth { user: Some("scheduler".into()), ..NatsAuth::default() },
            ..Overrides::default()
        };
        assert!(!RawConfig::default().resolve(&BTreeMap::new(), &flags).unwrap().register_on_report);
        let mut raw = RawConfig::default();
        raw.scheduler.register_on_report = Some(true);
        assert!(raw.resolve(&BTreeMap::new(), &flags).unwrap().register_on_report, "an explicit setting wins");
    }

    #[test]
    fn the_http_listener_is_off_unless_set() {
        let none = RawConfig::default().resolve(&BTreeMap::new(), &Overrides::default()).unwrap();
        assert_eq!(none.http_listen, None);
        let env: BTreeMap<String, String> = [("SLAQ_HTTP_LISTEN".to_string(), "127.0.0.1:9464".to_string())].into();
        let on = RawConfig::default().resolve(&env, &Overrides::default()).unwrap();
        assert_eq!(on.http_listen, Some("127.0.0.1:9464".parse().unwrap()));
        let flags = Overrides { http_listen: Some("localhost".into()), ..Overrides::default() };
        assert!(RawConfig::default().resolve(&BTreeMap::new(), &flags).is_err());
        // A token is set by the file or SLAQ_HTTP_TOKEN; blank is none.
        assert_eq!(none.http_token, None);
        let env: BTreeMap<String, String> = [("SLAQ_HTTP_TOKEN".to_string(), " s3cret ".to_string())].into();
        assert_eq!(
            RawConfig::default().resolve(&env, &Overrides::default()).unwrap().http_token.as_deref(),
            Some("s3cret")
        );
    }

    #[test]
    fn the_documented_file_is_the_default() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/slaq.toml");
        assert_eq!(RawConfig::load(&path).unwrap(), RawConfig::default());
    }
}
