//! `slaq predict`: replays loss curves and reports how well the loss `horizon` iterations ahead
//! is predicted.

use std::path::PathBuf;

use slaq::quality::{PredictorConfig, eval};

use crate::common::load_all;

#[derive(clap::Args)]
pub(crate) struct PredictArgs {
    /// JSON-lines curve files (repeatable or comma-separated).
    #[arg(long, required = true, value_delimiter = ',')]
    pub(crate) curves: Vec<PathBuf>,
    /// Iterations ahead to predict.
    #[arg(long, default_value_t = 10)]
    pub(crate) horizon: u64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) fn run(args: PredictArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.horizon >= 1, "--horizon must be at least 1");
    let curves = load_all(&args.curves)?;
    let report = eval::evaluate(
        curves.iter().map(|c| (c.family.as_str(), c.loss.as_slice())),
        args.horizon,
        PredictorConfig::default(),
    );
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!("{} iterations ahead: median absolute percentage error", report.horizon);
    println!("{:<10} {:>6} {:>7} {:>12} {:>10}", "family", "curves", "points", "strawman %", "slaq %");
    let rows = report.families.iter().map(|(k, v)| (k.as_str(), v)).chain([("overall", &report.overall)]);
    for (family, s) in rows {
        println!(
            "{:<10} {:>6} {:>7} {:>12.3} {:>10.3}",
            family, s.curves, s.points, s.strawman_mape_pct, s.slaq_mape_pct
        );
    }
    Ok(())
}
