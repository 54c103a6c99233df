"""kiln for PyTorch users: ``torch.compile(model, backend="kiln")``.

kiln is a graph-capturing JIT compiler for tensor programs written in Rust. This package
registers it as a torch.compile backend (entry point group ``torch_dynamo_backends``):

>>> import torch
>>> f = torch.compile(lambda x: torch.relu(x) * 2, backend="kiln")
>>> f(torch.randn(4))                                    # doctest: +SKIP

``kiln.backend(device=..., mode=..., pin_weights=...)`` makes a backend with options
(``pin_weights``, on by default: keep packed copies of parameters between calls while their
storage and ``_version`` stay; ``kiln.forget_weights()`` drops them after a write through
``p.data``); ``kiln.explain(fn, *args)`` says which ops of ``fn`` kiln runs and which fall
back to eager PyTorch, and why.
"""

import torch as _torch  # noqa: F401  (loads torch's OpenMP runtime before kiln looks it up)

from ._native import KilnError, adopt_torch_threads as _adopt_torch_threads, version as __version__
from .backend import ExplainReport, backend, explain, forget_weights, kiln_backend

# kiln's parallel kernel work runs on torch's OpenMP team (``_native.adopt_torch_threads``)
_adopt_torch_threads()

__all__ = ["ExplainReport", "KilnError", "backend", "explain", "forget_weights", "kiln_backend",
           "__version__"]
