//! The command line, run as users run it: `check-config` on the shipped examples and
//! `replay` end to end.

use std::path::{Path, PathBuf};
use std::process::Command;

fn netbatch() -> Command {
    Command::new(env!("CARGO_BIN_EXE_netbatch"))
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// A fresh temporary directory named `netbatch-cli-<tag>-…`, removed with its files when
/// dropped, whether the test passes or panics.
fn scratch(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("netbatch-cli-{tag}-"))
        .tempdir()
        .expect("temp dir")
}

/// Frame `i` of a capture: a UDP datagram from 192.0.2.10 (port 1000) to `dst`:`dport`,
/// sent to `02:00:00:00:00:01` at 1 s + `i` µs.
fn udp_frame(
    dst: [u8; 4],
    dport: u16,
    payload: &[u8],
    i: u64,
) -> netbatch_ports::pcap::CapturedFrame {
    let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 0x0a], [2, 0, 0, 0, 0, 1])
        .ipv4([192, 0, 2, 10], dst, 64)
        .udp(1000, dport);
    let mut v = Vec::new();
    b.write(&mut v, payload).unwrap();
    netbatch_ports::pcap::CapturedFrame {
        ts_ns: 1_000_000_000 + i * 1000,
        bytes: v,
    }
}

/// Runs `netbatch replay` of `input` with `config`, writing into `dir`, and returns the
/// capture it wrote and its stats document; fails the test if it does not finish
/// successfully within `secs` seconds (it is killed then).
fn replay_within(
    config: &Path,
    input: &Path,
    dir: &Path,
    secs: u64,
) -> (PathBuf, serde_json::Value) {
    let (out, stats) = (dir.join("out.pcapng"), dir.join("stats.json"));
    let mut child = netbatch()
        .args(["replay", "--config"])
        .arg(config)
        .arg("--in")
        .arg(input)
        .arg("--out")
        .arg(&out)
        .arg("--stats-json")
        .arg(&stats)
        .spawn()
        .expect("run");
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if started.elapsed() > std::time::Duration::from_secs(secs) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("replay did not finish within {secs} s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(status.success());
    let s = serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    (out, s)
}

#[test]
fn shipped_examples_validate() {
    let out = netbatch()
        .args(["check-config", "--for", "replay"])
        .arg(examples().join("router.toml"))
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("ok for `netbatch replay`"), "{text}");
    assert!(text.contains("interface eth1: 198.51.100.1/24"), "{text}");
    assert!(text.contains("filter forward: 2 rule(s)"), "{text}");
    // Dual-stack: eth0's IPv6 address and its link-local address from its MAC
    // 02:00:5e:00:53:01 (RFC 4291 appendix A: the U/L bit flipped, ff:fe in the middle:
    // interface identifier 0000:5eff:fe00:5301).
    assert!(
        text.contains(
            "interface eth0: 192.0.2.1/24, 2001:db8:0:1::1/64; IPv6 link-local fe80::5eff:fe00:5301"
        ),
        "{text}"
    );
    // The IPv6 default, the unreachable route, two on-link prefixes and two locals.
    assert!(
        text.contains(
            "IPv6 routes: 8 (3 unicast, 4 local, 0 blackhole, 1 unreachable, 0 prohibit)"
        ),
        "{text}"
    );
    assert!(
        text.contains("static neighbours: 1 IPv4, 1 IPv6; apps: 2"),
        "{text}"
    );

    let out = netbatch()
        .arg("check-config")
        .arg("--offline")
        .arg(examples().join("live-router.toml"))
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("ok for `netbatch run` (the file alone"),
        "{text}"
    );
    assert!(text.contains("port lan (af_packet on veth-lan)"), "{text}");
}

/// `check-config` (for `run`, its default) refuses what `netbatch run` refuses, with the
/// same keys and reasons: a replay file's in-memory ports. Before, check-config said "ok
/// (on this machine)" and run then refused the file. Both exit 1; check-config points
/// at `--for replay`, which accepts the file.
#[test]
fn check_config_and_run_refuse_the_same_file_alike() {
    let router = examples().join("router.toml");
    let check = netbatch()
        .arg("check-config")
        .arg(&router)
        .output()
        .expect("run");
    let run = netbatch().arg("run").arg(&router).output().expect("run");
    let (check_err, run_err) = (
        String::from_utf8_lossy(&check.stderr),
        String::from_utf8_lossy(&run.stderr),
    );
    assert_eq!(check.status.code(), Some(1), "{check_err}");
    assert_eq!(run.status.code(), Some(1), "{run_err}");
    for want in [
        "port[0].kind: kind pcap is not a live interface: `netbatch run` cannot serve port 'eth0'",
        "port[1].kind: kind pcap is not a live interface: `netbatch run` cannot serve port 'eth1'",
    ] {
        assert!(
            check_err.contains(want),
            "check-config: missing «{want}» in:\n{check_err}"
        );
        assert!(
            run_err.contains(want),
            "run: missing «{want}» in:\n{run_err}"
        );
    }
    assert!(
        check_err.contains("netbatch check-config --for replay"),
        "{check_err}"
    );
}

#[test]
fn run_names_the_port_whose_interface_is_missing() {
    let dir = scratch("run");
    let cfg = dir.path().join("missing.toml");
    std::fs::write(
        &cfg,
        "[[port]]\nname = \"uplink\"\nkind = \"af_packet\"\ninterface = \"nb-absent0\"\nmac = \"02:00:5e:00:53:01\"\naddresses = [\"192.0.2.1/24\"]\n",
    )
    .expect("config");
    let out = netbatch().arg("run").arg(&cfg).output().expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("port[0].interface: no interface 'nb-absent0' on this machine"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn bad_config_is_refused_with_each_key_and_reason() {
    let out = netbatch()
        .arg("check-config")
        .arg(examples().join("bad.toml"))
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    for want in [
        // Both misspelt keys in one pass, each with the key meant.
        "datapath.worker: unknown key (line 4); did you mean `workers`?",
        "port[0].rx_worker: unknown key (line 28); did you mean `rx_workers`?",
        "datapath.mode: 'batch' is not a batch mode",
        "port[0].features[0]: unknown feature 'tso'",
        "port[0].addresses[0]: '192.0.2.1/33'",
        "route[0].prefix: '10.0.0.1/8'",
        "filter.forward.rule[0].action: unknown verdict 'deny'",
        "filter.forward.rule[0]: port matches need proto",
        "route[3].via: gateway fe80::1 is link-local",
        "route[4].via: '198.51.100.254' is an IPv4 address: the gateway of an IPv6 route",
        "neighbour.static[1].ip: 2001:db8:99::9 is off-link for eth1",
    ] {
        assert!(err.contains(want), "missing «{want}» in:\n{err}");
    }
}

#[test]
fn a_missing_file_and_a_syntax_error_are_clear() {
    let out = netbatch()
        .arg("check-config")
        .arg("/nonexistent/netbatch.toml")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read"));
    let dir = scratch("syntax");
    let f = dir.path().join("syntax.toml");
    std::fs::write(&f, "[[port]\nname = \"x\"\n").unwrap();
    let out = netbatch()
        .arg("check-config")
        .arg(&f)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("line 1"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn replay_writes_frames_and_stats() {
    let dir = scratch("replay");
    // A ping to the router's LAN address and a datagram routed upstream (example config).
    let ping = {
        let b = etherparse::PacketBuilder::ethernet2(
            [2, 0, 0, 0, 0, 0x0a],
            [0x02, 0, 0x5e, 0, 0x53, 0x01],
        )
        .ipv4([192, 0, 2, 10], [192, 0, 2, 1], 64)
        .icmpv4_echo_request(1, 1);
        let mut v = Vec::new();
        b.write(&mut v, b"ping").unwrap();
        v
    };
    let udp = {
        let b = etherparse::PacketBuilder::ethernet2(
            [2, 0, 0, 0, 0, 0x0a],
            [0x02, 0, 0x5e, 0, 0x53, 0x01],
        )
        .ipv4([192, 0, 2, 10], [203, 0, 113, 200], 64)
        .udp(1000, 2000);
        let mut v = Vec::new();
        b.write(&mut v, b"to the blackhole").unwrap();
        v
    };
    // The router asks who 192.0.2.10 is before it can answer; the host replies.
    let mut arp_reply = vec![
        0x02, 0, 0x5e, 0, 0x53, 0x01, 2, 0, 0, 0, 0, 0x0a, 0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 2,
    ];
    arp_reply.extend_from_slice(&[
        2, 0, 0, 0, 0, 0x0a, 192, 0, 2, 10, 0x02, 0, 0x5e, 0, 0x53, 0x01, 192, 0, 2, 1,
    ]);
    arp_reply.resize(60, 0);
    let frames = vec![
        netbatch_ports::pcap::CapturedFrame {
            ts_ns: 1_000_000_000,
            bytes: ping,
        },
        netbatch_ports::pcap::CapturedFrame {
            ts_ns: 1_000_001_000,
            bytes: udp,
        },
        netbatch_ports::pcap::CapturedFrame {
            ts_ns: 1_000_002_000,
            bytes: arp_reply,
        },
    ];
    let input = dir.path().join("in.pcap");
    netbatch_ports::pcap::write_pcap(&input, &frames).unwrap();
    let (out, s) = replay_within(&examples().join("router.toml"), &input, dir.path(), 60);
    for k in [
        "rx_packets",
        "tx_packets",
        "delivered_packets",
        "dropped_packets",
        "held_packets",
        "drops",
        "stages",
    ] {
        assert!(s.get(k).is_some(), "stats lack {k}");
    }
    assert_eq!(s["rx_packets"], 3);
    assert_eq!(s["tx_packets"], 2, "the ARP request and the echo reply");
    assert_eq!(s["originated_packets"], 1, "the ARP request");
    assert_eq!(s["delivered_packets"], 1, "the ARP reply");
    assert_eq!(s["held_packets"], 0);
    assert_eq!(s["drops"]["route_blackhole"], 1);
    let n = |k: &str| s[k].as_u64().unwrap();
    assert_eq!(
        n("rx_packets") + n("originated_packets"),
        n("tx_packets") + n("delivered_packets") + n("dropped_packets") + n("held_packets")
    );
    let back = netbatch_ports::pcap::read_frames(&out).unwrap();
    assert_eq!(back.len(), 2);
    assert_eq!(&back[0].bytes[0..6], &[0xff; 6], "who has 192.0.2.10?");
    assert_eq!(
        &back[1].bytes[0..6],
        &[2, 0, 0, 0, 0, 0x0a],
        "then the reply to the pinging host"
    );
    assert_eq!(back[1].bytes[34], 0, "an echo reply");
}

/// A replay whose packets outlast the buffer pool (they wait for next hops that never
/// answer ARP) neither hangs nor loses count: like a NIC, the input port drops what
/// finds no buffer, and every frame of the capture is in `rx_packets`, an oversize one
/// included, with the conservation law holding.
#[test]
fn replay_out_of_buffers_finishes_and_counts_every_frame() {
    let dir = scratch("nobuf");
    let config = dir.path().join("small.toml");
    std::fs::write(
        &config,
        r#"
        [pool]
        buffers = 64
        cache_size = 16
        [[port]]
        name = "eth0"
        mac = "02:00:00:00:00:01"
        addresses = ["192.0.2.1/24"]
        [[port]]
        name = "eth1"
        mac = "02:00:00:00:01:01"
        addresses = ["198.51.100.1/24"]
        "#,
    )
    .unwrap();
    // 300 datagrams to 30 hosts on eth1's subnet (10 each: within a neighbour's queue),
    // none of which ever answers, then one frame longer than a buffer.
    let mut frames: Vec<netbatch_ports::pcap::CapturedFrame> = (0..300u32)
        .map(|i| {
            udp_frame(
                [198, 51, 100, 2 + (i % 30) as u8],
                2000,
                &i.to_be_bytes(),
                u64::from(i),
            )
        })
        .collect();
    frames.push(netbatch_ports::pcap::CapturedFrame {
        ts_ns: 1_001_000_000,
        bytes: vec![0x55; 4000],
    });
    let input = dir.path().join("in.pcap");
    netbatch_ports::pcap::write_pcap(&input, &frames).unwrap();
    let (_, s) = replay_within(&config, &input, dir.path(), 60);
    let n = |k: &str| s[k].as_u64().unwrap();
    assert_eq!(n("rx_packets"), 301, "every frame of the capture");
    assert_eq!(s["drops"]["frame_too_long"], 1);
    let nobuf = s["drops"]["no_buffer"].as_u64().unwrap_or(0);
    assert!(nobuf > 0, "the pool of 64 ran out: {s}");
    assert!(
        n("held_packets") <= 64,
        "held in neighbour queues, at most the pool"
    );
    assert_eq!(
        n("rx_packets") + n("originated_packets"),
        n("tx_packets") + n("delivered_packets") + n("dropped_packets") + n("held_packets"),
        "{s}"
    );
}

/// Runs `netbatch bench` with `args` and returns its JSON document.
fn bench_json(tag: &str, args: &[&str]) -> serde_json::Value {
    let dir = scratch(tag);
    let json = dir.path().join("bench.json");
    let status = netbatch()
        .arg("bench")
        .args(args)
        .arg("--json")
        .arg(&json)
        .status()
        .unwrap();
    assert!(status.success(), "bench {args:?} failed its own checks");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(doc["failures"].as_array().unwrap().is_empty(), "{doc}");
    doc
}

/// The receive scenarios each give one result per mode and dispatch with the fields the
/// README's tables are made from, and per-stage counters whose packet counts add up:
/// each frame of a run passes the Ethernet stage once.
#[test]
fn receive_bench_reports_every_variant_with_its_fields() {
    let doc = bench_json(
        "rx",
        &[
            "--scenario",
            "null,udp-local-1b,udp-local-1b-nf1,smoltcp-udp-1b",
            "--packets",
            "20000",
            "--repeat",
            "1",
        ],
    );
    let results = doc["results"].as_array().unwrap();
    let mut seen = Vec::new();
    for r in results {
        for k in ["packets", "mpps", "ns_per_packet", "cycles_per_packet"] {
            assert!(r[k].as_f64().is_some_and(|v| v > 0.0), "{k} in {r}");
        }
        // The count is rounded up to whole bursts.
        let packets = r["packets"].as_u64().unwrap();
        assert!((20000..20000 + 64).contains(&packets), "{r}");
        let scenario = r["scenario"].as_str().unwrap().to_string();
        if scenario.starts_with("udp-local") {
            let stages = r["stages"].as_array().unwrap();
            let eth = stages
                .iter()
                .find(|s| s["name"] == "eth-input")
                .unwrap_or_else(|| panic!("no eth-input stage in {r}"));
            assert_eq!(eth["packets"], packets, "{r}");
        }
        seen.push((
            scenario,
            r["mode"].as_str().unwrap().to_string(),
            r["dispatch"].as_str().unwrap().to_string(),
        ));
    }
    seen.sort();
    seen.dedup();
    let mut want = Vec::new();
    // `null` has no graph to dispatch, smoltcp neither modes nor dispatch.
    for m in ["list", "packet"] {
        want.push(("null".to_string(), m.to_string(), "-".to_string()));
    }
    want.push((
        "smoltcp-udp-1b".to_string(),
        "-".to_string(),
        "-".to_string(),
    ));
    for s in ["udp-local-1b", "udp-local-1b-nf1"] {
        for m in ["list", "packet"] {
            for d in ["buckets", "runs"] {
                want.push((s.to_string(), m.to_string(), d.to_string()));
            }
        }
    }
    want.sort();
    assert_eq!(seen, want);
}

/// The rps scenario gives one result per policy with the counters the issue names, and
/// no datagram out of its flow's order.
#[test]
fn rps_bench_reports_each_policy() {
    let doc = bench_json(
        "rps",
        &[
            "--scenario",
            "rps",
            "--modes",
            "list",
            "--dispatch",
            "buckets",
            "--packets",
            "20000",
            "--repeat",
            "1",
            "--no-profile",
        ],
    );
    let mut policies: Vec<&str> = Vec::new();
    for r in doc["results"].as_array().unwrap() {
        policies.push(r["rps_policy"].as_str().unwrap());
        assert!(r["packets"].as_u64().unwrap() >= 20000, "{r}");
        assert!(r["mpps"].as_f64().unwrap() > 0.0, "{r}");
        assert_eq!(r["reordered"], 0, "{r}");
        for k in ["wakeups", "backlog_polls"] {
            assert!(r[k].as_u64().is_some(), "{k} in {r}");
        }
        assert!(
            r["backlog_polls"].as_u64().unwrap() > 0,
            "worker 1 polled its backlog: {r}"
        );
        let lat = &r["latency_ns"];
        assert!(lat.is_object(), "latency percentiles in {r}");
    }
    policies.sort_unstable();
    assert_eq!(policies, ["backlog", "deferred", "direct"]);
}

#[test]
fn gro_bench_reports_each_mode_with_its_frame_rate() {
    let dir = scratch("gro");
    let json = dir.path().join("bench.json");
    let status = netbatch()
        .args([
            "bench",
            "--scenario",
            "udp-forward-1460,tcp-forward-1460",
            "--modes",
            "list",
            "--dispatch",
            "buckets",
            "--gro",
            "off,standard,fraglist",
            "--packets",
            "20000",
            "--repeat",
            "1",
            "--no-profile",
            "--json",
        ])
        .arg(&json)
        .status()
        .unwrap();
    assert!(
        status.success(),
        "the bench verifies every frame was forwarded"
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let results = doc["results"].as_array().unwrap();
    let mut seen: Vec<(String, String)> = results
        .iter()
        .map(|r| {
            assert!(r["mpps"].as_f64().unwrap() > 0.0, "{r}");
            (
                r["scenario"].as_str().unwrap().to_string(),
                r["gro"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    seen.sort();
    let mut want = Vec::new();
    for s in ["tcp-forward-1460", "udp-forward-1460"] {
        for g in ["fraglist", "off", "standard"] {
            want.push((s.to_string(), g.to_string()));
        }
    }
    assert_eq!(seen, want);
    assert!(doc["failures"].as_array().unwrap().is_empty());
}

/// The IPv6 scenarios: `ip6-forward` once per `--fib6` size, `udp6-local-1b` and
/// `udp6-forward-1460` (each GRO mode) in both modes, every frame through `ip6-input`
/// (and for forwarding through `ip6-forward` and `ip6-neighbour`), none through IPv4's
/// stages; the datagrams reach the sink; the ratio lines the targets name are printed.
#[test]
fn ipv6_benches_report_every_variant_through_the_ipv6_stages() {
    let doc = bench_json(
        "ip6",
        &[
            "--scenario",
            "ip6-forward,udp6-local-1b,udp6-forward-1460",
            "--fib6",
            "1000,5000",
            "--dispatch",
            "buckets",
            "--gro",
            "off,standard,fraglist",
            "--packets",
            "20000",
            "--repeat",
            "1",
        ],
    );
    assert_eq!(doc["fib6"], serde_json::json!([1000, 5000]));
    let mut seen = Vec::new();
    for r in doc["results"].as_array().unwrap() {
        let scenario = r["scenario"].as_str().unwrap().to_string();
        let packets = r["packets"].as_u64().unwrap();
        assert!((20000..20000 + 64).contains(&packets), "{r}");
        for k in ["mpps", "ns_per_packet", "cycles_per_packet"] {
            assert!(r[k].as_f64().is_some_and(|v| v > 0.0), "{k} in {r}");
        }
        let stages = r["stages"].as_array().unwrap();
        let stage = |name: &str| stages.iter().find(|s| s["name"] == name);
        let through = |name: &str| {
            stage(name).unwrap_or_else(|| panic!("no {name} stage in {r}"))["packets"]
                .as_u64()
                .unwrap()
        };
        if r["gro"] == "off" {
            assert_eq!(through("ip6-input"), packets, "{r}");
        } else {
            // GRO merges the IPv6 stream: the stages after it see super-packets, and
            // every wire frame received leaves as a wire frame again.
            assert_eq!(through("gro"), packets, "{r}");
            let merged = stage("gro").unwrap()["events"]["merged"].as_u64().unwrap();
            assert!(merged > packets / 2, "GRO merges IPv6: {r}");
            assert!(through("ip6-input") < packets / 2, "{r}");
            assert_eq!(through("tx-gen1"), packets, "{r}");
        }
        assert!(
            stage("ip4-input").is_none_or(|s| s["packets"] == 0),
            "no IPv4: {r}"
        );
        match scenario.as_str() {
            "ip6-forward" => {
                assert_eq!(through("ip6-route"), packets, "{r}");
                assert_eq!(through("ip6-forward"), packets, "{r}");
                assert_eq!(through("ip6-neighbour"), packets, "{r}");
                let n = r["extra"]["routes6"].as_u64().unwrap();
                assert_eq!(r["fib_routes"].as_u64(), Some(n), "{r}");
            }
            "udp6-local-1b" => {
                // Over the warm-up, the run and the profiling pass (the bench verified
                // that every datagram received was delivered).
                let got = r["extra"]["sink_datagrams"].as_u64().unwrap();
                assert!(got >= packets, "{r}");
            }
            _ => assert_eq!(through("ip6-neighbour"), through("ip6-input"), "{r}"),
        }
        seen.push((
            scenario,
            r["mode"].as_str().unwrap().to_string(),
            r["gro"].as_str().unwrap().to_string(),
            r["fib_routes"].as_u64(),
        ));
    }
    seen.sort();
    let mut want = Vec::new();
    for m in ["list", "packet"] {
        for n in [1000, 5000] {
            want.push((
                "ip6-forward".to_string(),
                m.to_string(),
                "off".to_string(),
                Some(n),
            ));
        }
        for g in ["fraglist", "off", "standard"] {
            want.push((
                "udp6-forward-1460".to_string(),
                m.to_string(),
                g.to_string(),
                None,
            ));
        }
        want.push((
            "udp6-local-1b".to_string(),
            m.to_string(),
            "off".to_string(),
            None,
        ));
    }
    want.sort();
    assert_eq!(seen, want);
}

/// Without privileges, `run` says which capability is missing, naming the port. Needs
/// root to drop to the `nobody` user (`setpriv`); without root it says so and passes.
#[test]
fn run_without_privileges_names_the_port_and_the_capabilities() {
    if !netbatch_testkit::root("it drops to the `nobody` user")
        || !netbatch_testkit::tools(&[("setpriv", "util-linux")])
    {
        return;
    }
    // A place the unprivileged user can read: the binary and the config.
    let dir = scratch("priv");
    let bin = dir.path().join("netbatch");
    std::fs::copy(env!("CARGO_BIN_EXE_netbatch"), &bin).expect("copy");
    let cfg = dir.path().join("lo.toml");
    std::fs::write(
        &cfg,
        "[[port]]\nname = \"uplink\"\nkind = \"af_packet\"\ninterface = \"lo\"\nmac = \"02:00:5e:00:53:01\"\naddresses = [\"192.0.2.1/24\"]\n",
    )
    .expect("config");
    let _ = Command::new("chmod")
        .arg("-R")
        .arg("a+rX")
        .arg(dir.path())
        .status();
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .arg(&bin)
        .arg("run")
        .arg(&cfg)
        .output()
        .expect("setpriv runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("error: port uplink: AF_PACKET socket: Operation not permitted"),
        "{err}"
    );
    assert!(err.contains("CAP_NET_RAW"), "{err}");
    assert_eq!(
        err.matches("Operation not permitted").count(),
        1,
        "said once: {err}"
    );
}

/// `replay` runs one worker and feeds the capture to the port it names, whatever that
/// port's `rx_workers` says: a port no worker receives from (a transmit-only port) still
/// drains, and every frame is counted.
#[test]
fn replay_receives_on_its_port_whatever_rx_workers_says() {
    // (Before replay took its port whatever the configuration said, this one never
    // finished.)
    let dir = scratch("rxw");
    let config = dir.path().join("rxw.toml");
    std::fs::write(
        &config,
        r#"
        [[port]]
        name = "eth0"
        mac = "02:00:00:00:00:01"
        addresses = ["192.0.2.1/24"]
        rx_workers = []
        "#,
    )
    .unwrap();
    let frames: Vec<netbatch_ports::pcap::CapturedFrame> = (0..5u64)
        .map(|i| udp_frame([192, 0, 2, 1], 9, b"x", i))
        .collect();
    let input = dir.path().join("in.pcap");
    netbatch_ports::pcap::write_pcap(&input, &frames).unwrap();
    let (_, s) = replay_within(&config, &input, dir.path(), 20);
    assert_eq!(s["rx_packets"], 5, "{s}");
}

/// `check-config` lists each VRF with its table, its interfaces and its routes (the
/// interfaces' connected, local and broadcast routes and the configured ones).
#[test]
fn check_config_lists_the_vrfs() {
    let dir = scratch("vrf");
    let file = dir.path().join("vrf.toml");
    std::fs::write(
        &file,
        r#"
[[vrf]]
name = "red"
table = 10

[[port]]
name = "eth0"
mac = "02:00:5e:00:53:01"
addresses = ["198.51.100.1/24"]
vrf = "red"

[[port.vlan]]
id = 7
addresses = ["192.0.2.1/24"]

[[port]]
name = "eth1"
mac = "02:00:5e:00:53:02"
addresses = ["198.51.100.1/24"]

[[route]]
prefix = "203.0.113.0/24"
via = "198.51.100.2"
vrf = "red"
"#,
    )
    .expect("config");
    let out = netbatch()
        .args(["check-config", "--for", "replay"])
        .arg(&file)
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // 198.51.100.0/24, .1, .255, 255.255.255.255 and the route: 5 IPv4 routes; eth0's
    // VLAN is main's (a VLAN takes its own vrf).
    assert!(
        text.contains("vrf red table 10: interfaces eth0; 5 IPv4 and 0 IPv6 routes"),
        "{text}"
    );
}
