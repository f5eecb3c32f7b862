//! The compile stage on real models: every bundled target places every op of PP-OCR det,
//! cls and rec, YOLOX, Basic Pitch and Magika with a reason, the segments cover the
//! program, the performance model keeps its first principles (a layer is never faster
//! than its MACs at the peak rate or its bytes at the bandwidth; CPU segments are in the
//! total), the arena never overlaps two live tensors, and `docs/supported-ops.md` is the
//! document the rules generate.

use npu_core::compiler::{Options, Place, compile, memory};
use npu_core::progress::Silent;
use npu_core::quant::Quantizer;
use npu_core::quant::data::{Preprocess, source};
use npu_core::quant::legalize::{Program, legalize};
use npu_core::quant::observer::Calibration;
use npu_core::target::{Target, builtin_dir, load_dir, supported_ops_markdown};
use npu_tests::data_dir;
use std::collections::HashMap;

/// (name, model file, one calibration sample, preprocessing).
const MODELS: &[(&str, &str, &str, &str)] = &[
    (
        "cls",
        "models/ppocr_cls.onnx",
        "crops8",
        "size=48x192;color=bgr;scale=1/255;mean=0.5;std=0.5",
    ),
    ("det", "models/ppocr_det.onnx", "inputs/det_page.npy", ""),
    ("rec", "models/ppocr_rec.onnx", "inputs/rec_page.npy", ""),
    ("yolox", "models/yolox_ddddocr.onnx", "inputs/yolox_page.npy", ""),
    ("pitch", "models/basic_pitch.onnx", "inputs/pitch_house0.npy", ""),
    (
        "magika",
        "real/magika_standard_v3_3/model.onnx",
        "inputs/magika_0.npy",
        "",
    ),
];

fn program(file: &str, calib: &str, pre: &str, preset: &str) -> Program {
    let (m, _) = npu_core::import::load(&data_dir().join(file)).expect("loads (scripts/fetch_models.py)");
    let model = npu_core::passes::optimize(&m, &npu_core::passes::Options::default())
        .expect("optimizes")
        .model;
    let q = Quantizer::new(&model, 2).expect("quantizer");
    let src = source(data_dir().join(calib).to_str().expect("path")).expect("calibration data");
    let pre = Preprocess::parse(pre).expect("spec");
    let plan = q
        .calibrate(
            &mut src.samples(&model, &pre),
            src.len(),
            preset,
            Calibration::MinMax,
            &Silent,
        )
        .expect("calibrates");
    legalize(&model, &plan, &HashMap::new()).expect("legalizes")
}

fn targets() -> Vec<Target> {
    load_dir(&builtin_dir()).expect("bundled targets")
}

#[test]
fn supported_ops_doc_is_current() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/supported-ops.md");
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    let want = supported_ops_markdown(&targets());
    assert!(
        have == want,
        "docs/supported-ops.md is stale: run `cargo run --release -p npu-studio -- targets --markdown > docs/supported-ops.md`"
    );
}

#[test]
fn every_target_compiles_the_real_models() {
    let targets = targets();
    assert!(targets.len() >= 3);
    for (name, file, calib, pre) in MODELS {
        let p = program(file, calib, pre, "w8a8");
        for t in &targets {
            let c = compile(&p, t, &Options::default());
            let tot = &c.totals;
            println!("{name}: {}", c.summary());
            assert_eq!(tot.ops_total, p.ops.len());
            assert_eq!(c.placements.len(), p.ops.len());
            assert!(tot.ops_on_npu > 0, "{name} on {}: nothing on the NPU", t.id);
            assert!(c.placements.iter().all(|pl| !pl.reason.is_empty()));
            // Segments tile the program in order, alternating sides.
            assert_eq!(c.segments.first().map(|s| s.first), Some(0));
            assert_eq!(c.segments.last().map(|s| s.last), Some(p.ops.len() - 1));
            for w in c.segments.windows(2) {
                assert_eq!(w[0].last + 1, w[1].first);
                assert_ne!(w[0].place, w[1].place);
            }
            for (i, pl) in c.placements.iter().enumerate() {
                let s = &c.segments[pl.segment];
                assert!(s.first <= i && i <= s.last && s.place == pl.place);
            }
            // The total is NPU time + CPU time + hand-offs; CPU time is never left out.
            let sum = tot.npu_ms + tot.cpu_ms + tot.handoff_ms;
            assert!((tot.latency_ms - sum).abs() <= 1e-9 * sum.max(1.0));
            let cpu_layers: f64 = c
                .layers
                .iter()
                .filter(|l| l.place == Place::Cpu)
                .map(|l| l.latency_us)
                .sum();
            assert!((tot.cpu_ms * 1e3 - cpu_layers).abs() <= 1e-6 * cpu_layers.max(1.0));
            if tot.ops_on_npu < tot.ops_total {
                assert!(tot.cpu_segments > 0 && tot.handoff_ms > 0.0);
            }
            // First principles, layer by layer.
            for l in c.layers.iter().filter(|l| l.place == Place::Npu) {
                let rate = if l.precision == "int16" {
                    t.compute.macs_per_cycle.int16.expect("int16 rate")
                } else {
                    t.compute.macs_per_cycle.int8
                };
                assert!(
                    l.cycles + 1e-6 >= l.macs as f64 / rate,
                    "{name} {}: faster than its MACs",
                    l.node
                );
                assert!(
                    l.cycles + 1e-6 >= l.offchip_bytes as f64 / t.memory.offchip_bytes_per_cycle,
                    "{name} {}: faster than its off-chip bytes",
                    l.node
                );
                assert!(
                    l.cycles + 1e-6 >= l.sram_bytes as f64 / t.memory.sram_bytes_per_cycle,
                    "{name} {}: faster than its SRAM bytes",
                    l.node
                );
                assert!(l.mac_utilisation <= 1.0 + 1e-9);
            }
            assert!(tot.sram_peak_bytes <= tot.activation_bytes);
            check_arena(&c.memory, &format!("{name} on {}", t.id));
        }
    }
}

fn check_arena(m: &memory::MemoryPlan, what: &str) {
    let a = &m.arena;
    assert!(a.size >= m.peak_bytes, "{what}: arena smaller than the live peak");
    for (i, x) in m.ranges.iter().enumerate() {
        for (j, y) in m.ranges.iter().enumerate().skip(i + 1) {
            let live = x.first <= y.last && y.first <= x.last;
            let (ox, oy) = (a.offsets[i], a.offsets[j]);
            let apart = ox + x.bytes <= oy || oy + y.bytes <= ox;
            assert!(!live || apart, "{what}: {} and {} overlap", x.tensor, y.tensor);
        }
        assert!(a.offsets[i] + x.bytes <= a.size);
    }
}

#[test]
fn arena_never_overlaps_live_tensors_on_random_schedules() {
    // A small deterministic generator: random live ranges over random schedule lengths.
    let mut s: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = |n: u64| {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s % n
    };
    for case in 0..300 {
        let steps = 1 + next(40) as usize;
        let ranges: Vec<memory::LiveRange> = (0..=next(60))
            .map(|k| {
                let a = next(steps as u64) as usize;
                let b = next(steps as u64) as usize;
                memory::LiveRange {
                    tensor: format!("t{k}"),
                    bytes: 1 + next(5000),
                    first: a.min(b),
                    last: a.max(b),
                }
            })
            .collect();
        let mut occupancy = vec![0u64; steps];
        for r in &ranges {
            for o in &mut occupancy[r.first..=r.last] {
                *o += r.bytes;
            }
        }
        let m = memory::MemoryPlan {
            range_of: Vec::new(),
            arena: memory::pack(&ranges),
            spilled: Vec::new(),
            sram_arena_bytes: 0,
            peak_bytes: occupancy.iter().copied().max().unwrap_or(0),
            peak_at: 0,
            activation_bytes: ranges.iter().map(|r| r.bytes).sum(),
            occupancy,
            ranges,
        };
        check_arena(&m, &format!("case {case}"));
    }
}

#[test]
fn placement_follows_precision_rules_and_user_overrides() {
    let (_, file, calib, pre) = MODELS[0];
    let p = program(file, calib, pre, "w8a8");
    let u55 = targets().into_iter().find(|t| t.id == "ethos-u55-128").expect("u55");
    let c = compile(&p, &u55, &Options::default());
    // PP-OCR cls: every op has an int8 form the U55 runs.
    let cpu: Vec<String> = c
        .placements
        .iter()
        .filter(|x| x.place == Place::Cpu)
        .map(|x| format!("{} {}: {}", x.node, x.op, x.reason))
        .collect();
    assert!(cpu.is_empty(), "{cpu:?}");
    // A forced node goes to the CPU with that reason, and splits the program.
    let conv = c
        .placements
        .iter()
        .find(|x| x.op == "CONV_2D" && x.segment == 0)
        .expect("a conv");
    let node = conv.node.clone();
    let opts = Options {
        force_cpu: [node.clone()].into_iter().collect(),
    };
    let forced = compile(&p, &u55, &opts);
    let f = forced.placements.iter().find(|x| x.node == node).expect("node");
    assert_eq!(
        (f.place, f.reason.as_str()),
        (Place::Cpu, "forced to the CPU by the user")
    );
    assert!(forced.segments.len() >= 2);
    assert!(
        forced.totals.latency_ms > c.totals.latency_ms,
        "the CPU conv and hand-offs cost time"
    );
    // A target whose convolutions take int8 only sends a w8a16 plan's convolutions to the
    // CPU, saying why.
    let p16 = program(file, calib, pre, "w8a16");
    let mut int8_convs = u55.clone();
    for o in int8_convs.ops.iter_mut().filter(|o| o.op == "CONV_2D") {
        o.precisions = vec![npu_core::target::Precision::Int8];
    }
    let c8 = compile(&p16, &int8_convs, &Options::default());
    let convs: Vec<_> = c8.placements.iter().filter(|x| x.op == "CONV_2D").collect();
    assert!(!convs.is_empty());
    for x in convs {
        assert_eq!(x.place, Place::Cpu);
        assert_eq!(x.reason, "CONV_2D runs at int8 on ethos-u55-128; this op is int16");
    }
    let c16 = compile(&p16, &u55, &Options::default());
    // A large conv: cycles at least MACs at the int8 rate, and int16 is slower.
    let big = c
        .layers
        .iter()
        .filter(|l| l.op == "CONV_2D")
        .max_by_key(|l| l.macs)
        .expect("conv");
    assert!(big.cycles >= big.macs as f64 / 128.0);
    let big16 = c16
        .layers
        .iter()
        .find(|l| l.node == big.node && l.op == "CONV_2D")
        .expect("same conv");
    assert!(big16.cycles > big.cycles, "int16 runs at half the MAC rate");
}
