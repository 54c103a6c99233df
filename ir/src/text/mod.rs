//! The textual IR: printer and parser (being written).
