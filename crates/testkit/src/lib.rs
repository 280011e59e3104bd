//! What netbatch's tests share about the machine they run on: whether they may skip.
//!
//! A test that needs root, a tool or a kernel feature asks here first. On a developer's
//! laptop a missing requirement is a skip: the test says why on stderr, appends the reason
//! to the file named by `NETBATCH_SKIP_LOG` (so `scripts/test` can count and list skips
//! that `cargo test` would otherwise print as `ok`), and returns early. Under CI
//! (`NETBATCH_REQUIRE_ALL=1`, set by `.ci/run`, which runs as root after `scripts/setup`
//! installed every tool) a skip is a failure naming what was missing.
//!
//! Kernel features this machine's kernel may lack (`tc flower`, VRF devices) are a separate
//! case: their tests run inside the kernel lab (`scripts/kernel-lab`), where
//! `NETBATCH_REQUIRE_KERNEL=1` makes a missing feature a failure. On the host they are
//! deferred to the lab, which is not a failure even under `NETBATCH_REQUIRE_ALL`, and are
//! logged as such.

#![forbid(unsafe_code)]

use std::fmt::Display;
use std::io::Write;

/// The variable that turns every skip into a failure (set by `.ci/run`).
pub const REQUIRE_ALL: &str = "NETBATCH_REQUIRE_ALL";
/// The variable that turns a missing kernel feature into a failure (set in the kernel lab).
pub const REQUIRE_KERNEL: &str = "NETBATCH_REQUIRE_KERNEL";
/// The file skips are appended to, one line each (set by `scripts/test`).
pub const SKIP_LOG: &str = "NETBATCH_SKIP_LOG";

fn set(var: &str) -> bool {
    std::env::var_os(var).is_some_and(|v| !v.is_empty() && v != "0")
}

/// Whether every skip is a failure (CI).
pub fn required() -> bool {
    set(REQUIRE_ALL)
}

fn log(kind: &str, why: &str) {
    let test = std::thread::current().name().unwrap_or("?").to_owned();
    eprintln!("{kind}: {why}");
    if let Some(path) = std::env::var_os(SKIP_LOG).filter(|p| !p.is_empty())
        && let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
    {
        // One write per line: concurrent test threads and binaries append whole lines.
        let _ = f.write_all(format!("{kind}\t{test}\t{why}\n").as_bytes());
    }
}

/// Skips the calling test for `why`: under `NETBATCH_REQUIRE_ALL` this panics, naming
/// what was missing; otherwise it reports the skip and the caller returns.
#[track_caller]
pub fn skip(why: impl Display) {
    skip_unless_required(required(), &why.to_string());
}

/// [`skip`] with the requirement given: panics when `required`.
#[track_caller]
fn skip_unless_required(required: bool, why: &str) {
    assert!(
        !required,
        "skipped under {REQUIRE_ALL}=1, which makes every skip a failure: {why}"
    );
    log("skipped", why);
}

/// The effective user id of this process, from `/proc/self/status`.
fn euid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    euid() == Some(0)
}

/// `true` when running as root; otherwise skips for `what` (why the test needs root).
#[track_caller]
pub fn root(what: &str) -> bool {
    if is_root() {
        return true;
    }
    skip(format_args!("needs root: {what}"));
    false
}

/// Whether `command` is on the `PATH` (or is an executable path).
pub fn has_command(command: &str) -> bool {
    let runnable = |p: &std::path::Path| {
        use std::os::unix::fs::PermissionsExt;
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if command.contains('/') {
        return runnable(std::path::Path::new(command));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .any(|d| runnable(&d.join(command)))
}

/// `true` when every `(command, Debian package)` is installed; otherwise skips, naming
/// the missing commands and the packages `scripts/setup` installs them from.
#[track_caller]
pub fn tools(needed: &[(&str, &str)]) -> bool {
    tools_unless_required(required(), needed)
}

#[track_caller]
fn tools_unless_required(required: bool, needed: &[(&str, &str)]) -> bool {
    let missing: Vec<String> = needed
        .iter()
        .filter(|(c, _)| !has_command(c))
        .map(|(c, p)| format!("{c} (Debian package {p})"))
        .collect();
    if missing.is_empty() {
        return true;
    }
    skip_unless_required(
        required,
        &format!("missing {}: scripts/setup installs it", missing.join(", ")),
    );
    false
}

/// For a test whose oracle is a kernel feature: `true` when `present`; otherwise, inside
/// the kernel lab (`NETBATCH_REQUIRE_KERNEL=1`) a failure naming `feature`, and on the
/// host a skip deferred to the lab (not a failure under `NETBATCH_REQUIRE_ALL`: `.ci/run`
/// runs these tests in the lab).
#[track_caller]
pub fn kernel_feature(present: bool, feature: &str, why: impl Display) -> bool {
    if present {
        return true;
    }
    let why = why.to_string();
    assert!(
        !set(REQUIRE_KERNEL),
        "the kernel lacks {feature}, required here ({REQUIRE_KERNEL}=1): {why}"
    );
    log(
        "deferred to the kernel lab",
        &format!("this kernel lacks {feature}: {why}"),
    );
    false
}

/// Waits until a socket in network namespace `netns` listens on `port` (`proto` is
/// `"tcp"` or `"udp"`), as `ss` lists it, polling for at most `within`; `true` once it
/// does. A test that starts a server and then its client waits here rather than sleeping a
/// fixed time, which a busy machine outlasts.
pub fn wait_listening(netns: &str, proto: &str, port: u16, within: std::time::Duration) -> bool {
    let flag = if proto == "udp" { "-Hlun" } else { "-Hltn" };
    let until = std::time::Instant::now() + within;
    loop {
        let listed = std::process::Command::new("ip")
            .args([
                "netns",
                "exec",
                netns,
                "ss",
                flag,
                "sport",
                "=",
                &format!(":{port}"),
            ])
            .output()
            .is_ok_and(|o| o.status.success() && !o.stdout.trim_ascii().is_empty());
        if listed {
            return true;
        }
        if std::time::Instant::now() >= until {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// `program` run in network namespace `netns` (`ip netns exec`, which replaces itself
/// with it: killing the child kills the program), its arguments still to add.
pub fn in_netns(netns: &str, program: &str) -> std::process::Command {
    let mut c = std::process::Command::new("ip");
    c.args(["netns", "exec", netns, program]);
    c
}

/// A process whose output (stdout and stderr, line by line) is collected while it runs,
/// to wait for what it says it did (a router's `port NAME up`) and to show it all when
/// a test fails; killed and reaped when dropped, also on a panic.
pub struct Logged {
    child: std::process::Child,
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    /// The threads reading its outputs (each ends when its pipe closes).
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Logged {
    /// Starts `cmd` with both outputs piped into the log.
    ///
    /// # Panics
    /// When the process cannot be started.
    pub fn spawn(mut cmd: std::process::Command) -> Self {
        use std::io::BufRead;
        let mut child = cmd
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{cmd:?} does not start: {e}"));
        let log = std::sync::Arc::<std::sync::Mutex<Vec<String>>>::default();
        let streams: [Option<Box<dyn std::io::Read + Send>>; 2] = [
            child.stderr.take().map(|s| Box::new(s) as _),
            child.stdout.take().map(|s| Box::new(s) as _),
        ];
        let mut readers = Vec::new();
        for stream in streams.into_iter().flatten() {
            let log = log.clone();
            readers.push(std::thread::spawn(move || {
                for l in std::io::BufReader::new(stream)
                    .lines()
                    .map_while(Result::ok)
                {
                    if let Ok(mut v) = log.lock() {
                        v.push(l);
                    }
                }
            }));
        }
        Self {
            child,
            log,
            readers,
        }
    }

    /// Everything it printed so far, one line each.
    pub fn text(&self) -> String {
        self.log.lock().map(|l| l.join("\n")).unwrap_or_default()
    }

    /// Waits (at most `within`) until it has printed each of `lines` somewhere.
    ///
    /// # Panics
    /// When it has not by then, or has exited, with what it printed.
    pub fn wait_for(&mut self, lines: &[&str], within: std::time::Duration) {
        let deadline = std::time::Instant::now() + within;
        loop {
            let exited = self.child.try_wait().ok().flatten();
            if exited.is_some() {
                // What it printed last may still be in a pipe: read to the end first
                // (bounded: a process it left behind may hold the pipe open).
                let drained = std::time::Instant::now() + std::time::Duration::from_secs(2);
                while !self
                    .readers
                    .iter()
                    .all(std::thread::JoinHandle::is_finished)
                    && std::time::Instant::now() < drained
                {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
            }
            let text = self.text();
            if lines.iter().all(|l| text.contains(l)) {
                return;
            }
            if let Some(status) = exited {
                panic!("exited ({status}) before printing {lines:?}:\n{text}");
            }
            assert!(
                std::time::Instant::now() < deadline,
                "not printed within {within:?}: {lines:?}:\n{text}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

impl Drop for Logged {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a process prints on either output is collected, and waited for.
    #[test]
    fn a_logged_process_output_is_collected_and_waited_for() {
        let mut c = std::process::Command::new("sh");
        c.args(["-c", "echo one; echo two >&2; exec sleep 10"]);
        let mut p = Logged::spawn(c);
        p.wait_for(&["one", "two"], std::time::Duration::from_secs(10));
        let exited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut c = std::process::Command::new("sh");
            c.args(["-c", "echo bye"]);
            Logged::spawn(c).wait_for(&["never"], std::time::Duration::from_secs(10));
        }));
        let msg = exited.expect_err("an exited process fails the wait");
        let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("exited") && msg.contains("bye"), "{msg}");
    }

    #[test]
    fn the_effective_uid_is_read() {
        assert!(euid().is_some(), "/proc/self/status has a Uid line");
    }

    /// Under CI a missing tool fails the test, and the failure names the tool and its
    /// package.
    #[test]
    fn a_missing_tool_fails_when_required_and_names_it() {
        let needed = [("sh", "dash"), ("netbatch-no-such-tool", "no-such-package")];
        // (The laptop's side, a logged skip, is tests/required_tools.rs's: run here it
        // would be logged as a skip of this test.)
        assert!(tools_unless_required(true, &needed[..1]));
        let err = std::panic::catch_unwind(|| tools_unless_required(true, &needed))
            .expect_err("a required tool that is missing fails");
        let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(
            msg.contains("netbatch-no-such-tool (Debian package no-such-package)")
                && msg.contains(REQUIRE_ALL),
            "{msg}"
        );
    }

    #[test]
    fn commands_are_found_on_the_path_and_absent_ones_are_not() {
        assert!(has_command("sh"));
        assert!(has_command("/bin/sh"));
        assert!(!has_command("netbatch-no-such-command"));
    }
}
