"""PyTorch's OpInfo database through kiln, against the expected statuses.

One test per op_db entry, dtype and kind (forward: each sample and its non-contiguous
variant; backward: outputs and input gradients), run by ``kiln.opinfo`` (see its docstring
for the method and the statuses ``pass`` / ``fallback`` / ``fail`` / ``skip``) in a worker
process, so that an op that hangs fails after a timeout instead of stalling the run.

The observed status must equal the one recorded in ``opinfo_expected.json`` (PyTorch's
OpInfo convention: an expected failure that now passes fails the test too, so the list
shrinks as kiln grows). After a change to kiln, refresh the list with

    python -m kiln.opinfo --config ci --expected python/tests/opinfo_expected.json \\
        --out python/OPINFO.md

By default the ``ci`` preset runs: each op's first float32 sample and its non-contiguous
variant, forward (about 7 minutes on 2 cores). ``KILN_OPINFO=float32`` runs every float32
sample, forward and backward (about an hour), and ``KILN_OPINFO=full`` the ``full`` preset
(every sample, forward and backward, float32/float16/bfloat16/int64/bool), each checked
against that preset's section of the list.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytest.importorskip("expecttest")  # torch.testing._internal needs it
pytest.importorskip("hypothesis")

from kiln import opinfo  # noqa: E402

MODE = os.environ.get("KILN_OPINFO", "ci")
if MODE not in opinfo.CONFIGS:
    raise ValueError(f"KILN_OPINFO={MODE!r}: one of {', '.join(opinfo.CONFIGS)}")
CONFIG = opinfo.CONFIGS[MODE]
EXPECTED_FILE = Path(__file__).with_name("opinfo_expected.json")
EXPECTED = json.loads(EXPECTED_FILE.read_text()).get(MODE, {})
TIMEOUT_S = 120.0 if MODE == "ci" else opinfo.OP_BUDGET_S + 60
UPDATE = (f"python -m kiln.opinfo --config {MODE} --ops OP "
          f"--expected python/tests/opinfo_expected.json")

JOBS = opinfo.jobs(opinfo.op_entries(), CONFIG["dtypes"], CONFIG["backward"])


@pytest.fixture(scope="module")
def worker():
    w = opinfo.Worker()
    yield w
    w.close()


@pytest.mark.parametrize("key,dtype,kind", JOBS, ids=["-".join(j) for j in JOBS])
def test_opinfo(worker, key, dtype, kind):
    res = worker.run(key, dtype, kind, TIMEOUT_S, max_samples=CONFIG["max_samples"])
    expected = EXPECTED.get(dtype, {}).get(key, {}).get(kind)
    detail = f"{key} {dtype} {kind}: {res.status} {res.counts}" + (
        f" ({res.reason})" if res.reason else "")
    if expected is None:
        pytest.fail(f"no expected status recorded for {detail}; record it with "
                    f"{UPDATE.replace('OP', key)}")
    if res.status == expected:
        return
    if res.status == "pass":
        pytest.fail(f"unexpected pass, {key} was expected to be '{expected}': {detail}. "
                    f"Update the expected list: {UPDATE.replace('OP', key)}")
    pytest.fail(f"expected '{expected}', got {detail}")
