//! Small widgets the panels share.

/// A label and the one-line text field it names (for screen readers and UI tests too).
pub fn labelled_text(ui: &mut egui::Ui, label: &str, text: &mut String, hint: &str, width: f32) -> egui::Response {
    let label = ui.label(label);
    ui.add(egui::TextEdit::singleline(text).hint_text(hint).desired_width(width))
        .labelled_by(label.id)
}

/// `12.3 µs`, `1.25 ms`.
pub fn latency(us: f64) -> String {
    if us >= 1000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{us:.1} µs")
    }
}
