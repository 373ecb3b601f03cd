//! Steps 1 and 2 of [`super::plan_epoch`] on several worker types (issue #31), with tenants
//! (issue #43): each job's type and count, inside the tenants' quotas where there are tenants.

use crate::policy::{ByRef, GainFn, JobBid, PolicyKind, Problem};
use crate::schedule::counts::{FloorLedger, book, fair_shares, floors, honoured_minimums};
use crate::schedule::slowdown::{Pace, Rates};
use crate::schedule::tenants::{Quotas, scaled_guarantees};
use crate::schedule::typed::{
    Groups, TypeGains, TypedAllocation, TypedJob, allocate_exact_in, best_gains, fair_by_fit,
};

use super::{EpochInput, EpochJob, Tenancy, Types, bids_of, sub_jobs, workers};

/// Steps 1 and 2 on several worker types: each job's type and count ([`typed_counts`], inside
/// the tenants' quotas with tenants: [`typed_tenant_counts`]), then on each type its workers
/// as step 2 does.
pub(super) fn typed_plan<G: GainFn>(
    input: &EpochInput<'_, G>,
    types: &Types<'_>,
    ledgers: &mut [FloorLedger],
) -> (Vec<u32>, Vec<Option<usize>>, Option<Quotas>) {
    let (chosen, quotas) = match input.tenants {
        Some(tenancy) => {
            let (chosen, q) = typed_tenant_counts(input, types, &tenancy, ledgers);
            (chosen, Some(q))
        }
        None => (typed_counts(input, types, ledgers, None), None),
    };
    let counts: Vec<u32> = chosen.iter().map(|c| c.map_or(0, |x| x.1)).collect();
    let num_types = types.type_of.iter().max().map_or(0, |m| m + 1);
    let mut next = vec![None; input.current.len()];
    for t in 0..num_types {
        let members: Vec<usize> = (0..types.type_of.len()).filter(|&w| types.type_of[w] == t).collect();
        let counts_t: Vec<u32> = chosen.iter().map(|c| c.filter(|x| x.0 == t).map_or(0, |x| x.1)).collect();
        let current_t: Vec<Option<usize>> = members.iter().map(|&w| input.current[w]).collect();
        let machines_t: Option<Vec<usize>> = input.machine_of.map(|m| members.iter().map(|&w| m[w]).collect());
        let sub = EpochInput {
            policy: input.policy,
            plan: input.plan,
            place: input.place,
            jobs: input.jobs,
            machine_of: machines_t.as_deref(),
            current: &current_t,
            held: None,
            seed: input.seed,
            types: None,
            tenants: None,
            special: input.special,
        };
        let moved = workers(&sub, &counts_t);
        for (&w, &job) in members.iter().zip(moved.as_deref().unwrap_or(&current_t)) {
            next[w] = job;
        }
    }
    (counts, next, quotas)
}

/// Step 1 with tenants on several worker types: each tenant's quota as on one type (a
/// guarantee is workers, of whatever type; `Tenancy::within_quotas`, shared with one type),
/// [`typed_in_quotas`] inside them, then [`top_up`].
fn typed_tenant_counts<G: GainFn>(
    input: &EpochInput<'_, G>,
    types: &Types<'_>,
    tenancy: &Tenancy<'_>,
    ledgers: &mut [FloorLedger],
) -> (TypedAllocation, Quotas) {
    let num_workers = u32::try_from(types.type_of.len()).unwrap_or(u32::MAX);
    let demand = tenancy.demands(input.jobs, num_workers);
    let promised: Vec<u32> = tenancy.shares.iter().map(|t| t.guaranteed).collect();
    let entitled: Vec<u32> =
        scaled_guarantees(num_workers, &promised).iter().zip(&demand).map(|(&g, &d)| g.min(d)).collect();
    let plan = |q: &Quotas, ledgers: &mut [FloorLedger]| {
        let mut out = typed_in_quotas(input, types, tenancy, q, ledgers);
        top_up(input, types, tenancy, &entitled, &mut out);
        out
    };
    // What a short tenant took of the idle workers is its own (within its entitlement).
    tenancy.within_quotas(num_workers, demand, ledgers, plan, |out, j| out[j].map_or(0, |x| x.1))
}

/// Workers of each type.
fn per_type(types: &Types<'_>) -> Vec<u32> {
    let mut count = vec![0u32; types.type_of.iter().max().map_or(0, |m| m + 1)];
    for &t in types.type_of {
        count[t] += 1;
    }
    count
}

/// On types a tenant's jobs may use less than its quota where the types they run on are
/// full (its demand is then lowered, as on one type, and the rest goes to others): any worker
/// still idle that a job of a tenant short of its entitlement (`min(demand, guarantee)`) can
/// run on goes to it, the least served job first, so a guarantee is never short while a worker
/// it could use idles.
fn top_up<G>(
    input: &EpochInput<'_, G>,
    types: &Types<'_>,
    tenancy: &Tenancy<'_>,
    entitled: &[u32],
    out: &mut TypedAllocation,
) {
    let mut idle = per_type(types);
    let num_types = idle.len();
    let mut held = vec![0u32; tenancy.shares.len()];
    for (j, &(t, k)) in out.iter().enumerate().filter_map(|(j, c)| c.as_ref().map(|c| (j, c))) {
        idle[t] -= k;
        if let Some(g) = tenancy.of(j) {
            held[g] += k;
        }
    }
    let mut order: Vec<usize> = (0..input.jobs.len()).filter(|&j| tenancy.of(j).is_some()).collect();
    order.sort_by(|&a, &b| {
        input.jobs[a].bid.attained_service.total_cmp(&input.jobs[b].bid.attained_service).then(a.cmp(&b))
    });
    let runs = |j: usize, t: usize| types.speeds.get(j).and_then(|s| s.get(t)).copied().unwrap_or(1.0) > 0.0;
    for j in order {
        let Some(g) = tenancy.of(j) else { continue };
        let short = entitled.get(g).copied().unwrap_or(0).saturating_sub(held[g]);
        let job = &input.jobs[j];
        let allowed = |k: u32| k <= job.bid.max_workers && job.sizes.is_none_or(|s| s.contains(&k));
        let (from, on): (u32, Vec<usize>) = match out[j] {
            Some((t, k)) => (k, vec![t]),
            None => (0, (0..num_types).filter(|&t| runs(j, t)).collect()),
        };
        let best = on
            .into_iter()
            .filter_map(|t| (from + 1..=from + short.min(idle[t])).rev().find(|&k| allowed(k)).map(|k| (k, idle[t], t)))
            .max_by_key(|&(k, free, t)| (k, free, std::cmp::Reverse(t)));
        if let Some((k, _, t)) = best {
            idle[t] -= k - from;
            held[g] += k - from;
            out[j] = Some((t, k));
        }
    }
}

/// The typed count step inside the tenants' quotas: one allocation of every tenant's jobs, each
/// tenant's jobs together held to its quota ([`super::typed::allocate_exact_in`]'s groups).
/// Workers come first: a worker to any job is worth more than all gains together, so the
/// allocation fills every quota its jobs can use, on one type each; inside a tenant its
/// higher classes first (a worker to a job of class `c` is worth `c + 1` such units); then the
/// gains decide which types. Counts are isolated as on one type (no tenant past its quota, and
/// the quotas fit the cluster); which types each tenant's jobs get is decided with the
/// others' (one allocation, so a class never takes a type from another tenant's job that its
/// own job could do without). A guarantee counts workers: a job that would run faster on
/// fewer fast workers than on its tenant's share of slow ones still gets the share.
fn typed_in_quotas<G: GainFn>(
    input: &EpochInput<'_, G>,
    types: &Types<'_>,
    tenancy: &Tenancy<'_>,
    quotas: &Quotas,
    ledgers: &mut [FloorLedger],
) -> TypedAllocation {
    let round: Vec<usize> = (0..input.jobs.len()).filter(|&j| tenancy.of(j).is_some()).collect();
    let group_of: Vec<usize> = round.iter().filter_map(|&j| tenancy.of(j)).collect();
    let class_of: Vec<u8> = round.iter().map(|&j| tenancy.class_of.get(j).copied().unwrap_or(0)).collect();
    let capacity = per_type(types);
    let room =
        TypedRoom { capacity: &capacity, groups: Groups { of: &group_of, cap: &quotas.workers }, class_of: &class_of };
    let mut out: TypedAllocation = vec![None; input.jobs.len()];
    for (&j, got) in round.iter().zip(typed_round(input, types, &round, room, ledgers)) {
        out[j] = got;
    }
    out
}

/// [`typed_counts`] on the jobs `round` alone (their indices, floor ledgers, speeds, workers
/// held and types to explore carried over) within `room`; their choices in `round`'s order.
fn typed_round<G: GainFn>(
    input: &EpochInput<'_, G>,
    types: &Types<'_>,
    round: &[usize],
    room: TypedRoom<'_>,
    ledgers: &mut [FloorLedger],
) -> TypedAllocation {
    let mut pos = vec![None; input.jobs.len()];
    for (i, &j) in round.iter().enumerate() {
        pos[j] = Some(i);
    }
    let jobs = sub_jobs(input, round);
    let current: Vec<Option<usize>> =
        input.current.iter().map(|c| c.and_then(|j| pos.get(j).copied().flatten())).collect();
    let speeds: Vec<Vec<f64>> = round.iter().map(|&j| types.speeds.get(j).cloned().unwrap_or_default()).collect();
    let explore: Vec<(usize, usize)> =
        types.explore.iter().filter_map(|&(j, t)| Some((pos.get(j).copied()??, t))).collect();
    let sub_types = Types { speeds: &speeds, explore: &explore, ..*types };
    let sub = EpochInput {
        policy: input.policy,
        plan: input.plan,
        place: input.place,
        jobs: &jobs,
        machine_of: input.machine_of,
        current: &current,
        held: None,
        seed: input.seed,
        types: Some(sub_types),
        tenants: None,
        special: None,
    };
    let mut own: Vec<FloorLedger> = round.iter().map(|&j| std::mem::take(&mut ledgers[j])).collect();
    let chosen = typed_counts(&sub, &sub_types, &mut own, Some(room));
    for (&j, ledger) in round.iter().zip(own) {
        ledgers[j] = ledger;
    }
    chosen
}

/// What the typed count step may hand out with tenants: workers per type, each tenant's jobs
/// together at most its quota, and each job's class inside its tenant.
#[derive(Clone, Copy)]
struct TypedRoom<'a> {
    capacity: &'a [u32],
    groups: Groups<'a>,
    class_of: &'a [u8],
}

/// The count step of `plan_epoch` on several worker types (`EpochInput::types`): each job's
/// type and count, [`super::typed::allocate_exact`] on its gains at its speed on each type (a
/// move to another type keeps `keep_on_move` of them); under the fair policy, fair counts put on
/// the types by fit ([`super::typed::fair_by_fit`]).
///
/// The fairness floor and the finish-time bound hold here as on one type, in **equal-share
/// workers** (Gavel's normalisation): a job's fair reference is its share of every type, so its
/// one-worker speed is its mean speed over the cluster's workers, `e_j = Σ_t v_jt·n_t / N`. The
/// bound's fair clock runs at `e_j` times its rates. A job owed a floor of `w` workers may then
/// run only on options (a type and a size) at least as fast as `w` equal-share workers, and
/// each is worth more than any gain ([`owe`]): the allocation serves it first, on whichever
/// type suits the others best, and parking it on K80s does not meet it. What a job got is
/// booked as `k·v_jt / e_j` equal-share workers. A job's own minimum is owed the same way.
fn typed_counts<G: GainFn>(
    input: &EpochInput<'_, G>,
    types: &Types<'_>,
    ledgers: &mut [FloorLedger],
    room: Option<TypedRoom<'_>>,
) -> TypedAllocation {
    let capacity = per_type(types);
    let num_types = capacity.len();
    let num_workers = u32::try_from(types.type_of.len()).unwrap_or(u32::MAX);
    let (free, groups, class_of) =
        room.map_or((capacity.as_slice(), Groups::NONE, &[][..]), |r| (r.capacity, r.groups, r.class_of));
    let now = held_types(input, types, num_types);
    let speed = |j: usize, t: usize| types.speeds.get(j).and_then(|s| s.get(t)).copied().unwrap_or(1.0).max(0.0);
    // Each job's equal-share speed: its speed on a worker drawn at random from the cluster.
    let equal: Vec<f64> = (0..input.jobs.len())
        .map(|j| {
            let total: f64 = (0..num_types).map(|t| speed(j, t) * f64::from(capacity[t])).sum();
            total / f64::from(num_workers.max(1))
        })
        .collect();
    let (bids, fair) = typed_bids(input, num_workers, groups);
    let mut jobs = typed_jobs(input, types, &now, &capacity, speed);
    let fair_policy = input.policy == PolicyKind::Fair;
    let mut floors = if fair_policy || !input.plan.bounded() {
        vec![0; jobs.len()]
    } else {
        equal_share_floors(input, &bids, &fair, &equal, free.iter().sum(), ledgers)
    };
    for (j, floor) in floors.iter_mut().enumerate() {
        *floor = (*floor).min(groups.room_of(j));
    }
    // A job's rate on `k` workers, relative to one: its time model's where it has a pace.
    let rate = |j: usize, k: u32| match &input.jobs[j].pace {
        Some(p) => p.rate(f64::from(k)) / p.rate(1.0).max(1e-12),
        None => f64::from(k),
    };
    // A job owed workers (its floor, its own minimum) may run only where they meet it, and is
    // worth more there than any gain: the allocation serves every such job it can, on whichever
    // type suits the others best, then the gains decide.
    let bonus = 1.0 + 2.0 * best_gains(&jobs);
    for (j, job) in jobs.iter_mut().enumerate() {
        let min = bids[j].min_workers;
        let need = if floors[j] > 0 { equal[j] * rate(j, floors[j]) } else { 0.0 };
        if min > 0 || need > 0.0 {
            owe(job, min, need, bonus, room.is_some(), |t, k| speed(j, t) * rate(j, k));
        }
    }
    if room.is_some() {
        workers_first(&mut jobs, class_of);
    }
    let chosen = if fair_policy {
        fair_by_fit(&typed_fair_counts(input, &bids, &jobs, free, groups, class_of), &jobs, free, &now, groups)
    } else {
        allocate_exact_in(&jobs, free, groups)
    };
    let chosen = explore(chosen, &jobs, free, types.explore);
    book(&input.plan, &fair, &in_equal_shares(&chosen, speed, &equal), ledgers);
    chosen
}

/// Each job's options: its gains on each type at its speed there, a move to another type
/// than it runs on now keeping `keep_on_move` of them.
fn typed_jobs<G: GainFn>(
    input: &EpochInput<'_, G>,
    types: &Types<'_>,
    now: &[Option<(usize, u32)>],
    capacity: &[u32],
    speed: impl Fn(usize, usize) -> f64,
) -> Vec<TypedJob> {
    input
        .jobs
        .iter()
        .enumerate()
        .map(|(j, job)| {
            let options = (0..capacity.len())
                .map(|t| {
                    let moved = now[j].is_some_and(|(c, _)| c != t);
                    let keep = if moved { types.keep_on_move } else { 1.0 };
                    type_option(input.policy, job, speed(j, t), capacity[t], keep)
                })
                .collect();
            TypedJob { options, grant: None, attained: job.bid.attained_service }
        })
        .collect()
}

/// With tenants, workers first (a guarantee counts workers, of whatever type), and inside a
/// tenant its higher classes first: each worker to a job of class `c` is worth `c + 1` times
/// more than all gains and debts together, so the gains decide only which types.
fn workers_first(jobs: &mut [TypedJob], class_of: &[u8]) {
    let above = 1.0 + 4.0 * best_gains(jobs);
    for (j, job) in jobs.iter_mut().enumerate() {
        let worth = f64::from(class_of.get(j).copied().unwrap_or(0)) + 1.0;
        for g in job.options.iter_mut().flatten() {
            for (gain, &k) in g.gains.iter_mut().zip(&g.sizes) {
                *gain += worth * above * f64::from(k);
            }
        }
    }
}

/// The count step's bids on types (their own minimums honoured within the fair share, as
/// [`bids_of`]) and their fair shares: of the cluster, or with `groups` (tenants) of their
/// group's cap among its jobs.
fn typed_bids<'g, G>(
    input: &EpochInput<'g, G>,
    num_workers: u32,
    groups: Groups<'_>,
) -> (Vec<JobBid<ByRef<'g, G>>>, Vec<f64>) {
    if groups.cap.is_empty() {
        let bids = bids_of(input, num_workers);
        let fair = fair_shares(num_workers, &bids);
        return (bids, fair);
    }
    let mut bids: Vec<JobBid<ByRef<'_, G>>> = input.jobs.iter().map(|j| j.bid.by_ref()).collect();
    let mut fair = vec![0.0; bids.len()];
    for (g, &cap) in groups.cap.iter().enumerate() {
        let members: Vec<usize> = (0..bids.len()).filter(|&j| groups.of.get(j) == Some(&g)).collect();
        let mut own: Vec<JobBid<ByRef<'_, G>>> = members.iter().map(|&j| input.jobs[j].bid.by_ref()).collect();
        let honoured = honoured_minimums(cap, &own);
        for ((bid, &j), min) in own.iter_mut().zip(&members).zip(honoured) {
            if input.jobs[j].own_minimum {
                bid.min_workers = min;
            }
        }
        for ((bid, &j), share) in own.iter().zip(&members).zip(fair_shares(cap, &own)) {
            bids[j].min_workers = bid.min_workers;
            fair[j] = share;
        }
    }
    (bids, fair)
}

/// The fair policy's counts on types: max-min over the cluster (every job's weight 1), or with
/// `groups` (tenants) within each group's cap, class by class from the highest, by weight.
fn typed_fair_counts<G>(
    input: &EpochInput<'_, G>,
    bids: &[JobBid<ByRef<'_, G>>],
    jobs: &[TypedJob],
    free: &[u32],
    groups: Groups<'_>,
    class_of: &[u8],
) -> Vec<u32> {
    type NoGain = fn(u32) -> f64;
    // At most what it can run at on one type (none where it can run nowhere).
    let most = |j: usize| jobs[j].options.iter().flatten().filter_map(|g| g.sizes.last().copied()).max().unwrap_or(0);
    let bounds = |j: usize, weight: f64| JobBid::<NoGain> {
        min_workers: input.jobs[j].bid.min_workers,
        max_workers: input.jobs[j].bid.max_workers.min(most(j)),
        attained_service: input.jobs[j].bid.attained_service,
        gain: None,
        weight,
    };
    if groups.cap.is_empty() {
        let all: Vec<JobBid<NoGain>> = (0..bids.len()).map(|j| bounds(j, 1.0)).collect();
        return crate::policy::fair::allocate(&Problem { num_workers: free.iter().sum(), jobs: &all }).workers;
    }
    let class = |j: usize| class_of.get(j).copied().unwrap_or_default();
    let mut counts = vec![0u32; bids.len()];
    for (g, &cap) in groups.cap.iter().enumerate() {
        let members: Vec<usize> = (0..bids.len()).filter(|&j| groups.of.get(j) == Some(&g)).collect();
        let mut classes: Vec<u8> = members.iter().map(|&j| class(j)).collect();
        classes.sort_unstable_by(|a, b| b.cmp(a));
        classes.dedup();
        let mut left = cap;
        for c in classes {
            let members: Vec<usize> = members.iter().copied().filter(|&j| class(j) == c).collect();
            let own: Vec<JobBid<NoGain>> = members.iter().map(|&j| bounds(j, bids[j].weight)).collect();
            let got = crate::policy::fair::allocate(&Problem { num_workers: left, jobs: &own }).workers;
            for (&j, k) in members.iter().zip(got) {
                counts[j] = k;
                left -= k.min(left);
            }
        }
    }
    counts
}

/// What each job got, in equal-share workers: `k · v_jt / e_j`.
fn in_equal_shares(chosen: &TypedAllocation, speed: impl Fn(usize, usize) -> f64, equal: &[f64]) -> Vec<f64> {
    chosen
        .iter()
        .enumerate()
        .map(|(j, c)| c.map_or(0.0, |(t, k)| f64::from(k) * speed(j, t) / equal[j].max(1e-12)))
        .collect()
}

/// Exploration (issue #43, `quality::speeds::explorers`): each `(job, type)` in `explore` moves
/// its job onto that type if workers of it are left idle by the allocation, at its size or
/// what fits. It takes no worker another job was given; the job pays one restart, and every
/// job's prior gains the type's ratio from its measurement there.
fn explore(
    mut chosen: TypedAllocation,
    jobs: &[TypedJob],
    capacity: &[u32],
    pairs: &[(usize, usize)],
) -> TypedAllocation {
    let mut free = capacity.to_vec();
    for &(t, k) in chosen.iter().flatten() {
        free[t] = free[t].saturating_sub(k);
    }
    for &(j, u) in pairs {
        let (Some(&Some((t, k))), Some(Some(g)), Some(&idle)) = (chosen.get(j), jobs[j].options.get(u), free.get(u))
        else {
            continue;
        };
        if t == u {
            continue;
        }
        if let Some(&size) = g.sizes.iter().filter(|&&s| s <= idle && s <= k.max(1)).max() {
            chosen[j] = Some((u, size));
            free[u] -= size;
            free[t] += k;
        }
    }
    chosen
}

/// Each job's type now: the type most of its workers are of, and how many.
fn held_types<G>(input: &EpochInput<'_, G>, types: &Types<'_>, num_types: usize) -> Vec<Option<(usize, u32)>> {
    let mut held = vec![vec![0u32; num_types]; input.jobs.len()];
    for (w, job) in input.current.iter().enumerate() {
        if let Some(j) = job.filter(|&j| j < input.jobs.len()) {
            held[j][types.type_of[w]] += 1;
        }
    }
    held.iter()
        .map(|h| {
            h.iter()
                .enumerate()
                .max_by_key(|(t, c)| (**c, std::cmp::Reverse(*t)))
                .filter(|x| *x.1 > 0)
                .map(|(t, &c)| (t, c))
        })
        .collect()
}

/// A job's gains on one type where it runs `speed` times as fast as its gain curve assumes,
/// at every size it may run at among `capacity` workers, `keep` of them kept (a move's cost).
fn type_option<G: GainFn>(
    policy: PolicyKind,
    job: &EpochJob<'_, G>,
    speed: f64,
    capacity: u32,
    keep: f64,
) -> Option<TypeGains> {
    let max = job.bid.max_workers.min(capacity);
    if speed <= 0.0 || max == 0 {
        return None;
    }
    let sizes: Vec<u32> = match job.sizes {
        Some(s) => s.iter().copied().filter(|&k| k > 0 && k <= max).collect(),
        None => (1..=max.min(crate::policy::table::DEFAULT_TABLE_LEN as u32)).collect(),
    };
    let gains = sizes
        .iter()
        .map(|&k| match (&job.bid.gain, policy) {
            // Its weight scales its gains, as `policy::Scaled` on one type (1 without tenants).
            (Some(g), PolicyKind::Slaq) => g.gain_at_speed(k, speed) * keep * job.bid.weight,
            // No prediction (or the fair policy): work done, at this speed.
            _ => speed * f64::from(k).sqrt() * keep * 1e-9,
        })
        .collect();
    (!sizes.is_empty()).then_some(TypeGains { sizes, gains })
}

/// The floors (the finish-time bound's, then the service floor's) in equal-share workers: each
/// job's fair clock runs at its equal-share speed `equal[j]` times its rates.
fn equal_share_floors<G>(
    input: &EpochInput<'_, G>,
    bids: &[JobBid<ByRef<'_, G>>],
    fair: &[f64],
    equal: &[f64],
    num_workers: u32,
    ledgers: &mut [FloorLedger],
) -> Vec<u32> {
    let scaled: Vec<Option<Vec<f64>>> = input
        .jobs
        .iter()
        .zip(equal)
        .map(|(job, &e)| job.pace.map(|p| p.rates.iter().map(|r| r * e).collect()))
        .collect();
    let paces: Vec<Option<Pace<'_>>> = if input.jobs.iter().any(|j| j.pace.is_some()) {
        input
            .jobs
            .iter()
            .zip(&scaled)
            .map(|(job, r)| job.pace.zip(r.as_deref()).map(|(p, rates)| Pace { rates: Rates::new(rates), ..p }))
            .collect()
    } else {
        Vec::new()
    };
    floors(&input.plan, num_workers, bids, (fair, false), &paces, ledgers)
}

/// Restricts a job's options to those that give it at least `min` workers and a rate
/// (`rate(type, k)`) of at least `need`, each worth `bonus` more; if none does, to its fastest
/// option. `soft` (with tenants, where a guarantee counts workers): the options of at least
/// `min` workers that fall short of `need` are kept, without the bonus.
fn owe(job: &mut TypedJob, min: u32, need: f64, bonus: f64, soft: bool, rate: impl Fn(usize, u32) -> f64) {
    let meets = |t: usize, k: u32| k >= min.max(1) && rate(t, k) >= need * (1.0 - 1e-9);
    let all: Vec<(usize, u32)> = job
        .options
        .iter()
        .enumerate()
        .flat_map(|(t, g)| g.iter().flat_map(move |g| g.sizes.iter().map(move |&k| (t, k))))
        .collect();
    let fastest = all.iter().copied().max_by(|a, b| rate(a.0, a.1).total_cmp(&rate(b.0, b.1)));
    let any = all.iter().any(|&(t, k)| meets(t, k));
    let owed = |t: usize, k: u32| if any { meets(t, k) } else { fastest == Some((t, k)) };
    let kept = |t: usize, k: u32| owed(t, k) || (soft && k >= min.max(1));
    for (t, option) in job.options.iter_mut().enumerate() {
        let Some(g) = option.as_mut() else { continue };
        let kept: Vec<(u32, f64)> = g
            .sizes
            .iter()
            .zip(&g.gains)
            .filter(|&(&k, _)| kept(t, k))
            .map(|(&k, &gain)| (k, if owed(t, k) { gain + bonus } else { gain }))
            .collect();
        if kept.is_empty() {
            *option = None;
        } else {
            (g.sizes, g.gains) = kept.into_iter().unzip();
        }
    }
}
