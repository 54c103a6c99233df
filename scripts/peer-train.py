"""torch's side of kiln bench's training rows (train_mlp, train_block, train_minilm).

Each workload is built as kiln's is (same shapes, losses and AdamW settings; random
weights) and one step (forward + loss, backward, AdamW, zero_grad) is timed eagerly and
with the forward + loss through torch.compile (AOTAutograd compiles the backward; AdamW is
torch's fused CPU kernel on both sides, as kiln's). Prints the median ms per step, GFLOP/s
(kiln bench's count: 3x the forward's matmul flops) and the first step (for torch.compile,
the compile). Peak memory is not measured: torch's CPU allocator keeps no statistics.
Run it in the same hour as `kiln bench --workload train_mlp,train_block,train_minilm`.
Usage: python3 scripts/peer-train.py [train_mlp train_block train_minilm]
"""
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.dont_write_bytecode = True  # no scripts/__pycache__ from the import below
from peer_models import Bert, Block, timed_runs  # noqa: E402

torch.manual_seed(0)
torch.set_num_threads(2)


def workload(name):
    if name == "train_mlp":
        model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
        x = torch.randn(64, 64)
        y = torch.tensor([(7 * i) % 10 for i in range(64)])
        return model, (lambda m, x, y: F.cross_entropy(m(x), y)), (x, y), 3 * 2 * 64 * (64 * 128 + 128 * 10)
    if name == "train_block":
        b, s, d = 4, 256, 512
        model = Block(d)
        flops = 3 * (24 * b * s * d * d + 4 * b * s * s * d)
        return model, (lambda m, x, t: F.mse_loss(m(x), t)), (torch.randn(b, s, d), torch.randn(b, s, d)), flops
    if name == "train_minilm":
        b, s, d, f = 8, 128, 384, 1536
        model = Bert()
        ids = torch.randint(0, 30522, (b, s))
        mask = torch.ones(b, s)
        pos = torch.arange(s).repeat(b, 1)
        target = torch.randn(b, d)
        flops = 3 * 6 * (2 * b * s * (4 * d * d + 2 * d * f) + 4 * b * s * s * d)
        return model, (lambda m, i, k, p, t: F.mse_loss(m(i, k, p), t)), (ids, mask, pos, target), flops
    raise SystemExit(f"unknown workload {name}")


def timed_steps(step, min_runs, min_secs):
    return statistics.median(timed_runs(step, min_runs, min_secs))


def measure(name, compiled):
    model, loss_fn, inputs, flops = workload(name)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    f = torch.compile(loss_fn) if compiled else loss_fn

    def step():
        loss = f(model, *inputs)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    t = time.perf_counter()
    step()
    first = time.perf_counter() - t
    for _ in range(3):
        step()
    small = name == "train_mlp"
    med = timed_steps(step, 200 if small else 10, 2.0 if small else 5.0)
    return med, first, flops


def main():
    names = sys.argv[1:] or ["train_mlp", "train_block", "train_minilm"]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for name in names:
        for compiled in (False, True):
            med, first, flops = measure(name, compiled)
            side = "torch.compile" if compiled else "torch eager"
            print(f"{name:13} {side:14} median {med * 1e3:9.3f} ms  {flops / med / 1e9:6.1f} GFLOP/s"
                  f"  first step {first * 1e3:8.1f} ms", flush=True)


if __name__ == "__main__":
    main()
