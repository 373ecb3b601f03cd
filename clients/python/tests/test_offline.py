"""The client without a server: the codec, the contract's checks and the loop adapters."""

import json
import os
import signal
import unittest
from unittest import mock

import msgpack

from slaq import Allocation, SlaqError
from slaq.integrations import keras as keras_adapter
from slaq.integrations import lightning as lightning_adapter
from slaq.integrations.loop import Reporter, as_float
from slaq.wire import (Codec, Subjects, job_command, job_spec, loss_report, publish_allow_from_creds,
                       tenant_from_permissions)


class FakeJob:
    def __init__(self, workers=()):
        self.workers = list(workers)
        self.reports = []

    def report(self, iteration, loss, iter_seconds, workers, batch_size=None):
        self.reports.append((iteration, loss, iter_seconds, workers, batch_size))


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


class Wire(unittest.TestCase):
    def test_subjects_and_ids(self):
        s = Subjects("slaq", "job-1")
        self.assertEqual(s.loss, "slaq.v1.job.job-1.loss")
        self.assertEqual(s.alloc, "slaq.v1.job.job-1.alloc")
        for bad in ["", "a.b.c", ".b", "a.", "a b", "x" * 65, "a*", "a.b*"]:
            with self.assertRaises(SlaqError):
                Subjects("slaq", bad)
        # A tenant's job: TENANT.NAME, the tenant a token of every subject.
        self.assertEqual(Subjects("slaq", "team-a.j").loss, "slaq.v1.job.team-a.j.loss")
        with self.assertRaises(SlaqError):
            Subjects("bad prefix", "j")

    def test_a_users_permissions_name_its_tenant(self):
        team = ["slaq.v1.job.team-a.*.hello", "slaq.v1.job.team-a.*.loss", "slaq.v1.job.team-a.*.bye",
                "$SYS.REQ.USER.INFO"]
        self.assertEqual(tenant_from_permissions("slaq", team), "team-a")
        self.assertEqual(tenant_from_permissions("slaq", ["slaq.v1.job.team-b.>"]), "team-b")
        self.assertEqual(tenant_from_permissions("slaq", ["slaq.v1.job.team-b.train.loss"]), "team-b")
        self.assertEqual(tenant_from_permissions("x.y", ["x.y.v1.job.t.*.hello"]), "t")
        # One job's user (one token), any tenant, several, none, another prefix: no tenant.
        self.assertIsNone(tenant_from_permissions("slaq", ["slaq.v1.job.job-a.hello", "slaq.v1.job.job-a.loss"]))
        self.assertIsNone(tenant_from_permissions("slaq", team + ["slaq.v1.job.*.*.hello"]))
        self.assertIsNone(tenant_from_permissions("slaq", team + [">"]))
        self.assertIsNone(tenant_from_permissions("slaq", team + ["slaq.v1.job.team-b.*.hello"]))
        self.assertIsNone(tenant_from_permissions("slaq", None))
        self.assertIsNone(tenant_from_permissions("other", team))

    def test_a_credentials_files_jwt_gives_the_publish_permissions(self):
        import base64, json, tempfile
        def part(obj):
            return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")
        claims = {"sub": "UABC", "nats": {"pub": {"allow": ["slaq.v1.job.team-c.*.hello"]}, "type": "user"}}
        jwt = f"{part({'typ': 'JWT', 'alg': 'ed25519-nkey'})}.{part(claims)}.c2ln"
        text = (f"-----BEGIN NATS USER JWT-----\n{jwt}\n------END NATS USER JWT------\n\n"
                "-----BEGIN USER NKEY SEED-----\nSUAXYZ\n------END USER NKEY SEED------\n")
        with tempfile.NamedTemporaryFile("w", suffix=".creds", delete=False) as f:
            f.write(text)
        allow = publish_allow_from_creds(f.name)
        self.assertEqual(allow, ["slaq.v1.job.team-c.*.hello"])
        self.assertEqual(tenant_from_permissions("slaq", allow), "team-c")
        self.assertIsNone(publish_allow_from_creds(None))
        self.assertIsNone(publish_allow_from_creds(f.name + ".missing"))

    def test_codec_round_trips_named_fields(self):
        report = loss_report("j", 3, 0.5, 0.25, 2, batch_size=64)
        for encoding in ["msgpack", "json"]:
            codec = Codec(encoding)
            self.assertEqual(codec.decode(codec.encode(report)), report)
        self.assertEqual(msgpack.unpackb(Codec().encode(report), raw=False)["iter"], 3)
        self.assertEqual(json.loads(Codec("json").encode(report))["loss"], 0.5)
        self.assertEqual(Codec("json").headers, {"Content-Type": "application/json"})
        self.assertIsNone(Codec().headers)

    def test_reports_are_checked_before_sending(self):
        for bad in [dict(iteration=0), dict(loss=float("nan")), dict(loss=float("inf")), dict(iter_seconds=-1)]:
            args = dict(job="j", iteration=1, loss=1.0, iter_seconds=0.1, workers=1)
            args.update(bad)
            with self.assertRaises(SlaqError):
                loss_report(**args)

    def test_spec_leaves_out_unset_fields(self):
        self.assertEqual(job_spec("j"), {"job": "j", "weight": 1.0, "min_workers": 0})
        self.assertEqual(job_spec("j", max_workers=4)["max_workers"], 4)
        self.assertTrue(job_spec("j", parameter_server=True)["parameter_server"])
        self.assertEqual(job_spec("j", checkpoint_every_s=600)["checkpoint_every_s"], 600.0)
        self.assertEqual(job_spec("j", priority=2)["priority"], 2)
        self.assertNotIn("priority", job_spec("j"))
        self.assertTrue(job_spec("j", checkpoint_every_s=600, save_on_request=True)["save_on_request"])
        self.assertNotIn("save_on_request", job_spec("j", checkpoint_every_s=600))
        with self.assertRaises(SlaqError):
            job_spec("j", save_on_request=True)

    def test_reports_carry_optional_statistics(self):
        report = loss_report("j", 1, 0.5, 0.2, 4, batch_size=64, machines=2, sync_seconds=0.05,
                             grad_sqr=1.5, grad_var=3.0)
        self.assertEqual((report["machines"], report["grad_var"]), (2, 3.0))
        self.assertNotIn("machines", loss_report("j", 1, 0.5, 0.2, 4, machines=None))
        with self.assertRaises(SlaqError):
            loss_report("j", 1, 0.5, 0.2, 4, gradient=1.0)

    def test_a_submitted_jobs_spec_carries_its_command(self):
        command = job_command(["python", "train.py", 3], env={"LR": 0.1}, cwd="/srv", checkpoint_dir="/ckpt")
        spec = job_spec("j", max_workers=4, worker_counts=[1, 2, 4], command=command)
        self.assertEqual(spec["command"], {"argv": ["python", "train.py", "3"], "max_restarts": 3,
                                           "env": {"LR": "0.1"}, "cwd": "/srv", "checkpoint_dir": "/ckpt"})
        self.assertEqual(spec["worker_counts"], [1, 2, 4])
        self.assertEqual(job_spec("j", max_iters=500)["max_iters"], 500)
        self.assertNotIn("max_iters", job_spec("j"))
        self.assertNotIn("command", job_spec("j"))
        for empty in ([], [""]):
            with self.assertRaises(SlaqError):
                job_command(empty)

    def test_reports_say_their_generation_and_what_a_stop_would_lose(self):
        r = loss_report("j", 3, 0.5, 0.1, 2, generation=4, checkpoint_age_s=12)
        self.assertEqual((r["generation"], r["checkpoint_age_s"]), (4, 12.0))

    def test_allocation_from_message(self):
        a = Allocation.from_message({"job": "j", "epoch": 7, "workers": ["w1", "w2"], "batch_size": 128})
        self.assertEqual((a.epoch, a.workers, a.batch_size), (7, ["w1", "w2"], 128))
        self.assertIsNone(Allocation.from_message({"epoch": 1, "workers": []}).batch_size)
        typed = Allocation.from_message({"epoch": 2, "workers": ["v0"], "accelerator": "v100"})
        self.assertEqual(typed.accelerator, "v100")
        self.assertIsNone(Allocation.from_message({"epoch": 1, "workers": []}).accelerator)
        self.assertTrue(Allocation.from_message({"epoch": 3, "workers": ["w1"], "save": True}).save)
        self.assertFalse(Allocation.from_message({"epoch": 1, "workers": []}).save)


class SaveRequests(unittest.TestCase):
    def test_an_allocation_that_asks_for_a_save_sets_save_requested_until_saved(self):
        import asyncio
        from types import SimpleNamespace

        from slaq import AsyncJob

        async def run():
            job = AsyncJob("t.j", checkpoint_every_s=600, save_on_request=True)
            self.assertTrue(job.spec["save_on_request"])
            job._changed = asyncio.Condition()
            seen = []
            job.on_allocation(seen.append)
            await job._on_alloc(SimpleNamespace(data=msgpack.packb({"job": "t.j", "epoch": 3, "workers": ["w1"]})))
            self.assertFalse(job.save_requested)
            asked = {"job": "t.j", "epoch": 4, "workers": ["w1"], "save": True}
            await job._on_alloc(SimpleNamespace(data=msgpack.packb(asked)))
            self.assertTrue(job.save_requested and seen[-1].save and seen[-1].workers == ["w1"])
            job.saved()
            self.assertFalse(job.save_requested)

        asyncio.run(run())


class Loops(unittest.TestCase):
    def test_allocations_are_ordered_by_term_then_epoch(self):
        old = Allocation.from_message({"epoch": 500, "workers": ["w1"], "term": 4})
        new = Allocation.from_message({"epoch": 1, "workers": ["w2"], "term": 9})
        self.assertLess(old.order(), new.order())
        self.assertEqual(Allocation.from_message({"epoch": 3}).order(), (0, 3))

    def test_reporter_counts_and_times_iterations(self):
        job, clock = FakeJob(workers=["w1", "w2", "w3"]), Clock()
        r = Reporter(job, clock=clock)
        clock.now += 0.5
        r.step(2.0)
        r.begin()
        clock.now += 0.25
        r.step(1.0, batch_size=32)
        self.assertEqual(job.reports, [(1, 2.0, 0.5, 3, None), (2, 1.0, 0.25, 3, 32)])

    def test_reporter_says_one_worker_before_any_allocation(self):
        job = FakeJob()
        Reporter(job).step(1.0)
        self.assertEqual(job.reports[0][3], 1)

    def test_as_float_takes_tensor_like_values(self):
        class Tensor:
            def detach(self):
                return self

            def item(self):
                return 0.125

        self.assertEqual(as_float(Tensor()), 0.125)
        self.assertEqual(as_float(3), 3.0)

    def test_lightning_callback_reports_from_rank_zero_only(self):
        class Trainer:
            is_global_zero, world_size, callback_metrics = True, 4, {}

        job = FakeJob()
        cb = lightning_adapter.SlaqCallback(job)
        cb.on_train_batch_start(Trainer(), None, None, 0)
        cb.on_train_batch_end(Trainer(), None, {"loss": 0.75}, None, 0)
        other = Trainer()
        other.is_global_zero = False
        cb.on_train_batch_end(other, None, {"loss": 0.5}, None, 1)
        self.assertEqual([(i, l, w) for i, l, _, w, _ in job.reports], [(1, 0.75, 4)])

    def test_keras_callback_reports_each_batch(self):
        job = FakeJob(workers=["w1"])
        cb = keras_adapter.SlaqCallback(job)
        for batch, loss in enumerate([0.9, 0.8]):
            cb.on_train_batch_begin(batch)
            cb.on_train_batch_end(batch, {"loss": loss})
        cb.on_train_batch_end(2, {})  # no loss in the logs: nothing to report
        self.assertEqual([(i, l) for i, l, *_ in job.reports], [(1, 0.9), (2, 0.8)])


if __name__ == "__main__":
    unittest.main()


class Elastic(unittest.TestCase):
    def test_a_script_run_by_hand_is_one_process_and_needs_no_torch(self):
        from slaq import elastic
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLAQ_", "RANK", "WORLD_SIZE"))}
        before = signal.getsignal(signal.SIGTERM)
        try:
            with mock.patch.dict(os.environ, env, clear=True):
                ctx = elastic.init()
            self.assertEqual((ctx.rank, ctx.world_size, ctx.distributed, ctx.job), (0, 1, False, None))
            self.assertEqual((ctx.global_batch(64), ctx.local_batch(64)), (64, 64))
            ckpt = elastic.Checkpoint(ctx, {}, every_s=None)
            self.assertEqual(ckpt.restore(), 0)
            self.assertFalse(ckpt.step(1))
            # SIGTERM: the next step says to leave.
            signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)
            self.assertTrue(ckpt.step(2))
            reporter = elastic.Reporter(ctx, checkpoint=ckpt)
            reporter.report(2, 0.5, 0.1)  # nowhere to report to: nothing happens
            reporter.finish()
        finally:
            signal.signal(signal.SIGTERM, before)

    def test_a_stopped_process_ends_as_stopped_never_as_done(self):
        # A rank that leaves because the ranks agreed to stop (a peer got SIGTERM) must not exit
        # 0: its agent would take that for the job finishing.
        import subprocess
        import sys
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLAQ_", "RANK", "WORLD_SIZE"))}
        script = ("from slaq import elastic\nimport os, signal\nctx = elastic.init()\n"
                  "os.kill(os.getpid(), signal.SIGTERM)\nassert ctx.stop_requested()\nctx.close()\n"
                  "raise SystemExit(0)\n")
        stopped = subprocess.run([sys.executable, "-c", script], env=env, timeout=60)
        self.assertEqual(stopped.returncode, -signal.SIGTERM)
        done = subprocess.run([sys.executable, "-c", "from slaq import elastic\nelastic.init().close()\n"],
                              env=env, timeout=60)
        self.assertEqual(done.returncode, 0)
