//! How a job's iteration time depends on its worker count in the simulator: the iteration takes
//! `t₁·factor(w)` seconds, where `t₁` is its one-worker time.
//!
//! - **Parametric**: `factor(w) = σ + (1−σ)/w + c·log2 w` (serial part, parallel part,
//!   communication). SLAQ's own near-linear runtime model is σ = 0.02, c = 0.005.
//! - **Pollux**: measured. Each job takes the speed-up of one deep-learning application of the
//!   Pollux traces (`data/pollux/`, vendored): at the application's smallest measured per-GPU
//!   batch `b₀`, `speedup(w) = w·step(1)/step(w)` (the step throughput of `w` GPUs relative to
//!   one, for a fixed per-GPU batch, so an iteration of fixed work takes `t₁/speedup(w)`), with
//!   the `w` GPUs packed on as few 4-GPU machines as possible (the most packed placement that was
//!   measured; several measurements of one placement are averaged). Counts that were not
//!   measured are interpolated linearly in `w`; beyond the largest measured count (64) the
//!   speed-up stays flat. The curves are not smooth: crossing from one machine to two (4 → 5
//!   GPUs) costs most applications half their speed.

use std::sync::{Arc, OnceLock};

/// The parametric model `t(w) = t₁·(σ + (1−σ)/w + c·log2 w)`, and which family of curves a run
/// uses.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SpeedupModel {
    /// `parametric` (the formula below) or `pollux` (measured curves, one application per
    /// family).
    pub kind: SpeedupKind,
    /// Serial fraction σ of an iteration (does not parallelise). Parametric only.
    pub serial_fraction: f64,
    /// Communication cost c per doubling of workers, as a fraction of the one-worker time.
    /// Parametric only.
    pub comm_fraction: f64,
}

/// Where the speed-up curves come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SpeedupKind {
    #[default]
    Parametric,
    Pollux,
}

impl Default for SpeedupModel {
    fn default() -> Self {
        SpeedupModel { kind: SpeedupKind::Parametric, serial_fraction: 0.05, comm_fraction: 0.02 }
    }
}

impl SpeedupModel {
    /// The parametric factor `t(w)/t₁`.
    pub fn factor(&self, workers: u32) -> f64 {
        let w = f64::from(workers.max(1));
        self.serial_fraction + (1.0 - self.serial_fraction) / w + self.comm_fraction * w.log2()
    }

    /// The curve of a job whose speed-up application (for `pollux`) is `application`.
    pub fn curve(&self, application: usize) -> SpeedupCurve {
        match self.kind {
            SpeedupKind::Parametric => SpeedupCurve::Parametric(*self),
            SpeedupKind::Pollux => {
                let tables = pollux_tables();
                SpeedupCurve::Measured(Arc::clone(&tables[application % tables.len()].1))
            }
        }
    }
}

/// One job's speed-up curve: `factor(w) = t(w)/t₁`. Cheap to clone.
#[derive(Clone, Debug, PartialEq)]
pub enum SpeedupCurve {
    Parametric(SpeedupModel),
    /// `factor(w)` for `w = 1..=len`, flat beyond.
    Measured(Arc<[f64]>),
}

impl SpeedupCurve {
    /// Iteration time with `workers` workers relative to one worker (`workers ≥ 1`).
    pub fn factor(&self, workers: u32) -> f64 {
        match self {
            SpeedupCurve::Parametric(model) => model.factor(workers),
            SpeedupCurve::Measured(table) => {
                let i = (workers.max(1) as usize).min(table.len()) - 1;
                table[i]
            }
        }
    }

    /// The worker count with the shortest iteration time (more workers gain nothing).
    pub fn most_useful_workers(&self) -> u32 {
        match self {
            SpeedupCurve::Parametric(m) => {
                let w = (1.0 - m.serial_fraction) * std::f64::consts::LN_2 / m.comm_fraction.max(1e-12);
                let (lo, hi) = (w.floor().clamp(1.0, 1e6) as u32, w.ceil().clamp(1.0, 1e6) as u32);
                if m.factor(lo) <= m.factor(hi) { lo } else { hi }
            }
            SpeedupCurve::Measured(table) => {
                let best = table.iter().enumerate().min_by(|a, b| a.1.total_cmp(b.1).then(a.0.cmp(&b.0)));
                best.map_or(1, |(i, _)| i as u32 + 1)
            }
        }
    }
}

/// The applications of the Pollux traces, in a fixed order.
pub const POLLUX_APPLICATIONS: [&str; 6] = ["bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3"];

macro_rules! trace_files {
    ($($app:literal),*) => {
        [$((
            $app,
            include_str!(concat!("../../../data/pollux/", $app, "/placements.csv")),
            include_str!(concat!("../../../data/pollux/", $app, "/scalability.csv")),
        )),*]
    };
}

/// An application's name and its factor table.
pub type FactorTable = (&'static str, Arc<[f64]>);

/// The measured factor tables, parsed once from the vendored CSV files.
pub fn pollux_tables() -> &'static [FactorTable] {
    static TABLES: OnceLock<Vec<FactorTable>> = OnceLock::new();
    TABLES.get_or_init(|| {
        trace_files!("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")
            .into_iter()
            .map(|(app, placements, scalability)| (app, factor_table(placements, scalability).into()))
            .collect()
    })
}

/// Step time by GPU count (most packed measured placement, smallest per-GPU batch), then the
/// factor table for `w = 1..=max measured`. The files are compiled in and checked by a test.
fn factor_table(placements: &str, scalability: &str) -> Vec<f64> {
    // (gpus, machines, local batch, step time)
    let mut rows: Vec<(u32, u32, u32, f64)> = Vec::new();
    for line in placements.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let (Some(placement), Some(bsz), Some(step)) = (f.first(), f.get(1), f.get(2)) else { continue };
        let gpus = placement.bytes().map(|b| u32::from(b.wrapping_sub(b'0'))).sum();
        if let (Ok(bsz), Ok(step)) = (bsz.parse(), step.parse()) {
            rows.push((gpus, placement.len() as u32, bsz, step));
        }
    }
    for line in scalability.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let parse = |i: usize| f.get(i).and_then(|s| s.parse::<f64>().ok());
        if let (Some(nodes), Some(gpus), Some(bsz), Some(step)) = (parse(0), parse(1), parse(2), parse(3)) {
            rows.push((gpus as u32, nodes as u32, bsz as u32, step));
        }
    }
    let b0 = rows.iter().map(|r| r.2).min().unwrap_or(0);
    let max_gpus = rows.iter().map(|r| r.0).max().unwrap_or(1);
    // Mean step time of the most packed measured placement at each measured GPU count.
    let mut step_at: Vec<Option<f64>> = vec![None; max_gpus as usize + 1];
    for gpus in 1..=max_gpus {
        let at = rows.iter().filter(|r| r.0 == gpus && r.2 == b0);
        let Some(machines) = at.clone().map(|r| r.1).min() else { continue };
        let steps: Vec<f64> = at.filter(|r| r.1 == machines).map(|r| r.3).collect();
        step_at[gpus as usize] = Some(steps.iter().sum::<f64>() / steps.len() as f64);
    }
    let one = step_at[1].unwrap_or(1.0);
    let speedup: Vec<(f64, f64)> =
        step_at.iter().enumerate().filter_map(|(w, s)| s.map(|s| (w as f64, w as f64 * one / s))).collect();
    (1..=max_gpus)
        .map(|w| {
            let w = f64::from(w);
            let after = speedup.iter().position(|p| p.0 >= w).unwrap_or(speedup.len() - 1);
            let (x1, y1) = speedup[after];
            let s = if x1 <= w || after == 0 {
                y1
            } else {
                let (x0, y0) = speedup[after - 1];
                y0 + (y1 - y0) * (w - x0) / (x1 - x0)
            };
            1.0 / s
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measured_tables_parse_and_look_like_the_traces() {
        let tables = pollux_tables();
        assert_eq!(tables.len(), POLLUX_APPLICATIONS.len());
        for (app, table) in tables {
            assert_eq!(table.len(), 64, "{app}: measured up to 64 GPUs");
            assert!((table[0] - 1.0).abs() < 1e-12, "{app}: factor(1) is 1 by definition");
            assert!(table.iter().all(|f| f.is_finite() && *f > 0.0), "{app}");
            // Four GPUs on one machine beat five across two machines (the locality cliff).
            assert!(table[3] < table[4], "{app}: {} vs {}", table[3], table[4]);
            // 64 GPUs are several times faster than one.
            assert!(1.0 / table[63] > 8.0, "{app}: speed-up {}", 1.0 / table[63]);
        }
        let bert = &tables[0].1;
        // bert at 4 GPUs per step, from placements.csv by hand: 4·0.4553/step("4", bsz 4).
        assert!((1.0 / bert[3] - 3.4).abs() < 0.1, "{}", 1.0 / bert[3]);
    }

    #[test]
    fn measured_curves_are_flat_beyond_the_traces() {
        let curve = SpeedupModel { kind: SpeedupKind::Pollux, ..SpeedupModel::default() }.curve(2);
        assert_eq!(curve.factor(64), curve.factor(1000));
        assert!(curve.most_useful_workers() <= 64);
    }

    #[test]
    fn parametric_most_useful_is_the_minimum() {
        let m = SpeedupModel::default();
        let best = SpeedupCurve::Parametric(m).most_useful_workers();
        assert_eq!(best, 33);
        assert!(m.factor(best) <= m.factor(best - 1) && m.factor(best) <= m.factor(best + 1));
    }
}
