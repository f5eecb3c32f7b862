//! Mutation fuzzing of the binary loader and the emulator, on binaries compiled from the
//! bundled sample model and PP-OCR cls:
//!
//! - 10,000 binaries with bits flipped, bytes replaced, inserted or copied, and the file
//!   truncated or extended: every one is refused with a message (no panic, no hang).
//! - Mutations inside the sections with every checksum recomputed ([`binary::reseal`]), so
//!   the mutation reaches the decoder, the consistency checks and the kernels: each is a
//!   clear error or an emulation that finishes; never a panic or a hang.
//!
//! `NPU_FUZZ_ITERS` sets both counts (10,000 and 2,000 by default); `NPU_FUZZ_SEED` the seed.
//! A panicking input is saved to the temp directory.

use npu_core::compiler::binary::{self, ENTRY_BYTES, HEADER_BYTES};
use npu_core::compiler::{Options, compile};
use npu_core::emulator::Emulator;
use npu_core::progress::Silent;
use npu_core::quant::Quantizer;
use npu_core::quant::data::{Preprocess, source};
use npu_core::quant::legalize::legalize;
use npu_core::quant::observer::Calibration;
use npu_core::sim::integer::Input;
use npu_core::target::{builtin_dir, load_dir};
use npu_tests::Rng;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// A binary of `model` calibrated on `calib` for the first bundled target.
fn binary_of(model: &std::path::Path, calib: &std::path::Path, pre: &str) -> Vec<u8> {
    let (m, _) = npu_core::import::load(model).expect("loads");
    let m = npu_core::passes::optimize(&m, &npu_core::passes::Options::default())
        .expect("optimizes")
        .model;
    let q = Quantizer::new(&m, 2).expect("quantizer");
    let src = source(calib.to_str().expect("path")).expect("calibration data");
    let pre = Preprocess::parse(pre).expect("spec");
    let plan = q
        .calibrate(
            &mut src.samples(&m, &pre),
            src.len(),
            "w8a8",
            Calibration::MinMax,
            &Silent,
        )
        .expect("calibrates");
    let p = legalize(&m, &plan, &HashMap::new()).expect("legalizes");
    let targets = load_dir(&builtin_dir()).expect("targets");
    let t = targets.iter().find(|t| t.id == "ethos-u55-128").expect("U55");
    binary::write(&p, &compile(&p, t, &Options::default()))
}

fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    vec![
        (
            "sample",
            binary_of(
                &root.join("assets/models/sample_cnn.onnx"),
                &root.join("assets/calibration/sample_cnn"),
                "",
            ),
        ),
        (
            "cls",
            binary_of(
                &npu_tests::data_dir().join("models/ppocr_cls.onnx"),
                &npu_tests::data_dir().join("crops8"),
                "size=48x192;color=bgr;scale=1/255;mean=0.5;std=0.5",
            ),
        ),
    ]
}

/// One to four edits of `b[lo..hi]` (bit flip, random or boundary byte, a copied chunk)
/// and, when `resize`, one file in four truncated, extended or with a byte inserted.
fn mutate(rng: &mut Rng, b: &mut Vec<u8>, lo: usize, hi: usize, resize: bool) {
    for _ in 0..=rng.below(4) {
        let span = hi.min(b.len()).saturating_sub(lo).max(1);
        let i = (lo + rng.below(span)).min(b.len().saturating_sub(1));
        match rng.below(4) {
            0 => b[i] ^= 1 << rng.below(8),
            1 => b[i] = rng.next_u64() as u8,
            2 => b[i] = [0u8, 1, 0x7f, 0x80, 0xff][rng.below(5)],
            _ => {
                let j = lo + rng.below(span);
                let len = rng.below(16).min(b.len() - i.max(j));
                let chunk = b[i..i + len].to_vec();
                b[j..j + len].copy_from_slice(&chunk);
            }
        }
    }
    // One file in four also changes size.
    if resize && rng.below(4) == 0 {
        match rng.below(3) {
            0 => b.truncate(rng.below(b.len())),
            1 => b.extend((0..=rng.below(64)).map(|_| rng.next_u64() as u8)),
            _ => {
                let i = rng.below(b.len());
                b.insert(i, rng.next_u64() as u8);
            }
        }
    }
}

fn iters(default: usize) -> usize {
    std::env::var("NPU_FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn rng() -> Rng {
    let seed = std::env::var("NPU_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x0b1a_5eed_2026_u64);
    Rng(seed | 1)
}

/// Zero-valued float inputs of the binary's input shapes.
fn zeros(e: &Emulator) -> Option<Vec<Input>> {
    e.binary
        .inputs
        .iter()
        .map(|&t| {
            let n: usize = e.binary.tensors[t].tensor.shape.iter().product();
            (n <= 1 << 22).then(|| Input::Float(vec![0.0; n]))
        })
        .collect()
}

/// Loads (and when it loads, runs) `b`; panics are caught and reported with the input saved.
fn exercise(b: &[u8], what: &str, i: usize) -> (Result<(), String>, Duration) {
    let t0 = Instant::now();
    let r = std::panic::catch_unwind(|| match Emulator::load(b) {
        Err(e) => Err(e.to_string()),
        Ok(e) => match zeros(&e) {
            Some(x) => e.run(x).map(|_| ()).map_err(|e| format!("runs: {e}")),
            None => Ok(()),
        },
    });
    let took = t0.elapsed();
    if let Ok(r) = r {
        return (r, took);
    }
    let path = std::env::temp_dir().join(format!("npu-fuzz-{what}-{i}.npub"));
    let _ = std::fs::write(&path, b);
    panic!("{what} mutation {i} panicked; input saved to {}", path.display());
}

#[test]
fn every_mutated_binary_is_refused_with_a_message() {
    let seeds = seeds();
    for (name, b) in &seeds {
        let e = Emulator::load(b).unwrap_or_else(|e| panic!("{name}: {e}"));
        let x = zeros(&e).expect("inputs");
        e.run(x).unwrap_or_else(|e| panic!("{name} runs: {e}"));
    }
    let n = iters(10_000);
    let mut rng = rng();
    let t0 = Instant::now();
    let (mut refused, mut unchanged, mut slowest) = (0, 0, Duration::ZERO);
    let mut kinds: HashMap<String, usize> = HashMap::new();
    // Until `n` binaries that differ from their seed have been tried.
    let mut i = 0;
    while refused < n {
        i += 1;
        let (name, seed) = &seeds[i % seeds.len()];
        let mut b = seed.clone();
        mutate(&mut rng, &mut b, 0, seed.len(), true);
        if &b == seed {
            unchanged += 1;
            continue;
        }
        let (r, took) = exercise(&b, name, i);
        slowest = slowest.max(took);
        assert!(took < Duration::from_secs(10), "{name} mutation {i} took {took:?}");
        let msg = r.expect_err("a mutated binary is refused");
        assert!(msg.len() > 10, "{name} mutation {i}: message {msg:?}");
        let kind = msg.split(':').next().unwrap_or("").chars().take(40).collect::<String>();
        *kinds.entry(kind).or_default() += 1;
        refused += 1;
    }
    let mut kinds: Vec<_> = kinds.into_iter().collect();
    kinds.sort_by_key(|k| std::cmp::Reverse(k.1));
    println!(
        "{n} mutated binaries in {:.1} s: {refused} refused with a message (and {unchanged} mutations that left the bytes as they were, not counted); slowest {:.1} ms; no panic",
        t0.elapsed().as_secs_f64(),
        slowest.as_secs_f64() * 1e3
    );
    for (k, c) in kinds.iter().take(8) {
        println!("  {c:5}  {k}");
    }
}

#[test]
fn mutations_behind_valid_checksums_never_panic() {
    let seeds = seeds();
    let n = iters(2_000);
    let mut rng = rng();
    let t0 = Instant::now();
    let (mut refused, mut ran, mut failed, mut slowest) = (0, 0, 0, Duration::ZERO);
    for i in 0..n {
        let (name, seed) = &seeds[i % seeds.len()];
        let mut b = seed.clone();
        // Inside the sections, behind the table; every checksum then recomputed.
        let start = HEADER_BYTES + ENTRY_BYTES * binary::SECTIONS.len();
        mutate(&mut rng, &mut b, start, seed.len(), false);
        binary::reseal(&mut b);
        let (r, took) = exercise(&b, name, i);
        slowest = slowest.max(took);
        assert!(took < Duration::from_secs(10), "{name} mutation {i} took {took:?}");
        match r {
            Ok(()) => ran += 1,
            Err(m) if m.starts_with("runs: ") => failed += 1,
            Err(m) => {
                assert!(m.len() > 10, "{name} mutation {i}: message {m:?}");
                refused += 1;
            }
        }
    }
    println!(
        "{n} resealed mutations in {:.1} s: {refused} refused by the loader's checks, {failed} stopped with an error naming the step, {ran} emulated to the end; slowest {:.1} ms; no panic",
        t0.elapsed().as_secs_f64(),
        slowest.as_secs_f64() * 1e3
    );
    assert!(
        refused > 0 && ran > 0,
        "the mutations reach both the checks and the kernels"
    );
}
