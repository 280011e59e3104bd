//! Assembles the stage graph for a host configuration.
//!
//! Nodes are added in pipeline order (the `buckets` scheduler runs the lowest-numbered
//! pending node first, so upstream stages run before downstream ones). A hook whose
//! chain accepts everything is not added at all: its upstream arc is wired straight to
//! the next stage, so an empty hook costs nothing.

use netbatch_engine::{Dispatch, Graph, GraphBuilder, GraphError, NodeId};

use crate::arp::input::ArpInput;
use crate::cls::stage::ClsIngress;
use crate::filter::hook::HookStage;
use crate::filter::{Chain, HookPoint};
use crate::gro::stage::Gro;
use crate::gso::stage::Gso;
use crate::host::{Entry, Host};
use crate::hostif::inject::HostInject;
use crate::hostif::punt::HostPunt;
use crate::icmp::input::IcmpInput;
use crate::ip4::forward::Ip4Forward;
use crate::ip4::fragment::Ip4Fragment;
use crate::ip4::icmp_error::Ip4IcmpError;
use crate::ip4::input::Ip4Input;
use crate::ip4::local::Ip4Local;
use crate::ip4::local_out::Ip4LocalOut;
use crate::ip4::route::Ip4Route;
use crate::ip6::input::Ip6Input;
use crate::l2::input::EthInput;
use crate::neigh::resolve::Neighbour;
use crate::tcp::TcpInput;
use crate::tx::{Tx, TxPort};
use crate::udp::input::UdpInput;

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
    pub classifier: Option<std::sync::Arc<crate::cls::Classifier>>,
    /// Ports are paired with host interfaces ([`crate::hostif`]): the `host-punt` and
    /// `host-inject` stages are in the graph, and what netbatch does not consume on a
    /// paired port goes to its tap (local TCP among it, whatever `tcp_to` says).
    pub host_pairs: bool,
}

impl GraphOptions {
    fn chain(&self, h: HookPoint) -> Option<&Chain> {
        self.chains
            .iter()
            .rev()
            .find(|(p, _)| *p == h)
            .map(|(_, c)| c)
            .filter(|c| !c.is_noop())
    }
}

/// Builds the graph (IPv4, and IPv6 input) for a host with these ports (in port order).
pub fn build(
    opts: &GraphOptions,
    ports: &[&str],
    dispatch: Dispatch,
) -> Result<Graph<Host>, GraphError> {
    use node::*;
    let mut b: GraphBuilder<Host> = GraphBuilder::new();
    let hook =
        |b: &mut GraphBuilder<Host>, h: HookPoint| -> Result<Option<&'static str>, GraphError> {
            match opts.chain(h) {
                Some(c) => {
                    b.add(h.node(), Box::new(HookStage::new(h, c.clone())))?;
                    Ok(Some(h.node()))
                }
                None => Ok(None),
            }
        };
    if opts.gro {
        b.add(GRO, Box::new(Gro::new()))?;
    }
    let cls = opts.classifier.as_ref().filter(|c| !c.is_empty());
    if let Some(c) = cls {
        b.add(CLS_INGRESS, Box::new(ClsIngress::new(c.clone())))?;
    }
    b.add(ETH_INPUT, Box::new(EthInput))?;
    b.add(ARP_INPUT, Box::new(ArpInput::default()))?;
    b.add(IP4_INPUT, Box::new(Ip4Input))?;
    b.add(IP6_INPUT, Box::new(Ip6Input))?;
    let pre = hook(&mut b, HookPoint::Prerouting)?;
    b.add(IP4_ROUTE, Box::new(Ip4Route::default()))?;
    let input = hook(&mut b, HookPoint::Input)?;
    b.add(IP4_LOCAL, Box::new(Ip4Local))?;
    b.add(UDP_INPUT, Box::new(UdpInput::default()))?;
    b.add(ICMP_INPUT, Box::new(IcmpInput))?;
    b.add(TCP_INPUT, Box::new(TcpInput))?;
    b.add(IP4_FORWARD, Box::new(Ip4Forward))?;
    let fwd = hook(&mut b, HookPoint::Forward)?;
    b.add(IP4_ICMP_ERROR, Box::new(Ip4IcmpError::default()))?;
    b.add(IP4_LOCAL_OUT, Box::new(Ip4LocalOut))?;
    let output = hook(&mut b, HookPoint::Output)?;
    let post = hook(&mut b, HookPoint::Postrouting)?;
    b.add(IP4_FRAGMENT, Box::new(Ip4Fragment::default()))?;
    b.add(NEIGHBOUR, Box::new(Neighbour::new(ports)))?;
    b.add(GSO, Box::new(Gso::new(ports)))?;
    if opts.host_pairs {
        b.add(HOST_PUNT, Box::new(HostPunt::new(ports)))?;
        b.add(HOST_INJECT, Box::new(HostInject::new(ports)))?;
    }
    b.add(TX, Box::new(Tx))?;
    let tx_ports: Vec<&'static str> = ports.iter().map(|p| crate::tx::node_name(p)).collect();
    for (i, &name) in tx_ports.iter().enumerate() {
        b.add(name, Box::new(TxPort::new(i as u16)))?;
    }

    let to_l2 = if cls.is_some() {
        b.connect(CLS_INGRESS, "l2", ETH_INPUT)?;
        b.connect(CLS_INGRESS, "tx", TX)?;
        b.connect(CLS_INGRESS, "gso", GSO)?;
        CLS_INGRESS
    } else {
        ETH_INPUT
    };
    if opts.gro {
        b.connect(GRO, "l2", to_l2)?;
    }
    b.connect(ETH_INPUT, "arp", ARP_INPUT)?;
    b.connect(ETH_INPUT, "ip4", IP4_INPUT)?;
    b.connect(ETH_INPUT, "ip6", IP6_INPUT)?;
    if opts.host_pairs {
        // Until netbatch routes IPv6, a paired port's valid IPv6 is the kernel's (its
        // neighbour discovery, its daemons' sessions, its addresses).
        b.connect(IP6_INPUT, "ok", HOST_PUNT)?;
    } else {
        b.connect_drop(IP6_INPUT, "ok", crate::ip6::reason::NOT_ROUTED)?;
    }
    b.connect(ARP_INPUT, "tx", TX)?;
    b.connect(ARP_INPUT, "neighbour", NEIGHBOUR)?;

    let to_route = pre.unwrap_or(IP4_ROUTE);
    b.connect(IP4_INPUT, "ok", to_route)?;
    if let Some(h) = pre {
        b.connect(h, "accept", IP4_ROUTE)?;
    }
    let to_local = input.unwrap_or(IP4_LOCAL);
    b.connect(IP4_ROUTE, "local", to_local)?;
    if let Some(h) = input {
        b.connect(h, "accept", IP4_LOCAL)?;
    }
    b.connect(IP4_ROUTE, "forward", IP4_FORWARD)?;
    b.connect(IP4_ROUTE, "error", IP4_ICMP_ERROR)?;
    b.connect(IP4_INPUT, "error", IP4_ICMP_ERROR)?;

    b.connect(IP4_LOCAL, "udp", UDP_INPUT)?;
    b.connect(IP4_LOCAL, "icmp", ICMP_INPUT)?;
    b.connect(IP4_LOCAL, "tcp", TCP_INPUT)?;
    b.connect(IP4_LOCAL, "error", IP4_ICMP_ERROR)?;
    b.connect(UDP_INPUT, "error", IP4_ICMP_ERROR)?;
    b.connect(ICMP_INPUT, "reply", IP4_LOCAL_OUT)?;
    // What is not consumed: to the host interface pair's kernel, or dropped (no port
    // is paired then, so the drop is never taken).
    for n in [ARP_INPUT, IP4_LOCAL, UDP_INPUT, ICMP_INPUT] {
        if opts.host_pairs {
            b.connect(n, "host", HOST_PUNT)?;
        } else {
            b.connect_drop(n, "host", crate::hostif::reason::NO_PAIR)?;
        }
    }
    match opts.tcp_to {
        _ if opts.host_pairs => b.connect(TCP_INPUT, "host", HOST_PUNT)?,
        Some(n) => b.connect(TCP_INPUT, "host", n)?,
        None => b.connect_drop(TCP_INPUT, "host", crate::tcp::reason::NO_HANDLER)?,
    }

    // Forwarded: FORWARD hook, then POSTROUTING, the neighbour stage.
    let to_post = post.unwrap_or(NEIGHBOUR);
    b.connect(IP4_FORWARD, "ok", fwd.unwrap_or(to_post))?;
    b.connect(IP4_FORWARD, "error", IP4_ICMP_ERROR)?;
    if let Some(h) = fwd {
        b.connect(h, "accept", to_post)?;
    }
    b.connect(IP4_ICMP_ERROR, "out", IP4_LOCAL_OUT)?;
    // Local: OUTPUT hook, then POSTROUTING.
    b.connect(IP4_LOCAL_OUT, "ok", output.unwrap_or(to_post))?;
    b.connect(IP4_LOCAL_OUT, "local", IP4_LOCAL)?;
    if let Some(h) = output {
        b.connect(h, "accept", to_post)?;
    }
    if let Some(h) = post {
        b.connect(h, "accept", NEIGHBOUR)?;
    }
    b.connect(IP4_FRAGMENT, "ok", NEIGHBOUR)?;
    b.connect(IP4_FRAGMENT, "error", IP4_ICMP_ERROR)?;
    b.connect(NEIGHBOUR, "frag", IP4_FRAGMENT)?;
    b.connect(NEIGHBOUR, "tx", TX)?;
    b.connect(NEIGHBOUR, "gso", GSO)?;
    b.connect(GSO, "tx", TX)?;
    for &name in &tx_ports {
        b.connect(NEIGHBOUR, name, name)?;
        b.connect(GSO, name, name)?;
        if opts.host_pairs {
            b.connect(HOST_PUNT, name, name)?;
            b.connect(HOST_INJECT, name, name)?;
        }
    }
    b.build(dispatch)
}
