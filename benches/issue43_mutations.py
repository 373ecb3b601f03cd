#!/usr/bin/env python3
"""Issue #43: each new rule, broken on purpose, must fail a unit test: Gavel's work-conserving
fill, the work-first count step and what an option's work is, exploration, `min_run_s`'s
hold (on the allocator's fake clock), moves at checkpoints (the save hold, shrinking and
growing, only for jobs that declared a schedule; its guarantee override is not here: the
quota restores a guarantee through the hold anyway, and what the override changes, which
lender's job gives workers back, chosen by stop cost, no test observes yet) and priority classes (the planner's class
order, the simulator's class reclaim through holds), job weights (the tenant's cap, the weight
reaching the plan, fair's and slaq's weighted paths) and teams on replicas (a tenant's job's
partition, the leader's check of a tenant's job's bid; the bucket's filters are held by
`tests/it/durable.rs`) and tenants on typed clusters (the quotas applied there, each tenant's
cap, its classes under slaq and fair, the top-up of a short tenant from idle workers, job
weights) and saves asked for before a reclaim (the ask, the wait for the save, the grace's
rest when none comes). Applies one mutation at a time, runs the module's unit
tests, prints CAUGHT or MISSED, and restores the file. (The Python client's tenant is held by
`clients/python/tests/test_offline.py` and `tests/it/python.rs`, the live hold by
`tests/it/teams.rs`.)
Usage: python3 benches/issue43_mutations.py [name ...] (from the repository root)."""
import subprocess, sys
muts = [
 ("src/policy/gavel.rs", "        self.fill(fractions, jobs, active, &mut free, &mut out);\n", "", "policy::gavel", "fill"),
 ("src/schedule/typed.rs", "    let m = 1.0 + best_gains(jobs);", "    let m = 0.0 * best_gains(jobs);", "schedule::typed", "work-first"),
 ("src/sim/gavel/engine.rs", "if own > 0.0 { f64::from(size) * r / own } else { 0.0 }", "if own > 0.0 { f64::from(size) } else { 0.0 }", "sim::gavel", "work-by-speed"),
 ("src/schedule/epoch/types.rs", "    let chosen = explore(chosen, &jobs, free, types.explore);", "    let chosen = explore(chosen, &jobs, free, &[]);", "actors::allocator::tests", "explore"),
 ("src/quality/speeds.rs", "                    !declared && !s.measured.is_empty()", "                    !s.measured.is_empty()", "quality::speeds", "explore-declared"),
 ("src/schedule/tenants.rs", "held.get(i).map_or(0, |&h| h.saturating_sub(entitled[i]).min(cap[i]))", "held.get(i).map_or(0, |&h| h.saturating_sub(entitled[i]).min(cap[i]) * 0)", "actors::allocator::tests", "hold-quota"),
 ("src/actors/allocator/planning.rs", "min_workers: if held == Hold::None { b.min_workers } else { have.min(b.max_workers) },", "min_workers: b.min_workers,", "actors::allocator::tests", "hold-in-tenant"),
 ("src/actors/allocator/planning.rs", "is_some_and(|c| now_s - e.workers_since_s < c.min_run_s)", "is_some_and(|c| c.min_run_s > 0.0)", "actors::allocator::tests", "hold-expires"),
 ("src/actors/allocator/planning.rs", "max_workers: if held == Hold::Save { have.min(b.max_workers) } else { b.max_workers },", "max_workers: b.max_workers,", "actors::allocator::tests", "save-hold"),
 ("src/schedule/saves.rs", "self.declared && !self.fresh", "!self.fresh", "schedule::saves", "save-declared"),
 ("src/schedule/epoch.rs", "let class = |j: usize| class_of.get(j).copied().unwrap_or(0);", "let class = |j: usize| class_of.get(j).copied().unwrap_or(0) * 0;", "schedule::epoch", "class-order"),
 ("src/sim/curves/moves.rs", "} else if owed || outranked || now >=", "} else if owed || now >=", "sim::teams", "class-through-holds"),
 ("src/schedule/tenants.rs", "        weight.min(self.max_weight)", "        weight", "actors::allocator::tests", "weight-cap"),
 ("src/actors/allocator/planning.rs", "                        weight: weight_of(id, b),", "                        weight: { let _ = weight_of(id, b); 1.0 },", "actors::allocator::tests", "weight-used"),
 ("src/policy/fair.rs", "    if weighted(jobs) {", "    if weighted(jobs) && false {", "policy::fair", "weight-fair"),
 ("src/policy/kind.rs", "            PolicyKind::Slaq if super::weighted(problem.jobs) => {", "            PolicyKind::Slaq if false && super::weighted(problem.jobs) => {", "policy::kind", "weight-slaq"),
 ("src/partition.rs", "fnv1a32(job.bytes().filter(|&b| b != b'.'))", "fnv1a32(job.bytes())", "partition", "tenant-partition"),
 ("src/protocol/partition.rs", "!valid_job_id(j)", "!crate::protocol::valid_id(j)", "protocol::partition", "tenant-bids"),
 ("src/schedule/epoch/types.rs", "    let (chosen, quotas) = match input.tenants {", "    let (chosen, quotas) = match input.tenants.filter(|_| false) {", "schedule", "typed-tenants"),
 ("src/schedule/typed.rs", "self.groups.of(j).map_or(u32::MAX, |g| self.left[g])", "self.groups.of(j).map_or(u32::MAX, |g| self.left[g].max(u32::MAX))", "schedule", "typed-caps"),
 ("src/schedule/epoch/types.rs", "let worth = f64::from(class_of.get(j).copied().unwrap_or(0)) + 1.0;", "let worth = 1.0;", "schedule::epoch", "typed-class"),
 ("src/schedule/epoch/types.rs", "let class = |j: usize| class_of.get(j).copied().unwrap_or_default();", "let class = |j: usize| class_of.get(j).copied().unwrap_or_default() * 0;", "schedule::epoch", "typed-fair-class"),
 ("src/schedule/epoch/types.rs", "        top_up(input, types, tenancy, &entitled, &mut out);\n", "", "schedule::epoch", "typed-top-up"),
 ("src/schedule/epoch/types.rs", "    if room.is_some() {\n        workers_first(&mut jobs, class_of);\n    }\n", "", "schedule::epoch", "typed-workers-first"),
 ("src/schedule/typed.rs", "    let whole = !groups.cap.is_empty();", "    let whole = false;", "schedule::epoch", "typed-whole"),
 ("src/actors/allocator/asks.rs", "        if !owed || !self.jobs", "        if true || !owed || !self.jobs", "actors::allocator::tests", "ask"),
 ("src/actors/allocator/asks.rs", "                Some(at) if e.saves.saved_since(at) => e.asked_s = None,\n", "", "actors::allocator::tests", "ask-saved"),
 ("src/actors/allocator/asks.rs", "                    asked.cut_ms[j] = Some(", "                    let _ = Some(", "actors::allocator::tests", "ask-cut"),
 ("src/actors/allocator/assignment.rs", "let waits = before != after && asked.waits(before, after);", "let waits = false && asked.waits(before, after);", "actors::allocator::tests", "ask-waits"),
 ("src/schedule/epoch/types.rs", "g.gain_at_speed(k, speed) * keep * job.bid.weight,", "g.gain_at_speed(k, speed) * keep,", "schedule::epoch", "typed-weight"),
]
only = sys.argv[1:]
for path, a, b, module, name in muts:
    if only and name not in only: continue
    s = open(path).read()
    assert a in s, (name, a)
    open(path, "w").write(s.replace(a, b, 1))
    try:
        r = subprocess.run(["cargo", "test", "-q", "--lib", module], capture_output=True, text=True)
        failed = [l for l in r.stdout.splitlines() if "FAILED" in l and l.startswith("test ")]
        print(name, "->", "CAUGHT" if r.returncode else "MISSED", failed, flush=True)
    finally:
        open(path, "w").write(s)
