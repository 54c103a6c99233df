"""The torch models and timing loop shared by scripts/peer-bench.py and scripts/peer-train.py.

Block and Bert are kiln's `block` and `minilm` workloads written as idiomatic torch modules
(nn.Linear, nn.LayerNorm, nn.Embedding); each script initialises their weights as it needs.
"""
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


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


def timed_runs(step, min_runs, min_secs):
    """Calls `step()` (its result dropped) until at least `min_runs` calls and `min_secs`
    seconds have passed; returns each call's time in seconds."""
    times = []
    start = time.perf_counter()
    while len(times) < min_runs or time.perf_counter() - start < min_secs:
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    return times
