//! `kostant doctor`: checks the promises this build makes on this device (the network is
//! denied, local sockets and files still work, the model is the one the manifest names, the
//! history key is private) and reports the CPU path and the default thread count. Exits
//! non-zero if a required check fails.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use clap::Args;
use serde_json::json;

use kostant_platform::netguard::{self, NetguardStatus};

#[derive(Args, Debug)]
pub struct DoctorArgs {
    /// GGUF model to check (default: the one `kostant chat` would run).
    #[arg(long, env = "KOSTANT_MODEL")]
    pub model: Option<PathBuf>,
    /// Print one JSON object.
    ///
    /// {"ok": bool, "checks": [{"name", "ok", "required", "detail"}], "privacy": {...}}: the
    /// privacy facts are Settings' Privacy section (network, permissions, backups, keyboard,
    /// screenshots, where the data and key live, what protects the key, sizes).
    #[arg(long)]
    pub json: bool,
    /// Where the history lives (for the privacy facts).
    ///
    /// Default: $XDG_DATA_HOME/kostant or ~/.local/share/kostant.
    #[arg(long, env = "KOSTANT_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
}

/// One line of the report. A check that is not `required` informs without failing the run.
struct Check {
    name: &'static str,
    ok: bool,
    required: bool,
    detail: String,
}

/// The network denial is a promise only where the OS lets a process enforce it on itself.
const NETWORK_DENIAL_ENFORCEABLE: bool = cfg!(any(target_os = "linux", target_os = "android"));

pub fn run(args: DoctorArgs) -> Result<()> {
    let checks = vec![
        netguard_check(),
        network_denied_check(),
        local_io_check(),
        model_check(args.model.as_deref()),
        Check {
            name: "cpu",
            ok: true,
            required: false,
            detail: kostant_kernels::cpu_features().to_string(),
        },
        Check {
            name: "threads",
            ok: true,
            required: false,
            detail: format!(
                "{} by default: the performance cores of {} usable",
                kostant_platform::cpu::performance_cores(),
                std::thread::available_parallelism().map_or(1, |n| n.get())
            ),
        },
        key_storage_check(),
    ];
    let data_dir = crate::history::data_dir(args.data_dir.as_deref()).ok();
    let privacy = kostant_app::privacy::gather(data_dir.as_deref(), None);
    let failed: Vec<&str> = checks
        .iter()
        .filter(|c| c.required && !c.ok)
        .map(|c| c.name)
        .collect();
    if args.json {
        let items: Vec<_> = checks
            .iter()
            .map(
                |c| json!({"name": c.name, "ok": c.ok, "required": c.required, "detail": c.detail}),
            )
            .collect();
        println!(
            "{}",
            json!({"ok": failed.is_empty(), "checks": items, "privacy": privacy.to_json()})
        );
    } else {
        for c in &checks {
            let mark = match (c.ok, c.required) {
                (true, _) => "ok  ",
                (false, true) => "FAIL",
                (false, false) => "note",
            };
            println!("{mark}  {:<16} {}", c.name, c.detail);
        }
        println!("privacy");
        for (what, value) in privacy.lines() {
            println!("      {what:<16} {value}");
        }
    }
    if !failed.is_empty() {
        bail!("required checks failed: {}", failed.join(", "));
    }
    Ok(())
}

fn netguard_check() -> Check {
    let status = netguard::status();
    Check {
        name: "netguard",
        ok: status == NetguardStatus::Enforced,
        required: NETWORK_DENIAL_ENFORCEABLE,
        detail: status.to_string(),
    }
}

/// Tries to open internet sockets on loopback (never another address). Each attempt must fail
/// with EPERM, the filter's answer; any other error (say, no IPv6 on this machine) would not
/// prove the filter is there.
fn network_denied_check() -> Check {
    use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, UdpSocket};
    let v4: SocketAddr = (Ipv4Addr::LOCALHOST, 9).into();
    let v6: SocketAddr = (Ipv6Addr::LOCALHOST, 9).into();
    let attempts: [(&str, std::io::Result<()>); 4] = [
        ("tcp 127.0.0.1", TcpStream::connect(v4).map(drop)),
        (
            "udp 127.0.0.1",
            UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).map(drop),
        ),
        ("tcp [::1]", TcpStream::connect(v6).map(drop)),
        (
            "udp [::1]",
            UdpSocket::bind((Ipv6Addr::LOCALHOST, 0)).map(drop),
        ),
    ];
    let mut ok = true;
    let mut parts = Vec::new();
    for (what, result) in attempts {
        match result {
            Err(e) if e.raw_os_error() == Some(1) => parts.push(format!("{what}: EPERM")),
            Err(e) => {
                ok = false;
                parts.push(format!("{what}: failed but not with EPERM ({e})"));
            }
            Ok(()) => {
                ok = false;
                parts.push(format!("{what}: OPENED"));
            }
        }
    }
    Check {
        name: "network denied",
        ok,
        required: NETWORK_DENIAL_ENFORCEABLE,
        detail: parts.join("; "),
    }
}

/// The filter must leave local IPC and the file system alone.
fn local_io_check() -> Check {
    match local_io() {
        Ok(detail) => Check {
            name: "local io",
            ok: true,
            required: true,
            detail,
        },
        Err(e) => Check {
            name: "local io",
            ok: false,
            required: true,
            detail: format!("{e:#}"),
        },
    }
}

fn local_io() -> Result<String> {
    use anyhow::Context;
    let dir = std::env::temp_dir().join(format!("kostant-doctor-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    let result = (|| -> Result<String> {
        let file = dir.join("probe.txt");
        std::fs::write(&file, "kostant").context("temp file write")?;
        if std::fs::read_to_string(&file).context("temp file read")? != "kostant" {
            bail!("temp file read back different bytes");
        }
        #[cfg(unix)]
        {
            use std::io::{Read, Write};
            use std::os::unix::net::{UnixDatagram, UnixListener, UnixStream};
            let (a, b) = UnixDatagram::pair().context("unix datagram pair")?;
            a.send(b"ping").context("unix datagram send")?;
            let mut buf = [0u8; 4];
            b.recv(&mut buf).context("unix datagram recv")?;
            let sock = dir.join("probe.sock");
            let listener = UnixListener::bind(&sock).context("unix listener bind")?;
            let mut client = UnixStream::connect(&sock).context("unix stream connect")?;
            let (mut server, _) = listener.accept().context("unix listener accept")?;
            client.write_all(b"pong").context("unix stream write")?;
            drop(client);
            let mut got = Vec::new();
            server.read_to_end(&mut got).context("unix stream read")?;
            if &buf != b"ping" || got != b"pong" {
                bail!("unix sockets delivered different bytes");
            }
            Ok("unix datagram pair, unix listener, temp file read/write".into())
        }
        #[cfg(not(unix))]
        Ok("temp file read/write".into())
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// The model `chat` would run: verified against the manifest when it is a manifest file,
/// otherwise its sha256 is reported.
fn model_check(explicit: Option<&Path>) -> Check {
    let fail = |detail: String| Check {
        name: "model",
        ok: false,
        required: true,
        detail,
    };
    let path = match crate::model_path::resolve(explicit) {
        Ok(p) => p,
        Err(e) => return fail(format!("{e:#}")),
    };
    let manifest = match kostant_assets::ModelManifest::builtin() {
        Ok(m) => m,
        Err(e) => return fail(e.to_string()),
    };
    let file_name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let entry = manifest.models.iter().find(|m| m.file == file_name);
    match entry {
        Some(entry) => match kostant_assets::verify_model_file(&path, entry) {
            Ok(()) => Check {
                name: "model",
                ok: true,
                required: true,
                detail: format!(
                    "{}: size and sha256 match the manifest ({}, {})",
                    path.display(),
                    entry.id,
                    entry.sha256
                ),
            },
            Err(e) => fail(e.to_string()),
        },
        None => match kostant_assets::sha256_file(&path) {
            Ok(sha) => Check {
                name: "model",
                ok: true,
                required: true,
                detail: format!("{}: not in the manifest; sha256 {sha}", path.display()),
            },
            Err(e) => fail(e.to_string()),
        },
    }
}

/// Where the key that encrypts the chat history lives, and that no one else can read it (the
/// key store refuses such a key too; here it is a failed check, not a surprise later).
fn key_storage_check() -> Check {
    use kostant_platform::keystore::FileKeyStore;
    let check = |ok, required, detail| Check {
        name: "key storage",
        ok,
        required,
        detail,
    };
    let dir = match FileKeyStore::default_dir() {
        Ok(d) => d,
        Err(e) => return check(false, false, format!("no key directory: {e}")),
    };
    let path = FileKeyStore::new(dir).key_path();
    match std::fs::metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => check(
            true,
            false,
            format!(
                "file key store; no key yet at {} (made with the first saved chat)",
                path.display()
            ),
        ),
        Err(e) => check(false, true, format!("{}: {e}", path.display())),
        Ok(meta) => {
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                let mode = meta.permissions().mode() & 0o777;
                if mode & 0o077 != 0 {
                    return check(
                        false,
                        true,
                        format!(
                            "{} is readable by other users (mode {mode:o}, must be 600)",
                            path.display()
                        ),
                    );
                }
            }
            check(
                true,
                false,
                format!(
                    "file key store; key at {} ({} bytes, private to this user)",
                    path.display(),
                    meta.len()
                ),
            )
        }
    }
}
