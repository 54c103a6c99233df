//! The `.kir` parser and verifier on arbitrary text: no panic, no hang; every graph it
//! accepts prints to text that parses back to the same print (print ∘ parse is a fixed
//! point); a graph the verifier accepts runs on the interpreter (small symbol sizes, random
//! inputs) to values or a typed error, never a panic.
#![no_main]

use kiln_ir::interp::{eval, random_inputs};
use kiln_ir::text::parse_module;
use kiln_ir::verify;
use libfuzzer_sys::fuzz_target;

/// Graphs whose values would be bigger than this (elements, symbols at 3) are not run.
const MAX_ELEMENTS: f64 = 65536.0;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(graphs) = parse_module(text) else {
        return;
    };
    for g in &graphs {
        let printed = g.to_string();
        let again = parse_module(&printed).unwrap_or_else(|e| {
            panic!("the print of an accepted graph does not parse: {e}\n{printed}")
        });
        assert_eq!(again.len(), 1, "one graph printed, {} parsed", again.len());
        assert_eq!(
            again[0].to_string(),
            printed,
            "print(parse(print(g))) != print(g)"
        );
        if verify(g).is_err() {
            continue;
        }
        let small = g.nodes().all(|(_, n)| {
            n.ty.shape
                .dims()
                .iter()
                .map(|d| d.as_const().map_or(3.0, |c| c as f64))
                .product::<f64>()
                <= MAX_ELEMENTS
        });
        if small {
            if let Ok(inputs) = random_inputs(g, 1, &|_| 3) {
                let _ = eval(g, &inputs);
            }
        }
    }
});
