//! A paced outbound client: at most 5 calls a second to a partner API,
//! each call waiting its turn (with jitter, so many clients started
//! together do not call in lockstep).
//!
//! ```sh
//! cargo run -p weir-rate --features wait --example paced_client
//! ```

use std::time::{Duration, Instant};
use weir_rate::wait::Jitter;
use weir_rate::{Gcra, NeverAllowed, Quota, RateLimiter, nonzero};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), NeverAllowed> {
    // Bursts of 1: calls are spread evenly, one every 200 ms.
    let partner = RateLimiter::new(Gcra::new(
        Quota::per_second(nonzero!(5)).allow_burst(nonzero!(1)),
    ));
    let jitter = Jitter::up_to(Duration::from_millis(20));
    let start = Instant::now();
    for call in 1..=10 {
        // Returns once the call is allowed; the error is a cost the quota
        // can never allow, which 1 is not.
        partner.until_ready(1, jitter).await?;
        println!("call {call:2} at {:4} ms", start.elapsed().as_millis());
    }
    Ok(())
}
