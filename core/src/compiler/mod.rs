//! The compiler's first stages: partition an integer program between a target's NPU and
//! its host CPU ([`partition`]), plan activation memory (live ranges, the SRAM peak) and
//! estimate every layer's cost with a roofline performance model ([`perf`]). Every stage
//! returns a value the studio shows and the CLI writes ([`Compiled`]).
//!
//! Lowering to command streams and the binary come later; what is here already decides
//! placement and cost, and counts the CPU segments and the hand-offs between them in the
//! totals (Vela's estimate leaves the CPU out; ours does not).

pub mod memory;
pub mod partition;
pub mod perf;

pub use partition::{Place, Placement, Segment};
pub use perf::{LayerPerf, Totals};

use crate::quant::legalize::Program;
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
    let (spilled, sram_arena) = memory::spill(&memory, target.memory.sram_bytes);
    let offchip: Vec<bool> = memory.range_of.iter().map(|r| r.is_some_and(|r| spilled[r])).collect();
    memory.spilled = memory
        .ranges
        .iter()
        .zip(&spilled)
        .filter(|(_, s)| **s)
        .map(|(r, _)| r.tensor.clone())
        .collect();
    memory.sram_arena_bytes = sram_arena.size;
    let layers: Vec<LayerPerf> = (0..program.ops.len())
        .map(|i| perf::layer(program, i, &views[i], places[i], target, &offchip))
        .collect();
    let boundaries = perf::boundaries(program, &places, target);
    let totals = perf::totals(&layers, &boundaries, &segments, &memory, target);
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
    }
}

impl Compiled {
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
