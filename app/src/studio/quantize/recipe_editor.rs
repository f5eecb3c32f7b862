//! The recipe editor (a window): the recipe file to load or save, the preset, the ordered
//! rules (a node-name regex and/or an op type → a precision; later rules win) and the
//! per-node overrides (the current edits, each removable). Apply rules makes the rules the
//! current edits as one undoable step.

use super::QuantView;
use super::overlay::precision_name;
use crate::studio::commands::{Command, Dialog, Setup};
use crate::studio::widgets::labelled_text;
use npu_core::quant::PRESETS;
use npu_core::quant::recipe::{Recipe, Rule};
use std::path::Path;

/// The recipe window's contents. `setup` is the panel's copy of the calibration setup (the
/// preset is chosen here too).
pub fn recipe_ui(ui: &mut egui::Ui, q: &mut QuantView, setup: &mut Setup, out: &mut Vec<Command>) {
    recipe_file_ui(ui, q, out);
    ui.horizontal(|ui| {
        ui.label("Preset (recalibrate after a change):");
        egui::ComboBox::from_id_salt("recipe_preset")
            .selected_text(setup.preset.clone())
            .show_ui(ui, |ui| {
                for p in PRESETS {
                    ui.selectable_value(&mut setup.preset, p.to_string(), p);
                }
            });
    });
    ui.separator();
    let mut rules = q.rules.clone();
    rules_ui(ui, q, &mut rules, out);
    if rules != q.rules {
        out.push(Command::SetRules(rules));
    }
    ui.separator();
    overrides_ui(ui, q, out);
}

fn rules_ui(ui: &mut egui::Ui, q: &QuantView, rules: &mut Vec<Rule>, out: &mut Vec<Command>) {
    ui.weak(
        "Later rules win. A name pattern is a regex searched in the optimized graph's node names; op Conv also matches FusedConv.",
    );
    let mut remove = None;
    let mut swap = None;
    let n = rules.len();
    for (k, r) in rules.iter_mut().enumerate() {
        ui.horizontal(|ui| {
            ui.label(format!("{}.", k + 1));
            optional_text(ui, "name", &mut r.name, 160.0);
            optional_text(ui, "op", &mut r.op, 90.0);
            egui::ComboBox::from_id_salt(("rule_precision", k))
                .selected_text(r.precision.clone())
                .show_ui(ui, |ui| {
                    for p in ["int8", "int16", "fp16", "int4", "float"] {
                        ui.selectable_value(&mut r.precision, p.to_string(), p);
                    }
                });
            if ui.add_enabled(k > 0, egui::Button::new("Up")).clicked() {
                swap = Some(k - 1);
            }
            if ui.add_enabled(k + 1 < n, egui::Button::new("Down")).clicked() {
                swap = Some(k);
            }
            if ui.button("Remove").clicked() {
                remove = Some(k);
            }
        });
    }
    if let Some(k) = swap {
        rules.swap(k, k + 1);
    }
    if let Some(k) = remove {
        rules.remove(k);
    }
    ui.horizontal(|ui| {
        if ui.button("Add rule").clicked() {
            rules.push(Rule {
                name: None,
                op: Some("Conv".into()),
                precision: "int16".into(),
            });
        }
        let ready = q.session.as_ref().is_some_and(|s| s.result.is_some());
        if ui.add_enabled(ready, egui::Button::new("Apply rules")).clicked() {
            out.push(Command::ApplyRules);
        }
        if let Some(note) = &q.rules_note {
            ui.label(note);
        }
    });
}

/// The recipe file row: its path, Browse…, Load recipe and Save recipe.
fn recipe_file_ui(ui: &mut egui::Ui, q: &mut QuantView, out: &mut Vec<Command>) {
    ui.horizontal(|ui| {
        labelled_text(ui, "Recipe file:", &mut q.recipe_path, "recipe.ron", 240.0);
        if ui.button("Browse recipes…").clicked() {
            out.push(Command::Dialog(Dialog::RecipeFile));
        }
        if ui.button("Load recipe").clicked() {
            out.push(Command::LoadRecipe(q.recipe_path.clone().into()));
        }
        if ui.button("Save recipe").clicked() {
            out.push(Command::SaveRecipe(q.recipe_path.clone().into()));
        }
    });
}

/// The per-node overrides (the current edits), each removable.
fn overrides_ui(ui: &mut egui::Ui, q: &QuantView, out: &mut Vec<Command>) {
    let layers = &q.history.current().layers;
    egui::CollapsingHeader::new(format!("Per-node overrides ({})", layers.len()))
        .id_salt("overrides")
        .default_open(true)
        .show(ui, |ui| {
            if layers.is_empty() {
                ui.weak("none: right-click a node, or apply rules");
            }
            egui::ScrollArea::vertical().max_height(160.0).show(ui, |ui| {
                for (name, p) in layers {
                    ui.horizontal(|ui| {
                        ui.label(name);
                        ui.label(precision_name(*p));
                        if ui.small_button(format!("Remove override {name}")).clicked() {
                            out.push(Command::RemoveOverride(name.clone()));
                        }
                    });
                }
            });
        });
}

/// A labelled text field for an optional string (empty: `None`).
fn optional_text(ui: &mut egui::Ui, label: &str, value: &mut Option<String>, width: f32) {
    let mut text = value.clone().unwrap_or_default();
    let label = ui.label(label);
    if ui
        .add(egui::TextEdit::singleline(&mut text).desired_width(width))
        .labelled_by(label.id)
        .changed()
    {
        *value = (!text.is_empty()).then_some(text);
    }
}

impl QuantView {
    /// The input shapes the calibrated plan was made at (none before a calibration).
    fn calibrated_shapes(&self) -> std::collections::BTreeMap<String, Vec<usize>> {
        self.session
            .as_ref()
            .and_then(|s| s.result.as_ref())
            .map(|r| r.plan.input_shapes.clone())
            .unwrap_or_default()
    }

    /// The recipe the editor shows: the preset, the rules and the overrides.
    pub fn recipe(&self) -> Recipe {
        Recipe {
            preset: self.setup.preset.clone(),
            rules: self.rules.clone(),
            overrides: self
                .history
                .current()
                .layers
                .iter()
                .filter_map(|(n, p)| Some((n.clone(), p.keyword()?.to_string())))
                .collect(),
            equalize: self.setup.equalize,
            absorb_bias: self.setup.absorb_bias,
            refine_ranges: self.setup.refine_ranges,
            seq_mse: self.setup.seq_mse,
            smooth_quant: self.setup.smooth_quant,
            gptq: self.setup.gptq,
            ..Recipe::default()
        }
    }

    /// Applies the rules to the optimized graph: every layer gets the precision of the last
    /// rule that matches it (the preset's otherwise), as one undoable edit.
    pub fn apply_rules(&mut self) {
        let Some(m) = self.session.as_ref().and_then(|s| s.mapping.clone()) else {
            return;
        };
        let recipe = Recipe {
            preset: self.setup.preset.clone(),
            rules: self.rules.clone(),
            ..Recipe::default()
        };
        match npu_core::pipeline::resolve_recipe(&m.optimized, &recipe, &self.calibrated_shapes()) {
            Ok(r) => {
                let adjusted = if r.adjusted.is_empty() {
                    String::new()
                } else {
                    format!("; {} kept off the preset for its integer kernel", r.adjusted.len())
                };
                self.rules_note = Some(format!(
                    "applied: {} layers off the preset; nodes matched per rule: {:?}{adjusted}",
                    r.layers.len(),
                    r.matched
                ));
                self.apply_layers(r.layers);
            }
            Err(e) => self.rules_note = Some(e.to_string()),
        }
    }

    /// Reads a recipe file: its preset and rules replace the editor's, and once a plan is
    /// calibrated with its preset its rules and overrides become the edits (one undoable
    /// edit).
    pub fn load_recipe(&mut self, path: &Path) {
        let shown = path.display().to_string();
        let r = std::fs::read_to_string(path)
            .map_err(|e| format!("{shown}: {e}"))
            .and_then(|t| Recipe::parse_ron(&t).map_err(|e| format!("{shown}: not a recipe: {e}")));
        let recipe = match r {
            Ok(r) => r,
            Err(e) => {
                self.rules_note = Some(e);
                return;
            }
        };
        if recipe.preset != self.setup.preset {
            self.setup.preset.clone_from(&recipe.preset);
        }
        self.setup.equalize = recipe.equalize;
        self.setup.absorb_bias = recipe.absorb_bias;
        self.setup.refine_ranges = recipe.refine_ranges;
        self.setup.seq_mse = recipe.seq_mse;
        self.setup.smooth_quant = recipe.smooth_quant;
        self.setup.gptq = recipe.gptq;
        self.rules.clone_from(&recipe.rules);
        self.dirty = true;
        // Its layers refer to a plan calibrated with its preset.
        let calibrated = self
            .session
            .as_ref()
            .filter(|s| s.result.is_some())
            .map(|s| s.setup.preset.clone());
        if calibrated.as_deref() == Some(recipe.preset.as_str()) {
            self.pending_recipe = None;
            self.apply_recipe(&recipe);
        } else {
            self.rules_note = Some(format!(
                "loaded {} rules and {} overrides: they apply once the plan is calibrated with preset {}",
                recipe.rules.len(),
                recipe.overrides.len(),
                recipe.preset
            ));
            self.pending_recipe = Some(recipe);
        }
    }

    /// Makes a recipe's rules and overrides the current edits (one undoable edit).
    pub(super) fn apply_recipe(&mut self, recipe: &Recipe) {
        let Some(m) = self.session.as_ref().and_then(|s| s.mapping.clone()) else {
            return;
        };
        match npu_core::pipeline::resolve_recipe(&m.optimized, recipe, &self.calibrated_shapes()) {
            Ok(r) => {
                self.rules_note = Some(format!("recipe applied: {} layers off the preset", r.layers.len()));
                self.apply_layers(r.layers);
            }
            Err(e) => self.rules_note = Some(format!("{}: {e}", self.recipe_path)),
        }
    }
}
