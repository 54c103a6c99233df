//! A CLIF rewrite run before compiling a kernel: every vector value that a pure instruction
//! computes and that is used more than once is passed to a new block as its parameter.
//!
//! Why: when lowering, Cranelift counts a value's uses *through* pure instructions: once a
//! value is used twice, every value in the computation that produced it counts as used
//! twice too (it might be recomputed at each use). A constant-pool load counted that way is
//! not folded into the instruction that reads it, and almost every constant of a
//! transcendental sits upstream of some value used twice, so each costs a separate
//! `vmovups`. The walk stops at block parameters, so cutting at each multiply-used value
//! keeps the counts exact and lets the loads fold. The blocks are laid out in order, so
//! each cut's `jump` falls through to the next block.

use cranelift_codegen::cursor::{Cursor, FuncCursor};
use cranelift_codegen::entity::SecondaryMap;
use cranelift_codegen::ir::{Function, Inst, InstBuilder, Value};

/// Whether `inst` computes its value from its operands alone (no memory, calls, traps or
/// control flow), so Cranelift's use counting walks through it.
fn is_pure(func: &Function, inst: Inst) -> bool {
    let op = func.dfg.insts[inst].opcode();
    !(op.can_load()
        || op.can_store()
        || op.is_call()
        || op.is_branch()
        || op.is_terminator()
        || op.can_trap()
        || op.other_side_effects())
}

/// Cuts `func` at every multiply-used vector value computed by a pure, non-load
/// instruction (see the module doc). Returns the number of cuts.
pub(crate) fn cut_multi_use_vectors(func: &mut Function) -> usize {
    let mut uses: SecondaryMap<Value, u32> = SecondaryMap::new();
    for block in func.layout.blocks() {
        for inst in func.layout.block_insts(block) {
            for v in func.dfg.inst_values(inst) {
                uses[v] += 1;
            }
        }
    }
    let mut cuts = 0;
    let mut block = func.layout.entry_block();
    while let Some(b) = block {
        let mut inst = func.layout.first_inst(b);
        let mut next_block = func.layout.next_block(b);
        while let Some(i) = inst {
            let next = func.layout.next_inst(i);
            let results = func.dfg.inst_results(i);
            let cut_here = results.len() == 1
                && next.is_some()
                && func.dfg.value_type(results[0]).is_vector()
                && uses[results[0]] >= 2
                && is_pure(func, i);
            if cut_here {
                let v = results[0];
                let ty = func.dfg.value_type(v);
                let new_block = func.dfg.make_block();
                func.layout
                    .split_block(new_block, next.expect("checked above"));
                // `i` now defines a fresh value, passed to the new block, whose parameter
                // is the old value with all its uses
                let fresh = func.dfg.replace_result(v, ty);
                func.dfg.attach_block_param(new_block, v);
                let mut cur = FuncCursor::new(func).at_bottom(b);
                cur.ins().jump(new_block, &[fresh.into()]);
                cuts += 1;
                next_block = Some(new_block);
                break;
            }
            inst = next;
        }
        block = next_block;
    }
    cuts
}

#[cfg(test)]
mod tests {
    use super::*;
    use cranelift_codegen::ir::{types, AbiParam, MemFlagsData, Signature};
    use cranelift_codegen::isa::CallConv;
    use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};

    /// `out = (x + x) * (x + x)` over one F32X4, plus a scalar used twice (not cut).
    fn sample() -> Function {
        let mut sig = Signature::new(CallConv::SystemV);
        sig.params.push(AbiParam::new(types::I64));
        let mut func = Function::with_name_signature(Default::default(), sig);
        let mut fctx = FunctionBuilderContext::new();
        let mut b = FunctionBuilder::new(&mut func, &mut fctx);
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        let p = b.block_params(entry)[0];
        let x = b.ins().load(types::F32X4, MemFlagsData::new(), p, 0);
        let s = b.ins().fadd(x, x);
        let m = b.ins().fmul(s, s);
        b.ins().store(MemFlagsData::new(), m, p, 16);
        let k = b.ins().iadd(p, p);
        let k2 = b.ins().iadd(k, k);
        b.ins().store(MemFlagsData::new(), k2, p, 32);
        b.ins().return_(&[]);
        b.seal_all_blocks();
        let flags = cranelift_codegen::settings::Flags::new(cranelift_codegen::settings::builder());
        let isa = cranelift_native::builder()
            .expect("host isa")
            .finish(flags)
            .expect("isa");
        b.finalize(isa.frontend_config());
        func
    }

    #[test]
    fn multiply_used_vector_values_become_block_parameters() {
        let mut func = sample();
        // the load is used twice but is not pure; the sum is; the scalar `k` is not a vector
        assert_eq!(cut_multi_use_vectors(&mut func), 1);
        assert_eq!(func.layout.blocks().count(), 2);
        let second = func.layout.blocks().nth(1).expect("the cut block");
        assert_eq!(func.dfg.block_params(second).len(), 1);
        let flags = cranelift_codegen::settings::Flags::new(cranelift_codegen::settings::builder());
        cranelift_codegen::verify_function(&func, &flags).expect("valid after the cut");
    }
}
