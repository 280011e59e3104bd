//! The control plane against running workers (in-memory ports, threads as `run` starts
//! them): each command's effect is read back from the workers themselves, and refused
//! commands and reloads are checked to change nothing.

use std::sync::Arc;

use netbatch_engine::Pool;
use netbatch_ports::Port;
use netbatch_ports::mem::MemPort;

use super::Control;
use crate::config::Config;
use crate::datapath::Datapath;

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

impl Running {
    fn start(extra: &str) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(
            dir.path().join("routes.txt"),
            "203.0.113.0/24 via 198.51.100.2\n",
        )
        .expect("routes");
        let path = dir.path().join("dp.toml");
        std::fs::write(&path, format!("{FILE}{extra}")).expect("config");
        let cfg = Config::load_for_run(&path).expect("valid");
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
    assert!(
        rules.contains("0             0  proto tcp out eth1 action drop"),
        "{rules}"
    );
    assert!(
        rules.contains("1             0  proto udp dport 9 action drop"),
        "{rules}"
    );
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
