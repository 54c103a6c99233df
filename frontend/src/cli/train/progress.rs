//! Progress of `kiln train` on stderr: a progress bar when stderr is a terminal, plain
//! lines every few steps otherwise (logs and pipes stay readable).

use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;

/// Where a step's loss is reported.
pub enum Progress {
    /// a bar with the latest loss
    Bar(ProgressBar),
    /// a line for the first step, then every `every` steps and the last
    Lines {
        /// steps between two lines
        every: usize,
        /// the number of steps
        total: usize,
    },
}

impl Progress {
    /// A bar if stderr is a terminal, else lines every `every` steps (0: none).
    pub fn new(total: usize, every: usize) -> Progress {
        if std::io::stderr().is_terminal() {
            let bar = ProgressBar::new(total as u64);
            if let Ok(style) = ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} steps ({per_sec}) {msg}",
            ) {
                bar.set_style(style);
            }
            Progress::Bar(bar)
        } else {
            Progress::Lines { every, total }
        }
    }

    /// Reports step `step` (0-based) and its loss.
    pub fn step(&self, step: usize, loss: f64) {
        match self {
            Progress::Bar(bar) => {
                bar.set_message(format!("loss {loss:.4}"));
                bar.inc(1);
            }
            Progress::Lines { every, total } => {
                let n = step + 1;
                if *every > 0 && (step == 0 || n.is_multiple_of(*every) || n == *total) {
                    eprintln!("step {n}/{total}: loss {loss:.4}");
                }
            }
        }
    }

    /// Removes the bar (lines need nothing).
    pub fn finish(&self) {
        if let Progress::Bar(bar) = self {
            bar.finish_and_clear();
        }
    }
}
