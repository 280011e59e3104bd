//! Flow offload on real interfaces, both families: the second witness beside
//! `tests/flow_offload.rs` (which checks the offloaded frames byte for byte, one at a
//! time). `netbatch lab up` builds its router namespace; netbatch runs there with the
//! lab's configuration plus one FORWARD rule in front, `ct_state = "established"`,
//! `offload = true` (nftables' `ct state established flow add @ft`), and iperf3 sends TCP
//! from h1 to h2 through it for two seconds over IPv6, then over IPv4. Each transfer
//! must complete, and `offload_forwarded` (`show --json counters`, wire packets) must
//! grow by at least half of the packets the router received meanwhile: the lab is not
//! translated, so the veth's TSO super-packets and partially checksummed segments are
//! offloaded as they are (only the handshake, the FIN and the packets before each
//! direction's record take the whole path). The lab is taken down whatever happens.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_netbatch");

/// The lab and the router started in it; taken down when dropped.
struct Lab {
    name: String,
    router: Option<netbatch_testkit::Logged>,
    dir: tempfile::TempDir,
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.router = None;
        let _ = Command::new(BIN)
            .args(["lab", "down", "--name", &self.name])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

impl Lab {
    fn ns(&self, n: &str) -> String {
        format!("{}-{n}", self.name)
    }

    /// `cmd` with its arguments in namespace `n`; its status and output.
    fn exec(&self, n: &str, cmd: &[&str]) -> (bool, String) {
        let (program, args) = cmd.split_first().expect("a command");
        let o = netbatch_testkit::in_netns(&self.ns(n), program)
            .args(args)
            .output()
            .expect("ip netns exec runs");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        (o.status.success(), text)
    }

    /// The router's `offload_forwarded`, summed over its workers (0 where a worker has
    /// not published its tracking counters yet, as just after the start), and the wire
    /// packets it received.
    fn counts(&self) -> (u64, u64) {
        let o = Command::new(BIN)
            .args(["show", "--json", "counters", "--name", &self.name])
            .output()
            .expect("netbatch show runs");
        assert!(
            o.status.success(),
            "show counters: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON counters");
        let offloaded = v["workers"]
            .as_array()
            .expect("workers")
            .iter()
            .map(|w| w["conntrack"]["offload_forwarded"].as_u64().unwrap_or(0))
            .sum();
        let rx = v["totals"]["rx_packets"].as_u64().expect("rx_packets");
        (offloaded, rx)
    }

    /// Two seconds of TCP from h1 to h2's `addr` (`-4` or `-6`), bounded; the bytes h2
    /// received.
    fn iperf(&self, family: &str, addr: &str) -> u64 {
        let (ok, t) = self.exec("h2", &["iperf3", "-s", "-1", "-D"]);
        assert!(ok, "iperf3 server: {t}");
        assert!(
            netbatch_testkit::wait_listening(&self.ns("h2"), "tcp", 5201, Duration::from_secs(10)),
            "no iperf3 server after 10 s"
        );
        let (ok, t) = self.exec(
            "h1",
            &[
                "timeout", "30", "iperf3", family, "-c", addr, "-t", "2", "-J",
            ],
        );
        assert!(ok, "iperf3 {family} to {addr}: {t}");
        let v: serde_json::Value = serde_json::from_str(&t).expect("iperf3 JSON");
        v["end"]["sum_received"]["bytes"].as_u64().expect("bytes")
    }
}

/// The lab's configuration with the offloading rule first in its FORWARD chain.
fn with_offload(cfg: &str) -> String {
    let chain = "[filter.forward]\npolicy = \"accept\"\n";
    assert!(cfg.contains(chain), "the lab's FORWARD chain:\n{cfg}");
    cfg.replacen(
        chain,
        &format!(
            "{chain}[[filter.forward.rule]]\nct_state = \"established\"\noffload = true\naction = \"accept\"\n"
        ),
        1,
    )
}

#[test]
fn tcp_through_the_lab_is_offloaded_over_both_families() {
    if !netbatch_testkit::root("the lab is made of network namespaces")
        || !netbatch_testkit::tools(&[("ip", "iproute2"), ("iperf3", "iperf3"), ("ss", "iproute2")])
    {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let mut lab = Lab {
        name: format!("nbo{}", std::process::id() % 100_000),
        router: None,
        dir,
    };
    let up = Command::new(BIN)
        .args(["lab", "up", "--name", &lab.name])
        .output()
        .expect("lab up runs");
    assert!(
        up.status.success(),
        "lab up: {}",
        String::from_utf8_lossy(&up.stderr)
    );
    let cfg = PathBuf::from(format!("/run/netbatch-lab/{}.toml", lab.name));
    let text = std::fs::read_to_string(&cfg).expect("the lab's configuration");
    // Named as the lab: the router's control socket is named after its configuration
    // file (/run/netbatch/NAME.sock), which `show --name` finds.
    let path = lab.dir.path().join(format!("{}.toml", lab.name));
    std::fs::write(&path, with_offload(&text)).expect("writes the configuration");

    let mut run = netbatch_testkit::in_netns(&lab.ns("r"), BIN);
    run.arg("run").arg(&path);
    let mut router = netbatch_testkit::Logged::spawn(run);
    router.wait_for(&["port lan up", "port wan up"], Duration::from_secs(10));
    lab.router = Some(router);

    for (family, addr) in [("-6", "2001:db8:2::2"), ("-4", "198.51.100.2")] {
        let (off0, rx0) = lab.counts();
        let bytes = lab.iperf(family, addr);
        let (off1, rx1) = lab.counts();
        assert!(bytes > 0, "{family}: nothing received");
        let (offloaded, received) = (off1 - off0, rx1 - rx0);
        assert!(
            offloaded * 2 >= received,
            "{family}: {offloaded} of the {received} packets received offloaded"
        );
    }
}
