//! `KILN_REPRO_DIR`: a compile that fails in user code writes its graph and the call's
//! inputs, and the files run again to the same values as the function eagerly. One test
//! per process: it sets the variable.

use kiln::graph_exec::run_graph;
use kiln::{compile_with, CompileOptions, DType, Tensor};

#[test]
fn a_failing_compile_writes_its_graph_and_inputs_to_the_repro_dir() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("kiln-repro-{}", std::process::id()));
    std::env::set_var("KILN_REPRO_DIR", &dir);
    let w = Tensor::randn(&[4, 3], DType::F32, 1).unwrap();
    let f = |x: &Tensor| x.matmul(&w)?.exp();
    // an unknown rewrite rule fails the compile (in the pass pipeline, after tracing)
    let cf = compile_with(f, CompileOptions::default().disable_rule("no-such-rule"));
    let x = Tensor::randn(&[2, 4], DType::F32, 2).unwrap();
    let err = cf.call(&x).unwrap_err().to_string();
    assert!(err.contains("no-such-rule"), "{err}");

    let kir: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "kir"))
        .collect();
    assert_eq!(kir.len(), 1, "{kir:?}");
    let text = std::fs::read_to_string(&kir[0]).unwrap();
    assert!(text.contains("no-such-rule"), "{text}");
    assert!(
        text.contains("# reproduce: cargo run --release -- run ") && text.contains("--backend cpu"),
        "{text}"
    );
    let g = kiln::ir::text::parse_module(&text).unwrap().remove(0);
    let inputs = kiln::io::load(&kir[0].with_extension("safetensors")).unwrap();
    // by the graph's input names: the argument, then the captured weight
    let xs: Vec<Tensor> = g
        .inputs()
        .iter()
        .map(|(name, _)| {
            inputs
                .iter()
                .find(|(n, _)| n == name)
                .unwrap_or_else(|| panic!("no input {name}"))
                .1
                .clone()
        })
        .collect();
    assert_eq!(xs.len(), 2);
    let got = run_graph(&g, &xs).unwrap();
    let want = f(&x).unwrap();
    assert_eq!(got[0].to_vec_f64().unwrap(), want.to_vec_f64().unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
}
