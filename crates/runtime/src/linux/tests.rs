//! The counters document: every skip reason present (zero or not) under its own name,
//! with a description, and the changes summed as counted.

use super::*;

#[test]
fn counters_name_every_skip_reason_once() {
    let mut s = MirrorStats::default();
    s.skip(Skip::UnknownInterface);
    s.skip(Skip::UnknownInterface);
    s.routes_added = 3;
    s.neighbours_deleted = 1;
    assert_eq!(s.changes(), 4);
    let j = s.to_json();
    let skipped = j["skipped"].as_object().expect("an object");
    assert_eq!(skipped.len(), Skip::ALL.len());
    assert_eq!(skipped["unknown_interface"], 2);
    assert_eq!(skipped["local_or_broadcast"], 0);
    let mut names: Vec<&str> = Skip::ALL.iter().map(|s| s.name()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), Skip::ALL.len(), "names are unique");
    assert!(Skip::ALL.iter().all(|s| !s.description().is_empty()));
    assert_eq!(j["routes_added"], 3);
}
