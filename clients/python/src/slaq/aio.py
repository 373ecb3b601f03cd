"""The asyncio client."""

import asyncio
import time
from typing import Callable, List, Optional

import nats

from .wire import END_REASONS, Allocation, Codec, SlaqError, Subjects, decode_published, job_spec, loss_report


class AsyncJob:
    """One training job's connection to slaq (asyncio).

    ``await AsyncJob.connect("my-job", nats="nats://...", family="mlp")`` connects, subscribes to
    the job's allocations and says hello; ``report`` sends one loss point; ``bye`` ends the job.
    Use it as ``async with`` to say bye (``finished``, or ``failed`` on an exception) and close.
    """

    def __init__(self, job: str, *, prefix: str = "slaq", encoding: str = "msgpack", jetstream: bool = False,
                 **spec):
        """``jetstream=True``: reports go through JetStream and ``report`` returns once the
        scheduler's stream has stored them (de-duplicated by ``<job>:<iter>``), so a report
        survives a scheduler restart. Needs a server with JetStream and ``slaq serve`` with
        ``[state] mode`` auto or jetstream (which creates the stream)."""
        self.job = job
        self.jetstream = jetstream
        self._js = None
        self.subjects = Subjects(prefix, job)
        self.codec = Codec(encoding)
        self.spec = job_spec(job, **spec)
        self.allocation: Optional[Allocation] = None
        self._nc = None
        self._owns_connection = False
        self._callbacks: List[Callable[[Allocation], None]] = []
        self._changed: Optional[asyncio.Condition] = None
        self._said_bye = False

    @classmethod
    async def connect(cls, job: str, nats: str = "nats://127.0.0.1:4222", *, connection=None,
                      hello_timeout: float = 5.0, connect_options: Optional[dict] = None,
                      **kwargs) -> "AsyncJob":
        """Connects (or uses ``connection``, an open ``nats.aio.client.Client``) and says hello.

        ``connect_options`` go to ``nats.connect``: credentials and TLS, e.g. ``{"user": "job-a",
        "password": ..., "inbox_prefix": "_INBOX_job-a"}`` for ``deploy/nats/slaq-auth.conf``, or
        ``{"user_credentials": "job.creds", "tls": ssl_context}``.
        """
        self = cls(job, **kwargs)
        await self.start(nats, connection=connection, hello_timeout=hello_timeout, connect_options=connect_options)
        return self

    async def start(self, url: str = "nats://127.0.0.1:4222", *, connection=None, hello_timeout: float = 5.0,
                    connect_options: Optional[dict] = None):
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
            await self._nc.subscribe(self.subjects.alloc, cb=self._on_alloc)
            await self.hello(timeout=hello_timeout)
        except BaseException:
            await self.close()
            raise

    @property
    def workers(self) -> List[str]:
        """The workers of the latest allocation (empty before the first)."""
        return list(self.allocation.workers) if self.allocation else []

    async def hello(self, timeout: float = 5.0, **changes):
        """Says hello (again): with ``changes``, the spec changes (e.g. ``max_workers=4``)."""
        self.spec.update({k: v for k, v in changes.items() if v is not None})
        reply = await self._nc.request(self.subjects.hello, self.codec.encode(self.spec), timeout=timeout,
                                       headers=self.codec.headers)
        ack = self.codec.decode(reply.data)
        if not ack.get("ok"):
            raise SlaqError(f"slaq refused job {self.job}: {ack.get('error')}")

    async def report(self, iteration: int, loss: float, iter_seconds: float, workers: int,
                     batch_size: Optional[int] = None, **stats):
        """Reports one finished iteration (1-based, increasing); ``stats``: optional
        ``machines``, ``sync_seconds``, ``grad_sqr``, ``grad_var``."""
        message = loss_report(self.job, iteration, loss, iter_seconds, workers, batch_size, time.time(), **stats)
        payload = self.codec.encode(message)
        if self._js is not None:
            headers = dict(self.codec.headers or {})
            headers["Nats-Msg-Id"] = f"{self.job}:{message['iter']}"
            await self._js.publish(self.subjects.loss, payload, headers=headers)
        else:
            await self._nc.publish(self.subjects.loss, payload, headers=self.codec.headers)

    async def bye(self, reason: str = "finished"):
        if reason not in END_REASONS:
            raise SlaqError(f"reason must be one of {END_REASONS}, not {reason!r}")
        if self._said_bye:
            return
        self._said_bye = True
        await self._nc.publish(self.subjects.bye, self.codec.encode({"job": self.job, "reason": reason}),
                               headers=self.codec.headers)
        await self._nc.flush()

    def on_allocation(self, callback: Callable[[Allocation], None]):
        """Calls ``callback(allocation)`` (on the event loop) whenever the job's workers change."""
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
        self.allocation = allocation
        async with self._changed:
            self._changed.notify_all()
        for callback in self._callbacks:
            callback(allocation)

    async def __aenter__(self):
        return self

    async def __aexit__(self, exc_type, exc, tb):
        await self.bye("failed" if exc_type is not None else "finished")
        await self.close()
