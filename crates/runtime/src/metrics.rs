//! Prometheus exporter: the counters document (`crate::run::report`) as OpenMetrics
//! text, and a small HTTP server that answers `GET /metrics` with it.
//!
//! [`encode`] builds a fresh `prometheus-client` registry per scrape from one snapshot
//! of the counters document: `{"totals": {..}, "workers": [per-worker doc, ..]}`.
//! Only the per-worker documents are read (the totals are their sums: PromQL's `sum`
//! gives them back), and every per-worker series carries a `worker` label (the
//! worker's position in `workers`). Families come out sorted by name, samples in the
//! document's order, so equal documents give equal text.
//!
//! Fixed families (all names start with `netbatch_`; counters end in `_total`):
//!
//! | family | type | labels | from |
//! |---|---|---|---|
//! | `packets_total` | counter | fate (rx, tx, delivered, dropped, originated), worker | `*_packets` |
//! | `packets_held` | gauge | worker | `held_packets` |
//! | `stage_packets_total`, `stage_calls_total`, `stage_cycles_total` | counter | stage, worker | `stages[]` |
//! | `drops_total` | counter | stage, reason, worker | `stages[].drops` |
//! | `drop_reason_info` | info | reason, description | `drop_reasons` |
//! | `stage_events_total` | counter | stage, event, worker | `stages[].events` |
//! | `port_<field>_total` | counter | port, worker | `ports[]` |
//! | `port_rx_drops_total` | counter | port, worker, reason | `ports[].rx_drop_reasons` (a backend's own receive drops) |
//! | `softnet_<field>_total`, `softnet_backlog_len` | counter, gauge | worker | `worker` |
//! | `host_<event>_total` | counter | worker | `host` |
//! | `app_<counter>_total` | counter | app, worker | `apps[].counters` |
//! | `neighbours`, `neighbours6` | gauge | worker | `neighbours`, `neighbours6` (the ARP and NDP tables) |
//! | `routes`, `routes6` | gauge | worker | `routes`, `routes6` (the table the worker forwards by: every worker holds the same one once a change has reached it) |
//! | `conntrack_<field>_total`, `conntrack_<field>_len` | counter, gauge | worker | `conntrack` (a worker's connection table: entries, bound, refusals, evictions, packets by state and invalid ones by reason) |
//! | `workers` | gauge | | number of per-worker documents |
//! | `link_up`, `link_changes_total`, `link_kernel_tx_dropped_total` | gauge, counter | port | `links[]` (the link watch) |
//! | [`TableGauge::name`] | gauge | | the caller's table sizes |
//!
//! Naming rule for the open-ended objects (a stage, a port, `worker`, `host`, an app's
//! `counters`), so that fields added later become metrics without a change here: a field
//! `key` of group `g` (`stage`, `port`, `softnet`, `host`, `app`), its name lower-cased
//! with every character outside `[a-z0-9_]` made `_`, becomes
//! - if its value is an unsigned integer and `key` ends in `_len` (a current length):
//!   the gauge `netbatch_g_key`;
//! - if its value is another unsigned integer: the counter `netbatch_g_key_total` (a
//!   trailing `_total` of `key` is not doubled);
//! - if its value is a boolean: the gauge `netbatch_g_key`, 1 for true;
//! - nothing otherwise (strings, floats, negative numbers, arrays, objects), and nothing
//!   for a key containing `_per_` (a ratio of two counters, computable from them).
//!
//! Label values are the document's strings, escaped by the encoder. Cardinality stays
//! bounded: labels hold configured names (ports, stages, apps), worker indices, fates
//! and drop reasons (fixed sets), never packet contents. When two samples would share
//! a family and a label set (a repeated stage name, two keys the rule maps to one name)
//! or one name would be both a counter and a gauge, the first is kept and the later one
//! left out (logged at debug level): the text stays a valid exposition.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use serde_json::{Map, Value};

/// The content type of [`encode`]'s text (OpenMetrics 1.0.0, what `prometheus-client`'s
/// text encoder writes).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The prefix of every family name.
const PREFIX: &str = "netbatch";

/// The size of a table the counters document does not carry (routes, sockets, rules),
/// exported as the gauge `netbatch_<name>` without labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableGauge {
    /// Family name without the `netbatch_` prefix (e.g. `routes`); made to follow the
    /// naming rule's character set. Must differ from the fixed families' names.
    pub name: &'static str,
    /// HELP text (one line).
    pub help: &'static str,
    /// Entries in the table.
    pub value: u64,
}

impl TableGauge {
    /// A table's size.
    pub const fn new(name: &'static str, help: &'static str, value: u64) -> Self {
        Self { name, help, value }
    }
}

/// The counters document `stats` (as `crate::run::report` builds it) and the table sizes
/// as an OpenMetrics text exposition, ending in `# EOF`. Parts of the document that do
/// not have the expected shape are left out, never an error: the error is only the
/// formatter's.
pub fn encode(stats: &Value, tables: &[TableGauge]) -> Result<String, fmt::Error> {
    let mut families = Families::default();
    collect(&mut families, stats, tables);
    let mut registry = Registry::with_prefix(PREFIX);
    registry.register_collector(Box::new(families));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry)?;
    Ok(out)
}

/// A sample's labels, in output order.
type Labels = Vec<(&'static str, String)>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
    Info,
}

/// One family of one snapshot.
#[derive(Debug)]
struct Family {
    help: String,
    kind: Kind,
    /// Label sets and values, in the document's order (an info's value is unused).
    samples: Vec<(Labels, u64)>,
    seen: HashSet<Labels>,
}

/// The families of one snapshot, by name without the prefix; what the registry encodes.
#[derive(Debug, Default)]
struct Families(BTreeMap<String, Family>);

impl Families {
    /// Adds a sample; the first of a name fixes its kind and help.
    fn add(&mut self, name: &str, help: &str, kind: Kind, labels: Labels, value: u64) {
        let f = self.0.entry(name.to_string()).or_insert_with(|| Family {
            help: escape_help(help),
            kind,
            samples: Vec::new(),
            seen: HashSet::new(),
        });
        if f.kind != kind {
            tracing::debug!(name, "metrics: a sample of another type left out");
            return;
        }
        if !f.seen.insert(labels.clone()) {
            tracing::debug!(name, ?labels, "metrics: a repeated label set left out");
            return;
        }
        f.samples.push((labels, value));
    }
}

impl Collector for Families {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        for (name, f) in &self.0 {
            let ty = match f.kind {
                Kind::Counter => MetricType::Counter,
                Kind::Gauge => MetricType::Gauge,
                Kind::Info => MetricType::Info,
            };
            let mut metric = encoder.encode_descriptor(name, &f.help, None, ty)?;
            for (labels, value) in &f.samples {
                // A sample without labels is written without braces.
                match (f.kind, labels.is_empty()) {
                    (Kind::Counter, true) => {
                        metric.encode_counter::<NoLabelSet, _, u64>(value, None)?;
                    }
                    (Kind::Counter, false) => metric
                        .encode_family(labels)?
                        .encode_counter::<NoLabelSet, _, u64>(value, None)?,
                    (Kind::Gauge, true) => metric.encode_gauge(value)?,
                    (Kind::Gauge, false) => metric.encode_family(labels)?.encode_gauge(value)?,
                    (Kind::Info, _) => metric.encode_info(labels)?,
                }
            }
        }
        Ok(())
    }
}

/// HELP text on one line, with the text format's escapes.
fn escape_help(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n")
}

/// A document key as part of a metric name: lower case, `[a-z0-9_]` only.
fn sanitize(key: &str) -> String {
    key.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect()
}

const FATES: [(&str, &str); 5] = [
    ("rx_packets", "rx"),
    ("tx_packets", "tx"),
    ("delivered_packets", "delivered"),
    ("dropped_packets", "dropped"),
    ("originated_packets", "originated"),
];

const STAGE_HELP: &[(&str, &str)] = &[
    ("packets", "Packet handles a stage processed."),
    (
        "calls",
        "Calls made to a stage (packets per call is the vector size).",
    ),
    (
        "cycles",
        "TSC cycles spent inside a stage (0 unless stage timing is on).",
    ),
];

const PORT_HELP: &[(&str, &str)] = &[
    (
        "rx_packets",
        "Frames received by a port queue, in wire packets (a kernel super-frame counts its segments).",
    ),
    ("rx_bytes", "Bytes received by a port queue."),
    (
        "rx_nobuf",
        "Receive attempts of a port queue that found no free buffer (DPDK rx_nombuf).",
    ),
    (
        "rx_dropped",
        "Frames a port queue dropped at receive itself (ring overrun, malformed descriptor).",
    ),
    (
        "tx_packets",
        "Frames transmitted by a port queue (a super-packet taken whole counts its segments).",
    ),
    ("tx_bytes", "Bytes transmitted by a port queue."),
    (
        "tx_refused",
        "Frames a port queue refused to transmit (left with the caller).",
    ),
    (
        "tx_link_down",
        "Frames a port queue did not send because its link was down (given while down, or taken back from its transmit ring).",
    ),
    (
        "tx_kernel_dropped",
        "Frames a port queue handed to the kernel that the kernel dropped on transmit (the interface's tx_dropped; not in tx_packets).",
    ),
];

const SOFTNET_HELP: &[(&str, &str)] = &[
    ("rounds", "Poll rounds a worker ran."),
    (
        "processed",
        "Frames run through a worker's graph (received and kept, taken from its backlog, or injected).",
    ),
    (
        "time_squeeze",
        "Rounds that stopped on the budget or the time cap with frames possibly left.",
    ),
    (
        "dropped",
        "Wire packets dropped because an RPS backlog was full.",
    ),
    (
        "received_rps",
        "RPS wake-ups a worker received (kicks from other workers and own-backlog schedules).",
    ),
    ("backlog_polls", "RPS backlog polls that found packets."),
    (
        "backlog_len",
        "RPS backlog length at the last look (rings to the worker plus its own backlog), in wire packets.",
    ),
    ("handed_off", "Wire packets RPS sent to other workers."),
    (
        "taken_over",
        "Wire packets taken from other workers' RPS rings.",
    ),
];

const HOST_HELP: &[(&str, &str)] = &[
    ("arp_requests_out", "ARP requests sent."),
    ("arp_replies_out", "ARP replies sent."),
    ("icmp_echo_replies", "ICMP echo replies sent."),
    ("icmp_errors_out", "ICMP errors sent."),
    (
        "icmp_errors_suppressed",
        "ICMP errors not sent because the RFC forbids one for that packet.",
    ),
    (
        "icmp_errors_rate_limited",
        "ICMP errors not sent because of the rate limit.",
    ),
    (
        "icmp_in_other",
        "ICMP messages received and consumed (not echo requests).",
    ),
    (
        "alloc_failures",
        "Packets the host failed to allocate a buffer for (ARP requests, redirects).",
    ),
    (
        "icmp_redirects_out",
        "ICMP Redirects sent (RFC 1812 5.2.7.2).",
    ),
    (
        "icmp_redirects_rate_limited",
        "ICMP Redirects not sent because of their rate limit.",
    ),
    (
        "icmp6_redirects_out",
        "ICMPv6 Redirects sent (RFC 4861 8.2).",
    ),
    (
        "icmp6_redirects_rate_limited",
        "ICMPv6 Redirects not sent because of their rate limit.",
    ),
];

/// Every family of the document and the tables.
fn collect(out: &mut Families, stats: &Value, tables: &[TableGauge]) {
    let workers: &[Value] = stats
        .get("workers")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    out.add(
        "workers",
        "Workers (datapath threads) in the counters snapshot.",
        Kind::Gauge,
        Vec::new(),
        workers.len() as u64,
    );
    for (i, w) in workers.iter().enumerate() {
        if let Some(w) = w.as_object() {
            worker(out, &i.to_string(), w);
        }
    }
    drop_reasons(out, stats, workers);
    if let Some(l) = stats.get("linux").and_then(Value::as_object) {
        linux(out, l);
    }
    for l in objects(stats.get("links")) {
        links(out, l);
    }
    for t in tables {
        let name = sanitize(t.name);
        if !name.is_empty() {
            out.add(&name, t.help, Kind::Gauge, Vec::new(), t.value);
        }
    }
}

/// The kernel-table mirror's families (`[linux]`): event counters, skips by reason,
/// and the mirrored table sizes as gauges.
fn linux(out: &mut Families, l: &Map<String, Value>) {
    for (k, v) in l {
        let key = sanitize(k);
        if key == "skipped" {
            for (reason, n) in v.as_object().into_iter().flatten() {
                if let Some(n) = n.as_u64() {
                    out.add(
                        "linux_skipped_total",
                        "Kernel routing messages (or parts) the mirror did not apply, by reason.",
                        Kind::Counter,
                        vec![("reason", sanitize(reason))],
                        n,
                    );
                }
            }
            continue;
        }
        let Some(n) = v.as_u64() else { continue };
        if matches!(key.as_str(), "routes" | "routes6" | "neighbours" | "vrfs")
            || key.starts_with("last_")
        {
            out.add(
                &format!("linux_{key}"),
                &format!("Kernel table mirror: {} (a level).", k.replace('_', " ")),
                Kind::Gauge,
                Vec::new(),
                n,
            );
        } else {
            out.add(
                &format!("linux_{key}_total"),
                &format!("Kernel table mirror: {}.", k.replace('_', " ")),
                Kind::Counter,
                Vec::new(),
                n,
            );
        }
    }
}

/// A port's link (the link watch's `links` section): up as a gauge, its changes and
/// the kernel's transmit drops as counters.
fn links(out: &mut Families, l: &Map<String, Value>) {
    let Some(port) = l.get("port").and_then(Value::as_str) else {
        return;
    };
    let labels = || vec![("port", port.to_string())];
    if let Some(up) = l.get("up").and_then(Value::as_bool) {
        out.add(
            "link_up",
            "Whether a port's link is up (administratively and operationally: carrier), as the kernel's link events say.",
            Kind::Gauge,
            labels(),
            u64::from(up),
        );
    }
    if let Some(n) = l.get("changes").and_then(Value::as_u64) {
        out.add(
            "link_changes",
            "Changes of a port's link state (down or up) since the start.",
            Kind::Counter,
            labels(),
            n,
        );
    }
    if let Some(n) = l.get("kernel_tx_dropped").and_then(Value::as_u64) {
        out.add(
            "link_kernel_tx_dropped",
            "Transmit drops the kernel counted on a port's interface since the start (its tx_dropped, as ip -s link shows).",
            Kind::Counter,
            labels(),
            n,
        );
    }
}

/// One worker's families.
fn worker(out: &mut Families, id: &str, w: &Map<String, Value>) {
    let wl = || vec![("worker", id.to_string())];
    for (key, fate) in FATES {
        if let Some(n) = w.get(key).and_then(Value::as_u64) {
            out.add(
                "packets",
                "Wire packets by fate: received, transmitted, delivered to the host, dropped, originated by the host.",
                Kind::Counter,
                vec![("fate", fate.to_string()), ("worker", id.to_string())],
                n,
            );
        }
    }
    if let Some(n) = w.get("held_packets").and_then(Value::as_u64) {
        out.add(
            "packets_held",
            "Wire packets held (waiting for a neighbour, in queues, in backlogs) at the snapshot.",
            Kind::Gauge,
            wl(),
            n,
        );
    }
    for s in objects(w.get("stages")) {
        let Some(stage) = s.get("name").and_then(Value::as_str) else {
            continue;
        };
        let labels = vec![("stage", stage.to_string()), ("worker", id.to_string())];
        fields(out, "stage", "A stage's", s, &labels, STAGE_HELP);
        for (reason, n) in counts(s.get("drops")) {
            out.add(
                "drops",
                "Wire packets a stage dropped, by reason (netbatch_drop_reason_info describes each reason).",
                Kind::Counter,
                vec![
                    ("stage", stage.to_string()),
                    ("reason", reason.to_string()),
                    ("worker", id.to_string()),
                ],
                n,
            );
        }
        for (event, n) in counts(s.get("events")) {
            out.add(
                "stage_events",
                "Events a stage counted that are not drops, by event.",
                Kind::Counter,
                vec![
                    ("stage", stage.to_string()),
                    ("event", event.to_string()),
                    ("worker", id.to_string()),
                ],
                n,
            );
        }
    }
    for p in objects(w.get("ports")) {
        let Some(port) = p.get("name").and_then(Value::as_str) else {
            continue;
        };
        let labels = vec![("port", port.to_string()), ("worker", id.to_string())];
        fields(out, "port", "A port queue's", p, &labels, PORT_HELP);
        for r in p
            .get("rx_drop_reasons")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let (Some(reason), Some(n)) = (r["reason"].as_str(), r["count"].as_u64()) else {
                continue;
            };
            out.add(
                "port_rx_drops",
                "Frames a port queue dropped at receive itself, by reason (part of port_rx_dropped).",
                Kind::Counter,
                vec![
                    ("port", port.to_string()),
                    ("worker", id.to_string()),
                    ("reason", reason.to_string()),
                ],
                n,
            );
        }
    }
    if let Some(h) = w.get("host").and_then(Value::as_object) {
        fields(out, "host", "The host stack's", h, &wl(), HOST_HELP);
    }
    for (key, help) in [
        ("neighbours", "Entries in a worker's neighbour (ARP) table."),
        (
            "neighbours6",
            "Entries in a worker's IPv6 neighbour (NDP) table.",
        ),
        (
            "routes",
            "Routes in the table a worker forwards by, implied ones included.",
        ),
        (
            "routes6",
            "IPv6 routes in the table a worker forwards by, implied ones included.",
        ),
    ] {
        if let Some(n) = w.get(key).and_then(Value::as_u64) {
            out.add(key, help, Kind::Gauge, wl(), n);
        }
    }
    // Two instances of one application in a worker: the later ones get `-2`, `-3`, ..
    let mut apps_seen: Vec<&str> = Vec::new();
    for a in objects(w.get("apps")) {
        let (Some(name), Some(counters)) = (
            a.get("name").and_then(Value::as_str),
            a.get("counters").and_then(Value::as_object),
        ) else {
            continue;
        };
        let nth = apps_seen.iter().filter(|n| **n == name).count() + 1;
        apps_seen.push(name);
        let app = if nth == 1 {
            name.to_string()
        } else {
            format!("{name}-{nth}")
        };
        let labels = vec![("app", app), ("worker", id.to_string())];
        fields(out, "app", "An application's", counters, &labels, &[]);
    }
    if let Some(s) = w.get("worker").and_then(Value::as_object) {
        fields(out, "softnet", "A worker's softnet", s, &wl(), SOFTNET_HELP);
    }
    if let Some(c) = w.get("conntrack").and_then(Value::as_object) {
        fields(
            out,
            "conntrack",
            "Connection tracking's",
            c,
            &wl(),
            CONNTRACK_HELP,
        );
    }
}

/// HELP of the main connection-tracking series.
const CONNTRACK_HELP: &[(&str, &str)] = &[
    (
        "entries_len",
        "Connections in a worker's table (confirmed).",
    ),
    ("max_len", "Connections a worker's table can hold."),
    (
        "early_drop",
        "Unassured connections evicted to make room for new ones.",
    ),
    (
        "refused_full",
        "New connections refused: the table was full of assured ones.",
    ),
];

/// The objects of an array field (others skipped).
fn objects(v: Option<&Value>) -> impl Iterator<Item = &Map<String, Value>> {
    v.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object)
}

/// The unsigned counts of an object field `{name: n}` (others skipped).
fn counts(v: Option<&Value>) -> impl Iterator<Item = (&str, u64)> {
    v.and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, n)| Some((k.as_str(), n.as_u64()?)))
}

/// The fields of `obj` by the module's naming rule, in group `group` (`whose` names the
/// object in the HELP of keys missing from `helps`). `name` is a label, not a field.
fn fields(
    out: &mut Families,
    group: &str,
    whose: &str,
    obj: &Map<String, Value>,
    labels: &Labels,
    helps: &[(&str, &str)],
) {
    for (key, v) in obj {
        if key == "name" || key.contains("_per_") {
            continue;
        }
        let k = sanitize(key);
        if k.is_empty() {
            continue;
        }
        let help = |what: &str| {
            helps.iter().find(|(h, _)| *h == key).map_or_else(
                || format!("{whose} field `{k}` ({what})."),
                |(_, h)| (*h).to_string(),
            )
        };
        if let Some(n) = v.as_u64() {
            if k.ends_with("_len") {
                out.add(
                    &format!("{group}_{k}"),
                    &help("a current length"),
                    Kind::Gauge,
                    labels.clone(),
                    n,
                );
            } else {
                let base = k.strip_suffix("_total").unwrap_or(&k);
                out.add(
                    &format!("{group}_{base}"),
                    &help("a count"),
                    Kind::Counter,
                    labels.clone(),
                    n,
                );
            }
        } else if let Some(b) = v.as_bool() {
            out.add(
                &format!("{group}_{k}"),
                &help("1 for true"),
                Kind::Gauge,
                labels.clone(),
                u64::from(b),
            );
        }
    }
}

/// The info family describing every drop reason the document names, from the workers'
/// `drop_reasons` and the totals' (first description of a name kept).
fn drop_reasons(out: &mut Families, stats: &Value, workers: &[Value]) {
    let lists = workers
        .iter()
        .map(|w| w.get("drop_reasons"))
        .chain([stats.get("totals").and_then(|t| t.get("drop_reasons"))]);
    let mut seen = HashSet::new();
    for r in lists.flat_map(objects) {
        let (Some(name), Some(description)) = (
            r.get("name").and_then(Value::as_str),
            r.get("description").and_then(Value::as_str),
        ) else {
            continue;
        };
        if seen.insert(name) {
            out.add(
                "drop_reason",
                "What each drop reason of netbatch_drops_total means.",
                Kind::Info,
                vec![
                    ("reason", name.to_string()),
                    ("description", description.to_string()),
                ],
                1,
            );
        }
    }
}

/// What the server calls on each scrape: the exposition text, or why there is none.
pub type Source = Arc<dyn Fn() -> Result<String, String> + Send + Sync>;

/// An HTTP server on its own thread answering `GET /metrics` (and `HEAD`) with the
/// source's text as [`CONTENT_TYPE`]; 404 for other paths, 405 for other methods, 500
/// with the message if the source fails. Stopping or dropping it ends the thread.
pub struct MetricsServer {
    server: Arc<tiny_http::Server>,
    addr: SocketAddr,
    stopping: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl fmt::Debug for MetricsServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MetricsServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl MetricsServer {
    /// Binds `addr` (port 0 picks a free port: see [`Self::local_addr`]) and serves.
    pub fn start(addr: SocketAddr, source: Source) -> io::Result<Self> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        let server =
            Arc::new(tiny_http::Server::from_listener(listener, None).map_err(io::Error::other)?);
        let stopping = Arc::new(AtomicBool::new(false));
        let thread = std::thread::Builder::new()
            .name("netbatch-metrics".into())
            .spawn({
                let server = Arc::clone(&server);
                let stopping = Arc::clone(&stopping);
                move || serve(&server, &stopping, &source)
            })?;
        Ok(Self {
            server,
            addr,
            stopping,
            thread: Some(thread),
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops serving and waits for the thread (as dropping does).
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.stopping.store(true, Ordering::Release);
            self.server.unblock();
            if thread.join().is_err() {
                tracing::warn!("metrics: the server thread panicked");
            }
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The server thread: answers requests until unblocked by [`MetricsServer::shutdown`].
fn serve(server: &tiny_http::Server, stopping: &AtomicBool, source: &Source) {
    loop {
        match server.recv() {
            Ok(request) => answer(request, source),
            Err(_) if stopping.load(Ordering::Acquire) => return,
            Err(e) => {
                // An accept error (e.g. out of descriptors): wait instead of spinning.
                tracing::warn!(error = %e, "metrics: receiving a request failed");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// One request's response.
fn answer(request: tiny_http::Request, source: &Source) {
    use tiny_http::Method;
    let path = request.url().split('?').next().unwrap_or_default();
    let readable = matches!(request.method(), Method::Get | Method::Head);
    let response = if path != "/metrics" {
        plain(404, "not found: the metrics are at /metrics\n".into())
    } else if !readable {
        let mut r = plain(405, "method not allowed: use GET\n".into());
        if let Ok(h) = tiny_http::Header::from_bytes("Allow", "GET, HEAD") {
            r.add_header(h);
        }
        r
    } else {
        match catch_unwind(AssertUnwindSafe(|| source())) {
            Ok(Ok(body)) => {
                let mut r = tiny_http::Response::from_string(body);
                if let Ok(h) = tiny_http::Header::from_bytes("Content-Type", CONTENT_TYPE) {
                    r.add_header(h);
                }
                r
            }
            Ok(Err(message)) => plain(500, format!("{message}\n")),
            Err(_) => plain(500, "the metrics source panicked\n".into()),
        }
    };
    if let Err(e) = request.respond(response) {
        tracing::debug!(error = %e, "metrics: writing a response failed");
    }
}

/// A `text/plain` response.
fn plain(status: u16, body: String) -> tiny_http::Response<io::Cursor<Vec<u8>>> {
    tiny_http::Response::from_string(body).with_status_code(status)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::io::{Read, Write};
    use std::net::TcpStream;

    /// One sample of the text format: name, labels, value.
    #[derive(Debug, Clone, PartialEq)]
    struct Sample {
        name: String,
        labels: BTreeMap<String, String>,
        value: f64,
    }

    /// The text format as a reader sees it: HELP and TYPE by family, the samples, and
    /// whether `# EOF` ended it.
    #[derive(Debug, Default)]
    struct Exposition {
        help: BTreeMap<String, String>,
        types: BTreeMap<String, String>,
        samples: Vec<Sample>,
        eof_last: bool,
    }

    /// A line parser of the text format written from the OpenMetrics specification
    /// (`name{k="v",..} value`, label values with `\\`, `\"` and `\n` escapes).
    fn parse(text: &str) -> Exposition {
        let mut e = Exposition::default();
        let lines: Vec<&str> = text.split('\n').collect();
        assert_eq!(lines.last(), Some(&""), "the text ends in a newline");
        let lines = &lines[..lines.len() - 1];
        for (i, line) in lines.iter().enumerate() {
            if *line == "# EOF" {
                assert_eq!(i, lines.len() - 1, "# EOF is the last line");
                e.eof_last = true;
            } else if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, help) = rest.split_once(' ').expect("HELP has a text");
                assert!(
                    e.help.insert(name.into(), help.into()).is_none(),
                    "one HELP for {name}"
                );
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, ty) = rest.split_once(' ').expect("TYPE has a type");
                assert!(
                    e.types.insert(name.into(), ty.into()).is_none(),
                    "one TYPE for {name}"
                );
            } else {
                assert!(!line.starts_with('#'), "unknown comment line {line:?}");
                e.samples.push(parse_sample(line));
            }
        }
        e
    }

    fn parse_sample(line: &str) -> Sample {
        let name_end = line.find(['{', ' ']).expect("a sample has a value");
        let name = &line[..name_end];
        assert!(
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad metric name {name:?}"
        );
        let mut labels = BTreeMap::new();
        let mut rest = &line[name_end..];
        if let Some(body) = rest.strip_prefix('{') {
            let mut chars = body.char_indices();
            let mut key = String::new();
            loop {
                let (_, c) = chars.next().expect("unterminated labels");
                match c {
                    '}' => break,
                    ',' => {}
                    '=' => {
                        assert_eq!(
                            chars.next().map(|(_, c)| c),
                            Some('"'),
                            "label value is quoted"
                        );
                        let mut value = String::new();
                        loop {
                            match chars.next().expect("unterminated label value").1 {
                                '"' => break,
                                '\\' => match chars.next().expect("dangling escape").1 {
                                    'n' => value.push('\n'),
                                    c @ ('\\' | '"') => value.push(c),
                                    c => panic!("unknown escape \\{c}"),
                                },
                                c => value.push(c),
                            }
                        }
                        assert!(
                            labels.insert(std::mem::take(&mut key), value).is_none(),
                            "repeated label"
                        );
                    }
                    c => key.push(c),
                }
            }
            let used = chars.next().map_or(body.len(), |(i, _)| i);
            rest = &body[used..];
        }
        let value = rest.strip_prefix(' ').expect("a space before the value");
        Sample {
            name: name.into(),
            labels,
            value: value.parse().expect("a numeric value"),
        }
    }

    impl Exposition {
        /// The value of the sample with exactly these labels.
        fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
            let want: BTreeMap<String, String> = labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let mut found = self
                .samples
                .iter()
                .filter(|s| s.name == name && s.labels == want);
            let first = found.next()?;
            assert!(found.next().is_none(), "{name} {labels:?} appears twice");
            Some(first.value)
        }

        /// The family a sample belongs to, by its TYPE's suffix rule.
        fn family_of(&self, sample: &str) -> (String, String) {
            for (suffix, ty) in [("_total", "counter"), ("_info", "info"), ("", "gauge")] {
                if let Some(base) = sample.strip_suffix(suffix)
                    && self.types.get(base).map(String::as_str) == Some(ty)
                {
                    return (base.into(), ty.into());
                }
            }
            panic!("sample {sample} belongs to no declared family");
        }
    }

    /// A series a test expects: name, labels, value.
    type Expected<'a> = (&'a str, Vec<(&'a str, &'a str)>, f64);

    /// Two workers; worker 0 has a port with an extra numeric, a boolean and a string
    /// field, a stage with drops and events, host events and an app; worker 1 has RPS
    /// counters, an unknown softnet field and a repeated app; the totals name a reason
    /// again with another description (the first is kept).
    fn document() -> Value {
        json!({
            "totals": {"rx_packets": 12, "drop_reasons": [
                {"name": "ttl_exceeded", "description": "TTL reached zero"},
                {"name": "no_route", "description": "a later description of a known reason"}
            ]},
            "workers": [
                {
                    "rx_packets": 10, "tx_packets": 6, "delivered_packets": 1,
                    "dropped_packets": 3, "held_packets": 2, "originated_packets": 2,
                    "conservation": "rx + originated = tx + delivered + dropped + held",
                    "drops": {"no_route": 2, "bad_checksum": 1},
                    "drop_reasons": [
                        {"name": "no_route", "description": "No route to the destination"},
                        {"name": "bad_checksum", "description": "Header checksum \"wrong\""}
                    ],
                    "stages": [
                        {"name": "ip4-input", "packets": 10, "calls": 4, "cycles": 5000,
                         "packets_per_call": 2.5, "cycles_per_packet": 500.0,
                         "drops": {"bad_checksum": 1, "no_route": 2},
                         "events": {"fragments": 3}},
                        {"name": "ip4-output", "packets": 6, "calls": 3,
                         "packets_per_call": 2.0, "cycles_per_packet": 0.0,
                         "drops": {}, "events": {}}
                    ],
                    "ports": [
                        {"name": "eth\"0\\", "rx_packets": 10, "rx_bytes": 1500, "rx_nobuf": 1,
                         "rx_dropped": 0, "tx_packets": 6, "tx_bytes": 900, "tx_refused": 0,
                         "rx_missed": 4, "link": true, "driver": "af_packet",
                         "rx_drop_reasons": [{"reason": "vhost_chain_broken",
                             "description": "broken", "count": 2}]}
                    ],
                    "host": {"arp_requests_out": 1, "icmp_errors_out": 2},
                    "neighbours": 5,
                    "neighbours6": 3,
                    "routes": 4,
                    "routes6": 7,
                    "apps": [{"name": "udp-sink", "counters": {"datagrams": 7}}],
                    "worker": {"rounds": 100, "processed": 12, "time_squeeze": 1}
                },
                {
                    "rx_packets": 2, "tx_packets": 2, "delivered_packets": 0,
                    "dropped_packets": 0, "held_packets": 0, "originated_packets": 0,
                    "drops": {}, "drop_reasons": [],
                    "stages": [], "ports": [], "host": {}, "neighbours": 0, "neighbours6": 0,
                    "routes": 4, "routes6": 7,
                    "apps": [
                        {"name": "udp-echo", "counters": {"echoed": 2}},
                        {"name": "udp-echo", "counters": {"echoed": 3}}
                    ],
                    "worker": {"rounds": 50, "processed": 2, "time_squeeze": 0,
                               "dropped": 1, "received_rps": 9, "backlog_polls": 8,
                               "backlog_len": 3, "handed_off": 6, "taken_over": 7,
                               "future_field": 11, "mode": "rps"}
                }
            ]
        })
    }

    /// Every series the brief's naming scheme predicts for `document()` is present
    /// with the document's value and labels; every family has HELP and TYPE; counters'
    /// samples end in `_total`; the text ends with `# EOF`; nothing else is emitted
    /// (the count of samples equals the expectation's).
    #[test]
    fn encode_names_every_series_by_the_conventions() {
        let tables = [TableGauge::new("sockets", "Bound UDP sockets.", 2)];
        let text = encode(&document(), &tables).unwrap();
        let e = parse(&text);
        assert!(e.eof_last, "OpenMetrics text ends with # EOF:\n{text}");
        assert!(
            !text.contains("{}"),
            "samples without labels have no braces"
        );

        let w0 = [("worker", "0")];
        let port = [("port", "eth\"0\\"), ("worker", "0")];
        let st = [("stage", "ip4-input"), ("worker", "0")];
        let out = [("stage", "ip4-output"), ("worker", "0")];
        let w1 = [("worker", "1")];
        let expect: Vec<Expected<'_>> = vec![
            ("netbatch_workers", vec![], 2.0),
            (
                "netbatch_packets_total",
                vec![("fate", "rx"), ("worker", "0")],
                10.0,
            ),
            (
                "netbatch_packets_total",
                vec![("fate", "tx"), ("worker", "0")],
                6.0,
            ),
            (
                "netbatch_packets_total",
                vec![("fate", "delivered"), ("worker", "0")],
                1.0,
            ),
            (
                "netbatch_packets_total",
                vec![("fate", "dropped"), ("worker", "0")],
                3.0,
            ),
            (
                "netbatch_packets_total",
                vec![("fate", "originated"), ("worker", "0")],
                2.0,
            ),
            (
                "netbatch_packets_total",
                vec![("fate", "rx"), ("worker", "1")],
                2.0,
            ),
            (
                "netbatch_packets_total",
                vec![("fate", "tx"), ("worker", "1")],
                2.0,
            ),
            (
                "netbatch_packets_total",
                vec![("fate", "delivered"), ("worker", "1")],
                0.0,
            ),
            (
                "netbatch_packets_total",
                vec![("fate", "dropped"), ("worker", "1")],
                0.0,
            ),
            (
                "netbatch_packets_total",
                vec![("fate", "originated"), ("worker", "1")],
                0.0,
            ),
            ("netbatch_packets_held", w0.to_vec(), 2.0),
            ("netbatch_packets_held", w1.to_vec(), 0.0),
            ("netbatch_stage_packets_total", st.to_vec(), 10.0),
            ("netbatch_stage_calls_total", st.to_vec(), 4.0),
            ("netbatch_stage_cycles_total", st.to_vec(), 5000.0),
            ("netbatch_stage_packets_total", out.to_vec(), 6.0),
            ("netbatch_stage_calls_total", out.to_vec(), 3.0),
            (
                "netbatch_drops_total",
                vec![
                    ("stage", "ip4-input"),
                    ("reason", "no_route"),
                    ("worker", "0"),
                ],
                2.0,
            ),
            (
                "netbatch_drops_total",
                vec![
                    ("stage", "ip4-input"),
                    ("reason", "bad_checksum"),
                    ("worker", "0"),
                ],
                1.0,
            ),
            (
                "netbatch_stage_events_total",
                vec![
                    ("stage", "ip4-input"),
                    ("event", "fragments"),
                    ("worker", "0"),
                ],
                3.0,
            ),
            (
                "netbatch_drop_reason_info",
                vec![
                    ("reason", "no_route"),
                    ("description", "No route to the destination"),
                ],
                1.0,
            ),
            (
                "netbatch_drop_reason_info",
                vec![
                    ("reason", "bad_checksum"),
                    ("description", "Header checksum \"wrong\""),
                ],
                1.0,
            ),
            (
                "netbatch_drop_reason_info",
                vec![
                    ("reason", "ttl_exceeded"),
                    ("description", "TTL reached zero"),
                ],
                1.0,
            ),
            ("netbatch_port_rx_packets_total", port.to_vec(), 10.0),
            ("netbatch_port_rx_bytes_total", port.to_vec(), 1500.0),
            ("netbatch_port_rx_nobuf_total", port.to_vec(), 1.0),
            ("netbatch_port_rx_dropped_total", port.to_vec(), 0.0),
            ("netbatch_port_tx_packets_total", port.to_vec(), 6.0),
            ("netbatch_port_tx_bytes_total", port.to_vec(), 900.0),
            ("netbatch_port_tx_refused_total", port.to_vec(), 0.0),
            ("netbatch_port_rx_missed_total", port.to_vec(), 4.0),
            (
                "netbatch_port_rx_drops_total",
                vec![
                    ("port", "eth\"0\\"),
                    ("worker", "0"),
                    ("reason", "vhost_chain_broken"),
                ],
                2.0,
            ),
            ("netbatch_port_link", port.to_vec(), 1.0),
            ("netbatch_host_arp_requests_out_total", w0.to_vec(), 1.0),
            ("netbatch_host_icmp_errors_out_total", w0.to_vec(), 2.0),
            ("netbatch_neighbours", w0.to_vec(), 5.0),
            ("netbatch_neighbours", w1.to_vec(), 0.0),
            ("netbatch_neighbours6", w0.to_vec(), 3.0),
            ("netbatch_neighbours6", w1.to_vec(), 0.0),
            (
                "netbatch_app_datagrams_total",
                vec![("app", "udp-sink"), ("worker", "0")],
                7.0,
            ),
            (
                "netbatch_app_echoed_total",
                vec![("app", "udp-echo"), ("worker", "1")],
                2.0,
            ),
            (
                "netbatch_app_echoed_total",
                vec![("app", "udp-echo-2"), ("worker", "1")],
                3.0,
            ),
            ("netbatch_softnet_rounds_total", w0.to_vec(), 100.0),
            ("netbatch_softnet_processed_total", w0.to_vec(), 12.0),
            ("netbatch_softnet_time_squeeze_total", w0.to_vec(), 1.0),
            ("netbatch_softnet_rounds_total", w1.to_vec(), 50.0),
            ("netbatch_softnet_processed_total", w1.to_vec(), 2.0),
            ("netbatch_softnet_time_squeeze_total", w1.to_vec(), 0.0),
            ("netbatch_softnet_dropped_total", w1.to_vec(), 1.0),
            ("netbatch_softnet_received_rps_total", w1.to_vec(), 9.0),
            ("netbatch_softnet_backlog_polls_total", w1.to_vec(), 8.0),
            ("netbatch_softnet_backlog_len", w1.to_vec(), 3.0),
            ("netbatch_softnet_handed_off_total", w1.to_vec(), 6.0),
            ("netbatch_softnet_taken_over_total", w1.to_vec(), 7.0),
            ("netbatch_softnet_future_field_total", w1.to_vec(), 11.0),
            ("netbatch_routes", w0.to_vec(), 4.0),
            ("netbatch_routes6", w0.to_vec(), 7.0),
            ("netbatch_routes", w1.to_vec(), 4.0),
            ("netbatch_routes6", w1.to_vec(), 7.0),
            ("netbatch_sockets", vec![], 2.0),
        ];
        for (name, labels, value) in &expect {
            assert_eq!(
                e.value(name, labels),
                Some(*value),
                "{name} {labels:?} in\n{text}"
            );
        }
        assert_eq!(
            e.samples.len(),
            expect.len(),
            "no unexpected series in\n{text}"
        );

        for s in &e.samples {
            let (family, ty) = e.family_of(&s.name);
            assert!(
                e.help.get(&family).is_some_and(|h| !h.is_empty()),
                "{family} has a HELP"
            );
            if ty == "counter" {
                assert!(s.name.ends_with("_total"));
            }
        }
        assert_eq!(e.help.len(), e.types.len(), "a HELP per TYPE");
        assert_eq!(e.types["netbatch_packets_held"], "gauge");
        assert_eq!(e.types["netbatch_softnet_backlog_len"], "gauge");
        assert_eq!(e.types["netbatch_port_link"], "gauge");
        assert!(e.help["netbatch_stage_cycles"].contains("TSC cycles"));
        assert_eq!(
            e.help["netbatch_routes"],
            "Routes in the table a worker forwards by, implied ones included."
        );
    }

    /// A document without the expected shape gives the workers gauge at 0 and the
    /// tables, and no panic; repeated keys and kind clashes keep the first sample.
    #[test]
    fn odd_documents_are_tolerated() {
        for doc in [
            json!(null),
            json!([1, 2]),
            json!({"workers": "no"}),
            json!({"workers": [7, "x", null]}),
        ] {
            let e = parse(&encode(&doc, &[TableGauge::new("rules", "Rules.", 0)]).unwrap());
            let n = doc["workers"].as_array().map_or(0, Vec::len);
            assert_eq!(e.value("netbatch_workers", &[]), Some(n as f64));
            assert_eq!(e.value("netbatch_rules", &[]), Some(0.0));
            assert_eq!(e.samples.len(), 2, "{doc}");
        }
        let doc = json!({"workers": [{
            "stages": [{"name": "a", "packets": 1}, {"name": "a", "packets": 2}, {"packets": 9}],
            "ports": [{"name": "p", "rx": 1, "rx_total": 2, "q_len": 3, "q-len": 4,
                       "q_len_total": 5, "ratio": 0.5, "n": -1, "rx_per_call": 2}],
        }]});
        let e = parse(&encode(&doc, &[]).unwrap());
        let p = [("port", "p"), ("worker", "0")];
        assert_eq!(
            e.value(
                "netbatch_stage_packets_total",
                &[("stage", "a"), ("worker", "0")]
            ),
            Some(1.0)
        );
        // `rx` and `rx_total` name one series, `q_len` and `q-len` another, and
        // `q_len_total` would make that a counter: one of each is kept (which one
        // depends on the map's key order).
        let rx = e.value("netbatch_port_rx_total", &p).unwrap();
        assert!(rx == 1.0 || rx == 2.0);
        let q_len = e
            .value("netbatch_port_q_len", &p)
            .or_else(|| e.value("netbatch_port_q_len_total", &p))
            .unwrap();
        assert!([3.0, 4.0, 5.0].contains(&q_len));
        // workers, the stage's packets, the port's rx and q_len: nothing else.
        assert_eq!(e.samples.len(), 4, "{:?}", e.samples);
    }

    /// Sends a raw HTTP/1.0 request; returns the status code, the headers (names
    /// lower-cased) and the body.
    fn http(addr: SocketAddr, request: &str) -> (u16, Vec<(String, String)>, String) {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        let mut raw = String::new();
        s.read_to_string(&mut raw).unwrap();
        let (head, body) = raw.split_once("\r\n\r\n").expect("a header block");
        let mut lines = head.split("\r\n");
        let status = lines.next().unwrap();
        let code = status.split(' ').nth(1).unwrap().parse().unwrap();
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        (code, headers, body.to_string())
    }

    fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The server answers GET /metrics with the source's text and the OpenMetrics
    /// content type, 404 elsewhere, 405 for POST, 500 with the message when the source
    /// fails; dropping it returns promptly.
    #[test]
    fn server_serves_metrics_and_refuses_the_rest() {
        let fail = Arc::new(AtomicBool::new(false));
        let source: Source = {
            let fail = Arc::clone(&fail);
            Arc::new(move || {
                if fail.load(Ordering::Relaxed) {
                    Err("counters unavailable".into())
                } else {
                    encode(&document(), &[]).map_err(|e| e.to_string())
                }
            })
        };
        let server = MetricsServer::start("127.0.0.1:0".parse().unwrap(), source).unwrap();
        let addr = server.local_addr();
        assert_ne!(addr.port(), 0);

        let (code, headers, body) = http(addr, "GET /metrics HTTP/1.0\r\n\r\n");
        assert_eq!(code, 200);
        assert_eq!(header(&headers, "content-type"), Some(CONTENT_TYPE));
        assert_eq!(body, encode(&document(), &[]).unwrap());
        let e = parse(&body);
        assert_eq!(
            e.value("netbatch_softnet_rounds_total", &[("worker", "1")]),
            Some(50.0)
        );

        let (code, _, _) = http(addr, "GET /metrics?x=1 HTTP/1.0\r\n\r\n");
        assert_eq!(code, 200);
        let (code, _, body) = http(addr, "GET /other HTTP/1.0\r\n\r\n");
        assert_eq!(code, 404);
        assert!(!body.contains("netbatch_"));
        let (code, headers, _) = http(addr, "POST /metrics HTTP/1.0\r\nContent-Length: 0\r\n\r\n");
        assert_eq!(code, 405);
        assert_eq!(header(&headers, "allow"), Some("GET, HEAD"));

        fail.store(true, Ordering::Relaxed);
        let (code, _, body) = http(addr, "GET /metrics HTTP/1.0\r\n\r\n");
        assert_eq!(code, 500);
        assert_eq!(body, "counters unavailable\n");

        // Dropping returns promptly (a hang fails the test instead of stalling it).
        let (done, stopped) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            drop(server);
            let _ = done.send(());
        });
        assert!(
            stopped.recv_timeout(Duration::from_secs(5)).is_ok(),
            "the server did not stop"
        );
    }

    /// Binding an address in use is an I/O error, not a panic.
    #[test]
    fn start_reports_a_bind_error() {
        let taken = TcpListener::bind("127.0.0.1:0").unwrap();
        let source: Source = Arc::new(|| Ok(String::new()));
        let err = MetricsServer::start(taken.local_addr().unwrap(), source).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
    }
}
