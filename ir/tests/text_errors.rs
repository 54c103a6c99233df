//! Snapshots of the parser's error messages on malformed text. Each snapshot shows the
//! offending line, a caret under the reported column, and the message.

use kiln_ir::text::{parse_graph, parse_module, ParseError};

/// The error for `text`, rendered with the line it points at.
fn render(text: &str, e: &ParseError) -> String {
    let line = text.lines().nth(e.line - 1).unwrap_or("");
    let caret = " ".repeat(e.col - 1);
    format!("{line}\n{caret}^\n{e}")
}

fn module_error(text: &str) -> String {
    match parse_module(text) {
        Ok(g) => panic!("parsed {} graph(s) from:\n{text}", g.len()),
        Err(e) => render(text, &e),
    }
}

/// `case!(name, "body lines")`: the body is wrapped in a graph with inputs
/// `%x: f32[4]`, `%y: f32[3]`, `%m: f32[2,3]` that returns `%x`.
macro_rules! case {
    ($name:ident, $body:expr) => {
        #[test]
        fn $name() {
            let text = format!(
                "graph @g(%x: f32[4], %y: f32[3], %m: f32[2,3]) -> f32[4] {{\n{}\n  return %x\n}}\n",
                $body
            );
            insta::assert_snapshot!(module_error(&text));
        }
    };
}

/// `text_case!(name, "whole text")`: the text as is.
macro_rules! text_case {
    ($name:ident, $text:expr) => {
        #[test]
        fn $name() {
            insta::assert_snapshot!(module_error($text));
        }
    };
}

case!(unknown_op, "  %0 = mull %x, %x : f32[4]");
case!(missing_attribute, "  %0 = softmax %x : f32[4]");
case!(unknown_attribute, "  %0 = relu %x {dim = 1} : f32[4]");
case!(bad_attribute_kind, "  %0 = softmax %x {dim = 0.5} : f32[4]");
case!(
    bad_attribute_list,
    "  %0 = sum %x {dims = 0, keepdim = false} : f32[]"
);
case!(
    duplicate_attribute,
    "  %0 = softmax %x {dim = 0, dim = 0} : f32[4]"
);
case!(undefined_value, "  %0 = add %x, %7 : f32[4]");
case!(
    redefined_value,
    "  %0 = relu %x : f32[4]\n  %0 = neg %x : f32[4]"
);
case!(redefined_input, "  %y = relu %x : f32[4]");
case!(shape_mismatch_in_add, "  %0 = add %x, %y : f32[4]");
case!(bad_reshape, "  %0 = reshape %m {shape = [4]} : f32[4]");
case!(bad_permute, "  %0 = permute %m {dims = [0, 0]} : f32[2,3]");
case!(declared_type_mismatch, "  %0 = add %m, %y : f32[4]");
case!(
    softmax_of_int,
    "  %0 = cast %x {dtype = i32} : i32[4]\n  %1 = softmax %0 {dim = 0} : f32[4]"
);
case!(missing_comma, "  %0 = add %x %x : f32[4]");
case!(missing_type, "  %0 = relu %x");
case!(missing_equals, "  %0 relu %x : f32[4]");
case!(garbage_character, "  %0 = relu $x : f32[4]");
case!(
    unterminated_string,
    "  %0 = gelu %x {approximate = \"tanh} : f32[4]"
);
case!(
    bad_gelu_mode,
    "  %0 = gelu %x {approximate = \"fast\"} : f32[4]"
);
case!(bad_dtype_in_type, "  %0 = relu %x : f33[4]");
case!(
    bad_dtype_in_attribute,
    "  %0 = cast %x {dtype = f33} : f32[4]"
);
case!(
    unbound_symbol_in_full,
    "  %0 = full {shape = [N, 3], value = 0.0, dtype = f32} : f32[N,3]"
);
case!(
    integer_out_of_range,
    "  %0 = add %x, 99999999999999999999 : f32[4]"
);
case!(negative_dim_in_type, "  %0 = relu %x : f32[-4]");
case!(shape_too_large, "  %0 = full {shape = [1000000000, 1000000000], value = 0, dtype = i64} : i64[1000000000,1000000000]");
case!(
    literal_too_large,
    "  %0 = from_vec {values = [1.0], shape = [4294967296, 4294967296], dtype = f32} : f32[1]"
);
case!(text_after_type, "  %0 = relu %x : f32[4] %y");
case!(
    nested_lists_too_deep,
    "  %0 = sum %x {dims = [[[[[[[[[[[[[[[[[[[[0]]]]]]]]]]]]]]]]]]], keepdim = true} : f32[4]"
);
case!(bad_number, "  %0 = add %x, 1.5e : f32[4]");

text_case!(
    return_type_mismatch,
    "graph @g(%x: f32[4]) -> f32[4] {\n  %0 = sum %x {dims = [], keepdim = false} : f32[]\n  return %0\n}\n"
);
text_case!(
    return_count_mismatch,
    "graph @g(%x: f32[4]) -> (f32[4], f32[4]) {\n  return %x\n}\n"
);
text_case!(
    empty_return,
    "graph @g(%x: f32[4]) -> f32[4] {\n  return\n}\n"
);
text_case!(
    return_undefined,
    "graph @g(%x: f32[4]) -> f32[4] {\n  return %z\n}\n"
);
text_case!(
    missing_return,
    "graph @g(%x: f32[4]) -> f32[4] {\n  %0 = relu %x : f32[4]\n}\n"
);
text_case!(
    missing_close_brace,
    "graph @g(%x: f32[4]) -> f32[4] {\n  %0 = relu %x : f32[4]\n  return %0\n"
);
text_case!(
    missing_close_brace_before_next_graph,
    "graph @f(%x: f32[4]) -> f32[4] {\n  return %x\n\ngraph @g(%x: f32[4]) -> f32[4] {\n  return %x\n}\n"
);
text_case!(
    instruction_after_return,
    "graph @g(%x: f32[4]) -> f32[4] {\n  return %x\n  %0 = relu %x : f32[4]\n}\n"
);
text_case!(
    missing_arrow,
    "graph @g(%x: f32[4]) f32[4] {\n  return %x\n}\n"
);
text_case!(
    missing_graph_name,
    "graph g(%x: f32[4]) -> f32[4] {\n  return %x\n}\n"
);
text_case!(not_a_graph, "%0 = relu %x : f32[4]\n");
text_case!(
    body_on_header_line,
    "graph @g(%x: f32[4]) -> f32[4] { return %x\n}\n"
);

#[test]
fn parse_graph_wants_exactly_one() {
    let two = "graph @f(%x: f32[4]) -> f32[4] {\n  return %x\n}\n\ngraph @g(%x: f32[4]) -> f32[4] {\n  return %x\n}\n";
    let e = parse_graph(two).unwrap_err();
    insta::assert_snapshot!(render(two, &e));
    let e = parse_graph("# nothing here\n").unwrap_err();
    assert_eq!(e.to_string(), "2:1: expected `graph`, found end of input");
}

#[test]
fn errors_display_line_and_column() {
    let e =
        parse_module("graph @g(%x: f32[4]) -> f32[4] {\n  %0 = mull %x : f32[4]\n  return %0\n}\n")
            .unwrap_err();
    assert_eq!((e.line, e.col), (2, 8));
    assert_eq!(e.to_string(), "2:8: unknown op `mull`");
}

// literals a dtype cannot hold, refused as torch refuses them
case!(
    full_of_infinity_as_integer,
    "  %0 = full {shape = [2], value = inf, dtype = i64} : i64[2]"
);
case!(
    full_beyond_i32,
    "  %0 = full {shape = [2], value = 1e20, dtype = i32} : i32[2]"
);
case!(
    full_beyond_f32,
    "  %0 = full {shape = [2], value = 1e300, dtype = f32} : f32[2]"
);
case!(
    from_vec_of_infinity_as_integer,
    "  %0 = from_vec {values = [1.0, inf], shape = [2], dtype = i64} : i64[2]"
);
case!(
    fill_integer_with_nan,
    "  %0 = cast %x {dtype = i32} : i32[4]\n  %1 = fill_ %0, nan : i32[4]"
);
case!(
    integer_to_negative_literal_power,
    "  %0 = cast %x {dtype = i64} : i64[4]\n  %1 = pow %0, -2 : i64[4]"
);
