//! Telling a server that speaks only TLS from one that is down.
//!
//! Redis on a TLS port hangs up, without a byte, on a client that speaks
//! plain text: to a plain `redis://` address that looks exactly like a
//! store going away, so the service would start on its failure policy and
//! stay there, every probe hung up on in turn. What tells the two apart
//! is asking in TLS: a TLS server answers the first message of a handshake
//! with a TLS record (its hello, or an alert if it likes nothing offered),
//! whose first two bytes are a record type and a major version 3; a plain
//! Redis waits for the end of a line that never comes.

use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A TLS 1.2 record holding a ClientHello with four common cipher suites
/// and no extensions: enough for any TLS server to answer, a hello or an
/// alert, and nothing a plain server mistakes for a command (no newline).
const CLIENT_HELLO: [u8; 56] = {
    let mut m = [0u8; 56];
    // Record: handshake (22), TLS 1.0 on the record layer as clients send
    // it, 51 bytes.
    m[0] = 0x16;
    m[1] = 0x03;
    m[2] = 0x01;
    m[4] = 51;
    // Handshake: ClientHello (1), 47 bytes; version TLS 1.2; 32 bytes of
    // random left zero (nothing is negotiated); no session id.
    m[5] = 0x01;
    m[8] = 47;
    m[9] = 0x03;
    m[10] = 0x03;
    // m[43]: session id length 0. Cipher suites: 8 bytes.
    m[45] = 8;
    let suites = [0x13, 0x01, 0xc0, 0x2f, 0xc0, 0x2b, 0x00, 0x9c];
    let mut i = 0;
    while i < suites.len() {
        m[46 + i] = suites[i];
        i += 1;
    }
    // One compression method, none (0).
    m[54] = 0x01;
    m
};

/// Whether `host:port` answers a TLS ClientHello with a TLS record within
/// `within`. Any failure to connect or read, or a reply that is not TLS,
/// is `false`: this only ever turns an outage into a clearer error.
pub(crate) async fn speaks_tls(host: &str, port: u16, within: Duration) -> bool {
    let ask = async {
        let mut stream = TcpStream::connect((host, port)).await.ok()?;
        stream.write_all(&CLIENT_HELLO).await.ok()?;
        let mut head = [0u8; 2];
        stream.read_exact(&mut head).await.ok()?;
        Some(head)
    };
    // Alert (21) or handshake (22), then the major version 3 of every TLS
    // and SSL 3 record.
    matches!(
        tokio::time::timeout(within, ask).await,
        Ok(Some([0x15 | 0x16, 0x03]))
    )
}

#[cfg(test)]
mod tests {
    use super::CLIENT_HELLO;

    /// The lengths inside the hello agree with its size, so a server reads
    /// one whole record and one whole message.
    #[test]
    fn the_hello_is_one_well_formed_record() {
        let record = usize::from(u16::from_be_bytes([CLIENT_HELLO[3], CLIENT_HELLO[4]]));
        assert_eq!(record + 5, CLIENT_HELLO.len());
        let message = usize::from(CLIENT_HELLO[6]) << 16
            | usize::from(CLIENT_HELLO[7]) << 8
            | usize::from(CLIENT_HELLO[8]);
        assert_eq!(message + 4, record);
        let suites = usize::from(u16::from_be_bytes([CLIENT_HELLO[44], CLIENT_HELLO[45]]));
        // version, random, session id length, suites' length, suites,
        // compression methods' length and the one method.
        assert_eq!(2 + 32 + 1 + 2 + suites + 2, message);
        assert_eq!(&CLIENT_HELLO[CLIENT_HELLO.len() - 2..], &[0x01, 0x00]);
    }
}
