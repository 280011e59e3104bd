//! The `pcap` port's files: reading pcap and pcapng captures as received frames, and
//! writing transmitted frames as pcapng with one interface per port.
//!
//! pcapng timestamps honour each interface's `if_tsresol` (microseconds by default, per
//! the pcapng specification); written files use nanoseconds and say so.

use std::borrow::Cow;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read};
use std::path::Path;
use std::time::Duration;

use pcap_file::DataLink;
use pcap_file::pcap::PcapReader;
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::{Block, PcapNgReader, PcapNgWriter};

use crate::Carries;
use crate::mem::TxFrame;

/// What a `pcap` port carries: what the `mem` port it is built on carries.
pub const CARRIES: Carries = crate::mem::CARRIES;

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

/// Reads every Ethernet frame of a pcap or pcapng file, in file order.
pub fn read_frames(path: &Path) -> Result<Vec<CapturedFrame>, PcapError> {
    let err = |e: &dyn core::fmt::Display| PcapError(format!("{}: {e}", path.display()));
    let mut f = BufReader::new(File::open(path).map_err(|e| err(&e))?);
    let mut magic = [0u8; 4];
    f.read_exact(&mut magic).map_err(|e| err(&e))?;
    let f = BufReader::new(File::open(path).map_err(|e| err(&e))?);
    let mut out = Vec::new();
    if magic == [0x0a, 0x0d, 0x0d, 0x0a] {
        let mut r = PcapNgReader::new(f).map_err(|e| err(&e))?;
        loop {
            // Take what we need out of the block before asking the reader about interfaces.
            let (iface, raw, bytes) = match r.next_block() {
                None => break,
                Some(b) => match b.map_err(|e| err(&e))? {
                    Block::EnhancedPacket(p) => (
                        Some(p.interface_id),
                        u64::try_from(p.timestamp.as_nanos()).unwrap_or(u64::MAX),
                        p.data.into_owned(),
                    ),
                    Block::SimplePacket(p) => (None, 0, p.data.into_owned()),
                    _ => continue,
                },
            };
            let Some(id) = iface else {
                // A simple packet block has no timestamp: keep the previous one.
                let ts = out.last().map_or(0, |l: &CapturedFrame| l.ts_ns);
                out.push(CapturedFrame { ts_ns: ts, bytes });
                continue;
            };
            let idb = r
                .interfaces()
                .get(id as usize)
                .ok_or_else(|| err(&"packet of an undeclared interface"))?;
            if idb.linktype != DataLink::ETHERNET {
                return Err(err(&format!(
                    "interface link type {:?} is not Ethernet",
                    idb.linktype
                )));
            }
            let resol = idb
                .options
                .iter()
                .find_map(|o| match o {
                    InterfaceDescriptionOption::IfTsResol(r) => Some(*r),
                    _ => None,
                })
                .unwrap_or(6);
            // pcap-file hands the raw timestamp through as if it were nanoseconds.
            out.push(CapturedFrame {
                ts_ns: ts_to_ns(raw, resol),
                bytes,
            });
        }
    } else {
        let mut r = PcapReader::new(f).map_err(|e| err(&e))?;
        if r.header().datalink != DataLink::ETHERNET {
            return Err(err(&format!(
                "link type {:?} is not Ethernet",
                r.header().datalink
            )));
        }
        while let Some(p) = r.next_packet() {
            let p = p.map_err(|e| err(&e))?;
            let ts = u64::try_from(p.timestamp.as_nanos()).unwrap_or(u64::MAX);
            out.push(CapturedFrame {
                ts_ns: ts,
                bytes: p.data.into_owned(),
            });
        }
    }
    Ok(out)
}

/// Writes frames transmitted on several ports as pcapng: one interface per port (named
/// after it), frames in time order (ties keep port order, then transmit order).
pub fn write_pcapng(path: &Path, ports: &[(String, Vec<TxFrame>)]) -> Result<(), PcapError> {
    let err = |e: &dyn core::fmt::Display| PcapError(format!("{}: {e}", path.display()));
    let f = BufWriter::new(File::create(path).map_err(|e| err(&e))?);
    let mut w = PcapNgWriter::new(f).map_err(|e| err(&e))?;
    for (name, _) in ports {
        let idb = InterfaceDescriptionBlock {
            linktype: DataLink::ETHERNET,
            snaplen: 0,
            options: vec![
                InterfaceDescriptionOption::IfName(Cow::Owned(name.clone())),
                InterfaceDescriptionOption::IfTsResol(9),
            ],
        };
        w.write_pcapng_block(idb).map_err(|e| err(&e))?;
    }
    let mut all: Vec<(u64, usize, usize)> = Vec::new();
    for (pi, (_, frames)) in ports.iter().enumerate() {
        for (fi, f) in frames.iter().enumerate() {
            all.push((f.ts_ns, pi, fi));
        }
    }
    all.sort();
    for (ts, pi, fi) in all {
        let f = &ports[pi].1[fi];
        let epb = EnhancedPacketBlock {
            interface_id: pi as u32,
            timestamp: Duration::from_nanos(ts),
            original_len: f.bytes.len() as u32,
            data: Cow::Borrowed(&f.bytes),
            options: vec![],
        };
        w.write_pcapng_block(epb).map_err(|e| err(&e))?;
    }
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
    use super::*;

    #[test]
    fn timestamp_resolutions() {
        assert_eq!(ts_to_ns(1_500_000, 6), 1_500_000_000, "microseconds");
        assert_eq!(ts_to_ns(7, 9), 7, "nanoseconds");
        assert_eq!(ts_to_ns(12_345, 10), 1_234, "tenths of ns truncate");
        assert_eq!(ts_to_ns(1 << 20, 0x80 | 20), 1_000_000_000, "2^-20 s units");
    }

    #[test]
    fn pcap_and_pcapng_round_trip() {
        let dir = std::env::temp_dir().join(format!("netbatch-pcap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
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
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
