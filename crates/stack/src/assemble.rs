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
use crate::icmp6::input::Icmp6Input;
use crate::ip4::forward::Ip4Forward;
use crate::ip4::fragment::Ip4Fragment;
use crate::ip4::icmp_error::Ip4IcmpError;
use crate::ip4::input::Ip4Input;
use crate::ip4::local::Ip4Local;
use crate::ip4::local_out::Ip4LocalOut;
use crate::ip4::route::Ip4Route;
use crate::ip6::forward::Ip6Forward;
use crate::ip6::icmp_error::Ip6IcmpError;
use crate::ip6::input::Ip6Input;
use crate::ip6::local::Ip6Local;
use crate::ip6::local_out::Ip6LocalOut;
use crate::ip6::route::Ip6Route;
use crate::l2::input::EthInput;
use crate::nd::input::NdInput;
use crate::nd::resolve::Ip6Neighbour;
use crate::neigh::resolve::Neighbour;
use crate::tcp::TcpInput;
use crate::tx::{Tx, TxPort};
use crate::udp::input::{Udp6Input, UdpInput};

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

/// Builds the graph (IPv4 and IPv6) for a host with these ports (in port order).
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
    b.add(IP6_ROUTE, Box::new(Ip6Route::default()))?;
    let input = hook(&mut b, HookPoint::Input)?;
    b.add(IP4_LOCAL, Box::new(Ip4Local))?;
    b.add(IP6_LOCAL, Box::new(Ip6Local))?;
    b.add(UDP_INPUT, Box::new(UdpInput::default()))?;
    b.add(UDP6_INPUT, Box::new(Udp6Input::default()))?;
    b.add(ICMP_INPUT, Box::new(IcmpInput))?;
    b.add(ICMP6_INPUT, Box::new(Icmp6Input))?;
    b.add(ND_INPUT, Box::new(NdInput::default()))?;
    b.add(TCP_INPUT, Box::new(TcpInput))?;
    b.add(IP4_FORWARD, Box::new(Ip4Forward::default()))?;
    b.add(IP6_FORWARD, Box::new(Ip6Forward::default()))?;
    let fwd = hook(&mut b, HookPoint::Forward)?;
    b.add(IP4_ICMP_ERROR, Box::new(Ip4IcmpError::default()))?;
    b.add(IP6_ICMP_ERROR, Box::new(Ip6IcmpError::default()))?;
    b.add(IP4_LOCAL_OUT, Box::new(Ip4LocalOut))?;
    b.add(IP6_LOCAL_OUT, Box::new(Ip6LocalOut))?;
    let output = hook(&mut b, HookPoint::Output)?;
    let post = hook(&mut b, HookPoint::Postrouting)?;
    b.add(IP4_FRAGMENT, Box::new(Ip4Fragment::default()))?;
    b.add(NEIGHBOUR, Box::new(Neighbour::new(ports)))?;
    b.add(IP6_NEIGHBOUR, Box::new(Ip6Neighbour::new(ports)))?;
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
    b.connect(ARP_INPUT, "tx", TX)?;
    b.connect(ARP_INPUT, "neighbour", NEIGHBOUR)?;

    // A hook serves both families: it sends IPv4 on by `accept`, IPv6 by `accept6`.
    let via = |b: &mut GraphBuilder<Host>,
               from: &str,
               arc: &str,
               h: Option<&'static str>,
               (v4, v6): (&str, &str),
               six: bool|
     -> Result<(), GraphError> {
        match h {
            Some(h) => b.connect(from, arc, h),
            None => b.connect(from, arc, if six { v6 } else { v4 }),
        }
    };
    let hook_arcs = |b: &mut GraphBuilder<Host>,
                     h: Option<&'static str>,
                     (v4, v6): (&str, &str)|
     -> Result<(), GraphError> {
        if let Some(h) = h {
            b.connect(h, "accept", v4)?;
            b.connect(h, "accept6", v6)?;
        }
        Ok(())
    };
    via(&mut b, IP4_INPUT, "ok", pre, (IP4_ROUTE, IP6_ROUTE), false)?;
    via(&mut b, IP6_INPUT, "ok", pre, (IP4_ROUTE, IP6_ROUTE), true)?;
    hook_arcs(&mut b, pre, (IP4_ROUTE, IP6_ROUTE))?;
    via(
        &mut b,
        IP4_ROUTE,
        "local",
        input,
        (IP4_LOCAL, IP6_LOCAL),
        false,
    )?;
    via(
        &mut b,
        IP6_ROUTE,
        "local",
        input,
        (IP4_LOCAL, IP6_LOCAL),
        true,
    )?;
    hook_arcs(&mut b, input, (IP4_LOCAL, IP6_LOCAL))?;
    b.connect(IP4_ROUTE, "forward", IP4_FORWARD)?;
    b.connect(IP4_ROUTE, "error", IP4_ICMP_ERROR)?;
    b.connect(IP4_INPUT, "error", IP4_ICMP_ERROR)?;

    b.connect(IP4_LOCAL, "udp", UDP_INPUT)?;
    b.connect(IP4_LOCAL, "icmp", ICMP_INPUT)?;
    b.connect(IP4_LOCAL, "tcp", TCP_INPUT)?;
    b.connect(IP4_LOCAL, "error", IP4_ICMP_ERROR)?;
    b.connect(UDP_INPUT, "error", IP4_ICMP_ERROR)?;
    b.connect(ICMP_INPUT, "reply", IP4_LOCAL_OUT)?;
    // IPv6: input's parameter problems, routing, local delivery.
    b.connect(IP6_INPUT, "error", IP6_ICMP_ERROR)?;
    b.connect(IP6_ROUTE, "forward", IP6_FORWARD)?;
    b.connect(IP6_ROUTE, "error", IP6_ICMP_ERROR)?;
    b.connect(IP6_LOCAL, "udp", UDP6_INPUT)?;
    b.connect(IP6_LOCAL, "icmp", ICMP6_INPUT)?;
    b.connect(IP6_LOCAL, "tcp", TCP_INPUT)?;
    b.connect(IP6_LOCAL, "error", IP6_ICMP_ERROR)?;
    b.connect(UDP6_INPUT, "error", IP6_ICMP_ERROR)?;
    b.connect(ICMP6_INPUT, "reply", IP6_LOCAL_OUT)?;
    b.connect(ICMP6_INPUT, "nd", ND_INPUT)?;
    b.connect(ND_INPUT, "reply", IP6_LOCAL_OUT)?;
    b.connect(ND_INPUT, "neighbour", IP6_NEIGHBOUR)?;
    // What is not consumed: to the host interface pair's kernel, or dropped (no port
    // is paired then, so the drop is never taken).
    for n in [
        ARP_INPUT,
        IP4_LOCAL,
        UDP_INPUT,
        ICMP_INPUT,
        IP6_LOCAL,
        UDP6_INPUT,
        ICMP6_INPUT,
        ND_INPUT,
    ] {
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
    let to_post = post.map_or((NEIGHBOUR, IP6_NEIGHBOUR), |h| (h, h));
    let fwd_next = fwd.map_or(to_post, |h| (h, h));
    b.connect(IP4_FORWARD, "ok", fwd_next.0)?;
    b.connect(IP6_FORWARD, "ok", fwd_next.1)?;
    b.connect(IP4_FORWARD, "error", IP4_ICMP_ERROR)?;
    b.connect(IP6_FORWARD, "error", IP6_ICMP_ERROR)?;
    b.connect(IP4_FORWARD, "redirect", IP4_LOCAL_OUT)?;
    b.connect(IP6_FORWARD, "redirect", IP6_LOCAL_OUT)?;
    hook_arcs(&mut b, fwd, to_post)?;
    b.connect(IP4_ICMP_ERROR, "out", IP4_LOCAL_OUT)?;
    b.connect(IP6_ICMP_ERROR, "out", IP6_LOCAL_OUT)?;
    // Local: OUTPUT hook, then POSTROUTING.
    let out_next = output.map_or(to_post, |h| (h, h));
    b.connect(IP4_LOCAL_OUT, "ok", out_next.0)?;
    b.connect(IP6_LOCAL_OUT, "ok", out_next.1)?;
    b.connect(IP4_LOCAL_OUT, "local", IP4_LOCAL)?;
    b.connect(IP6_LOCAL_OUT, "local", IP6_LOCAL)?;
    hook_arcs(&mut b, output, to_post)?;
    hook_arcs(&mut b, post, (NEIGHBOUR, IP6_NEIGHBOUR))?;
    b.connect(IP4_FRAGMENT, "ok", NEIGHBOUR)?;
    b.connect(IP4_FRAGMENT, "error", IP4_ICMP_ERROR)?;
    b.connect(NEIGHBOUR, "frag", IP4_FRAGMENT)?;
    b.connect(NEIGHBOUR, "tx", TX)?;
    b.connect(NEIGHBOUR, "gso", GSO)?;
    b.connect(IP6_NEIGHBOUR, "tx", TX)?;
    b.connect(IP6_NEIGHBOUR, "error", IP6_ICMP_ERROR)?;
    b.connect(IP6_NEIGHBOUR, "gso", GSO)?;
    b.connect(GSO, "tx", TX)?;
    for &name in &tx_ports {
        b.connect(NEIGHBOUR, name, name)?;
        b.connect(IP6_NEIGHBOUR, name, name)?;
        b.connect(GSO, name, name)?;
        if opts.host_pairs {
            b.connect(HOST_PUNT, name, name)?;
            b.connect(HOST_INJECT, name, name)?;
        }
    }
    b.build(dispatch)
}
