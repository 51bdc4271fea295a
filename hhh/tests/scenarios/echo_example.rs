//! The shipped echo service (`examples/udp_echo.rs`) run as a user runs it,
//! against a hostile datagram: one from source port 0, which Linux delivers
//! but will not answer (`sendto` fails with `EINVAL`). A serve loop that
//! stops on a failed reply is stopped by anyone who can spoof one packet.
//!
//! Needs a raw socket (root or `CAP_NET_RAW`); without one it says so and
//! passes, as the kernel tests do. Linux only; loopback only. It runs the
//! example binary `cargo test` builds for the package; `--test
//! echo_example` alone does not rebuild it.
#![cfg(all(target_os = "linux", feature = "tokio"))]

use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The example's binary, which `cargo test` builds beside the tests.
fn example() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let target = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>");
    let path = target.join("examples").join("udp_echo");
    assert!(
        path.exists(),
        "{} not built: run through `cargo test`",
        path.display()
    );
    path
}

/// Kills the service when the test ends, however it ends.
struct Service(Child);

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An IPv4/UDP datagram from `127.0.0.1:0` to `to`, with the UDP checksum
/// left out (zero, allowed over IPv4).
fn from_port_zero(to: SocketAddrV4, payload: &[u8]) -> Vec<u8> {
    let total = 20 + 8 + payload.len();
    let mut p = vec![0u8; total];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[8] = 64;
    p[9] = libc::IPPROTO_UDP as u8;
    p[12..16].copy_from_slice(&Ipv4Addr::LOCALHOST.octets());
    p[16..20].copy_from_slice(&to.ip().octets());
    // Source port 0, then the destination port, the length, no checksum.
    p[22..24].copy_from_slice(&to.port().to_be_bytes());
    p[24..26].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    p[28..].copy_from_slice(payload);
    p
}

/// Send `packet` (a whole IPv4 datagram, header included) through a raw
/// socket; `false` when this process may not open one.
fn send_raw(packet: &[u8], to: SocketAddrV4) -> bool {
    // SAFETY: plain socket calls on a descriptor this function owns and
    // closes; the address and buffer outlive the calls.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_RAW);
        if fd < 0 {
            return false;
        }
        let addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: 0,
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes(to.ip().octets()),
            },
            sin_zero: [0; 8],
        };
        let sent = libc::sendto(
            fd,
            packet.as_ptr().cast(),
            packet.len(),
            0,
            (&addr as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        libc::close(fd);
        assert_eq!(
            sent,
            packet.len() as isize,
            "raw send: {}",
            std::io::Error::last_os_error()
        );
    }
    true
}

#[test]
fn the_echo_example_survives_a_datagram_it_cannot_answer() {
    let mut child = Command::new(example())
        .args(["127.0.0.1:0", "1000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the example");
    // Read both streams to the end on threads (the service prints every
    // second; a closed pipe would fail its prints), passing lines on.
    let (lines, seen) = std::sync::mpsc::channel::<String>();
    for stream in [
        Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ] {
        let lines = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                let _ = lines.send(line);
            }
        });
    }
    let mut service = Service(child);
    let wait_for = |prefix: &str| {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
            match seen.recv_timeout(left) {
                Ok(line) if line.starts_with(prefix) => return Some(line),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
        None
    };
    let banner = wait_for("echoing on ").expect("the service's banner");
    let addr: SocketAddrV4 = banner["echoing on ".len()..]
        .split_whitespace()
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in {banner:?}"));

    if !send_raw(&from_port_zero(addr, b"spoofed"), addr) {
        eprintln!("no raw socket (needs root or CAP_NET_RAW): not tested");
        return;
    }
    // The service read it and could not answer it.
    assert!(
        wait_for("no reply #1 ").is_some(),
        "the spoofed datagram never reached the service, or it stopped on it"
    );

    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut echoed = None;
    for _ in 0..10 {
        client.send_to(b"ping", addr).unwrap();
        let mut buf = [0u8; 16];
        if let Ok((n, _)) = client.recv_from(&mut buf) {
            echoed = Some(buf[..n].to_vec());
            break;
        }
    }
    let exited = service.0.try_wait().unwrap();
    assert_eq!(
        exited, None,
        "the service stopped on the datagram it could not answer"
    );
    assert_eq!(
        echoed.as_deref(),
        Some(&b"ping"[..]),
        "no echo after the spoofed datagram"
    );
}
