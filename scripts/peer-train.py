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
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
torch.set_num_threads(2)


class Block(nn.Module):
    """kiln's `block` workload: pre-LN, causal 8-head attention, MLP 4x with gelu."""

    def __init__(self, d=512, heads=8):
        super().__init__()
        self.h = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.w1, self.w2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, s, d = x.shape
        h = self.ln1(x)
        split = lambda t: t.view(b, s, self.h, d // self.h).transpose(1, 2)
        q, k, v = split(self.q(h)), split(self.k(h)), split(self.v(h))
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.h)
        mask = torch.full((s, s), float("-inf")).triu(1)
        att = (scores + mask).softmax(-1) @ v
        x1 = x + self.o(att.transpose(1, 2).reshape(b, s, d))
        return x1 + self.w2(F.gelu(self.w1(self.ln2(x1))))


class Bert(nn.Module):
    """MiniLM-L6's shapes: 6 layers, width 384, 12 heads, MLP 1536; mean pooling, L2 norm."""

    def __init__(self, vocab=30522, d=384, layers=6, heads=12, ffn=1536, positions=512):
        super().__init__()
        self.h = heads
        self.word, self.pos, self.typ = (
            nn.Embedding(vocab, d), nn.Embedding(positions, d), nn.Embedding(2, d))
        self.ln = nn.LayerNorm(d, eps=1e-12)
        self.layers = nn.ModuleList(
            nn.ModuleDict(dict(
                q=nn.Linear(d, d), k=nn.Linear(d, d), v=nn.Linear(d, d), o=nn.Linear(d, d),
                ln1=nn.LayerNorm(d, eps=1e-12), i=nn.Linear(d, ffn), out=nn.Linear(ffn, d),
                ln2=nn.LayerNorm(d, eps=1e-12)))
            for _ in range(layers))

    def forward(self, ids, mask, positions):
        b, s = ids.shape
        x = self.ln(self.word(ids) + self.pos(positions) + self.typ(torch.zeros_like(ids)))
        bias = (1.0 - mask)[:, None, None, :] * torch.finfo(torch.float32).min
        for l in self.layers:
            split = lambda t: t.view(b, s, self.h, -1).transpose(1, 2)
            q, k, v = split(l["q"](x)), split(l["k"](x)), split(l["v"](x))
            scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + bias
            att = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, -1)
            x = l["ln1"](x + l["o"](att))
            x = l["ln2"](x + l["out"](F.gelu(l["i"](x))))
        m = mask[:, :, None]
        pooled = (x * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return F.normalize(pooled, p=2, dim=1)


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
    times = []
    start = time.perf_counter()
    while len(times) < min_runs or time.perf_counter() - start < min_secs:
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


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
