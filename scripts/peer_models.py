"""The torch models and timing loop scripts/peer-train.py uses: python/kiln/workloads.py,
loaded by path so that the script needs only torch (not the built kiln package)."""
import importlib.util
import os

_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "kiln",
                     "workloads.py")
_spec = importlib.util.spec_from_file_location("kiln_workloads", _path)
_workloads = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_workloads)

Bert, Block, timed_runs = _workloads.Bert, _workloads.Block, _workloads.timed_runs
