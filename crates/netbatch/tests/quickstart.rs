//! The README's quick start, run as it is written: the commands between the markers
//! `<!-- quickstart:begin -->` and `<!-- quickstart:end -->` (its first `sh` block) are
//! read from README.md, not retyped here, and run one after the other with bash, in a
//! directory laid out as a clone (`target/release/netbatch` and `examples/`); then what
//! they printed is checked against what the README says they show. Pings through the
//! router both families are the commands' own exit status (`ping -c 3 -w 10` fails
//! unless three replies come back).
//!
//! Three things differ from a person at a terminal, each stated here:
//! - the build line (`cargo build --release -p netbatch`) is not run: the binary under
//!   test (this test's own build of it) stands at `target/release/netbatch`;
//! - the lab's name `nblab` is replaced by one with the process id in it, so that the
//!   namespaces, the configuration and the control socket are the test's own;
//! - as root without the `sudo` command (a bare Debian has none), `sudo` runs its
//!   arguments as they are (what it does for root).
//!
//! A line ending in `&` is started and left running, as the shell would; `lab down`
//! stops it. Whatever happens, the lab is taken down at the end (`netbatch lab down`,
//! then the test's own background processes, by their ids).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The README's quick start: the first `sh` block between the markers, one command a
/// line, comments removed.
fn quickstart() -> Vec<String> {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let begin = readme
        .find("<!-- quickstart:begin -->")
        .expect("the quick start's begin marker");
    let end = readme
        .find("<!-- quickstart:end -->")
        .expect("the quick start's end marker");
    let block = &readme[begin..end];
    let code = block
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a sh block in the quick start");
    code.lines()
        .map(strip_comment)
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

/// `line` without its comment: from a `#` that follows whitespace, outside quotes.
fn strip_comment(line: &str) -> &str {
    let (mut single, mut double) = (false, false);
    let mut prev = ' ';
    for (i, c) in line.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && prev.is_whitespace() => return &line[..i],
            _ => {}
        }
        prev = c;
    }
    line
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The lab, its directory and what the quick start left running; taken down when
/// dropped, failed assertions included.
struct Lab {
    name: String,
    dir: tempfile::TempDir,
    background: Vec<Child>,
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = Command::new(env!("CARGO_BIN_EXE_netbatch"))
            .args(["lab", "down", "--name", &self.name])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        for c in &mut self.background {
            if matches!(c.try_wait(), Ok(None)) {
                let _ = c.kill();
            }
            let _ = c.wait();
        }
    }
}

/// bash running `line` in `dir` (with `sudo` as a pass-through when there is none).
fn bash(dir: &Path, line: &str) -> Command {
    let prelude = if netbatch_testkit::has_command("sudo") {
        ""
    } else {
        "sudo() { \"$@\"; }; "
    };
    let mut c = Command::new("bash");
    c.args(["-c", &format!("set -o pipefail; {prelude}{line}")])
        .current_dir(dir);
    c
}

#[test]
fn the_quick_start_works_as_written() {
    if !netbatch_testkit::root("the quick start makes network namespaces")
        || !netbatch_testkit::tools(&[
            ("bash", "bash"),
            ("ip", "iproute2"),
            ("ping", "iputils-ping"),
            ("curl", "curl"),
        ])
    {
        return;
    }
    let lines = quickstart();
    assert!(
        lines[0] == "cargo build --release -p netbatch",
        "the quick start begins with the build: {lines:#?}"
    );
    // The lab's name is given on each `lab` line, so that the test's replaces it (a
    // default name would make the test touch a lab of the machine's own).
    for l in lines.iter().filter(|l| l.contains("netbatch lab ")) {
        assert!(l.contains("--name nblab"), "`{l}` names its lab");
    }
    let name = format!("nbqs{}", std::process::id() % 100_000);
    let mut lab = Lab {
        name: name.clone(),
        dir: tempfile::Builder::new()
            .prefix("netbatch-quickstart-")
            .tempdir()
            .expect("temp dir"),
        background: Vec::new(),
    };
    // The clone: the binary where the build puts it, the examples beside it.
    let dir = lab.dir.path().to_path_buf();
    std::fs::create_dir_all(dir.join("target/release")).unwrap();
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_netbatch"),
        dir.join("target/release/netbatch"),
    )
    .unwrap();
    std::os::unix::fs::symlink(repo().join("examples"), dir.join("examples")).unwrap();

    let mut outputs: Vec<(String, String)> = Vec::new();
    for line in &lines[1..] {
        let line = line.replace("nblab", &name);
        if let Some(bg) = line.strip_suffix('&') {
            let log = std::fs::File::create(dir.join("background.log")).unwrap();
            let child = bash(&dir, bg.trim())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .expect("bash");
            lab.background.push(child);
            continue;
        }
        let mut child = bash(&dir, &line)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("bash");
        let started = Instant::now();
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "`{line}` did not finish within 60 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let out = child.wait_with_output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let router_log = std::fs::read_to_string(dir.join("background.log")).unwrap_or_default();
        assert!(
            status.success(),
            "`{line}` failed ({status}):\n{text}\nrouter's log:\n{router_log}"
        );
        outputs.push((line, text));
    }
    let said = |words: &str| -> &str {
        outputs
            .iter()
            .find(|(l, _)| l.contains(words))
            .map(|(_, t)| t.as_str())
            .unwrap_or_else(|| panic!("no quick-start line with «{words}»"))
    };
    // Both families crossed the router (each ping's own status said so; its summary too).
    for dst in [
        "ping -c 3 -w 10 198.51.100.2",
        "ping -c 3 -w 10 2001:db8:2::2",
    ] {
        assert!(
            said(dst).contains(" 0% packet loss") || said(dst).contains("3 received"),
            "{}",
            said(dst)
        );
    }
    assert!(
        said("check-config").contains("ok for `netbatch run` (on this machine"),
        "{}",
        said("check-config")
    );
    // `show ports`: each port once, each worker once on its queue's line.
    let ports = said("show ports");
    assert!(ports.contains("port lan: af_packet on veth-lan"), "{ports}");
    assert!(ports.contains("port wan: af_packet on veth-wan"), "{ports}");
    assert!(ports.contains("  worker 0: TPACKET_V3 ring"), "{ports}");
    assert!(!ports.contains("worker 0: worker 0"), "{ports}");
    let routes = said("show routes");
    for r in [
        "default via 198.51.100.2 dev wan",
        "default via 2001:db8:2::2 dev wan",
    ] {
        assert!(routes.contains(r), "«{r}» in {routes}");
    }
    // /metrics, read inside the router's namespace: received packets counted, per worker.
    let metrics = said("/metrics");
    let rx: f64 = metrics
        .lines()
        .find(|l| l.starts_with("netbatch_packets_total{fate=\"rx\",worker=\"0\"}"))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no rx count in {metrics}"));
    assert!(
        rx >= 12.0,
        "at least the pings' 6 requests and 6 replies: {rx}"
    );
    // `lab down` stopped the router, which printed its counters, and removed the lab.
    let router_log = std::fs::read_to_string(dir.join("background.log")).unwrap();
    assert!(router_log.contains("packets: rx "), "{router_log}");
    assert!(said("lab down").contains(&format!("lab '{name}' is down")));
    for n in ["h1", "r", "h2"] {
        assert!(!Path::new(&format!("/run/netns/{name}-{n}")).exists());
    }
}

#[test]
fn comments_are_stripped_outside_quotes_only() {
    assert_eq!(strip_comment("ping -c 3 x   # IPv4"), "ping -c 3 x   ");
    assert_eq!(
        strip_comment("curl -s u | grep '^# HELP x'  # the help"),
        "curl -s u | grep '^# HELP x'  "
    );
    assert_eq!(strip_comment("echo a#b"), "echo a#b");
}
