//! The one place colours live: light and dark themes for the graph and the panels.
//! `clippy.toml` forbids building colours anywhere else.
#![expect(clippy::disallowed_methods, reason = "the theme is where colours are made")]

use crate::graph::doc::Family;
use egui::Color32;

/// Colours of the studio.
#[derive(Clone, Debug)]
pub struct Theme {
    pub dark: bool,
    pub canvas: Color32,
    pub card_fill: Color32,
    pub card_stroke: Color32,
    pub text: Color32,
    pub text_weak: Color32,
    pub header_text: Color32,
    pub edge: Color32,
    pub edge_label: Color32,
    pub selected: Color32,
    pub search_hit: Color32,
    pub frame_fill: Color32,
    pub frame_stroke: Color32,
    pub collapsed_fill: Color32,
    pub minimap_fill: Color32,
    pub minimap_cell: Color32,
    pub minimap_view: Color32,
    pub error: Color32,
    pub drop_overlay: Color32,
    /// Optimizer view: nodes a rewrite removed, nodes it made or rewrote, and the nodes
    /// linked (through origin ids) to the selection in the other pane.
    pub removed: Color32,
    pub removed_fade: Color32,
    pub rewritten: Color32,
    pub linked: Color32,
    /// Quantization overlays.
    pub quant: QuantColours,
    families: [Color32; 10],
}

/// Heatmap and precision-map colours (the same in both themes: they sit on the cards).
#[derive(Clone, Copy, Debug)]
pub struct QuantColours {
    /// SQNR at or below the red threshold, half-way, at or above the green one.
    pub low: Color32,
    pub mid: Color32,
    pub high: Color32,
    pub int8: Color32,
    pub int16: Color32,
    pub fp16: Color32,
    pub int4: Color32,
    pub float: Color32,
    pub badge_text: Color32,
    /// The placement overlay: ops on the NPU, ops on the host CPU.
    pub npu: Color32,
    pub cpu: Color32,
}

const QUANT: QuantColours = QuantColours {
    low: rgb(215, 48, 39),
    mid: rgb(240, 200, 40),
    high: rgb(40, 170, 80),
    int8: rgb(50, 110, 210),
    int16: rgb(140, 80, 200),
    fp16: rgb(230, 130, 30),
    int4: rgb(20, 160, 160),
    float: rgb(130, 130, 130),
    badge_text: rgb(0, 0, 0),
    npu: rgb(46, 134, 222),
    cpu: rgb(230, 126, 34),
};

const fn rgb(r: u8, g: u8, b: u8) -> Color32 {
    Color32::from_rgb(r, g, b)
}

impl Theme {
    pub fn light() -> Self {
        Self {
            dark: false,
            canvas: rgb(248, 249, 251),
            card_fill: rgb(255, 255, 255),
            card_stroke: rgb(150, 156, 166),
            text: rgb(28, 30, 34),
            text_weak: rgb(96, 102, 112),
            header_text: rgb(255, 255, 255),
            edge: rgb(112, 118, 128),
            edge_label: rgb(88, 94, 104),
            selected: rgb(255, 140, 0),
            search_hit: rgb(214, 40, 120),
            frame_fill: Color32::from_rgba_unmultiplied(90, 110, 160, 14),
            frame_stroke: rgb(150, 165, 200),
            collapsed_fill: rgb(226, 232, 246),
            minimap_fill: Color32::from_rgba_unmultiplied(255, 255, 255, 230),
            minimap_cell: rgb(150, 160, 180),
            minimap_view: rgb(255, 140, 0),
            error: rgb(200, 30, 30),
            drop_overlay: Color32::from_rgba_unmultiplied(60, 120, 220, 60),
            removed: rgb(210, 40, 40),
            removed_fade: Color32::from_rgba_unmultiplied(248, 249, 251, 150),
            rewritten: rgb(20, 150, 80),
            linked: rgb(30, 110, 230),
            quant: QUANT,
            families: [
                rgb(51, 102, 170),  // conv / matmul
                rgb(180, 60, 50),   // activation
                rgb(60, 130, 90),   // normalization
                rgb(40, 140, 150),  // pooling / resize
                rgb(110, 110, 120), // tensor shape
                rgb(150, 100, 40),  // element-wise math
                rgb(140, 70, 160),  // quantization
                rgb(200, 120, 20),  // control flow
                rgb(70, 70, 80),    // graph input / output
                rgb(120, 90, 90),   // other
            ],
        }
    }

    pub fn dark() -> Self {
        Self {
            dark: true,
            canvas: rgb(24, 26, 30),
            card_fill: rgb(40, 43, 50),
            card_stroke: rgb(84, 90, 102),
            text: rgb(222, 226, 232),
            text_weak: rgb(150, 156, 168),
            header_text: rgb(255, 255, 255),
            edge: rgb(130, 138, 150),
            edge_label: rgb(160, 166, 178),
            selected: rgb(255, 165, 40),
            search_hit: rgb(240, 80, 160),
            frame_fill: Color32::from_rgba_unmultiplied(120, 140, 200, 16),
            frame_stroke: rgb(80, 95, 130),
            collapsed_fill: rgb(48, 56, 76),
            minimap_fill: Color32::from_rgba_unmultiplied(30, 32, 38, 230),
            minimap_cell: rgb(110, 120, 140),
            minimap_view: rgb(255, 165, 40),
            error: rgb(255, 100, 100),
            drop_overlay: Color32::from_rgba_unmultiplied(60, 120, 220, 70),
            removed: rgb(240, 90, 80),
            removed_fade: Color32::from_rgba_unmultiplied(24, 26, 30, 160),
            rewritten: rgb(70, 200, 120),
            linked: rgb(90, 160, 255),
            quant: QUANT,
            families: [
                rgb(66, 120, 200),
                rgb(200, 80, 70),
                rgb(70, 150, 105),
                rgb(50, 160, 170),
                rgb(105, 108, 120),
                rgb(170, 120, 50),
                rgb(160, 90, 185),
                rgb(215, 140, 40),
                rgb(90, 92, 105),
                rgb(140, 105, 105),
            ],
        }
    }

    pub fn new(dark: bool) -> Self {
        if dark { Self::dark() } else { Self::light() }
    }

    /// Header colour of a card of this family.
    pub fn family(&self, f: Family) -> Color32 {
        let i = Family::ALL
            .iter()
            .position(|&x| x == f)
            .unwrap_or(Family::ALL.len() - 1);
        self.families[i]
    }

    /// Sets egui's own widgets to match.
    pub fn apply(&self, ctx: &egui::Context) {
        let mut visuals = if self.dark {
            egui::Visuals::dark()
        } else {
            egui::Visuals::light()
        };
        visuals.selection.bg_fill = self.selected.gamma_multiply(0.6);
        visuals.hyperlink_color = self.families[0];
        visuals.error_fg_color = self.error;
        ctx.set_visuals(visuals);
    }

    /// Lets the proportional font fall back to the bundled monospace one, which has the
    /// arrows and box symbols (◀ ▶ ⊞ ⊟ ⟨ ⟩) the UI uses.
    pub fn install_fonts(ctx: &egui::Context) {
        let mut fonts = egui::FontDefinitions::default();
        let mono = fonts
            .families
            .get(&egui::FontFamily::Monospace)
            .and_then(|f| f.first().cloned());
        if let (Some(mono), Some(prop)) = (mono, fonts.families.get_mut(&egui::FontFamily::Proportional))
            && !prop.contains(&mono)
        {
            prop.push(mono);
        }
        ctx.set_fonts(fonts);
    }

    /// An SVG colour string (`#rrggbb`) with its opacity.
    pub fn svg(c: Color32) -> (String, f32) {
        let [r, g, b, a] = c.to_srgba_unmultiplied();
        (format!("#{r:02x}{g:02x}{b:02x}"), f32::from(a) / 255.0)
    }
}
