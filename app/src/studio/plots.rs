//! The plots of the panels and the inspector: fixed height, no pan or zoom (the panel
//! scrolls instead), and histograms given as (bin centre, count).

/// A plot of `height` points that does not pan, zoom or scroll.
pub fn fixed(id: &str, height: f32) -> egui_plot::Plot<'_> {
    egui_plot::Plot::new(id)
        .height(height)
        .allow_drag(false)
        .allow_zoom(false)
        .allow_scroll(false)
}

/// The plots of the quantization panel and the inspector's quantization section.
pub fn small(id: &str) -> egui_plot::Plot<'_> {
    fixed(id, 110.0)
}

/// The bars of a histogram given as (bin centre, count), each `width` wide.
pub fn histogram_bars(bins: &[(f64, usize)], width: f64) -> Vec<egui_plot::Bar> {
    bins.iter()
        .map(|&(x, c)| egui_plot::Bar::new(x, c as f64).width(width))
        .collect()
}
