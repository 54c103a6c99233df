//! Regression files: a minimised diverging graph kept as `NAME.kir` (the graph, with
//! comment lines saying what diverged, the case that shows it and the command that
//! reproduces it) and `NAME.safetensors` (the inputs of that case, by input name; stored
//! contiguous, so a transposed case's layout is rebuilt from the `# case:` line by the
//! test suite, which runs every file of `tests/regressions/`).

use super::inputs::{make_inputs, InputSpec};
use super::{check_graph, CheckOptions, Divergence, Executor, Outcome};
use crate::error::{Error, Result};
use kiln_ir::Graph;
use std::path::{Path, PathBuf};

/// A regression case read back from its file.
#[derive(Clone, Debug)]
pub struct Regression {
    /// the `.kir` file
    pub path: PathBuf,
    /// its graph
    pub graph: Graph,
    /// the executor that diverged
    pub executor: Executor,
    /// whether gradients diverged
    pub grad: bool,
    /// the inputs that showed it
    pub case: InputSpec,
}

impl Regression {
    /// Checks the case again: `Ok` when the executor now agrees with eager. The case runs
    /// twice, with fresh compiled functions: as the first call, and after a call at other
    /// sizes (so through the recompile, over symbolic sizes, that the fuzzer's later cases
    /// take).
    pub fn check(&self) -> std::result::Result<(), String> {
        let other = InputSpec {
            sizes: if self.case.sizes == (2, 3) {
                (3, 5)
            } else {
                (2, 3)
            },
            transposed: false,
            special: false,
            ..self.case
        };
        for cases in [vec![self.case], vec![other, self.case]] {
            let opts = CheckOptions {
                executors: vec![self.executor],
                cases,
                grad: self.grad,
                sabotage: None,
            };
            if let Outcome::Diverged(d) = check_graph(&self.graph, &opts) {
                return Err(format!("{}: {d}", self.path.display()));
            }
        }
        Ok(())
    }
}

fn io_err(path: &Path, reason: impl ToString) -> Error {
    Error::Io {
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}

/// Writes `g` and the inputs of `d`'s case as `dir/NAME.kir` and `dir/NAME.safetensors`
/// (`origin` says where it came from: the fuzz command and graph number); returns the
/// `.kir` path.
pub fn write(dir: &Path, name: &str, g: &Graph, d: &Divergence, origin: &str) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).map_err(|e| io_err(dir, e))?;
    let kir = dir.join(format!("{name}.kir"));
    let st = dir.join(format!("{name}.safetensors"));
    let c = &d.case;
    let backend = match d.executor {
        Executor::Interp => "interp",
        Executor::Cuda => "cuda",
        _ => "cpu",
    };
    // the environment a replay of the outputs needs to run the same tier
    let (tier, unfused) = match d.executor {
        Executor::CpuUnfused => ("KILN_TIER=cranelift ", " --unfused"),
        Executor::Cpu => ("KILN_TIER=cranelift ", ""),
        Executor::CpuC => ("KILN_TIER=c KILN_STREAM_MIN_BYTES=0 ", ""),
        Executor::CpuTiered => ("KILN_TIER=auto KILN_C_TIER_AFTER_MS=0 ", ""),
        Executor::Interp | Executor::Cuda => ("", ""),
    };
    let mut text = String::new();
    for line in format!("{origin}: {d}").lines() {
        text.push_str(&format!("# {line}\n"));
    }
    text.push_str(&format!(
        "# case: executor={} grad={} sizes={}x{} seed={} transposed={} special={}\n",
        d.executor, d.grad, c.sizes.0, c.sizes.1, c.seed, c.transposed, c.special
    ));
    text.push_str(&format!(
        "# reproduce: cargo run --release -- fuzz --replay {}\n",
        kir.display()
    ));
    // `kiln grad` differentiates a scalar first output; the check differentiates the sum
    // of the first output through compiled training, so only forward cases get this line
    if !d.grad {
        text.push_str(&format!(
            "# outputs: {tier}cargo run --release -- run {} --inputs {} --backend {backend}{unfused}\n",
            kir.display(),
            st.display()
        ));
    }
    text.push_str(&g.to_string());
    std::fs::write(&kir, text).map_err(|e| io_err(&kir, e))?;
    let xs = make_inputs(g, *c)?;
    let named: Vec<_> = g
        .inputs()
        .iter()
        .map(|(n, _)| n.clone())
        .zip(
            xs.iter()
                .map(|x| x.contiguous())
                .collect::<Result<Vec<_>>>()?,
        )
        .collect();
    crate::io::save(&st, &named)?;
    Ok(kir)
}

/// Reads a regression `.kir` file back.
pub fn read(path: &Path) -> Result<Regression> {
    let text = std::fs::read_to_string(path).map_err(|e| io_err(path, e))?;
    let case_line = text
        .lines()
        .find_map(|l| l.strip_prefix("# case: "))
        .ok_or_else(|| io_err(path, "no `# case:` line"))?;
    let field = |key: &str| -> Result<&str> {
        case_line
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
            .ok_or_else(|| io_err(path, format!("the case line has no {key}")))
    };
    let flag = |key: &str| -> Result<bool> {
        field(key)?
            .parse()
            .map_err(|_| io_err(path, format!("{key} is not true or false")))
    };
    let executor = Executor::parse(field("executor")?)
        .ok_or_else(|| io_err(path, "unknown executor on the case line"))?;
    let (b, t) = field("sizes")?
        .split_once('x')
        .ok_or_else(|| io_err(path, "sizes are not BxT"))?;
    let num = |s: &str| -> Result<u64> {
        s.parse()
            .map_err(|_| io_err(path, format!("`{s}` is not a number")))
    };
    let case = InputSpec {
        sizes: (num(b)? as usize, num(t)? as usize),
        seed: num(field("seed")?)?,
        transposed: flag("transposed")?,
        special: flag("special")?,
    };
    let graph = kiln_ir::text::parse_module(&text)
        .map_err(|e| io_err(path, e))?
        .into_iter()
        .next()
        .ok_or_else(|| io_err(path, "the file holds no graph"))?;
    Ok(Regression {
        path: path.to_path_buf(),
        graph,
        executor,
        grad: flag("grad")?,
        case,
    })
}

/// Every regression `.kir` file of `dir`, sorted by name (none when `dir` does not exist).
pub fn read_dir(dir: &Path) -> Result<Vec<Regression>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(Vec::new());
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "kir"))
        .collect();
    paths.sort();
    paths.iter().map(|p| read(p)).collect()
}
