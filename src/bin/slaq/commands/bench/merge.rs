//! `slaq bench merge`: what the leader pays to take its replicas' bids (issue #19).

use slaq::protocol;
use slaq::quality::PredictorConfig;

use super::support::BenchOutput;
use crate::common::Jobs;

#[derive(clap::Args)]
pub(crate) struct BenchMergeArgs {
    #[command(flatten)]
    pub(crate) jobs: Jobs<100_000>,
    /// Timed repetitions (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub(crate) runs: usize,
    #[command(flatten)]
    pub(crate) out: BenchOutput,
}

/// Bids of `jobs` fitted jobs (40 points of a real-looking curve each, as `bench epoch` feeds
/// them), then per run: encode each as a replica would, decode and tabulate it as the leader
/// would, and merge it into the leader's table.
pub(crate) fn run(args: BenchMergeArgs) -> anyhow::Result<()> {
    use slaq::actors::bid::{Bid, job_model};
    use slaq::partition::Bids;
    use slaq::protocol::WireBid;
    use std::time::Instant;

    anyhow::ensure!(args.jobs.jobs > 0 && args.runs > 0, "sizes must be positive");
    let spec = protocol::JobSpec::new("j");
    let model = std::sync::Arc::new(job_model(&spec, &[], None));
    let bids: Vec<(String, Bid)> = (0..args.jobs.jobs)
        .map(|j| {
            let mut p = slaq::quality::JobPredictor::new(PredictorConfig::default());
            for iter in 1..=40u64 {
                let loss = 0.2 + (1.0 + (j % 7) as f64) / (iter as f64).powf(0.5 + (j % 5) as f64 * 0.2);
                let _ = p.observe(iter, loss);
                p.observe_time(1 + (iter % 4) as u32, 1.0 + (j % 3) as f64);
            }
            let gain = slaq::schedule::make_bid(&mut p, 60.0, 2.0, 4);
            let bid = Bid::new(&spec, model.clone(), &p, gain, 4);
            (format!("job{j}"), bid)
        })
        .collect();
    let (mut encode, mut decode, mut merge) = (Vec::new(), Vec::new(), Vec::new());
    let mut bytes = 0;
    for _ in 0..args.runs {
        let t = Instant::now();
        let wire: Vec<(&str, Vec<u8>)> = bids
            .iter()
            .map(|(j, b)| rmp_serde::to_vec_named(&b.to_wire()).map(|v| (j.as_str(), v)))
            .collect::<Result<_, _>>()?;
        encode.push(t.elapsed().as_secs_f64() * 1e3);
        bytes = wire.iter().map(|w| w.1.len()).sum::<usize>();
        let t = Instant::now();
        let decoded: Vec<(&str, Bid)> = wire
            .iter()
            .map(|(j, v)| rmp_serde::from_slice::<WireBid>(v).map(|w| (*j, Bid::from_wire(w))))
            .collect::<Result<_, _>>()?;
        decode.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let mut table = Bids::default();
        for (j, b) in decoded {
            table.offer(j, 1, b);
        }
        merge.push(t.elapsed().as_secs_f64() * 1e3);
        anyhow::ensure!(table.len() == args.jobs.jobs, "every bid merged");
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let report = serde_json::json!({
        "jobs": args.jobs.jobs,
        "runs": args.runs,
        "bytes_per_bid": bytes as f64 / args.jobs.jobs as f64,
        "bytes_total": bytes,
        "encode_ms": median(encode),
        "decode_and_tabulate_ms": median(decode),
        "merge_ms": median(merge),
        "note": "one thread; decode includes rebuilding each bid's gain table (64 evaluations)",
    });
    println!("{}", if args.out.json { report.to_string() } else { serde_json::to_string_pretty(&report)? });
    Ok(())
}
