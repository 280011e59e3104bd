//! `[pool]`: the packet buffer pool; unset keys keep the engine's defaults, and the
//! engine says whether the whole is usable.

use netbatch_engine::PoolConfig;

use super::Errs;

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PoolFile {
    buffers: Option<u32>,
    buf_size: Option<u32>,
    headroom: Option<u16>,
    cache_size: Option<u32>,
    huge_pages: Option<bool>,
}

/// Validates `[pool]`.
pub(super) fn validate(raw: &PoolFile, e: &mut Errs) -> PoolConfig {
    let d = PoolConfig::default();
    let pool = PoolConfig {
        buffers: raw.buffers.unwrap_or(d.buffers),
        buf_size: raw.buf_size.unwrap_or(d.buf_size),
        headroom: raw.headroom.unwrap_or(d.headroom),
        cache_size: raw.cache_size.unwrap_or(d.cache_size),
        huge_pages: raw.huge_pages.unwrap_or(d.huge_pages),
    };
    if let Err(err) = pool.validate() {
        e.add("pool", err.to_string());
    }
    pool
}
