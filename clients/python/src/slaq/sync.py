"""The synchronous client: the asyncio one on an event loop of its own thread."""

import asyncio
import threading
from typing import Callable, List, Optional

from .aio import AsyncJob
from .wire import Allocation


class Job:
    """One training job's connection to slaq, for ordinary (blocking) training loops.

    ``Job("my-job", nats="nats://...", family="mlp")`` connects and says hello. Callbacks given
    to ``on_allocation`` run on the client's own thread. Use it as ``with`` to say bye and close.
    """

    def __init__(self, job: str, nats: str = "nats://127.0.0.1:4222", *, hello_timeout: float = 5.0,
                 timeout: float = 10.0, connect_options: Optional[dict] = None, hello: bool = True, **kwargs):
        self._timeout = timeout
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"slaq-job-{job}", daemon=True)
        self._thread.start()
        self._job = AsyncJob(job, **kwargs)
        try:
            self._run(self._job.start(nats, hello_timeout=hello_timeout, connect_options=connect_options,
                                      hello=hello))
        except BaseException:
            self._stop_loop()
            raise

    def _run(self, coroutine, timeout: Optional[float] = None):
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        return future.result(self._timeout if timeout is None else timeout)

    @property
    def job(self) -> str:
        return self._job.job

    @property
    def allocation(self) -> Optional[Allocation]:
        return self._job.allocation

    @property
    def workers(self) -> List[str]:
        return self._job.workers

    def hello(self, **changes):
        self._run(self._job.hello(**changes))

    def report(self, iteration: int, loss: float, iter_seconds: float, workers: int,
               batch_size: Optional[int] = None, **stats):
        self._run(self._job.report(iteration, loss, iter_seconds, workers, batch_size, **stats))

    def bye(self, reason: str = "finished"):
        self._run(self._job.bye(reason))

    @property
    def save_requested(self) -> bool:
        """The scheduler asked this job to save (``save_on_request``): save, report
        ``checkpoint_age_s=0``, and call ``saved()``."""
        return self._job.save_requested

    def saved(self):
        self._job.saved()

    def on_allocation(self, callback: Callable[[Allocation], None]):
        return self._job.on_allocation(callback)

    def next_allocation(self, timeout: Optional[float] = None, after_epoch: Optional[int] = None) -> Allocation:
        """Blocks until an allocation newer than ``after_epoch`` (default: the current one)."""
        wait = None if timeout is None else timeout + 1.0
        return self._run(self._job.next_allocation(timeout, after_epoch), timeout=wait)

    def close(self):
        if self._loop.is_running():
            try:
                self._run(self._job.close())
            finally:
                self._stop_loop()

    def _stop_loop(self):
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            self.bye("failed" if exc_type is not None else "finished")
        finally:
            self.close()
