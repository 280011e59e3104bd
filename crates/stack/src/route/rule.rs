//! Policy routing: rules that choose which route table routes a packet, as Linux's `ip
//! rule` has them, and numbered tables.
//!
//! # Rules
//!
//! A rule ([`RuleOf`]) has a priority (`pref`), selectors and an action. The rules are
//! kept in priority order (rules of equal priority in the order they were added, as Linux
//! inserts them) and walked from the first for every packet (or once for a run of
//! packets with the same [`KeyOf`]), as Linux's `fib_rules_lookup` walks its list:
//!
//! - A rule *matches* when every selector it has holds: `from`/`to` (the source and
//!   destination lie in the prefix), `iif` (the interface the packet came in by, by its
//!   index among netbatch's interfaces), `fwmark` (`(mark ^ value) & mask == 0`),
//!   `ipproto`, `sport`/`dport` (inclusive ranges, 1 to 65534 as the kernel takes them),
//!   `tos` (see below); `not` inverts the whole match.
//! - A matching rule's action: `lookup TABLE` looks the destination up in the table; a
//!   route found ends the walk with that route, whatever its kind (a blackhole,
//!   unreachable or prohibit route ends it with that drop); no route, a `throw` route or a
//!   table that does not exist continue with the next rule. `blackhole`, `unreachable`,
//!   `prohibit` end the walk with that drop. `nop` continues. `goto PREF` continues at the
//!   first rule whose priority is exactly `PREF`; when no rule has it (Linux's
//!   "unresolved" goto) the walk continues with the next rule, as after a `nop`. A goto
//!   only jumps forward (Linux refuses `PREF ≤` the rule's own), so the walk ends.
//! - `suppress_prefixlength N` on a lookup rule refuses a found unicast, local or
//!   broadcast route whose prefix is `N` bits or shorter: the walk continues with the next
//!   rule (`ip rule add lookup main suppress_prefixlength 0`: everything but the default
//!   route). It does not apply to a blackhole, unreachable or prohibit route, which ends
//!   the walk as always (the kernel calls its suppress hook only after a successful
//!   lookup).
//! - When no rule decides, there is no route (Linux answers `ENETUNREACH`: ICMP network
//!   unreachable, as for an `unreachable` rule).
//!
//! The default rules are Linux's: `0: lookup local`, `32766: lookup main` and, for IPv4
//! only, `32767: lookup default` ([`Family::DEFAULT_RULES`]). With them, and no table
//! `default`, the walk is exactly the single-table lookup netbatch does without rules, so
//! the datapath asks the rules only when they differ ([`RulesOf::is_default`]).
//!
//! # Tables
//!
//! A table is a [`RoutesOf`], looked up with its own FIB; numbered tables are 1 to
//! 2³²−1 except 0 (no table) and 255. netbatch keeps its local and broadcast routes (those
//! its interfaces' addresses imply) in `main` (254), where Linux keeps them in `local`
//! (255): table `local` is therefore a view of `main` in which only local and broadcast
//! routes are found. This is Linux's answer as long as `0: lookup local` comes first,
//! which is why that rule cannot be removed ([`RuleError::LocalRule`]): every destination
//! that is one of our addresses or a directed broadcast is delivered locally before any
//! other rule is asked, and the local and broadcast routes in `main` are never reached
//! by a later lookup of `main`.
//!
//! # TOS
//!
//! Linux 6.x compares a rule's `tos` with the packet's DS field through
//! [`Family::RULE_TOS_MASK`]: for IPv4 only the three bits of the old TOS field (`0x1c`,
//! `IPTOS_RT_MASK`: a rule `tos 0x10` matches DS field 0x10, 0x11, 0x30 and 0xb0, not
//! 0x14), for IPv6 the whole DSCP (`0xfc`: `tos 0x10` matches traffic class 0x10 to 0x13).
//! A rule's `tos` may set no other bit (the kernel refuses ECN bits, and for IPv4 any
//! bit above the TOS field); `tos 0` is no selector.
//!
//! # Not supported
//!
//! `oif` (it selects only routes of packets we send), `uidrange`, `tun_id`, `l3mdev`,
//! `suppress_ifgroup`, `realms` and `nat`; rules for packets netbatch originates (`iif
//! lo`): `ip4-local-out` and `ip6-local-out` route by `main`.

use core::fmt;
use std::collections::BTreeMap;

use super::{Family, HopOf, RouteKind, RoutesOf};

/// The table `lookup default` names (Linux's `RT_TABLE_DEFAULT`).
pub const TABLE_DEFAULT: u32 = 253;
/// The main table (Linux's `RT_TABLE_MAIN`): netbatch's route table.
pub const TABLE_MAIN: u32 = 254;
/// The local table (Linux's `RT_TABLE_LOCAL`): a view of `main` (see the module
/// documentation).
pub const TABLE_LOCAL: u32 = 255;

/// The most rules a family's set may hold.
pub const MAX_RULES: usize = 4096;

/// The action of a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Look the destination up in this table.
    Lookup(u32),
    /// Go on at the first rule of this priority.
    Goto(u32),
    /// Go on with the next rule.
    Nop,
    /// Drop silently.
    Blackhole,
    /// Drop with ICMP network unreachable.
    Unreachable,
    /// Drop with ICMP administratively prohibited.
    Prohibit,
}

/// A `fwmark` selector: the packet's mark matches when `(mark ^ value) & mask == 0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Mark {
    /// The bits compared.
    pub value: u32,
    /// Which bits are compared.
    pub mask: u32,
}

impl Mark {
    /// `fwmark VALUE[/MASK]` as Linux reads it: without a mask, every bit is compared,
    /// except for `fwmark 0`, which then compares none (matches every packet).
    pub fn linux(value: u32, mask: Option<u32>) -> Self {
        let mask = mask.unwrap_or(if value == 0 { 0 } else { u32::MAX });
        Self { value, mask }
    }

    /// Whether `mark` matches.
    #[inline(always)]
    pub fn matches(self, mark: u32) -> bool {
        (mark ^ self.value) & self.mask == 0
    }
}

/// An inclusive range of ports for `sport`/`dport`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PortRange {
    lo: u16,
    hi: u16,
}

impl PortRange {
    /// `lo-hi`: `1 ≤ lo ≤ hi ≤ 65534`, the ranges the kernel takes (it refuses port 0
    /// and 65535 in a range).
    pub fn new(lo: u16, hi: u16) -> Result<Self, RuleError> {
        if lo == 0 || hi == u16::MAX || lo > hi {
            return Err(RuleError::Ports(lo, hi));
        }
        Ok(Self { lo, hi })
    }

    /// The first port.
    pub fn lo(self) -> u16 {
        self.lo
    }

    /// The last port.
    pub fn hi(self) -> u16 {
        self.hi
    }

    /// Whether `port` is in the range.
    #[inline(always)]
    pub fn contains(self, port: u16) -> bool {
        (self.lo..=self.hi).contains(&port)
    }
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.lo == self.hi {
            write!(f, "{}", self.lo)
        } else {
            write!(f, "{}-{}", self.lo, self.hi)
        }
    }
}

/// A policy rule of family `F`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RuleOf<F: Family> {
    /// Priority: lower first.
    pub pref: u32,
    /// `not`: the rule matches the packets its selectors do not.
    pub not: bool,
    /// `from PREFIX`: the source lies in it.
    pub from: Option<F::Prefix>,
    /// `to PREFIX`: the destination lies in it.
    pub to: Option<F::Prefix>,
    /// `iif`: the index of the interface the packet came in by.
    pub iif: Option<u16>,
    /// `fwmark`.
    pub fwmark: Option<Mark>,
    /// `ipproto`.
    pub ipproto: Option<u8>,
    /// `sport`.
    pub sport: Option<PortRange>,
    /// `dport`.
    pub dport: Option<PortRange>,
    /// `tos` (nonzero, within [`Family::RULE_TOS_MASK`]).
    pub tos: Option<u8>,
    /// What a matching rule does.
    pub action: Action,
    /// `suppress_prefixlength N` (lookup rules).
    pub suppress_prefixlength: Option<u8>,
}

/// An IPv4 rule.
pub type Rule = RuleOf<super::V4>;
/// An IPv6 rule.
pub type Rule6 = RuleOf<super::V6>;

impl<F: Family> RuleOf<F> {
    /// A rule with no selectors and action `action`.
    pub fn new(pref: u32, action: Action) -> Self {
        Self {
            pref,
            not: false,
            from: None,
            to: None,
            iif: None,
            fwmark: None,
            ipproto: None,
            sport: None,
            dport: None,
            tos: None,
            action,
            suppress_prefixlength: None,
        }
    }

    /// Whether the rule matches `k` (its selectors, then `not`).
    #[inline]
    pub fn matches(&self, k: &KeyOf<F>) -> bool {
        let hit = self.from.is_none_or(|p| F::prefix_contains(&p, k.src))
            && self.to.is_none_or(|p| F::prefix_contains(&p, k.dst))
            && self.iif.is_none_or(|i| i == k.iif)
            && self.fwmark.is_none_or(|m| m.matches(k.mark))
            && self.ipproto.is_none_or(|p| p == k.proto)
            && self.sport.is_none_or(|r| r.contains(k.sport))
            && self.dport.is_none_or(|r| r.contains(k.dport))
            && self.tos.is_none_or(|t| k.tos & F::RULE_TOS_MASK == t);
        hit != self.not
    }

    /// Checks what the kernel checks of one rule on its own.
    fn check(&self) -> Result<(), RuleError> {
        match self.action {
            Action::Lookup(0) => return Err(RuleError::TableZero),
            Action::Goto(t) if t <= self.pref => {
                return Err(RuleError::BackwardGoto {
                    pref: self.pref,
                    target: t,
                });
            }
            _ => {}
        }
        if let Some(t) = self.tos
            && (t == 0 || t & !F::RULE_TOS_MASK != 0)
        {
            return Err(RuleError::Tos {
                tos: t,
                mask: F::RULE_TOS_MASK,
            });
        }
        Ok(())
    }

    /// The rule in `ip rule` syntax (`PREF: [not] from … ACTION`), interfaces named by
    /// `iif_name`.
    pub fn describe(&self, iif_name: impl Fn(u16) -> String) -> String {
        use fmt::Write as _;
        let mut s = format!("{}:\t", self.pref);
        if self.not {
            s.push_str("not ");
        }
        match &self.from {
            Some(p) => {
                let _ = write!(s, "from {p}");
            }
            None => s.push_str("from all"),
        }
        if let Some(p) = &self.to {
            let _ = write!(s, " to {p}");
        }
        if let Some(t) = self.tos {
            let _ = write!(s, " tos {t:#04x}");
        }
        if let Some(m) = self.fwmark {
            let _ = write!(s, " fwmark {:#x}/{:#x}", m.value, m.mask);
        }
        if let Some(i) = self.iif {
            let _ = write!(s, " iif {}", iif_name(i));
        }
        if let Some(p) = self.ipproto {
            let _ = write!(s, " ipproto {p}");
        }
        if let Some(r) = self.sport {
            let _ = write!(s, " sport {r}");
        }
        if let Some(r) = self.dport {
            let _ = write!(s, " dport {r}");
        }
        let _ = match self.action {
            Action::Lookup(t) => write!(s, " lookup {}", table_name(t)),
            Action::Goto(t) => write!(s, " goto {t}"),
            Action::Nop => write!(s, " nop"),
            Action::Blackhole => write!(s, " blackhole"),
            Action::Unreachable => write!(s, " unreachable"),
            Action::Prohibit => write!(s, " prohibit"),
        };
        if let Some(n) = self.suppress_prefixlength {
            let _ = write!(s, " suppress_prefixlength {n}");
        }
        s
    }
}

/// A table's name as `ip rule` writes it: `local`, `main`, `default`, or its number.
pub fn table_name(id: u32) -> String {
    match id {
        TABLE_LOCAL => "local".into(),
        TABLE_MAIN => "main".into(),
        TABLE_DEFAULT => "default".into(),
        n => n.to_string(),
    }
}

/// Why a rule was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleError {
    /// `lookup 0`: table 0 is no table.
    TableZero,
    /// A goto to its own priority or an earlier one (the kernel refuses these: a walk
    /// must end).
    BackwardGoto {
        /// The rule's priority.
        pref: u32,
        /// The goto's target.
        target: u32,
    },
    /// A `tos` with bits the family's rules do not compare, or 0.
    Tos {
        /// The value given.
        tos: u8,
        /// The bits allowed.
        mask: u8,
    },
    /// A port range outside `1 ≤ lo ≤ hi ≤ 65534`.
    Ports(u16, u16),
    /// The rule `0: lookup local` cannot be removed (netbatch's local routes live in
    /// `main`: see the module documentation).
    LocalRule,
    /// More than [`MAX_RULES`].
    TooMany,
    /// More than [`MAX_TABLES`] numbered tables with routes (this many).
    TooManyTables(usize),
    /// No rule is like the one to remove.
    NotFound,
    /// The kernel would take the rule for the one at `index` ([`RulesOf::like`]) and
    /// refuse it (`File exists`).
    Exists {
        /// The rule's priority.
        pref: u32,
        /// The index of the rule like it.
        index: usize,
    },
}

impl fmt::Display for RuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::TableZero => f.write_str("table 0 is no table (1 to 4294967295)"),
            Self::BackwardGoto { pref, target } => write!(
                f,
                "goto {target} from priority {pref}: a goto must jump forward (to a priority above its own)"
            ),
            Self::Tos { tos, mask } => write!(
                f,
                "tos {tos:#04x}: a rule's tos is nonzero and sets only bits of {mask:#04x}"
            ),
            Self::Ports(lo, hi) => write!(
                f,
                "port range {lo}-{hi}: ports 1 to 65534, the first not above the last"
            ),
            Self::LocalRule => f.write_str(
                "the rule '0: lookup local' stays: netbatch keeps its local routes in main",
            ),
            Self::TooMany => write!(f, "more than {MAX_RULES} rules"),
            Self::TooManyTables(n) => write!(
                f,
                "{n} numbered tables with routes (at most {MAX_TABLES} per family)"
            ),
            Self::NotFound => f.write_str("no such rule"),
            Self::Exists { pref, .. } => write!(
                f,
                "a rule of priority {pref} like it is already there (the same action and \
                 selectors, or more of them): Linux refuses it (File exists)"
            ),
        }
    }
}

impl std::error::Error for RuleError {}

/// What a packet is routed by: the fields policy rules select on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyOf<F: Family> {
    /// Source address bits.
    pub src: F::Bits,
    /// Destination address bits.
    pub dst: F::Bits,
    /// The interface the packet came in by.
    pub iif: u16,
    /// The packet's mark.
    pub mark: u32,
    /// The upper-layer protocol.
    pub proto: u8,
    /// Source port (0 for a protocol without ports, and for later fragments).
    pub sport: u16,
    /// Destination port (as `sport`).
    pub dport: u16,
    /// The IPv4 TOS byte or IPv6 traffic class (the DS field and ECN).
    pub tos: u8,
}

impl<F: Family> KeyOf<F> {
    /// Whether `self` and `o` are equal, every field compared (no early exit: a run's
    /// keys are mostly equal, and the compares are cheaper than the branches).
    #[inline(always)]
    pub fn same(&self, o: &Self) -> bool {
        (self.src == o.src)
            & (self.dst == o.dst)
            & (self.iif == o.iif)
            & (self.mark == o.mark)
            & (self.proto == o.proto)
            & (self.sport == o.sport)
            & (self.dport == o.dport)
            & (self.tos == o.tos)
    }
}

/// An IPv4 key.
pub type Key = KeyOf<super::V4>;
/// An IPv6 key.
pub type Key6 = KeyOf<super::V6>;

/// How a rule's action drops a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// `blackhole`: silently (Linux: `EINVAL`).
    Blackhole,
    /// `unreachable`: ICMP network unreachable (Linux: `ENETUNREACH`).
    Unreachable,
    /// `prohibit`: ICMP administratively prohibited (Linux: `EACCES`).
    Prohibit,
}

/// What the rules decided for a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecisionOf<F: Family> {
    /// The route a lookup found: in `table`, by the rule at index `rule`; its hop's kind
    /// says what to do (a blackhole, unreachable or prohibit route drops; never
    /// [`RouteKind::Throw`]), `adj` is what routing writes in `Meta::adj`.
    Route {
        /// The table.
        table: u32,
        /// The index of the deciding rule ([`RulesOf::iter`]'s order).
        rule: usize,
        /// The adjacency.
        adj: u32,
        /// The hop.
        hop: HopOf<F>,
    },
    /// A rule's action dropped the packet.
    Refused {
        /// The index of the deciding rule.
        rule: usize,
        /// How.
        how: Refusal,
    },
    /// No rule decided: no route.
    NoRoute,
}

/// The ICMP causes of a family a rule walk can end in (`ip4::Cause`, `ip6::Cause`).
pub trait WalkCauses: Copy {
    /// No rule decided: no route.
    const NO_ROUTE: Self;
    /// An `unreachable` rule.
    const RULE_UNREACHABLE: Self;
    /// A `prohibit` rule.
    const RULE_PROHIBIT: Self;
}

/// A decision as a routing stage acts on it: a hop acted on as a lookup's, a silent drop
/// (`blackhole`), or an ICMP error of the family's cause `C`.
#[derive(Debug, Clone, Copy)]
pub enum Policed<F: Family, C> {
    /// A route's adjacency and hop.
    Hop(u32, HopOf<F>),
    /// Dropped without an error.
    Drop(netbatch_engine::Reason),
    /// Sent to ICMP with this cause.
    Error(C),
}

impl<F: Family, C: WalkCauses> Policed<F, C> {
    /// What the stage does with decision `d`.
    #[inline]
    pub fn of(d: DecisionOf<F>) -> Self {
        match d {
            DecisionOf::Route { adj, hop, .. } => Self::Hop(adj, hop),
            DecisionOf::Refused { how, .. } => match how {
                Refusal::Blackhole => Self::Drop(super::reason::RULE_BLACKHOLE),
                Refusal::Unreachable => Self::Error(C::RULE_UNREACHABLE),
                Refusal::Prohibit => Self::Error(C::RULE_PROHIBIT),
            },
            DecisionOf::NoRoute => Self::Error(C::NO_ROUTE),
        }
    }
}

/// An IPv4 decision.
pub type Decision = DecisionOf<super::V4>;
/// An IPv6 decision.
pub type Decision6 = DecisionOf<super::V6>;

/// The route tables rules look up, by number.
pub trait Tables<F: Family> {
    /// Table `id`, or `None` for a table that does not exist (which is empty). Never
    /// asked for [`TABLE_LOCAL`], which is a view of [`TABLE_MAIN`].
    fn table(&self, id: u32) -> Option<&RoutesOf<F>>;

    /// The table `lookup local` is a view of: [`TABLE_MAIN`]'s, or a VRF's for its
    /// packets ([`PolicyOf`]).
    fn local(&self) -> Option<&RoutesOf<F>> {
        self.table(TABLE_MAIN)
    }
}

impl<F: Family> Tables<F> for BTreeMap<u32, RoutesOf<F>> {
    fn table(&self, id: u32) -> Option<&RoutesOf<F>> {
        self.get(&id)
    }
}

/// A family's rules, in priority order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RulesOf<F: Family> {
    rules: Vec<RuleOf<F>>,
    /// For each rule, the index its goto continues at: the first rule whose priority is
    /// the target, or (unresolved, or no goto) the next rule.
    next: Vec<usize>,
}

/// The IPv4 rules.
pub type Rules = RulesOf<super::V4>;
/// The IPv6 rules.
pub type Rules6 = RulesOf<super::V6>;

impl<F: Family> Default for RulesOf<F> {
    fn default() -> Self {
        Self::new()
    }
}

impl<F: Family> RulesOf<F> {
    /// Linux's default rules for the family.
    pub fn new() -> Self {
        let mut r = Self {
            rules: F::DEFAULT_RULES
                .iter()
                .map(|&(pref, table)| RuleOf::new(pref, Action::Lookup(table)))
                .collect(),
            next: Vec::new(),
        };
        r.resolve();
        r
    }

    /// Whether these are exactly the default rules.
    pub fn is_default(&self) -> bool {
        self.rules.len() == F::DEFAULT_RULES.len()
            && self
                .rules
                .iter()
                .zip(F::DEFAULT_RULES)
                .all(|(r, &(pref, table))| *r == RuleOf::new(pref, Action::Lookup(table)))
    }

    /// The rules, in the order they are asked.
    pub fn iter(&self) -> impl Iterator<Item = &RuleOf<F>> {
        self.rules.iter()
    }

    /// Number of rules.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Whether there are no rules (never: the local rule stays).
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The tables the rules look up (each once, ascending; `local` as `main`).
    pub fn tables(&self) -> Vec<u32> {
        let mut t: Vec<u32> = self
            .rules
            .iter()
            .filter_map(|r| match r.action {
                Action::Lookup(TABLE_LOCAL) => Some(TABLE_MAIN),
                Action::Lookup(t) => Some(t),
                _ => None,
            })
            .collect();
        t.sort_unstable();
        t.dedup();
        t
    }

    /// The priority Linux gives a rule added without one: one below the second rule's,
    /// or 0 when that is 0 or there is no second rule.
    pub fn default_pref(&self) -> u32 {
        self.rules.get(1).map_or(0, |r| r.pref.saturating_sub(1))
    }

    /// Adds `rule` after every rule of its priority or a lower one (Linux's order). A
    /// `/0` prefix and `fwmark 0/0` are stored as no selector (they match every packet).
    /// A rule the kernel would take for one already there is refused
    /// ([`RuleError::Exists`], see [`RulesOf::like`]).
    pub fn add(&mut self, mut rule: RuleOf<F>) -> Result<(), RuleError> {
        rule.check()?;
        if self.rules.len() >= MAX_RULES {
            return Err(RuleError::TooMany);
        }
        rule.from = rule.from.filter(|p| F::prefix_len(p) != 0);
        rule.to = rule.to.filter(|p| F::prefix_len(p) != 0);
        rule.fwmark = rule.fwmark.filter(|m| *m != Mark { value: 0, mask: 0 });
        if let Some(i) = self.like(&rule) {
            return Err(RuleError::Exists {
                pref: rule.pref,
                index: i,
            });
        }
        let at = self.rules.partition_point(|r| r.pref <= rule.pref);
        self.rules.insert(at, rule);
        self.resolve();
        Ok(())
    }

    /// The index of a rule the kernel would take `new` for (its `rule_exists`, which
    /// refuses an `ip rule add` with `EEXIST`): the same priority, action (a goto's
    /// target aside), interface, mark and mask, protocol, ports and
    /// `suppress_prefixlength`, and the same `from`, `to` and `tos` where `new` has them;
    /// `not` is not compared either. So a rule without a destination is refused after one
    /// with a destination and otherwise the same, not the other way round.
    pub fn like(&self, new: &RuleOf<F>) -> Option<usize> {
        let same_action = |a: Action, b: Action| match (a, b) {
            (Action::Goto(_), Action::Goto(_)) => true,
            (a, b) => a == b,
        };
        self.rules.iter().position(|r| {
            r.pref == new.pref
                && same_action(r.action, new.action)
                && r.iif == new.iif
                && r.fwmark == new.fwmark
                && r.suppress_prefixlength == new.suppress_prefixlength
                && r.ipproto == new.ipproto
                && r.sport == new.sport
                && r.dport == new.dport
                && new.from.is_none_or(|p| r.from == Some(p))
                && new.to.is_none_or(|p| r.to == Some(p))
                && new.tos.is_none_or(|t| r.tos == Some(t))
        })
    }

    /// Removes the first rule for which `which` holds (`ip rule del` removes the first
    /// rule like the one it is given).
    pub fn remove(&mut self, which: impl Fn(&RuleOf<F>) -> bool) -> Result<RuleOf<F>, RuleError> {
        let i = self
            .rules
            .iter()
            .position(which)
            .ok_or(RuleError::NotFound)?;
        if self.rules.get(i) == Some(&RuleOf::new(0, Action::Lookup(TABLE_LOCAL))) {
            return Err(RuleError::LocalRule);
        }
        let r = self.rules.remove(i);
        self.resolve();
        Ok(r)
    }

    /// Where each rule's walk goes on when it is passed over or is a goto.
    fn resolve(&mut self) {
        let rules = &self.rules;
        self.next = rules
            .iter()
            .enumerate()
            .map(|(i, r)| match r.action {
                // The rules are sorted: the first of priority `t` is at the partition
                // point of those below it, if it has `t`.
                Action::Goto(t) => {
                    let j = rules.partition_point(|x| x.pref < t);
                    match rules.get(j) {
                        Some(x) if x.pref == t => j,
                        _ => i + 1,
                    }
                }
                _ => i + 1,
            })
            .collect();
    }

    /// The decision for key `k` over `tables` (the walk the module documentation
    /// describes). `hash` gives the packet's flow hash, asked at most once and only when
    /// a multipath route is found.
    pub fn decide(
        &self,
        tables: &impl Tables<F>,
        k: &KeyOf<F>,
        hash: impl FnOnce() -> u32,
    ) -> DecisionOf<F> {
        self.decide_in(tables, k, hash, None)
    }

    /// As [`RulesOf::decide`] for a packet of the VRF whose table is `l3mdev` (none:
    /// `main`'s): the walk stops at the first rule of priority [`L3MDEV_PREF`] or more
    /// with the lookup of that table, as Linux's `l3mdev` rule there does, and no route
    /// in it is no route (see [`PolicyOf`]).
    pub fn decide_in(
        &self,
        tables: &impl Tables<F>,
        k: &KeyOf<F>,
        hash: impl FnOnce() -> u32,
        l3mdev: Option<u32>,
    ) -> DecisionOf<F> {
        let mut hash = Some(hash);
        let mut hashed = 0u32;
        let mut flow = || {
            if let Some(h) = hash.take() {
                hashed = h();
            }
            hashed
        };
        let mut i = 0;
        while let Some(r) = self.rules.get(i) {
            let after = i + 1;
            if let Some(t) = l3mdev
                && r.pref >= L3MDEV_PREF
            {
                return l3mdev_lookup(tables, t, k.dst, &mut flow);
            }
            if !r.matches(k) {
                i = after;
                continue;
            }
            let table = match r.action {
                Action::Lookup(t) => t,
                Action::Goto(_) => {
                    i = self.next.get(i).copied().unwrap_or(after);
                    continue;
                }
                Action::Nop => {
                    i = after;
                    continue;
                }
                Action::Blackhole => {
                    return DecisionOf::Refused {
                        rule: i,
                        how: Refusal::Blackhole,
                    };
                }
                Action::Unreachable => {
                    return DecisionOf::Refused {
                        rule: i,
                        how: Refusal::Unreachable,
                    };
                }
                Action::Prohibit => {
                    return DecisionOf::Refused {
                        rule: i,
                        how: Refusal::Prohibit,
                    };
                }
            };
            if let Some((adj, hop)) =
                lookup(tables, table, k.dst, r.suppress_prefixlength, &mut flow)
            {
                return DecisionOf::Route {
                    table,
                    rule: i,
                    adj,
                    hop,
                };
            }
            i = after;
        }
        match l3mdev {
            Some(t) => l3mdev_lookup(tables, t, k.dst, &mut flow),
            None => DecisionOf::NoRoute,
        }
    }
}

/// The decision of the `l3mdev` rule for a packet of the VRF of table `t`: its route in
/// that table, or no route.
fn l3mdev_lookup<F: Family>(
    tables: &impl Tables<F>,
    t: u32,
    dst: F::Bits,
    flow: &mut impl FnMut() -> u32,
) -> DecisionOf<F> {
    match lookup(tables, t, dst, None, flow) {
        Some((adj, hop)) => DecisionOf::Route {
            table: t,
            rule: L3MDEV_RULE,
            adj,
            hop,
        },
        None => DecisionOf::NoRoute,
    }
}

/// The key fields a rule set selects on: the others need not be read from a packet,
/// and two packets that differ only in them get the same decision.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Uses {
    /// `from`.
    pub src: bool,
    /// `iif`.
    pub iif: bool,
    /// `fwmark`.
    pub mark: bool,
    /// `ipproto`.
    pub proto: bool,
    /// `sport`.
    pub sport: bool,
    /// `dport`.
    pub dport: bool,
    /// `tos`.
    pub tos: bool,
}

impl Uses {
    /// A key of all ones in the fields used and zeros in the others (the destination is
    /// always used), to and keys with.
    fn mask<F: Family>(self) -> KeyOf<F> {
        let ones = !F::Bits::default();
        KeyOf {
            src: if self.src { ones } else { F::Bits::default() },
            dst: ones,
            iif: if self.iif { u16::MAX } else { 0 },
            mark: if self.mark { u32::MAX } else { 0 },
            proto: if self.proto { u8::MAX } else { 0 },
            sport: if self.sport { u16::MAX } else { 0 },
            dport: if self.dport { u16::MAX } else { 0 },
            tos: if self.tos { u8::MAX } else { 0 },
        }
    }
}

impl<F: Family> RulesOf<F> {
    /// The key fields the rules select on (the destination always counts).
    pub fn uses(&self) -> Uses {
        self.rules.iter().fold(Uses::default(), |u, r| Uses {
            src: u.src || r.from.is_some(),
            iif: u.iif || r.iif.is_some(),
            mark: u.mark || r.fwmark.is_some(),
            proto: u.proto || r.ipproto.is_some(),
            sport: u.sport || r.sport.is_some(),
            dport: u.dport || r.dport.is_some(),
            tos: u.tos || r.tos.is_some(),
        })
    }
}

/// A family's policy routing as the datapath holds it: the rules, the numbered tables
/// (`main` is the host's route table, `local` its view), the VRFs (which interface's
/// packets are routed in which table), and what the routing stages need to know of them
/// in their loops. Shared by the workers behind an `Arc`; a change makes a new one.
///
/// A route found in a numbered table (a VRF's or not) has its adjacency tagged with the
/// table's slot ([`super::ADJ_TABLE`]: its place among the tables, from 1), so that the
/// output stages find its hop ([`PolicyOf::hop`]) whatever the main table becomes
/// meanwhile: hence at most [`MAX_TABLES`] numbered tables per family. A table keeps its
/// slot for the life of the policy and of the policies made from it by
/// [`PolicyOf::with_table`] (a new table takes a new slot), so that an adjacency a packet
/// holds in a neighbour queue still names its table after a route change.
///
/// # VRFs
///
/// A VRF is a numbered table (its `table`, as Linux's VRF device has one) and the
/// interfaces enslaved to it. A packet received on one of them is routed in that table,
/// as Linux's `l3mdev` rule (priority [`L3MDEV_PREF`]) does: the rules before that
/// priority are walked as for any packet, except that `lookup local` finds nothing: the
/// VRF's own local and broadcast routes are in the VRF's table (as Linux keeps them),
/// and `main`'s addresses are never local to a VRF's packet; at [`L3MDEV_PREF`] the
/// VRF's table is looked up, and the walk ends there: a route found decides, and no
/// route is no route. That is Linux's walk with the route the kernel's VRF
/// documentation asks every VRF table to have, `unreachable default metric
/// 4278198272`, so that nothing falls through to `main`. Linux's local table holds the
/// addresses of `main`'s interfaces only, and its rule 0 delivers a VRF's packet to one
/// of them; that documentation advises moving the rule after l3mdev to stop it, which is
/// what netbatch does for a VRF's packets (so with no address in `main`, the two walk
/// alike: `rules_vs_kernel`'s VRF differential). A VRF's packet is never delivered to an
/// address of another VRF or of `main`. A route of a VRF's table may go out of
/// an interface of another VRF or of `main` (route leaking: `dev` names it).
/// Packets of interfaces in `main` are routed as without VRFs.
#[derive(Debug, Clone)]
pub struct PolicyOf<F: Family> {
    rules: RulesOf<F>,
    tables: BTreeMap<u32, std::sync::Arc<RoutesOf<F>>>,
    /// The tables in slot order (slot `s` at `s - 1`), with their numbers.
    slots: Vec<(u32, std::sync::Arc<RoutesOf<F>>)>,
    /// The slot of each table, by number.
    slot_of: BTreeMap<u32, u32>,
    /// For each interface, the slot of its VRF's table (0: `main`).
    iif_slot: Vec<u32>,
    /// The VRFs' tables (ascending).
    vrf_tables: Vec<u32>,
    walks: bool,
    /// The rules are the default ones and there is no table `default`: a packet's route
    /// is one lookup of its VRF's table (or of `main`).
    plain: bool,
    uses: Uses,
    /// Per key field, all ones where the rules select on it, else zero (the destination
    /// is kept whole): what [`PolicyOf::key`] ands a key with.
    mask: KeyOf<F>,
}

/// The VRFs' tables of `iif_tables` (each interface's VRF table, [`TABLE_MAIN`] for
/// `main`'s), ascending, each once.
fn vrfs_of(iif_tables: &[u32]) -> Vec<u32> {
    let mut v: Vec<u32> = iif_tables
        .iter()
        .copied()
        .filter(|&t| t != TABLE_MAIN)
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The priority of Linux's `l3mdev` rule, the one that routes a VRF's packets in its
/// table (`ip rule add pref 1000 l3mdev`, which the kernel adds with the first VRF).
pub const L3MDEV_PREF: u32 = 1000;

/// The rule index a decision of the `l3mdev` rule names (it is implied by the VRFs and
/// is not in [`RulesOf::iter`]).
pub const L3MDEV_RULE: usize = usize::MAX;

/// The most numbered tables a family's policy may have (the slots an adjacency can
/// name), VRFs' tables included.
pub const MAX_TABLES: usize = (super::ADJ_TABLE >> super::ADJ_TABLE_SHIFT) as usize;

/// IPv4 policy routing.
pub type Policy = PolicyOf<super::V4>;
/// IPv6 policy routing.
pub type Policy6 = PolicyOf<super::V6>;

impl<F: Family> Default for PolicyOf<F> {
    fn default() -> Self {
        Self {
            rules: RulesOf::new(),
            tables: BTreeMap::new(),
            slots: Vec::new(),
            slot_of: BTreeMap::new(),
            iif_slot: Vec::new(),
            vrf_tables: Vec::new(),
            walks: false,
            plain: true,
            uses: Uses::default(),
            mask: Uses::default().mask(),
        }
    }
}

impl<F: Family> PolicyOf<F> {
    /// `rules` over the numbered `tables` (an entry for `main` or `local` is ignored:
    /// those are the host's; an empty table is as none). More than [`MAX_TABLES`] tables
    /// with routes are refused.
    pub fn new(
        rules: RulesOf<F>,
        tables: BTreeMap<u32, std::sync::Arc<RoutesOf<F>>>,
    ) -> Result<Self, RuleError> {
        Self::with_vrfs(rules, tables, &[])
    }

    /// As [`PolicyOf::new`], with VRFs: `iif_tables[i]` is the table of interface `i`'s
    /// VRF ([`TABLE_MAIN`] for an interface of `main`; interfaces beyond the list are
    /// `main`'s). A VRF's table has a slot even while it is empty.
    pub fn with_vrfs(
        rules: RulesOf<F>,
        mut tables: BTreeMap<u32, std::sync::Arc<RoutesOf<F>>>,
        iif_tables: &[u32],
    ) -> Result<Self, RuleError> {
        let vrf_tables = vrfs_of(iif_tables);
        tables.retain(|&id, t| {
            id != TABLE_MAIN && id != TABLE_LOCAL && (!t.is_empty() || vrf_tables.contains(&id))
        });
        // A VRF without routes of the family shares one empty table (an empty IPv6
        // tree costs its first stage, half a MiB).
        let empty = std::sync::Arc::new(RoutesOf::compact());
        for &id in &vrf_tables {
            tables.entry(id).or_insert_with(|| empty.clone());
        }
        if tables.len() > MAX_TABLES {
            return Err(RuleError::TooManyTables(tables.len()));
        }
        let slots: Vec<_> = tables.iter().map(|(&id, t)| (id, t.clone())).collect();
        let slot_of = slots
            .iter()
            .zip(1u32..)
            .map(|((id, _), s)| (*id, s))
            .collect::<BTreeMap<_, _>>();
        let iif_slot = iif_tables
            .iter()
            .map(|t| slot_of.get(t).copied().unwrap_or(0))
            .collect();
        let mut p = Self {
            rules,
            tables,
            slots,
            slot_of,
            iif_slot,
            vrf_tables,
            walks: false,
            plain: true,
            uses: Uses::default(),
            mask: Uses::default().mask(),
        };
        p.settle();
        Ok(p)
    }

    /// Works out what the stages ask in their loops.
    fn settle(&mut self) {
        // With the default rules the walk is a lookup of main, then of table default:
        // without a table default, exactly the lookup the stages make without rules.
        let has_default = self
            .tables
            .get(&TABLE_DEFAULT)
            .is_some_and(|t| !t.is_empty());
        self.plain = self.rules.is_default() && !has_default;
        let vrfs = !self.vrf_tables.is_empty();
        self.walks = !self.plain || vrfs;
        self.uses = self.rules.uses();
        // A VRF's packets are told apart by the interface they came in by.
        self.uses.iif |= vrfs;
        self.mask = self.uses.mask();
    }

    /// This policy with table `id` replaced by `table` (`ip route add … table N` or
    /// `vrf NAME`): the tables keep their slots, a new table takes the next one. `main`
    /// and `local` are not the policy's ([`RuleError::TableZero`] is never returned).
    pub fn with_table(
        &self,
        id: u32,
        table: std::sync::Arc<RoutesOf<F>>,
    ) -> Result<Self, RuleError> {
        let mut p = self.clone();
        if id == TABLE_MAIN || id == TABLE_LOCAL {
            return Ok(p);
        }
        match p.slot_of.get(&id) {
            Some(&s) => {
                if let Some(slot) = p.slots.get_mut(s as usize - 1) {
                    slot.1 = table.clone();
                }
            }
            None => {
                if p.slots.len() >= MAX_TABLES {
                    return Err(RuleError::TooManyTables(p.slots.len() + 1));
                }
                p.slots.push((id, table.clone()));
                p.slot_of.insert(id, p.slots.len() as u32);
            }
        }
        p.tables.insert(id, table);
        p.settle();
        Ok(p)
    }

    /// This policy with the interfaces' VRFs given by `iif_tables` (as in
    /// [`PolicyOf::with_vrfs`]; a reload that moves interfaces between VRFs): every table
    /// keeps its slot, so an adjacency a packet holds still names its table; a VRF's table
    /// the policy has no slot for yet gets the next one, empty until given routes
    /// ([`PolicyOf::with_table`]). A table whose VRF has no interface left stays, as a
    /// numbered table.
    pub fn with_iif_tables(&self, iif_tables: &[u32]) -> Result<Self, RuleError> {
        let mut p = self.clone();
        let vrf_tables = vrfs_of(iif_tables);
        for &id in &vrf_tables {
            if !p.slot_of.contains_key(&id) {
                p = p.with_table(id, std::sync::Arc::new(RoutesOf::compact()))?;
            }
        }
        p.iif_slot = iif_tables
            .iter()
            .map(|t| p.slot_of.get(t).copied().unwrap_or(0))
            .collect();
        p.vrf_tables = vrf_tables;
        p.settle();
        Ok(p)
    }

    /// This policy with `rules` instead of its own (`ip rule add|del`, a reload): the
    /// tables and their slots are kept, so an adjacency a packet holds still names its
    /// table; a table only the new rules name is empty until a route is added to it.
    pub fn with_rules(&self, rules: RulesOf<F>) -> Self {
        let mut p = self.clone();
        p.rules = rules;
        p.settle();
        p
    }

    /// The hop of adjacency `adj`, `main` being the host's route table: `main`'s when
    /// the adjacency names no numbered table, else that table's.
    #[inline(always)]
    pub fn hop(&self, main: &RoutesOf<F>, adj: u32) -> Option<HopOf<F>> {
        let slot = (adj & super::ADJ_TABLE) >> super::ADJ_TABLE_SHIFT;
        if slot == 0 {
            return main.hop(adj);
        }
        self.slots
            .get(slot as usize - 1)
            .and_then(|(_, t)| t.hop(adj & !super::ADJ_TABLE))
    }

    /// Whether routing must walk the rules: they are not the default ones, table
    /// `default` has routes, or there are VRFs. When not, a lookup of `main` decides as
    /// the walk would.
    #[inline(always)]
    pub fn walks(&self) -> bool {
        self.walks
    }

    /// Whether some interface is in a VRF.
    #[inline(always)]
    pub fn has_vrfs(&self) -> bool {
        !self.vrf_tables.is_empty()
    }

    /// The VRFs' tables, ascending.
    pub fn vrf_tables(&self) -> &[u32] {
        &self.vrf_tables
    }

    /// The table of interface `iif`'s VRF ([`TABLE_MAIN`] for `main`).
    pub fn vrf_of(&self, iif: u16) -> u32 {
        match self.iif_slot.get(usize::from(iif)) {
            Some(&s) if s != 0 => self
                .slots
                .get(s as usize - 1)
                .map_or(TABLE_MAIN, |(id, _)| *id),
            _ => TABLE_MAIN,
        }
    }

    /// The route table of interface `iif`'s VRF, and the tag its adjacencies carry
    /// ([`super::ADJ_TABLE`]): `main` and 0 for an interface of `main`. What routes
    /// the packets we send in answer to one received on `iif` (echo replies, ICMP
    /// errors).
    #[inline]
    pub fn vrf_routes<'a>(&'a self, main: &'a RoutesOf<F>, iif: u16) -> (&'a RoutesOf<F>, u32) {
        match self.iif_slot.get(usize::from(iif)) {
            Some(&s) if s != 0 => match self.slots.get(s as usize - 1) {
                Some((_, t)) => (&**t, s << super::ADJ_TABLE_SHIFT),
                None => (main, 0),
            },
            _ => (main, 0),
        }
    }

    /// The key fields the rules select on.
    #[inline(always)]
    pub fn uses(&self) -> Uses {
        self.uses
    }

    /// The rules.
    pub fn rules(&self) -> &RulesOf<F> {
        &self.rules
    }

    /// The numbered tables (those with routes, and the VRFs').
    pub fn tables(&self) -> &BTreeMap<u32, std::sync::Arc<RoutesOf<F>>> {
        &self.tables
    }

    /// The decision for a packet of key `k`, as `act` makes it the stage's, reusing
    /// `last` (the previous packet's key, masked, and what `act` made of its decision)
    /// when the key is the same: a run of one flow is walked once (counted in `walked`).
    /// Only the fields the rules select on are kept in the key ([`PolicyOf::key`]); a
    /// decision that needed the flow hash (a multipath route) is not kept.
    #[inline]
    pub fn decide_run<P: Copy>(
        &self,
        main: &RoutesOf<F>,
        k: KeyOf<F>,
        (last, walked): (&mut Option<(KeyOf<F>, P)>, &mut u64),
        hash: impl FnOnce() -> u32,
        act: impl FnOnce(DecisionOf<F>) -> P,
    ) -> P {
        let key = self.key(k);
        if let Some((was_key, was)) = last
            && was_key.same(&key)
        {
            return *was;
        }
        self.walk_run(main, key, (last, walked), hash, act)
    }

    /// `k` with the fields the rules do not select on zeroed (the destination is always
    /// kept: the lookups read it): what [`PolicyOf::decide_run`] compares from one
    /// packet to the next, so that a stage can compare in its loop and walk out of it
    /// ([`PolicyOf::walk_run`]).
    #[inline(always)]
    pub fn key(&self, k: KeyOf<F>) -> KeyOf<F> {
        let m = &self.mask;
        KeyOf {
            src: k.src & m.src,
            dst: k.dst,
            iif: k.iif & m.iif,
            mark: k.mark & m.mark,
            proto: k.proto & m.proto,
            sport: k.sport & m.sport,
            dport: k.dport & m.dport,
            tos: k.tos & m.tos,
        }
    }

    /// The walk of [`PolicyOf::decide_run`] for `key` (masked by [`PolicyOf::key`]),
    /// which the previous packet's did not decide: counted in `walked`, its decision
    /// kept in `last` unless it needed the flow hash. Out of line: a run pays for it
    /// once.
    #[inline(never)]
    pub fn walk_run<P: Copy>(
        &self,
        main: &RoutesOf<F>,
        key: KeyOf<F>,
        (last, walked): (&mut Option<(KeyOf<F>, P)>, &mut u64),
        hash: impl FnOnce() -> u32,
        act: impl FnOnce(DecisionOf<F>) -> P,
    ) -> P {
        *walked += 1;
        let mut hashed = false;
        let p = act(self.decide(main, &key, || {
            hashed = true;
            hash()
        }));
        *last = (!hashed).then_some((key, p));
        p
    }

    /// The decision for `k`, `main` being the host's route table (see
    /// [`RulesOf::decide`], and the VRFs above). A route of a numbered table has its
    /// adjacency tagged with the table's slot (see [`PolicyOf::hop`]).
    #[inline]
    pub fn decide(
        &self,
        main: &RoutesOf<F>,
        k: &KeyOf<F>,
        hash: impl FnOnce() -> u32,
    ) -> DecisionOf<F> {
        // The VRF's slot, number and table, found by index (no map is searched for a
        // VRF's packet).
        let vslot = self.iif_slot.get(usize::from(k.iif)).copied().unwrap_or(0);
        let (vrf, vrf_table) = match vslot
            .checked_sub(1)
            .and_then(|s| self.slots.get(s as usize))
        {
            Some((id, t)) => (*id, &**t),
            None => (TABLE_MAIN, main),
        };
        let tables = WithMain {
            main,
            vrf_table,
            vrf,
            tables: &self.tables,
        };
        let l3mdev = (vrf != TABLE_MAIN).then_some(vrf);
        let mut d = if self.plain {
            // `0: lookup local`, then (a VRF's) l3mdev or `32766: lookup main`, all in
            // one table: one lookup answers for them.
            let mut flow = Some(hash);
            let mut h = || flow.take().map_or(0, |f| f());
            match lookup(&tables, vrf, k.dst, None, &mut h) {
                Some((adj, hop)) => DecisionOf::Route {
                    table: vrf,
                    rule: match (hop.kind, l3mdev) {
                        // A VRF's `lookup local` finds nothing: its l3mdev rule found it.
                        (_, Some(_)) => L3MDEV_RULE,
                        (RouteKind::Local | RouteKind::Broadcast, None) => 0,
                        // The default rules: `32766: lookup main` is the second.
                        (_, None) => 1,
                    },
                    adj,
                    hop,
                },
                None => DecisionOf::NoRoute,
            }
        } else {
            self.rules.decide_in(&tables, k, hash, l3mdev)
        };
        if let DecisionOf::Route { table, adj, .. } = &mut d {
            if *table == vrf && vslot != 0 {
                *adj |= vslot << super::ADJ_TABLE_SHIFT;
            } else if *table != TABLE_MAIN
                && *table != TABLE_LOCAL
                && let Some(&slot) = self.slot_of.get(table)
            {
                *adj |= slot << super::ADJ_TABLE_SHIFT;
            }
        }
        d
    }
}

/// The host's main table and the numbered ones, with the packet's VRF's table found
/// without a map search.
struct WithMain<'a, F: Family> {
    main: &'a RoutesOf<F>,
    /// Table `vrf` (`main` itself for a packet of main).
    vrf_table: &'a RoutesOf<F>,
    /// The packet's VRF's table number ([`TABLE_MAIN`] for main).
    vrf: u32,
    tables: &'a BTreeMap<u32, std::sync::Arc<RoutesOf<F>>>,
}

impl<F: Family> Tables<F> for WithMain<'_, F> {
    #[inline]
    fn table(&self, id: u32) -> Option<&RoutesOf<F>> {
        if id == TABLE_MAIN {
            Some(self.main)
        } else if id == self.vrf {
            Some(self.vrf_table)
        } else {
            self.tables.get(&id).map(|t| &**t)
        }
    }

    /// `main`'s for a packet of `main`; none for a VRF's (see [`PolicyOf`]).
    #[inline]
    fn local(&self) -> Option<&RoutesOf<F>> {
        (self.vrf == TABLE_MAIN).then_some(self.main)
    }
}

/// The route a lookup rule finds for `dst` in table `id`, or `None` when the walk goes
/// on: no table, no route, a throw route, a route of `main` that is not local or
/// broadcast when `local` is asked, or a found unicast, local or broadcast route of
/// `suppress` bits or fewer.
#[inline]
fn lookup<F: Family>(
    tables: &impl Tables<F>,
    id: u32,
    dst: F::Bits,
    suppress: Option<u8>,
    hash: &mut impl FnMut() -> u32,
) -> Option<(u32, HopOf<F>)> {
    let local = id == TABLE_LOCAL;
    let t = if local {
        tables.local()?
    } else {
        tables.table(id)?
    };
    let (adj, hop, len) = match suppress {
        None => t.lookup_flow(dst, hash).map(|(a, h)| (a, h, 0))?,
        Some(_) => t.lookup_flow_len(dst, hash)?,
    };
    match hop.kind {
        RouteKind::Throw => None,
        RouteKind::Local | RouteKind::Broadcast | RouteKind::Unicast
            if suppress.is_some_and(|n| len <= n) =>
        {
            None
        }
        RouteKind::Local | RouteKind::Broadcast => Some((adj, hop)),
        _ if local => None,
        _ => Some((adj, hop)),
    }
}

#[cfg(test)]
mod tests;
