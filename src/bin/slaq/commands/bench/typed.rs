//! `slaq bench alloc --types N`: the typed decisions (issue #31), and with four tenants
//! (issue #43: each tenant's jobs capped by its quota, whole options searched).

/// The typed decisions' setting: `workers` split evenly over `types` worker types, timed
/// `runs` times.
pub(super) struct Setting {
    pub workers: u32,
    pub types: usize,
    pub runs: usize,
}

/// Times the typed count step on `types` worker types (the workers split evenly): each job
/// runs on type `t` at a speed of its own (`0.25..1` times its speed on type 0, drawn from its
/// index), at sizes 1, 2, 4 and 8, with a restart priced on every option but its current one.
pub(super) fn typed_decisions(
    predictors: &[slaq::quality::JobPredictor],
    setting: &Setting,
    epoch_s: f64,
) -> anyhow::Result<serde_json::Value> {
    use slaq::schedule::typed::{Groups, TypeGains, TypedJob, allocate, allocate_exact, allocate_exact_in};
    use std::time::Instant;
    let types = setting.types;
    let mut capacity = vec![setting.workers / types as u32; types];
    capacity[0] += setting.workers % types as u32;
    let speed = |j: usize, t: usize| {
        if t == 0 { 1.0 } else { 0.25 + 0.75 * (((j * 7919 + t * 104_729) % 1000) as f64 / 1000.0) }
    };
    let (mut greedy_ms, mut exact_ms, mut build_ms, mut tenants_ms) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    // Four tenants, job `j` of tenant `j % 4`, each capped at a quarter of the cluster.
    let tenant_of: Vec<usize> = (0..predictors.len()).map(|j| j % 4).collect();
    let quota = vec![setting.workers / 4; 4];
    let mut tenants_used = 0;
    let (mut greedy_gain, mut exact_gain) = (0.0, 0.0);
    for run in 0..setting.runs {
        let start = Instant::now();
        let jobs: Vec<TypedJob> = predictors
            .iter()
            .enumerate()
            .map(|(j, p)| {
                let current = (j + run) % types;
                let curve = p.gain_curve(epoch_s, 1);
                let options = (0..types)
                    .map(|t| {
                        let curve = curve.as_ref()?;
                        let sizes = vec![1, 2, 4, 8];
                        let keep = |k: u32| if t == current && k == 1 { 1.0 } else { 0.9 };
                        let gains =
                            sizes.iter().map(|&k| curve.gain_of(curve.iterations(k) * speed(j, t)) * keep(k)).collect();
                        Some(TypeGains { sizes, gains })
                    })
                    .collect();
                TypedJob { options, grant: None, attained: 0.0 }
            })
            .collect();
        let built = Instant::now();
        let greedy = allocate(&jobs, &capacity);
        let greedy_done = Instant::now();
        let exact = allocate_exact(&jobs, &capacity);
        let exact_done = Instant::now();
        let grouped = allocate_exact_in(&jobs, &capacity, Groups { of: &tenant_of, cap: &quota });
        tenants_ms.push(exact_done.elapsed().as_secs_f64() * 1e3);
        tenants_used = grouped.iter().flatten().map(|x| x.1).sum::<u32>();
        let value = |a: &[Option<(usize, u32)>]| total_gain(&jobs, a);
        for (t, &cap) in capacity.iter().enumerate() {
            for a in [&greedy, &exact] {
                let used: u32 = a.iter().flatten().filter(|x| x.0 == t).map(|x| x.1).sum();
                anyhow::ensure!(used <= cap, "type {t}: {used} workers of {cap}");
            }
        }
        (greedy_gain, exact_gain) = (value(&greedy), value(&exact));
        build_ms.push((built - start).as_secs_f64() * 1e3);
        greedy_ms.push((greedy_done - built).as_secs_f64() * 1e3);
        exact_ms.push((exact_done - greedy_done).as_secs_f64() * 1e3);
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    Ok(serde_json::json!({
        "options_ms": median(build_ms),
        "greedy_ms": median(greedy_ms),
        "exact_ms": median(exact_ms),
        // Above this many jobs the exact step is the greedy.
        "exact_max_jobs": slaq::schedule::typed::EXACT_MAX_JOBS,
        "tenants_ms": median(tenants_ms),
        "tenants_workers_assigned": tenants_used,
        "greedy_total_gain": greedy_gain,
        "exact_total_gain": exact_gain,
    }))
}

/// The gains of an allocation's choices, summed.
fn total_gain(jobs: &[slaq::schedule::typed::TypedJob], a: &[Option<(usize, u32)>]) -> f64 {
    a.iter()
        .zip(jobs)
        .filter_map(|(x, job)| {
            let (t, k) = (*x)?;
            let g = job.options[t].as_ref()?;
            Some(g.gains[g.sizes.iter().position(|&s| s == k)?])
        })
        .sum()
}
