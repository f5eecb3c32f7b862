//! The compiler's first stages: partition an integer program between a target's NPU and
//! its host CPU ([`partition`]), plan activation memory (live ranges, the SRAM peak) and
//! estimate every layer's cost with a roofline performance model ([`perf`]). Every stage
//! returns a value the studio shows and the CLI writes ([`Compiled`]).
//!
//! Lowering to command streams and the binary come later; what is here already decides
//! placement and cost, and counts the CPU segments and the hand-offs between them in the
//! totals (Vela's estimate leaves the CPU out; ours does not).

pub mod binary;
pub mod lower;
pub mod memory;
pub mod partition;
pub mod perf;

pub use partition::{Place, Placement, Segment};
pub use perf::{LayerPerf, Totals};

use crate::program::Program;
use crate::target::Target;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// User choices that change the compile.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Options {
    /// Graph nodes the user keeps on the CPU.
    #[serde(default)]
    pub force_cpu: BTreeSet<String>,
}

/// A tensor handed from one side to the other.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Boundary {
    pub tensor: String,
    pub from: Place,
    pub to: Place,
    pub bytes: u64,
    /// NPU cycles of the copy through memory.
    pub cycles: f64,
}

/// Everything the compile stage decided and estimated.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Compiled {
    pub target: String,
    /// The target's off-chip memory.
    pub offchip_name: String,
    /// The optimized graph's id (as in the plan).
    pub graph: String,
    pub placements: Vec<Placement>,
    pub segments: Vec<Segment>,
    pub boundaries: Vec<Boundary>,
    pub layers: Vec<LayerPerf>,
    pub memory: memory::MemoryPlan,
    pub totals: Totals,
    /// NPU commands and host ops in schedule order, each command tiled.
    pub lowered: lower::Lowered,
}

/// Partitions `program` for `target` and estimates its cost.
pub fn compile(program: &Program, target: &Target, opts: &Options) -> Compiled {
    let mut placements = Vec::with_capacity(program.ops.len());
    let mut views = Vec::with_capacity(program.ops.len());
    for i in 0..program.ops.len() {
        let (place, reason, view) = partition::place(program, i, target, opts);
        placements.push(Placement {
            node: program.ops[i].node.clone(),
            op: view.class.clone(),
            place,
            reason,
            segment: 0,
        });
        views.push(view);
    }
    let places: Vec<Place> = placements.iter().map(|p| p.place).collect();
    let segments = partition::segments(&places);
    for (k, s) in segments.iter().enumerate() {
        for p in &mut placements[s.first..=s.last] {
            p.segment = k;
        }
    }
    let mut memory = memory::plan(program);
    // Buffers that do not fit in SRAM live off-chip, the largest first.
    memory.place(target.memory.sram_bytes);
    let offchip: Vec<bool> = memory
        .range_of
        .iter()
        .map(|r| r.is_some_and(|r| memory.is_spilled(r)))
        .collect();
    let layers: Vec<LayerPerf> = (0..program.ops.len())
        .map(|i| LayerPerf {
            reason: placements[i].reason.clone(),
            ..perf::layer(program, i, &views[i], places[i], target, &offchip)
        })
        .collect();
    let mut segments = segments;
    for s in &mut segments {
        s.cycles = layers[s.first..=s.last].iter().map(|l| l.cycles).sum();
    }
    let boundaries = perf::boundaries(program, &places, target);
    let totals = perf::totals(&layers, &boundaries, &segments, &memory, target);
    let work = target.memory.sram_bytes.saturating_sub(memory.sram_arena_bytes);
    let lowered = lower::lower(program, &places, &views, target, &offchip, work);
    Compiled {
        target: target.id.clone(),
        offchip_name: target.memory.offchip_name.clone(),
        graph: program.graph.clone(),
        placements,
        segments,
        boundaries,
        layers,
        memory,
        totals,
        lowered,
    }
}

/// The report's headline figures (the `compile --report` and `--json` contract).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Headline {
    pub ops_total: usize,
    pub ops_npu: usize,
    /// NPU layers, CPU layers and hand-offs, in NPU cycles.
    pub cycles_total: f64,
    pub latency_us: f64,
    /// Bytes of activations alive at once, at the worst step.
    pub sram_peak_bytes: u64,
    /// Every activation buffer added up.
    pub activations_bytes: u64,
    /// Traffic on the target's off-chip memory (DRAM or flash).
    pub dram_read_bytes: u64,
    pub dram_write_bytes: u64,
    pub energy_uj: f64,
    /// NPU commands after lowering, and host ops.
    pub commands: usize,
    pub host_ops: usize,
}

impl Compiled {
    pub fn headline(&self) -> Headline {
        let t = &self.totals;
        Headline {
            ops_total: t.ops_total,
            ops_npu: t.ops_on_npu,
            cycles_total: t.cycles,
            latency_us: t.latency_ms * 1e3,
            sram_peak_bytes: t.sram_peak_bytes,
            activations_bytes: t.activation_bytes,
            dram_read_bytes: self.layers.iter().map(|l| l.offchip_read_bytes).sum(),
            dram_write_bytes: self.layers.iter().map(|l| l.offchip_write_bytes).sum(),
            energy_uj: t.energy_mj * 1e3,
            commands: self.lowered.commands.len(),
            host_ops: self
                .lowered
                .steps
                .iter()
                .filter(|s| matches!(s, lower::Step::Host(_)))
                .count(),
        }
    }

    /// The per-layer table as CSV (one row per integer op, like Vela's per-layer file).
    pub fn layers_csv(&self) -> String {
        use std::fmt::Write;
        let mut s = String::from(
            "node,op,target,segment,precision,macs,ifm_bytes,ofm_bytes,weight_bytes,sram_bytes,offchip_bytes,\
             compute_cycles,memory_cycles,cycles,latency_us,bound,mac_utilisation,energy_uj,reason\n",
        );
        let q = |x: &str| format!("\"{}\"", x.replace('"', "\"\""));
        for (l, p) in self.layers.iter().zip(&self.placements) {
            let _ = writeln!(
                s,
                "{},{},{},{},{},{},{},{},{},{},{},{:.1},{:.1},{:.1},{:.3},{},{:.4},{:.4},{}",
                q(&l.node),
                l.op,
                l.place.name(),
                p.segment,
                l.precision,
                l.macs,
                l.ifm_bytes,
                l.ofm_bytes,
                l.weight_bytes,
                l.sram_bytes,
                l.offchip_bytes,
                l.compute_cycles,
                l.memory_cycles,
                l.cycles,
                l.latency_us,
                l.bound,
                l.mac_utilisation,
                l.energy_uj,
                q(&p.reason)
            );
        }
        s
    }

    /// One paragraph: what runs where and what it costs.
    pub fn summary(&self) -> String {
        let t = &self.totals;
        format!(
            "{}: {}/{} ops on the NPU, {} segment{} ({} NPU, {} CPU), {:.0} cycles, {:.3} ms \
             (NPU {:.3} ms, CPU {:.3} ms, hand-offs {:.3} ms), {:.1} M MACs, activation arena {} KiB of {} KiB SRAM \
             (live peak {} KiB, all activations {} KiB), off-chip traffic {} KiB, {:.3} mJ",
            self.target,
            t.ops_on_npu,
            t.ops_total,
            t.npu_segments + t.cpu_segments,
            if t.npu_segments + t.cpu_segments == 1 { "" } else { "s" },
            t.npu_segments,
            t.cpu_segments,
            t.cycles,
            t.latency_ms,
            t.npu_ms,
            t.cpu_ms,
            t.handoff_ms,
            t.macs as f64 / 1e6,
            t.arena_bytes / 1024,
            t.sram_bytes / 1024,
            t.sram_peak_bytes / 1024,
            t.activation_bytes / 1024,
            t.offchip_bytes / 1024,
            t.energy_mj
        ) + &if t.spilled_buffers > 0 {
            format!(
                "; {} activation buffer(s) do not fit in SRAM and live in {}",
                t.spilled_buffers, self.offchip_name
            )
        } else {
            String::new()
        }
    }
}
