//! Eager-mode speed on this machine, for the record (not a test):
//! `cargo run --release -p kiln --example eager_speed`.
//!
//! Reports the median of 20 runs after a warm-up for: f32 matmul at 1024³ (GFLOP/s), and
//! pointwise ops on 16M f32 elements (GB/s, counting each input read once and the output
//! written once), next to a plain copy of the same size as a bandwidth reference.

use kiln::{DType, Tensor};
use std::time::Instant;

fn median_secs(mut f: impl FnMut()) -> f64 {
    for _ in 0..3 {
        f();
    }
    let mut t: Vec<f64> = (0..20)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

fn main() -> kiln::Result<()> {
    let n = 1024;
    let a = Tensor::randn(&[n, n], DType::F32, 1)?;
    let b = Tensor::randn(&[n, n], DType::F32, 2)?;
    let s = median_secs(|| drop(a.matmul(&b).unwrap()));
    println!(
        "matmul f32 {n}x{n}x{n}: {:.2} ms, {:.1} GFLOP/s",
        s * 1e3,
        2.0 * (n as f64).powi(3) / s / 1e9
    );

    let len = 16 << 20;
    let x = Tensor::randn(&[len], DType::F32, 3)?;
    let y = Tensor::randn(&[len], DType::F32, 4)?;
    let mb = (len * 4) as f64;
    let report = |name: &str, bytes: f64, s: f64| {
        println!("{name:<28} {:.2} ms, {:.1} GB/s", s * 1e3, bytes / s / 1e9);
    };
    // The bandwidth reference at the same working-set size: a plain Rust triad
    // `a = b + 1.5 * c` on all cores (2 reads + 1 write), no kiln involved.
    let (b, c) = (x.to_vec::<f32>()?, y.to_vec::<f32>()?);
    let mut a = vec![0f32; len];
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let triad = median_secs(|| {
        let chunk = len.div_ceil(threads);
        std::thread::scope(|s| {
            for ((a, b), c) in a
                .chunks_mut(chunk)
                .zip(b.chunks(chunk))
                .zip(c.chunks(chunk))
            {
                s.spawn(move || {
                    a.iter_mut()
                        .zip(b)
                        .zip(c)
                        .for_each(|((a, b), c)| *a = b + 1.5 * c)
                });
            }
        });
    });
    report("triad reference (plain Rust)", 3.0 * mb, triad);
    let xt = x.reshape(&[4096, 4096])?.transpose(0, 1)?;
    report(
        "copy (contiguous of .t())",
        2.0 * mb,
        median_secs(|| drop(xt.contiguous().unwrap())),
    );
    report(
        "add x + y",
        3.0 * mb,
        median_secs(|| drop((&x + &y).unwrap())),
    );
    report(
        "mul x * 1.5",
        2.0 * mb,
        median_secs(|| drop((&x * 1.5).unwrap())),
    );
    report("relu x", 2.0 * mb, median_secs(|| drop(x.relu().unwrap())));
    report("exp x", 2.0 * mb, median_secs(|| drop(x.exp().unwrap())));
    report("tanh x", 2.0 * mb, median_secs(|| drop(x.tanh().unwrap())));
    report(
        "sum x (all)",
        mb,
        median_secs(|| drop(x.sum(&[], false).unwrap())),
    );
    let rows = x.reshape(&[4096, 4096])?;
    report(
        "softmax rows 4096x4096",
        2.0 * mb,
        median_secs(|| drop(rows.softmax(-1).unwrap())),
    );
    report(
        "layer_norm rows 4096x4096",
        2.0 * mb,
        median_secs(|| drop(rows.layer_norm(&[4096], None, None, 1e-5).unwrap())),
    );
    let stats = kiln::allocator_stats();
    println!(
        "allocator: {} MiB allocated, {} MiB reserved",
        stats.allocated_bytes >> 20,
        stats.reserved_bytes >> 20
    );
    Ok(())
}
