//! Where a key lives in a Redis Cluster.

/// The Redis Cluster slot of a Redis key: CRC16 (XMODEM) of its hash tag
/// (the text between the first `{` and the next `}`, when non-empty) or of
/// the whole key, modulo 16384 — what `CLUSTER KEYSLOT` answers.
///
/// ```
/// use weir_redis::cluster_slot;
///
/// assert_eq!(cluster_slot("123456789"), 12739); // the CRC16/XMODEM check value
/// assert_eq!(cluster_slot("api:gcra:{user1}"), cluster_slot("user1"));
/// ```
pub fn cluster_slot(key: &str) -> u16 {
    let b = key.as_bytes();
    let tagged = b.iter().position(|&c| c == b'{').and_then(|open| {
        let rest = &b[open + 1..];
        let close = rest.iter().position(|&c| c == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    let mut crc: u16 = 0;
    for &byte in tagged.unwrap_or(b) {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}
