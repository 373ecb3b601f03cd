"""Elastic PyTorch jobs under slaq: what a DDP script adds to run on the workers slaq gives it.

``slaq submit`` (or :func:`slaq.submit`) hands slaq the command; each agent given one of the
job's workers runs it with torchrun's environment (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``,
...) and slaq's (``SLAQ_JOB``, ``SLAQ_GENERATION``, ``SLAQ_CHECKPOINT_DIR``, ``SLAQ_NATS``, ...).
When the job's workers change, every process gets SIGTERM and a new generation starts on the
new set. So a script::

    ctx = slaq.elastic.init()                                   # torch.distributed, env://
    ckpt = slaq.elastic.Checkpoint(ctx, {"model": model, "optimizer": opt}, every_s=30)
    start = ckpt.restore()                                      # the iteration it had reached
    reporter = slaq.elastic.Reporter(ctx, checkpoint=ckpt)    # rank 0 reports, others no-op
    for it in range(start + 1, iterations + 1):
        loss = train_step()
        reporter.report(it, loss, iter_seconds)
        if ckpt.step(it):       # a SIGTERM reached a rank: saved at `it`, leave now
            break
    else:
        reporter.finish()       # done: rank 0 says bye, and `slaq submit --wait` returns 0
    ctx.close()                 # after a stop it ends the process as stopped (SIGTERM), not 0

Checkpoints are written by rank 0 atomically (a temporary file renamed over the last) into
``SLAQ_CHECKPOINT_DIR``, which every worker must reach (a shared file system), and read by
every rank at start. Needs ``torch`` (``pip install 'slaq-client[torch]'``).
"""

import hashlib
import os
import signal
import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Dict, Optional

CHECKPOINT_FILE = "checkpoint.pt"


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return default if value in (None, "") else int(value)


@dataclass
class Context:
    """Where this process stands in its job's current generation."""

    rank: int
    world_size: int
    local_rank: int
    generation: int
    job: Optional[str]
    checkpoint_dir: Optional[str]
    #: The global batch slaq chose (jobs that declared ``batch_sizes``), else ``None``.
    batch_size: Optional[int]
    nats: Optional[str]
    prefix: str
    #: The worker type this generation runs on (``slaq worker --accelerator``; every member of
    #: a generation is of one type), ``"default"`` when the agent names none.
    accelerator: str = "default"
    distributed: bool = False
    _stop: bool = False
    # The ranks agreed to stop (some rank got SIGTERM): the process ends as stopped, not done.
    _stopped: bool = False

    def global_batch(self, default: int) -> int:
        """The global batch: slaq's choice if it made one, else ``default``."""
        return self.batch_size or default

    def local_batch(self, default_global: int) -> int:
        """This rank's share of the global batch (at least 1)."""
        return max(1, self.global_batch(default_global) // self.world_size)

    def stop_requested(self) -> bool:
        """Whether any rank got SIGTERM: agreed by all ranks (one tiny all-reduce), so that
        they all leave after the same iteration and none waits for a peer that left."""
        if not self.distributed:
            self._stopped = self._stop
            return self._stopped
        import torch
        import torch.distributed as dist
        flag = torch.tensor([1 if self._stop else 0], dtype=torch.int32)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        self._stopped = bool(flag.item())
        return self._stopped

    def mean(self, value: float) -> float:
        """The mean of ``value`` over the ranks."""
        if not self.distributed:
            return float(value)
        import torch
        import torch.distributed as dist
        t = torch.tensor([float(value)], dtype=torch.float64)
        dist.all_reduce(t)
        return float(t.item()) / self.world_size

    def close(self):
        """Leaves the process group. After a stop (:meth:`stop_requested` said so) the process
        then ends as stopped by SIGTERM, never with 0: a rank that stops because a peer was
        told to (its agent died, say) must not look like a job that finished to its agent."""
        if self.distributed:
            import torch.distributed as dist
            dist.destroy_process_group()
            self.distributed = False
        if self._stopped:
            sys.stdout.flush()
            sys.stderr.flush()
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)


def init(backend: Optional[str] = None, timeout_s: float = 60.0) -> Context:
    """Reads the agent's environment, joins the generation's process group (``env://``; gloo,
    or nccl where CUDA is available) and catches SIGTERM (see :meth:`Context.stop_requested`).
    Without ``WORLD_SIZE`` (run by hand) it is a single process."""
    ctx = Context(
        rank=_env_int("RANK", 0),
        world_size=_env_int("WORLD_SIZE", 1),
        local_rank=_env_int("LOCAL_RANK", 0),
        generation=_env_int("SLAQ_GENERATION", 0),
        job=os.environ.get("SLAQ_JOB"),
        checkpoint_dir=os.environ.get("SLAQ_CHECKPOINT_DIR"),
        batch_size=_env_int("SLAQ_BATCH_SIZE", 0) or None,
        nats=os.environ.get("SLAQ_NATS"),
        prefix=os.environ.get("SLAQ_PREFIX", "slaq"),
        accelerator=os.environ.get("SLAQ_ACCELERATOR", "default"),
    )

    def on_term(_signum, _frame):
        ctx._stop = True

    if "WORLD_SIZE" in os.environ:
        # Until it has joined its world a process has nothing to save: a SIGTERM then (its
        # generation superseded or its job ended while it waits in rendezvous) ends it at once.
        # A Python handler would only run once init_process_group returns, up to its timeout.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        import torch
        import torch.distributed as dist
        if backend is None:
            backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(ctx.local_rank)
        dist.init_process_group(backend, rank=ctx.rank, world_size=ctx.world_size,
                                timeout=timedelta(seconds=timeout_s))
        ctx.distributed = True
    signal.signal(signal.SIGTERM, on_term)
    return ctx


def digest(module) -> str:
    """A short digest of a module's parameters (equal parameters, equal digest)."""
    h = hashlib.sha256()
    for p in module.parameters():
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


class Checkpoint:
    """Saves ``objects`` (anything with ``state_dict``/``load_state_dict``: modules,
    optimizers, schedulers) with the iteration reached, on SIGTERM and every ``every_s``
    seconds or ``every_iters`` iterations; restores them at start."""

    def __init__(self, ctx: Context, objects: Dict[str, object], every_s: Optional[float] = 60.0,
                 every_iters: Optional[int] = None):
        self.ctx = ctx
        self.objects = objects
        self.every_s = every_s
        self.every_iters = every_iters
        self.path = os.path.join(ctx.checkpoint_dir, CHECKPOINT_FILE) if ctx.checkpoint_dir else None
        self._last_save = time.monotonic()
        #: The iteration the last save or restore was at.
        self.iteration = 0

    def restore(self) -> int:
        """Loads the last checkpoint, if there is one; returns its iteration (0 without)."""
        if self.path is None or not os.path.exists(self.path):
            return 0
        import torch
        state = torch.load(self.path, map_location="cpu")
        for name, obj in self.objects.items():
            obj.load_state_dict(state[name])
        self.iteration = int(state["iteration"])
        return self.iteration

    def save(self, iteration: int):
        """Rank 0 writes the checkpoint (a temporary file, then renamed over the last)."""
        self._last_save = time.monotonic()
        self.iteration = iteration
        if self.path is None or self.ctx.rank != 0:
            return
        import torch
        state = {name: obj.state_dict() for name, obj in self.objects.items()}
        state["iteration"] = int(iteration)
        state["generation"] = self.ctx.generation
        tmp = f"{self.path}.tmp.{os.getpid()}"
        torch.save(state, tmp)
        os.replace(tmp, self.path)

    def step(self, iteration: int) -> bool:
        """After each iteration: saves when due or when a stop was requested; returns whether
        to leave now (all ranks agree)."""
        stop = self.ctx.stop_requested()
        due = (self.every_iters is not None and iteration % self.every_iters == 0) or (
            self.every_s is not None and time.monotonic() - self._last_save >= self.every_s)
        if stop or due:
            self.save(iteration)
        return stop


class Reporter:
    """Loss reports from rank 0 (the other ranks' calls do nothing). It attaches to the
    submitted job without a hello, so the submitted spec and command stay as they are.
    Credentials for NATS, if it needs them, come from ``NATS_USER``/``NATS_PASSWORD`` or
    ``NATS_CREDS`` in the job's environment."""

    def __init__(self, ctx: Context, checkpoint: Optional["Checkpoint"] = None, **kwargs):
        """``checkpoint``: the job's :class:`Checkpoint`, so that each report says what a stop
        would lose (nothing when it saves at SIGTERM; without one, everything since start)."""
        self.ctx = ctx
        self.checkpoint = checkpoint
        self._started = time.monotonic()
        self._job = None
        if ctx.rank == 0 and ctx.job and ctx.nats:
            from .sync import Job
            options = {}
            if os.environ.get("NATS_USER"):
                options["user"] = os.environ["NATS_USER"]
                options["password"] = os.environ.get("NATS_PASSWORD", "")
            if os.environ.get("NATS_CREDS"):
                options["user_credentials"] = os.environ["NATS_CREDS"]
            self._job = Job(ctx.job, nats=ctx.nats, prefix=ctx.prefix, hello=False, keepalive=None,
                            connect_options=options or None, **kwargs)

    def report(self, iteration: int, loss: float, iter_seconds: float, batch_size: Optional[int] = None):
        if self._job is not None:
            saves_at_stop = self.checkpoint is not None and self.checkpoint.path is not None
            age = 0.0 if saves_at_stop else time.monotonic() - self._started
            self._job.report(iteration, loss, iter_seconds, workers=self.ctx.world_size, batch_size=batch_size,
                             generation=self.ctx.generation, checkpoint_age_s=age)

    def finish(self, reason: str = "finished"):
        """The job is done (rank 0 says bye); then this reporter is closed."""
        if self._job is not None:
            try:
                self._job.bye(reason)
            finally:
                self.close()

    def close(self):
        if self._job is not None:
            self._job.close()
            self._job = None
