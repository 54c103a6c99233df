"""``python -m kiln.bench`` refuses to time a debug build of kiln's native module, whose
figures would be several times slower than kiln is (CI's test wheel is one)."""

import sys

import pytest

from kiln.backend import COMPILE_TIME_KEY
from kiln import _native, bench


def test_native_module_names_its_build_profile():
    assert _native.build_profile in ("debug", "release")
    assert bench.native_build_profile() == _native.build_profile


def test_bench_refuses_a_debug_build_of_kiln(monkeypatch, capsys):
    monkeypatch.setattr(bench, "native_build_profile", lambda: "debug")
    monkeypatch.setattr(bench, "run_case", lambda *a: pytest.fail("a case ran"))
    monkeypatch.setattr(sys, "argv", ["kiln.bench", "tiny", "--sides", "eager,kiln"])
    with pytest.raises(SystemExit) as exit_:
        bench.main()
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "is a debug build" in err, err
    assert "pip install --no-build-isolation ./python" in err, err
    assert "--allow-debug-build" in err, err


def test_bench_allows_a_debug_build_when_asked_and_says_so(monkeypatch, capsys):
    monkeypatch.setattr(bench, "native_build_profile", lambda: "debug")
    ran = []

    def fake_case(name, side, args):
        ran.append((name, side))
        return {"workload": name, "side": side, "error": "not run: a test", "verified": True}

    monkeypatch.setattr(bench, "run_case", fake_case)
    monkeypatch.setattr(bench, "table", lambda rows, sides: "table")
    monkeypatch.setattr(sys, "argv",
                        ["kiln.bench", "tiny", "--sides", "kiln", "--allow-debug-build"])
    with pytest.raises(SystemExit) as exit_:
        bench.main()
    assert exit_.value.code == 0
    assert ran == [("tiny", "kiln")]
    captured = capsys.readouterr()
    assert "warning: kiln's native module" in captured.err, captured.err
    assert "kiln debug build" in captured.out, captured.out


def test_bench_of_torch_alone_does_not_need_a_release_build(monkeypatch):
    monkeypatch.setattr(bench, "native_build_profile", lambda: "debug")
    ran = []
    monkeypatch.setattr(bench, "run_case", lambda name, side, args: ran.append(side) or {
        "workload": name, "side": side, "error": "not run: a test", "verified": True})
    monkeypatch.setattr(bench, "table", lambda rows, sides: "table")
    monkeypatch.setattr(sys, "argv", ["kiln.bench", "tiny", "--sides", "eager"])
    with pytest.raises(SystemExit) as exit_:
        bench.main()
    assert exit_.value.code == 0
    assert ran == ["eager"]


def test_backend_share_of_the_first_call_leaves_out_dynamo_aot_and_one_run():
    assert bench.backend_compile_s(3.0, 1.0, 0.5, 0.25) == pytest.approx(1.25)
    assert bench.backend_compile_s(3.0, None, None, 0.25) is None


def test_compile_times_of_a_compiled_call_split_out_dynamo_and_aot():
    import torch

    torch._dynamo.reset()
    torch._dynamo.utils.compilation_time_metrics.clear()
    fn = torch.compile(lambda x: (x.sin() * 2).sum(), backend="kiln")
    fn(torch.randn(5))
    metrics = torch._dynamo.utils.compilation_time_metrics
    # kiln's graph compiler is timed under its key, and left out of AOTAutograd's own time
    assert len(metrics.get(COMPILE_TIME_KEY, ())) == 1, metrics
    dynamo, aot = bench.capture_times()
    assert dynamo is not None and dynamo > 0, metrics
    whole = sum(metrics["create_aot_dispatcher_function"])
    assert aot == pytest.approx(whole - sum(metrics[COMPILE_TIME_KEY])), metrics
    assert 0 < aot < whole, metrics
