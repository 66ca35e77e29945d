//! The no-network filter, applied for real. A seccomp filter cannot be removed and would bind
//! every other test of this binary, so each test that applies it re-runs this test binary as a
//! child process (`KOSTANT_NETGUARD_CHILD=1`, just that one test) and checks the child's exit
//! status and output. Loopback addresses only.
#![cfg(any(target_os = "linux", target_os = "android"))]

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::unix::net::{UnixDatagram, UnixListener, UnixStream};
use std::process::Command;

use kostant_platform::netguard::{self, NetguardStatus};

const CHILD_ENV: &str = "KOSTANT_NETGUARD_CHILD";
const EPERM: i32 = 1;

fn in_child() -> bool {
    std::env::var_os(CHILD_ENV).is_some()
}

/// Runs `test_name` alone in a child copy of this binary; returns its stdout after asserting
/// it exited 0.
fn run_in_child(test_name: &str) -> String {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(exe)
        .args(["--exact", test_name, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "child {test_name} failed: {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    // Guard against a child that matched no test and so proved nothing.
    assert!(
        stdout.contains("1 passed"),
        "child ran no test:\n{stdout}\n{stderr}"
    );
    stdout
}

fn assert_eperm<T: std::fmt::Debug>(what: &str, r: std::io::Result<T>) {
    match r {
        Ok(v) => panic!("{what}: succeeded ({v:?}) with the network denied"),
        Err(e) => {
            assert_eq!(e.raw_os_error(), Some(EPERM), "{what}: {e}");
            assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{what}");
            println!("denied: {what}");
        }
    }
}

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("kostant-netguard-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The child's side: deny the network, then try every socket family std can open.
fn child_checks() {
    assert_eq!(netguard::status(), NetguardStatus::NotApplied);
    // A thread that exists before the filter: TSYNC must cover it too.
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let early = std::thread::spawn(move || {
        rx.recv().unwrap();
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
    });

    assert_eq!(netguard::deny_network().unwrap(), NetguardStatus::Enforced);
    assert_eq!(netguard::status(), NetguardStatus::Enforced);
    // A second call neither fails nor stacks another filter.
    assert_eq!(netguard::deny_network().unwrap(), NetguardStatus::Enforced);
    println!("netguard: enforced");

    let v4: SocketAddr = (Ipv4Addr::LOCALHOST, 9).into();
    let v6: SocketAddr = (Ipv6Addr::LOCALHOST, 9).into();
    assert_eperm("tcp connect 127.0.0.1", TcpStream::connect(v4));
    assert_eperm("tcp connect [::1]", TcpStream::connect(v6));
    assert_eperm(
        "tcp bind 127.0.0.1",
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0)),
    );
    assert_eperm(
        "tcp bind [::1]",
        TcpListener::bind((Ipv6Addr::LOCALHOST, 0)),
    );
    assert_eperm(
        "udp bind 127.0.0.1",
        UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)),
    );
    assert_eperm("udp bind [::1]", UdpSocket::bind((Ipv6Addr::LOCALHOST, 0)));
    tx.send(()).unwrap();
    assert_eperm(
        "tcp bind on a thread made before the filter",
        early.join().unwrap(),
    );
    let later = std::thread::spawn(|| UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)));
    assert_eperm(
        "udp bind on a thread made after the filter",
        later.join().unwrap(),
    );

    // Local sockets and files still work.
    let (a, b) = UnixDatagram::pair().unwrap();
    a.send(b"ping").unwrap();
    let mut buf = [0u8; 8];
    let n = b.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"ping");
    println!("allowed: unix datagram pair");

    let dir = temp_dir("child");
    let sock = dir.join("s");
    let listener = UnixListener::bind(&sock).unwrap();
    let mut client = UnixStream::connect(&sock).unwrap();
    let (mut server, _) = listener.accept().unwrap();
    client.write_all(b"hello").unwrap();
    drop(client);
    let mut got = String::new();
    server.read_to_string(&mut got).unwrap();
    assert_eq!(got, "hello");
    println!("allowed: unix listener");

    let file = dir.join("f.txt");
    std::fs::write(&file, "still writable").unwrap();
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "still writable");
    std::fs::remove_dir_all(&dir).unwrap();
    println!("allowed: file io");

    // Every address family number the kernel could know, in every socket type: only AF_UNIX
    // may open. (std only reaches inet and unix sockets; netlink, packet, bluetooth, vsock and
    // the rest are checked here through the raw call.)
    let mut denied = 0;
    for family in 0..64 {
        for ty in [
            libc::SOCK_STREAM,
            libc::SOCK_DGRAM,
            libc::SOCK_SEQPACKET,
            libc::SOCK_RAW,
        ] {
            let result = raw_socket(family, ty);
            if family == libc::AF_UNIX {
                continue;
            }
            assert_eq!(result, Err(EPERM), "family {family} type {ty}");
            denied += 1;
        }
    }
    assert!(raw_socket(libc::AF_UNIX, libc::SOCK_DGRAM).is_ok());
    println!("denied: all {denied} non-unix family and type pairs");
}

/// `socket(family, ty, 0)`: Ok if a descriptor came back (then closed), else the errno.
fn raw_socket(family: i32, ty: i32) -> Result<(), i32> {
    // SAFETY: socket() takes plain integers and returns a new descriptor or -1; it touches no
    // memory of ours.
    let fd = unsafe { libc::socket(family, ty, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
    }
    // SAFETY: fd was just returned by socket() and is owned by nothing else.
    unsafe { libc::close(fd) };
    Ok(())
}

#[test]
fn the_filter_denies_inet_sockets_and_keeps_unix_sockets_and_files() {
    if in_child() {
        child_checks();
        return;
    }
    let out = run_in_child("the_filter_denies_inet_sockets_and_keeps_unix_sockets_and_files");
    for line in [
        "netguard: enforced",
        "denied: tcp connect 127.0.0.1",
        "denied: tcp connect [::1]",
        "denied: tcp bind 127.0.0.1",
        "denied: tcp bind [::1]",
        "denied: udp bind 127.0.0.1",
        "denied: udp bind [::1]",
        "denied: tcp bind on a thread made before the filter",
        "denied: udp bind on a thread made after the filter",
        "allowed: unix datagram pair",
        "allowed: unix listener",
        "allowed: file io",
        "denied: all 252 non-unix family and type pairs",
    ] {
        assert!(
            out.contains(line),
            "missing {line:?} in child output:\n{out}"
        );
    }
}

/// The filter is inherited by child processes: a program the guarded process starts has no
/// network either.
#[test]
fn a_process_started_after_the_filter_inherits_it() {
    if in_child() {
        if std::env::var_os("KOSTANT_NETGUARD_GRANDCHILD").is_some() {
            // Started by a guarded parent: do not call deny_network here.
            assert_eq!(netguard::status(), NetguardStatus::NotApplied);
            assert_eperm(
                "tcp bind in a grandchild",
                TcpListener::bind((Ipv4Addr::LOCALHOST, 0)),
            );
            return;
        }
        netguard::deny_network().unwrap();
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "a_process_started_after_the_filter_inherits_it",
                "--nocapture",
            ])
            .env("KOSTANT_NETGUARD_GRANDCHILD", "1")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{stdout}");
        assert!(
            stdout.contains("denied: tcp bind in a grandchild"),
            "{stdout}"
        );
        println!("grandchild: denied");
        return;
    }
    let out = run_in_child("a_process_started_after_the_filter_inherits_it");
    assert!(out.contains("grandchild: denied"), "{out}");
}

/// Control: without the filter the same loopback socket opens, so what blocks it in the child
/// is the filter, not the machine.
#[test]
fn without_the_filter_loopback_sockets_open() {
    if in_child() {
        // The child's own copy of this test must not run the checks below inside a filtered
        // process; it never does, as the child is always started for one other test.
        return;
    }
    assert_eq!(netguard::status(), NetguardStatus::NotApplied);
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let addr = listener.local_addr().unwrap();
    let _client = TcpStream::connect(addr).unwrap();
    UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    // A non-inet family that an unprivileged process can open: the child's EPERM for it is
    // the filter's doing.
    assert_eq!(raw_socket(libc::AF_NETLINK, libc::SOCK_RAW), Ok(()));
}
