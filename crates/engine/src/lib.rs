//! The netbatch engine: packet buffers, lists, the stage graph and its dispatch, and the
//! per-worker counters. It knows nothing about protocols.
//!
//! - [`pool`]: buffers allocated once, handles that own them, per-worker caches.
//! - [`meta`]: the hot metadata block of each buffer.
//! - [`stage`]: the stage interface (a list in, a next per packet out).
//! - [`graph`]: nodes, arcs, `runs` and `buckets` dispatch.
//! - [`counters`], [`mod@drop`], [`trace`], [`time`].
#![deny(unsafe_code)]

pub mod counters;
pub mod drop;
pub mod graph;
pub mod meta;
pub mod pool;
pub mod stage;
pub mod time;
pub mod trace;

pub use counters::{DropCounters, NodeSnapshot};
pub use drop::{Reason, reason};
pub use graph::{Dispatch, Graph, GraphBuilder, GraphError, Mode, NodeId, intern};
pub use meta::{Ask, Meta};
pub use pool::{
    Backing, BufCache, HUGE_PAGE, Layout, Pkt, PktMut, PktRef, Pool, PoolConfig, PoolError,
    Zeroable, ZeroedArray, huge_tables, set_huge_tables,
};
pub use stage::{
    Accounting, Cx, LIST_MAX, Next, Out, PacketStage, PerPacket, PktList, Stage, Verdict,
};
pub use trace::{
    ArcTarget, Matcher, TraceDump, TraceEvent, TraceNode, TraceRecord, TraceSpec, TracedPacket,
    View,
};
