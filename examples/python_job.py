#!/usr/bin/env python3
"""A training job in Python connected to slaq with the client package: a template for your own.

It says hello with the batch sizes it can run at (and optionally an SLO on its iteration time),
reports its loss after every iteration with its gradient statistics, trains at the batch size slaq
chooses for it (`JobAllocation.batch_size`, Courier's rule: the best predicted progress per second
within the SLO), follows the workers slaq allocates to it (printed as they change), and says bye
at the end (the `with` block). Here the "training" is mini-batch gradient descent on a
least-squares problem, so the loss and the gradient statistics are real.

    pip install ./clients/python
    python3 examples/python_job.py --nats nats://127.0.0.1:4222 --job py-demo --iters 50
"""
import argparse
import random

import slaq
from slaq.integrations.loop import Reporter


def least_squares(seed, n=200, d=5):
    rng = random.Random(seed)
    xs = [[rng.gauss(0, 1) for _ in range(d)] for _ in range(n)]
    w_true = [rng.gauss(0, 1) for _ in range(d)]
    ys = [sum(a * b for a, b in zip(x, w_true)) + rng.gauss(0, 0.1) for x in xs]
    return xs, ys


def loss_and_step(xs, ys, w, lr, batch, rng, smallest):
    """One step on a random mini-batch of `batch` examples. Returns the loss on all the data, the
    new weights and the gradient statistics slaq uses to predict how much a larger batch helps:
    the squared norm of the mean gradient and the variance of a mini-batch gradient at the job's
    smallest batch (the per-example variance divided by that batch)."""
    n, d = len(xs), len(w)
    loss = sum((sum(a * b for a, b in zip(x, w)) - y) ** 2 for x, y in zip(xs, ys)) / n
    picks = [rng.randrange(n) for _ in range(batch)]
    per_example = []
    for k in picks:
        r = sum(a * b for a, b in zip(xs[k], w)) - ys[k]
        per_example.append([2 * r * xi for xi in xs[k]])
    mean = [sum(g[i] for g in per_example) / batch for i in range(d)]
    variance = sum(sum((g[i] - mean[i]) ** 2 for i in range(d)) for g in per_example) / max(1, batch - 1)
    stats = {"grad_sqr": sum(m * m for m in mean), "grad_var": variance / smallest}
    return loss, [wi - lr * gi for wi, gi in zip(w, mean)], stats


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--nats", default="nats://127.0.0.1:4222")
    p.add_argument("--prefix", default="slaq")
    p.add_argument("--job", default="py-demo")
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--json", action="store_true", help="speak JSON instead of MessagePack")
    p.add_argument("--batch-sizes", default="8,16,32,64", help="the batch sizes the job can run at")
    p.add_argument("--slo", type=float, default=None, help="seconds an iteration may take at most")
    args = p.parse_args()

    encoding = "json" if args.json else "msgpack"
    sizes = sorted(int(b) for b in args.batch_sizes.split(","))
    with slaq.Job(args.job, nats=args.nats, prefix=args.prefix, encoding=encoding, family="linreg",
                  batch_sizes=sizes, slo_iter_seconds=args.slo) as job:
        def changed(a):
            print(f"{args.job}: now on {len(a.workers)} workers, batch {a.batch_size or sizes[0]}", flush=True)
        job.on_allocation(changed)
        reporter = Reporter(job)
        xs, ys = least_squares(seed=7)
        w = [0.0] * len(xs[0])
        rng = random.Random(11)
        for _ in range(args.iters):
            # The batch slaq chose for the current allocation, or the smallest before it chose.
            batch = (job.allocation and job.allocation.batch_size) or sizes[0]
            reporter.begin()
            loss, w, stats = loss_and_step(xs, ys, w, lr=0.05, batch=batch, rng=rng, smallest=sizes[0])
            # workers: the job's current allocation (1 before any); all on one machine here.
            reporter.step(loss, batch_size=batch, machines=1, **stats)
    print(f"{args.job}: done, final loss {loss:.6f}", flush=True)


if __name__ == "__main__":
    main()
