//! Exact C99 literals for f32 constants, shared by the CUDA and C-tier emitters.

/// `f` (finite) as a parenthesised C99 hexadecimal float literal with the `f` suffix,
/// e.g. `(0x1.800000p+0f)`: it reads back as exactly `f`, subnormals and `-0.0` included.
pub(crate) fn hex_float(f: f32) -> String {
    if f == 0.0 {
        return if f.is_sign_negative() {
            "(-0.0f)"
        } else {
            "0.0f"
        }
        .to_string();
    }
    let bits = f.to_bits();
    let sign = if bits >> 31 == 1 { "-" } else { "" };
    let exp = ((bits >> 23) & 0xff) as i32;
    let mant = bits & 0x7f_ffff;
    // normal: 1.m × 2^(e-127); subnormal: 0.m × 2^-126
    let (lead, e) = if exp == 0 { (0, -126) } else { (1, exp - 127) };
    // 23 mantissa bits as 6 hex digits (shifted left by one to fill 24 bits)
    format!("({sign}0x{lead}.{:06x}p{e:+}f)", mant << 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_are_exact() {
        assert_eq!(hex_float(1.5), "(0x1.800000p+0f)");
        assert_eq!(hex_float(-0.25), "(-0x1.000000p-2f)");
        assert_eq!(hex_float(-0.1), "(-0x1.99999ap-4f)");
        assert_eq!(hex_float(f32::MAX), "(0x1.fffffep+127f)");
        assert_eq!(hex_float(f32::MIN_POSITIVE), "(0x1.000000p-126f)");
        assert_eq!(hex_float(f32::MIN_POSITIVE / 2.0), "(0x0.800000p-126f)");
        assert_eq!(hex_float(f32::from_bits(1)), "(0x0.000002p-126f)");
        assert_eq!(hex_float(-0.0), "(-0.0f)");
        assert_eq!(hex_float(0.0), "0.0f");
        // every literal reads back as its value: mantissa digits times the power of two
        for x in [1.0f32, 3.0e-5, -7.25, 123456.79, 1.0e-40] {
            let s = hex_float(x);
            let (m, e) = s
                .trim_matches(|c| c == '(' || c == ')')
                .trim_end_matches('f')
                .split_once('p')
                .unwrap();
            let neg = m.starts_with('-');
            let m = m.trim_start_matches('-').trim_start_matches("0x");
            let (int, frac) = m.split_once('.').unwrap();
            let frac = u64::from_str_radix(frac, 16).unwrap() as f64 / 16f64.powi(6);
            let v = (int.parse::<f64>().unwrap() + frac) * 2f64.powi(e.parse().unwrap());
            assert_eq!(if neg { -v } else { v } as f32, x, "{s}");
        }
    }
}
