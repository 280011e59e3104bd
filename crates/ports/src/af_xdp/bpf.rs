//! A minimal XDP loader through the `bpf()` system call: no ELF, no library.
//!
//! It makes an XSKMAP, loads a five-instruction program that redirects each frame to
//! the socket registered for its receive queue (or passes it to the stack when that slot
//! is empty), and attaches it with a BPF link. It also loads the program of a traffic
//! source (`source_program`: each frame given one of the flows' UDP source ports, the
//! frame redirected to an interface) and runs it on live frames (`BPF_PROG_TEST_RUN` with
//! `BPF_F_TEST_XDP_LIVE_FRAMES`: the kernel makes the frames and really redirects them).
//!
//! Invariants (the reason this module may hold `unsafe`):
//! - each command's attribute block is a `repr(C)` prefix of the kernel's
//!   `union bpf_attr` for that command, zeroed where unused; its exact size is passed, so
//!   the kernel reads nothing beyond it (and treats the rest of the union as zero);
//! - pointers placed in an attribute block point at memory that outlives the call;
//! - every descriptor the kernel returns is wrapped in an `OwnedFd` at once. The link
//!   is the only thing holding the program on the interface: closing it (drop, exit or
//!   crash) detaches the program.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::sys::{Interface, PortError};

const BPF_MAP_CREATE: i32 = 0;
const BPF_MAP_UPDATE_ELEM: i32 = 2;
const BPF_PROG_LOAD: i32 = 5;
const BPF_LINK_CREATE: i32 = 28;
const BPF_PROG_TEST_RUN: i32 = 10;
/// `BPF_F_TEST_XDP_LIVE_FRAMES`: run the program on frames the kernel makes and carry
/// out what it returns (transmit, redirect).
const BPF_F_TEST_XDP_LIVE_FRAMES: u32 = 1 << 1;
const BPF_FUNC_REDIRECT: i32 = 23;

const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
const BPF_PSEUDO_MAP_FD: u8 = 1;
const BPF_FUNC_REDIRECT_MAP: i32 = 51;
const XDP_PASS: i32 = 2;

/// `XDP_FLAGS_SKB_MODE`: generic XDP, run by the stack on every device.
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
/// `XDP_FLAGS_DRV_MODE`: native XDP, run by the driver.
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// Bytes of verifier log asked for when a load fails.
const LOG_SIZE: usize = 1 << 16;

/// The attribute block of `BPF_MAP_CREATE` (the start of its `bpf_attr` member).
#[repr(C)]
#[derive(Default)]
struct MapCreate {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
}

/// The attribute block of `BPF_MAP_UPDATE_ELEM`.
#[repr(C)]
#[derive(Default)]
struct MapUpdate {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// The attribute block of `BPF_PROG_LOAD` (up to `expected_attach_type`).
#[repr(C)]
#[derive(Default)]
struct ProgLoad {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// The attribute block of `BPF_LINK_CREATE` (the common head).
#[repr(C)]
#[derive(Default)]
struct LinkCreate {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
}

/// The attribute block of `BPF_PROG_TEST_RUN` (the `test` member).
#[repr(C)]
#[derive(Default)]
struct TestRun {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
    ctx_size_in: u32,
    ctx_size_out: u32,
    ctx_in: u64,
    ctx_out: u64,
    flags: u32,
    cpu: u32,
    batch_size: u32,
    _pad: u32,
}

/// One `struct bpf_insn`: opcode, registers (two nibbles), offset, immediate.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct Insn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

impl Insn {
    const fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Self {
        // The C bitfield `dst_reg:4, src_reg:4` puts dst in the low nibble on
        // little-endian targets and in the high nibble on big-endian ones.
        let regs = if cfg!(target_endian = "little") {
            (dst & 0xf) | (src << 4)
        } else {
            (dst << 4) | (src & 0xf)
        };
        Self {
            code,
            regs,
            off,
            imm,
        }
    }
}

/// The redirect program for the XSKMAP `map_fd`:
/// `r2 = ctx->rx_queue_index; r1 = map; r3 = XDP_PASS; r0 = bpf_redirect_map(r1, r2, r3); exit`.
/// The low bits of the last argument are the action when the map has no socket for the
/// queue, so frames of queues without a socket go on to the stack.
fn program(map_fd: RawFd) -> [Insn; 6] {
    const LDX_MEM_W: u8 = 0x61; // BPF_LDX | BPF_MEM | BPF_W
    const LD_IMM64: u8 = 0x18; // BPF_LD | BPF_IMM | BPF_DW (two slots)
    const MOV64_IMM: u8 = 0xb7; // BPF_ALU64 | BPF_MOV | BPF_K
    const CALL: u8 = 0x85; // BPF_JMP | BPF_CALL
    const EXIT: u8 = 0x95; // BPF_JMP | BPF_EXIT
    /// `offsetof(struct xdp_md, rx_queue_index)`.
    const RX_QUEUE_INDEX: i16 = 16;
    [
        Insn::new(LDX_MEM_W, 2, 1, RX_QUEUE_INDEX, 0),
        Insn::new(LD_IMM64, 1, BPF_PSEUDO_MAP_FD, 0, map_fd),
        Insn::new(0, 0, 0, 0, 0),
        Insn::new(MOV64_IMM, 3, 0, 0, XDP_PASS),
        Insn::new(CALL, 0, 0, 0, BPF_FUNC_REDIRECT_MAP),
        Insn::new(EXIT, 0, 0, 0, 0),
    ]
}

/// Where the UDP source port of an untagged Ethernet/IPv4 frame without options lies.
pub(super) const UDP_SPORT_AT: usize = 14 + 20;

/// The traffic source's program: gives the frame a UDP source port drawn at random
/// among `flows` ports from `base` (as pktgen's `UDPSRC_RND`), then redirects it to
/// interface `ifindex`. A frame too short to hold the port is redirected as it is.
///
/// ```text
/// r2 = ctx->data; r3 = ctx->data_end; r4 = r2 + 36; if r4 > r3 goto redirect
/// r6 = r2; r0 = bpf_get_prandom_u32(); r0 %= flows; r0 += base
/// *(u16 *)(r6 + 34) = be16(r0)
/// redirect: r0 = bpf_redirect(ifindex, 0); exit
/// ```
fn source_program(ifindex: u32, base: u16, flows: u16) -> [Insn; 15] {
    const LDX_MEM_W: u8 = 0x61; // BPF_LDX | BPF_MEM | BPF_W
    const STX_MEM_H: u8 = 0x6b; // BPF_STX | BPF_MEM | BPF_H
    const MOV64_REG: u8 = 0xbf; // BPF_ALU64 | BPF_MOV | BPF_X
    const MOV64_IMM: u8 = 0xb7; // BPF_ALU64 | BPF_MOV | BPF_K
    const ADD64_IMM: u8 = 0x07; // BPF_ALU64 | BPF_ADD | BPF_K
    const MOD64_IMM: u8 = 0x97; // BPF_ALU64 | BPF_MOD | BPF_K
    const TO_BE: u8 = 0xdc; // BPF_ALU | BPF_END | BPF_TO_BE
    const JGT_REG: u8 = 0x2d; // BPF_JMP | BPF_JGT | BPF_X
    const CALL: u8 = 0x85;
    const EXIT: u8 = 0x95;
    const GET_PRANDOM_U32: i32 = 7;
    let at = UDP_SPORT_AT as i16;
    [
        Insn::new(LDX_MEM_W, 2, 1, 0, 0),
        Insn::new(LDX_MEM_W, 3, 1, 4, 0),
        Insn::new(MOV64_REG, 4, 2, 0, 0),
        Insn::new(ADD64_IMM, 4, 0, 0, at as i32 + 2),
        // Too short: straight to the redirect (insn 11).
        Insn::new(JGT_REG, 4, 3, 6, 0),
        // r6 keeps the checked packet pointer across the call.
        Insn::new(MOV64_REG, 6, 2, 0, 0),
        Insn::new(CALL, 0, 0, 0, GET_PRANDOM_U32),
        Insn::new(MOD64_IMM, 0, 0, 0, i32::from(flows.max(1))),
        Insn::new(ADD64_IMM, 0, 0, 0, i32::from(base)),
        Insn::new(TO_BE, 0, 0, 0, 16),
        Insn::new(STX_MEM_H, 6, 0, at, 0),
        Insn::new(MOV64_IMM, 1, 0, 0, ifindex as i32),
        Insn::new(MOV64_IMM, 2, 0, 0, 0),
        Insn::new(CALL, 0, 0, 0, BPF_FUNC_REDIRECT),
        Insn::new(EXIT, 0, 0, 0, 0),
    ]
}

/// The source program for `ifindex` (see [`source_program`]), loaded.
pub(super) fn load_source(ifindex: u32, base: u16, flows: u16) -> Result<OwnedFd, String> {
    load_program(&source_program(ifindex, base, flows), "nb_xdp_source").map_err(|(e, log)| {
        let log = log.trim();
        if log.is_empty() {
            format!("load XDP source program: {e}")
        } else {
            format!("load XDP source program: {e} (verifier log: {log})")
        }
    })
}

/// Runs `prog` `repeat` times on live frames made of `frame` (`batch` at a time), in the
/// calling thread: what the program returns is carried out (its redirects transmit).
pub(super) fn run_live(prog: &OwnedFd, frame: &[u8], repeat: u32, batch: u32) -> io::Result<()> {
    let mut t = TestRun {
        prog_fd: prog.as_raw_fd() as u32,
        data_size_in: u32::try_from(frame.len()).map_err(|_| io::Error::other("frame too long"))?,
        data_in: frame.as_ptr() as u64,
        repeat,
        flags: BPF_F_TEST_XDP_LIVE_FRAMES,
        batch_size: batch,
        ..TestRun::default()
    };
    bpf(BPF_PROG_TEST_RUN, &mut t).map(|_| ())
}

/// Runs `bpf(cmd, attr, sizeof attr)`.
fn bpf<T>(cmd: i32, attr: &mut T) -> io::Result<i64> {
    // SAFETY: `attr` is a live, initialised `repr(C)` block of exactly the size passed,
    // laid out as the start of `union bpf_attr` for `cmd` (module invariant); any pointer
    // in it points at memory the caller keeps alive across the call. The kernel reads at
    // most that many bytes and writes only within them.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            (attr as *mut T).cast::<libc::c_void>(),
            size_of::<T>() as libc::c_uint,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Runs a `bpf()` command that returns a new descriptor.
fn bpf_fd<T>(cmd: i32, attr: &mut T) -> io::Result<OwnedFd> {
    let fd = RawFd::try_from(bpf(cmd, attr)?).map_err(|_| io::Error::other("bad descriptor"))?;
    // SAFETY: the kernel just returned `fd` as a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A kernel object name (at most 15 bytes plus the terminating zero).
fn obj_name(s: &str) -> [u8; 16] {
    let mut n = [0u8; 16];
    for (d, b) in n.iter_mut().zip(s.bytes().take(15)) {
        *d = b;
    }
    n
}

/// The program attached to an interface; dropping it detaches the program (the link
/// closes first, then the program and the map go).
#[derive(Debug)]
pub(super) struct Attachment {
    _link: OwnedFd,
    _prog: OwnedFd,
    _map: OwnedFd,
    native: bool,
}

impl Attachment {
    /// Whether the program runs in the driver (native XDP) rather than in the stack
    /// (generic, SKB mode).
    pub(super) fn native(&self) -> bool {
        self.native
    }
}

/// Loads the redirect program for `iface`, registers `sockets` (queue id, XSK
/// descriptor) in its map of `entries` slots, and attaches it: native mode first,
/// generic mode when the driver has none.
pub(super) fn attach(
    port: &str,
    iface: &Interface,
    sockets: &[(u32, RawFd)],
    entries: u32,
) -> Result<Attachment, PortError> {
    let sys = |op: String, e| PortError::sys(port, op, e);
    let mut mc = MapCreate {
        map_type: BPF_MAP_TYPE_XSKMAP,
        key_size: 4,
        value_size: 4,
        max_entries: entries.max(1),
        map_name: obj_name("nb_xsks"),
        ..MapCreate::default()
    };
    let map = bpf_fd(BPF_MAP_CREATE, &mut mc)
        .map_err(|e| sys("create XSKMAP (BPF_MAP_CREATE)".into(), e))?;
    for &(queue, fd) in sockets {
        let (key, value) = (queue, fd as u32);
        let mut mu = MapUpdate {
            map_fd: map.as_raw_fd() as u32,
            key: (&raw const key) as u64,
            value: (&raw const value) as u64,
            ..MapUpdate::default()
        };
        bpf(BPF_MAP_UPDATE_ELEM, &mut mu)
            .map_err(|e| sys(format!("register queue {queue}'s socket in the XSKMAP"), e))?;
    }
    let prog = load_program(&program(map.as_raw_fd()), "nb_xsk_redirect").map_err(|(e, log)| {
        let log = log.trim();
        let op = if log.is_empty() {
            "load XDP program".to_string()
        } else {
            // The end of the log says why; keep the message bounded.
            let tail: String = log
                .chars()
                .rev()
                .take(2000)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            format!("load XDP program (verifier log: {tail})")
        };
        sys(op, e)
    })?;
    let mut last = None;
    for (flags, native) in [(XDP_FLAGS_DRV_MODE, true), (XDP_FLAGS_SKB_MODE, false)] {
        let mut lc = LinkCreate {
            prog_fd: prog.as_raw_fd() as u32,
            target_ifindex: iface.index,
            attach_type: BPF_XDP,
            flags,
        };
        match bpf_fd(BPF_LINK_CREATE, &mut lc) {
            Ok(link) => {
                return Ok(Attachment {
                    _link: link,
                    _prog: prog,
                    _map: map,
                    native,
                });
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::EBUSY) | Some(libc::EEXIST)) => {
                return Err(PortError::Unsupported {
                    port: port.into(),
                    what: format!(
                        "an XDP program is already attached to {} ({e}); detach it first \
                         (e.g. `ip link set dev {} xdp off`)",
                        iface.name, iface.name
                    ),
                });
            }
            Err(e) => last = Some(e),
        }
    }
    Err(sys(
        format!("attach XDP program to {} (BPF_LINK_CREATE)", iface.name),
        last.unwrap_or_else(|| io::Error::other("no attach mode tried")),
    ))
}

/// Loads an XDP program; on failure, loads it again with a verifier log and returns the
/// log.
fn load_program(insns: &[Insn], name: &str) -> Result<OwnedFd, (io::Error, String)> {
    let license = c"Dual MIT/GPL";
    let attr = |log: &mut Vec<u8>, level: u32| ProgLoad {
        prog_type: BPF_PROG_TYPE_XDP,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level: level,
        log_size: if level == 0 { 0 } else { log.len() as u32 },
        log_buf: if level == 0 {
            0
        } else {
            log.as_mut_ptr() as u64
        },
        prog_name: obj_name(name),
        expected_attach_type: BPF_XDP,
        ..ProgLoad::default()
    };
    let mut none = Vec::new();
    let first = match bpf_fd(BPF_PROG_LOAD, &mut attr(&mut none, 0)) {
        Ok(fd) => return Ok(fd),
        Err(e) => e,
    };
    let mut log = vec![0u8; LOG_SIZE];
    match bpf_fd(BPF_PROG_LOAD, &mut attr(&mut log, 1)) {
        Ok(fd) => Ok(fd),
        Err(_) => {
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            Err((first, String::from_utf8_lossy(&log[..end]).into_owned()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attribute_blocks_have_the_kernel_layout() {
        assert_eq!(size_of::<Insn>(), 8);
        assert_eq!(size_of::<MapCreate>(), 44);
        assert_eq!(size_of::<MapUpdate>(), 32);
        assert_eq!(std::mem::offset_of!(ProgLoad, insns), 8);
        assert_eq!(std::mem::offset_of!(ProgLoad, log_buf), 32);
        assert_eq!(std::mem::offset_of!(ProgLoad, prog_name), 48);
        assert_eq!(std::mem::offset_of!(ProgLoad, expected_attach_type), 68);
        assert_eq!(size_of::<LinkCreate>(), 16);
        assert_eq!(std::mem::offset_of!(TestRun, repeat), 32);
        assert_eq!(std::mem::offset_of!(TestRun, ctx_in), 48);
        assert_eq!(std::mem::offset_of!(TestRun, flags), 64);
        assert_eq!(std::mem::offset_of!(TestRun, batch_size), 72);
        assert_eq!(size_of::<TestRun>(), 80);
    }

    #[test]
    #[cfg(target_endian = "little")]
    fn source_program_encodes_as_expected() {
        let p = source_program(9, 1024, 64);
        // The bounds check jumps to the redirect.
        assert_eq!((p[4].code, p[4].regs, p[4].off), (0x2d, 0x34, 6));
        assert_eq!(p[4 + 1 + p[4].off as usize].imm, 9, "r1 = ifindex");
        assert_eq!((p[6].code, p[6].imm), (0x85, 7), "bpf_get_prandom_u32");
        assert_eq!((p[7].imm, p[8].imm, p[9].imm), (64, 1024, 16));
        assert_eq!((p[10].code, p[10].regs, p[10].off), (0x6b, 0x06, 34));
        assert_eq!((p[13].code, p[13].imm), (0x85, 23));
        assert_eq!(p[14].code, 0x95);
    }

    #[test]
    #[cfg(target_endian = "little")]
    fn program_encodes_as_expected() {
        let p = program(7);
        // r2 = *(u32 *)(r1 + 16)
        assert_eq!((p[0].code, p[0].regs, p[0].off), (0x61, 0x12, 16));
        // r1 = map fd 7 (pseudo map fd, second slot empty)
        assert_eq!((p[1].code, p[1].regs, p[1].imm), (0x18, 0x11, 7));
        assert_eq!((p[2].code, p[2].regs, p[2].imm), (0, 0, 0));
        assert_eq!((p[3].code, p[3].regs, p[3].imm), (0xb7, 0x03, 2));
        assert_eq!((p[4].code, p[4].imm), (0x85, 51));
        assert_eq!(p[5].code, 0x95);
        assert_eq!(obj_name("nb_xsk_redirect")[15], 0);
    }
}
