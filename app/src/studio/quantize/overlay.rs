//! What the quantization view paints on the cards: local or cumulative SQNR as a heatmap
//! (red below a threshold, green above another), or each layer's precision, with a badge;
//! and the legend that explains the colours.

use super::QuantView;
use crate::studio::theme::QuantColours;
use egui::Color32;
use npu_core::ir::NodeId;
use npu_core::quant::LayerPrecision;
use std::collections::HashMap;

/// What is painted on the cards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overlay {
    Off,
    LocalSqnr,
    CumulativeSqnr,
    Precision,
    /// The emulated binary's SQNR against FP32 (the Emulate stage's).
    EmulatedSqnr,
    /// Where the simulation promises more than the binary delivers.
    Gap,
}

impl Overlay {
    pub const ALL: [Self; 6] = [
        Self::Off,
        Self::LocalSqnr,
        Self::CumulativeSqnr,
        Self::Precision,
        Self::EmulatedSqnr,
        Self::Gap,
    ];

    /// Painted from the Emulate stage's result, not the simulation's.
    pub fn emulated(self) -> bool {
        matches!(self, Self::EmulatedSqnr | Self::Gap)
    }

    pub fn label(self) -> &'static str {
        match self {
            Self::Off => "No overlay",
            Self::LocalSqnr => "Local SQNR",
            Self::CumulativeSqnr => "Cumulative SQNR",
            Self::Precision => "Precision",
            Self::EmulatedSqnr => "Emulated SQNR",
            Self::Gap => "Gap (simulated − emulated)",
        }
    }
}

/// The precisions offered for a layer, with their menu labels.
pub const PRECISIONS: [(&str, LayerPrecision); 5] = [
    ("int8", LayerPrecision::INT8),
    ("int16", LayerPrecision::INT16),
    ("fp16", LayerPrecision::FP16),
    ("int4 weights", LayerPrecision::INT4),
    ("float (CPU)", LayerPrecision::FLOAT),
];

/// The menu label of a precision (`custom` for a combination no menu offers).
pub fn precision_name(p: LayerPrecision) -> &'static str {
    PRECISIONS.iter().find(|(_, q)| *q == p).map_or("custom", |(n, _)| n)
}

/// Short badge text of a precision.
fn badge(p: LayerPrecision) -> &'static str {
    match p {
        LayerPrecision::INT8 => "i8",
        LayerPrecision::INT16 => "i16",
        LayerPrecision::FP16 => "f16",
        LayerPrecision::INT4 => "w4",
        LayerPrecision::FLOAT => "f32",
        _ => "mix",
    }
}

impl QuantView {
    /// Colour and badge of every node of the open model with a quantized output.
    /// With no overlay, only the layers whose precision was edited carry a badge.
    pub fn card_marks(&self, colours: &QuantColours) -> HashMap<NodeId, (Color32, String)> {
        let mut out = HashMap::new();
        let Some(s) = &self.session else { return out };
        if self.overlay.emulated() {
            return out;
        }
        let Some(r) = &s.result else { return out };
        for &node in s.rows.keys() {
            let Some(t) = s.row(node) else { continue };
            let p = self.precision_of(node).unwrap_or(LayerPrecision::INT8);
            if self.overlay == Overlay::Off && p == r.plan.default {
                continue;
            }
            let mark = match self.overlay {
                Overlay::LocalSqnr => (
                    self.heat(colours, t.sqnr_local_db),
                    format!("{} {}", badge(p), db(t.sqnr_local_db)),
                ),
                Overlay::CumulativeSqnr => (
                    self.heat(colours, t.sqnr_cumulative_db),
                    format!("{} {}", badge(p), db(t.sqnr_cumulative_db)),
                ),
                Overlay::Precision | Overlay::Off | Overlay::EmulatedSqnr | Overlay::Gap => {
                    (precision_colour(colours, p), badge(p).to_string())
                }
            };
            out.insert(node, mark);
        }
        out
    }

    /// Red below `red_below`, green above `green_above`, through yellow; exact is green.
    pub fn heat(&self, c: &QuantColours, sqnr: Option<f64>) -> Color32 {
        let Some(v) = sqnr else { return c.high };
        let t = ((v - self.red_below) / (self.green_above - self.red_below).max(1e-9)).clamp(0.0, 1.0) as f32;
        if t < 0.5 {
            c.low.lerp_to_gamma(c.mid, t * 2.0)
        } else {
            c.mid.lerp_to_gamma(c.high, (t - 0.5) * 2.0)
        }
    }
}

fn precision_colour(c: &QuantColours, p: LayerPrecision) -> Color32 {
    match p {
        LayerPrecision::INT16 => c.int16,
        LayerPrecision::FP16 => c.fp16,
        LayerPrecision::INT4 => c.int4,
        LayerPrecision::FLOAT => c.float,
        _ => c.int8,
    }
}

/// An SQNR as the panels show it (`exact` for an error-free tensor).
pub fn db(x: Option<f64>) -> String {
    x.map_or_else(|| "exact".into(), |v| format!("{v:.1} dB"))
}

/// The swatches that explain the current overlay's colours.
pub fn legend_ui(ui: &mut egui::Ui, q: &QuantView, c: &QuantColours) {
    ui.horizontal(|ui| {
        let swatch = |ui: &mut egui::Ui, c: Color32, text: &str| {
            let (r, _) = ui.allocate_exact_size(egui::vec2(14.0, 14.0), egui::Sense::hover());
            ui.painter().rect_filled(r, 2.0, c);
            ui.label(text);
        };
        match q.overlay {
            Overlay::Off => {
                ui.weak("badges on the layers whose precision was edited");
            }
            Overlay::Gap => {
                swatch(ui, c.low, &format!("simulation over-promises by > {:.1} dB", q.gap_db));
                swatch(ui, c.high, "within");
                ui.weak("(run the Emulate stage)");
            }
            Overlay::LocalSqnr | Overlay::CumulativeSqnr | Overlay::EmulatedSqnr => {
                swatch(ui, q.heat(c, Some(q.red_below)), &format!("≤ {:.0} dB", q.red_below));
                swatch(
                    ui,
                    q.heat(c, Some(f64::midpoint(q.red_below, q.green_above))),
                    &format!("{:.0} dB", f64::midpoint(q.red_below, q.green_above)),
                );
                swatch(
                    ui,
                    q.heat(c, Some(q.green_above)),
                    &format!("≥ {:.0} dB or exact", q.green_above),
                );
            }
            Overlay::Precision => {
                for (name, p) in PRECISIONS {
                    swatch(ui, precision_colour(c, p), name);
                }
            }
        }
    });
}
