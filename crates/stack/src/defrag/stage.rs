//! The defragmentation stage, one per family (`ip4-defrag` in [`crate::ip4::defrag`],
//! `ip6-defrag` in [`crate::ip6::defrag`]): between IP input and `ct-in`, in the graph
//! only when connection tracking is; and the same stage for local delivery
//! (`ip4-reassemble`, `ip6-reassemble`), fed only with fragments for this host. A packet that is not a fragment passes at the cost
//! of one look at its header (IPv4: the fragment word; IPv6: the dissector's flag). A
//! fragment goes to the family's [`Store`]; a datagram made whole goes on as a defrag
//! chain ([`super::chain`]); a datagram timed out is dropped, its first fragment, when
//! it was received, answered with time exceeded (code 1) where the family says so
//! ([`Family::answer_timeout`]). Timeouts are looked at on every call and at the end of
//! every poll while the store holds something (the stage declares that it holds
//! packets, so the graph calls [`Stage::flush`] then). With two or more workers a
//! datagram made whole whose connection another worker owns is queued for it instead
//! ([`super::handoff`]); a defrag chain handed over enters here on the owner and passes
//! on whole, as a packet that is not a fragment does. The store is the host's
//! (`Host::defrag4`, `Host::defrag6`): it outlives a graph rebuilt on reload, the host
//! counts what it holds (`held` in the conservation law) and frees it at shutdown.

use netbatch_engine::{Cx, Meta, Out, Pkt, PktList, Reason, Stage};

use super::{Added, Config, Piece, Store, reason};
use crate::host::Host;

netbatch_engine::arcs! {
    /// Packets on to tracking (whole datagrams among them).
    pub OK = "ok";
    /// A timed-out datagram's first fragment, to the ICMP error stage.
    pub ERROR = "error";
}

/// What differs between the families.
pub trait Family: Send + 'static {
    /// The timeout of this family in `cfg`, seconds.
    fn timeout(cfg: &Config) -> u32;

    /// The host's store of this family.
    fn store(host: &mut Host) -> &mut Option<Box<Store>>;

    /// The fragment `d` (from its IP header, as after input) with metadata `m` is:
    /// `Ok(None)` not a fragment, `Ok(Some((piece, header)))` a fragment whose data
    /// starts `header` bytes in, `Err(reason)` a fragment refused as it is.
    fn read(m: &Meta, d: &[u8]) -> Result<Option<(Piece, u32)>, Reason>;

    /// Whether the first fragment `d` (metadata `m`) of a datagram that timed out is
    /// answered; if so, the request is put in `m`.
    fn answer_timeout(host: &Host, m: &mut Meta, d: &[u8]) -> bool;
}

/// The defragmentation stage of family `F`.
#[derive(Debug)]
pub struct Defrag<F> {
    cfg: Config,
    scratch: Vec<Pkt>,
    /// The store held something after the last call (or the stage is new and has not
    /// looked): the end of the poll is to look for timeouts.
    pending: bool,
    /// ICMP errors asked for (timed-out datagrams).
    answered: u64,
    /// Datagrams made whole here and handed to the worker owning their connection.
    handed_off: u64,
    /// The store's counters, fragments held and datagrams in flight after the last call.
    seen: (super::Stats, usize, usize),
    _f: core::marker::PhantomData<F>,
}

/// The stage of family `F` as the graph declares it, with the `[defrag]` settings.
pub(crate) fn make<F: Family>(m: &crate::declare::Make<'_>) -> Box<dyn Stage<Host>> {
    Box::new(Defrag::<F>::new(m.opts.defrag))
}

impl<F: Family> Defrag<F> {
    /// The stage for `cfg` (its store is made on the first call, bounded by the pool).
    pub fn new(cfg: Config) -> Self {
        Self {
            cfg,
            pending: true,
            scratch: Vec::with_capacity(cfg.max_fragments),
            answered: 0,
            handed_off: 0,
            seen: Default::default(),
            _f: core::marker::PhantomData,
        }
    }

    /// Drops or answers every datagram of `store` timed out by `now`.
    fn expire(&mut self, store: &mut Store, host: &Host, cx: &mut Cx<'_>, out: &mut Out) {
        while let Some(first) = store.expire_one(cx.now_ns, &mut self.scratch) {
            let mut frags = self.scratch.drain(..);
            if first && let Some(mut head) = frags.next() {
                let mut v = cx.pool.get_mut(&mut head);
                let (m, d) = v.split();
                if F::answer_timeout(host, m, d) {
                    self.answered += 1;
                    out.push(ERROR, head);
                } else {
                    out.drop(head, reason::TIMEOUT);
                }
            }
            for q in frags {
                out.drop(q, reason::TIMEOUT);
            }
        }
    }
}

impl<F: Family> Stage<Host> for Defrag<F> {
    fn arcs(&self) -> &[&'static str] {
        ARCS
    }

    fn reasons(&self) -> &'static [Reason] {
        reason::ALL
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let (st, held, datagrams) = self.seen;
        vec![
            ("reassembled", st.reassembled),
            ("fragments_reassembled", st.fragments),
            ("timed_out", st.timed_out),
            ("discarded", st.discarded),
            ("timeout_errors", self.answered),
            ("handed_off", self.handed_off),
            ("held", held as u64),
            ("datagrams", datagrams as u64),
        ]
    }

    fn holds(&self) -> bool {
        true
    }

    fn wants_flush(&self) -> bool {
        self.pending
    }

    fn flush(&mut self, host: &mut Host, cx: &mut Cx<'_>, out: &mut Out) {
        let Some(mut store) = F::store(host).take() else {
            self.pending = false;
            return;
        };
        self.expire(&mut store, host, cx, out);
        self.pending = store.held() > 0;
        self.seen = (store.stats, store.held(), store.datagrams());
        *F::store(host) = Some(store);
    }

    fn process(&mut self, host: &mut Host, cx: &mut Cx<'_>, list: &mut PktList, out: &mut Out) {
        let now = cx.now_ns;
        let mut store = F::store(host).take().unwrap_or_else(|| {
            let mut cfg = self.cfg;
            // The receive path keeps seven eighths of the pool whatever fragments do.
            cfg.max_buffers = cfg
                .max_buffers
                .min((cx.pool.config().buffers as usize / 8).max(1));
            Box::new(Store::new(cfg, F::timeout(&cfg)))
        });
        self.expire(&mut store, host, cx, out);
        // The common list holds no fragment: handed on whole, no push per packet.
        if list.iter().all(|p| {
            let v = cx.pool.get(p);
            matches!(F::read(v.meta, v.data()), Ok(None))
        }) {
            out.push_list(OK, list);
        }
        for p in list.drain(..) {
            let v = cx.pool.get(&p);
            let (pc, header) = match F::read(v.meta, v.data()) {
                Ok(None) => {
                    out.push(OK, p);
                    continue;
                }
                Ok(Some(x)) => x,
                Err(r) => {
                    out.drop(p, r);
                    continue;
                }
            };
            match store.add(p, pc, now, &mut self.scratch) {
                Added::Held => {}
                Added::Complete { end } => {
                    // The head's header and the datagram's data.
                    let first_header = self
                        .scratch
                        .first()
                        .and_then(|q| {
                            let w = cx.pool.get(q);
                            F::read(w.meta, w.data()).ok().flatten()
                        })
                        .map_or(header, |(_, h)| h);
                    if let Some(mut head) =
                        super::chain(cx.pool, &mut self.scratch, first_header + end)
                    {
                        // With two or more workers: to the worker owning its connection.
                        if let Some(h) = host.defrag_handoff.as_deref_mut() {
                            let mut v = cx.pool.get_mut(&mut head);
                            if let Some(w) = h.owner_elsewhere(&mut v) {
                                let wire = v.meta.wire_packets();
                                h.push(w, head, wire);
                                self.handed_off += 1;
                                continue;
                            }
                        }
                        out.push(OK, head);
                    }
                }
                Added::Refused(p, r) => out.drop(p, r),
                Added::Discarded(p, r) => {
                    out.drop(p, r);
                    for q in self.scratch.drain(..) {
                        out.drop(q, r);
                    }
                }
            }
        }
        self.pending = store.held() > 0;
        self.seen = (store.stats, store.held(), store.datagrams());
        *F::store(host) = Some(store);
    }
}
