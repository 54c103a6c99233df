//! The hand-written reference kernels `kiln bench` times beside a workload's compiled code
//! (issue 24's measure for the C tier): the AVX-512 or AVX2 softmax of
//! `kiln_codegen::cpu::c_tier::reference`, on the workload's own input, checked against
//! eager once before it is timed.

use kiln::models::Model;
use kiln::Tensor;
use kiln_codegen::cpu::c_tier::reference::{softmax_reference, RowReference};

/// A reference made ready for one workload's input: its kernel, the input's elements and
/// an output buffer it fills on each call.
pub struct Prepared {
    kernel: RowReference,
    input: Vec<f32>,
    output: Vec<f32>,
    rows: usize,
    cols: usize,
}

/// What the report says of a reference.
pub struct Outcome {
    /// the reference, when it runs here and matched eager
    pub prepared: Option<Prepared>,
    /// why it does not (no AVX-512 or AVX2, no C compiler, a mismatch), for the report
    pub skipped: Option<String>,
}

/// The reference for `model` on `inputs`, if the workload has one: built, run once and
/// checked against eager's output within `tolerance` (relative L2).
pub fn for_workload(model: &dyn Model, inputs: &[Tensor], tolerance: f64) -> Option<Outcome> {
    if model.name() != "softmax" {
        return None;
    }
    Some(match prepare(model, inputs, tolerance) {
        Ok(p) => Outcome {
            prepared: Some(p),
            skipped: None,
        },
        Err(why) => Outcome {
            prepared: None,
            skipped: Some(why),
        },
    })
}

fn prepare(model: &dyn Model, inputs: &[Tensor], tolerance: f64) -> Result<Prepared, String> {
    let x = inputs.first().ok_or("the workload has no input")?;
    let (rows, cols) = match x.shape() {
        [rows, cols] => (*rows, *cols),
        s => return Err(format!("the reference takes a 2-d input, not {s:?}")),
    };
    let kernel = softmax_reference().map_err(|e| e.to_string())?;
    let mut p = Prepared {
        kernel,
        input: x.to_vec::<f32>().map_err(|e| e.to_string())?,
        output: vec![0.0; rows * cols],
        rows,
        cols,
    };
    p.run();
    let want = model
        .forward(inputs)
        .and_then(|o| o[0].to_vec_f64())
        .map_err(|e| e.to_string())?;
    let got: Vec<f64> = p.output.iter().map(|&v| f64::from(v)).collect();
    let err = super::run::relative_l2(&want, &got);
    if err.is_nan() || err > tolerance {
        return Err(format!(
            "{} differs from eager by {err:.3e} (relative L2)",
            p.kernel.name()
        ));
    }
    Ok(p)
}

impl Prepared {
    /// One call of the kernel over the whole input.
    pub fn run(&mut self) {
        // the buffers were sized from rows × cols when prepared: the call cannot fail
        let _ = self
            .kernel
            .run(&self.input, &mut self.output, self.rows, self.cols);
    }

    /// The C compiler's time for the kernel, ms (zero when the object was cached).
    pub fn compile_ms(&self) -> f64 {
        self.kernel.compile_time.as_secs_f64() * 1e3
    }
}
