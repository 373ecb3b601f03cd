"""Submitting a job with its command, from Python (what ``slaq submit`` does)."""

import asyncio
from typing import Optional, Sequence

import nats

from .wire import Codec, SlaqError, Subjects, check_job_id, job_command, job_spec

#: ``wait=True``: the job's outcome, as ``slaq submit --wait`` exits with it.
OUTCOME_CODES = {"finished": 0, "failed": 1, "cancelled": 1, "expired": 1}


async def submit_async(job: str, argv: Sequence[str], nats_url: str = "nats://127.0.0.1:4222", *,
                       prefix: str = "slaq", env: Optional[dict] = None, cwd: Optional[str] = None,
                       checkpoint_dir: Optional[str] = None, max_restarts: int = 3, wait: bool = False,
                       poll_s: float = 1.0, timeout: float = 5.0, connect_options: Optional[dict] = None,
                       **spec) -> Optional[str]:
    """Submits ``job`` (the agents run ``argv`` on its workers). With ``wait``, returns its
    outcome once it has ended (``finished``, ``failed``, ``cancelled``, or ``unknown`` if the
    scheduler lost track of it); else ``None`` once the scheduler has accepted it."""
    check_job_id(job)
    command = job_command(argv, env=env, cwd=cwd, checkpoint_dir=checkpoint_dir, max_restarts=max_restarts)
    message = job_spec(job, command=command, **spec)
    subjects, codec = Subjects(prefix, job), Codec("msgpack")
    nc = await nats.connect(nats_url, name=f"slaq-submit-{job}", **(connect_options or {}))
    try:
        reply = await nc.request(subjects.hello, codec.encode(message), timeout=timeout)
        ack = codec.decode(reply.data)
        if not ack.get("ok"):
            raise SlaqError(f"slaq refused job {job}: {ack.get('error')}")
        if not wait:
            return None
        missing = 0
        while True:
            try:
                # The job's own status subject: a job user may ask it (not ctl.status).
                reply = await nc.request(subjects.status, codec.encode({}), timeout=timeout)
                status = codec.decode(reply.data)
            except (asyncio.TimeoutError, nats.errors.TimeoutError, nats.errors.NoRespondersError):
                status = None
            if status is not None:
                ended = [o for o in status.get("ended", []) if o.get("job") == job]
                if ended:
                    return ended[-1]["outcome"]
                if any(j.get("job") == job for j in status.get("jobs", [])):
                    missing = 0
                else:
                    missing += 1
                    if missing >= 10:
                        return "unknown"
            await asyncio.sleep(poll_s)
    finally:
        await nc.drain()


def submit(job: str, argv: Sequence[str], nats_url: str = "nats://127.0.0.1:4222", **kwargs) -> Optional[str]:
    """The blocking form of :func:`submit_async`."""
    return asyncio.run(submit_async(job, argv, nats_url, **kwargs))
