//! `npu-studio bench-quant-edit`: precision edits driven through the studio's own path,
//! headless, and timed from the change to the updated heatmap.

use crate::studio::quantize::{QuantView, Setup};
use crate::studio::theme::Theme;
use npu_core::ir::{Model, NodeId};
use npu_core::quant::LayerPrecision;
use std::sync::Arc;
use std::time::Instant;

/// Times of precision edits driven through the studio's own path: `QuantView::set_precision`,
/// the worker's incremental update, the reply, and the overlay colours of every card.
#[derive(Debug, serde::Serialize)]
pub struct EditBench {
    pub model: String,
    pub samples: usize,
    /// Seconds from the start to the first heatmap (calibration and full simulation).
    pub first_heatmap_s: f64,
    /// Milliseconds from each edit to its updated heatmap.
    pub edit_ms: Vec<f64>,
    pub median_ms: f64,
    pub max_ms: f64,
    /// Node runs of each edit, and of one full simulation, summed over the samples.
    pub node_runs: Vec<usize>,
    pub full_node_runs: usize,
}

/// Opens a session on `model`, then changes the precision of `edits` layers spread over the
/// graph (to int16, fp16 and back to the default, in turn) and times each one.
pub fn bench_edits(model: &Arc<Model>, name: &str, setup: Setup, edits: usize) -> Result<EditBench, String> {
    let mut q = QuantView::default();
    q.setup = setup;
    let t0 = Instant::now();
    q.start(
        model.clone(),
        npu_core::passes::all_passes()
            .iter()
            .map(|p| p.name().to_string())
            .collect(),
        None,
    );
    let wait = |q: &mut QuantView, generation: u64| -> Result<(), String> {
        loop {
            if let crate::studio::quantize::Polled::Ended(e) = q.poll() {
                return Err(e.to_string());
            }
            let s = q.session.as_ref().ok_or("the session ended")?;
            if s.result.as_ref().is_some_and(|r| r.generation >= generation) {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    };
    wait(&mut q, 0)?;
    let first_heatmap_s = t0.elapsed().as_secs_f64();
    let s = q.session.as_ref().ok_or("no session")?;
    let samples = s.result.as_ref().map_or(0, |r| r.report.eval_samples);
    let mut nodes: Vec<NodeId> = s.rows.keys().copied().collect();
    nodes.sort_unstable();
    let full_node_runs = s
        .mapping
        .as_ref()
        .map_or(0, |m| m.optimized.graph.nodes.len() * samples);
    if nodes.is_empty() {
        return Err("no quantized layer".into());
    }
    let mut edit_ms = Vec::new();
    let mut node_runs = Vec::new();
    for k in 0..edits {
        let node = nodes[(k * 7919) % nodes.len()];
        let p = [LayerPrecision::INT16, LayerPrecision::FP16, LayerPrecision::INT8][k % 3];
        let t = Instant::now();
        let before = q.generation();
        q.set_precision(&[node], p);
        if q.generation() == before {
            continue;
        }
        let g = q.generation();
        wait(&mut q, g)?;
        let marks = q.card_marks(&Theme::light().quant);
        edit_ms.push(t.elapsed().as_secs_f64() * 1e3);
        std::hint::black_box(marks);
        node_runs.push(
            q.session
                .as_ref()
                .and_then(|s| s.result.as_ref())
                .map_or(0, |r| r.recomputed),
        );
    }
    let mut sorted = edit_ms.clone();
    sorted.sort_by(f64::total_cmp);
    Ok(EditBench {
        model: name.into(),
        samples,
        first_heatmap_s,
        median_ms: sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN),
        max_ms: sorted.last().copied().unwrap_or(f64::NAN),
        edit_ms,
        node_runs,
        full_node_runs,
    })
}
