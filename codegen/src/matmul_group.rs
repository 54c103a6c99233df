//! How a matmul kernel group splits, for every backend: the matmul's two operands (group
//! inputs), and the epilogue graph of the rest, in which the product is the input `acc`.

use crate::loops::Unsupported;
use kiln_ir::{Arg, DType, Graph, NodeId, Op};
use std::collections::HashMap;

/// A matmul group's parts.
pub struct MatmulGroup {
    /// the matmul node (in the group's body)
    pub mm: NodeId,
    /// positions (in the group's inputs) of the matmul's operands
    pub a: usize,
    /// (the right operand)
    pub b: usize,
    /// true when the product itself is an output of the group (output 0 then)
    pub mm_is_output: bool,
    /// the ops after the matmul, if the group has any
    pub epilogue: Option<EpilogueGraph>,
}

/// The ops of a matmul group after its matmul, as a graph of their own.
pub struct EpilogueGraph {
    /// inputs: the product (`acc`) and the group inputs the epilogue reads; outputs: the
    /// group's outputs other than the product
    pub graph: Graph,
    /// for each epilogue input: `None` for the product, else its group input position
    pub inputs: Vec<Option<usize>>,
    /// every epilogue output is shaped like the product (so it can go row by row)
    pub by_rows: bool,
}

/// Splits a group whose one matmul is f32 with group inputs as operands.
pub fn split_matmul_group(body: &Graph) -> Result<MatmulGroup, Unsupported> {
    let unsupported = |reason: &str| Unsupported {
        kernel: body.name().to_string(),
        reason: reason.to_string(),
    };
    let mms: Vec<NodeId> = body
        .nodes()
        .filter(|(_, n)| n.op == Op::Matmul)
        .map(|(id, _)| id)
        .collect();
    let [mm] = mms[..] else {
        return Err(unsupported("not exactly one matmul"));
    };
    let node = body.node(mm);
    let operand_pos = |a: &Arg| match a {
        Arg::Value(v) => body.inputs().iter().position(|(_, id)| id == v),
        Arg::Scalar(_) => None,
    };
    let (Some(a), Some(b)) = (operand_pos(&node.args[0]), operand_pos(&node.args[1])) else {
        return Err(unsupported("matmul operands are not group inputs"));
    };
    let f32s = |id: NodeId| body.node(id).ty.dtype == DType::F32;
    if !f32s(mm) || body.inputs().iter().any(|(_, id)| !f32s(*id)) {
        return Err(unsupported("not f32"));
    }
    let mm_is_output = body.outputs().contains(&mm);
    let others: Vec<NodeId> = body
        .outputs()
        .iter()
        .copied()
        .filter(|o| *o != mm)
        .collect();
    if mm_is_output && body.outputs()[0] != mm {
        return Err(unsupported("the product is an output but not the first"));
    }
    let epilogue = if others.is_empty() {
        None
    } else {
        // the epilogue graph: the product becomes the input `acc`
        let mut g = Graph::new(format!("{}_epilogue", body.name()));
        let bad = |e: kiln_ir::GraphError| unsupported(&e.to_string());
        let mut map: HashMap<NodeId, NodeId> = HashMap::new();
        let mut inputs: Vec<Option<usize>> = Vec::new();
        for (id, n) in body.nodes() {
            if id == mm {
                map.insert(id, g.add_input("acc", n.ty.clone()).map_err(bad)?);
                inputs.push(None);
                continue;
            }
            if n.op == Op::Input {
                let used = body.users(id).iter().any(|u| *u != mm);
                if used {
                    let name = body.input_name(id).unwrap_or("in").to_string();
                    map.insert(id, g.add_input(name, n.ty.clone()).map_err(bad)?);
                    inputs.push(body.inputs().iter().position(|(_, i)| *i == id));
                }
                continue;
            }
            let args: Vec<Arg> = n
                .args
                .iter()
                .map(|a| match a {
                    Arg::Value(v) => Arg::Value(map[v]),
                    s => *s,
                })
                .collect();
            map.insert(id, g.add_op(n.op.clone(), &args, None).map_err(bad)?);
        }
        g.set_outputs(others.iter().map(|o| map[o]).collect())
            .map_err(bad)?;
        let shape = &node.ty.shape;
        let by_rows = others.iter().all(|o| body.node(*o).ty.shape == *shape);
        Some(EpilogueGraph {
            graph: g,
            inputs,
            by_rows,
        })
    };
    Ok(MatmulGroup {
        mm,
        a,
        b,
        mm_is_output,
        epilogue,
    })
}

/// torch.matmul's result shape for operands of rank ≥ 1 (already checked by the tracer).
pub fn matmul_shape(a: &[usize], b: &[usize]) -> Vec<usize> {
    let a2: Vec<usize> = if a.len() == 1 {
        vec![1, a[0]]
    } else {
        a.to_vec()
    };
    let b2: Vec<usize> = if b.len() == 1 {
        vec![b[0], 1]
    } else {
        b.to_vec()
    };
    let (ba, bb) = (&a2[..a2.len() - 2], &b2[..b2.len() - 2]);
    let r = ba.len().max(bb.len());
    let mut shape = vec![1usize; r];
    for bt in [ba, bb] {
        for (i, &n) in bt.iter().enumerate() {
            let o = r - bt.len() + i;
            if n != 1 {
                shape[o] = n;
            }
        }
    }
    if a.len() > 1 {
        shape.push(a2[a2.len() - 2]);
    }
    if b.len() > 1 {
        shape.push(b2[b2.len() - 1]);
    }
    shape
}
