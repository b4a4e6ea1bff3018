// SPDX-License-Identifier: GPL-2.0-only
//! The `trapeze-nic` program as a user runs it: a live control socket is never taken over
//! (a stale one is) and a gmsd daemon's is named as such, SIGINT/SIGTERM remove the sockets
//! and exit 0, bad names and explicit paths in missing directories are refused before
//! anything is created, and `trapeze-nic status` reports a running NIC or says clearly
//! that none answers.

use std::fs::File;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};
use trapeze_vnic::control::{check_name, ControlClient, Request};

const NIC: &str = env!("CARGO_BIN_EXE_trapeze-nic");
/// Longest wait for a NIC to come up, answer or exit.
const WAIT: Duration = Duration::from_secs(20);

/// A scratch directory and the NIC processes started in it: the processes are killed
/// and the directory removed whatever happens.
struct Scratch {
    dir: PathBuf,
    children: Vec<Child>,
}

impl Scratch {
    fn new(test: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("trapeze-nic-cli-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch { dir, children: Vec::new() }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// A `trapeze-nic` command with the runtime directory inside the scratch directory,
    /// so a default socket path never leaves it.
    fn command(&self) -> Command {
        let mut c = Command::new(NIC);
        c.env("XDG_RUNTIME_DIR", self.path("run")).env_remove("RUST_LOG").stdin(Stdio::null());
        c
    }

    /// Start a NIC with `args` after its name, node and a UDP link on a free port; its
    /// stderr goes to `LOG` in the scratch directory. Returns its index and the log path.
    fn start(&mut self, name: &str, args: &[&str]) -> (usize, PathBuf) {
        let log = self.path(&format!("{name}-{}.log", self.children.len()));
        let child = self
            .command()
            .args(["--name", name, "--node", "0", "--link", "udp:127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(File::create(&log).unwrap())
            .spawn()
            .expect("spawning trapeze-nic");
        self.children.push(child);
        (self.children.len() - 1, log)
    }

    /// Run `trapeze-nic ARGS` to completion (bounded).
    fn run(&self, args: &[&str]) -> Output {
        let out = self.path("run-out");
        let err = self.path("run-err");
        let mut child = self
            .command()
            .args(args)
            .stdout(File::create(&out).unwrap())
            .stderr(File::create(&err).unwrap())
            .spawn()
            .expect("spawning trapeze-nic");
        let status = wait_exit(&mut child, WAIT);
        Output { status, stdout: std::fs::read(&out).unwrap(), stderr: std::fs::read(&err).unwrap() }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Wait up to `limit` for `child` to exit (killed and a panic past that).
fn wait_exit(child: &mut Child, limit: Duration) -> ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("trapeze-nic did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Wait until the NIC at `sock` answers a status request; the answer's `status`.
fn wait_answering(sock: &Path, child: &mut Child, log: &Path) -> serde_json::Value {
    let t0 = Instant::now();
    loop {
        if let Ok(v) = ControlClient::connect(sock).and_then(|c| c.request(&Request::Status)) {
            return v["status"].clone();
        }
        if let Some(st) = child.try_wait().unwrap() {
            panic!("trapeze-nic exited ({st}) before answering:\n{}", text(&std::fs::read(log).unwrap()));
        }
        assert!(t0.elapsed() < WAIT, "trapeze-nic did not answer on {} within {WAIT:?}", sock.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A socket file nobody listens on, as a NIC that was killed leaves it.
fn stale_socket(path: &Path) {
    drop(std::os::unix::net::UnixListener::bind(path).unwrap());
    assert!(path.exists());
}

#[test]
fn a_second_nic_on_a_live_socket_is_refused_and_the_first_still_answers() {
    let mut s = Scratch::new("live");
    let sock = s.path("n.sock");
    let sock_arg = sock.to_str().unwrap().to_string();
    let (i, log) = s.start("first", &["--control", &sock_arg]);
    wait_answering(&sock, &mut s.children[i], &log);

    let out = s.run(&["--name", "second", "--node", "1", "--link", "udp:127.0.0.1:0", "--control", &sock_arg]);
    let err = text(&out.stderr);
    assert!(!out.status.success(), "the second NIC must fail: {err}");
    assert!(err.contains(&sock_arg) && err.contains("a NIC is serving it"), "unclear refusal: {err}");

    // The same for the default path of a name in use.
    let (j, log_j) = s.start("dup", &[]);
    let dup_sock = s.path("run/trapeze/dup.sock");
    wait_answering(&dup_sock, &mut s.children[j], &log_j);
    let out = s.run(&["--name", "dup", "--node", "1", "--link", "udp:127.0.0.1:0"]);
    let err = text(&out.stderr);
    assert!(!out.status.success() && err.contains("a NIC is serving it"), "dup name not refused: {err}");

    // Both first NICs still run and answer as themselves.
    for (k, path, name) in [(i, &sock, "first"), (j, &dup_sock, "dup")] {
        assert!(s.children[k].try_wait().unwrap().is_none(), "{name} must still run");
        let st = ControlClient::connect(path).unwrap().request(&Request::Status).unwrap();
        assert_eq!(st["status"]["name"], name);
    }
    let out = s.run(&["status", "dup"]);
    assert!(out.status.success(), "status dup: {}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(shown.starts_with("NIC dup "), "status names the NIC: {shown}");
    // What the link refused, each by name (zero or not): replays, stale incarnations,
    // forged trailers, MAC failures, the rest.
    for c in trapeze_firmware::iface::layout::LinkCounter::ALL {
        assert!(shown.contains(&format!("\n    {} ", c.name())), "status shows {}: {shown}", c.name());
    }
}

#[test]
fn a_stale_socket_is_replaced_with_a_log_line_and_logs_have_no_colour() {
    let mut s = Scratch::new("stale");
    let sock = s.path("n.sock");
    stale_socket(&sock);
    let out = s.run(&["status", "--control", sock.to_str().unwrap()]);
    let err = text(&out.stderr);
    assert!(!out.status.success() && err.contains("nothing answers"), "status on a stale socket: {err}");

    let (i, log) = s.start("n", &["--control", sock.to_str().unwrap()]);
    wait_answering(&sock, &mut s.children[i], &log);
    let log_text = text(&std::fs::read(&log).unwrap());
    assert!(
        log_text.contains("replacing the stale control socket") && log_text.contains(sock.to_str().unwrap()),
        "no log line about the stale socket:\n{log_text}"
    );
    assert!(!log_text.contains('\x1b'), "ANSI escapes in a log that is not a terminal:\n{log_text:?}");
}

#[test]
fn sigterm_and_sigint_remove_the_sockets_and_exit_zero() {
    let mut s = Scratch::new("signal");
    for (k, sig) in [rustix::process::Signal::TERM, rustix::process::Signal::INT].into_iter().enumerate() {
        let sock = s.path(&format!("n{k}.sock"));
        let ivs = s.path(&format!("n{k}.ivshmem.sock"));
        let (i, log) =
            s.start(&format!("n{k}"), &["--control", sock.to_str().unwrap(), "--ivshmem", ivs.to_str().unwrap()]);
        wait_answering(&sock, &mut s.children[i], &log);
        assert!(ivs.exists(), "the ivshmem socket is there while the NIC runs");
        let pid = rustix::process::Pid::from_raw(s.children[i].id() as i32).unwrap();
        rustix::process::kill_process(pid, sig).unwrap();
        let st = wait_exit(&mut s.children[i], WAIT);
        let log_text = text(&std::fs::read(&log).unwrap());
        assert!(st.success(), "{sig:?} must end the NIC with status 0, got {st}:\n{log_text}");
        assert!(!sock.exists(), "{sig:?} left the control socket behind");
        assert!(!ivs.exists(), "{sig:?} left the ivshmem socket behind");
        assert!(log_text.contains("removing the control socket"), "no log line about the exit:\n{log_text}");
    }
    // The default path too (the default directory is created, the socket removed).
    let (i, log) = s.start("dflt", &[]);
    let sock = s.path("run/trapeze/dflt.sock");
    wait_answering(&sock, &mut s.children[i], &log);
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(s.children[i].id() as i32).unwrap(),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    assert!(wait_exit(&mut s.children[i], WAIT).success());
    assert!(!sock.exists(), "SIGTERM left the default control socket behind");
}

#[test]
fn bad_names_are_refused_with_the_reason() {
    let s = Scratch::new("names");
    let long = "n".repeat(65);
    let cases: [(&str, &str); 8] = [
        ("", "empty"),
        ("../../etc/evil", "contains '/'"),
        ("a/b", "not a path"),
        (".", "starts with '.'"),
        ("..", "starts with '.'"),
        (".hidden", "starts with '.'"),
        ("a b", "contains ' '"),
        (&long, "over the limit of 64"),
    ];
    for (name, why) in cases {
        let out = s.run(&["--name", name, "--node", "0", "--link", "udp:127.0.0.1:0"]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "name {name:?} must be refused: {err}");
        assert!(err.contains("NIC name") && err.contains(why), "name {name:?}: the reason should say {why:?}: {err}");
        let out = s.run(&["status", name]);
        assert_eq!(out.status.code(), Some(1), "status {name:?} must be refused: {}", text(&out.stderr));
    }
    assert!(check_name("a\0b").unwrap_err().to_string().contains("NUL"));
    for good in ["n0", "vm123-g4", "node_7.test", &"n".repeat(64)] {
        check_name(good).unwrap();
    }
    // Nothing was created for any of them: not even the default socket directory.
    assert!(!s.path("run").exists(), "a refused name created the socket directory");
    assert!(!Path::new("/etc/evil.sock").exists());
}

#[test]
fn an_explicit_path_in_a_missing_directory_is_refused_and_nothing_is_created() {
    let s = Scratch::new("missing");
    let missing = s.path("missing");
    let ctl = missing.join("sub/n.sock");
    let out = s.run(&["--name", "n", "--node", "0", "--link", "udp:127.0.0.1:0", "--control", ctl.to_str().unwrap()]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(ctl.to_str().unwrap()) && err.contains("does not exist"), "unclear: {err}");

    let good = s.path("n.sock");
    let ivs = missing.join("ivs.sock");
    let out = s.run(&[
        "--name",
        "n",
        "--node",
        "0",
        "--link",
        "udp:127.0.0.1:0",
        "--control",
        good.to_str().unwrap(),
        "--ivshmem",
        ivs.to_str().unwrap(),
    ]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("ivshmem socket") && err.contains("does not exist"), "unclear: {err}");
    // A file that is not a socket is never replaced.
    let file = s.path("notes.txt");
    std::fs::write(&file, "keep me").unwrap();
    let out = s.run(&["--name", "n", "--node", "0", "--link", "udp:127.0.0.1:0", "--control", file.to_str().unwrap()]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("is not a socket"), "unclear: {err}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");

    assert!(!missing.exists(), "a directory was created for an explicit path");
    assert!(!good.exists(), "the control socket was left behind by a failed start");
    assert!(!s.path("run").exists(), "the default directory was created for explicit paths");
}

#[test]
fn status_prints_the_firmware_version_node_and_counters() {
    let mut s = Scratch::new("status");
    let sock = s.path("n.sock");
    let (i, log) = s.start("stat", &["--control", sock.to_str().unwrap()]);
    let st = wait_answering(&sock, &mut s.children[i], &log);
    let version = st["fw_version"].as_str().unwrap().to_string();
    assert!(!version.is_empty());

    // `--timeout-s`, as gms spells it; `--timeout` stays as an alias.
    let out = s.run(&["status", "--timeout-s", "5", "--control", sock.to_str().unwrap()]);
    let o = text(&out.stdout);
    assert!(out.status.success(), "status failed: {}", text(&out.stderr));
    assert!(o.starts_with("NIC stat "), "{o}");
    assert!(o.contains(&format!("version {version}")), "no firmware version {version}:\n{o}");
    assert!(o.contains("mode native"), "no mode:\n{o}");
    assert!(o.contains(&format!("build id {}", st["fw_build_id"].as_str().unwrap())), "no build id:\n{o}");
    assert!(o.lines().any(|l| l.split_whitespace().eq(["node", "0"])), "no node:\n{o}");
    assert!(o.lines().any(|l| l.trim_start().starts_with("tx_packets")), "no counters:\n{o}");
    let uptime = o.lines().find_map(|l| l.trim_start().strip_prefix("uptime")).expect("an uptime line");
    let mut w = uptime.split_whitespace();
    let (num, unit) = (w.next().unwrap(), w.next().unwrap().trim_end_matches(','));
    assert!(num.parse::<f64>().is_ok() && ["µs", "ms", "s"].contains(&unit), "uptime not for humans:\n{o}");

    let out = s.run(&["status", "--json", "--timeout", "5", "--control", sock.to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("--json prints JSON");
    assert_eq!(v["fw_version"], version.as_str());
    assert_eq!(v["node"], 0);
}

#[test]
fn status_of_a_missing_nic_is_a_clear_error() {
    let s = Scratch::new("nostatus");
    let sock = s.path("none.sock");
    let out = s.run(&["status", "--control", sock.to_str().unwrap()]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("no NIC control socket at") && err.contains(sock.to_str().unwrap()), "unclear: {err}");
    assert!(out.stdout.is_empty());

    let out = s.run(&["status", "ghost"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(s.path("run/trapeze/ghost.sock").to_str().unwrap()), "the default path is named: {err}");

    let out = s.run(&["status"]);
    assert_eq!(out.status.code(), Some(2), "status without a NIC is a usage error");
}

/// Settings that cannot work are refused in words before a socket is made: this NIC's own
/// id or a node twice as a peer, `--status-every` outside its range, a control socket in a
/// directory every user can write without the sticky bit.
#[test]
fn settings_that_cannot_work_are_refused_in_words() {
    let s = Scratch::new("settings");
    let ctl = s.path("n.sock");
    let start = |ctl: &Path, extra: &[&str]| -> (Option<i32>, String) {
        let base = ["--name", "n", "--node", "3", "--link", "udp:127.0.0.1:0", "--control", ctl.to_str().unwrap()];
        let out = s.run(&[&base[..], extra].concat());
        (out.status.code(), text(&out.stderr))
    };
    let (code, e) = start(&ctl, &["--peer", "3=127.0.0.1:9"]);
    assert_eq!(code, Some(1), "{e}");
    assert!(e.contains("--peer 3=127.0.0.1:9: 3 is this NIC's own node id (--node 3)"), "{e}");
    let (code, e) = start(&ctl, &["--peer", "1=127.0.0.1:9", "--peer", "1=127.0.0.1:10"]);
    assert_eq!(code, Some(1), "{e}");
    assert!(e.contains("node 1 is already a peer (--peer 1=127.0.0.1:9)"), "{e}");
    let (code, e) = start(&ctl, &["--status-every", "0"]);
    assert_eq!(code, Some(2), "{e}");
    assert!(e.contains("--status-every") && e.contains("1..=86400") && !e.contains("18446744073709551615"), "{e}");
    assert!(!ctl.exists(), "a socket was made for a refused start");
    let open = s.path("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (code, e) = start(&open.join("n.sock"), &[]);
    assert_eq!(code, Some(1), "{e}");
    assert!(e.contains("mode 0777") && e.contains("no sticky bit") && e.contains("chmod +t"), "{e}");
    assert!(!open.join("n.sock").exists());
}

/// NICs and gmsd daemons share the default socket directory: a NIC named after a daemon's
/// socket (`--name gmsd-1`) is told a daemon serves it (a stream socket, not a NIC's).
#[test]
fn a_name_taken_by_a_gmsd_socket_is_refused_naming_gmsd() {
    let s = Scratch::new("gmsd");
    let dir = s.path("run/trapeze");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let _gmsd = std::os::unix::net::UnixListener::bind(dir.join("gmsd-1.sock")).unwrap();
    let out = s.run(&["--name", "gmsd-1", "--node", "0", "--link", "udp:127.0.0.1:0"]);
    let e = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{e}");
    assert!(e.contains("in use by something else: a gmsd daemon or a NIC's ivshmem server is serving it"), "{e}");
    assert!(!e.contains("a NIC is serving it"), "{e}");
    // `status` says the same of the daemon's socket, and of a file that is no socket.
    let out = s.run(&["status", "gmsd-1"]);
    let e = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{e}");
    assert!(e.contains("gmsd-1.sock is not a NIC control socket: a gmsd daemon"), "{e}");
    let file = s.path("page.bin");
    std::fs::write(&file, b"x").unwrap();
    let out = s.run(&["status", "--control", file.to_str().unwrap()]);
    let e = text(&out.stderr);
    assert!(e.contains("page.bin is not a socket but a regular file") && !e.contains("no longer running"), "{e}");
}
