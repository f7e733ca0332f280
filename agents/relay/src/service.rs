//! The relay at run time: the accept loop, one pair of pumps per connection,
//! reload of policy and CPU target, draining shutdown, and the `/metrics`
//! endpoint.

use crate::config::{Config, Mode};
use crate::metrics::{Labels, RelayStats};
use anyhow::Context;
use hwqos_compress::{AsyncMessageStream, Registry, SharedThrottle, WireError};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

struct Shared {
    config: RwLock<Config>,
    registry: Arc<Registry>,
    stats: RelayStats,
    /// One compression throttle for all connections (`None`: off), so that
    /// many connections do not each react to the same CPU load.
    throttle: RwLock<Option<SharedThrottle>>,
}

impl Shared {
    fn config(&self) -> Config {
        self.config
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn render(&self) -> String {
        let c = self.config();
        let mode = match c.mode {
            Mode::Compress => "compress",
            Mode::Decompress => "decompress",
        };
        self.stats.render(&Labels {
            mode,
            policy: &c.policy.to_string(),
            cpu_target: c.cpu_target,
        })
    }
}

/// A running relay.
pub struct Running {
    /// The address connections are accepted on.
    pub listen_addr: SocketAddr,
    /// The `/metrics` address, if enabled.
    pub metrics_addr: Option<SocketAddr>,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    accept_task: tokio::task::JoinHandle<()>,
    metrics_task: Option<tokio::task::JoinHandle<()>>,
}

/// Binds the listeners and starts accepting.
pub async fn start(config: Config) -> anyhow::Result<Running> {
    let registry = Arc::new(config.registry().context("codecs")?);
    let listener = TcpListener::bind(&config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let listen_addr = listener.local_addr()?;
    let (stop, stop_rx) = watch::channel(false);
    let shared = Arc::new(Shared {
        config: RwLock::new(config.clone()),
        registry,
        stats: RelayStats::default(),
        throttle: RwLock::new(config.stream_config().throttle.map(SharedThrottle::new)),
    });
    let (metrics_addr, metrics_task) = if config.metrics.listen.is_empty() {
        (None, None)
    } else {
        let l = TcpListener::bind(&config.metrics.listen)
            .await
            .with_context(|| {
                format!(
                    "cannot listen on {} (metrics.listen)",
                    config.metrics.listen
                )
            })?;
        let addr = l.local_addr()?;
        let render: hwqos_agent::RenderMetrics = {
            let shared = shared.clone();
            Arc::new(move || shared.render())
        };
        let task = tokio::spawn(hwqos_agent::serve_metrics(l, render, stop_rx.clone()));
        (Some(addr), Some(task))
    };
    let accept_task = tokio::spawn(accept_loop(listener, shared.clone(), stop_rx));
    Ok(Running {
        listen_addr,
        metrics_addr,
        shared,
        stop,
        accept_task,
        metrics_task,
    })
}

impl Running {
    /// Applies a reloaded configuration: policy and CPU target change for open
    /// and new connections; other keys need a restart.
    pub fn reload(&self, new: Config) {
        let mut cur = self
            .shared
            .config
            .write()
            .unwrap_or_else(|e| e.into_inner());
        for key in restart_only_changes(&cur, &new) {
            tracing::warn!("reload: `{key}` changed; it takes effect after a restart");
        }
        cur.policy = new.policy.clone();
        cur.cpu_target = new.cpu_target;
        drop(cur);
        let throttle = {
            let mut t = self
                .shared
                .throttle
                .write()
                .unwrap_or_else(|e| e.into_inner());
            match (new.stream_config().throttle, t.as_ref()) {
                // Same controller, new target: the integral is kept.
                (Some(_), Some(existing)) => existing.set_target(new.cpu_target),
                (config, _) => *t = config.map(SharedThrottle::new),
            }
            t.clone()
        };
        for h in self.shared.stats.live() {
            h.with(|ep| {
                ep.set_policy(new.policy.clone());
                attach_throttle(ep, throttle.clone());
            });
        }
        self.shared.stats.reloads.fetch_add(1, Ordering::Relaxed);
        tracing::info!(policy = %new.policy, cpu_target = new.cpu_target, "configuration reloaded");
    }

    /// The `/metrics` text.
    pub fn metrics_text(&self) -> String {
        self.shared.render()
    }

    /// Connections accepted and not yet closed (handshaking ones included).
    pub fn open_connections(&self) -> usize {
        self.shared.stats.open.load(Ordering::Relaxed) as usize
    }

    /// Stops accepting, waits up to `drain_timeout_ms` for open connections,
    /// then closes the rest.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let drain = Duration::from_millis(self.shared.config().drain_timeout_ms);
        let mut accept = self.accept_task;
        if tokio::time::timeout(drain, &mut accept).await.is_err() {
            tracing::warn!("drain timeout: closing the connections still open");
            accept.abort();
        }
        if let Some(t) = self.metrics_task {
            t.abort();
        }
    }
}

fn restart_only_changes(a: &Config, b: &Config) -> Vec<&'static str> {
    let mut v = Vec::new();
    if a.mode != b.mode {
        v.push("mode");
    }
    if a.listen != b.listen {
        v.push("listen");
    }
    if a.connect != b.connect {
        v.push("connect");
    }
    if a.codecs != b.codecs {
        v.push("codecs");
    }
    if a.metrics != b.metrics {
        v.push("metrics.listen");
    }
    v
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            r = listener.accept() => match r {
                Ok((sock, peer)) => {
                    let cfg = shared.config();
                    if conns.len() >= cfg.max_connections {
                        shared.stats.refused.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(%peer, "refused: max_connections ({}) reached", cfg.max_connections);
                        continue;
                    }
                    shared.stats.accepted.fetch_add(1, Ordering::Relaxed);
                    let shared = shared.clone();
                    let open = OpenGuard::new(shared.clone());
                    conns.spawn(async move {
                        let _open = open;
                        if let Err(e) = connection(sock, shared.clone(), cfg).await {
                            shared.stats.failed.fetch_add(1, Ordering::Relaxed);
                            tracing::warn!(%peer, "connection ended: {e:#}");
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    drop(listener);
    // Drain: the caller bounds this with the drain timeout; dropping the set
    // (on timeout) aborts what is left.
    while conns.join_next().await.is_some() {}
}

/// Counts a connection as open from its accept until its task ends (or is
/// aborted at the drain timeout).
struct OpenGuard(Arc<Shared>);

impl OpenGuard {
    fn new(shared: Arc<Shared>) -> Self {
        shared.stats.open.fetch_add(1, Ordering::Relaxed);
        OpenGuard(shared)
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.stats.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Makes a connection draw on the relay's one throttle, or on none.
fn attach_throttle(ep: &mut hwqos_compress::Endpoint, throttle: Option<SharedThrottle>) {
    match throttle {
        Some(t) => ep.set_shared_throttle(Some(t)),
        None => ep.set_throttle(None),
    }
}

async fn connection(accepted: TcpStream, shared: Arc<Shared>, cfg: Config) -> anyhow::Result<()> {
    accepted.set_nodelay(true)?;
    let other = TcpStream::connect(&cfg.connect)
        .await
        .with_context(|| format!("cannot connect to {}", cfg.connect))?;
    other.set_nodelay(true)?;
    let (plain, link) = match cfg.mode {
        Mode::Compress => (accepted, other),
        Mode::Decompress => (other, accepted),
    };
    // The link socket's TCP_INFO tells a backlogged sender the link's rate
    // (issue 25); the socket outlives the stream's sends.
    let link_fd = std::os::fd::AsRawFd::as_raw_fd(&link);
    let (lr, lw) = link.into_split();
    let stream =
        AsyncMessageStream::handshake(lr, lw, cfg.stream_config(), shared.registry.clone())
            .await
            .context("handshake with the peer relay")?;
    let throttle = shared
        .throttle
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    stream.handle().with(|ep| {
        attach_throttle(ep, throttle);
        ep.set_transport(Some(Box::new(hwqos_compress::TcpInfo::new(link_fd))));
    });
    let id = shared.stats.add(stream.handle());
    let result = pump(plain, stream, cfg.chunk_bytes as usize).await;
    shared.stats.remove(id);
    result
}

/// Carries both directions of one connection until both have ended cleanly
/// (each end's EOF is carried through as a half-close), or until either
/// fails: then the other is cancelled and every socket of the connection is
/// closed at once. (Waiting for both, as before, left a connection whose
/// application had gone blocked for ever on a full link.)
async fn pump(
    plain: TcpStream,
    stream: AsyncMessageStream<tokio::net::tcp::OwnedReadHalf, tokio::net::tcp::OwnedWriteHalf>,
    chunk: usize,
) -> anyhow::Result<()> {
    let (mut pr, mut pw) = plain.into_split();
    let (mut tx, mut rx) = stream.into_split();
    let to_link = async move {
        let mut buf = vec![0u8; chunk];
        loop {
            let n = pr.read(&mut buf).await?;
            if n == 0 {
                tx.shutdown().await?;
                return Ok::<(), WireError>(());
            }
            tx.send_msg(&buf[..n]).await?;
        }
    };
    let to_plain = async move {
        while let Some(m) = rx.recv_msg().await? {
            pw.write_all(&m).await?;
        }
        pw.shutdown().await?;
        Ok::<(), WireError>(())
    };
    tokio::pin!(to_link, to_plain);
    let (mut link_done, mut plain_done) = (false, false);
    while !(link_done && plain_done) {
        // An error returns at once: dropping the other direction's future
        // cancels it and closes its halves.
        tokio::select! {
            r = &mut to_link, if !link_done => {
                r.context("application to link")?;
                link_done = true;
            }
            r = &mut to_plain, if !plain_done => {
                r.context("link to application")?;
                plain_done = true;
            }
        }
    }
    Ok(())
}
