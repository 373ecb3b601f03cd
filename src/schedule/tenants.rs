//! Teams on one cluster (issue #32, first step): how many workers each tenant holds this epoch,
//! before its own jobs share them by quality ([`super::plan_epoch`] runs the count step inside
//! each tenant's quota).
//!
//! 1. **Guarantees.** Each tenant's `guaranteed` workers; guarantees that sum past the cluster
//!    are scaled down in proportion ([`scaled_guarantees`], largest remainder), never a panic.
//! 2. **Entitlement.** A tenant with demand gets up to its guarantee: `min(demand, guarantee)`,
//!    whatever others hold (taking it back from borrowers is the caller's reclaim).
//! 3. **Idle capacity.** The workers nobody is guaranteed, plus what each tenant lends of its
//!    idle guarantee: at most its `lend_limit` (the rest stays reserved for it, idle).
//! 4. **Borrowing.** That idle capacity goes, a worker at a time, to the tenant that wants more
//!    and has borrowed least per unit of `weight` (weighted max-min in whole workers), each up to
//!    its demand and its `borrow_limit`.
//!
//! [`resolve`] checks a configuration (`[tenants.<name>]`: [`TenantConfig`]) and turns it into
//! shares of a cluster, with a warning (not an error) when the guarantees exceed it.
//!
//! Pure and deterministic; property-tested below (caps, entitlement, lending, work conservation,
//! weights).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// What one tenant is promised (its configuration, in workers).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TenantShare {
    /// Workers it gets whenever it has the demand.
    pub guaranteed: u32,
    /// How idle capacity is split among the tenants that want more (> 0).
    pub weight: f64,
    /// How far above its guarantee it may go (`None`: no limit).
    pub borrow_limit: Option<u32>,
    /// How much of its idle guarantee others may use (`None`: all of it).
    pub lend_limit: Option<u32>,
}

impl TenantShare {
    /// A tenant with no guarantee and weight 1, borrowing and lending without limit.
    pub fn new(guaranteed: u32) -> Self {
        TenantShare { guaranteed, weight: 1.0, borrow_limit: None, lend_limit: None }
    }
}

/// One tenant as configured (`[tenants.<name>]`, issue #32): `guaranteed` in workers (an
/// integer) or as a fraction of the cluster (a number in [0, 1] with a point, e.g. `0.25`).
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    #[serde(default)]
    pub guaranteed: Guarantee,
    #[serde(default = "one")]
    pub weight: f64,
    #[serde(default)]
    pub borrow_limit: Option<u32>,
    #[serde(default)]
    pub lend_limit: Option<u32>,
    /// Seconds a borrower's job is given to stop gracefully when its workers are taken back.
    #[serde(default = "default_grace_s")]
    pub grace_s: f64,
    /// Seconds a job keeps workers it got between tenants both above their guarantees.
    #[serde(default)]
    pub min_run_s: f64,
    /// The highest priority class its jobs may claim (`JobSpec.priority` is capped to it):
    /// inside the tenant's quota a higher class is served first (issue #43).
    #[serde(default)]
    pub max_priority: u8,
    /// The largest weight its jobs may claim (`JobSpec.weight` is capped to it; default 1, so
    /// a job's weight counts only where its tenant allows): inside a class of the tenant's
    /// quota the policy shares in proportion to the jobs' weights (issue #43).
    #[serde(default = "one")]
    pub max_weight: f64,
}

impl TenantConfig {
    /// The class of a job of this tenant asking for `priority`.
    pub fn class_of(&self, priority: u8) -> u8 {
        priority.min(self.max_priority)
    }

    /// The weight of a job of this tenant asking for `weight` (a weight below 1 stands).
    pub fn weight_of(&self, weight: f64) -> f64 {
        weight.min(self.max_weight)
    }
}

fn one() -> f64 {
    1.0
}

fn default_grace_s() -> f64 {
    60.0
}

/// A guarantee: whole workers, or a fraction of the cluster.
#[derive(Clone, Copy, Debug, PartialEq, serde::Deserialize)]
#[serde(untagged)]
pub enum Guarantee {
    Workers(u32),
    Fraction(f64),
}

impl Default for Guarantee {
    fn default() -> Self {
        Guarantee::Workers(0)
    }
}

/// A tenant configuration the scheduler cannot use.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum TenantError {
    #[error("tenant {0:?}: a name is letters, digits, '-' and '_' (it is a NATS subject token)")]
    Name(String),
    #[error("tenant {name:?}: {problem}")]
    Invalid { name: String, problem: &'static str },
}

/// Tenants resolved on a cluster of a given size, in name order.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolved {
    pub names: Vec<String>,
    pub shares: Vec<TenantShare>,
    /// What the configuration asks that the cluster cannot give, said plainly (guarantees past
    /// the cluster are scaled down, not refused).
    pub warnings: Vec<String>,
}

/// Checks `tenants` and turns each into its share of a cluster of `cluster` workers.
pub fn resolve(
    cluster: u32,
    tenants: &std::collections::BTreeMap<String, TenantConfig>,
) -> Result<Resolved, TenantError> {
    let mut shares = Vec::with_capacity(tenants.len());
    for (name, t) in tenants {
        let invalid = |problem| TenantError::Invalid { name: name.clone(), problem };
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            return Err(TenantError::Name(name.clone()));
        }
        if !(t.weight.is_finite() && t.weight > 0.0) {
            return Err(invalid("weight must be a positive number"));
        }
        if !(t.max_weight.is_finite() && t.max_weight >= 1.0) {
            return Err(invalid("max_weight must be a number of at least 1"));
        }
        if !(t.grace_s.is_finite() && t.grace_s >= 0.0 && t.min_run_s.is_finite() && t.min_run_s >= 0.0) {
            return Err(invalid("grace_s and min_run_s must be seconds, 0 or more"));
        }
        let guaranteed = match t.guaranteed {
            Guarantee::Workers(w) => w,
            Guarantee::Fraction(f) if (0.0..=1.0).contains(&f) => (f * f64::from(cluster)).floor() as u32,
            Guarantee::Fraction(_) => return Err(invalid("a fractional guarantee must be in [0, 1]")),
        };
        shares.push(TenantShare {
            guaranteed,
            weight: t.weight,
            borrow_limit: t.borrow_limit,
            lend_limit: t.lend_limit,
        });
    }
    let names: Vec<String> = tenants.keys().cloned().collect();
    let asked: Vec<u32> = shares.iter().map(|s| s.guaranteed).collect();
    let total: u64 = asked.iter().map(|&g| u64::from(g)).sum();
    let mut warnings = Vec::new();
    if total > u64::from(cluster) {
        let scaled = scaled_guarantees(cluster, &asked);
        let each: Vec<String> =
            names.iter().zip(asked.iter().zip(&scaled)).map(|(n, (a, s))| format!("{n} {a} -> {s}")).collect();
        warnings.push(format!(
            "the guarantees sum to {total} workers on a cluster of {cluster}: each is scaled down in proportion ({})",
            each.join(", ")
        ));
    }
    Ok(Resolved { names, shares, warnings })
}

/// The tenants a scheduler serves (`[tenants]`, checked): their names in order, and each one's
/// configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct TenantSet {
    pub names: Vec<String>,
    pub configs: std::collections::BTreeMap<String, TenantConfig>,
}

impl TenantSet {
    /// Checks `configs` (on an example cluster: what a guarantee becomes depends on the
    /// cluster's size, which changes; [`Self::shares`] says it each time).
    pub fn new(configs: std::collections::BTreeMap<String, TenantConfig>) -> Result<Self, TenantError> {
        resolve(1024, &configs)?;
        Ok(TenantSet { names: configs.keys().cloned().collect(), configs })
    }

    /// The index of the tenant of job `job` (`TENANT.NAME`, or a one-token id: `default`), if
    /// it is one of these.
    pub fn index_of(&self, job: &str) -> Option<usize> {
        let tenant = crate::protocol::tenant_of(job).unwrap_or(crate::protocol::DEFAULT_TENANT);
        self.names.binary_search_by(|n| n.as_str().cmp(tenant)).ok()
    }

    /// The configuration of job `job`'s tenant, if it is one of these.
    pub fn config_of(&self, job: &str) -> Option<&TenantConfig> {
        self.configs.get(&self.names[self.index_of(job)?])
    }

    /// Each job's tenant, an index into `names` (`usize::MAX` for a tenant not served: such a
    /// job gets nothing).
    pub fn tenant_of<'j>(&self, jobs: impl Iterator<Item = &'j str>) -> Vec<usize> {
        jobs.map(|j| self.index_of(j).unwrap_or(usize::MAX)).collect()
    }

    /// Each tenant's workers as planned: `quotas` and the count of each job (`tenant_of[j]`).
    pub fn usage(
        &self,
        quotas: &Quotas,
        tenant_of: &[usize],
        class_of: &[u8],
        counts: &[u32],
    ) -> std::collections::BTreeMap<String, crate::protocol::TenantUse> {
        let mut out: std::collections::BTreeMap<String, crate::protocol::TenantUse> = self
            .names
            .iter()
            .enumerate()
            .map(|(t, name)| {
                let at = |v: &Vec<u32>| v.get(t).copied().unwrap_or(0);
                let use_ = crate::protocol::TenantUse {
                    guaranteed: at(&quotas.guaranteed),
                    quota: at(&quotas.workers),
                    borrowed: at(&quotas.borrowed),
                    lent: at(&quotas.lent),
                    ..Default::default()
                };
                (name.clone(), use_)
            })
            .collect();
        let class = |j: usize| class_of.get(j).copied().unwrap_or(0);
        let classed: Vec<bool> =
            (0..self.names.len()).map(|t| tenant_of.iter().enumerate().any(|(j, &o)| o == t && class(j) > 0)).collect();
        for (j, (&t, &c)) in tenant_of.iter().zip(counts).enumerate() {
            if let Some(u) = self.names.get(t).and_then(|name| out.get_mut(name)) {
                u.workers += c;
                u.jobs += 1;
                u.waiting += usize::from(c == 0);
                if classed[t] {
                    let k = u.classes.entry(class(j).to_string()).or_default();
                    k.workers += c;
                    k.jobs += 1;
                    k.waiting += usize::from(c == 0);
                }
            }
        }
        out
    }

    /// The shares on a cluster of `cluster` workers.
    pub fn shares(&self, cluster: u32) -> Resolved {
        // Checked in `new`: resolving cannot fail on any cluster.
        resolve(cluster, &self.configs).unwrap_or_else(|_| Resolved {
            names: self.names.clone(),
            shares: vec![TenantShare::new(0); self.names.len()],
            warnings: Vec::new(),
        })
    }
}

/// Each tenant's workers this epoch, and how they came about.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Quotas {
    /// Workers it holds: its entitlement plus what it borrowed.
    pub workers: Vec<u32>,
    /// Its guarantee as honoured (scaled down when the guarantees exceed the cluster).
    pub guaranteed: Vec<u32>,
    /// Workers above its guarantee.
    pub borrowed: Vec<u32>,
    /// Workers of its idle guarantee that others hold.
    pub lent: Vec<u32>,
}

/// The guarantees as the cluster can honour them: unchanged if they fit, else scaled down in
/// proportion, whole workers by largest remainder (ties to the lower index).
pub fn scaled_guarantees(cluster: u32, guaranteed: &[u32]) -> Vec<u32> {
    let total: u64 = guaranteed.iter().map(|&g| u64::from(g)).sum();
    if total <= u64::from(cluster) {
        return guaranteed.to_vec();
    }
    let exact: Vec<f64> = guaranteed.iter().map(|&g| f64::from(g) * f64::from(cluster) / total as f64).collect();
    let mut out: Vec<u32> = exact.iter().map(|x| x.floor() as u32).collect();
    let mut left = cluster - out.iter().sum::<u32>();
    let mut order: Vec<usize> = (0..exact.len()).collect();
    order.sort_by(|&a, &b| (exact[b] - exact[b].floor()).total_cmp(&(exact[a] - exact[a].floor())).then(a.cmp(&b)));
    for i in order {
        if left == 0 {
            break;
        }
        if out[i] < guaranteed[i] {
            out[i] += 1;
            left -= 1;
        }
    }
    out
}

/// A tenant's next borrowed worker, keyed by its borrowing per weight after it.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Next {
    key: f64,
    tenant: usize,
}

impl Eq for Next {}
impl PartialOrd for Next {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Next {
    fn cmp(&self, other: &Self) -> Ordering {
        // Least key first (a max-heap, reversed); ties to the lower tenant.
        other.key.total_cmp(&self.key).then(other.tenant.cmp(&self.tenant))
    }
}

/// Each tenant's workers on a cluster of `cluster` workers, given what its jobs could use
/// (`demand`, one per tenant); see the module documentation.
pub fn quotas(cluster: u32, tenants: &[TenantShare], demand: &[u32]) -> Quotas {
    quotas_holding(cluster, tenants, demand, &[])
}

/// Whether some tenant holds fewer workers than it is entitled to: `min(demand, guarantee)`,
/// the guarantees as `cluster` honours them ([`scaled_guarantees`]).
pub fn guarantee_owed(cluster: u32, tenants: &[TenantShare], demand: &[u32], held: &[u32]) -> bool {
    let promised: Vec<u32> = tenants.iter().map(|t| t.guaranteed).collect();
    let guaranteed = scaled_guarantees(cluster, &promised);
    guaranteed.iter().zip(demand).zip(held).any(|((&g, &d), &h)| h < g.min(d))
}

/// [`quotas`] with each tenant's `held` workers (one per tenant, or none): what its jobs hold
/// within their `min_run_s` (issue #43). Entitlements come first, as ever, so a guarantee is
/// restored through a hold; then each tenant keeps, of the idle capacity, what it holds above
/// its entitlement (up to its cap; if the pool no longer covers every hold, in proportion);
/// only the rest is split by weight. So a job is never rebalanced away between tenants both
/// above their guarantees within its `min_run_s`.
pub fn quotas_holding(cluster: u32, tenants: &[TenantShare], demand: &[u32], held: &[u32]) -> Quotas {
    debug_assert_eq!(tenants.len(), demand.len());
    let promised: Vec<u32> = tenants.iter().map(|t| t.guaranteed).collect();
    let guaranteed = scaled_guarantees(cluster, &promised);
    let entitled: Vec<u32> = guaranteed.iter().zip(demand).map(|(&g, &d)| g.min(d)).collect();
    let unguaranteed = cluster - guaranteed.iter().sum::<u32>();
    let lendable: Vec<u32> = tenants
        .iter()
        .zip(&guaranteed)
        .zip(&entitled)
        .map(|((t, &g), &e)| (g - e).min(t.lend_limit.unwrap_or(u32::MAX)))
        .collect();
    let pool = unguaranteed + lendable.iter().sum::<u32>();
    // Borrowing: a worker at a time to the least borrowed per weight among those wanting more.
    let cap: Vec<u32> = tenants
        .iter()
        .zip(&entitled)
        .zip(demand)
        .zip(&guaranteed)
        .map(|(((t, &e), &d), &g)| (d - e).min(g.saturating_add(t.borrow_limit.unwrap_or(u32::MAX)).saturating_sub(e)))
        .collect();
    let weight =
        |i: usize| if tenants[i].weight > 0.0 && tenants[i].weight.is_finite() { tenants[i].weight } else { 1.0 };
    let keep: Vec<u32> =
        (0..tenants.len()).map(|i| held.get(i).map_or(0, |&h| h.saturating_sub(entitled[i]).min(cap[i]))).collect();
    let mut borrowed = if keep.iter().sum::<u32>() <= pool { keep.clone() } else { scaled_guarantees(pool, &keep) };
    let mut heap: BinaryHeap<Next> = (0..tenants.len())
        .filter(|&i| cap[i] > borrowed[i])
        .map(|i| Next { key: f64::from(borrowed[i] + 1) / weight(i), tenant: i })
        .collect();
    let mut left = pool - borrowed.iter().sum::<u32>();
    while left > 0 {
        let Some(next) = heap.pop() else { break };
        let i = next.tenant;
        borrowed[i] += 1;
        left -= 1;
        if borrowed[i] < cap[i] {
            heap.push(Next { key: f64::from(borrowed[i] + 1) / weight(i), tenant: i });
        }
    }
    // What was borrowed beyond the unguaranteed workers came from the lenders, in proportion to
    // what each could lend (largest remainder).
    let from_lenders = borrowed.iter().sum::<u32>().saturating_sub(unguaranteed);
    let lent = if from_lenders == 0 { vec![0; tenants.len()] } else { scaled_guarantees(from_lenders, &lendable) };
    let workers = entitled.iter().zip(&borrowed).map(|(&e, &b)| e + b).collect();
    Quotas { workers, guaranteed, borrowed, lent }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn entitlement_first_then_idle_capacity_by_weight() {
        // 64 workers, A and B guaranteed 32 each. B alone wants all: it borrows A's idle 32.
        let ab = [TenantShare::new(32), TenantShare::new(32)];
        let q = quotas(64, &ab, &[0, 64]);
        assert_eq!((q.workers.clone(), q.borrowed.clone(), q.lent.clone()), (vec![0, 64], vec![0, 32], vec![32, 0]));
        // A comes back: it gets its 32, B keeps its own 32.
        assert_eq!(quotas(64, &ab, &[40, 64]).workers, vec![32, 32]);
        // A lends at most 24 of its idle guarantee: B stays at 32 + 24.
        let lender = [TenantShare { lend_limit: Some(24), ..TenantShare::new(32) }, TenantShare::new(32)];
        assert_eq!(quotas(64, &lender, &[0, 64]).workers, vec![0, 56]);
        // Three saturated tenants without guarantees, weights 1:1:2: 16/16/32 of 64.
        let w = |weight| TenantShare { weight, ..TenantShare::new(0) };
        assert_eq!(quotas(64, &[w(1.0), w(1.0), w(2.0)], &[64, 64, 64]).workers, vec![16, 16, 32]);
        // A borrow limit holds, and what it leaves goes to the others.
        let capped = [TenantShare { borrow_limit: Some(4), ..TenantShare::new(10) }, TenantShare::new(10)];
        assert_eq!(quotas(40, &capped, &[40, 40]).workers, vec![14, 26]);
    }

    #[test]
    fn holds_keep_borrowed_workers_but_never_a_guarantee() {
        // 8 workers, nobody guaranteed: A got all 8 while alone and holds them within its
        // min_run_s; B arrives wanting 8. Without the hold, 4 and 4; with it, A keeps its 8.
        let open = [TenantShare::new(0), TenantShare::new(0)];
        assert_eq!(quotas(8, &open, &[8, 8]).workers, vec![4, 4]);
        assert_eq!(quotas_holding(8, &open, &[8, 8], &[8, 0]).workers, vec![8, 0]);
        // A hold of 5: B gets the other 3, then the weights split nothing more.
        assert_eq!(quotas_holding(8, &open, &[8, 8], &[5, 0]).workers, vec![5, 3]);
        // A guarantee is restored through a hold: C, guaranteed 2, takes its 2 from A.
        let three = [TenantShare::new(0), TenantShare::new(0), TenantShare::new(2)];
        assert_eq!(quotas_holding(8, &three, &[8, 8, 2], &[8, 0, 0]).workers, vec![6, 0, 2]);
        // A hold counts only what it wants: a tenant wanting less keeps no more than it wants.
        assert_eq!(quotas_holding(8, &open, &[3, 8], &[8, 0]).workers, vec![3, 5]);
    }

    #[test]
    fn guarantees_past_the_cluster_are_scaled_down_in_proportion() {
        assert_eq!(scaled_guarantees(64, &[48, 48]), vec![32, 32]);
        assert_eq!(scaled_guarantees(10, &[5, 5, 5]), vec![4, 3, 3]);
        assert_eq!(scaled_guarantees(10, &[3, 4]), vec![3, 4]);
        assert_eq!(quotas(10, &[TenantShare::new(20), TenantShare::new(0)], &[10, 10]).workers, vec![10, 0]);
    }

    #[test]
    fn a_configuration_resolves_with_clear_errors_and_a_warning_for_too_much_guaranteed() {
        let parse = |text: &str| toml::from_str::<std::collections::BTreeMap<String, TenantConfig>>(text);
        let tenants = parse(
            "[vision]\nguaranteed = 0.5\nweight = 2\nlend_limit = 8\n[nlp]\nguaranteed = 16\nborrow_limit = 4\ngrace_s = 30\n",
        )
        .unwrap();
        let r = resolve(64, &tenants).unwrap();
        assert_eq!(r.names, ["nlp", "vision"]);
        assert_eq!(r.shares[0], TenantShare { guaranteed: 16, weight: 1.0, borrow_limit: Some(4), lend_limit: None });
        assert_eq!(r.shares[1], TenantShare { guaranteed: 32, weight: 2.0, borrow_limit: None, lend_limit: Some(8) });
        assert!(r.warnings.is_empty());
        assert_eq!(tenants["nlp"].grace_s, 30.0);
        assert_eq!(tenants["vision"].grace_s, 60.0);
        // Too much guaranteed: a warning that says what each becomes.
        let r = resolve(24, &tenants).unwrap();
        assert_eq!(r.warnings.len(), 1);
        assert!(r.warnings[0].contains("sum to 28 workers on a cluster of 24"), "{:?}", r.warnings);
        assert!(r.warnings[0].contains("nlp 16 -> 14, vision 12 -> 10"), "{:?}", r.warnings);
        // Clear errors.
        assert!(parse("[a]\nguaranted = 3\n").is_err(), "unknown keys are errors");
        let bad = |text: &str| resolve(64, &parse(text).unwrap()).unwrap_err().to_string();
        assert!(bad("[a]\nweight = 0\n").contains("weight"));
        assert!(bad("[a]\nguaranteed = 1.5\n").contains("[0, 1]"));
        assert!(bad("[\"a.b\"]\nguaranteed = 1\n").contains("subject token"));
        assert!(bad("[a]\ngrace_s = -1\n").contains("grace_s"));
    }

    fn tenant() -> impl Strategy<Value = (TenantShare, u32)> {
        (0u32..40, 1u32..5, prop::option::of(0u32..30), prop::option::of(0u32..30), 0u32..80).prop_map(
            |(guaranteed, weight, borrow_limit, lend_limit, demand)| {
                (TenantShare { guaranteed, weight: f64::from(weight), borrow_limit, lend_limit }, demand)
            },
        )
    }

    proptest! {
        #[test]
        fn quotas_keep_every_promise(cluster in 0u32..120, ts in prop::collection::vec(tenant(), 1..6)) {
            let tenants: Vec<TenantShare> = ts.iter().map(|t| t.0).collect();
            let demand: Vec<u32> = ts.iter().map(|t| t.1).collect();
            let q = quotas(cluster, &tenants, &demand);
            prop_assert!(q.workers.iter().sum::<u32>() <= cluster);
            prop_assert!(q.guaranteed.iter().sum::<u32>() <= cluster);
            let mut lendable_total = 0;
            for (i, t) in tenants.iter().enumerate() {
                let g = q.guaranteed[i];
                // Entitlement: every tenant holds min(demand, guarantee).
                prop_assert!(q.workers[i] >= demand[i].min(g), "tenant {i} below its entitlement: {q:?}");
                // Caps: never above its demand, nor its guarantee plus its borrow limit.
                prop_assert!(q.workers[i] <= demand[i]);
                if let Some(limit) = t.borrow_limit {
                    prop_assert!(q.workers[i] <= g + limit, "tenant {i} past its borrow limit: {q:?}");
                }
                // Lending: never beyond its idle guarantee, nor its lend limit.
                let idle = g - demand[i].min(g);
                let lendable = idle.min(t.lend_limit.unwrap_or(u32::MAX));
                prop_assert!(q.lent[i] <= lendable, "tenant {i} lent {} of {lendable}: {q:?}", q.lent[i]);
                lendable_total += lendable;
                prop_assert_eq!(q.borrowed[i], q.workers[i] - demand[i].min(g));
            }
            // Work conservation: a tenant left wanting (below its demand and its cap) means the
            // idle capacity is all out.
            let pool = cluster - q.guaranteed.iter().sum::<u32>() + lendable_total;
            let wanting = tenants.iter().enumerate().any(|(i, t)| {
                q.workers[i] < demand[i] && t.borrow_limit.is_none_or(|l| q.workers[i] < q.guaranteed[i] + l)
            });
            if wanting {
                prop_assert_eq!(q.borrowed.iter().sum::<u32>(), pool);
            }
            // Weights: of two tenants both still wanting, neither borrowed more per weight than
            // the other would after one more worker.
            for i in 0..tenants.len() {
                for j in 0..tenants.len() {
                    let still = |k: usize| q.workers[k] < demand[k]
                        && tenants[k].borrow_limit.is_none_or(|l| q.workers[k] < q.guaranteed[k] + l);
                    if i != j && still(i) && still(j) {
                        let (wi, wj) = (tenants[i].weight, tenants[j].weight);
                        prop_assert!(f64::from(q.borrowed[i]) / wi <= f64::from(q.borrowed[j] + 1) / wj + 1e-9);
                    }
                }
            }
        }
    }
}
