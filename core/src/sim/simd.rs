//! Run-time CPU dispatch for the hand-written loops. The crate is built for baseline x86-64
//! (SSE2); hot loops are compiled a second time with AVX2 and FMA and picked when the CPU
//! has them, so one binary runs everywhere and uses the wide units where they exist.

use std::sync::OnceLock;

/// Whether this CPU has AVX2 and FMA (checked once).
pub fn avx2_fma() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    })
}

/// Whether this CPU has AVX-512 (F, with AVX2 and FMA; checked once). `NPU_NO_AVX512=1`
/// turns the 512-bit builds off (to compare them with the AVX2 ones).
pub fn avx512() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            avx2_fma() && std::arch::is_x86_feature_detected!("avx512f") && std::env::var_os("NPU_NO_AVX512").is_none()
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    })
}

/// `acc + a * b`, fused (one rounding) when `FMA`; the baseline build keeps the separate
/// multiply and add, since a fused op without the instruction is a slow library call.
#[inline(always)]
pub fn madd<const FMA: bool>(acc: f32, a: f32, b: f32) -> f32 {
    if FMA { a.mul_add(b, acc) } else { acc + a * b }
}

/// Defines `$name(args)` that runs `$body::<true>` compiled with AVX-512 when the CPU has it,
/// else with AVX2+FMA when it has them, and `$body::<false>` otherwise. `$body` must be
/// `#[inline(always)]` and generic over `const FMA: bool`.
#[macro_export]
macro_rules! simd_dispatch {
    ($(#[$m:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? => $body:ident) => {
        $(#[$m])*
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx2,fma")]
                fn wider($($arg: $ty),*) $(-> $ret)? {
                    $body::<true>($($arg),*)
                }
                #[target_feature(enable = "avx2,fma")]
                fn wide($($arg: $ty),*) $(-> $ret)? {
                    $body::<true>($($arg),*)
                }
                if $crate::sim::simd::avx512() {
                    // SAFETY: the CPU has AVX-512F, AVX2 and FMA (checked at run time).
                    return unsafe { wider($($arg),*) };
                }
                if $crate::sim::simd::avx2_fma() {
                    // SAFETY: the CPU has AVX2 and FMA (checked at run time just above).
                    return unsafe { wide($($arg),*) };
                }
            }
            $body::<false>($($arg),*)
        }
    };
}

/// `e^x` in float32 without a library call (Cephes' `expf`: range reduction by ln 2 and a
/// degree-6 polynomial, within 2 ulp), so loops over it vectorize. Saturates to 0 below
/// −87.3 (no subnormals) and to `f32::MAX`-scale above 88.7; NaN stays NaN.
#[inline(always)]
pub fn exp_approx(x: f32) -> f32 {
    exp_approx_by::<false>(x)
}

/// [`exp_approx`] with its polynomial in fused multiply-adds under `FMA`: a third fewer
/// instructions, still within 2 ulp of `exp`, not bit-identical to the unfused form.
#[inline(always)]
pub fn exp_approx_by<const FMA: bool>(x: f32) -> f32 {
    const LO: f32 = -87.336_55;
    const HI: f32 = 88.722_83;
    // 1.5·2²³: adding and subtracting it rounds to the nearest integer.
    const ROUND: f32 = 12_582_912.0;
    let under = x < LO;
    let x = if x > HI { HI } else { x };
    let x = if x < LO { LO } else { x };
    let n = madd::<FMA>(ROUND, x, std::f32::consts::LOG2_E) - ROUND;
    let r = madd::<FMA>(madd::<FMA>(x, n, -0.693_359_4), n, 2.121_944_4e-4);
    let mut p = 1.987_569_1e-4_f32;
    p = madd::<FMA>(1.398_199_9e-3, p, r);
    p = madd::<FMA>(8.333_452e-3, p, r);
    p = madd::<FMA>(4.166_579_6e-2, p, r);
    p = madd::<FMA>(1.666_666_5e-1, p, r);
    p = madd::<FMA>(0.5, p, r);
    let y = madd::<FMA>(r, p * r, r) + 1.0;
    // 2ⁿ built from its exponent bits (n is in −126..=128; 128 overflows to +inf as expf).
    // n + 127 is read off the mantissa of n + 127 + 1.5·2²³ rather than by a float-to-int
    // cast, whose saturation would not vectorize.
    let biased = (n + (127.0 + ROUND)).to_bits().wrapping_sub(ROUND.to_bits());
    let scale = f32::from_bits(biased << 23);
    if under { 0.0 } else { y * scale }
}

#[cfg(test)]
mod tests {
    use super::{exp_approx, exp_approx_by};

    #[test]
    fn exp_approx_is_within_two_ulp_of_exp() {
        for (fused, exp) in [(false, exp_approx as fn(f32) -> f32), (true, exp_approx_by::<true>)] {
            let mut worst = 0f64;
            let mut x = -87.0f32;
            while x < 88.0 {
                let (got, want) = (f64::from(exp(x)), f64::from(x).exp());
                worst = worst.max((got - want).abs() / want);
                x += 0.001_37;
            }
            assert!(worst < 2.5e-7, "fused {fused}: worst relative error {worst:e}");
            assert_eq!(exp(-100.0), 0.0);
            assert_eq!(exp(0.0), 1.0);
            assert!(exp(89.0).is_infinite());
            assert!(exp(f32::NAN).is_nan());
        }
    }
}
