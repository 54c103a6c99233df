"""``python -m kiln.zoo``: the model table (at least 30 architectures over every family, each
built at the small size from its config, nothing downloaded), the report's arithmetic, and the
``ci`` preset run on two models end to end (a child process per model and mode)."""

import json
import os
import subprocess
import sys
import time

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("timm")

from kiln import zoo  # noqa: E402


def test_the_zoo_has_30_models_covering_every_family():
    assert len(zoo.MODELS) >= 30
    families = {m.family for m in zoo.MODELS.values()}
    assert families == set(zoo.FAMILIES)
    for name, entry in zoo.MODELS.items():
        assert entry.name == name and entry.base_from, name
    assert set(zoo.CI_MODELS) <= set(zoo.MODELS)


def test_every_model_builds_at_the_small_size_quickly_with_no_dropout():
    for name, entry in zoo.MODELS.items():
        start = time.perf_counter()
        case = entry.build("small")
        took = time.perf_counter() - start
        assert took < 20, f"{name} took {took:.1f} s to build"
        assert sum(p.numel() for p in case.model.parameters()) > 0, name
        assert case.inputs and all(isinstance(v, torch.Tensor) for v in case.inputs.values())
        live = [n for n, m in case.model.named_modules()
                if isinstance(m, torch.nn.Dropout) and m.p > 0]
        assert not live, f"{name}: dropout left on in {live[:3]}"
        # the same weights in every process: a build draws them after a fixed seed
        again = entry.build("small")
        first, second = next(case.model.parameters()), next(again.model.parameters())
        assert torch.equal(first, second), name


def test_config_helpers_zero_dropout_and_keep_special_tokens_in_the_vocabulary():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.MarianConfig(vocab_size=100, decoder_vocab_size=100)
    zoo.clamp_special_tokens(zoo.zero_dropout(cfg))
    assert cfg.dropout == 0.0
    assert cfg.pad_token_id < 100 and cfg.decoder_start_token_id < 100


class _Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.lin(x)


_TINY = zoo.ZooModel("tiny", "timm-resnet",
                     lambda size: zoo.Case(_Tiny(), dict(x=torch.randn(3, 8))), "a test")


@pytest.mark.parametrize("scale, failed", [(1.0, 0), (1.001, 3)])
def test_the_accuracy_pass_judges_the_output_and_every_gradient(monkeypatch, scale, failed):
    # a "compiler" whose model is off by 0.1%: its output and both gradients fail
    monkeypatch.setattr(zoo, "compiler", lambda side, report=None: (
        lambda m: (lambda **kw: m(**kw) * scale)))
    acc = zoo.accuracy(_TINY, "small", "training", None)
    assert (acc["checked"], acc["failed"]) == (3, failed), acc["failures"]
    assert zoo.accuracy(_TINY, "small", "inference", None)["failed"] == min(failed, 1)


def test_a_model_that_fails_to_build_is_its_rows_error(monkeypatch):
    def broken(size):
        raise RuntimeError("no such layer")

    monkeypatch.setitem(zoo.MODELS, "broken", zoo.ZooModel("broken", "timm-resnet", broken,
                                                            "a test"))
    got = zoo.measure_here("broken", "small", "training", "kiln", False, 0.1, 1)
    assert got["error"] == "RuntimeError: no such layer"
    assert got["kiln_nodes"] == 0 and "accuracy" not in got
    row = dict(model="broken", family="timm-resnet", size="small", mode="training", kiln=got)
    assert not zoo.passed(row) and zoo.status_cell(row) == "ERROR"
    row["passed"] = False
    assert "* broken small training (kiln): RuntimeError: no such layer" in zoo.markdown(
        [row], dict(versions="v", command="c", elapsed_s=1.0))


def test_ratios_geomeans_and_cells():
    row = dict(model="m", family="timm-resnet", size="small", mode="inference",
               eager=dict(median_ms=4.0, peak_mb=100.0),
               inductor=dict(median_ms=3.0, first_call_s=10.0),
               kiln=dict(median_ms=2.0, first_call_s=2.0, peak_mb=150.0, kiln_nodes=5,
                         eager_nodes=2, graphs=1, breaks=0,
                         fallbacks={"aten.sort.default: no kiln op": 2},
                         accuracy=dict(checked=3, failed=1, failures=["grad w: FAIL"])))
    r = zoo.speedups(row)
    assert r == pytest.approx(dict(vs_eager=2.0, vs_inductor=1.5, first_call=0.2, memory=1.5))
    assert zoo.geomean([2.0, 8.0, None]) == pytest.approx(4.0)
    assert zoo.geomean([None]) is None
    assert zoo.status_cell(row) == "FAIL 1/3"
    assert zoo.ops_cell(row["kiln"]) == "5 / 2 (sort.default×2)"
    assert zoo.graphs_cell(row["kiln"]) == "1 / 0"
    row["passed"] = zoo.passed(row)
    assert row["passed"] is False
    text = zoo.markdown([row], dict(versions="v", command="c", elapsed_s=1.0))
    assert "| m | timm-resnet | small | inference | FAIL 1/3 |" in text
    assert "grad w: FAIL" in text
    assert zoo.status_cell(dict(kiln=dict(error="boom"))) == "ERROR"


def test_the_ci_preset_takes_explicit_options_over_its_own():
    args, _ = zoo.parse_args(["--preset", "ci", "--models", "bert"])
    assert args.models == "bert" and args.sizes == "small"
    assert args.accuracy_only and args.no_inductor and args.out is None


def test_ci_preset_on_two_models_reports_every_row(tmp_path):
    out, md = tmp_path / "zoo.json", tmp_path / "zoo.md"
    # training only, to stay quick (a process per row; training judges the output too).
    # From tmp_path: `-m` puts the working directory first on sys.path, and python/ holds
    # kiln's sources without its native module.
    p = subprocess.run([sys.executable, "-m", "kiln.zoo", "--preset", "ci", "--models",
                        "bert,resnet18", "--modes", "training", "--json", str(out),
                        "--out", str(md)],
                       cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=600, env=dict(os.environ))
    # an accuracy gate: both models pass (the preset exits 1 on any failure)
    assert p.returncode == 0, p.stdout[-3000:]
    report = json.loads(out.read_text())
    rows = report["rows"]
    assert [(r["model"], r["size"], r["mode"]) for r in rows] == [
        ("bert", "small", "training"), ("resnet18", "small", "training")]
    for r in rows:
        k = r["kiln"]
        assert "error" not in k, (r["model"], k.get("traceback"))
        acc = k["accuracy"]
        # the output and every parameter's gradient
        params = sum(1 for _ in zoo.MODELS[r["model"]].build("small").model.parameters())
        assert acc["checked"] == 1 + params
        assert k["kiln_nodes"] > 0 and k["graphs"] >= 1 and k["aot_graphs"] >= 1
        assert r["passed"] and acc["failed"] == 0, acc["failures"]
        assert "eager" not in r and "inductor" not in r  # accuracy only
    [summary] = report["summary"]
    assert (summary["size"], summary["mode"], summary["rows"]) == ("small", "training", 2)
    assert summary["passed"] == 2
    text = md.read_text()
    assert "| bert | hf-encoder | small | training |" in text
    assert "## Summary" in text
