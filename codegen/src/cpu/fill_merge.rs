//! A kernel that only fills a tensor (`full`) whose value one eager `index_add` reads, as
//! its destination and nothing else, is merged into that kernel, where the eager executor
//! adds into the fill instead of copying it first (see `kernels::run_graph`). An
//! embedding's gradient is made so: MiniLM's training step wrote 47 MB of zeros, copied
//! them (7.8 ms), then added 1024 rows.

use crate::error::CodegenError;
use kiln_ir::{Arg, Op};
use kiln_passes::schedule::{kernel_graph, Kernel, Schedule};

/// The schedule's kernels with each such fill merged into its `index_add` (the merged
/// kernel keeps the `index_add` kernel's place, id and kind).
pub(super) fn merge_fills(s: &Schedule) -> Result<Vec<Kernel>, CodegenError> {
    let g = &s.graph;
    // (fill kernel, index_add kernel) pairs
    let mut pairs: Vec<(usize, usize)> = Vec::new();
    for (a, k) in s.kernels.iter().enumerate() {
        let (&[fill], &[v]) = (k.nodes.as_slice(), k.outputs.as_slice()) else {
            continue;
        };
        if fill != v || !matches!(g.node(v).op, Op::Full { .. }) || g.outputs().contains(&v) {
            continue;
        }
        let &[user] = g.users(v).as_slice() else {
            continue;
        };
        let n = g.node(user);
        let only_as_destination = matches!(n.op, Op::IndexAdd { .. })
            && n.args.first() == Some(&Arg::Value(v))
            && !n.args[1..].contains(&Arg::Value(v));
        let Some(b) = s.kernels.iter().position(|k| k.nodes == [user]) else {
            continue;
        };
        if only_as_destination {
            pairs.push((a, b));
        }
    }
    if pairs.is_empty() {
        return Ok(s.kernels.clone());
    }
    let mut kernels = Vec::with_capacity(s.kernels.len() - pairs.len());
    for (i, k) in s.kernels.iter().enumerate() {
        if pairs.iter().any(|&(a, _)| a == i) {
            continue;
        }
        let Some(&(a, _)) = pairs.iter().find(|&&(_, b)| b == i) else {
            kernels.push(k.clone());
            continue;
        };
        let fill = &s.kernels[a];
        let v = fill.outputs[0];
        let nodes = [fill.nodes.clone(), k.nodes.clone()].concat();
        let inputs: Vec<_> = k.inputs.iter().copied().filter(|x| *x != v).collect();
        let body = kernel_graph(g, k.id, k.kind, &nodes, &inputs, &k.outputs).map_err(|e| {
            CodegenError::Plan {
                plan: g.name().to_string(),
                reason: format!("merging kernel {} into kernel {}: {e}", fill.id, k.id),
            }
        })?;
        kernels.push(Kernel {
            nodes,
            inputs,
            body,
            ..k.clone()
        });
    }
    Ok(kernels)
}

#[cfg(test)]
mod tests {
    use kiln_ir::interp::{eval, random_inputs, Value};
    use kiln_runtime::CpuTensor;

    /// zeros scattered into (merged), and zeros also read elsewhere or returned (not
    /// merged): each plan's results equal the interpreter's.
    const GRAPHS: [(&str, usize); 3] = [
        (
            "graph @emb(%i: i64[5,3], %g: f32[5,3,4]) -> f32[7,4] {\n  \
             %0 = full {shape = [7, 4], value = 0.0, dtype = f32} : f32[7,4]\n  \
             %1 = index_add %0, %i, %g {dim = 0} : f32[7,4]\n  return %1\n}\n",
            1,
        ),
        (
            "graph @twice(%i: i64[5,3], %g: f32[5,3,4]) -> (f32[7,4], f32[7,4]) {\n  \
             %0 = full {shape = [7, 4], value = 0.5, dtype = f32} : f32[7,4]\n  \
             %1 = index_add %0, %i, %g {dim = 0} : f32[7,4]\n  \
             %2 = neg %g : f32[5,3,4]\n  \
             %3 = index_add %0, %i, %2 {dim = 0} : f32[7,4]\n  return %1, %3\n}\n",
            4,
        ),
        (
            "graph @kept(%i: i64[5,3], %g: f32[5,3,4]) -> (f32[7,4], f32[7,4]) {\n  \
             %0 = full {shape = [7, 4], value = 0.0, dtype = f32} : f32[7,4]\n  \
             %1 = index_add %0, %i, %g {dim = 0} : f32[7,4]\n  return %0, %1\n}\n",
            2,
        ),
    ];

    #[test]
    fn a_fill_only_an_index_add_reads_is_added_into() {
        for (src, kernels) in GRAPHS {
            let g = kiln_ir::parse_graph(src).expect("parses");
            let plan = crate::cpu::plan_of(src);
            assert_eq!(plan.kernels().count(), kernels, "{}", g.name());
            // indices in range, repeated (rows accumulate)
            let vals = random_inputs(&g, 3, &|_| 1).expect("inputs");
            let idx: Vec<i64> = (0..15).map(|k| (k * 5 % 7) as i64).collect();
            let i = CpuTensor::from_slice(&idx, &[5, 3]).expect("indices");
            let gt = CpuTensor::from_f64(&vals[1].data, &[5, 3, 4], kiln_ir::DType::F32)
                .expect("source");
            let idx_v = Value::new(
                kiln_ir::DType::I64,
                vec![5, 3],
                idx.iter().map(|&k| k as f64).collect(),
            )
            .expect("a value");
            let want = eval(&g, &[idx_v, vals[1].clone()]).expect("interprets");
            for _ in 0..2 {
                let got = plan.run(&[&i, &gt]).expect("runs");
                for (o, w) in got.iter().zip(&want) {
                    let o = o.to_f64_vec();
                    for (a, b) in o.iter().zip(&w.data) {
                        assert!(
                            (a - b).abs() <= 1e-6 * b.abs().max(1.0),
                            "{}: {a} vs {b}",
                            g.name()
                        );
                    }
                }
            }
        }
    }
}
