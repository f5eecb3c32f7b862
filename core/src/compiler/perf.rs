//! The performance model: per layer, compute cycles (MACs at the MAC array's rate for the
//! precision, derated by channel blocking; the output stage in a pipeline with it) against
//! memory cycles (bytes over SRAM and off-chip bandwidth), the larger wins (DMA overlaps
//! compute); ops on the CPU at the host's rate; a hand-off at every segment boundary.
//! Cycles are NPU cycles; host time is converted at the two clocks.

use super::Boundary;
use super::memory::{MemoryPlan, tensor_bytes};
use super::partition::{Place, Segment};
use crate::program::{FloatOp, OpKind, Program, UnaryFn};
use crate::target::{OpView, Precision, Target};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LayerPerf {
    pub node: String,
    pub op: String,
    #[serde(rename = "device")]
    pub place: Place,
    /// Why it runs there (the constraint sentence, or `supported`).
    #[serde(default)]
    pub reason: String,
    /// int8, int16 or float32.
    pub precision: String,
    pub macs: u64,
    pub ifm_bytes: u64,
    pub ofm_bytes: u64,
    /// Weights and biases.
    pub weight_bytes: u64,
    /// Traffic on each memory.
    pub sram_bytes: u64,
    pub offchip_bytes: u64,
    /// Off-chip traffic split into reads (weights, spilled inputs) and writes.
    #[serde(default)]
    pub offchip_read_bytes: u64,
    #[serde(default)]
    pub offchip_write_bytes: u64,
    pub compute_cycles: f64,
    pub memory_cycles: f64,
    /// NPU cycles of the layer (CPU layers: their host time in NPU cycles).
    pub cycles: f64,
    pub latency_us: f64,
    /// `compute`, `memory` or `host`.
    pub bound: String,
    /// MACs over (cycles × peak MAC rate); 0 for ops without MACs.
    pub mac_utilisation: f64,
    pub energy_uj: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    pub ops_on_npu: usize,
    pub ops_total: usize,
    pub npu_segments: usize,
    pub cpu_segments: usize,
    /// Everything: NPU layers, CPU layers and hand-offs, in NPU cycles.
    pub cycles: f64,
    pub npu_cycles: f64,
    pub latency_ms: f64,
    pub npu_ms: f64,
    pub cpu_ms: f64,
    pub handoff_ms: f64,
    pub macs: u64,
    pub npu_macs: u64,
    /// Bytes of activations alive at once, at the worst step.
    pub sram_peak_bytes: u64,
    /// The packed activation arena (at least the peak).
    pub arena_bytes: u64,
    /// The target's SRAM.
    pub sram_bytes: u64,
    /// Whether the activation arena fits in SRAM.
    pub fits_sram: bool,
    /// Activation buffers that live off-chip because it does not (the largest first).
    pub spilled_buffers: usize,
    pub activation_bytes: u64,
    pub offchip_bytes: u64,
    pub weight_bytes: u64,
    pub energy_mj: f64,
}

fn numel(s: &[usize]) -> u64 {
    s.iter().product::<usize>() as u64
}

/// MACs of the op (0 for ops without a multiply-accumulate array).
fn macs(p: &Program, i: usize, v: &OpView) -> u64 {
    let op = &p.ops[i];
    let out = numel(&v.output);
    match &op.kind {
        OpKind::Conv { .. } => {
            // Every output element meets C_in/groups · kH · kW weights.
            let w = &p.tensors[op.inputs[1]].shape;
            out * w[1..].iter().product::<usize>() as u64
        }
        OpKind::TransposeConv { .. } => {
            let w = &p.tensors[op.inputs[1]].shape;
            let x = v.inputs.first().map_or(0, |s| numel(s));
            // Every input element meets C_out · kH · kW weights.
            x * (w[0] * w[2..].iter().product::<usize>()) as u64
        }
        OpKind::FullyConnected { .. } => {
            let k = p.tensors[op.inputs[1]].shape.get(1).copied().unwrap_or(1);
            out * k as u64
        }
        OpKind::BatchMatMul => {
            let k = v.inputs.first().and_then(|s| s.last()).copied().unwrap_or(1);
            out * k as u64
        }
        _ => 0,
    }
}

/// Host operations of a CPU op (MACs, or a few operations per element).
fn host_ops(p: &Program, i: usize, v: &OpView, m: u64) -> (f64, bool) {
    let op = &p.ops[i];
    let out = numel(&v.output) as f64;
    let ins: f64 = v.inputs.iter().map(|s| numel(s) as f64).sum();
    match &op.kind {
        OpKind::Float { op: f } => {
            let per = match f {
                FloatOp::LayerNorm { .. } => 10.0,
                FloatOp::Softmax => 8.0,
                FloatOp::Unary {
                    f: UnaryFn::Exp | UnaryFn::Log | UnaryFn::Tanh | UnaryFn::Logistic,
                } => 6.0,
                FloatOp::HardSwish => 4.0,
                // An ONNX node in the float fallback: its weights (the one-node model's
                // bytes, four per value) are read once, the output computed at a few
                // operations per value.
                FloatOp::Node(n) => return (ins * 2.0 + out * 6.0 + n.onnx.len() as f64 / 4.0, true),
                _ => 1.0,
            };
            // Dequantize every input, compute, quantize the output.
            (ins * 2.0 + out * per + out * 2.0, true)
        }
        OpKind::Reshape => (0.0, false),
        // One copy per output element and a read per index, not a pass over the table.
        OpKind::Gather { .. } => (out + numel(&p.tensors[op.inputs[1]].shape) as f64, false),
        OpKind::Pool { kernel, .. } => (out * (kernel[0] * kernel[1]) as f64, false),
        OpKind::Softmax { .. } => (out * 6.0, false),
        OpKind::Mean { .. } | OpKind::Reduce { .. } => (ins, false),
        _ if m > 0 => (m as f64, false),
        _ => (out.max(ins), false),
    }
}

fn ceil_to(x: usize, b: usize) -> usize {
    x.div_ceil(b) * b
}

/// Compute cycles of an NPU op and its MAC utilisation derating.
fn npu_compute(p: &Program, i: usize, v: &OpView, m: u64, t: &Target) -> f64 {
    let c = &t.compute;
    let op = &p.ops[i];
    let out = numel(&v.output) as f64;
    let wide = v.precision == Some(Precision::Int16);
    let rate = t.macs_per_cycle(v.precision.unwrap_or(Precision::Int8));
    let output_stage = out
        * if wide {
            c.output_cycles_per_element_int16.unwrap_or(c.output_cycles_per_element)
        } else {
            c.output_cycles_per_element
        };
    let blocked = |cout: usize, cin: usize| {
        let u = (cout as f64 / ceil_to(cout, c.ofm_channel_block) as f64)
            * (cin as f64 / ceil_to(cin, c.ifm_channel_block) as f64);
        m as f64 / (rate * u.max(1e-9))
    };
    let lut = out * c.lut_cycles_per_element;
    let moved = out * c.move_cycles_per_element;
    match &op.kind {
        OpKind::Conv { .. } if v.class == "DEPTHWISE_CONV_2D" => {
            let k = v.kernel.map_or(1, |k| k[0] * k[1]);
            let taps = ceil_to(k, c.depthwise_tap_block) as f64;
            let dw = out * taps / c.depthwise_macs_per_cycle * if wide { 2.0 } else { 1.0 };
            dw.max(output_stage)
        }
        OpKind::Conv { .. } | OpKind::TransposeConv { .. } => {
            let w = &p.tensors[op.inputs[1]].shape;
            blocked(w[0], w[1]).max(output_stage)
        }
        OpKind::FullyConnected { .. } => {
            let w = &p.tensors[op.inputs[1]].shape;
            blocked(w[0], w.get(1).copied().unwrap_or(1)).max(output_stage)
        }
        OpKind::BatchMatMul => {
            let n = v.output.last().copied().unwrap_or(1);
            let k = v.inputs.first().and_then(|s| s.last()).copied().unwrap_or(1);
            blocked(n, k).max(output_stage)
        }
        OpKind::Pool { kernel, .. } => {
            (out * (kernel[0] * kernel[1]) as f64 / c.pool_elements_per_cycle).max(output_stage)
        }
        OpKind::Mean { .. } | OpKind::Reduce { .. } => {
            let ins: f64 = v.inputs.iter().map(|s| numel(s) as f64).sum();
            (ins / c.pool_elements_per_cycle).max(output_stage)
        }
        OpKind::Add { .. } | OpKind::Sub { .. } | OpKind::Extremum { .. } | OpKind::Relu { .. } => {
            out * c.add_cycles_per_element
        }
        OpKind::Mul { .. } | OpKind::SquaredDifference => out * c.mul_cycles_per_element,
        OpKind::Softmax { .. } => lut * 3.0,
        OpKind::Logistic
        | OpKind::Tanh
        | OpKind::HardSwish
        | OpKind::Exp
        | OpKind::Log
        | OpKind::Sqrt
        | OpKind::Rsqrt => lut,
        OpKind::Reshape => 0.0,
        _ => moved,
    }
}

/// The cost of op `i` at its place.
pub fn layer(p: &Program, i: usize, v: &OpView, place: Place, t: &Target, offchip_fm: &[bool]) -> LayerPerf {
    let op = &p.ops[i];
    let m = macs(p, i, v);
    let reshape = matches!(op.kind, OpKind::Reshape);
    let mut ifm_bytes = 0;
    let mut weight_bytes = 0;
    // Feature-map bytes read or written off-chip (buffers spilled out of SRAM).
    let mut fm_off = 0;
    for &x in &op.inputs {
        let tt = &p.tensors[x];
        let b = if tt.q.ty == crate::program::IntType::I4 && !t.int4_weights {
            numel(&tt.shape)
        } else {
            tensor_bytes(tt.q.ty, tt.shape.iter().product())
        };
        if tt.data.is_some() {
            weight_bytes += b;
        } else if !reshape {
            ifm_bytes += b;
            if offchip_fm[x] {
                fm_off += b;
            }
        }
    }
    let mut ofm_bytes = 0;
    let mut written_off = 0;
    if !reshape {
        for &o in &op.outputs {
            let b = tensor_bytes(p.tensors[o].q.ty, p.tensors[o].shape.iter().product());
            ofm_bytes += b;
            if offchip_fm[o] {
                fm_off += b;
                written_off += b;
            }
        }
    }
    let precision = v.precision.map_or("float32", |p| p.name()).to_string();
    // (sram bytes, off-chip bytes, compute, memory, cycles, latency µs, bound, energy pJ)
    let (sram, offchip, compute, memory, cycles, latency_us, bound, energy_pj) = if place == Place::Cpu {
        let (ops, float) = host_ops(p, i, v, m);
        let rate = if float {
            t.host.float_ops_per_cycle
        } else {
            t.host.int_ops_per_cycle
        };
        let latency_us = ops / rate / t.host.clock_mhz;
        let cycles = latency_us * t.clock_mhz;
        let bytes = ifm_bytes + ofm_bytes + weight_bytes;
        (
            bytes,
            0,
            cycles,
            0.0,
            cycles,
            latency_us,
            "host",
            ops * t.energy.pj_per_host_op,
        )
    } else {
        let compute = npu_compute(p, i, v, m, t);
        // A convolution split per output position reads its weights once per piece.
        let pieces = t.split_pieces(v) as u64;
        let (mut sram, mut offchip) = (ifm_bytes + ofm_bytes - fm_off, fm_off);
        if t.memory.weights_offchip {
            offchip += weight_bytes * pieces;
        } else {
            sram += weight_bytes * pieces;
        }
        let sram_cycles = sram as f64 / t.memory.sram_bytes_per_cycle;
        let off_cycles = offchip as f64 / t.memory.offchip_bytes_per_cycle;
        let memory = if t.memory.dma_channels >= 2 {
            sram_cycles.max(off_cycles)
        } else {
            sram_cycles + off_cycles
        };
        let overhead = if reshape {
            0.0
        } else {
            t.compute.op_overhead_cycles * pieces as f64
        };
        let cycles = compute.max(memory) + overhead;
        let pj_mac = if v.precision == Some(Precision::Int16) {
            t.energy.pj_per_mac_int16
        } else {
            t.energy.pj_per_mac_int8
        };
        let energy =
            m as f64 * pj_mac + sram as f64 * t.energy.pj_per_sram_byte + offchip as f64 * t.energy.pj_per_offchip_byte;
        let bound = if compute >= memory { "compute" } else { "memory" };
        (
            sram,
            offchip,
            compute,
            memory,
            cycles,
            cycles / t.clock_mhz,
            bound,
            energy,
        )
    };
    let peak = t.macs_per_cycle(v.precision.unwrap_or(Precision::Int8));
    LayerPerf {
        node: op.node.clone(),
        op: v.class.clone(),
        place,
        reason: String::new(),
        precision,
        macs: m,
        ifm_bytes,
        ofm_bytes,
        weight_bytes,
        sram_bytes: sram,
        offchip_bytes: offchip,
        offchip_read_bytes: offchip.saturating_sub(written_off),
        offchip_write_bytes: offchip.min(written_off),
        compute_cycles: compute,
        memory_cycles: memory,
        cycles,
        latency_us,
        bound: bound.into(),
        mac_utilisation: if place == Place::Npu && cycles > 0.0 {
            m as f64 / (cycles * peak)
        } else {
            0.0
        },
        energy_uj: energy_pj * 1e-6,
    }
}

/// Tensors made on one side and read on the other: a copy through SRAM each.
pub fn boundaries(p: &Program, places: &[Place], t: &Target) -> Vec<Boundary> {
    let mut producer = vec![None; p.tensors.len()];
    for (k, op) in p.ops.iter().enumerate() {
        for &o in &op.outputs {
            producer[o] = Some(k);
        }
    }
    let mut out: Vec<Boundary> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (k, op) in p.ops.iter().enumerate() {
        for &x in &op.inputs {
            let Some(src) = producer[x] else { continue };
            if places[src] == places[k] || !seen.insert((x, places[k])) {
                continue;
            }
            let tt = &p.tensors[x];
            let bytes = tensor_bytes(tt.q.ty, tt.shape.iter().product());
            out.push(Boundary {
                tensor: tt.name.clone(),
                from: places[src],
                to: places[k],
                bytes,
                cycles: bytes as f64 / t.memory.sram_bytes_per_cycle,
            });
        }
    }
    out
}

pub fn totals(
    layers: &[LayerPerf],
    boundaries: &[Boundary],
    segments: &[Segment],
    memory: &MemoryPlan,
    t: &Target,
) -> Totals {
    let npu: Vec<&LayerPerf> = layers.iter().filter(|l| l.place == Place::Npu).collect();
    let cpu: Vec<&LayerPerf> = layers.iter().filter(|l| l.place == Place::Cpu).collect();
    let npu_cycles = npu.iter().fold(0.0, |a, l| a + l.cycles);
    let cpu_us = cpu.iter().fold(0.0, |a, l| a + l.latency_us);
    // Every change of side costs a hand-off on the host plus the copies.
    let switches = segments.len().saturating_sub(1) as f64;
    let handoff_us = switches * t.host.handoff_cycles / t.host.clock_mhz
        + boundaries.iter().fold(0.0, |a, b| a + b.cycles) / t.clock_mhz;
    let npu_us = npu_cycles / t.clock_mhz;
    let latency_us = npu_us + cpu_us + handoff_us;
    let energy_uj: f64 = layers.iter().map(|l| l.energy_uj).sum::<f64>()
        + boundaries
            .iter()
            .map(|b| b.bytes as f64 * 2.0 * t.energy.pj_per_sram_byte)
            .sum::<f64>()
            * 1e-6;
    Totals {
        ops_on_npu: npu.len(),
        ops_total: layers.len(),
        npu_segments: segments.iter().filter(|s| s.place == Place::Npu).count(),
        cpu_segments: segments.iter().filter(|s| s.place == Place::Cpu).count(),
        cycles: latency_us * t.clock_mhz,
        npu_cycles,
        latency_ms: latency_us / 1e3,
        npu_ms: npu_us / 1e3,
        cpu_ms: cpu_us / 1e3,
        handoff_ms: handoff_us / 1e3,
        macs: layers.iter().map(|l| l.macs).sum(),
        npu_macs: npu.iter().map(|l| l.macs).sum(),
        sram_peak_bytes: memory.peak_bytes,
        arena_bytes: memory.arena.size,
        sram_bytes: t.memory.sram_bytes,
        fits_sram: memory.spilled.is_empty(),
        spilled_buffers: memory.spilled.len(),
        activation_bytes: memory.activation_bytes,
        offchip_bytes: layers.iter().map(|l| l.offchip_bytes).sum(),
        weight_bytes: layers.iter().map(|l| l.weight_bytes).sum(),
        energy_mj: energy_uj / 1e3,
    }
}
