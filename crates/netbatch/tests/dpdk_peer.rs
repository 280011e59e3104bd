//! The benchmarks' peer is real and does the same work: `bench/peers.py` builds DPDK's
//! `l3fwd` from Debian's packages (`bench/dpdk/build-l3fwd`), loads it with the routes
//! `netbatch bench --export-peer` writes (the generated table of `ip4-forward`), feeds it
//! the same frames from a `net_pcap` port, and takes turns with `netbatch bench`. The
//! script itself refuses a run in which `l3fwd` did not send every frame it received out
//! of the routes' port (its port counters, printed by the frame counter the build adds),
//! so a pass here means that both routers forwarded the same frames by the same table,
//! and that the figures it reports are of that work. Short runs, without huge pages
//! (`--no-huge`), on this test's own build of `netbatch`: a check, not a measurement.

use std::path::Path;
use std::process::Command;

#[test]
fn l3fwd_forwards_the_bench_frames_by_the_bench_routes_beside_netbatch() {
    if !netbatch_testkit::root("DPDK's EAL needs root to start, even with --no-huge")
        || !netbatch_testkit::tools(&[
            ("dpdk-testpmd", "dpdk-dev"),
            ("pkg-config", "pkg-config"),
            ("make", "make"),
        ])
    {
        return;
    }
    if !Path::new("/usr/share/dpdk/examples/l3fwd").is_dir() {
        netbatch_testkit::skip(
            "missing l3fwd's source (Debian package dpdk-doc): scripts/setup installs it",
        );
        return;
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let json = tempfile::NamedTempFile::new().expect("a scratch file");
    let out = Command::new("python3")
        .arg(repo.join("bench/peers.py"))
        .args([
            "--repeat",
            "1",
            "--seconds",
            "0.5",
            "--huge-pages",
            "off",
            "--routes",
            "2000",
        ])
        .arg("--binary")
        .arg(env!("CARGO_BIN_EXE_netbatch"))
        .arg("--json")
        .arg(json.path())
        .output()
        .expect("python3 runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "bench/peers.py failed:\n{text}");
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(json.path()).expect("the JSON")).expect("JSON");
    // The routes l3fwd was given are the bench's: as many as asked for.
    assert_eq!(doc["routes"], 2000, "{doc}");
    for who in ["netbatch", "l3fwd"] {
        let c = doc["summary"]["off"][who]["median"].as_f64().unwrap_or(0.0);
        assert!(
            c > 0.0,
            "{who} measured no TSC ticks per frame: {doc}\n{text}"
        );
    }
}
