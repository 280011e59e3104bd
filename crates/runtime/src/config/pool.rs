//! `[pool]`: the packet buffer pool; unset keys keep the engine's defaults, and the
//! engine says whether the whole is usable.
//!
//! What holds packets must fit the pool. With several workers, their buffer caches
//! together (at their usual fill, `cache_size` each, the default included) hold at most
//! `buffers`, or the caches alone could hold every buffer while a worker starves for
//! one. A limit the file gives must be one the pool can reach: with RPS, a backlog ring
//! (`datapath.max_backlog`) of at most `buffers` packets (`neighbour.queue_len` and the
//! applications' queues have the same rule, in their sections). The defaults of those
//! limits (Linux's) are not held to a small pool: there they simply never bind. Whether
//! the machine has the memory for the pool is [`super::machine`]'s part.

use netbatch_engine::PoolConfig;

use super::Errs;
use super::datapath::Datapath;

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PoolFile {
    buffers: Option<u32>,
    buf_size: Option<u32>,
    headroom: Option<u16>,
    cache_size: Option<u32>,
    huge_pages: Option<bool>,
}

/// Validates `[pool]`, and what `dp` puts in it.
pub(super) fn validate(raw: &PoolFile, dp: &Datapath, e: &mut Errs) -> PoolConfig {
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
        return pool;
    }
    let buffers = u64::from(pool.buffers);
    let cached = u64::from(pool.cache_size).saturating_mul(dp.workers as u64);
    if dp.workers > 1 && cached > buffers {
        e.add(
            "pool.cache_size",
            format!(
                "{} workers caching {}{} buffers each hold {cached}, more than the {buffers} \
                 there are (pool.buffers): the caches alone could take the whole pool",
                dp.workers,
                pool.cache_size,
                if raw.cache_size.is_none() {
                    " (the default)"
                } else {
                    ""
                }
            ),
        );
    }
    if let Some(rps) = &dp.rps
        && dp.max_backlog_given
        && rps.max_backlog as u64 > buffers
    {
        e.add(
            "datapath.max_backlog",
            format!(
                "{} packets per backlog ring is more than the {buffers} packet buffers there \
                 are (pool.buffers): the limit could never be reached",
                rps.max_backlog
            ),
        );
    }
    pool
}

/// Refuses a pool whose buffers are smaller than a configured port's backend can use
/// (an AF_XDP socket takes each buffer as a UMEM chunk of 2048 bytes): at start the
/// port would be refused after the others were opened.
pub(super) fn fits_ports<'a>(
    pool: &PoolConfig,
    kinds: impl Iterator<Item = (usize, &'a str)>,
    e: &mut Errs,
) {
    for (i, kind) in kinds {
        if let Some(min) = netbatch_ports::carries(kind).and_then(|c| c.min_buf_size)
            && pool.buf_size < min
        {
            e.add(
                "pool.buf_size",
                format!(
                    "{} bytes is too small for port[{i}] ({kind}): its buffers must be at \
                     least {min} bytes",
                    pool.buf_size
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse_test as parse;

    fn keys(text: &str) -> Vec<(String, String)> {
        match parse(&format!(
            "{text}\n[[port]]\nname = \"p\"\nmac = \"02:00:00:00:00:01\"\n"
        )) {
            Ok(_) => Vec::new(),
            Err(e) => e.errors.into_iter().map(|x| (x.key, x.reason)).collect(),
        }
    }

    /// An AF_XDP port takes each pool buffer as a 2048-byte UMEM chunk: a smaller
    /// `buf_size` is refused at the pool's key, naming the port; other kinds take it.
    #[test]
    fn buffers_hold_what_the_ports_backends_need() {
        let with = |kind: &str, size: u32| {
            keys(&format!(
                "[pool]\nbuf_size = {size}\n[[port]]\nname = \"x\"\nkind = \"{kind}\"\n\
                 interface = \"x0\"\nmac = \"02:00:00:00:00:02\"\n"
            ))
        };
        let got = with("af_xdp", 1024);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].0, "pool.buf_size");
        assert!(
            got[0].1.contains("port[0] (af_xdp)") && got[0].1.contains("at least 2048"),
            "{got:?}"
        );
        assert_eq!(with("af_xdp", 2048), []);
        assert_eq!(with("af_packet", 1024), []);
    }

    /// Several workers' caches together hold at most the pool (one worker's may hold it
    /// all: nobody else needs a buffer); a backlog ring given holds at most the pool,
    /// when RPS is on (off, the ring is never made); the default ring is not held to it.
    #[test]
    fn what_holds_packets_fits_the_pool() {
        let got = keys("[datapath]\nworkers = 4\n[pool]\nbuffers = 1024\ncache_size = 257\n");
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].0, "pool.cache_size");
        assert!(
            got[0]
                .1
                .contains("4 workers caching 257 buffers each hold 1028")
        );
        assert_eq!(
            keys("[datapath]\nworkers = 4\n[pool]\nbuffers = 1024\ncache_size = 256\n"),
            []
        );
        let got = keys("[datapath]\nworkers = 2\n[pool]\nbuffers = 1000\n");
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(
            got[0].1.contains("caching 512 (the default) buffers"),
            "{got:?}"
        );
        assert_eq!(keys("[pool]\nbuffers = 64\ncache_size = 512\n"), []);
        let rps = |backlog: u32, on: &str| {
            keys(&format!(
                "[datapath]\nrps = \"{on}\"\nmax_backlog = {backlog}\n\
                 [pool]\nbuffers = 1024\ncache_size = 16\n"
            ))
        };
        let got = rps(1025, "backlog");
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].0, "datapath.max_backlog");
        assert!(got[0].1.contains("more than the 1024 packet buffers"));
        assert_eq!(rps(1024, "backlog"), []);
        assert_eq!(rps(1025, "off"), []);
        // The default ring (1000) with a smaller pool: not a choice the file made.
        assert_eq!(
            keys("[datapath]\nrps = \"backlog\"\n[pool]\nbuffers = 64\ncache_size = 16\n"),
            []
        );
    }
}
