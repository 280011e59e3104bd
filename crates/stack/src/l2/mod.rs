//! Layer 2: Ethernet II with up to two VLAN tags (802.1Q, 802.1ad).
//!
//! On input the L2 header is pulled, so every later stage sees the packet starting at its
//! L3 header (`Meta::data == Meta::l3`); on output the neighbour stage pushes a fresh
//! header with the interface's tags.

pub mod input;
pub mod output;
