//! The calibration form's helpers: the preprocessing spec field by field, and the first
//! sample as the calibration will see it (made off the UI thread whenever the folder or the
//! spec changes).

use super::QuantView;
use crate::studio::document::Loaded;
use crate::studio::jobs::{Job, take_finished};
use egui::Color32;
use npu_core::ir::Model;
use npu_core::quant::data::Preprocess;

/// The first preprocessed sample, as the calibration will see it.
pub struct Preview {
    /// (samples folder, preprocessing) it was made from.
    pub key: (String, String, std::path::PathBuf),
    /// An RGB (or grey) picture of the first image input, its values stretched to 0–255.
    pub image: Option<egui::ColorImage>,
    /// What it is: the file, the input's name, shape and value range, or why it failed.
    pub text: String,
    /// Every input's shape in the first sample (empty when it failed).
    pub shapes: Vec<(String, Vec<usize>)>,
}

/// Makes the preview of the first sample of `data` preprocessed with `preprocess`.
#[expect(clippy::disallowed_methods, reason = "the pixels of a picture, not UI colours")]
pub fn make_preview(model: &Model, model_path: &std::path::Path, data: &str, preprocess: &str) -> Preview {
    let key = (data.to_string(), preprocess.to_string(), model_path.to_path_buf());
    let fail = |text: String| Preview {
        key: key.clone(),
        image: None,
        text,
        shapes: Vec::new(),
    };
    let set = match npu_core::pipeline::Samples::open(data, preprocess) {
        Ok(s) => s,
        Err(e) => return fail(e.to_string()),
    };
    let pre = &set.preprocess;
    let Some(first) = set.iter(model).next() else {
        return fail(format!("{data}: no samples"));
    };
    let (label, sample) = match first {
        Ok(s) => s,
        Err(e) => return fail(e.to_string()),
    };
    let mut names: Vec<&String> = sample.keys().collect();
    names.sort();
    let shapes: Vec<(String, Vec<usize>)> = names
        .iter()
        .map(|n| ((*n).clone(), sample[*n].shape().to_vec()))
        .collect();
    let Some(name) = names.first() else {
        return fail(format!("{label}: no input"));
    };
    let t = sample[*name].to_f32();
    let shape = t.shape().to_vec();
    let flat: Vec<f32> = t.iter().copied().collect();
    let (lo, hi) = flat
        .iter()
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), &x| (a.min(x), b.max(x)));
    let file = std::path::Path::new(&label)
        .file_name()
        .map_or_else(|| label.clone(), |f| f.to_string_lossy().into_owned());
    let text = format!("{file} → {name} {shape:?}, values [{lo:.3}, {hi:.3}]");
    // [1, C, H, W] or [1, H, W, C] with C = 1 or 3.
    let (c, h, w, nhwc) = match shape.as_slice() {
        [1, c @ (1 | 3), h, w] if !pre.nhwc => (*c, *h, *w, false),
        [1, h, w, c @ (1 | 3)] => (*c, *h, *w, true),
        [1, c @ (1 | 3), h, w] => (*c, *h, *w, false),
        _ => {
            return Preview {
                key,
                image: None,
                text: format!("{text} (not an image)"),
                shapes,
            };
        }
    };
    let span = (hi - lo).max(f32::MIN_POSITIVE);
    let at = |ch: usize, y: usize, x: usize| -> u8 {
        let k = if nhwc {
            (y * w + x) * c + ch
        } else {
            (ch * h + y) * w + x
        };
        (((flat[k] - lo) / span) * 255.0).round().clamp(0.0, 255.0) as u8
    };
    let mut pixels = Vec::with_capacity(h * w);
    for y in 0..h {
        for x in 0..w {
            pixels.push(if c == 1 {
                let v = at(0, y, x);
                Color32::from_gray(v)
            } else if pre.bgr {
                Color32::from_rgb(at(2, y, x), at(1, y, x), at(0, y, x))
            } else {
                Color32::from_rgb(at(0, y, x), at(1, y, x), at(2, y, x))
            });
        }
    }
    Preview {
        key,
        image: Some(egui::ColorImage::new([w, h], pixels)),
        text,
        shapes,
    }
}

/// The preprocessing, field by field; every change rewrites the spec text.
pub fn preprocess_form_ui(ui: &mut egui::Ui, spec: &mut String) {
    use npu_core::quant::data::{ImageDType, Resize};
    let mut p = match Preprocess::parse(spec) {
        Ok(p) => p,
        Err(e) => {
            ui.colored_label(ui.visuals().error_fg_color, e.to_string());
            return;
        }
    };
    let before = p.clone();
    ui.horizontal_wrapped(|ui| {
        let mut own = p.size.is_some();
        ui.checkbox(&mut own, "resize to");
        if own && p.size.is_none() {
            p.size = Some((224, 224));
        } else if !own {
            p.size = None;
        }
        if let Some((h, w)) = &mut p.size {
            ui.add(egui::DragValue::new(h).range(1..=8192).prefix("H "));
            ui.add(egui::DragValue::new(w).range(1..=8192).prefix("W "));
        } else {
            ui.weak("the model's input size");
        }
        egui::ComboBox::from_id_salt("pre_resize")
            .selected_text(format!("{:?}", p.resize).to_lowercase())
            .show_ui(ui, |ui| {
                for r in [Resize::Stretch, Resize::Letterbox, Resize::PadRight, Resize::CenterCrop] {
                    ui.selectable_value(&mut p.resize, r, format!("{r:?}").to_lowercase());
                }
            });
        ui.separator();
        ui.selectable_value(&mut p.bgr, false, "RGB");
        ui.selectable_value(&mut p.bgr, true, "BGR");
        ui.separator();
        ui.label("scale");
        ui.add(egui::DragValue::new(&mut p.scale).speed(0.0001).max_decimals(6));
        if ui.small_button("1/255").clicked() {
            p.scale = 1.0 / 255.0;
        }
        if ui.small_button("1").clicked() {
            p.scale = 1.0;
        }
        ui.label("mean");
        for m in &mut p.mean {
            ui.add(egui::DragValue::new(m).speed(0.01).max_decimals(4));
        }
        ui.label("std");
        for s in &mut p.std {
            ui.add(
                egui::DragValue::new(s)
                    .speed(0.01)
                    .range(0.0001..=1000.0)
                    .max_decimals(4),
            );
        }
        ui.separator();
        ui.selectable_value(&mut p.nhwc, false, "NCHW");
        ui.selectable_value(&mut p.nhwc, true, "NHWC");
        egui::ComboBox::from_id_salt("pre_dtype")
            .selected_text(format!("{:?}", p.dtype).to_lowercase())
            .show_ui(ui, |ui| {
                for d in [ImageDType::F32, ImageDType::U8, ImageDType::I8] {
                    ui.selectable_value(&mut p.dtype, d, format!("{d:?}").to_lowercase());
                }
            });
    });
    if p != before {
        *spec = p.to_spec();
    }
}

/// The first preprocessed sample next to the form; made again (off the UI thread) whenever
/// the samples or the preprocessing change.
pub fn preview_ui(ui: &mut egui::Ui, q: &mut QuantView, loaded: Option<&Loaded>) {
    if let Some(Ok(p)) = take_finished(&mut q.preview_job) {
        q.preview_texture = p.image.clone().map(|img| {
            ui.ctx()
                .load_texture("calibration_preview", img, egui::TextureOptions::NEAREST)
        });
        q.preview = Some(p);
    }
    let model_path = loaded.map(|l| l.path.clone()).unwrap_or_default();
    let key = (q.setup.data.clone(), q.setup.preprocess.clone(), model_path);
    let current = q.preview.as_ref().is_some_and(|p| p.key == key);
    if !current
        && q.preview_job.is_none()
        && !key.0.is_empty()
        && let Some(l) = loaded
    {
        let model = l.model.clone();
        q.preview_job = Some(Job::spawn("preview", Some(ui.ctx()), move |_| {
            Ok(make_preview(&model, &key.2, &key.0, &key.1))
        }));
    }
    let Some(p) = &q.preview else { return };
    if q.setup.data.is_empty() {
        return;
    }
    ui.horizontal(|ui| {
        ui.weak("First sample:");
        if let (Some(t), true) = (&q.preview_texture, p.image.is_some()) {
            let size = t.size_vec2();
            let scale = (48.0 / size.y).min(240.0 / size.x);
            ui.add(egui::Image::new(t).fit_to_exact_size(size * scale))
                .on_hover_text("the first sample after preprocessing, values stretched to the full grey range");
        }
        if current {
            ui.label(&p.text);
        } else {
            ui.weak("updating…");
        }
    });
}
