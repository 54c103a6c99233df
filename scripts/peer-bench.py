"""torch's side of `kiln bench`'s forward workloads: torch eager and torch.compile.

The workloads of shared/bench/WORKLOADS.md, built as kiln's are in frontend/src/models/
(same shapes, f32, standard-normal inputs; weights randn / sqrt(fan_in), layer norms'
weight 1 + 0.1 randn and bias 0.1 randn; MiniLM-L6 with random BERT-style weights, std 0.02,
batch 8, seq 128):

    pointwise  gelu_tanh(x * 1.5 + 0.5) * sigmoid(x)                  x [16M]
    layernorm  layer_norm(x, [1024], w, b, eps 1e-5)                  x [8192, 1024]
    softmax    softmax(x, -1)                                          x [8192, 1024]
    reduce     sum(x * x, dim=1)                                       x [4096, 4096]
    mlp        relu(x @ W1 + b1) @ W2 + b2                             x [256, 1024], hidden 4096
    block      pre-LN block, causal 8-head attention, MLP 4x (erf gelu) x [4, 256, 512]
    tiny       20 chained pointwise ops (+c, *c, tanh, sigmoid)        x [1024]
    minilm     all-MiniLM-L6-v2 embeddings (mean pooling, L2 norm)     ids [8, 128]

Each workload and side (torch eager; torch.compile with the default inductor backend and a
fresh, empty inductor cache, so its first call is a cold compile) runs in its own fresh
subprocess with 2 threads, under torch.inference_mode(), and by default with glibc told to
keep freed memory (`MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1000000000000`, the "NF"
setting of shared/bench/PEERS.md; `--no-nf` runs without it). The first call is timed alone
(for torch.compile: the compile), then warm-up calls (at least 3 and 0.2 s), then at least
`--min-runs` calls and `--min-secs` seconds: median, min and max. A call's output is then
checked against the same computation in float64 (torch double): relative L2 error <= 1e-4,
1e-3 for the matmul workloads (mlp, block, minilm). A failed check or an error is a row of
the table (and the exit status is 1), never dropped. The last column, "others' CPU", is the
share of the machine's CPUs that other processes used while the runs were timed (from
/proc/stat): with 2 threads on a small machine, any of it makes the times meaningless.

Run it in the same hour as `kiln bench` (the machine is shared and its speed drifts between
days: compare ratios measured together):

    python3 scripts/peer-bench.py [workloads...] [--json PATH] [--min-secs S] [--min-runs N]
                                  [--no-nf] [--warm-cache]
"""
import argparse
import copy
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.dont_write_bytecode = True  # no scripts/__pycache__ from the import below
from peer_models import Bert, Block, timed_runs  # noqa: E402

WORKLOADS = ["pointwise", "layernorm", "softmax", "reduce", "mlp", "block", "tiny", "minilm"]
MATMUL = {"mlp", "block", "minilm"}
SIDES = {"eager": "torch eager", "compile": "torch.compile"}
NF_ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": "1000000000000"}
THREADS = 2


def tolerance(name):
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
    raise SystemExit(f"unknown workload {name!r}; the workloads are {WORKLOADS}")


def cpu_busy_s():
    """Seconds all CPUs of the machine have been busy (not idle, not waiting for I/O), from
    /proc/stat; None where there is none."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return (sum(ticks[:8]) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def child(name, side, min_runs, min_secs, out):
    """Measures one workload on one side in this (fresh) process; writes a JSON object."""
    torch.set_num_threads(THREADS)
    torch.manual_seed(0)
    model, inputs = build(name)
    model.eval()
    fn = torch.compile(model) if side == "compile" else model
    with torch.inference_mode():
        t = time.perf_counter()
        fn(*inputs)
        first = time.perf_counter() - t
        timed_runs(lambda: fn(*inputs), 3, 0.2)  # warm-up
        busy, own, wall = cpu_busy_s(), time.process_time(), time.perf_counter()
        times = timed_runs(lambda: fn(*inputs), min_runs, min_secs)
        # the CPU time other processes took while the runs were timed, as a share of the
        # machine (2 cores fully busy elsewhere on a 2-core machine: 1.0)
        others = None if busy is None else max(0.0, (cpu_busy_s() - busy) - (
            time.process_time() - own)) / ((time.perf_counter() - wall) * os.cpu_count())
        y = fn(*inputs).double()
        ref = copy.deepcopy(model).double()(
            *[x.double() if x.is_floating_point() else x for x in inputs])
        rel = (torch.linalg.vector_norm(y - ref) / torch.linalg.vector_norm(ref)).item()
    result = dict(
        median_ms=statistics.median(times) * 1e3, min_ms=min(times) * 1e3,
        max_ms=max(times) * 1e3, runs=len(times), first_call_ms=first * 1e3, rel_err=rel,
        others_cpu=others,
        torch=torch.__version__, threads=torch.get_num_threads())
    with open(out, "w") as f:
        json.dump(result, f)


def run_case(name, side, args):
    """Runs `child` in a fresh process; returns the row (an `error` instead of times when
    the process failed)."""
    env = dict(os.environ)
    for k in NF_ENV:
        env.pop(k, None)
    if not args.no_nf:
        env.update(NF_ENV)
    tmp = tempfile.mkdtemp(prefix="peer-bench-")
    if side == "compile" and not args.warm_cache:
        env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(tmp, "inductor")
    out = os.path.join(tmp, "result.json")
    cmd = [sys.executable, os.path.abspath(__file__), "--child", name, side, out,
           "--min-runs", str(args.min_runs), "--min-secs", str(args.min_secs)]
    row = dict(workload=name, side=SIDES[side], nf=not args.no_nf, tolerance=tolerance(name),
               loadavg_before=os.getloadavg()[0])
    try:
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
        if p.returncode == 0 and os.path.exists(out):
            with open(out) as f:
                row.update(json.load(f))
            row["verified"] = math.isfinite(row["rel_err"]) and row["rel_err"] <= row["tolerance"]
        else:
            tail = p.stdout.strip().splitlines()[-5:]
            row.update(verified=False, error=f"exit {p.returncode}: " + " | ".join(tail))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return row


def ms(v):
    return f"{v:.3g}" if v < 100 else f"{v:.0f}"


def table(rows):
    head = ["workload", "side", "median ms (min–max)", "first call ms", "rel error", "check",
            "others' CPU"]
    body = []
    for r in rows:
        if "error" in r:
            body.append([r["workload"], r["side"], "-", "-", "-", "ERROR", "-"])
            continue
        others = r["others_cpu"]
        body.append([
            r["workload"], r["side"],
            f"{ms(r['median_ms'])} ({ms(r['min_ms'])}–{ms(r['max_ms'])})",
            ms(r["first_call_ms"]), f"{r['rel_err']:.1e}",
            "ok" if r["verified"] else f"FAIL (> {r['tolerance']:.0e})",
            "-" if others is None else f"{others:.0%}"])
    widths = [max(len(line[i]) for line in [head] + body) for i in range(len(head))]
    fmt = lambda line: "  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip()
    lines = [fmt(head), fmt(["-" * w for w in widths])] + [fmt(line) for line in body]
    busy = [r for r in rows if (r.get("others_cpu") or 0) > 0.05]
    if busy:
        lines.append(
            "others' CPU: the share of the machine's CPUs other processes used while the runs "
            f"were timed; over 5% for {len(busy)} row(s): their times are not trustworthy, "
            "rerun them on a quiet machine")
    for r in rows:
        if "error" in r:
            lines.append(f"error: {r['workload']} ({r['side']}): {r['error']}")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(
        description="torch eager and torch.compile on kiln bench's forward workloads",
        epilog="run it in the same hour as `kiln bench`")
    ap.add_argument("workloads", nargs="*", metavar="WORKLOAD",
                    help=f"a subset of {', '.join(WORKLOADS)} (default: all)")
    ap.add_argument("--min-secs", type=float, default=1.0,
                    help="time at least this many seconds per case (default 1)")
    ap.add_argument("--min-runs", type=int, default=20,
                    help="time at least this many calls per case (default 20)")
    ap.add_argument("--json", metavar="PATH", help="also write the rows to this JSON file")
    ap.add_argument("--no-nf", action="store_true",
                    help="run without MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1e12")
    ap.add_argument("--warm-cache", action="store_true",
                    help="let torch.compile use its usual inductor cache (default: a fresh "
                         "empty one per case, so the first call is a cold compile)")
    ap.add_argument("--child", nargs=3, metavar=("WORKLOAD", "SIDE", "OUT"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        name, side, out = args.child
        child(name, side, args.min_runs, args.min_secs, out)
        return
    names = args.workloads or WORKLOADS
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        ap.error(f"unknown workload(s) {unknown}; the workloads are {WORKLOADS}")
    print(f"torch {torch.__version__}, {THREADS} threads, "
          f"{'NF malloc settings' if not args.no_nf else 'default malloc'}, "
          f"at least {args.min_runs} runs and {args.min_secs:g} s per case, "
          f"load average {os.getloadavg()[0]:.2f} ({os.cpu_count()} cpus)", flush=True)
    rows = []
    start = time.perf_counter()
    for name in names:
        for side in SIDES:
            row = run_case(name, side, args)
            rows.append(row)
            state = row.get("error") or (
                f"median {ms(row['median_ms'])} ms, first call {ms(row['first_call_ms'])} ms, "
                f"rel error {row['rel_err']:.1e}")
            print(f"  {name} {SIDES[side]}: {state}", file=sys.stderr, flush=True)
    print(table(rows))
    print(f"total {time.perf_counter() - start:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    sys.exit(0 if all(r["verified"] for r in rows) else 1)


if __name__ == "__main__":
    main()
