"""`python -m kiln.bench`: kiln bench's forward workloads (kiln/workloads.py: the public
workloads and MiniLM-L6) as torch eager, `torch.compile(backend="inductor")` and
`torch.compile(backend="kiln")` (and, as the side `kiln-unpinned`,
`backend=kiln.backend(pin_weights=False)`: every parameter read afresh on every call), each case in its own fresh process, and the ratios.

Each case runs with 2 threads under torch.inference_mode(), by default with glibc told to
keep freed memory (`MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1000000000000`, the "NF"
setting of shared/bench/PEERS.md; `--no-nf` runs without it) and, for inductor, a fresh empty
cache (its first call is a cold compile; `--warm-cache` keeps the usual one). The first call
is timed alone (for the compiled sides: trace and compile; of it, the backend's own share is
the first call less Dynamo's own time and AOTAutograd's, from torch's
`compilation_time_metrics`, and one steady call), then warm-up calls (at least 3
and 0.2 s; for kiln also rounds of 1 s until no more of its kernels move to the C tier;
"full speed" is the time from the first call's start to the last of those moves), then at
least `--min-runs` calls and `--min-secs` seconds: median, min and max. A call's output is then checked against float64 torch: relative L2 error
<= 1e-4, 1e-3 for the matmul workloads (mlp, block, minilm). A failed check or an error is a
row of the table (and the exit status is 1), never dropped. "others' CPU" is the share of
the machine's CPUs other processes used while the runs were timed (from /proc/stat): with 2
threads on a small machine, any of it makes the times meaningless.

    python -m kiln.bench [workloads...] [--sides eager,inductor,kiln] [--json PATH]
                         [--min-secs S] [--min-runs N] [--no-nf] [--warm-cache]
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

from .workloads import WORKLOADS, build, timed_runs, tolerance

SIDES = {"eager": "torch eager", "inductor": "inductor", "kiln": "kiln",
         "kiln-unpinned": "kiln unpinned"}
KILN_SIDES = ("kiln", "kiln-unpinned")
NF_ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": "1000000000000"}
THREADS = 2


def cpu_busy_s():
    """Seconds all CPUs of the machine have been busy (not idle, not waiting for I/O), from
    /proc/stat; None where there is none."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return (sum(ticks[:8]) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


BACKEND_COMPILER_KEYS = ("compile_fx.<locals>.fw_compiler_base",
                         "compile_fx.<locals>.bw_compiler_base", "kiln.backend.compile")
"""The backends' graph compilers as torch's `compilation_time_metrics` names them
(inductor's, and kiln's: `kiln.backend.COMPILE_TIME_KEY`); AOTAutograd calls them."""


def capture_times():
    """Seconds Dynamo spent on its own (bytecode tracing, guards: its compile minus the time
    in the backend's compiler) and AOTAutograd on its own (its dispatcher less the graph
    compilers it calls), summed over every graph so far, from torch's
    `compilation_time_metrics`; (None, None) where this torch does not record them."""
    metrics = getattr(torch._dynamo.utils, "compilation_time_metrics", None)
    if not metrics or "_compile.compile_inner" not in metrics:
        return None, None
    total = lambda key: sum(metrics.get(key, ()))
    dynamo = total("_compile.compile_inner") - total("OutputGraph.call_user_compiler")
    aot = total("create_aot_dispatcher_function") - sum(map(total, BACKEND_COMPILER_KEYS))
    return dynamo, aot


def backend_compile_s(first, dynamo, aot, median):
    """The backend's own share of a compiled side's first call: the first call less Dynamo's
    own time, AOTAutograd's own and one steady call. Counted the same way for every backend,
    it holds what the backend does itself wherever it does it (inductor in its graph
    compiler, kiln also in its first run, where it lowers and generates code); None without
    torch's figures."""
    if dynamo is None:
        return None
    return first - dynamo - aot - median


def child(name, side, min_runs, min_secs, out):
    """Measures one workload on one side in this (fresh) process; writes a JSON object."""
    torch.set_num_threads(THREADS)
    torch.manual_seed(0)
    model, inputs = build(name)
    model.eval()
    if side in KILN_SIDES:
        from . import _native
        from .backend import backend
    if side == "eager":
        fn = model
    elif side == "kiln-unpinned":
        fn = torch.compile(model, backend=backend(pin_weights=False))
    else:
        fn = torch.compile(model, backend=side)
    full_speed = None
    with torch.inference_mode():
        t = time.perf_counter()
        fn(*inputs)
        first = time.perf_counter() - t
        dynamo_s, aot_s = capture_times() if side != "eager" else (None, None)
        timed_runs(lambda: fn(*inputs), 3, 0.2)  # warm-up
        if side in KILN_SIDES:
            # steady state: warm-up rounds (their calls count toward each kernel's C-tier
            # threshold; the C compiler runs in the background) until no more kernels move
            on_c = None
            for _ in range(4):
                timed_runs(lambda: fn(*inputs), 3, 1.0)
                _native.wait_for_c_tier(300.0)
                now = len(_native.c_tier_swap_ages())
                if now == on_c:
                    break
                on_c = now
            # full speed: from the first call's start to the last swap of a kernel after it
            end = time.perf_counter()
            swaps = [end - age for age in _native.c_tier_swap_ages() if end - age >= t]
            full_speed = max(swaps) - t if swaps else 0.0
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
        full_speed_s=full_speed, dynamo_s=dynamo_s, aot_s=aot_s,
        backend_compile_ms=None if dynamo_s is None else 1e3 * backend_compile_s(
            first, dynamo_s, aot_s, statistics.median(times)),
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
    tmp = tempfile.mkdtemp(prefix="kiln-bench-")
    if side == "inductor" and not args.warm_cache:
        env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(tmp, "inductor")
    out = os.path.join(tmp, "result.json")
    cmd = [sys.executable, "-m", "kiln.bench", "--child", name, side, out,
           "--min-runs", str(args.min_runs), "--min-secs", str(args.min_secs)]
    row = dict(workload=name, side=side, nf=not args.no_nf, tolerance=tolerance(name),
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


def table(rows, sides):
    """One line per workload: each side's median (min–max) ms, each kiln side's speedup over
    each other side, the compiled sides' first calls, kiln's time to full speed, the
    checks."""
    kilns = [s for s in sides if s in KILN_SIDES]
    peers = [s for s in sides if s not in KILN_SIDES]
    head = ["workload"] + [f"{SIDES[s]} ms" for s in sides]
    head += [f"{SIDES[k]} vs {SIDES[s]}" for k in kilns for s in peers]
    head += [f"{SIDES[s]} 1st call s (own)" for s in sides if s != "eager"]
    head += [f"{SIDES[k]} full speed s" for k in kilns]
    head += ["check", "others' CPU"]
    by = {(r["workload"], r["side"]): r for r in rows}
    body = []
    for w in dict.fromkeys(r["workload"] for r in rows):
        cells = [w]
        got = [by.get((w, s)) for s in sides]
        cells += [f"{ms(r['median_ms'])} ({ms(r['min_ms'])}–{ms(r['max_ms'])})"
                  if r and "error" not in r else "ERROR" for r in got]
        for ks in kilns:
            k = by.get((w, ks))
            for s in peers:
                o = by.get((w, s))
                ok = k and o and "error" not in k and "error" not in o
                cells.append(f"{o['median_ms'] / k['median_ms']:.2f}x" if ok else "-")
        for s in sides:
            if s != "eager":
                r = by.get((w, s))
                if not r or "error" in r:
                    cells.append("-")
                    continue
                own = r.get("backend_compile_ms")
                cells.append(f"{r['first_call_ms'] / 1e3:.2f}"
                             + (f" ({own / 1e3:.2f})" if own is not None else ""))
        for ks in kilns:
            k = by.get((w, ks))
            fs = k.get("full_speed_s") if k else None
            cells.append(f"{fs:.2f}" if fs is not None else "-")
        bad = [SIDES[s] for s, r in zip(sides, got) if not r or not r.get("verified")]
        cells.append("ok" if not bad else "FAIL: " + ", ".join(bad))
        others = [r.get("others_cpu") for r in got if r and r.get("others_cpu") is not None]
        cells.append(f"{max(others):.0%}" if others else "-")
        body.append(cells)
    widths = [max(len(line[i]) for line in [head] + body) for i in range(len(head))]
    fmt = lambda line: "  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip()
    lines = [fmt(head), fmt(["-" * w for w in widths])] + [fmt(line) for line in body]
    lines.append("kiln vs X: X's median over kiln's (above 1: kiln is faster); 1st call: trace "
                 "and compile, (own): the backend's own share, the first call less Dynamo's "
                 "tracing, AOTAutograd and one steady call; others' CPU: the most other processes took of the machine while "
                 "a row's runs were timed (over 5%: rerun on a quiet machine)")
    for r in rows:
        if "error" in r:
            lines.append(f"error: {r['workload']} ({r['side']}): {r['error']}")
    return "\n".join(lines)


def native_build_profile():
    """How kiln's native module was built: "release" or "debug" (see `_native.build_profile`)."""
    from . import _native
    return _native.build_profile


def native_path():
    """The file kiln's native module was loaded from."""
    from . import _native
    return _native.__file__


def main():
    ap = argparse.ArgumentParser(
        prog="python -m kiln.bench",
        description="torch eager, inductor and kiln on kiln bench's forward workloads")
    ap.add_argument("workloads", nargs="*", metavar="WORKLOAD",
                    help=f"a subset of {', '.join(WORKLOADS)} (default: all)")
    ap.add_argument("--sides", default="eager,inductor,kiln",
                    help="comma-separated sides to run, of eager, inductor, kiln and "
                         "kiln-unpinned (kiln.backend(pin_weights=False)); default: "
                         "eager,inductor,kiln")
    ap.add_argument("--min-secs", type=float, default=1.0,
                    help="time at least this many seconds per case (default 1)")
    ap.add_argument("--min-runs", type=int, default=20,
                    help="time at least this many calls per case (default 20)")
    ap.add_argument("--json", metavar="PATH", help="also write the rows to this JSON file")
    ap.add_argument("--no-nf", action="store_true",
                    help="run without MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1e12")
    ap.add_argument("--warm-cache", action="store_true",
                    help="let inductor use its usual cache (default: a fresh empty one per "
                         "case, so its first call is a cold compile)")
    ap.add_argument("--allow-debug-build", action="store_true",
                    help="time kiln even when its native module is a debug build (several "
                         "times slower: its figures say nothing about kiln's speed)")
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
    sides = [s for s in args.sides.split(",") if s]
    if not sides or any(s not in SIDES for s in sides):
        ap.error(f"--sides takes a comma-separated subset of {', '.join(SIDES)}")
    profile = native_build_profile()
    if profile != "release" and any(s in KILN_SIDES for s in sides):
        message = (f"kiln's native module ({native_path()}) is a {profile} build, several times "
                   "slower than a release one; install a release wheel first "
                   "(pip install --no-build-isolation ./python)")
        if not args.allow_debug_build:
            ap.error(message + ", or pass --allow-debug-build")
        print(f"warning: {message}", file=sys.stderr, flush=True)
    print(f"torch {torch.__version__}, kiln {profile} build, {THREADS} threads, "
          f"{'NF malloc settings' if not args.no_nf else 'default malloc'}, "
          f"at least {args.min_runs} runs and {args.min_secs:g} s per case, "
          f"load average {os.getloadavg()[0]:.2f} ({os.cpu_count()} cpus)", flush=True)
    rows = []
    start = time.perf_counter()
    for name in names:
        for side in sides:
            row = run_case(name, side, args)
            rows.append(row)
            state = row.get("error") or (
                f"median {ms(row['median_ms'])} ms, first call {ms(row['first_call_ms'])} ms, "
                f"rel error {row['rel_err']:.1e}")
            print(f"  {name} {SIDES[side]}: {state}", file=sys.stderr, flush=True)
    print(table(rows, sides))
    print(f"total {time.perf_counter() - start:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    sys.exit(0 if all(r["verified"] for r in rows) else 1)


if __name__ == "__main__":
    main()
