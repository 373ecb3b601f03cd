#!/usr/bin/env python3
"""Issue #42: each rule of the allocator's core, of the state writer and of the routing table,
broken on purpose, must fail its unit test on a fake clock (`src/actors/allocator/tests.rs`,
`src/bus/durable/{queue,write}.rs`, `src/service/routes.rs`). Applies one mutation at a time to the source, runs the
module's unit tests, prints CAUGHT or MISSED, and restores the file.
Usage: python3 benches/issue42_mutations.py [name ...] (from the repository root)."""
import subprocess, sys
muts = [
 ("src/actors/registry.rs", "if now_s - w.last_seen_s > timeout_s {", "if now_s - w.last_seen_s > timeout_s * 0.9 {", "silent"),
 ("src/actors/allocator/supervision.rs", "        if !connected {\n            self.was_disconnected = true;\n        } else {", "        if false {\n            self.was_disconnected = true;\n        } else {", "outage"),
 ("src/actors/allocator/supervision.rs", "2f64.powi(restart.saturating_sub(1).min(64) as i32)", "f64::from(restart)", "backoff"),
 ("src/actors/allocator/supervision.rs", "&& now_s - sup.generation_started_s.max(sup.progress_s) > stall", "&& now_s - sup.generation_started_s > stall", "stall"),
 ("src/actors/allocator/assignment.rs", "pub(super) const RETELL_AFTER_S: f64 = 2.0;", "pub(super) const RETELL_AFTER_S: f64 = 0.0;", "retell"),
 ("src/actors/allocator/core.rs", "            tell_all: true,", "            tell_all: false,", "term"),
 ("src/actors/allocator/planning.rs", "tenants: tenancy.map(|t| schedule::Tenancy {", "tenants: tenancy.filter(|_| false).map(|t| schedule::Tenancy {", "quota"),
 # Issue #44's one pass over the jobs: the saves' hold and the prediction check read there.
 ("src/actors/allocator/planning.rs", "        } else if h.waits && !owed {", "        } else if false && h.waits && !owed {", "save-hold"),
 ("src/actors/allocator/planning.rs", "            entry.last_loss = bid.last_loss;\n", "", "last-loss"),
 ("src/actors/allocator/planning.rs", "            types,\n", "            types: types.filter(|_| false),\n", "typed"),
 # The state writer (#20's two surviving mutations first).
 ("src/bus/durable/write.rs", "    if !fence.holds() {\n        return Outcome::Failed", "    if false {\n        return Outcome::Failed", "write-fence"),
 ("src/bus/durable/queue.rs", "        if lease.deposed {\n            let dropped", "        if false {\n            let dropped", "deposed-keeps-queue"),
 ("src/bus/durable/queue.rs", "        if deposed {\n            return false;", "        if false {\n            return false;", "deposed-queues"),
 ("src/bus/durable/queue.rs", "lease.unfenced || lease.renewals > r", "lease.unfenced || lease.renewals >= r", "renewal"),
 ("src/bus/durable/queue.rs", "BACKOFF.0.saturating_mul(1 << attempts.min(10))", "BACKOFF.0.saturating_mul(1 + attempts.min(10))", "write-backoff"),
 ("src/bus/durable/write.rs", "                lock().stale(key);\n", "", "read-again"),
 ("src/bus/durable/write.rs", "if term == 0 || last.term != Some(term) {", "if last.term != Some(term) {", "own-without-term"),
 # The routing table both service shells keep (part 2).
 ("src/service/routes.rs", "r.command.is_none() && now.duration_since(r.last_heard) > limit", "now.duration_since(r.last_heard) > limit", "routes-supervised"),
 ("src/service/routes.rs", "now.duration_since(r.last_heard) > limit", "now.duration_since(r.last_heard) >= limit", "routes-idle-edge"),
 ("src/service/routes.rs", "            self.jobs.values_mut().for_each(|r| r.last_heard = now);\n            return", "            return", "routes-outage"),
 ("src/service/routes.rs", "            None if self.ended.get(id).is_some() => {", "            None if false => {", "routes-after-bye"),
 ("src/service/routes.rs", "            Some(route) if !ended::ours(route.ended_before, seq) => {", "            Some(route) if false && !ended::ours(route.ended_before, seq) => {", "routes-earlier-job"),
 ("src/service/routes.rs", "None if seq.is_some_and(|s| s <= replay_until)", "None if seq.is_some_and(|s| s < replay_until)", "routes-replay"),
 ("src/service/routes.rs", "                spec.command = route.command.clone();\n", "", "routes-keep-command"),
 ("src/service/routes.rs", "spec.ended_before = self.ended.get(&spec.job).map(|end| end.max(read));", "spec.ended_before = self.ended.get(&spec.job);", "routes-read"),
 ("src/service/routes.rs", "        if route.limiter.check().is_err() {", "        if false && route.limiter.check().is_err() {", "routes-rate"),
 ("src/service/routes.rs", "        self.clock.set(now);\n        let Some(route)", "        let Some(route)", "routes-rate-clock"),
 ("src/service/routes.rs", "        if greeted {\n            self.ended.hello(&spec.job);", "        if false {\n            self.ended.hello(&spec.job);", "routes-greeted"),
 ("src/service/routes.rs", "if self.last.get(&cause).is_some_and(|t| now.duration_since(*t) < self.every)", "if self.last.values().any(|t| now.duration_since(*t) < self.every)", "log-per-cause"),
]
only = sys.argv[1:] 
for path, a, b, name in muts:
    if only and name not in only: continue
    s = open(path).read()
    assert a in s, (name, a)
    open(path, "w").write(s.replace(a, b, 1))
    try:
        module = ("bus::durable" if path.startswith("src/bus/") else
                  "service::routes" if path.startswith("src/service/") else "actors::allocator::tests")
        r = subprocess.run(["cargo", "test", "-q", "--lib", module], capture_output=True, text=True)
        failed = [l for l in r.stdout.splitlines() if "FAILED" in l and l.startswith("test ")]
        print(name, "->", "CAUGHT" if r.returncode else "MISSED", failed, flush=True)
    finally:
        open(path, "w").write(s)
