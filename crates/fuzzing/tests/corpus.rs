//! Replays every checked-in fuzz corpus (`fuzz/corpus/<target>/`) through its target's
//! check, so `cargo test` re-runs what the fuzzers found interesting (and the inputs of
//! the bugs they found) without a fuzzer. Every target has a corpus, and every corpus a
//! target.

use std::path::{Path, PathBuf};

fn corpus_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus")
}

fn inputs(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    v.sort();
    v
}

#[test]
fn every_target_has_a_corpus_and_every_corpus_a_target() {
    let root = corpus_root();
    for (name, _) in netbatch_fuzzing::TARGETS {
        let dir = root.join(name);
        assert!(
            !inputs(&dir).is_empty(),
            "no seed inputs in {}",
            dir.display()
        );
    }
    for e in std::fs::read_dir(&root).expect("fuzz/corpus") {
        let name = e.expect("entry").file_name();
        let name = name.to_string_lossy();
        assert!(
            netbatch_fuzzing::check(&name).is_some(),
            "fuzz/corpus/{name} belongs to no target"
        );
    }
}

/// One test per target, so a failure names the target (and the input, printed first).
macro_rules! replay {
    ($($name:ident),* $(,)?) => {$(
        #[test]
        fn $name() {
            let check = netbatch_fuzzing::check(stringify!($name)).expect("a target");
            for path in inputs(&corpus_root().join(stringify!($name))) {
                let data = std::fs::read(&path).expect("corpus input");
                eprintln!("{}", path.display());
                check(&data);
            }
        }
    )*};
}

replay!(
    wire_ethernet,
    wire_vlan,
    wire_arp,
    wire_ipv4,
    wire_icmpv4,
    wire_ipv6,
    wire_icmpv6,
    wire_udp,
    wire_tcp,
    wire_checksum,
    wire_toeplitz,
    dissect,
    graph,
    config,
);

/// The inputs of bugs found and reported but not fixed yet (`fuzz/findings/TARGET/`)
/// still fail their check. When one passes, its bug was fixed: move it into
/// `fuzz/corpus/TARGET/`, where it is replayed from then on.
#[test]
fn findings_still_fail_until_fixed() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/findings");
    let Ok(dirs) = std::fs::read_dir(&root) else {
        return; // none
    };
    for e in dirs {
        let dir = e.expect("entry").path();
        if !dir.is_dir() {
            continue;
        }
        let name = dir
            .file_name()
            .expect("a name")
            .to_string_lossy()
            .into_owned();
        let check = netbatch_fuzzing::check(&name)
            .unwrap_or_else(|| panic!("fuzz/findings/{name} belongs to no target"));
        for path in inputs(&dir) {
            let data = std::fs::read(&path).expect("finding");
            let failed = std::panic::catch_unwind(|| check(&data)).is_err();
            assert!(
                failed,
                "{} passes now: move it into fuzz/corpus/{name}/",
                path.display()
            );
        }
    }
}
