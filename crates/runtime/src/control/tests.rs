//! The control plane against running workers (in-memory ports, threads as `run` starts
//! them): each command's effect is read back from the workers themselves, and refused
//! commands and reloads are checked to change nothing.

use std::sync::Arc;

use netbatch_datapath::threads::Datapath;
use netbatch_engine::Pool;
use netbatch_ports::Port;
use netbatch_ports::mem::MemPort;

use super::Control;
use crate::config::Config;

const FILE: &str = r#"
route_files = ["routes.txt"]

[datapath]
workers = 2

[pool]
buffers = 1024
cache_size = 64

[[port]]
name = "eth0"
mac = "02:00:5e:00:53:01"
addresses = ["192.0.2.1/24"]
rx_workers = [0, 1]

[[port]]
name = "eth1"
mac = "02:00:5e:00:53:02"
addresses = ["198.51.100.1/24"]
rx_workers = [0, 1]
"#;

struct Running {
    dir: tempfile::TempDir,
    dp: Option<Datapath>,
    control: Arc<Control>,
}

/// [`FILE`] dual-stack: eth0 also on 2001:db8:a::/64, eth1 on 2001:db8:b::/64.
fn file6() -> String {
    FILE.replace(
        r#"addresses = ["192.0.2.1/24"]"#,
        r#"addresses = ["192.0.2.1/24", "2001:db8:a::1/64"]"#,
    )
    .replace(
        r#"addresses = ["198.51.100.1/24"]"#,
        r#"addresses = ["198.51.100.1/24", "2001:db8:b::1/64"]"#,
    )
}

/// [`file6`]'s route file: one route of each family.
const ROUTES6: &str = "203.0.113.0/24 via 198.51.100.2\n2001:db8:3::/48 via 2001:db8:b::2\n";

impl Running {
    fn start(extra: &str) -> Self {
        Self::with(FILE, "203.0.113.0/24 via 198.51.100.2\n", extra)
    }

    /// The datapath of `file` (with `extra` after it) and its route file `routes`.
    fn with(file: &str, routes: &str, extra: &str) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("routes.txt"), routes).expect("routes");
        let path = dir.path().join("dp.toml");
        std::fs::write(&path, format!("{file}{extra}")).expect("config");
        let cfg = Config::load_on_this_machine(&path).expect("valid");
        let pool = Pool::new(cfg.pool).expect("pool");
        let room = pool.config().room();
        let names: Vec<String> = cfg.ports.iter().map(|p| p.setup.name.clone()).collect();
        let (workers, fabric) = crate::build::datapath(&cfg, &pool, |_, p| {
            Box::new(MemPort::new(&names[p], p as u16, room)) as Box<dyn Port>
        })
        .expect("built");
        let (routes, routes6) = (
            workers[0].host.routes.clone(),
            workers[0].host.routes6.clone(),
        );
        let dp = Datapath::start(workers, fabric, &cfg.run).expect("started");
        let control = Arc::new(Control::new(dp.remote(), cfg, &path, routes, routes6));
        Self {
            dir,
            dp: Some(dp),
            control,
        }
    }

    fn cmd(&self, line: &str) -> super::Reply {
        let argv: Vec<String> = line.split_whitespace().map(str::to_string).collect();
        self.control.handle(&argv)
    }

    fn ok(&self, line: &str) -> String {
        let r = self.cmd(line);
        assert!(r.ok, "{line}: {}", r.text);
        r.text
    }

    /// What every worker's table answers for `dst`: (gateway, interface) or none.
    fn lookups(&self, dst: &str) -> Vec<Option<(u32, u16)>> {
        let d = u32::from(dst.parse::<core::net::Ipv4Addr>().expect("address"));
        self.control
            .remote
            .on_each(move |_, w| w.host.routes.lookup(d).map(|h| (h.gateway, h.out_if)))
            .expect("answers")
    }
}

impl Running {
    /// What every worker's IPv6 table answers for `dst`: (gateway, interface) or none.
    fn lookups6(&self, dst: &str) -> Vec<Option<(u128, u16)>> {
        let d = u128::from(dst.parse::<core::net::Ipv6Addr>().expect("address"));
        self.control
            .remote
            .on_each(move |_, w| w.host.routes6.lookup(d).map(|h| (h.gateway, h.out_if)))
            .expect("answers")
    }

    /// Whether every worker routes IPv4 by `t`, the table the control plane published.
    fn ipv4_table_is(&self, t: &Arc<netbatch_stack::route::Routes>) -> bool {
        let t = t.clone();
        self.control
            .remote
            .on_each(move |_, w| Arc::ptr_eq(&w.host.routes, &t))
            .expect("answers")
            .into_iter()
            .all(|same| same)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(dp) = self.dp.take() {
            for mut w in dp.stop() {
                w.shutdown();
            }
        }
    }
}

fn ip(s: &str) -> u32 {
    u32::from(s.parse::<core::net::Ipv4Addr>().expect("address"))
}

/// `route add|replace|del` change what every worker routes by; a duplicate add, the
/// deletion of a missing route and a bad line are refused and change nothing.
#[test]
fn routes_change_on_every_worker_and_refusals_change_nothing() {
    let r = Running::start("");
    assert_eq!(
        r.lookups("203.0.113.9"),
        vec![Some((ip("198.51.100.2"), 1)); 2]
    );
    assert_eq!(r.lookups("198.18.0.1"), vec![None; 2]);
    r.ok("route add 198.18.0.0/15 via 192.0.2.7");
    assert_eq!(r.lookups("198.18.0.1"), vec![Some((ip("192.0.2.7"), 0)); 2]);
    let before = r.ok("show routes");
    for bad in [
        "route add 198.18.0.0/15 via 198.51.100.9",
        "route del 198.19.0.0/16",
        "route add 198.20.0.0/16 via 10.9.9.9",
        "route add 198.20.0.0/33 via 192.0.2.7",
        "route del 198.18.0.0/15 via 198.51.100.9",
    ] {
        let reply = r.cmd(bad);
        assert!(!reply.ok, "{bad} refused: {}", reply.text);
    }
    assert_eq!(r.ok("show routes"), before, "refusals change nothing");
    r.ok("route replace 198.18.0.0/15 via 198.51.100.9");
    assert_eq!(
        r.lookups("198.18.0.1"),
        vec![Some((ip("198.51.100.9"), 1)); 2]
    );
    r.ok("route del 198.18.0.0/15");
    assert_eq!(r.lookups("198.18.0.1"), vec![None; 2]);
    r.ok("route add blackhole 198.18.0.0/15");
    assert!(r.ok("show routes").contains("blackhole 198.18.0.0/15"));
}

/// `rule add` puts the hook stage into every worker's graph, `show rules` lists it, and
/// `rule del` takes it out again; bad rules are refused with the key's reason.
#[test]
fn rules_swap_the_graph_on_every_worker() {
    let r = Running::start("");
    let has_hook = |r: &Running| -> Vec<bool> {
        r.control
            .remote
            .on_each(|_, w| w.graph.node("hook-forward").is_some())
            .expect("answers")
    };
    assert_eq!(has_hook(&r), [false, false]);
    r.ok("rule add forward proto udp dport 9 action drop");
    assert_eq!(has_hook(&r), [true, true]);
    r.ok("rule add forward index 0 proto tcp out eth1 action drop");
    let rules = r.ok("show rules");
    let rows: Vec<String> = rules
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    for want in [
        "index hits rule",
        "0 0 proto tcp out eth1 action drop",
        "1 0 proto udp dport 9 action drop",
    ] {
        assert!(rows.iter().any(|r| r == want), "«{want}» in {rules}");
    }
    for (bad, why) in [
        (
            "rule add forward dport 9 action drop",
            "port matches need proto",
        ),
        ("rule add sideways action drop", "is not a hook"),
        (
            "rule add forward proto udp action reject",
            "unknown verdict",
        ),
        ("rule add input out eth1 action drop", "no output interface"),
        ("rule add forward proto udp", "needs 'action"),
        ("rule del forward 5", "has no rule 5"),
    ] {
        let reply = r.cmd(bad);
        assert!(
            !reply.ok && reply.text.contains(why),
            "{bad}: {}",
            reply.text
        );
    }
    r.ok("rule del forward 0");
    r.ok("rule del forward 0");
    assert_eq!(
        has_hook(&r),
        [false, false],
        "an empty accepting chain leaves the graph"
    );
}

/// A static neighbour reaches every worker's table; `neigh del` removes it.
#[test]
fn neighbours_reach_every_worker() {
    let r = Running::start("");
    let mac_of = |r: &Running| -> Vec<Option<String>> {
        r.control
            .remote
            .on_each(|_, w| {
                w.host
                    .neigh
                    .mac_of(0, "192.0.2.9".parse().expect("address"))
                    .map(|(m, _)| m.to_string())
            })
            .expect("answers")
    };
    r.ok("neigh add 192.0.2.9 lladdr 02:00:00:00:00:09 dev eth0");
    assert_eq!(mac_of(&r), vec![Some("02:00:00:00:00:09".to_string()); 2]);
    assert!(
        !r.cmd("neigh add 192.0.2.9 lladdr 02:00:00:00:00:0a dev eth0")
            .ok,
        "exists"
    );
    r.ok("neigh replace 192.0.2.9 lladdr 02:00:00:00:00:0a dev eth0");
    assert_eq!(mac_of(&r), vec![Some("02:00:00:00:00:0a".to_string()); 2]);
    assert!(
        r.ok("show neigh")
            .contains("192.0.2.9 dev eth0 lladdr 02:00:00:00:00:0a PERMANENT")
    );
    r.ok("neigh del 192.0.2.9 dev eth0");
    assert_eq!(mac_of(&r), vec![None; 2]);
    assert!(!r.cmd("neigh del 192.0.2.9 dev eth0").ok, "gone");
    assert!(
        !r.cmd("neigh add 192.0.2.9 lladdr 02:00:00:00:00:09 dev eth7")
            .ok
    );
}

/// A reload that would change what needs a restart, or of an invalid file, is refused
/// with the keys and changes nothing; a good one applies routes, rules and ICMP settings.
#[test]
fn reload_applies_all_or_nothing() {
    let r = Running::start("");
    let cfg_path = r.dir.path().join("dp.toml");
    let routes = r.ok("show routes");
    // Workers and a port's address need a restart; the new route file must not apply.
    std::fs::write(
        r.dir.path().join("routes.txt"),
        "203.0.113.0/24 via 192.0.2.5\n",
    )
    .expect("routes");
    std::fs::write(
        &cfg_path,
        FILE.replace("workers = 2", "workers = 3")
            .replace("192.0.2.1/24", "192.0.2.2/24"),
    )
    .expect("config");
    let reply = r.cmd("reload");
    assert!(!reply.ok, "{}", reply.text);
    assert!(
        reply.text.contains("datapath.workers") && reply.text.contains("port[0]"),
        "{}",
        reply.text
    );
    assert_eq!(r.ok("show routes"), routes);
    std::fs::write(
        &cfg_path,
        format!("{FILE}\n[[route]]\nprefix = \"bogus\"\nvia = \"192.0.2.5\"\n"),
    )
    .expect("config");
    let reply = r.cmd("reload");
    assert!(
        !reply.ok && reply.text.contains("route[0]"),
        "{}",
        reply.text
    );
    assert_eq!(r.ok("show routes"), routes);
    assert_eq!(
        r.lookups("203.0.113.9"),
        vec![Some((ip("198.51.100.2"), 1)); 2]
    );
    // A good one.
    std::fs::write(
        &cfg_path,
        format!("{FILE}\n[icmp]\necho = false\n\n[filter.input]\npolicy = \"drop\"\n"),
    )
    .expect("config");
    let text = r.ok("reload");
    assert!(
        text.contains("route change") && text.contains("ICMP") && text.contains("filter"),
        "{text}"
    );
    assert_eq!(
        r.lookups("203.0.113.9"),
        vec![Some((ip("192.0.2.5"), 0)); 2]
    );
    let echo = r
        .control
        .remote
        .on_each(|_, w| {
            (
                w.host.params.icmp_echo,
                w.graph.node("hook-input").is_some(),
            )
        })
        .expect("answers");
    assert_eq!(echo, [(false, true), (false, true)]);
    assert_eq!(r.ok("reload"), "reloaded: nothing changed");
}

/// `show runtime` says how the packet pool and the IPv4 FIB's first level are backed:
/// transparent huge pages by default where the kernel has THP (its mode not `never`), 4
/// KiB pages where it has none, and never more huge bytes than the memory has.
#[test]
fn show_runtime_says_how_memory_is_backed() {
    let r = Running::start("");
    let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .map(|s| !s.contains("[never]"))
        .unwrap_or(false);
    let reply = r.cmd("show runtime");
    let m = &reply.data["memory"];
    let want = if thp {
        "transparent huge pages"
    } else {
        "4 KiB pages"
    };
    // A machine with hugetlbfs pages reserved gives the pool those instead.
    assert!(
        m["pool"] == want || m["pool"] == "hugetlbfs",
        "pool on {}, expected {want}",
        m["pool"]
    );
    assert_eq!(m["fib4"], want, "{m}");
    assert!(m["pool_huge_bytes"].as_u64().unwrap_or(0) <= m["pool_bytes"].as_u64().unwrap_or(0));
    assert!(m["fib4_huge_bytes"].as_u64().unwrap_or(0) <= 64 << 20);
    assert!(
        reply.text.starts_with("memory: packet pool on "),
        "{}",
        reply.text
    );
}

/// `clear counters` makes `show` count from then; the workers' own counters go on.
#[test]
fn clear_counters_is_a_baseline() {
    let r = Running::start("");
    // Let the workers run a few rounds.
    std::thread::sleep(std::time::Duration::from_millis(30));
    let rounds = |v: &serde_json::Value| v["workers"][0]["rounds"].as_u64().unwrap_or(0);
    let before = rounds(&r.cmd("show runtime").data);
    assert!(before > 0);
    r.ok("clear counters");
    let after = rounds(&r.cmd("show runtime").data);
    assert!(
        after < before,
        "{after} counted from the clear ({before} before)"
    );
    let total = r.control.counters().expect("counters");
    assert!(
        total["workers"][0]["worker"]["rounds"]
            .as_u64()
            .unwrap_or(0)
            >= before
    );
}

/// The socket: mode 0600, answers its owner, refuses a second server on the same path,
/// and is removed when the server stops; a stale file (no server) is replaced.
#[test]
fn the_socket_serves_its_owner_only() {
    use std::os::unix::fs::PermissionsExt;

    use super::server::{Server, request};
    let r = Running::start("");
    let path = r.dir.path().join("run").join("dp.sock");
    let s = Server::start(r.control.clone(), &path, None).expect("served");
    let mode = std::fs::metadata(&path)
        .expect("socket")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
    let reply = request(&path, &["show".into(), "routes".into()]).expect("answer");
    assert!(
        reply.ok
            && reply
                .text
                .contains("203.0.113.0/24 via 198.51.100.2 dev eth1"),
        "{}",
        reply.text
    );
    let bad = request(&path, &["route".into(), "add".into(), "nonsense".into()]).expect("answer");
    assert!(!bad.ok && bad.text.contains("nonsense"), "{}", bad.text);
    assert!(matches!(
        Server::start(r.control.clone(), &path, None),
        Err(super::server::ServeError::InUse(_))
    ));
    drop(s);
    assert!(!path.exists(), "removed at the stop");
    assert!(
        request(&path, &["show".into(), "routes".into()])
            .is_err_and(|e| e.contains("no netbatch is serving"))
    );
    // Something that is not a socket is never removed to make room.
    std::fs::write(&path, "").expect("a file");
    assert!(matches!(
        Server::start(r.control.clone(), &path, None),
        Err(super::server::ServeError::Unsafe(..))
    ));
    assert!(path.exists());
    std::fs::remove_file(&path).expect("removed");
    // A socket left behind by a server that died is not "in use".
    drop(std::os::unix::net::UnixListener::bind(&path).expect("a stale socket"));
    // Our own group (chown to it needs no privilege).
    let gid = std::os::unix::fs::MetadataExt::gid(&std::fs::metadata(r.dir.path()).expect("dir"));
    let s = Server::start(r.control.clone(), &path, Some(gid)).expect("served over a stale file");
    let mode = std::fs::metadata(&path)
        .expect("socket")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o660, "group access with a group");
    drop(s);
}

/// A client that connects and sends nothing holds up no other client, and is dropped
/// after its time; a request over the size limit is refused; a deep `--match` (a
/// client's input) is answered, not a crash.
#[test]
fn slow_or_hostile_clients_hold_up_nobody() {
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;

    use super::server::{Server, request};
    let r = Running::start("");
    let path = r.dir.path().join("dp.sock");
    let _s = Server::start(r.control.clone(), &path, None).expect("served");
    let mut silent = UnixStream::connect(&path).expect("connects");
    let t0 = std::time::Instant::now();
    let reply = request(&path, &["show".into(), "routes".into()]).expect("answer");
    assert!(
        reply.ok && t0.elapsed() < std::time::Duration::from_secs(1),
        "{:?}",
        t0.elapsed()
    );
    // The silent one is answered with an error once its 2 s are up.
    silent
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .expect("timeout");
    let mut text = String::new();
    let _ = silent.read_to_string(&mut text);
    assert!(
        text.contains("request") && text.contains("\"ok\":false"),
        "{text}"
    );
    // Over 64 KiB without a newline: refused.
    let mut big = UnixStream::connect(&path).expect("connects");
    let _ = big.write_all(&vec![b'x'; 70 << 10]);
    let mut text = String::new();
    big.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .expect("timeout");
    let _ = big.read_to_string(&mut text);
    assert!(text.contains("\"ok\":false"), "{text}");
    let deep = format!("{}icmp", "not ".repeat(10_000));
    let reply = request(
        &path,
        &[
            "trace".into(),
            "add".into(),
            "--count".into(),
            "1".into(),
            "--match".into(),
            deep,
        ],
    )
    .expect("answer");
    assert!(reply.ok, "{}", reply.text);
    r.ok("trace clear");
}

fn ip6(s: &str) -> u128 {
    u128::from(s.parse::<core::net::Ipv6Addr>().expect("address"))
}

/// `route add|replace|del` of `ip -6 route` lines change every worker's IPv6 table and
/// leave the IPv4 one as it was (the same table, not a copy); bad lines (an off-link or
/// link-local gateway without dev, a length above 128, a gateway of the other family, a
/// duplicate add, a missing or mismatched del) are refused and change nothing; `show
/// routes` lists the IPv6 routes as `ip -6 route` does, after the IPv4 ones.
#[test]
fn ipv6_routes_change_on_every_worker() {
    let r = Running::with(&file6(), ROUTES6, "");
    let v4 = r.control.routes();
    assert_eq!(
        r.lookups6("2001:db8:3::9"),
        vec![Some((ip6("2001:db8:b::2"), 1)); 2]
    );
    assert_eq!(r.lookups6("2001:db8:4::9"), vec![None; 2]);
    r.ok("route add 2001:db8:4::/48 via fe80::1 dev eth0");
    assert_eq!(
        r.lookups6("2001:db8:4::9"),
        vec![Some((ip6("fe80::1"), 0)); 2]
    );
    let before = r.ok("show routes");
    for (bad, why) in [
        (
            "route add 2001:db8:4::/48 via 2001:db8:a::9",
            "a route for 2001:db8:4::/48 exists",
        ),
        ("route del 2001:db8:5::/48", "no route for 2001:db8:5::/48"),
        (
            "route add 2001:db8:5::/48 via 2001:db8:99::1",
            "is not on-link",
        ),
        ("route add 2001:db8:5::/48 via fe80::1", "is link-local"),
        (
            "route add 2001:db8:5::/129 dev eth0",
            "prefix length 129 is above 128",
        ),
        (
            "route add 2001:db8:5::/48 via 192.0.2.7",
            "'192.0.2.7' is an IPv4 address",
        ),
        (
            "route add 2001:db8:5::/48 via ff02::2 dev eth0",
            "multicast",
        ),
        (
            "route del 2001:db8:4::/48 via fe80::2 dev eth0",
            "the route for 2001:db8:4::/48 is '2001:db8:4::/48 via fe80::1 dev eth0'",
        ),
    ] {
        let reply = r.cmd(bad);
        assert!(
            !reply.ok && reply.text.contains(why),
            "{bad}: {}",
            reply.text
        );
    }
    assert_eq!(r.ok("show routes"), before, "refusals change nothing");
    r.ok("route replace 2001:db8:4::/48 via 2001:db8:a::9");
    assert_eq!(
        r.lookups6("2001:db8:4::9"),
        vec![Some((ip6("2001:db8:a::9"), 0)); 2]
    );
    r.ok("route add ::/0 via 2001:db8:b::fe");
    r.ok("route add blackhole 2001:db8:dead::/48");
    let shown = r.ok("show routes");
    let lines: Vec<&str> = shown.lines().collect();
    for want in [
        "203.0.113.0/24 via 198.51.100.2 dev eth1",
        "default via 2001:db8:b::fe dev eth1",
        "2001:db8:3::/48 via 2001:db8:b::2 dev eth1",
        "2001:db8:4::/48 via 2001:db8:a::9 dev eth0",
        "2001:db8:a::/64 dev eth0",
        "local 2001:db8:a::1 dev eth0",
        "blackhole 2001:db8:dead::/48",
    ] {
        assert!(lines.contains(&want), "no «{want}» in\n{shown}");
    }
    let at = |l: &str| lines.iter().position(|x| *x == l).expect("line");
    assert!(
        at("203.0.113.0/24 via 198.51.100.2 dev eth1") < at("default via 2001:db8:b::fe dev eth1"),
        "IPv6 after IPv4:\n{shown}"
    );
    let data = r.cmd("show routes").data;
    assert!(
        data["routes6"]
            .as_array()
            .expect("routes6")
            .iter()
            .any(|x| x["prefix"] == "2001:db8:4::/48" && x["gateway"] == "2001:db8:a::9"),
        "{data}"
    );
    r.ok("route del ::/0");
    r.ok("route del 2001:db8:4::/48");
    assert_eq!(r.lookups6("2001:db8:4::9"), vec![None; 2]);
    assert_eq!(r.lookups6("2001:db9::1"), vec![None; 2]);
    assert!(
        r.ipv4_table_is(&v4) && Arc::ptr_eq(&r.control.routes(), &v4),
        "IPv6 changes publish no IPv4 table"
    );
}

/// IPv6 static neighbours reach every worker's NDP table and `show neigh` (as `ip -6
/// neigh` prints them, after the IPv4 ones); `neigh del` removes them; a multicast
/// address is refused.
#[test]
fn ipv6_neighbours_reach_every_worker() {
    let r = Running::with(&file6(), ROUTES6, "");
    let mac_of = |r: &Running| -> Vec<Option<String>> {
        r.control
            .remote
            .on_each(|_, w| {
                w.host
                    .neigh6
                    .mac_of(0, "fe80::9".parse().expect("address"))
                    .map(|(m, _)| m.to_string())
            })
            .expect("answers")
    };
    r.ok("neigh add 192.0.2.9 lladdr 02:00:00:00:00:09 dev eth0");
    r.ok("neigh add fe80::9 lladdr 02:00:00:00:00:09 dev eth0");
    assert_eq!(mac_of(&r), vec![Some("02:00:00:00:00:09".to_string()); 2]);
    assert!(
        !r.cmd("neigh add fe80::9 lladdr 02:00:00:00:00:0a dev eth0")
            .ok,
        "exists"
    );
    r.ok("neigh replace fe80::9 lladdr 02:00:00:00:00:0a dev eth0");
    assert_eq!(mac_of(&r), vec![Some("02:00:00:00:00:0a".to_string()); 2]);
    let shown = r.ok("show neigh");
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(
        lines,
        [
            "192.0.2.9 dev eth0 lladdr 02:00:00:00:00:09 PERMANENT workers [0, 1]",
            "fe80::9 dev eth0 lladdr 02:00:00:00:00:0a PERMANENT workers [0, 1]",
        ],
        "{shown}"
    );
    let data = r.cmd("show neigh").data;
    assert_eq!(data["neighbours6"][0]["address"], "fe80::9", "{data}");
    assert_eq!(data["neighbours"][0]["address"], "192.0.2.9", "{data}");
    let reply = r.cmd("neigh add ff02::1 lladdr 02:00:00:00:00:09 dev eth0");
    assert!(
        !reply.ok && reply.text.contains("not a unicast address"),
        "{}",
        reply.text
    );
    r.ok("neigh del fe80::9 dev eth0");
    assert_eq!(mac_of(&r), vec![None; 2]);
    assert!(!r.cmd("neigh del fe80::9 dev eth0").ok, "gone");
    assert!(!r.cmd("neigh del fe80::zz dev eth0").ok);
}

/// A reload applies what the file changed of the IPv6 routes and neighbours and
/// nothing else: a route the mirror installed stays, the IPv4 table is not republished
/// when only IPv6 routes changed, and a second reload changes nothing.
#[test]
fn reload_applies_ipv6_changes() {
    let r = Running::with(&file6(), ROUTES6, "");
    let cfg_path = r.dir.path().join("dp.toml");
    // As the kernel-table mirror would install one.
    let mirrored = netbatch_stack::route::Route6::new(
        "2001:db8:77::/48".parse().expect("prefix"),
        netbatch_stack::route::RouteKind::Unicast,
        Some(0),
        Some("fe80::77".parse().expect("address")),
    );
    r.control
        .apply_routes6(&[super::RouteChange6::Replace(mirrored)])
        .expect("applied");
    let v4 = r.control.routes();
    std::fs::write(
        r.dir.path().join("routes.txt"),
        "203.0.113.0/24 via 198.51.100.2\n2001:db8:3::/48 via fe80::3 dev eth1\n",
    )
    .expect("routes");
    std::fs::write(
        &cfg_path,
        format!(
            "{}\n[[route]]\nprefix = \"2001:db8:6::/48\"\nkind = \"prohibit\"\n\
             [[neighbour.static]]\nip = \"fe80::3\"\nmac = \"02:00:00:00:00:03\"\ndev = \"eth1\"\n",
            file6()
        ),
    )
    .expect("config");
    let text = r.ok("reload");
    assert_eq!(
        text,
        "reloaded: 2 IPv6 route change(s), 0 neighbour(s) removed, 1 set"
    );
    assert_eq!(
        r.lookups6("2001:db8:3::1"),
        vec![Some((ip6("fe80::3"), 1)); 2]
    );
    assert_eq!(
        r.lookups6("2001:db8:77::1"),
        vec![Some((ip6("fe80::77"), 0)); 2]
    );
    let kinds = r
        .control
        .remote
        .on_each(|_, w| {
            let p = "2001:db8:6::/48".parse().expect("prefix");
            (
                w.host.routes6.get(&p).map(|x| x.kind),
                w.host
                    .neigh6
                    .mac_of(1, "fe80::3".parse().expect("address"))
                    .map(|(m, _)| m.to_string()),
            )
        })
        .expect("answers");
    assert_eq!(
        kinds,
        vec![
            (
                Some(netbatch_stack::route::RouteKind::Prohibit),
                Some("02:00:00:00:00:03".to_string())
            );
            2
        ]
    );
    assert!(r.ipv4_table_is(&v4), "the IPv4 table was not republished");
    assert_eq!(r.ok("reload"), "reloaded: nothing changed");
    // Back to the first file: the file's IPv6 routes and neighbour go, the mirror's stays.
    std::fs::write(r.dir.path().join("routes.txt"), ROUTES6).expect("routes");
    std::fs::write(&cfg_path, file6()).expect("config");
    let text = r.ok("reload");
    assert_eq!(
        text,
        "reloaded: 2 IPv6 route change(s), 1 neighbour(s) removed, 0 set"
    );
    assert_eq!(
        r.lookups6("2001:db8:3::1"),
        vec![Some((ip6("2001:db8:b::2"), 1)); 2]
    );
    assert_eq!(r.lookups6("2001:db8:6::1"), vec![None; 2]);
    assert_eq!(
        r.lookups6("2001:db8:77::1"),
        vec![Some((ip6("fe80::77"), 0)); 2]
    );
}

/// On a worker stepped by the test: an IPv6 datagram forwarded towards a gateway with
/// no neighbour entry waits (a neighbour solicitation goes out); `set_neighbour6`
/// releases it to that MAC; one waiting for a deleted entry is dropped and counted
/// (`neigh_deleted`), and every packet is accounted for.
#[test]
fn ipv6_neighbour_changes_release_or_drop_what_waited() {
    use etherparse::PacketBuilder;
    let text = format!(
        "{}\n[[route]]\nprefix = \"2001:db8:3::/48\"\nvia = \"2001:db8:b::2\"\n\
         [[route]]\nprefix = \"2001:db8:4::/48\"\nvia = \"fe80::4\"\ndev = \"eth1\"\n",
        file6()
            .replace("workers = 2", "workers = 1")
            .replace("route_files = [\"routes.txt\"]", "")
            .replace("rx_workers = [0, 1]", "rx_workers = [0]")
    );
    let cfg = Config::parse(&text, std::path::Path::new("."), "t.toml").expect("valid");
    let pool = Pool::new(cfg.pool).expect("pool");
    let room = pool.config().room();
    let ports = cfg
        .ports
        .iter()
        .enumerate()
        .map(|(i, p)| Box::new(MemPort::new(&p.setup.name, i as u16, room)) as Box<dyn Port>)
        .collect();
    let mut w = crate::build::worker(&cfg, ports, pool.clone()).expect("worker");
    fn mem(w: &mut netbatch_datapath::Worker, i: usize) -> &mut MemPort {
        w.ports[i]
            .as_any_mut()
            .downcast_mut::<MemPort>()
            .expect("a mem port")
    }
    let frame = |dst: [u8; 16]| {
        let mut f = Vec::new();
        PacketBuilder::ethernet2([2, 0, 0, 0, 0, 0x99], [2, 0, 0x5e, 0, 0x53, 1])
            .ipv6(
                [0x20, 1, 0xd, 0xb8, 0, 0xa, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9],
                dst,
                64,
            )
            .udp(4000, 9)
            .write(&mut f, b"waiting")
            .expect("frame");
        f
    };
    let to3: core::net::Ipv6Addr = "2001:db8:3::1".parse().expect("address");
    let to4: core::net::Ipv6Addr = "2001:db8:4::1".parse().expect("address");
    let mut now = 1_000_000_000u64;
    mem(&mut w, 0).push_rx(now, frame(to3.octets()));
    mem(&mut w, 0).push_rx(now, frame(to4.octets()));
    for _ in 0..3 {
        w.poll(now);
        now += 1_000;
    }
    let solicited = mem(&mut w, 1).take_tx();
    assert_eq!(
        solicited.len(),
        2,
        "a neighbour solicitation for each gateway"
    );
    assert_eq!(w.host.neigh6.held(), 2, "both datagrams wait");
    let gw_mac = netbatch_wire::ethernet::MacAddr([2, 0, 0, 0, 0, 0x22]);
    assert!(w.set_neighbour6(1, "2001:db8:b::2".parse().expect("address"), gw_mac));
    w.poll(now);
    let out = mem(&mut w, 1).take_tx();
    assert_eq!(out.len(), 1, "the released datagram");
    let sent = etherparse::SlicedPacket::from_ethernet(&out[0].bytes).expect("a frame");
    let Some(etherparse::LinkSlice::Ethernet2(eth)) = sent.link else {
        panic!("not Ethernet");
    };
    assert_eq!(eth.destination(), gw_mac.0);
    let Some(etherparse::NetSlice::Ipv6(ip)) = sent.net else {
        panic!("not IPv6");
    };
    assert_eq!(ip.header().destination_addr(), to3);
    assert_eq!(ip.header().hop_limit(), 63);
    assert!(w.remove_neighbour6(1, "fe80::4".parse().expect("address")));
    assert!(
        !w.remove_neighbour6(1, "fe80::4".parse().expect("address")),
        "gone"
    );
    let deleted: u64 = w
        .snapshot()
        .iter()
        .flat_map(|n| n.drops.iter())
        .filter(|(r, _)| r.name() == "neigh_deleted")
        .map(|(_, c)| c)
        .sum();
    assert_eq!(deleted, 1);
    let a = w.acct;
    assert_eq!(
        a.rx + a.originated,
        a.tx + a.delivered + a.dropped + w.held(),
        "{a:?}"
    );
    w.shutdown();
}

/// Following a paired tap's addresses (`set_iface`, as the mirror calls it): a new IPv6
/// address reaches every worker's interface with its on-link prefix and local route in
/// the IPv6 table, a removed one takes them away, the IPv4 table is not republished for
/// an IPv6 change, the same addresses again change nothing, and an address another
/// interface has is refused with nothing changed.
#[test]
fn set_iface_follows_ipv6_addresses() {
    use netbatch_stack::prefix::{If6Addr, IfAddr};
    let r = Running::with(&file6(), ROUTES6, "");
    let v4 = r.control.routes();
    let a4: Vec<IfAddr> = vec!["192.0.2.1/24".parse().expect("address")];
    let a6 = |list: &[&str]| -> Vec<If6Addr> {
        list.iter().map(|a| a.parse().expect("address")).collect()
    };
    let on_workers = |r: &Running| -> Vec<(Vec<String>, Option<netbatch_stack::route::RouteKind>)> {
        r.control
            .remote
            .on_each(|_, w| {
                let host = netbatch_stack::prefix::Ipv6Prefix::host(
                    "2001:db8:c::1".parse().expect("address"),
                );
                (
                    w.host.ifaces[0]
                        .addrs6
                        .iter()
                        .map(ToString::to_string)
                        .collect(),
                    w.host.routes6.get(&host).map(|x| x.kind),
                )
            })
            .expect("answers")
    };
    let both = a6(&["2001:db8:a::1/64", "2001:db8:c::1/64"]);
    assert_eq!(r.control.set_iface(0, &a4, &both, None), Ok(true));
    assert_eq!(
        on_workers(&r),
        vec![
            (
                vec![
                    "2001:db8:a::1/64".to_string(),
                    "2001:db8:c::1/64".to_string()
                ],
                Some(netbatch_stack::route::RouteKind::Local)
            );
            2
        ]
    );
    assert_eq!(
        r.lookups6("2001:db8:c::9"),
        vec![Some((0, 0)); 2],
        "on-link"
    );
    assert!(r.ipv4_table_is(&v4), "no IPv4 change, no IPv4 publication");
    assert_eq!(r.control.set_iface(0, &a4, &both, None), Ok(false));
    let only_c = a6(&["2001:db8:c::1/64"]);
    assert_eq!(r.control.set_iface(0, &a4, &only_c, None), Ok(true));
    assert_eq!(
        r.lookups6("2001:db8:a::9"),
        vec![None; 2],
        "the prefix went"
    );
    assert_eq!(r.lookups6("2001:db8:c::9"), vec![Some((0, 0)); 2]);
    let before = r.ok("show routes");
    assert_eq!(
        r.control
            .set_iface(0, &a4, &a6(&["2001:db8:b::1/64"]), None),
        Err((false, "eth0: 2001:db8:b::1 is eth1's address".to_string()))
    );
    assert_eq!(r.ok("show routes"), before, "refused: nothing changed");
}

/// The Subnet-Router anycast address of each on-link prefix (RFC 4291 2.6.1) is a local
/// route from the start and follows the addresses set live (`set_iface`, as the mirror
/// calls it): it comes with a new prefix and goes with it, in every worker's table.
#[test]
fn set_iface_follows_subnet_router_anycast() {
    use netbatch_stack::prefix::{If6Addr, IfAddr, Ipv6Prefix};
    use netbatch_stack::route::RouteKind;
    let r = Running::with(&file6(), ROUTES6, "");
    let kinds = |r: &Running, a: &str| -> Vec<Option<RouteKind>> {
        let p = Ipv6Prefix::host(a.parse().expect("address"));
        r.control
            .remote
            .on_each(move |_, w| w.host.routes6.get(&p).map(|x| x.kind))
            .expect("answers")
    };
    assert_eq!(kinds(&r, "2001:db8:a::"), vec![Some(RouteKind::Local); 2]);
    assert_eq!(kinds(&r, "2001:db8:b::"), vec![Some(RouteKind::Local); 2]);
    assert_eq!(kinds(&r, "2001:db8:c::"), vec![None; 2]);
    let a4: Vec<IfAddr> = vec!["192.0.2.1/24".parse().expect("address")];
    let a6 = |list: &[&str]| -> Vec<If6Addr> {
        list.iter().map(|a| a.parse().expect("address")).collect()
    };
    let c = a6(&["2001:db8:c::1/64"]);
    assert_eq!(r.control.set_iface(0, &a4, &c, None), Ok(true));
    assert_eq!(kinds(&r, "2001:db8:c::"), vec![Some(RouteKind::Local); 2]);
    assert_eq!(
        kinds(&r, "2001:db8:a::"),
        vec![None; 2],
        "gone with its prefix"
    );
    assert_eq!(kinds(&r, "2001:db8:b::"), vec![Some(RouteKind::Local); 2]);
    // A /127 has none (RFC 6164); its address, all-zero host part or not, is unicast.
    let p2p = a6(&["2001:db8:d::/127"]);
    assert_eq!(r.control.set_iface(0, &a4, &p2p, None), Ok(true));
    assert_eq!(kinds(&r, "2001:db8:c::"), vec![None; 2]);
    assert_eq!(kinds(&r, "2001:db8:d::"), vec![Some(RouteKind::Local); 2]);
}

/// A veth pair made for one test (names carry the process id), deleted on drop.
struct Veth(String);

impl Veth {
    fn new(tag: &str) -> Self {
        let a = format!("nb{tag}{}a", std::process::id() % 100_000);
        let b = format!("nb{tag}{}b", std::process::id() % 100_000);
        let st = std::process::Command::new("ip")
            .args(["link", "add", &a, "type", "veth", "peer", "name", &b])
            .status()
            .expect("ip runs");
        assert!(st.success(), "ip link add {a}");
        Self(a)
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["link", "del", &self.0])
            .status();
    }
}

/// A reload that changes `datapath.workers` under an `af_xdp` port is refused because
/// workers cannot change while running, not because the interface lacks the queues the
/// new count would need (which the machine check would say first, were it asked first).
#[test]
fn reload_of_more_workers_on_af_xdp_names_the_restart_not_the_queues() {
    if !netbatch_testkit::root("creating a veth pair")
        || !netbatch_testkit::tools(&[("ip", "iproute2")])
    {
        return;
    }
    let veth = Veth::new("rw");
    let file = FILE
        .replace("workers = 2", "workers = 1")
        .replace("rx_workers = [0, 1]", "rx_workers = [0]")
        .replacen(
            "name = \"eth0\"\n",
            &format!(
                "name = \"eth0\"\nkind = \"af_xdp\"\ninterface = \"{}\"\n",
                veth.0
            ),
            1,
        );
    let r = Running::with(&file, "203.0.113.0/24 via 198.51.100.2\n", "");
    std::fs::write(
        r.dir.path().join("dp.toml"),
        file.replace("workers = 1", "workers = 2"),
    )
    .expect("config");
    let reply = r.cmd("reload");
    assert!(!reply.ok, "{}", reply.text);
    assert!(
        reply.text.contains("datapath.workers")
            && reply
                .text
                .contains("the number of workers cannot change while running"),
        "{}",
        reply.text
    );
    assert!(!reply.text.contains("receive queue"), "{}", reply.text);
    // A file the machine cannot run is still refused for that, when nothing needs a
    // restart: the interface named for eth0 is gone.
    std::fs::write(
        r.dir.path().join("dp.toml"),
        file.replace(&veth.0, "nb-no-such0"),
    )
    .expect("config");
    let reply = r.cmd("reload");
    assert!(!reply.ok, "{}", reply.text);
}

/// Twenty clients that connect and send nothing (more than there were once places for
/// clients) delay no command: each of ten requests made while they idle is answered
/// at once, not after the idle ones' 2 s run out.
#[test]
fn idle_clients_stall_no_command() {
    use std::os::unix::net::UnixStream;

    use super::server::{Server, request};
    let r = Running::start("");
    let path = r.dir.path().join("dp.sock");
    let _s = Server::start(r.control.clone(), &path, None).expect("served");
    let idle: Vec<UnixStream> = (0..20)
        .map(|_| UnixStream::connect(&path).expect("connects"))
        .collect();
    // Let the server accept them all before the timed requests.
    std::thread::sleep(std::time::Duration::from_millis(100));
    let mut slowest = std::time::Duration::ZERO;
    for cmd in [
        "show runtime",
        "route replace 203.0.113.0/24 via 198.51.100.3",
    ]
    .iter()
    .cycle()
    .take(10)
    {
        let argv: Vec<String> = cmd.split_whitespace().map(str::to_string).collect();
        let t0 = std::time::Instant::now();
        let reply = request(&path, &argv).expect("answer");
        assert!(reply.ok, "{cmd}: {}", reply.text);
        slowest = slowest.max(t0.elapsed());
    }
    // The idle clients' deadline is 2 s; a command answered before a quarter of it did
    // not wait for any of them.
    assert!(
        slowest < std::time::Duration::from_millis(500),
        "slowest answer took {slowest:?} with {} idle clients",
        idle.len()
    );
    drop(idle);
}

/// Each refusal names the limit it met: a request over 64 KiB, a client that sends
/// nothing for 2 s.
#[test]
fn control_errors_name_the_limit() {
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;

    use super::server::Server;
    let r = Running::start("");
    let path = r.dir.path().join("dp.sock");
    let _s = Server::start(r.control.clone(), &path, None).expect("served");
    let answer = |s: &mut UnixStream| {
        s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .expect("timeout");
        let mut text = String::new();
        let _ = s.read_to_string(&mut text);
        let v: serde_json::Value = serde_json::from_str(text.trim()).expect("one JSON line");
        assert_eq!(v["ok"], false, "{text}");
        v["text"].as_str().unwrap_or_default().to_string()
    };
    // 200 KiB of JSON (a string that never closes within the limit).
    let mut big = UnixStream::connect(&path).expect("connects");
    let json = format!("{{\"argv\": [\"{}\"]}}\n", "x".repeat(200 << 10));
    let writer = {
        let mut w = big.try_clone().expect("clone");
        std::thread::spawn(move || {
            let _ = w.write_all(json.as_bytes());
        })
    };
    let text = answer(&mut big);
    let _ = writer.join();
    assert!(
        text.contains("64 KiB") && text.contains("65536 bytes") && text.contains("limit"),
        "{text}"
    );
    assert!(!text.contains("EOF while parsing"), "{text}");
    // Nothing sent.
    let mut silent = UnixStream::connect(&path).expect("connects");
    let t0 = std::time::Instant::now();
    let text = answer(&mut silent);
    assert!(
        text.contains("within 2 s") && text.contains("limit"),
        "{text}"
    );
    assert!(!text.contains("os error"), "{text}");
    let waited = t0.elapsed();
    assert!(
        waited >= std::time::Duration::from_millis(1900)
            && waited < std::time::Duration::from_secs(4),
        "{waited:?}"
    );
}

/// `trace show` keeps the last `[control] trace_keep` packets, not every packet traced
/// since the start: six rounds of `trace add --count 3` and three frames each leave the
/// last 5 shown of 18 traced, the header says so and since when, and `trace clear`
/// starts afresh.
#[test]
fn traces_keep_the_last_n_packets() {
    use etherparse::PacketBuilder;
    let r = Running::start("\n[control]\ntrace_keep = 5\n");
    let frame = |n: u16| {
        let mut f = Vec::new();
        PacketBuilder::ethernet2([2, 0, 0, 0, 0, 0x99], [2, 0, 0x5e, 0, 0x53, 1])
            .ipv4([192, 0, 2, 9], [203, 0, 113, 9], 64)
            .udp(4000 + n, 9)
            .write(&mut f, b"traced")
            .expect("frame");
        f
    };
    let shown = |r: &Running| {
        let reply = r.cmd("trace show");
        assert!(reply.ok, "{}", reply.text);
        reply
    };
    let mut n = 0;
    for round in 1..=6u64 {
        r.ok("trace add --count 3");
        let frames: Vec<Vec<u8>> = (0..3)
            .map(|_| {
                n += 1;
                frame(n)
            })
            .collect();
        r.control
            .remote
            .on_each(move |i, w| {
                if i == 0 {
                    let now = netbatch_engine::time::mono_ns();
                    let p = w.ports[0]
                        .as_any_mut()
                        .downcast_mut::<MemPort>()
                        .expect("a mem port");
                    for f in &frames {
                        p.push_rx(now, f.clone());
                    }
                }
            })
            .expect("answers");
        // Until worker 0 has traced all three.
        let t0 = std::time::Instant::now();
        let reply = loop {
            let reply = shown(&r);
            if reply.data["traced"] == round * 3 || t0.elapsed().as_secs() > 5 {
                break reply;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        assert_eq!(reply.data["traced"], round * 3, "{}", reply.text);
        let kept = reply.data["packets"].as_array().expect("packets").len() as u64;
        assert_eq!(kept, (round * 3).min(5), "{}", reply.text);
        assert_eq!(reply.data["let_go"], round * 3 - kept);
        assert!(
            reply.text.starts_with(&format!(
                "{kept} packet(s) shown: the last {kept} of {} traced since ",
                round * 3
            )),
            "{}",
            reply.text
        );
    }
    // The last five are the newest: the UDP source ports of frames 14 to 18.
    let reply = shown(&r);
    let ports: Vec<u16> = reply.data["packets"]
        .as_array()
        .expect("packets")
        .iter()
        .map(|p| {
            let b = super::trace::unhex(p["data"].as_str().expect("hex")).expect("bytes");
            u16::from_be_bytes([b[34], b[35]])
        })
        .collect();
    assert_eq!(ports, [4014, 4015, 4016, 4017, 4018]);
    r.ok("trace clear");
    let reply = shown(&r);
    assert!(
        reply.text.starts_with("no packets traced"),
        "{}",
        reply.text
    );
    assert_eq!(reply.data["traced"], 0);
}

/// This process's resident set, in KiB (`/proc/self/statm`).
/// A field of `/proc/self/status` in KiB (`VmRSS`, `VmHWM`).
fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("a field in KiB")
}

/// Memory levels off under the operator's churn, by design, through the control
/// socket as `netbatch run` serves it: rounds of a route added and deleted, a rule
/// added and deleted, a reload, `show runtime`, `show counters`, and a trace armed for
/// three packets that worker 0 then receives and `trace show` collects; every tenth
/// round 16 clients at once ask `show runtime`. Run alone in a process of its own
/// (this test re-runs its binary for just itself), so that the resident set is this
/// churn's and no other test's. What it would catch, each seen in the soak
/// (docs/soak.md):
/// - a route change that copies the IPv4 table: a copy writes all 64 MiB of DIR-24-8,
///   so the peak resident set (`VmHWM`) would pass the bound below at the first
///   change, where the double-buffered tables (the spare replayed, a first copy as
///   sparse as the table) stay within a few MiB;
/// - memory that creeps: after 40 rounds of warm-up (the trace ring full, every
///   command thread started), 160 more grow the resident set by less than 1 MiB
///   (6.4 kB a round; measured 400 to 690 KiB). With a thread per command, each new
///   thread may take another of glibc's arenas and keep what its command freed there
///   (1.3 MiB with eight command threads kept, more with a thread per command).
#[test]
fn memory_levels_off_under_churn() {
    const ALONE: &str = "NETBATCH_MEMORY_TEST_ALONE";
    if std::env::var_os(ALONE).is_none() {
        let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "--exact",
                "control::tests::memory_levels_off_under_churn",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ALONE, "1")
            .output()
            .expect("the test binary runs");
        let err = String::from_utf8_lossy(&out.stderr);
        eprint!("{err}");
        assert!(
            out.status.success(),
            "alone, the test failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(
            err.contains("resident set:"),
            "alone, the test did not run: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        return;
    }
    use etherparse::PacketBuilder;

    use super::server::{Server, request};
    let r = Running::start("");
    let path = r.dir.path().join("dp.sock");
    let _s = Server::start(r.control.clone(), &path, None).expect("served");
    let ask = |line: &str| {
        let argv: Vec<String> = line.split_whitespace().map(str::to_string).collect();
        let reply = request(&path, &argv).expect("answer");
        assert!(reply.ok, "{line}: {}", reply.text);
    };
    let mut frame = Vec::new();
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 0x99], [2, 0, 0x5e, 0, 0x53, 1])
        .ipv4([192, 0, 2, 9], [203, 0, 113, 9], 64)
        .udp(4000, 9)
        .write(&mut frame, &[0u8; 100])
        .expect("frame");
    let start = status_kib("VmRSS");
    let round = |k: u32| {
        ask(&format!(
            "route add 198.19.{}.0/24 via 198.51.100.2",
            k % 200 + 1
        ));
        ask(&format!("route del 198.19.{}.0/24", k % 200 + 1));
        ask("rule add forward proto udp dport 9999 action drop");
        ask("rule del forward 0");
        ask("reload");
        ask("show runtime");
        ask("show counters");
        ask("trace add --count 3");
        let f = frame.clone();
        r.control
            .remote
            .on_each(move |i, w| {
                if i == 0 {
                    let now = netbatch_engine::time::mono_ns();
                    let p = w.ports[0]
                        .as_any_mut()
                        .downcast_mut::<MemPort>()
                        .expect("a mem port");
                    for _ in 0..3 {
                        p.push_rx(now, f.clone());
                    }
                }
            })
            .expect("answers");
        ask("trace show");
        if k.is_multiple_of(10) {
            std::thread::scope(|s| {
                for _ in 0..16 {
                    s.spawn(|| ask("show runtime"));
                }
            });
        }
    };
    for k in 0..40 {
        round(k);
    }
    let before = status_kib("VmRSS");
    for k in 40..200 {
        round(k);
    }
    let after = status_kib("VmRSS");
    let peak = status_kib("VmHWM");
    let grown = after.saturating_sub(before);
    eprintln!(
        "resident set: {start} KiB at the start, {before} KiB after 40 rounds, grew {grown} KiB \
         over 160 more; peak {peak} KiB"
    );
    // A copy of the 64 MiB first level writes only the pages that hold entries; on
    // transparent huge pages (the default where the kernel has them) such a page is 2
    // MiB, not 4 KiB, so a table's few routes cost a few MiB per copy instead of a few
    // pages. Either way a whole copy would be 64 MiB.
    let huge = r
        .control
        .remote
        .on_each(|_, w| w.host.routes.fib_pages().0)
        .expect("answers")
        .contains(&netbatch_engine::Backing::Transparent);
    let bound: u64 = if huge { 32 << 10 } else { 16 << 10 };
    assert!(
        peak.saturating_sub(start) < bound,
        "the resident set peaked at {peak} KiB, {} KiB above the start (bound {bound} KiB, \
         huge pages {huge}): a route table copied whole?",
        peak - start
    );
    assert!(
        grown < 1024,
        "resident set grew {grown} KiB over 160 rounds ({} bytes a round)",
        grown * 1024 / 160
    );
}

/// A UDP routing key from `src` to `dst` in by interface `iif`.
fn key_in(src: &str, dst: &str, iif: u16) -> netbatch_stack::route::rule::Key {
    netbatch_stack::route::rule::Key {
        src: ip(src),
        dst: ip(dst),
        iif,
        mark: 0,
        proto: 17,
        sport: 1,
        dport: 2,
        tos: 0,
    }
}

/// `route add|del … vrf NAME|table N` change the table of every worker's policy (read
/// back by routing a key from the VRF's interface), gateways are looked for on the VRF's
/// own subnets, and `show routes vrf NAME|table N` lists the table with its connected
/// routes.
#[test]
fn routes_of_a_vrf_change_on_every_worker() {
    use netbatch_stack::route::rule::DecisionOf;
    let file = FILE.replace(
        r#"addresses = ["198.51.100.1/24"]"#,
        "addresses = [\"198.51.100.1/24\"]\nvrf = \"red\"",
    );
    let r = Running::with(&file, "", "\n[[vrf]]\nname = \"red\"\ntable = 10\n");
    // The gateway each worker routes 203.0.113.5 by when it comes in by eth1 (red's).
    let via_red = |r: &Running| -> Vec<Option<u32>> {
        r.control
            .remote
            .on_each(|_, w| {
                let k = key_in("198.51.100.9", "203.0.113.5", 1);
                match w.host.policy.decide(&w.host.routes, &k, || 0) {
                    DecisionOf::Route { hop, .. } => Some(hop.gateway),
                    _ => None,
                }
            })
            .expect("answers")
    };
    assert_eq!(via_red(&r), vec![None, None]);
    r.ok("route add 203.0.113.0/24 via 198.51.100.2 vrf red");
    assert_eq!(via_red(&r), vec![Some(ip("198.51.100.2")); 2]);
    assert_eq!(r.lookups("203.0.113.5"), vec![None, None], "not in main");
    for (line, why) in [
        (
            "route add 203.0.113.0/24 via 198.51.100.3 vrf red",
            "exists",
        ),
        (
            "route add 198.18.0.0/15 via 192.0.2.7 vrf red",
            "not on a connected subnet",
        ),
        (
            "route add 198.18.0.0/15 via 198.51.100.3 vrf blue",
            "no VRF named 'blue'",
        ),
        ("route del 198.18.0.0/15 vrf red", "no route for"),
    ] {
        let reply = r.cmd(line);
        assert!(
            !reply.ok && reply.text.contains(why),
            "{line}: {}",
            reply.text
        );
    }
    assert_eq!(via_red(&r), vec![Some(ip("198.51.100.2")); 2]);
    let shown = r.ok("show routes vrf red");
    assert!(
        shown.contains("203.0.113.0/24 via 198.51.100.2 dev eth1")
            && shown.contains("198.51.100.0/24 dev eth1"),
        "{shown}"
    );
    assert!(!r.ok("show routes").contains("198.51.100.0/24"), "main");
    r.ok("route del 203.0.113.0/24 vrf red");
    assert_eq!(via_red(&r), vec![None, None]);
    // A numbered table that is no VRF's: its gateways are main's.
    r.ok("route add 198.18.0.0/15 via 192.0.2.7 table 100");
    assert!(
        r.ok("show routes table 100")
            .contains("198.18.0.0/15 via 192.0.2.7 dev eth0")
    );
    assert!(!r.cmd("show routes vrf blue").ok);
}

/// Where every worker's policy sends a UDP packet from `src` to `dst` that came in by
/// eth0 with `mark`: the gateway of the route found, or the kind of refusal.
fn decided(r: &Running, src: &str, dst: &str, mark: u32) -> Vec<String> {
    use netbatch_stack::route::rule::{DecisionOf, Key};
    let (s, d) = (ip(src), ip(dst));
    r.control
        .remote
        .on_each(move |_, w| {
            let k = Key {
                src: s,
                dst: d,
                iif: 0,
                mark,
                proto: 17,
                sport: 1000,
                dport: 53,
                tos: 0,
            };
            match w.host.policy.decide(&w.host.routes, &k, || 0) {
                DecisionOf::Route { hop, .. } => core::net::Ipv4Addr::from(hop.gateway).to_string(),
                other => format!("{other:?}"),
            }
        })
        .expect("answers")
}

/// `rule add|del` of policy rules (as `ip rule` writes them) change the rules every
/// worker walks, read back by routing keys on each worker; what Linux refuses
/// (`File exists`, a missing rule, a bad selector) is refused and changes nothing, and
/// `show rules` lists the rules as `ip rule show` does, Linux's defaults included.
#[test]
fn policy_rules_change_on_every_worker() {
    let r = Running::start("");
    r.ok("route add 203.0.113.0/24 via 192.0.2.7 table 100");
    assert_eq!(
        decided(&r, "192.0.2.9", "203.0.113.5", 0),
        ["198.51.100.2"; 2]
    );
    let added = r.ok("rule add pref 100 from 192.0.2.0/25 lookup 100");
    assert!(
        added.contains("100:\tfrom 192.0.2.0/25 lookup 100"),
        "{added}"
    );
    assert_eq!(decided(&r, "192.0.2.9", "203.0.113.5", 0), ["192.0.2.7"; 2]);
    assert_eq!(
        decided(&r, "192.0.2.200", "203.0.113.5", 0),
        ["198.51.100.2"; 2]
    );
    // A mark with its mask, before the source rule.
    r.ok("rule add pref 50 fwmark 0x10/0x30 blackhole");
    assert!(decided(&r, "192.0.2.9", "203.0.113.5", 0x1f)[0].contains("Blackhole"));
    assert_eq!(
        decided(&r, "192.0.2.9", "203.0.113.5", 0x20),
        ["192.0.2.7"; 2]
    );
    for (line, why) in [
        ("rule add pref 100 from 192.0.2.0/25 lookup 100", "exists"),
        ("rule add pref 7 from 192.0.2.0/33 lookup 100", "rule.from"),
        ("rule add pref 7 oif eth1 lookup 100", "not a rule selector"),
        ("rule add oif eth1 lookup 100", "nor a policy rule"),
        ("rule add pref 7 from 192.0.2.0/24", "needs an action"),
        ("rule add pref 7 iif eth9 lookup 100", "no interface 'eth9'"),
        ("rule del pref 99", "no such rule"),
        ("rule del pref 32766", "default rules"),
    ] {
        let reply = r.cmd(line);
        assert!(
            !reply.ok && reply.text.contains(why),
            "{line}: {}",
            reply.text
        );
    }
    let shown = r.ok("show rules");
    let policy: Vec<&str> = shown
        .lines()
        .skip_while(|l| !l.starts_with("policy rules (inet,"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .map(str::trim)
        .collect();
    assert_eq!(
        policy,
        [
            "0:\tfrom all lookup local",
            "50:\tfrom all fwmark 0x10/0x30 blackhole",
            "100:\tfrom 192.0.2.0/25 lookup 100",
            "32766:\tfrom all lookup main",
            "32767:\tfrom all lookup default",
        ],
        "{shown}"
    );
    // Without a priority: one below the second rule's (Linux's choice), here 49.
    r.ok("rule add from 192.0.2.128/25 unreachable");
    assert!(decided(&r, "192.0.2.200", "203.0.113.5", 0)[0].contains("Unreachable"));
    assert!(
        r.ok("show rules")
            .contains("49:\tfrom 192.0.2.128/25 unreachable")
    );
    r.ok("rule del from 192.0.2.128/25");
    r.ok("rule del pref 50");
    r.ok("rule del pref 100 lookup 100");
    assert_eq!(
        decided(&r, "192.0.2.9", "203.0.113.5", 0),
        ["198.51.100.2"; 2]
    );
    // IPv6 rules are their own family's.
    r.ok("rule add -6 pref 10 from 2001:db8::/32 prohibit");
    assert!(
        r.ok("show rules")
            .contains("10:\tfrom 2001:db8::/32 prohibit")
    );
}

/// A reload applies changed policy rules and numbered tables live (a table keeps its
/// slot), and a refused one changes neither.
#[test]
fn reload_applies_policy_rules_and_tables() {
    let r = Running::start("");
    let cfg_path = r.dir.path().join("dp.toml");
    let policy = "\n[[rule]]\npref = 100\nfrom = \"192.0.2.0/25\"\ntable = 100\n\n\
                  [[route]]\nprefix = \"203.0.113.0/24\"\nvia = \"192.0.2.7\"\ntable = 100\n";
    std::fs::write(&cfg_path, format!("{FILE}{policy}")).expect("config");
    let text = r.ok("reload");
    assert!(text.contains("policy rules and numbered tables"), "{text}");
    assert_eq!(decided(&r, "192.0.2.9", "203.0.113.5", 0), ["192.0.2.7"; 2]);
    // The table's route changes, the rule stays.
    std::fs::write(
        &cfg_path,
        format!("{FILE}{}", policy.replace("192.0.2.7", "192.0.2.8")),
    )
    .expect("config");
    r.ok("reload");
    assert_eq!(decided(&r, "192.0.2.9", "203.0.113.5", 0), ["192.0.2.8"; 2]);
    // A rule Linux would refuse: nothing changes.
    std::fs::write(
        &cfg_path,
        format!("{FILE}{policy}\n[[rule]]\npref = 100\nfrom = \"192.0.2.0/25\"\ntable = 100\n"),
    )
    .expect("config");
    let reply = r.cmd("reload");
    assert!(
        !reply.ok && reply.text.contains("rule[1]"),
        "{}",
        reply.text
    );
    assert_eq!(decided(&r, "192.0.2.9", "203.0.113.5", 0), ["192.0.2.8"; 2]);
    // Back to none: main again.
    std::fs::write(&cfg_path, FILE).expect("config");
    r.ok("reload");
    assert_eq!(
        decided(&r, "192.0.2.9", "203.0.113.5", 0),
        ["198.51.100.2"; 2]
    );
}

/// `reload` moves an interface into a VRF and out again, live on every worker: its
/// packets are routed in the VRF's table (with the VRF's routes from the file, and its
/// connected subnet there and no longer in `main`), then in `main` again; a VRF naming
/// a table another VRF has is refused and changes nothing.
#[test]
fn reload_moves_an_interface_between_vrfs() {
    use netbatch_stack::route::rule::DecisionOf;
    // No routes of main's: one via eth1's subnet would not survive eth1 leaving main.
    let r = Running::with(FILE, "", "");
    let cfg_path = r.dir.path().join("dp.toml");
    // How each worker routes a packet to `dst` that came in by `iif`.
    let route = |r: &Running, dst: &str, iif: u16| -> Vec<String> {
        let k = key_in("198.51.100.9", dst, iif);
        r.control
            .remote
            .on_each(
                move |_, w| match w.host.policy.decide(&w.host.routes, &k, || 0) {
                    DecisionOf::Route { table, hop, .. } => format!(
                        "{table} {} {}",
                        hop.out_if,
                        core::net::Ipv4Addr::from(hop.gateway)
                    ),
                    other => format!("{other:?}"),
                },
            )
            .expect("answers")
    };
    assert_eq!(route(&r, "198.51.100.7", 0), ["254 1 0.0.0.0"; 2]);
    let red = FILE.replace(
        r#"addresses = ["198.51.100.1/24"]"#,
        "addresses = [\"198.51.100.1/24\"]\nvrf = \"red\"",
    ) + "\n[[vrf]]\nname = \"red\"\ntable = 10\n\n[[route]]\nprefix = \"203.0.113.0/24\"\nvia = \"198.51.100.2\"\nvrf = \"red\"\n";
    std::fs::write(&cfg_path, &red).expect("config");
    let text = r.ok("reload");
    assert!(text.contains("VRFs"), "{text}");
    // eth1's packets: red's table, its route and its connected subnet.
    assert_eq!(route(&r, "203.0.113.5", 1), ["10 1 198.51.100.2"; 2]);
    assert_eq!(route(&r, "198.51.100.7", 1), ["10 1 0.0.0.0"; 2]);
    // eth0's (main's): red's subnet is no longer in main, nor red's route.
    assert_eq!(route(&r, "198.51.100.7", 0), ["NoRoute"; 2]);
    assert_eq!(route(&r, "203.0.113.5", 0), ["NoRoute"; 2]);
    // A second VRF on red's table: refused, nothing changes.
    std::fs::write(
        &cfg_path,
        format!("{red}\n[[vrf]]\nname = \"blue\"\ntable = 10\n"),
    )
    .expect("config");
    let reply = r.cmd("reload");
    assert!(!reply.ok && reply.text.contains("vrf"), "{}", reply.text);
    assert_eq!(route(&r, "203.0.113.5", 1), ["10 1 198.51.100.2"; 2]);
    // Back out of the VRF: main again, for both interfaces.
    std::fs::write(&cfg_path, FILE).expect("config");
    r.ok("reload");
    assert_eq!(route(&r, "198.51.100.7", 0), ["254 1 0.0.0.0"; 2]);
    assert_eq!(route(&r, "198.51.100.7", 1), ["254 1 0.0.0.0"; 2]);
    assert_eq!(route(&r, "203.0.113.5", 1), ["NoRoute"; 2]);
}

/// The Linux mirror's VRFs (`[linux] vrfs`) change through the reload's own path
/// (`plan_tables`/`apply_tables`): an interface put in a kernel VRF is routed by the
/// VRF's table on every worker, with its connected subnet there and no longer in
/// `main`; `route … vrf NAME` and `show routes vrf NAME` know the VRF; the same view
/// again is no change; an address followed onto a VRF's interface puts its routes in
/// the VRF's table; a view netbatch cannot have (two VRFs on one table, a reserved table, a
/// member of no VRF) is refused and changes nothing; the empty view puts it back in
/// `main`.
#[test]
fn kernel_vrfs_change_through_the_reloads_path() {
    use crate::config::VrfConfig;
    use netbatch_stack::route::rule::DecisionOf;
    // (A reload keeping them needs the control namespace `[linux]` names:
    // `linux_mirror`'s `kernel_vrf_devices_become_netbatch_vrfs` checks it.)
    let r = Running::with(FILE, "", "");
    let route = |r: &Running, dst: &str, iif: u16| -> Vec<String> {
        let k = key_in("198.51.100.9", dst, iif);
        r.control
            .remote
            .on_each(
                move |_, w| match w.host.policy.decide(&w.host.routes, &k, || 0) {
                    DecisionOf::Route { table, hop, .. } => format!(
                        "{table} {} {}",
                        hop.out_if,
                        core::net::Ipv4Addr::from(hop.gateway)
                    ),
                    other => format!("{other:?}"),
                },
            )
            .expect("answers")
    };
    let blue = || {
        vec![VrfConfig {
            name: "blue".into(),
            table: 10,
        }]
    };
    assert_eq!(route(&r, "198.51.100.7", 0), ["254 1 0.0.0.0"; 2]);
    assert_eq!(
        r.control.set_kernel_vrfs(blue(), &[(1, "blue".into())]),
        Ok(true)
    );
    assert_eq!(route(&r, "198.51.100.7", 1), ["10 1 0.0.0.0"; 2]);
    assert_eq!(route(&r, "198.51.100.7", 0), ["NoRoute"; 2]);
    assert_eq!(route(&r, "192.0.2.7", 0), ["254 0 0.0.0.0"; 2]);
    r.ok("route add 203.0.113.0/24 via 198.51.100.2 vrf blue");
    assert_eq!(route(&r, "203.0.113.5", 1), ["10 1 198.51.100.2"; 2]);
    let shown = r.ok("show routes vrf blue");
    assert!(shown.contains("198.51.100.0/24"), "{shown}");
    assert!(!r.ok("show routes").contains("198.51.100.0/24"));
    assert_eq!(
        r.control.set_kernel_vrfs(blue(), &[(1, "blue".into())]),
        Ok(false),
        "the same view again"
    );
    // An address the mirror follows onto eth1 (host interface pairs): its connected
    // route lands in blue's table, which keeps the route added to it; not in main.
    let addrs: Vec<netbatch_stack::prefix::IfAddr> = ["198.51.100.1/24", "198.18.0.1/15"]
        .iter()
        .map(|a| a.parse().expect("address"))
        .collect();
    assert_eq!(r.control.set_iface(1, &addrs, &[], None), Ok(true));
    assert_eq!(route(&r, "198.18.0.7", 1), ["10 1 0.0.0.0"; 2]);
    assert_eq!(route(&r, "198.18.0.7", 0), ["NoRoute"; 2]);
    assert_eq!(route(&r, "203.0.113.5", 1), ["10 1 198.51.100.2"; 2]);
    assert!(r.ok("show routes vrf blue").contains("198.18.0.0/15"));
    // Refused, nothing changed.
    let two = vec![
        blue()[0].clone(),
        VrfConfig {
            name: "red".into(),
            table: 10,
        },
    ];
    for (vrfs, members) in [
        (two, vec![(0, "red".to_string()), (1, "blue".to_string())]),
        (
            vec![VrfConfig {
                name: "blue".into(),
                table: 254,
            }],
            vec![(1, "blue".to_string())],
        ),
        (blue(), vec![(0, "green".to_string())]),
        (blue(), vec![(9, "blue".to_string())]),
    ] {
        let e = r.control.set_kernel_vrfs(vrfs.clone(), &members);
        assert!(e.is_err(), "{vrfs:?} {members:?}");
        assert_eq!(route(&r, "198.51.100.7", 1), ["10 1 0.0.0.0"; 2]);
        assert_eq!(route(&r, "192.0.2.7", 0), ["254 0 0.0.0.0"; 2]);
    }
    // No VRF: main again, for both.
    assert_eq!(r.control.set_kernel_vrfs(Vec::new(), &[]), Ok(true));
    assert_eq!(route(&r, "198.51.100.7", 0), ["254 1 0.0.0.0"; 2]);
    assert_eq!(route(&r, "198.51.100.7", 1), ["254 1 0.0.0.0"; 2]);
    assert!(!r.cmd("show routes vrf blue").ok);
}

/// With NAT and two workers, a reload changing a dnat rule's port (what RPS steers by)
/// needs a restart, named under `nat.prerouting` and not as an RPS change; a reload
/// changing only the postrouting rules does not.
#[test]
fn reload_of_dnat_rules_with_two_workers_needs_a_restart() {
    let base = "[datapath]\nworkers = 2\nrps = \"deferred\"\n\
        [[port]]\nname = \"eth0\"\nmac = \"02:00:00:00:00:01\"\naddresses = [\"192.0.2.1/24\"]\n\
        [[port]]\nname = \"eth1\"\nmac = \"02:00:00:00:00:02\"\naddresses = [\"203.0.113.1/24\"]\n\
        [[nat.prerouting.rule]]\nin = \"eth1\"\nproto = \"tcp\"\ndport = 8080\naction = \"dnat\"\nto = \"192.0.2.10:80\"\n\
        [[nat.postrouting.rule]]\nout = \"eth1\"\naction = \"masquerade\"\n";
    let dir = std::path::Path::new(".");
    let old = Config::parse(base, dir, "old.toml").expect("valid");
    let moved = Config::parse(&base.replace("8080", "8081"), dir, "new.toml").expect("valid");
    let keys: Vec<String> = super::needs_restart(&old, &moved)
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(keys, ["nat.prerouting"]);
    let post = Config::parse(
        &base.replace(
            "action = \"masquerade\"",
            "action = \"snat\"\nto = \"203.0.113.5\"",
        ),
        dir,
        "new.toml",
    )
    .expect("valid");
    assert!(super::needs_restart(&old, &post).is_empty());
}
