"""A real PyTorch DDP job under slaq: an MLP on scikit-learn's digits (shipped with the
package, nothing downloaded), elastic across generations.

    slaq submit --job digits --max-workers 4 --checkpoint-dir /shared/ckpt/digits -- \
        python examples/torch_ddp.py --iterations 400

Run by hand (no slaq) it trains as one process. Lines marked `# slaq` are what it adds to a
plain DDP script. `--log FILE` appends one JSON line per event (tests read it).
"""

import argparse
import json
import os
import time

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits

import slaq.elastic  # slaq

parser = argparse.ArgumentParser()
parser.add_argument("--iterations", type=int, default=400)
parser.add_argument("--lr", type=float, default=0.1)
parser.add_argument("--batch", type=int, default=64, help="global batch (unless slaq chooses one)")
parser.add_argument("--checkpoint-every-s", type=float, default=30.0)
parser.add_argument("--checkpoint-every-iters", type=int, default=None)
parser.add_argument("--iter-sleep", type=float, default=0.0, help="seconds added to each step (demos)")
parser.add_argument("--work-s", type=float, default=0.0,
                    help="seconds of stand-in compute per step, divided among the ranks as data-parallel "
                         "compute is (for measuring schedules on a machine with fewer cores than workers)")
parser.add_argument("--hidden", type=int, default=64)
parser.add_argument("--log", default=None)
args = parser.parse_args()

torch.set_num_threads(1)
ctx = slaq.elastic.init()  # slaq: torch.distributed from the agent's environment


def log(event, **fields):
    if args.log:
        line = json.dumps({"event": event, "job": ctx.job, "rank": ctx.rank, "world": ctx.world_size,
                           "generation": ctx.generation, "accelerator": ctx.accelerator, "pid": os.getpid(),
                           "t": time.time(), **fields})
        with open(args.log, "a") as f:
            f.write(line + "\n")


x, y = load_digits(return_X_y=True)
x, y = torch.tensor(x / 16.0, dtype=torch.float32), torch.tensor(y)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, args.hidden), torch.nn.ReLU(), torch.nn.Linear(args.hidden, 10))
opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
ckpt = slaq.elastic.Checkpoint(ctx, {"model": model, "optimizer": opt},  # slaq
                               every_s=args.checkpoint_every_s, every_iters=args.checkpoint_every_iters)
start = ckpt.restore()  # slaq: the iteration the last generation reached
restored = slaq.elastic.digest(model) if start else None
ddp = torch.nn.parallel.DistributedDataParallel(model) if ctx.distributed else model
reporter = slaq.elastic.Reporter(ctx, checkpoint=ckpt)  # slaq: rank 0 reports the loss

# Every rank of this generation says who it is: one world of ranks 0..N-1.
members = [None] * ctx.world_size
if ctx.distributed:
    torch.distributed.all_gather_object(members, (ctx.rank, ctx.generation))
else:
    members = [(0, ctx.generation)]
log("start", start=start, restored=restored, members=members)

global_batch = ctx.global_batch(args.batch)  # slaq: the batch slaq chose, if any
finished = True
for it in range(start + 1, args.iterations + 1):
    began = time.time()
    # The same draw on every rank; each takes its own slice of it.
    picks = torch.randint(0, len(x), (global_batch,), generator=torch.Generator().manual_seed(it))
    mine = picks[ctx.rank::ctx.world_size]
    loss = F.cross_entropy(ddp(x[mine]), y[mine])
    opt.zero_grad()
    loss.backward()
    opt.step()
    if args.iter_sleep or args.work_s:
        time.sleep(args.iter_sleep + args.work_s / ctx.world_size)
    if ctx.rank == 0:
        with torch.no_grad():
            full = F.cross_entropy(model(x), y).item()  # the loss on the whole training set
        reporter.report(it, full, time.time() - began, batch_size=global_batch)  # slaq
        log("loss", iteration=it, loss=full)
    if ckpt.step(it):  # slaq: saved at `it` if due; True once any rank got SIGTERM
        log("stopped", iteration=it, saved=slaq.elastic.digest(model))
        finished = False
        break
    if ckpt.iteration == it and ctx.rank == 0:
        log("saved", iteration=it, digest=slaq.elastic.digest(model))
if finished:
    log("done", iteration=args.iterations)
    reporter.finish()  # slaq: rank 0 says bye; `slaq submit --wait` returns 0
reporter.close()
ctx.close()
