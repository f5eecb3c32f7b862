//! The FP32 reference executor: runs a [`Model`] on ndarray tensors with fast kernels.

mod fuse;
pub mod integer;
pub(crate) mod ops;
pub mod simd;

use ops::elementwise::sigmoid as elementwise_sigmoid;

use crate::ir::{Graph, Model, Node, Tensor, Val, ValueId, ValueKind};
use std::collections::HashMap;

pub use ops::is_supported;

/// A failure while running a model. Names the node and its op.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("node '{node}' ({op}): {message}")]
    Node { node: String, op: String, message: String },
    #[error("missing input '{0}'")]
    MissingInput(String),
    #[error("input '{name}': {message}")]
    BadInput { name: String, message: String },
    #[error("{0}")]
    Graph(#[from] crate::ir::ValidationError),
    #[error("cancelled")]
    Cancelled,
}

/// Casts a tensor to `to` as ONNX's `Cast` does (saturating for 8-bit floats).
pub fn cast(t: &Tensor, to: crate::ir::DType) -> Result<Tensor, SimError> {
    ops::quant::cast(t, to, true, crate::ir::small::E8M0Round::Up).map_err(|message| SimError::BadInput {
        name: format!("cast to {to}"),
        message,
    })
}

/// Per-run settings visible to kernels.
#[derive(Clone, Copy, Debug)]
pub struct OpCtx {
    /// Default-domain opset of the model.
    pub opset: i64,
    /// Threads kernels may use (the size of the rayon pool they run in).
    pub threads: usize,
}

/// One slot of the value environment during a run.
enum Slot<'a> {
    Empty,
    Borrowed(&'a Tensor),
    Owned(Tensor),
    /// A sequence or an optional (never a plain tensor).
    Other(Val),
}

impl<'a> Slot<'a> {
    /// The tensor held, if the slot holds one.
    fn get(&self) -> Option<&Tensor> {
        match self {
            Slot::Empty | Slot::Other(_) => None,
            Slot::Borrowed(t) => Some(t),
            Slot::Owned(t) => Some(t),
        }
    }

    /// A copy of whatever value the slot holds.
    fn val(&self) -> Option<Val> {
        match self {
            Slot::Other(v) => Some(v.clone()),
            _ => self.get().cloned().map(Val::Tensor),
        }
    }

    fn from_val(v: Val) -> Self {
        match v {
            Val::Tensor(t) => Slot::Owned(t),
            other => Slot::Other(other),
        }
    }

    fn from_ref(v: &'a Val) -> Self {
        match v {
            Val::Tensor(t) => Slot::Borrowed(t),
            other => Slot::Other(other.clone()),
        }
    }
}

/// A prepared plan for one graph: execution order and when each value dies.
struct Plan {
    order: Vec<usize>,
    /// For each step, the values whose last use is that step.
    frees: Vec<Vec<ValueId>>,
    /// Outputs of `Constant` nodes, computed once when the plan is made.
    consts: Vec<(ValueId, Tensor)>,
    /// Element-wise chains by the step they start at.
    chains: Vec<Option<fuse::Chain>>,
}

impl Plan {
    fn new(g: &Graph) -> Result<Self, SimError> {
        let order = g.topo_order()?;
        let reads = g.reads();
        let mut last = vec![None; g.values.len()];
        for (step, &n) in order.iter().enumerate() {
            for &v in &reads[n] {
                last[v] = Some(step);
            }
        }
        for &o in &g.outputs {
            last[o] = None;
        }
        let mut frees = vec![Vec::new(); order.len()];
        for (v, l) in last.iter().enumerate() {
            if let Some(step) = l
                && g.values[v].constant.is_none()
            {
                frees[*step].push(v);
            }
        }
        let mut consts = Vec::new();
        let mut keep = Vec::with_capacity(order.len());
        let mut keep_frees = Vec::with_capacity(order.len());
        let ctx = OpCtx { opset: 0, threads: 1 };
        for (step, &n) in order.iter().enumerate() {
            let node = &g.nodes[n];
            if node.op == "Constant"
                && node.inputs.is_empty()
                && node.domain.is_empty()
                && let (Ok(mut outs), Some(Some(v))) = (ops::eval(node, &[], &ctx), node.outputs.first())
                && let Some(t) = outs.pop()
            {
                consts.push((*v, t));
                continue;
            }
            keep.push(n);
            keep_frees.push(std::mem::take(&mut frees[step]));
        }
        let chains = fuse::find_chains(g, &keep);
        Ok(Self {
            order: keep,
            frees: keep_frees,
            consts,
            chains,
        })
    }
}

/// Hook called after each node with its outputs (for capturing activations).
pub type NodeHook<'h> = dyn FnMut(usize, &Node, &[Option<&Tensor>]) + Send + 'h;

/// Runs a model in FP32 (every op at its declared dtype).
pub struct Executor<'m> {
    model: &'m Model,
    plan: Plan,
    ctx: OpCtx,
    /// The executor's own worker threads. Runs never share workers with other executors:
    /// the GEMM kernels keep per-thread scratch memory that concurrent callers on one pool
    /// would clobber.
    pool: rayon::ThreadPool,
    /// Run element-wise chains as one pass (off: every node's output is materialized).
    fusion: bool,
}

impl<'m> Executor<'m> {
    /// Prepares a model for execution; `threads` sizes the kernels' parallelism.
    pub fn new(model: &'m Model, threads: usize) -> Result<Self, SimError> {
        let threads = threads.max(1);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("npu-sim-{i}"))
            .build()
            .map_err(|e| SimError::BadInput {
                name: "threads".into(),
                message: e.to_string(),
            })?;
        Ok(Self {
            model,
            plan: Plan::new(&model.graph)?,
            ctx: OpCtx {
                opset: model.opset(),
                threads,
            },
            pool,
            fusion: true,
        })
    }

    /// Turns element-wise chain fusion on or off (off makes the hook see every node).
    pub fn set_fusion(&mut self, on: bool) {
        self.fusion = on;
    }

    /// Runs with named inputs; returns the graph outputs in order, with their names.
    pub fn run(&self, inputs: &HashMap<String, Tensor>) -> Result<Vec<(String, Tensor)>, SimError> {
        self.run_with_hook(inputs, None)
    }

    /// Runs with a hook that sees every node's outputs.
    pub fn run_with_hook(
        &self,
        inputs: &HashMap<String, Tensor>,
        hook: Option<&mut NodeHook<'_>>,
    ) -> Result<Vec<(String, Tensor)>, SimError> {
        let g = &self.model.graph;
        for &i in &g.inputs {
            let v = &g.values[i];
            let t = inputs
                .get(&v.name)
                .ok_or_else(|| SimError::MissingInput(v.name.clone()))?;
            check_kind(v, "a tensor")?;
            check_input(v, t)?;
        }
        let outs = self.execute(|name: &str| inputs.get(name).map(Slot::Borrowed), hook)?;
        g.outputs
            .iter()
            .zip(outs)
            .map(|(&o, v)| {
                let name = g.values[o].name.clone();
                match v {
                    Val::Tensor(t) => Ok((name, t)),
                    other => Err(SimError::BadInput {
                        message: format!(
                            "this output is {}, not a tensor (Executor::run_values returns it)",
                            other.kind()
                        ),
                        name,
                    }),
                }
            })
            .collect()
    }

    /// Runs with inputs of any kind (tensors, sequences, optionals); returns every output
    /// as the value it is.
    pub fn run_values(&self, inputs: &HashMap<String, Val>) -> Result<Vec<(String, Val)>, SimError> {
        let g = &self.model.graph;
        for &i in &g.inputs {
            let v = &g.values[i];
            let given = inputs
                .get(&v.name)
                .ok_or_else(|| SimError::MissingInput(v.name.clone()))?;
            check_kind(v, given.kind())?;
            if let Val::Tensor(t) = given {
                check_input(v, t)?;
            }
        }
        let outs = self.execute(|name: &str| inputs.get(name).map(Slot::from_ref), None)?;
        Ok(g.outputs
            .iter()
            .zip(outs)
            .map(|(&o, v)| (g.values[o].name.clone(), v))
            .collect())
    }

    /// Runs the main graph in the executor's pool, its other workers kept awake.
    fn execute<'a>(
        &'a self,
        by_name: impl Fn(&str) -> Option<Slot<'a>> + Sync,
        hook: Option<&mut NodeHook<'_>>,
    ) -> Result<Vec<Val>, SimError> {
        let (g, fusion) = (&self.model.graph, self.fusion);
        self.pool.install(|| {
            with_spinners(self.ctx.threads, || {
                run_graph(g, &self.plan, &by_name, &|_| None, self.ctx, hook, fusion)
            })
        })
    }
}

/// Checks that a graph input is given the kind of value it declares.
fn check_kind(v: &crate::ir::Value, given: &str) -> Result<(), SimError> {
    let expected = match v.kind {
        ValueKind::Tensor => "a tensor",
        ValueKind::Sequence => "a sequence",
        ValueKind::Optional => "an optional",
        ValueKind::Other => "a map",
    };
    if given == expected {
        Ok(())
    } else {
        Err(SimError::BadInput {
            name: v.name.clone(),
            message: format!("expected {expected}, got {given}"),
        })
    }
}

fn check_input(v: &crate::ir::Value, t: &Tensor) -> Result<(), SimError> {
    if let Some(dt) = v.dtype
        && dt != t.dtype()
    {
        return Err(SimError::BadInput {
            name: v.name.clone(),
            message: format!("expected dtype {dt}, got {}", t.dtype()),
        });
    }
    if let Some(shape) = &v.shape {
        let ok = shape.len() == t.shape().len()
            && shape.iter().zip(t.shape()).all(|(d, &n)| match d {
                crate::ir::Dim::Fixed(k) => *k == n,
                crate::ir::Dim::Sym(_) => true,
            });
        if !ok {
            return Err(SimError::BadInput {
                name: v.name.clone(),
                message: format!("expected shape {}, got {:?}", crate::ir::shape_string(shape), t.shape()),
            });
        }
    }
    Ok(())
}

/// Runs a (sub)graph. `inputs` resolves graph inputs by name, `outer` resolves names from
/// enclosing graphs.
fn run_graph<'a>(
    g: &'a Graph,
    plan: &'a Plan,
    inputs: &dyn Fn(&str) -> Option<Slot<'a>>,
    outer: &dyn Fn(&str) -> Option<Val>,
    ctx: OpCtx,
    mut hook: Option<&mut NodeHook<'_>>,
    fusion: bool,
) -> Result<Vec<Val>, SimError> {
    let mut env: Vec<Slot<'a>> = (0..g.values.len()).map(|_| Slot::Empty).collect();
    for (i, v) in g.values.iter().enumerate() {
        if let Some(c) = &v.constant {
            env[i] = Slot::Borrowed(c.tensor());
        } else if v.outer
            && let Some(t) = outer(&v.name)
        {
            env[i] = Slot::from_val(t);
        }
    }
    for (v, t) in &plan.consts {
        env[*v] = Slot::Borrowed(t);
    }
    for &i in &g.inputs {
        let name = &g.values[i].name;
        env[i] = inputs(name).ok_or_else(|| SimError::MissingInput(name.clone()))?;
    }
    let mut skip = 0;
    for (step, &n) in plan.order.iter().enumerate() {
        if skip > 0 {
            skip -= 1;
            continue;
        }
        if let (true, Some(chain)) = (fusion, &plan.chains[step])
            && let Some(out) = run_chain_step(g, plan, step, chain, &mut env, ctx.opset)
        {
            env[chain.out] = Slot::Owned(out);
            let len = chain.nodes.len();
            if let Some(h) = hook.as_deref_mut() {
                let last = chain.nodes[len - 1];
                h(last, &g.nodes[last], &[env[chain.out].get()]);
            }
            for k in step..step + len {
                for &v in &plan.frees[k] {
                    if !g.inputs.contains(&v) {
                        env[v] = Slot::Empty;
                    }
                }
            }
            skip = len - 1;
            continue;
        }
        let node = &g.nodes[n];
        let container = ops::containers::CONTAINER_OPS.contains(&node.op.as_str())
            || (node.op == "Identity" && node.input(0).is_some_and(|v| matches!(env[v], Slot::Other(_))));
        let node_err = |message| SimError::Node {
            node: node.label(),
            op: node.op.clone(),
            message,
        };
        let outs: Vec<Val> = if container {
            let ins: Vec<Option<Val>> = node.inputs.iter().map(|v| v.and_then(|v| env[v].val())).collect();
            let env_ref = &env;
            let lookup = |name: &str| -> Option<Val> {
                match g.value_id(name) {
                    Some(id) => env_ref[id].val(),
                    None => outer(name),
                }
            };
            ops::containers::eval(node, &ins, &ctx, &lookup).map_err(node_err)?
        } else if let Some(x) = run_in_place(node, step, plan, &mut env, &ctx).map_err(node_err)? {
            vec![Val::Tensor(x)]
        } else {
            let ins: Vec<Option<&Tensor>> = node.inputs.iter().map(|v| v.and_then(|v| env[v].get())).collect();
            let outs = ops::eval(node, &ins, &ctx).map_err(node_err)?;
            outs.into_iter().map(Val::Tensor).collect()
        };
        for (o, v) in node.outputs.iter().zip(outs) {
            if let Some(o) = o {
                env[*o] = Slot::from_val(v);
            }
        }
        if let Some(h) = hook.as_deref_mut() {
            let views: Vec<Option<&Tensor>> = node.outputs.iter().map(|o| o.and_then(|o| env[o].get())).collect();
            h(n, node, &views);
        }
        for &v in &plan.frees[step] {
            if !g.inputs.contains(&v) {
                env[v] = Slot::Empty;
            }
        }
    }
    g.outputs
        .iter()
        .map(|&o| {
            env[o].val().ok_or_else(|| SimError::Node {
                node: g.values[o].name.clone(),
                op: "output".into(),
                message: "graph output was not computed".into(),
            })
        })
        .collect()
}

/// Runs an element-wise op in the buffer of its first input when that input dies here and
/// is owned; `None` when the op does not run that way (the input is then left in place).
fn run_in_place(
    node: &Node,
    step: usize,
    plan: &Plan,
    env: &mut [Slot<'_>],
    ctx: &OpCtx,
) -> Result<Option<Tensor>, String> {
    let op = node.op.as_str();
    let view = matches!(op, "Reshape" | "Flatten" | "Squeeze" | "Unsqueeze" | "Identity");
    let donor = node.input(0).filter(|&v| {
        (view || ops::elementwise::INPLACE_OPS.contains(&op))
            && matches!(env[v], Slot::Owned(_))
            && plan.frees[step].contains(&v)
            && node.inputs.iter().filter(|x| **x == Some(v)).count() == 1
    });
    let Some(v) = donor else { return Ok(None) };
    if view {
        // The buffer moves into the output under its new shape (no copy). Dims the op
        // rejects are left to its kernel, which reports them.
        let Some(x) = env[v].get() else { return Ok(None) };
        let (shape, len) = (x.shape().to_vec(), x.len());
        let inputs: Vec<Option<&Tensor>> = std::iter::once(None)
            .chain(node.inputs[1..].iter().map(|v| v.and_then(|v| env[v].get())))
            .collect();
        let dims = match ops::shape::view_dims(op, node, &shape, &inputs, ctx) {
            None => shape,
            Some(Ok(d)) => d,
            Some(Err(_)) => return Ok(None),
        };
        if dims.iter().try_fold(1usize, |a, &b| a.checked_mul(b)) != Some(len) {
            return Ok(None);
        }
        let Slot::Owned(x) = std::mem::replace(&mut env[v], Slot::Empty) else {
            return Ok(None);
        };
        return Ok(x.into_reshaped(&dims));
    }
    let Slot::Owned(mut x) = std::mem::replace(&mut env[v], Slot::Empty) else {
        return Ok(None);
    };
    let rest: Vec<Option<&Tensor>> = node.inputs[1..].iter().map(|v| v.and_then(|v| env[v].get())).collect();
    let done = ops::elementwise::try_inplace(node, &mut x, &rest, ctx);
    if matches!(done, Ok(true)) {
        return Ok(Some(x));
    }
    env[v] = Slot::Owned(x);
    done.map(|_| None)
}

/// Runs an element-wise chain: donates the start buffer when nothing else needs it,
/// copies it otherwise. `None` when the operands do not fit (the nodes then run one by one).
fn run_chain_step(
    g: &Graph,
    plan: &Plan,
    step: usize,
    chain: &fuse::Chain,
    env: &mut [Slot<'_>],
    opset: i64,
) -> Option<Tensor> {
    let start = chain.start;
    if !matches!(env[start].get(), Some(Tensor::F32(a)) if a.is_standard_layout()) {
        return None;
    }
    let used_later = chain.reads_start_untapped(g);
    let dies = (step..step + chain.nodes.len()).any(|k| plan.frees[k].contains(&start)) && !g.inputs.contains(&start);
    let data = if dies && !used_later && matches!(env[start], Slot::Owned(_)) {
        match std::mem::replace(&mut env[start], Slot::Empty) {
            Slot::Owned(t) => t,
            _ => return None,
        }
    } else {
        env[start].get()?.clone()
    };
    let donated = matches!(env[start], Slot::Empty);
    let lookup = |v: ValueId| env[v].get();
    match fuse::run_chain(g, chain, data, &lookup, opset) {
        Ok(t) => Some(t),
        Err(t) => {
            if donated {
                env[start] = Slot::Owned(t);
            }
            None
        }
    }
}

/// Runs a subgraph (an If/Loop body) with explicit inputs, resolving outer names through `outer`.
pub(crate) fn run_subgraph(
    g: &Graph,
    inputs: &[Val],
    outer: &dyn Fn(&str) -> Option<Val>,
    ctx: &OpCtx,
) -> Result<Vec<Val>, String> {
    let plan = Plan::new(g).map_err(|e| e.to_string())?;
    let named: HashMap<&str, &Val> = g
        .inputs
        .iter()
        .zip(inputs)
        .map(|(&i, t)| (g.values[i].name.as_str(), t))
        .collect();
    let by_name = |name: &str| named.get(name).map(|v| Slot::from_ref(v));
    run_graph(g, &plan, &by_name, outer, *ctx, None, true).map_err(|e| format!("in subgraph '{}': {e}", g.name))
}

/// Runs `f` (on a worker of the current pool) while the pool's other workers stay awake,
/// spinning for work instead of sleeping between ops. A run is hundreds of short parallel
/// ops; waking a sleeping worker for each costs more than many of them take.
fn with_spinners<R: Send>(threads: usize, f: impl FnOnce() -> R + Send) -> R {
    use std::sync::atomic::{AtomicBool, Ordering};
    if threads < 2 {
        return f();
    }
    let done = AtomicBool::new(false);
    let driver = rayon::current_thread_index();
    rayon::scope(|s| {
        for _ in 1..threads {
            s.spawn(|_| {
                // The driver itself may pick this job up while it waits inside `f`: it must
                // not spin then, or `f` would never finish.
                if rayon::current_thread_index() == driver {
                    return;
                }
                while !done.load(Ordering::Acquire) {
                    if rayon::yield_now() != Some(rayon::Yield::Executed) {
                        std::hint::spin_loop();
                    }
                }
            });
        }
        let r = f();
        done.store(true, Ordering::Release);
        r
    })
}

/// Runs `f` inside a rayon pool of `threads` threads (the calling thread's pool when 0).
pub fn with_threads<R: Send>(threads: usize, f: impl FnOnce() -> R + Send) -> R {
    if threads == 0 {
        return f();
    }
    match rayon::ThreadPoolBuilder::new().num_threads(threads).build() {
        Ok(pool) => pool.install(f),
        Err(_) => f(),
    }
}

/// Multiply-accumulates of Conv, ConvTranspose, MatMul and Gemm whose shapes are known.
/// The flag is true when some of them had unknown shapes (the count is a lower bound).
pub fn count_macs(model: &Model) -> (u64, bool) {
    let g = &model.graph;
    let dims = |v: Option<usize>| -> Option<Vec<usize>> {
        v.and_then(|v| g.values[v].shape.as_ref())
            .and_then(|s| crate::ir::concrete(s))
    };
    let mut total = 0u64;
    let mut partial = false;
    for n in &g.nodes {
        let prod = |s: &[usize]| s.iter().map(|&d| d as u64).product::<u64>();
        let macs = match n.op.as_str() {
            "Conv" => match (dims(n.outputs.first().copied().flatten()), dims(n.input(1))) {
                (Some(o), Some(w)) if w.len() >= 2 => Some(prod(&o) * prod(&w[1..])),
                _ => None,
            },
            "ConvTranspose" => match (dims(n.input(0)), dims(n.input(1))) {
                (Some(x), Some(w)) if w.len() >= 2 => Some(prod(&x) * prod(&w[1..])),
                _ => None,
            },
            "MatMul" | "Gemm" => match (dims(n.outputs.first().copied().flatten()), dims(n.input(0))) {
                (Some(o), Some(a)) if !a.is_empty() => {
                    let trans = n.op == "Gemm" && n.attr_i("transA").unwrap_or(0) != 0;
                    let k = if trans { a[0] } else { a[a.len() - 1] };
                    Some(prod(&o) * k as u64)
                }
                _ => None,
            },
            _ => Some(0),
        };
        match macs {
            Some(m) => total += m,
            None => partial = true,
        }
    }
    (total, partial)
}

#[cfg(test)]
mod tests {
    use super::Executor;
    use crate::ir::{Attr, Constant, DType, Dim, Model, Node, Tensor, Value};
    use ndarray::{ArrayD, IxDyn};
    use std::collections::HashMap;

    /// Reshape, Flatten, Squeeze, Unsqueeze and Identity move their input when it dies
    /// there and copy it when a later node still reads it; both give the same values.
    #[test]
    fn view_ops_move_a_dying_input_and_copy_a_live_one() {
        let mut m = Model::default();
        m.meta.ir_version = 8;
        m.meta.opsets.insert(String::new(), 13);
        let g = &mut m.graph;
        let value = |g: &mut crate::ir::Graph, name: &str, c: Option<Tensor>| {
            let mut v = Value::new(name);
            if let Some(t) = c {
                v.dtype = Some(t.dtype());
                v.constant = Some(Constant::from_tensor(&t));
            }
            g.values.push(v);
            g.values.len() - 1
        };
        let ints = |v: &[i64]| Tensor::I64(ArrayD::from_shape_vec(IxDyn(&[v.len()]), v.to_vec()).expect("shape"));
        let x = value(g, "x", None);
        g.values[x].dtype = Some(DType::F32);
        g.values[x].shape = Some(vec![Dim::Fixed(2), Dim::Fixed(6)]);
        g.inputs.push(x);
        let shape = value(g, "shape", Some(ints(&[3, 1, 4])));
        let axes = value(g, "axes", Some(ints(&[1])));
        let node = |g: &mut crate::ir::Graph, op: &str, ins: &[usize], attrs: Vec<(&str, Attr)>| {
            let out = value(g, &format!("{op}_{}", g.nodes.len()), None);
            g.values[out].producer = Some(g.nodes.len());
            g.nodes.push(Node {
                name: format!("n{}", g.nodes.len()),
                op: op.into(),
                domain: String::new(),
                inputs: ins.iter().map(|&i| Some(i)).collect(),
                outputs: vec![Some(out)],
                attrs: attrs.into_iter().map(|(k, a)| (k.to_owned(), a)).collect(),
                origin: vec![],
            });
            out
        };
        let r = node(g, "Relu", &[x], vec![]);
        // `r` is read again by the Add below: this Reshape copies.
        let a = node(g, "Reshape", &[r, shape], vec![]);
        let s = node(g, "Squeeze", &[a, axes], vec![]);
        let u = node(g, "Unsqueeze", &[s, axes], vec![]);
        let f = node(g, "Flatten", &[u], vec![("axis", Attr::Int(0))]);
        let i = node(g, "Identity", &[f], vec![]);
        let shape2 = value(g, "shape2", Some(ints(&[2, 6])));
        let back = node(g, "Reshape", &[i, shape2], vec![]);
        let sum = node(g, "Add", &[back, r], vec![]);
        g.outputs = vec![sum, r];
        crate::import::shapes::infer(&mut m);
        m.validate().expect("valid");
        let data: Vec<f32> = (0..12).map(|k| k as f32 - 5.5).collect();
        let feeds = HashMap::from([("x".to_owned(), Tensor::from_f32(&[2, 6], data.clone()).expect("x"))]);
        let outs = Executor::new(&m, 1).expect("plan").run(&feeds).expect("runs");
        let relu: Vec<f32> = data.iter().map(|v| v.max(0.0)).collect();
        let Tensor::F32(got) = &outs[0].1 else { panic!("f32") };
        assert_eq!(got.shape(), &[2, 6]);
        let want: Vec<f32> = relu.iter().map(|v| 2.0 * v).collect();
        assert_eq!(got.iter().copied().collect::<Vec<_>>(), want);
        let Tensor::F32(r) = &outs[1].1 else { panic!("f32") };
        assert_eq!(r.iter().copied().collect::<Vec<_>>(), relu);
    }
}
