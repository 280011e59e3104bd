//! Stage declarations: what each stage says about itself, in its own module, and what
//! the graph is assembled from (VPP's `VLIB_REGISTER_NODE`, Linux's
//! `inet_add_protocol`).
//!
//! A [`Decl`] names its node and says:
//! - its arcs and where each goes ([`To`]): a node; a node that may be left out of the
//!   graph (a hook without rules), then where that node would have sent the packet; a
//!   drop with a reason; a choice the options make. A stage may also have one arc per
//!   port, each to that port's `tx-<port>` node ([`Decl::port_arcs`]), and the local
//!   protocol demux of an IP version has one arc per stage that takes a protocol of that
//!   version ([`Decl::demux`]);
//! - the IP protocols it takes for local delivery ([`Take`]): declaring one is
//!   registering it with the demux of its version (`ip4-local`, `ip6-local`), which
//!   sends that protocol to it through a 256-entry table ([`Demux`]) built once per
//!   graph;
//! - the drop reason sets it may drop with ([`Decl::reasons`]): its own, and those it
//!   drops with on behalf of the stage that handed it the packet (the ICMP error stages
//!   drop with the cause's reason). Declaring a set registers it: the stack's reason
//!   registry ([`reason_sets`]) is derived from [`crate::assemble::STAGES`];
//! - how the trace shows what it reads of a packet ([`Decode`]);
//! - the packet metadata it reads and writes ([`Fields`]);
//! - whether it is in the graph for given [`GraphOptions`], and how it is made.
//!
//! Invariants the assembler (`crate::assemble::build_from`) checks before it builds a
//! graph from a list of declarations: names are unique; every arc of every present stage
//! goes to a node that is in the graph, or drops; every field a present stage reads is
//! written by some present stage, by the receive path or by the buffer's reset
//! ([`meta::RECEIVE`], [`meta::TEMPLATE`]); no two present stages take one IP
//! protocol of one version, and a version some stage takes a protocol of has a demux.
//! Declarations are read only while a graph is built: the per-packet path sees plain
//! stages, arcs and tables.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use netbatch_engine::{Next, Reason, Stage};

use crate::assemble::GraphOptions;
use crate::host::Host;
use crate::meta::{self, Fields};
pub use crate::trace::Decode;

/// An IP version: of a local protocol demux and of the protocols stages take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// IPv4 (`ip4-local`).
    V4,
    /// IPv6 (`ip6-local`).
    V6,
}

impl Family {
    /// Both versions.
    pub const ALL: [Self; 2] = [Self::V4, Self::V6];

    /// `IPv4` or `IPv6`.
    pub const fn name(self) -> &'static str {
        match self {
            Self::V4 => "IPv4",
            Self::V6 => "IPv6",
        }
    }
}

/// Where an arc goes.
#[derive(Clone, Copy)]
pub enum To {
    /// The node of that name.
    Node(&'static str),
    /// The node of that name when it is in the graph; when its declaration leaves it out
    /// (a hook whose chain accepts everything), where that node's arc of the second
    /// name would go: an empty hook costs nothing.
    Via(&'static str, &'static str),
    /// The packets are dropped for this reason, counted against the node.
    Drop(Reason),
    /// Decided by the options (e.g. `host`: to `host-punt` with host interface pairs,
    /// a drop otherwise).
    Pick(fn(&GraphOptions) -> Self),
}

impl core::fmt::Debug for To {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Node(n) => write!(f, "Node({n})"),
            Self::Via(n, a) => write!(f, "Via({n}, {a})"),
            Self::Drop(r) => write!(f, "Drop({r})"),
            Self::Pick(_) => f.write_str("Pick(..)"),
        }
    }
}

/// An IP protocol a stage takes for local delivery: the demux of `family` sends
/// protocol `proto` to the stage by an arc named `arc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Take {
    /// The IP version.
    pub family: Family,
    /// The protocol (IPv4's protocol field, IPv6's upper-layer next header).
    pub proto: u8,
    /// The name of the demux's arc to the stage.
    pub arc: &'static str,
}

impl Take {
    /// IPv4 protocol `proto`, by the arc `arc`.
    pub const fn v4(proto: u8, arc: &'static str) -> Self {
        Self {
            family: Family::V4,
            proto,
            arc,
        }
    }

    /// IPv6 upper-layer protocol `proto`, by the arc `arc`.
    pub const fn v6(proto: u8, arc: &'static str) -> Self {
        Self {
            family: Family::V6,
            proto,
            arc,
        }
    }
}

/// A stage's declaration (see the module's documentation).
#[derive(Clone, Copy)]
pub struct Decl {
    /// The node's name; for a stage with one node per port ([`Decl::per_port`]) the
    /// pattern of their names, `<port>` standing for the port's (`tx-<port>`).
    pub name: &'static str,
    /// The stage's own arcs, by name, and where each goes.
    pub arcs: &'static [(&'static str, To)],
    /// The stage also has one arc per port, named as that port's `tx-<port>` node, and
    /// each goes there.
    pub port_arcs: bool,
    /// The stage is the local protocol demux of this IP version: it has, after its own
    /// arcs, one arc per stage that takes a protocol of the version ([`Make::demux`]).
    pub demux: Option<Family>,
    /// The IP protocols the stage takes for local delivery.
    pub takes: &'static [Take],
    /// The drop reason sets the stage may drop with, its own first.
    pub reasons: &'static [&'static [Reason]],
    /// What the trace shows of a packet at this stage.
    pub decode: Decode,
    /// The metadata the stage reads.
    pub reads: Fields,
    /// The metadata the stage writes.
    pub writes: Fields,
    /// Whether the stage is in the graph for these options.
    pub present: fn(&GraphOptions) -> bool,
    /// One node per port (`name` a pattern), each made with its port in [`Make::port`].
    pub per_port: bool,
    /// Makes the stage.
    pub make: fn(&Make<'_>) -> Box<dyn Stage<Host>>,
}

/// Always.
fn always(_: &GraphOptions) -> bool {
    true
}

impl Decl {
    /// A stage named `name`, made by `make`, always present, with no arcs, no reasons,
    /// no metadata and the trace's default view: what a declaration starts from
    /// (`Decl { arcs: ..., ..Decl::new(NAME, make) }`).
    pub const fn new(name: &'static str, make: fn(&Make<'_>) -> Box<dyn Stage<Host>>) -> Self {
        Self {
            name,
            arcs: &[],
            port_arcs: false,
            demux: None,
            takes: &[],
            reasons: &[],
            decode: Decode::Auto,
            reads: Fields::NONE,
            writes: Fields::NONE,
            present: always,
            per_port: false,
            make,
        }
    }

    /// The names of its nodes in a graph over `ports`.
    pub fn node_names(&self, ports: &[&str]) -> Vec<&'static str> {
        if self.per_port {
            ports.iter().map(|p| self.instance(p)).collect()
        } else {
            vec![self.name]
        }
    }

    /// The name of its node for port `port` (a per-port declaration's).
    fn instance(&self, port: &str) -> &'static str {
        netbatch_engine::intern(&self.name.replace("<port>", port))
    }

    /// Whether `node` is one of its nodes (in a graph over any ports).
    fn names(&self, node: &str) -> bool {
        match self.name.split_once("<port>") {
            Some((pre, post)) if self.per_port => {
                node.len() > pre.len() + post.len() && node.starts_with(pre) && node.ends_with(post)
            }
            _ => node == self.name,
        }
    }

    /// Where its arc `arc` goes, as declared.
    pub fn arc(&self, arc: &str) -> Option<To> {
        self.arcs.iter().find(|(a, _)| *a == arc).map(|&(_, t)| t)
    }

    /// Whether `r` is in a set it declares.
    pub fn declares(&self, r: Reason) -> bool {
        self.all_reasons().any(|x| x == r)
    }

    /// Every reason it declares, in declaration order.
    pub fn all_reasons(&self) -> impl Iterator<Item = Reason> + '_ {
        self.reasons.iter().flat_map(|s| s.iter().copied())
    }
}

impl core::fmt::Debug for Decl {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Decl")
            .field("name", &self.name)
            .field("arcs", &self.arcs)
            .field("port_arcs", &self.port_arcs)
            .field("demux", &self.demux)
            .field("takes", &self.takes)
            .field("decode", &self.decode)
            .field("reads", &self.reads)
            .field("writes", &self.writes)
            .field("per_port", &self.per_port)
            .finish_non_exhaustive()
    }
}

/// What a stage is made from: the options, the ports, its port (one node per port),
/// and for a demux the protocols the graph's stages take.
#[derive(Debug)]
pub struct Make<'a> {
    /// The graph's options.
    pub opts: &'a GraphOptions,
    /// The ports, in port order.
    pub ports: &'a [&'a str],
    /// The port of this node ([`Decl::per_port`]; 0 otherwise).
    pub port: u16,
    /// `(protocol, arc)` of every protocol of the demux's version that a stage in the
    /// graph takes, in graph order (empty for a stage that is no demux).
    pub(crate) takes: Vec<(u8, &'static str)>,
}

impl Make<'_> {
    /// The stage's arcs: `fixed`, then one `tx-<port>` arc per port.
    pub fn port_arcs(&self, fixed: &[&'static str]) -> Vec<&'static str> {
        crate::tx::with_port_arcs(fixed, self.ports)
    }

    /// The local protocol demux of a stage whose own arcs are `fixed`: those, then one
    /// arc per protocol handler, and the table from protocol to arc.
    pub fn demux(&self, fixed: &[&'static str]) -> Demux {
        let mut arcs = fixed.to_vec();
        let mut table = [Demux::NONE; 256];
        for &(proto, arc) in &self.takes {
            let at = match arcs.iter().position(|a| *a == arc) {
                Some(at) => at,
                None => {
                    arcs.push(arc);
                    arcs.len() - 1
                }
            };
            // The assembler refuses more arcs than a stage may have.
            if let Some(entry) = table.get_mut(usize::from(proto)) {
                *entry = u8::try_from(at).unwrap_or(Demux::NONE);
            }
        }
        Demux { arcs, table }
    }
}

/// A local protocol demux: the arc to the stage that takes each IP protocol, looked up
/// in one load (VPP's `ip4_register_protocol` table, the kernel's `inet_protos`).
#[derive(Clone)]
pub struct Demux {
    arcs: Vec<&'static str>,
    table: [u8; 256],
}

impl Demux {
    /// A table entry for a protocol no stage takes.
    const NONE: u8 = u8::MAX;

    /// The arcs: the stage's own, then one per protocol handler.
    pub fn arcs(&self) -> &[&'static str] {
        &self.arcs
    }

    /// The arc to the stage that takes protocol `proto`, if one does.
    #[inline(always)]
    pub fn next(&self, proto: u8) -> Option<Next> {
        // A `u8` indexes all 256 entries.
        let a = self.table.get(usize::from(proto)).copied()?;
        (a != Self::NONE).then_some(Next(a))
    }
}

impl core::fmt::Debug for Demux {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let taken: Vec<(usize, &str)> = (self.table.iter().enumerate())
            .filter(|&(_, &a)| a != Self::NONE)
            .map(|(p, &a)| (p, self.arcs.get(usize::from(a)).copied().unwrap_or("?")))
            .collect();
        f.debug_struct("Demux").field("takes", &taken).finish()
    }
}

/// Every drop reason set the stages of `stages` declare, each once (a set declared by
/// several stages, as the ICMP error stages declare those of the stages they answer
/// for, is listed where first declared).
pub fn reason_sets_of(stages: &[Decl]) -> Vec<&'static [Reason]> {
    let mut sets: Vec<&'static [Reason]> = Vec::new();
    for s in stages.iter().flat_map(|d| d.reasons.iter().copied()) {
        if !sets.contains(&s) {
            sets.push(s);
        }
    }
    sets
}

/// The stack's drop reason registry: every set the stages of
/// [`crate::assemble::STAGES`] declare, each once. The engine's reasons, the ports' and
/// the datapath's are registered where they are declared (`datapath::reason_sets`).
pub fn reason_sets() -> Vec<&'static [Reason]> {
    reason_sets_of(crate::assemble::STAGES)
}

/// What the trace shows of the packets at node `node`: its declaration's [`Decode`],
/// from the graphs built in this process or, for a node none of them had, from
/// [`crate::assemble::STAGES`]; [`Decode::Auto`] for a node nothing declares.
pub fn decode_of(node: &str) -> Decode {
    let built = decoders()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(node)
        .copied();
    built.unwrap_or_else(|| {
        crate::assemble::STAGES
            .iter()
            .find(|d| d.names(node))
            .map_or(Decode::Auto, |d| d.decode)
    })
}

/// The decoders of the nodes of the graphs built in this process, by node name.
fn decoders() -> &'static Mutex<HashMap<&'static str, Decode>> {
    static DECODERS: OnceLock<Mutex<HashMap<&'static str, Decode>>> = OnceLock::new();
    DECODERS.get_or_init(Default::default)
}

/// Records the decoders of a graph's nodes (when it is built).
pub(crate) fn register_decoders(nodes: impl IntoIterator<Item = (&'static str, Decode)>) {
    let mut m = decoders()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    m.extend(nodes);
}

/// Whether some field `reads` names is in neither `written` nor what the receive path
/// and the buffer's reset write: the first such.
pub(crate) fn unwritten(reads: Fields, written: Fields) -> Option<meta::Field> {
    reads
        .without(written.union(meta::RECEIVE).union(meta::TEMPLATE))
        .iter()
        .next()
}
