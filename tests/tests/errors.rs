//! Bad input gives a typed error that names the op and the shapes, never a panic. The
//! messages are part of the user experience, so they are snapshot-tested.

use kiln::{DType, Tensor};

fn t(shape: &[usize]) -> Tensor {
    Tensor::randn(shape, DType::F32, 0).unwrap()
}

fn msg(r: kiln::Result<Tensor>) -> String {
    match r {
        Ok(t) => panic!("expected an error, got a tensor of shape {:?}", t.shape()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn error_messages() {
    let cases: Vec<(&str, kiln::Result<Tensor>)> = vec![
        ("add_shape_mismatch", t(&[2, 3]).add(&t(&[4]))),
        ("mul_operator_mismatch", &t(&[5]) * &t(&[3, 4])),
        ("matmul_inner_dims", t(&[2, 3]).matmul(&t(&[4, 5]))),
        (
            "matmul_dtypes",
            t(&[2, 3]).matmul(&t(&[3, 2]).cast(DType::F64).unwrap()),
        ),
        ("sum_bad_dim", t(&[2, 3]).sum(&[2], false)),
        ("softmax_bad_dim", t(&[2, 3]).softmax(-3)),
        (
            "mean_of_ints",
            t(&[2]).cast(DType::I32).unwrap().mean(&[], false),
        ),
        ("reshape_numel", t(&[2, 3]).reshape(&[4, 2])),
        ("reshape_two_minus_ones", t(&[2, 3]).reshape(&[-1, -1])),
        ("permute_not_a_permutation", t(&[2, 3]).permute(&[0, 0])),
        ("transpose_bad_dim", t(&[2, 3]).transpose(0, 5)),
        ("expand_incompatible", t(&[2, 3]).expand(&[4, 3])),
        ("narrow_past_end", t(&[2, 3]).narrow(1, 2, 5)),
        ("cat_mismatch", Tensor::cat(&[&t(&[2, 3]), &t(&[2, 4])], 0)),
        ("cat_empty", Tensor::cat(&[], 0)),
        (
            "index_select_out_of_range",
            t(&[4, 2]).index_select(0, &Tensor::from_vec(vec![1i64, 4], &[2]).unwrap()),
        ),
        (
            "index_select_float_indices",
            t(&[4, 2]).index_select(0, &t(&[2])),
        ),
        (
            "layer_norm_shape",
            t(&[2, 3]).layer_norm(&[4], None, None, 1e-5),
        ),
        (
            "layer_norm_weight",
            t(&[2, 3]).layer_norm(&[3], Some(&t(&[4])), None, 1e-5),
        ),
        ("linear_features", t(&[2, 3]).linear(&t(&[5, 4]), None)),
        ("where_not_bool", t(&[3]).where_(&t(&[3]), &t(&[3]))),
        ("neg_bool", t(&[3]).gt(0.0).unwrap().neg()),
        ("triu_rank1", t(&[3]).triu(0)),
        (
            "item_many",
            t(&[2]).add(0.0).and_then(|x| x.item().map(|_| x)),
        ),
        (
            "arange_zero_step",
            Tensor::arange(0.0, 1.0, 0.0, DType::F32),
        ),
        ("randn_int", Tensor::randn(&[2], DType::I32, 0)),
        (
            "from_vec_len",
            Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[2, 2]),
        ),
    ];
    let mut all = String::new();
    for (name, r) in cases {
        all.push_str(&format!("{name}: {}\n", msg(r)));
    }
    insta::assert_snapshot!(all);
}

#[test]
fn inplace_error_messages() {
    let x = Tensor::from_vec(vec![1i32, 2, 3], &[3]).unwrap();
    let mut all = String::new();
    for (name, r) in [
        ("add_float_into_int", x.add_(1.5)),
        ("add_shape", x.add_(&t(&[4]).cast(DType::I32).unwrap())),
        ("fill_non_scalar", x.fill_(&t(&[3]))),
        ("copy_shape", x.copy_(&t(&[2]))),
        ("write_expanded", t(&[1]).expand(&[3]).unwrap().mul_(2.0)),
    ] {
        all.push_str(&format!("{name}: {}\n", r.unwrap_err()));
    }
    insta::assert_snapshot!(all);
}
