//! Eight threads call one compiled function with mixed shapes, dtypes and grad modes, so
//! recompiles race cache hits (and, with a small limit, crossing the cache limit races
//! both): each signature is compiled once, and every result and gradient equals eager's.

use kiln::{compile_with, CompileOptions, CompiledFn, DType, Dynamic, Result, Tensor};

/// A signature: shape, dtype, and whether the input requires grad.
type Signature = (Vec<usize>, DType, bool);

fn signatures() -> Vec<Signature> {
    let mut out = Vec::new();
    for shape in [vec![3, 5], vec![1, 1], vec![7, 2]] {
        for dtype in [DType::F32, DType::F64] {
            for grad in [false, true] {
                out.push((shape.clone(), dtype, grad));
            }
        }
    }
    out
}

/// The function every thread calls: pointwise ops, a reduction and a matmul.
fn f(x: &Tensor) -> Result<Tensor> {
    let y = x.exp()?.mul(0.5)?.add(&x.sin()?)?;
    y.matmul(&y.transpose(0, 1)?)?.sum(&[1], false)
}

/// The input of call `i` with signature `sig` (a fresh leaf when it requires grad).
fn input((shape, dtype, grad): &Signature, seed: u64) -> Tensor {
    let x = Tensor::randn(shape, DType::F32, seed)
        .unwrap()
        .cast(*dtype)
        .unwrap();
    x.requires_grad_(*grad).unwrap()
}

fn assert_close(what: &str, got: &Tensor, want: &Tensor) {
    assert_eq!(got.dtype(), want.dtype(), "{what}");
    assert_eq!(got.shape(), want.shape(), "{what}");
    let (a, b) = (got.to_vec_f64().unwrap(), want.to_vec_f64().unwrap());
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!(
            (x - y).abs() <= 1e-4 * y.abs() + 1e-5,
            "{what}: element {i}: compiled {x} vs eager {y}"
        );
    }
}

/// One call with signature `sig`, checked against eager: the value, and for a signature
/// that requires grad, the input's gradient after `backward()`.
fn call_and_check(cf: &CompiledFn<'_, Tensor, Tensor>, sig: &Signature, seed: u64) {
    let what = format!("{sig:?} seed {seed}");
    let (x, xe) = (input(sig, seed), input(sig, seed));
    let (got, want) = (cf.call(&x).unwrap(), f(&xe).unwrap());
    assert_close(&what, &got, &want);
    assert_eq!(got.requires_grad(), sig.2, "{what}");
    if sig.2 {
        got.sum(&[], false).unwrap().backward().unwrap();
        want.sum(&[], false).unwrap().backward().unwrap();
        assert_close(&what, &x.grad().unwrap(), &xe.grad().unwrap());
    }
}

fn options(limit: usize) -> CompileOptions {
    CompileOptions::default()
        .dynamic(Dynamic::Never)
        .cache_limit(limit)
}

/// Eight threads, 24 calls each, over the signatures in an order of their own.
fn hammer(cf: &CompiledFn<'_, Tensor, Tensor>) {
    let sigs = signatures();
    std::thread::scope(|s| {
        for t in 0..8u64 {
            let sigs = &sigs;
            s.spawn(move || {
                for i in 0..24u64 {
                    let sig = &sigs[((t * 5 + i * 7) % sigs.len() as u64) as usize];
                    call_and_check(cf, sig, 1000 * t + i);
                }
            });
        }
    });
}

#[test]
fn eight_threads_compile_each_signature_once_and_agree_with_eager() {
    // the compiles one thread makes calling each signature once
    let serial = compile_with(f, options(64));
    for (i, sig) in signatures().iter().enumerate() {
        call_and_check(&serial, sig, i as u64);
    }
    let once = serial.stats();
    assert_eq!(once.entries, signatures().len(), "{once:?}");
    assert!(once.compiles >= once.entries as u64, "{once:?}");

    let cf = compile_with(f, options(64));
    hammer(&cf);
    let s = cf.stats();
    assert_eq!(s.calls, 8 * 24, "{s:?}");
    assert_eq!(s.entries, signatures().len(), "{s:?}");
    assert_eq!(
        s.compiles, once.compiles,
        "one compile per signature: {s:?}"
    );
    assert_eq!(s.cache_hits, s.calls - signatures().len() as u64, "{s:?}");
    assert!(s.eager_fallback.is_none(), "{s:?}");
}

#[test]
fn eight_threads_crossing_the_cache_limit_fall_back_to_eager_with_equal_results() {
    let limit = 5;
    let cf = compile_with(f, options(limit));
    hammer(&cf);
    let s = cf.stats();
    assert_eq!(s.calls, 8 * 24, "{s:?}");
    assert!(s.entries <= limit, "{s:?}");
    assert!(s.eager_fallback.is_some(), "{s:?}");
    // later calls still agree (eagerly)
    for (i, sig) in signatures().iter().enumerate() {
        call_and_check(&cf, sig, 7000 + i as u64);
    }
}
