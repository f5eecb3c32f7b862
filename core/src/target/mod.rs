//! NPU targets described as data (`plugins/targets/*.ron`): MAC rates per precision,
//! clock, on-chip SRAM and off-chip memory bandwidths, energy, the host CPU that runs
//! fallback ops, and the supported-op table whose constraints decide what runs on the NPU.
//!
//! Each constraint ([`Rule`]) is a small check that returns the sentence a user sees when
//! an op falls back to the CPU; the same sentences generate `docs/supported-ops.md`
//! ([`supported_ops_markdown`]), so the document cannot drift from the code.

mod rules;

pub use rules::{OpView, Rule, op_view};

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// An activation precision an NPU op runs at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Precision {
    Int8,
    Int16,
}

impl Precision {
    pub fn name(self) -> &'static str {
        match self {
            Self::Int8 => "int8",
            Self::Int16 => "int16",
        }
    }
}

/// MACs per cycle of the MAC array, per activation precision (`None`: not supported).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MacRates {
    pub int8: f64,
    pub int16: Option<f64>,
    /// Float16 MACs per cycle, where the NPU has them (no integer plan uses them yet).
    #[serde(default)]
    pub fp16: Option<f64>,
}

/// The compute side of the NPU, in NPU cycles.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Compute {
    pub macs_per_cycle: MacRates,
    /// The MAC array computes this many output channels at once; a layer's output
    /// channels are rounded up to a multiple of it.
    pub ofm_channel_block: usize,
    /// And reduces this many input channels at once (the dot-product width).
    pub ifm_channel_block: usize,
    /// Depthwise convolutions: int8 MACs per cycle (they cannot use the dot product
    /// over input channels), kernel taps rounded up to a multiple of `depthwise_tap_block`.
    pub depthwise_macs_per_cycle: f64,
    pub depthwise_tap_block: usize,
    /// Pooling window elements read per cycle.
    pub pool_elements_per_cycle: f64,
    /// Cycles per output element of the output stage (requantize, clamp, write), which
    /// runs in a pipeline with the MAC array: a layer takes the larger of the two.
    pub output_cycles_per_element: f64,
    /// The same with 16-bit activations (a wider accumulator; default: as int8).
    #[serde(default)]
    pub output_cycles_per_element_int16: Option<f64>,
    /// Cycles per output element of elementwise ops.
    pub add_cycles_per_element: f64,
    pub mul_cycles_per_element: f64,
    /// Look-up-table activations (Logistic, Tanh, HardSwish, Exp, Log, ...).
    pub lut_cycles_per_element: f64,
    /// Data movement (concatenation, transpose, slices, pads, requantization).
    pub move_cycles_per_element: f64,
    /// Fixed cost of one NPU command (setup, block configuration).
    pub op_overhead_cycles: f64,
}

/// On-chip SRAM and the off-chip memory (DRAM or flash) behind it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Memory {
    pub sram_bytes: u64,
    /// SRAM bandwidth in bytes per NPU cycle.
    pub sram_bytes_per_cycle: f64,
    /// What the off-chip memory is ("LPDDR5", "external flash").
    pub offchip_name: String,
    pub offchip_bytes_per_cycle: f64,
    /// Weights live off-chip and are streamed in by DMA (MCU flash, phone DRAM).
    pub weights_offchip: bool,
    /// DMA channels: with two or more, off-chip transfers overlap SRAM traffic and
    /// compute; with one, a layer's off-chip and SRAM traffic add up.
    pub dma_channels: u32,
}

/// Energy in picojoules.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Energy {
    pub pj_per_mac_int8: f64,
    pub pj_per_mac_int16: f64,
    pub pj_per_sram_byte: f64,
    pub pj_per_offchip_byte: f64,
    /// Per operation of the host CPU (fallback ops).
    pub pj_per_host_op: f64,
}

/// The CPU that runs the ops the NPU cannot.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Host {
    pub name: String,
    pub clock_mhz: f64,
    /// Integer MACs (or elementwise operations) per host cycle.
    pub int_ops_per_cycle: f64,
    /// Float32 operations per host cycle (ops with no integer form).
    pub float_ops_per_cycle: f64,
    /// Fixed cost, in host cycles, of handing work between the NPU and the CPU
    /// (driver call, cache maintenance), paid at every segment boundary.
    pub handoff_cycles: f64,
}

/// One op the NPU runs (TFLite builtin names), at the listed precisions, when every
/// rule holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpSupport {
    pub op: String,
    pub precisions: Vec<Precision>,
    #[serde(default)]
    pub rules: Vec<Rule>,
}

/// An NPU target.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Target {
    /// Short stable id (`ethos-u55-128`): what `--target` takes.
    pub id: String,
    pub name: String,
    pub description: String,
    pub clock_mhz: f64,
    pub compute: Compute,
    pub memory: Memory,
    pub energy: Energy,
    pub host: Host,
    /// Rules every op must satisfy (batch size, rank, dimension limits).
    #[serde(default)]
    pub generic_rules: Vec<Rule>,
    /// Weights in 4 bits are read as such (else they are expanded to int8 on load).
    #[serde(default)]
    pub int4_weights: bool,
    pub ops: Vec<OpSupport>,
}

/// A target file that cannot be used, naming the file and the field.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("cannot read target file {file}: {source}")]
    Io { file: String, source: std::io::Error },
    #[error("target file {file}: {message}")]
    Format { file: String, message: String },
    #[error("target file {file}: field `{field}`: {message}")]
    Field {
        file: String,
        field: String,
        message: String,
    },
    #[error("no target '{id}' (known: {known}); pass a target id or a .ron file")]
    Unknown { id: String, known: String },
    #[error("two target files have the id '{id}': {a} and {b}")]
    Duplicate { id: String, a: String, b: String },
}

impl Target {
    /// Parses and checks a target description; errors name `file` and the field.
    pub fn parse(text: &str, file: &str) -> Result<Self, TargetError> {
        let t: Target = ron::from_str(text).map_err(|e| TargetError::Format {
            file: file.to_string(),
            message: e.to_string(),
        })?;
        t.validate(file)?;
        Ok(t)
    }

    pub fn load(path: &Path) -> Result<Self, TargetError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| TargetError::Io {
            file: file.clone(),
            source,
        })?;
        Self::parse(&text, &file)
    }

    fn validate(&self, file: &str) -> Result<(), TargetError> {
        let bad = |field: &str, message: String| TargetError::Field {
            file: file.to_string(),
            field: field.to_string(),
            message,
        };
        if self.id.is_empty()
            || !self
                .id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(bad("id", format!("'{}' must be letters, digits, '-' or '_'", self.id)));
        }
        let c = &self.compute;
        let m = &self.memory;
        let positive = [
            ("clock_mhz", self.clock_mhz),
            ("compute.macs_per_cycle.int8", c.macs_per_cycle.int8),
            ("compute.depthwise_macs_per_cycle", c.depthwise_macs_per_cycle),
            ("compute.pool_elements_per_cycle", c.pool_elements_per_cycle),
            ("memory.sram_bytes_per_cycle", m.sram_bytes_per_cycle),
            ("memory.offchip_bytes_per_cycle", m.offchip_bytes_per_cycle),
            ("host.clock_mhz", self.host.clock_mhz),
            ("host.int_ops_per_cycle", self.host.int_ops_per_cycle),
            ("host.float_ops_per_cycle", self.host.float_ops_per_cycle),
        ];
        for (field, v) in positive {
            if !(v.is_finite() && v > 0.0) {
                return Err(bad(field, format!("must be a positive number, not {v}")));
            }
        }
        let optional = [
            ("compute.macs_per_cycle.int16", c.macs_per_cycle.int16),
            ("compute.macs_per_cycle.fp16", c.macs_per_cycle.fp16),
        ];
        for (field, v) in optional {
            if let Some(v) = v
                && !(v.is_finite() && v > 0.0)
            {
                return Err(bad(field, format!("must be a positive number, not {v}")));
            }
        }
        let non_negative = [
            ("compute.output_cycles_per_element", c.output_cycles_per_element),
            ("compute.add_cycles_per_element", c.add_cycles_per_element),
            ("compute.mul_cycles_per_element", c.mul_cycles_per_element),
            ("compute.lut_cycles_per_element", c.lut_cycles_per_element),
            ("compute.move_cycles_per_element", c.move_cycles_per_element),
            ("compute.op_overhead_cycles", c.op_overhead_cycles),
            ("energy.pj_per_mac_int8", self.energy.pj_per_mac_int8),
            ("energy.pj_per_mac_int16", self.energy.pj_per_mac_int16),
            ("energy.pj_per_sram_byte", self.energy.pj_per_sram_byte),
            ("energy.pj_per_offchip_byte", self.energy.pj_per_offchip_byte),
            ("energy.pj_per_host_op", self.energy.pj_per_host_op),
            ("host.handoff_cycles", self.host.handoff_cycles),
        ];
        for (field, v) in non_negative {
            if !(v.is_finite() && v >= 0.0) {
                return Err(bad(field, format!("must be zero or positive, not {v}")));
            }
        }
        for (field, v) in [
            ("compute.ofm_channel_block", c.ofm_channel_block),
            ("compute.ifm_channel_block", c.ifm_channel_block),
            ("compute.depthwise_tap_block", c.depthwise_tap_block),
        ] {
            if v == 0 {
                return Err(bad(field, "must be at least 1".into()));
            }
        }
        if m.sram_bytes == 0 {
            return Err(bad("memory.sram_bytes", "must be at least 1".into()));
        }
        if m.dma_channels == 0 {
            return Err(bad("memory.dma_channels", "must be at least 1".into()));
        }
        let mut seen = std::collections::HashSet::new();
        for (i, op) in self.ops.iter().enumerate() {
            let field = format!("ops[{i}] ({})", op.op);
            let known = rules::op_classes();
            if !known.contains(&op.op.as_str()) {
                return Err(bad(
                    &format!("ops[{i}].op"),
                    format!("unknown op '{}' (known: {})", op.op, known.join(", ")),
                ));
            }
            if !seen.insert(op.op.clone()) {
                return Err(bad(&field, "listed twice".into()));
            }
            if op.precisions.is_empty() {
                return Err(bad(&format!("{field}.precisions"), "lists no precision".into()));
            }
            if op.precisions.contains(&Precision::Int16) && c.macs_per_cycle.int16.is_none() {
                return Err(bad(
                    &format!("{field}.precisions"),
                    "int16 listed but compute.macs_per_cycle.int16 is None".into(),
                ));
            }
            for (j, r) in op.rules.iter().enumerate() {
                r.validate().map_err(|m| bad(&format!("{field}.rules[{j}]"), m))?;
            }
        }
        for (j, r) in self.generic_rules.iter().enumerate() {
            r.validate().map_err(|m| bad(&format!("generic_rules[{j}]"), m))?;
        }
        Ok(())
    }

    pub fn op(&self, class: &str) -> Option<&OpSupport> {
        self.ops.iter().find(|o| o.op == class)
    }

    /// How many stride-1 pieces the compiler splits op `v` into because its stride is over
    /// the op's native limit ([`Rule::StrideOrSplit`]): one per output position along each
    /// such axis; 1 when the op runs whole.
    pub fn split_pieces(&self, v: &OpView) -> usize {
        let Some(max) = self.op(&v.class).and_then(|o| {
            o.rules.iter().find_map(|r| match r {
                Rule::StrideOrSplit { max } => Some(*max),
                _ => None,
            })
        }) else {
            return 1;
        };
        let Some(s) = v.strides else { return 1 };
        (0..2)
            .filter(|&a| s[a] > max)
            .map(|a| v.output.get(2 + a).copied().unwrap_or(1).max(1))
            .product()
    }

    /// MACs per cycle at an activation precision (int16 at half the int8 rate when the
    /// target does not say).
    pub fn macs_per_cycle(&self, p: Precision) -> f64 {
        let r = &self.compute.macs_per_cycle;
        match p {
            Precision::Int8 => r.int8,
            Precision::Int16 => r.int16.unwrap_or(r.int8 / 2.0),
        }
    }

    /// Peak int8 tera-operations per second (2 ops per MAC).
    pub fn int8_tops(&self) -> f64 {
        2.0 * self.compute.macs_per_cycle.int8 * self.clock_mhz * 1e6 / 1e12
    }
}

/// Where the bundled targets are: `plugins/targets` beside the working directory when run
/// from the repository, else where the source tree was at build time.
pub fn builtin_dir() -> PathBuf {
    let local = PathBuf::from("plugins/targets");
    if local.is_dir() {
        return local;
    }
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../plugins/targets"))
}

/// Every `*.ron` target in `dir`, sorted by file name; the first bad file is the error.
pub fn load_dir(dir: &Path) -> Result<Vec<Target>, TargetError> {
    let rd = std::fs::read_dir(dir).map_err(|source| TargetError::Io {
        file: dir.display().to_string(),
        source,
    })?;
    let mut files: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "ron"))
        .collect();
    files.sort();
    let mut out: Vec<(Target, String)> = Vec::new();
    for f in files {
        let t = Target::load(&f)?;
        if let Some((_, a)) = out.iter().find(|(o, _)| o.id == t.id) {
            return Err(TargetError::Duplicate {
                id: t.id,
                a: a.clone(),
                b: f.display().to_string(),
            });
        }
        out.push((t, f.display().to_string()));
    }
    Ok(out.into_iter().map(|(t, _)| t).collect())
}

/// A target by id among the bundled ones, or from a `.ron` file path.
pub fn find(id_or_path: &str) -> Result<Target, TargetError> {
    let p = Path::new(id_or_path);
    if p.extension().is_some_and(|e| e.eq_ignore_ascii_case("ron")) || p.is_file() {
        return Target::load(p);
    }
    let all = load_dir(&builtin_dir())?;
    let known = all.iter().map(|t| t.id.clone()).collect::<Vec<_>>().join(", ");
    all.into_iter()
        .find(|t| t.id == id_or_path)
        .ok_or(TargetError::Unknown {
            id: id_or_path.to_string(),
            known,
        })
}

/// `docs/supported-ops.md`: per target, the ops it runs on the NPU, their precisions and
/// the sentence of every rule, and the ops that always run on the host.
pub fn supported_ops_markdown(targets: &[Target]) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    s.push_str("# Supported operators\n\n");
    s.push_str(
        "Generated from `plugins/targets/*.ron` by the same rule functions that place ops \
         (`npu-studio targets --markdown`); a test fails when this file is stale. An op \
         runs on the NPU when its target lists it at the op's activation precision and every \
         rule below holds; otherwise it runs on the host CPU, and the studio and `npu-studio \
         compile` show the failing rule's sentence. Ops are named as TFLite builtins; ops with \
         no integer form (float islands such as LayerNormalization) always run on the host.\n",
    );
    s.push_str(
        "\n## The op table\n\nEvery op of the integer program (`core/src/program/ops.rs`), by its op \
         code in the binary format (`docs/binary-format.md`): the TFLite builtins it is written \
         as, its inputs and what it computes. Ops named `Float…` have no integer form: they run \
         in float32 on the host between a DEQUANTIZE and a QUANTIZE.\n\n\
         | code | op | TFLite | inputs | computes |\n| --- | --- | --- | --- | --- |\n",
    );
    for (code, o) in crate::program::OPS.iter().enumerate() {
        let inputs = match (*o.inputs.start(), *o.inputs.end()) {
            (a, b) if a == b => a.to_string(),
            (a, usize::MAX) => format!("{a} or more"),
            (a, b) => format!("{a}–{b}"),
        };
        let builtins = if o.builtins.is_empty() {
            "—".to_string()
        } else {
            o.builtins.join(", ")
        };
        let _ = writeln!(s, "| {code} | {} | {builtins} | {inputs} | {} |", o.name, o.summary);
    }
    for t in targets {
        let _ = write!(
            s,
            "\n## {} (`{}`)\n\n{}\n\n{} int8 MACs/cycle at {} MHz ({:.3} TOPS), {} KiB SRAM, host: {}.\n",
            t.name,
            t.id,
            t.description,
            t.compute.macs_per_cycle.int8,
            t.clock_mhz,
            t.int8_tops(),
            t.memory.sram_bytes / 1024,
            t.host.name
        );
        if !t.generic_rules.is_empty() {
            s.push_str("\nEvery op:\n\n");
            for r in &t.generic_rules {
                let _ = writeln!(s, "- {}", r.doc());
            }
        }
        s.push_str("\n| op | precisions | constraints |\n| --- | --- | --- |\n");
        for o in &t.ops {
            let precisions: Vec<&str> = o.precisions.iter().map(|p| p.name()).collect();
            let rules: Vec<String> = o.rules.iter().map(Rule::doc).collect();
            let _ = writeln!(
                s,
                "| {} | {} | {} |",
                o.op,
                precisions.join(", "),
                if rules.is_empty() {
                    "—".to_string()
                } else {
                    rules.join("<br>")
                }
            );
        }
        let host: Vec<&str> = rules::op_classes()
            .into_iter()
            .filter(|c| !t.ops.iter().any(|o| o.op == *c))
            .collect();
        if !host.is_empty() {
            let _ = writeln!(s, "\nOn the host CPU (not listed): {}.", host.join(", "));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundled_targets_load() {
        let all = load_dir(&builtin_dir()).expect("bundled targets load");
        assert!(all.len() >= 3, "{} targets", all.len());
        assert!(all.iter().any(|t| t.id == "ethos-u55-128"));
    }

    #[test]
    fn errors_name_the_file_and_field() {
        let text = std::fs::read_to_string(builtin_dir().join("ethos-u55-128.ron")).expect("the U55 file");
        let e = Target::parse(&text.replace("clock_mhz: 500.0", "clock_mhz: -1.0"), "t.ron").expect_err("refused");
        assert_eq!(
            e.to_string(),
            "target file t.ron: field `clock_mhz`: must be a positive number, not -1"
        );
        let e = Target::parse(&text.replace("\"CONV_2D\"", "\"CONV_3D\""), "t.ron").expect_err("refused");
        assert!(e.to_string().contains("field `ops[0].op`: unknown op 'CONV_3D'"), "{e}");
        let e = Target::parse(&text.replace("sram_bytes:", "sram_size:"), "t.ron").expect_err("refused");
        assert!(e.to_string().starts_with("target file t.ron: "), "{e}");
        assert!(e.to_string().contains("`sram_size`"), "{e}");
        let e = Target::parse("", "t.ron").expect_err("refused");
        assert!(e.to_string().starts_with("target file t.ron: "), "{e}");
    }
}
