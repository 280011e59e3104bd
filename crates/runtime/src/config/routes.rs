//! `[[route]]` and `route_files`: inline routes first, then the routes of each file (read
//! relative to the configuration's directory), out through the interfaces the ports
//! define; IPv4 and IPv6 routes alike, each family into its own list.
//!
//! netbatch has one route table per family, so a prefix (after masking) is routed once:
//! a second route for it, inline or in a file, is refused naming the first, as Linux's
//! `ip route add` refuses it (`EEXIST`, "File exists"); `ip route replace` semantics
//! would let the last one silently win. A configured route may still replace a
//! connected one (the route table's rule; see `setup::build_routes`). The check sorts
//! one key per route once every route is read (O(n log n), a few tens of milliseconds
//! for a million-line file); of a file's repeats, the first [`REPEATS_SHOWN`] are listed
//! and the rest counted. A file listed twice is refused once, at its second listing.
//! Errors come in the order of the routes they are about (inline routes, then each
//! file's lines).
//!
//! A multipath `[[route]]` lists its next hops instead of `via` and `dev`, as `ip route`'s
//! `nexthop` words: `nexthops = [{ via = "A", dev = "X", weight = 1 }, { via = "B",
//! weight = 2 }]` (each `via` or `dev` or both, the device found from the gateway's
//! subnet when left out, weight 1 to 256, 1 when left out). One next hop makes a
//! single-path route, as the kernel keeps it.
//!
//! An IPv6 route has an IPv6 prefix (`2001:db8::/32`, `::/0`), or is `default` with an
//! IPv6 gateway (its `via`, or its first next hop's). Its rules are the route files'
//! (`netbatch_stack::route::file`): every gateway of the route's family; a gateway
//! that is a router's unicast address (not unspecified, loopback, multicast or
//! IPv4-mapped); a link-local gateway (`fe80::/10`) only with `dev`, which says which
//! link; without `dev`, a gateway on some interface's on-link prefix (`addresses`); no
//! prefix inside `fe80::/10` or `ff00::/8`, which routing never looks up.

use std::path::{Path, PathBuf};

use netbatch_stack::route::file::{self as route_file, AnyRoute, LineFamily, gateway_problem};
use netbatch_stack::route::{
    Family, MAX_NEXT_HOPS, MAX_WEIGHT, MultipathOf, NextHopOf, Route, Route6, RouteKind, RouteOf,
    V4, V6,
};

use super::Errs;
use super::ports::Names;

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RouteFile {
    prefix: String,
    via: Option<String>,
    dev: Option<String>,
    #[serde(default = "default_route_kind")]
    kind: String,
    nexthops: Option<Vec<NextHopFile>>,
    /// The table (`main` when left out; the others are `rules`'s).
    table: Option<super::rules::Val>,
    /// The VRF (its table; `rules`'s, as a numbered table's routes are).
    vrf: Option<String>,
}

impl RouteFile {
    /// The route's `table`, if it names one.
    pub(super) fn table(&self) -> Option<&super::rules::Val> {
        self.table.as_ref()
    }

    /// The route's `vrf`, if it names one.
    pub(super) fn vrf(&self) -> Option<&str> {
        self.vrf.as_deref()
    }
}

/// One of `[[route]]`'s `nexthops`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct NextHopFile {
    via: Option<String>,
    dev: Option<String>,
    weight: Option<i64>,
}

fn default_route_kind() -> String {
    "unicast".into()
}

/// Repeated prefixes listed per route file before the rest are only counted.
pub(super) const REPEATS_SHOWN: usize = 10;

/// Where one family's routes came from, by their place in its list: the `[[route]]`
/// number of each inline one, then each file's first place and number, and each file
/// route's line.
#[derive(Default)]
struct Origins {
    inline: Vec<usize>,
    files: Vec<(usize, usize)>,
    lines: Vec<u32>,
}

/// Where in the configuration something is, in the order errors are reported: inline
/// routes (file 0, by number), then route file `i` as file `i + 1` (by line).
type Place = (usize, usize);

impl Origins {
    /// The file number of the route at `pos` (past the inline ones).
    fn file_of(&self, pos: usize) -> usize {
        let i = self.files.partition_point(|&(start, _)| start <= pos);
        self.files[i.saturating_sub(1)].1
    }

    /// The route at `pos`, as an error names it.
    fn name(&self, pos: usize, files: &[String]) -> String {
        match self.inline.get(pos) {
            Some(i) => format!("route[{i}]"),
            None => format!(
                "{} line {}",
                files[self.file_of(pos)],
                self.lines[pos - self.inline.len()]
            ),
        }
    }

    /// The place of the route at `pos`.
    fn place(&self, pos: usize) -> Place {
        match self.inline.get(pos) {
            Some(&i) => (0, i),
            None => (
                self.file_of(pos) + 1,
                self.lines[pos - self.inline.len()] as usize,
            ),
        }
    }
}

/// One family's routes, with where each came from.
struct List<F: Family> {
    routes: Vec<RouteOf<F>>,
    from: Origins,
}

impl<F: Family> Default for List<F> {
    fn default() -> Self {
        Self {
            routes: Vec::new(),
            from: Origins::default(),
        }
    }
}

/// A route repeated: where it is, the error's key, why, and its file (none inline).
struct Repeat {
    place: Place,
    key: String,
    why: String,
    file: Option<usize>,
}

impl<F: Family> List<F> {
    /// Every route of the list whose prefix an earlier one has, named (see [`Repeat`]).
    fn repeats(&self, pairs: &[(usize, usize)], files: &[String]) -> Vec<Repeat> {
        pairs
            .iter()
            .map(|&(pos, first)| {
                let p = self.routes[pos].prefix;
                let why = format!(
                    "{p} is routed twice: {} and {} (one route per prefix)",
                    self.from.name(first, files),
                    self.from.name(pos, files)
                );
                match self.from.inline.get(pos) {
                    Some(ri) => Repeat {
                        place: self.from.place(pos),
                        key: format!("route[{ri}].prefix"),
                        why,
                        file: None,
                    },
                    None => {
                        let fi = self.from.file_of(pos);
                        Repeat {
                            place: self.from.place(pos),
                            key: format!("route_files[{fi}]"),
                            why,
                            file: Some(fi),
                        }
                    }
                }
            })
            .collect()
    }
}

/// Validates `[[route]]` (`raw`) and then reads `route_files` (`files`, relative to
/// `dir`); `names` are the interfaces the ports define. Returns the IPv4 and the IPv6
/// routes, each in order.
pub(super) fn validate(
    raw: &[RouteFile],
    files: &[String],
    dir: &Path,
    names: &Names,
    e: &mut Errs,
) -> (Vec<Route>, Vec<Route6>) {
    let mut v4 = List::<V4>::default();
    let mut v6 = List::<V6>::default();
    // Errors with their place, to be put in order with the repeats (found once every
    // route is read).
    let mut later: Vec<(Place, String, String)> = Vec::new();
    for (ri, r) in raw.iter().enumerate() {
        // Routes of other tables and of VRFs are `rules`'s to check.
        if !super::rules::in_main(r.table.as_ref()) || r.vrf.is_some() {
            continue;
        }
        // A gateway without dev is on a subnet of main's.
        let main = super::ports::Scoped { names, vrf: "" };
        match inline(r, &format!("route[{ri}]"), &main, e) {
            Some(AnyRoute::V4(route)) => {
                v4.routes.push(route);
                v4.from.inline.push(ri);
            }
            Some(AnyRoute::V6(route)) => {
                v6.routes.push(route);
                v6.from.inline.push(ri);
            }
            None => {}
        }
    }
    for (fi, f) in files.iter().enumerate() {
        let key = format!("route_files[{fi}]");
        if let Some(first) = files[..fi].iter().position(|x| x == f) {
            later.push((
                (fi + 1, 0),
                key,
                format!("'{f}' is also route_files[{first}]"),
            ));
            continue;
        }
        let path = if Path::new(f).is_absolute() {
            PathBuf::from(f)
        } else {
            dir.join(f)
        };
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(err) => {
                later.push((
                    (fi + 1, 0),
                    key,
                    format!("cannot read {}: {err}", path.display()),
                ));
                continue;
            }
        };
        // About 40 bytes a line: room for the file without growing as it is read (the
        // family of most of its lines is not known yet: the first line's is guessed).
        let lines = text.len() / 40;
        if first_line_is_v6(&text) {
            v6.routes.reserve(lines);
            v6.from.lines.reserve(lines);
        } else {
            v4.routes.reserve(lines);
            v4.from.lines.reserve(lines);
        }
        v4.from.files.push((v4.routes.len(), fi));
        v6.from.files.push((v6.routes.len(), fi));
        let line_of = |line: usize| u32::try_from(line).unwrap_or(u32::MAX);
        let read = route_file::each_route(
            &text,
            &super::ports::Scoped { names, vrf: "" },
            |route, line| match route {
                AnyRoute::V4(r) => {
                    v4.routes.push(r);
                    v4.from.lines.push(line_of(line));
                }
                AnyRoute::V6(r) => {
                    v6.routes.push(r);
                    v6.from.lines.push(line_of(line));
                }
            },
        );
        if let Err(le) = read {
            later.push(((fi + 1, le.line), key, format!("{}: {le}", path.display())));
        }
    }
    // Each repeat once, at its place; past REPEATS_SHOWN in one file, only counted.
    let mut repeats = v4.repeats(&repeats4(&v4.routes), files);
    repeats.extend(v6.repeats(&repeats6(&v6.routes), files));
    repeats.sort_by_key(|r| r.place);
    let mut shown_in = vec![0usize; files.len()];
    let mut more_in: Vec<Option<(Place, usize)>> = vec![None; files.len()];
    for r in repeats {
        match r.file {
            Some(fi) if shown_in[fi] >= REPEATS_SHOWN => {
                let m = more_in[fi].get_or_insert((r.place, 0));
                *m = (r.place, m.1 + 1);
            }
            Some(fi) => {
                shown_in[fi] += 1;
                later.push((r.place, r.key, r.why));
            }
            None => later.push((r.place, r.key, r.why)),
        }
    }
    for (fi, m) in more_in.iter().enumerate() {
        if let Some((place, n)) = m {
            later.push((
                *place,
                format!("route_files[{fi}]"),
                format!("and {n} more prefixes of {} routed twice", files[fi]),
            ));
        }
    }
    later.sort_by_key(|(place, _, _)| *place);
    for (_, key, why) in later {
        e.add(key, why);
    }
    (v4.routes, v6.routes)
}

/// Whether the first route line of `text` is IPv6 (a guess at the file's family).
fn first_line_is_v6(text: &str) -> bool {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .find(|l| !l.is_empty())
        .is_some_and(|l| l.contains(':'))
}

/// The pairs (place, earliest place) of equal keys in `sorted` (sorted by key, then
/// place), in the order of the later place.
fn equal_keys<K: PartialEq>(sorted: impl Iterator<Item = (K, usize)>) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut first: Option<(K, usize)> = None;
    for (k, pos) in sorted {
        match &first {
            Some((fk, fpos)) if *fk == k => out.push((pos, *fpos)),
            _ => first = Some((k, pos)),
        }
    }
    out.sort_unstable();
    out
}

/// Every IPv4 route whose prefix an earlier one has, as (its place, the earliest's
/// place), in order: one sort of (prefix, place) keys, in one word each while places fit
/// in [`PLACE_BITS`] bits.
fn repeats4(routes: &[Route]) -> Vec<(usize, usize)> {
    let prefix = |r: &Route| (u64::from(r.prefix.bits()) << 8) | u64::from(r.prefix.prefix_len());
    if routes.len() < 1 << PLACE_BITS {
        // Prefix bits and length above, place below: sorting the words sorts by prefix,
        // then place.
        let mut words: Vec<u64> = routes
            .iter()
            .enumerate()
            .map(|(pos, r)| (prefix(r) << PLACE_BITS) | pos as u64)
            .collect();
        words.sort_unstable();
        let mask = (1u64 << PLACE_BITS) - 1;
        equal_keys(words.iter().map(|w| (w >> PLACE_BITS, (w & mask) as usize)))
    } else {
        let mut pairs: Vec<(u64, usize)> = routes
            .iter()
            .enumerate()
            .map(|(pos, r)| (prefix(r), pos))
            .collect();
        pairs.sort_unstable();
        equal_keys(pairs.into_iter())
    }
}

/// [`repeats4`] for IPv6 routes: (prefix bits, length, place) keys.
fn repeats6(routes: &[Route6]) -> Vec<(usize, usize)> {
    let mut keys: Vec<(u128, u8, usize)> = routes
        .iter()
        .enumerate()
        .map(|(pos, r)| (r.prefix.bits(), r.prefix.prefix_len(), pos))
        .collect();
    keys.sort_unstable();
    equal_keys(keys.into_iter().map(|(b, l, pos)| ((b, l), pos)))
}

/// Bits of a route's place in [`repeats4`]' one-word keys (40 bits of prefix and length
/// above them).
const PLACE_BITS: u32 = 24;

/// One `[[route]]` under `key`, of the family its prefix (or for `default`, its first
/// gateway) says.
pub(super) fn inline(
    r: &RouteFile,
    key: &str,
    names: &dyn route_file::Resolve,
    e: &mut Errs,
) -> Option<AnyRoute> {
    let v6 = if r.prefix == "default" {
        let first_via = r
            .via
            .as_deref()
            .or_else(|| r.nexthops.iter().flatten().find_map(|h| h.via.as_deref()));
        first_via.is_some_and(|v| v.contains(':'))
    } else {
        r.prefix.contains(':')
    };
    if v6 {
        inline_of::<V6>(r, key, names, e).map(AnyRoute::V6)
    } else {
        inline_of::<V4>(r, key, names, e).map(AnyRoute::V4)
    }
}

/// One `[[route]]` under `key`, of family `F`.
fn inline_of<F: LineFamily>(
    r: &RouteFile,
    key: &str,
    names: &dyn route_file::Resolve,
    e: &mut Errs,
) -> Option<RouteOf<F>> {
    let pkey = format!("{key}.prefix");
    let prefix = match F::prefix(&r.prefix) {
        Ok(p) => p,
        Err(why) => {
            e.add(
                pkey,
                format!("'{}' is not {}: {why}", r.prefix, F::PREFIX_FORM),
            );
            return None;
        }
    };
    if let Some(why) = F::unused_prefix(&prefix) {
        e.add(pkey, why);
        return None;
    }
    let kind = match r.kind.as_str() {
        "unicast" => RouteKind::Unicast,
        "blackhole" => RouteKind::Blackhole,
        "unreachable" => RouteKind::Unreachable,
        "prohibit" => RouteKind::Prohibit,
        "throw" => RouteKind::Throw,
        other => {
            e.add(
                format!("{key}.kind"),
                format!(
                    "unknown route kind '{other}' (unicast, blackhole, unreachable, prohibit, throw)"
                ),
            );
            return None;
        }
    };
    if kind != RouteKind::Unicast {
        if r.via.is_some() || r.dev.is_some() || r.nexthops.is_some() {
            e.add(
                key,
                format!("a {} route takes no via, dev or nexthops", r.kind),
            );
        }
        return Some(RouteOf::new(prefix, kind, None, None));
    }
    if let Some(hops) = &r.nexthops {
        if r.via.is_some() || r.dev.is_some() {
            e.add(
                key,
                "a route has via and dev, or nexthops (each with its via and dev), not both",
            );
            return None;
        }
        return multipath::<F>(prefix, hops, key, names, e);
    }
    let (out_if, gw) = next_hop::<F>(&prefix, r.via.as_deref(), r.dev.as_deref(), key, names, e)?;
    Some(RouteOf::new(prefix, kind, Some(out_if), gw))
}

/// The output interface and gateway of a next hop under `key` (a route for `prefix`,
/// or one of its `nexthops`) from its `via` and `dev`.
fn next_hop<F: LineFamily>(
    prefix: &F::Prefix,
    via: Option<&str>,
    dev: Option<&str>,
    key: &str,
    names: &dyn route_file::Resolve,
    e: &mut Errs,
) -> Option<(u16, Option<F::Addr>)> {
    let vkey = format!("{key}.via");
    let gw = match via.map(|v| route_file::address::<F>(v, prefix)) {
        Some(Ok(g)) => Some(g),
        Some(Err(why)) => {
            e.add(&vkey, why);
            None
        }
        None => None,
    };
    let dev = match dev {
        Some(d) => match route_file::Resolve::iface(names, d) {
            Some(i) => Some(i),
            None => {
                e.add(format!("{key}.dev"), format!("no interface named '{d}'"));
                return None;
            }
        },
        None => None,
    };
    if let Some(g) = gw
        && let Some(why) = gateway_problem::<F>(g, dev.is_some(), "add dev")
    {
        e.add(vkey, why);
        return None;
    }
    let out_if = match (dev, gw) {
        (Some(d), _) => d,
        (None, Some(g)) => match F::gateway_iface(names, g) {
            Some(i) => i,
            None => {
                e.add(vkey, format!("gateway {g} {}; add dev", F::OFF_LINK));
                return None;
            }
        },
        (None, None) => {
            if via.is_none() {
                e.add(key, "a unicast route needs via or dev");
            }
            return None;
        }
    };
    Some((out_if, gw))
}

/// A route over `nexthops` under `key`.
fn multipath<F: LineFamily>(
    prefix: F::Prefix,
    nexthops: &[NextHopFile],
    key: &str,
    names: &dyn route_file::Resolve,
    e: &mut Errs,
) -> Option<RouteOf<F>> {
    if nexthops.is_empty() || nexthops.len() > MAX_NEXT_HOPS {
        e.add(
            format!("{key}.nexthops"),
            format!("{} next hops (1 to {MAX_NEXT_HOPS})", nexthops.len()),
        );
        return None;
    }
    let mut hops = Vec::with_capacity(nexthops.len());
    for (i, h) in nexthops.iter().enumerate() {
        let k = format!("{key}.nexthops[{i}]");
        let weight = match h.weight {
            None => Some(1),
            Some(w) => match u16::try_from(w) {
                Ok(w) if (1..=MAX_WEIGHT).contains(&w) => Some(w),
                _ => {
                    e.add(
                        format!("{k}.weight"),
                        format!("weight {w} is not from 1 to {MAX_WEIGHT}"),
                    );
                    None
                }
            },
        };
        let hop = next_hop::<F>(&prefix, h.via.as_deref(), h.dev.as_deref(), &k, names, e);
        if let (Some((out_if, gateway)), Some(weight)) = (hop, weight) {
            hops.push(NextHopOf {
                gateway,
                out_if,
                weight,
            });
        }
    }
    if hops.len() < nexthops.len() {
        return None;
    }
    if let [one] = hops[..] {
        return Some(RouteOf::new(
            prefix,
            RouteKind::Unicast,
            Some(one.out_if),
            one.gateway,
        ));
    }
    match MultipathOf::new(hops) {
        Ok(m) => Some(RouteOf::multipath(prefix, m)),
        Err(err) => {
            e.add(format!("{key}.nexthops"), err.to_string());
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::Config;
    use super::REPEATS_SHOWN;

    const PORT: &str = r#"
        [[port]]
        name = "eth0"
        mac = "02:00:00:00:00:01"
        addresses = ["192.0.2.1/24"]
    "#;

    /// A directory of this test's own, removed when dropped, whether the test passes or
    /// panics.
    struct Dir(tempfile::TempDir);

    impl Dir {
        fn new(tag: &str) -> Self {
            Self(
                tempfile::Builder::new()
                    .prefix(&format!("netbatch-config-routes-{tag}-"))
                    .tempdir()
                    .expect("temporary directory"),
            )
        }
        fn path(&self) -> &Path {
            self.0.path()
        }
    }

    fn errors(text: &str, dir: &Path) -> Vec<(String, String)> {
        match Config::parse(text, dir, "test.toml") {
            Ok(_) => Vec::new(),
            Err(e) => e.errors.into_iter().map(|x| (x.key, x.reason)).collect(),
        }
    }

    /// A prefix is routed once, as `ip route add` refuses a second route for it with
    /// "File exists": inline, in a file, or one of each; the later is refused, naming
    /// both. Host bits are masked by the prefix syntax already, and `default` is
    /// 0.0.0.0/0 whichever way it is written. A file listed twice is refused once.
    #[test]
    fn a_prefix_routed_twice_is_refused_naming_both() {
        let dir = Dir::new("twice");
        std::fs::write(
            dir.path().join("routes.txt"),
            "# upstream\n10.9.0.0/16 via 192.0.2.9\n\n10.2.0.0/16 via 192.0.2.9\n\
             blackhole 10.3.0.0/16\n10.9.0.0/16 dev eth0\n0.0.0.0/0 via 192.0.2.254\n",
        )
        .expect("route file");
        let text = format!(
            r#"route_files = ["routes.txt", "routes.txt"]
            {PORT}
            [[route]]
            prefix = "10.1.0.0/16"
            via = "192.0.2.254"
            [[route]]
            prefix = "10.2.0.0/16"
            via = "192.0.2.254"
            [[route]]
            prefix = "10.1.0.0/16"
            kind = "blackhole"
            [[route]]
            prefix = "default"
            via = "192.0.2.254"
            "#
        );
        let got = errors(&text, dir.path());
        let want = [
            (
                "route[2].prefix",
                "10.1.0.0/16 is routed twice: route[0] and route[2]",
            ),
            (
                "route_files[0]",
                "10.2.0.0/16 is routed twice: route[1] and routes.txt line 4",
            ),
            (
                "route_files[0]",
                "10.9.0.0/16 is routed twice: routes.txt line 2 and routes.txt line 6",
            ),
            (
                "route_files[0]",
                "0.0.0.0/0 is routed twice: route[3] and routes.txt line 7",
            ),
            ("route_files[1]", "'routes.txt' is also route_files[0]"),
        ];
        assert_eq!(got.len(), want.len(), "{got:#?}");
        for ((k, r), (wk, wr)) in got.iter().zip(want) {
            assert_eq!(k, wk, "{got:#?}");
            assert!(r.contains(wr), "{k}: «{r}» lacks «{wr}»");
        }
    }

    /// A file that repeats many prefixes lists the first few and counts the rest, rather
    /// than drowning the other errors.
    #[test]
    fn many_repeats_are_counted_not_all_listed() {
        let dir = Dir::new("many");
        let once: String = (0..25)
            .map(|i| format!("10.{i}.0.0/16 via 192.0.2.9\n"))
            .collect();
        std::fs::write(dir.path().join("r.txt"), once.repeat(2)).expect("route file");
        let got = errors(&format!("route_files = [\"r.txt\"]\n{PORT}"), dir.path());
        assert_eq!(got.len(), REPEATS_SHOWN + 1, "{got:#?}");
        assert!(
            got[0].1.contains("r.txt line 1 and r.txt line 26"),
            "{got:#?}"
        );
        assert!(
            got[REPEATS_SHOWN].1.contains(&format!(
                "and {} more prefixes of r.txt",
                25 - REPEATS_SHOWN
            )),
            "{got:#?}"
        );
    }

    /// Distinct prefixes in a file (a million of them, as a full Internet table has) load
    /// with their lines' routes, in order.
    #[test]
    fn a_large_file_of_distinct_prefixes_loads() {
        let dir = Dir::new("large");
        let n = 1u32 << 20;
        let mut text = String::with_capacity(n as usize * 32);
        for i in 0..n {
            // Distinct /24s from 11.0.0.0 up.
            let a = (11u32 << 24) + (i << 8);
            let [o1, o2, o3, _] = a.to_be_bytes();
            text += &format!("{o1}.{o2}.{o3}.0/24 via 192.0.2.9\n");
        }
        std::fs::write(dir.path().join("big.txt"), text).expect("route file");
        let t0 = std::time::Instant::now();
        let c = Config::parse(
            &format!("route_files = [\"big.txt\"]\n{PORT}"),
            dir.path(),
            "test.toml",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        eprintln!("{} routes validated in {:?}", c.routes.len(), t0.elapsed());
        assert_eq!(c.routes.len(), n as usize);
        assert_eq!(c.routes[1].prefix.to_string(), "11.0.1.0/24");
    }

    const TWO_PORTS: &str = r#"
        [[port]]
        name = "eth0"
        mac = "02:00:00:00:00:01"
        addresses = ["192.0.2.1/24"]

        [[port]]
        name = "eth1"
        mac = "02:00:00:00:00:02"
        addresses = ["198.51.100.1/24"]
    "#;

    /// `nexthops` make a multipath route as `ip route add ... nexthop ...` does: each
    /// next hop's device from `dev` or from its gateway's subnet, weight 1 when left
    /// out; one next hop is a plain route; the route file's `nexthop` words give the same
    /// route as the inline form.
    #[test]
    fn nexthops_make_a_multipath_route() {
        use netbatch_stack::route::{NextHop, Route, RouteKind};
        let dir = Dir::new("multipath");
        std::fs::write(
            dir.path().join("r.txt"),
            "10.2.0.0/16 nexthop via 192.0.2.9 weight 2 nexthop via 198.51.100.9 dev eth1\n",
        )
        .expect("route file");
        let text = format!(
            r#"route_files = ["r.txt"]
            {TWO_PORTS}
            [[route]]
            prefix = "10.1.0.0/16"
            nexthops = [{{ via = "192.0.2.9", weight = 2 }}, {{ via = "198.51.100.9", dev = "eth1" }}]
            [[route]]
            prefix = "10.3.0.0/16"
            nexthops = [{{ dev = "eth1", weight = 256 }}, {{ via = "192.0.2.7", dev = "eth0", weight = 1 }}]
            [[route]]
            prefix = "10.4.0.0/16"
            nexthops = [{{ via = "198.51.100.7", weight = 9 }}]
            "#
        );
        let c = Config::parse(&text, dir.path(), "test.toml").unwrap_or_else(|e| panic!("{e}"));
        let gw = |s: &str| Some(s.parse().expect("address"));
        let hops = |r: &Route| {
            r.multipath
                .as_ref()
                .map(|m| m.hops().to_vec())
                .unwrap_or_default()
        };
        let nh = |gateway, out_if, weight| NextHop {
            gateway,
            out_if,
            weight,
        };
        assert_eq!(
            hops(&c.routes[0]),
            [nh(gw("192.0.2.9"), 0, 2), nh(gw("198.51.100.9"), 1, 1)]
        );
        assert_eq!(
            hops(&c.routes[1]),
            [nh(None, 1, 256), nh(gw("192.0.2.7"), 0, 1)]
        );
        assert_eq!(
            c.routes[2],
            Route::new(
                "10.4.0.0/16".parse().expect("prefix"),
                RouteKind::Unicast,
                Some(1),
                gw("198.51.100.7")
            )
        );
        assert_eq!(
            hops(&c.routes[3]),
            hops(&c.routes[0]),
            "the route file's form"
        );
        assert_eq!(c.routes[3].prefix.to_string(), "10.2.0.0/16");
    }

    /// Every mistake in `nexthops` is named by its key.
    #[test]
    fn nexthop_mistakes_name_their_key() {
        let dir = Dir::new("multipath-bad");
        let text = format!(
            r#"{TWO_PORTS}
            [[route]]
            prefix = "10.1.0.0/16"
            nexthops = [{{ via = "192.0.2.9", weight = 0 }}, {{ via = "203.0.113.9" }}]
            [[route]]
            prefix = "10.2.0.0/16"
            nexthops = [{{ dev = "eth7" }}, {{ via = "192.0.2", weight = 257 }}, {{ weight = 2 }}]
            [[route]]
            prefix = "10.3.0.0/16"
            via = "192.0.2.9"
            nexthops = [{{ via = "192.0.2.9" }}, {{ via = "192.0.2.8" }}]
            [[route]]
            prefix = "10.4.0.0/16"
            kind = "blackhole"
            nexthops = [{{ via = "192.0.2.9" }}, {{ via = "192.0.2.8" }}]
            [[route]]
            prefix = "10.5.0.0/16"
            nexthops = []
            "#
        );
        let got = errors(&text, dir.path());
        let want = [
            (
                "route[0].nexthops[0].weight",
                "weight 0 is not from 1 to 256",
            ),
            (
                "route[0].nexthops[1].via",
                "gateway 203.0.113.9 is not on a connected subnet",
            ),
            ("route[1].nexthops[0].dev", "no interface named 'eth7'"),
            ("route[1].nexthops[1].weight", "weight 257"),
            (
                "route[1].nexthops[1].via",
                "'192.0.2' is not an IPv4 address",
            ),
            ("route[1].nexthops[2]", "needs via or dev"),
            ("route[2]", "via and dev, or nexthops"),
            (
                "route[3]",
                "a blackhole route takes no via, dev or nexthops",
            ),
            ("route[4].nexthops", "0 next hops (1 to 256)"),
        ];
        assert_eq!(got.len(), want.len(), "{got:#?}");
        for ((k, r), (wk, wr)) in got.iter().zip(want) {
            assert_eq!(k, wk, "{got:#?}");
            assert!(r.contains(wr), "{k}: «{r}» lacks «{wr}»");
        }
        // An unknown key in a next hop is refused by name.
        let unknown = format!(
            r#"{TWO_PORTS}
            [[route]]
            prefix = "10.1.0.0/16"
            nexthops = [{{ via = "192.0.2.9", metric = 2 }}, {{ via = "192.0.2.8" }}]
            "#
        );
        let got = errors(&unknown, dir.path());
        assert!(
            got.iter()
                .any(|(k, r)| k == "route[0].nexthops[0].metric" && r.starts_with("unknown key")),
            "{got:#?}"
        );
    }

    const DUAL: &str = r#"
        [[port]]
        name = "eth0"
        mac = "02:00:00:00:00:01"
        addresses = ["192.0.2.1/24", "2001:db8:a::1/64"]

        [[port]]
        name = "eth1"
        mac = "02:00:00:00:00:02"
        addresses = ["198.51.100.1/24", "2001:db8:b::1/64"]
    "#;

    /// IPv6 routes, inline and in a route file mixed with IPv4 lines, land in
    /// `routes6` with the device named or found from the gateway's on-link prefix; a
    /// `default` is IPv6 when its gateway is; IPv4 and IPv6 routes for the "same"
    /// prefix (the two defaults) are two routes, one per table.
    #[test]
    fn ipv6_routes_inline_and_in_files() {
        use netbatch_stack::prefix::Ipv6Prefix;
        use netbatch_stack::route::{NextHop6, Route6, RouteKind};
        let dir = Dir::new("ipv6");
        std::fs::write(
            dir.path().join("r.txt"),
            "10.9.0.0/16 via 192.0.2.9\n2001:db8:1::/48 via fe80::1 dev eth1\n\
             default via 2001:db8:b::fe\nblackhole 2001:db8:dead::/48\n\
             2001:db8:3::/48 nexthop via fe80::1 dev eth0 nexthop via 2001:db8:b::2 weight 3\n",
        )
        .expect("route file");
        let text = format!(
            r#"route_files = ["r.txt"]
            {DUAL}
            [[route]]
            prefix = "2001:db8:5::/48"
            via = "2001:db8:a::9"
            [[route]]
            prefix = "2001:db8:6::/48"
            dev = "eth1"
            [[route]]
            prefix = "default"
            via = "198.51.100.254"
            [[route]]
            prefix = "2001:db8:7::/48"
            kind = "unreachable"
            [[route]]
            prefix = "2001:db8:8::/48"
            nexthops = [{{ via = "fe80::2", dev = "eth0" }}, {{ via = "2001:db8:b::3", weight = 2 }}]
            "#
        );
        let c = Config::parse(&text, dir.path(), "test.toml").unwrap_or_else(|e| panic!("{e}"));
        let p = |s: &str| s.parse::<Ipv6Prefix>().expect("prefix");
        let a = |s: &str| Some(s.parse().expect("address"));
        let hops = |r: &Route6| r.multipath.as_ref().map(|m| m.hops().to_vec());
        let nh = |gateway, out_if, weight| NextHop6 {
            gateway,
            out_if,
            weight,
        };
        assert_eq!(c.routes6.len(), 8, "{:#?}", c.routes6);
        assert_eq!(
            c.routes6[0],
            Route6::new(
                p("2001:db8:5::/48"),
                RouteKind::Unicast,
                Some(0),
                a("2001:db8:a::9")
            )
        );
        assert_eq!(
            c.routes6[1],
            Route6::new(p("2001:db8:6::/48"), RouteKind::Unicast, Some(1), None)
        );
        assert_eq!(
            c.routes6[2],
            Route6::new(p("2001:db8:7::/48"), RouteKind::Unreachable, None, None)
        );
        assert_eq!(
            hops(&c.routes6[3]),
            Some(vec![nh(a("fe80::2"), 0, 1), nh(a("2001:db8:b::3"), 1, 2)])
        );
        assert_eq!(
            c.routes6[4],
            Route6::new(
                p("2001:db8:1::/48"),
                RouteKind::Unicast,
                Some(1),
                a("fe80::1")
            )
        );
        assert_eq!(
            c.routes6[5],
            Route6::new(p("::/0"), RouteKind::Unicast, Some(1), a("2001:db8:b::fe"))
        );
        assert_eq!(c.routes6[6].kind, RouteKind::Blackhole);
        assert_eq!(
            hops(&c.routes6[7]),
            Some(vec![nh(a("fe80::1"), 0, 1), nh(a("2001:db8:b::2"), 1, 3)])
        );
        let v4: Vec<String> = c.routes.iter().map(|r| r.prefix.to_string()).collect();
        assert_eq!(v4, ["0.0.0.0/0", "10.9.0.0/16"]);
    }

    /// Every IPv6 mistake is refused at its key, with the reason: host bits, a length
    /// above 128, a gateway off-link, a link-local gateway without dev, a multicast
    /// gateway, a gateway of the other family (both ways), a link-local prefix, a
    /// prefix routed twice (per family: the IPv4 and IPv6 defaults do not clash), and
    /// in a route file the line with its reason.
    #[test]
    fn ipv6_route_mistakes_name_their_key() {
        let dir = Dir::new("ipv6-bad");
        std::fs::write(
            dir.path().join("r.txt"),
            "default via 2001:db8:a::fe\n0.0.0.0/0 via 192.0.2.254\n2001:db8:5::/48 dev eth0\n\
             2001:db8:9::/48 via fe80::1\n",
        )
        .expect("route file");
        let text = format!(
            r#"route_files = ["r.txt"]
            {DUAL}
            [[route]]
            prefix = "2001:db8::1/32"
            dev = "eth0"
            [[route]]
            prefix = "2001:db8::/129"
            dev = "eth0"
            [[route]]
            prefix = "2001:db8:1::/48"
            via = "2001:db8:99::1"
            [[route]]
            prefix = "2001:db8:2::/48"
            via = "fe80::1"
            [[route]]
            prefix = "2001:db8:3::/48"
            via = "ff02::2"
            dev = "eth0"
            [[route]]
            prefix = "2001:db8:4::/48"
            via = "192.0.2.9"
            [[route]]
            prefix = "10.4.0.0/16"
            via = "2001:db8:a::9"
            [[route]]
            prefix = "fe80::/64"
            dev = "eth0"
            [[route]]
            prefix = "2001:db8:5::/48"
            kind = "blackhole"
            [[route]]
            prefix = "::/0"
            via = "2001:db8:b::fe"
            [[route]]
            prefix = "2001:db8:6::/48"
            nexthops = [{{ via = "fe80::1", dev = "eth0" }}, {{ via = "fe80::2" }}]
            "#
        );
        let got = errors(&text, dir.path());
        let want = [
            (
                "route[0].prefix",
                "'2001:db8::1/32' is not an IPv6 prefix (addr/len, host bits zero): '2001:db8::1/32' has host bits set beyond its length",
            ),
            ("route[1].prefix", "prefix length 129 is above 128"),
            (
                "route[2].via",
                "gateway 2001:db8:99::1 is not on-link (on no interface's IPv6 prefix); add dev",
            ),
            (
                "route[3].via",
                "gateway fe80::1 is link-local, which names a router only together with its link (RFC 4007 6); add dev",
            ),
            ("route[4].via", "gateway ff02::2 is a multicast group"),
            (
                "route[5].via",
                "'192.0.2.9' is an IPv4 address: the gateway of an IPv6 route (2001:db8:4::/48) is an IPv6 address",
            ),
            (
                "route[6].via",
                "'2001:db8:a::9' is an IPv6 address: the gateway of an IPv4 route (10.4.0.0/16) is an IPv4 address",
            ),
            ("route[7].prefix", "fe80::/64 is link-local"),
            ("route[10].nexthops[1].via", "gateway fe80::2 is link-local"),
            (
                "route_files[0]",
                "::/0 is routed twice: route[9] and r.txt line 1 (one route per prefix)",
            ),
            (
                "route_files[0]",
                "2001:db8:5::/48 is routed twice: route[8] and r.txt line 3",
            ),
            (
                "route_files[0]",
                "r.txt: line 4: gateway fe80::1 is link-local",
            ),
        ];
        assert_eq!(got.len(), want.len(), "{got:#?}");
        for ((k, r), (wk, wr)) in got.iter().zip(want) {
            assert_eq!(k, wk, "{got:#?}");
            assert!(r.contains(wr), "{k}: «{r}» lacks «{wr}»");
        }
    }

    /// A million distinct IPv6 prefixes in a file load, in order, with their checks
    /// (the one-route-per-prefix sort included).
    #[test]
    fn a_large_ipv6_file_loads() {
        let dir = Dir::new("large6");
        let n = 1u32 << 20;
        let mut text = String::with_capacity(n as usize * 40);
        for i in 0..n {
            // Distinct /48s from 2001:db8:: up, and /64s in a second /32 for variety.
            let (hi, lo) = ((i >> 16) as u16, i as u16);
            if i % 2 == 0 {
                text += &format!("2001:{hi:x}:{lo:x}::/48 via 2001:db8:a::9\n");
            } else {
                text += &format!("2001:db9:{hi:x}:{lo:x}::/64 via fe80::1 dev eth1\n");
            }
        }
        std::fs::write(dir.path().join("big6.txt"), text).expect("route file");
        let t0 = std::time::Instant::now();
        let c = Config::parse(
            &format!("route_files = [\"big6.txt\"]\n{DUAL}"),
            dir.path(),
            "test.toml",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        eprintln!(
            "{} IPv6 routes validated in {:?}",
            c.routes6.len(),
            t0.elapsed()
        );
        assert_eq!(c.routes6.len(), n as usize);
        assert_eq!(c.routes6[1].prefix.to_string(), "2001:db9:0:1::/64");
        assert_eq!(c.routes6[2].prefix.to_string(), "2001:0:2::/48");
        assert!(c.routes.is_empty());
    }
}
