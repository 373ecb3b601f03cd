//! `slaq bench alloc`: one allocation decision in memory, for each policy.

use std::path::PathBuf;

use slaq::quality::PredictorConfig;

use super::support::BenchOutput;
use super::typed::{Setting, typed_decisions};
use crate::common::{DEFAULT_CURVES, Size, load_all};

#[derive(clap::Args)]
pub(crate) struct BenchAllocArgs {
    #[command(flatten)]
    pub(crate) size: Size<4000, 16000>,
    /// Curves the jobs' predictors are fitted on.
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_CURVES)]
    pub(crate) curves: Vec<PathBuf>,
    /// Timed repetitions (the median is reported).
    #[arg(long, default_value_t = 7)]
    pub(crate) runs: usize,
    /// Worker types (issue #31): with 2 or more, the workers are split evenly among them, each
    /// job runs at a speed of its own on each, and the typed decisions (the greedy and the
    /// exact LP of `schedule::typed`) are timed too.
    #[arg(long, default_value_t = 1)]
    pub(crate) types: usize,
    #[command(flatten)]
    pub(crate) out: BenchOutput,
}

/// One allocation decision in memory. Each job's bid is its gain curve tabulated when the
/// bid is made (`policy::table`, at refit in the live scheduler), so the decision reads tables;
/// what building every table at once costs is reported beside it, as is the heap greedy that
/// the decision must equal (checked on every run).
pub(crate) fn run(args: BenchAllocArgs) -> anyhow::Result<()> {
    use slaq::policy::table::{DEFAULT_TABLE_LEN, Tabled};
    use slaq::policy::{JobBid, PolicyKind, Problem, check_contract, slaq as greedy};
    use std::time::Instant;
    anyhow::ensure!(args.size.jobs > 0 && args.runs > 0, "--jobs and --runs must be positive");
    let curves = load_all(&args.curves)?;
    let templates = slaq::sim::curves::fixtures::predictor_templates(&curves, PredictorConfig::default());
    let predictors = slaq::sim::curves::fixtures::predictors(&templates, args.size.jobs);
    let bytes_per_job = predictors.iter().map(|p| p.state_bytes()).sum::<usize>() / predictors.len();
    let epoch_s = 60.0;
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let ms = |from: Instant, to: Instant| (to - from).as_secs_f64() * 1e3;
    let (mut slaq_ms, mut heap_ms, mut curves_ms, mut tables_ms, mut fair_ms) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut total_assigned, mut table_bytes, mut table_len) = (0, 0, 0);
    for run in 0..args.runs {
        // Jobs keep their workers across decisions, as in the live allocator.
        let current = |j: usize| ((j + run) % 8) as u32;
        let start = Instant::now();
        let gains: Vec<_> = predictors.iter().enumerate().map(|(j, p)| p.gain_curve(epoch_s, current(j))).collect();
        let curves_done = Instant::now();
        let bids: Vec<_> =
            gains.into_iter().map(|g| JobBid::new(g.map(|g| Tabled::new(g, u32::MAX, DEFAULT_TABLE_LEN)))).collect();
        let tables_done = Instant::now();
        let problem = Problem { num_workers: args.size.workers, jobs: &bids };
        let allocation = PolicyKind::Slaq.allocate(&problem);
        let slaq_done = Instant::now();
        let by_heap = greedy::allocate_by_heap(&problem);
        let heap_done = Instant::now();
        anyhow::ensure!(allocation == by_heap, "the threshold greedy differs from the heap greedy");
        check_contract(&problem, &allocation)?;
        total_assigned = allocation.total();
        let tabled = bids.iter().filter_map(|b| b.gain.as_ref());
        table_bytes = tabled.clone().map(Tabled::table_bytes).sum::<usize>() / args.size.jobs;
        table_len = tabled.map(Tabled::len).sum::<usize>() / args.size.jobs;
        let fair_bids: Vec<JobBid<slaq::quality::GainCurve>> = (0..args.size.jobs).map(|_| JobBid::new(None)).collect();
        let fair_start = Instant::now();
        let fair = PolicyKind::Fair.allocate(&Problem { num_workers: args.size.workers, jobs: &fair_bids });
        fair_ms.push(ms(fair_start, Instant::now()));
        std::hint::black_box(fair);
        curves_ms.push(ms(start, curves_done));
        tables_ms.push(ms(curves_done, tables_done));
        slaq_ms.push(ms(tables_done, slaq_done));
        heap_ms.push(ms(slaq_done, heap_done));
    }
    let setting = Setting { workers: args.size.workers, types: args.types, runs: args.runs };
    let typed = if args.types >= 2 { Some(typed_decisions(&predictors, &setting, epoch_s)?) } else { None };
    let report = serde_json::json!({
        "jobs": args.size.jobs,
        "workers": args.size.workers,
        "types": args.types,
        "typed": typed,
        // The first decision has no earlier threshold to start from (see `policy::slaq`).
        "slaq_first_ms": slaq_ms.first().copied(),
        "slaq_ms": median(slaq_ms),
        "slaq_heap_ms": median(heap_ms),
        "slaq_gain_curves_ms": median(curves_ms),
        "slaq_gain_tables_ms": median(tables_ms),
        "fair_ms": median(fair_ms),
        "slaq_workers_assigned": total_assigned,
        "identical_to_heap": true,
        "predictor_bytes_per_job": bytes_per_job,
        "table_bytes_per_job": table_bytes,
        "table_len_mean": table_len,
        "runs": args.runs,
    });
    if args.out.json {
        println!("{report}");
    } else {
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    Ok(())
}
