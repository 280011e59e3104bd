//! Built-in applications, run by the worker after each poll (sans-IO: they see the
//! host's sockets and the worker's buffers, never a system call).

pub mod echo;
pub mod sink;

use netbatch_engine::Cx;
use netbatch_stack::Host;

/// An application polled by a worker.
pub trait App: Send {
    /// Name for reports.
    fn name(&self) -> &str;
    /// Does a round of work (reads sockets, queues sends in `host.injected`); returns
    /// datagrams handled.
    fn poll(&mut self, host: &mut Host, cx: &mut Cx<'_>) -> usize;
    /// Counters for reports.
    fn counters(&self) -> Vec<(&'static str, u64)>;

    /// Latencies the application measured (receive timestamp to reading, TSC ticks).
    fn latency(&self) -> Option<&crate::latency::Histogram> {
        None
    }

    /// Forgets the latencies measured so far (the start of a measurement).
    fn clear_latency(&mut self) {}
}
