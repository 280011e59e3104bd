//! A kernel interface's link state, shared by the queues of the port on it and posted
//! by whoever follows the kernel's link events (`netbatch run`'s link watch: rtnetlink
//! `RTNLGRP_LINK` in the ports' namespace).
//!
//! Invariants:
//! - the transmit path reads the state with one relaxed load per call and makes no
//!   system call for it: a port whose link is down frees what it is given and counts it
//!   (`link_down`) instead of handing it to a kernel that would hold it in a ring or
//!   drop it unseen;
//! - the link is up when the interface is administratively up (`IFF_UP`) and
//!   operationally up (`IFF_RUNNING`: carrier, not dormant), as `ip link` shows it; it
//!   is taken as up until posted otherwise, and changed only by [`Link::set`]; every
//!   change bumps [`Link::changes`], so a queue that looks once per round sees that a
//!   flap happened even if the link is back up by then;
//! - the interface's own transmit drop counter (`tx_dropped`, as `ip -s link` shows it)
//!   is posted as it is read ([`Link::post_tx_dropped`]), counted from the first post;
//!   queues of a backend whose frames the kernel can drop after taking them (AF_XDP)
//!   book it with [`Link::take_tx_dropped`]: each increment exactly once, across the
//!   port's queues, so each such frame moves from transmitted to dropped exactly once.

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

const ADMIN_UP: u8 = 1;
const RUNNING: u8 = 2;
const UP: u8 = ADMIN_UP | RUNNING;

/// The link state of one port's interface.
#[derive(Debug)]
pub struct Link {
    port: String,
    iface: String,
    ifindex: u32,
    state: AtomicU8,
    changes: AtomicU64,
    /// The interface's `tx_dropped` at the first post (`u64::MAX`: not posted yet).
    base: AtomicU64,
    /// What was counted before the baseline last moved.
    carried: AtomicU64,
    /// Its `tx_dropped` since the first post.
    tx_dropped: AtomicU64,
    /// Of those, what the port's queues have booked.
    booked: AtomicU64,
}

impl Link {
    /// The link of interface `iface` (index `ifindex`) of port `port`, taken to be up
    /// until whoever follows it posts otherwise: a port nobody follows (a tool, a test)
    /// sends as it always did, and `netbatch run`'s link watch posts the kernel's state
    /// before the workers start.
    pub fn new(port: &str, iface: &str, ifindex: u32) -> Self {
        Self {
            port: port.into(),
            iface: iface.into(),
            ifindex,
            state: AtomicU8::new(UP),
            changes: AtomicU64::new(0),
            base: AtomicU64::new(u64::MAX),
            carried: AtomicU64::new(0),
            tx_dropped: AtomicU64::new(0),
            booked: AtomicU64::new(0),
        }
    }

    fn bits(admin_up: bool, running: bool) -> u8 {
        (if admin_up { ADMIN_UP } else { 0 }) | (if running { RUNNING } else { 0 })
    }

    /// The port's name.
    pub fn port(&self) -> &str {
        &self.port
    }

    /// The interface's name.
    pub fn interface(&self) -> &str {
        &self.iface
    }

    /// The interface's index.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// Whether frames can leave: administratively and operationally up.
    #[inline(always)]
    pub fn up(&self) -> bool {
        self.state.load(Ordering::Relaxed) == UP
    }

    /// (administratively up, operationally up).
    pub fn state(&self) -> (bool, bool) {
        let s = self.state.load(Ordering::Relaxed);
        (s & ADMIN_UP != 0, s & RUNNING != 0)
    }

    /// Changes of the state seen so far.
    #[inline(always)]
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::Acquire)
    }

    /// Posts the state the kernel reported; `true` when it changed.
    pub fn set(&self, admin_up: bool, running: bool) -> bool {
        let new = Self::bits(admin_up, running);
        let old = self.state.swap(new, Ordering::AcqRel);
        if old != new {
            self.changes.fetch_add(1, Ordering::AcqRel);
        }
        old != new
    }

    /// Posts the interface's transmit drop counter as read now (the first post is the
    /// baseline; a counter that went backwards, the interface re-created, is a new one,
    /// counted on from what was counted before). One thread posts.
    pub fn post_tx_dropped(&self, now: u64) {
        let base = self.base.load(Ordering::Acquire);
        if base == u64::MAX || now < base {
            self.carried
                .store(self.tx_dropped.load(Ordering::Acquire), Ordering::Release);
            self.base.store(now, Ordering::Release);
            return;
        }
        let total = self.carried.load(Ordering::Acquire) + (now - base);
        self.tx_dropped.fetch_max(total, Ordering::AcqRel);
    }

    /// The interface's transmit drops since the first post.
    pub fn tx_dropped(&self) -> u64 {
        self.tx_dropped.load(Ordering::Acquire)
    }

    /// Books up to `max` of the interface's transmit drops not booked yet (a queue
    /// passes what it has handed to the kernel and not yet booked, so no queue books
    /// more than it sent); returns what it booked.
    pub fn take_tx_dropped(&self, max: u64) -> u64 {
        loop {
            let seen = self.tx_dropped.load(Ordering::Acquire);
            let booked = self.booked.load(Ordering::Acquire);
            let n = seen.saturating_sub(booked).min(max);
            if n == 0 {
                return 0;
            }
            if self
                .booked
                .compare_exchange(booked, booked + n, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return n;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A state change is counted once, a repeated state not at all; down means either
    /// half down.
    #[test]
    fn changes_are_counted_and_either_half_down_is_down() {
        let l = Link::new("p", "lo", 1);
        assert!(l.up(), "up until posted otherwise");
        assert!(!l.set(true, true));
        assert_eq!(l.changes(), 0);
        assert!(l.set(true, false));
        assert!(!l.up());
        assert!(l.set(false, false));
        assert!(!l.set(false, false));
        assert!(l.set(true, true));
        assert!(l.up());
        assert_eq!(l.changes(), 3);
        assert_eq!(l.state(), (true, true));
    }

    /// Drops count from the first post; two queues book each drop once, neither more
    /// than it offers.
    #[test]
    fn kernel_drops_are_booked_once() {
        let l = Link::new("p", "lo", 1);
        l.post_tx_dropped(1000);
        assert_eq!(l.take_tx_dropped(u64::MAX), 0, "the baseline");
        l.post_tx_dropped(1010);
        assert_eq!(l.take_tx_dropped(4), 4);
        assert_eq!(l.take_tx_dropped(100), 6);
        assert_eq!(l.take_tx_dropped(100), 0);
        l.post_tx_dropped(1005);
        assert_eq!(l.tx_dropped(), 10, "a stale read counts nothing back");
        // The counter restarted (interface re-created): counting goes on from it.
        l.post_tx_dropped(3);
        l.post_tx_dropped(5);
        assert_eq!(l.tx_dropped(), 12);
        assert_eq!(l.take_tx_dropped(100), 2);
    }
}
