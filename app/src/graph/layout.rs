//! Layered (Sugiyama-style) layout of a directed graph. Pure: sizes and edges in,
//! rectangles and edge routes out, no renderer involved.
//!
//! Steps: break cycles (DFS back edges are reversed), assign layers by longest path with
//! sources pulled down next to their first consumer, split long edges with dummy nodes,
//! reduce crossings with barycenter sweeps (keeping the best order seen), then place nodes
//! horizontally by weighted isotonic regression towards their neighbours so chains stay
//! straight, and route each edge through its dummies.

use egui::{Pos2, Rect, Vec2, pos2, vec2};

/// Spacing of a layout.
#[derive(Clone, Copy, Debug)]
pub struct Params {
    /// Vertical gap between layers.
    pub layer_gap: f32,
    /// Horizontal gap between neighbours in a layer.
    pub node_gap: f32,
    /// Width reserved for an edge passing through a layer.
    pub dummy_width: f32,
    /// Crossing-reduction sweeps (one sweep = down then up).
    pub sweeps: usize,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            layer_gap: 44.0,
            node_gap: 24.0,
            dummy_width: 10.0,
            sweeps: 6,
        }
    }
}

/// The route of one input edge: points from the source's bottom to the target's top
/// (through the dummy positions). Empty for a self loop.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Route {
    pub points: Vec<Pos2>,
}

/// The result: one rectangle per node (top-left at `rects[i].min`), one route per input edge.
#[derive(Clone, Debug, Default)]
pub struct Layout {
    pub rects: Vec<Rect>,
    pub routes: Vec<Route>,
    pub size: Vec2,
    /// Layer of each node.
    pub layers: Vec<usize>,
}

struct LNode {
    layer: usize,
    width: f32,
    /// Real node index, or `None` for a dummy.
    real: Option<usize>,
    up: Vec<usize>,
    down: Vec<usize>,
}

/// Lays out `sizes.len()` nodes connected by `edges` (source, target).
pub fn layout(sizes: &[Vec2], edges: &[(usize, usize)], p: &Params) -> Layout {
    let n = sizes.len();
    if n == 0 {
        return Layout {
            routes: vec![Route::default(); edges.len()],
            ..Layout::default()
        };
    }
    // Unique DAG edges (after reversing back edges); each input edge maps to one of them.
    let dag = acyclic_edges(n, edges);
    let layer = assign_layers(n, &dag.edges);
    // Layered graph with dummies.
    let mut nodes: Vec<LNode> = (0..n)
        .map(|i| LNode {
            layer: layer[i],
            width: sizes[i].x,
            real: Some(i),
            up: Vec::new(),
            down: Vec::new(),
        })
        .collect();
    let mut chains: Vec<Vec<usize>> = Vec::with_capacity(dag.edges.len());
    for &(u, v) in &dag.edges {
        let mut chain = vec![u];
        let mut prev = u;
        for l in layer[u] + 1..layer[v] {
            let d = nodes.len();
            nodes.push(LNode {
                layer: l,
                width: p.dummy_width,
                real: None,
                up: vec![prev],
                down: Vec::new(),
            });
            nodes[prev].down.push(d);
            chain.push(d);
            prev = d;
        }
        nodes[prev].down.push(v);
        nodes[v].up.push(prev);
        chain.push(v);
        chains.push(chain);
    }
    let n_layers = layer.iter().max().map_or(0, |m| m + 1);
    let mut order = initial_order(&nodes, n_layers);
    reduce_crossings(&nodes, &mut order, p.sweeps);
    let x = assign_x(&nodes, &order, p);
    // Vertical placement: each layer as tall as its tallest node, centres aligned.
    let mut layer_h = vec![0.0f32; n_layers];
    for (i, s) in sizes.iter().enumerate() {
        layer_h[layer[i]] = layer_h[layer[i]].max(s.y);
    }
    let mut layer_y = vec![0.0f32; n_layers];
    let mut y = 0.0;
    for l in 0..n_layers {
        layer_y[l] = y;
        y += layer_h[l] + p.layer_gap;
    }
    let height = (y - p.layer_gap).max(0.0);
    let centre_y = |l: usize| layer_y[l] + layer_h[l] / 2.0;
    let rects: Vec<Rect> = (0..n)
        .map(|i| Rect::from_center_size(pos2(x[i], centre_y(layer[i])), sizes[i]))
        .collect();
    let width = rects.iter().map(|r| r.max.x).fold(0.0, f32::max);
    let routes = edges
        .iter()
        .map(|&(u, v)| {
            if u == v || u >= n || v >= n {
                return Route::default();
            }
            let Some(&(ci, reversed)) = dag.index.get(&(u, v)) else {
                return Route::default();
            };
            let chain = &chains[ci];
            let mut points = Vec::with_capacity(chain.len());
            points.push(pos2(x[chain[0]], rects[chain[0]].max.y));
            for &d in &chain[1..chain.len() - 1] {
                points.push(pos2(x[d], centre_y(nodes[d].layer)));
            }
            let last = chain[chain.len() - 1];
            points.push(pos2(x[last], rects[last].min.y));
            if reversed {
                // The chain runs from the target (above) to the source (below): the route
                // leaves the source's top and enters the target's bottom.
                points.reverse();
            }
            Route { points }
        })
        .collect();
    Layout {
        rects,
        routes,
        size: vec2(width, height),
        layers: layer,
    }
}

struct Dag {
    /// Unique edges with every cycle broken.
    edges: Vec<(usize, usize)>,
    /// Input edge (u, v) → (index in `edges`, whether it was reversed).
    index: std::collections::HashMap<(usize, usize), (usize, bool)>,
}

/// Reverses the back edges of an iterative DFS (in node order), drops self loops and
/// duplicates.
fn acyclic_edges(n: usize, edges: &[(usize, usize)]) -> Dag {
    let mut adj: Vec<Vec<usize>> = vec![Vec::new(); n];
    for &(u, v) in edges {
        if u != v && u < n && v < n {
            adj[u].push(v);
        }
    }
    for a in &mut adj {
        a.sort_unstable();
        a.dedup();
    }
    // 0 = unvisited, 1 = on stack, 2 = done.
    let mut state = vec![0u8; n];
    let mut back = std::collections::HashSet::new();
    for s in 0..n {
        if state[s] != 0 {
            continue;
        }
        let mut stack = vec![(s, 0usize)];
        state[s] = 1;
        while let Some(top) = stack.last_mut() {
            let (u, i) = *top;
            if i < adj[u].len() {
                top.1 += 1;
                let v = adj[u][i];
                match state[v] {
                    0 => {
                        state[v] = 1;
                        stack.push((v, 0));
                    }
                    1 => {
                        back.insert((u, v));
                    }
                    _ => {}
                }
            } else {
                state[u] = 2;
                stack.pop();
            }
        }
    }
    let mut out = Vec::new();
    let mut index = std::collections::HashMap::new();
    let mut seen = std::collections::HashMap::new();
    for (u, a) in adj.iter().enumerate() {
        for &v in a {
            let reversed = back.contains(&(u, v));
            let e = if reversed { (v, u) } else { (u, v) };
            let ci = *seen.entry(e).or_insert_with(|| {
                out.push(e);
                out.len() - 1
            });
            index.insert((u, v), (ci, reversed));
        }
    }
    Dag { edges: out, index }
}

/// Longest-path layering; a source then moves down to sit just above its nearest consumer
/// (so a graph input is not stranded at the top far from where it is used).
fn assign_layers(n: usize, edges: &[(usize, usize)]) -> Vec<usize> {
    let mut succ: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut indeg = vec![0usize; n];
    for &(u, v) in edges {
        succ[u].push(v);
        indeg[v] += 1;
    }
    let mut layer = vec![0usize; n];
    let mut queue: Vec<usize> = (0..n).filter(|&i| indeg[i] == 0).collect();
    let sources = queue.clone();
    let mut head = 0;
    while head < queue.len() {
        let u = queue[head];
        head += 1;
        for &v in &succ[u] {
            layer[v] = layer[v].max(layer[u] + 1);
            indeg[v] -= 1;
            if indeg[v] == 0 {
                queue.push(v);
            }
        }
    }
    for s in sources {
        if let Some(m) = succ[s].iter().map(|&v| layer[v]).min() {
            layer[s] = m.saturating_sub(1);
        }
    }
    layer
}

/// Layer by layer, nodes in depth-first discovery order from the sources, which keeps
/// chains together before any sweep.
fn initial_order(nodes: &[LNode], n_layers: usize) -> Vec<Vec<usize>> {
    let mut order = vec![Vec::new(); n_layers];
    let mut seen = vec![false; nodes.len()];
    let mut stack = Vec::new();
    for s in 0..nodes.len() {
        if seen[s] || !nodes[s].up.is_empty() {
            continue;
        }
        stack.push(s);
        seen[s] = true;
        while let Some(u) = stack.pop() {
            order[nodes[u].layer].push(u);
            for &v in nodes[u].down.iter().rev() {
                if !seen[v] {
                    seen[v] = true;
                    stack.push(v);
                }
            }
        }
    }
    // Anything not reached from a source (cannot happen in a DAG, kept for safety).
    for (u, s) in seen.iter().enumerate() {
        if !s {
            order[nodes[u].layer].push(u);
        }
    }
    order
}

fn positions(nodes_len: usize, order: &[Vec<usize>]) -> Vec<usize> {
    let mut pos = vec![0usize; nodes_len];
    for layer in order {
        for (i, &u) in layer.iter().enumerate() {
            pos[u] = i;
        }
    }
    pos
}

/// Barycenter sweeps down and up; keeps the order with the fewest crossings.
fn reduce_crossings(nodes: &[LNode], order: &mut [Vec<usize>], sweeps: usize) {
    let mut pos = positions(nodes.len(), order);
    let mut best = order.to_vec();
    let mut best_c = total_crossings(nodes, order, &pos);
    for _ in 0..sweeps {
        if best_c == 0 {
            break;
        }
        for layer in order.iter_mut().skip(1) {
            sort_layer(nodes, layer, &mut pos, true);
        }
        for l in (0..order.len().saturating_sub(1)).rev() {
            sort_layer(nodes, &mut order[l], &mut pos, false);
        }
        let c = total_crossings(nodes, order, &pos);
        if c < best_c {
            best_c = c;
            best = order.to_vec();
        } else {
            break;
        }
    }
    order.clone_from_slice(&best);
}

fn sort_layer(nodes: &[LNode], layer: &mut [usize], pos: &mut [usize], from_up: bool) {
    let mut keyed: Vec<(f64, usize)> = layer
        .iter()
        .map(|&u| {
            let nb = if from_up { &nodes[u].up } else { &nodes[u].down };
            let key = if nb.is_empty() {
                pos[u] as f64
            } else {
                nb.iter().map(|&v| pos[v] as f64).sum::<f64>() / nb.len() as f64
            };
            (key, u)
        })
        .collect();
    keyed.sort_by(|a, b| a.0.total_cmp(&b.0));
    for (i, (_, u)) in keyed.into_iter().enumerate() {
        layer[i] = u;
        pos[u] = i;
    }
}

/// Crossings between every pair of adjacent layers (Barth–Mutzel accumulator tree).
fn total_crossings(nodes: &[LNode], order: &[Vec<usize>], pos: &[usize]) -> usize {
    let mut total = 0;
    for l in 0..order.len().saturating_sub(1) {
        let mut targets: Vec<(usize, usize)> = Vec::new();
        for &u in &order[l] {
            for &v in &nodes[u].down {
                targets.push((pos[u], pos[v]));
            }
        }
        targets.sort_unstable();
        let m = order[l + 1].len().max(1);
        let mut first = 1;
        while first < m {
            first <<= 1;
        }
        let mut tree = vec![0usize; 2 * first];
        for &(_, t) in &targets {
            let mut i = t + first;
            tree[i] += 1;
            while i > 1 {
                if i % 2 == 1 {
                    total += tree[i - 1];
                }
                i /= 2;
                tree[i] += 1;
            }
        }
    }
    total
}

/// Horizontal centres: each sweep pulls nodes towards the mean of their neighbours in the
/// layer just placed, solved per layer as a weighted isotonic regression under the
/// minimum-separation constraints (pool adjacent violators). Dummies weigh more, so long
/// edges stay straight and real nodes move around them.
fn assign_x(nodes: &[LNode], order: &[Vec<usize>], p: &Params) -> Vec<f32> {
    let mut x = vec![0.0f64; nodes.len()];
    for layer in order {
        let mut cur = 0.0f64;
        for &u in layer {
            x[u] = cur + f64::from(nodes[u].width) / 2.0;
            cur += f64::from(nodes[u].width + p.node_gap);
        }
    }
    let weight = |u: usize| if nodes[u].real.is_some() { 1.0 } else { 4.0 };
    let place = |x: &mut Vec<f64>, layer: &[usize], dirs: (bool, bool)| {
        let desired: Vec<f64> = layer
            .iter()
            .map(|&u| {
                let mut s = 0.0;
                let mut k = 0usize;
                if dirs.0 {
                    for &v in &nodes[u].up {
                        s += x[v];
                        k += 1;
                    }
                }
                if dirs.1 {
                    for &v in &nodes[u].down {
                        s += x[v];
                        k += 1;
                    }
                }
                if k == 0 { x[u] } else { s / k as f64 }
            })
            .collect();
        let w: Vec<f64> = layer.iter().map(|&u| weight(u)).collect();
        let widths: Vec<f64> = layer.iter().map(|&u| f64::from(nodes[u].width)).collect();
        let placed = isotonic_place(&desired, &w, &widths, f64::from(p.node_gap));
        for (i, &u) in layer.iter().enumerate() {
            x[u] = placed[i];
        }
    };
    for _ in 0..4 {
        for layer in order.iter().skip(1) {
            place(&mut x, layer, (true, false));
        }
        for l in (0..order.len().saturating_sub(1)).rev() {
            place(&mut x, &order[l], (false, true));
        }
    }
    for layer in order {
        place(&mut x, layer, (true, true));
    }
    for layer in order.iter().skip(1) {
        place(&mut x, layer, (true, false));
    }
    let min_left = (0..nodes.len())
        .map(|u| x[u] - f64::from(nodes[u].width) / 2.0)
        .fold(f64::INFINITY, f64::min);
    x.iter().map(|&v| (v - min_left) as f32).collect()
}

/// Minimises Σ wᵢ(xᵢ − dᵢ)² subject to xᵢ₊₁ − xᵢ ≥ (widthᵢ + widthᵢ₊₁)/2 + gap.
fn isotonic_place(desired: &[f64], w: &[f64], widths: &[f64], gap: f64) -> Vec<f64> {
    let n = desired.len();
    let mut off = vec![0.0; n];
    for i in 1..n {
        off[i] = off[i - 1] + f64::midpoint(widths[i - 1], widths[i]) + gap;
    }
    // Blocks of (weighted sum, weight, count).
    let mut blocks: Vec<(f64, f64, usize)> = Vec::with_capacity(n);
    for i in 0..n {
        let t = desired[i] - off[i];
        blocks.push((t * w[i], w[i], 1));
        while blocks.len() > 1 {
            let (s1, w1, c1) = blocks[blocks.len() - 1];
            let (s0, w0, c0) = blocks[blocks.len() - 2];
            if s0 / w0 > s1 / w1 {
                blocks.pop();
                let last = blocks.len() - 1;
                blocks[last] = (s0 + s1, w0 + w1, c0 + c1);
            } else {
                break;
            }
        }
    }
    let mut out = Vec::with_capacity(n);
    for (s, wt, c) in blocks {
        let m = s / wt;
        for _ in 0..c {
            let i = out.len();
            out.push(m + off[i]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boxes(n: usize) -> Vec<Vec2> {
        vec![vec2(100.0, 40.0); n]
    }

    fn overlaps(l: &Layout) -> bool {
        for i in 0..l.rects.len() {
            for j in i + 1..l.rects.len() {
                if l.rects[i].shrink(0.5).intersects(l.rects[j].shrink(0.5)) {
                    return true;
                }
            }
        }
        false
    }

    #[test]
    fn chain_is_straight_and_top_down() {
        let edges: Vec<(usize, usize)> = (0..5).map(|i| (i, i + 1)).collect();
        let l = layout(&boxes(6), &edges, &Params::default());
        for i in 0..5 {
            assert!(
                (l.rects[i].center().x - l.rects[i + 1].center().x).abs() < 1e-3,
                "chain bends at {i}"
            );
            assert!(l.rects[i].max.y < l.rects[i + 1].min.y);
        }
        assert_eq!(l.routes[0].points.len(), 2);
        assert!(!overlaps(&l));
    }

    #[test]
    fn diamond_is_symmetric_and_does_not_overlap() {
        let edges = [(0, 1), (0, 2), (1, 3), (2, 3)];
        let l = layout(&boxes(4), &edges, &Params::default());
        assert!(!overlaps(&l));
        let (a, b) = (l.rects[1].center().x, l.rects[2].center().x);
        let mid = f32::midpoint(a, b);
        assert!((l.rects[0].center().x - mid).abs() < 1.0);
        assert!((l.rects[3].center().x - mid).abs() < 1.0);
    }

    #[test]
    fn long_edges_get_routes_through_every_layer() {
        // 0 → 1 → 2 → 3 and a skip 0 → 3.
        let edges = [(0, 1), (1, 2), (2, 3), (0, 3)];
        let l = layout(&boxes(4), &edges, &Params::default());
        let skip = &l.routes[3].points;
        assert_eq!(skip.len(), 4, "two dummies on the skip edge");
        assert!(skip.windows(2).all(|w| w[0].y < w[1].y));
        assert!(!overlaps(&l));
        // The skip route does not pass through the chain's boxes.
        for p in &skip[1..3] {
            assert!(!l.rects[1].contains(*p) && !l.rects[2].contains(*p));
        }
    }

    #[test]
    fn cycles_are_broken_and_routed_backwards() {
        let edges = [(0, 1), (1, 2), (2, 0), (1, 1)];
        let l = layout(&boxes(3), &edges, &Params::default());
        assert!(!overlaps(&l));
        assert!(l.routes[3].points.is_empty(), "self loop");
        let back = &l.routes[2].points;
        assert!(back.len() >= 2);
        // The back edge starts at node 2 and ends at node 0.
        assert!(l.rects[2].expand(1.0).contains(back[0]));
        assert!(l.rects[0].expand(1.0).contains(*back.last().unwrap_or(&Pos2::ZERO)));
    }

    #[test]
    fn sources_sit_just_above_their_consumer() {
        // Weight-like source 4 feeds the last node of a chain.
        let edges = [(0, 1), (1, 2), (2, 3), (4, 3)];
        let l = layout(&boxes(5), &edges, &Params::default());
        assert_eq!(l.layers[4] + 1, l.layers[3]);
    }

    #[test]
    fn crossing_reduction_untangles_a_twisted_bipartite_graph() {
        // Two layers whose initial order crosses every edge pair.
        let n = 6;
        let edges: Vec<(usize, usize)> = (0..n).map(|i| (i, 2 * n - 1 - i)).collect();
        let sizes = boxes(2 * n);
        let l = layout(&sizes, &edges, &Params::default());
        let mut xs: Vec<(f32, f32)> = edges
            .iter()
            .map(|&(u, v)| (l.rects[u].center().x, l.rects[v].center().x))
            .collect();
        xs.sort_by(|a, b| a.0.total_cmp(&b.0));
        assert!(xs.windows(2).all(|w| w[0].1 < w[1].1), "edges still cross: {xs:?}");
    }

    #[test]
    fn isotonic_placement_respects_separation_and_targets() {
        let x = isotonic_place(&[0.0, 0.0, 100.0], &[1.0, 1.0, 1.0], &[10.0, 10.0, 10.0], 5.0);
        assert!((x[1] - x[0] - 15.0).abs() < 1e-9);
        assert!((x[0] + x[1]).abs() < 1e-9, "the pair centres on its common target");
        assert!((x[2] - 100.0).abs() < 1e-9);
    }

    #[test]
    fn empty_and_edgeless_graphs() {
        let l = layout(&[], &[(0, 1)], &Params::default());
        assert!(l.rects.is_empty() && l.routes.len() == 1);
        let l = layout(&boxes(3), &[], &Params::default());
        assert!(!overlaps(&l));
    }
}
