//! The `pcap` port's files: reading pcap and pcapng captures as received frames, one
//! record at a time, and writing transmitted frames as pcapng with one interface per port
//! as they are produced.
//!
//! Reading ([`CaptureReader`]) holds one record in memory at a time and accepts what
//! tcpdump and Wireshark accept:
//! - pcap in both byte orders, with microsecond or nanosecond timestamps; pcapng with any
//!   number of sections (each in its own byte order) and interfaces, enhanced, simple and
//!   (obsolete) packet blocks, and each interface's `if_tsresol` (microseconds by
//!   default, per the pcapng specification). Other blocks are skipped unread.
//! - A record whose original length exceeds its captured length (`tcpdump -s`) is
//!   delivered as captured and counted ([`ReadStats::truncated`]).
//! - Ethernet captured with its FCS: the pcap link-type field's FCS bits
//!   (draft-ietf-opsawg-pcap: P bit `0x04000000`, FCS length in 16-bit words in the top
//!   four bits), pcapng's `if_fcslen` and an enhanced packet block's `epb_flags` FCS
//!   length. The FCS is stripped: the frame delivered is what the NIC received without
//!   it.
//! - Only Ethernet (link type 1) is replayed; a capture or interface of another link type
//!   is refused when its first packet is met.
//!
//! Every error names the file, the record (pcap: its 1-based number, as tcpdump and
//! Wireshark number frames; pcapng: the 1-based block number, and for a packet block its
//! packet number too) and the byte offset where that record starts. Records before a
//! damaged one are delivered first, as tshark shows the packets before reporting a
//! damaged or cut-short file; after an error the reader yields nothing more.
//!
//! Writing ([`TxWriter`]) puts frames in time order; frames of one timestamp keep port
//! order, then transmit order. Frames arrive with non-decreasing timestamps, so only one
//! timestamp's frames are held back, and beyond a threshold those wait in an anonymous
//! temporary file beside the output, not in memory.
//!
//! Traced frames ([`write_traced`], for `trace show --pcapng`) are written as given, one
//! interface per port, each frame with its original length and its path through the
//! stages as the packet's comment (pcapng `opt_comment`, which Wireshark shows as
//! `frame.comment`).

use std::borrow::Cow;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use pcap_file::DataLink;
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::pcapng::blocks::enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption};
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};

use crate::Carries;
use crate::mem::TxFrame;

/// What a `pcap` port carries: what the `mem` port it is built on carries.
pub const CARRIES: Carries = crate::mem::CARRIES;

/// The largest captured length accepted for a record: libpcap's and Wireshark's maximum
/// for Ethernet (`MAXIMUM_SNAPLEN`, `WTAP_MAX_PACKET_SIZE_STANDARD`).
pub const MAX_CAPLEN: u32 = 262_144;

/// The largest pcapng block read into memory (section and interface headers, packet
/// blocks with their options); other blocks are skipped whatever their size.
const MAX_BLOCK: u32 = 16 << 20;

/// Link type of Ethernet (`LINKTYPE_ETHERNET`).
const ETHERNET: u32 = 1;

/// A frame read from a capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapturedFrame {
    /// Timestamp, nanoseconds since the epoch.
    pub ts_ns: u64,
    /// The bytes, from the Ethernet header.
    pub bytes: Vec<u8>,
}

/// Why a capture could not be read or written.
#[derive(Debug)]
pub struct PcapError(pub String);

impl core::fmt::Display for PcapError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PcapError {}

fn ts_to_ns(raw: u64, resol: u8) -> u64 {
    if resol & 0x80 == 0 {
        // Base 10: units of 10^-resol s.
        match 9i32 - i32::from(resol) {
            k if k >= 0 => raw.saturating_mul(10u64.saturating_pow(k as u32)),
            k => raw / 10u64.saturating_pow((-k) as u32),
        }
    } else {
        // Base 2: units of 2^-n s.
        let n = u32::from(resol & 0x7f).min(63);
        ((u128::from(raw) * 1_000_000_000) >> n) as u64
    }
}

/// What a reader has delivered so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// Packet records delivered.
    pub records: u64,
    /// Of those, records captured shorter than the frame was (original length above the
    /// captured length, FCS aside): delivered as captured.
    pub truncated: u64,
    /// Of those, records whose FCS (or the captured part of it) was stripped.
    pub fcs_stripped: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Order {
    Little,
    Big,
}

impl Order {
    fn u16(self, b: &[u8]) -> u16 {
        let a = [b[0], b[1]];
        match self {
            Self::Little => u16::from_le_bytes(a),
            Self::Big => u16::from_be_bytes(a),
        }
    }

    fn u32(self, b: &[u8]) -> u32 {
        let a = [b[0], b[1], b[2], b[3]];
        match self {
            Self::Little => u32::from_le_bytes(a),
            Self::Big => u32::from_be_bytes(a),
        }
    }
}

/// A pcapng interface, as its description block declares it.
#[derive(Debug, Clone, Copy)]
struct Iface {
    linktype: u16,
    snaplen: u32,
    tsresol: u8,
    fcs: u32,
}

/// How the file is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    /// Classic pcap: microsecond or nanosecond timestamps, `fcs` bytes at the end of
    /// every frame.
    Pcap { nano: bool, fcs: u32 },
    /// pcapng: blocks, with the interfaces of the current section.
    PcapNg,
}

/// Where an error is: the record being read.
enum At {
    Record(u64),
    Block(u64),
    Packet { block: u64, packet: u64 },
}

/// Reads the frames of a pcap or pcapng capture one record at a time (see the module
/// documentation for what is accepted and how errors are reported). As an iterator, it
/// ends after the first error.
#[derive(Debug)]
pub struct CaptureReader<R = BufReader<File>> {
    src: R,
    name: String,
    /// Bytes consumed from the start of the file.
    offset: u64,
    format: Format,
    /// Byte order of the file (pcap) or of the current section (pcapng).
    order: Order,
    /// pcapng: the current section's interfaces.
    ifaces: Vec<Iface>,
    /// pcapng: blocks started so far (the current one's 1-based number).
    block: u64,
    /// pcapng: the first block's type, read with the file's magic.
    peeked: Option<[u8; 4]>,
    stats: ReadStats,
    /// The last timestamp delivered (a simple packet block has none of its own).
    last_ts: u64,
    done: bool,
    /// Scratch for the pcapng blocks read whole.
    body: Vec<u8>,
}

impl CaptureReader {
    /// Opens `path` and reads its file header.
    pub fn open(path: &Path) -> Result<Self, PcapError> {
        let f = File::open(path).map_err(|e| PcapError(format!("{}: {e}", path.display())))?;
        Self::new(
            BufReader::with_capacity(1 << 16, f),
            &path.display().to_string(),
        )
    }
}

impl<R: Read> CaptureReader<R> {
    /// Reads the file header from `src`; `name` names the file in errors.
    pub fn new(mut src: R, name: &str) -> Result<Self, PcapError> {
        let err = |m: String| PcapError(format!("{name}: {m}"));
        let mut head = [0u8; 24];
        let n = fill(&mut src, &mut head[..4]).map_err(|e| err(e.to_string()))?;
        if n < 4 {
            return Err(err(format!(
                "not a capture: {n} bytes, shorter than any file header"
            )));
        }
        let magic = [head[0], head[1], head[2], head[3]];
        let (format, order, offset, peeked) = match magic {
            // pcapng: the section header block's type; the block is read as the first.
            [0x0a, 0x0d, 0x0d, 0x0a] => (
                Format::PcapNg,
                Order::Little,
                4,
                Some([0x0a, 0x0d, 0x0d, 0x0a]),
            ),
            m => {
                let (order, nano) = match m {
                    [0xd4, 0xc3, 0xb2, 0xa1] => (Order::Little, false),
                    [0x4d, 0x3c, 0xb2, 0xa1] => (Order::Little, true),
                    [0xa1, 0xb2, 0xc3, 0xd4] => (Order::Big, false),
                    [0xa1, 0xb2, 0x3c, 0x4d] => (Order::Big, true),
                    _ => {
                        return Err(err(format!(
                            "magic number {:02x}{:02x}{:02x}{:02x} is neither pcap's nor pcapng's",
                            m[0], m[1], m[2], m[3]
                        )));
                    }
                };
                let n = fill(&mut src, &mut head[4..]).map_err(|e| err(e.to_string()))?;
                if n < 20 {
                    return Err(err(format!(
                        "the file ends inside the pcap file header (needs 24 bytes, has {})",
                        4 + n
                    )));
                }
                let field = order.u32(&head[20..]);
                // draft-ietf-opsawg-pcap: |FCS len (4)|R|P|Reserved3 (10)|link type (16)|,
                // from the most significant bit; the FCS length counts 16-bit words.
                if field & 0x03ff_0000 != 0 {
                    return Err(err(format!(
                        "link-type field {field:#010x} has reserved bits set"
                    )));
                }
                if field & 0xffff != ETHERNET {
                    return Err(err(format!(
                        "link type {} is not Ethernet (1)",
                        field & 0xffff
                    )));
                }
                let fcs = if field & 0x0400_0000 != 0 {
                    (field >> 28) * 2
                } else {
                    0
                };
                (Format::Pcap { nano, fcs }, order, 24, None)
            }
        };
        Ok(Self {
            src,
            name: name.into(),
            offset,
            format,
            order,
            ifaces: Vec::new(),
            block: 0,
            peeked,
            stats: ReadStats::default(),
            last_ts: 0,
            done: false,
            body: Vec::new(),
        })
    }

    /// What has been delivered so far.
    pub fn stats(&self) -> ReadStats {
        self.stats
    }

    /// The next frame, `None` at the end of the file.
    pub fn next_frame(&mut self) -> Result<Option<CapturedFrame>, PcapError> {
        if self.done {
            return Ok(None);
        }
        let r = match self.format {
            Format::Pcap { nano, fcs } => self.pcap_record(nano, fcs),
            Format::PcapNg => self.pcapng_packet(),
        };
        if !matches!(r, Ok(Some(_))) {
            self.done = true;
        }
        r
    }

    fn error(&self, at: &At, start: u64, msg: impl core::fmt::Display) -> PcapError {
        let at = match at {
            At::Record(n) => format!("record {n}"),
            At::Block(n) => format!("block {n}"),
            At::Packet { block, packet } => format!("block {block} (packet {packet})"),
        };
        PcapError(format!(
            "{}: {at} at offset {start} ({start:#x}): {msg}",
            self.name
        ))
    }

    /// A record's captured length, refused above [`MAX_CAPLEN`].
    fn caplen_ok(&self, at: &At, start: u64, caplen: u32) -> Result<(), PcapError> {
        if caplen > MAX_CAPLEN {
            return Err(self.error(
                at,
                start,
                format!("captured length {caplen} exceeds the maximum {MAX_CAPLEN}"),
            ));
        }
        Ok(())
    }

    /// A record's `caplen` captured bytes (checked against [`MAX_CAPLEN`]); a file that
    /// ends before them is an error whose message `cut` writes from the bytes it had.
    fn captured(
        &mut self,
        at: &At,
        start: u64,
        caplen: u32,
        cut: impl FnOnce(&Self, u32) -> String,
    ) -> Result<Vec<u8>, PcapError> {
        self.caplen_ok(at, start, caplen)?;
        let mut bytes = Vec::new();
        let got = self.take(caplen, &mut bytes)?;
        if got < caplen {
            return Err(self.error(at, start, cut(self, got)));
        }
        Ok(bytes)
    }

    /// Reads `n` bytes into `out` (cleared first); returns how many the file had.
    fn take(&mut self, n: u32, out: &mut Vec<u8>) -> Result<u32, PcapError> {
        out.clear();
        out.reserve(n as usize);
        let got = (&mut self.src)
            .take(u64::from(n))
            .read_to_end(out)
            .map_err(|e| PcapError(format!("{}: {e}", self.name)))?;
        self.offset += got as u64;
        Ok(got as u32)
    }

    /// Skips `n` bytes; returns how many the file had.
    fn skip(&mut self, n: u64) -> Result<u64, PcapError> {
        let got = std::io::copy(&mut (&mut self.src).take(n), &mut std::io::sink())
            .map_err(|e| PcapError(format!("{}: {e}", self.name)))?;
        self.offset += got;
        Ok(got)
    }

    /// Reads exactly `buf.len()` bytes, or fails naming the record that needed them.
    fn exact(&mut self, buf: &mut [u8], at: &At, start: u64, what: &str) -> Result<(), PcapError> {
        let n = fill(&mut self.src, buf).map_err(|e| PcapError(format!("{}: {e}", self.name)))?;
        self.offset += n as u64;
        if n < buf.len() {
            return Err(self.error(
                at,
                start,
                format!(
                    "the file ends inside the {what} (needs {} bytes, has {n})",
                    buf.len()
                ),
            ));
        }
        Ok(())
    }

    /// Turns a record's captured bytes into a frame: strips the FCS, counts truncation.
    fn deliver(
        &mut self,
        ts_ns: u64,
        mut bytes: Vec<u8>,
        orig_len: u32,
        fcs: u32,
    ) -> CapturedFrame {
        let caplen = bytes.len() as u32;
        // Some writers record a captured length above the original one: what was
        // captured is what the wire carried.
        let wire = orig_len.max(caplen).saturating_sub(fcs);
        if caplen > wire {
            bytes.truncate(wire as usize);
            self.stats.fcs_stripped += 1;
        }
        if (bytes.len() as u32) < wire {
            self.stats.truncated += 1;
        }
        self.stats.records += 1;
        self.last_ts = ts_ns;
        CapturedFrame { ts_ns, bytes }
    }

    fn pcap_record(&mut self, nano: bool, fcs: u32) -> Result<Option<CapturedFrame>, PcapError> {
        let (start, order) = (self.offset, self.order);
        let at = At::Record(self.stats.records + 1);
        let mut h = [0u8; 16];
        let n =
            fill(&mut self.src, &mut h).map_err(|e| PcapError(format!("{}: {e}", self.name)))?;
        self.offset += n as u64;
        if n == 0 {
            return Ok(None);
        }
        if n < h.len() {
            return Err(self.error(
                &at,
                start,
                format!("the file ends inside the record header (needs 16 bytes, has {n})"),
            ));
        }
        let (sec, frac) = (order.u32(&h[0..]), order.u32(&h[4..]));
        let (caplen, orig_len) = (order.u32(&h[8..]), order.u32(&h[12..]));
        let bytes = self.captured(&at, start, caplen, |_, got| {
            format!("the file ends inside the record's data (needs {caplen} bytes, has {got})")
        })?;
        let ts = u64::from(sec) * 1_000_000_000 + u64::from(frac) * if nano { 1 } else { 1000 };
        Ok(Some(self.deliver(ts, bytes, orig_len, fcs)))
    }

    fn pcapng_packet(&mut self) -> Result<Option<CapturedFrame>, PcapError> {
        loop {
            self.block += 1;
            let block = self.block;
            let mut h = [0u8; 8];
            let (start, n) = match self.peeked.take() {
                Some(t) => {
                    h[..4].copy_from_slice(&t);
                    let n = fill(&mut self.src, &mut h[4..])
                        .map_err(|e| PcapError(format!("{}: {e}", self.name)))?;
                    self.offset += n as u64;
                    (self.offset - 4 - n as u64, 4 + n)
                }
                None => {
                    let start = self.offset;
                    let n = fill(&mut self.src, &mut h)
                        .map_err(|e| PcapError(format!("{}: {e}", self.name)))?;
                    self.offset += n as u64;
                    (start, n)
                }
            };
            if n == 0 {
                return Ok(None);
            }
            let ty = self.order.u32(&h);
            let at = if matches!(ty, 2 | 3 | 6) {
                At::Packet {
                    block,
                    packet: self.stats.records + 1,
                }
            } else {
                At::Block(block)
            };
            if n < h.len() {
                return Err(self.error(
                    &at,
                    start,
                    format!("the file ends inside the block header (needs 8 bytes, has {n})"),
                ));
            }
            if ty == 0x0a0d_0d0a {
                // A section header: its byte-order magic says how to read it and what
                // follows; the interfaces of the previous section are gone.
                let mut bom = [0u8; 4];
                self.exact(&mut bom, &at, start, "section header")?;
                self.order = match bom {
                    [0x4d, 0x3c, 0x2b, 0x1a] => Order::Little,
                    [0x1a, 0x2b, 0x3c, 0x4d] => Order::Big,
                    _ => {
                        return Err(self.error(
                            &at,
                            start,
                            "section header without the byte-order magic 0x1a2b3c4d",
                        ));
                    }
                };
                self.ifaces.clear();
            }
            let order = self.order;
            let len = order.u32(&h[4..]);
            let min = if ty == 0x0a0d_0d0a { 28 } else { 12 };
            if !len.is_multiple_of(4) || len < min {
                return Err(self.error(
                    &at,
                    start,
                    format!("block length {len} is not a multiple of 4 of at least {min}"),
                ));
            }
            let done = self.offset - start;
            let frame = match ty {
                0x0a0d_0d0a => {
                    // Version and options are not needed.
                    self.skip_body(&at, start, len)?;
                    None
                }
                1 => {
                    let body = self.read_body(&at, start, len)?;
                    let iface = self.interface(&at, start, &body, order)?;
                    self.body = body;
                    self.ifaces.push(iface);
                    None
                }
                2 | 6 => {
                    let body = self.read_body(&at, start, len)?;
                    let f = self.packet_block(&at, start, ty, &body, order)?;
                    self.body = body;
                    Some(f)
                }
                3 => Some(self.simple_packet(&at, start, len, order)?),
                _ => {
                    let want = u64::from(len) - done - 4;
                    let got = self.skip(want)?;
                    if got < want {
                        return Err(self.error(
                            &at,
                            start,
                            format!(
                                "the file ends inside the block (needs {len} bytes, has {})",
                                done + got
                            ),
                        ));
                    }
                    None
                }
            };
            let mut t = [0u8; 4];
            self.exact(&mut t, &at, start, "block's trailing length")?;
            let trail = order.u32(&t);
            if trail != len {
                return Err(self.error(
                    &at,
                    start,
                    format!("trailing block length {trail} differs from the leading {len}"),
                ));
            }
            if let Some(f) = frame {
                return Ok(Some(f));
            }
        }
    }

    /// Skips the rest of a block's body (up to its trailing length).
    fn skip_body(&mut self, at: &At, start: u64, len: u32) -> Result<(), PcapError> {
        let want = start + u64::from(len) - 4 - self.offset;
        let got = self.skip(want)?;
        if got < want {
            return Err(self.error(
                at,
                start,
                format!(
                    "the file ends inside the block (needs {len} bytes, has {})",
                    self.offset - start
                ),
            ));
        }
        Ok(())
    }

    /// Reads the rest of a block's body (up to its trailing length), at most [`MAX_BLOCK`].
    fn read_body(&mut self, at: &At, start: u64, len: u32) -> Result<Vec<u8>, PcapError> {
        if len > MAX_BLOCK {
            return Err(self.error(
                at,
                start,
                format!("block length {len} exceeds the maximum {MAX_BLOCK}"),
            ));
        }
        let want = (start + u64::from(len) - 4 - self.offset) as u32;
        let mut body = core::mem::take(&mut self.body);
        let got = self.take(want, &mut body)?;
        if got < want {
            return Err(self.error(
                at,
                start,
                format!(
                    "the file ends inside the block (needs {len} bytes, has {})",
                    self.offset - start
                ),
            ));
        }
        Ok(body)
    }

    /// An interface description block's body.
    fn interface(
        &self,
        at: &At,
        start: u64,
        body: &[u8],
        order: Order,
    ) -> Result<Iface, PcapError> {
        if body.len() < 8 {
            return Err(self.error(at, start, "interface description shorter than 8 bytes"));
        }
        let mut iface = Iface {
            linktype: order.u16(body),
            snaplen: order.u32(&body[4..]),
            tsresol: 6,
            fcs: 0,
        };
        for (code, v) in self.options(at, start, &body[8..], order)? {
            match (code, v) {
                (9, &[r, ..]) => iface.tsresol = r,
                (13, &[n, ..]) => iface.fcs = u32::from(n),
                _ => {}
            }
        }
        Ok(iface)
    }

    /// The options of a block: (code, value) until `opt_endofopt` or the body's end.
    fn options<'b>(
        &self,
        at: &At,
        start: u64,
        mut b: &'b [u8],
        order: Order,
    ) -> Result<Vec<(u16, &'b [u8])>, PcapError> {
        let mut out = Vec::new();
        while b.len() >= 4 {
            let (code, len) = (order.u16(b), usize::from(order.u16(&b[2..])));
            if code == 0 {
                break;
            }
            let padded = len.next_multiple_of(4);
            if b.len() - 4 < padded {
                return Err(self.error(
                    at,
                    start,
                    format!("option {code} of {len} bytes runs past the block"),
                ));
            }
            out.push((code, &b[4..4 + len]));
            b = &b[4 + padded..];
        }
        Ok(out)
    }

    fn iface(&self, at: &At, start: u64, id: u32) -> Result<Iface, PcapError> {
        let ifaces = &self.ifaces;
        let Some(&i) = ifaces.get(id as usize) else {
            return Err(self.error(
                at,
                start,
                format!(
                    "packet of interface {id}, but the section declares {} interface(s)",
                    ifaces.len()
                ),
            ));
        };
        if u32::from(i.linktype) != ETHERNET {
            return Err(self.error(
                at,
                start,
                format!(
                    "interface {id} has link type {}, not Ethernet (1)",
                    i.linktype
                ),
            ));
        }
        Ok(i)
    }

    /// An enhanced (6) or obsolete (2) packet block's body.
    fn packet_block(
        &mut self,
        at: &At,
        start: u64,
        ty: u32,
        body: &[u8],
        order: Order,
    ) -> Result<CapturedFrame, PcapError> {
        if body.len() < 20 {
            return Err(self.error(at, start, "packet block shorter than its 20-byte header"));
        }
        let id = if ty == 6 {
            order.u32(body)
        } else {
            u32::from(order.u16(body))
        };
        let raw = (u64::from(order.u32(&body[4..])) << 32) | u64::from(order.u32(&body[8..]));
        let (caplen, orig_len) = (order.u32(&body[12..]), order.u32(&body[16..]));
        self.caplen_ok(at, start, caplen)?;
        let padded = (caplen as usize).next_multiple_of(4);
        if body.len() - 20 < padded {
            return Err(self.error(
                at,
                start,
                format!(
                    "captured length {caplen} does not fit in a block of {} bytes",
                    body.len() + 12
                ),
            ));
        }
        let iface = self.iface(at, start, id)?;
        // epb_flags / pack_flags bits 5-8: this packet's FCS length in bytes, over the
        // interface's.
        let mut fcs = iface.fcs;
        for (code, v) in self.options(at, start, &body[20 + padded..], order)? {
            if code == 2 && v.len() == 4 {
                let n = (order.u32(v) >> 5) & 0xf;
                if n != 0 {
                    fcs = n;
                }
            }
        }
        let bytes = body[20..20 + caplen as usize].to_vec();
        Ok(self.deliver(ts_to_ns(raw, iface.tsresol), bytes, orig_len, fcs))
    }

    /// A simple packet block: interface 0, no timestamp (the previous frame's is kept).
    fn simple_packet(
        &mut self,
        at: &At,
        start: u64,
        len: u32,
        order: Order,
    ) -> Result<CapturedFrame, PcapError> {
        let mut o = [0u8; 4];
        self.exact(&mut o, at, start, "simple packet block")?;
        let orig_len = order.u32(&o);
        let iface = self.iface(at, start, 0)?;
        let Some(room) = len.checked_sub(16) else {
            return Err(self.error(
                at,
                start,
                format!("simple packet block of {len} bytes, below the 16 its header takes"),
            ));
        };
        let mut caplen = orig_len.min(room);
        if iface.snaplen != 0 {
            caplen = caplen.min(iface.snaplen);
        }
        let bytes = self.captured(at, start, caplen, |r, _| {
            format!(
                "the file ends inside the block (needs {len} bytes, has {})",
                r.offset - start
            )
        })?;
        self.skip_body(at, start, len)?;
        Ok(self.deliver(self.last_ts, bytes, orig_len, iface.fcs))
    }
}

impl<R: Read> Iterator for CaptureReader<R> {
    type Item = Result<CapturedFrame, PcapError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_frame().transpose()
    }
}

/// Reads until `buf` is full or the source ends; returns the bytes read.
fn fill(src: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match src.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Reads every frame of a pcap or pcapng file, in file order (the whole file in memory:
/// for tests and small captures; [`CaptureReader`] streams).
pub fn read_frames(path: &Path) -> Result<Vec<CapturedFrame>, PcapError> {
    CaptureReader::open(path)?.collect()
}

/// One port's share of the frames held back because later frames may share their
/// timestamp.
#[derive(Debug, Default)]
struct Held {
    frames: Vec<Vec<u8>>,
    /// Earlier frames of the same timestamp, moved out of memory: length (u32, little
    /// endian) then bytes, each.
    spilled: Option<BufWriter<File>>,
}

/// Writes transmitted frames as pcapng while they are produced: one interface per port
/// (named after it, nanosecond timestamps), frames in time order, ties in port order then
/// transmit order. Frames must come with non-decreasing timestamps; those of the latest
/// timestamp are held until a later one arrives (or [`TxWriter::finish`]), in memory up to
/// a threshold and beyond it in anonymous temporary files in the output's directory.
pub struct TxWriter {
    w: PcapNgWriter<BufWriter<File>>,
    name: String,
    dir: PathBuf,
    ts: Option<u64>,
    held: Vec<Held>,
    held_bytes: usize,
    spill_after: usize,
    written: u64,
    scratch: Vec<u8>,
}

impl core::fmt::Debug for TxWriter {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TxWriter")
            .field("name", &self.name)
            .field("written", &self.written)
            .finish_non_exhaustive()
    }
}

impl TxWriter {
    /// Creates `path` with one interface per name in `ports`.
    pub fn create(path: &Path, ports: &[String]) -> Result<Self, PcapError> {
        let name = path.display().to_string();
        let err = |e: &dyn core::fmt::Display| PcapError(format!("{name}: {e}"));
        let w = create_pcapng(path, ports).map_err(|e| err(&e))?;
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        Ok(Self {
            w,
            name,
            dir,
            ts: None,
            held: ports.iter().map(|_| Held::default()).collect(),
            held_bytes: 0,
            spill_after: 8 << 20,
            written: 0,
            scratch: Vec::new(),
        })
    }

    /// Holds at most `bytes` of frames in memory (the rest go to temporary files).
    pub fn spill_after(mut self, bytes: usize) -> Self {
        self.spill_after = bytes;
        self
    }

    fn err(&self, e: &dyn core::fmt::Display) -> PcapError {
        PcapError(format!("{}: {e}", self.name))
    }

    /// Adds frames transmitted on port `port` (an index into the names given), in
    /// transmit order.
    pub fn add(&mut self, port: usize, frames: Vec<TxFrame>) -> Result<(), PcapError> {
        if port >= self.held.len() {
            return Err(self.err(&format!("no interface {port}")));
        }
        for f in frames {
            match self.ts {
                Some(t) if f.ts_ns < t => {
                    return Err(self.err(&format!(
                        "frame at {} ns after one at {t} ns: frames must come in time order",
                        f.ts_ns
                    )));
                }
                Some(t) if f.ts_ns > t => self.flush()?,
                _ => {}
            }
            self.ts = Some(f.ts_ns);
            self.held_bytes += f.bytes.len();
            self.held[port].frames.push(f.bytes);
            if self.held_bytes > self.spill_after {
                self.spill()?;
            }
        }
        Ok(())
    }

    /// Moves the frames held in memory to the temporary files.
    fn spill(&mut self) -> Result<(), PcapError> {
        for i in 0..self.held.len() {
            if self.held[i].frames.is_empty() {
                continue;
            }
            if self.held[i].spilled.is_none() {
                let f = tempfile::tempfile_in(&self.dir).map_err(|e| {
                    self.err(&format!("temporary file in {}: {e}", self.dir.display()))
                })?;
                self.held[i].spilled = Some(BufWriter::with_capacity(1 << 16, f));
            }
            let h = &mut self.held[i];
            let Some(out) = h.spilled.as_mut() else {
                continue;
            };
            let r: std::io::Result<()> = h.frames.drain(..).try_for_each(|b| {
                out.write_all(&(b.len() as u32).to_le_bytes())?;
                out.write_all(&b)
            });
            r.map_err(|e| self.err(&e))?;
        }
        self.held_bytes = 0;
        Ok(())
    }

    fn write_one(&mut self, port: usize, ts: u64, bytes: &[u8]) -> Result<(), PcapError> {
        let epb = EnhancedPacketBlock {
            interface_id: port as u32,
            timestamp: Duration::from_nanos(ts),
            original_len: bytes.len() as u32,
            data: Cow::Borrowed(bytes),
            options: vec![],
        };
        self.w
            .write_pcapng_block(epb)
            .map_err(|e| PcapError(format!("{}: {e}", self.name)))?;
        self.written += 1;
        Ok(())
    }

    /// Writes the frames held (of one timestamp): port by port, each in transmit order.
    fn flush(&mut self) -> Result<(), PcapError> {
        let Some(ts) = self.ts else {
            return Ok(());
        };
        for i in 0..self.held.len() {
            if let Some(mut out) = self.held[i].spilled.take() {
                out.flush().map_err(|e| self.err(&e))?;
                let file = out.get_mut();
                file.seek(SeekFrom::Start(0)).map_err(|e| self.err(&e))?;
                let mut r = BufReader::with_capacity(1 << 16, &mut *file);
                let mut scratch = core::mem::take(&mut self.scratch);
                loop {
                    let mut len = [0u8; 4];
                    match fill(&mut r, &mut len).map_err(|e| self.err(&e))? {
                        0 => break,
                        4 => {}
                        _ => return Err(self.err(&"temporary file cut short")),
                    }
                    scratch.resize(u32::from_le_bytes(len) as usize, 0);
                    r.read_exact(&mut scratch).map_err(|e| self.err(&e))?;
                    self.write_one(i, ts, &scratch)?;
                }
                self.scratch = scratch;
                drop(r);
                file.set_len(0).map_err(|e| self.err(&e))?;
                file.seek(SeekFrom::Start(0)).map_err(|e| self.err(&e))?;
                self.held[i].spilled = Some(out);
            }
            let frames = core::mem::take(&mut self.held[i].frames);
            for b in &frames {
                self.write_one(i, ts, b)?;
            }
            // Keep the allocation for the next timestamp's frames.
            let mut frames = frames;
            frames.clear();
            self.held[i].frames = frames;
        }
        self.held_bytes = 0;
        Ok(())
    }

    /// Writes what is held and flushes the file; returns the frames written.
    pub fn finish(mut self) -> Result<u64, PcapError> {
        self.flush()?;
        self.w.get_mut().flush().map_err(|e| self.err(&e))?;
        Ok(self.written)
    }
}

/// Creates a pcapng file at `path` with one Ethernet interface per name in `ports`
/// (nanosecond timestamps).
fn create_pcapng(
    path: &Path,
    ports: &[String],
) -> Result<PcapNgWriter<BufWriter<File>>, Box<dyn std::error::Error>> {
    let f = BufWriter::with_capacity(1 << 16, File::create(path)?);
    let mut w = PcapNgWriter::new(f)?;
    for p in ports {
        let idb = InterfaceDescriptionBlock {
            linktype: DataLink::ETHERNET,
            snaplen: 0,
            options: vec![
                InterfaceDescriptionOption::IfName(Cow::Owned(p.clone())),
                InterfaceDescriptionOption::IfTsResol(9),
            ],
        };
        w.write_pcapng_block(idb)?;
    }
    Ok(w)
}

/// A traced frame as received, with the text of its path through the stages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracedFrame {
    /// The port it arrived on (an index into the names given to [`write_traced`]).
    pub port: u16,
    /// When, nanoseconds since the epoch.
    pub ts_ns: u64,
    /// The bytes kept (from the Ethernet header; possibly cut to a snap length).
    pub data: Vec<u8>,
    /// Its length on the wire (at least `data.len()`).
    pub orig_len: u32,
    /// The packet's comment (`opt_comment`): its path; none when empty.
    pub comment: String,
}

/// Writes traced frames as pcapng, in the order given: one interface per port name
/// (nanosecond timestamps), each frame an enhanced packet block with its original
/// length and its comment. Returns the frames written.
pub fn write_traced(
    path: &Path,
    ports: &[String],
    frames: &[TracedFrame],
) -> Result<u64, PcapError> {
    let err = |e: &dyn core::fmt::Display| PcapError(format!("{}: {e}", path.display()));
    if let Some((i, f)) = frames
        .iter()
        .enumerate()
        .find(|(_, f)| usize::from(f.port) >= ports.len())
    {
        return Err(err(&format!(
            "frame {} is from port {}, but {} port name(s) were given",
            i + 1,
            f.port,
            ports.len()
        )));
    }
    let mut w = create_pcapng(path, ports).map_err(|e| err(&e))?;
    for f in frames {
        let options = if f.comment.is_empty() {
            vec![]
        } else {
            vec![EnhancedPacketOption::Comment(Cow::Borrowed(&f.comment))]
        };
        let epb = EnhancedPacketBlock {
            interface_id: u32::from(f.port),
            timestamp: Duration::from_nanos(f.ts_ns),
            original_len: f.orig_len.max(f.data.len() as u32),
            data: Cow::Borrowed(&f.data),
            options,
        };
        w.write_pcapng_block(epb).map_err(|e| err(&e))?;
    }
    w.get_mut().flush().map_err(|e| err(&e))?;
    Ok(frames.len() as u64)
}

/// Writes frames transmitted on several ports as pcapng: one interface per port (named
/// after it), frames in time order (ties keep port order, then transmit order).
pub fn write_pcapng(path: &Path, ports: &[(String, Vec<TxFrame>)]) -> Result<(), PcapError> {
    let names: Vec<String> = ports.iter().map(|(n, _)| n.clone()).collect();
    let mut w = TxWriter::create(path, &names)?;
    let mut all: Vec<(u64, usize, usize)> = Vec::new();
    for (pi, (_, frames)) in ports.iter().enumerate() {
        for (fi, f) in frames.iter().enumerate() {
            all.push((f.ts_ns, pi, fi));
        }
    }
    all.sort();
    for (_, pi, fi) in all {
        w.add(pi, vec![ports[pi].1[fi].clone()])?;
    }
    w.finish()?;
    Ok(())
}

/// Writes frames as a classic pcap file (nanosecond timestamps), for building test inputs.
pub fn write_pcap(path: &Path, frames: &[CapturedFrame]) -> Result<(), PcapError> {
    use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
    let err = |e: &dyn core::fmt::Display| PcapError(format!("{}: {e}", path.display()));
    let f = BufWriter::new(File::create(path).map_err(|e| err(&e))?);
    let header = PcapHeader {
        datalink: DataLink::ETHERNET,
        ts_resolution: pcap_file::TsResolution::NanoSecond,
        ..PcapHeader::default()
    };
    let mut w = PcapWriter::with_header(f, header).map_err(|e| err(&e))?;
    for fr in frames {
        let p = PcapPacket::new(
            Duration::from_nanos(fr.ts_ns),
            fr.bytes.len() as u32,
            &fr.bytes,
        );
        w.write_packet(&p).map_err(|e| err(&e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use super::*;

    /// A fresh temporary directory named `prefix…`, removed with its files when dropped,
    /// whether the test passes or panics.
    fn scratch(prefix: &str) -> tempfile::TempDir {
        tempfile::Builder::new().prefix(prefix).tempdir().unwrap()
    }

    /// Hand-made capture bytes, in one byte order.
    #[derive(Clone, Copy)]
    struct B(Order);

    impl B {
        fn u16(self, v: u16) -> [u8; 2] {
            match self.0 {
                Order::Little => v.to_le_bytes(),
                Order::Big => v.to_be_bytes(),
            }
        }
        fn u32(self, v: u32) -> [u8; 4] {
            match self.0 {
                Order::Little => v.to_le_bytes(),
                Order::Big => v.to_be_bytes(),
            }
        }

        /// A pcap file header: `magic` as written by a host of this order.
        fn pcap_header(self, magic: u32, snaplen: u32, linktype: u32) -> Vec<u8> {
            let mut v = Vec::new();
            v.extend(self.u32(magic));
            v.extend(self.u16(2));
            v.extend(self.u16(4));
            v.extend([0; 8]);
            v.extend(self.u32(snaplen));
            v.extend(self.u32(linktype));
            v
        }

        fn pcap_record(self, v: &mut Vec<u8>, sec: u32, frac: u32, data: &[u8], orig: u32) {
            v.extend(self.u32(sec));
            v.extend(self.u32(frac));
            v.extend(self.u32(data.len() as u32));
            v.extend(self.u32(orig));
            v.extend(data);
        }

        fn block(self, v: &mut Vec<u8>, ty: u32, body: &[u8]) {
            let mut body = body.to_vec();
            body.resize(body.len().next_multiple_of(4), 0);
            let total = 12 + body.len() as u32;
            v.extend(self.u32(ty));
            v.extend(self.u32(total));
            v.extend(body);
            v.extend(self.u32(total));
        }

        fn shb(self, v: &mut Vec<u8>) {
            let mut body = self.u32(0x1a2b_3c4d).to_vec();
            body.extend(self.u16(1));
            body.extend(self.u16(0));
            body.extend([0xff; 8]);
            self.block(v, 0x0a0d_0d0a, &body);
        }

        fn opts(self, opts: &[(u16, &[u8])]) -> Vec<u8> {
            let mut o = Vec::new();
            for (code, val) in opts {
                o.extend(self.u16(*code));
                o.extend(self.u16(val.len() as u16));
                o.extend(*val);
                o.resize(o.len().next_multiple_of(4), 0);
            }
            if !opts.is_empty() {
                o.extend([0; 4]);
            }
            o
        }

        fn idb(self, v: &mut Vec<u8>, linktype: u16, snaplen: u32, opts: &[(u16, &[u8])]) {
            let mut body = self.u16(linktype).to_vec();
            body.extend([0, 0]);
            body.extend(self.u32(snaplen));
            body.extend(self.opts(opts));
            self.block(v, 1, &body);
        }

        fn epb(
            self,
            v: &mut Vec<u8>,
            iface: u32,
            ts: u64,
            data: &[u8],
            orig: u32,
            opts: &[(u16, &[u8])],
        ) {
            let mut body = self.u32(iface).to_vec();
            body.extend(self.u32((ts >> 32) as u32));
            body.extend(self.u32(ts as u32));
            body.extend(self.u32(data.len() as u32));
            body.extend(self.u32(orig));
            body.extend(data);
            body.resize(body.len().next_multiple_of(4), 0);
            body.extend(self.opts(opts));
            self.block(v, 6, &body);
        }
    }

    const LE: B = B(Order::Little);
    const BE: B = B(Order::Big);

    fn read(bytes: &[u8]) -> (Vec<CapturedFrame>, Option<String>, ReadStats) {
        let mut r = match CaptureReader::new(Cursor::new(bytes.to_vec()), "t") {
            Ok(r) => r,
            Err(e) => return (Vec::new(), Some(e.0), ReadStats::default()),
        };
        let mut frames = Vec::new();
        let mut err = None;
        for f in r.by_ref() {
            match f {
                Ok(f) => frames.push(f),
                Err(e) => err = Some(e.0),
            }
        }
        assert!(r.next().is_none(), "nothing after the end or an error");
        (frames, err, r.stats())
    }

    fn frame(n: u8, len: usize) -> Vec<u8> {
        (0..len).map(|i| n.wrapping_add(i as u8)).collect()
    }

    #[test]
    fn timestamp_resolutions() {
        assert_eq!(ts_to_ns(1_500_000, 6), 1_500_000_000, "microseconds");
        assert_eq!(ts_to_ns(7, 9), 7, "nanoseconds");
        assert_eq!(ts_to_ns(12_345, 10), 1_234, "tenths of ns truncate");
        assert_eq!(ts_to_ns(1 << 20, 0x80 | 20), 1_000_000_000, "2^-20 s units");
    }

    /// pcap-savefile(5): the magic 0xa1b2c3d4 (microseconds) or 0xa1b23c4d (nanoseconds),
    /// written in the writer's byte order. All four spellings of the same two records
    /// read as the same frames at the same times.
    #[test]
    fn pcap_in_both_byte_orders_and_resolutions() {
        let (a, b) = (frame(1, 60), frame(2, 61));
        for o in [LE, BE] {
            for (magic, frac) in [(0xa1b2_c3d4u32, 250_000u32), (0xa1b2_3c4d, 250_000_000)] {
                let mut v = o.pcap_header(magic, 65535, 1);
                o.pcap_record(&mut v, 7, frac, &a, 60);
                o.pcap_record(&mut v, 8, 0, &b, 61);
                let (f, err, st) = read(&v);
                assert_eq!(err, None);
                assert_eq!(
                    f,
                    [
                        CapturedFrame {
                            ts_ns: 7_250_000_000,
                            bytes: a.clone()
                        },
                        CapturedFrame {
                            ts_ns: 8_000_000_000,
                            bytes: b.clone()
                        },
                    ]
                );
                assert_eq!(
                    st,
                    ReadStats {
                        records: 2,
                        truncated: 0,
                        fcs_stripped: 0
                    }
                );
            }
        }
    }

    /// `tcpdump -s 96` writes snaplen 96 and, for a longer frame, caplen 96 with the
    /// frame's real length: the record is the 96 bytes, counted as truncated.
    #[test]
    fn a_record_shorter_than_its_frame_is_delivered_as_captured() {
        let long = frame(3, 96);
        let mut v = LE.pcap_header(0xa1b2_c3d4, 96, 1);
        LE.pcap_record(&mut v, 1, 0, &long, 1514);
        LE.pcap_record(&mut v, 1, 1, &frame(4, 60), 60);
        let (f, err, st) = read(&v);
        assert_eq!(err, None);
        assert_eq!(f[0].bytes, long);
        assert_eq!(f[1].bytes.len(), 60);
        assert_eq!(
            st,
            ReadStats {
                records: 2,
                truncated: 1,
                fcs_stripped: 0
            }
        );
    }

    /// draft-ietf-opsawg-pcap: the link-type field's P bit (0x04000000) says the top four
    /// bits hold the FCS length in 16-bit words. 0x24000001 is Ethernet with 4 FCS bytes,
    /// 0x14000001 with 2; without P the top bits say nothing. An FCS partly captured is
    /// stripped as far as it was captured; a frame cut before its FCS is truncated.
    #[test]
    fn the_pcap_fcs_bits_strip_the_fcs() {
        let f = frame(5, 64);
        let cases: [(u32, usize); 3] = [(0x2400_0001, 4), (0x1400_0001, 2), (0x2000_0001, 0)];
        for (lt, fcs) in cases {
            let mut v = BE.pcap_header(0xa1b2_3c4d, 65535, lt);
            BE.pcap_record(&mut v, 0, 1, &f, 64);
            let (got, err, st) = read(&v);
            assert_eq!(err, None, "{lt:#x}");
            assert_eq!(got[0].bytes, f[..64 - fcs], "{lt:#x}");
            assert_eq!(st.fcs_stripped, u64::from(fcs > 0), "{lt:#x}");
            assert_eq!(st.truncated, 0, "{lt:#x}");
        }
        let mut v = LE.pcap_header(0xa1b2_c3d4, 62, 0x2400_0001);
        LE.pcap_record(&mut v, 0, 0, &f[..62], 64); // two of the four FCS bytes captured
        LE.pcap_record(&mut v, 0, 0, &f[..40], 64); // cut inside the frame
        let (got, _, st) = read(&v);
        assert_eq!((got[0].bytes.len(), got[1].bytes.len()), (60, 40));
        assert_eq!(
            st,
            ReadStats {
                records: 2,
                truncated: 1,
                fcs_stripped: 1
            }
        );
    }

    /// Only Ethernet is replayed; the reserved bits of the link-type field must be zero
    /// ("a reader SHOULD treat a non-zero value as an error").
    #[test]
    fn other_link_types_and_reserved_bits_are_refused() {
        for (lt, want) in [
            (113, "t: link type 113 is not Ethernet (1)"),
            (
                0x0001_0001,
                "t: link-type field 0x00010001 has reserved bits set",
            ),
        ] {
            let (_, err, _) = read(&LE.pcap_header(0xa1b2_c3d4, 65535, lt));
            assert_eq!(err.as_deref(), Some(want));
        }
        let (_, err, _) = read(b"GIF89a..");
        assert_eq!(
            err.as_deref(),
            Some("t: magic number 47494638 is neither pcap's nor pcapng's")
        );
    }

    /// Errors name the record (1-based) and the offset of its header; the records before
    /// it are delivered first.
    #[test]
    fn pcap_errors_name_the_record_and_its_offset() {
        let a = frame(6, 60);
        let mut good = LE.pcap_header(0xa1b2_c3d4, 65535, 1);
        LE.pcap_record(&mut good, 0, 0, &a, 60);
        // 24 + 16 + 60: record 2 starts at 100.
        let mut huge = good.clone();
        huge.extend(LE.u32(0));
        huge.extend(LE.u32(0));
        huge.extend(LE.u32(MAX_CAPLEN + 1));
        huge.extend(LE.u32(MAX_CAPLEN + 1));
        let mut data_cut = good.clone();
        LE.pcap_record(&mut data_cut, 0, 0, &a, 60);
        data_cut.truncate(100 + 16 + 25);
        let mut head_cut = good.clone();
        head_cut.extend([0; 7]);
        for (bytes, want) in [
            (
                huge,
                "t: record 2 at offset 100 (0x64): captured length 262145 exceeds the maximum 262144",
            ),
            (
                data_cut,
                "t: record 2 at offset 100 (0x64): the file ends inside the record's data (needs 60 bytes, has 25)",
            ),
            (
                head_cut,
                "t: record 2 at offset 100 (0x64): the file ends inside the record header (needs 16 bytes, has 7)",
            ),
        ] {
            let (f, err, st) = read(&bytes);
            assert_eq!(f.len(), 1, "the record before it");
            assert_eq!(err.as_deref(), Some(want));
            assert_eq!(st.records, 1);
        }
    }

    /// pcapng: each section has its own byte order and interfaces; `if_tsresol` (code 9)
    /// sets an interface's units (microseconds without it); `if_fcslen` (code 13) its FCS
    /// length, which a packet's `epb_flags` (code 2, bits 5-8) overrides; a simple packet
    /// block is interface 0's, captured up to its snaplen, with the previous timestamp;
    /// the obsolete packet block reads as an enhanced one; unknown blocks are skipped.
    #[test]
    fn pcapng_sections_interfaces_and_options() {
        let f: Vec<Vec<u8>> = (0..6).map(|i| frame(i, 64 + usize::from(i))).collect();
        let mut v = Vec::new();
        LE.shb(&mut v);
        LE.idb(&mut v, 1, 0, &[(9, &[9]), (13, &[4])]);
        LE.idb(&mut v, 1, 0, &[(9, &[0x80 | 10])]);
        LE.epb(&mut v, 0, 5_000, &f[0], 64, &[]);
        LE.block(&mut v, 0x0bad, &[1, 2, 3, 4, 5, 6, 7, 8]);
        LE.epb(
            &mut v,
            1,
            3 << 10,
            &f[1],
            65,
            &[(2, &(4u32 << 5).to_le_bytes())],
        );
        BE.shb(&mut v);
        BE.idb(&mut v, 1, 40, &[]);
        BE.epb(&mut v, 0, 7, &f[2], 66, &[]);
        let mut spb = BE.u32(67).to_vec();
        spb.extend(&f[3]);
        BE.block(&mut v, 3, &spb);
        // The obsolete packet block: a 16-bit interface and a drops count.
        let mut pb = BE.u16(0).to_vec();
        pb.extend(BE.u16(0));
        pb.extend(BE.u32(0));
        pb.extend(BE.u32(9));
        pb.extend(BE.u32(68));
        pb.extend(BE.u32(68));
        pb.extend(&f[4]);
        BE.block(&mut v, 2, &pb);
        let (got, err, st) = read(&v);
        assert_eq!(err, None);
        let want = [
            (5_000, &f[0][..60]),
            (3_000_000_000, &f[1][..61]),
            (7_000, &f[2][..]),
            (7_000, &f[3][..40]),
            (9_000, &f[4][..]),
        ];
        assert_eq!(got.len(), want.len());
        for (g, (ts, bytes)) in got.iter().zip(want) {
            assert_eq!((g.ts_ns, &g.bytes[..]), (ts, bytes));
        }
        assert_eq!(
            st,
            ReadStats {
                records: 5,
                truncated: 1,
                fcs_stripped: 2
            }
        );
        // A second section forgets the first's interfaces.
        let mut w = Vec::new();
        LE.shb(&mut w);
        LE.idb(&mut w, 1, 0, &[]);
        LE.idb(&mut w, 1, 0, &[]);
        LE.shb(&mut w);
        LE.idb(&mut w, 1, 0, &[]);
        let at = w.len();
        LE.epb(&mut w, 1, 0, &f[0], 64, &[]);
        let (_, err, _) = read(&w);
        assert_eq!(
            err.unwrap(),
            format!(
                "t: block 6 (packet 1) at offset {at} ({at:#x}): packet of interface 1, but the section declares 1 interface(s)"
            )
        );
    }

    /// pcapng errors name the block, the packet for a packet block, and the offset.
    #[test]
    fn pcapng_errors_name_the_block_and_its_offset() {
        let a = frame(7, 60);
        let mut head = Vec::new();
        LE.shb(&mut head); // 28 bytes
        LE.idb(&mut head, 1, 0, &[]); // 20 bytes
        LE.idb(&mut head, 105, 0, &[]);
        let at = head.len();
        let case = |tail: &dyn Fn(&mut Vec<u8>)| {
            let mut v = head.clone();
            LE.epb(&mut v, 0, 1, &a, 60, &[]);
            tail(&mut v);
            read(&v)
        };
        let next = at + 32 + 60;
        let msgs: Vec<(String, String)> = vec![
            (
                case(&|v| LE.epb(v, 1, 2, &a, 60, &[])).1.unwrap(),
                "block 5 (packet 2) at offset {n}: interface 1 has link type 105, not Ethernet (1)".into(),
            ),
            (
                case(&|v| {
                    LE.epb(v, 0, 2, &a, 60, &[]);
                    let e = v.len();
                    v[e - 4..].copy_from_slice(&LE.u32(96));
                })
                .1
                .unwrap(),
                "block 5 (packet 2) at offset {n}: trailing block length 96 differs from the leading 92".into(),
            ),
            (
                case(&|v| {
                    LE.epb(v, 0, 2, &a, 60, &[]);
                    v.truncate(v.len() - 10);
                })
                .1
                .unwrap(),
                "block 5 (packet 2) at offset {n}: the file ends inside the block (needs 92 bytes, has 82)".into(),
            ),
            (
                case(&|v| {
                    v.extend(LE.u32(5));
                    v.extend(LE.u32(14));
                })
                .1
                .unwrap(),
                "block 5 at offset {n}: block length 14 is not a multiple of 4 of at least 12".into(),
            ),
            (
                case(&|v| {
                    // An option saying 200 bytes, in a body with 4 after its header.
                    let mut body = LE.u16(1).to_vec();
                    body.extend([0; 6]);
                    body.extend(LE.u16(9));
                    body.extend(LE.u16(200));
                    body.extend([6, 0, 0, 0]);
                    LE.block(v, 1, &body);
                })
                .1
                .unwrap(),
                "block 5 at offset {n}: option 9 of 200 bytes runs past the block".into(),
            ),
            (
                case(&|v| {
                    let mut body = LE.u32(0).to_vec();
                    body.extend([0; 8]);
                    body.extend(LE.u32(MAX_CAPLEN + 4));
                    body.extend(LE.u32(MAX_CAPLEN + 4));
                    LE.block(v, 6, &body);
                })
                .1
                .unwrap(),
                "block 5 (packet 2) at offset {n}: captured length 262148 exceeds the maximum 262144".into(),
            ),
        ];
        for (got, want) in msgs {
            let want = format!("t: {}", want.replace("{n}", &format!("{next} ({next:#x})")));
            assert_eq!(got, want);
        }
    }

    /// Frames of one timestamp leave in port order, then transmit order, whatever order
    /// the rounds produced them in; held in memory or in the temporary files (spilling
    /// after every frame), the file is the same, and it is the one the sorting writer
    /// makes.
    #[test]
    fn the_writer_orders_ties_by_port_and_spills_without_changing_the_output() {
        let tmp = scratch("netbatch-txw-");
        let dir = tmp.path();
        let tx = |ts, b: u8| TxFrame {
            ts_ns: ts,
            bytes: vec![b; 60],
            segs: 1,
            gso_size: 0,
        };
        // Two rounds at t=5 (port 1 then port 0 each), one at t=9.
        let rounds = vec![
            vec![(1, tx(5, 10)), (0, tx(5, 1))],
            vec![(0, tx(5, 2)), (1, tx(5, 11))],
            vec![(1, tx(9, 12)), (0, tx(9, 3))],
        ];
        let names = vec!["eth0".to_string(), "eth1".to_string()];
        let mut files = Vec::new();
        for spill in [usize::MAX, 0] {
            let p = dir.join(format!("s{spill}.pcapng"));
            let mut w = TxWriter::create(&p, &names).unwrap().spill_after(spill);
            for r in &rounds {
                for (port, f) in r {
                    w.add(*port, vec![f.clone()]).unwrap();
                }
            }
            assert_eq!(w.finish().unwrap(), 6);
            files.push(std::fs::read(&p).unwrap());
        }
        assert_eq!(files[0], files[1], "spilling changes nothing");
        let back = read(&files[0]).0;
        assert_eq!(
            back.iter()
                .map(|f| (f.ts_ns, f.bytes[0]))
                .collect::<Vec<_>>(),
            [(5, 1), (5, 2), (5, 10), (5, 11), (9, 3), (9, 12)]
        );
        let sorted = dir.join("sorted.pcapng");
        let mut per_port = vec![("eth0".to_string(), vec![]), ("eth1".to_string(), vec![])];
        for r in &rounds {
            for (port, f) in r {
                per_port[*port].1.push(f.clone());
            }
        }
        write_pcapng(&sorted, &per_port).unwrap();
        assert_eq!(std::fs::read(&sorted).unwrap(), files[0]);
        // Time does not go backwards.
        let mut w = TxWriter::create(&dir.join("back.pcapng"), &names).unwrap();
        w.add(0, vec![tx(9, 1)]).unwrap();
        assert!(
            w.add(1, vec![tx(8, 2)])
                .unwrap_err()
                .0
                .contains("time order")
        );
    }

    proptest::proptest! {
        /// Whatever follows a valid file header, reading ends (every record consumes
        /// bytes) with frames or an error, never a panic.
        #[test]
        fn any_bytes_after_a_header_read_without_panicking(
            tail in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600),
            ng in proptest::prelude::any::<bool>(),
        ) {
            let mut v = if ng {
                let mut v = Vec::new();
                LE.shb(&mut v);
                LE.idb(&mut v, 1, 0, &[]);
                v
            } else {
                LE.pcap_header(0xa1b2_c3d4, 65535, 0x2400_0001)
            };
            v.extend(&tail);
            let (f, _, st) = read(&v);
            proptest::prop_assert_eq!(f.len() as u64, st.records);
            proptest::prop_assert!(f.iter().all(|f| f.bytes.len() <= tail.len()));
        }
    }

    #[test]
    fn pcap_and_pcapng_round_trip() {
        let tmp = scratch("netbatch-pcap-");
        let dir = tmp.path();
        let frames = vec![
            CapturedFrame {
                ts_ns: 1_700_000_000_123_456_789,
                bytes: vec![1; 60],
            },
            CapturedFrame {
                ts_ns: 1_700_000_000_123_456_790,
                bytes: vec![2; 64],
            },
        ];
        let p = dir.join("a.pcap");
        write_pcap(&p, &frames).unwrap();
        assert_eq!(read_frames(&p).unwrap(), frames);
        let ng = dir.join("b.pcapng");
        let tx = |ts, b: u8| TxFrame {
            ts_ns: ts,
            bytes: vec![b; 60],
            segs: 1,
            gso_size: 0,
        };
        write_pcapng(
            &ng,
            &[
                ("eth0".into(), vec![tx(5, 1), tx(9, 3)]),
                ("eth1".into(), vec![tx(7, 2)]),
            ],
        )
        .unwrap();
        let back = read_frames(&ng).unwrap();
        assert_eq!(
            back.iter()
                .map(|f| (f.ts_ns, f.bytes[0]))
                .collect::<Vec<_>>(),
            vec![(5, 1), (7, 2), (9, 3)]
        );
    }

    /// Traced frames come back as written: frames, timestamps and lengths through our
    /// reader, interface names and per-packet comments through pcap-file's, and, when
    /// tshark is installed, through Wireshark's reading of the comments.
    #[test]
    fn traced_frames_carry_their_comments() {
        use pcap_file::pcapng::{Block, PcapNgReader};
        let tmp = scratch("netbatch-traced-");
        let dir = tmp.path();
        let path = dir.join("trace.pcapng");
        let ports = vec!["eth0".to_string(), "eth1".to_string()];
        let tf = |port, ts_ns, data: Vec<u8>, orig_len, comment: &str| TracedFrame {
            port,
            ts_ns,
            data,
            orig_len,
            comment: comment.into(),
        };
        let frames = vec![
            tf(
                1,
                1_714_521_600_000_000_001,
                frame(1, 60),
                60,
                "eth-input: a -> ip4-input\nip4-input: b drop x",
            ),
            tf(
                0,
                1_714_521_600_000_000_500,
                frame(2, 64),
                98,
                "eth-input: c -> ip4-input",
            ),
            tf(1, 1_714_521_600_000_001_000, frame(3, 60), 60, ""),
        ];
        assert_eq!(write_traced(&path, &ports, &frames).unwrap(), 3);

        let mut r = CaptureReader::open(&path).unwrap();
        let mut back = Vec::new();
        while let Some(f) = r.next_frame().unwrap() {
            back.push(f);
        }
        assert_eq!(back.len(), 3);
        for (b, f) in back.iter().zip(&frames) {
            assert_eq!((b.ts_ns, &b.bytes), (f.ts_ns, &f.data));
        }
        assert_eq!(r.stats().truncated, 1, "the frame kept shorter than it was");

        let mut ng = PcapNgReader::new(File::open(&path).unwrap()).unwrap();
        let mut got = Vec::new();
        while let Some(b) = ng.next_block() {
            if let Block::EnhancedPacket(e) = b.unwrap() {
                let comments: Vec<String> = e
                    .options
                    .iter()
                    .filter_map(|o| match o {
                        EnhancedPacketOption::Comment(c) => Some(c.to_string()),
                        _ => None,
                    })
                    .collect();
                got.push((e.interface_id, e.original_len, comments));
            }
        }
        let names: Vec<String> = ng
            .interfaces()
            .iter()
            .map(|i| {
                i.options
                    .iter()
                    .find_map(|o| match o {
                        InterfaceDescriptionOption::IfName(n) => Some(n.to_string()),
                        _ => None,
                    })
                    .unwrap_or_default()
            })
            .collect();
        assert_eq!(names, ports);
        assert_eq!(
            got,
            [
                (1, 60, vec![frames[0].comment.clone()]),
                (0, 98, vec![frames[1].comment.clone()]),
                (1, 60, vec![]),
            ]
        );

        // A frame of a port with no name is refused before anything is written.
        let bad = [tf(2, 0, frame(4, 60), 60, "")];
        let e = write_traced(&dir.join("bad.pcapng"), &ports, &bad).unwrap_err();
        assert!(
            e.0.ends_with("frame 1 is from port 2, but 2 port name(s) were given"),
            "{e}"
        );

        tshark_reads_the_comments(&path, &frames);
    }

    /// Wireshark's reading of the comments (`frame.comment`, tshark 3.6 and later; older
    /// versions call it `pkt_comment`), one line per frame, multi-line comments with
    /// their line breaks escaped as `\n`.
    fn tshark_reads_the_comments(path: &Path, frames: &[TracedFrame]) {
        let run = |field: &str| {
            std::process::Command::new("tshark")
                .args(["-r"])
                .arg(path)
                .args(["-T", "fields", "-e", field])
                .output()
        };
        let out = match run("frame.comment") {
            Err(e) => {
                println!("skipped the tshark check: tshark cannot be run ({e})");
                return;
            }
            Ok(o) if o.status.success() => o,
            Ok(_) => run("pkt_comment").expect("tshark"),
        };
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let want: Vec<String> = frames
            .iter()
            .map(|f| f.comment.replace('\n', "\\n"))
            .collect();
        assert_eq!(lines, want, "tshark's comments");
    }
}
