//! Observability over real HTTP: `/metrics` of a running `slaq serve`, parsed as Prometheus
//! text, `/healthz` and `/readyz`, and the Grafana dashboard's queries against the scrape.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use slaq::bus;
use slaq::protocol::{Encoding, JobSpec, Subjects};

use crate::harness::{NatsServer, Scheduler, client, eventually, fast_settings, free_port, loss_report};

/// GET `url`: the status code and the body (a 503 is an answer, not an error).
fn get(url: &str) -> Result<(u16, String), ureq::Error> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .into();
    let mut response = agent.get(url).call()?;
    let status = response.status().as_u16();
    Ok((status, response.body_mut().read_to_string()?))
}

pub(crate) async fn get_until(url: &str, what: &str, check: impl Fn(u16, &str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let url = url.to_string();
        let answer = tokio::task::spawn_blocking(move || get(&url)).await.expect("join");
        match &answer {
            Ok((status, body)) if check(*status, body) => return body.clone(),
            _ => assert!(Instant::now() < deadline, "{what}: never happened; last answer {answer:?}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn scrape(text: &str) -> prometheus_parse::Scrape {
    prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("Prometheus text format")
}

fn value(scrape: &prometheus_parse::Scrape, name: &str, label: Option<(&str, &str)>) -> Option<f64> {
    scrape.samples.iter().find(|s| s.metric == name && label.is_none_or(|(k, v)| s.labels.get(k) == Some(v))).and_then(
        |s| match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => Some(v),
            _ => None,
        },
    )
}

/// The metric names a Grafana dashboard's queries use.
fn dashboard_metrics(dashboard: &serde_json::Value) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut stack = vec![dashboard];
    while let Some(v) = stack.pop() {
        match v {
            serde_json::Value::Object(m) => {
                if let Some(serde_json::Value::String(expr)) = m.get("expr") {
                    let mut rest = expr.as_str();
                    while let Some(i) = rest.find("slaq_") {
                        let name: String =
                            rest[i..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                        rest = &rest[i + name.len()..];
                        names.insert(name);
                    }
                }
                stack.extend(m.values());
            }
            serde_json::Value::Array(a) => stack.extend(a),
            _ => {}
        }
    }
    names
}

#[tokio::test]
async fn metrics_health_and_readiness_over_http() {
    let mut nats = NatsServer::start();
    let port = free_port();
    // One tenant, `default`, so that the per-tenant families are exported too.
    let settings = fast_settings(&format!("\n[http]\nlisten = \"127.0.0.1:{port}\"\n[tenants.default]\n"));
    let _scheduler = Scheduler::start(&nats.url, &settings);
    let base = format!("http://127.0.0.1:{port}");
    get_until(&format!("{base}/healthz"), "healthz answers", |s, _| s == 200).await;
    get_until(&format!("{base}/readyz"), "readyz says ready", |s, _| s == 200).await;

    // Traffic: a job with 30 reports, a worker, and one undecodable message.
    let c = client(&nats.url).await;
    let s = Subjects::new("slaq").unwrap();
    let spec = JobSpec::new("j1");
    let _: slaq::protocol::Ack =
        bus::request(&c, s.job_hello("j1"), Encoding::MsgPack, &spec, Duration::from_secs(5)).await.unwrap();
    let w = slaq::protocol::WorkerSpec { worker: "w1".into(), machine: None, slots: 1, kind: None, advertise: None };
    let _: slaq::protocol::Ack =
        bus::request(&c, s.worker_hello("w1"), Encoding::MsgPack, &w, Duration::from_secs(5)).await.unwrap();
    for iter in 1..=30u64 {
        bus::publish(&c, s.job_loss("j1"), Encoding::MsgPack, &loss_report("j1", iter)).await.unwrap();
    }
    c.publish(s.job_loss("j1"), "not msgpack".into()).await.unwrap();
    c.flush().await.unwrap();
    eventually(&c, &s, Duration::from_secs(20), "the reports are counted", |st| st.accepted.get("loss") == Some(&30))
        .await;

    let text = get_until(&format!("{base}/metrics"), "two epochs with the job", |status, body| {
        status == 200 && {
            let m = scrape(body);
            value(&m, "slaq_jobs", None) == Some(1.0) && value(&m, "slaq_workers_assigned", None) == Some(1.0)
        }
    })
    .await;
    let m = scrape(&text);
    // Names follow Prometheus conventions.
    for sample in &m.samples {
        assert!(sample.metric.starts_with("slaq_"), "{}", sample.metric);
        if let prometheus_parse::Value::Counter(_) = sample.value {
            assert!(sample.metric.ends_with("_total"), "counter {} must end in _total", sample.metric);
        }
        if let prometheus_parse::Value::Histogram(_) = sample.value {
            assert!(sample.metric.ends_with("_seconds"), "histogram {} must be in seconds", sample.metric);
        }
    }
    for (name, doc) in &m.docs {
        assert!(!doc.is_empty(), "{name} has no help text");
    }
    assert_eq!(value(&m, "slaq_messages_accepted_total", Some(("kind", "loss"))), Some(30.0));
    assert_eq!(value(&m, "slaq_messages_accepted_total", Some(("kind", "job_hello"))), Some(1.0));
    assert_eq!(value(&m, "slaq_messages_rejected_total", Some(("cause", "undecodable"))), Some(1.0));
    assert!(value(&m, "slaq_epochs_total", None).is_some_and(|v| v >= 1.0));
    assert!(value(&m, "slaq_workers_moved_total", None).is_some_and(|v| v >= 1.0));
    assert_eq!(value(&m, "slaq_nats_connected", None), Some(1.0));
    let histogram = m
        .samples
        .iter()
        .find(|s| s.metric == "slaq_epoch_duration_seconds" && s.labels.get("phase") == Some("total"))
        .expect("the epoch histogram");
    match &histogram.value {
        prometheus_parse::Value::Histogram(buckets) => {
            assert!(buckets.last().is_some_and(|b| b.count >= 1.0), "{buckets:?}")
        }
        other => panic!("slaq_epoch_duration_seconds is not a histogram: {other:?}"),
    }
    // Predictions are checked against the reports once the job has points on both sides of an
    // epoch: the gauges exist from the start.
    assert!(value(&m, "slaq_epoch_predicted_gain", None).is_some());

    // Every metric the dashboard queries is exported.
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/grafana/slaq.json");
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("the dashboard")).expect("dashboard JSON");
    let exported: BTreeSet<&str> = m.samples.iter().map(|s| s.metric.as_str()).collect();
    let queried = dashboard_metrics(&dashboard);
    assert!(queried.len() >= 8, "the dashboard queries too little: {queried:?}");
    for name in &queried {
        let base = ["_bucket", "_sum", "_count"].iter().fold(name.as_str(), |n, s| n.strip_suffix(s).unwrap_or(n));
        assert!(exported.contains(base), "the dashboard queries {name}, which /metrics does not export");
    }

    // Without NATS the scheduler is alive but not ready.
    nats.stop();
    get_until(&format!("{base}/readyz"), "readyz says not ready", |s, b| s == 503 && b.contains("NATS")).await;
    get_until(&format!("{base}/healthz"), "healthz still answers", |s, _| s == 200).await;

    // NATS back on the same port: ready again, and the reconnection is counted.
    nats.restart();
    get_until(&format!("{base}/readyz"), "readyz says ready again", |s, _| s == 200).await;
    let m = scrape(&get_until(&format!("{base}/metrics"), "a scrape", |s, _| s == 200).await);
    assert!(value(&m, "slaq_nats_disconnects_total", None).is_some_and(|v| v >= 1.0));
    assert!(value(&m, "slaq_nats_reconnects_total", None).is_some_and(|v| v >= 1.0));
    assert_eq!(value(&m, "slaq_nats_connected", None), Some(1.0));
}
