//! The reloading service's parts: the limits file read into tiers, the
//! watcher that applies a changed file, and the router. Shared by the
//! example's `main.rs` and by `tower/tests/reload.rs`, which reloads it
//! under load.

use axum::Router;
use axum::routing::get;
use serde::Deserialize;
use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::signal::unix::{Signal, SignalKind, signal};
use weir_rate::spec::{SpecError, TiersSpec};
use weir_rate::{ConfigError, Gcra, Tier, TieredLimiter};
use weir_tower::{HeaderKey, OrKey, OrKeyTiers, PeerIp, RateLimitLayer};

/// A request's key: its `x-api-key`, else the client's address.
pub type Key = OrKey<String, IpAddr>;

/// Where a key's tier comes from: an API key from the file's `[keys]`
/// (the default tier when it is not there), a client without one from the
/// tier called `anonymous` (the default tier when there is none).
pub type Directory = OrKeyTiers<HashMap<String, String>>;

/// The limiter the router checks and the watcher reloads.
pub type Limiter = TieredLimiter<Key, Gcra, Directory>;

/// The file: weir's tiers under `[limits]`, API keys by tier under `[keys]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitsFile {
    limits: TiersSpec,
    #[serde(default)]
    keys: HashMap<String, String>,
}

/// Why a limits file was not applied; the limits in force stay.
#[derive(Debug)]
pub enum LoadError {
    /// The file could not be read.
    Read(PathBuf, std::io::Error),
    /// The file is not TOML of the expected shape.
    Parse(PathBuf, toml::de::Error),
    /// A limit in the file is not a limit (`limits.tiers.paid.limit: ...`).
    Limit(PathBuf, SpecError),
    /// `[keys]` names a tier `[limits.tiers]` lacks.
    UnknownTier(PathBuf, String, String),
    /// The tiers cannot be checked together.
    Tiers(PathBuf, ConfigError),
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Read(path, e) => write!(f, "{}: {e}", path.display()),
            Self::Parse(path, e) => write!(f, "{}: {e}", path.display()),
            Self::Limit(path, e) => write!(f, "{}: {e}", path.display()),
            Self::UnknownTier(path, key, tier) => write!(
                f,
                "{}: keys.{key}: no tier called `{tier}` in [limits.tiers]",
                path.display()
            ),
            Self::Tiers(path, e) => write!(f, "{}: limits: {e}", path.display()),
        }
    }
}

impl std::error::Error for LoadError {}

/// The tiers, the default's name and the directory a file holds, checked.
fn read(path: &Path) -> Result<(Vec<Tier<Gcra>>, String, Directory), LoadError> {
    let text = std::fs::read_to_string(path).map_err(|e| LoadError::Read(path.into(), e))?;
    let file: LimitsFile = toml::from_str(&text).map_err(|e| LoadError::Parse(path.into(), e))?;
    // Field paths as the file writes them: `limits.tiers.paid.limit`.
    let tiers = file
        .limits
        .tiers_at::<Gcra>("limits")
        .map_err(|e| LoadError::Limit(path.into(), e))?;
    if let Some((key, tier)) = file
        .keys
        .iter()
        .find(|(_, tier)| !file.limits.tiers.contains_key(*tier))
    {
        return Err(LoadError::UnknownTier(
            path.into(),
            key.clone(),
            tier.clone(),
        ));
    }
    let directory = OrKeyTiers::new(file.keys).fallback_tier("anonymous");
    Ok((tiers, file.limits.default, directory))
}

/// The limiter a limits file describes.
///
/// # Errors
///
/// A [`LoadError`] naming the file and, for a bad limit, the field.
pub fn load(path: &Path) -> Result<Limiter, LoadError> {
    let (tiers, default, directory) = read(path)?;
    Limiter::try_new(tiers, &default, directory).map_err(|e| LoadError::Tiers(path.into(), e))
}

/// Apply the limits file at `path` to `limiter`: tiers and directory
/// together, each key keeping what it has spent.
///
/// # Errors
///
/// As [`load`]; the limits in force are then unchanged.
pub fn reload(limiter: &Limiter, path: &Path) -> Result<(), LoadError> {
    let (tiers, default, directory) = read(path)?;
    limiter
        .replace(tiers, &default, directory)
        .map_err(|e| LoadError::Tiers(path.into(), e))
}

/// The file's identity for noticing a change: when it was written, and
/// its length (two writes within the file system's clock tick differ by
/// length more often than not).
fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

/// Reloads a limits file on SIGHUP, and when the file changes (checked
/// every `every`: a config map mounted into a container changes without a
/// signal).
pub struct Watcher {
    limiter: Arc<Limiter>,
    path: PathBuf,
    hangups: Signal,
    every: Duration,
    /// The file as last applied.
    seen: Option<(SystemTime, u64)>,
}

impl Watcher {
    /// A watcher of `path` for `limiter`, listening for SIGHUP from now on
    /// (from before this returns, so an early signal is not the process's
    /// end).
    ///
    /// # Errors
    ///
    /// When the signal handler cannot be installed; must be called on a
    /// tokio runtime.
    pub fn start(limiter: Arc<Limiter>, path: PathBuf, every: Duration) -> std::io::Result<Self> {
        let watcher = Self {
            hangups: signal(SignalKind::hangup())?,
            seen: stamp(&path),
            limiter,
            path,
            every,
        };
        // The file as stamped: a change since the limiter was built is
        // applied now, and any later one is seen as a change.
        watcher.apply("the start");
        Ok(watcher)
    }

    fn apply(&self, why: &str) {
        match reload(&self.limiter, &self.path) {
            Ok(()) => eprintln!(
                "reloaded {} on {why}: tiers {:?}",
                self.path.display(),
                self.limiter.tiers()
            ),
            Err(e) => eprintln!("kept the limits in force ({why}): {e}"),
        }
    }

    /// Reload whenever asked or changed, forever; a file that does not
    /// load is reported on stderr and the limits in force stay.
    pub async fn run(mut self) {
        let mut poll = tokio::time::interval(self.every);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        poll.tick().await;
        loop {
            let why = tokio::select! {
                _ = self.hangups.recv() => "SIGHUP",
                _ = poll.tick() => {
                    if stamp(&self.path) == self.seen {
                        continue;
                    }
                    "a change"
                }
            };
            // Stamped before reading: a write during the read is seen next
            // time.
            self.seen = stamp(&self.path);
            self.apply(why);
        }
    }
}

/// The service: `/` answers `hello`, limited by each key's tier.
pub fn router(limiter: Arc<Limiter>) -> Router {
    let key = HeaderKey::new(http::HeaderName::from_static("x-api-key")).or(PeerIp::new());
    Router::new()
        .route("/", get(|| async { "hello\n" }))
        .layer(RateLimitLayer::shared(limiter, key))
}
