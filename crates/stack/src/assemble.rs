//! Assembles the stage graph from the stages' declarations ([`crate::declare`]).
//!
//! [`STAGES`] lists the stack's stages in pipeline order, one line each: the `buckets`
//! scheduler runs the lowest-numbered pending node first, so a stage comes before the
//! stages it sends to (back edges aside: an answer made late in the graph goes back to an
//! earlier output stage). [`build_from`] makes a graph from any such list (the stack's,
//! or the stack's with a caller's own stages); [`build`] from [`STAGES`]. A stage whose
//! declaration leaves it out for the options (a hook whose chain accepts everything, GRO
//! when no port does GRO) is not added at all: arcs to it go where it would have sent
//! the packet, so an absent stage costs nothing.

use netbatch_engine::{Dispatch, Graph, GraphBuilder, GraphError, NodeId};

use crate::declare::{self, Decl, Family, Make, To};
use crate::filter::{Chain, HookPoint};
use crate::host::{Entry, Host};
use crate::meta::Fields;
use crate::{
    arp, cls, ct, filter, gro, gso, hostif, icmp, icmp6, ip4, ip6, l2, nat, nd, neigh, tcp,
};
use crate::{tx, udp};

/// The stack's stages, in pipeline order: the graph is assembled from these
/// declarations. A stage added to the stack is declared in its own module and listed
/// here, on one line.
pub const STAGES: &[Decl] = &[
    gro::stage::DECL,
    cls::stage::DECL,
    l2::input::DECL,
    arp::input::DECL,
    ip4::input::DECL,
    ip6::input::DECL,
    ip4::defrag::DECL,
    ip6::defrag::DECL,
    ct::stage::IN,
    nat::stage::PREROUTING,
    filter::hook::PREROUTING,
    ip4::route::DECL,
    ip6::route::DECL,
    filter::hook::INPUT,
    ct::stage::CONFIRM_LOCAL,
    ip4::local::DECL,
    ip6::local::DECL,
    ip4::defrag::LOCAL_DECL,
    ip6::defrag::LOCAL_DECL,
    udp::input::DECL,
    udp::input::DECL6,
    icmp::input::DECL,
    icmp6::input::DECL,
    nd::input::DECL,
    tcp::DECL,
    ip4::forward::DECL,
    ip6::forward::DECL,
    filter::hook::FORWARD,
    ip4::icmp_error::DECL,
    ip6::icmp_error::DECL,
    ip4::local_out::DECL,
    ip6::local_out::DECL,
    ct::stage::OUT,
    filter::hook::OUTPUT,
    filter::hook::POSTROUTING,
    nat::stage::POSTROUTING,
    ct::stage::CONFIRM,
    ip4::fragment::DECL,
    neigh::resolve::DECL,
    nd::resolve::DECL,
    gso::stage::DECL,
    hostif::punt::DECL,
    hostif::inject::DECL,
    tx::DECL,
    tx::PORT_DECL,
];

/// Node names, the graph's public entry points among them.
pub mod node {
    /// GRO: where received frames enter when any port does GRO.
    pub const GRO: &str = "gro";
    /// The ingress classifier (after GRO, before L2 input), when there are filters.
    pub const CLS_INGRESS: &str = "cls-ingress";
    /// L2 input: where received frames enter.
    pub const ETH_INPUT: &str = "eth-input";
    /// ARP input.
    pub const ARP_INPUT: &str = "arp-input";
    /// IPv4 input checks.
    pub const IP4_INPUT: &str = "ip4-input";
    /// IPv6 input checks.
    pub const IP6_INPUT: &str = "ip6-input";
    /// IPv6 routing decision.
    pub const IP6_ROUTE: &str = "ip6-route";
    /// IPv6 extension headers for us and the upper-layer demux.
    pub const IP6_LOCAL: &str = "ip6-local";
    /// UDP over IPv6.
    pub const UDP6_INPUT: &str = "udp6-input";
    /// ICMPv6 for us.
    pub const ICMP6_INPUT: &str = "icmp6-input";
    /// Neighbour solicitations and advertisements for us.
    pub const ND_INPUT: &str = "nd-input";
    /// IPv6 forwarding (hop limit).
    pub const IP6_FORWARD: &str = "ip6-forward";
    /// ICMPv6 error generation: entry for IPv6 packets that failed outside the graph.
    pub const IP6_ICMP_ERROR: &str = "ip6-icmp-error";
    /// IPv6 local output: entry for IPv6 packets applications send.
    pub const IP6_LOCAL_OUT: &str = "ip6-local-out";
    /// IPv6 output MTU, neighbour discovery and the link header.
    pub const IP6_NEIGHBOUR: &str = "ip6-neighbour";
    /// The PREROUTING hook (when its chain can drop).
    pub const HOOK_PREROUTING: &str = crate::filter::HookPoint::Prerouting.node();
    /// The INPUT hook.
    pub const HOOK_INPUT: &str = crate::filter::HookPoint::Input.node();
    /// The FORWARD hook.
    pub const HOOK_FORWARD: &str = crate::filter::HookPoint::Forward.node();
    /// The OUTPUT hook.
    pub const HOOK_OUTPUT: &str = crate::filter::HookPoint::Output.node();
    /// The POSTROUTING hook.
    pub const HOOK_POSTROUTING: &str = crate::filter::HookPoint::Postrouting.node();
    /// IPv4 defragmentation before tracking, when tracking is configured.
    pub const IP4_DEFRAG: &str = "ip4-defrag";
    /// IPv6 defragmentation before tracking, when tracking is configured.
    pub const IP6_DEFRAG: &str = "ip6-defrag";
    /// IPv4 reassembly of fragments for this host (after `ip4-local`, back to it).
    pub const IP4_REASSEMBLE: &str = "ip4-reassemble";
    /// IPv6 reassembly of fragments for this host (after `ip6-local`, back to it).
    pub const IP6_REASSEMBLE: &str = "ip6-reassemble";
    /// Connection tracking of received packets (before PREROUTING), when configured.
    pub const CT_IN: &str = "ct-in";
    /// Connection tracking of packets this host makes (before OUTPUT).
    pub const CT_OUT: &str = "ct-out";
    /// Destination NAT (after `ct-in`), when NAT is configured.
    pub const NAT_PREROUTING: &str = "nat-prerouting";
    /// Source NAT (after the POSTROUTING hook), when NAT is configured.
    pub const NAT_POSTROUTING: &str = "nat-postrouting";
    /// Where a new connection's entry is confirmed: after POSTROUTING.
    pub const CT_CONFIRM: &str = "ct-confirm";
    /// Where a new connection's entry is confirmed: after INPUT.
    pub const CT_CONFIRM_LOCAL: &str = "ct-confirm-local";
    /// Routing decision.
    pub const IP4_ROUTE: &str = "ip4-route";
    /// Local protocol demux.
    pub const IP4_LOCAL: &str = "ip4-local";
    /// UDP input.
    pub const UDP_INPUT: &str = "udp-input";
    /// ICMP input.
    pub const ICMP_INPUT: &str = "icmp-input";
    /// Local TCP.
    pub const TCP_INPUT: &str = "tcp-input";
    /// Forwarding.
    pub const IP4_FORWARD: &str = "ip4-forward";
    /// ICMP error generation: entry for packets that failed outside the graph.
    pub const IP4_ICMP_ERROR: &str = "ip4-icmp-error";
    /// Local output: entry for packets applications send.
    pub const IP4_LOCAL_OUT: &str = "ip4-local-out";
    /// Fragmentation (off the fast path: the neighbour stage sends what is too large).
    pub const IP4_FRAGMENT: &str = "ip4-fragment";
    /// Neighbour resolution and L2 header.
    pub const NEIGHBOUR: &str = "neighbour";
    /// Segmentation of super-packets for ports without the offload.
    pub const GSO: &str = "gso";
    /// Transmit queues: entry for complete frames.
    pub const TX: &str = "tx";
    /// What netbatch does not consume, to the kernel of a host interface pair.
    pub const HOST_PUNT: &str = "host-punt";
    /// Frames from the kernel of a host interface pair: where a tap's frames enter.
    pub const HOST_INJECT: &str = "host-inject";
}

/// Where packets enter a built graph: received frames, and each [`Entry`] for packets
/// made outside a stage call (what a worker needs to know of the graph, no more).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entries {
    /// Received frames (GRO when the graph has it, else the classifier, else L2 input).
    pub receive: NodeId,
    /// The node of each [`Entry`], in [`Entry::ALL`] order.
    pub injected: [NodeId; Entry::ALL.len()],
    /// Where frames received on the tap of a host interface pair enter (graphs built
    /// with [`GraphOptions::host_pairs`]).
    pub host_inject: Option<NodeId>,
    /// Where an IPv4 and an IPv6 datagram another worker made whole enters (the
    /// defragmentation stage, which passes a defrag chain on whole; graphs that track).
    pub handed: [Option<NodeId>; 2],
}

impl Entries {
    /// Where frames received on a port whose place in a pair is `pair` enter.
    pub fn receive_for(&self, pair: crate::iface::Pair) -> NodeId {
        match (pair, self.host_inject) {
            (crate::iface::Pair::Inject(_), Some(n)) => n,
            _ => self.receive,
        }
    }
}

/// The entry points of `g`, a graph [`build`] made.
pub fn entries(g: &Graph<Host>) -> Result<Entries, GraphError> {
    let find = |n: &str| g.node(n).ok_or_else(|| GraphError::UnknownNode(n.into()));
    let receive = match g.node(node::GRO).or_else(|| g.node(node::CLS_INGRESS)) {
        Some(n) => n,
        None => find(node::ETH_INPUT)?,
    };
    let mut injected = [NodeId(0); Entry::ALL.len()];
    for (slot, e) in injected.iter_mut().zip(Entry::ALL) {
        *slot = find(e.node())?;
    }
    Ok(Entries {
        receive,
        injected,
        host_inject: g.node(node::HOST_INJECT),
        handed: [g.node(node::IP4_DEFRAG), g.node(node::IP6_DEFRAG)],
    })
}

/// What varies between graphs.
#[derive(Debug, Clone, Default)]
pub struct GraphOptions {
    /// Rule chains per hook (missing hooks accept everything).
    pub chains: Vec<(HookPoint, Chain)>,
    /// Name of the node local TCP goes to; `None` drops it (`tcp_no_handler`).
    pub tcp_to: Option<&'static str>,
    /// Put the `gro` stage in front of `eth-input` (some port does GRO). Without it,
    /// frames enter at `eth-input` and the graph costs nothing for GRO.
    pub gro: bool,
    /// The ingress classifier's filters; none (or none at all) leaves the stage out.
    pub classifier: Option<std::sync::Arc<cls::Classifier>>,
    /// Ports are paired with host interfaces ([`crate::hostif`]): the `host-punt` and
    /// `host-inject` stages are in the graph, and what netbatch does not consume on a
    /// paired port goes to its tap (local TCP among it, whatever `tcp_to` says).
    pub host_pairs: bool,
    /// Connection tracking (the `[conntrack]` section, or a rule that asks about
    /// state): the `ct-*` stages are in the graph. `None` leaves them out.
    pub conntrack: Option<ct::Config>,
    /// NAT's chains (the `[nat]` section): the `nat-*` stages are in the graph (with
    /// connection tracking). `None` leaves them out.
    pub nat: Option<nat::Config>,
    /// The bounds and timeouts of the fragment stores (the `[defrag]` section; Linux's
    /// defaults without it), one per family and worker, which reassembly for local
    /// delivery and defragmentation before tracking share.
    pub defrag: crate::defrag::Config,
}

impl GraphOptions {
    /// Whether a FORWARD rule offloads flows ([`crate::ct::offload`]).
    pub fn offloads(&self) -> bool {
        self.conntrack.is_some() && self.chain(HookPoint::Forward).is_some_and(Chain::offloads)
    }

    /// The chain of hook `h`, when it can drop something (the last one given for it).
    pub fn chain(&self, h: HookPoint) -> Option<&Chain> {
        self.chains
            .iter()
            .rev()
            .find(|(p, _)| *p == h)
            .map(|(_, c)| c)
            .filter(|c| !c.is_noop())
    }
}

/// Builds the graph (IPv4 and IPv6) for a host with these ports (in port order), from
/// the stack's stages ([`STAGES`]).
pub fn build(
    opts: &GraphOptions,
    ports: &[&str],
    dispatch: Dispatch,
) -> Result<Graph<Host>, GraphError> {
    build_from(STAGES, opts, ports, dispatch)
}

/// An arc's end once resolved.
enum End {
    Node(&'static str),
    Drop(netbatch_engine::Reason),
}

/// The local protocols of each IP version (indexed by [`Family`]): protocol, the arc of
/// the demux, the stage that takes it; in list order.
type Takers = [Vec<(u8, &'static str, &'static str)>; 2];

/// The stages that take `f`'s protocols (its entry in [`Takers`]).
fn takers_of(t: &Takers, f: Family) -> &[(u8, &'static str, &'static str)] {
    let [v4, v6] = t;
    match f {
        Family::V4 => v4,
        Family::V6 => v6,
    }
}

/// The refusal of `node`'s declaration for `problem`.
fn refuse(node: &str, problem: String) -> GraphError {
    GraphError::Declaration {
        node: node.into(),
        problem,
    }
}

/// Builds the graph of the stages `stages` declare (in pipeline order), for a host with
/// these ports: those present for `opts`, one node each (one per port for a per-port
/// stage), in list order, their arcs wired as declared. Refused, naming the node: two
/// declarations of one name; a field a stage reads that no stage in the graph writes
/// (nor the receive path, nor the buffer's reset); two stages taking one IP protocol of
/// one version, or taking one with no demux of that version in the graph (or a second
/// demux of a version); an arc to a node that is not in the graph (also through
/// left-out nodes), a drop arc for a reason the stage does not declare, a stage that
/// counts a reason it does not declare; and what [`GraphBuilder`] refuses (an arc the
/// stage does not have, one left unconnected).
pub fn build_from(
    stages: &[Decl],
    opts: &GraphOptions,
    ports: &[&str],
    dispatch: Dispatch,
) -> Result<Graph<Host>, GraphError> {
    for (i, d) in stages.iter().enumerate() {
        if stages.iter().take(i).any(|e| e.name == d.name) {
            return Err(GraphError::DuplicateNode(d.name.into()));
        }
    }
    let live: Vec<&Decl> = stages.iter().filter(|d| (d.present)(opts)).collect();
    check_fields(&live)?;
    let takers = local_protocols(&live)?;
    let mut b: GraphBuilder<Host> = GraphBuilder::new();
    let mut decoders = Vec::new();
    for d in &live {
        let takes: Vec<(u8, &'static str)> = d.demux.map_or_else(Vec::new, |f| {
            takers_of(&takers, f)
                .iter()
                .map(|&(p, a, _)| (p, a))
                .collect()
        });
        for (port, name) in d.node_names(ports).into_iter().enumerate() {
            let m = Make {
                opts,
                ports,
                port: port as u16,
                takes: takes.clone(),
            };
            let stage = (d.make)(&m);
            // What a stage counts from the start is in its error table: registered, so
            // a set it counts is one it declares.
            if let Some(r) = stage.reasons().iter().find(|&&r| !d.declares(r)) {
                return Err(refuse(
                    name,
                    format!("counts drops for '{r}', a reason in no set it declares"),
                ));
            }
            b.add(name, stage)?;
            decoders.push((name, d.decode));
        }
    }
    for d in &live {
        for name in d.node_names(ports) {
            connect(&mut b, stages, opts, ports, d, name, &takers)?;
        }
    }
    let g = b.build(dispatch)?;
    declare::register_decoders(decoders);
    Ok(g)
}

/// Checks that every field a present stage reads is written: by a present stage, the
/// receive path or the buffer's reset.
fn check_fields(live: &[&Decl]) -> Result<(), GraphError> {
    let written = live.iter().fold(Fields::NONE, |w, d| w.union(d.writes));
    for d in live {
        if let Some(f) = declare::unwritten(d.reads, written) {
            return Err(refuse(
                d.name,
                format!("reads {}, which no stage in the graph writes", f.name()),
            ));
        }
    }
    Ok(())
}

/// The local protocols the present stages take, checked: one stage per protocol of a
/// version, one stage per arc name of a demux, none by one of the demux's own arcs, and
/// a demux (one) for every version a stage takes a protocol of.
fn local_protocols(live: &[&Decl]) -> Result<Takers, GraphError> {
    let mut takers: Takers = Default::default();
    for d in live {
        for t in d.takes {
            let [v4, v6] = &mut takers;
            let family = match t.family {
                Family::V4 => v4,
                Family::V6 => v6,
            };
            let v = t.family.name();
            if let Some((_, _, other)) = family.iter().find(|(p, ..)| *p == t.proto) {
                return Err(refuse(
                    d.name,
                    format!("takes {v} protocol {}, which '{other}' takes", t.proto),
                ));
            }
            if let Some((_, _, other)) = family.iter().find(|(_, a, n)| *a == t.arc && *n != d.name)
            {
                return Err(refuse(
                    d.name,
                    format!("takes {v} by the arc '{}', by which '{other}' takes", t.arc),
                ));
            }
            family.push((t.proto, t.arc, d.name));
        }
    }
    for f in Family::ALL {
        let demux: Vec<&&Decl> = live.iter().filter(|d| d.demux == Some(f)).collect();
        let (v, family) = (f.name(), takers_of(&takers, f));
        match (demux.as_slice(), family.first()) {
            ([_, second, ..], _) => {
                return Err(refuse(second.name, format!("is a second {v} demux")));
            }
            ([], Some((p, _, n))) => {
                return Err(refuse(
                    n,
                    format!("takes {v} protocol {p}, but no stage in the graph demuxes {v}"),
                ));
            }
            ([d], _) => {
                if let Some((_, a, n)) = family.iter().find(|(_, a, _)| d.arc(a).is_some()) {
                    return Err(refuse(
                        n,
                        format!("takes {v} by the arc '{a}', one of the demux's own"),
                    ));
                }
            }
            ([], None) => {}
        }
    }
    Ok(takers)
}

/// Connects the arcs of node `name`, one of `d`'s: its own as declared, one per port
/// to that port's transmit node, and for a demux one per stage that takes a protocol of
/// its version.
fn connect(
    b: &mut GraphBuilder<Host>,
    stages: &[Decl],
    opts: &GraphOptions,
    ports: &[&str],
    d: &Decl,
    name: &'static str,
    takers: &Takers,
) -> Result<(), GraphError> {
    for &(arc, to) in d.arcs {
        match resolve(stages, b, opts, to) {
            Ok(End::Node(n)) => b.connect(name, arc, n)?,
            Ok(End::Drop(r)) if d.declares(r) => {
                b.connect_drop(name, arc, r)?;
            }
            Ok(End::Drop(r)) => {
                return Err(refuse(
                    name,
                    format!("drops by its arc '{arc}' for '{r}', a reason it does not declare"),
                ));
            }
            Err(why) => return Err(refuse(name, format!("has an arc '{arc}' that {why}"))),
        }
    }
    if d.port_arcs {
        for p in ports {
            let t = tx::node_name(p);
            if !b.has(t) {
                return Err(refuse(
                    name,
                    format!("has an arc to '{t}', which is not in the graph"),
                ));
            }
            b.connect(name, t, t)?;
        }
    }
    if let Some(f) = d.demux {
        for &(_, arc, to) in takers_of(takers, f) {
            b.connect(name, arc, to)?;
        }
    }
    Ok(())
}

/// Where an arc declared to go `to` ends in the graph `b` is building: the node, or a
/// drop; an error says why it ends nowhere.
fn resolve(
    stages: &[Decl],
    b: &GraphBuilder<Host>,
    opts: &GraphOptions,
    mut to: To,
) -> Result<End, String> {
    // Each step passes a left-out node or an option's choice; more steps than
    // declarations go round a loop.
    for _ in 0..=2 * stages.len() {
        match to {
            To::Node(n) | To::Via(n, _) if b.has(n) => return Ok(End::Node(n)),
            To::Node(n) => return Err(format!("goes to '{n}', which is not in the graph")),
            To::Drop(r) => return Ok(End::Drop(r)),
            To::Pick(f) => to = f(opts),
            To::Via(n, arc) => {
                let Some(d) = stages.iter().find(|d| d.name == n) else {
                    return Err(format!("goes through '{n}', which nothing declares"));
                };
                let Some(t) = d.arc(arc) else {
                    return Err(format!("goes through '{n}', which has no arc '{arc}'"));
                };
                to = t;
            }
        }
    }
    Err("goes round a loop of left-out nodes".into())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use netbatch_engine::{ArcTarget, TraceNode};

    use super::*;
    use crate::cls::{Action, Classifier, Filter};
    use crate::declare::{Decode, Take};
    use crate::filter::Verdict;
    use crate::meta::Field;

    /// Options under which every stage of [`STAGES`] is present: GRO, a classifier
    /// filter, a dropping chain at every hook, host interface pairs.
    fn everything() -> GraphOptions {
        let cls = Classifier::new(vec![Filter {
            chain: 0,
            prio: 1,
            matches: Default::default(),
            actions: vec![Action::Drop],
        }])
        .unwrap();
        let drop_all = Chain {
            rules: Vec::new(),
            policy: Verdict::Drop,
        };
        GraphOptions {
            chains: HookPoint::ALL.map(|h| (h, drop_all.clone())).to_vec(),
            tcp_to: None,
            gro: true,
            classifier: Some(Arc::new(cls)),
            host_pairs: true,
            conntrack: Some(ct::Config::default()),
            nat: Some(nat::Config {
                postrouting: nat::NatChain {
                    rules: vec![nat::NatRule {
                        matches: filter::Rule::any(Verdict::Accept),
                        action: nat::Action::Masquerade { ports: None },
                    }],
                },
                ..Default::default()
            }),
            defrag: crate::defrag::Config::default(),
        }
    }

    const PORTS: &[&str] = &["eth0", "eth1"];

    fn nodes(o: &GraphOptions) -> Vec<TraceNode> {
        build(o, PORTS, Dispatch::Buckets).unwrap().trace_nodes()
    }

    /// Where `node`'s arc `arc` goes in `g`.
    fn target(g: &[TraceNode], node: &str, arc: &str) -> String {
        let n = g.iter().find(|n| n.name == node).expect(node);
        match n.arcs.iter().find(|(a, _)| *a == arc).expect(arc).1 {
            ArcTarget::Node(t) => t.to_string(),
            ArcTarget::Drop(r) => format!("drop {r}"),
        }
    }

    fn declaration_error(r: Result<Graph<Host>, GraphError>) -> (String, String) {
        match r {
            Err(GraphError::Declaration { node, problem }) => (node, problem),
            Err(e) => panic!("another error: {e}"),
            Ok(_) => panic!("built"),
        }
    }

    /// The default graph has the stages in [`STAGES`]' order, those the options leave
    /// out missing, one transmit node per port at the end: the order of ARCHITECTURE's
    /// graph, upstream first.
    #[test]
    fn nodes_follow_the_list_in_pipeline_order() {
        let names: Vec<&str> = nodes(&GraphOptions::default())
            .iter()
            .map(|n| n.name)
            .collect();
        assert_eq!(
            names,
            [
                "eth-input",
                "arp-input",
                "ip4-input",
                "ip6-input",
                "ip4-route",
                "ip6-route",
                "ip4-local",
                "ip6-local",
                "ip4-reassemble",
                "ip6-reassemble",
                "udp-input",
                "udp6-input",
                "icmp-input",
                "icmp6-input",
                "nd-input",
                "tcp-input",
                "ip4-forward",
                "ip6-forward",
                "ip4-icmp-error",
                "ip6-icmp-error",
                "ip4-local-out",
                "ip6-local-out",
                "ip4-fragment",
                "neighbour",
                "ip6-neighbour",
                "gso",
                "tx",
                "tx-eth0",
                "tx-eth1",
            ]
        );
        let all = nodes(&everything());
        assert_eq!(
            all.len(),
            names.len() + 17,
            "gro, cls, 5 hooks, 2 defrag stages, 4 conntrack stages, 2 NAT stages, punt, inject"
        );
        assert_eq!((all[0].name, all[1].name), ("gro", "cls-ingress"));
        assert_eq!(
            (all[6].name, all[7].name, all[8].name, all[9].name),
            ("ip4-defrag", "ip6-defrag", "ct-in", "nat-prerouting")
        );
        assert_eq!(
            target(&all, "hook-postrouting", "accept"),
            "nat-postrouting"
        );
        assert_eq!(target(&all, "nat-postrouting", "accept"), "ct-confirm");
    }

    /// An arc to a hook that is left out goes where the hook would send that family:
    /// through every left-out hook in turn.
    #[test]
    fn arcs_to_left_out_hooks_go_where_the_hook_would_send_them() {
        let none = nodes(&GraphOptions::default());
        assert_eq!(target(&none, "ip4-input", "ok"), "ip4-route");
        assert_eq!(target(&none, "ip6-input", "ok"), "ip6-route");
        assert_eq!(target(&none, "ip6-route", "local"), "ip6-local");
        assert_eq!(target(&none, "ip4-forward", "ok"), "neighbour");
        assert_eq!(target(&none, "ip6-local-out", "ok"), "ip6-neighbour");
        let post = GraphOptions {
            chains: vec![(
                HookPoint::Postrouting,
                Chain {
                    rules: Vec::new(),
                    policy: Verdict::Drop,
                },
            )],
            ..GraphOptions::default()
        };
        let g = nodes(&post);
        assert_eq!(target(&g, "ip4-forward", "ok"), "hook-postrouting");
        assert_eq!(target(&g, "ip6-local-out", "ok"), "hook-postrouting");
        assert_eq!(target(&g, "hook-postrouting", "accept6"), "ip6-neighbour");
        let all = nodes(&everything());
        assert_eq!(target(&all, "gro", "l2"), "cls-ingress");
        assert_eq!(target(&all, "ip6-forward", "ok"), "hook-forward");
        assert_eq!(target(&all, "hook-forward", "accept6"), "hook-postrouting");
        assert_eq!(target(&all, "hook-input", "accept"), "ct-confirm-local");
        assert_eq!(target(&all, "ct-confirm-local", "accept"), "ip4-local");
        assert_eq!(target(&all, "ip4-input", "ok"), "ip4-defrag");
        assert_eq!(target(&all, "ip6-input", "ok"), "ip6-defrag");
        assert_eq!(target(&all, "ip4-defrag", "ok"), "ct-in");
        assert_eq!(target(&all, "ip6-defrag", "ok"), "ct-in");
        assert_eq!(target(&all, "ip4-defrag", "error"), "ip4-icmp-error");
        assert_eq!(target(&all, "ip6-defrag", "error"), "ip6-icmp-error");
        assert_eq!(target(&all, "ct-in", "accept6"), "nat-prerouting");
        assert_eq!(target(&all, "nat-prerouting", "accept6"), "hook-prerouting");
        assert_eq!(target(&all, "ip6-local-out", "ok"), "ct-out");
        assert_eq!(target(&all, "ct-out", "accept"), "hook-output");
        assert_eq!(
            target(&all, "hook-postrouting", "accept6"),
            "nat-postrouting"
        );
        assert_eq!(target(&all, "nat-postrouting", "accept6"), "ct-confirm");
        assert_eq!(target(&all, "ct-confirm", "accept6"), "ip6-neighbour");
        // Tracking without rules: the stages sit where the hooks would.
        let ct_only = nodes(&GraphOptions {
            conntrack: Some(ct::Config::default()),
            ..GraphOptions::default()
        });
        assert_eq!(target(&ct_only, "ip4-input", "ok"), "ip4-defrag");
        assert_eq!(target(&ct_only, "ip4-defrag", "ok"), "ct-in");
        assert_eq!(target(&ct_only, "ct-in", "accept"), "ip4-route");
        assert_eq!(target(&ct_only, "ip4-route", "local"), "ct-confirm-local");
        assert_eq!(target(&ct_only, "ip4-forward", "ok"), "ct-confirm");
        assert_eq!(target(&ct_only, "ct-out", "accept6"), "ct-confirm");
    }

    /// What the options pick: `host` arcs to `host-punt` with pairs, else a drop; local
    /// TCP to the pair, the named node, or a drop.
    #[test]
    fn option_dependent_arcs_follow_the_options() {
        let none = nodes(&GraphOptions::default());
        assert_eq!(target(&none, "udp-input", "host"), "drop host_no_pair");
        assert_eq!(target(&none, "tcp-input", "host"), "drop tcp_no_handler");
        let to = GraphOptions {
            tcp_to: Some(node::TX),
            ..GraphOptions::default()
        };
        assert_eq!(target(&nodes(&to), "tcp-input", "host"), "tx");
        let all = nodes(&everything());
        assert_eq!(target(&all, "nd-input", "host"), "host-punt");
        assert_eq!(target(&all, "tcp-input", "host"), "host-punt");
        assert_eq!(target(&all, "host-punt", "tx-eth1"), "tx-eth1");
    }

    /// The local demux of each version has an arc to each stage that takes one of its
    /// protocols, named as the stage's declaration names it.
    #[test]
    fn local_protocols_go_where_they_are_taken() {
        let g = nodes(&GraphOptions::default());
        for (demux, arc, to) in [
            ("ip4-local", "udp", "udp-input"),
            ("ip4-local", "icmp", "icmp-input"),
            ("ip4-local", "tcp", "tcp-input"),
            ("ip6-local", "udp", "udp6-input"),
            ("ip6-local", "icmp", "icmp6-input"),
            ("ip6-local", "tcp", "tcp-input"),
        ] {
            assert_eq!(target(&g, demux, arc), to, "{demux} {arc}");
        }
        let m = Make {
            opts: &GraphOptions::default(),
            ports: PORTS,
            port: 0,
            takes: vec![(17, "udp"), (6, "tcp"), (253, "toy"), (254, "toy")],
        };
        let d = m.demux(&["error", "host"]);
        assert_eq!(d.arcs(), ["error", "host", "udp", "tcp", "toy"]);
        assert_eq!(d.next(17), Some(netbatch_engine::Next(2)));
        assert_eq!(d.next(254), d.next(253));
        assert_eq!(d.next(253), Some(netbatch_engine::Next(4)));
        assert!(
            (0..=255u8)
                .filter(|&p| d.next(p).is_some())
                .eq([6, 17, 253, 254])
        );
    }

    /// Every stage of the full graph declares the reasons it counts from the start and
    /// those its drop arcs drop with (the assembler refuses either undeclared, below, so
    /// building it checks them); the registry is the union of the declarations, each name
    /// once.
    #[test]
    fn the_reason_registry_is_the_declared_sets() {
        assert_eq!(nodes(&everything()).len(), STAGES.len() + PORTS.len() - 1);
        let sets = declare::reason_sets();
        assert_eq!(netbatch_engine::drop::check_sets(&sets), Ok(()));
        for d in STAGES {
            for s in d.reasons {
                assert!(sets.contains(s), "{}", d.name);
            }
        }
        // A set declared by several stages is registered once.
        let udp = sets
            .iter()
            .filter(|s| s.contains(&udp::input::reason::NO_SOCKET))
            .count();
        assert_eq!(udp, 1);
    }

    /// What the trace shows at a node is what its declaration says, for the nodes of a
    /// built graph and for those of the list (per port too), `Auto` for any other.
    #[test]
    fn each_node_is_traced_as_declared() {
        nodes(&GraphOptions::default());
        for (n, d) in [
            ("eth-input", Decode::Link),
            ("arp-input", Decode::Arp),
            ("udp6-input", Decode::Ports),
            ("nd-input", Decode::Icmp),
            ("ip6-neighbour", Decode::Out),
            ("ip6-local", Decode::Ip),
            ("hook-forward", Decode::Ip),
            ("tx-eth0", Decode::Out),
            ("tx-some-other-port", Decode::Out),
            ("tx", Decode::Out),
            ("host-punt", Decode::Auto),
            ("nothing-declares-this", Decode::Auto),
        ] {
            assert_eq!(declare::decode_of(n), d, "{n}");
        }
    }

    /// A stage of the list that reads a field no stage in the graph writes is refused,
    /// named with the field, before anything is built: without the routing stages
    /// (IPv4 and IPv6, forwarded and our own), nothing classes destinations, which
    /// `ip6-local` reads first in list order.
    #[test]
    fn a_field_no_stage_writes_is_refused() {
        let routing = [
            node::IP4_ROUTE,
            node::IP6_ROUTE,
            node::IP4_LOCAL_OUT,
            node::IP6_LOCAL_OUT,
        ];
        let without: Vec<Decl> = STAGES
            .iter()
            .filter(|d| !routing.contains(&d.name))
            .copied()
            .collect();
        let (node, problem) = declaration_error(build_from(
            &without,
            &GraphOptions::default(),
            PORTS,
            Dispatch::Buckets,
        ));
        assert_eq!(node, "ip6-local");
        assert_eq!(
            problem,
            "reads destination class, which no stage in the graph writes"
        );
        assert!(
            crate::meta::TEMPLATE.has(Field::Mark),
            "unmarked needs no writer"
        );
    }

    /// Declaring a local protocol another stage takes, or a name another stage has, or
    /// an arc to a node that is not there, is refused.
    #[test]
    fn conflicts_and_dangling_arcs_are_refused() {
        const DUP: Decl = Decl {
            takes: &[Take::v4(17, "udp2")],
            ..Decl::new("udp2-input", |_| Box::new(tcp::TcpInput))
        };
        let mut list = STAGES.to_vec();
        list.push(DUP);
        let (node, problem) = declaration_error(build_from(
            &list,
            &GraphOptions::default(),
            PORTS,
            Dispatch::Buckets,
        ));
        assert_eq!(node, "udp2-input");
        assert_eq!(problem, "takes IPv4 protocol 17, which 'udp-input' takes");

        let mut twice = STAGES.to_vec();
        twice.push(tcp::DECL);
        assert_eq!(
            build_from(&twice, &GraphOptions::default(), PORTS, Dispatch::Buckets).err(),
            Some(GraphError::DuplicateNode("tcp-input".into()))
        );

        let nowhere = GraphOptions {
            tcp_to: Some("nowhere"),
            ..GraphOptions::default()
        };
        let (node, problem) = declaration_error(build(&nowhere, PORTS, Dispatch::Buckets));
        assert_eq!(node, "tcp-input");
        assert_eq!(
            problem,
            "has an arc 'host' that goes to 'nowhere', which is not in the graph"
        );

        let no_demux: Vec<Decl> = STAGES
            .iter()
            .filter(|d| d.name != node::IP6_LOCAL)
            .copied()
            .collect();
        let (node, problem) = declaration_error(build_from(
            &no_demux,
            &GraphOptions::default(),
            PORTS,
            Dispatch::Buckets,
        ));
        assert_eq!(node, "udp6-input");
        assert_eq!(
            problem,
            "takes IPv6 protocol 17, but no stage in the graph demuxes IPv6"
        );
    }

    netbatch_engine::reasons! {
        /// Reasons of the made-up stages of the refusal tests.
        mod probe {
            LOST = "probe_lost": "a made-up stage's reason",
        }
    }

    /// A made-up stage for the refusal tests: the arcs and error table it is given. The
    /// graphs it is in are never run.
    struct Probe(&'static [&'static str], &'static [netbatch_engine::Reason]);

    impl netbatch_engine::Stage<Host> for Probe {
        fn arcs(&self) -> &[&'static str] {
            self.0
        }

        fn reasons(&self) -> &'static [netbatch_engine::Reason] {
            self.1
        }

        fn process(
            &mut self,
            _: &mut Host,
            _: &mut netbatch_engine::Cx<'_>,
            _: &mut netbatch_engine::PktList,
            _: &mut netbatch_engine::Out,
        ) {
        }
    }

    /// A probe with one arc, `out`, and no error table.
    fn one_arc(_: &Make<'_>) -> Box<dyn netbatch_engine::Stage<Host>> {
        Box::new(Probe(&["out"], &[]))
    }

    /// The refusal of [`STAGES`] plus `extra`, built with the default options.
    fn refusal_with(extra: &[Decl]) -> (String, String) {
        let mut list = STAGES.to_vec();
        list.extend_from_slice(extra);
        declaration_error(build_from(
            &list,
            &GraphOptions::default(),
            PORTS,
            Dispatch::Buckets,
        ))
    }

    /// A stage whose arc goes to a node that is not in the graph (by name, or through
    /// a left-out node whose arcs end nowhere, or round a loop of left-out nodes) is
    /// refused, naming the node, the arc and why.
    #[test]
    fn an_arc_that_goes_nowhere_is_refused() {
        const NOWHERE: Decl = Decl {
            arcs: &[("out", To::Node("nowhere"))],
            ..Decl::new("probe", one_arc)
        };
        assert_eq!(
            refusal_with(&[NOWHERE]),
            (
                "probe".into(),
                "has an arc 'out' that goes to 'nowhere', which is not in the graph".into()
            )
        );

        const THROUGH_NOTHING: Decl = Decl {
            arcs: &[("out", To::Via("ghost", "ok"))],
            ..Decl::new("probe", one_arc)
        };
        assert_eq!(
            refusal_with(&[THROUGH_NOTHING]).1,
            "has an arc 'out' that goes through 'ghost', which nothing declares"
        );

        // A hook left out (no chain) has arcs `accept` and `accept6`, no `ok`.
        const NO_SUCH_ARC: Decl = Decl {
            arcs: &[("out", To::Via(node::HOOK_INPUT, "ok"))],
            ..Decl::new("probe", one_arc)
        };
        assert_eq!(
            refusal_with(&[NO_SUCH_ARC]).1,
            "has an arc 'out' that goes through 'hook-input', which has no arc 'ok'"
        );

        fn never(_: &GraphOptions) -> bool {
            false
        }
        const A: Decl = Decl {
            arcs: &[("out", To::Via("b", "out"))],
            present: never,
            ..Decl::new("a", one_arc)
        };
        const B: Decl = Decl {
            arcs: &[("out", To::Via("a", "out"))],
            present: never,
            ..Decl::new("b", one_arc)
        };
        const INTO_LOOP: Decl = Decl {
            arcs: &[("out", To::Via("a", "out"))],
            ..Decl::new("probe", one_arc)
        };
        assert_eq!(
            refusal_with(&[A, B, INTO_LOOP]).1,
            "has an arc 'out' that goes round a loop of left-out nodes"
        );

        // The list without the per-port transmit nodes: the arcs to them go nowhere.
        let no_tx: Vec<Decl> = STAGES
            .iter()
            .filter(|d| d.name != tx::PORT_DECL.name)
            .copied()
            .collect();
        let (node, problem) = declaration_error(build_from(
            &no_tx,
            &GraphOptions::default(),
            PORTS,
            Dispatch::Buckets,
        ));
        assert_eq!(node, "neighbour", "the first stage with port arcs");
        assert_eq!(
            problem,
            "has an arc to 'tx-eth0', which is not in the graph"
        );
    }

    /// A reason a stage drops with by an arc, or counts from the start, is one of the
    /// sets it declares (declaring is registering): otherwise the stage is refused,
    /// naming the reason.
    #[test]
    fn an_undeclared_reason_is_refused() {
        const DROPS: Decl = Decl {
            arcs: &[("out", To::Drop(probe::LOST))],
            ..Decl::new("probe", one_arc)
        };
        assert_eq!(
            refusal_with(&[DROPS]),
            (
                "probe".into(),
                "drops by its arc 'out' for 'probe_lost', a reason it does not declare".into()
            )
        );
        // Declared, the same arc is a drop arc.
        const DECLARED: Decl = Decl {
            reasons: &[probe::ALL],
            ..DROPS
        };
        let mut list = STAGES.to_vec();
        list.push(DECLARED);
        let g = build_from(&list, &GraphOptions::default(), PORTS, Dispatch::Buckets)
            .unwrap()
            .trace_nodes();
        assert_eq!(target(&g, "probe", "out"), "drop probe_lost");
        assert!(declare::reason_sets_of(&list).contains(&probe::ALL));
        assert!(!declare::reason_sets().contains(&probe::ALL));

        const COUNTS: Decl = Decl {
            arcs: &[("out", To::Node(node::TX))],
            reasons: &[udp::input::reason::ALL],
            ..Decl::new("probe", |_| Box::new(Probe(&["out"], probe::ALL)))
        };
        assert_eq!(
            refusal_with(&[COUNTS]),
            (
                "probe".into(),
                "counts drops for 'probe_lost', a reason in no set it declares".into()
            )
        );
    }

    /// What the declaration and the stage say of its arcs must agree: an arc the stage
    /// has and the declaration does not wire is refused by the graph builder, naming
    /// the node and the arc; one the declaration names and the stage lacks, too.
    #[test]
    fn arcs_the_stage_and_its_declaration_disagree_on_are_refused() {
        const FEWER: Decl = Decl {
            arcs: &[("out", To::Node(node::TX))],
            ..Decl::new("probe", |_| Box::new(Probe(&["out", "spare"], &[])))
        };
        let mut list = STAGES.to_vec();
        list.push(FEWER);
        assert_eq!(
            build_from(&list, &GraphOptions::default(), PORTS, Dispatch::Buckets).err(),
            Some(GraphError::Unconnected {
                node: "probe".into(),
                arc: "spare".into()
            })
        );
        const MORE: Decl = Decl {
            arcs: &[("out", To::Node(node::TX)), ("extra", To::Node(node::TX))],
            ..Decl::new("probe", one_arc)
        };
        list.pop();
        list.push(MORE);
        assert_eq!(
            build_from(&list, &GraphOptions::default(), PORTS, Dispatch::Buckets).err(),
            Some(GraphError::UnknownArc {
                node: "probe".into(),
                arc: "extra".into()
            })
        );
    }

    /// The local protocols: a second demux of a version, a protocol taken by an arc
    /// name another stage takes by, or by one of the demux's own arcs, is refused.
    #[test]
    fn demux_conflicts_are_refused() {
        const SECOND: Decl = Decl {
            demux: Some(Family::V4),
            ..Decl::new("ip4-local-again", |m| {
                Box::new(ip4::local::Ip4Local::new(m.demux(ip4::local::ARCS)))
            })
        };
        let (node, problem) = refusal_with(&[SECOND]);
        assert_eq!(node, "ip4-local-again");
        assert_eq!(problem, "is a second IPv4 demux");

        const SAME_ARC: Decl = Decl {
            takes: &[Take::v4(253, "udp")],
            ..Decl::new("probe", one_arc)
        };
        assert_eq!(
            refusal_with(&[SAME_ARC]),
            (
                "probe".into(),
                "takes IPv4 by the arc 'udp', by which 'udp-input' takes".into()
            )
        );

        const OWN_ARC: Decl = Decl {
            takes: &[Take::v6(253, "error")],
            ..Decl::new("probe", one_arc)
        };
        assert_eq!(
            refusal_with(&[OWN_ARC]),
            (
                "probe".into(),
                "takes IPv6 by the arc 'error', one of the demux's own".into()
            )
        );
    }
}
