//! Export of the current view: SVG written from the scene, PNG from a screenshot of the
//! canvas. Files are written atomically (temporary file, then rename) by a background job.

use super::theme::Theme;
use crate::graph::doc::{CARD_HEADER, CARD_LINE, CARD_PAD, GraphDoc};
use crate::graph::scene::{BoxKind, FRAME_HEADER, Scene};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, channel};

use npu_core::report::esc;

fn fill(c: egui::Color32) -> String {
    let (hex, a) = Theme::svg(c);
    format!("fill=\"{hex}\" fill-opacity=\"{a:.3}\"")
}

fn stroke(c: egui::Color32, w: f32) -> String {
    let (hex, a) = Theme::svg(c);
    format!("fill=\"none\" stroke=\"{hex}\" stroke-opacity=\"{a:.3}\" stroke-width=\"{w}\"")
}

/// The part of the scene inside `view` (graph units) as a standalone SVG document.
pub fn svg(doc: &GraphDoc, scene: &Scene, view: egui::Rect, theme: &Theme) -> String {
    let view = if view.is_finite() && view.area() > 0.0 {
        view
    } else {
        scene.bounds
    };
    let o = view.min;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w:.0}\" height=\"{h:.0}\" viewBox=\"0 0 {w:.1} {h:.1}\" font-family=\"sans-serif\">",
        w = view.width(),
        h = view.height()
    );
    let _ = writeln!(s, "<rect width=\"100%\" height=\"100%\" {}/>", fill(theme.canvas));
    let p = |q: egui::Pos2| (q.x - o.x, q.y - o.y);
    for b in &scene.boxes {
        if let BoxKind::Frame(sc) = b.kind
            && b.rect.intersects(view)
        {
            let (x, y) = p(b.rect.min);
            let _ = writeln!(
                s,
                "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{:.1}\" rx=\"6\" {} {}/>",
                b.rect.width(),
                b.rect.height(),
                fill(theme.frame_fill),
                stroke(theme.frame_stroke, 1.0).replace("fill=\"none\" ", "")
            );
            let _ = writeln!(
                s,
                "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" {}>{}</text>",
                x + 6.0,
                y + FRAME_HEADER / 2.0 + 4.0,
                fill(theme.text_weak),
                esc(&doc.scopes[sc].name)
            );
        }
    }
    for e in &scene.edges {
        if !e.bbox.intersects(view) {
            continue;
        }
        let mut d = String::new();
        let (x0, y0) = p(e.points[0]);
        let _ = write!(d, "M{x0:.1},{y0:.1}");
        for w in e.points.windows(2) {
            let (a, b) = (p(w[0]), p(w[1]));
            let dy = (b.1 - a.1) / 2.0;
            let _ = write!(
                d,
                " C{:.1},{:.1} {:.1},{:.1} {:.1},{:.1}",
                a.0,
                a.1 + dy,
                b.0,
                b.1 - dy,
                b.0,
                b.1
            );
        }
        let _ = writeln!(s, "<path d=\"{d}\" {}/>", stroke(theme.edge, 1.2));
        let n = e.points.len();
        let (tx, ty) = p(e.points[n - 1]);
        let dir = if e.points[n - 2].y <= e.points[n - 1].y {
            1.0
        } else {
            -1.0
        };
        let _ = writeln!(
            s,
            "<polygon points=\"{tx:.1},{ty:.1} {:.1},{:.1} {:.1},{:.1}\" {}/>",
            tx - 5.0,
            ty - 8.0 * dir,
            tx + 5.0,
            ty - 8.0 * dir,
            fill(theme.edge)
        );
    }
    for b in &scene.boxes {
        if !b.rect.intersects(view) {
            continue;
        }
        let (x, y) = p(b.rect.min);
        let (w, h) = (b.rect.width(), b.rect.height());
        match b.kind {
            BoxKind::Item(i) => {
                let item = &doc.items[i];
                let _ = writeln!(
                    s,
                    "<g><rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{h:.1}\" rx=\"4\" {} stroke=\"{}\"/>",
                    fill(theme.card_fill),
                    Theme::svg(theme.card_stroke).0
                );
                let _ = writeln!(
                    s,
                    "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{CARD_HEADER}\" rx=\"4\" {}/>",
                    fill(theme.family(item.family))
                );
                let _ = writeln!(
                    s,
                    "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"13\" font-weight=\"bold\" {}>{}</text>",
                    x + CARD_PAD,
                    y + CARD_HEADER / 2.0 + 4.0,
                    fill(theme.header_text),
                    esc(&item.title)
                );
                let short = item.name.rsplit('/').next().unwrap_or(&item.name);
                let lines = std::iter::once((short, theme.text_weak)).chain(
                    item.attrs
                        .iter()
                        .chain(item.weights.iter().map(|w| &w.0))
                        .map(|l| (l.as_str(), theme.text)),
                );
                for (k, (line, c)) in lines.enumerate() {
                    let _ = writeln!(
                        s,
                        "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11.5\" {}>{}</text>",
                        x + CARD_PAD,
                        y + CARD_HEADER + CARD_LINE * (k as f32 + 0.5) + 4.5,
                        fill(c),
                        esc(line)
                    );
                }
                s.push_str("</g>\n");
            }
            BoxKind::Collapsed(sc) => {
                let scope = &doc.scopes[sc];
                let _ = writeln!(
                    s,
                    "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{h:.1}\" rx=\"6\" {} stroke=\"{}\"/>",
                    fill(theme.collapsed_fill),
                    Theme::svg(theme.frame_stroke).0
                );
                let _ = writeln!(
                    s,
                    "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"12\" text-anchor=\"middle\" {}>{}</text>",
                    x + w / 2.0,
                    y + 18.0,
                    fill(theme.text),
                    esc(&scope.name)
                );
                let _ = writeln!(
                    s,
                    "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\" text-anchor=\"middle\" {}>{} nodes</text>",
                    x + w / 2.0,
                    y + 35.0,
                    fill(theme.text_weak),
                    scope.total_items
                );
            }
            BoxKind::Frame(_) => {}
        }
    }
    s.push_str("</svg>\n");
    s
}

/// A PNG export waiting for its screenshot (the studio then writes it as a background job).
#[derive(Default)]
pub struct ExportState {
    waiting: Option<(Receiver<Arc<egui::ColorImage>>, PathBuf, egui::Rect, f32)>,
}

/// A screenshot that came, with where its canvas part goes.
pub struct Shot {
    pub image: Arc<egui::ColorImage>,
    pub path: PathBuf,
    /// The canvas rectangle (points) and the points-to-pixels factor.
    pub rect: egui::Rect,
    pub pixels_per_point: f32,
}

impl Shot {
    /// Encodes the canvas part and writes it atomically; says where it went.
    pub fn write(&self) -> Result<String, String> {
        png_bytes(&self.image, self.rect, self.pixels_per_point)
            .map_err(|e| format!("{}: {e}", self.path.display()))
            .and_then(|b| npu_core::export::write_atomic(&self.path, &b).map_err(|e| e.to_string()))
            .map_err(|e| format!("Could not write the view: {e}"))?;
        Ok(format!("Exported the view to {}", self.path.display()))
    }
}

/// Writes an SVG document atomically; says where it went.
pub fn write_svg(path: &std::path::Path, svg: &str) -> Result<String, String> {
    npu_core::export::write_atomic(path, svg.as_bytes()).map_err(|e| format!("Could not write the view: {e}"))?;
    Ok(format!("Exported the view to {}", path.display()))
}

impl ExportState {
    pub fn pending(&self) -> bool {
        self.waiting.is_some()
    }

    /// Asks for a screenshot; `poll` hands it over once it comes.
    pub fn request_png(&mut self, ctx: &egui::Context, path: PathBuf, canvas: egui::Rect) {
        let (tx, rx) = channel();
        ctx.request_screenshot(move |img| {
            let _ = tx.send(img);
        });
        self.waiting = Some((rx, path, canvas, ctx.pixels_per_point()));
    }

    /// The screenshot, once it came.
    pub fn poll(&mut self) -> Option<Shot> {
        let image = self.waiting.as_ref()?.0.try_recv().ok()?;
        let (_, path, rect, pixels_per_point) = self.waiting.take()?;
        Some(Shot {
            image,
            path,
            rect,
            pixels_per_point,
        })
    }
}

/// The canvas part of a screenshot, PNG-encoded.
pub fn png_bytes(img: &egui::ColorImage, rect: egui::Rect, ppp: f32) -> Result<Vec<u8>, String> {
    let [w, h] = img.size;
    let x0 = ((rect.min.x * ppp).max(0.0) as usize).min(w);
    let y0 = ((rect.min.y * ppp).max(0.0) as usize).min(h);
    let x1 = ((rect.max.x * ppp) as usize).clamp(x0, w);
    let y1 = ((rect.max.y * ppp) as usize).clamp(y0, h);
    let mut buf = image::RgbaImage::new((x1 - x0) as u32, (y1 - y0) as u32);
    for y in y0..y1 {
        for x in x0..x1 {
            let c = img.pixels[y * w + x];
            buf.put_pixel((x - x0) as u32, (y - y0) as u32, image::Rgba(c.to_srgba_unmultiplied()));
        }
    }
    let mut out = std::io::Cursor::new(Vec::new());
    buf.write_to(&mut out, image::ImageFormat::Png)
        .map_err(|e| e.to_string())?;
    Ok(out.into_inner())
}
