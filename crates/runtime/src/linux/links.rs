//! The link watch: follows the kernel's link events for the ports' interfaces, so that
//! a queue knows, without a system call, whether its link can carry frames.
//!
//! One thread, in the namespace the ports were opened in (the process's), holds an
//! rtnetlink socket joined to `RTNLGRP_LINK` (`netlink::Rtnl`, the mirror's
//! socket code) and posts into each port's shared [`Link`]:
//! - its state (`IFF_UP` and `IFF_RUNNING` from each `RTM_NEWLINK`): a change is
//!   logged (warning when the link goes down, with why: administratively down or no
//!   carrier; info when it comes back) and counted;
//! - its transmit drop counter (`IFLA_STATS64` `tx_dropped`), from a dump of the links
//!   every [`DUMP_EVERY`] (and at the start, and after lost notifications), which the
//!   AF_XDP queues book as `kernel_tx_dropped`.
//!
//! Invariants: the workers only read the posted atomics once per round; the thread
//! never waits on a worker; a lost notification (`ENOBUFS`) is made good by a dump.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use netbatch_ports::link::Link;
use netlink_packet_core::NetlinkPayload;
use netlink_packet_route::RouteNetlinkMessage;
use netlink_packet_route::link::{LinkAttribute, LinkFlags, LinkMessage};
use serde_json::{Value, json};

use super::netlink::{self, RTNLGRP_LINK, RecvError, Rtnl};

/// How often the links are dumped for their counters.
pub const DUMP_EVERY: Duration = Duration::from_millis(100);

/// The running link watch; dropping it stops the thread.
#[derive(Debug)]
pub struct LinkWatch {
    links: Arc<Vec<Arc<Link>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl LinkWatch {
    /// Follows `links` (one per port) from a thread of its own, in the calling thread's
    /// network namespace.
    pub fn start(links: Vec<Arc<Link>>) -> std::io::Result<Self> {
        let mut rtnl = Rtnl::open(&[RTNLGRP_LINK], 1 << 20)?;
        let mut dumper = Rtnl::open(&[], 0)?;
        let links = Arc::new(links);
        let stop = Arc::new(AtomicBool::new(false));
        // The first dump before the workers can book anything: the counters' baseline,
        // and the state as the kernel has it now.
        dump(&mut dumper, &links);
        let (l2, s2) = (links.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("netbatch-links".into())
            .spawn(move || watch(&mut rtnl, &mut dumper, &l2, &s2))?;
        Ok(Self {
            links,
            stop,
            thread: Some(thread),
        })
    }

    /// Each port's link: state, changes, the kernel's transmit drops.
    pub fn stats(&self) -> Value {
        Value::Array(self.links.iter().map(|l| link_json(l)).collect())
    }
}

/// One link's document (the `links` section of the counters).
pub fn link_json(l: &Link) -> Value {
    let (admin, running) = l.state();
    json!({
        "port": l.port(),
        "interface": l.interface(),
        "up": l.up(),
        "admin_up": admin,
        "carrier": running,
        "changes": l.changes(),
        "kernel_tx_dropped": l.tx_dropped(),
    })
}

impl Drop for LinkWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn watch(rtnl: &mut Rtnl, dumper: &mut Rtnl, links: &[Arc<Link>], stop: &AtomicBool) {
    let mut next_dump = Instant::now() + DUMP_EVERY;
    while !stop.load(Ordering::Relaxed) {
        let left = next_dump.saturating_duration_since(Instant::now());
        let ms = left.as_millis().clamp(1, 100) as i32;
        netbatch_ports::sys::wait_readable(&[rtnl.fd()], ms);
        loop {
            match rtnl.recv() {
                Ok(Some(d)) => {
                    for m in netlink::messages(d).into_iter().flatten() {
                        if let NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(l)) =
                            &m.payload
                        {
                            apply(l, links);
                        }
                    }
                }
                Ok(None) => break,
                Err(RecvError::Lost(why)) => {
                    tracing::debug!(target: "netbatch::links", "link events lost ({why}): dumping");
                    next_dump = Instant::now();
                    break;
                }
                Err(RecvError::Io(e)) => {
                    tracing::warn!(target: "netbatch::links", "link events: {e}");
                    std::thread::sleep(DUMP_EVERY);
                    break;
                }
            }
        }
        if Instant::now() >= next_dump {
            dump(dumper, links);
            next_dump = Instant::now() + DUMP_EVERY;
        }
    }
}

/// Dumps the links and applies each (state and counters).
fn dump(dumper: &mut Rtnl, links: &[Arc<Link>]) {
    for _ in 0..3 {
        let r = dumper.dump(
            RouteNetlinkMessage::GetLink(LinkMessage::default()),
            Duration::from_secs(2),
            |m, _| {
                if let RouteNetlinkMessage::NewLink(l) = m {
                    apply(l, links);
                }
            },
        );
        match r {
            Ok(_) => return,
            Err(netlink::DumpError::Interrupted) => continue,
            Err(netlink::DumpError::Failed(e)) => {
                tracing::warn!(target: "netbatch::links", "link dump: {e}");
                return;
            }
        }
    }
}

/// Posts what a link message says of a port's interface.
fn apply(m: &LinkMessage, links: &[Arc<Link>]) {
    for l in links.iter().filter(|l| l.ifindex() == m.header.index) {
        let admin = m.header.flags.contains(LinkFlags::Up);
        let running = m.header.flags.contains(LinkFlags::Running);
        if l.set(admin, running) {
            if admin && running {
                tracing::info!(target: "netbatch::links", "port {}: link {} up (changes: {})", l.port(), l.interface(), l.changes());
            } else {
                let why = if admin {
                    "no carrier"
                } else {
                    "administratively down"
                };
                tracing::warn!(target: "netbatch::links", "port {}: link {} down ({why}): frames for it are dropped as link_down (changes: {})", l.port(), l.interface(), l.changes());
            }
        }
        for a in &m.attributes {
            if let LinkAttribute::Stats64(s) = a {
                l.post_tx_dropped(s.tx_dropped);
            }
        }
    }
}
