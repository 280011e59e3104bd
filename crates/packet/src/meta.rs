//! What the stack keeps in a packet's metadata beyond the engine's own fields: the
//! meaning of its flag bits and the kinds of super-packet.
//!
//! The engine reserves the top byte of `Meta::flags` ([`flag::RESERVED`]); every bit
//! below it is the stack's, declared here once. `flag` re-exports the engine's and the
//! ports' bits so that one namespace names them all.

/// Per-packet flag bits (in `Meta::flags`).
pub mod flag {
    pub use netbatch_engine::meta::flag::{
        HASH_VALID, L4_CSUM_OK, L4_CSUM_PARTIAL, RESERVED, TRACE,
    };

    /// L2 destination was one of our MAC addresses.
    pub const L2_HOST: u32 = 1 << 0;
    /// L2 destination was broadcast.
    pub const L2_BROADCAST: u32 = 1 << 1;
    /// L2 destination was a multicast group.
    pub const L2_MULTICAST: u32 = 1 << 2;
    /// The frame carried at least one VLAN tag (dissector).
    pub const VLAN: u32 = 1 << 3;
    /// The IPv4 header checksum has been verified.
    pub const IP_CSUM_OK: u32 = 1 << 4;
    /// The frame carried two VLAN tags (dissector).
    pub const QINQ: u32 = 1 << 5;
    /// An IPv6 packet with a Fragment header that is not atomic: a fragment of a larger
    /// datagram, first or later (dissector; RFC 8200 4.5, RFC 6946).
    pub const FRAG6: u32 = 1 << 6;
    /// An IPv6 fragment with a non-zero offset: `Meta::l4` is where its data starts, not
    /// an upper-layer header (dissector).
    pub const FRAG6_LATER: u32 = 1 << 7;
    /// The destination is one of our addresses (set by routing).
    pub const LOCAL: u32 = 1 << 8;
    /// The packet was originated by this host (not received).
    pub const ORIGINATED: u32 = 1 << 9;
    /// The packet was routed through the forwarding path.
    pub const FORWARDED: u32 = 1 << 10;
    /// L3 destination is a broadcast address (limited or directed).
    pub const L3_BROADCAST: u32 = 1 << 11;
    /// L3 destination is a multicast group.
    pub const L3_MULTICAST: u32 = 1 << 12;
    /// An IPv6 packet whose extension header chain `ip6-input` let through unwalked: a
    /// chain only a node that processes its headers may refuse (a hop-by-hop header not
    /// first, a header the walk cannot cross, one beyond the walk's bounds or cut by the
    /// payload length). A router forwards it unexamined (RFC 8200 4, RFC 7045 2.2);
    /// `ip6-route` refuses it on local delivery. `Meta::l4` is then 0.
    pub const EXT_UNWALKED: u32 = 1 << 13;
    /// `Meta::csum_payload` holds this buffer's payload sum (GRO recorded it).
    pub const PAYLOAD_SUM: u32 = 1 << 14;
    /// A super-packet built by GRO: every chained buffer keeps its own received headers
    /// in front of its data (at its `l3`), so GSO gives each segment its own headers
    /// back instead of building them.
    pub const GRO_CHAIN: u32 = 1 << 15;
    /// A datagram gathered from its fragments before connection tracking (the stack's
    /// `defrag`): this buffer is its first fragment, its later fragments are chained
    /// behind it in offset order, each with its own IP header; `segs` counts them all,
    /// `total_len` is the datagram's length. The confirm stages split it again.
    pub const DEFRAG_CHAIN: u32 = 1 << 16;
    /// The packet's connection is source-translated (its entry's `snat` status, as
    /// tracking found it): the NAT stages skip by these two bits the packets their hook
    /// does not change, without looking at the entry.
    pub const CT_SNAT: u32 = 1 << 17;
    /// The packet's connection is destination-translated (its entry's `dnat` status).
    pub const CT_DNAT: u32 = 1 << 18;
    /// Connection tracking saw the packet (`ct-in` or `ct-out`): [`CT_STATE`] and
    /// [`CT_REPLY`] say what it found. Without it the packet is untracked.
    pub const CT_TRACKED: u32 = 1 << 23;
    /// The packet travels in its connection's reply direction.
    pub const CT_REPLY: u32 = 1 << 22;
    /// Two bits: the packet's connection state (`stack::ct::CtState`: new, established,
    /// related, invalid) as `(flags & CT_STATE) >> CT_STATE_SHIFT`.
    pub const CT_STATE: u32 = (1 << 21) | (1 << 20);
    /// Where [`CT_STATE`] starts.
    pub const CT_STATE_SHIFT: u32 = 20;
    /// The packet's connection is new and not confirmed yet: its entry is allocated but
    /// in no hash chain until `ct-confirm` sees the packet leave its last hook.
    pub const CT_UNCONFIRMED: u32 = 1 << 19;

    /// Every stack bit, for the check that none is the engine's.
    const ALL: u32 = L2_HOST
        | L2_BROADCAST
        | L2_MULTICAST
        | VLAN
        | IP_CSUM_OK
        | QINQ
        | FRAG6
        | FRAG6_LATER
        | LOCAL
        | ORIGINATED
        | FORWARDED
        | L3_BROADCAST
        | L3_MULTICAST
        | EXT_UNWALKED
        | PAYLOAD_SUM
        | GRO_CHAIN
        | DEFRAG_CHAIN
        | CT_SNAT
        | CT_DNAT
        | CT_TRACKED
        | CT_REPLY
        | CT_STATE
        | CT_UNCONFIRMED;
    const _: () = assert!(ALL & RESERVED == 0, "a stack flag uses an engine bit");
}

/// Kinds of super-packet (in `Meta::gso_type`).
pub mod gso {
    /// A plain packet.
    pub const NONE: u8 = 0;
    /// TCP over IPv4, payload merged (standard GRO): segment at `gso_size` bytes.
    pub const TCPV4: u8 = 1;
    /// UDP over IPv4, payload merged (standard UDP GRO / UDP_SEGMENT).
    pub const UDPV4: u8 = 2;
    /// A chain of complete packets (fraglist GRO): each buffer in the chain is one
    /// wire packet with its own headers (pulled, so the data is its payload).
    pub const FRAGLIST_TCPV4: u8 = 3;
    /// As [`FRAGLIST_TCPV4`] for UDP.
    pub const FRAGLIST_UDPV4: u8 = 4;
    /// TCP over IPv6, payload merged.
    pub const TCPV6: u8 = 5;
    /// UDP over IPv6, payload merged.
    pub const UDPV6: u8 = 6;
    /// A fraglist chain of TCP over IPv6.
    pub const FRAGLIST_TCPV6: u8 = 7;
    /// A fraglist chain of UDP over IPv6.
    pub const FRAGLIST_UDPV6: u8 = 8;
    /// Flag bit: the segments share one IPv4 identification (GRO saw them fixed), so GSO
    /// must not increment it.
    pub const FIXED_ID: u8 = 0x80;
    /// Mask of the kind without flag bits.
    pub const KIND: u8 = 0x7f;
}

/// What a stage reads or writes of a packet's metadata, in groups of fields and flags
/// that travel together (a stage's declaration says which: the stack's `declare::Decl`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Field {
    /// `in_port`: the port the packet arrived on.
    InPort,
    /// `in_if`: the (sub-)interface it arrived on.
    InIf,
    /// The link header's class: [`flag::L2_HOST`], [`flag::L2_BROADCAST`],
    /// [`flag::L2_MULTICAST`].
    L2Class,
    /// The dissector's record of the link and IP headers: `l2_len`, `l3`, `l3_type`,
    /// [`flag::VLAN`], [`flag::QINQ`].
    L3,
    /// The dissector's record of the upper layer: `l4`, `l4_type`, [`flag::FRAG6`],
    /// [`flag::FRAG6_LATER`], [`flag::EXT_UNWALKED`].
    L4,
    /// Checksum state: [`flag::IP_CSUM_OK`], [`flag::L4_CSUM_OK`],
    /// [`flag::L4_CSUM_PARTIAL`], [`flag::PAYLOAD_SUM`] and `csum_payload`.
    Csum,
    /// Routing's verdict on the destination: [`flag::LOCAL`], [`flag::L3_BROADCAST`],
    /// [`flag::L3_MULTICAST`].
    Dest,
    /// Where the packet comes from: [`flag::ORIGINATED`], [`flag::FORWARDED`].
    Origin,
    /// `out_if`: the interface it leaves by.
    OutIf,
    /// `adj`: the adjacency routing chose.
    Adj,
    /// `ask`: a request for an ICMP error (its cause and parameter,
    /// `netbatch_stack::ask::Request`).
    Ask,
    /// `mark`: the firewall mark.
    Mark,
    /// A super-packet's shape: `gso_size`, `gso_type`, `segs`, `chain`,
    /// [`flag::GRO_CHAIN`], [`flag::DEFRAG_CHAIN`].
    Gso,
    /// `hash` and [`flag::HASH_VALID`]: the flow hash.
    Hash,
    /// Connection tracking's verdict: [`flag::CT_TRACKED`], [`flag::CT_REPLY`],
    /// [`flag::CT_STATE`], [`flag::CT_UNCONFIRMED`] (untracked when reset).
    Ct,
}

impl Field {
    /// Every field, in bit order.
    pub const ALL: [Self; 15] = [
        Self::InPort,
        Self::InIf,
        Self::L2Class,
        Self::L3,
        Self::L4,
        Self::Csum,
        Self::Dest,
        Self::Origin,
        Self::OutIf,
        Self::Adj,
        Self::Ask,
        Self::Mark,
        Self::Gso,
        Self::Hash,
        Self::Ct,
    ];

    /// Its name in messages.
    pub const fn name(self) -> &'static str {
        match self {
            Self::InPort => "in_port",
            Self::InIf => "in_if",
            Self::L2Class => "l2 class",
            Self::L3 => "l3",
            Self::L4 => "l4",
            Self::Csum => "checksum state",
            Self::Dest => "destination class",
            Self::Origin => "origin",
            Self::OutIf => "out_if",
            Self::Adj => "adj",
            Self::Ask => "ask",
            Self::Mark => "mark",
            Self::Gso => "gso",
            Self::Hash => "hash",
            Self::Ct => "conntrack state",
        }
    }
}

/// A set of [`Field`]s.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Fields(u32);

impl Fields {
    /// No field.
    pub const NONE: Self = Self(0);

    /// The fields `fs`.
    pub const fn of(fs: &[Field]) -> Self {
        let mut bits = 0;
        let mut rest = fs;
        while let [f, tail @ ..] = rest {
            bits |= 1 << *f as u8;
            rest = tail;
        }
        Self(bits)
    }

    /// Those of either set.
    pub const fn union(self, o: Self) -> Self {
        Self(self.0 | o.0)
    }

    /// Those of `self` not in `o`.
    pub const fn without(self, o: Self) -> Self {
        Self(self.0 & !o.0)
    }

    /// Whether `f` is in the set.
    pub const fn has(self, f: Field) -> bool {
        self.0 & (1 << f as u8) != 0
    }

    /// The fields of the set, in bit order.
    pub fn iter(self) -> impl Iterator<Item = Field> {
        Field::ALL.into_iter().filter(move |&f| self.has(f))
    }
}

impl core::fmt::Debug for Fields {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_set().entries(self.iter().map(Field::name)).finish()
    }
}

/// What the receive path writes before the graph sees a packet: the port (`in_port`),
/// the device's flow hash and checksum verdicts, and a super-packet's shape (a tap's
/// virtio header).
pub const RECEIVE: Fields = Fields::of(&[Field::InPort, Field::Hash, Field::Csum, Field::Gso]);

/// The fields whose reset value (every buffer's on allocation) is an answer a stage may
/// read without any stage having written it: unmarked, received, a plain packet,
/// untracked.
pub const TEMPLATE: Fields = Fields::of(&[Field::Mark, Field::Origin, Field::Gso, Field::Ct]);
