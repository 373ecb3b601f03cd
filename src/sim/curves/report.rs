//! Reports of a comparison: a text table, the JSON object of `slaq simulate --json`, CSV time
//! series and SVG plots.

use std::fmt::Write as _;
use std::path::Path;

use plotters::prelude::*;
use serde_json::{Value, json};

use super::ClusterRuns;
use super::metrics::RunMetrics;

/// A side-by-side table, one block per cluster size.
pub fn table(all: &[ClusterRuns]) -> String {
    let mut out = String::new();
    for cluster in all {
        let _ = writeln!(out, "\n{} workers", cluster.workers);
        let _ = writeln!(
            out,
            "{:<11} {:>10} {:>9} {:>9} {:>9} {:>9} {:>10} {:>9} {:>6} {:>6}",
            "policy", "loss area", "active", "t90 s", "t95 s", "JCT s", "worst/fair", "p95/fair", "util", "contd"
        );
        for r in &cluster.runs {
            let s = &r.summary;
            let _ = writeln!(
                out,
                "{:<11} {:>10.2} {:>9.4} {:>9.1} {:>9.1} {:>9.1} {:>10.2} {:>9.2} {:>6.2} {:>6.2}",
                r.policy,
                s.mean_loss_area,
                s.avg_active_norm_loss,
                s.mean_time_to_90_s,
                s.mean_time_to_95_s,
                s.mean_jct_s,
                s.worst_slowdown_vs_fair.unwrap_or(f64::NAN),
                s.p95_slowdown_vs_fair.unwrap_or(f64::NAN),
                s.utilisation,
                s.contended_fraction
            );
        }
        for (name, v) in cluster.comparisons() {
            let _ = writeln!(
                out,
                "{name}: loss area {:+.1}%, active loss {:+.1}%, time to 90% {:+.1}%, time to 95% {:+.1}%, JCT {:+.1}% (positive: better)",
                v.loss_area_reduction_pct,
                v.avg_active_norm_loss_reduction_pct,
                v.time_to_90_reduction_pct,
                v.time_to_95_reduction_pct,
                v.mean_jct_reduction_pct
            );
        }
    }
    out
}

fn cluster_json(cluster: &ClusterRuns) -> Value {
    let mut object = json!({
        "workers": cluster.workers,
        "policies": cluster.runs.iter().map(|r| (r.policy.clone(), json!(r.summary))).collect::<serde_json::Map<_, _>>(),
    });
    for (name, v) in cluster.comparisons() {
        object[name] = json!(v);
    }
    object
}

/// One object for one cluster size (`{"workers", "policies", "slaq_vs_fair", ...}`), or
/// `{"runs": [...]}` of such objects for a sweep.
pub fn json(all: &[ClusterRuns]) -> Value {
    match all {
        [one] => cluster_json(one),
        _ => json!({ "runs": all.iter().map(cluster_json).collect::<Vec<_>>() }),
    }
}

/// Mean, min and max of one figure over seeds.
type Spread = (f64, f64, f64);

/// The figures a seed summary reports: each comparison's reductions, then (for comparisons
/// against fair) the compared policy's worst slowdown against fair.
const SEED_FIGURES: [&str; 6] = [
    "loss_area_reduction_pct",
    "time_to_90_reduction_pct",
    "time_to_95_reduction_pct",
    "mean_jct_reduction_pct",
    "worst_slowdown_vs_fair",
    "p95_slowdown_vs_fair",
];

/// Comparisons across seeds: per cluster size and comparison, the mean, min and max of each
/// of [`SEED_FIGURES`].
fn seed_stats(per_seed: &[(u64, Vec<ClusterRuns>)]) -> Vec<(u32, String, [Spread; 6])> {
    let mut out = Vec::new();
    let Some((_, first)) = per_seed.first() else { return out };
    for (index, cluster) in first.iter().enumerate() {
        for name in cluster.comparisons().keys() {
            let policy = name.split("_vs_").next().unwrap_or_default();
            let values: Vec<[f64; 6]> = per_seed
                .iter()
                .filter_map(|(_, runs)| {
                    let cluster = runs.get(index)?;
                    let v = cluster.comparisons().get(name).copied()?;
                    let run = cluster.run(policy);
                    let vs_fair =
                        |s: Option<f64>| if name.ends_with("_vs_fair") { s.unwrap_or(f64::NAN) } else { f64::NAN };
                    Some([
                        v.loss_area_reduction_pct,
                        v.time_to_90_reduction_pct,
                        v.time_to_95_reduction_pct,
                        v.mean_jct_reduction_pct,
                        vs_fair(run.and_then(|r| r.summary.worst_slowdown_vs_fair)),
                        vs_fair(run.and_then(|r| r.summary.p95_slowdown_vs_fair)),
                    ])
                })
                .collect();
            let stat = |k: usize| {
                let xs: Vec<f64> = values.iter().map(|v| v[k]).collect();
                let mean = xs.iter().sum::<f64>() / xs.len().max(1) as f64;
                (
                    mean,
                    xs.iter().copied().fold(f64::INFINITY, f64::min),
                    xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                )
            };
            out.push((cluster.workers, name.clone(), [stat(0), stat(1), stat(2), stat(3), stat(4), stat(5)]));
        }
    }
    out
}

/// One point of the floor's frontier: per cluster size and policy compared with fair, the
/// loss-area reduction against fair and the worst slowdown against fair, means over seeds.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct FrontierPoint {
    pub workers: u32,
    pub policy: String,
    pub loss_area_reduction_pct: f64,
    pub worst_slowdown_vs_fair: f64,
}

/// The frontier points of one floor's runs.
pub fn frontier_points(per_seed: &[(u64, Vec<ClusterRuns>)]) -> Vec<FrontierPoint> {
    seed_stats(per_seed)
        .into_iter()
        .filter_map(|(workers, name, stats)| {
            let policy = name.strip_suffix("_vs_fair")?;
            Some(FrontierPoint {
                workers,
                policy: policy.to_string(),
                loss_area_reduction_pct: stats[0].0,
                worst_slowdown_vs_fair: stats[4].0,
            })
        })
        .collect()
}

/// The frontier as a table: a row per floor, cluster size and policy.
pub fn frontier_table(frontier: &[(f64, Vec<FrontierPoint>)]) -> String {
    let mut out = String::from("floor  workers policy       loss area vs fair %   worst slowdown vs fair\n");
    for (floor, points) in frontier {
        for p in points {
            let _ = writeln!(
                out,
                "{floor:>5} {:>8} {:<12} {:>19.1} {:>24.2}",
                p.workers, p.policy, p.loss_area_reduction_pct, p.worst_slowdown_vs_fair
            );
        }
    }
    out
}

/// `{"frontier": [{"floor", "workers", "policy", "loss_area_reduction_pct", "worst_slowdown_vs_fair"}]}`.
pub fn frontier_json(frontier: &[(f64, Vec<FrontierPoint>)]) -> Value {
    let rows: Vec<Value> = frontier
        .iter()
        .flat_map(|(floor, points)| {
            points.iter().map(move |p| {
                let mut v = json!(p);
                v["floor"] = json!(floor);
                v
            })
        })
        .collect();
    json!({ "frontier": rows })
}

/// `frontier-W.svg` per cluster size: loss-area reduction against worst slowdown, one point per
/// floor, a line per policy.
pub fn plot_frontier(dir: &Path, frontier: &[(f64, Vec<FrontierPoint>)]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut keys: Vec<(u32, String)> =
        frontier.iter().flat_map(|(_, ps)| ps.iter().map(|p| (p.workers, p.policy.clone()))).collect();
    keys.sort();
    keys.dedup();
    let mut sizes: Vec<u32> = keys.iter().map(|k| k.0).collect();
    sizes.dedup();
    for workers in sizes {
        let lines: Vec<(String, Vec<(f64, f64)>)> = keys
            .iter()
            .filter(|k| k.0 == workers)
            .map(|(_, policy)| {
                let points = frontier
                    .iter()
                    .filter_map(|(_, ps)| ps.iter().find(|p| p.workers == workers && &p.policy == policy))
                    .map(|p| (p.worst_slowdown_vs_fair, p.loss_area_reduction_pct))
                    .collect();
                (policy.clone(), points)
            })
            .collect();
        let floors: Vec<String> = frontier.iter().map(|(f, _)| f.to_string()).collect();
        plot_lines(
            &dir.join(format!("frontier-{workers}.svg")),
            &format!("Floor frontier at {workers} workers (floors {})", floors.join(", ")),
            "worst slowdown vs fair (x)",
            "loss-area reduction vs fair (%)",
            &lines,
        )
        .map_err(std::io::Error::other)?;
    }
    Ok(())
}

/// Per cluster size and policy, the mean over seeds of its mean loss area and worst slowdown.
fn seed_means(per_seed: &[(u64, Vec<ClusterRuns>)]) -> Vec<(u32, String, f64, f64)> {
    let Some((_, first)) = per_seed.first() else { return Vec::new() };
    let mut out = Vec::new();
    for (index, cluster) in first.iter().enumerate() {
        for run in &cluster.runs {
            let pick = |f: fn(&super::Summary) -> f64| {
                let xs: Vec<f64> = per_seed
                    .iter()
                    .filter_map(|(_, runs)| runs.get(index)?.run(&run.policy).map(|r| f(&r.summary)))
                    .collect();
                xs.iter().sum::<f64>() / xs.len().max(1) as f64
            };
            let area = pick(|s| s.mean_loss_area);
            let slowdown = pick(|s| s.worst_slowdown_vs_fair.unwrap_or(f64::NAN));
            out.push((cluster.workers, run.policy.clone(), area, slowdown));
        }
    }
    out
}

/// A table of [`seed_means`] and [`seed_stats`].
pub fn seeds_table(per_seed: &[(u64, Vec<ClusterRuns>)]) -> String {
    let mut out = String::from("mean loss area (normalised loss x s, mean over seeds; lower is better)\n");
    let _ = writeln!(out, "{:>7} {:<12} {:>12} {:>14}", "workers", "policy", "loss area", "worst/fair");
    for (workers, policy, area, slowdown) in seed_means(per_seed) {
        let _ = writeln!(out, "{workers:>7} {policy:<12} {area:>12.2} {slowdown:>14.2}");
    }
    out.push_str("\nreduction in % (positive: the first policy is better), mean [min, max] over seeds\n");
    let _ = writeln!(
        out,
        "{:>7} {:<22} {:>24} {:>24} {:>24} {:>24} {:>20} {:>20}",
        "workers", "comparison", "loss area", "time to 90%", "time to 95%", "JCT", "worst slowdown", "p95 slowdown"
    );
    for (workers, name, stats) in seed_stats(per_seed) {
        let cell = |(mean, min, max): Spread| format!("{mean:+.1} [{min:+.1}, {max:+.1}]");
        let slowdown = |(mean, min, max): Spread| {
            if mean.is_nan() { "-".to_string() } else { format!("{mean:.2} [{min:.2}, {max:.2}]") }
        };
        let _ = writeln!(
            out,
            "{workers:>7} {name:<22} {:>24} {:>24} {:>24} {:>24} {:>20} {:>20}",
            cell(stats[0]),
            cell(stats[1]),
            cell(stats[2]),
            cell(stats[3]),
            slowdown(stats[4]),
            slowdown(stats[5])
        );
    }
    out
}

/// `{"seeds": [...], "means": [{"workers", "policy", "mean_loss_area", "worst_slowdown_vs_fair"}],
/// "summary": [{"workers", "comparison", "<figure>": {"mean","min","max"}}], "runs": {seed: ...}}`.
pub fn seeds_json(per_seed: &[(u64, Vec<ClusterRuns>)]) -> Value {
    let summary: Vec<Value> = seed_stats(per_seed)
        .into_iter()
        .map(|(workers, name, stats)| {
            let mut o = json!({ "workers": workers, "comparison": name });
            for (key, (mean, min, max)) in SEED_FIGURES.iter().zip(stats) {
                if !mean.is_nan() {
                    o[*key] = json!({ "mean": mean, "min": min, "max": max });
                }
            }
            o
        })
        .collect();
    let means: Vec<Value> = seed_means(per_seed)
        .into_iter()
        .map(|(workers, policy, area, slowdown)| {
            json!({ "workers": workers, "policy": policy, "mean_loss_area": area, "worst_slowdown_vs_fair": slowdown })
        })
        .collect();
    json!({
        "seeds": per_seed.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
        "means": means,
        "summary": summary,
        "runs": per_seed.iter().map(|(s, runs)| (s.to_string(), json(runs))).collect::<serde_json::Map<_, _>>(),
    })
}

/// Writes `summary.csv`, and per cluster size and policy `timeseries-W-POLICY.csv` and
/// `jobs-W-POLICY.csv`, and the SVG plots, into `dir`.
pub fn write_files(dir: &Path, all: &[ClusterRuns]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut summary = String::from(
        "workers,policy,mean_loss_area,avg_active_norm_loss,mean_time_to_90_s,mean_time_to_95_s,mean_jct_s,worst_slowdown_vs_fair,p95_slowdown_vs_fair,utilisation,contended_fraction\n",
    );
    for cluster in all {
        for r in &cluster.runs {
            let s = &r.summary;
            let _ = writeln!(
                summary,
                "{},{},{},{},{},{},{},{},{},{},{}",
                cluster.workers,
                r.policy,
                s.mean_loss_area,
                s.avg_active_norm_loss,
                s.mean_time_to_90_s,
                s.mean_time_to_95_s,
                s.mean_jct_s,
                s.worst_slowdown_vs_fair.unwrap_or(f64::NAN),
                s.p95_slowdown_vs_fair.unwrap_or(f64::NAN),
                s.utilisation,
                s.contended_fraction
            );
            let mut series = String::from("time_s,active_jobs,mean_norm_loss,share_high,share_medium,share_low\n");
            for p in &r.samples {
                let _ = writeln!(
                    series,
                    "{},{},{},{},{},{}",
                    p.time_s, p.active_jobs, p.mean_norm_loss, p.share_high, p.share_medium, p.share_low
                );
            }
            std::fs::write(dir.join(format!("timeseries-{}-{}.csv", cluster.workers, r.policy)), series)?;
            let mut jobs = String::from(
                "id,family,group,arrival_s,initial_norm_loss,loss_area,time_to_90_s,time_to_95_s,completion_s,restarts\n",
            );
            let opt = |v: Option<f64>| v.map_or(String::new(), |v| v.to_string());
            for j in &r.jobs {
                let _ = writeln!(
                    jobs,
                    "{},{},{},{},{},{},{},{},{},{}",
                    j.id,
                    j.family,
                    j.group.name(),
                    j.arrival_s,
                    j.initial_norm_loss,
                    j.loss_area,
                    opt(j.time_to_90_s),
                    opt(j.time_to_95_s),
                    opt(j.completion_s),
                    j.restarts
                );
            }
            std::fs::write(dir.join(format!("jobs-{}-{}.csv", cluster.workers, r.policy)), jobs)?;
        }
        plot_loss(&dir.join(format!("loss-{}.svg", cluster.workers)), cluster).map_err(std::io::Error::other)?;
        plot_share(&dir.join(format!("share-{}.svg", cluster.workers)), cluster).map_err(std::io::Error::other)?;
        plot_cdf(&dir.join(format!("cdf-time-to-90-{}.svg", cluster.workers)), cluster)
            .map_err(std::io::Error::other)?;
    }
    std::fs::write(dir.join("summary.csv"), summary)
}

type SampleField = fn(&super::metrics::Sample) -> f64;
pub type PlotResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

const COLOURS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(23, 190, 207),
];

/// Lines of points on one chart (SVG), each named in the legend.
pub fn plot_lines(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    lines: &[(String, Vec<(f64, f64)>)],
) -> PlotResult {
    let finite = lines.iter().flat_map(|l| l.1.iter()).filter(|p| p.0.is_finite() && p.1.is_finite());
    let (mut x_max, mut y_max, mut y_min) = (1e-9f64, 1e-9f64, 0.0f64);
    for &(x, y) in finite {
        x_max = x_max.max(x);
        y_max = y_max.max(y);
        y_min = y_min.min(y);
    }
    let root = SVGBackend::new(path, (900, 500)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..x_max * 1.02, y_min..y_max * 1.05)?;
    chart.configure_mesh().x_desc(x_label).y_desc(y_label).draw()?;
    for (i, (name, points)) in lines.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        chart
            .draw_series(LineSeries::new(points.iter().copied().filter(|p| p.1.is_finite()), colour.stroke_width(2)))?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2)));
    }
    chart.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw()?;
    root.present()?;
    Ok(())
}

fn plot_loss(path: &Path, cluster: &ClusterRuns) -> PlotResult {
    let lines: Vec<_> = cluster
        .runs
        .iter()
        .map(|r| (r.policy.clone(), r.samples.iter().map(|s| (s.time_s, s.mean_norm_loss)).collect()))
        .collect();
    plot_lines(
        path,
        &format!("Mean normalised loss of active jobs, {} workers", cluster.workers),
        "time (s)",
        "normalised loss",
        &lines,
    )
}

fn plot_share(path: &Path, cluster: &ClusterRuns) -> PlotResult {
    let mut lines = Vec::new();
    for r in &cluster.runs {
        let series: [(&str, SampleField); 3] =
            [("high", |s| s.share_high), ("medium", |s| s.share_medium), ("low", |s| s.share_low)];
        for (group, pick) in series {
            lines.push((format!("{} {group}", r.policy), r.samples.iter().map(|s| (s.time_s, pick(s))).collect()));
        }
    }
    plot_lines(
        path,
        &format!("Cluster share by loss group at arrival, {} workers", cluster.workers),
        "time (s)",
        "share of workers",
        &lines,
    )
}

fn plot_cdf(path: &Path, cluster: &ClusterRuns) -> PlotResult {
    let lines: Vec<_> = cluster.runs.iter().map(|r| (r.policy.clone(), cdf_time_to_90(r))).collect();
    plot_lines(
        path,
        &format!("CDF of time to 90% loss reduction, {} workers", cluster.workers),
        "seconds",
        "fraction of jobs",
        &lines,
    )
}

fn cdf_time_to_90(run: &RunMetrics) -> Vec<(f64, f64)> {
    let mut times: Vec<f64> =
        run.jobs.iter().filter(|j| j.initial_norm_loss > 0.10).filter_map(|j| j.time_to_90_s).collect();
    times.sort_by(f64::total_cmp);
    let n = times.len() as f64;
    times.iter().enumerate().map(|(i, &t)| (t, (i + 1) as f64 / n)).collect()
}
