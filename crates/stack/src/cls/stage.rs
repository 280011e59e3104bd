//! `cls-ingress`: the ingress classifier stage, between GRO and L2 input (tc's ingress
//! hook). Each packet's [`Key`] is read once; chain 0 is searched, and the matching
//! filter's actions run (see [`super::action`]). A packet no filter matches goes on.
//!
//! Per list, the last key and the filter it matched are kept: a packet of the same flow
//! as the one before it (every field equal) skips the search, as the route hint skips a
//! lookup; actions (policers, counters) still run for every packet. Counters per filter:
//! wire packets, bytes, and when it last matched. A redirected GRO super-packet leaves
//! through `gso`, as the wire packets it was made of; a super-packet is not mirrored
//! (counted `mirror_skipped`).

use std::sync::Arc;

use netbatch_engine::{Cx, Out, PktList, Stage};

use super::action::{Action, Control};
use super::{Classifier, Key};
use crate::assemble::node;
use crate::declare::{Decl, Decode, To};
use crate::dissect;
use crate::host::Host;
use crate::iface::Tags;
use crate::meta::{Field, Fields, flag};

netbatch_engine::reasons! {
    /// Why `cls-ingress` drops a packet.
    pub mod reason {
        DROP = "cls_drop": "dropped by a classifier filter's drop action",
        POLICE = "cls_police": "beyond the rate of a classifier filter's police action",
        REDIRECT_NO_PORT = "cls_redirect_no_port": "classifier redirect to a port that has no interface",
    }
}

netbatch_engine::arcs! {
    /// On to L2 input.
    pub L2 = "l2";
    /// Redirected and mirrored frames, to transmit.
    pub TX = "tx";
    /// Redirected GRO super-packets, to be segmented (the port may not take them whole).
    pub GSO = "gso";
}

/// One filter's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FilterStats {
    /// Wire packets matched.
    pub packets: u64,
    /// Bytes matched.
    pub bytes: u64,
    /// Worker time of the last match (0: never).
    pub last_used_ns: u64,
}

/// The classifier stage.
#[derive(Debug)]
pub struct ClsIngress {
    cls: Arc<Classifier>,
    stats: Vec<FilterStats>,
    /// Mirrors not made (no buffer, or a super-packet).
    mirror_skipped: u64,
}

impl ClsIngress {
    /// A stage over `cls`.
    pub fn new(cls: Arc<Classifier>) -> Self {
        Self {
            stats: vec![FilterStats::default(); cls.filters().len()],
            cls,
            mirror_skipped: 0,
        }
    }

    /// Counters per filter, by index.
    pub fn stats(&self) -> &[FilterStats] {
        &self.stats
    }
}

/// The untagged interface of port `port`, where redirected and mirrored frames leave.
fn port_iface(host: &Host, port: u16) -> Option<u16> {
    host.ifaces
        .iter()
        .position(|i| i.port == port && i.tags == Tags::None)
        .and_then(|i| u16::try_from(i).ok())
}

/// What classification decided for one packet.
enum Verdict {
    Pass,
    Drop(netbatch_engine::Reason),
    Redirect(u16),
}

/// `cls-ingress`, in front of L2 input when the classifier has filters.
pub const DECL: Decl = Decl {
    arcs: &[
        ("l2", To::Node(node::ETH_INPUT)),
        ("tx", To::Node(node::TX)),
        ("gso", To::Node(node::GSO)),
    ],
    reasons: &[reason::ALL],
    decode: Decode::Link,
    reads: Fields::of(&[Field::InPort, Field::L3, Field::L4, Field::Gso]),
    writes: Fields::of(&[
        Field::L3,
        Field::L4,
        Field::Mark,
        Field::OutIf,
        Field::Origin,
    ]),
    present: |o| o.classifier.as_ref().is_some_and(|c| !c.is_empty()),
    ..Decl::new(node::CLS_INGRESS, |m| {
        Box::new(ClsIngress::new(
            m.opts.classifier.clone().unwrap_or_default(),
        ))
    })
};

impl Stage<Host> for ClsIngress {
    fn arcs(&self) -> &[&'static str] {
        ARCS
    }

    fn reasons(&self) -> &'static [netbatch_engine::Reason] {
        reason::ALL
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let mut v = Vec::new();
        for (i, s) in self.stats.iter().enumerate().filter(|(_, s)| s.packets > 0) {
            v.push((
                netbatch_engine::intern(&format!("filter{i}_packets")),
                s.packets,
            ));
            v.push((
                netbatch_engine::intern(&format!("filter{i}_bytes")),
                s.bytes,
            ));
        }
        if self.mirror_skipped > 0 {
            v.push(("mirror_skipped", self.mirror_skipped));
        }
        v
    }

    fn process(&mut self, host: &mut Host, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        let cls = self.cls.clone();
        let filters = cls.filters();
        // Borrowing the pool through its own reference leaves `cx` free for the rest.
        let pool = cx.pool;
        // Chain 0's tables, and the last packet's key and the chain-0 filter it matched.
        let chain0 = cls.chain(0);
        let mut hint: Option<(Key, Option<u32>)> = None;
        for mut p in list.drain(..) {
            let mut v = pool.get_mut(&mut p);
            dissect::frame(&mut v);
            let key = Key::of(v.meta, v.data());
            let first = match hint {
                Some((k, f)) if k == key => f,
                _ => {
                    let f = cls.search(chain0, &key);
                    hint = Some((key, f));
                    f
                }
            };
            let Some(mut fi) = first else {
                out.push(L2, p);
                continue;
            };
            let wire = v.meta.wire_packets();
            let bytes = u64::from(v.meta.total_len);
            let verdict = 'chains: loop {
                // `classify` and `search` give indexes into `filters`, which `stats`
                // matches in length; a filter that is not there passes the packet.
                let Some(f) = filters.get(fi as usize) else {
                    break Verdict::Pass;
                };
                if let Some(s) = self.stats.get_mut(fi as usize) {
                    s.packets += wire;
                    s.bytes += bytes;
                    s.last_used_ns = cx.now_ns;
                }
                for (ai, a) in f.actions.iter().enumerate() {
                    match *a {
                        Action::Pass => break 'chains Verdict::Pass,
                        Action::Drop => break 'chains Verdict::Drop(reason::DROP),
                        Action::Mark(m) => v.meta.mark = m,
                        Action::Redirect(port) => break 'chains Verdict::Redirect(port),
                        Action::Mirror(port) => {
                            let copy = (v.meta.chain.is_none())
                                .then(|| port_iface(host, port))
                                .flatten()
                                .and_then(|ifx| {
                                    let mut c = cx.cache.alloc()?;
                                    let copied = {
                                        let mut cv = pool.get_mut(&mut c);
                                        let ok = cv.set_data(usize::from(v.meta.data), v.data());
                                        cv.meta.out_if = ifx;
                                        cv.meta.flags = flag::ORIGINATED;
                                        ok
                                    };
                                    if !copied {
                                        cx.cache.free(c);
                                        return None;
                                    }
                                    Some(c)
                                });
                            match copy {
                                Some(c) => {
                                    cx.originate(1);
                                    out.push(TX, c);
                                }
                                None => self.mirror_skipped += 1,
                            }
                        }
                        Action::Police(_) => match cls.police(fi, ai as u8, bytes, cx.now_ns) {
                            Control::Pass => break 'chains Verdict::Pass,
                            Control::Drop => break 'chains Verdict::Drop(reason::POLICE),
                            Control::Pipe => {}
                        },
                        Action::Goto(chain) => match cls.classify(chain, &key) {
                            Some(next) => {
                                fi = next;
                                continue 'chains;
                            }
                            None => break 'chains Verdict::Pass,
                        },
                    }
                }
                break Verdict::Pass;
            };
            match verdict {
                Verdict::Pass => out.push(L2, p),
                Verdict::Drop(r) => out.drop(p, r),
                Verdict::Redirect(port) => match port_iface(host, port) {
                    Some(ifx) => {
                        v.meta.out_if = ifx;
                        let super_packet = v.meta.gso_type != crate::meta::gso::NONE;
                        out.push(if super_packet { GSO } else { TX }, p);
                    }
                    None => out.drop(p, reason::REDIRECT_NO_PORT),
                },
            }
        }
    }
}
