"""The asyncio client."""

import asyncio
import json
import secrets
import time
from typing import Callable, List, Optional

import nats

from .wire import (END_REASONS, Allocation, Codec, SlaqError, Subjects, decode_published, job_spec, loss_report,
                   publish_allow_from_creds, tenant_from_permissions)


class AsyncJob:
    """One training job's connection to slaq (asyncio).

    ``await AsyncJob.connect("my-job", nats="nats://...", family="mlp")`` connects, subscribes to
    the job's allocations and says hello; ``report`` sends one loss point; ``bye`` ends the job.
    Use it as ``async with`` to say bye (``finished``, or ``failed`` on an exception) and close.
    """

    def __init__(self, job: str, *, prefix: str = "slaq", encoding: str = "msgpack", jetstream: bool = False,
                 keepalive: Optional[float] = 60.0, **spec):
        """``jetstream=True``: reports and the bye go through JetStream, and ``report`` and
        ``bye`` return once the scheduler's stream has stored them, so they survive a scheduler
        restart. Needs a server with JetStream and ``slaq serve`` with ``[state] mode`` auto or
        jetstream (which creates the stream).

        ``keepalive``: a job that has sent nothing for this many seconds (waiting for workers,
        say) says hello again, so the scheduler does not take it for gone (it forgets a job
        silent for ``idle_job_timeout_ms``, 10 minutes by default). ``None``: never."""
        self.job = job
        self.jetstream = jetstream
        self.keepalive = keepalive
        # Message ids no other job can guess: ``Nats-Msg-Id`` is de-duplicated stream-wide.
        self._nonce = secrets.token_hex(8)
        self._last_sent = time.monotonic()
        self._keepalive_task = None
        # The largest term a scheduler has answered a hello with: an allocation of a larger
        # term is taken only once a hello confirms it (a forged one cannot lock the job).
        self._confirmed_term = 0
        self._js = None
        self.prefix = prefix
        self.subjects = Subjects(prefix, job)
        self.codec = Codec(encoding)
        self.spec = job_spec(job, **spec)
        self.allocation: Optional[Allocation] = None
        self._nc = None
        self._owns_connection = False
        self._callbacks: List[Callable[[Allocation], None]] = []
        self._changed: Optional[asyncio.Condition] = None
        self._said_bye = False
        #: The scheduler asked this job to save (``save_on_request``): save, report
        #: ``checkpoint_age_s=0``, and call ``saved()``.
        self.save_requested = False

    @classmethod
    async def connect(cls, job: str, nats: str = "nats://127.0.0.1:4222", *, connection=None,
                      hello_timeout: float = 5.0, connect_options: Optional[dict] = None,
                      **kwargs) -> "AsyncJob":
        """Connects (or uses ``connection``, an open ``nats.aio.client.Client``) and says hello.

        ``connect_options`` go to ``nats.connect``: credentials and TLS, e.g. ``{"user": "job-a",
        "password": ..., "inbox_prefix": "_INBOX.job-a"}`` for ``deploy/nats/slaq-auth.conf``, or
        ``{"user_credentials": "job.creds", "tls": ssl_context}``.
        """
        self = cls(job, **kwargs)
        await self.start(nats, connection=connection, hello_timeout=hello_timeout, connect_options=connect_options)
        return self

    async def start(self, url: str = "nats://127.0.0.1:4222", *, connection=None, hello_timeout: float = 5.0,
                    connect_options: Optional[dict] = None, hello: bool = True):
        """``hello=False``: attach to a job that exists already (a submitted job's rank 0 reports
        for it): no hello, so the submitted spec stays as it is, and no keepalive."""
        self._changed = asyncio.Condition()
        if connection is None:
            options = {"name": f"slaq-job-{self.job}"}
            options.update(connect_options or {})
            self._nc = await nats.connect(url, **options)
            self._owns_connection = True
        else:
            self._nc = connection
        if self.jetstream:
            self._js = self._nc.jetstream()
        try:
            await self._take_tenant((connect_options or {}).get("user_credentials"))
            await self._nc.subscribe(self.subjects.alloc, cb=self._on_alloc)
            if hello:
                await self.hello(timeout=hello_timeout)
        except BaseException:
            await self.close()
            raise
        if self.keepalive and hello:
            self._keepalive_task = asyncio.get_running_loop().create_task(self._keep_alive())

    async def _take_tenant(self, creds):
        """A team's job is ``TENANT.NAME``, and its tenant is what its NATS user may publish as
        (docs/teams.md). A job named ``NAME`` alone takes its tenant from the user's
        permissions, read from its credentials file's JWT or else asked of the server
        (``$SYS.REQ.USER.INFO``, nats-server 2.10 and later), so a team's user never repeats
        its tenant. Where neither says (no permissions, an older server, a user not allowed to
        ask), the id stays as given."""
        if "." in self.job:
            return
        allow = publish_allow_from_creds(creds)
        if allow is None:
            try:
                reply = await self._nc.request("$SYS.REQ.USER.INFO", b"", timeout=1.0)
                info = json.loads(reply.data).get("data") or {}
                allow = ((info.get("permissions") or {}).get("publish") or {}).get("allow")
            except Exception:
                allow = None
        tenant = tenant_from_permissions(self.prefix, allow)
        if tenant is not None:
            self.job = f"{tenant}.{self.job}"
            self.subjects = Subjects(self.prefix, self.job)
            self.spec["job"] = self.job
            self.spec["tenant"] = tenant

    async def _keep_alive(self):
        while True:
            await asyncio.sleep(max(1.0, self.keepalive / 4))
            if self._said_bye or self._nc is None:
                return
            if time.monotonic() - self._last_sent >= self.keepalive:
                try:
                    await self.hello(timeout=5.0)
                except Exception:  # the scheduler may be restarting: try again later
                    pass

    @property
    def workers(self) -> List[str]:
        """The workers of the latest allocation (empty before the first)."""
        return list(self.allocation.workers) if self.allocation else []

    async def hello(self, timeout: float = 5.0, **changes):
        """Says hello (again): with ``changes``, the spec changes (e.g. ``max_workers=4``)."""
        self.spec.update({k: v for k, v in changes.items() if v is not None})
        reply = await self._nc.request(self.subjects.hello, self.codec.encode(self.spec), timeout=timeout,
                                       headers=self.codec.headers)
        self._last_sent = time.monotonic()
        ack = self.codec.decode(reply.data)
        if not ack.get("ok"):
            raise SlaqError(f"slaq refused job {self.job}: {ack.get('error')}")
        self._confirmed_term = max(self._confirmed_term, int(ack.get("term") or 0))
        return ack

    async def report(self, iteration: int, loss: float, iter_seconds: float, workers: int,
                     batch_size: Optional[int] = None, **stats):
        """Reports one finished iteration (1-based, increasing); ``stats``: optional
        ``machines``, ``sync_seconds``, ``grad_sqr``, ``grad_var``."""
        message = loss_report(self.job, iteration, loss, iter_seconds, workers, batch_size, time.time(), **stats)
        payload = self.codec.encode(message)
        if self._js is not None:
            await self._publish_durably(self.subjects.loss, payload, f"{message['iter']}")
        else:
            await self._nc.publish(self.subjects.loss, payload, headers=self.codec.headers)
        self._last_sent = time.monotonic()

    async def _publish_durably(self, subject: str, payload: bytes, what: str):
        """Publishes through JetStream until the stream has it. The message id is this run's
        own (``<job>:<what>:<nonce>``): a re-send is dropped as a duplicate, and no other job can
        take the id first. An id the stream calls a duplicate on its first publish was taken
        all the same: it is sent again under a fresh one."""
        headers = dict(self.codec.headers or {})
        headers["Nats-Msg-Id"] = f"{self.job}:{what}:{self._nonce}"
        ack = await self._js.publish(subject, payload, headers=headers)
        if ack.duplicate:
            headers["Nats-Msg-Id"] = f"{self.job}:{what}:{secrets.token_hex(8)}"
            await self._js.publish(subject, payload, headers=headers)

    async def bye(self, reason: str = "finished"):
        if reason not in END_REASONS:
            raise SlaqError(f"reason must be one of {END_REASONS}, not {reason!r}")
        if self._said_bye:
            return
        self._said_bye = True
        payload = self.codec.encode({"job": self.job, "reason": reason})
        if self._js is not None:
            # Kept by the scheduler's stream once acknowledged: a bye sent while the scheduler
            # restarts or fails over is read when it is back.
            await self._publish_durably(self.subjects.bye, payload, "bye")
        else:
            await self._nc.publish(self.subjects.bye, payload, headers=self.codec.headers)
            await self._nc.flush()

    def saved(self):
        """The save the scheduler asked for is done (report ``checkpoint_age_s=0`` next)."""
        self.save_requested = False

    def on_allocation(self, callback: Callable[[Allocation], None]):
        """Calls ``callback(allocation)`` (on the event loop) whenever the job's workers change,
        or the scheduler asks it to save (``allocation.save``)."""
        self._callbacks.append(callback)
        return callback

    async def next_allocation(self, timeout: Optional[float] = None, after_epoch: Optional[int] = None) -> Allocation:
        """Waits for an allocation newer than ``after_epoch`` (default: the current one)."""
        if after_epoch is None:
            after = self.allocation.order() if self.allocation else (-1, -1)
        else:
            after = ((self.allocation.term or 0) if self.allocation else 0, after_epoch)

        async def newer():
            async with self._changed:
                await self._changed.wait_for(lambda: self.allocation is not None
                                             and self.allocation.order() > after)
                return self.allocation

        return await asyncio.wait_for(newer(), timeout)

    async def close(self):
        if self._keepalive_task is not None:
            self._keepalive_task.cancel()
            self._keepalive_task = None
        if self._nc is not None and self._owns_connection:
            await self._nc.drain()
        self._nc = None

    async def _on_alloc(self, msg):
        try:
            allocation = Allocation.from_message(decode_published(msg.data))
        except Exception:  # a payload that is not an allocation: not ours to crash on
            return
        if self.allocation is not None and allocation.order() < self.allocation.order():
            return  # older: from before (or from a deposed leader)
        if (allocation.term or 0) > self._confirmed_term:
            # A term no scheduler has answered with: confirmed by a hello, or not taken.
            try:
                await self.hello(timeout=5.0)
            except Exception:
                return
            if (allocation.term or 0) > self._confirmed_term:
                return
        self.allocation = allocation
        if allocation.save:
            self.save_requested = True
        async with self._changed:
            self._changed.notify_all()
        for callback in self._callbacks:
            callback(allocation)

    async def __aenter__(self):
        return self

    async def __aexit__(self, exc_type, exc, tb):
        await self.bye("failed" if exc_type is not None else "finished")
        await self.close()
