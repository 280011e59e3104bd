//! The control socket: a Unix stream socket `netbatch run` serves on its own thread.
//!
//! One request per connection: a JSON line `{"argv": ["show", "runtime"]}`, answered by
//! one JSON line `{"ok": true, "text": "...", "data": {...}}` ([`super::Reply`]).
//!
//! Who may connect: the socket file is mode 0600 (0660 with a configured group, owned by
//! that group), so the kernel refuses other users at `connect`; each accepted
//! connection's peer credentials (`SO_PEERCRED`) are checked again (root, our own user,
//! or a member of the group), so a socket file whose mode was changed by hand still
//! refuses them, with a reason.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

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

/// How often the accept loop looks at the stop flag.
const TICK: Duration = Duration::from_millis(20);

/// Connections served at once; more wait in the listen queue.
const MAX_CLIENTS: usize = 8;

/// How long a client has to send its whole request.
const REQUEST_TIME: Duration = Duration::from_secs(2);

/// Longest request line.
const REQUEST_MAX: u64 = 64 << 10;

fn serve(l: &UnixListener, control: &Arc<Control>, gid: Option<u32>, stop: &Arc<AtomicBool>) {
    let busy = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    while !stop.load(Ordering::Relaxed) {
        if busy.load(Ordering::Acquire) >= MAX_CLIENTS {
            std::thread::sleep(TICK);
            continue;
        }
        match l.accept() {
            Ok((s, _)) => {
                // Each client on its own thread: a slow one holds up nobody, and the
                // server's stop does not wait for it.
                let (control, busy2) = (control.clone(), busy.clone());
                busy.fetch_add(1, Ordering::AcqRel);
                let spawned = std::thread::Builder::new()
                    .name("netbatch-client".into())
                    .spawn(move || {
                        if let Err(e) = one(s, &control, gid) {
                            tracing::debug!(target: "netbatch::control", "control connection: {e}");
                        }
                        busy2.fetch_sub(1, Ordering::AcqRel);
                    });
                if let Err(e) = spawned {
                    busy.fetch_sub(1, Ordering::AcqRel);
                    tracing::warn!(target: "netbatch::control", "control socket: no thread for a client: {e}");
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(TICK),
            Err(e) => {
                tracing::warn!(target: "netbatch::control", "control socket accept: {e}");
                std::thread::sleep(TICK);
            }
        }
    }
}

/// Reads one request line within [`REQUEST_TIME`] overall and [`REQUEST_MAX`] bytes.
fn read_request(s: &UnixStream) -> std::io::Result<String> {
    let deadline = std::time::Instant::now() + REQUEST_TIME;
    let mut buf = Vec::new();
    let mut r = std::io::Read::take(s, REQUEST_MAX);
    let mut chunk = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "request not sent in time",
            ));
        }
        s.set_read_timeout(Some(left))?;
        let n = std::io::Read::read(&mut r, &mut chunk)?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.contains(&b'\n') {
            break;
        }
    }
    let line = buf.split(|&b| b == b'\n').next().unwrap_or(&[]);
    String::from_utf8(line.to_vec())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "request is not UTF-8"))
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

fn one(s: UnixStream, control: &Control, gid: Option<u32>) -> std::io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_write_timeout(Some(Duration::from_secs(5)))?;
    let reply = match allowed(&s, gid) {
        Err(why) => {
            tracing::warn!(target: "netbatch::control", "control socket: refused a client: {why}");
            Reply::err(why)
        }
        Ok(()) => match read_request(&s) {
            Err(e) => Reply::err(format!("request: {e}")),
            Ok(line) => match serde_json::from_str::<Value>(&line) {
                Ok(v) => match v["argv"].as_array() {
                    Some(a) => {
                        let argv: Vec<String> = a
                            .iter()
                            .filter_map(|x| x.as_str().map(str::to_string))
                            .collect();
                        tracing::debug!(target: "netbatch::control", "command: {}", argv.join(" "));
                        control.handle(&argv)
                    }
                    None => Reply::err("a request is {\"argv\": [words...]}"),
                },
                Err(e) => Reply::err(format!("request is not JSON: {e}")),
            },
        },
    };
    let mut w = &s;
    let out = json!({ "ok": reply.ok, "text": reply.text, "data": reply.data });
    writeln!(w, "{out}")?;
    w.flush()
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
    writeln!(w, "{}", json!({ "argv": argv })).map_err(|e| e.to_string())?;
    let mut line = String::new();
    BufReader::new(&s)
        .read_line(&mut line)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let v: Value =
        serde_json::from_str(&line).map_err(|e| format!("{}: bad reply: {e}", path.display()))?;
    Ok(Reply {
        ok: v["ok"].as_bool().unwrap_or(false),
        text: v["text"].as_str().unwrap_or("").to_string(),
        data: v["data"].clone(),
    })
}
