#!/usr/bin/env python3
"""A training job in Python connected to slaq with the client package: a template for your own.

It says hello, reports its loss after every iteration, follows the workers slaq allocates to it
(printed as they change), and says bye at the end (the `with` block). Here the "training" is
gradient descent on a least-squares problem, so the loss is real.

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


def loss_and_step(xs, ys, w, lr):
    n, d = len(xs), len(w)
    grad = [0.0] * d
    loss = 0.0
    for x, y in zip(xs, ys):
        r = sum(a * b for a, b in zip(x, w)) - y
        loss += r * r / n
        for i in range(d):
            grad[i] += 2 * r * x[i] / n
    return loss, [wi - lr * gi for wi, gi in zip(w, grad)]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--nats", default="nats://127.0.0.1:4222")
    p.add_argument("--prefix", default="slaq")
    p.add_argument("--job", default="py-demo")
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--json", action="store_true", help="speak JSON instead of MessagePack")
    args = p.parse_args()

    encoding = "json" if args.json else "msgpack"
    with slaq.Job(args.job, nats=args.nats, prefix=args.prefix, encoding=encoding, family="linreg") as job:
        job.on_allocation(lambda a: print(f"{args.job}: now on {len(a.workers)} workers", flush=True))
        reporter = Reporter(job)
        xs, ys = least_squares(seed=7)
        w = [0.0] * len(xs[0])
        for _ in range(args.iters):
            reporter.begin()
            loss, w = loss_and_step(xs, ys, w, lr=0.05)
            reporter.step(loss)  # workers: the job's current allocation (1 before any)
    print(f"{args.job}: done, final loss {loss:.6f}", flush=True)


if __name__ == "__main__":
    main()
