//! The page (`GET /`, issue #45): the cluster, every job, and a chosen job's loss curve with the
//! predictor's fit and what it predicts over the bids' horizon (the next minute by default),
//! updated every epoch. Read-only. What it
//! shows is read from the allocator's status snapshot (`GetStatus`, the one `slaq status`
//! gets), its epoch summaries, and the chosen job's own actor (`GetCurve`): no second source of
//! truth. The assets are compiled into the binary; the charts are uPlot 1.6.32 (MIT, vendored
//! in `assets/vendor` with its licence).
//!
//! Its JSON (`/api/v1/...`) is documented in docs/reference.md. The overview is built at most
//! once per epoch however many pages poll it, encoded off the service's thread, and written by
//! the HTTP task: a slow client holds only its own connection.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use actix::Addr;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::actors::allocator::AllocatorActor;
use crate::metrics::Metrics;
use crate::protocol::{self as subjects, JobStatus, StatusSnapshot};

mod auth;
mod source;

pub use auth::{Token, require_token};
pub use source::Bus;
use source::{EpochPoint, Unavailable};

/// How long an overview is served again while no epoch runs (the lease lost, say).
const STALE_AFTER: Duration = Duration::from_secs(1);

/// What the page's handlers read.
#[derive(Clone)]
pub struct PageState {
    /// This process's allocator, once it runs (the listener is bound before it). A standby
    /// replica has none: it asks the leader over NATS (`source`).
    pub allocator: Arc<OnceLock<Addr<AllocatorActor>>>,
    pub metrics: Arc<Metrics>,
    pub epoch: Duration,
    /// Seconds past a job's newest point its curve predicts: the bids' horizon (`[scheduler]
    /// horizon_s`, a minute unless time is accelerated).
    pub ahead_s: f64,
    /// Where curves of jobs whose actor runs elsewhere are asked for, and a standby's status.
    pub bus: Bus,
    cache: Arc<Mutex<Option<Cached>>>,
}

struct Cached {
    epochs: u64,
    at: Instant,
    body: Bytes,
}

impl IntoResponse for Unavailable {
    fn into_response(self) -> Response {
        let why = match self {
            Unavailable::Starting => "the scheduler is starting",
            Unavailable::Stopping => "the scheduler is stopping",
            Unavailable::NoLeader => "standing by, and the leader did not answer",
        };
        error(StatusCode::SERVICE_UNAVAILABLE, why)
    }
}

impl PageState {
    async fn cluster(&self) -> Result<(StatusSnapshot, Vec<EpochPoint>), Response> {
        let allocator = self.allocator.get();
        source::cluster(allocator, &self.metrics, &self.bus).await.map_err(IntoResponse::into_response)
    }

    async fn job_status(&self, id: &str) -> Result<Option<JobStatus>, Response> {
        source::job_status(self.allocator.get(), &self.bus, id).await.map_err(IntoResponse::into_response)
    }

    async fn curve(&self, id: &str) -> Option<serde_json::Value> {
        source::curve(self.allocator.get(), &self.bus, id, self.ahead_s).await
    }

    pub fn new(metrics: Arc<Metrics>, epoch: Duration, ahead_s: f64, bus: Bus) -> Self {
        PageState { allocator: Arc::default(), metrics, epoch, ahead_s, bus, cache: Arc::default() }
    }
}

/// The page, its assets and its JSON.
pub fn routes() -> Router<PageState> {
    Router::new()
        .route("/", get(index))
        .route("/assets/{name}", get(|Path(name): Path<String>| async move { asset(&name) }))
        .route("/api/v1/overview", get(overview))
        .route("/api/v1/jobs/{id}", get(job))
}

/// The embedded files: name, content type, bytes.
const ASSETS: [(&str, &str, &[u8]); 5] = [
    ("page.js", "text/javascript; charset=utf-8", include_bytes!("assets/page.js")),
    ("page.css", "text/css; charset=utf-8", include_bytes!("assets/page.css")),
    ("uPlot.iife.min.js", "text/javascript; charset=utf-8", include_bytes!("assets/vendor/uPlot.iife.min.js")),
    ("uPlot.min.css", "text/css; charset=utf-8", include_bytes!("assets/vendor/uPlot.min.css")),
    ("uPlot.LICENSE", "text/plain; charset=utf-8", include_bytes!("assets/vendor/uPlot.LICENSE")),
];

/// The page, its assets' addresses carrying the token it was opened with (`?token=`): a
/// browser sends no header of its own for a script or a stylesheet.
async fn index(uri: axum::http::Uri) -> Response {
    let token = url::form_urlencoded::parse(uri.query().unwrap_or("").as_bytes()).find(|(k, _)| k == "token");
    let query = match token {
        Some((_, t)) => format!("?token={}", url::form_urlencoded::byte_serialize(t.as_bytes()).collect::<String>()),
        None => String::new(),
    };
    let html = String::from_utf8_lossy(include_bytes!("assets/index.html")).replace("{q}", &query);
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8"), (header::CACHE_CONTROL, "no-store")], html).into_response()
}

fn asset(name: &str) -> Response {
    match ASSETS.iter().find(|(n, _, _)| *n == name) {
        Some((_, kind, bytes)) => {
            ([(header::CONTENT_TYPE, *kind), (header::CACHE_CONTROL, "no-cache")], *bytes).into_response()
        }
        None => error(StatusCode::NOT_FOUND, "no such asset"),
    }
}

/// A JSON error: `{"error": why}`.
fn error(status: StatusCode, why: &str) -> Response {
    json(status, serde_json::to_vec(&serde_json::json!({ "error": why })).unwrap_or_default().into())
}

fn json(status: StatusCode, body: Bytes) -> Response {
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// A job on the page: its status, and its tenant when the scheduler has teams.
#[derive(serde::Serialize)]
struct PageJob {
    #[serde(flatten)]
    status: JobStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    tenant: Option<String>,
}

/// `GET /api/v1/overview`: the status snapshot's cluster and jobs (no worker listed: the counts
/// by type are there), each job's tenant when there are teams, the epoch period, and the
/// timeline.
#[derive(serde::Serialize)]
struct Overview {
    epoch: u64,
    policy: String,
    state: String,
    term: Option<u64>,
    leader: Option<String>,
    num_jobs: usize,
    num_workers: usize,
    /// The jobs listed are fewer than `num_jobs` (a standby's answer from the leader is cut to
    /// one NATS message).
    truncated: bool,
    accelerators: std::collections::BTreeMap<String, crate::protocol::AcceleratorUse>,
    tenants: std::collections::BTreeMap<String, crate::protocol::TenantUse>,
    owners: std::collections::BTreeMap<String, Vec<u32>>,
    ended: Vec<crate::protocol::JobOutcome>,
    accepted: std::collections::BTreeMap<String, u64>,
    rejected: std::collections::BTreeMap<String, u64>,
    period_ms: u64,
    /// When it was built (ms since the Unix epoch).
    built_ms: u64,
    jobs: Vec<PageJob>,
    timeline: Vec<EpochPoint>,
}

impl Overview {
    fn new(s: StatusSnapshot, timeline: Vec<EpochPoint>, period_ms: u64) -> Self {
        let teams = !s.tenants.is_empty();
        let jobs = s
            .jobs
            .into_iter()
            .map(|status| {
                let tenant = subjects::tenant_of(&status.job)
                    .filter(|t| teams && s.tenants.contains_key(*t))
                    .map(str::to_string);
                PageJob { status, tenant }
            })
            .collect();
        Overview {
            epoch: s.epoch,
            policy: s.policy,
            state: s.state,
            term: s.term,
            leader: s.leader,
            num_jobs: s.num_jobs,
            num_workers: s.num_workers,
            truncated: s.truncated,
            accelerators: s.accelerators,
            tenants: s.tenants,
            owners: s.owners,
            ended: s.ended,
            accepted: s.accepted,
            rejected: s.rejected,
            period_ms,
            built_ms: now_ms(),
            jobs,
            timeline,
        }
    }
}

async fn overview(State(state): State<PageState>) -> Response {
    let epochs = state.metrics.epochs.get();
    if let Ok(cache) = state.cache.lock()
        && let Some(c) = cache.as_ref().filter(|c| c.epochs == epochs && c.at.elapsed() < STALE_AFTER)
    {
        return json(StatusCode::OK, c.body.clone());
    }
    let (snapshot, recent) = match state.cluster().await {
        Ok(both) => both,
        Err(response) => return response,
    };
    let period_ms = state.epoch.as_millis() as u64;
    let encoded =
        tokio::task::spawn_blocking(move || serde_json::to_vec(&Overview::new(snapshot, recent, period_ms))).await;
    match encoded {
        Ok(Ok(body)) => {
            let body = Bytes::from(body);
            if let Ok(mut cache) = state.cache.lock() {
                *cache = Some(Cached { epochs, at: Instant::now(), body: body.clone() });
            }
            json(StatusCode::OK, body)
        }
        _ => error(StatusCode::INTERNAL_SERVER_ERROR, "cannot encode the overview"),
    }
}

/// `GET /api/v1/jobs/{id}`: the job's status, and its curve from its actor (here, or where it
/// runs: `ctl.curve`).
#[derive(serde::Serialize)]
struct JobView {
    status: JobStatus,
    curve: Option<serde_json::Value>,
    /// Why there is no curve, if there is none.
    #[serde(skip_serializing_if = "Option::is_none")]
    no_curve: Option<&'static str>,
}

async fn job(State(state): State<PageState>, Path(id): Path<String>) -> Response {
    if id.len() > subjects::MAX_ID_LEN {
        return error(StatusCode::BAD_REQUEST, "a job id is at most 64 bytes");
    }
    if !subjects::valid_job_id(&id) {
        return error(StatusCode::BAD_REQUEST, "not a job id");
    }
    let status = match state.job_status(&id).await {
        Ok(Some(status)) => status,
        Ok(None) => return error(StatusCode::NOT_FOUND, "no such job"),
        Err(response) => return response,
    };
    let curve = state.curve(&id).await;
    let no_curve = curve.is_none().then_some("its actor did not answer (it may have just moved to another replica)");
    match serde_json::to_vec(&JobView { status, curve, no_curve }) {
        Ok(body) => json(StatusCode::OK, body.into()),
        Err(_) => error(StatusCode::INTERNAL_SERVER_ERROR, "cannot encode the job"),
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}
