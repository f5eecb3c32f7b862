//! A laid-out view of a [`GraphDoc`] for one set of collapsed scopes: boxes (cards,
//! collapsed scopes, frames of expanded scopes) and routed edges, in graph units.
//!
//! Layout is compound: every expanded scope is laid out on its own (its cards and child
//! scopes as units), and becomes one unit of its parent's layout. Local layouts are cached,
//! so expanding or collapsing a scope re-lays out only that scope and its ancestors.

use super::doc::{GraphDoc, ItemId, ScopeId};
use super::layout::{self, Params};
use egui::{Pos2, Rect, Vec2, vec2};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Header height of an expanded scope's frame.
pub const FRAME_HEADER: f32 = 22.0;
/// Padding inside an expanded scope's frame.
pub const FRAME_PAD: f32 = 12.0;

/// A child of a scope in that scope's local layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unit {
    Item(ItemId),
    Scope(ScopeId),
}

/// What a box shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BoxKind {
    Item(ItemId),
    Collapsed(ScopeId),
    Frame(ScopeId),
}

#[derive(Clone, Debug)]
pub struct SceneBox {
    pub rect: Rect,
    pub kind: BoxKind,
}

#[derive(Clone, Debug)]
pub struct SceneEdge {
    pub points: Vec<Pos2>,
    /// Box indices of the two ends.
    pub from: usize,
    pub to: usize,
    /// Index into `GraphDoc::edges` of the first model edge drawn by this scene edge.
    pub doc_edge: usize,
    /// How many model edges it stands for (several when a scope is collapsed).
    pub count: usize,
    pub bbox: Rect,
}

/// Per-scope unit lists and the model edges each scope's layout carries.
pub struct Structure {
    pub units: Vec<Vec<Unit>>,
    /// For each scope: (unit index a, unit index b, doc edge index).
    pub edges: Vec<Vec<(usize, usize, usize)>>,
}

impl Structure {
    pub fn new(doc: &GraphDoc) -> Self {
        let ns = doc.scopes.len();
        let mut units: Vec<Vec<Unit>> = vec![Vec::new(); ns];
        let mut unit_index: HashMap<Unit, usize> = HashMap::new();
        for (s, sc) in doc.scopes.iter().enumerate() {
            for &i in &sc.items {
                unit_index.insert(Unit::Item(i), units[s].len());
                units[s].push(Unit::Item(i));
            }
            for &c in &sc.children {
                unit_index.insert(Unit::Scope(c), units[s].len());
                units[s].push(Unit::Scope(c));
            }
        }
        let mut edges = vec![Vec::new(); ns];
        for (ei, e) in doc.edges.iter().enumerate() {
            let pa = doc.scope_path(doc.items[e.from].scope);
            let pb = doc.scope_path(doc.items[e.to].scope);
            let mut k = 0;
            while k < pa.len() && k < pb.len() && pa[k] == pb[k] {
                k += 1;
            }
            let lca = pa[k - 1];
            let ua = pa.get(k).map_or(Unit::Item(e.from), |&s| Unit::Scope(s));
            let ub = pb.get(k).map_or(Unit::Item(e.to), |&s| Unit::Scope(s));
            edges[lca].push((unit_index[&ua], unit_index[&ub], ei));
        }
        Self { units, edges }
    }
}

/// The layout of one expanded scope, in its own content coordinates.
pub struct Local {
    pub size: Vec2,
    pub rects: Vec<Rect>,
    /// Route per (unit a, unit b).
    pub routes: HashMap<(usize, usize), Vec<Pos2>>,
}

/// Lays out scenes, caching the local layout of each expanded scope.
pub struct SceneBuilder {
    pub doc: Arc<GraphDoc>,
    pub structure: Arc<Structure>,
    cache: HashMap<ScopeId, Arc<Local>>,
    params: Params,
}

impl SceneBuilder {
    pub fn new(doc: Arc<GraphDoc>) -> Self {
        let structure = Arc::new(Structure::new(&doc));
        Self {
            doc,
            structure,
            cache: HashMap::new(),
            params: Params::default(),
        }
    }

    /// Forgets the layouts that depend on `scope` (itself and its ancestors).
    pub fn invalidate(&mut self, scope: ScopeId) {
        for s in self.doc.scope_path(scope) {
            self.cache.remove(&s);
        }
    }

    fn unit_size(&mut self, u: Unit, collapsed: &HashSet<ScopeId>) -> Vec2 {
        match u {
            Unit::Item(i) => self.doc.items[i].size,
            Unit::Scope(s) if collapsed.contains(&s) => self.doc.collapsed_size(s),
            Unit::Scope(s) => {
                let inner = self.local(s, collapsed).size;
                let title_w = self.doc.scopes[s].name.chars().count() as f32 * super::doc::CHAR_WIDTH + 40.0;
                vec2(
                    inner.x.max(title_w) + 2.0 * FRAME_PAD,
                    inner.y + FRAME_HEADER + 2.0 * FRAME_PAD,
                )
            }
        }
    }

    fn local(&mut self, s: ScopeId, collapsed: &HashSet<ScopeId>) -> Arc<Local> {
        if let Some(l) = self.cache.get(&s) {
            return l.clone();
        }
        let structure = self.structure.clone();
        let units = &structure.units[s];
        let sizes: Vec<Vec2> = units.iter().map(|&u| self.unit_size(u, collapsed)).collect();
        let mut pairs: Vec<(usize, usize)> = structure.edges[s].iter().map(|&(a, b, _)| (a, b)).collect();
        pairs.sort_unstable();
        pairs.dedup();
        let l = layout::layout(&sizes, &pairs, &self.params);
        let routes = pairs.into_iter().zip(l.routes).map(|(p, r)| (p, r.points)).collect();
        let local = Arc::new(Local {
            size: l.size,
            rects: l.rects,
            routes,
        });
        self.cache.insert(s, local.clone());
        local
    }

    /// Builds the scene for the given collapsed scopes (the root is always expanded).
    pub fn build(&mut self, collapsed: &HashSet<ScopeId>) -> Scene {
        let doc = self.doc.clone();
        let structure = self.structure.clone();
        let mut boxes = Vec::new();
        let mut item_box = vec![usize::MAX; doc.items.len()];
        let mut scope_box: HashMap<ScopeId, usize> = HashMap::new();
        // Content origin and unit boxes per expanded scope.
        let mut unit_boxes: HashMap<ScopeId, (Pos2, Vec<usize>)> = HashMap::new();
        let mut stack = vec![(0usize, Pos2::ZERO)];
        while let Some((s, origin)) = stack.pop() {
            let local = self.local(s, collapsed);
            let mut ids = Vec::with_capacity(local.rects.len());
            for (ui, &u) in structure.units[s].iter().enumerate() {
                let rect = local.rects[ui].translate(origin.to_vec2());
                let b = boxes.len();
                ids.push(b);
                match u {
                    Unit::Item(i) => {
                        boxes.push(SceneBox {
                            rect,
                            kind: BoxKind::Item(i),
                        });
                        item_box[i] = b;
                    }
                    Unit::Scope(c) if collapsed.contains(&c) => {
                        boxes.push(SceneBox {
                            rect,
                            kind: BoxKind::Collapsed(c),
                        });
                        scope_box.insert(c, b);
                        mark_items(&doc, c, b, &mut item_box);
                    }
                    Unit::Scope(c) => {
                        boxes.push(SceneBox {
                            rect,
                            kind: BoxKind::Frame(c),
                        });
                        scope_box.insert(c, b);
                        stack.push((c, rect.min + vec2(FRAME_PAD, FRAME_HEADER + FRAME_PAD)));
                    }
                }
            }
            unit_boxes.insert(s, (origin, ids));
        }
        // Edges: one per pair of visible boxes.
        let mut edges: Vec<SceneEdge> = Vec::new();
        let mut seen: HashMap<(usize, usize), usize> = HashMap::new();
        for (s, list) in structure.edges.iter().enumerate() {
            let Some((origin, ids)) = unit_boxes.get(&s) else {
                continue; // inside a collapsed scope
            };
            let local = self.local(s, collapsed);
            for &(ua, ub, ei) in list {
                let e = doc.edges[ei];
                let (fa, fb) = (item_box[e.from], item_box[e.to]);
                if fa == fb || fa == usize::MAX || fb == usize::MAX {
                    continue;
                }
                if let Some(&k) = seen.get(&(fa, fb)) {
                    edges[k].count += 1;
                    continue;
                }
                let Some(route) = local.routes.get(&(ua, ub)) else {
                    continue;
                };
                let mut inner: Vec<Pos2> = route.iter().map(|p| *p + origin.to_vec2()).collect();
                let (ra, rb) = (boxes[fa].rect, boxes[fb].rect);
                let upward = inner.len() >= 2 && inner[0].y > inner[inner.len() - 1].y;
                let (start, end) = if upward {
                    (ra.center_top(), rb.center_bottom())
                } else {
                    (ra.center_bottom(), rb.center_top())
                };
                if ids[ua] == fa {
                    inner[0] = start;
                } else {
                    inner.insert(0, start);
                }
                let last = inner.len() - 1;
                if ids[ub] == fb {
                    inner[last] = end;
                } else {
                    inner.push(end);
                }
                let bbox = Rect::from_points(&inner);
                seen.insert((fa, fb), edges.len());
                edges.push(SceneEdge {
                    points: inner,
                    from: fa,
                    to: fb,
                    doc_edge: ei,
                    count: 1,
                    bbox,
                });
            }
        }
        let root = self.local(0, collapsed);
        Scene {
            boxes,
            edges,
            bounds: Rect::from_min_size(Pos2::ZERO, root.size),
            item_box,
            scope_box,
            minimap: Vec::new(),
        }
        .with_minimap()
    }
}

fn mark_items(doc: &GraphDoc, s: ScopeId, b: usize, item_box: &mut [usize]) {
    let mut stack = vec![s];
    while let Some(s) = stack.pop() {
        for &i in &doc.scopes[s].items {
            item_box[i] = b;
        }
        stack.extend(&doc.scopes[s].children);
    }
}

/// Minimap resolution (cells per side).
pub const MINIMAP_CELLS: usize = 64;

/// A laid-out graph.
pub struct Scene {
    pub boxes: Vec<SceneBox>,
    pub edges: Vec<SceneEdge>,
    pub bounds: Rect,
    /// Box showing each card (its own or its collapsed scope's).
    pub item_box: Vec<usize>,
    /// Box (frame or collapsed) of each visible scope.
    pub scope_box: HashMap<ScopeId, usize>,
    /// Occupied minimap cells (column, row), so the minimap costs the same for any size.
    pub minimap: Vec<(u16, u16)>,
}

impl Scene {
    fn with_minimap(mut self) -> Self {
        let n = MINIMAP_CELLS;
        let mut occupied = vec![false; n * n];
        let size = self.bounds.size().max(vec2(1.0, 1.0));
        for b in &self.boxes {
            if matches!(b.kind, BoxKind::Frame(_)) {
                continue;
            }
            let cell = |p: Pos2| {
                let c = ((p.x / size.x) * n as f32).clamp(0.0, (n - 1) as f32) as usize;
                let r = ((p.y / size.y) * n as f32).clamp(0.0, (n - 1) as f32) as usize;
                (c, r)
            };
            let (c0, r0) = cell(b.rect.min);
            let (c1, r1) = cell(b.rect.max);
            for r in r0..=r1 {
                for c in c0..=c1 {
                    occupied[r * n + c] = true;
                }
            }
        }
        self.minimap = (0..n * n)
            .filter(|&i| occupied[i])
            .map(|i| ((i % n) as u16, (i / n) as u16))
            .collect();
        self
    }

    /// The topmost box under a point (cards and collapsed scopes before frames).
    pub fn hit(&self, p: Pos2) -> Option<usize> {
        let mut frame = None;
        for (i, b) in self.boxes.iter().enumerate() {
            if b.rect.contains(p) {
                match b.kind {
                    BoxKind::Frame(_) => {
                        // Only the header of a frame is a handle; the deepest wins.
                        if p.y <= b.rect.min.y + FRAME_HEADER {
                            frame = Some(i);
                        }
                    }
                    _ => return Some(i),
                }
            }
        }
        frame
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_doc() -> Arc<GraphDoc> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../assets/models/sample_cnn.onnx");
        let m = npu_core::import::load(std::path::Path::new(path))
            .expect("sample loads")
            .0;
        Arc::new(GraphDoc::build(&m))
    }

    fn no_overlaps(scene: &Scene) {
        // Boxes that are not nested must not overlap.
        let solid: Vec<&SceneBox> = scene
            .boxes
            .iter()
            .filter(|b| !matches!(b.kind, BoxKind::Frame(_)))
            .collect();
        for (i, a) in solid.iter().enumerate() {
            for b in &solid[i + 1..] {
                assert!(
                    !a.rect.shrink(0.5).intersects(b.rect.shrink(0.5)),
                    "{:?} overlaps {:?}",
                    a.kind,
                    b.kind
                );
            }
        }
    }

    #[test]
    fn expanded_scene_shows_every_card_inside_its_frames() {
        let doc = sample_doc();
        let mut b = SceneBuilder::new(doc.clone());
        let scene = b.build(&HashSet::new());
        assert!(scene.item_box.iter().all(|&x| x != usize::MAX));
        for (i, item) in doc.items.iter().enumerate() {
            let r = scene.boxes[scene.item_box[i]].rect;
            // Each card lies inside the frame of every enclosing scope.
            for s in doc.scope_path(item.scope).into_iter().skip(1) {
                let f = scene.boxes[scene.scope_box[&s]].rect;
                assert!(f.contains_rect(r), "{} outside {}", item.name, doc.scopes[s].path);
            }
        }
        no_overlaps(&scene);
        assert!(scene.edges.iter().all(|e| e.points.len() >= 2));
    }

    #[test]
    fn collapsing_a_scope_hides_its_cards_and_reroutes_edges() {
        let doc = sample_doc();
        let mut b = SceneBuilder::new(doc.clone());
        let full = b.build(&HashSet::new());
        let backbone = doc.scopes.iter().position(|s| s.path == "backbone").expect("backbone");
        let collapsed: HashSet<ScopeId> = [backbone].into();
        b.invalidate(backbone);
        let scene = b.build(&collapsed);
        let cb = scene.scope_box[&backbone];
        assert!(matches!(scene.boxes[cb].kind, BoxKind::Collapsed(_)));
        let inside = doc
            .items
            .iter()
            .enumerate()
            .filter(|(_, it)| doc.scope_path(it.scope).contains(&backbone));
        for (i, _) in inside {
            assert_eq!(scene.item_box[i], cb);
        }
        assert!(scene.boxes.len() < full.boxes.len());
        // image → backbone → head: both edges touch the collapsed box.
        assert!(scene.edges.iter().any(|e| e.to == cb) && scene.edges.iter().any(|e| e.from == cb));
        no_overlaps(&scene);
        // Expanding again gives the first layout back.
        b.invalidate(backbone);
        let again = b.build(&HashSet::new());
        assert_eq!(again.boxes.len(), full.boxes.len());
        for (x, y) in again.boxes.iter().zip(&full.boxes) {
            assert_eq!(x.rect, y.rect);
        }
    }
}
