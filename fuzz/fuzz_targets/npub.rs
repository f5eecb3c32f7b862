//! The binary loader and the emulator on arbitrary bytes: `Emulator::load` must refuse
//! anything it cannot run with an error, and what it accepts must run to the end or stop
//! with an error, never a panic. Seeds: `fuzz/seeds.sh` writes binaries of the bundled
//! sample model and PP-OCR cls into `fuzz/corpus/npub`.
//!
//! Most random bytes fail a checksum; to reach the decoder and the kernels, every input is
//! also tried with its checksums recomputed (`binary::reseal`).

#![no_main]

use libfuzzer_sys::fuzz_target;
use npu_core::compiler::binary;
use npu_core::emulator::Emulator;
use npu_core::sim::integer::Input;

fn exercise(bytes: &[u8]) {
    let Ok(e) = Emulator::load(bytes) else { return };
    let inputs: Option<Vec<Input>> = e
        .binary
        .inputs
        .iter()
        .map(|&t| {
            let n: usize = e.binary.tensors[t].tensor.shape.iter().product();
            (n <= 1 << 20).then(|| Input::Float(vec![0.0; n]))
        })
        .collect();
    if let Some(x) = inputs {
        let _ = e.run(x);
    }
}

fuzz_target!(|data: &[u8]| {
    exercise(data);
    let mut resealed = data.to_vec();
    binary::reseal(&mut resealed);
    exercise(&resealed);
});
