//! The control socket: a Unix stream socket `netbatch run` serves on its own thread.
//!
//! One request per connection: a JSON line `{"argv": ["show", "runtime"]}`, answered by
//! one JSON line `{"ok": true, "text": "...", "data": {...}}` ([`super::Reply`]).
//!
//! One thread serves every connection without blocking (`poll`): a client has
//! [`REQUEST_TIME`] from its connection to send its line (at most [`REQUEST_MAX`]
//! bytes) and [`REPLY_TIME`] to take its answer, each on its own clock, so idle or slow
//! clients delay nobody; up to [`MAX_CONNECTIONS`] are open at once and [`MAX_RUNNING`]
//! commands run at once, on as many command threads, started when first needed and kept
//! for the server's life (a thread a command would hand glibc's allocator a new thread
//! each time, and each new thread may take another arena that keeps what the command
//! freed: the resident set then creeps with the number of arenas touched, docs/soak.md).
//! Every refusal names the limit it met.
//!
//! Who may connect: the socket file is mode 0600 (0660 with a configured group, owned by
//! that group), so the kernel refuses other users at `connect`; each accepted
//! connection's peer credentials (`SO_PEERCRED`) are checked again (root, our own user,
//! or a member of the group), so a socket file whose mode was changed by hand still
//! refuses them, with a reason.

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{Control, Reply};

/// The served socket; dropping it stops the thread and removes the file.
#[derive(Debug)]
pub struct Server {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// Why the socket could not be served.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Another process serves this path.
    #[error(
        "control socket {0}: another netbatch is serving it (give this one another [control] name or socket)"
    )]
    InUse(PathBuf),
    /// Creating, binding or setting up the socket failed.
    #[error("control socket {0}: {1}")]
    Io(PathBuf, std::io::Error),
    /// The path is not safe to serve at.
    #[error("control socket {0}: refused: {1}")]
    Unsafe(PathBuf, String),
}

/// Whether `dir` may hold the socket: owned by root or by us, and writable by nobody
/// else (or sticky, as /tmp is), so no other user can replace what we create there.
fn check_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let me = netbatch_ports::sys::euid();
    if m.uid() != 0 && m.uid() != me {
        return Err(format!(
            "{} belongs to uid {}, not to root or us",
            dir.display(),
            m.uid()
        ));
    }
    let sticky = m.mode() & 0o1000 != 0;
    if m.mode() & 0o022 != 0 && !sticky {
        return Err(format!(
            "{} is writable by others (mode {:o}) and not sticky",
            dir.display(),
            m.mode() & 0o7777
        ));
    }
    Ok(())
}

impl Server {
    /// Serves `control` at `path`: mode 0600, or 0660 owned by group `gid`.
    pub fn start(control: Arc<Control>, path: &Path, gid: Option<u32>) -> Result<Self, ServeError> {
        let io = |e| ServeError::Io(path.to_path_buf(), e);
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if !dir.exists() {
                std::fs::create_dir_all(dir).map_err(io)?;
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
                    .map_err(io)?;
            }
            check_dir(dir).map_err(|why| ServeError::Unsafe(path.to_path_buf(), why))?;
        }
        if let Ok(m) = std::fs::symlink_metadata(path) {
            // Only a socket nobody serves is ours to replace; anything else (a file a
            // typo named, a live server, a socket we may not reach) is refused.
            if !m.file_type().is_socket() {
                return Err(ServeError::Unsafe(
                    path.to_path_buf(),
                    "something that is not a socket is there".into(),
                ));
            }
            match UnixStream::connect(path) {
                Ok(_) => return Err(ServeError::InUse(path.to_path_buf())),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                    std::fs::remove_file(path).map_err(io)?;
                }
                Err(e) => return Err(io(e)),
            }
        }
        let listener = UnixListener::bind(path).map_err(io)?;
        let mode = if gid.is_some() { 0o660 } else { 0o600 };
        // The parent is ours (checked above), so nobody can swap the new socket for a
        // symlink before these; lchown does not follow one anyway.
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io)?;
        if let Some(g) = gid {
            std::os::unix::fs::lchown(path, None, Some(g)).map_err(io)?;
        }
        listener.set_nonblocking(true).map_err(io)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("netbatch-control".into())
            .spawn(move || serve(&listener, &control, gid, &flag))
            .map_err(io)?;
        Ok(Self {
            path: path.to_path_buf(),
            stop,
            thread: Some(thread),
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// How often the serving loop looks at the stop flag when nothing happens.
const TICK: Duration = Duration::from_millis(20);

/// Connections open at once (each a descriptor); a client beyond them is answered at
/// once with an error naming the limit, and closed.
pub const MAX_CONNECTIONS: usize = 256;

/// Commands run at once (each on one of as many command threads); requests beyond them
/// wait their turn in arrival order (they have been read: no client holds a place by
/// being slow). Two: a slow command (a reload) leaves one thread to serve the others,
/// and each command thread is one more glibc arena that keeps what its commands freed
/// (eight kept 1.3 MiB more than two over the churn of `memory_levels_off_under_churn`).
pub const MAX_RUNNING: usize = 2;

/// How long a client has, from its connection, to send its whole request line.
pub const REQUEST_TIME: Duration = Duration::from_secs(2);

/// How long a client has to take its answer once it is ready.
pub const REPLY_TIME: Duration = Duration::from_secs(5);

/// Longest request line, in bytes (its newline included).
pub const REQUEST_MAX: usize = 64 << 10;

/// Where a connection stands.
enum Stage {
    /// Its request line is being read (until `deadline`).
    Reading(Vec<u8>),
    /// Its command waits for a place or runs.
    Running,
    /// Its answer is being written (from `at`).
    Writing(Vec<u8>, usize),
}

/// One client's connection.
struct Conn {
    s: UnixStream,
    stage: Stage,
    /// When the current stage must be over (reading: the request; writing: the answer).
    deadline: Instant,
}

/// A reply's line, ready to write.
fn reply_line(r: &Reply) -> Vec<u8> {
    let mut out = json!({ "ok": r.ok, "text": r.text, "data": r.data })
        .to_string()
        .into_bytes();
    out.push(b'\n');
    out
}

/// The serving loop: one thread, every connection non-blocking in one `poll`. Reading
/// requests and writing answers happen here, so a client that sends nothing, or takes
/// nothing, holds no place and delays no other client: it meets its own deadline.
/// Commands run on the command threads (at most [`MAX_RUNNING`] at once), so a slow
/// command (a reload, a trace) does not hold up reading the next request either.
fn serve(l: &UnixListener, control: &Arc<Control>, gid: Option<u32>, stop: &Arc<AtomicBool>) {
    let wake = match netbatch_ports::sys::EventFd::new() {
        Ok(w) => Arc::new(w),
        Err(e) => {
            tracing::error!(target: "netbatch::control", "control socket: no eventfd: {e}");
            return;
        }
    };
    let (done_tx, done_rx) = mpsc::channel::<(u64, Reply)>();
    let mut conns: HashMap<u64, Conn> = HashMap::new();
    let mut waiting: VecDeque<(u64, Vec<String>)> = VecDeque::new();
    let running = Arc::new(AtomicUsize::new(0));
    let (jobs_tx, jobs_rx) = mpsc::channel::<(u64, Vec<String>)>();
    let jobs_rx = Arc::new(std::sync::Mutex::new(jobs_rx));
    let mut runners: Vec<JoinHandle<()>> = Vec::with_capacity(MAX_RUNNING);
    let mut next_id = 0u64;
    let mut fds: Vec<libc::pollfd> = Vec::new();
    let mut ids: Vec<u64> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        let soonest = conns
            .values()
            .filter(|c| !matches!(c.stage, Stage::Running))
            .map(|c| c.deadline.saturating_duration_since(now))
            .min()
            .unwrap_or(TICK)
            .min(TICK);
        fds.clear();
        ids.clear();
        let pollfd = |fd, events| libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        fds.push(pollfd(l.as_raw_fd(), libc::POLLIN));
        fds.push(pollfd(wake.fd(), libc::POLLIN));
        for (id, c) in &conns {
            let events = match c.stage {
                Stage::Reading(_) => libc::POLLIN,
                Stage::Writing(..) => libc::POLLOUT,
                Stage::Running => continue,
            };
            fds.push(pollfd(c.s.as_raw_fd(), events));
            ids.push(*id);
        }
        let ms = soonest.as_millis().clamp(1, TICK.as_millis()) as i32;
        if let Err(e) = netbatch_ports::sys::poll(&mut fds, ms) {
            tracing::warn!(target: "netbatch::control", "control socket poll: {e}");
            std::thread::sleep(TICK);
            continue;
        }
        // Answers of commands that finished.
        if fds[1].revents != 0 {
            wake.clear();
        }
        while let Ok((id, reply)) = done_rx.try_recv() {
            if let Some(c) = conns.get_mut(&id) {
                c.stage = Stage::Writing(reply_line(&reply), 0);
                c.deadline = Instant::now() + REPLY_TIME;
            }
        }
        // Each ready connection moves on.
        let now = Instant::now();
        for (k, id) in ids.iter().enumerate() {
            if fds[k + 2].revents == 0 {
                continue;
            }
            let Some(c) = conns.get_mut(id) else { continue };
            match step(c) {
                Step::Keep => {}
                Step::Close => {
                    conns.remove(id);
                }
                Step::Run(argv) => {
                    c.stage = Stage::Running;
                    waiting.push_back((*id, argv));
                }
            }
        }
        // Deadlines: a request not sent in time is answered with the limit it missed; an
        // answer not taken in time is given up.
        conns.retain(|_, c| match &c.stage {
            Stage::Reading(_) if now >= c.deadline => {
                let r = Reply::err(format!(
                    "request: no complete request line within {} s of connecting (the limit \
                     for sending a request; a request is one line of JSON, {{\"argv\": [...]}}); \
                     nothing done",
                    REQUEST_TIME.as_secs()
                ));
                c.stage = Stage::Writing(reply_line(&r), 0);
                c.deadline = now + REPLY_TIME;
                true
            }
            Stage::Writing(..) if now >= c.deadline => false,
            _ => true,
        });
        // New clients.
        if fds[0].revents != 0 {
            accept_all(l, &mut conns, &mut next_id, gid);
        }
        // Commands, in arrival order, as places free up.
        while running.load(Ordering::Acquire) < MAX_RUNNING {
            let Some((id, argv)) = waiting.pop_front() else {
                break;
            };
            if !conns.contains_key(&id) {
                continue;
            }
            let busy = running.fetch_add(1, Ordering::AcqRel);
            // Every command thread started is busy (or about to be free): one more, up
            // to MAX_RUNNING; the threads then wait for the next command and stay.
            if busy >= runners.len() {
                let (control, jobs, done, wake, running2) = (
                    control.clone(),
                    jobs_rx.clone(),
                    done_tx.clone(),
                    wake.clone(),
                    running.clone(),
                );
                let spawned = std::thread::Builder::new()
                    .name("netbatch-command".into())
                    .spawn(move || run_commands(&control, &jobs, &done, &wake, &running2));
                match spawned {
                    Ok(t) => runners.push(t),
                    Err(e) if runners.is_empty() => {
                        running.fetch_sub(1, Ordering::AcqRel);
                        tracing::warn!(target: "netbatch::control", "control socket: no thread for a command: {e}");
                        if let Some(c) = conns.get_mut(&id) {
                            let r = Reply::err(format!("no thread to run the command: {e}"));
                            c.stage = Stage::Writing(reply_line(&r), 0);
                            c.deadline = Instant::now() + REPLY_TIME;
                        }
                        continue;
                    }
                    // The command waits for one of the threads there are.
                    Err(e) => {
                        tracing::warn!(target: "netbatch::control", "control socket: no more command threads: {e}");
                    }
                }
            }
            if jobs_tx.send((id, argv)).is_err() {
                running.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
    // The command threads end when the queue closes, after the command they run.
    drop(jobs_tx);
    for t in runners {
        let _ = t.join();
    }
}

/// A command thread: runs commands from `jobs` until the queue closes, each answer sent
/// on `done` (and `wake` rung).
fn run_commands(
    control: &Control,
    jobs: &std::sync::Mutex<mpsc::Receiver<(u64, Vec<String>)>>,
    done: &mpsc::Sender<(u64, Reply)>,
    wake: &netbatch_ports::sys::EventFd,
    running: &AtomicUsize,
) {
    loop {
        let job = match jobs.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
        let Ok((id, argv)) = job else { return };
        tracing::debug!(target: "netbatch::control", "command: {}", argv.join(" "));
        let reply = control.handle(&argv);
        running.fetch_sub(1, Ordering::AcqRel);
        let _ = done.send((id, reply));
        wake.wake();
    }
}

/// Accepts every waiting client: each is checked (credentials) and read from then on;
/// beyond [`MAX_CONNECTIONS`] one is answered with the limit and closed.
fn accept_all(
    l: &UnixListener,
    conns: &mut HashMap<u64, Conn>,
    next_id: &mut u64,
    gid: Option<u32>,
) {
    loop {
        let s = match l.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::warn!(target: "netbatch::control", "control socket accept: {e}");
                return;
            }
        };
        if s.set_nonblocking(true).is_err() {
            continue;
        }
        if conns.len() >= MAX_CONNECTIONS {
            // Best effort, without waiting: the answer is short and the socket's buffer
            // is empty.
            let r = Reply::err(format!(
                "too many control connections: {MAX_CONNECTIONS} are open (the limit); \
                 try again when one has closed"
            ));
            let _ = (&s).write_all(&reply_line(&r));
            continue;
        }
        let now = Instant::now();
        let (stage, deadline) = match allowed(&s, gid) {
            Ok(()) => (Stage::Reading(Vec::new()), now + REQUEST_TIME),
            Err(why) => {
                tracing::warn!(target: "netbatch::control", "control socket: refused a client: {why}");
                (
                    Stage::Writing(reply_line(&Reply::err(why)), 0),
                    now + REPLY_TIME,
                )
            }
        };
        *next_id += 1;
        conns.insert(*next_id, Conn { s, stage, deadline });
    }
}

/// What a connection does next.
enum Step {
    Keep,
    Close,
    /// Its request was read: run it.
    Run(Vec<String>),
}

/// Reads or writes what a ready connection allows, without waiting.
fn step(c: &mut Conn) -> Step {
    let now = Instant::now();
    match &mut c.stage {
        Stage::Running => Step::Keep,
        Stage::Writing(out, at) => loop {
            match (&c.s).write(&out[*at..]) {
                Ok(0) => return Step::Close,
                Ok(n) => {
                    *at += n;
                    if *at == out.len() {
                        return Step::Close;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Step::Keep,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return Step::Close,
            }
        },
        Stage::Reading(buf) => {
            let mut chunk = [0u8; 4096];
            let mut eof = false;
            loop {
                match (&c.s).read(&mut chunk) {
                    Ok(0) => {
                        eof = true;
                        break;
                    }
                    Ok(n) => {
                        buf.extend_from_slice(&chunk[..n]);
                        if buf.contains(&b'\n') || buf.len() > REQUEST_MAX {
                            break;
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => return Step::Close,
                }
            }
            let line_end = buf.iter().position(|&b| b == b'\n');
            let answer = |c: &mut Conn, r: Reply| {
                c.stage = Stage::Writing(reply_line(&r), 0);
                c.deadline = now + REPLY_TIME;
                Step::Keep
            };
            if line_end.is_none_or(|e| e >= REQUEST_MAX) && buf.len() >= REQUEST_MAX {
                let r = Reply::err(format!(
                    "request: longer than {} KiB ({REQUEST_MAX} bytes, the limit of a \
                     request line); nothing done",
                    REQUEST_MAX >> 10
                ));
                return answer(c, r);
            }
            if line_end.is_none() && !eof {
                return Step::Keep;
            }
            if buf.is_empty() {
                // Connected and closed without a word: nothing to answer.
                return Step::Close;
            }
            let line = buf[..line_end.unwrap_or(buf.len())].to_vec();
            match parse(&line) {
                Ok(argv) => Step::Run(argv),
                Err(r) => answer(c, r),
            }
        }
    }
}

/// The words of a request line, or the answer that refuses it.
fn parse(line: &[u8]) -> Result<Vec<String>, Reply> {
    let text = std::str::from_utf8(line)
        .map_err(|_| Reply::err("request: not UTF-8; a request is one line of JSON"))?;
    let v = serde_json::from_str::<Value>(text)
        .map_err(|e| Reply::err(format!("request is not JSON: {e}")))?;
    match v["argv"].as_array() {
        Some(a) => Ok(a
            .iter()
            .filter_map(|x| x.as_str().map(str::to_string))
            .collect()),
        None => Err(Reply::err("a request is {\"argv\": [words...]}")),
    }
}

/// Whether the peer may use the socket, or why not.
fn allowed(s: &UnixStream, gid: Option<u32>) -> Result<(), String> {
    let (pid, uid, pgid) = netbatch_ports::sys::peer_cred(s.as_raw_fd())
        .map_err(|e| format!("peer credentials: {e}"))?;
    if uid == 0 || uid == netbatch_ports::sys::euid() {
        return Ok(());
    }
    if let Some(g) = gid
        && (pgid == g || groups_of(pid).contains(&g))
    {
        return Ok(());
    }
    Err(format!(
        "permission denied: uid {uid} is not root, the datapath's user{}",
        gid.map(|g| format!(" or in group {g}")).unwrap_or_default()
    ))
}

/// The supplementary groups of process `pid` (`/proc/PID/status`, `Groups:`).
fn groups_of(pid: i32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("Groups:")).map(|g| {
                g.split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect()
            })
        })
        .unwrap_or_default()
}

/// The client's side: sends `argv` to the socket at `path` and returns the reply.
pub fn request(path: &Path, argv: &[String]) -> Result<Reply, String> {
    let s = UnixStream::connect(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::PermissionDenied => format!(
            "{}: permission denied (the socket is for root, the datapath's user and its [control] group)",
            path.display()
        ),
        std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => format!(
            "{}: no netbatch is serving here (is `netbatch run` running? --socket or --config names another)",
            path.display()
        ),
        _ => format!("{}: {e}", path.display()),
    })?;
    // A reload or a trace may take a few seconds on a busy datapath.
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| e.to_string())?;
    let mut w = &s;
    // A server that refuses the peer (its credentials, the connection limit) answers at
    // once and closes, maybe before the request was written: the write then fails
    // (broken pipe) while the refusal waits to be read, and the refusal is the news.
    let sent = writeln!(w, "{}", json!({ "argv": argv }));
    let mut line = String::new();
    let read = BufReader::new(&s).read_line(&mut line);
    match (sent, read) {
        (_, Ok(n)) if n > 0 => {}
        (Err(e), _) => return Err(format!("{}: {e}", path.display())),
        (Ok(()), Ok(_)) => {
            return Err(format!("{}: closed without an answer", path.display()));
        }
        (Ok(()), Err(e)) => return Err(format!("{}: {e}", path.display())),
    }
    let v: Value =
        serde_json::from_str(&line).map_err(|e| format!("{}: bad reply: {e}", path.display()))?;
    Ok(Reply {
        ok: v["ok"].as_bool().unwrap_or(false),
        text: v["text"].as_str().unwrap_or("").to_string(),
        data: v["data"].clone(),
    })
}
