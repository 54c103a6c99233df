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

import logging as _logging
import os as _os

import torch as _torch  # loads torch's OpenMP runtime and BLAS before kiln looks them up

from ._native import KilnError, version as __version__
from ._native import adopt_torch_blas as _adopt_torch_blas
from ._native import adopt_torch_threads as _adopt_torch_threads
from .backend import ExplainReport, backend, explain, forget_weights, kiln_backend

# kiln's parallel kernel work runs on torch's OpenMP team (``_native.adopt_torch_threads``),
# and its matrix products on torch's BLAS (``_native.adopt_torch_blas``): eager's own
_adopt_torch_threads()
_why_not_blas = _adopt_torch_blas(_os.path.join(_torch.__path__[0], "lib", "libtorch_cpu.so"))
if _why_not_blas is not None:
    _logging.getLogger("kiln").info("kiln's own gemm computes matrix products: %s", _why_not_blas)

__all__ = ["ExplainReport", "KilnError", "backend", "explain", "forget_weights", "kiln_backend",
           "__version__"]
