#!/usr/bin/env python3
"""A training job in Python talking to slaq over NATS: a template for your own jobs.

It says hello (request/reply), reports its loss after every iteration, follows the workers
slaq allocates to it, and says bye at the end. Needs `pip install nats-py msgpack`.
Here the "training" is gradient descent on a least-squares problem, so the loss is real.

    python3 examples/python_job.py --nats nats://127.0.0.1:4222 --job py-demo --iters 50
"""
import argparse
import asyncio
import json
import random
import time

import msgpack
import nats


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


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("--nats", default="nats://127.0.0.1:4222")
    p.add_argument("--prefix", default="slaq")
    p.add_argument("--job", default="py-demo")
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--json", action="store_true", help="speak JSON instead of MessagePack")
    args = p.parse_args()

    if args.json:
        encode, decode = (lambda m: json.dumps(m).encode()), json.loads
        headers = {"Content-Type": "application/json"}
    else:
        encode, decode = (lambda m: msgpack.packb(m)), (lambda b: msgpack.unpackb(b, raw=False))
        headers = None

    nc = await nats.connect(args.nats)
    base = f"{args.prefix}.v1.job.{args.job}"
    workers = []

    async def on_alloc(msg):
        nonlocal workers
        workers = msgpack.unpackb(msg.data, raw=False)["workers"]  # slaq publishes MessagePack
        print(f"{args.job}: now on {len(workers)} workers", flush=True)

    await nc.subscribe(f"{base}.alloc", cb=on_alloc)
    reply = await nc.request(f"{base}.hello", encode({"job": args.job, "family": "linreg"}), timeout=5, headers=headers)
    ack = decode(reply.data)
    if not ack.get("ok"):
        raise SystemExit(f"slaq refused the job: {ack}")

    xs, ys = least_squares(seed=7)
    w = [0.0] * len(xs[0])
    for it in range(1, args.iters + 1):
        started = time.perf_counter()
        loss, w = loss_and_step(xs, ys, w, lr=0.05)
        seconds = time.perf_counter() - started
        report = {"job": args.job, "iter": it, "loss": loss, "iter_seconds": seconds,
                  "workers": max(1, len(workers)), "sent_at": time.time()}
        await nc.publish(f"{base}.loss", encode(report), headers=headers)
    await nc.publish(f"{base}.bye", encode({"job": args.job, "reason": "finished"}), headers=headers)
    await nc.flush()
    await nc.close()
    print(f"{args.job}: done, final loss {loss:.6f}", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
