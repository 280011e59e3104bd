//! What CI sees when a tool a test needs is missing: the test binary, run again as CI runs
//! it (`NETBATCH_REQUIRE_ALL=1`) with `tshark` off its `PATH`, fails and names the tool
//! and its package; run as on a laptop, the same test passes as a logged skip.
//!
//! The child is this binary itself, filtered to [`probe_needs_tshark`], which is ignored
//! unless asked for by name, so a plain `cargo test` never runs it on its own.

use std::process::Command;

/// Stands for any test that needs a tool: here, tshark (the capture tests' reader).
#[test]
#[ignore = "run by a_required_tool_that_is_missing_fails_and_is_named, in a child process"]
fn probe_needs_tshark() {
    if !netbatch_testkit::tools(&[("tshark", "tshark")]) {
        return;
    }
    panic!("tshark was found on a PATH that has no tshark");
}

/// Runs the probe in a child with an empty `PATH` and `NETBATCH_REQUIRE_ALL` as given.
fn probe(require_all: &str, skip_log: &std::path::Path) -> std::process::Output {
    let empty = std::env::temp_dir().join(format!("netbatch-empty-path-{}", std::process::id()));
    std::fs::create_dir_all(&empty).expect("an empty directory for PATH");
    let out = Command::new(std::env::current_exe().expect("this test binary"))
        .args(["--exact", "probe_needs_tshark", "--ignored", "--nocapture"])
        .env("PATH", &empty)
        .env(netbatch_testkit::REQUIRE_ALL, require_all)
        .env(netbatch_testkit::SKIP_LOG, skip_log)
        .output()
        .expect("the test binary runs");
    let _ = std::fs::remove_dir(&empty);
    out
}

#[test]
fn a_required_tool_that_is_missing_fails_and_is_named() {
    // tshark lives in /usr/bin: has_command also looks in /usr/sbin and /sbin, never there.
    let log = std::env::temp_dir().join(format!("netbatch-skips-{}", std::process::id()));
    let _ = std::fs::remove_file(&log);

    let ci = probe("1", &log);
    let text =
        String::from_utf8_lossy(&ci.stdout).into_owned() + &String::from_utf8_lossy(&ci.stderr);
    assert!(
        !ci.status.success(),
        "under NETBATCH_REQUIRE_ALL=1 the run fails:\n{text}"
    );
    assert!(
        text.contains("missing tshark (Debian package tshark)")
            && text.contains("NETBATCH_REQUIRE_ALL=1")
            && text.contains("probe_needs_tshark ... FAILED"),
        "the failure names the tool, its package and the variable:\n{text}"
    );

    let laptop = probe("0", &log);
    let text = String::from_utf8_lossy(&laptop.stdout).into_owned()
        + &String::from_utf8_lossy(&laptop.stderr);
    assert!(
        laptop.status.success(),
        "without it the same test is a skip:\n{text}"
    );
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    assert!(
        logged.starts_with("skipped\tprobe_needs_tshark\tmissing tshark"),
        "the skip is logged for scripts/test to count: {logged:?}"
    );
}
