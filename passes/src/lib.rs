//! kiln's graph passes: decompositions, e-graph simplification and fusion, kernel
//! scheduling and memory planning.
//!
//! Empty for now: the passes issue fills it. Nothing here pretends to work yet.

#![warn(missing_docs)]
