//! Timer work of a worker, run between polls: neighbour retries, failures and ageing.
//! What it produces waits in `Host::injected` until the worker runs it through the graph.

use netbatch_engine::{BufCache, Pool};

use crate::arp::build_request;
use crate::host::{Entry, Host};

/// Advances the host's timers to `now_ns`.
pub fn run(host: &mut Host, pool: &Pool, cache: &mut BufCache, now_ns: u64) {
    let mut probes = Vec::new();
    let mut failed = Vec::new();
    host.neigh.tick(now_ns, &mut probes, &mut failed);
    for pr in probes {
        let Some(iface) = host.ifaces.get(usize::from(pr.iface)) else {
            continue;
        };
        match build_request(pool, cache, iface, pr.iface, pr.target, pr.unicast) {
            Some(r) => {
                host.stats.arp_requests_out += 1;
                host.injected.push(Entry::Transmit, r);
                host.injected.originated += 1;
            }
            None => host.stats.alloc_failures += 1,
        }
    }
    for mut p in failed.drain(..) {
        crate::ip4::icmp_error::Request::new(crate::ip4::icmp_error::Cause::NeighFailed)
            .put(pool.get_mut(&mut p).meta);
        host.injected.push(Entry::IcmpError, p);
    }
    // Neighbour discovery: solicitations retried or probing stale entries, resolutions
    // given up (what waited is answered with Address Unreachable, RFC 4861 7.2.2).
    let mut probes6 = Vec::new();
    host.neigh6.tick(now_ns, &mut probes6, &mut failed);
    for pr in probes6 {
        host.asking6(pr.iface, pr.target, now_ns);
        let Some(iface) = host.ifaces.get(usize::from(pr.iface)) else {
            continue;
        };
        match crate::nd::build_solicit(pool, cache, iface, pr.iface, pr.target, pr.unicast) {
            Some(r) => {
                host.stats.nd_solicits_out += 1;
                host.injected.push(Entry::Transmit, r);
                host.injected.originated += 1;
            }
            None => host.stats.alloc_failures += 1,
        }
    }
    for mut p in failed {
        crate::ip6::icmp_error::Request::new(crate::ip6::Cause::NeighFailed)
            .put(pool.get_mut(&mut p).meta);
        host.injected.push(Entry::Icmp6Error, p);
    }
}
