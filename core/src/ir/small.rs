//! Codecs for the sub-byte integers and the 8/4-bit float formats. The executor keeps
//! such tensors as one code per byte (`Tensor::Small`) and converts through f32.

use super::DType;

/// Decodes one code of a small dtype to f32.
pub fn decode(dtype: DType, code: u8) -> f32 {
    match dtype {
        DType::I4 => (((code & 0x0F) << 4) as i8 >> 4) as f32,
        DType::U4 => (code & 0x0F) as f32,
        DType::I2 => (((code & 0x03) << 6) as i8 >> 6) as f32,
        DType::U2 => (code & 0x03) as f32,
        DType::F8E8M0 => {
            if code == 0xFF {
                f32::NAN
            } else {
                2f32.powi(i32::from(code) - 127)
            }
        }
        _ => {
            let f = FloatFormat::of(dtype);
            f.decode(code)
        }
    }
}

/// Encodes f32 into a small dtype. `saturate` follows ONNX Cast: out-of-range values clamp
/// to the largest finite value instead of becoming NaN or infinity.
pub fn encode(dtype: DType, x: f32, saturate: bool) -> u8 {
    match dtype {
        DType::I4 => (round_half_even(x).clamp(-8.0, 7.0) as i8 as u8) & 0x0F,
        DType::U4 => round_half_even(x).clamp(0.0, 15.0) as u8,
        DType::I2 => (round_half_even(x).clamp(-2.0, 1.0) as i8 as u8) & 0x03,
        DType::U2 => round_half_even(x).clamp(0.0, 3.0) as u8,
        DType::F8E8M0 => encode_e8m0(x, saturate, E8M0Round::Up),
        _ => FloatFormat::of(dtype).encode(x, saturate),
    }
}

/// Wraps an integer into a small integer dtype the way a C cast does (keeps the low bits).
pub fn wrap_int(dtype: DType, v: i64) -> u8 {
    match dtype {
        DType::I4 | DType::U4 => (v & 0x0F) as u8,
        DType::I2 | DType::U2 => (v & 0x03) as u8,
        _ => encode(dtype, v as f32, true),
    }
}

/// Rounding of the E8M0 scale format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum E8M0Round {
    Up,
    Down,
    Nearest,
}

/// Encodes f32 into E8M0 (a power-of-two exponent) as ONNX Cast-24 specifies.
pub fn encode_e8m0(x: f32, saturate: bool, round: E8M0Round) -> u8 {
    let bits = x.to_bits();
    let mut exponent = ((bits >> 23) & 0xFF) as u16;
    if exponent == 0xFF {
        return 0xFF;
    }
    let round_up = match round {
        E8M0Round::Nearest => {
            let g = bits & 0x40_0000 != 0;
            let r = bits & 0x20_0000 != 0;
            let s = bits & 0x1F_FFFF != 0;
            let lsb = exponent > 0;
            g && (r || s || lsb)
        }
        E8M0Round::Up => bits & 0x7F_FFFF != 0,
        E8M0Round::Down => false,
    };
    if round_up {
        if exponent == 0xFE && saturate {
            return 0xFE;
        }
        exponent += 1;
    }
    if exponent >= 0xFF {
        return 0xFF;
    }
    exponent as u8
}

/// Round half to even, as numpy and ONNX do.
pub fn round_half_even(x: f32) -> f32 {
    let r = x.round();
    if (x - x.trunc()).abs() == 0.5 {
        2.0 * (x / 2.0).round()
    } else {
        r
    }
}

/// A small IEEE-like float format described by its bit widths and special-value rules.
#[derive(Clone, Copy, Debug)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "the specs define each special-value rule as its own yes/no"
)]
struct FloatFormat {
    exp_bits: u32,
    man_bits: u32,
    bias: i32,
    /// E5M2: all-ones exponent encodes infinity and NaN as in IEEE 754.
    ieee_specials: bool,
    /// FNUZ formats: 0x80 is the only NaN and there is no negative zero.
    nan_is_neg_zero: bool,
    /// E4M3FN: only all-ones exponent and mantissa is NaN.
    nan_all_ones: bool,
    /// F4E2M1: no NaN or infinity at all.
    no_specials: bool,
}

impl FloatFormat {
    fn of(dtype: DType) -> Self {
        let base = Self {
            exp_bits: 4,
            man_bits: 3,
            bias: 7,
            ieee_specials: false,
            nan_is_neg_zero: false,
            nan_all_ones: false,
            no_specials: false,
        };
        match dtype {
            DType::F8E4M3FNUZ => Self {
                bias: 8,
                nan_is_neg_zero: true,
                ..base
            },
            DType::F8E5M2 => Self {
                exp_bits: 5,
                man_bits: 2,
                bias: 15,
                ieee_specials: true,
                ..base
            },
            DType::F8E5M2FNUZ => Self {
                exp_bits: 5,
                man_bits: 2,
                bias: 16,
                nan_is_neg_zero: true,
                ..base
            },
            DType::F4E2M1 => Self {
                exp_bits: 2,
                man_bits: 1,
                bias: 1,
                no_specials: true,
                ..base
            },
            // F8E4M3FN and anything unexpected.
            _ => Self {
                nan_all_ones: true,
                ..base
            },
        }
    }

    fn sign_bit(self) -> u8 {
        1 << (self.exp_bits + self.man_bits)
    }

    fn magnitude(self, code: u8) -> f32 {
        let man_mask = (1u8 << self.man_bits) - 1;
        let exp = i32::from((code >> self.man_bits) & ((1 << self.exp_bits) - 1));
        let man = f32::from(code & man_mask);
        let scale = (1u32 << self.man_bits) as f32;
        if exp == 0 {
            man / scale * 2f32.powi(1 - self.bias)
        } else {
            (1.0 + man / scale) * 2f32.powi(exp - self.bias)
        }
    }

    fn decode(self, code: u8) -> f32 {
        let sign = self.sign_bit();
        let mag_mask = sign - 1;
        if self.nan_is_neg_zero && code == sign {
            return f32::NAN;
        }
        let mag = code & mag_mask;
        if self.nan_all_ones && mag == mag_mask {
            return f32::NAN;
        }
        if self.ieee_specials {
            let exp_all = ((1u8 << self.exp_bits) - 1) << self.man_bits;
            if mag & exp_all == exp_all {
                let v = if mag == exp_all { f32::INFINITY } else { f32::NAN };
                return if code & sign != 0 { -v } else { v };
            }
        }
        let v = self.magnitude(mag);
        if code & sign != 0 { -v } else { v }
    }

    /// The largest finite magnitude code.
    fn max_code(self) -> u8 {
        let mag_mask = self.sign_bit() - 1;
        if self.nan_all_ones {
            mag_mask - 1
        } else if self.ieee_specials {
            (((1u8 << self.exp_bits) - 1) << self.man_bits) - 1
        } else {
            mag_mask
        }
    }

    fn nan_code(self) -> u8 {
        if self.nan_is_neg_zero {
            self.sign_bit()
        } else if self.ieee_specials {
            (((1u8 << self.exp_bits) - 1) << self.man_bits) | 1
        } else {
            self.sign_bit() - 1
        }
    }

    fn encode(self, x: f32, saturate: bool) -> u8 {
        let sign = self.sign_bit();
        let neg = x.is_sign_negative();
        let sign_code = if neg { sign } else { 0 };
        // FNUZ formats have no negative zero: -0 encodes as +0.
        let zero_code = if self.nan_is_neg_zero { 0 } else { sign_code };
        let max_code = self.max_code();
        let max = self.magnitude(max_code);
        if x.is_nan() {
            // F4E2M1 has no NaN: it becomes a (signed) zero, as ml_dtypes converts it.
            return if self.no_specials { zero_code } else { self.nan_code() };
        }
        let a = x.abs();
        if a.is_infinite() {
            if self.no_specials {
                return sign_code | max_code;
            }
            if saturate {
                return sign_code | max_code;
            }
            if self.ieee_specials {
                return sign_code | (max_code + 1);
            }
            return self.nan_code();
        }
        // Round half to even on the grid of representable magnitudes.
        let mut lo = 0u8;
        let mut hi = max_code;
        if a >= max {
            // Overflow threshold: halfway to the next (virtual) step above max.
            let step = max - self.magnitude(max_code - 1);
            let halfway = max + step / 2.0;
            let overflow = a > halfway || (a == halfway && max_code % 2 == 1);
            if !overflow || saturate || self.no_specials {
                return sign_code | max_code;
            }
            if self.ieee_specials {
                return sign_code | (max_code + 1);
            }
            return self.nan_code();
        }
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.magnitude(mid) <= a {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let vl = self.magnitude(lo);
        let vh = self.magnitude(hi);
        let code = if a - vl < vh - a {
            lo
        } else if a - vl > vh - a {
            hi
        } else if lo.is_multiple_of(2) {
            lo
        } else {
            hi
        };
        if code == 0 {
            return zero_code;
        }
        sign_code | code
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e4m3fn_round_trip_and_limits() {
        for code in 0u8..=255 {
            let v = decode(DType::F8E4M3FN, code);
            if v.is_nan() {
                continue;
            }
            assert_eq!(encode(DType::F8E4M3FN, v, true), code, "code {code:#x} = {v}");
        }
        assert_eq!(decode(DType::F8E4M3FN, 0x7E), 448.0);
        assert_eq!(encode(DType::F8E4M3FN, 1e6, true), 0x7E);
        assert!(decode(DType::F8E4M3FN, encode(DType::F8E4M3FN, 1e6, false)).is_nan());
    }

    #[test]
    fn e5m2_has_infinity() {
        assert_eq!(decode(DType::F8E5M2, 0x7B), 57344.0);
        assert_eq!(decode(DType::F8E5M2, 0x7C), f32::INFINITY);
        assert_eq!(encode(DType::F8E5M2, 1e9, false), 0x7C);
        assert_eq!(encode(DType::F8E5M2, 1e9, true), 0x7B);
    }

    #[test]
    fn fnuz_has_no_negative_zero() {
        assert_eq!(encode(DType::F8E4M3FNUZ, -0.0, true), 0);
        assert!(decode(DType::F8E4M3FNUZ, 0x80).is_nan());
        assert_eq!(decode(DType::F8E4M3FNUZ, 0x7F), 240.0);
    }

    #[test]
    fn float4_values() {
        let vals: Vec<f32> = (0u8..8).map(|c| decode(DType::F4E2M1, c)).collect();
        assert_eq!(vals, vec![0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]);
        assert_eq!(encode(DType::F4E2M1, 2.5, true), 4); // tie to even code
        assert_eq!(encode(DType::F4E2M1, -100.0, true), 0x0F);
    }

    #[test]
    fn int4_sign_extends() {
        assert_eq!(decode(DType::I4, 0x0F), -1.0);
        assert_eq!(decode(DType::I4, 0x08), -8.0);
        assert_eq!(encode(DType::I4, -9.0, true), 0x08);
        assert_eq!(decode(DType::I2, 0x02), -2.0);
    }
}
