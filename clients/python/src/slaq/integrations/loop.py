"""A plain training loop's helper: counts and times iterations and reports them."""

import time
from typing import Callable, Optional


class Reporter:
    """Reports one loss per iteration to a (synchronous) ``slaq.Job``.

    Call ``begin()`` when an iteration starts (optional: without it an iteration is timed from the
    end of the previous one) and ``step(loss)`` when it ends::

        reporter = Reporter(job)
        for batch in data:
            reporter.begin()
            loss = train_step(batch)
            reporter.step(loss)
    """

    def __init__(self, job, workers: Optional[int] = None, clock: Callable[[], float] = time.perf_counter):
        self.job = job
        self.workers = workers
        self.iteration = 0
        self._clock = clock
        self._last = clock()
        self._started: Optional[float] = None

    def begin(self):
        self._started = self._clock()

    def step(self, loss, workers: Optional[int] = None, batch_size: Optional[int] = None, **stats):
        now = self._clock()
        seconds = max(0.0, now - (self._started if self._started is not None else self._last))
        self._last, self._started = now, None
        self.iteration += 1
        count = workers or self.workers or len(getattr(self.job, "workers", []) or []) or 1
        self.job.report(self.iteration, as_float(loss), seconds, count, batch_size, **stats)


def as_float(value) -> float:
    """A Python float from a float, a NumPy scalar or a (one-element) tensor."""
    if hasattr(value, "detach"):
        value = value.detach()
    if hasattr(value, "item"):
        value = value.item()
    return float(value)
