//! The Compile stage: the target picker, the compile job (legalize the current plan,
//! partition it between the target's NPU and its host, estimate every layer's cost), and
//! the placement overlay painted on the graph (NPU/CPU colour and each node's latency;
//! the reason a node runs on the CPU in its hover text and the inspector).

use super::jobs::{Job, JobError, JobProgress, take_finished};
use super::quantize::Session;
pub use super::widgets::latency;
use egui::Color32;
use npu_core::compiler::{Compiled, Options, Place};
use npu_core::ir::NodeId;
use npu_core::target::Target;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// Where one node of the open model runs, and what it costs.
#[derive(Clone, Debug, PartialEq)]
pub struct NodePlacement {
    /// CPU when any of its integer ops runs on the CPU.
    pub place: Place,
    /// Why it is on the CPU (the first op's reason), or "supported".
    pub reason: String,
    pub latency_us: f64,
    /// The segment (of the program's NPU and CPU runs) it runs in.
    pub segment: usize,
}

/// What started a compile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Trigger {
    /// The Run button (or its command).
    Click,
    /// An edit after the first compile (precision, target, override): an update.
    Edit,
    /// A model's first simulation: it adds the placement to the heatmap, and a failure
    /// only goes to the status line.
    FirstSimulation,
}

/// What a finished compile says in the status line.
pub enum Note {
    Replace(String),
    /// Added to the line already there (the compile that follows a first simulation).
    Append(String),
}

/// A finished compile.
pub struct CompileResult {
    /// The plan generation it compiled.
    pub generation: u64,
    pub target: String,
    /// The nodes it kept on the CPU by the user's choice.
    pub forced: BTreeSet<NodeId>,
    pub compiled: Arc<Compiled>,
    /// The integer program it compiled (what the binary is written from).
    pub program: Arc<npu_core::program::Program>,
    /// Node of the open model → its placement.
    pub nodes: HashMap<NodeId, NodePlacement>,
    /// How long the job took (legalize, place, cost, map to the open model).
    pub ms: f64,
    /// Compiled from the open file's own integer program (a quantized TFLite file), not
    /// from a plan.
    pub from_file: bool,
}

pub struct CompileState {
    /// The bundled targets, or why they could not be loaded.
    pub targets: Result<Vec<Target>, String>,
    /// The chosen target's id.
    pub target: String,
    pub job: Option<Job<CompileResult>>,
    pub result: Option<CompileResult>,
    /// Paint the placement on the graph (beside the quantization overlay).
    pub show_placement: bool,
    /// Nodes of the open model the user keeps on the CPU.
    pub force_cpu: BTreeSet<NodeId>,
    /// The compile report panel (latency bars, memory, roofline) is shown.
    pub report_open: bool,
    /// The placement overlay colours nodes by their share of the latency instead of by side.
    pub colour_by_latency: bool,
    /// What started the running job, and for what.
    trigger: Trigger,
    running_for: Option<Key>,
    /// The last automatic update that failed (not tried again until something changes).
    auto_failed: Option<Key>,
}

/// What a compile depends on: the plan generation, the target and the overrides.
type Key = (u64, String, BTreeSet<NodeId>);

impl Default for CompileState {
    fn default() -> Self {
        let targets = npu_core::pipeline::targets().map_err(|e| e.to_string());
        let target = match &targets {
            Ok(t) if t.iter().any(|t| t.id == "ethos-u55-128") => "ethos-u55-128".to_string(),
            Ok(t) => t.first().map(|t| t.id.clone()).unwrap_or_default(),
            Err(_) => String::new(),
        };
        Self {
            targets,
            target,
            job: None,
            result: None,
            show_placement: false,
            force_cpu: BTreeSet::new(),
            report_open: false,
            colour_by_latency: false,
            trigger: Trigger::Click,
            running_for: None,
            auto_failed: None,
        }
    }
}

impl CompileState {
    /// A new model: its compile and overrides go (the target stays).
    pub fn reset(&mut self) {
        self.cancel();
        self.job = None;
        self.result = None;
        self.show_placement = false;
        self.report_open = false;
        self.force_cpu.clear();
    }

    /// A project's choices: its target (when bundled) and the nodes it keeps on the CPU.
    pub fn apply_choice(&mut self, c: &super::project::CompileChoice, model: &npu_core::ir::Model) {
        if let (Some(t), Ok(all)) = (&c.target, &self.targets)
            && all.iter().any(|x| &x.id == t)
        {
            self.target.clone_from(t);
        }
        self.force_cpu = model
            .graph
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| c.force_cpu.contains(&n.name))
            .map(|(i, _)| i)
            .collect();
    }

    pub fn busy(&self) -> bool {
        self.job.is_some()
    }

    pub fn progress(&self) -> Option<&JobProgress> {
        self.job.as_ref().map(|j| &*j.progress)
    }

    /// The chosen target.
    pub fn chosen(&self) -> Option<&Target> {
        self.targets.as_ref().ok()?.iter().find(|t| t.id == self.target)
    }

    fn key(&self, session: &Session) -> Option<Key> {
        let g = session.result.as_ref()?.generation;
        Some((g, self.target.clone(), self.force_cpu.clone()))
    }

    /// Whether an edit (precision, target, override) since the last compile asks for an
    /// update: compiles stay current as the user changes the plan, without a click.
    /// Checked every frame: compares in place, nothing cloned.
    pub fn wants_update(&self, session: &Session) -> bool {
        let (Some(r), None, Some(g)) = (&self.result, &self.job, session.result.as_ref().map(|r| r.generation)) else {
            return false;
        };
        let now = (g, &self.target, &self.force_cpu);
        now != (r.generation, &r.target, &r.forced)
            && self
                .auto_failed
                .as_ref()
                .is_none_or(|(fg, ft, ff)| now != (*fg, ft, ff))
    }

    /// Starts an update after an edit.
    pub fn update(&mut self, session: &Session, ctx: Option<&egui::Context>) {
        if self.start(session, ctx).is_ok() {
            self.trigger = Trigger::Edit;
        } else {
            self.auto_failed = self.key(session);
        }
    }

    /// After a model's first simulation: compiles for the chosen target unless a compile
    /// exists or runs, so the placement and the latency come with the SQNR heatmap.
    pub fn follow_first_simulation(&mut self, session: &Session, ctx: Option<&egui::Context>) {
        if self.result.is_some() || self.job.is_some() {
            return;
        }
        if self.start(session, ctx).is_ok() {
            self.trigger = Trigger::FirstSimulation;
        }
    }

    /// Starts compiling the session's current plan for the chosen target.
    pub fn start(&mut self, session: &Session, ctx: Option<&egui::Context>) -> Result<(), String> {
        self.trigger = Trigger::Click;
        self.running_for = self.key(session);
        let target = self.chosen().cloned().ok_or_else(|| match &self.targets {
            Err(e) => e.clone(),
            Ok(_) => format!("no target '{}'", self.target),
        })?;
        let (Some(m), Some(r)) = (&session.mapping, &session.result) else {
            return Err("nothing to compile yet: the simulation has not finished".into());
        };
        let (mapping, plan, generation) = (m.clone(), r.plan.clone(), r.generation);
        let forced = self.force_cpu.clone();
        self.job = Some(Job::spawn("compile", ctx, move |p| {
            let t0 = std::time::Instant::now();
            p.set(0.1, "legalizing the plan");
            let program = npu_core::pipeline::legalize(&mapping.optimized, &plan, &HashMap::new())
                .map_err(|e| JobError::Failed(format!("Compile failed: {e}")))?;
            p.check()?;
            p.set(0.6, &format!("placing and costing {} ops", program.ops.len()));
            // The optimized nodes made from a forced node stay on the CPU.
            let options = Options {
                force_cpu: mapping
                    .optimized
                    .graph
                    .nodes
                    .iter()
                    .filter(|n| n.origin.iter().any(|o| forced.contains(o)))
                    .map(|n| n.name.clone())
                    .collect(),
            };
            let compiled = npu_core::pipeline::compile(&program, &target, &options);
            // Optimized node name → nodes of the open model it came from.
            let mut origin: HashMap<&str, &[NodeId]> = HashMap::new();
            for n in &mapping.optimized.graph.nodes {
                origin.insert(n.name.as_str(), &n.origin);
            }
            let nodes = place_nodes(&compiled, &origin);
            Ok(CompileResult {
                generation,
                target: target.id.clone(),
                forced,
                compiled: Arc::new(compiled),
                program: Arc::new(program),
                nodes,
                ms: t0.elapsed().as_secs_f64() * 1e3,
                from_file: false,
            })
        }));
        Ok(())
    }

    /// Starts compiling the open file's own integer program (a quantized TFLite file): no
    /// plan, no calibration; its ops map to the cards of the file's graph by name.
    pub fn start_file(
        &mut self,
        model: &Arc<npu_core::ir::Model>,
        program: &Arc<npu_core::program::Program>,
        ctx: Option<&egui::Context>,
    ) -> Result<(), String> {
        self.trigger = Trigger::Click;
        self.running_for = Some((FILE_GENERATION, self.target.clone(), self.force_cpu.clone()));
        let target = self.chosen().cloned().ok_or_else(|| match &self.targets {
            Err(e) => e.clone(),
            Ok(_) => format!("no target '{}'", self.target),
        })?;
        let (model, program, forced) = (model.clone(), program.clone(), self.force_cpu.clone());
        self.job = Some(Job::spawn("compile", ctx, move |p| {
            let t0 = std::time::Instant::now();
            p.set(0.3, &format!("placing and costing {} ops", program.ops.len()));
            let origin = file_origin(&model);
            let options = Options {
                force_cpu: program
                    .ops
                    .iter()
                    .filter(|op| {
                        origin
                            .get(base_name(&op.node))
                            .is_some_and(|ns| ns.iter().any(|n| forced.contains(n)))
                    })
                    .map(|op| op.node.clone())
                    .collect(),
            };
            let compiled = npu_core::pipeline::compile(&program, &target, &options);
            p.check()?;
            let origin: HashMap<&str, &[NodeId]> = compiled
                .placements
                .iter()
                .filter_map(|pl| Some((pl.node.as_str(), origin.get(base_name(&pl.node))?.as_slice())))
                .collect();
            let nodes = place_nodes(&compiled, &origin);
            Ok(CompileResult {
                generation: FILE_GENERATION,
                target: target.id.clone(),
                forced,
                compiled: Arc::new(compiled),
                program,
                nodes,
                ms: t0.elapsed().as_secs_f64() * 1e3,
                from_file: true,
            })
        }));
        Ok(())
    }

    /// Whether a compile of the file's own program is behind the chosen target or
    /// overrides (and no update failed on them already).
    pub fn file_wants_update(&self) -> bool {
        let Some(r) = self.result.as_ref().filter(|r| r.from_file) else {
            return false;
        };
        let now = (FILE_GENERATION, self.target.clone(), self.force_cpu.clone());
        self.job.is_none() && (r.target != now.1 || r.forced != now.2) && self.auto_failed.as_ref() != Some(&now)
    }

    /// Compiles the file's own program again after a change of target or overrides.
    pub fn update_file(
        &mut self,
        model: &Arc<npu_core::ir::Model>,
        program: &Arc<npu_core::program::Program>,
        ctx: Option<&egui::Context>,
    ) {
        if self.start_file(model, program, ctx).is_ok() {
            self.trigger = Trigger::Edit;
        } else {
            self.auto_failed = Some((FILE_GENERATION, self.target.clone(), self.force_cpu.clone()));
        }
    }

    /// Takes the finished job: the status line (or what to add to it), or an error.
    pub fn poll(&mut self) -> Option<Result<Note, String>> {
        let r = take_finished(&mut self.job)?;
        let (trigger, key) = (
            std::mem::replace(&mut self.trigger, Trigger::Click),
            self.running_for.take(),
        );
        let (auto, first) = (trigger == Trigger::Edit, trigger == Trigger::FirstSimulation);
        match r {
            Ok(r) => {
                let line = format!(
                    "{} {} (in {:.0} ms)",
                    if auto { "Compile updated:" } else { "Compiled for" },
                    r.compiled.summary(),
                    r.ms
                );
                let t = &r.compiled.totals;
                let short = format!(
                    "compiled for {}: {}/{} ops on the NPU, {}",
                    r.target,
                    t.ops_on_npu,
                    t.ops_total,
                    latency(t.latency_ms * 1e3)
                );
                self.result = Some(r);
                if !auto {
                    self.show_placement = true;
                    // The compile that follows a first simulation adds the placement to
                    // the heatmap and leaves the layout as it is (the report is a click).
                    self.report_open |= !first;
                }
                Some(Ok(if first {
                    Note::Append(short)
                } else {
                    Note::Replace(line)
                }))
            }
            Err(JobError::Cancelled) => Some(Ok(Note::Replace("Compile cancelled".into()))),
            // An update after an edit says why in the status line and leaves the last
            // compile, marked stale.
            Err(JobError::Failed(e)) if auto => {
                self.auto_failed = key;
                Some(Ok(Note::Replace(format!("Compile not updated: {e}"))))
            }
            Err(JobError::Failed(e)) if first => {
                self.auto_failed = key;
                Some(Ok(Note::Append(format!("not compiled for {}: {e}", self.target))))
            }
            Err(JobError::Failed(e)) => Some(Err(e)),
        }
    }

    pub fn cancel(&mut self) {
        if let Some(j) = &self.job {
            j.cancel();
        }
    }

    /// The inspector's placement line for a selected node of the open model.
    pub fn placement_line(
        &self,
        selection: Option<super::commands::Selection>,
        c: &super::theme::QuantColours,
    ) -> Option<(Color32, String)> {
        let super::commands::Selection::Node(n) = selection? else {
            return None;
        };
        let r = self.result.as_ref()?;
        let p = r.nodes.get(&n)?;
        Some(match p.place {
            Place::Npu => (c.npu, format!("NPU of {}, {}", r.target, latency(p.latency_us))),
            Place::Cpu => (
                c.cpu,
                format!("CPU ({}), {}: {}", r.target, latency(p.latency_us), p.reason),
            ),
        })
    }

    /// Colour and badge of every placed node, when the overlay is on.
    pub fn card_marks(&self, c: &super::theme::QuantColours) -> HashMap<NodeId, (Color32, String)> {
        let Some(r) = self.result.as_ref().filter(|_| self.show_placement) else {
            return HashMap::new();
        };
        let total = r.compiled.totals.latency_ms * 1e3;
        let max = r.nodes.values().map(|p| p.latency_us).fold(0.0, f64::max);
        r.nodes
            .iter()
            .map(|(&n, p)| {
                let (colour, side) = match p.place {
                    Place::Npu => (c.npu, "NPU"),
                    Place::Cpu => (c.cpu, "CPU"),
                };
                if self.colour_by_latency {
                    return (
                        n,
                        (
                            latency_heat(c, p.latency_us, max),
                            latency_badge(p.latency_us, total, side),
                        ),
                    );
                }
                // With more than one segment, each badge names its segment (#k).
                let side = if r.compiled.segments.len() > 1 {
                    format!("{side} #{}", p.segment)
                } else {
                    side.to_string()
                };
                let badge = if p.latency_us > 0.0 {
                    format!("{side} {}", latency(p.latency_us))
                } else {
                    side
                };
                (n, (colour, badge))
            })
            .collect()
    }
}

/// Green for nodes that cost little, through yellow, to red for the slowest node (on a
/// log scale over three decades below it).
pub fn latency_heat(c: &super::theme::QuantColours, us: f64, max: f64) -> Color32 {
    if us <= 0.0 || max <= 0.0 {
        return c.high;
    }
    let t = (1.0 + (us / max).log10() / 3.0).clamp(0.0, 1.0) as f32;
    if t < 0.5 {
        c.high.lerp_to_gamma(c.mid, t * 2.0)
    } else {
        c.mid.lerp_to_gamma(c.low, (t - 0.5) * 2.0)
    }
}

/// `NPU 1.25 ms · 12%`.
fn latency_badge(us: f64, total: f64, side: &str) -> String {
    if us <= 0.0 {
        return side.to_string();
    }
    let share = if total > 0.0 { 100.0 * us / total } else { 0.0 };
    if share >= 1.0 {
        format!("{side} {} · {share:.0}%", latency(us))
    } else {
        format!("{side} {} · <1%", latency(us))
    }
}

/// Writes the compiled binary of `r` to `path` atomically; the status line.
pub fn write_binary(r: &CompileResult, path: &std::path::Path) -> Result<String, String> {
    let bytes = npu_core::pipeline::write_binary(&r.program, &r.compiled);
    npu_core::export::write_atomic(path, &bytes).map_err(|e| format!("Could not write {}: {e}", path.display()))?;
    let h = r.compiled.headline();
    Ok(format!(
        "Wrote {} ({} KiB for {}): {} NPU commands, {} host ops",
        path.display(),
        bytes.len().div_ceil(1024),
        r.target,
        h.commands,
        h.host_ops
    ))
}

/// The compile report panel: the summary, per-layer latency bars (NPU and CPU), the
/// activation memory over the schedule against the SRAM, and the layers on the roofline.
pub fn panel_ui(
    ui: &mut egui::Ui,
    c: &CompileState,
    theme: &super::theme::Theme,
    out: &mut Vec<super::commands::Command>,
) {
    use super::plots;
    use egui_plot::{Bar, BarChart, HLine, Line, Points};
    let Some(r) = &c.result else { return };
    let k = &r.compiled;
    let colours = &theme.quant;
    ui.horizontal(|ui| {
        ui.strong("Compile report");
        if ui.small_button("Close report").clicked() {
            out.push(super::commands::Command::ShowCompileReport(false));
        }
        ui.add(egui::Label::new(k.summary()).truncate())
            .on_hover_text(k.summary());
    });
    ui.columns(3, |cols| {
        let [a, b, c3] = cols else { return };
        {
            let ui = a;
            ui.label("Latency per op (µs)")
                .on_hover_text("In schedule order; NPU blue, CPU orange");
            let (mut npu, mut cpu): (Vec<Bar>, Vec<Bar>) = (Vec::new(), Vec::new());
            for (i, l) in k.layers.iter().enumerate() {
                let bar = Bar::new(i as f64, l.latency_us)
                    .name(format!("{} {}", l.node, l.op))
                    .width(0.9);
                match l.place {
                    Place::Npu => npu.push(bar),
                    Place::Cpu => cpu.push(bar),
                }
            }
            plots::fixed("compile_latency", 130.0)
                .x_axis_label("op")
                .y_axis_label("µs")
                .show(ui, |p| {
                    p.bar_chart(BarChart::new("NPU", npu).color(colours.npu));
                    p.bar_chart(BarChart::new("CPU", cpu).color(colours.cpu));
                });
        }
        {
            let ui = b;
            ui.label(format!(
                "Activations alive: peak {} KiB, arena {} KiB",
                k.memory.peak_bytes / 1024,
                k.memory.arena.size / 1024
            ))
            .on_hover_text(format!("The target's SRAM: {} KiB", k.totals.sram_bytes / 1024));
            // The SRAM line only where it is in the picture.
            let sram = (k.memory.arena.size * 4 >= k.totals.sram_bytes).then_some(k.totals.sram_bytes as f64 / 1024.0);
            let pts: Vec<[f64; 2]> = k
                .memory
                .occupancy
                .iter()
                .enumerate()
                .map(|(i, &b)| [i as f64, b as f64 / 1024.0])
                .collect();
            plots::fixed("compile_memory", 130.0)
                .x_axis_label("op")
                .y_axis_label("KiB")
                .show(ui, |p| {
                    p.line(Line::new("alive", pts).color(colours.npu));
                    if let Some(s) = sram {
                        p.hline(HLine::new("SRAM", s).color(colours.low));
                    }
                });
        }
        {
            let ui = c3;
            let Some(t) = c
                .targets
                .as_ref()
                .ok()
                .and_then(|all| all.iter().find(|t| t.id == r.target))
            else {
                return;
            };
            ui.label("Roofline").on_hover_text(
                "Each NPU layer with MACs: MACs per cycle against log10 MACs per byte; the line is the \
                 peak int8 rate and the SRAM bandwidth roof",
            );
            let peak = t.compute.macs_per_cycle.int8;
            let bw = t.memory.sram_bytes_per_cycle;
            let layers: Vec<[f64; 2]> = k
                .layers
                .iter()
                .filter(|l| l.place == Place::Npu && l.macs > 0 && l.cycles > 0.0)
                .map(|l| {
                    let bytes = (l.sram_bytes + l.offchip_bytes).max(1) as f64;
                    [(l.macs as f64 / bytes).log10(), l.macs as f64 / l.cycles]
                })
                .collect();
            let roof: Vec<[f64; 2]> = (-20..=40)
                .map(|i| {
                    let x = f64::from(i) / 10.0;
                    [x, (bw * 10f64.powf(x)).min(peak)]
                })
                .collect();
            plots::fixed("compile_roofline", 130.0)
                .x_axis_label("log10 MACs/byte")
                .y_axis_label("MACs/cycle")
                .show(ui, |p| {
                    p.line(Line::new("roof", roof).color(colours.float));
                    p.points(Points::new("layers", layers).radius(2.5).color(colours.npu));
                });
        }
    });
}

/// The generation a compile of the file's own program carries (it has no plan edits).
pub const FILE_GENERATION: u64 = u64::MAX;

/// A tensor name of an imported TFLite graph without the suffix the importer adds to the
/// nodes around the file's tensor (`:f` before a quantizer, `:pre` before an activation,
/// `:q` the quantizer, `:nchw`/`:nhwc` a layout change).
pub fn base_name(mut name: &str) -> &str {
    // A fused activation's op is `X:f:pre`.
    while let Some(b) = [":f", ":pre", ":q", ":nchw", ":nhwc"]
        .iter()
        .find_map(|s| name.strip_suffix(s))
    {
        name = b;
    }
    name
}

/// The open model's nodes by the file tensor they make: what an op of the file's own
/// integer program (named after its output tensor) is drawn on.
pub fn file_origin(model: &npu_core::ir::Model) -> HashMap<String, Vec<NodeId>> {
    let mut map: HashMap<String, Vec<NodeId>> = HashMap::new();
    for (i, n) in model.graph.nodes.iter().enumerate() {
        map.entry(base_name(&n.name).to_owned()).or_default().push(i);
    }
    map
}

/// Each node of the open model's placement, from the ops made of it (`origin`: op name →
/// the nodes it came from). A fused op's time is counted once, on its first node.
fn place_nodes(compiled: &Compiled, origin: &HashMap<&str, &[NodeId]>) -> HashMap<NodeId, NodePlacement> {
    let mut nodes: HashMap<NodeId, NodePlacement> = HashMap::new();
    for (pl, l) in compiled.placements.iter().zip(&compiled.layers) {
        let from = origin.get(pl.node.as_str()).copied().unwrap_or_default();
        let first = from.iter().min().copied();
        for &o in from {
            let e = nodes.entry(o).or_insert(NodePlacement {
                place: Place::Npu,
                reason: "supported".into(),
                latency_us: 0.0,
                segment: pl.segment,
            });
            if Some(o) == first {
                e.latency_us += l.latency_us;
            }
            if pl.place == Place::Cpu && e.place == Place::Npu {
                e.place = Place::Cpu;
                e.segment = pl.segment;
                e.reason = format!("{}: {}", pl.op, pl.reason);
            }
        }
    }
    nodes
}
