//! The IPv4 options a router acts on (RFC 791 3.1, RFC 1812 5.2.4 and 5.3.13): Record
//! Route, Timestamp, and Loose and Strict Source and Record Route.
//!
//! `ip4-input` has already walked the options area (every option inside it, lengths at
//! least 2), so [`scan`] only looks inside the four options it knows, with the checks of
//! Linux's `ip_options_compile`; a failure gives the offset of the offending octet from
//! the start of the IP header, for an ICMP Parameter Problem (RFC 1812 5.2.5). Other
//! options pass untouched (RFC 1812 5.2.4: "MUST ignore unrecognized options").
//!
//! A forwarded packet gets [`forward`] (RFC 1812 5.3.13.1–5.3.13.2, RFC 791): Record Route
//! records the address of the interface it leaves by and advances the pointer, or is
//! left alone when full; Timestamp records the time (with that address, or at a
//! prespecified address of ours) or, when full, counts the overflow. A source-routed
//! packet for us whose route is not exhausted goes on to the next listed address, our
//! outgoing address recorded in its place ([`next_source_hop`], RFC 791 "Loose Source and
//! Record Route"), when `accept_source_route` allows it; otherwise it is dropped, as Linux
//! drops every source-routed packet with `accept_source_route = 0`.

/// Record Route (RFC 791).
pub const RR: u8 = 7;
/// Internet Timestamp (RFC 791).
pub const TS: u8 = 68;
/// Loose Source and Record Route (RFC 791).
pub const LSRR: u8 = 131;
/// Strict Source and Record Route (RFC 791).
pub const SSRR: u8 = 137;

/// Timestamp flags (the low nibble of the option's fourth octet).
pub mod ts_flag {
    /// Timestamps only.
    pub const TSONLY: u8 = 0;
    /// Each timestamp preceded by the recording address.
    pub const TSANDADDR: u8 = 1;
    /// Addresses prespecified; only those record.
    pub const PRESPEC: u8 = 3;
}

/// Where the options a router acts on are, as offsets from the start of the IP header.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    /// Record Route.
    pub rr: Option<usize>,
    /// Timestamp.
    pub ts: Option<usize>,
    /// Loose or strict source route (`true`: strict).
    pub srr: Option<(usize, bool)>,
}

impl Found {
    /// Whether forwarding has anything to record.
    pub fn records(&self) -> bool {
        self.rr.is_some() || self.ts.is_some()
    }
}

/// Scans `h`, a whole IPv4 header whose options area `ip4-input` walked, for the options a
/// router acts on. `Err(pointer)`: the offset of the octet in error.
pub fn scan(h: &[u8]) -> Result<Found, usize> {
    let mut f = Found::default();
    let mut i = 20;
    while let Some(&kind) = h.get(i) {
        match kind {
            0 => break,
            1 => {
                i += 1;
                continue;
            }
            _ => {}
        }
        let Some(&len) = h.get(i + 1) else {
            return Err(i);
        };
        let len = usize::from(len);
        let Some(opt) = h.get(i..i + len).filter(|_| len >= 2) else {
            return Err(i + 1);
        };
        let ptr = opt.get(2).map_or(0, |&p| usize::from(p));
        match kind {
            RR | LSRR | SSRR => {
                if len < 3 {
                    return Err(i + 1);
                }
                if ptr < 4 {
                    return Err(i + 2);
                }
                // Room left must hold a whole address (a partly empty slot is an error).
                if ptr <= len && ptr + 3 > len {
                    return Err(i + 2);
                }
                if kind == RR {
                    f.rr = Some(i);
                } else {
                    // RFC 1812 5.2.4.1: at most one source route.
                    if f.srr.is_some() {
                        return Err(i);
                    }
                    f.srr = Some((i, kind == SSRR));
                }
            }
            TS => {
                let Some(&oflw_flags) = opt.get(3) else {
                    return Err(i + 1);
                };
                if ptr < 5 {
                    return Err(i + 2);
                }
                let flags = oflw_flags & 0x0f;
                if ptr <= len {
                    let slot = match flags {
                        ts_flag::TSONLY => 4,
                        ts_flag::TSANDADDR | ts_flag::PRESPEC => 8,
                        _ => return Err(i + 3),
                    };
                    if ptr + slot - 1 > len {
                        return Err(i + 2);
                    }
                } else if oflw_flags >> 4 == 15 {
                    // Full, and the overflow count cannot count one more.
                    return Err(i + 3);
                }
                f.ts = Some(i);
            }
            _ => {}
        }
        i += len;
    }
    Ok(f)
}

/// Records a forwarded packet's passage in the options of its header `h` (found by
/// [`scan`]): `out_addr` is our address on the interface it leaves by, `now_ms` the time
/// in milliseconds since midnight UT (RFC 791), `ours` tells our addresses. Returns
/// whether the header changed (its checksum is then to be recomputed).
pub fn forward(
    h: &mut [u8],
    f: &Found,
    out_addr: u32,
    now_ms: u32,
    ours: impl Fn(u32) -> bool,
) -> bool {
    let mut changed = false;
    if let Some(o) = f.rr {
        changed |= record_route(h, o, out_addr);
    }
    if let Some(o) = f.ts
        && let Some(opt) = h.get_mut(o..)
        && let [_, len, ptr, oflw_flags, ..] = *opt
    {
        let (len, ptr, flags) = (usize::from(len), usize::from(ptr), oflw_flags & 0x0f);
        let slot = if flags == ts_flag::TSONLY { 4 } else { 8 };
        if ptr + slot - 1 > len {
            // Full: count the overflow (`scan` refused a count already at 15).
            if let Some(b) = opt.get_mut(3) {
                *b = oflw_flags.wrapping_add(0x10);
            }
            changed = true;
        } else if let Some(at) = opt.get_mut(ptr - 1..ptr - 1 + slot) {
            // `at` is one slot: 4 bytes (a time) or 8 (an address, then a time).
            match flags {
                ts_flag::TSONLY => at.copy_from_slice(&now_ms.to_be_bytes()),
                ts_flag::TSANDADDR => {
                    if let Some(a) = at.first_chunk_mut::<4>() {
                        *a = out_addr.to_be_bytes();
                    }
                    if let Some(t) = at.last_chunk_mut::<4>() {
                        *t = now_ms.to_be_bytes();
                    }
                }
                _ => {
                    let listed = at.first_chunk::<4>().map(|a| u32::from_be_bytes(*a));
                    if !listed.is_some_and(&ours) {
                        // Another router's turn: nothing recorded, pointer unmoved.
                        return changed;
                    }
                    if let Some(t) = at.last_chunk_mut::<4>() {
                        *t = now_ms.to_be_bytes();
                    }
                }
            }
            if let Some(p) = opt.get_mut(2) {
                *p += slot as u8;
            }
            changed = true;
        }
    }
    changed
}

/// Writes `addr` into the Record Route (or source route) option at `o` if it has room,
/// advancing its pointer. Returns whether it wrote.
fn record_route(h: &mut [u8], o: usize, addr: u32) -> bool {
    let Some(opt) = h.get_mut(o..) else {
        return false;
    };
    let [_, len, ptr, ..] = *opt else {
        return false;
    };
    let (len, ptr) = (usize::from(len), usize::from(ptr));
    if ptr + 3 > len {
        // Full: RFC 791 forwards it without recording.
        return false;
    }
    match opt.get_mut(ptr - 1..ptr + 3) {
        Some(at) => {
            at.copy_from_slice(&addr.to_be_bytes());
            if let Some(p) = opt.get_mut(2) {
                *p += 4;
            }
            true
        }
        None => false,
    }
}

/// The next address of the source route at `o` in `h`, if the route is not exhausted
/// (RFC 791: the pointer is past the option's end when it is).
pub fn source_route_next(h: &[u8], o: usize) -> Option<u32> {
    let opt = h.get(o..)?;
    let (len, ptr) = (usize::from(*opt.get(1)?), usize::from(*opt.get(2)?));
    if ptr + 3 > len {
        return None;
    }
    let a = opt.get(ptr - 1..)?.first_chunk::<4>()?;
    Some(u32::from_be_bytes(*a))
}

/// Moves a source-routed packet (header `h`, source route at `o`, not exhausted) to its
/// next hop `next`: the destination becomes `next`, and `out_addr` (our address toward
/// it) is recorded in the slot `next` came from (RFC 791).
pub fn next_source_hop(h: &mut [u8], o: usize, next: u32, out_addr: u32) {
    if record_route(h, o, out_addr)
        && let Some(dst) = h.get_mut(16..20)
    {
        dst.copy_from_slice(&next.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header with `opts` (padded with end-of-list to a multiple of 4).
    fn header(opts: &[u8]) -> Vec<u8> {
        let mut h = vec![0u8; 20];
        h.extend_from_slice(opts);
        while !h.len().is_multiple_of(4) {
            h.push(0);
        }
        h[0] = 0x40 | (h.len() / 4) as u8;
        h
    }

    const OUT: u32 = 0xc000_0201; // 192.0.2.1

    #[test]
    fn record_route_records_until_full() {
        // RFC 791 layout: type 7, length 11 (two slots), pointer 4.
        let mut h = header(&[RR, 11, 4, 0, 0, 0, 0, 0, 0, 0, 0]);
        let f = scan(&h).unwrap();
        assert_eq!(f.rr, Some(20));
        assert!(forward(&mut h, &f, OUT, 0, |_| false));
        assert_eq!(&h[20..31], &[RR, 11, 8, 192, 0, 2, 1, 0, 0, 0, 0]);
        assert!(forward(&mut h, &f, 0x0a00_0001, 0, |_| false));
        assert_eq!(&h[20..31], &[RR, 11, 12, 192, 0, 2, 1, 10, 0, 0, 1]);
        // Full: forwarded untouched.
        assert!(!forward(&mut h, &f, OUT, 0, |_| false));
        assert_eq!(h[22], 12);
    }

    #[test]
    fn timestamps_record_or_count_their_overflow() {
        // Timestamp only, one slot: length 8, pointer 5, flags 0.
        let mut h = header(&[TS, 8, 5, 0, 0, 0, 0, 0]);
        let f = scan(&h).unwrap();
        assert!(forward(&mut h, &f, OUT, 0x0102_0304, |_| false));
        assert_eq!(&h[20..28], &[TS, 8, 9, 0, 1, 2, 3, 4]);
        assert!(forward(&mut h, &f, OUT, 7, |_| false));
        assert_eq!(h[23], 0x10, "overflow counted once full");
        // Address and timestamp.
        let mut h = header(&[TS, 12, 5, 1, 0, 0, 0, 0, 0, 0, 0, 0]);
        let f = scan(&h).unwrap();
        assert!(forward(&mut h, &f, OUT, 9, |_| false));
        assert_eq!(&h[20..32], &[TS, 12, 13, 1, 192, 0, 2, 1, 0, 0, 0, 9]);
        // Prespecified: only at our address.
        let other = [TS, 12, 5, 3, 10, 9, 9, 9, 0, 0, 0, 0];
        let mut h = header(&other);
        let f = scan(&h).unwrap();
        assert!(!forward(&mut h, &f, OUT, 9, |_| false));
        assert_eq!(&h[20..32], &other);
        assert!(forward(&mut h, &f, OUT, 9, |a| a == 0x0a09_0909));
        assert_eq!(&h[20..32], &[TS, 12, 13, 3, 10, 9, 9, 9, 0, 0, 0, 9]);
        // A full option whose overflow count is at 15 cannot be forwarded.
        assert_eq!(scan(&header(&[TS, 8, 9, 0xf0, 0, 0, 0, 0])), Err(23));
    }

    #[test]
    fn malformed_options_name_the_octet_in_error() {
        // Pointer below 4 (RR) / 5 (TS): the pointer octet.
        assert_eq!(scan(&header(&[RR, 7, 3, 0, 0, 0, 0])), Err(22));
        assert_eq!(scan(&header(&[TS, 8, 4, 0, 0, 0, 0, 0])), Err(22));
        // A partial slot: length 9 leaves 2 bytes after one address.
        assert_eq!(scan(&header(&[RR, 9, 8, 0, 0, 0, 0, 0, 0])), Err(22));
        // Unknown timestamp flag.
        assert_eq!(scan(&header(&[TS, 8, 5, 2, 0, 0, 0, 0])), Err(23));
        // Two source routes: the second.
        let two = [LSRR, 7, 4, 0, 0, 0, 0, SSRR, 7, 4, 0, 0, 0, 0];
        assert_eq!(scan(&header(&two)), Err(27));
        // Options it does not know (Router Alert) pass; NOPs are skipped.
        let f = scan(&header(&[1, 0x94, 4, 0, 0, RR, 7, 4, 0, 0, 0, 0])).unwrap();
        assert_eq!(f.rr, Some(25));
    }

    #[test]
    fn source_route_takes_the_next_address_and_records_ours() {
        // LSRR listing 10.0.0.9 then 10.0.0.10, pointer at the first.
        let mut h = header(&[LSRR, 11, 4, 10, 0, 0, 9, 10, 0, 0, 10]);
        h[16..20].copy_from_slice(&[198, 51, 100, 1]);
        let f = scan(&h).unwrap();
        assert_eq!(f.srr, Some((20, false)));
        let next = source_route_next(&h, 20).unwrap();
        assert_eq!(next, 0x0a00_0009);
        next_source_hop(&mut h, 20, next, OUT);
        assert_eq!(&h[16..20], &[10, 0, 0, 9]);
        assert_eq!(&h[20..31], &[LSRR, 11, 8, 192, 0, 2, 1, 10, 0, 0, 10]);
        assert_eq!(source_route_next(&h, 20), Some(0x0a00_000a));
        next_source_hop(&mut h, 20, 0x0a00_000a, OUT);
        assert_eq!(source_route_next(&h, 20), None, "exhausted");
    }
}
