//! A traffic source in the kernel: an XDP program run on live frames.
//!
//! `BPF_PROG_TEST_RUN` with `BPF_F_TEST_XDP_LIVE_FRAMES` makes frames from a template in
//! pages of its own (with XDP headroom), runs an XDP program on each and carries out what
//! it returns, as a driver would. The program here gives each frame one of the flows' UDP
//! source ports, drawn at random, and redirects the frame to an interface, whose
//! `ndo_xdp_xmit` hands it on (a veth: straight into its peer's receive ring, as an XDP
//! frame with no socket behind it). All of it runs in the calling thread, in the kernel:
//! no system call per frame, no socket buffer, nothing left for the receiving side to
//! complete; xdp-trafficgen works this way. The UDP checksum of the template must be 0
//! (none), since the program changes the port without updating it.

use std::io;
use std::os::fd::OwnedFd;

use super::bpf;

/// Frames a live run processes per batch (the kernel's default and NAPI's weight).
const BATCH: u32 = 64;

/// A loaded source program and its template frame.
#[derive(Debug)]
pub struct XdpSource {
    prog: OwnedFd,
    frame: Vec<u8>,
}

impl XdpSource {
    /// A source of `frame` (an untagged Ethernet/IPv4/UDP frame without IP options, its
    /// UDP checksum 0) over `flows` UDP source ports from `base` (each frame's drawn at
    /// random), redirected to the
    /// interface `ifindex` of the calling thread's namespace.
    pub fn new(ifindex: u32, frame: &[u8], base: u16, flows: u16) -> Result<Self, String> {
        let at = bpf::UDP_SPORT_AT;
        let plain_udp = frame.len() >= at + 8
            && frame[12..14] == [0x08, 0x00]
            && frame[14] == 0x45
            && frame[23] == 17;
        if !plain_udp {
            return Err("the template must be Ethernet/IPv4 (no options)/UDP".into());
        }
        if frame[at + 6..at + 8] != [0, 0] {
            return Err("the template's UDP checksum must be 0: the source changes ports".into());
        }
        if flows == 0 || u32::from(base) + u32::from(flows) > 65536 {
            return Err(format!("{flows} flows from port {base} do not fit"));
        }
        Ok(Self {
            prog: bpf::load_source(ifindex, base, flows)?,
            frame: frame.to_vec(),
        })
    }

    /// Sends `frames` frames (blocks the calling thread while the kernel does).
    pub fn run(&self, frames: u32) -> io::Result<()> {
        bpf::run_live(&self.prog, &self.frame, frames, BATCH)
    }
}
