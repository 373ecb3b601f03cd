//! The `slaq` command line: thin wrappers over the library; errors are reported with their chain.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use slaq::quality::{PredictorConfig, eval};
use slaq::trace;

#[derive(Parser)]
#[command(name = "slaq", version, about = "Quality-driven scheduling of iterative ML training jobs")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Replay loss curves and report how well the loss `horizon` iterations ahead is predicted.
    Predict(PredictArgs),
}

#[derive(clap::Args)]
struct PredictArgs {
    /// JSON-lines curve files (repeatable or comma-separated).
    #[arg(long, required = true, value_delimiter = ',')]
    curves: Vec<PathBuf>,
    /// Iterations ahead to predict.
    #[arg(long, default_value_t = 10)]
    horizon: u64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Command::Predict(args) => predict(args),
    }
}

fn load_all(paths: &[PathBuf]) -> anyhow::Result<Vec<trace::TraceCurve>> {
    let mut curves = Vec::new();
    for path in paths {
        curves.extend(trace::load_curves(path).with_context(|| format!("loading curves from {}", path.display()))?);
    }
    Ok(curves)
}

fn predict(args: PredictArgs) -> anyhow::Result<()> {
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
