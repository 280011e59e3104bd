//! Writes what `trace show` answered as pcapng: each traced packet as received, on its
//! port's interface, with its path through the stages as the packet's comment.

use std::path::Path;

/// Writes the packets of a `trace show` answer to `path`; returns how many.
pub(crate) fn write(path: &Path, data: &serde_json::Value) -> anyhow::Result<usize> {
    let (ports, frames) =
        netbatch_runtime::control::trace::frames(data).map_err(|e| anyhow::anyhow!(e))?;
    netbatch_ports::pcap::write_traced(path, &ports, &frames)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(frames.len())
}
