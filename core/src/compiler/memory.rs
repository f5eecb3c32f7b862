//! Activation memory: live ranges in program order (a RESHAPE's output shares its input's
//! buffer), the peak of bytes alive at once and the sum of all activations beside it.

use crate::program::{IntType, OpKind, Program};
use serde::{Deserialize, Serialize};

/// Bytes per element of a stored tensor (int4 packed two per byte, rounded up per tensor).
pub fn tensor_bytes(ty: IntType, elements: usize) -> u64 {
    let e = elements as u64;
    // Saturating: a binary's tensor table may claim any shape.
    match ty {
        IntType::I4 => e.div_ceil(2),
        IntType::I8 | IntType::Bool => e,
        IntType::I16 => e.saturating_mul(2),
        IntType::I32 | IntType::Index | IntType::F32 => e.saturating_mul(4),
        IntType::I64 => e.saturating_mul(8),
    }
}

/// One activation buffer and the steps it is alive (program op indices, inclusive;
/// inputs start at 0, outputs end at the last op).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LiveRange {
    pub tensor: String,
    pub bytes: u64,
    pub first: usize,
    pub last: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryPlan {
    pub ranges: Vec<LiveRange>,
    /// Per program tensor, the index of its buffer in `ranges` (RESHAPE outputs share
    /// their input's; constants have none).
    pub range_of: Vec<Option<usize>>,
    /// Bytes alive after each op.
    pub occupancy: Vec<u64>,
    pub peak_bytes: u64,
    /// The op where the peak is reached.
    pub peak_at: usize,
    /// Every activation buffer added up (what a planner without reuse would need).
    pub activation_bytes: u64,
    /// The packed arena: one offset per range, and its size (at least the peak).
    pub arena: Arena,
    /// Buffers placed off-chip because the arena does not fit the target's SRAM (set by
    /// the compile stage), and the SRAM arena of the others.
    #[serde(default)]
    pub spilled: Vec<String>,
    #[serde(default)]
    pub sram_arena_bytes: u64,
    /// Per buffer, whether it lives off-chip.
    #[serde(default, skip_serializing)]
    pub spilled_range: Vec<bool>,
    /// Offsets of the on-chip buffers in the SRAM arena, and of the others in the
    /// off-chip arena.
    #[serde(default, skip_serializing)]
    pub sram: Arena,
    #[serde(default, skip_serializing)]
    pub offchip: Arena,
}

impl MemoryPlan {
    pub fn is_spilled(&self, range: usize) -> bool {
        self.spilled_range.get(range).copied().unwrap_or(false)
    }

    /// Places buffers off-chip (the largest first) until the rest fits `sram` bytes, and
    /// packs both arenas.
    pub fn place(&mut self, sram: u64) {
        let (off, arena) = spill(self, sram);
        let sizes: Vec<u64> = self
            .ranges
            .iter()
            .zip(&off)
            .map(|(r, &o)| if o { r.bytes } else { 0 })
            .collect();
        self.offchip = pack_sizes(&self.ranges, &sizes);
        self.spilled = self
            .ranges
            .iter()
            .zip(&off)
            .filter(|(_, s)| **s)
            .map(|(r, _)| r.tensor.clone())
            .collect();
        self.sram_arena_bytes = arena.size;
        self.sram = arena;
        self.spilled_range = off;
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Arena {
    pub offsets: Vec<u64>,
    pub size: u64,
}

/// Which buffers live off-chip so that the rest fits `sram` bytes: the largest go first,
/// and the rest is packed again after each (none when the plan's arena fits).
pub fn spill(m: &MemoryPlan, sram: u64) -> (Vec<bool>, Arena) {
    let mut off = vec![false; m.ranges.len()];
    if m.arena.size <= sram {
        return (off, m.arena.clone());
    }
    let mut order: Vec<usize> = (0..m.ranges.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(m.ranges[i].bytes), i));
    let mut sizes: Vec<u64> = m.ranges.iter().map(|r| r.bytes).collect();
    let mut arena = m.arena.clone();
    for i in order {
        off[i] = true;
        sizes[i] = 0;
        arena = pack_sizes(&m.ranges, &sizes);
        if arena.size <= sram {
            break;
        }
    }
    (off, arena)
}

/// Packs live ranges into one arena: largest buffers first, each at the lowest offset
/// where it overlaps no buffer alive at the same time.
pub fn pack(ranges: &[LiveRange]) -> Arena {
    let sizes: Vec<u64> = ranges.iter().map(|r| r.bytes).collect();
    pack_sizes(ranges, &sizes)
}

/// [`pack`] with the ranges' sizes given apart (a spilled buffer takes 0 bytes).
fn pack_sizes(ranges: &[LiveRange], sizes: &[u64]) -> Arena {
    let mut order: Vec<usize> = (0..ranges.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(sizes[i]), ranges[i].first, i));
    let mut offsets = vec![0u64; ranges.len()];
    let mut placed: Vec<usize> = Vec::with_capacity(ranges.len());
    let mut size = 0;
    for &i in &order {
        let r = &ranges[i];
        // Intervals taken by placed buffers whose lifetimes meet this one's, by offset.
        let mut taken: Vec<(u64, u64)> = placed
            .iter()
            .filter(|&&j| ranges[j].first <= r.last && r.first <= ranges[j].last)
            .map(|&j| (offsets[j], offsets[j] + sizes[j]))
            .collect();
        taken.sort_unstable();
        let mut at = 0u64;
        for (a, b) in taken {
            if at + sizes[i] <= a {
                break;
            }
            at = at.max(b);
        }
        offsets[i] = at;
        size = size.max(at + sizes[i]);
        placed.push(i);
    }
    Arena { offsets, size }
}

/// Live ranges of every activation buffer of `p`.
pub fn plan(p: &Program) -> MemoryPlan {
    let n = p.tensors.len();
    // A RESHAPE output is a view of its input: both map to one buffer.
    let mut root: Vec<usize> = (0..n).collect();
    for op in &p.ops {
        if matches!(op.kind, OpKind::Reshape)
            && let (Some(&i), Some(&o)) = (op.inputs.first(), op.outputs.first())
        {
            root[o] = root[i];
        }
    }
    let last_op = p.ops.len().saturating_sub(1);
    let mut first = vec![usize::MAX; n];
    let mut last = vec![0usize; n];
    let mut used = vec![false; n];
    for &i in &p.inputs {
        let r = root[i];
        first[r] = 0;
        used[r] = true;
    }
    for (k, op) in p.ops.iter().enumerate() {
        for &t in op.inputs.iter().chain(&op.outputs) {
            if p.tensors[t].data.is_some() {
                continue;
            }
            let r = root[t];
            used[r] = true;
            first[r] = first[r].min(k);
            last[r] = last[r].max(k);
        }
    }
    for &o in &p.outputs {
        last[root[o]] = last_op;
    }
    let mut ranges = Vec::new();
    let mut own = vec![None; n];
    for t in 0..n {
        if !used[t] || root[t] != t || p.tensors[t].data.is_some() {
            continue;
        }
        own[t] = Some(ranges.len());
        let tt = &p.tensors[t];
        ranges.push(LiveRange {
            tensor: tt.name.clone(),
            bytes: tensor_bytes(tt.q.ty, tt.shape.iter().product()),
            first: first[t].min(last[t]),
            last: last[t],
        });
    }
    let mut occupancy = vec![0u64; p.ops.len().max(1)];
    for r in &ranges {
        for o in &mut occupancy[r.first..=r.last] {
            *o += r.bytes;
        }
    }
    let (peak_at, peak_bytes) = occupancy
        .iter()
        .copied()
        .enumerate()
        .max_by_key(|&(i, b)| (b, std::cmp::Reverse(i)))
        .unwrap_or((0, 0));
    let range_of = (0..n).map(|t| own[root[t]]).collect();
    MemoryPlan {
        range_of,
        activation_bytes: ranges.iter().map(|r| r.bytes).sum(),
        arena: pack(&ranges),
        spilled: Vec::new(),
        sram_arena_bytes: 0,
        spilled_range: Vec::new(),
        sram: Arena::default(),
        offchip: Arena::default(),
        ranges,
        occupancy,
        peak_bytes,
        peak_at,
    }
}
