//! The CUDA gather kernel (embedding lookups: `index_select` of an f32 tensor by i32/i64
//! indices of any rank, along any dim) run on the CPU by the emulation harness and compared
//! with the interpreter exactly (a gather copies values); an index out of range leaves NaN
//! in its output elements and sets the error cell. Needs g++ (as `cuda_emulation.rs`).

use kiln_codegen::cuda::emulate::{emulate, EmuBuffer};
use kiln_codegen::cuda::gather_kernel;
use kiln_ir::interp::{eval, Value};
use kiln_ir::text::parse_module;
use kiln_ir::DType;

fn f32_bytes(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|&x| (x as f32).to_le_bytes()).collect()
}

/// Runs the gather of graph `text` on `x` (its first input) and `ids` (its second, of
/// `idx_dtype`); returns (output, error cell).
fn run(
    text: &str,
    x: &Value,
    ids: &[i64],
    idx_shape: &[usize],
    idx_dtype: DType,
) -> (Vec<f64>, [i64; 2], Vec<f64>) {
    let g = parse_module(text).expect("parses").remove(0);
    let k = gather_kernel(&g).expect("a gather kernel");
    let dim = match g.nodes().find_map(|(_, n)| match n.op {
        kiln_ir::Op::IndexSelect { dim } => Some(dim),
        _ => None,
    }) {
        Some(d) => (if d < 0 { d + x.shape.len() as i64 } else { d }) as usize,
        None => panic!("no index_select"),
    };
    let outer: usize = x.shape[..dim].iter().product();
    let inner: usize = x.shape[dim + 1..].iter().product();
    let n: usize = idx_shape.iter().product();
    let idx_bytes: Vec<u8> = match idx_dtype {
        DType::I64 => ids.iter().flat_map(|i| i.to_le_bytes()).collect(),
        _ => ids.iter().flat_map(|&i| (i as i32).to_le_bytes()).collect(),
    };
    let mut buffers = vec![
        EmuBuffer {
            bytes: f32_bytes(&x.data),
        },
        EmuBuffer { bytes: idx_bytes },
        EmuBuffer {
            bytes: vec![0; outer * n * inner * 4],
        },
        EmuBuffer { bytes: vec![0; 16] },
    ];
    let (outer, n, inner, ds) = (outer as i64, n as i64, inner as i64, x.shape[dim] as i64);
    let strides = vec![
        vec![ds * inner, 0, 1, inner],
        vec![0, 1, 0, 0],
        vec![n * inner, inner, 1, 0],
        vec![0, 0, 0, 0],
    ];
    emulate(
        &k.source,
        &k.name,
        64,
        3,
        &mut buffers,
        &[outer, n, inner, ds],
        &strides,
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", k.source));
    let got: Vec<f64> = buffers[2]
        .bytes
        .chunks_exact(4)
        .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
        .collect();
    let cell =
        |i: usize| i64::from_le_bytes(buffers[3].bytes[i * 8..i * 8 + 8].try_into().unwrap());
    let idx = Value::new(
        idx_dtype,
        idx_shape.to_vec(),
        ids.iter().map(|&i| i as f64).collect(),
    )
    .expect("indices");
    let want = match eval(&g, &[x.clone(), idx]) {
        Ok(v) => v[0].data.clone(),
        Err(_) => Vec::new(),
    };
    (got, [cell(0), cell(1)], want)
}

fn table(shape: &[usize]) -> Value {
    let n: usize = shape.iter().product();
    Value::new(
        DType::F32,
        shape.to_vec(),
        (0..n)
            .map(|i| ((i * 37) % 101) as f64 * 0.25 - 12.0)
            .collect(),
    )
    .expect("table")
}

#[test]
fn embedding_lookups_equal_the_interpreter() {
    // [B, S] ids into a [vocab, D] table (the BERT embedding), both index dtypes
    for dtype in [DType::I64, DType::I32] {
        let ty = if dtype == DType::I64 { "i64" } else { "i32" };
        let text = format!(
            "graph @emb(%w: f32[30,7], %ids: {ty}[3,5]) -> f32[3,5,7] {{\n  %0 = index_select %w, %ids {{dim = 0}} : f32[3,5,7]\n  return %0\n}}\n"
        );
        let ids: Vec<i64> = (0..15).map(|i| (i * 11 + 3) % 30).collect();
        let (got, err, want) = run(&text, &table(&[30, 7]), &ids, &[3, 5], dtype);
        assert_eq!(err, [0, 0]);
        assert_eq!(got, want, "{ty}");
    }
    // a middle dim, 1-d indices with repeats
    let text = "graph @mid(%x: f32[4,9,3], %i: i64[6]) -> f32[4,6,3] {\n  %0 = index_select %x, %i {dim = 1} : f32[4,6,3]\n  return %0\n}\n";
    let ids = [8, 0, 0, 4, 8, 1];
    let (got, err, want) = run(text, &table(&[4, 9, 3]), &ids, &[6], DType::I64);
    assert_eq!(err, [0, 0]);
    assert_eq!(got, want);
    // the last dim
    let text = "graph @last(%x: f32[5,6], %i: i64[2,2]) -> f32[5,2,2] {\n  %0 = index_select %x, %i {dim = -1} : f32[5,2,2]\n  return %0\n}\n";
    let (got, err, want) = run(text, &table(&[5, 6]), &[5, 0, 2, 2], &[2, 2], DType::I64);
    assert_eq!(err, [0, 0]);
    assert_eq!(got, want);
}

#[test]
fn an_index_out_of_range_sets_the_error_cell() {
    let text = "graph @emb(%w: f32[10,4], %ids: i64[3]) -> f32[3,4] {\n  %0 = index_select %w, %ids {dim = 0} : f32[3,4]\n  return %0\n}\n";
    let (got, err, want) = run(text, &table(&[10, 4]), &[1, 10, 2], &[3], DType::I64);
    assert!(want.is_empty(), "the interpreter rejects the index too");
    assert_eq!(err, [1, 10]);
    assert!(got[4..8].iter().all(|v| v.is_nan()), "{got:?}");
    assert!(got[..4].iter().chain(&got[8..]).all(|v| v.is_finite()));
    let (_, err, _) = run(text, &table(&[10, 4]), &[-1, 0, 0], &[3], DType::I64);
    assert_eq!(err, [1, -1]);
}

#[test]
fn other_bodies_are_not_gathers() {
    let g = parse_module(
        "graph @add(%x: f32[3]) -> f32[3] {\n  %0 = add %x, 1.0 : f32[3]\n  return %0\n}\n",
    )
    .unwrap()
    .remove(0);
    assert!(gather_kernel(&g).is_err());
}
