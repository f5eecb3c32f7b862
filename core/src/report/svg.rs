//! The report's pictures as inline SVG: line and bar plots, and the graph heatmap.

use super::{GREEN_DB, GraphPicture, RED_DB, esc};
use std::fmt::Write as _;

/// The heatmap colour of an SQNR (the studio's: red at or below [`RED_DB`], yellow
/// half-way, green at or above [`GREEN_DB`]; exact is green), as `#rrggbb`.
pub fn heat_colour(sqnr: Option<f64>) -> String {
    const LOW: [f64; 3] = [215.0, 48.0, 39.0];
    const MID: [f64; 3] = [240.0, 200.0, 40.0];
    const HIGH: [f64; 3] = [40.0, 170.0, 80.0];
    let Some(v) = sqnr else {
        return hex(HIGH);
    };
    let t = ((v - RED_DB) / (GREEN_DB - RED_DB)).clamp(0.0, 1.0);
    let lerp = |a: [f64; 3], b: [f64; 3], t: f64| [0, 1, 2].map(|i| a[i] + (b[i] - a[i]) * t);
    hex(if t < 0.5 {
        lerp(LOW, MID, t * 2.0)
    } else {
        lerp(MID, HIGH, (t - 0.5) * 2.0)
    })
}

fn hex(c: [f64; 3]) -> String {
    format!(
        "#{:02x}{:02x}{:02x}",
        c[0].round() as u8,
        c[1].round() as u8,
        c[2].round() as u8
    )
}

const W: f64 = 620.0;
const H: f64 = 300.0;
const L: f64 = 56.0;
const R: f64 = 16.0;
const T: f64 = 34.0;
const B: f64 = 44.0;

/// Round ticks covering `lo..hi`.
fn ticks(lo: f64, hi: f64) -> Vec<f64> {
    let span = (hi - lo).max(1e-9);
    let raw = span / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| span / s <= 6.0)
        .unwrap_or(10.0 * mag);
    let mut t = (lo / step).ceil() * step;
    let mut out = Vec::new();
    while t <= hi + 1e-9 && out.len() < 12 {
        out.push(t);
        t += step;
    }
    out
}

fn num(v: f64) -> String {
    if v.abs() >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// One line of a plot: its label, colour and points.
pub type Series<'a> = (&'a str, &'a str, Vec<(f64, f64)>);

/// A line plot of `series` with an optional horizontal line.
pub fn line_plot(title: &str, xlabel: &str, ylabel: &str, series: &[Series<'_>], hline: Option<(f64, &str)>) -> String {
    let all = || series.iter().flat_map(|s| s.2.iter());
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" role=\"img\" \
         aria-label=\"{}\" font-family=\"system-ui,sans-serif\" font-size=\"11\"><rect width=\"{W}\" height=\"{H}\" fill=\"#fff\"/>\
         <text x=\"{L}\" y=\"18\" font-size=\"13\" font-weight=\"600\">{}</text>",
        esc(title),
        esc(title)
    );
    if all().next().is_none() {
        let _ = write!(
            s,
            "<text x=\"{L}\" y=\"{}\" fill=\"#777\">no finite values</text></svg>",
            H / 2.0
        );
        return s;
    }
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in all() {
        (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
    }
    if let Some((v, _)) = hline {
        (y0, y1) = (y0.min(v), y1.max(v));
    }
    if x1 - x0 < 1e-9 {
        x1 = x0 + 1.0;
    }
    let pad = ((y1 - y0) * 0.06).max(0.5);
    (y0, y1) = (y0 - pad, y1 + pad);
    let px = |x: f64| L + (x - x0) / (x1 - x0) * (W - L - R);
    let py = |y: f64| H - B - (y - y0) / (y1 - y0) * (H - T - B);
    for t in ticks(y0, y1) {
        let _ = write!(
            s,
            "<line x1=\"{L}\" x2=\"{}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#e6e8ec\"/><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#555\">{}</text>",
            W - R,
            L - 6.0,
            py(t) + 4.0,
            num(t),
            y = py(t)
        );
    }
    for t in ticks(x0, x1) {
        let _ = write!(
            s,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\" fill=\"#555\">{}</text>",
            px(t),
            H - B + 16.0,
            num(t)
        );
    }
    let _ = write!(
        s,
        "<line x1=\"{L}\" x2=\"{L}\" y1=\"{T}\" y2=\"{}\" stroke=\"#888\"/><line x1=\"{L}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"#888\"/>\
         <text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"#333\">{}</text>\
         <text transform=\"translate(14 {}) rotate(-90)\" text-anchor=\"middle\" fill=\"#333\">{}</text>",
        H - B,
        W - R,
        H - B,
        H - B,
        f64::midpoint(L, W - R),
        H - 8.0,
        esc(xlabel),
        f64::midpoint(T, H - B),
        esc(ylabel)
    );
    if let Some((v, label)) = hline {
        let _ = write!(
            s,
            "<line x1=\"{L}\" x2=\"{}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#c33\" stroke-dasharray=\"5 4\"/>\
             <text x=\"{}\" y=\"{:.1}\" fill=\"#c33\">{} {:.1} dB</text>",
            W - R,
            L + 6.0,
            py(v) - 4.0,
            esc(label),
            v,
            y = py(v)
        );
    }
    for (k, (label, colour, pts)) in series.iter().enumerate() {
        let path: Vec<String> = pts.iter().map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y))).collect();
        let _ = write!(
            s,
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.6\" points=\"{}\"/>",
            path.join(" ")
        );
        if pts.len() <= 60 {
            for &(x, y) in pts {
                let _ = write!(
                    s,
                    "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"2.4\" fill=\"{colour}\"/>",
                    px(x),
                    py(y)
                );
            }
        }
        let lx = W - R - 150.0;
        let ly = T + 4.0 + 15.0 * k as f64;
        let _ = write!(
            s,
            "<rect x=\"{lx}\" y=\"{}\" width=\"12\" height=\"3\" fill=\"{colour}\"/><text x=\"{}\" y=\"{}\" fill=\"#333\">{}</text>",
            ly - 4.0,
            lx + 16.0,
            ly,
            esc(label)
        );
    }
    s.push_str("</svg>");
    s
}

/// Horizontal bars, one per (label, value in dB).
pub fn bar_plot(title: &str, items: &[(String, f64)]) -> String {
    let row = 16.0;
    let h = T + row * items.len() as f64 + 16.0;
    let label_w = 220.0;
    let lo = items.iter().map(|i| i.1).fold(0.0f64, f64::min);
    let hi = items.iter().map(|i| i.1).fold(1.0f64, f64::max);
    let px = |v: f64| label_w + (v - lo) / (hi - lo).max(1e-9) * (W - label_w - 60.0);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{h}\" viewBox=\"0 0 {W} {h}\" role=\"img\" \
         aria-label=\"{}\" font-family=\"system-ui,sans-serif\" font-size=\"11\"><rect width=\"{W}\" height=\"{h}\" fill=\"#fff\"/>\
         <text x=\"8\" y=\"18\" font-size=\"13\" font-weight=\"600\">{}</text>",
        esc(title),
        esc(title)
    );
    for (k, (label, v)) in items.iter().enumerate() {
        let y = T + row * k as f64;
        let short: String = if label.chars().count() > 34 {
            let tail: String = label
                .chars()
                .rev()
                .take(33)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            format!("…{tail}")
        } else {
            label.clone()
        };
        let _ = write!(
            s,
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#333\">{}</text>\
             <rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" fill=\"#333\">{v:.1} dB</text>",
            label_w - 6.0,
            y + 11.0,
            esc(&short),
            px(lo.max(0.0)),
            y + 2.0,
            (px(*v) - px(lo.max(0.0))).abs().max(1.0),
            row - 4.0,
            heat_colour(Some(*v)),
            px(*v).max(px(lo.max(0.0))) + 4.0,
            y + 11.0
        );
    }
    s.push_str("</svg>");
    s
}

/// The laid-out graph: edges, then one box per node filled with its heat.
pub fn graph(g: &GraphPicture) -> String {
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0}\" height=\"{:.0}\" viewBox=\"-10 -10 {:.0} {:.0}\" role=\"img\" \
         aria-label=\"graph heatmap\" font-family=\"system-ui,sans-serif\" font-size=\"11\">",
        g.width + 20.0,
        g.height + 20.0,
        g.width + 20.0,
        g.height + 20.0
    );
    for e in &g.edges {
        let pts: Vec<String> = e.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
        let _ = write!(
            s,
            "<polyline fill=\"none\" stroke=\"#9aa3b0\" stroke-width=\"1\" points=\"{}\"/>",
            pts.join(" ")
        );
    }
    for n in &g.nodes {
        let fill = if n.measured {
            heat_colour(n.sqnr_db)
        } else {
            "#c9ced6".into()
        };
        let dash = if n.device.as_deref() == Some("CPU") {
            " stroke-dasharray=\"4 3\" stroke-width=\"2\""
        } else {
            ""
        };
        let tip = match (n.measured, n.sqnr_db) {
            (true, Some(v)) => format!("{} ({}): {v:.2} dB", n.name, n.op),
            (true, None) => format!("{} ({}): exact", n.name, n.op),
            (false, _) => format!("{} ({})", n.name, n.op),
        };
        let _ = write!(
            s,
            "<g><title>{}</title><rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" rx=\"4\" fill=\"{fill}\" stroke=\"#3b4252\"{dash}/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#111\">{}</text></g>",
            esc(&tip),
            n.x,
            n.y,
            n.w,
            n.h,
            n.x + n.w / 2.0,
            n.y + n.h / 2.0 + 4.0,
            esc(&n.op)
        );
    }
    s.push_str("</svg>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heat_runs_red_to_green() {
        assert_eq!(heat_colour(Some(0.0)), "#d73027");
        assert_eq!(heat_colour(Some(50.0)), "#28aa50");
        assert_eq!(heat_colour(None), "#28aa50");
        assert_eq!(heat_colour(Some(30.0)), "#f0c828");
    }

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        assert_eq!(ticks(0.0, 10.0), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        let t = ticks(13.3, 41.7);
        assert!(t.first().is_some_and(|&v| v >= 13.3) && t.last().is_some_and(|&v| v <= 41.7));
    }
}
