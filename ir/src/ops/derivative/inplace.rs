//! The rules of the in-place family, read functionally as the IR reads them: the op's value
//! is the destination's new value, computed from its old value (operand 0) and the other
//! operand, so a rule gives the gradients of the old value and of the other operand.
//! (Eager autograd applies them to the values saved before the update.)

use super::composite::zeros;
use super::*;

/// `dst.copy_(src)`: the old value is overwritten (zeros, as torch's `zeros_like(grad)`);
/// `src` gets `g` summed down to its shape (undoing the broadcast) and cast to its dtype.
pub fn copy(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    Ok(vec![overwritten(o, c)?, o.through(c, 1, 1.0)?])
}

/// `dst.fill_(value)`: the old value is overwritten (zeros); a 0-d tensor value gets the sum
/// of `g`.
pub fn fill(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    Ok(vec![overwritten(o, c)?, o.through(c, 1, 1.0)?])
}

/// The gradient of a destination whose old value is overwritten: zeros of its type.
fn overwritten(o: &mut Ops<'_>, c: &GradCall<'_>) -> Result<Option<GVal>, GradError> {
    let GArg::Val(dst) = c.args[0] else {
        return Ok(None);
    };
    let t = o.ty(dst);
    Ok(Some(zeros(o, t.shape, t.dtype)?))
}

/// `dst.add_(other)`: as `dst + other`.
pub fn add(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    super::binary::add(o, c)
}

/// `dst.mul_(other)`: as `dst * other`, with the old value of `dst`.
pub fn mul(o: &mut Ops<'_>, c: &GradCall<'_>) -> Out {
    super::binary::mul(o, c)
}
