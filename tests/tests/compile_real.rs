//! The compile stage on real models: every bundled target places every op of PP-OCR det,
//! cls and rec, YOLOX, Basic Pitch and Magika with a reason, the segments cover the
//! program, the performance model keeps its first principles (a layer is never faster
//! than its MACs at the peak rate or its bytes at the bandwidth; CPU segments are in the
//! total), the arena never overlaps two live tensors, and `docs/supported-ops.md` is the
//! document the rules generate.

use npu_core::compiler::binary::{self, BinaryError, Location, Trace};
use npu_core::compiler::lower::Step;
use npu_core::compiler::{Compiled, Options, Place, compile, memory};
use npu_core::program::Program;
use npu_core::progress::Silent;
use npu_core::quant::data::{Preprocess, source};
use npu_core::quant::legalize::legalize;
use npu_core::quant::observer::Calibration;
use npu_core::quant::{QuantPlan, Quantizer};
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
    // nudenet's YOLOv8n (ultralytics export): its Splits become one integer Slice per
    // output, the DFL's Softmax over axis 1 a Transpose, Softmax, Transpose.
    ("yolov8n", "models/yolov8n_nudenet.onnx", "inputs/yolov8_page.npy", ""),
];

/// The optimized model and a MinMax plan calibrated on `calib`.
fn calibrated(file: &str, calib: &str, pre: &str, preset: &str) -> (npu_core::ir::Model, QuantPlan) {
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
    (model, plan)
}

fn program(file: &str, calib: &str, pre: &str, preset: &str) -> Program {
    let (model, plan) = calibrated(file, calib, pre, preset);
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
            // Every op of these models has an integer form; a fallback node would run on the
            // CPU, saying why.
            let fallbacks = p.fallbacks();
            assert!(fallbacks.is_empty(), "{name}: {fallbacks:?}");
            for (node, op, _) in &fallbacks {
                let pl = c.placements.iter().find(|pl| &pl.node == node).expect("placed");
                assert!(
                    pl.place == Place::Cpu
                        && pl.reason.starts_with(op.as_str())
                        && pl.reason.contains("runs in float on the host"),
                    "{name} on {}: {node} ({op}): {}",
                    t.id,
                    pl.reason
                );
            }
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
            check_binary(&p, &c, &format!("{name} on {}", t.id));
        }
    }
}

/// The binary decodes to the program it was made from: every tensor (shape, grid,
/// constant codes), every command (op, fused table, multipliers, tiles), every host op, the
/// schedule in program order, and a trace that names each graph node once.
fn check_binary(p: &Program, c: &Compiled, what: &str) {
    let bytes = binary::write(p, c);
    let b = binary::read(&bytes).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(b.target, c.target, "{what}");
    assert!(c.graph.starts_with(&b.graph), "{what}");
    assert_eq!(b.tensors.len(), p.tensors.len(), "{what}");
    for (bt, t) in b.tensors.iter().zip(&p.tensors) {
        assert_eq!(&bt.tensor, t, "{what}: tensor {}", t.name);
        let arena = match bt.location {
            Location::Sram => b.sram_arena_bytes,
            Location::Offchip => b.offchip_arena_bytes,
            _ => continue,
        };
        assert!(bt.offset + bt.bytes <= arena, "{what}: {} outside its arena", t.name);
    }
    assert_eq!(b.commands, binary::commands_of(p, &c.lowered), "{what}");
    assert_eq!(b.inputs, p.inputs);
    assert_eq!(b.outputs, p.outputs);
    // Host ops and commands in program order, each program op once.
    let mut seen = vec![false; p.ops.len()];
    let mut last = None;
    for s in &b.steps {
        let ops: Vec<usize> = match *s {
            Step::Npu(k) => std::iter::once(c.lowered.commands[k].op)
                .chain(c.lowered.commands[k].fused)
                .collect(),
            Step::Host(h) => {
                let i = p.ops.iter().position(|o| *o == b.host[h]).expect("a program op");
                vec![i]
            }
        };
        for i in ops {
            assert!(!seen[i], "{what}: op {i} twice");
            seen[i] = true;
        }
        let first = match *s {
            Step::Npu(k) => c.lowered.commands[k].op,
            Step::Host(h) => p.ops.iter().position(|o| *o == b.host[h]).unwrap_or(0),
        };
        assert!(last < Some(first), "{what}: steps out of program order");
        last = Some(first);
    }
    assert_eq!(b.trace.len(), p.ops.len(), "{what}");
    for (i, (node, t)) in b.trace.iter().enumerate() {
        assert_eq!(node, &p.ops[i].node);
        assert_eq!(seen[i], *t != Trace::View, "{what}: {node}");
        if let Trace::Command(k) | Trace::Fused(k) = t {
            assert!(b.command_nodes(*k).contains(&node.as_str()));
        }
    }
    let steps: usize = b.segments.iter().map(|s| s.2).sum();
    assert_eq!(steps, b.steps.len());
}

fn check_arena(m: &memory::MemoryPlan, what: &str) {
    assert!(m.arena.size >= m.peak_bytes, "{what}: arena smaller than the live peak");
    check_packing(m, &m.arena, |_| true, what);
    // After spilling: the SRAM arena holds the on-chip buffers, the off-chip arena the
    // others, and neither overlaps two live ones.
    if !m.spilled_range.is_empty() {
        check_packing(m, &m.sram, |r| !m.is_spilled(r), &format!("{what} (SRAM)"));
        check_packing(m, &m.offchip, |r| m.is_spilled(r), &format!("{what} (off-chip)"));
    }
}

fn check_packing(m: &memory::MemoryPlan, a: &memory::Arena, member: impl Fn(usize) -> bool, what: &str) {
    for (i, x) in m.ranges.iter().enumerate().filter(|(i, _)| member(*i)) {
        for (j, y) in m.ranges.iter().enumerate().skip(i + 1).filter(|(j, _)| member(*j)) {
            let live = x.first <= y.last && y.first <= x.last;
            let (ox, oy) = (a.offsets[i], a.offsets[j]);
            let apart = ox + x.bytes <= oy || oy + y.bytes <= ox;
            assert!(!live || apart, "{what}: {} and {} overlap", x.tensor, y.tensor);
        }
        assert!(a.offsets[i] + x.bytes <= a.size, "{what}: {} past the end", x.tensor);
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
        let mut m = memory::MemoryPlan {
            range_of: Vec::new(),
            arena: memory::pack(&ranges),
            spilled: Vec::new(),
            sram_arena_bytes: 0,
            spilled_range: Vec::new(),
            sram: memory::Arena::default(),
            offchip: memory::Arena::default(),
            peak_bytes: occupancy.iter().copied().max().unwrap_or(0),
            peak_at: 0,
            activation_bytes: ranges.iter().map(|r| r.bytes).sum(),
            occupancy,
            ranges,
        };
        check_arena(&m, &format!("case {case}"));
        // Spill into a random SRAM smaller than the arena.
        let sram = next(m.arena.size + 1);
        m.place(sram);
        assert!(
            m.sram_arena_bytes <= sram || m.spilled_range.iter().all(|&s| s),
            "case {case}"
        );
        check_arena(&m, &format!("case {case}, {sram} B of SRAM"));
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

#[test]
fn fused_tables_match_the_kernels_and_corrupt_binaries_are_refused() {
    let (_, file, calib, pre) = MODELS[0];
    let p = program(file, calib, pre, "w8a8");
    let t = targets().into_iter().find(|t| t.id == "ethos-u55-128").expect("U55");
    let c = compile(&p, &t, &Options::default());
    // Every fused table gives what the op's kernel gives on a real input, element by element.
    let x: ndarray::ArrayD<f32> = ndarray_npy::read_npy(data_dir().join("inputs/cls_page.npy")).expect("cls_page.npy");
    assert_eq!(x.shape(), p.tensors[p.inputs[0]].shape.as_slice());
    let input: Vec<f32> = x.iter().copied().collect();
    let run = npu_core::sim::integer::run(&p, vec![npu_core::sim::integer::Input::Float(input)]).expect("runs");
    let mut fused = 0;
    for k in c.lowered.commands.iter().filter(|k| k.fused.is_some()) {
        let mid = &run.values[p.ops[k.op].outputs[0]];
        let out = &run.values[k.output(&p)];
        let (Some(mid), Some(out)) = (mid, out) else {
            panic!("not computed")
        };
        for (m, o) in mid.iter().zip(out) {
            assert_eq!(k.lut[(m + 128) as usize], *o, "{}", p.ops[k.op].node);
        }
        fused += 1;
    }
    assert!(
        fused > 0,
        "cls has convolutions followed by HardSwish: some table must fuse"
    );
    // Corruption: a flipped byte anywhere is caught by a checksum or the header; a cut file
    // is too short; nothing panics.
    let bytes = binary::write(&p, &c);
    assert!(binary::read(&bytes).is_ok());
    let mut rng = npu_tests::Rng(0x9E37_79B9_7F4A_7C15);
    let mut rnd = move || rng.next_u64();
    for _ in 0..300 {
        let mut b = bytes.clone();
        let at = (rnd() % b.len() as u64) as usize;
        b[at] ^= 1 << (rnd() % 8);
        // Every byte is under a checksum (padding must be zero).
        let e = binary::read(&b).expect_err("a flipped bit is refused");
        assert!(!e.to_string().is_empty());
        let cut = (rnd() % b.len() as u64) as usize;
        assert!(binary::read(&bytes[..cut]).is_err());
    }
    assert_eq!(binary::read(b"GIF89a"), Err(BinaryError::Magic));
    let mut v2 = bytes.clone();
    v2[4] = 2;
    assert_eq!(binary::read(&v2), Err(BinaryError::Version(2, binary::VERSION_MINOR)));
    // Garbage behind valid checksums: each section's payload scrambled and re-summed is
    // an error naming the section, or (by chance) still a binary; never a panic.
    let table = |b: &[u8], k: usize| {
        let e = binary::HEADER_BYTES + k * binary::ENTRY_BYTES;
        let off = u64::from_le_bytes(b[e + 8..e + 16].try_into().expect("8")) as usize;
        let len = u32::from_le_bytes(b[e + 16..e + 20].try_into().expect("4")) as usize;
        (e, off, len)
    };
    for k in 0..binary::SECTIONS.len() {
        for _ in 0..40 {
            let mut b = bytes.clone();
            let (e, off, len) = table(&b, k);
            if len == 0 {
                continue;
            }
            for _ in 0..4 {
                let at = off + (rnd() % len as u64) as usize;
                b[at] = rnd() as u8;
            }
            let _ = e;
            binary::reseal(&mut b);
            let _ = binary::read(&b);
        }
    }
    // A section table entry whose offset and size overflow (found by the libFuzzer
    // target): a clear error, not an overflow.
    let mut b = bytes.clone();
    let (e, _, _) = table(&b, 0);
    b[e + 8..e + 16].copy_from_slice(&(u64::MAX - 1).to_le_bytes());
    binary::reseal(&mut b);
    let err = binary::read(&b).expect_err("refused").to_string();
    assert!(
        err.contains("STRS") && err.contains("past the end of the file"),
        "{err}"
    );
    // A changed section names it; a changed table entry names the header.
    let mut b = bytes.clone();
    let (e, off, _) = table(&b, 3);
    b[off] ^= 0xFF;
    assert!(matches!(binary::read(&b), Err(BinaryError::Checksum { name, .. }) if name == "CMDS"));
    let mut b = bytes.clone();
    b[e + 20] ^= 0xFF;
    assert!(matches!(binary::read(&b), Err(BinaryError::Checksum { name, .. }) if name == "header"));
}

#[test]
fn mixed_precision_weighed_by_latency_is_faster_on_the_npu() {
    use npu_core::quant::LayerPrecision;
    use npu_core::quant::amp::Cost;
    let (_, file, calib, pre) = MODELS[0];
    let (model, plan) = calibrated(file, calib, pre, "w8a8");
    let q = Quantizer::new(&model, 2).expect("quantizer");
    let src = source(data_dir().join(calib).to_str().expect("path")).expect("calibration data");
    let pre = Preprocess::parse(pre).expect("spec");
    let mut cached = q.cache(&mut src.samples(&model, &pre)).expect("cache");
    // What is weighed, not how it generalizes: two crops, too few for the search to hold
    // any back (on cls's two-value output, 2 held-back crops are 4 numbers, and no point of
    // the latency-weighed curve reaches the target on them; quantize_real tests the
    // held-back validation on rec).
    cached.samples.truncate(2);
    cached.reference.truncate(2);
    let u55 = targets().into_iter().find(|t| t.id == "ethos-u55-128").expect("U55");
    let estimate = |p: &npu_core::quant::QuantPlan| npu_core::pipeline::latency_estimate(&model, &u55, p);
    let cost = Cost::Latency {
        name: &u55.id,
        estimate: &estimate,
    };
    let base = q.output_sqnr(&plan, &cached).expect("sqnr").sqnr_db.expect("inexact");
    let target = base + 1.0;
    let (by_latency, fast) = q
        .mixed_precision_by(&plan, &cached, target, LayerPrecision::INT16, cost, &Silent)
        .expect("search");
    let (by_bytes, small) = q
        .mixed_precision(&plan, &cached, target, LayerPrecision::INT16, &Silent)
        .expect("search");
    for (a, b) in by_latency.curve.iter().zip(&by_bytes.curve) {
        println!(
            "{:>3} promoted: by latency {:?} dB (held back {:?}) {:?} µs; by bytes {:?} dB (held back {:?})",
            a.promoted, a.sqnr_db, a.held_db, a.latency_us, b.sqnr_db, b.held_db
        );
    }
    assert_eq!(by_latency.cost, "latency on ethos-u55-128");
    // Every point's latency is the compile of that point's plan.
    for (c, p) in by_latency.curve.iter().zip(&by_latency.plans) {
        let want = estimate(p).expect("integer").total_us;
        assert!((c.latency_us.expect("latency") - want).abs() < 1e-6, "{c:?}");
    }
    assert!(by_bytes.curve.iter().all(|c| c.latency_us.is_none()));
    assert_eq!((by_latency.held_back, by_bytes.held_back), (0, 0));
    let (kl, kb) = (by_latency.chosen.expect("reached"), by_bytes.chosen.expect("reached"));
    let (tl, tb) = (
        estimate(&fast).expect("integer").total_us,
        estimate(&small).expect("integer").total_us,
    );
    let reached = q.output_sqnr(&fast, &cached).expect("sqnr").sqnr_db.expect("inexact");
    println!(
        "cls from {base:.2} dB to {target:.2} dB on the U55: by latency {kl} layers, {reached:.2} dB, {tl:.0} µs; \
         by bytes {kb} layers, {tb:.0} µs"
    );
    assert!(reached >= target);
    assert!(tl <= tb, "the latency-weighed plan is slower: {tl} µs against {tb} µs");
}

#[test]
fn unknown_targets_other_graphs_and_unsupported_plans_are_clear_errors() {
    let e = npu_core::target::find("no-such-npu").expect_err("unknown").to_string();
    assert!(e.contains("no-such-npu") && e.contains("ethos-u55-128"), "{e}");
    let (_, file, calib, pre) = MODELS[0];
    let (model, plan) = calibrated(file, calib, pre, "w8a8");
    // A plan made for another graph.
    let mut other = plan.clone();
    other.graph = Some("0123456789abcdef".into());
    let e = legalize(&model, &other, &HashMap::new())
        .expect_err("another graph")
        .to_string();
    assert!(e.contains("another graph") && e.contains("0123456789abcdef"), "{e}");
    // A layer at a precision with no integer form (fp16) runs in the float fallback: the
    // program names it, its op and why, and the compile puts it on the CPU saying so.
    let mut fp16 = plan;
    let conv = model.graph.nodes.iter().find(|n| n.op == "Conv").expect("a conv");
    fp16.layers
        .insert(conv.name.clone(), npu_core::quant::LayerPrecision::FP16);
    let p = legalize(&model, &fp16, &HashMap::new()).expect("fp16 runs in the float fallback");
    let f = p.fallbacks();
    assert!(
        f.len() == 1 && f[0].0 == conv.name && f[0].1 == conv.op && f[0].2.contains("Fp16"),
        "{f:?}"
    );
    let c = compile(&p, &targets()[0], &Options::default());
    let (place, why) = c
        .placements
        .iter()
        .find(|pl| pl.node == conv.name)
        .map(|pl| (pl.place, pl.reason.clone()))
        .expect("placed");
    assert!(
        place == Place::Cpu && why.contains("runs in float on the host"),
        "{why}"
    );
}

#[test]
fn the_emulated_binary_equals_the_integer_reference() {
    let targets = targets();
    // Every model with 8-bit activations; with 16-bit activations, the models whose
    // commands tile 16-bit convolutions, resizes, transposed convolutions and fully
    // connected layers.
    let runs = MODELS.iter().map(|m| (m, "w8a8")).chain(
        MODELS
            .iter()
            .filter(|m| matches!(m.0, "det" | "rec" | "yolox" | "magika"))
            .map(|m| (m, "w8a16")),
    );
    for ((name, file, calib, pre), preset) in runs {
        let p = program(file, calib, pre, preset);
        let input = if *name == "cls" { "inputs/cls_page.npy" } else { calib };
        // Float inputs, or Magika's int32 byte values (exact in f32, on a grid of scale 1).
        let path = data_dir().join(input);
        let x: Vec<f32> = match ndarray_npy::read_npy::<_, ndarray::ArrayD<f32>>(&path) {
            Ok(x) => x.iter().copied().collect(),
            Err(_) => ndarray_npy::read_npy::<_, ndarray::ArrayD<i32>>(&path)
                .expect("input")
                .iter()
                .map(|&v| v as f32)
                .collect(),
        };
        let want =
            npu_core::sim::integer::run(&p, vec![npu_core::sim::integer::Input::Float(x.clone())]).expect("runs");
        for t in &targets {
            let c = compile(&p, t, &Options::default());
            let bytes = binary::write(&p, &c);
            let em = npu_core::emulator::Emulator::load(&bytes)
                .unwrap_or_else(|err| panic!("{name} {preset} on {}: {err}", t.id));
            // Every command runs as the tiles its record says.
            let mut tiled = 0;
            for (k, cmd) in em.binary.commands.iter().enumerate() {
                let want = cmd.tile.count * cmd.pieces;
                assert_eq!(
                    em.tiles(k),
                    want,
                    "{name} {preset} on {}: command {k} ({} {:?}) runs as {} tiles, its record says {want}",
                    t.id,
                    cmd.op.kind.name(),
                    p.tensors[cmd.op.outputs[0]].shape,
                    em.tiles(k)
                );
                tiled += usize::from(want > 1);
            }
            let values = em
                .run(vec![npu_core::sim::integer::Input::Float(x.clone())])
                .unwrap_or_else(|err| panic!("{name} {preset} on {}: {err}", t.id));
            let e = npu_core::emulator::Emulation {
                binary: em.binary,
                values,
            };
            let mut elements = 0;
            for (k, &o) in p.outputs.iter().enumerate() {
                let got = e.outputs()[k].expect("emulated");
                let exp = want.values[o].as_deref().expect("reference");
                assert_eq!(got.len(), exp.len());
                let diff = got.iter().zip(exp).filter(|(a, b)| a != b).count();
                assert_eq!(
                    diff, 0,
                    "{name} {preset} on {}: output {} differs in {diff} elements",
                    t.id, p.tensors[o].name
                );
                elements += got.len();
            }
            // Every tensor the binary computed (fused intermediates are never written).
            let mut tensors = 0;
            for (i, v) in e.values.iter().enumerate() {
                let (Some(got), Some(exp)) = (v, want.values[i].as_deref()) else {
                    continue;
                };
                let diff = got.iter().zip(exp).filter(|(a, b)| a != b).count();
                assert!(
                    diff == 0 && got.len() == exp.len(),
                    "{name} {preset} on {}: tensor {} differs in {diff} elements",
                    t.id,
                    p.tensors[i].name
                );
                tensors += 1;
            }
            assert!(tensors > p.ops.len() / 2, "{name}: only {tensors} tensors compared");
            println!(
                "{name} {preset} on {}: {elements} output elements and {tensors} tensors emulated, 0 mismatched; \
                 {tiled} commands in several tiles",
                t.id
            );
        }
        // The portable GEMM gives the same bits as the AVX2 one.
        if *name == "cls" && preset == "w8a8" {
            let t = &targets[0];
            let bytes = binary::write(&p, &compile(&p, t, &Options::default()));
            let run = || {
                npu_core::emulator::emulate(&bytes, vec![npu_core::sim::integer::Input::Float(x.clone())])
                    .expect("emulates")
                    .values
            };
            let fast = run();
            npu_core::emulator::mac::set_portable(true);
            let portable = run();
            npu_core::emulator::mac::set_portable(false);
            assert!(fast == portable, "the portable and AVX2 GEMMs differ");
            println!("cls: the portable GEMM equals the AVX2 GEMM on every tensor");
        }
    }
}
