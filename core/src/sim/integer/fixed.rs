//! The fixed-point primitives of TFLite's reference kernels (default build: double
//! rounding) and gemmlowp, bit for bit: `QuantizeMultiplier`, the saturating rounding
//! doubling high multiply, the rounding divide by a power of two, and the int16 forms
//! HARD_SWISH uses.

/// `frexp`: `m = frac · 2^exp` with `0.5 <= |frac| < 1` (finite, nonzero `m`).
fn frexp(m: f64) -> (f64, i32) {
    let bits = m.to_bits();
    let exp = ((bits >> 52) & 0x7ff) as i32;
    if exp == 0 {
        // Subnormal: scale into the normal range first.
        let (f, e) = frexp(m * f64::from_bits(0x4350_0000_0000_0000)); // 2^54
        return (f, e - 54);
    }
    let frac = f64::from_bits((bits & !(0x7ff << 52)) | (1022 << 52));
    (frac, exp - 1022)
}

/// TFLite's `QuantizeMultiplier(double)`: `(q, shift)` with `m ≈ q · 2^(shift − 31)`.
pub fn quantize_multiplier(m: f64) -> (i32, i32) {
    if m == 0.0 || !m.is_finite() {
        return (0, 0);
    }
    let (frac, mut shift) = frexp(m);
    let mut q = (frac * 2_147_483_648.0).round() as i64;
    if q == 1 << 31 {
        q /= 2;
        shift += 1;
    }
    if shift < -31 {
        return (0, 0);
    }
    (q as i32, shift)
}

/// gemmlowp `SaturatingRoundingDoublingHighMul` (int32).
#[inline]
pub fn srdhm(a: i32, b: i32) -> i32 {
    if a == i32::MIN && b == i32::MIN {
        return i32::MAX;
    }
    let ab = i64::from(a) * i64::from(b);
    let nudge = if ab >= 0 { 1i64 << 30 } else { 1 - (1i64 << 30) };
    ((ab + nudge) / (1i64 << 31)) as i32
}

/// gemmlowp `RoundingDivideByPOT` (int32): round to nearest, ties away from zero.
#[inline]
pub fn rdbpot(x: i32, e: i32) -> i32 {
    let mask = ((1i64 << e) - 1) as i32;
    let rem = x & mask;
    let threshold = (mask >> 1) + i32::from(x < 0);
    (x >> e) + i32::from(rem > threshold)
}

/// `MultiplyByQuantizedMultiplier(int32 x, q, shift)`, double rounding.
#[inline]
pub fn mbqm(x: i32, q: i32, shift: i32) -> i32 {
    // In range for every multiplier TFLite makes; clamped so that any shift is defined.
    let left = shift.clamp(0, 31);
    let right = (-shift).clamp(0, 31);
    rdbpot(srdhm(x.wrapping_mul(1 << left), q), right)
}

/// `MultiplyByQuantizedMultiplier(int64 x, q, shift)` of 16×8 kernels with an int64
/// accumulator: the multiplier cut to 16 bits (`(q + 2^15) >> 16`, at most 0x7FFF), then
/// `(x·r + 2^(t−1)) >> t` with `t = 15 − shift` (round half up), truncated to int32.
#[inline]
pub fn mbqm64(x: i64, q: i32, shift: i32) -> i32 {
    let r = if q < 0x7FFF_0000 { (q + (1 << 15)) >> 16 } else { 0x7FFF };
    let t = 15 - shift;
    if t <= 0 {
        return x.wrapping_mul(i64::from(r)).wrapping_shl((-t) as u32) as i32;
    }
    ((x.wrapping_mul(i64::from(r)) + (1i64 << (t - 1))) >> t) as i32
}

/// gemmlowp `SaturatingRoundingDoublingHighMul` (int16).
#[inline]
pub fn srdhm16(a: i16, b: i16) -> i16 {
    if a == i16::MIN && b == i16::MIN {
        return i16::MAX;
    }
    let ab = i32::from(a) * i32::from(b);
    let nudge = if ab >= 0 { 1 << 14 } else { 1 - (1 << 14) };
    ((ab + nudge) / (1 << 15)) as i16
}

/// TFLite's `SaturatingDoublingHighMul` (int16, truncating).
#[inline]
pub fn sdhm16(a: i16, b: i16) -> i16 {
    if a == i16::MIN && b == i16::MIN {
        return i16::MAX;
    }
    ((i32::from(a) * i32::from(b)) / (1 << 15)) as i16
}

/// gemmlowp `RoundingDivideByPOT` (int16).
#[inline]
pub fn rdbpot16(x: i16, e: i32) -> i16 {
    let mask = ((1i32 << e) - 1) as i16;
    let rem = x & mask;
    let threshold = (mask >> 1) + i16::from(x < 0);
    (x >> e) + i16::from(rem > threshold)
}

/// TFLite's `SaturatingLeftShift` (int16).
#[inline]
pub fn sat_shl16(x: i16, e: i32) -> i16 {
    (i32::from(x) << e).clamp(i32::from(i16::MIN), i32::from(i16::MAX)) as i16
}

/// TFLite's `DownScaleInt32ToInt16Multiplier`.
pub fn downscale_to_i16(q: i32) -> i16 {
    if q >= i32::MAX - (1 << 15) {
        return i16::MAX;
    }
    ((q + (1 << 15)) >> 16) as i16
}

/// gemmlowp `SaturatingRoundingMultiplyByPOT` (int32).
#[inline]
pub fn sat_rmul_pot(x: i32, exponent: i32) -> i32 {
    if exponent == 0 {
        return x;
    }
    if exponent < 0 {
        return rdbpot(x, -exponent);
    }
    let thr = (1i32 << (31 - exponent)) - 1;
    if x > thr {
        i32::MAX
    } else if x < -thr {
        i32::MIN
    } else {
        x << exponent
    }
}

/// gemmlowp `exp_on_interval_between_negative_one_quarter_and_0_excl` (Q0.31).
fn exp_on_interval(a: i32) -> i32 {
    const CONSTANT_TERM: i32 = 1_895_147_668;
    const ONE_THIRD: i32 = 715_827_883;
    let x = a.wrapping_add(1 << 28);
    let x2 = srdhm(x, x);
    let x3 = srdhm(x2, x);
    let x4 = srdhm(x2, x2);
    let x4_over_4 = sat_rmul_pot(x4, -2);
    let t = srdhm(x4_over_4.wrapping_add(x3), ONE_THIRD).wrapping_add(x2);
    let t = sat_rmul_pot(t, -1);
    CONSTANT_TERM.wrapping_add(srdhm(CONSTANT_TERM, x.wrapping_add(t)))
}

/// gemmlowp `exp_on_negative_values` for a Q5.26 input (5 integer bits); Q0.31 output.
pub fn exp_on_negative_values_5(a: i32) -> i32 {
    const INTEGER_BITS: i32 = 5;
    const FRAC_BITS: i32 = 31 - INTEGER_BITS;
    let one_quarter = 1i32 << (FRAC_BITS - 2);
    let mask = one_quarter - 1;
    let a_mod_q_minus_q = (a & mask).wrapping_sub(one_quarter);
    let mut result = exp_on_interval(sat_rmul_pot(a_mod_q_minus_q, INTEGER_BITS));
    let remainder = a_mod_q_minus_q.wrapping_sub(a);
    for (exponent, mult) in [
        (-2, 1_672_461_947),
        (-1, 1_302_514_674),
        (0, 790_015_084),
        (1, 290_630_308),
        (2, 39_332_535),
        (3, 720_401),
        (4, 242),
    ] {
        if INTEGER_BITS > exponent {
            let shift = FRAC_BITS + exponent;
            if remainder & (1 << shift) != 0 {
                result = srdhm(result, mult);
            }
        }
    }
    if a == 0 { i32::MAX } else { result }
}

#[expect(clippy::manual_midpoint, reason = "gemmlowp's RoundingHalfSum, as written there")]
fn rounding_half_sum(a: i32, b: i32) -> i32 {
    let s = i64::from(a) + i64::from(b);
    let sign = if s >= 0 { 1 } else { -1 };
    ((s + sign) / 2) as i32
}

/// gemmlowp `one_over_one_plus_x_for_x_in_0_1` (Q0.31 in and out).
pub fn one_over_one_plus_x(a: i32) -> i32 {
    const C48_17: i32 = 1_515_870_810;
    const CNEG32_17: i32 = -1_010_580_540;
    let half_denominator = rounding_half_sum(a, i32::MAX);
    let one_f2 = 1i32 << 29;
    let mut x = C48_17.wrapping_add(srdhm(half_denominator, CNEG32_17));
    for _ in 0..3 {
        let hdx = srdhm(half_denominator, x);
        let one_minus = one_f2.wrapping_sub(hdx);
        x = x.wrapping_add(sat_rmul_pot(srdhm(x, one_minus), 2));
    }
    sat_rmul_pot(x, 1)
}

/// TFLite's `GetReciprocal(x, x_integer_digits)`: the reciprocal and the bits over unit.
pub fn get_reciprocal(x: i32, integer_digits: i32) -> (i32, i32) {
    let headroom_plus_one = (x as u32).leading_zeros() as i32;
    let num_bits_over_unit = integer_digits - headroom_plus_one;
    let shifted = ((x as u32).wrapping_shl(headroom_plus_one as u32) as i32).wrapping_sub(i32::MIN);
    (one_over_one_plus_x(shifted), num_bits_over_unit)
}

/// `GetInvSqrtQuantizedMultiplierExp(x, reverse_shift = −1)` (`internal/common.h`): 1/√x
/// as a multiplier and a shift for [`mbqm`], by five Newton–Raphson steps in gemmlowp's Q3.28
/// fixed point. `x ≤ 1` gives `(i32::MAX, 0)`, as the reference does.
pub fn inv_sqrt_multiplier(x: i32) -> (i32, i32) {
    if x <= 1 {
        return (i32::MAX, 0);
    }
    let mut input = x;
    let mut shift = 11;
    while input >= 1 << 29 {
        input /= 4;
        shift += 1;
    }
    let max_left_shift_bits = (input as u32).leading_zeros() as i32 - 1;
    let pairs = max_left_shift_bits / 2 - 1;
    shift -= pairs;
    input <<= 2 * pairs;
    // Q3.28 values: x/2 and 1.5; products of two are Q6.25, of three Q9.22.
    let half_input = rdbpot(input >> 1, 1);
    let three_halves = (1 << 28) + (1 << 27);
    let mut r = 1 << 28;
    for _ in 0..5 {
        let r3 = sat_rmul_pot(srdhm(srdhm(r, r), r), 6);
        r = sat_rmul_pot(srdhm(three_halves, r).wrapping_sub(srdhm(half_input, r3)), 3);
    }
    // · √2/2 in Q0.31.
    let mut m = srdhm(r, 1_518_500_250);
    if shift < 0 {
        m <<= -shift;
        shift = 0;
    }
    (m, -shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantize_multiplier_matches_tflite() {
        assert_eq!(quantize_multiplier(1.0), (1 << 30, 1));
        assert_eq!(quantize_multiplier(0.5), (1 << 30, 0));
        assert_eq!(quantize_multiplier(0.0), (0, 0));
        // 0.75 = 0.75 · 2^0.
        assert_eq!(quantize_multiplier(0.75), (1_610_612_736, 0));
        // Rounds up to 2^31: halves and bumps the shift.
        assert_eq!(quantize_multiplier(1.0 - 1e-12), (1 << 30, 1));
        // Below 2^-32: flushed to zero.
        assert_eq!(quantize_multiplier(1e-12), (0, 0));
    }

    #[test]
    fn rounding_primitives() {
        // Ties away from zero.
        assert_eq!(rdbpot(5, 1), 3);
        assert_eq!(rdbpot(-5, 1), -3);
        assert_eq!(rdbpot(4, 1), 2);
        assert_eq!(rdbpot(-6, 2), -2);
        assert_eq!(srdhm(i32::MIN, i32::MIN), i32::MAX);
        assert_eq!(srdhm(1 << 30, 1 << 30), 1 << 29);
        // x · 0.5 through the multiplier of 1.0 is exact.
        let (q, s) = quantize_multiplier(1.0);
        for x in [-1000, -3, 0, 7, 123_456] {
            assert_eq!(mbqm(x, q, s), x);
        }
    }

    #[test]
    fn the_int64_multiply_rounds_half_up_with_a_16_bit_multiplier() {
        // 0.25 as (2^30, −1): ±1.5 rounds up (to 2 and −1), where the int32 form's
        // final rounding shift rounds away from zero (2 and −2).
        let (q, s) = quantize_multiplier(0.25);
        assert_eq!((q, s), (1 << 30, -1));
        assert_eq!(mbqm64(6, q, s), 2);
        assert_eq!(mbqm64(-6, q, s), -1);
        assert_eq!(mbqm(6, q, s), 2);
        assert_eq!(mbqm(-6, q, s), -2);
        // The multiplier keeps 16 bits: 0.3 becomes 19661 / 2^16, so 10^6 · 0.3 reads
        // 300_003, not 300_000.
        let (q, s) = quantize_multiplier(0.3);
        assert_eq!(mbqm64(1_000_000, q, s), 300_003);
        assert_eq!(mbqm(1_000_000, q, s), 300_000);
        // Accumulators beyond int32 (int16 inputs, int64 biases) stay exact.
        assert_eq!(mbqm64(1i64 << 40, 1 << 30, -20), 1 << 19);
    }

    #[test]
    fn gemmlowp_exp_and_reciprocal_match_the_reference_emulation() {
        // Values of the numpy emulation of gemmlowp that was checked against LiteRT's
        // reference softmax (`exp_on_negative_values`, `one_over_one_plus_x_for_x_in_0_1`,
        // `GetReciprocal`); inputs are Q5.26 (exp) and Q0.31 (reciprocal).
        assert_eq!(exp_on_negative_values_5(0), i32::MAX);
        for (a, e) in [
            (-(1 << 26), 790_015_308),
            (-(1 << 25), 1_302_515_042),
            (-3 * (1 << 24), 1_014_399_735),
            (-12_345_678, 1_786_631_188),
            (-(5 << 26), 14_469_635),
        ] {
            assert_eq!(exp_on_negative_values_5(a), e, "exp of {a}");
            // Within gemmlowp's precision of the true value.
            assert!((f64::from(e) / 2f64.powi(31) - (f64::from(a) / 2f64.powi(26)).exp()).abs() < 2e-6);
        }
        assert_eq!(one_over_one_plus_x(1 << 30), 1_431_655_762);
        assert_eq!(one_over_one_plus_x(0), i32::MAX);
        assert_eq!(one_over_one_plus_x(123_456_789), 2_030_738_432);
        assert_eq!(get_reciprocal(3 << 19, 12), (1_431_655_762, 1));
    }

    #[test]
    fn the_inverse_square_root_is_within_gemmlowp_precision() {
        assert_eq!(inv_sqrt_multiplier(1), (i32::MAX, 0));
        assert_eq!(inv_sqrt_multiplier(0), (i32::MAX, 0));
        for x in [2, 3, 4, 17, 255, 1000, 65_535, 1 << 20, (1 << 29) + 7, i32::MAX] {
            let (m, s) = inv_sqrt_multiplier(x);
            let got = f64::from(m) / 2f64.powi(31) * 2f64.powi(s);
            let want = 1.0 / f64::from(x).sqrt();
            assert!((got / want - 1.0).abs() < 1e-5, "1/sqrt({x}): {got} vs {want}");
        }
    }
}
