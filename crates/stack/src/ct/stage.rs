//! The conntrack stages: `ct-in` (received packets, before PREROUTING), `ct-out`
//! (packets this host makes, before OUTPUT), `ct-confirm` (after POSTROUTING) and
//! `ct-confirm-local` (after INPUT). See the module above for where and why.
//!
//! Per list: the table's collector passes its share ([`super::Table::collect_paced`]), the previous
//! call's unconfirmed entries whose packets never reached a confirm stage (dropped, or
//! answered with an ICMP error in their buffer) are given back, and a run of packets of
//! one flow reuses the first one's lookup. A super-packet is tracked once, as the one
//! segment of its whole length it stands for, and counted in the wire packets it
//! carries. An established packet whose direction a FORWARD rule offloaded is forwarded
//! from here ([`super::offload`]): it leaves by the `offload` arc to the neighbour stage
//! (IPv4) or by `offload6` to `ip6-neighbour`.

use netbatch_engine::{Cx, Out, PktList, Reason, Stage, Verdict};

use super::{Config, ConnTrack, CtState, Found, Kind, Seen};
use crate::assemble::{GraphOptions, node};
use crate::declare::{Decl, Decode, To};
use crate::dissect::L3;
use crate::host::Host;
use crate::meta::{Field, Fields, flag};

netbatch_engine::reasons! {
    /// Why connection tracking drops a packet.
    pub mod reason {
        TABLE_FULL = "ct_table_full": "new connection refused: the connection table is full of assured connections",
    }
}

netbatch_engine::arcs! {
    /// IPv4 packets, tracked.
    pub ACCEPT = "accept";
    /// IPv6 packets, tracked.
    pub ACCEPT6 = "accept6";
    /// IPv4 packets forwarded by flow offload, to the neighbour stage.
    pub OFFLOAD = "offload";
    /// IPv6 packets forwarded by flow offload, to `ip6-neighbour`.
    pub OFFLOAD6 = "offload6";
}

/// Slots of the table the collector looks at per packet of a call while free entries
/// run low (so that its work follows a flood, in list and per-packet mode alike); else
/// it sweeps by time ([`super::Table::collect_paced`]).
const GC_PER_PACKET: usize = 2;

/// The confirm stages' arcs: the tracking stages' but the offload's.
const CONFIRM_ARCS: &[&str] = &["accept", "accept6"];
const _: () = assert!(ACCEPT.0 == 0 && ACCEPT6.0 == 1);

/// The flag bits the stages write.
const CT_FLAGS: u32 = flag::CT_TRACKED
    | flag::CT_REPLY
    | flag::CT_STATE
    | flag::CT_UNCONFIRMED
    | flag::CT_SNAT
    | flag::CT_DNAT;

/// The NAT status bits a packet's flags carry ([`nat_flags`] back).
#[inline(always)]
pub fn nat_status(f: u32) -> u16 {
    (if f & flag::CT_SNAT != 0 {
        super::status::SRC_NAT
    } else {
        0
    }) | if f & flag::CT_DNAT != 0 {
        super::status::DST_NAT
    } else {
        0
    }
}

/// The NAT flag bits of a connection with status `s`.
#[inline(always)]
pub fn nat_flags(s: u16) -> u32 {
    (if s & super::status::SRC_NAT != 0 {
        flag::CT_SNAT
    } else {
        0
    }) | if s & super::status::DST_NAT != 0 {
        flag::CT_DNAT
    } else {
        0
    }
}

/// Whether the graph tracks connections.
fn present(o: &GraphOptions) -> bool {
    o.conntrack.is_some()
}

fn make_track(m: &crate::declare::Make<'_>) -> Box<dyn Stage<Host>> {
    let mut s = CtStage::new(m.opts.conntrack.clone().unwrap_or_default());
    s.offload = m.opts.offloads();
    Box::new(s)
}

fn make_track_out(m: &crate::declare::Make<'_>) -> Box<dyn Stage<Host>> {
    Box::new(CtStage::new(m.opts.conntrack.clone().unwrap_or_default()))
}

fn make_confirm(_: &crate::declare::Make<'_>) -> Box<dyn Stage<Host>> {
    Box::new(Confirm::default())
}

fn make_confirm_local(_: &crate::declare::Make<'_>) -> Box<dyn Stage<Host>> {
    Box::new(Confirm {
        local: true,
        ..Confirm::default()
    })
}

const TRACK_READS: Fields = Fields::of(&[Field::L3, Field::L4, Field::Gso]);

/// `ct-in`: received packets, after the IP input checks, before PREROUTING.
pub const IN: Decl = Decl {
    arcs: &[
        ("accept", To::Via(node::NAT_PREROUTING, "accept")),
        ("accept6", To::Via(node::NAT_PREROUTING, "accept6")),
        ("offload", To::Node(node::NEIGHBOUR)),
        ("offload6", To::Node(node::IP6_NEIGHBOUR)),
    ],
    reasons: &[reason::ALL],
    decode: Decode::Ip,
    reads: Fields::of(&[
        Field::L3,
        Field::L4,
        Field::Gso,
        Field::InIf,
        Field::Mark,
        Field::L2Class,
    ]),
    writes: Fields::of(&[Field::Ct, Field::OutIf, Field::Adj, Field::Origin]),
    present,
    ..Decl::new(node::CT_IN, make_track)
};

/// `ct-out`: packets this host makes, after routing them, before OUTPUT.
pub const OUT: Decl = Decl {
    arcs: &[
        ("accept", To::Via(node::HOOK_OUTPUT, "accept")),
        ("accept6", To::Via(node::HOOK_OUTPUT, "accept6")),
        // Never taken: what this host sends is not offloaded.
        ("offload", To::Node(node::NEIGHBOUR)),
        ("offload6", To::Node(node::IP6_NEIGHBOUR)),
    ],
    reasons: &[reason::ALL],
    decode: Decode::Ip,
    reads: TRACK_READS,
    writes: Fields::of(&[Field::Ct]),
    present,
    ..Decl::new(node::CT_OUT, make_track_out)
};

/// `ct-confirm`: after POSTROUTING, before the neighbour stages.
pub const CONFIRM: Decl = Decl {
    arcs: &[
        ("accept", To::Node(node::NEIGHBOUR)),
        ("accept6", To::Node(node::IP6_NEIGHBOUR)),
    ],
    decode: Decode::Ip,
    reads: Fields::of(&[Field::Ct, Field::Gso]),
    writes: Fields::of(&[Field::Ct, Field::Gso]),
    present,
    ..Decl::new(node::CT_CONFIRM, make_confirm)
};

/// `ct-confirm-local`: after INPUT, before local delivery.
pub const CONFIRM_LOCAL: Decl = Decl {
    arcs: &[
        ("accept", To::Node(node::IP4_LOCAL)),
        ("accept6", To::Node(node::IP6_LOCAL)),
    ],
    decode: Decode::Ip,
    reads: Fields::of(&[Field::Ct, Field::Gso]),
    writes: Fields::of(&[Field::Ct, Field::Gso]),
    present,
    ..Decl::new(node::CT_CONFIRM_LOCAL, make_confirm_local)
};

/// `ct-in` or `ct-out`.
#[derive(Debug)]
pub struct CtStage {
    cfg: Config,
    /// The new entries this stage allocated in its last call, with their generations.
    pending: Vec<(u32, u32)>,
    /// A FORWARD rule offloads flows ([`super::offload`]): established packets are
    /// looked at for it (`ct-in` only).
    offload: bool,
    /// Not run yet: the stage is part of a new graph, whose rules the offload records
    /// of the previous one do not stand for.
    fresh: bool,
}

impl CtStage {
    /// The stage, making the worker's table with `cfg` if it has none.
    pub fn new(cfg: Config) -> Self {
        Self {
            cfg,
            pending: Vec::with_capacity(netbatch_engine::LIST_MAX),
            offload: false,
            fresh: true,
        }
    }
}

impl Stage<Host> for CtStage {
    fn arcs(&self) -> &[&'static str] {
        ARCS
    }

    fn reasons(&self) -> &'static [Reason] {
        reason::ALL
    }

    fn process(&mut self, st: &mut Host, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        let now = cx.now_ns;
        let fresh = core::mem::take(&mut self.fresh);
        let offload = self.offload;
        let buffers = cx.pool.config().buffers as usize;
        let Host {
            ct,
            routes,
            policy,
            routes6,
            policy6,
            ..
        } = st;
        let ct = &mut **ct.get_or_insert_with(|| Box::new(ConnTrack::new(&self.cfg, buffers)));
        if offload {
            let now = super::offload::Tables {
                routes,
                policy,
                routes6,
                policy6,
            };
            ct.offload.begin_list(fresh, ct.table.max(), now);
        }
        // Every packet of the previous call has left the graph (the dispatch runs a
        // stage's output to its end before the stage runs again): an entry still
        // unconfirmed belonged to a packet that never reached a confirm stage.
        for (idx, generation) in self.pending.drain(..) {
            ct.discard(idx, generation);
        }
        ct.table.collect_paced(now, list.len(), GC_PER_PACKET);
        ct.begin_list();
        let pool = cx.pool;
        let pending = &mut self.pending;
        out.sort(
            list,
            #[inline(always)]
            |p| {
                let buf = p.index();
                let mut v = pool.get_mut(p);
                let six = v.meta.l3_type == L3::Ipv6 as u8;
                let seen = {
                    let (m, d) = v.split();
                    Seen::read(m, d)
                };
                let found = ct.track(&seen, now);
                let mut f = v.meta.flags & !CT_FLAGS;
                let state = |s: CtState| flag::CT_TRACKED | (s as u32) << flag::CT_STATE_SHIFT;
                match found {
                    Found::New(idx) => {
                        f |= state(CtState::New) | flag::CT_UNCONFIRMED;
                        ct.attach(buf, idx);
                        let generation = ct.table.get(idx).map_or(0, |e| e.generation);
                        pending.push((idx, generation));
                    }
                    Found::Known { idx, dir, replied } => {
                        let s = if dir == 1 || replied {
                            CtState::Established
                        } else {
                            CtState::New
                        };
                        f |= state(s) | if dir == 1 { flag::CT_REPLY } else { 0 };
                        f |= ct.attach(buf, idx);
                        if offload && s == CtState::Established {
                            let tcp = match seen.kind {
                                Kind::Tcp(seg) => Some(Some(seg.flags)),
                                Kind::Datagram => Some(None),
                                _ => None,
                            };
                            v.meta.flags = f;
                            if let Some(tcp) = tcp {
                                use super::offload::{Outcome, forward, forward6};
                                let (done, arc) = if six {
                                    (forward6(ct, idx, dir, tcp, &mut v), OFFLOAD6)
                                } else {
                                    (forward(ct, idx, dir, tcp, &mut v), OFFLOAD)
                                };
                                if done == Outcome::Forwarded {
                                    return Verdict::To(arc);
                                }
                            }
                        }
                    }
                    Found::Related { idx, dir } => {
                        f |= state(CtState::Related) | if dir == 1 { flag::CT_REPLY } else { 0 };
                        f |= ct.attach(buf, idx);
                    }
                    Found::Invalid(_) => f |= state(CtState::Invalid),
                    Found::Untracked => {}
                    Found::Refused(_) => {
                        v.meta.flags = f;
                        return Verdict::Drop(reason::TABLE_FULL);
                    }
                }
                v.meta.flags = f;
                Verdict::To(if six { ACCEPT6 } else { ACCEPT })
            },
        );
    }
}

/// Links the new connection of the packet in buffer `buf` (its metadata `m`) when it is
/// unconfirmed (a clash joins it to the entry confirmed first).
#[inline(always)]
fn confirm_one(st: &mut Host, buf: u32, m: &mut netbatch_engine::Meta, now: u64) {
    if m.flags & flag::CT_UNCONFIRMED == 0 {
        return;
    }
    m.flags &= !flag::CT_UNCONFIRMED;
    if let Some(ct) = st.ct.as_deref_mut()
        && let Some(idx) = ct.attached(buf)
    {
        let kept = ct.confirm(idx, now);
        if kept != idx {
            ct.attach(buf, kept);
        }
    }
}

/// `ct-confirm` and `ct-confirm-local`: links a new connection's entry when its packet
/// gets here. `ct-confirm` splits a datagram `ip4-defrag`/`ip6-defrag` made whole back
/// into the fragments it came as ([`crate::defrag::split`]), the last stage of the
/// tracked path before the neighbour stages (which fragment again what does not fit the
/// egress MTU); `ct-confirm-local` hands it on whole, since local delivery takes the
/// datagram reassembled (Linux's `ip_local_deliver`).
#[derive(Debug, Default)]
pub struct Confirm {
    frags: Vec<netbatch_engine::Pkt>,
    /// Before local delivery: defrag chains go on whole.
    local: bool,
}

impl Stage<Host> for Confirm {
    fn arcs(&self) -> &[&'static str] {
        CONFIRM_ARCS
    }

    fn process(&mut self, st: &mut Host, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        let now = cx.now_ns;
        let pool = cx.pool;
        // The common list holds no datagram gathered from fragments: each packet takes
        // one arc, and a list that takes one is handed on whole.
        if !list
            .iter()
            .any(|p| pool.get(p).meta.flags & flag::DEFRAG_CHAIN != 0)
        {
            out.sort(
                list,
                #[inline(always)]
                |p| {
                    let buf = p.index();
                    let v = pool.get_mut(p);
                    confirm_one(st, buf, v.meta, now);
                    Verdict::To(if v.meta.l3_type == L3::Ipv6 as u8 {
                        ACCEPT6
                    } else {
                        ACCEPT
                    })
                },
            );
            return;
        }
        for mut p in list.drain(..) {
            let buf = p.index();
            let v = cx.pool.get_mut(&mut p);
            confirm_one(st, buf, v.meta, now);
            let six = v.meta.l3_type == L3::Ipv6 as u8;
            let arc = if six { ACCEPT6 } else { ACCEPT };
            if v.meta.flags & flag::DEFRAG_CHAIN != 0 && !self.local {
                crate::defrag::split(cx.pool, p, &mut self.frags);
                for q in self.frags.drain(..) {
                    out.push(arc, q);
                }
            } else {
                out.push(arc, p);
            }
        }
    }
}
