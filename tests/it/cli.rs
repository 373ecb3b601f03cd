//! The `slaq` binary as a user runs it.

use std::process::Command;

use crate::curve_file;

fn slaq(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_slaq")).args(args).output().expect("slaq runs")
}

#[test]
fn predict_json_has_every_family_and_beats_the_strawman_overall() {
    let curves =
        format!("{},{}", curve_file("curves-public.jsonl").display(), curve_file("slaq-paper-curves.jsonl").display());
    let out = slaq(&["predict", "--curves", &curves, "--horizon", "10", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let families = report["families"].as_object().unwrap();
    assert_eq!(families.len(), 9);
    for (family, v) in families {
        let slaq = v["slaq_mape_pct"].as_f64().unwrap();
        // SLAQ's published weighted-fit errors: none above 5%, MLPC 8.5%.
        let limit = if family == "mlpc" { 8.5 } else { 5.0 };
        assert!(slaq <= limit, "{family}: {slaq}%");
    }
    let overall = &report["overall"];
    assert!(overall["slaq_mape_pct"].as_f64() < overall["strawman_mape_pct"].as_f64());
}

#[test]
fn simulate_json_has_the_documented_shape() {
    let dir = crate::harness::temp_dir("sim");
    // The default curves are the vendored ones, found from the repository root.
    let out = Command::new(env!("CARGO_BIN_EXE_slaq"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "simulate",
            "--policy",
            "slaq,slaq-paper,fair",
            "--speedup",
            "pollux",
            "--jobs",
            "16",
            "--workers",
            "16",
            "--json",
            "--out",
            dir.to_str().unwrap(),
        ])
        .output()
        .expect("slaq runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["workers"], 16);
    for key in [
        "mean_loss_area",
        "avg_active_norm_loss",
        "mean_time_to_90_s",
        "mean_time_to_95_s",
        "mean_jct_s",
        "worst_slowdown_vs_fair",
    ] {
        assert!(v["policies"]["slaq"][key].is_number(), "missing {key}: {v}");
        assert!(v["policies"]["fair"][key].is_number(), "missing {key}: {v}");
    }
    for key in ["loss_area_reduction_pct", "time_to_90_reduction_pct", "time_to_95_reduction_pct"] {
        assert!(v["slaq_vs_fair"][key].is_number(), "missing {key}");
    }
    assert!(v["slaq_vs_slaq-paper"]["loss_area_reduction_pct"].is_number(), "{v}");
    for file in [
        "summary.csv",
        "timeseries-16-slaq.csv",
        "jobs-16-fair.csv",
        "loss-16.svg",
        "share-16.svg",
        "cdf-time-to-90-16.svg",
    ] {
        let path = dir.join(file);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(text.len() > 100, "{file} is nearly empty");
    }
}

#[test]
fn bad_input_gets_a_clear_error() {
    let out = slaq(&["predict", "--curves", "/nonexistent/curves.jsonl"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/curves.jsonl"), "{err}");
    let curves = curve_file("curves-public.jsonl");
    let out = slaq(&["simulate", "--curves", curves.to_str().unwrap(), "--policy", "lottery"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown policy"));
}

/// `slaq submit` refuses bad input before anything is sent (no scheduler runs here: a
/// submission that got as far as NATS would fail differently).
#[test]
fn a_bad_submission_gets_a_clear_refusal() {
    let nats = ["--nats", "nats://127.0.0.1:1"];
    let refused = |args: &[&str], says: &str| {
        let out = slaq(args);
        assert!(!out.status.success(), "{args:?} was accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    };
    refused(&["submit", "--job", "j", nats[0], nats[1]], "PROGRAM");
    refused(&["submit", "--job", "j", "--frobnicate", "--", "python"], "--frobnicate");
    refused(&["submit", "--job", "bad id", nats[0], nats[1], "--", "python"], "--job");
    let long = "x".repeat(20_000);
    refused(&["submit", "--job", "j", nats[0], nats[1], "--", "python", &long], "longer than 16 KiB");
    refused(&["submit", "--job", "j", nats[0], nats[1], "--env", "RANK=3", "--", "python"], "may not set RANK");
    refused(&["submit", "--job", "j", nats[0], nats[1], "--env", "NOEQUALS", "--", "python"], "NAME=VALUE");
    refused(&["submit", "--job", "j", nats[0], nats[1], "--worker-counts", "0", "--", "python"], "worker_counts");
    refused(
        &["submit", "--job", "j", nats[0], nats[1], "--min-workers", "5", "--max-workers", "2", "--", "python"],
        "max_workers",
    );
}

#[test]
fn simulate_pollux_workload_json_has_every_policy_and_the_published_figures() {
    let out = Command::new(env!("CARGO_BIN_EXE_slaq"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "simulate",
            "--pollux-workload",
            "data/pollux/workloads-0.5/workload-3.csv",
            "--slo-factor",
            "1.5",
            "--json",
        ])
        .output()
        .expect("slaq runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for policy in ["fair", "slaq", "slaq-no-placement", "slaq-no-batch"] {
        let p = &v["policies"][policy];
        for key in ["mean_jct_s", "p99_jct_s", "restarts_per_job", "slo_met_pct", "busy_pct"] {
            assert!(p[key].as_f64().is_some_and(f64::is_finite), "{policy}.{key}: {p}");
        }
        assert_eq!(p["unfinished_jobs"], 0, "{policy}");
    }
    // The published means of the three schedulers on that workload (results/, vendored).
    for name in ["pollux", "tiresias", "optimus"] {
        assert!(v["published_mean_jct_s"][name].as_f64().is_some_and(|x| x > 0.0), "{name}");
    }
    assert!(v["workloads"]["workload-3@0.5"]["jct_s"]["slaq"].as_object().is_some_and(|j| !j.is_empty()));
    // Not told the jobs' lengths: the run completes, and says so.
    let out = Command::new(env!("CARGO_BIN_EXE_slaq"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["simulate", "--pollux-workload", "data/pollux/workloads-0.5/workload-3.csv"])
        .args(["--policy", "slaq", "--job-length", "unknown", "--json"])
        .output()
        .expect("slaq runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["job_length"], "unknown");
    assert_eq!(v["policies"]["slaq"]["unfinished_jobs"], 0);
    let bad = slaq(&["simulate", "--pollux-workload", "no/such/file.csv"]);
    assert!(!bad.status.success());
}

#[test]
fn bench_placement_json_has_the_documented_shape() {
    let out = slaq(&["bench", "placement", "--cases", "20", "--runs", "1", "--sizes", "64x16,256x256", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["cases"], 20);
    for key in ["lp_rounding_gap_pct", "greedy_gap_pct", "first_fit_gap_pct", "random_gap_pct"] {
        assert!(v[key]["mean"].as_f64().is_some_and(|x| x >= 0.0) && v[key]["max"].as_f64().is_some(), "{key}");
    }
    assert_eq!(v["decision"].as_array().map(Vec::len), Some(2));
    assert_eq!(v["decision"][1]["jobs"], 256);
    assert!(v["decision"][1]["lp_rounding_ms"].as_f64().is_some_and(|ms| ms > 0.0));
    assert!(!slaq(&["bench", "placement", "--sizes", "64"]).status.success(), "a size without machines is refused");
}

#[test]
fn simulate_gavel_json_has_the_documented_shape_and_bad_settings_are_clear_errors() {
    let table = concat!(env!("CARGO_MANIFEST_DIR"), "/data/gavel/simulation_throughputs.json");
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_slaq"))
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args(["simulate", "--gavel-throughputs", table, "--cluster", "v100=4,p100=4,k80=4", "--jobs", "40"])
            .args(extra)
            .output()
            .expect("slaq runs")
    };
    let out = run(&["--jobs-per-hour", "1.0", "--seed", "3", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let policies = v["policies"].as_object().expect("one object for one rate and seed");
    assert_eq!(policies.keys().collect::<Vec<_>>(), ["fair", "gavel", "slaq", "slaq-blind"]);
    for (name, p) in policies {
        for key in [
            "mean_jct_s",
            "p95_jct_s",
            "makespan_s",
            "mean_loss_area",
            "worst_slowdown_vs_fair",
            "p95_slowdown_vs_fair",
        ] {
            assert!(p[key].is_number(), "{name}: {key} in {p}");
        }
        // The run stops when the arrivals end: some long jobs of a short trace are unfinished.
        assert!(p["unfinished"].as_u64().is_some_and(|u| u < 40) && p["measured_jobs"] == 40, "{name}: {p}");
        assert_eq!(p["busy_fraction_by_type"].as_object().unwrap().len(), 3);
    }
    // The trace's capacity bound: 12 GPUs keep up with about half a job an hour of jobs that
    // average 17 V100-hours.
    assert!(v["max_jobs_per_hour"].as_f64().is_some_and(|m| m > 0.05 && m < 5.0), "{v}");
    // A sweep: runs keyed by rate and seed, and the means.
    let out = run(&["--jobs-per-hour", "0.5,1.0", "--seed", "1,2", "--policy", "fair,slaq", "--multi-gpu", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["runs"].as_array().unwrap().len(), 4);
    assert_eq!(v["runs"][3]["jobs_per_hour"], 1.0);
    assert_eq!(v["runs"][3]["seed"], 2);
    assert_eq!(v["means"].as_array().unwrap().len(), 4);
    // Clear errors.
    for (args, says) in [
        (vec!["--cluster", "a100=4"], "a100"),
        (vec!["--cluster", "v100=four"], "TYPE=COUNT"),
        (vec!["--policy", "tiresias"], "unknown policy"),
        (vec!["--measure-jobs", "30..90"], "past the trace"),
    ] {
        let mut all = vec!["--jobs-per-hour", "1.0"];
        all.extend(args.iter().copied());
        let out = Command::new(env!("CARGO_BIN_EXE_slaq"))
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args(["simulate", "--gavel-throughputs", table, "--jobs", "40"])
            .args(&all)
            .output()
            .expect("slaq runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says), "{args:?}: {err}");
    }
    let bad = std::env::temp_dir().join(format!("slaq-gavel-bad-{}.json", std::process::id()));
    std::fs::write(&bad, "{\"v100\": {\"ResNet\": {\"null\": 1}}}").unwrap();
    let out = slaq(&["simulate", "--gavel-throughputs", bad.to_str().unwrap(), "--cluster", "v100=1"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("is not"), "{out:?}");
    // A job type that runs on no type of the cluster.
    std::fs::write(&bad, "{\"v100\": {\"('A', 1)\": {\"null\": 1}, \"('B', 1)\": {\"null\": 0}}}").unwrap();
    let out = slaq(&["simulate", "--gavel-throughputs", bad.to_str().unwrap(), "--cluster", "v100=1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("\"B\" has no usable throughput"), "{err}");
    std::fs::remove_file(bad).ok();
}

#[test]
fn simulate_tenants_json_has_each_tenant_s_figures_and_a_bad_file_is_a_clear_error() {
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_slaq"))
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args(["simulate"])
            .args(args)
            .output()
            .expect("slaq runs")
    };
    let out = run(&["--tenants", "config/teams/reclaim.toml", "--seed", "1,2", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["runs"].as_array().unwrap().len(), 2);
    assert_eq!(v["cap_violations"], 0);
    let tenants = v["tenants"].as_array().unwrap();
    assert_eq!(tenants.iter().map(|t| t["name"].as_str().unwrap()).collect::<Vec<_>>(), ["a", "b"]);
    for t in tenants {
        for key in [
            "mean_loss_area",
            "mean_jct_s",
            "mean_share_seconds_below_guarantee",
            "max_reclaim_s",
            "reclaim_bound_s",
            "jct_ratio_max",
            "loss_area_ratio_max",
            "restart_pct",
        ] {
            assert!(t[key].is_number(), "{key} in {t}");
        }
        assert!(t["max_reclaim_s"].as_f64() <= t["reclaim_bound_s"].as_f64(), "{t}");
    }
    let bad = std::env::temp_dir().join(format!("slaq-teams-bad-{}.toml", std::process::id()));
    std::fs::write(&bad, "[tenants.a]\nguaranteed = 1.5\n").unwrap();
    let out = run(&["--tenants", bad.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("a fractional guarantee must be in [0, 1]"), "{err}");
    std::fs::remove_file(bad).ok();
}

/// Every benchmark's code path, at a small size, against a real nats-server with JetStream
/// (durable state on, as `serve`'s default `auto` finds it): each prints its figures as one
/// JSON object, and no report is lost. Shapes and counts only: no timing is asserted.
#[test]
fn every_benchmark_runs_at_a_small_size_and_prints_its_figures() {
    let nats = crate::harness::NatsServer::start_jetstream();
    let json = |args: &[&str]| -> serde_json::Value {
        let out = slaq(&[args, &["--json"]].concat());
        assert!(out.status.success(), "slaq {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("slaq {args:?}: {e}"))
    };
    let url = nats.url.as_str();
    let epoch = json(&[
        "bench",
        "epoch",
        "--nats",
        url,
        "--jobs",
        "20",
        "--workers",
        "80",
        "--epochs",
        "3",
        "--page-poll-ms",
        "50",
    ]);
    assert_eq!((epoch["jobs"].as_u64(), epoch["workers"].as_u64()), (Some(20), Some(80)), "{epoch}");
    // The pair with the page open: every fetch of the overview and of a job's curve answered.
    let page = &epoch["with_page"];
    assert!(page["epochs"].as_u64().is_some_and(|n| n >= 3), "{epoch}");
    assert!(page["overview_fetches"].as_u64().is_some_and(|n| n >= 1), "{epoch}");
    assert_eq!(page["overview_fetches_ok"], page["overview_fetches"], "{epoch}");
    assert_eq!(page["job_fetches_ok"], page["overview_fetches"], "{epoch}");
    assert!(page["overview_bytes_max"].as_u64().is_some_and(|b| b > 1000), "{epoch}");
    assert!(epoch["epochs"].as_u64().is_some_and(|n| n >= 3), "{epoch}");
    assert!(epoch["epoch_p50_ms"].as_f64().is_some_and(|ms| ms > 0.0), "{epoch}");
    assert_eq!(epoch["reports_landed"], epoch["reports_sent"], "{epoch}");
    // Twice on the same JetStream server: a run replays nothing of the one before.
    for _ in 0..2 {
        let ingest = json(&["bench", "ingest", "--nats", url, "--reports", "2000", "--jobs", "10"]);
        // A report lost in flight is the connection's (core NATS is at most once): said first.
        let events = (ingest["scheduler_nats_disconnects"].as_u64(), ingest["scheduler_nats_dropped"].as_u64());
        assert_eq!(events, (Some(0), Some(0)), "the scheduler's connection lost messages: {ingest}");
        let received = ["raw_received", "raw_jetstream_received", "slaq_observed"].map(|k| ingest[k].as_u64());
        assert_eq!(received, [Some(2000); 3], "{ingest}");
        assert_eq!(ingest["slaq_rejected"], 0);
        assert!(ingest["slaq_vs_raw_jetstream"].as_f64().is_some_and(|r| r > 0.0), "{ingest}");
    }
    let soak = json(&[
        "bench",
        "soak",
        "--nats",
        url,
        "--jobs",
        "10",
        "--workers",
        "40",
        "--duration-s",
        "8",
        "--warm-up-s",
        "2",
        "--epoch-ms",
        "200",
        "--churn-per-s",
        "3",
    ]);
    assert!(soak["accepted"]["loss"].as_u64().is_some_and(|n| n > 0), "{soak}");
    assert_eq!(soak["accepted"]["worker_hello"], 40, "{soak}");
    // Churn: jobs ended and were replaced, and the scheduler never held more than the load's.
    assert!(soak["jobs_ended"].as_u64().is_some_and(|n| n >= 10), "{soak}");
    assert!(soak["churn_per_s_achieved"].as_f64().is_some_and(|r| r > 1.0), "{soak}");
    assert!(soak["accepted"]["job_bye"].as_u64().is_some_and(|n| n > 0), "{soak}");
    assert!(soak["jobs_in_scheduler_max"].as_u64().is_some_and(|n| (1..=10).contains(&n)), "{soak}");
    let idle = json(&["bench", "idle", "--nats", url, "--jobs", "20", "--settle-s", "1", "--measure-s", "1"]);
    assert_eq!(idle["jobs"], 20, "{idle}");
    let merge = json(&["bench", "merge", "--jobs", "500", "--runs", "1"]);
    assert_eq!(merge["jobs"], 500, "{merge}");
    let alloc = json(&["bench", "alloc", "--jobs", "50", "--workers", "200", "--runs", "1", "--types", "2"]);
    assert_eq!((alloc["jobs"].as_u64(), alloc["identical_to_heap"].as_bool()), (Some(50), Some(true)), "{alloc}");
    assert!(alloc["typed"].is_object(), "{alloc}");
    let dir = crate::harness::temp_dir("bench-scale");
    let plot = dir.join("scale.svg");
    let curves = crate::curve_file("curves-public.jsonl");
    let scale = json(&[
        "bench",
        "scale",
        "--workers",
        "800,400,1200",
        "--epochs",
        "2",
        "--churn",
        "5",
        "--curves",
        &curves.to_string_lossy(),
        "--plot",
        &plot.to_string_lossy(),
    ]);
    let sizes: Vec<_> = scale["sizes"].as_array().map_or(Vec::new(), |s| s.iter().map(|r| r["jobs"].clone()).collect());
    assert_eq!(sizes, [100, 200, 300], "smallest first, a job per 4 workers: {scale}");
    // Measured on the cluster as sized: the workers kept (the bench fails if one expires), and busy.
    let busy = scale["sizes"].as_array().into_iter().flatten().all(|r| r["workers_assigned_p50"].as_f64() > Some(0.0));
    assert!(busy, "{scale}");
    // The chart holds a line through the three sizes (its legend's marks have two points).
    let svg = std::fs::read_to_string(&plot).unwrap_or_default();
    let through_all = svg.lines().filter_map(|l| l.split("points=\"").nth(1)).filter(|p| p.split(' ').count() == 4);
    assert!(through_all.count() >= 3, "three lines of three points: {svg:.300}");
    // The workers alone: the same jobs at every size.
    let curves = curves.to_string_lossy();
    let args = [
        "bench",
        "scale",
        "--workers",
        "400,800",
        "--jobs",
        "50",
        "--epochs",
        "2",
        "--churn",
        "5",
        "--curves",
        &curves,
    ];
    let fixed = json(&args);
    let sizes: Vec<_> = fixed["sizes"].as_array().map_or(Vec::new(), |s| s.iter().map(|r| r["jobs"].clone()).collect());
    assert_eq!((sizes, fixed["jobs_fixed"].clone()), (vec![50.into(), 50.into()], 50.into()), "{fixed}");
}
