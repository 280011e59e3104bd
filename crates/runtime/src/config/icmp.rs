//! `[icmp]`: the ICMP error rate limit, echo replies and redirects (`send_redirects`,
//! Linux's name, for IPv4 and IPv6 alike, on by default as Linux's; `redirect_rate` and
//! `redirect_burst`, their own token bucket per family); nothing in it can be wrong. The
//! host settings are assembled here, with `datapath.forwarding`,
//! `datapath.accept_source_route` and the neighbour tunables.

use netbatch_stack::host::HostParams;
use netbatch_stack::neigh::NeighParams;

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct IcmpFile {
    rate: Option<u64>,
    burst: Option<u64>,
    echo: Option<bool>,
    send_redirects: Option<bool>,
    redirect_rate: Option<u64>,
    redirect_burst: Option<u64>,
}

/// The host settings: `[icmp]`'s (unset keys keep the host's defaults), `[datapath]`'s
/// `forwarding` and `accept_source_route`, and the neighbour tunables.
pub(super) fn host(
    raw: &IcmpFile,
    dp: &super::datapath::Datapath,
    neigh: NeighParams,
) -> HostParams {
    let hd = HostParams::default();
    HostParams {
        forwarding: dp.forwarding,
        accept_source_route: dp.accept_source_route,
        icmp_rate: raw.rate.unwrap_or(hd.icmp_rate),
        icmp_burst: raw.burst.unwrap_or(hd.icmp_burst),
        neigh,
        icmp_echo: raw.echo.unwrap_or(true),
        send_redirects: raw.send_redirects.unwrap_or(hd.send_redirects),
        redirect_rate: raw.redirect_rate.unwrap_or(hd.redirect_rate),
        redirect_burst: raw.redirect_burst.unwrap_or(hd.redirect_burst),
    }
}
