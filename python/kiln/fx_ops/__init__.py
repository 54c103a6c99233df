"""ATen op handlers for ``kiln.fx_to_kir``, one module per op family.

Each module registers its handlers into ``fx_to_kir._HANDLERS`` with ``@_handles`` when it is
imported; ``fx_to_kir`` imports this package once, after its own handlers, so a family module
may use every helper ``fx_to_kir`` defines.
"""

from . import (
    attention,
    convolution,
    distance,
    nonzero,
    pointwise,
    pooling,
    scan,
    scatter,
    search,
    segment,
    sort,
    special,
    strided,
)

__all__ = [
    "attention",
    "convolution",
    "distance",
    "nonzero",
    "pointwise",
    "pooling",
    "scan",
    "scatter",
    "search",
    "segment",
    "sort",
    "special",
    "strided",
]
