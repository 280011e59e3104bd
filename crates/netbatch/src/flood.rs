//! `netbatch flood`: a UDP traffic source on a kernel interface, fast enough to load a
//! router with small packets (iperf3 is not).
//!
//! Frames come from the in-memory generator (one template per flow, the UDP source port
//! telling the flows apart) and leave through a transmit-only queue, 64 at a time: an
//! `af_packet` queue (`sendmmsg`, the default) or an `af_xdp` queue (`--via af_xdp`: the
//! generator writes each frame into a pool buffer that is the UMEM, the TX ring takes it
//! as it is, one `sendto` per 32 frames; no XDP program on the interface). A frame the
//! queue does not take (af_packet: the kernel refused it, the socket's send buffer or a
//! queue behind the device is full; af_xdp: the TX ring is full) is freed at once and
//! counted as not sent; it is never retried. So `sent` is what the kernel took to put on
//! the link and `sent + not_sent` what the flood tried to send: on a veth whose peer
//! queues frames for another CPU, refusals are mostly back-pressure (`EAGAIN`, a full
//! ring), not frames lost on the link.
//!
//! `--via vhost_user` drives vhost-user backends instead of an interface, as a guest's
//! virtio-net driver would ([`netbatch_ports::vhost_user::driver`]): the frames go on
//! the transmit queue of the device at `--socket`, and, with `--sink`, the device at that
//! second socket has its receive queue drained and counted, in the same thread, turn
//! about. One thread for both ends keeps a router between them measured by what it
//! forwards, not by how two busy-polling peers share a CPU. `sent` is then what the
//! backend took off the transmit queue, and `received` what the sink's queue got.

use core::net::Ipv4Addr;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use netbatch_engine::{PktList, Pool, PoolConfig, time};
use netbatch_ports::generator::{FlowOrder, FlowSpec, GenConfig, GenPort, L4};
use netbatch_ports::sys::Interface;
use netbatch_ports::{Port, PortCx, QueueSpec, af_packet, af_xdp};
use netbatch_wire::ethernet::MacAddr;

/// Frames handed to the queue per call.
const BURST: usize = 64;
/// The smallest Ethernet frame, frame check sequence included.
const MIN_FRAME: usize = 64;
/// Bytes of the frame check sequence: counted in `--size`, added by the wire, not written.
const FCS: usize = 4;
/// Ethernet, IPv4 and UDP headers.
const HEADERS: usize = 14 + 20 + 8;
/// UDP source port of the first flow (flow `i` uses `FIRST_SPORT + i`).
const FIRST_SPORT: u16 = 1024;
/// UDP destination port of every flow (discard).
const DPORT: u16 = 9;
/// Paced bursts are at most this far apart.
const PACE_NS: u64 = 100_000;

/// Arguments of `netbatch flood`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The interface to send on (its own MAC is the source address).
    #[arg(long, required_unless_present = "socket")]
    interface: Option<String>,
    /// `--via vhost_user`: the backend socket whose device sends the frames.
    #[arg(long, requires = "via")]
    socket: Option<std::path::PathBuf>,
    /// `--via vhost_user`: a second backend socket whose device's received frames are
    /// counted (a router's other port).
    #[arg(long, requires = "socket")]
    sink: Option<std::path::PathBuf>,
    /// `--via vhost_user`: the Ethernet source address of the frames.
    #[arg(long, default_value = "02:00:00:00:01:01")]
    src_mac: MacAddr,
    /// Ethernet destination: the next hop's MAC, `aa:bb:cc:dd:ee:ff`.
    #[arg(long)]
    dst_mac: MacAddr,
    /// IPv4 source address.
    #[arg(long)]
    src: Ipv4Addr,
    /// IPv4 destination address.
    #[arg(long)]
    dst: Ipv4Addr,
    /// UDP flows (source ports 1024, 1025, ...), sent interleaved, one frame each in turn.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..=64_000))]
    flows: u16,
    /// Ethernet frame size in bytes, frame check sequence included (64: the smallest).
    #[arg(long, default_value_t = 64)]
    size: usize,
    /// How long to send.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Frames per second to offer (0: as fast as possible).
    #[arg(long, default_value_t = 0)]
    rate: u64,
    /// Print the result as JSON on stdout (the summary line goes to stderr).
    #[arg(long)]
    json: bool,
    /// The socket the frames leave through.
    #[arg(long, value_enum, default_value_t = Via::AfPacket)]
    via: Via,
}

/// The kinds of transmit queue a flood can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Via {
    /// A packet socket (`sendmmsg`, qdisc bypassed).
    #[value(name = "af_packet")]
    AfPacket,
    /// An XSK socket's TX ring over the packet pool (copy or zero-copy mode).
    #[value(name = "af_xdp")]
    AfXdp,
    /// The kernel itself: an XDP program run on live frames redirects each to the
    /// interface (`BPF_PROG_TEST_RUN`, as xdp-trafficgen does; UDP checksum 0).
    #[value(name = "xdp")]
    Xdp,
    /// vhost-user backends (`--socket`, `--sink`), driven as a guest's virtio-net driver.
    #[value(name = "vhost_user")]
    VhostUser,
}

/// What one flood did.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Outcome {
    /// Frames the kernel accepted.
    sent: u64,
    /// Frames the queue refused (freed, not retried).
    not_sent: u64,
    /// Seconds from the first burst to the end of the last.
    seconds: f64,
    /// Frames the sink received (`--sink`), counted until it stayed idle after the end.
    received: Option<u64>,
    /// Frames sent before the timed flood to find the path ready (counted in `sent`).
    probes: u64,
}

impl Outcome {
    /// Accepted frames per second.
    fn pps(&self) -> f64 {
        if self.seconds > 0.0 {
            self.sent as f64 / self.seconds
        } else {
            0.0
        }
    }
}

/// The flows: one per UDP source port, every frame `size - FCS` bytes long.
fn flows(a: &Args, src_mac: MacAddr, payload_len: usize) -> Vec<FlowSpec> {
    (0..a.flows)
        .map(|i| FlowSpec {
            src_mac,
            dst_mac: a.dst_mac,
            vlan: None,
            src: a.src.into(),
            dst: a.dst.into(),
            l4: L4::Udp,
            sport: FIRST_SPORT + i,
            dport: DPORT,
            payload_len,
            ttl: 64,
            dont_frag: true,
        })
        .collect()
}

/// Frames per paced burst at `rate`: bursts no more than [`PACE_NS`] apart.
fn paced_burst(rate: u64) -> usize {
    let per_interval = rate.saturating_mul(PACE_NS) / 1_000_000_000;
    usize::try_from(per_interval)
        .unwrap_or(BURST)
        .clamp(1, BURST)
}

/// Runs `netbatch flood`: opens the queue, sends until the time is up, prints the result.
pub(crate) fn main(a: &Args) -> anyhow::Result<()> {
    if !(a.seconds.is_finite() && a.seconds > 0.0) {
        bail!("--seconds must be a positive number of seconds");
    }
    if a.via == Via::VhostUser {
        let out = flood_vhost(a)?;
        report(a, &out, "vhost-user driver, 1024-entry queues, polled");
        return Ok(());
    }
    if a.socket.is_some() {
        bail!("--socket and --sink go with --via vhost_user");
    }
    let Some(ifname) = a.interface.as_deref() else {
        bail!("--interface is needed with --via af_packet, af_xdp or xdp");
    };
    let iface = Interface::lookup("flood", ifname)?;
    let max_frame = iface.mtu as usize + 14 + FCS;
    if a.size < MIN_FRAME || a.size > max_frame {
        bail!(
            "--size {}: a frame on {} is {MIN_FRAME} to {max_frame} bytes (MTU {} plus the \
             Ethernet header and FCS)",
            a.size,
            iface.name,
            iface.mtu
        );
    }
    let pool_cfg = PoolConfig {
        buffers: 4096,
        ..PoolConfig::default()
    };
    let layout = match a.via {
        Via::AfXdp => af_xdp::pool_layout([ifname]).0,
        Via::AfPacket | Via::Xdp | Via::VhostUser => netbatch_engine::Layout::Padded,
    };
    let pool = Pool::with_layout(pool_cfg, layout).context("packet pool")?;
    let room = pool.config().room();
    let payload_len = a.size - FCS - HEADERS;
    let cfg = GenConfig::new(
        flows(a, MacAddr(iface.mac), payload_len),
        FlowOrder::Interleaved,
    );
    let mut source = GenPort::new("flood", 0, &cfg, room)?;
    if a.via == Via::Xdp {
        let out = flood_xdp(a, &iface, &pool, &mut source)?;
        let how = format!(
            "XDP live frames redirected to {} (BPF_PROG_TEST_RUN), {} flows drawn at random",
            iface.name, a.flows
        );
        report(a, &out, &how);
        return Ok(());
    }
    let spec = QueueSpec {
        rx_member: None,
        rx_members: 0,
        worker: 0,
        index: 0,
        name: "flood".into(),
        interface: ifname.to_owned(),
        features: Default::default(),
        room,
    };
    let mut queues = match a.via {
        Via::AfPacket => af_packet::open(&[spec])?,
        Via::AfXdp => af_xdp::open(&[spec], &pool)?,
        Via::Xdp | Via::VhostUser => {
            unreachable!("the XDP and vhost-user sources have no queue (handled above)")
        }
    };
    let Some(port) = queues.first_mut() else {
        bail!("no transmit queue opened on {ifname}");
    };
    let how = port.describe();
    let out = flood_through(a, &pool, &mut source, port.as_mut());
    drop(queues);
    report(a, &out?, &how);
    Ok(())
}

/// Sends through `port`, then gives it back what it was still sending.
fn flood_through(
    a: &Args,
    pool: &Pool,
    source: &mut GenPort,
    port: &mut dyn Port,
) -> anyhow::Result<Outcome> {
    let mut cache = pool.cache();
    let result = flood(a, pool, &mut cache, source, port);
    // Transmitted buffers come back through the completion ring (af_xdp) before the
    // queue goes.
    drain(pool, &mut cache, port);
    cache.flush();
    result
}

/// Prints what a flood did (a line, or JSON with the line on stderr).
fn report(a: &Args, out: &Outcome, how: &str) {
    let cpu = netbatch_ports::sys::cpu_seconds();
    let line = format!(
        "flood: sent {} frames of {} bytes in {:.3} s: {:.0} pps ({} not sent: refused by \
         the kernel, dropped, not retried)",
        out.sent,
        a.size,
        out.seconds,
        out.pps(),
        out.not_sent
    );
    let line = match out.received {
        Some(r) => format!("{line}; the sink received {r}"),
        None => line,
    };
    if a.json {
        eprintln!("{line}");
        let j = serde_json::json!({
            "received": out.received,
            "probes": out.probes,
            "sent": out.sent,
            "seconds": out.seconds,
            "pps": out.pps(),
            "not_sent": out.not_sent,
            // The source's own CPU time over the whole command (start-up included).
            "cpu_user_seconds": cpu.0,
            "cpu_system_seconds": cpu.1,
            "via": match a.via {
                Via::AfPacket => "af_packet",
                Via::AfXdp => "af_xdp",
                Via::Xdp => "xdp",
                Via::VhostUser => "vhost_user",
            },
            "queue": how,
        });
        println!("{j}");
    } else {
        println!("{line}");
    }
}

/// How long a vhost-user flood waits for its first frame to reach the sink.
const PROBE_FOR: Duration = Duration::from_secs(2);

/// How long the sink is drained after the flood: until it has received nothing for
/// this long.
const SINK_IDLE: Duration = Duration::from_millis(100);

/// The flood through vhost-user backends: the generator's frames (one per flow, made
/// once) put on the `--socket` device's transmit queue as it has room, and the `--sink`
/// device's receive queue drained, turn about, until the time is up (paced to
/// `a.rate`); then the sink is drained until idle.
fn flood_vhost(a: &Args) -> anyhow::Result<Outcome> {
    use netbatch_ports::vhost_user::driver::Driver;
    let Some(socket) = a.socket.as_deref() else {
        bail!("--via vhost_user needs --socket (the backend's socket to send on)");
    };
    let max_frame = 1514 + FCS;
    if a.size < MIN_FRAME || a.size > max_frame {
        bail!(
            "--size {}: a frame is {MIN_FRAME} to {max_frame} bytes",
            a.size
        );
    }
    // The frames, one per flow, from the generator.
    let pool = Pool::new(PoolConfig {
        buffers: 1024,
        ..PoolConfig::default()
    })
    .context("packet pool")?;
    let cfg = GenConfig::new(
        flows(a, a.src_mac, a.size - FCS - HEADERS),
        FlowOrder::Interleaved,
    );
    let mut source = GenPort::new("flood", 0, &cfg, pool.config().room())?;
    let mut cache = pool.cache();
    let mut frames = Vec::with_capacity(usize::from(a.flows));
    while frames.len() < usize::from(a.flows) {
        let mut l = PktList::new();
        let mut cx = PortCx {
            pool: &pool,
            cache: &mut cache,
            now_ns: time::mono_ns(),
        };
        if source.rx(&mut cx, &mut l, 1) == 0 {
            bail!("the generator made no frame");
        }
        frames.extend(l.iter().map(|p| netbatch_ports::frame_bytes(&pool, p)));
        cache.free_all(&mut l);
    }
    frames.truncate(usize::from(a.flows));
    let connect = |path: &std::path::Path| {
        Driver::connect(path, 1024, &frames)
            .with_context(|| format!("vhost-user backend at {}", path.display()))
    };
    let mut sink = a.sink.as_deref().map(connect).transpose()?;
    let mut tx = connect(socket)?;
    let (mut received, mut put) = (0u64, 0u64);
    // With a sink, the path is ready when a frame gets through: the backends take their
    // queues into use after the handshake, in their own time. One frame every 10 ms for
    // up to 2 s; the probes are counted as the flood's frames are.
    if let Some(s) = sink.as_mut() {
        let deadline = Instant::now() + PROBE_FOR;
        while received == 0 {
            if Instant::now() > deadline {
                bail!("no frame reached the sink within {PROBE_FOR:?}");
            }
            put += tx.send(1)? as u64;
            std::thread::sleep(Duration::from_millis(10));
            received += s.receive()?.frames;
        }
    }
    let probes = put;
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(a.seconds);
    let mut now = start;
    while now < end {
        let mut want = BURST;
        if a.rate > 0 {
            let due = (now - start).as_nanos() * u128::from(a.rate) / 1_000_000_000;
            want = usize::try_from(due.saturating_sub(u128::from(put - probes)))
                .unwrap_or(BURST)
                .min(BURST);
        }
        put += tx.send(want)? as u64;
        if let Some(s) = sink.as_mut() {
            received += s.receive()?.frames;
        }
        now = Instant::now();
    }
    let seconds = (now - start).as_secs_f64();
    if let Some(s) = sink.as_mut() {
        let mut idle_since = Instant::now();
        while idle_since.elapsed() < SINK_IDLE {
            let got = s.receive()?.frames;
            if got > 0 {
                received += got;
                idle_since = Instant::now();
            }
        }
    }
    tx.send(0)?;
    Ok(Outcome {
        sent: tx.taken,
        not_sent: put - tx.taken,
        seconds,
        received: sink.map(|_| received),
        probes,
    })
}

/// Frames of the first live XDP run (then sized by how long runs take).
const XDP_FIRST_RUN: u64 = 16_384;
/// How long a live XDP run should last. Each run also waits a while in the kernel when
/// it ends (its page pool goes away, ~25 ms on this VM, CPU idle meanwhile): runs this
/// long keep that under a tenth of the time, and the last run is cut to the time left.
const XDP_RUN_NS: u64 = 250_000_000;

/// Sends the generator's first frame, its UDP checksum cleared, as live XDP frames over
/// `a.flows` source ports until the time is up (paced to `a.rate`), in runs of about
/// [`XDP_RUN_NS`].
fn flood_xdp(
    a: &Args,
    iface: &Interface,
    pool: &Pool,
    source: &mut GenPort,
) -> anyhow::Result<Outcome> {
    let mut cache = pool.cache();
    let mut l = PktList::new();
    let mut cx = PortCx {
        pool,
        cache: &mut cache,
        now_ns: time::mono_ns(),
    };
    source.rx(&mut cx, &mut l, 1);
    let Some(first) = l.first() else {
        bail!("the generator made no frame");
    };
    let mut frame = netbatch_ports::frame_bytes(pool, first);
    cache.free_all(&mut l);
    // No UDP checksum (RFC 768 allows it over IPv4): the source changes the port only.
    if let Some(sum) = frame.get_mut(HEADERS - 2..HEADERS) {
        sum.copy_from_slice(&[0, 0]);
    }
    let src = af_xdp::XdpSource::new(iface.index, &frame, FIRST_SPORT, a.flows)
        .map_err(|e| anyhow::anyhow!("XDP source on {}: {e}", iface.name))?;
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(a.seconds);
    let (mut sent, mut now) = (0u64, start);
    // Nanoseconds a frame costs a run, its end's wait included (measured as runs go).
    let mut per_frame: Option<f64> = None;
    while now < end {
        let left = (end - now).as_nanos() as f64;
        let mut n = match per_frame {
            Some(c) => (left.min(XDP_RUN_NS as f64) / c).clamp(1.0, f64::from(u32::MAX)) as u64,
            None => XDP_FIRST_RUN,
        };
        if a.rate > 0 {
            let due = (now - start).as_nanos() * u128::from(a.rate) / 1_000_000_000;
            let allowed = u64::try_from(due.saturating_sub(u128::from(sent))).unwrap_or(u64::MAX);
            if allowed == 0 {
                std::thread::sleep(Duration::from_micros(100));
                now = Instant::now();
                continue;
            }
            n = n.min(allowed);
        }
        let began = Instant::now();
        src.run(n as u32)
            .with_context(|| format!("live XDP run on {}", iface.name))?;
        now = Instant::now();
        sent += n;
        if a.rate == 0 {
            per_frame = Some((now - began).as_nanos() as f64 / n as f64);
        }
    }
    Ok(Outcome {
        sent,
        not_sent: 0,
        seconds: (now - start).as_secs_f64(),
        received: None,
        probes: 0,
    })
}

/// Gives the queue up to 100 ms to hand back what it was still sending (an af_xdp queue
/// returns transmitted buffers on its completion ring, reaped by each `tx` call).
fn drain(pool: &Pool, cache: &mut netbatch_engine::BufCache, port: &mut dyn Port) {
    let deadline = Instant::now() + Duration::from_millis(100);
    let want = pool.config().buffers as usize;
    while pool.free_in_pool() + cache.cached() < want && Instant::now() < deadline {
        let mut cx = PortCx {
            pool,
            cache: &mut *cache,
            now_ns: time::mono_ns(),
        };
        port.tx(&mut cx, &mut PktList::new());
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Sends until the time is up; every buffer taken from `cache` is back in it on return
/// (or, af_xdp, lent to the TX ring until it completes).
fn flood(
    a: &Args,
    pool: &Pool,
    cache: &mut netbatch_engine::BufCache,
    source: &mut GenPort,
    port: &mut dyn Port,
) -> anyhow::Result<Outcome> {
    let burst = if a.rate > 0 {
        paced_burst(a.rate)
    } else {
        BURST
    };
    let mut list = PktList::with_capacity(BURST);
    let (mut sent, mut not_sent) = (0u64, 0u64);
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(a.seconds);
    let mut now = start;
    while now < end {
        let mut want = burst;
        if a.rate > 0 {
            let offered = u128::from(sent + not_sent);
            let due = (now - start).as_nanos() * u128::from(a.rate) / 1_000_000_000;
            let allowed = usize::try_from(due.saturating_sub(offered)).unwrap_or(usize::MAX);
            if allowed < burst {
                // Wait for the whole burst to come due (or the end), sleeping only when
                // that is far enough away for the scheduler to be trusted with it.
                let due_ns = (offered + burst as u128) * 1_000_000_000 / u128::from(a.rate);
                let until = start + Duration::from_nanos(u64::try_from(due_ns).unwrap_or(u64::MAX));
                let wait = until.min(end).saturating_duration_since(now);
                if wait > Duration::from_micros(200) {
                    std::thread::sleep(wait - Duration::from_micros(100));
                } else {
                    std::hint::spin_loop();
                }
                now = Instant::now();
                continue;
            }
            want = allowed.min(BURST);
        }
        let mut cx = PortCx {
            pool,
            cache: &mut *cache,
            now_ns: time::mono_ns(),
        };
        let got = source.rx(&mut cx, &mut list, want);
        if got == 0 {
            bail!("the packet pool ran out of buffers");
        }
        sent += port.tx(&mut cx, &mut list);
        not_sent += list.len() as u64;
        cache.free_all(&mut list);
        if let Some(why) = port.fault() {
            bail!("{why}");
        }
        now = Instant::now();
    }
    Ok(Outcome {
        sent,
        not_sent,
        seconds: (now - start).as_secs_f64(),
        received: None,
        probes: 0,
    })
}

/// Pacing and frame-size arithmetic (sending needs root and an interface: the live
/// benchmark `bench/live-forward.py` exercises it).
#[cfg(test)]
mod tests {
    use super::*;

    /// Paced bursts stay between one frame and a full burst.
    #[test]
    fn paced_bursts_are_at_most_a_full_burst_and_at_least_one_frame() {
        assert_eq!(paced_burst(1), 1);
        assert_eq!(paced_burst(100_000), 10);
        assert_eq!(paced_burst(10_000_000), BURST);
        assert_eq!(paced_burst(u64::MAX), BURST);
    }

    /// `--size` counts the FCS, which is not written.
    #[test]
    fn a_64_byte_frame_carries_18_bytes_of_payload() {
        assert_eq!(MIN_FRAME - FCS - HEADERS, 18);
    }
}
