"""The client against a running ``slaq serve`` over a real nats-server.

``cargo test`` (tests/it/python.rs) starts both, registers one worker, and runs this module with
``SLAQ_TEST_NATS_URL`` set; without it the tests are skipped.
"""

import asyncio
import os
import unittest

import msgpack
import nats

import slaq

URL = os.environ.get("SLAQ_TEST_NATS_URL")


def fake_training(iterations):
    """A loss that falls like a real one: 1/k."""
    return [(k, 1.0 / k) for k in range(1, iterations + 1)]


@unittest.skipUnless(URL, "SLAQ_TEST_NATS_URL is not set (cargo test sets it)")
class Live(unittest.TestCase):
    def test_sync_job_reports_and_gets_the_worker(self):
        seen = []
        with slaq.Job("py-sync", nats=URL, family="linreg") as job:
            job.on_allocation(seen.append)
            for k, loss in fake_training(20):
                job.report(k, loss, iter_seconds=0.05, workers=max(1, len(job.workers)))
            allocation = job.next_allocation(timeout=15, after_epoch=-1)
            self.assertEqual(allocation.workers, ["pw1"])
            self.assertEqual(job.workers, ["pw1"])
        self.assertTrue(seen and seen[-1].workers == ["pw1"], seen)

    def test_async_job_in_json_gets_the_worker_by_callback(self):
        async def run():
            got = asyncio.get_running_loop().create_future()
            async with await slaq.AsyncJob.connect("py-async", nats=URL, encoding="json", max_workers=4) as job:
                job.on_allocation(lambda a: got.done() or (a.workers and got.set_result(a)))
                for k, loss in fake_training(20):
                    await job.report(k, loss, iter_seconds=0.05, workers=1, batch_size=32)
                return await asyncio.wait_for(got, 15)

        allocation = asyncio.run(run())
        self.assertEqual(allocation.workers, ["pw1"])

    def test_connect_options_reach_nats_py(self):
        with slaq.Job("py-opts", nats=URL, connect_options={"inbox_prefix": "_INBOX_py_opts"}) as job:
            self.assertEqual(bytes(getattr(job._job._nc, "_inbox_prefix", b"")), b"_INBOX_py_opts")
            job.report(1, 1.0, iter_seconds=0.1, workers=1)

    def test_reports_through_jetstream_are_acknowledged_and_deduplicated(self):
        with slaq.Job("py-durable", nats=URL, jetstream=True) as job:
            for k, loss in fake_training(10):
                job.report(k, loss, iter_seconds=0.05, workers=1)
            job.report(10, 0.1, iter_seconds=0.05, workers=1)  # a re-send: the stream drops it

    def test_a_squatted_message_id_is_sent_again_under_a_fresh_one(self):
        async def run():
            other = await nats.connect(URL)
            async with await slaq.AsyncJob.connect("py-squat", nats=URL, jetstream=True) as job:
                # Someone publishes first under the id the job's first report will carry (which
                # only its own run can know; taken here from the client to show the recovery).
                await other.jetstream().publish(job.subjects.loss, b"not a report",
                                                headers={"Nats-Msg-Id": f"py-squat:1:{job._nonce}"})
                for k, loss in fake_training(3):
                    await job.report(k, loss, iter_seconds=0.05, workers=1)
            await other.close()

        asyncio.run(run())

    def test_an_allocation_of_a_term_no_scheduler_confirms_is_not_taken(self):
        async def run():
            other = await nats.connect(URL)
            async with await slaq.AsyncJob.connect("py-forged", nats=URL) as job:
                forged = {"job": "py-forged", "epoch": 1, "workers": ["forged"], "term": 2 ** 63}
                await other.publish(job.subjects.alloc, msgpack.packb(forged))
                await other.flush()
                for k, loss in fake_training(20):
                    await job.report(k, loss, iter_seconds=0.05, workers=1)
                allocation = await job.next_allocation(timeout=15, after_epoch=-1)
                self.assertNotEqual(allocation.workers, ["forged"])
                await asyncio.sleep(0.3)
                self.assertNotIn("forged", job.workers)
            await other.close()

        asyncio.run(run())

    def test_a_job_waiting_without_reports_keeps_itself_known(self):
        async def run():
            other = await nats.connect(URL)
            async with await slaq.AsyncJob.connect("py-waiting", nats=URL, keepalive=0.5):
                # Longer than the scheduler's idle timeout here (3 s), without a report.
                await asyncio.sleep(4.5)
                reply = await other.request("slaq.v1.ctl.status", b"", timeout=5)
                jobs = [j["job"] for j in msgpack.unpackb(reply.data, raw=False)["jobs"]]
                self.assertIn("py-waiting", jobs)
            await other.close()

        asyncio.run(run())

    def test_a_refused_hello_raises(self):
        with self.assertRaises(slaq.SlaqError) as refused:
            slaq.Job("py-bad", nats=URL, min_workers=3, max_workers=1)
        self.assertIn("max_workers", str(refused.exception))


if __name__ == "__main__":
    unittest.main()
