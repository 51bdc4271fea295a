//! Pingora-style protection for calls to origins: count each origin's
//! requests in flight and over the last second in fixed memory, refuse a
//! call when its origin is saturated, and time every call out cheaply.
//!
//! ```sh
//! cargo run -p weir-timeout --example count_and_timeout
//! ```

use std::time::Duration;
use weir_limits::{Inflight, Rate};
use weir_timeout::timeout;

/// What an origin may have at once, and per second.
const MAX_IN_FLIGHT: isize = 4;
const MAX_PER_SECOND: f64 = 20.0;

/// A call to `origin` that takes `takes`.
async fn call(origin: &str, takes: Duration) -> &str {
    tokio::time::sleep(takes).await;
    origin
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let in_flight = Inflight::new();
    let per_second = Rate::try_new(Duration::from_secs(1))?;
    let calls = [
        ("origin-a", 5),
        ("origin-a", 5),
        ("origin-b", 300), // slower than the timeout
        ("origin-a", 5),
    ];
    for (origin, millis) in calls {
        // The guard keeps the call counted until it ends, however it ends.
        let (_guard, now) = in_flight.incr(origin, 1);
        per_second.observe(origin, 1);
        if now > MAX_IN_FLIGHT || per_second.rate(origin) > MAX_PER_SECOND {
            println!("{origin}: saturated, refused");
            continue;
        }
        match timeout(
            Duration::from_millis(100),
            call(origin, Duration::from_millis(millis)),
        )
        .await
        {
            Ok(from) => println!("{from}: answered in {millis} ms"),
            Err(elapsed) => println!("{origin}: {elapsed}"),
        }
    }
    Ok(())
}
