//! The stage graph and its two dispatch strategies.
//!
//! - [`Dispatch::Runs`] (Linux's `list_cut_before`): after a stage, its output is cut into
//!   consecutive runs with the same next, and each run is carried through the rest of the
//!   graph before the next run starts. Order over the whole list is kept.
//! - [`Dispatch::Buckets`] (VPP's pending frames): a stage's output is appended, in order,
//!   to the pending list of each target; the graph then runs the lowest-numbered stage
//!   with pending packets. Order within each target is kept, so per-flow order is kept
//!   whenever a flow's packets take the same path; interleaved flows do not shatter the
//!   list into runs of one.
//!
//! Per-packet mode is not a property of the graph: the caller hands it lists of one.
//!
//! Nodes are numbered in the order they are added; add them in pipeline order so that
//! "lowest pending first" means "upstream first".

use std::fmt;

use crate::counters::{DropCounters, NodeSnapshot};
use crate::drop::{Reason, reason};
use crate::pool::Pkt;
use crate::stage::{Cx, LIST_MAX, MIXED, Out, PktList, Stage};
use crate::trace::{ArcTarget, Trace, TraceDump, TraceNode};

/// An enum of unit variants with a command-line name each: `name()` and `FromStr`.
#[macro_export]
macro_rules! named_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $v:ident = $s:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vm])* $v,)+
        }

        impl $name {
            /// The name used on the command line and in reports.
            pub fn name(self) -> &'static str {
                match self {
                    $(Self::$v => $s,)+
                }
            }
        }

        impl std::str::FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($s => Ok(Self::$v),)+
                    _ => Err(format!(
                        concat!("unknown ", stringify!($name), " '{}' (expected {})"),
                        s,
                        [$($s),+].join(" or ")
                    )),
                }
            }
        }
    };
}

named_enum! {
    /// How a stage's output reaches the next stages.
    Dispatch {
        /// Consecutive runs with the same next, depth first (Linux).
        Runs = "runs",
        /// Stable grouping by next, breadth first (VPP).
        Buckets = "buckets",
    }
}

named_enum! {
    /// Whether packets move through the graph a list at a time or one at a time.
    Mode {
        /// Each packet goes through every stage before the next is pulled from the port.
        Packet = "packet",
        /// Each stage runs over the whole list before the next stage (listified).
        List = "list",
    }
}

/// Returns a `'static` copy of `s`, made once per distinct string for the life of the
/// process: node and arc names that depend on the configuration (one transmit node per
/// port) are interned here, so rebuilding graphs does not grow memory.
pub fn intern(s: &str) -> &'static str {
    use std::collections::HashSet;
    use std::sync::{Mutex, OnceLock};
    static NAMES: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let mut set = NAMES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(&n) = set.get(s) {
        return n;
    }
    let n: &'static str = Box::leak(s.to_owned().into_boxed_str());
    set.insert(n);
    n
}

/// A node's index in its graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub u16);

#[derive(Debug, Clone, Copy)]
enum Target {
    Node(u16),
    Drop(Reason),
}

struct Node<S> {
    name: &'static str,
    stage: Box<dyn Stage<S>>,
    targets: Vec<Target>,
    /// Packets waiting for this node (`buckets`).
    pending: PktList,
    /// Set while the node's output is being carried on under `runs` (a back edge that
    /// re-enters the node then uses a spare output).
    busy: bool,
    packets: u64,
    calls: u64,
    cycles: u64,
}

/// Errors found while assembling a graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GraphError {
    /// Two nodes with one name.
    DuplicateNode(String),
    /// A connection names a node that does not exist.
    UnknownNode(String),
    /// A connection names an arc the stage does not have.
    UnknownArc {
        /// The node.
        node: String,
        /// The arc it does not have.
        arc: String,
    },
    /// An arc left unconnected.
    Unconnected {
        /// The node.
        node: String,
        /// The arc with no target.
        arc: String,
    },
    /// More nodes than the scheduler's mask can hold.
    TooManyNodes,
    /// A stage with 255 or more arcs.
    TooManyArcs(String),
    /// What a node's declaration says does not fit the graph it is assembled into (an
    /// arc to a node that is not there, metadata no stage writes …).
    Declaration {
        /// The node.
        node: String,
        /// What does not fit.
        problem: String,
    },
}

impl fmt::Display for GraphError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::DuplicateNode(n) => write!(f, "node '{n}' added twice"),
            Self::UnknownNode(n) => write!(f, "no node named '{n}'"),
            Self::UnknownArc { node, arc } => write!(f, "node '{node}' has no arc '{arc}'"),
            Self::Unconnected { node, arc } => {
                write!(f, "arc '{arc}' of node '{node}' is not connected")
            }
            Self::TooManyNodes => f.write_str("more than 64 nodes"),
            Self::TooManyArcs(n) => write!(f, "node '{n}' has more than 254 arcs"),
            Self::Declaration { node, problem } => write!(f, "node '{node}' {problem}"),
        }
    }
}

impl std::error::Error for GraphError {}

type PendingNode<S> = (&'static str, Box<dyn Stage<S>>, Vec<Option<Target>>);

/// Builds a [`Graph`]: add nodes in pipeline order, then connect every arc.
pub struct GraphBuilder<S> {
    nodes: Vec<PendingNode<S>>,
}

impl<S> Default for GraphBuilder<S> {
    fn default() -> Self {
        Self { nodes: Vec::new() }
    }
}

impl<S> GraphBuilder<S> {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a node; nodes are numbered in the order added.
    pub fn add(
        &mut self,
        name: &'static str,
        stage: Box<dyn Stage<S>>,
    ) -> Result<NodeId, GraphError> {
        if self.nodes.iter().any(|(n, _, _)| *n == name) {
            return Err(GraphError::DuplicateNode(name.into()));
        }
        if self.nodes.len() >= 64 {
            return Err(GraphError::TooManyNodes);
        }
        if stage.arcs().len() >= usize::from(MIXED) {
            return Err(GraphError::TooManyArcs(name.into()));
        }
        let arcs = vec![None; stage.arcs().len()];
        self.nodes.push((name, stage, arcs));
        Ok(NodeId((self.nodes.len() - 1) as u16))
    }

    fn find(&self, name: &str) -> Result<usize, GraphError> {
        self.nodes
            .iter()
            .position(|(n, _, _)| *n == name)
            .ok_or_else(|| GraphError::UnknownNode(name.into()))
    }

    fn arc_index(&self, node: usize, arc: &str) -> Result<usize, GraphError> {
        let (name, stage, _) = &self.nodes[node];
        stage
            .arcs()
            .iter()
            .position(|a| *a == arc)
            .ok_or_else(|| GraphError::UnknownArc {
                node: (*name).into(),
                arc: arc.into(),
            })
    }

    /// Connects `node`'s arc `arc` to the node named `to`.
    pub fn connect(&mut self, node: &str, arc: &str, to: &str) -> Result<(), GraphError> {
        let n = self.find(node)?;
        let a = self.arc_index(n, arc)?;
        let t = self.find(to)?;
        self.nodes[n].2[a] = Some(Target::Node(t as u16));
        Ok(())
    }

    /// Makes `node`'s arc `arc` drop its packets for `reason` (counted against `node`),
    /// e.g. an arc to a protocol that is off.
    pub fn connect_drop(
        &mut self,
        node: &str,
        arc: &str,
        reason: Reason,
    ) -> Result<(), GraphError> {
        let n = self.find(node)?;
        let a = self.arc_index(n, arc)?;
        self.nodes[n].2[a] = Some(Target::Drop(reason));
        Ok(())
    }

    /// Whether a node of that name was added.
    pub fn has(&self, name: &str) -> bool {
        self.find(name).is_ok()
    }

    /// Checks every arc is connected and builds the graph.
    pub fn build(self, dispatch: Dispatch) -> Result<Graph<S>, GraphError> {
        let mut nodes = Vec::with_capacity(self.nodes.len());
        for (name, stage, arcs) in self.nodes {
            let mut targets = Vec::with_capacity(arcs.len());
            for (i, t) in arcs.into_iter().enumerate() {
                match t {
                    Some(t) => targets.push(t),
                    None => {
                        return Err(GraphError::Unconnected {
                            node: name.into(),
                            arc: stage.arcs()[i].into(),
                        });
                    }
                }
            }
            nodes.push(Node {
                name,
                stage,
                targets,
                pending: Vec::with_capacity(LIST_MAX),
                busy: false,
                packets: 0,
                calls: 0,
                cycles: 0,
            });
        }
        let n = nodes.len();
        let holders = (0..n as u16)
            .filter(|&i| nodes[usize::from(i)].stage.holds())
            .collect();
        Ok(Graph {
            holders,
            outs: (0..n).map(|_| Out::for_list()).collect(),
            drops: nodes
                .iter()
                .map(|n| DropCounters::declared(n.stage.reasons()))
                .collect(),
            pending_mask: 0,
            nodes,
            spare_lists: Vec::new(),
            spare_outs: Vec::new(),
            one: Vec::with_capacity(LIST_MAX),
            dispatch,
            timing: false,
            clock: None,
            trace: Trace::default(),
        })
    }
}

/// A built graph of stages over per-worker state `S`. One per worker.
pub struct Graph<S> {
    nodes: Vec<Node<S>>,
    /// The nodes whose stages may hold packets across calls, in node order.
    holders: Vec<u16>,
    /// Each node's output, reused call after call (indexed like `nodes`).
    outs: Vec<Out>,
    drops: Vec<DropCounters>,
    pending_mask: u64,
    spare_lists: Vec<PktList>,
    spare_outs: Vec<Out>,
    one: PktList,
    dispatch: Dispatch,
    timing: bool,
    clock: Option<quanta::Clock>,
    trace: Trace,
}

/// Calls one node and books its counters, drops and trace. A free function over the
/// graph's fields so the node's output can stay where it lives. While the trace is
/// disarmed this costs one predictable branch more than the call itself.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn call_node<S, const T: bool>(
    node: &mut Node<S>,
    out: &mut Out,
    drops: &mut DropCounters,
    trace: &mut Trace,
    clock: Option<&quanta::Clock>,
    st: &mut S,
    cx: &mut Cx<'_>,
    id: u16,
    list: &mut PktList,
) {
    // `T`: the trace is armed. The graph runs a separate copy of its dispatch loops
    // while it is (chosen once per run), so the untraced loops test nothing per call.
    if T {
        trace_enter(trace, cx, list);
    }
    process_counted(node, out, clock, st, cx, list);
    if T {
        trace_adopt(trace, cx, out);
    }
    if !list.is_empty() {
        leftovers(node.name, drops, trace, cx, id, list);
    }
    if !out.drops.is_empty() || !out.counted_drops.is_empty() {
        book_drops(out, drops, trace, cx, id);
    }
    if T {
        trace_leave(trace, cx, id, out);
    }
}

/// Runs the stage over `list` and counts the call (and its cycles while timing).
#[inline(always)]
fn process_counted<S>(
    node: &mut Node<S>,
    out: &mut Out,
    clock: Option<&quanta::Clock>,
    st: &mut S,
    cx: &mut Cx<'_>,
    list: &mut PktList,
) {
    let n = list.len() as u64;
    match clock {
        Some(c) => {
            let t0 = c.raw();
            node.stage.process(st, cx, list, out);
            node.cycles += c.raw().wrapping_sub(t0);
        }
        None => node.stage.process(st, cx, list, out),
    }
    node.calls += 1;
    node.packets += n;
}

/// While the trace is armed, before a stage call: notes the traced inputs.
#[cold]
#[inline(never)]
fn trace_enter(trace: &mut Trace, cx: &mut Cx<'_>, list: &PktList) {
    trace.note_inputs(cx.pool, list);
}

/// While the trace is armed, after a stage call: gives buffers the stage derived from
/// traced inputs their ids (before any of them is recorded as dropped).
#[cold]
#[inline(never)]
fn trace_adopt(trace: &mut Trace, cx: &mut Cx<'_>, out: &Out) {
    trace.adopt(cx.pool, out);
}

/// While the trace is armed, after a stage call and its drops: records each traced
/// packet's arc, and the traced inputs the stage kept.
#[cold]
#[inline(never)]
fn trace_leave(trace: &mut Trace, cx: &mut Cx<'_>, id: u16, out: &Out) {
    trace.record_out(cx.pool, id, out);
    trace.record_taken(id);
}

#[cold]
fn leftovers(
    name: &str,
    drops: &mut DropCounters,
    trace: &mut Trace,
    cx: &mut Cx<'_>,
    id: u16,
    list: &mut PktList,
) {
    debug_assert!(false, "stage {name} left packets in its input");
    for p in list.drain(..) {
        drop_one(drops, trace, cx, id, p, reason::STAGE_LEFTOVER);
    }
}

fn book_drops(
    out: &mut Out,
    drops: &mut DropCounters,
    trace: &mut Trace,
    cx: &mut Cx<'_>,
    id: u16,
) {
    for (p, r) in out.drops.drain(..) {
        drop_one(drops, trace, cx, id, p, r);
    }
    for &(r, wire) in &out.counted_drops {
        drops.add(r, wire);
        cx.acct.dropped += wire;
    }
    out.clear_counts();
}

#[inline]
fn drop_one(
    drops: &mut DropCounters,
    trace: &mut Trace,
    cx: &mut Cx<'_>,
    id: u16,
    p: Pkt,
    r: Reason,
) {
    if trace.armed() {
        trace.record_drop(cx.pool, &p, id, r);
    }
    let wire = cx.pool.get(&p).meta.wire_packets();
    drops.add(r, wire);
    cx.acct.dropped += wire;
    cx.cache.free(p);
}

impl<S> Graph<S> {
    /// The dispatch strategy in use.
    pub fn dispatch(&self) -> Dispatch {
        self.dispatch
    }

    /// Switches the dispatch strategy (between polls).
    pub fn set_dispatch(&mut self, d: Dispatch) {
        self.dispatch = d;
    }

    /// Turns per-stage TSC timing on or off. Off by default: two TSC reads per stage call
    /// cost more than a whole stage does per packet in list mode, so throughput runs keep
    /// it off and a separate profiling run turns it on.
    pub fn set_timing(&mut self, on: bool) {
        self.timing = on;
        if on && self.clock.is_none() {
            self.clock = Some(crate::time::clock());
        }
    }

    /// Whether per-stage TSC timing is on.
    pub fn timing(&self) -> bool {
        self.timing
    }

    /// The node named `name`.
    pub fn node(&self, name: &str) -> Option<NodeId> {
        self.nodes
            .iter()
            .position(|n| n.name == name)
            .map(|i| NodeId(i as u16))
    }

    /// Node names in node order.
    pub fn node_names(&self) -> Vec<&'static str> {
        self.nodes.iter().map(|n| n.name).collect()
    }

    /// Names of a node's arcs.
    pub fn arc_names(&self, id: NodeId) -> &[&'static str] {
        self.nodes[usize::from(id.0)].stage.arcs()
    }

    /// The opt-in packet trace.
    pub fn trace(&self) -> &Trace {
        &self.trace
    }

    /// The opt-in packet trace, to arm or clear it.
    pub fn trace_mut(&mut self) -> &mut Trace {
        &mut self.trace
    }

    /// Each node's name and arcs (name and target), in node order: what a trace's
    /// records index.
    pub fn trace_nodes(&self) -> Vec<TraceNode> {
        self.nodes
            .iter()
            .map(|n| TraceNode {
                name: n.name,
                arcs: n
                    .stage
                    .arcs()
                    .iter()
                    .zip(&n.targets)
                    .map(|(&a, t)| {
                        let to = match *t {
                            Target::Node(i) => ArcTarget::Node(self.nodes[usize::from(i)].name),
                            Target::Drop(r) => ArcTarget::Drop(r),
                        };
                        (a, to)
                    })
                    .collect(),
            })
            .collect()
    }

    /// Takes what the trace collected (marked frames, records, lost count) out of the
    /// graph, with the node names the records index; the arming stays.
    pub fn take_trace(&mut self) -> TraceDump {
        let (packets, records, lost) = self.trace.take();
        TraceDump {
            nodes: self.trace_nodes(),
            packets,
            records,
            lost,
        }
    }

    /// Per-node counters, named.
    pub fn snapshot(&self) -> Vec<NodeSnapshot> {
        self.nodes
            .iter()
            .zip(&self.drops)
            .map(|(n, d)| NodeSnapshot {
                name: n.name,
                packets: n.packets,
                calls: n.calls,
                cycles: n.cycles,
                drops: d.nonzero(),
                events: n.stage.counters(),
            })
            .collect()
    }

    /// Zeroes every node counter.
    pub fn reset_counters(&mut self) {
        for n in &mut self.nodes {
            n.packets = 0;
            n.calls = 0;
            n.cycles = 0;
        }
        for d in &mut self.drops {
            d.clear();
        }
    }

    /// Runs the packets of `list` (emptied) through the graph from `entry`, until every
    /// one has been transmitted, delivered, held or dropped.
    pub fn run(&mut self, st: &mut S, cx: &mut Cx<'_>, entry: NodeId, list: &mut PktList) {
        if list.is_empty() {
            return;
        }
        if self.trace.armed() {
            self.run_from::<true>(st, cx, entry, list);
        } else {
            self.run_from::<false>(st, cx, entry, list);
        }
    }

    /// [`Self::run`] with the trace armed (`T`) or not.
    #[inline(always)]
    fn run_from<const T: bool>(
        &mut self,
        st: &mut S,
        cx: &mut Cx<'_>,
        entry: NodeId,
        list: &mut PktList,
    ) {
        match self.dispatch {
            Dispatch::Runs => self.run_depth_first::<T>(st, cx, entry.0, list),
            Dispatch::Buckets => {
                self.enqueue(entry.0, list);
                self.drain_pending::<T>(st, cx);
            }
        }
    }

    /// The end of a poll: every stage that holds packets across calls (`Stage::holds`)
    /// and holds some now hands them over (`Stage::flush`), in node order, and they are
    /// carried through the rest of the graph: as one list, or, with `one_by_one`
    /// (per-packet mode), each packet through every stage before the next.
    pub fn flush_held(&mut self, st: &mut S, cx: &mut Cx<'_>, one_by_one: bool) {
        for k in 0..self.holders.len() {
            let id = self.holders[k];
            if self.nodes[usize::from(id)].stage.wants_flush() {
                if self.trace.armed() {
                    self.flush::<true>(st, cx, NodeId(id), one_by_one);
                } else {
                    self.flush::<false>(st, cx, NodeId(id), one_by_one);
                }
            }
        }
    }

    /// Lets node `id` hand over what it holds (`Stage::flush`) and carries it through
    /// the rest of the graph: as one list, or, with `one_by_one` (per-packet mode), each
    /// packet through every stage before the next.
    fn flush<const T: bool>(&mut self, st: &mut S, cx: &mut Cx<'_>, id: NodeId, one_by_one: bool) {
        let i = usize::from(id.0);
        let mut out = core::mem::take(&mut self.outs[i]);
        if out.pkts.capacity() == 0 {
            out = self.spare_outs.pop().unwrap_or_else(Out::for_list);
        }
        self.nodes[i].stage.flush(st, cx, &mut out);
        if !out.drops.is_empty() || !out.counted_drops.is_empty() {
            book_drops(&mut out, &mut self.drops[i], &mut self.trace, cx, id.0);
        }
        if T {
            // What a held stage hands over was not among any call's inputs.
            self.trace.note_inputs(cx.pool, &[]);
            self.trace.adopt(cx.pool, &out);
            self.trace.record_out(cx.pool, id.0, &out);
        }
        let (mut pk, mut arcs, uniform) = (
            core::mem::take(&mut out.pkts),
            core::mem::take(&mut out.arcs),
            out.uniform,
        );
        out.reset_arcs();
        if one_by_one {
            let mut one = self.take_list();
            for (k, p) in pk.drain(..).enumerate() {
                let a = if uniform == MIXED { arcs[k] } else { uniform };
                one.push(p);
                self.dispatch_from::<T>(st, cx, id.0, a, &mut one);
            }
            self.put_list(one);
        } else if self.dispatch == Dispatch::Runs {
            self.fan_out_depth_first::<T>(st, cx, id.0, &mut pk, &mut arcs, uniform);
        } else {
            for (k, p) in pk.drain(..).enumerate() {
                let a = if uniform == MIXED { arcs[k] } else { uniform };
                match self.nodes[i].targets[usize::from(a)] {
                    Target::Node(t) => {
                        self.nodes[usize::from(t)].pending.push(p);
                        self.pending_mask |= 1u64 << t;
                    }
                    Target::Drop(r) => {
                        drop_one(&mut self.drops[i], &mut self.trace, cx, id.0, p, r)
                    }
                }
            }
            self.drain_pending::<T>(st, cx);
        }
        arcs.clear();
        (out.pkts, out.arcs) = (pk, arcs);
        self.outs[i] = out;
    }

    /// Sends `l` from node `from` along `arc` with the graph's dispatch strategy.
    fn dispatch_from<const T: bool>(
        &mut self,
        st: &mut S,
        cx: &mut Cx<'_>,
        from: u16,
        arc: u8,
        l: &mut PktList,
    ) {
        match self.dispatch {
            Dispatch::Runs => self.send_depth_first::<T>(st, cx, from, arc, l),
            Dispatch::Buckets => match self.nodes[usize::from(from)].targets[usize::from(arc)] {
                Target::Node(t) => {
                    self.enqueue(t, l);
                    self.drain_pending::<T>(st, cx);
                }
                Target::Drop(r) => {
                    for p in l.drain(..) {
                        drop_one(
                            &mut self.drops[usize::from(from)],
                            &mut self.trace,
                            cx,
                            from,
                            p,
                            r,
                        );
                    }
                }
            },
        }
    }

    /// Wire packets held by the stages themselves (coalescing tables).
    pub fn held(&self) -> u64 {
        // Every node, not only those that declared `holds`: what the conservation law
        // counts must not depend on a declaration.
        self.nodes.iter().map(|n| n.stage.held()).sum()
    }

    /// Runs a single packet through the graph from `entry` (per-packet mode).
    #[inline]
    pub fn run_one(&mut self, st: &mut S, cx: &mut Cx<'_>, entry: NodeId, p: Pkt) {
        let mut l = core::mem::take(&mut self.one);
        l.push(p);
        self.run(st, cx, entry, &mut l);
        self.one = l;
    }

    #[inline]
    fn take_list(&mut self) -> PktList {
        self.spare_lists
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(LIST_MAX))
    }

    #[inline]
    fn put_list(&mut self, l: PktList) {
        debug_assert!(l.is_empty());
        self.spare_lists.push(l);
    }

    /// Calls node `id` on `list` into the node's own output.
    #[inline(always)]
    fn call_own<const T: bool>(
        &mut self,
        st: &mut S,
        cx: &mut Cx<'_>,
        id: u16,
        list: &mut PktList,
    ) {
        let i = usize::from(id);
        let clock = self.clock.as_ref().filter(|_| self.timing);
        call_node::<S, T>(
            &mut self.nodes[i],
            &mut self.outs[i],
            &mut self.drops[i],
            &mut self.trace,
            clock,
            st,
            cx,
            id,
            list,
        );
    }

    /// `runs`: processes `list` (left empty) at node `id`, then carries each run of equal
    /// next through the rest of the graph before the next run starts.
    fn run_depth_first<const T: bool>(
        &mut self,
        st: &mut S,
        cx: &mut Cx<'_>,
        id: u16,
        list: &mut PktList,
    ) {
        let i = usize::from(id);
        if self.nodes[i].busy {
            // Re-entered through a back edge while its own output is in flight.
            let mut o = self.spare_outs.pop().unwrap_or_else(Out::for_list);
            let clock = self.clock.as_ref().filter(|_| self.timing);
            call_node::<S, T>(
                &mut self.nodes[i],
                &mut o,
                &mut self.drops[i],
                &mut self.trace,
                clock,
                st,
                cx,
                id,
                list,
            );
            let (mut pk, mut arcs, uniform) = (
                core::mem::take(&mut o.pkts),
                core::mem::take(&mut o.arcs),
                o.uniform,
            );
            self.fan_out_depth_first::<T>(st, cx, id, &mut pk, &mut arcs, uniform);
            (o.pkts, o.arcs) = (pk, arcs);
            o.reset_arcs();
            self.spare_outs.push(o);
            return;
        }
        self.nodes[i].busy = true;
        self.call_own::<T>(st, cx, id, list);
        let out = &mut self.outs[i];
        if !out.pkts.is_empty() {
            let (mut pk, mut arcs, uniform) = (
                core::mem::take(&mut out.pkts),
                core::mem::take(&mut out.arcs),
                out.uniform,
            );
            self.fan_out_depth_first::<T>(st, cx, id, &mut pk, &mut arcs, uniform);
            let out = &mut self.outs[i];
            (out.pkts, out.arcs) = (pk, arcs);
            out.reset_arcs();
        }
        self.nodes[i].busy = false;
    }

    /// Carries `pk` on from node `from`, run by run: all along `uniform` unless that is
    /// `MIXED`, else each along its entry of `arcs`. Both are left empty.
    #[inline]
    fn fan_out_depth_first<const T: bool>(
        &mut self,
        st: &mut S,
        cx: &mut Cx<'_>,
        from: u16,
        pk: &mut PktList,
        arcs: &mut Vec<u8>,
        uniform: u8,
    ) {
        if uniform != MIXED {
            // Home run: the whole output goes one way; hand the vector on as is.
            self.send_depth_first::<T>(st, cx, from, uniform, pk);
            return;
        }
        let Some(&first) = arcs.first() else { return };
        let mut run = self.take_list();
        let mut cur = first;
        for (p, a) in pk.drain(..).zip(arcs.drain(..)) {
            if a != cur {
                self.send_depth_first::<T>(st, cx, from, cur, &mut run);
                cur = a;
            }
            run.push(p);
        }
        self.send_depth_first::<T>(st, cx, from, cur, &mut run);
        self.put_list(run);
    }

    #[inline]
    fn send_depth_first<const T: bool>(
        &mut self,
        st: &mut S,
        cx: &mut Cx<'_>,
        from: u16,
        arc: u8,
        l: &mut PktList,
    ) {
        match self.nodes[usize::from(from)].targets[usize::from(arc)] {
            Target::Node(t) => self.run_depth_first::<T>(st, cx, t, l),
            Target::Drop(r) => {
                let d = &mut self.drops[usize::from(from)];
                for p in l.drain(..) {
                    drop_one(d, &mut self.trace, cx, from, p, r);
                }
            }
        }
    }

    /// Appends `l` (left empty) to node `id`'s pending list.
    #[inline]
    fn enqueue(&mut self, id: u16, l: &mut PktList) {
        let q = &mut self.nodes[usize::from(id)].pending;
        if q.is_empty() {
            core::mem::swap(q, l);
        } else {
            q.append(l);
        }
        self.pending_mask |= 1u64 << id;
    }

    /// `buckets`: runs the lowest-numbered node with pending packets until none has any.
    fn drain_pending<const T: bool>(&mut self, st: &mut S, cx: &mut Cx<'_>) {
        while self.pending_mask != 0 {
            let id = self.pending_mask.trailing_zeros() as u16;
            self.pending_mask &= self.pending_mask - 1;
            let i = usize::from(id);
            let mut list = core::mem::take(&mut self.nodes[i].pending);
            self.call_own::<T>(st, cx, id, &mut list);
            self.nodes[i].pending = list;
            self.distribute(cx, i);
        }
    }

    /// Moves node `i`'s output to its targets' pending lists, order kept per target.
    /// Always inlined into the dispatch loop: left to the inliner, it was not once the
    /// loop had two copies (traced and not), which cost the per-packet twin 7 %.
    #[inline(always)]
    fn distribute(&mut self, cx: &mut Cx<'_>, i: usize) {
        let nodes = &mut self.nodes;
        let out = &mut self.outs[i];
        if out.pkts.is_empty() {
            out.reset_arcs();
            return;
        }
        if out.uniform != MIXED {
            let first = out.uniform;
            out.reset_arcs();
            match nodes[i].targets[usize::from(first)] {
                Target::Node(t) => {
                    let q = &mut nodes[usize::from(t)].pending;
                    if q.is_empty() {
                        core::mem::swap(q, &mut out.pkts);
                    } else {
                        q.append(&mut out.pkts);
                    }
                    self.pending_mask |= 1u64 << t;
                }
                Target::Drop(r) => {
                    for p in out.pkts.drain(..) {
                        drop_one(&mut self.drops[i], &mut self.trace, cx, i as u16, p, r);
                    }
                }
            }
            return;
        }
        for (p, &a) in out.pkts.drain(..).zip(out.arcs.iter()) {
            match nodes[i].targets[usize::from(a)] {
                Target::Node(t) => {
                    nodes[usize::from(t)].pending.push(p);
                    self.pending_mask |= 1u64 << t;
                }
                Target::Drop(r) => {
                    drop_one(&mut self.drops[i], &mut self.trace, cx, i as u16, p, r)
                }
            }
        }
        out.reset_arcs();
    }
}

impl<S> fmt::Debug for Graph<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Graph")
            .field("nodes", &self.node_names())
            .field("dispatch", &self.dispatch)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::{Pool, PoolConfig};
    use crate::stage::{Accounting, Next, PacketStage, PerPacket};
    use crate::trace::{TraceEvent, TraceSpec};

    crate::reasons! {
        mod test_reason {
            BAD = "test_bad": "the toy classifier's explicit drop",
            NOWHERE = "test_nowhere": "the toy classifier's arc that drops",
        }
    }

    /// Shared state of the toy graph: what each sink saw, in order.
    #[derive(Default)]
    struct Seen {
        log: Vec<(&'static str, u8, u8)>,
    }

    /// Sends packets by their first byte: 0 → "a", 1 → "b", 2 → drop arc, 3 → explicit
    /// drop, anything else → "a".
    struct Classify;
    impl Stage<Seen> for Classify {
        fn arcs(&self) -> &[&'static str] {
            &["a", "b", "nowhere"]
        }
        fn process(&mut self, _: &mut Seen, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
            for p in list.drain(..) {
                match cx.pool.get(&p).data()[0] {
                    1 => out.push(Next(1), p),
                    2 => out.push(Next(2), p),
                    3 => out.drop(p, test_reason::BAD),
                    _ => out.push(Next(0), p),
                }
            }
        }
    }

    /// A per-packet-only sink that records (sink, flow, seq) and frees.
    struct Sink(&'static str);
    impl PacketStage<Seen> for Sink {
        fn arcs(&self) -> &[&'static str] {
            &[]
        }
        fn packet(&mut self, st: &mut Seen, cx: &mut Cx<'_>, p: Pkt, _: &mut Out) {
            let d = cx.pool.get(&p).data();
            st.log.push((self.0, d[1], d[2]));
            cx.deliver(1);
            cx.cache.free(p);
        }
    }

    fn graph(d: Dispatch) -> Graph<Seen> {
        let mut b = GraphBuilder::new();
        b.add("classify", Box::new(Classify)).unwrap();
        b.add("a", Box::new(PerPacket(Sink("a")))).unwrap();
        b.add("b", Box::new(PerPacket(Sink("b")))).unwrap();
        b.connect("classify", "a", "a").unwrap();
        b.connect("classify", "b", "b").unwrap();
        b.connect_drop("classify", "nowhere", test_reason::NOWHERE)
            .unwrap();
        b.build(d).unwrap()
    }

    type RunResult = (Vec<(&'static str, u8, u8)>, Accounting, Vec<NodeSnapshot>);

    /// (kind, flow, seq) triples.
    fn packets() -> Vec<[u8; 3]> {
        let kinds = [0u8, 1, 0, 1, 1, 2, 0, 3, 1, 0, 0, 0, 1, 2, 3, 1];
        kinds
            .iter()
            .enumerate()
            .map(|(i, &k)| [k, k, i as u8])
            .collect()
    }

    fn run(d: Dispatch, per_packet: bool) -> RunResult {
        let pool = Pool::new(PoolConfig {
            buffers: 64,
            cache_size: 8,
            ..PoolConfig::default()
        })
        .unwrap();
        let mut cache = pool.cache();
        let mut g = graph(d);
        let mut st = Seen::default();
        let mut acct = Accounting::default();
        let mut list = Vec::new();
        for bytes in packets() {
            let mut p = cache.alloc().unwrap();
            pool.get_mut(&mut p)
                .append(3)
                .unwrap()
                .copy_from_slice(&bytes);
            list.push(p);
        }
        acct.rx = list.len() as u64;
        let entry = g.node("classify").unwrap();
        {
            let mut cx = Cx {
                pool: &pool,
                cache: &mut cache,
                now_ns: 0,
                acct: &mut acct,
            };
            if per_packet {
                for p in list.drain(..) {
                    g.run_one(&mut st, &mut cx, entry, p);
                }
            } else {
                g.run(&mut st, &mut cx, entry, &mut list);
            }
        }
        assert!(list.is_empty());
        drop(cache);
        assert_eq!(pool.free_in_pool(), 64, "every buffer back");
        (st.log, acct, g.snapshot())
    }

    #[test]
    fn runs_keep_global_order_and_buckets_keep_per_target_order() {
        let input = packets();
        let want_global: Vec<_> = input
            .iter()
            .filter(|b| b[0] == 0 || b[0] == 1 || b[0] > 3)
            .map(|b| (if b[0] == 1 { "b" } else { "a" }, b[1], b[2]))
            .collect();
        let (runs, _, _) = run(Dispatch::Runs, false);
        assert_eq!(
            runs, want_global,
            "runs dispatch keeps the order of the whole list"
        );

        let (buckets, _, _) = run(Dispatch::Buckets, false);
        let mut want_grouped: Vec<_> = want_global.iter().filter(|x| x.0 == "a").cloned().collect();
        want_grouped.extend(want_global.iter().filter(|x| x.0 == "b").cloned());
        assert_eq!(
            buckets, want_grouped,
            "buckets group by next, stable inside each"
        );

        for d in [Dispatch::Runs, Dispatch::Buckets] {
            let (pp, _, _) = run(d, true);
            assert_eq!(pp, want_global, "per-packet mode is arrival order");
        }
    }

    #[test]
    fn counters_and_accounting_balance() {
        for d in [Dispatch::Runs, Dispatch::Buckets] {
            for per_packet in [false, true] {
                let (log, acct, snap) = run(d, per_packet);
                let n = packets().len() as u64;
                assert_eq!(acct.rx, n);
                assert_eq!(acct.delivered, log.len() as u64);
                assert_eq!(acct.rx, acct.delivered + acct.dropped, "{d:?} {per_packet}");
                let c = &snap[0];
                assert_eq!(c.packets, n);
                assert_eq!(c.drops_for(test_reason::BAD), 2);
                assert_eq!(c.drops_for(test_reason::NOWHERE), 2);
                let a = &snap[1];
                let b = &snap[2];
                assert_eq!(a.packets + b.packets, log.len() as u64);
                if per_packet {
                    assert_eq!(c.calls, n, "one call per packet");
                } else if d == Dispatch::Buckets {
                    assert_eq!((c.calls, a.calls, b.calls), (1, 1, 1), "one call per node");
                } else {
                    // a/b alternate in the input: runs of one or more, more calls than buckets.
                    assert!(a.calls + b.calls > 2);
                }
            }
        }
    }

    #[test]
    fn unconnected_and_unknown_arcs_are_refused() {
        let mut b: GraphBuilder<Seen> = GraphBuilder::new();
        b.add("classify", Box::new(Classify)).unwrap();
        b.add("a", Box::new(PerPacket(Sink("a")))).unwrap();
        assert_eq!(
            b.connect("classify", "c", "a"),
            Err(GraphError::UnknownArc {
                node: "classify".into(),
                arc: "c".into()
            })
        );
        assert_eq!(
            b.connect("classify", "a", "zz"),
            Err(GraphError::UnknownNode("zz".into()))
        );
        assert!(b.add("a", Box::new(PerPacket(Sink("a")))).is_err());
        b.connect("classify", "a", "a").unwrap();
        let e = b.build(Dispatch::Runs).unwrap_err();
        assert_eq!(
            e,
            GraphError::Unconnected {
                node: "classify".into(),
                arc: "b".into()
            }
        );
    }

    /// A pool of `n` buffers and a cache of 4.
    fn small_pool(n: u32) -> Pool {
        Pool::new(PoolConfig {
            buffers: n,
            cache_size: 4,
            ..PoolConfig::default()
        })
        .unwrap()
    }

    /// Runs frames `bytes` through `g` from `entry` as one list, each offered to the trace
    /// as received on port 0 at time 0 first.
    fn run_traced(
        g: &mut Graph<Seen>,
        pool: &Pool,
        cache: &mut crate::pool::BufCache,
        entry: &str,
        frames: &[&[u8]],
    ) -> (Vec<u32>, Seen) {
        let mut st = Seen::default();
        let mut acct = Accounting::default();
        let mut list = Vec::new();
        for f in frames {
            let mut p = cache.alloc().unwrap();
            pool.get_mut(&mut p)
                .append(f.len())
                .unwrap()
                .copy_from_slice(f);
            if g.trace().armed() {
                g.trace_mut().maybe_mark(pool, &mut p, 0, 0);
            }
            list.push(p);
        }
        let idx = list.iter().map(|p| p.index()).collect();
        let entry = g.node(entry).unwrap();
        let mut cx = Cx {
            pool,
            cache,
            now_ns: 0,
            acct: &mut acct,
        };
        g.run(&mut st, &mut cx, entry, &mut list);
        (idx, st)
    }

    /// (id, node, event) of each record, in order.
    fn events(g: &Graph<Seen>) -> Vec<(u32, u16, TraceEvent)> {
        g.trace()
            .records()
            .iter()
            .map(|r| (r.id, r.node, r.event))
            .collect()
    }

    /// Each decision about the two marked packets, in the order taken: the classifier's
    /// arc or drop, then the sink's taking the packet; the third packet (unmarked) leaves
    /// no record. Buckets dispatch runs the classifier over the whole list first.
    #[test]
    fn trace_records_each_decision_of_marked_packets() {
        let pool = small_pool(16);
        let mut cache = pool.cache();
        let mut g = graph(Dispatch::Buckets);
        g.trace_mut().arm(TraceSpec::new(2).records(16));
        run_traced(
            &mut g,
            &pool,
            &mut cache,
            "classify",
            &[&[1, 0, 0], &[3, 0, 0], &[0, 0, 0]],
        );
        assert_eq!(
            events(&g),
            [
                (2, 0, TraceEvent::Drop(test_reason::BAD)),
                (1, 0, TraceEvent::Next(1)),
                (1, 2, TraceEvent::Taken),
            ],
            "only the first two packets were marked"
        );
        let r = &g.trace().records()[1];
        assert_eq!((r.view.len, r.view.packet()), (3, &[1u8, 0, 0][..]));
    }

    /// Disarmed, nothing is marked or recorded; disarming forgets what was collected
    /// and ids go on from where they were.
    #[test]
    fn a_disarmed_trace_records_nothing_and_ids_never_repeat() {
        let pool = small_pool(16);
        let mut cache = pool.cache();
        let mut g = graph(Dispatch::Runs);
        run_traced(&mut g, &pool, &mut cache, "classify", &[&[0, 0, 0]]);
        assert!(g.trace().records().is_empty() && g.trace().packets().is_empty());
        g.trace_mut().arm(TraceSpec::new(1));
        run_traced(&mut g, &pool, &mut cache, "classify", &[&[0, 0, 0]]);
        assert_eq!(
            events(&g),
            [(1, 0, TraceEvent::Next(0)), (1, 1, TraceEvent::Taken)]
        );
        g.trace_mut().disarm();
        assert!(!g.trace().armed());
        assert!(g.trace().records().is_empty() && g.trace().packets().is_empty());
        g.trace_mut().arm(TraceSpec::new(1));
        run_traced(&mut g, &pool, &mut cache, "classify", &[&[1, 0, 0]]);
        assert_eq!(
            events(&g),
            [(2, 0, TraceEvent::Next(1)), (2, 2, TraceEvent::Taken)]
        );
    }

    /// Two packets traced one after the other in the same buffer (the cache hands the
    /// freed buffer out again) keep distinct ids, each on its own records.
    #[test]
    fn ids_stay_distinct_when_a_buffer_is_reused() {
        let pool = small_pool(16);
        let mut cache = pool.cache();
        let mut g = graph(Dispatch::Runs);
        g.trace_mut().arm(TraceSpec::new(2));
        let (first, _) = run_traced(&mut g, &pool, &mut cache, "classify", &[&[0, 0, 0]]);
        let (second, _) = run_traced(&mut g, &pool, &mut cache, "classify", &[&[1, 0, 0]]);
        assert_eq!(first, second, "the same buffer twice");
        assert_eq!(
            events(&g),
            [
                (1, 0, TraceEvent::Next(0)),
                (1, 1, TraceEvent::Taken),
                (2, 0, TraceEvent::Next(1)),
                (2, 2, TraceEvent::Taken),
            ]
        );
        let ids: Vec<u32> = g.trace().packets().iter().map(|p| p.id).collect();
        assert_eq!(ids, [1, 2]);
    }

    /// At most `records` records are kept; the others are counted.
    #[test]
    fn the_record_limit_holds_and_losses_are_counted() {
        let pool = small_pool(16);
        let mut cache = pool.cache();
        let mut g = graph(Dispatch::Buckets);
        g.trace_mut().arm(TraceSpec::new(4).records(3));
        // Two records each (classifier, sink): eight, three kept.
        let f: &[u8] = &[0, 0, 0];
        run_traced(&mut g, &pool, &mut cache, "classify", &[f, f, f, f]);
        assert_eq!(g.trace().records().len(), 3);
        assert_eq!(g.trace().lost(), 5);
        let dump = g.take_trace();
        assert_eq!(
            (dump.records.len(), dump.lost, dump.packets.len()),
            (3, 5, 4)
        );
        assert_eq!((g.trace().records().len(), g.trace().lost()), (0, 0));
    }

    /// `take_trace` names the nodes and where each arc leads.
    #[test]
    fn the_taken_trace_names_nodes_and_arc_targets() {
        let mut g = graph(Dispatch::Runs);
        let dump = g.take_trace();
        let names: Vec<&str> = dump.nodes.iter().map(|n| n.name).collect();
        assert_eq!(names, ["classify", "a", "b"]);
        assert_eq!(
            dump.nodes[0].arcs,
            [
                ("a", ArcTarget::Node("a")),
                ("b", ArcTarget::Node("b")),
                ("nowhere", ArcTarget::Drop(test_reason::NOWHERE)),
            ]
        );
        assert!(dump.nodes[1].arcs.is_empty());
    }

    /// A stage that sends each packet on with a copy in a new buffer, flags included
    /// (what fragmentation and segmentation do).
    struct Split;
    impl Stage<Seen> for Split {
        fn arcs(&self) -> &[&'static str] {
            &["on"]
        }
        fn process(&mut self, _: &mut Seen, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
            for p in list.drain(..) {
                let (flags, bytes) = {
                    let v = cx.pool.get(&p);
                    (v.meta.flags, v.data().to_vec())
                };
                let mut q = cx.cache.alloc().unwrap();
                let mut w = cx.pool.get_mut(&mut q);
                w.append(bytes.len()).unwrap().copy_from_slice(&bytes);
                w.meta.flags = flags;
                out.push(Next(0), p);
                out.push(Next(0), q);
            }
        }
    }

    /// A derived buffer takes the id of the traced packet it was made from; a copy of an
    /// untraced one stays untraced.
    #[test]
    fn derived_buffers_take_their_parents_id() {
        let mut b = GraphBuilder::new();
        b.add("split", Box::new(Split)).unwrap();
        b.add("a", Box::new(PerPacket(Sink("a")))).unwrap();
        b.connect("split", "on", "a").unwrap();
        let mut g: Graph<Seen> = b.build(Dispatch::Buckets).unwrap();
        let pool = small_pool(16);
        let mut cache = pool.cache();
        let mut spec = TraceSpec::new(2);
        spec.matcher = Some(Box::new(|f: &[u8]| f[1] == 1));
        g.trace_mut().arm(spec);
        let (_, seen) = run_traced(
            &mut g,
            &pool,
            &mut cache,
            "split",
            &[&[0, 1, 1], &[0, 0, 2], &[0, 1, 3]],
        );
        assert_eq!(seen.log.len(), 6);
        let sink: Vec<(u32, Vec<u8>)> = g
            .trace()
            .records()
            .iter()
            .filter(|r| r.node == 1)
            .map(|r| (r.id, r.view.packet().to_vec()))
            .collect();
        assert_eq!(
            sink,
            [
                (1, vec![0, 1, 1]),
                (1, vec![0, 1, 1]),
                (2, vec![0, 1, 3]),
                (2, vec![0, 1, 3]),
            ],
            "each traced packet and its copy, under its id"
        );
    }
}
