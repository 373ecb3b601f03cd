//! What the scheduler learns about a deep-learning job, and Courier's batch rule.
//!
//! **Iteration time** ([`PerfParams`], Pollux's throughput model): with per-GPU batch `m` on `K`
//! GPUs over `N` machines,
//! - compute `T_c = α_c + β_c·m`;
//! - synchronisation `T_s = 0` for one GPU, `α_l + β_l·(K−2) + λ·log2 K` on one machine,
//!   `α_n + β_n·(K−2) + λ·log2 K` across machines (for a parameter-server job:
//!   [`PerfParams::ps_network`]); the logarithmic term is a ring or tree all-reduce's latency,
//!   and what a machine-blind job's speed-up is fitted with;
//! - one step `T = (T_c^γ + T_s^γ)^{1/γ}`: `γ = 1` is no overlap of compute and
//!   synchronisation, large `γ` full overlap;
//! - with `a` extra gradient-accumulation steps, `T + a·T_c`.
//!
//! [`fit`] learns it from the shapes the job ran in: compute is the step minus the reported sync
//! time, linear in `m` (least squares); for each `γ` of a grid the full synchronisation time is
//! solved from each step and fitted linearly in `K−2` on one machine and across machines; the
//! `γ` with the smallest squared relative step error wins (all fits weigh relative errors). Until
//! a job has run at two per-GPU batches, its compute is taken proportional to the batch (a
//! larger batch is never free). Until a job has run on several GPUs, one machine or several,
//! the **prior** is no synchronisation cost (so its predicted speed-up is
//! linear, as Pollux assumes, and `sim::pollux` bounds how far it trusts that: at most twice the
//! GPUs it has run on), and synchronising across machines is never predicted cheaper than within
//! one.
//!
//! **The machine-blind case** ([`PerfParams::machine_blind`]): a job that reports only its
//! iteration time at each worker count (no machines, batch or sync time) is this model on one
//! machine with per-worker work `1/w` and no overlap, `t(w) = α_c + β_c/w + λ·log2 w`, fitted by
//! `quality::runtime::IterTimeModel` (least squares in all three at once, since compute and
//! synchronisation cannot be told apart without a reported sync time).
//!
//! The locality-aware [`fit`] keeps `λ = 0`: choosing a logarithmic synchronisation there by
//! the fit's error was measured and made slaq's mean JCT on Pollux's workloads 1% worse
//! (2,741 s → 2,767 s), since Pollux's traces follow the linear form.
//!
//! **Statistical efficiency**: with gradient statistics reported, one step at total batch `B`
//! makes [`step_gain`] steps of progress at the initial batch; without them a
//! larger batch is assumed to gain nothing.
//!
//! **Batch under an SLO (Courier)** ([`choose_batch`]): among the allowed batches, the one with
//! the most predicted progress per second whose predicted iteration time meets the SLO; if none
//! meets it, the fastest.

/// A job's GPUs: how many, over how many machines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub machines: u32,
    pub replicas: u32,
}

impl Shape {
    /// `replicas` packed on machines of `slots` each.
    pub fn packed(replicas: u32, slots: u32) -> Shape {
        Shape { machines: replicas.div_ceil(slots.max(1)).max(1), replicas }
    }

    /// `replicas` packed on machines of `slots` each, as counts per machine: full machines, then
    /// the rest.
    pub fn packed_counts(replicas: u32, slots: u32) -> Vec<u32> {
        let machines = Shape::packed(replicas, slots).machines;
        let mut counts = vec![slots.max(1); (machines - 1) as usize];
        counts.push(replicas - slots.max(1) * (machines - 1));
        counts
    }

    /// The shape of per-machine counts (zeros ignored).
    pub fn of(counts: &[u32]) -> Shape {
        Shape { machines: counts.iter().filter(|&&c| c > 0).count() as u32, replicas: counts.iter().sum() }
    }
}

/// Pollux's iteration-time parameters.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PerfParams {
    pub alpha_c: f64,
    pub beta_c: f64,
    pub alpha_l: f64,
    pub beta_l: f64,
    pub alpha_n: f64,
    pub beta_n: f64,
    pub gamma: f64,
    /// Synchronisation per doubling of GPUs, on one machine or across (`λ`; 0 in states saved
    /// before it existed).
    #[serde(default)]
    pub log_k: f64,
}

impl PerfParams {
    /// The prior before any observation: compute proportional to the batch (a larger batch is
    /// never free), nothing else.
    pub const PRIOR: PerfParams = PerfParams {
        alpha_c: 0.0,
        beta_c: 0.01,
        alpha_l: 0.0,
        beta_l: 0.0,
        alpha_n: 0.0,
        beta_n: 0.0,
        gamma: 1.0,
        log_k: 0.0,
    };

    /// The machine-blind case (see the module's documentation): `t(w) = alpha + beta/w +
    /// log_k·log2 w`, evaluated by [`PerfParams::machine_blind_seconds`].
    pub fn machine_blind(alpha: f64, beta: f64, log_k: f64) -> PerfParams {
        PerfParams { alpha_c: alpha, beta_c: beta, log_k, ..PerfParams::PRIOR }
    }

    /// Seconds per iteration on `workers` workers of one machine, each doing `1/workers` of the
    /// work.
    pub fn machine_blind_seconds(&self, workers: f64) -> f64 {
        let shape = Shape { machines: 1, replicas: workers.max(1.0) as u32 };
        self.step(shape, 1.0 / workers.max(1.0)).max(1e-9)
    }

    pub fn compute(&self, local_bsz: f64) -> f64 {
        (self.alpha_c + self.beta_c * local_bsz).max(1e-9)
    }

    /// Synchronisation time of an all-reduce step.
    pub fn network(&self, shape: Shape) -> f64 {
        if shape.replicas <= 1 {
            return 0.0;
        }
        let k = f64::from(shape.replicas - 2);
        let tree = self.log_k * f64::from(shape.replicas).log2();
        let local = self.alpha_l + self.beta_l * k + tree;
        if shape.machines <= 1 { local } else { (self.alpha_n + self.beta_n * k + tree).max(local) }
    }

    /// Synchronisation time of a parameter-server step: each PS serves `workers / ps` workers,
    /// the fraction `cross` of whose traffic crosses machines (at the network's cost, the rest at
    /// the local cost).
    pub fn ps_network(&self, workers: u32, ps: u32, cross: f64) -> f64 {
        if workers == 0 || ps == 0 {
            return 0.0;
        }
        let load = f64::from(workers) / f64::from(ps);
        let cross = cross.clamp(0.0, 1.0);
        cross * (self.alpha_n + self.beta_n * load) + (1.0 - cross) * (self.alpha_l + self.beta_l * load)
    }

    fn overlap(&self, compute: f64, sync: f64) -> f64 {
        if sync <= 0.0 {
            return compute;
        }
        let g = self.gamma.max(1.0);
        (compute.powf(g) + sync.powf(g)).powf(1.0 / g)
    }

    /// One optimizer step without accumulation.
    pub fn step(&self, shape: Shape, local_bsz: f64) -> f64 {
        self.overlap(self.compute(local_bsz), self.network(shape))
    }

    /// One iteration with `accum` extra accumulation steps.
    pub fn iter_time(&self, shape: Shape, local_bsz: f64, accum: u32) -> f64 {
        self.step(shape, local_bsz) + f64::from(accum) * self.compute(local_bsz)
    }

    /// One parameter-server iteration (see [`PerfParams::ps_network`]).
    pub fn ps_iter_time(&self, workers: u32, ps: u32, cross: f64, local_bsz: f64, accum: u32) -> f64 {
        let c = self.compute(local_bsz);
        self.overlap(c, self.ps_network(workers, ps, cross)) + f64::from(accum) * c
    }
}

/// One measured step: what a job reports.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Observation {
    pub machines: u32,
    pub replicas: u32,
    pub local_bsz: f64,
    pub step: f64,
    pub sync: f64,
}

/// `y = a + b·x` by weighted least squares (`(x, y, weight)`) with `a, b ≥ 0`; `None` without
/// points.
fn fit_line(points: &[(f64, f64, f64)]) -> Option<(f64, f64)> {
    let n: f64 = points.iter().map(|p| p.2).sum();
    if points.is_empty() || n <= 0.0 {
        return None;
    }
    let (mx, my) = points.iter().fold((0.0, 0.0), |a, p| (a.0 + p.2 * p.0 / n, a.1 + p.2 * p.1 / n));
    let sxx: f64 = points.iter().map(|p| p.2 * (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| p.2 * (p.0 - mx) * (p.1 - my)).sum();
    let b = if sxx > 1e-12 { sxy / sxx } else { 0.0 };
    if b < 0.0 {
        return Some((my.max(0.0), 0.0));
    }
    let a = my - b * mx;
    if a < 0.0 {
        let sx2: f64 = points.iter().map(|p| p.2 * p.0 * p.0).sum();
        let sxy0: f64 = points.iter().map(|p| p.2 * p.0 * p.1).sum();
        return Some((0.0, if sx2 > 0.0 { (sxy0 / sx2).max(0.0) } else { 0.0 }));
    }
    Some((a, b))
}

const GAMMAS: [f64; 12] = [1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0];

/// Fits [`PerfParams`] to a job's observations (see the module's documentation); the prior for
/// what they do not show.
pub fn fit(obs: &[Observation]) -> PerfParams {
    let valid: Vec<&Observation> = obs
        .iter()
        .filter(|o| o.step.is_finite() && o.step > 0.0 && o.sync.is_finite() && o.local_bsz > 0.0 && o.replicas > 0)
        .collect();
    if valid.is_empty() {
        return PerfParams::PRIOR;
    }
    // Relative errors: each point weighs 1/step², so short steps count as much as long ones.
    let compute: Vec<(f64, f64, f64)> =
        valid.iter().map(|o| (o.local_bsz, o.step - o.sync.clamp(0.0, o.step), o.step.powi(-2))).collect();
    let distinct = compute.iter().any(|c| (c.0 - compute[0].0).abs() > 1e-9);
    let (alpha_c, beta_c) = if distinct {
        fit_line(&compute).unwrap_or((0.0, PerfParams::PRIOR.beta_c))
    } else {
        // One batch seen: the prior's shape, compute proportional to the batch, at its scale.
        (0.0, compute.iter().map(|c| c.1).sum::<f64>() / compute.len() as f64 / compute[0].0)
    };
    let mut best = PerfParams { alpha_c, beta_c, ..PerfParams::PRIOR };
    let multi: Vec<&&Observation> = valid.iter().filter(|o| o.replicas > 1).collect();
    if multi.is_empty() {
        return best;
    }
    let mut best_err = f64::INFINITY;
    for gamma in GAMMAS {
        let mut local = Vec::new();
        let mut net = Vec::new();
        for o in &multi {
            let c = (alpha_c + beta_c * o.local_bsz).max(1e-9);
            let sync = (o.step.powf(gamma) - c.powf(gamma)).max(0.0).powf(1.0 / gamma);
            let x = f64::from(o.replicas - 2);
            let point = (x, sync, o.step.powi(-2));
            if o.machines <= 1 { local.push(point) } else { net.push(point) }
        }
        let (alpha_l, beta_l) = fit_line(&local).unwrap_or((0.0, 0.0));
        let (alpha_n, beta_n) = fit_line(&net).unwrap_or((alpha_l, beta_l));
        let p = PerfParams { alpha_c, beta_c, alpha_l, beta_l, alpha_n, beta_n, gamma, log_k: 0.0 };
        let err: f64 = multi
            .iter()
            .map(|o| (p.step(Shape { machines: o.machines, replicas: o.replicas }, o.local_bsz) / o.step - 1.0).powi(2))
            .sum();
        if err < best_err {
            best_err = err;
            best = p;
        }
    }
    best
}

/// The batch limits of a job.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BatchLimits {
    /// The batch that progress is counted in (the smallest it runs at).
    pub init_batch: u32,
    pub max_batch: u32,
    pub min_local: u32,
    /// The largest per-GPU batch that fits; more is accumulated.
    pub max_local: u32,
}

/// How a total batch runs on `replicas` GPUs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BatchConfig {
    /// Total batch per optimizer step.
    pub batch: u32,
    /// Per-GPU batch of one pass.
    pub local_bsz: u32,
    /// Extra accumulation passes per step.
    pub accum: u32,
}

impl BatchLimits {
    /// Total batch `batch` on `replicas` GPUs: per-GPU batch at least `min_local`, accumulated
    /// when it exceeds `max_local`, the total at most `max_batch` (the published simulator's
    /// rule).
    pub fn configure(&self, batch: u32, replicas: u32) -> BatchConfig {
        let r = replicas.max(1);
        let local = batch.div_ceil(r).max(self.min_local).max(1);
        let accum = local.div_ceil(self.max_local.max(1)).saturating_sub(1);
        let passes = r * (accum + 1);
        let atomic =
            local.div_ceil(accum + 1).min((self.max_batch / passes).max(self.min_local.min(self.max_batch)).max(1));
        BatchConfig { batch: atomic * passes, local_bsz: atomic, accum }
    }

    /// The allowed totals from `init_batch` to `max_batch`, a quarter-octave apart.
    pub fn grid(&self) -> Vec<u32> {
        let mut out = Vec::new();
        let mut b = f64::from(self.init_batch.max(1));
        while b <= f64::from(self.max_batch) + 0.5 {
            let v = b.round() as u32;
            if out.last() != Some(&v) {
                out.push(v);
            }
            b *= 2f64.powf(0.25);
        }
        if out.last() != Some(&self.max_batch) {
            out.push(self.max_batch);
        }
        out
    }
}

/// Courier's choice for one shape.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BatchChoice {
    pub config: BatchConfig,
    /// Predicted seconds per iteration.
    pub iter_s: f64,
    /// Predicted progress (steps at the initial batch) per second.
    pub rate: f64,
    pub meets_slo: bool,
}

/// Predicted progress per second of `config` with iteration time `iter_s`.
pub fn rate(config: &BatchConfig, iter_s: f64, limits: &BatchLimits, grads: Option<(f64, f64)>) -> f64 {
    let gain =
        grads.map_or(1.0, |(sqr, var)| step_gain(sqr, var, f64::from(config.batch), f64::from(limits.init_batch)));
    gain / iter_s.max(1e-12)
}

/// Courier's rule over `candidates` (total batches) for `iter_time(config)`: the most progress per
/// second among those within `slo`, else the fastest. `None` without candidates.
pub fn choose_batch(
    candidates: &[u32],
    replicas: u32,
    limits: &BatchLimits,
    grads: Option<(f64, f64)>,
    slo: Option<f64>,
    iter_time: impl Fn(&BatchConfig) -> f64,
) -> Option<BatchChoice> {
    let mut best: Option<BatchChoice> = None;
    let mut fastest: Option<BatchChoice> = None;
    for &b in candidates {
        let config = limits.configure(b, replicas);
        let iter_s = iter_time(&config);
        let choice = BatchChoice {
            config,
            iter_s,
            rate: rate(&config, iter_s, limits, grads),
            meets_slo: slo.is_none_or(|s| iter_s <= s),
        };
        if fastest.is_none_or(|f| iter_s < f.iter_s) {
            fastest = Some(choice);
        }
        if choice.meets_slo && best.is_none_or(|b| choice.rate > b.rate) {
            best = Some(choice);
        }
    }
    best.or(fastest)
}

/// Progress that one step at total batch `batch` makes, in steps at `init_batch`, given the
/// gradient statistics: `(var + sqr) / (var/s + sqr)` with `s = batch / init_batch` (Pollux's
/// statistical efficiency times `s`). Between 1 (`var = 0`: no gain from a larger batch) and `s`.
pub fn step_gain(grad_sqr: f64, grad_var: f64, batch: f64, init_batch: f64) -> f64 {
    let s = (batch / init_batch).max(1.0);
    let (sqr, var) = (grad_sqr.max(0.0), grad_var.max(0.0));
    if sqr + var <= 0.0 || !(sqr + var).is_finite() {
        return 1.0;
    }
    (var + sqr) / (var / s + sqr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_larger_batch_makes_more_progress_per_step_only_with_gradient_noise() {
        assert!(step_gain(1.0, 1.0, 256.0, 128.0) > 1.0 && step_gain(1.0, 0.0, 256.0, 128.0) == 1.0);
        assert_eq!(step_gain(1.0, 1.0, 64.0, 128.0), 1.0, "below the initial batch: one step's worth");
    }

    /// The machine-blind case is the model on one machine: serial part, parallel part and a
    /// synchronisation that grows with log2 of the workers; a state saved before `log_k`
    /// existed reads with none.
    #[test]
    fn the_machine_blind_case_is_one_machine_with_a_logarithmic_sync() {
        let p = PerfParams::machine_blind(0.2, 3.0, 0.07);
        for w in [1.0, 2.0, 5.0, 64.0, 4096.0] {
            let want: f64 = 0.2 + 3.0 / w + 0.07 * f64::log2(w);
            assert!((p.machine_blind_seconds(w) / want - 1.0).abs() < 1e-12, "{w}");
        }
        // Across machines the same logarithmic term applies (a machine-blind job sees no cliff).
        let two = Shape { machines: 2, replicas: 8 };
        assert!((p.step(two, 1.0 / 8.0) - p.machine_blind_seconds(8.0)).abs() < 1e-12);
        #[derive(serde::Serialize)]
        struct Old {
            alpha_c: f64,
            beta_c: f64,
            alpha_l: f64,
            beta_l: f64,
            alpha_n: f64,
            beta_n: f64,
            gamma: f64,
        }
        let old = Old { alpha_c: 0.1, beta_c: 0.01, alpha_l: 0.0, beta_l: 0.0, alpha_n: 0.0, beta_n: 0.0, gamma: 1.0 };
        let read: PerfParams = rmp_serde::from_slice(&rmp_serde::to_vec_named(&old).unwrap()).unwrap();
        assert_eq!(read, PerfParams { alpha_c: 0.1, ..PerfParams::PRIOR });
    }

    #[test]
    fn configure_accumulates_and_caps() {
        let l = BatchLimits { init_batch: 128, max_batch: 4096, min_local: 32, max_local: 1024 };
        assert_eq!(l.configure(128, 1), BatchConfig { batch: 128, local_bsz: 128, accum: 0 });
        assert_eq!(l.configure(128, 8), BatchConfig { batch: 256, local_bsz: 32, accum: 0 });
        assert_eq!(l.configure(4096, 2), BatchConfig { batch: 4096, local_bsz: 1024, accum: 1 });
        assert_eq!(l.configure(4096, 1), BatchConfig { batch: 4096, local_bsz: 1024, accum: 3 });
        assert!(l.configure(4096, 64).batch <= 4096 + 64 * 32);
        assert_eq!(l.grid().first(), Some(&128));
        assert_eq!(l.grid().last(), Some(&4096));
    }

    #[test]
    fn courier_picks_the_best_within_the_slo_else_the_fastest() {
        let l = BatchLimits { init_batch: 100, max_batch: 800, min_local: 1, max_local: 800 };
        let time = |c: &BatchConfig| 0.1 + 0.001 * f64::from(c.batch);
        let grads = Some((1.0, 10.0)); // noisy gradients: larger batches progress more per second
        let free = choose_batch(&[100, 200, 400, 800], 1, &l, grads, None, time).unwrap();
        assert_eq!(free.config.batch, 400); // 800 gains less than it costs
        let slo = choose_batch(&[100, 200, 400, 800], 1, &l, grads, Some(0.35), time).unwrap();
        assert_eq!(slo.config.batch, 200);
        assert!(slo.meets_slo && slo.iter_s <= 0.35);
        let none = choose_batch(&[100, 200, 400, 800], 1, &l, grads, Some(0.05), time).unwrap();
        assert_eq!(none.config.batch, 100);
        assert!(!none.meets_slo);
        // Without gradient statistics a larger batch gains nothing: the smallest wins.
        assert_eq!(choose_batch(&[100, 200, 400, 800], 1, &l, None, None, time).unwrap().config.batch, 100);
    }
}
