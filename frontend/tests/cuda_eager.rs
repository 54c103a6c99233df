//! CUDA tensors in eager mode (`Tensor::to_cuda`): ops on them run on the device
//! `KILN_CUDA_DEVICE` names, each a one-op CUDA plan; here the emulated device unless the
//! variable is set (`scripts/gpu-check.sh` runs this file on device 0). Every result is
//! compared with the same ops on the CPU.

mod cuda_common;

use cuda_common::{assert_close, emulated_unless_set, randn};
use kiln::{compile, Result, Tensor};

/// A little model over whatever device its inputs are on.
fn model(x: &Tensor, w: &Tensor, ids: &Tensor, g: &Tensor) -> Result<Tensor> {
    let h = (&(x * 2.0)? + 1.0)?.tanh()?;
    let h = h.matmul(w)?.transpose(0, 1)?.softmax(-1)?.transpose(0, 1)?;
    let h = h.index_select(0, ids)?;
    h.layer_norm(&[6], Some(g), None, 1e-5)
}

#[test]
fn ops_on_cuda_tensors_match_the_cpu() {
    emulated_unless_set();
    let (x, w, g) = (randn(&[5, 7], 1), randn(&[7, 6], 2), randn(&[6], 3));
    let ids = Tensor::from_vec(vec![4i64, 0, 2], &[3]).unwrap();
    let want = model(&x, &w, &ids, &g).unwrap();
    let on = |t: &Tensor| t.to_cuda().unwrap();
    let gpu = kiln_codegen::cuda::select::default_gpu().unwrap();
    let before = gpu.counters();
    let got = model(&on(&x), &on(&w), &on(&ids), &on(&g)).unwrap();
    let after = gpu.counters();
    // tests share the device: at least this model's kernels and its GEMM ran there
    assert!(
        after.launches >= before.launches + 5,
        "{before:?} -> {after:?}"
    );
    assert!(after.gemms > before.gemms);
    assert!(got.is_cuda());
    assert_close(&got.to_cpu().unwrap(), &want);
    // the same ops again reuse their plans and give the same values
    let again = model(&on(&x), &on(&w), &on(&ids), &on(&g)).unwrap();
    assert_close(&again.to_cpu().unwrap(), &want);
}

#[test]
fn views_share_device_memory() {
    emulated_unless_set();
    let x = randn(&[4, 6], 4).to_cuda().unwrap();
    let t = x.transpose(0, 1).unwrap();
    assert!(t.is_cuda() && t.shares_storage(&x));
    assert_eq!(t.strides(), &[1, 6]);
    let s = x.narrow(1, 1, 3).unwrap();
    assert!(s.shares_storage(&x));
    let cpu = x.to_cpu().unwrap();
    assert_close(
        &t.to_cpu().unwrap(),
        &cpu.transpose(0, 1).unwrap().contiguous().unwrap(),
    );
    assert_close(
        &s.exp().unwrap().to_cpu().unwrap(),
        &cpu.narrow(1, 1, 3).unwrap().exp().unwrap(),
    );
}

#[test]
fn an_op_without_cuda_code_runs_on_the_cpu() {
    emulated_unless_set();
    let (a, b) = (randn(&[2, 3], 5), randn(&[4, 3], 6));
    let want = Tensor::cat(&[&a, &b], 0).unwrap();
    let got = Tensor::cat(&[&a.to_cuda().unwrap(), &b.to_cuda().unwrap()], 0).unwrap();
    assert!(got.is_cuda());
    assert_close(&got.to_cpu().unwrap(), &want);
}

#[test]
fn mixing_devices_in_place_ops_and_compile_are_errors() {
    emulated_unless_set();
    let x = randn(&[3, 4], 7);
    let xc = x.to_cuda().unwrap();
    let e = (&x + &xc).unwrap_err().to_string();
    assert!(e.contains("same device"), "{e}");
    let e = xc.add_(1.0).unwrap_err().to_string();
    assert!(e.contains("in-place ops on CUDA tensors"), "{e}");
    let f = |t: &Tensor| t.exp();
    let cf = compile(f);
    let e = cf.call(&xc).unwrap_err().to_string();
    assert!(e.contains("CUDA tensors cannot be arguments"), "{e}");
    // a shape error is the op's own error, as on the CPU
    let e = xc.matmul(&xc).unwrap_err().to_string();
    assert!(e.contains("matmul"), "{e}");
}
