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

/// `acc + a * b`, fused (one rounding) when `FMA`; the baseline build keeps the separate
/// multiply and add, since a fused op without the instruction is a slow library call.
#[inline(always)]
pub fn madd<const FMA: bool>(acc: f32, a: f32, b: f32) -> f32 {
    if FMA { a.mul_add(b, acc) } else { acc + a * b }
}

/// Defines `$name(args)` that runs `$body::<true>` compiled with AVX2+FMA when the CPU has
/// them and `$body::<false>` otherwise. `$body` must be `#[inline(always)]` and generic over
/// `const FMA: bool`.
#[macro_export]
macro_rules! simd_dispatch {
    ($(#[$m:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? => $body:ident) => {
        $(#[$m])*
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2,fma")]
                fn wide($($arg: $ty),*) $(-> $ret)? {
                    $body::<true>($($arg),*)
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
