"""The wire contract v1: subjects, message shapes and the MessagePack/JSON codec."""

import base64
import json
import re
from dataclasses import dataclass, field
from typing import List, Optional

import msgpack

_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
JSON_HEADERS = {"Content-Type": "application/json"}


class SlaqError(Exception):
    """The scheduler refused a request, or an argument breaks the contract."""


def check_id(what: str, value: str) -> str:
    if not isinstance(value, str) or not _ID.match(value):
        raise SlaqError(f"{what} {value!r} is not 1-64 characters from [A-Za-z0-9_-]")
    return value


def check_job_id(value: str) -> str:
    """A job id: ``NAME``, or ``TENANT.NAME`` for a tenant's job (the tenant is the token
    nats-server's permissions confine a team's users to; docs/teams.md)."""
    tokens = value.split(".") if isinstance(value, str) else [value]
    if len(tokens) > 2 or not all(isinstance(t, str) and _ID.match(t) for t in tokens):
        raise SlaqError(f"job id {value!r} is not NAME or TENANT.NAME, each 1-64 characters from [A-Za-z0-9_-]")
    return value


def check_prefix(prefix: str) -> str:
    for token in prefix.split("."):
        check_id("prefix token", token)
    return prefix


def tenant_from_permissions(prefix: str, allow) -> Optional[str]:
    """The tenant a user's publish permissions (``allow``, subjects with wildcards) confine it
    to: the one ``TENANT`` of every job subject it may publish on
    (``<prefix>.v1.job.TENANT.*.hello``, ``...TENANT.>``, ``...TENANT.NAME.loss``). ``None``
    when it may publish as any tenant (no permissions, or a wildcard in the tenant's place),
    as several, or as none."""
    head = f"{prefix}.v1.job."
    open_to_all = {">", f"{prefix}.>", f"{prefix}.v1.>", f"{prefix}.v1.job.>"}
    tenants = set()
    for subject in allow or []:
        if not isinstance(subject, str):
            continue
        if subject in open_to_all:
            return None
        if not subject.startswith(head):
            continue
        tokens = subject[len(head):].split(".")
        if tokens[0] in ("*", ">"):
            return None
        named_job = len(tokens) == 3 and bool(_ID.match(tokens[1]))
        if len(tokens) >= 2 and _ID.match(tokens[0]) and (tokens[1] in ("*", ">") or named_job):
            tenants.add(tokens[0])
    return tenants.pop() if len(tenants) == 1 else None


def publish_allow_from_creds(path) -> Optional[list]:
    """The publish permissions in a NATS credentials file's user JWT (``None``: no file, or no
    JWT in it). The JWT is read, not verified: the server verifies it; the client only learns
    what it may say."""
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return None
    match = re.search(r"-+BEGIN NATS USER JWT-+\s*([A-Za-z0-9_=.-]+)\s*-+END NATS USER JWT-+", text)
    if not match or match.group(1).count(".") != 2:
        return None
    payload = match.group(1).split(".")[1]
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except ValueError:
        return None
    pub = ((claims.get("nats") or {}).get("pub") or {}) if isinstance(claims, dict) else {}
    return pub.get("allow") or []


class Subjects:
    """Subject names of one job under a prefix (``slaq`` by default)."""

    def __init__(self, prefix: str, job: str):
        base = f"{check_prefix(prefix)}.v1.job.{check_job_id(job)}"
        self.hello = f"{base}.hello"
        self.loss = f"{base}.loss"
        self.bye = f"{base}.bye"
        self.alloc = f"{base}.alloc"
        #: The job's own status (what the job's NATS user may ask under slaq-auth.conf).
        self.status = f"{base}.status"
        #: The whole status (the operators').
        self.ctl_status = f"{prefix}.v1.ctl.status"


class Codec:
    """MessagePack maps with named fields, or JSON (selected by a header)."""

    def __init__(self, encoding: str = "msgpack"):
        if encoding not in ("msgpack", "json"):
            raise SlaqError(f"encoding must be 'msgpack' or 'json', not {encoding!r}")
        self.encoding = encoding
        self.headers = JSON_HEADERS if encoding == "json" else None

    def encode(self, message: dict) -> bytes:
        if self.encoding == "json":
            return json.dumps(message).encode()
        return msgpack.packb(message, use_bin_type=True)

    def decode(self, payload: bytes) -> dict:
        if self.encoding == "json":
            return json.loads(payload)
        return msgpack.unpackb(payload, raw=False)


def decode_published(payload: bytes) -> dict:
    """What the scheduler publishes (allocations) is always MessagePack."""
    return msgpack.unpackb(payload, raw=False)


@dataclass
class Allocation:
    """The job's workers, as the scheduler last published them."""

    epoch: int
    workers: List[str] = field(default_factory=list)
    batch_size: Optional[int] = None
    #: The term of the scheduler that decided it (a replicated scheduler's lease, or a
    #: restart's incarnation): a newer term counts its epochs from 1 again.
    term: Optional[int] = None
    #: The workers' type (``slaq worker --accelerator``; a world is one type); None while every
    #: worker is of the default type, or without workers.
    accelerator: Optional[str] = None
    #: Save now (a job with ``save_on_request``): a reclaim of its workers waits for the save
    #: its next reports' ``checkpoint_age_s`` show, at most its tenant's grace.
    save: bool = False

    @classmethod
    def from_message(cls, message: dict) -> "Allocation":
        term = message.get("term")
        accelerator = message.get("accelerator")
        return cls(
            epoch=int(message.get("epoch", 0)),
            workers=[str(w) for w in message.get("workers", [])],
            batch_size=message.get("batch_size"),
            term=None if term is None else int(term),
            accelerator=None if accelerator is None else str(accelerator),
            save=bool(message.get("save", False)),
        )

    def order(self) -> tuple:
        """Allocations follow one another in this order: by term, then by epoch."""
        return (self.term or 0, self.epoch)


def job_command(argv, env=None, cwd=None, checkpoint_dir=None, max_restarts=3) -> dict:
    """A submitted job's command (``argv`` run as is, never through a shell)."""
    argv = [str(a) for a in argv]
    if not argv or not argv[0]:
        raise SlaqError("the command is empty")
    command = {"argv": argv, "max_restarts": int(max_restarts)}
    if env:
        command["env"] = {str(k): str(v) for k, v in env.items()}
    if cwd is not None:
        command["cwd"] = str(cwd)
    if checkpoint_dir is not None:
        command["checkpoint_dir"] = str(checkpoint_dir)
    return command


def job_spec(job: str, family=None, tenant=None, weight=1.0, min_workers=0, max_workers=None,
             target_loss=None, slo_iter_seconds=None, batch_sizes=None, parameter_server=False,
             max_local_batch=None, command=None, worker_counts=None, max_iters=None,
             checkpoint_every_s=None, priority=0, save_on_request=False) -> dict:
    spec = {"job": job, "weight": float(weight), "min_workers": int(min_workers)}
    optional = {"family": family, "tenant": tenant, "max_workers": max_workers, "target_loss": target_loss,
                "slo_iter_seconds": slo_iter_seconds, "batch_sizes": batch_sizes,
                "max_local_batch": max_local_batch, "command": command,
                "worker_counts": None if worker_counts is None else [int(n) for n in worker_counts],
                "max_iters": None if max_iters is None else int(max_iters),
                "checkpoint_every_s": None if checkpoint_every_s is None else float(checkpoint_every_s)}
    spec.update({k: v for k, v in optional.items() if v is not None})
    if parameter_server:
        spec["parameter_server"] = True
    if priority:
        spec["priority"] = int(priority)
    if save_on_request:
        # Asked to save before a reclaim (``AsyncJob.save_requested``): for a job that saves on
        # a schedule; one without it is taken to save at its stop.
        if checkpoint_every_s is None:
            raise SlaqError("save_on_request needs checkpoint_every_s")
        spec["save_on_request"] = True
    return spec


# Optional statistics a report may carry (see the wire contract): the machines its workers span
# and the part of the iteration spent synchronising (for the placement-aware iteration-time
# model), the gradient's squared norm and variance (statistical efficiency of larger batches), and
# the generation of the processes that ran it (``SLAQ_GENERATION``: slaq times its restarts), and
# the work a stop would lose (``checkpoint_age_s``: a move costs the job that plus a restart).
REPORT_STATS = {"machines": int, "sync_seconds": float, "grad_sqr": float, "grad_var": float, "generation": int,
                "checkpoint_age_s": float}


def loss_report(job: str, iteration: int, loss: float, iter_seconds: float, workers: int,
                batch_size=None, sent_at=None, **stats) -> dict:
    iteration, loss, iter_seconds, workers = int(iteration), float(loss), float(iter_seconds), int(workers)
    if iteration < 1:
        raise SlaqError("iteration is 1-based")
    if loss != loss or loss in (float("inf"), float("-inf")):
        raise SlaqError(f"loss must be finite, not {loss}")
    if not iter_seconds >= 0:
        raise SlaqError("iter_seconds must be non-negative")
    report = {"job": job, "iter": iteration, "loss": loss, "iter_seconds": iter_seconds, "workers": max(0, workers)}
    if batch_size is not None:
        report["batch_size"] = int(batch_size)
    if sent_at is not None:
        report["sent_at"] = float(sent_at)
    for key, value in stats.items():
        if key not in REPORT_STATS:
            raise SlaqError(f"unknown report field {key!r}; known: {', '.join(REPORT_STATS)}")
        if value is not None:
            report[key] = REPORT_STATS[key](value)
    return report


END_REASONS = ("finished", "cancelled", "failed")
