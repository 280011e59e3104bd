//! The Debian package, installed on this machine as an administrator would: built by
//! `scripts/package` (cargo-deb, around this test's own build of the binary: no release
//! build), installed with `dpkg -i`, its systemd units checked by `systemd-analyze
//! verify`, its man page rendered by `man`, and the installed `/usr/bin/netbatch` serving
//! the quick start's lab from the packaged `/etc/netbatch/netbatch.toml`: pings through
//! it both families, and the service protocol a `Type=notify` unit relies on
//! (`READY=1`, `RELOADING=1` then `READY=1` around `netbatch reload`, `STOPPING=1` at
//! SIGTERM) received on a socket the test binds as systemd would, with the logs as JSON
//! lines (`--log-format json`, as the unit runs it), and with only the capabilities the
//! unit keeps (`setpriv --bounding-set`). Then the package is purged, which
//! leaves nothing behind; the purge and the lab's removal also run when the test fails.
//!
//! The test refuses to touch a machine where a `netbatch` package is already installed.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("the command runs")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn must(cmd: &mut Command) -> String {
    let what = format!("{cmd:?}");
    let o = run(cmd);
    assert!(o.status.success(), "{what}:\n{}", text(&o));
    text(&o)
}

/// Purges the package, takes the lab down and stops the router, whatever happened.
struct Installed {
    lab: String,
    router: Option<Child>,
}

impl Drop for Installed {
    fn drop(&mut self) {
        if let Some(c) = &mut self.router {
            if matches!(c.try_wait(), Ok(None)) {
                let _ = c.kill();
            }
            let _ = c.wait();
        }
        let _ = Command::new(env!("CARGO_BIN_EXE_netbatch"))
            .args(["lab", "down", "--name", &self.lab])
            .output();
        let _ = Command::new("dpkg").args(["--purge", "netbatch"]).output();
    }
}

/// The next datagram on `sock` within `secs` seconds, as text.
fn next_notice(sock: &UnixDatagram, secs: u64) -> String {
    sock.set_read_timeout(Some(Duration::from_secs(secs)))
        .unwrap();
    let mut buf = [0u8; 512];
    let n = sock
        .recv(&mut buf)
        .unwrap_or_else(|e| panic!("no sd_notify datagram within {secs} s: {e}"));
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[test]
fn the_package_installs_verifies_serves_and_purges() {
    if !netbatch_testkit::root("it installs a Debian package and makes namespaces")
        || !netbatch_testkit::tools(&[
            ("dpkg", "dpkg"),
            ("systemd-analyze", "systemd"),
            ("man", "man-db"),
            ("ip", "iproute2"),
            ("ping", "iputils-ping"),
            ("gzip", "gzip"),
            ("setpriv", "util-linux"),
        ])
    {
        return;
    }
    if !netbatch_testkit::has_command("cargo-deb") {
        netbatch_testkit::skip(
            "missing cargo-deb (scripts/setup installs it: cargo install cargo-deb --locked)",
        );
        return;
    }
    if run(Command::new("dpkg").args(["-s", "netbatch"]))
        .status
        .success()
    {
        netbatch_testkit::skip(
            "a netbatch package is installed on this machine: the test will not replace it",
        );
        return;
    }
    // The package, around this test's build of the binary: a target directory of the
    // test's own whose release/netbatch is it (no release build).
    let out = tempfile::Builder::new()
        .prefix("netbatch-package-")
        .tempdir()
        .unwrap();
    let target = out.path().join("target");
    std::fs::create_dir_all(target.join("release")).unwrap();
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_netbatch"),
        target.join("release/netbatch"),
    )
    .unwrap();
    must(
        Command::new(repo().join("scripts/package"))
            .args(["--no-build", "--fast", "--output"])
            .arg(out.path())
            .env("CARGO_TARGET_DIR", &target),
    );
    let deb = std::fs::read_dir(out.path())
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .expect("a .deb");
    let contents = must(Command::new("dpkg-deb").arg("--contents").arg(&deb));
    for f in [
        "./usr/bin/netbatch",
        "./etc/netbatch/netbatch.toml",
        "./usr/lib/systemd/system/netbatch.service",
        "./usr/lib/systemd/system/netbatch@.service",
        "./usr/share/man/man1/netbatch.1.gz",
        "./usr/share/man/man1/netbatch-run.1.gz",
        "./usr/share/bash-completion/completions/netbatch",
        "./usr/share/zsh/vendor-completions/_netbatch",
        "./usr/share/fish/vendor_completions.d/netbatch.fish",
        "./usr/share/doc/netbatch/docs/operating.md",
        "./usr/share/doc/netbatch/docs/configuration.md",
    ] {
        assert!(contents.contains(f), "{f} not in the package:\n{contents}");
    }

    let lab = format!("nbpk{}", std::process::id() % 100_000);
    let mut installed = Installed {
        lab: lab.clone(),
        router: None,
    };
    must(Command::new("dpkg").arg("-i").arg(&deb));
    let conffiles = must(Command::new("dpkg-query").args(["-W", "-f=${Conffiles}", "netbatch"]));
    assert!(
        conffiles.contains("/etc/netbatch/netbatch.toml"),
        "{conffiles}"
    );
    assert_eq!(
        std::fs::read_to_string("/etc/netbatch/netbatch.toml").unwrap(),
        std::fs::read_to_string(repo().join("examples/live-router.toml")).unwrap()
    );
    assert!(must(Command::new("/usr/bin/netbatch").arg("--version")).starts_with("netbatch "));

    // The units, as systemd reads them (the binary and the man pages they name exist now).
    for unit in ["netbatch.service", "netbatch@.service"] {
        let o = run(Command::new("systemd-analyze")
            .args(["verify"])
            .arg(Path::new("/usr/lib/systemd/system").join(unit)));
        let t = text(&o);
        assert!(
            o.status.success() && !t.contains("netbatch"),
            "systemd-analyze verify {unit}:\n{t}"
        );
    }
    let man = must(
        Command::new("man")
            .arg("netbatch")
            .env("MANWIDTH", "80")
            .env("MANPAGER", "cat")
            .env("PAGER", "cat"),
    );
    for want in ["netbatch", "check-config", "lab", "--log-format"] {
        assert!(man.contains(want), "man netbatch lacks {want}:\n{man}");
    }
    let man_run = must(
        Command::new("man")
            .arg("netbatch-run")
            .env("MANWIDTH", "80")
            .env("MANPAGER", "cat"),
    );
    assert!(man_run.contains("--stats-json"), "{man_run}");

    // The installed binary serves the quick start's lab from the packaged configuration.
    must(Command::new("/usr/bin/netbatch").args(["lab", "up", "--name", &lab]));
    let notify_dir = tempfile::Builder::new()
        .prefix("netbatch-notify-")
        .tempdir()
        .unwrap();
    let notify_path = notify_dir.path().join("notify");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    let socket = format!("/run/netbatch/{lab}-pkg.sock");
    let log = notify_dir.path().join("router.log");
    // With no capability but those the unit keeps (less CAP_SYS_ADMIN, which only
    // `[linux]` needs): they are enough to serve.
    let router = Command::new("ip")
        .args([
            "netns",
            "exec",
            &format!("{lab}-r"),
            "setpriv",
            "--bounding-set=-all,+net_raw,+net_admin,+bpf,+ipc_lock",
            "/usr/bin/netbatch",
            "--log-format",
            "json",
            "run",
            "/etc/netbatch/netbatch.toml",
            "--socket",
            &socket,
        ])
        .env("NOTIFY_SOCKET", &notify_path)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("ip netns exec");
    installed.router = Some(router);
    let ready = next_notice(&notify, 20);
    assert!(
        ready.starts_with("READY=1\nSTATUS=serving 2 port(s)"),
        "{ready}"
    );
    let h1 = format!("{lab}-h1");
    for dst in ["198.51.100.2", "2001:db8:2::2"] {
        must(Command::new("ip").args(["netns", "exec", &h1, "ping", "-c", "3", "-w", "10", dst]));
    }
    // A reload through the control socket, as the unit's ExecReload does it.
    must(Command::new("/usr/bin/netbatch").args(["reload", "--socket", &socket]));
    assert!(next_notice(&notify, 10).starts_with("RELOADING=1"));
    assert!(next_notice(&notify, 10).starts_with("READY=1\nSTATUS=serving (reloaded)"));
    // SIGTERM (systemd's stop): STOPPING=1, then it exits with its counters logged.
    let child = installed.router.as_mut().unwrap();
    must(Command::new("sh").args(["-c", &format!("kill -TERM {}", child.id())]));
    assert!(next_notice(&notify, 10).starts_with("STOPPING=1"));
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "netbatch did not stop"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let logs = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = logs.lines().filter(|l| !l.is_empty()).collect();
    assert!(!lines.is_empty());
    for l in &lines {
        let v: serde_json::Value =
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}"));
        assert!(
            v["level"].is_string() && v["fields"]["message"].is_string(),
            "{l}"
        );
    }
    assert!(logs.contains("port lan up"), "{logs}");

    // Purged, it leaves nothing of its own behind.
    drop(installed);
    assert!(
        !run(Command::new("dpkg").args(["-s", "netbatch"]))
            .status
            .success()
    );
    for gone in [
        "/usr/bin/netbatch",
        "/etc/netbatch/netbatch.toml",
        "/usr/lib/systemd/system/netbatch.service",
    ] {
        assert!(!Path::new(gone).exists(), "{gone} left after the purge");
    }
}
