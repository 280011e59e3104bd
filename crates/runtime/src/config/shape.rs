//! The file's shape: every key the sections do not know and every value of the wrong
//! type, found in one pass, each at its full key path (`port[1].rx_worker`) with its line,
//! an unknown key with the nearest known key of its table ("did you mean `rx_workers`?").
//!
//! serde stops at the first error, and the section structs refuse unknown keys
//! (`deny_unknown_fields`) so that a typo is never silently ignored. This module keeps
//! both properties and loses the one-at-a-time: the document is parsed once into a
//! spanned tree (`toml::de::DeTable`); deserializing it is tried, and each error's span
//! locates the entry it is about in the tree; the error is recorded at that entry's key
//! path and the entry removed, and deserializing is tried again, until it succeeds or
//! meets an error no removal can get past (a required key missing). The known keys a
//! suggestion is chosen from are the ones serde's error lists (`expected one of ...`):
//! the struct's own field names, so the suggestions can never drift from the code.
//!
//! A value removed for its type takes the key's default for the semantic checks that
//! follow; their errors at or under that key are left out (they would be about the
//! default, not the file): see [`Shape::covers`].

use std::ops::Range;

use serde::de::DeserializeOwned;
use toml::de::{DeTable, DeValue};

use super::ConfigError;

/// At most this many shape errors are collected (each costs a deserialization of the
/// document; a file with more is not worth reading further, and says so).
const MAX_ERRORS: usize = 200;

/// One step of a key path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seg {
    Key(String),
    Index(usize),
}

/// A key path as the semantic checks write it: `port[1].addresses[0]`.
fn path_text(path: &[Seg]) -> String {
    let mut s = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) => {
                if !s.is_empty() {
                    s.push('.');
                }
                if k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                    && !k.is_empty()
                {
                    s.push_str(k);
                } else {
                    s.push_str(&format!("{k:?}"));
                }
            }
            Seg::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

/// What an error's span fell on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hit {
    /// A key (unknown keys are reported at their key).
    Key,
    /// A value (a wrong type or value).
    Value,
}

/// The entry of `table` (at `prefix`) whose key or value span is the smallest that
/// contains `span`, searching every level.
fn locate(
    table: &DeTable<'_>,
    prefix: &mut Vec<Seg>,
    span: &Range<usize>,
    best: &mut Option<(usize, Vec<Seg>, Hit)>,
) {
    let within = |s: Range<usize>| s.start <= span.start && span.end <= s.end && s.end > s.start;
    let mut consider = |s: Range<usize>, path: &[Seg], hit: Hit, best: &mut Option<_>| {
        if within(s.clone()) {
            let size = s.end - s.start;
            if best.as_ref().is_none_or(|(b, _, _)| size <= *b) {
                *best = Some((size, path.to_vec(), hit));
            }
        }
    };
    for (k, v) in table.iter() {
        prefix.push(Seg::Key(k.get_ref().to_string()));
        consider(k.span(), prefix, Hit::Key, best);
        value(v.get_ref(), v.span(), prefix, span, best, &mut consider);
        prefix.pop();
    }

    fn value(
        v: &DeValue<'_>,
        vspan: Range<usize>,
        prefix: &mut Vec<Seg>,
        span: &Range<usize>,
        best: &mut Option<(usize, Vec<Seg>, Hit)>,
        consider: &mut impl FnMut(Range<usize>, &[Seg], Hit, &mut Option<(usize, Vec<Seg>, Hit)>),
    ) {
        match v {
            DeValue::Table(t) => {
                consider(vspan, prefix, Hit::Value, best);
                locate(t, prefix, span, best);
            }
            DeValue::Array(a) => {
                consider(vspan, prefix, Hit::Value, best);
                for (i, e) in a.iter().enumerate() {
                    prefix.push(Seg::Index(i));
                    value(e.get_ref(), e.span(), prefix, span, best, consider);
                    prefix.pop();
                }
            }
            _ => consider(vspan, prefix, Hit::Value, best),
        }
    }
}

/// Removes the entry at `path`'s last key (a value inside an array of values takes the
/// whole key with it: the array's other elements would otherwise change places).
/// Returns the key path removed, or `None` when there is no such key.
fn remove(root: &mut DeTable<'_>, path: &[Seg]) -> Option<Vec<Seg>> {
    let last_key = path.iter().rposition(|s| matches!(s, Seg::Key(_)))?;
    let mut table = root;
    let mut i = 0;
    while i < last_key {
        let Seg::Key(k) = &path[i] else {
            return None;
        };
        match table.get_mut(k.as_str())?.get_mut() {
            DeValue::Table(t) => {
                table = t;
                i += 1;
            }
            DeValue::Array(a) => {
                let Some(Seg::Index(n)) = path.get(i + 1) else {
                    return None;
                };
                let DeValue::Table(t) = a.get_mut(*n)?.get_mut() else {
                    return None;
                };
                table = t;
                i += 2;
            }
            _ => return None,
        }
    }
    let Seg::Key(k) = &path[last_key] else {
        return None;
    };
    table.remove(k.as_str())?;
    Some(path[..=last_key].to_vec())
}

/// The names serde's message lists after "expected" (`expected one of `a`, `b``,
/// `expected `a` or `b``), in order.
fn expected_names(msg: &str) -> Vec<&str> {
    let Some(at) = msg.find("expected") else {
        return Vec::new();
    };
    msg[at..].split('`').skip(1).step_by(2).collect()
}

/// The name serde's message is about (the first back-quoted word).
fn named(msg: &str) -> Option<&str> {
    msg.split('`').nth(1)
}

/// Edit distance with adjacent transpositions (optimal string alignment), over
/// characters, case and `-`/`_` ignored as differences (`rx-workers` is `rx_workers`).
fn distance(a: &str, b: &str) -> usize {
    let norm = |s: &str| -> Vec<char> {
        s.chars()
            .map(|c| {
                if c == '-' {
                    '_'
                } else {
                    c.to_ascii_lowercase()
                }
            })
            .collect()
    };
    strsim::osa_distance(
        &norm(a).into_iter().collect::<String>(),
        &norm(b).into_iter().collect::<String>(),
    )
}

/// The known name nearest to `word`, when near enough to be what was meant: at most a
/// third of the word's length in edits (at least one), or one the word (4 characters or
/// more) begins (`max` is too short to mean `max_backlog`; `buckets` is not `burst`).
pub(super) fn nearest<'a>(word: &str, known: &[&'a str]) -> Option<&'a str> {
    let limit = (word.chars().count() / 3).max(1);
    known
        .iter()
        .map(|k| (distance(word, k), *k))
        .filter(|(d, k)| *d <= limit || (word.len() >= 4 && k.starts_with(word)))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// Line (1-based) of byte `at` in `text`.
fn line_of(text: &str, at: usize) -> usize {
    text.as_bytes()[..at.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// What reading the file's shape found.
pub(super) struct Shape<T> {
    /// The file as the sections read it, with the entries in `errors` removed (none when
    /// an error left nothing to read: a required key missing).
    pub(super) value: Option<T>,
    /// The shape errors, in file order.
    pub(super) errors: Vec<ConfigError>,
    /// Key paths of values removed for their type or value (not unknown keys): the
    /// semantic checks' errors at or under them are about the default that took their
    /// place.
    removed: Vec<String>,
}

impl<T> Shape<T> {
    /// Whether a semantic error at `key` is about a value this pass removed.
    pub(super) fn covers(&self, key: &str) -> bool {
        self.removed.iter().any(|r| {
            key == r
                || key
                    .strip_prefix(r.as_str())
                    .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
        })
    }
}

/// Reads `text` as a `T`, every shape error found (see the module's documentation).
/// A syntax error stops it: the errors are then the parser's (all it could find).
pub(super) fn read<T: DeserializeOwned>(text: &str) -> Shape<T> {
    let (doc, syntax) = DeTable::parse_recoverable(text);
    if !syntax.is_empty() {
        let errors = syntax
            .into_iter()
            .map(|mut e| {
                let line = e.span().map(|s| line_of(text, s.start));
                e.set_input(Some(text));
                ConfigError {
                    key: line.map_or_else(|| "syntax".into(), |l| format!("line {l}")),
                    reason: e.to_string().trim_end().replace('\n', "\n    "),
                }
            })
            .collect();
        return Shape {
            value: None,
            errors,
            removed: Vec::new(),
        };
    }
    let mut doc = doc;
    // (span start, error) so that the report is in file order at the end.
    let mut found: Vec<(usize, ConfigError)> = Vec::new();
    let mut removed = Vec::new();
    let mut removed_fields: Vec<String> = Vec::new();
    for _ in 0..=MAX_ERRORS {
        let e = match T::deserialize(toml::de::Deserializer::from(doc.clone())) {
            Ok(v) => {
                found.sort_by_key(|(at, _)| *at);
                return Shape {
                    value: Some(v),
                    errors: found.into_iter().map(|(_, e)| e).collect(),
                    removed,
                };
            }
            Err(e) => e,
        };
        let msg = e.message().to_string();
        let span = e.span();
        let mut best = None;
        if let Some(s) = &span {
            locate(doc.get_ref(), &mut Vec::new(), s, &mut best);
        }
        let at = span.as_ref().map_or(0, |s| s.start);
        let line = span.as_ref().map(|s| line_of(text, s.start));
        let on_line = line.map(|l| format!(" (line {l})")).unwrap_or_default();
        match best {
            Some((_, path, hit)) if msg.starts_with("unknown field") && hit == Hit::Key => {
                let word = named(&msg).unwrap_or("");
                let known = expected_names(&msg);
                let reason = match nearest(word, &known) {
                    Some(k) => format!("unknown key{on_line}; did you mean `{k}`?"),
                    None if known.is_empty() => {
                        format!("unknown key{on_line}: this table takes no keys")
                    }
                    None => format!(
                        "unknown key{on_line}; this table's keys: {}",
                        known.join(", ")
                    ),
                };
                found.push((
                    at,
                    ConfigError {
                        key: path_text(&path),
                        reason,
                    },
                ));
                if remove(doc.get_mut(), &path).is_none() {
                    break;
                }
            }
            Some((_, path, _)) if msg.starts_with("missing field") => {
                // A required key: nothing can stand in for it. Unless a value of it was
                // removed above (and reported), say so once and stop.
                let field = named(&msg).unwrap_or("");
                let mut full = path.clone();
                full.push(Seg::Key(field.to_string()));
                let table = path_text(&path);
                if !removed_fields.contains(&path_text(&full)) {
                    found.push((
                        at,
                        ConfigError {
                            key: if table.is_empty() {
                                field.to_string()
                            } else {
                                format!("{table}.{field}")
                            },
                            reason: format!("missing: this table needs `{field}`{on_line}"),
                        },
                    ));
                }
                break;
            }
            Some((_, path, _)) => {
                let Some(key) = remove(doc.get_mut(), &path) else {
                    found.push((
                        at,
                        ConfigError {
                            key: "file".into(),
                            reason: format!("{msg}{on_line}"),
                        },
                    ));
                    break;
                };
                let mut reason = msg.clone();
                if msg.starts_with("unknown variant")
                    && let Some(k) = named(&msg).and_then(|w| nearest(w, &expected_names(&msg)))
                {
                    reason = format!("{msg}; did you mean `{k}`?");
                }
                found.push((
                    at,
                    ConfigError {
                        key: path_text(&path),
                        reason: format!("{reason}{on_line}"),
                    },
                ));
                removed_fields.push(path_text(&key));
                removed.push(path_text(&key));
            }
            None => {
                found.push((
                    at,
                    ConfigError {
                        key: "file".into(),
                        reason: format!("{msg}{on_line}"),
                    },
                ));
                break;
            }
        }
    }
    found.sort_by_key(|(at, _)| *at);
    if found.len() > MAX_ERRORS {
        found.push((
            usize::MAX,
            ConfigError {
                key: "file".into(),
                reason: format!("more than {MAX_ERRORS} errors: stopped reading"),
            },
        ));
    }
    Shape {
        value: None,
        errors: found.into_iter().map(|(_, e)| e).collect(),
        removed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Port {
        name: String,
        #[serde(default)]
        rx_workers: Vec<u16>,
        #[serde(default)]
        mtu: u16,
        #[serde(default)]
        addresses: Vec<String>,
    }

    #[derive(Debug, Default, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Datapath {
        #[serde(default)]
        workers: usize,
        #[serde(default)]
        mode: String,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct File {
        #[serde(default)]
        datapath: Datapath,
        #[serde(default, rename = "port")]
        ports: Vec<Port>,
    }

    fn keys(s: &Shape<File>) -> Vec<(&str, &str)> {
        s.errors
            .iter()
            .map(|e| (e.key.as_str(), e.reason.as_str()))
            .collect()
    }

    /// Two misspelt keys and a wrong type, in three tables: all three in one pass, in
    /// file order, each at its key path with its line, the typos with the key meant; what
    /// is left is read (the good port's values survive).
    #[test]
    fn every_unknown_key_and_wrong_type_is_found_in_one_pass() {
        let text = "[datapath]\nworker = 2\nmode = \"list\"\n\n[[port]]\nname = \"a\"\n\n\
                    [[port]]\nname = \"b\"\nrx_worker = [0]\nmtu = \"big\"\naddresses = [\"x\"]\n";
        let s = read::<File>(text);
        assert_eq!(
            keys(&s),
            [
                (
                    "datapath.worker",
                    "unknown key (line 2); did you mean `workers`?"
                ),
                (
                    "port[1].rx_worker",
                    "unknown key (line 10); did you mean `rx_workers`?"
                ),
                (
                    "port[1].mtu",
                    "invalid type: string \"big\", expected u16 (line 11)"
                ),
            ]
        );
        let f = s.value.as_ref().expect("the rest is read");
        assert_eq!(f.datapath.mode, "list");
        // The misspelt keys were not read as the keys they meant.
        assert_eq!(f.datapath.workers, 0);
        assert!(f.ports[1].rx_workers.is_empty());
        assert_eq!((f.ports[1].name.as_str(), f.ports[1].mtu), ("b", 0));
        assert_eq!(f.ports[1].addresses, ["x"]);
        assert!(s.covers("port[1].mtu") && !s.covers("port[1].mtu_x") && !s.covers("port[0].mtu"));
    }

    /// A key far from every known one gets the table's keys listed instead of a guess.
    #[test]
    fn a_key_like_no_other_lists_the_tables_keys() {
        let s = read::<File>("[datapath]\nfrobnicate = 1\n");
        assert_eq!(
            keys(&s),
            [(
                "datapath.frobnicate",
                "unknown key (line 2); this table's keys: workers, mode"
            )]
        );
    }

    /// A required key missing stops the reading there (nothing can stand in for it),
    /// with what was found before.
    #[test]
    fn a_missing_required_key_is_reported_at_its_table() {
        let s = read::<File>("[datapath]\nmod = \"list\"\n[[port]]\nmtu = 1500\n");
        let k = keys(&s);
        assert!(s.value.is_none());
        assert_eq!(
            k[0],
            ("datapath.mod", "unknown key (line 2); did you mean `mode`?")
        );
        assert_eq!(k[1].0, "port[0].name", "{k:?}");
        assert!(
            k[1].1.starts_with("missing: this table needs `name`"),
            "{k:?}"
        );
    }

    /// A syntax error is the parser's, at its line.
    #[test]
    fn a_syntax_error_is_reported_at_its_line() {
        let s = read::<File>("[datapath]\nworkers = = 2\n");
        assert!(s.value.is_none());
        assert_eq!(s.errors[0].key, "line 2", "{:?}", s.errors);
    }

    /// serde's wording for an unknown field, which the suggestions are read from: if a
    /// new serde words it otherwise, this fails rather than the suggestions vanishing.
    #[test]
    fn serde_lists_the_known_fields_as_expected() {
        let e = toml::from_str::<Datapath>("wrkers = 1").unwrap_err();
        assert_eq!(named(e.message()), Some("wrkers"));
        assert_eq!(expected_names(e.message()), ["workers", "mode"]);
    }

    /// Hand-picked pairs: one edit, a transposition, a plural, a dash for an underscore
    /// are suggestions; an unrelated word is not.
    #[test]
    fn nearest_suggests_only_near_keys() {
        let known = [
            "rx_workers",
            "rps_map",
            "mtu",
            "addresses",
            "mode",
            "workers",
        ];
        assert_eq!(nearest("rx_worker", &known), Some("rx_workers"));
        assert_eq!(nearest("rx-workers", &known), Some("rx_workers"));
        assert_eq!(nearest("adresses", &known), Some("addresses"));
        assert_eq!(nearest("mdoe", &known), Some("mode"));
        assert_eq!(nearest("worker", &known), Some("workers"));
        assert_eq!(nearest("gateway", &known), None);
        assert_eq!(nearest("x", &known), None);
    }
}
