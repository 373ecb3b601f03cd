//! What several commands share: where NATS is and how to log in, the vendored curves and how
//! to load curves, and the stop signal.

use std::path::PathBuf;

use anyhow::Context;

/// The curves the simulator, the emulator and the benchmarks replay by default (vendored).
pub(crate) const DEFAULT_CURVES: &str = "data/curves/curves-public.jsonl";

/// Where the scheduler is.
#[derive(clap::Args)]
pub(crate) struct NatsArgs {
    /// NATS server URL(s), comma-separated.
    #[arg(long, env = "SLAQ_NATS_URL", value_delimiter = ',', default_value = "nats://127.0.0.1:4222")]
    pub(crate) nats: Vec<String>,
    /// Subject prefix.
    #[arg(long, env = "SLAQ_PREFIX", default_value = "slaq")]
    pub(crate) prefix: String,
    #[command(flatten)]
    pub(crate) auth: NatsAuthArgs,
}

/// Credentials and TLS for NATS (every flag also reads its environment variable).
#[derive(clap::Args, Clone, Debug, Default)]
pub(crate) struct NatsAuthArgs {
    /// NATS user name (with --nats-password).
    #[arg(long, env = "SLAQ_NATS_USER")]
    pub(crate) nats_user: Option<String>,
    /// NATS password (prefer the environment variable: flags show in `ps`).
    #[arg(long, env = "SLAQ_NATS_PASSWORD", hide_env_values = true)]
    pub(crate) nats_password: Option<String>,
    /// NATS token.
    #[arg(long, env = "SLAQ_NATS_TOKEN", hide_env_values = true)]
    pub(crate) nats_token: Option<String>,
    /// A file holding an NKey seed.
    #[arg(long, env = "SLAQ_NATS_NKEY_SEED_FILE")]
    pub(crate) nats_nkey_seed_file: Option<PathBuf>,
    /// A NATS .creds file (JWT and NKey seed).
    #[arg(long, env = "SLAQ_NATS_CREDENTIALS_FILE")]
    pub(crate) nats_credentials_file: Option<PathBuf>,
    /// Prefix of this client's reply subjects (default _INBOX), for per-user permissions.
    #[arg(long, env = "SLAQ_NATS_INBOX_PREFIX")]
    pub(crate) nats_inbox_prefix: Option<String>,
    /// CA certificate(s) to verify the server with (PEM).
    #[arg(long, env = "SLAQ_NATS_TLS_CA_FILE")]
    pub(crate) nats_tls_ca_file: Option<PathBuf>,
    /// Client certificate (PEM), with --nats-tls-key-file.
    #[arg(long, env = "SLAQ_NATS_TLS_CERT_FILE")]
    pub(crate) nats_tls_cert_file: Option<PathBuf>,
    /// Client key (PEM).
    #[arg(long, env = "SLAQ_NATS_TLS_KEY_FILE")]
    pub(crate) nats_tls_key_file: Option<PathBuf>,
    /// Refuse to talk to the server without TLS.
    #[arg(long, env = "SLAQ_NATS_TLS_REQUIRED")]
    pub(crate) nats_tls_required: bool,
}

impl NatsAuthArgs {
    pub(crate) fn to_auth(&self) -> slaq::bus::NatsAuth {
        slaq::bus::NatsAuth {
            user: self.nats_user.clone(),
            password: self.nats_password.clone(),
            token: self.nats_token.clone(),
            nkey_seed_file: self.nats_nkey_seed_file.clone(),
            credentials_file: self.nats_credentials_file.clone(),
            inbox_prefix: self.nats_inbox_prefix.clone(),
            tls_ca_file: self.nats_tls_ca_file.clone(),
            tls_cert_file: self.nats_tls_cert_file.clone(),
            tls_key_file: self.nats_tls_key_file.clone(),
            tls_required: self.nats_tls_required,
            ignore_discovered_servers: false,
        }
    }
}

pub(crate) fn load_all(paths: &[PathBuf]) -> anyhow::Result<Vec<slaq::trace::TraceCurve>> {
    let mut curves = Vec::new();
    for path in paths {
        curves
            .extend(slaq::trace::load_curves(path).with_context(|| format!("loading curves from {}", path.display()))?);
    }
    Ok(curves)
}

/// Resolves once SIGINT or SIGTERM arrives.
pub(crate) async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = ctrl_c.await;
                return;
            }
        };
        tokio::select! {
            _ = ctrl_c => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

/// How many jobs and workers a benchmark or the emulator runs (the defaults are each
/// command's: `Size<4000, 16000>`).
#[derive(clap::Args, Clone, Copy, Debug)]
pub(crate) struct Size<const JOBS: usize, const WORKERS: u32> {
    /// Jobs.
    #[arg(long, default_value_t = JOBS)]
    pub(crate) jobs: usize,
    /// Workers.
    #[arg(long, default_value_t = WORKERS)]
    pub(crate) workers: u32,
}

/// How many jobs a benchmark runs, for those without workers.
#[derive(clap::Args, Clone, Copy, Debug)]
pub(crate) struct Jobs<const JOBS: usize> {
    /// Jobs.
    #[arg(long, default_value_t = JOBS)]
    pub(crate) jobs: usize,
}
