//! A service whose limits live in a file: tiers of API keys (free, paid,
//! abusive, anonymous clients, internal) in TOML, reloaded without a
//! restart on SIGHUP or when the file changes, each key keeping what it
//! has spent. A file that does not load is reported and the limits in
//! force stay.
//!
//! ```sh
//! cargo run -p weir-tower --example reload -- 127.0.0.1:3000 tower/examples/reload/limits.toml
//! curl -i -H 'x-api-key: pk_demo_paid' http://127.0.0.1:3000/
//! # edit the file, or:
//! kill -HUP $(pgrep -f 'examples/reload')
//! ```

mod app;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr: SocketAddr = args.next().as_deref().unwrap_or("127.0.0.1:3000").parse()?;
    let path = args.next().map_or_else(
        || {
            PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/examples/reload/limits.toml"
            ))
        },
        PathBuf::from,
    );
    let limiter = Arc::new(app::load(&path)?);
    let watcher = app::Watcher::start(Arc::clone(&limiter), path.clone(), Duration::from_secs(1))?;
    tokio::spawn(watcher.run());

    let listener = tokio::net::TcpListener::bind(addr).await?;
    eprintln!(
        "serving http://{} (pid {}), limits from {}: tiers {:?}",
        listener.local_addr()?,
        std::process::id(),
        path.display(),
        limiter.tiers()
    );
    let service = app::router(limiter).into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, service).await?;
    Ok(())
}
