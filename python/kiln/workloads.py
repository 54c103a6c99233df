"""kiln bench's forward workloads as PyTorch modules (the same shapes and initialisation as
frontend/src/models), shared by `python -m kiln.bench` and scripts/peer-train.py.

The workloads of shared/bench/WORKLOADS.md (f32, standard-normal inputs; weights
randn / sqrt(fan_in), layer norms' weight 1 + 0.1 randn and bias 0.1 randn; MiniLM-L6 with
random BERT-style weights, std 0.02, batch 8, seq 128):

    pointwise  gelu_tanh(x * 1.5 + 0.5) * sigmoid(x)                  x [16M]
    layernorm  layer_norm(x, [1024], w, b, eps 1e-5)                  x [8192, 1024]
    softmax    softmax(x, -1)                                          x [8192, 1024]
    reduce     sum(x * x, dim=1)                                       x [4096, 4096]
    mlp        relu(x @ W1 + b1) @ W2 + b2                             x [256, 1024], hidden 4096
    block      pre-LN block, causal 8-head attention, MLP 4x (erf gelu) x [4, 256, 512]
    tiny       20 chained pointwise ops (+c, *c, tanh, sigmoid)        x [1024]
    minilm     all-MiniLM-L6-v2 embeddings (mean pooling, L2 norm)     ids [8, 128]

Only torch is imported here (scripts/peer_models.py loads this file by path).
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


WORKLOADS = ["pointwise", "layernorm", "softmax", "reduce", "mlp", "block", "tiny", "minilm"]
MATMUL = {"mlp", "block", "minilm"}


def tolerance(name):
    """The relative L2 error against float64 a workload's output may have."""
    return 1e-3 if name in MATMUL else 1e-4


class Fn(nn.Module):
    """A weight-free workload as a module (so that it is compiled and cast like the others)."""

    def __init__(self, f):
        super().__init__()
        self.f = f

    def forward(self, *xs):
        return self.f(*xs)


def pointwise(x):
    return F.gelu(x * 1.5 + 0.5, approximate="tanh") * torch.sigmoid(x)


def reduce(x):
    return (x * x).sum(1)


def tiny(x):
    # kiln's Tiny::step(i), k = i / 4: +(0.25 + 0.05k), *(1.5 - 0.1k), tanh, sigmoid
    for i in range(20):
        k = i // 4
        op = i % 4
        if op == 0:
            x = x + (0.25 + 0.05 * k)
        elif op == 1:
            x = x * (1.5 - 0.1 * k)
        elif op == 2:
            x = torch.tanh(x)
        else:
            x = torch.sigmoid(x)
    return x


@torch.no_grad()
def kiln_init_(module):
    """kiln's models::weight and models::norm_params: every Linear's weight and bias
    randn / sqrt(fan_in), every LayerNorm's weight 1 + 0.1 randn and bias 0.1 randn."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            scale = 1.0 / math.sqrt(m.in_features)
            m.weight.copy_(torch.randn_like(m.weight) * scale)
            m.bias.copy_(torch.randn_like(m.bias) * scale)
        elif isinstance(m, nn.LayerNorm):
            m.weight.copy_(1.0 + 0.1 * torch.randn_like(m.weight))
            m.bias.copy_(0.1 * torch.randn_like(m.bias))
    return module


@torch.no_grad()
def bert_init_(module):
    """kiln's BertModel::random: every weight and bias normal with std 0.02, layer norms
    1 and 0."""
    for m in module.modules():
        if isinstance(m, nn.LayerNorm):
            m.weight.fill_(1.0)
            m.bias.zero_()
        elif isinstance(m, (nn.Linear, nn.Embedding)):
            for p in m.parameters():
                p.copy_(torch.randn_like(p) * 0.02)
    return module


def build(name):
    """The workload's module (f32 weights) and f32 inputs."""
    randn = torch.randn
    if name == "pointwise":
        return Fn(pointwise), [randn(16 << 20)]
    if name == "layernorm":
        return kiln_init_(nn.LayerNorm(1024, eps=1e-5)), [randn(8192, 1024)]
    if name == "softmax":
        return Fn(lambda x: torch.softmax(x, -1)), [randn(8192, 1024)]
    if name == "reduce":
        return Fn(reduce), [randn(4096, 4096)]
    if name == "mlp":
        d, hidden = 1024, 4096
        model = nn.Sequential(nn.Linear(d, hidden), nn.ReLU(), nn.Linear(hidden, d))
        return kiln_init_(model), [randn(256, d)]
    if name == "block":
        return kiln_init_(Block(512, 8)), [randn(4, 256, 512)]
    if name == "tiny":
        return Fn(tiny), [randn(1024)]
    if name == "minilm":
        b, s, vocab = 8, 128, 30522
        ids = torch.randint(1000, vocab, (b, s))
        ids[:, 0], ids[:, -1] = 101, 102  # [CLS] ... [SEP], as kiln's example_inputs
        mask = torch.ones(b, s)
        positions = torch.arange(s).repeat(b, 1)
        return bert_init_(Bert(vocab=vocab)), [ids, mask, positions]
    raise ValueError(f"unknown workload {name!r}; the workloads are {WORKLOADS}")
