//! `slaq serve`: the scheduler (per-job actors and the allocator over NATS).

use std::collections::BTreeMap;
use std::path::PathBuf;

use slaq::service::{self, Overrides, RawConfig};

use crate::common::{NatsAuthArgs, shutdown_signal};

#[derive(clap::Args)]
pub(crate) struct ServeArgs {
    /// TOML settings (see config/slaq.toml); environment and flags override it.
    #[arg(long)]
    pub(crate) config: Option<PathBuf>,
    /// NATS server URL(s), comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub(crate) nats: Vec<String>,
    /// Milliseconds between reallocations.
    #[arg(long)]
    pub(crate) epoch_ms: Option<u64>,
    /// Subject prefix.
    #[arg(long)]
    pub(crate) prefix: Option<String>,
    /// Allocation policy: slaq or fair.
    #[arg(long, value_parser = parse_policy_arg)]
    pub(crate) policy: Option<slaq::policy::PolicyKind>,
    /// Fairness floor f in [0, 1]: every job gets at least f times its fair share of
    /// worker-seconds over a sliding window of epochs (0: pure quality, 1: fair).
    #[arg(long)]
    pub(crate) floor: Option<f64>,
    /// Milliseconds between refits of a job's curves (scale it with --epoch-ms when time is
    /// accelerated, as for `slaq emulate`).
    #[arg(long)]
    pub(crate) refit_ms: Option<u64>,
    /// Seconds ahead over which the jobs' gains and completion terms are predicted
    /// (`[scheduler] horizon_s`, 60; divide it by `slaq emulate --speed` when time is
    /// accelerated, as --epoch-ms is).
    #[arg(long)]
    pub(crate) horizon_s: Option<f64>,
    /// host:port for the HTTP listener serving /metrics (Prometheus), /healthz and /readyz.
    #[arg(long)]
    pub(crate) http_listen: Option<String>,
    /// Run as one of several replicas under this name: the replica holding the leader's lease
    /// schedules, the others stand by (needs JetStream; `[ha]` in the settings).
    #[arg(long)]
    pub(crate) replica_id: Option<String>,
    #[command(flatten)]
    pub(crate) auth: NatsAuthArgs,
}

fn parse_policy_arg(s: &str) -> Result<slaq::policy::PolicyKind, String> {
    slaq::service::config::parse_policy(s).ok_or_else(|| format!("unknown policy {s:?}; expected slaq or fair"))
}

/// On each SIGHUP, reads `[tenants]` from the configuration file again and serves it from the
/// next message and epoch on; a file that does not check out is refused, keeping the tenants
/// served. Nothing else is reloaded.
async fn reload_tenants_on_hangup(path: Option<std::path::PathBuf>, tenants: slaq::actors::tenants::Tenants) {
    let Ok(mut hangups) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) else { return };
    while hangups.recv().await.is_some() {
        let Some(path) = &path else {
            tracing::warn!("SIGHUP: no --config file to reload [tenants] from");
            continue;
        };
        match RawConfig::load(path).and_then(|raw| service::config::tenants_of(&raw)) {
            Ok(set) => {
                let names = set.as_ref().map(|s| s.names.join(", ")).unwrap_or_default();
                tenants.set(set);
                tracing::info!(tenants = %names, "SIGHUP: [tenants] reloaded");
            }
            Err(e) => tracing::warn!(error = %e, "SIGHUP: [tenants] not reloaded; the tenants served stay"),
        }
    }
}

pub(crate) fn run(args: ServeArgs) -> anyhow::Result<()> {
    let raw = match &args.config {
        Some(path) => RawConfig::load(path)?,
        None => RawConfig::default(),
    };
    let env: BTreeMap<String, String> = std::env::vars().filter(|(k, _)| k.starts_with("SLAQ_")).collect();
    let overrides = Overrides {
        nats: args.nats,
        prefix: args.prefix,
        epoch_ms: args.epoch_ms,
        policy: args.policy,
        refit_ms: args.refit_ms,
        floor: args.floor,
        horizon_s: args.horizon_s,
        http_listen: args.http_listen,
        nats_auth: args.auth.to_auth(),
        replica_id: args.replica_id,
    };
    let config = raw.resolve(&env, &overrides)?;
    let (tenants, path) = (config.tenants.clone(), args.config.clone());
    actix::System::new().block_on(async move {
        actix::spawn(reload_tenants_on_hangup(path, tenants));
        let clients = service::Connections::connect(&config).await?;
        service::run_replica(clients, config, shutdown_signal()).await?;
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(())
}
