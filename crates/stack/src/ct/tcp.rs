//! TCP tracking: the state machine and window checks of Linux's
//! `nf_conntrack_proto_tcp.c` (its transition table, `tcp_in_window`'s four bounds with
//! window scaling, the RST rules, TIME_WAIT reopening), written from its documented
//! behaviour.
//!
//! Each direction keeps what Linux's `ip_ct_tcp_state` keeps: `end` (the highest
//! sequence number sent plus its length: td_end), `maxend` (the highest right edge of a
//! window the receiver advertised: td_maxend), `maxwin` (the largest window, scaled:
//! td_maxwin) and the window scale (RFC 7323 2.2: used only when both SYNs carried it).
//! A segment is in window when (sequence numbers compared modulo 2^32, RFC 9293 3.4):
//! I. `seq <= sender.maxend`, II. `end >= sender.end - receiver.maxwin`,
//! III. `ack <= receiver.end`, IV. `ack >= receiver.end - max(sender.maxwin, 66000)`.
//! A segment outside is invalid with the bound it broke, unless the connection is
//! liberal (`be_liberal`, or picked up mid-stream) and the segment is not a RST.

use netbatch_wire::tcp::{TcpFlags, TcpOption, TcpPacket};

/// A TCP connection's state (Linux's `tcp_conntrack`, its names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[repr(u8)]
pub enum TcpState {
    /// Nothing seen.
    #[default]
    None = 0,
    /// SYN seen from the originator.
    SynSent,
    /// SYN/ACK seen from the responder.
    SynRecv,
    /// The handshake's ACK seen, or a connection picked up mid-stream.
    Established,
    /// A FIN seen.
    FinWait,
    /// The FIN acknowledged; the other side still sending.
    CloseWait,
    /// Both FINs seen; the last one not acknowledged.
    LastAck,
    /// Closed both ways.
    TimeWait,
    /// Reset.
    Close,
    /// Simultaneous open: a SYN seen from both sides.
    SynSent2,
}

impl TcpState {
    /// Linux's name (`conntrack -L`).
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "NONE",
            Self::SynSent => "SYN_SENT",
            Self::SynRecv => "SYN_RECV",
            Self::Established => "ESTABLISHED",
            Self::FinWait => "FIN_WAIT",
            Self::CloseWait => "CLOSE_WAIT",
            Self::LastAck => "LAST_ACK",
            Self::TimeWait => "TIME_WAIT",
            Self::Close => "CLOSE",
            Self::SynSent2 => "SYN_SENT2",
        }
    }

    /// The state named `s` (Linux's name, any case).
    pub fn parse(s: &str) -> Option<Self> {
        ALL_STATES
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(s))
    }
}

const ALL_STATES: [TcpState; 10] = [
    TcpState::None,
    TcpState::SynSent,
    TcpState::SynRecv,
    TcpState::Established,
    TcpState::FinWait,
    TcpState::CloseWait,
    TcpState::LastAck,
    TcpState::TimeWait,
    TcpState::Close,
    TcpState::SynSent2,
];

/// What a transition gives: a state, "ignore" (accepted, the state left alone, as a
/// SYN/ACK the tracker cannot place), or "invalid".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum To {
    S(TcpState),
    Ig,
    Iv,
}

/// The kind of a segment, by its flags (Linux's `get_conntrack_index`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum Kind {
    /// SYN without ACK.
    Syn,
    /// SYN with ACK.
    SynAck,
    /// FIN.
    Fin,
    /// ACK alone.
    Ack,
    /// RST.
    Rst,
    /// None of these.
    #[default]
    None,
}

impl Kind {
    /// The kind of a segment with `flags`.
    pub fn of(flags: TcpFlags) -> Self {
        if flags.contains(TcpFlags::RST) {
            Self::Rst
        } else if flags.contains(TcpFlags::SYN) {
            if flags.contains(TcpFlags::ACK) {
                Self::SynAck
            } else {
                Self::Syn
            }
        } else if flags.contains(TcpFlags::FIN) {
            Self::Fin
        } else if flags.contains(TcpFlags::ACK) {
            Self::Ack
        } else {
            Self::None
        }
    }
}

use TcpState::{
    Close as CL, CloseWait as CW, Established as ES, FinWait as FW, LastAck as LA, SynRecv as SR,
    SynSent as SS, SynSent2 as S2, TimeWait as TW,
};
use To::{Ig, Iv, S};

/// The transitions, `[direction][kind][state]` (states in [`TcpState`] order: NONE,
/// SYN_SENT, SYN_RECV, ESTABLISHED, FIN_WAIT, CLOSE_WAIT, LAST_ACK, TIME_WAIT, CLOSE,
/// SYN_SENT2), as Linux's `tcp_conntracks` table has them. Direction 0 is the
/// originator's.
const TABLE: [[[To; 10]; 6]; 2] = [
    [
        // SYN: a new or retransmitted SYN; in TIME_WAIT or CLOSE it reopens.
        [S(SS), S(SS), Ig, Ig, Ig, Ig, Ig, S(SS), S(SS), S(S2)],
        // SYN/ACK from the originator: only in simultaneous open.
        [Iv, Iv, S(SR), Iv, Iv, Iv, Iv, Iv, Iv, S(SR)],
        // FIN.
        [Iv, Iv, S(FW), S(FW), S(LA), S(LA), S(LA), S(TW), S(CL), Iv],
        // ACK: picks up a connection from nothing (loose), completes the handshake.
        [
            S(ES),
            Iv,
            S(ES),
            S(ES),
            S(CW),
            S(CW),
            S(TW),
            S(TW),
            S(CL),
            Iv,
        ],
        // RST.
        [
            Iv,
            S(CL),
            S(CL),
            S(CL),
            S(CL),
            S(CL),
            S(CL),
            S(CL),
            S(CL),
            S(CL),
        ],
        // None of SYN, FIN, ACK, RST.
        [Iv; 10],
    ],
    [
        // SYN from the responder: simultaneous open.
        [Iv, S(S2), Iv, Iv, Iv, Iv, Iv, S(SS), Iv, S(S2)],
        // SYN/ACK: answers the SYN; a repeated one later is ignored.
        [Iv, S(SR), Ig, Ig, Ig, Ig, Ig, Ig, Ig, S(SR)],
        // FIN.
        [Iv, Iv, S(FW), S(FW), S(LA), S(LA), S(LA), S(TW), S(CL), Iv],
        // ACK: before the SYN/ACK it may belong to an old connection: ignored.
        [Iv, Ig, S(SR), S(ES), S(CW), S(CW), S(TW), S(TW), S(CL), Ig],
        // RST.
        [
            Iv,
            S(CL),
            S(CL),
            S(CL),
            S(CL),
            S(CL),
            S(CL),
            S(CL),
            S(CL),
            S(CL),
        ],
        // None.
        [Iv; 10],
    ],
];

/// Why a segment is invalid (each counted under its name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invalid {
    /// A combination of flags no TCP sends (SYN with FIN or RST, none of SYN, ACK, RST).
    BadFlags,
    /// The segment cannot start a connection (a SYN/ACK, FIN or RST without one; a
    /// non-SYN with `tcp_loose` off).
    New,
    /// Not a transition of the state machine from the connection's state.
    State,
    /// SEQ above the receiver's window (bound I).
    SeqOver,
    /// SEQ below what was acknowledged already (bound II).
    SeqUnder,
    /// ACK for data not seen yet (bound III).
    AckOver,
    /// ACK far below what was sent (bound IV).
    AckUnder,
    /// A RST in SYN_SENT that does not acknowledge the SYN (RFC 9293 3.10.7.3).
    RstAck,
}

impl Invalid {
    /// Every reason, in counter order.
    pub const ALL: [Self; 8] = [
        Self::BadFlags,
        Self::New,
        Self::State,
        Self::SeqOver,
        Self::SeqUnder,
        Self::AckOver,
        Self::AckUnder,
        Self::RstAck,
    ];

    /// Its counter name.
    pub fn name(self) -> &'static str {
        match self {
            Self::BadFlags => "tcp_invalid_flags",
            Self::New => "tcp_invalid_new",
            Self::State => "tcp_invalid_state",
            Self::SeqOver => "tcp_seq_over_window",
            Self::SeqUnder => "tcp_seq_under_window",
            Self::AckOver => "tcp_ack_over_sent",
            Self::AckUnder => "tcp_ack_under_window",
            Self::RstAck => "tcp_rst_bad_ack",
        }
    }
}

/// The tracker's settings (Linux's sysctls of the same names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpConfig {
    /// Pick up connections from a non-SYN segment (`nf_conntrack_tcp_loose`, default on).
    pub loose: bool,
    /// Mark only out-of-window RSTs invalid (`nf_conntrack_tcp_be_liberal`, default off).
    pub be_liberal: bool,
    /// Retransmissions of one segment before the shorter timeout
    /// (`nf_conntrack_tcp_max_retrans`, 3).
    pub max_retrans: u8,
}

impl Default for TcpConfig {
    fn default() -> Self {
        Self {
            loose: true,
            be_liberal: false,
            max_retrans: 3,
        }
    }
}

/// What a segment says to the tracker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Segment {
    /// Control bits.
    pub flags: u16,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgment number.
    pub ack: u32,
    /// Window field (unscaled).
    pub win: u16,
    /// Payload bytes (of every segment a super-packet carries).
    pub len: u32,
    /// The window scale option's shift (a SYN's).
    pub wscale: Option<u8>,
}

impl Segment {
    /// The segment whose TCP header is `h` (at least the fixed 20 bytes) carrying `len`
    /// payload bytes.
    pub fn read(h: &[u8], len: u32) -> Option<Self> {
        let t = TcpPacket::new_checked(h).ok()?;
        let flags = t.flags();
        let wscale = if flags.contains(TcpFlags::SYN) {
            t.options_iter().find_map(|o| match o {
                Ok(TcpOption::WindowScale(s)) => Some(s),
                _ => None,
            })
        } else {
            None
        };
        Some(Self {
            flags: flags.bits(),
            seq: t.seq_number(),
            ack: t.ack_number(),
            win: t.window(),
            len,
            wscale,
        })
    }

    fn has(&self, f: TcpFlags) -> bool {
        self.flags & f.bits() != 0
    }

    /// Sequence space the segment takes: payload, SYN and FIN.
    fn end(&self) -> u32 {
        self.seq
            .wrapping_add(self.len)
            .wrapping_add(u32::from(self.has(TcpFlags::SYN)))
            .wrapping_add(u32::from(self.has(TcpFlags::FIN)))
    }

    /// Whether the flags are a combination TCP sends (Linux's `tcp_valid_flags`: SYN,
    /// SYN/ACK, RST, RST/ACK, FIN/ACK, ACK, each with or without URG and PSH).
    pub fn valid_flags(&self) -> bool {
        const F: u16 = 0x01;
        const SY: u16 = 0x02;
        const R: u16 = 0x04;
        const P: u16 = 0x08;
        const A: u16 = 0x10;
        const U: u16 = 0x20;
        let f = self.flags & (F | SY | R | P | A | U) & !P;
        [SY, SY | U, SY | A, R, R | A, F | A, F | A | U, A, A | U].contains(&f)
    }
}

/// `a` after `b` in sequence space (RFC 9293 3.4).
#[inline(always)]
fn after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

#[inline(always)]
fn before(a: u32, b: u32) -> bool {
    after(b, a)
}

/// One direction's window state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Side {
    /// Highest sequence number sent plus its length (td_end).
    pub end: u32,
    /// Highest right edge the other side's windows allowed (td_maxend).
    pub maxend: u32,
    /// Largest window, scaled (td_maxwin); 0: nothing seen from this side.
    pub maxwin: u32,
    /// Window scale shift.
    pub scale: u8,
    /// `WSCALE`, `LIBERAL`, `MAXACK`, `UNACKED`.
    pub flags: u8,
    /// Highest ACK sent (td_maxack).
    pub maxack: u32,
}

const WSCALE: u8 = 1;
const LIBERAL: u8 = 8;
const UNACKED: u8 = 0x10;
const MAXACK: u8 = 0x20;

/// The largest window bound IV allows below the receiver's end (Linux's MAXACKWINCONST).
const MAXACKWIN: u32 = 66_000;

/// A TCP connection's tracking state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpConn {
    /// The state.
    pub state: TcpState,
    /// The originator's side and the responder's.
    pub seen: [Side; 2],
    last_dir: u8,
    last_kind: Kind,
    last_seq: u32,
    last_ack: u32,
    last_end: u32,
    last_win: u16,
    /// Retransmissions of the last segment.
    pub retrans: u8,
}

/// What the tracker says of a segment of a tracked connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Accepted; `assured` when this segment completed the handshake (the connection
    /// is worth keeping under pressure).
    Accept {
        /// The connection just became assured.
        assured: bool,
    },
    /// Accepted without changing the state (a segment the tracker cannot place, as
    /// Linux's "ignore").
    Ignore,
    /// Invalid, and why.
    Invalid(Invalid),
    /// A SYN reopening a connection in TIME_WAIT or CLOSE (RFC 9293 3.10.7.4, RFC 1122
    /// 4.2.2.13): the old entry goes and the SYN starts a new one.
    Reopen,
}

impl TcpConn {
    /// A connection started by segment `s` (the originator's first), or why it cannot
    /// start one (Linux's `tcp_new`).
    pub fn new(s: &Segment, cfg: &TcpConfig) -> Result<Self, Invalid> {
        if !s.valid_flags() {
            return Err(Invalid::BadFlags);
        }
        let kind = Kind::of(TcpFlags(s.flags));
        let mut c = Self::default();
        match transition(0, kind, TcpState::None) {
            S(TcpState::SynSent) => {
                let o = &mut c.seen[0];
                o.end = s.end();
                o.maxend = o.end;
                o.maxwin = u32::from(s.win).max(1);
                if let Some(w) = s.wscale {
                    o.scale = w.min(14);
                    o.flags |= WSCALE;
                }
                c.state = TcpState::SynSent;
            }
            S(TcpState::Established) if cfg.loose => {
                // Picked up mid-stream: the windows' scales are unknown, so both sides
                // are checked liberally (as Linux does for such a connection).
                let o = &mut c.seen[0];
                o.end = s.end();
                o.maxwin = u32::from(s.win).max(1);
                o.maxend = o.end.wrapping_add(o.maxwin);
                o.flags |= LIBERAL;
                c.seen[1].flags |= LIBERAL;
                c.state = TcpState::Established;
            }
            _ => return Err(Invalid::New),
        }
        c.last_kind = kind;
        c.last_seq = s.seq;
        c.last_ack = s.ack;
        c.last_end = s.end();
        c.last_win = s.win;
        Ok(c)
    }

    /// Tracks segment `s` travelling in direction `dir` (0: the originator's) (Linux's
    /// `nf_conntrack_tcp_packet`).
    pub fn packet(&mut self, dir: usize, s: &Segment, cfg: &TcpConfig) -> Verdict {
        if !s.valid_flags() {
            return Verdict::Invalid(Invalid::BadFlags);
        }
        let dir = dir & 1;
        let kind = Kind::of(TcpFlags(s.flags));
        let old = self.state;
        let to = transition(dir, kind, old);
        let new = match to {
            Iv => return Verdict::Invalid(Invalid::State),
            Ig => {
                self.note(dir, kind, s);
                return Verdict::Ignore;
            }
            S(n) => n,
        };
        if n_reopens(dir, kind, old) {
            return Verdict::Reopen;
        }
        if kind == Kind::Rst && old == TcpState::SynSent && dir == 1 {
            // RFC 9293 3.10.7.3: in SYN-SENT a reset is acceptable only when it
            // acknowledges the SYN.
            if !s.has(TcpFlags::ACK) || s.ack != self.seen[0].end {
                return Verdict::Invalid(Invalid::RstAck);
            }
        }
        if let Err(e) = self.in_window(dir, kind, s, old, cfg) {
            return Verdict::Invalid(e);
        }
        self.note(dir, kind, s);
        self.state = new;
        Verdict::Accept {
            assured: matches!(old, TcpState::SynRecv | TcpState::Established)
                && new == TcpState::Established,
        }
    }

    /// Records `s` as the last segment (and counts a retransmission of it).
    fn note(&mut self, dir: usize, kind: Kind, s: &Segment) {
        let end = s.end();
        if usize::from(self.last_dir) == dir
            && self.last_seq == s.seq
            && self.last_ack == s.ack
            && self.last_end == end
            && self.last_win == s.win
        {
            self.retrans = self.retrans.saturating_add(1);
        } else {
            self.last_dir = dir as u8;
            self.last_seq = s.seq;
            self.last_ack = s.ack;
            self.last_end = end;
            self.last_win = s.win;
            self.retrans = 0;
        }
        self.last_kind = kind;
    }

    /// Linux's `tcp_in_window`: the four bounds, then the windows' update.
    fn in_window(
        &mut self,
        dir: usize,
        kind: Kind,
        s: &Segment,
        old: TcpState,
        cfg: &TcpConfig,
    ) -> Result<(), Invalid> {
        let [a, b] = &mut self.seen;
        let (sender, receiver) = if dir == 0 { (a, b) } else { (b, a) };
        let syn = s.has(TcpFlags::SYN);
        let mut seq = s.seq;
        let mut end = s.end();
        let mut win = u32::from(s.win);
        if sender.maxwin == 0 {
            // The first segment from this side.
            if syn {
                sender.end = end;
                sender.maxend = end;
                sender.maxwin = win.max(1);
                if let Some(w) = s.wscale {
                    sender.scale = w.min(14);
                    sender.flags |= WSCALE;
                }
                // RFC 7323 2.2: scaling only when both SYNs carried the option.
                if sender.flags & receiver.flags & WSCALE == 0 {
                    sender.scale = 0;
                    receiver.scale = 0;
                }
            } else {
                sender.end = end;
                sender.maxwin = (win << sender.scale).max(1);
                sender.maxend = end.wrapping_add(sender.maxwin);
                if receiver.maxwin == 0 {
                    receiver.end = s.ack;
                    receiver.maxend = s.ack;
                }
            }
        } else if syn
            && ((old == TcpState::SynSent && dir == 0) || (old == TcpState::SynRecv && dir == 1))
            && after(end, sender.end)
        {
            // A SYN again with another initial sequence number: start this side over.
            sender.end = end;
            sender.maxend = end;
            sender.maxwin = win.max(1);
            sender.scale = s.wscale.map_or(0, |w| w.min(14));
            sender.flags = (sender.flags & !WSCALE) | if s.wscale.is_some() { WSCALE } else { 0 };
        }
        let rst = kind == Kind::Rst;
        let ack_set = s.has(TcpFlags::ACK);
        let ack = if !ack_set || (rst && s.ack == 0) {
            receiver.end
        } else {
            s.ack
        };
        if rst && seq == 0 && seq == end && old == TcpState::SynSent {
            // A RST answering a SYN with sequence 0 is checked by its ACK alone. Every
            // other segment is checked by its SEQ, data or not: older kernels let a
            // segment without data through on its ACK alone, the kernel this project's
            // differential runs against (conntrack_vs_kernel) marks a bare ACK half the
            // sequence space away invalid.
            seq = sender.end;
            end = sender.end;
        }
        let maxackwin = sender.maxwin.max(MAXACKWIN);
        let why = if after(seq, sender.maxend) {
            Some(Invalid::SeqOver)
        } else if before(end, sender.end.wrapping_sub(receiver.maxwin)) {
            Some(Invalid::SeqUnder)
        } else if after(ack, receiver.end) {
            Some(Invalid::AckOver)
        } else if before(ack, receiver.end.wrapping_sub(maxackwin)) {
            Some(Invalid::AckUnder)
        } else {
            None
        };
        if let Some(why) = why {
            let liberal = cfg.be_liberal || (sender.flags | receiver.flags) & LIBERAL != 0;
            if rst || !liberal {
                return Err(why);
            }
        }
        // Update the windows (in window, or liberal).
        if !syn {
            win <<= sender.scale;
        }
        if sender.maxwin < win {
            sender.maxwin = win;
        }
        if after(end, sender.end) {
            sender.end = end;
            sender.flags |= UNACKED;
        }
        if ack_set && (sender.flags & MAXACK == 0 || after(s.ack, sender.maxack)) {
            sender.maxack = s.ack;
            sender.flags |= MAXACK;
        }
        if receiver.maxwin != 0 && after(end, sender.maxend) {
            receiver.maxwin = receiver
                .maxwin
                .wrapping_add(end.wrapping_sub(sender.maxend));
        }
        let edge = ack.wrapping_add(win.max(1));
        if after(edge, receiver.maxend) {
            receiver.maxend = edge;
        }
        if ack == receiver.end {
            receiver.flags &= !UNACKED;
        }
        Ok(())
    }

    /// The timeout in seconds for the connection now (Linux: the state's, shortened to
    /// `tcp_max_retrans` after too many retransmissions, or to `tcp_unacknowledged`
    /// while data waits for its ACK).
    pub fn timeout(&self, t: &super::timeouts::Timeouts, cfg: &TcpConfig) -> u32 {
        let base = t.tcp(self.state);
        if self.retrans >= cfg.max_retrans && base > t.tcp_max_retrans {
            t.tcp_max_retrans
        } else if (self.seen[0].flags | self.seen[1].flags) & UNACKED != 0
            && base > t.tcp_unacknowledged
        {
            t.tcp_unacknowledged
        } else {
            base
        }
    }
}

/// The transition of a segment of `kind` in direction `dir` (0 or 1) from `state`.
#[expect(
    clippy::indexing_slicing,
    reason = "`dir` is masked to 0 or 1, `Kind` has 6 values and `TcpState` 10: the table's dimensions"
)]
fn transition(dir: usize, kind: Kind, state: TcpState) -> To {
    TABLE[dir & 1][kind as usize][state as usize]
}

/// A SYN from the originator in TIME_WAIT or CLOSE reopens the connection.
fn n_reopens(dir: usize, kind: Kind, old: TcpState) -> bool {
    dir == 0 && kind == Kind::Syn && matches!(old, TcpState::TimeWait | TcpState::Close)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SYN: u16 = 0x02;
    const ACK: u16 = 0x10;
    const FIN: u16 = 0x01;
    const RST: u16 = 0x04;
    const PSH: u16 = 0x08;

    fn seg(flags: u16, seq: u32, ack: u32, win: u16, len: u32) -> Segment {
        Segment {
            flags,
            seq,
            ack,
            win,
            len,
            wscale: None,
        }
    }

    /// A connection through its handshake: client ISN 1000, server ISN 5000, windows
    /// 64240 with scale 7 both ways (what Linux sends by default).
    fn handshake(cfg: &TcpConfig) -> TcpConn {
        let mut syn = seg(SYN, 1000, 0, 64240, 0);
        syn.wscale = Some(7);
        let mut c = TcpConn::new(&syn, cfg).unwrap();
        assert_eq!(c.state, TcpState::SynSent);
        let mut sa = seg(SYN | ACK, 5000, 1001, 65160, 0);
        sa.wscale = Some(7);
        assert_eq!(c.packet(1, &sa, cfg), Verdict::Accept { assured: false });
        assert_eq!(c.state, TcpState::SynRecv);
        assert_eq!(
            c.packet(0, &seg(ACK, 1001, 5001, 502, 0), cfg),
            Verdict::Accept { assured: true },
            "the handshake's ACK assures the connection (Linux: SYN_RECV → ESTABLISHED)"
        );
        assert_eq!(c.state, TcpState::Established);
        c
    }

    /// The four-way close walks FIN_WAIT, CLOSE_WAIT, LAST_ACK, TIME_WAIT as Linux's
    /// table does, and a new SYN in TIME_WAIT reopens (RFC 1122 4.2.2.13).
    #[test]
    fn handshake_data_and_close() {
        let cfg = TcpConfig::default();
        let mut c = handshake(&cfg);
        // 1000 bytes each way, in window.
        assert!(matches!(
            c.packet(0, &seg(ACK | PSH, 1001, 5001, 502, 1000), &cfg),
            Verdict::Accept { .. }
        ));
        assert!(matches!(
            c.packet(1, &seg(ACK | PSH, 5001, 2001, 509, 1000), &cfg),
            Verdict::Accept { .. }
        ));
        assert!(matches!(
            c.packet(0, &seg(FIN | ACK, 2001, 6001, 502, 0), &cfg),
            Verdict::Accept { .. }
        ));
        assert_eq!(c.state, TcpState::FinWait);
        assert!(matches!(
            c.packet(1, &seg(ACK, 6001, 2002, 509, 0), &cfg),
            Verdict::Accept { .. }
        ));
        assert_eq!(c.state, TcpState::CloseWait);
        assert!(matches!(
            c.packet(1, &seg(FIN | ACK, 6001, 2002, 509, 0), &cfg),
            Verdict::Accept { .. }
        ));
        assert_eq!(c.state, TcpState::LastAck);
        assert!(matches!(
            c.packet(0, &seg(ACK, 2002, 6002, 502, 0), &cfg),
            Verdict::Accept { .. }
        ));
        assert_eq!(c.state, TcpState::TimeWait);
        assert_eq!(
            c.packet(0, &seg(SYN, 90000, 0, 64240, 0), &cfg),
            Verdict::Reopen
        );
    }

    /// Out-of-window segments are invalid with the bound they break; with
    /// `be_liberal` only a RST is (nf_conntrack-sysctl.rst).
    #[test]
    fn window_bounds() {
        let cfg = TcpConfig::default();
        let base = handshake(&cfg);
        // The server's window is 65160 unscaled on its SYN, then 509 << 7 = 65152.
        let mut c = base;
        assert_eq!(
            c.packet(0, &seg(ACK, 1001 + 10_000_000, 5001, 502, 100), &cfg),
            Verdict::Invalid(Invalid::SeqOver)
        );
        let mut c = base;
        assert_eq!(
            c.packet(
                0,
                &seg(ACK, 1001u32.wrapping_sub(10_000_000), 5001, 502, 100),
                &cfg
            ),
            Verdict::Invalid(Invalid::SeqUnder)
        );
        let mut c = base;
        assert_eq!(
            c.packet(
                1,
                &seg(ACK, 5001u32.wrapping_add(0x8000_0000), 1001, 509, 0),
                &cfg
            ),
            Verdict::Invalid(Invalid::SeqOver),
            "a bare ACK half the sequence space away (the kernel: conntrack_vs_kernel)"
        );
        let mut c = base;
        assert_eq!(
            c.packet(0, &seg(ACK, 1001, 5001 + 70_000, 502, 0), &cfg),
            Verdict::Invalid(Invalid::AckOver),
            "acknowledges data the server never sent"
        );
        let mut c = base;
        assert_eq!(
            c.packet(
                0,
                &seg(ACK, 1001, 5001u32.wrapping_sub(200_000), 502, 0),
                &cfg
            ),
            Verdict::Invalid(Invalid::AckUnder)
        );
        let liberal = TcpConfig {
            be_liberal: true,
            ..cfg
        };
        let mut c = base;
        assert!(matches!(
            c.packet(0, &seg(ACK, 1001 + 10_000_000, 5001, 502, 100), &liberal),
            Verdict::Accept { .. }
        ));
        let mut c = base;
        assert_eq!(
            c.packet(1, &seg(RST, 5001 + 10_000_000, 0, 0, 0), &liberal),
            Verdict::Invalid(Invalid::SeqOver),
            "be_liberal still refuses an out-of-window RST"
        );
        let mut c = base;
        assert!(matches!(
            c.packet(1, &seg(RST, 5001, 0, 0, 0), &cfg),
            Verdict::Accept { .. }
        ));
        assert_eq!(c.state, TcpState::Close);
    }

    /// RFC 9293 3.10.7.3: a RST answering a SYN must acknowledge it.
    #[test]
    fn rst_in_syn_sent_must_ack_the_syn() {
        let cfg = TcpConfig::default();
        let syn = seg(SYN, 1000, 0, 64240, 0);
        let mut c = TcpConn::new(&syn, &cfg).unwrap();
        assert_eq!(
            c.packet(1, &seg(RST | ACK, 0, 999, 0, 0), &cfg),
            Verdict::Invalid(Invalid::RstAck)
        );
        assert_eq!(c.state, TcpState::SynSent);
        assert!(matches!(
            c.packet(1, &seg(RST | ACK, 0, 1001, 0, 0), &cfg),
            Verdict::Accept { .. }
        ));
        assert_eq!(c.state, TcpState::Close);
    }

    /// What cannot start a connection (Linux's table from NONE), and `tcp_loose`.
    #[test]
    fn new_connections() {
        let cfg = TcpConfig::default();
        for f in [SYN | ACK, FIN | ACK, RST, RST | ACK] {
            assert_eq!(
                TcpConn::new(&seg(f, 1, 1, 100, 0), &cfg).err(),
                Some(Invalid::New),
                "{f:#x}"
            );
        }
        for f in [SYN | FIN, SYN | RST, 0, FIN] {
            assert_eq!(
                TcpConn::new(&seg(f, 1, 1, 100, 0), &cfg).err(),
                Some(Invalid::BadFlags),
                "{f:#x}"
            );
        }
        // A bare ACK picks a connection up mid-stream (nf_conntrack_tcp_loose = 1) …
        let c = TcpConn::new(&seg(ACK, 1, 1, 100, 10), &cfg).unwrap();
        assert_eq!(c.state, TcpState::Established);
        // … and not with it off.
        let strict = TcpConfig {
            loose: false,
            ..cfg
        };
        assert_eq!(
            TcpConn::new(&seg(ACK, 1, 1, 100, 10), &strict).err(),
            Some(Invalid::New)
        );
    }

    /// An ACK from the responder before its SYN/ACK is ignored (Linux's sIG), and a
    /// SYN/ACK from the originator is invalid outside simultaneous open.
    #[test]
    fn ignored_and_invalid_transitions() {
        let cfg = TcpConfig::default();
        let mut c = TcpConn::new(&seg(SYN, 1000, 0, 64240, 0), &cfg).unwrap();
        assert_eq!(
            c.packet(1, &seg(ACK, 7, 1001, 100, 0), &cfg),
            Verdict::Ignore
        );
        assert_eq!(c.state, TcpState::SynSent);
        assert_eq!(
            c.packet(0, &seg(ACK, 1001, 7, 100, 0), &cfg),
            Verdict::Invalid(Invalid::State),
            "the originator's ACK before any SYN/ACK"
        );
    }

    /// Window scaling: only when both SYNs carry the option (RFC 7323 2.2); then the
    /// responder's later windows are shifted.
    #[test]
    fn window_scale_needs_both_syns() {
        let cfg = TcpConfig::default();
        let mut syn = seg(SYN, 1000, 0, 64240, 0);
        syn.wscale = Some(7);
        let mut c = TcpConn::new(&syn, &cfg).unwrap();
        // The SYN/ACK carries no scale: neither side scales.
        c.packet(1, &seg(SYN | ACK, 5000, 1001, 65535, 0), &cfg);
        assert_eq!((c.seen[0].scale, c.seen[1].scale), (0, 0));
        let c2 = handshake(&cfg);
        assert_eq!((c2.seen[0].scale, c2.seen[1].scale), (7, 7));
        // 100 kB past the client's end fits the server's scaled window (509 << 7) only
        // once scaled: the client may send 60000 bytes in one go.
        let mut c3 = c2;
        assert!(matches!(
            c3.packet(0, &seg(ACK, 1001, 5001, 502, 60_000), &cfg),
            Verdict::Accept { .. }
        ));
    }
}
