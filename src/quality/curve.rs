//! Loss-curve families and their weighted least-squares fits.
//!
//! Every family here is linear in all parameters but one, so a fit is a one-dimensional search
//! over that parameter with a closed-form weighted linear least-squares solve inside
//! (variable projection). That costs a few microseconds per fit, which is what lets every job be
//! refitted every epoch at thousands of jobs, and it needs no general nonlinear solver.
//!
//! Iterations are measured relative to an anchor `k0` (the newest point of the window), which
//! keeps the exponential and polynomial bases well conditioned whatever the job's iteration count.

/// A fitted loss curve: predicts the loss at (fractional) iteration `k`.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Curve {
    /// `d + a·exp(−λ·(k − k0))`: linear convergence, SLAQ's `μ^k` family with `μ = e^{−λ}`.
    Exponential { d: f64, a: f64, lambda: f64, k0: f64 },
    /// `d + a·k^(−p)`: sublinear convergence (SGD-like), `k` the absolute iteration.
    Power { d: f64, a: f64, p: f64 },
    /// `d + 1/(a·t² + b·t + c)` with `t = (k − k0)/s`: SLAQ's sublinear `1/(a·k²+b·k+c)+d`.
    /// Where the quadratic would turn down (a pole ahead) it is held at its peak, so the curve
    /// flattens instead of blowing up.
    InverseQuadratic { a: f64, b: f64, c: f64, d: f64, k0: f64, s: f64 },
}

impl Curve {
    /// The predicted loss at iteration `k` (same numbering as the points it was fitted on).
    pub fn eval(&self, k: f64) -> f64 {
        match *self {
            Curve::Exponential { d, a, lambda, k0 } => d + a * (-lambda * (k - k0)).exp(),
            Curve::Power { d, a, p } => d + a * k.max(1.0).powf(-p),
            Curve::InverseQuadratic { a, b, c, d, k0, s } => {
                let mut t = (k - k0) / s;
                if a < 0.0 {
                    // Past the vertex the denominator falls towards a pole: hold it at the peak.
                    let vertex = -b / (2.0 * a);
                    if t > vertex {
                        t = vertex;
                    }
                }
                let q = (a * t + b) * t + c;
                if q > 0.0 { d + 1.0 / q } else { d }
            }
        }
    }

    /// The family's name, for reports.
    pub fn family(&self) -> &'static str {
        match self {
            Curve::Exponential { .. } => "exponential",
            Curve::Power { .. } => "power",
            Curve::InverseQuadratic { .. } => "inverse-quadratic",
        }
    }
}

/// Which family to fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Family {
    Exponential,
    Power,
    InverseQuadratic,
}

/// Points to fit: iterations, losses and weights, all the same length.
#[derive(Clone, Copy, Debug)]
pub struct Points<'a> {
    pub iters: &'a [f64],
    pub losses: &'a [f64],
    pub weights: &'a [f64],
}

/// A fit and its weighted sum of squared residuals.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fit {
    pub curve: Curve,
    pub weighted_sse: f64,
}

/// Fits `family` to `points`; `None` when there are too few points or the fit degenerates.
pub fn fit(family: Family, points: Points<'_>) -> Option<Fit> {
    debug_assert_eq!(points.iters.len(), points.losses.len());
    debug_assert_eq!(points.iters.len(), points.weights.len());
    if points.iters.len() < 3 {
        return None;
    }
    match family {
        Family::Exponential => fit_exponential(points),
        Family::Power => fit_power(points),
        Family::InverseQuadratic => fit_inverse_quadratic(points),
    }
}

/// Weighted least squares of `y ≈ d + a·φ` for fixed basis values `φ_i`: returns `(d, a, sse)`.
fn solve_affine(points: Points<'_>, basis: &[f64]) -> Option<(f64, f64, f64)> {
    let (mut sw, mut sp, mut sy) = (0.0, 0.0, 0.0);
    for ((&p, &y), &w) in basis.iter().zip(points.losses).zip(points.weights) {
        sw += w;
        sp += w * p;
        sy += w * y;
    }
    if sw <= 0.0 {
        return None;
    }
    let (mp, my) = (sp / sw, sy / sw);
    let (mut spp, mut spy, mut syy) = (0.0, 0.0, 0.0);
    for ((&p, &y), &w) in basis.iter().zip(points.losses).zip(points.weights) {
        let (dp, dy) = (p - mp, y - my);
        spp += w * dp * dp;
        spy += w * dp * dy;
        syy += w * dy * dy;
    }
    if spp.is_nan() || spp <= 1e-300 {
        return None;
    }
    let a = spy / spp;
    let d = my - a * mp;
    let sse = (syy - a * spy).max(0.0);
    (a.is_finite() && d.is_finite()).then_some((d, a, sse))
}

/// Fits `y ≈ d + a·exp(θ·u_i)` for the best `θ` in `[lo, hi]` (searched on a log scale of |θ|,
/// with `sign` giving θ's sign). Returns `(|θ|, d, a, sse)`.
fn fit_exp_basis(points: Points<'_>, u: &[f64], sign: f64, lo: f64, hi: f64) -> Option<(f64, f64, f64, f64)> {
    let mut basis = vec![0.0; u.len()];
    let mut sse_at = |theta: f64| {
        for (b, &x) in basis.iter_mut().zip(u) {
            *b = (sign * theta * x).exp();
        }
        solve_affine(points, &basis).map_or(f64::INFINITY, |(_, _, sse)| sse)
    };
    let (theta, _) = search_log(lo, hi, GRID, &mut sse_at)?;
    let basis: Vec<f64> = u.iter().map(|&x| (sign * theta * x).exp()).collect();
    let (d, a, sse) = solve_affine(points, &basis)?;
    Some((theta, d, a, sse))
}

/// Grid points of the one-dimensional searches (then refined by golden section).
const GRID: usize = 14;
/// Golden-section steps after the grid.
const GOLDEN_STEPS: usize = 18;

/// Minimises `objective` over `[lo, hi]` on a log grid, then refines by golden-section search
/// around the best grid point. Returns the best argument and value.
fn search_log(lo: f64, hi: f64, grid: usize, mut objective: impl FnMut(f64) -> f64) -> Option<(f64, f64)> {
    let (llo, lhi) = (lo.ln(), hi.ln());
    let at = |i: usize| (llo + (lhi - llo) * i as f64 / (grid - 1) as f64).exp();
    let mut best: Option<(usize, f64)> = None;
    for i in 0..grid {
        let v = objective(at(i));
        if v.is_finite() && best.is_none_or(|(_, b)| v < b) {
            best = Some((i, v));
        }
    }
    let (i, mut best_value) = best?;
    let mut best_arg = at(i);
    // Golden-section search in log space between the neighbours of the best grid point.
    let (mut a, mut b) = (at(i.saturating_sub(1)).ln(), at((i + 1).min(grid - 1)).ln());
    const INV_PHI: f64 = 0.618_033_988_749_895;
    let mut f = |x: f64| {
        let v = objective(x.exp());
        if v.is_finite() { v } else { f64::INFINITY }
    };
    let mut c = b - INV_PHI * (b - a);
    let mut d = a + INV_PHI * (b - a);
    let (mut fc, mut fd) = (f(c), f(d));
    for _ in 0..GOLDEN_STEPS {
        if fc < fd {
            b = d;
            d = c;
            fd = fc;
            c = b - INV_PHI * (b - a);
            fc = f(c);
        } else {
            a = c;
            c = d;
            fc = fd;
            d = a + INV_PHI * (b - a);
            fd = f(d);
        }
    }
    for (x, v) in [(c, fc), (d, fd)] {
        if v < best_value {
            best_value = v;
            best_arg = x.exp();
        }
    }
    Some((best_arg, best_value))
}

fn newest_iter(points: Points<'_>) -> f64 {
    points.iters.last().copied().unwrap_or(0.0)
}

fn fit_exponential(points: Points<'_>) -> Option<Fit> {
    let k0 = newest_iter(points);
    let u: Vec<f64> = points.iters.iter().map(|&k| k - k0).collect();
    let (lambda, d, a, weighted_sse) = fit_exp_basis(points, &u, -1.0, 1e-4, 3.0)?;
    Some(Fit { curve: Curve::Exponential { d, a, lambda, k0 }, weighted_sse })
}

fn fit_power(points: Points<'_>) -> Option<Fit> {
    // k^(−p) = exp(−p·ln k)
    let u: Vec<f64> = points.iters.iter().map(|&k| k.max(1.0).ln()).collect();
    let (p, d, a, weighted_sse) = fit_exp_basis(points, &u, -1.0, 0.02, 4.0)?;
    Some(Fit { curve: Curve::Power { d, a, p }, weighted_sse })
}

/// Solves the 3×3 symmetric system `m·x = r` by Gaussian elimination with partial pivoting.
pub(crate) fn solve3(mut m: [[f64; 3]; 3], mut r: [f64; 3]) -> Option<[f64; 3]> {
    for col in 0..3 {
        let pivot = (col..3).max_by(|&i, &j| m[i][col].abs().total_cmp(&m[j][col].abs()))?;
        if m[pivot][col].abs() < 1e-300 {
            return None;
        }
        m.swap(col, pivot);
        r.swap(col, pivot);
        for row in col + 1..3 {
            let factor = m[row][col] / m[col][col];
            let pivot_row = m[col];
            for (v, p) in m[row].iter_mut().zip(pivot_row).skip(col) {
                *v -= factor * p;
            }
            r[row] -= factor * r[col];
        }
    }
    let mut x = [0.0; 3];
    for row in (0..3).rev() {
        let tail: f64 = (row + 1..3).map(|k| m[row][k] * x[k]).sum();
        x[row] = (r[row] - tail) / m[row][row];
    }
    x.iter().all(|v| v.is_finite()).then_some(x)
}

fn fit_inverse_quadratic(points: Points<'_>) -> Option<Fit> {
    let k0 = newest_iter(points);
    let first = points.iters.first().copied().unwrap_or(k0);
    let s = (k0 - first).max(1.0);
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for &y in points.losses {
        lo = lo.min(y);
        hi = hi.max(y);
    }
    let range = (hi - lo).max(lo.abs() * 1e-9).max(1e-300);
    // For a fixed asymptote d, 1/(y − d) is a quadratic in t: a linear fit, weighted by
    // (y − d)^4 so that residuals are measured in loss units (delta method).
    let curve_at = |delta: f64| -> Option<(Curve, f64)> {
        let d = lo - delta * range;
        let mut m = [[0.0; 3]; 3];
        let mut r = [0.0; 3];
        for ((&k, &y), &w) in points.iters.iter().zip(points.losses).zip(points.weights) {
            let gap = y - d;
            let t = (k - k0) / s;
            let basis = [t * t, t, 1.0];
            let wz = w * gap.powi(4);
            let z = 1.0 / gap;
            for i in 0..3 {
                for j in 0..3 {
                    m[i][j] += wz * basis[i] * basis[j];
                }
                r[i] += wz * basis[i] * z;
            }
        }
        let [a, b, c] = solve3(m, r)?;
        let curve = Curve::InverseQuadratic { a, b, c, d, k0, s };
        let mut sse = 0.0;
        for ((&k, &y), &w) in points.iters.iter().zip(points.losses).zip(points.weights) {
            let t = (k - k0) / s;
            if (a * t + b) * t + c <= 0.0 {
                return None;
            }
            let e = y - curve.eval(k);
            sse += w * e * e;
        }
        Some((curve, sse))
    };
    let (delta, _) = search_log(1e-3, 1e3, GRID, |delta| curve_at(delta).map_or(f64::INFINITY, |c| c.1))?;
    let (curve, weighted_sse) = curve_at(delta)?;
    Some(Fit { curve, weighted_sse })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(family: Family, truth: impl Fn(f64) -> f64, ahead: f64, tolerance: f64) {
        let iters: Vec<f64> = (1..=40).map(f64::from).collect();
        let losses: Vec<f64> = iters.iter().map(|&k| truth(k)).collect();
        let weights: Vec<f64> = (0..40).map(|i| 0.95f64.powi(39 - i)).collect();
        let fit = fit(family, Points { iters: &iters, losses: &losses, weights: &weights })
            .expect("fit succeeds on a clean curve");
        let k = 40.0 + ahead;
        let error = (fit.curve.eval(k) - truth(k)).abs() / truth(k).abs();
        assert!(error < tolerance, "{family:?} {ahead} ahead: error {error} with {:?}", fit.curve);
    }

    #[test]
    fn exponential_recovers_linear_convergence() {
        check(Family::Exponential, |k| 0.3 + 2.0 * 0.9f64.powf(k), 50.0, 1e-4);
    }

    #[test]
    fn power_recovers_sublinear_convergence() {
        check(Family::Power, |k| 0.1 + 3.0 * k.powf(-0.7), 50.0, 1e-4);
    }

    #[test]
    fn inverse_quadratic_recovers_its_family() {
        check(Family::InverseQuadratic, |k| 0.5 + 1.0 / (0.01 * k * k + 0.2 * k + 1.0), 50.0, 1e-4);
    }

    #[test]
    fn inverse_quadratic_never_predicts_through_a_pole() {
        let curve = Curve::InverseQuadratic { a: -1.0, b: 1.0, c: 1.0, d: 0.0, k0: 0.0, s: 1.0 };
        for k in 0..100 {
            let v = curve.eval(f64::from(k));
            assert!(v.is_finite() && v > 0.0, "at {k}: {v}");
        }
    }

    #[test]
    fn too_few_points_give_no_fit() {
        let p = Points { iters: &[1.0, 2.0], losses: &[1.0, 0.5], weights: &[1.0, 1.0] };
        assert!(fit(Family::Exponential, p).is_none());
    }

    #[test]
    fn constant_curve_does_not_blow_up() {
        let iters: Vec<f64> = (1..=10).map(f64::from).collect();
        let losses = vec![2.0; 10];
        let weights = vec![1.0; 10];
        // Every family fits a flat loss (as its plateau) and predicts it ahead, finite.
        for family in [Family::Exponential, Family::Power, Family::InverseQuadratic] {
            let fitted = fit(family, Points { iters: &iters, losses: &losses, weights: &weights });
            let fit = fitted.unwrap_or_else(|| panic!("{family:?} does not fit a constant"));
            let v = fit.curve.eval(60.0);
            assert!((v - 2.0).abs() < 1e-6, "{family:?}: {v}");
        }
    }

    #[test]
    fn solve3_solves() {
        let x = solve3([[2.0, 1.0, 0.0], [1.0, 3.0, 1.0], [0.0, 1.0, 4.0]], [3.0, 5.0, 5.0]).unwrap();
        for (got, want) in x.iter().zip([1.0, 1.0, 1.0]) {
            assert!((got - want).abs() < 1e-12);
        }
    }
}
