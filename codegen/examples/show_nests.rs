//! Prints the loop nests of every kernel of an IR file after the pass pipeline:
//! `cargo run -p kiln-codegen --example show_nests -- FILE`.

fn main() {
    let path = std::env::args().nth(1).expect("usage: show_nests FILE");
    let text = std::fs::read_to_string(&path).expect("readable file");
    for g in kiln_ir::parse_module(&text).expect("valid IR") {
        let opt = kiln_passes::pipeline::run_passes(
            &g,
            &["decompose", "fuse"],
            &Default::default(),
            true,
        )
        .expect("passes run");
        let s = kiln_passes::schedule::schedule(&opt).expect("schedules");
        for k in &s.kernels {
            match kiln_codegen::loops::lower_kernel(&k.body) {
                Ok(n) => println!("{n}"),
                Err(e) => println!("# eager: {e}\n"),
            }
        }
    }
}
