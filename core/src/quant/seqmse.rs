//! Weight ranges chosen by each layer's output error (SeqMSE, as AIMET calls it; the
//! per-channel weight-encoding search of Nagel et al.'s "A White Paper on Neural Network
//! Quantization", 2021). A max-abs weight grid spends its codes on the channel's largest
//! weight; a narrower range clips that weight and rounds all the others more finely. Which
//! of the two costs less depends on what the layer computes with them, so each output
//! channel's range factor is chosen among [`FACTORS`] by the squared error of the layer's
//! output channel (before its fused activation), run on the calibration samples' FP32
//! inputs put on their grids, against the FP32 layer. Output channel `c` reads only weight
//! row `c`, so the channels are chosen independently from one run per factor.
//!
//! The factors are kept only when the model's output SQNR on a held-back part of the
//! calibration set does not drop (then fitted again on every sample), as for the bias
//! correction and the range refinement. A plan keeps them by layer name
//! ([`super::QuantPlan::weight_clip`]); every weight grid is derived from the clipped
//! ranges, so the fake-quant simulation, the integer program and the exports agree.

use super::data::{Preprocess, Source};
use super::scheme::{WeightFormat, qdq_weight};
use super::{QuantError, QuantPlan, Quantizer, out_channels, strip_activation, weight_axis};
use crate::ir::{Graph, NodeId, Tensor};
use crate::progress::Progress;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// Range factors tried for every output channel, 1 (the max-abs range) first: a tie keeps
/// it. Fine steps near 1 for 8-bit weights, coarser ones below for 4-bit.
pub const FACTORS: [f64; 21] = [
    1.0, 0.99, 0.98, 0.97, 0.96, 0.95, 0.93, 0.91, 0.89, 0.87, 0.85, 0.82, 0.79, 0.76, 0.73, 0.70, 0.66, 0.62, 0.58,
    0.54, 0.50,
];

/// What the search did to one layer.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LayerClip {
    pub node: String,
    pub channels: usize,
    /// Channels whose range is narrowed (factor below 1).
    pub clipped: usize,
    pub mean_factor: f64,
    pub min_factor: f64,
    /// The layer's output SQNR (before its activation, all channels, fitting samples) with
    /// max-abs weight ranges and with the chosen ones.
    pub before_db: Option<f64>,
    pub after_db: Option<f64>,
}

/// What the search did.
#[derive(Clone, Debug, Serialize)]
pub struct SeqMse {
    /// Every layer searched, in graph order.
    pub layers: Vec<LayerClip>,
    /// Output SQNR on the held-back samples without and with the factors.
    pub held_before_db: Option<f64>,
    pub held_after_db: Option<f64>,
    /// Whether the factors are in the plan (they did not lose on the held-back samples).
    pub kept: bool,
    /// Calibration samples held back to judge it; 0 when the set is too small to split
    /// and it is judged on the samples it was fitted to.
    pub held_back: usize,
    pub seconds: f64,
}

impl SeqMse {
    /// Layers with at least one narrowed channel.
    pub fn clipped_layers(&self) -> usize {
        self.layers.iter().filter(|l| l.clipped > 0).count()
    }

    /// One line: layers clipped, the median layer gain, the held-back verdict.
    pub fn summary(&self) -> String {
        let median = super::median_gain(
            self.layers
                .iter()
                .filter(|l| l.clipped > 0)
                .map(|l| (l.before_db, l.after_db)),
        );
        format!(
            "SeqMSE weight ranges: {} of {} layers narrowed (median layer output +{median:.2} dB); {}",
            self.clipped_layers(),
            self.layers.len(),
            super::held_verdict(self.held_back, self.held_before_db, self.held_after_db, self.kept)
        )
    }
}

/// Why a plan's weight-range factors do not fit a graph.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("weight_clip of `{node}`: {problem}")]
pub struct ClipError {
    pub node: String,
    pub problem: String,
}

/// Checks a plan's `weight_clip` against the graph it is used on: every name a layer with a
/// constant weight, one factor per output channel, each in (0, 1].
pub fn check(g: &Graph, clips: &BTreeMap<String, Vec<f32>>) -> Result<(), ClipError> {
    for (name, f) in clips {
        let err = |problem: String| ClipError {
            node: name.clone(),
            problem,
        };
        let node = g
            .nodes
            .iter()
            .find(|n| &n.name == name)
            .ok_or_else(|| err("no node of the graph has this name".into()))?;
        let channels = weight_axis(g, node, 1)
            .zip(node.input(1).and_then(|w| g.values[w].constant.as_ref()))
            .and_then(|(a, c)| c.shape.get(a).copied())
            .ok_or_else(|| err(format!("a {} without a constant weight", node.op)))?;
        if f.len() != channels {
            return Err(err(format!("{} factors for {channels} output channels", f.len())));
        }
        if let Some(x) = f.iter().find(|x| !(x.is_finite() && **x > 0.0 && **x <= 1.0)) {
            return Err(err(format!("factor {x} outside (0, 1]")));
        }
    }
    Ok(())
}

/// Squared errors of one layer: per factor and output channel, and the FP32 energy per
/// channel.
struct Sums {
    err: Vec<Vec<f64>>,
    energy: Vec<f64>,
}

impl Sums {
    fn add(&mut self, o: &Self) {
        if o.energy.len() != self.energy.len() {
            return;
        }
        for (a, b) in self.err.iter_mut().zip(&o.err) {
            a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
        }
        self.energy.iter_mut().zip(&o.energy).for_each(|(x, y)| *x += y);
    }
}

fn sqnr(energy: f64, err: f64) -> Option<f64> {
    (err > 0.0).then(|| 10.0 * (energy / err).log10())
}

impl Quantizer<'_> {
    /// Layers whose weight ranges the search chooses: Conv, Gemm and MatMul with a float32
    /// constant weight on symmetric per-channel grids (int8, int4).
    fn clip_targets(&self, plan: &QuantPlan) -> Vec<NodeId> {
        let g = self.graph();
        self.order
            .iter()
            .copied()
            .filter(|&n| {
                let node = &g.nodes[n];
                matches!(node.op.as_str(), "Conv" | "FusedConv" | "Gemm" | "FusedGemm" | "MatMul")
                    && weight_axis(g, node, 1).is_some()
                    && node
                        .input(1)
                        .and_then(|w| g.values[w].constant.as_ref())
                        .is_some_and(|c| matches!(c.tensor(), Tensor::F32(_)))
                    && matches!(
                        plan.precision(node).weights,
                        WeightFormat::Int8 | WeightFormat::Int4 { .. }
                    )
            })
            .collect()
    }

    /// Per-layer, per-channel squared errors of every factor on `samples`.
    fn clip_errors(
        &self,
        plan: &QuantPlan,
        targets: &[NodeId],
        samples: &mut dyn Iterator<Item = Result<(String, HashMap<String, Tensor>), QuantError>>,
        total: usize,
        progress: &dyn Progress,
    ) -> Result<HashMap<NodeId, Sums>, QuantError> {
        let g = self.graph();
        let mut sums: HashMap<NodeId, Sums> = HashMap::new();
        let steps = total.max(1) * targets.len();
        for (k, s) in samples.enumerate() {
            let (label, sample) = s?;
            let reference = self.forward(&sample, &HashMap::new(), &mut |_, _| Ok(()), true)?;
            for (j, &n) in targets.iter().enumerate() {
                if progress.cancelled() {
                    return Err(QuantError::Cancelled);
                }
                let node = strip_activation(&g.nodes[n]);
                progress.update(
                    k * targets.len() + j,
                    steps,
                    &format!("SeqMSE: weight ranges of {} on {label}", node.name),
                );
                let Some(wv) = node.input(1) else { continue };
                let (Some(c), Some(axis)) = (g.values[wv].constant.as_ref(), weight_axis(g, &node, 1)) else {
                    continue;
                };
                let data: Vec<f32> = c.tensor().to_f32().iter().copied().collect();
                let w_channels = c.shape.get(axis).copied().unwrap_or(1);
                let format = plan.precision(&node).weights;
                let Tensor::F32(yf) = self
                    .run_alone(plan, &node, &reference, &HashMap::new(), false)?
                    .swap_remove(0)
                else {
                    continue;
                };
                let yf = yf.as_standard_layout().into_owned();
                let (inner, channels) = out_channels(&node, yf.shape());
                if channels != w_channels {
                    continue;
                }
                let e = sums.entry(n).or_insert_with(|| Sums {
                    err: vec![vec![0.0; channels]; FACTORS.len()],
                    energy: vec![0.0; channels],
                });
                for (i, v) in yf.iter().enumerate() {
                    e.energy[(i / inner) % channels] += f64::from(*v) * f64::from(*v);
                }
                for (f, err) in FACTORS.iter().zip(e.err.iter_mut()) {
                    let clip = vec![*f as f32; channels];
                    let q = qdq_weight(&data, &c.shape, axis, format, &clip);
                    let Some(t) = Tensor::from_f32(&c.shape, q) else {
                        continue;
                    };
                    let weights = HashMap::from([(wv, t)]);
                    let Tensor::F32(yq) = self.run_alone(plan, &node, &reference, &weights, true)?.swap_remove(0)
                    else {
                        continue;
                    };
                    let yq = yq.as_standard_layout();
                    for (i, (a, b)) in yq.iter().zip(yf.iter()).enumerate() {
                        let d = f64::from(*a) - f64::from(*b);
                        err[(i / inner) % channels] += d * d;
                    }
                }
            }
        }
        Ok(sums)
    }

    /// The factors each layer's channels get from `sums` (layers with every channel at 1
    /// left out), and what they did.
    fn choose_clips(
        &self,
        targets: &[NodeId],
        sums: &HashMap<NodeId, Sums>,
    ) -> (BTreeMap<String, Vec<f32>>, Vec<LayerClip>) {
        let g = self.graph();
        let mut clips = BTreeMap::new();
        let mut layers = Vec::new();
        for &n in targets {
            let Some(s) = sums.get(&n) else { continue };
            let channels = s.energy.len();
            let mut chosen = vec![1f32; channels];
            let (mut before, mut after) = (0.0, 0.0);
            for (c, x) in chosen.iter_mut().enumerate() {
                let mut best = 0;
                for k in 1..FACTORS.len() {
                    if s.err[k][c] < s.err[best][c] {
                        best = k;
                    }
                }
                *x = FACTORS[best] as f32;
                before += s.err[0][c];
                after += s.err[best][c];
            }
            let energy: f64 = s.energy.iter().sum();
            let clipped = chosen.iter().filter(|&&f| f < 1.0).count();
            layers.push(LayerClip {
                node: g.nodes[n].name.clone(),
                channels,
                clipped,
                mean_factor: chosen.iter().map(|&f| f64::from(f)).sum::<f64>() / channels.max(1) as f64,
                min_factor: chosen.iter().map(|&f| f64::from(f)).fold(1.0, f64::min),
                before_db: sqnr(energy, before),
                after_db: sqnr(energy, after),
            });
            if clipped > 0 {
                clips.insert(g.nodes[n].name.clone(), chosen);
            }
        }
        (clips, layers)
    }

    /// Chooses `plan`'s per-channel weight ranges by each layer's output error (see the
    /// module's description), judged on held-back calibration samples.
    pub fn seq_mse(
        &self,
        plan: QuantPlan,
        src: &Source,
        pre: &Preprocess,
        progress: &dyn Progress,
    ) -> Result<(QuantPlan, SeqMse), QuantError> {
        let t0 = std::time::Instant::now();
        let targets = self.clip_targets(&plan);
        let (fit, judge, held_back) = src.fit_and_judge();
        let sums = self.clip_errors(&plan, &targets, &mut fit.samples(self.model, pre), fit.len(), progress)?;
        let (clips, layers) = self.choose_clips(&targets, &sums);
        let mut with = plan.clone();
        with.weight_clip = clips;
        let (held_before, held_after) = if with.weight_clip.is_empty() {
            (None, None)
        } else {
            let cached = self.cache(&mut judge.samples(self.model, pre))?;
            (
                self.output_sqnr(&plan, &cached)?.sqnr_db,
                self.output_sqnr(&with, &cached)?.sqnr_db,
            )
        };
        let kept = !with.weight_clip.is_empty() && super::no_worse(held_after, held_before);
        let mut layers = layers;
        if kept && held_back > 0 {
            // Fitted again on every sample: the held-back samples' errors added to the
            // fitting ones'.
            let mut sums = sums;
            let held = self.clip_errors(
                &plan,
                &targets,
                &mut judge.samples(self.model, pre),
                judge.len(),
                progress,
            )?;
            for (n, h) in held {
                if let Some(s) = sums.get_mut(&n) {
                    s.add(&h);
                }
            }
            let (clips, all) = self.choose_clips(&targets, &sums);
            with.weight_clip = clips;
            layers = all;
        }
        let report = SeqMse {
            layers,
            held_before_db: held_before,
            held_after_db: held_after,
            kept,
            held_back,
            seconds: t0.elapsed().as_secs_f64(),
        };
        Ok((if kept { with } else { plan }, report))
    }
}

#[cfg(test)]
mod tests {
    use super::super::params::weight_codes;
    use super::super::{Calibration, LayerPrecision};
    use super::*;
    use crate::progress::Silent;

    /// On the equalization test chain with 4-bit weights: the search narrows ranges, every
    /// layer's output error falls (never rises: factor 1 is a candidate), the plan keeps the
    /// factors, and the integer codes are derived from the same clipped grid as the
    /// simulation's weights.
    #[test]
    fn clipped_ranges_lower_each_layers_error_and_reach_the_integer_codes() {
        let m = super::super::equalize::tests::chain();
        let q = Quantizer::new(&m, 1).expect("quantizer");
        let src = Source::Synthetic(6);
        let pre = Preprocess::default();
        let stats = q
            .observe(&mut src.samples(&m, &pre), src.len(), &Silent)
            .expect("calibrates");
        let mut plan = q.plan_from_stats(&stats, "w8a8", Calibration::MinMax).expect("plan");
        let int4 = LayerPrecision::parse("int4").expect("int4");
        for n in &m.graph.nodes {
            plan.layers.insert(n.name.clone(), int4);
        }
        let (clipped, r) = q.seq_mse(plan.clone(), &src, &pre, &Silent).expect("searches");
        assert_eq!(r.held_back, 2);
        assert_eq!(r.layers.len(), 3, "{r:?}");
        assert!(r.clipped_layers() >= 1, "{r:?}");
        for l in &r.layers {
            let (b, a) = (l.before_db.expect("error"), l.after_db.expect("error"));
            assert!(a >= b, "{l:?}");
            if l.clipped > 0 {
                assert!(a > b + 0.1 && l.min_factor < 1.0, "{l:?}");
            }
        }
        assert!(r.summary().contains("layers narrowed"), "{}", r.summary());
        if r.kept {
            check(&m.graph, &clipped.weight_clip).expect("its own factors fit");
        }
        let wrong = |name: &str, f: Vec<f32>| check(&m.graph, &BTreeMap::from([(name.to_owned(), f)]));
        let conv = &r.layers[0];
        assert!(
            wrong("nope", vec![1.0])
                .expect_err("no node")
                .to_string()
                .contains("nope")
        );
        assert!(wrong(&conv.node, vec![1.0; conv.channels + 1]).is_err());
        assert!(wrong(&conv.node, vec![1.5; conv.channels]).is_err());
        assert!(wrong(&conv.node, vec![0.5; conv.channels]).is_ok());
        if r.kept {
            assert!(!clipped.weight_clip.is_empty());
            assert!(r.held_after_db >= r.held_before_db, "{r:?}");
        } else {
            assert!(clipped.weight_clip.is_empty());
        }
        // A plan's factors make the simulator's weights and the integer codes alike.
        let targets = q.clip_targets(&plan);
        let sums = q
            .clip_errors(&plan, &targets, &mut src.samples(&m, &pre), src.len(), &Silent)
            .expect("errors");
        let (clips, _) = q.choose_clips(&targets, &sums);
        let mut p = plan.clone();
        p.weight_clip.clone_from(&clips);
        let sim = q.quantized_weights(&p);
        let g = &m.graph;
        let mut checked = 0;
        for (name, clip) in &clips {
            let node = g.nodes.iter().find(|n| &n.name == name).expect("node");
            let wv = node.input(1).expect("weight");
            let c = g.values[wv].constant.as_ref().expect("constant");
            let data: Vec<f32> = c.tensor().to_f32().iter().copied().collect();
            let per_channel = data.len() / c.shape[0];
            let codes = weight_codes(&data, &c.shape, 0, 7.0, clip);
            let fq = sim[&wv].to_f32();
            for (i, (&code, &f)) in codes.codes.iter().zip(fq.iter()).enumerate() {
                assert_eq!(
                    (f64::from(code) * codes.scales[i / per_channel]) as f32,
                    f,
                    "{name} element {i}"
                );
            }
            assert_ne!(
                weight_codes(&data, &c.shape, 0, 7.0, &[]).codes,
                codes.codes,
                "{name}: the clipped grid differs"
            );
            checked += 1;
        }
        assert!(checked > 0, "no narrowed layer: {clips:?}");
    }
}
