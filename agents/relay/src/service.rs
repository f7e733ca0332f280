//! The relay at run time: the accept loop, one pair of pumps per connection,
//! reload of policy and CPU target, draining shutdown, and the `/metrics`
//! endpoint.

use crate::auth::{self, Psk, Role};
use crate::chunk::ReadSize;
use crate::config::{Config, Mode};
use crate::cpu_source::throttle_load;
use crate::limits::{Aggregated, CountingReader, Expansion, PeerBudgets};
use crate::metrics::{Labels, RelayStats};
use anyhow::Context;
use hwqos_compress::{AsyncMessageStream, Registry, SharedThrottle, WireError};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
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
    /// The link side's pre-shared key (`None`: no authentication).
    psk: Option<Psk>,
    /// Decompressed-byte budgets per peer address.
    budgets: Arc<PeerBudgets>,
    /// Refused connections: one line per interval with the count.
    refused_log: Aggregated,
    /// Failed connections: a few lines per interval, then a count.
    failed_log: Aggregated,
}

/// How often aggregated warnings are summed up.
const WARN_INTERVAL: Duration = Duration::from_secs(10);

impl Shared {
    fn config(&self) -> Config {
        self.config
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The process's one throttle for `config` (`None`: off), reading the
    /// monitor's live API or `/proc/stat` (see [`crate::cpu_source`]).
    fn new_throttle(&self, config: &Config) -> Option<SharedThrottle> {
        let t = config.stream_config().throttle?;
        let socket = config.monitor_socket();
        let load = throttle_load(
            t.cpu_aggregate,
            socket.as_deref(),
            &self.stats.throttle_source,
        );
        Some(SharedThrottle::with_cpu_load(t, load))
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
    let psk = if config.psk_file.is_empty() {
        None
    } else {
        Some(
            Psk::load(std::path::Path::new(&config.psk_file))
                .map_err(|e| anyhow::anyhow!("psk_file: {e}"))?,
        )
    };
    let listener = TcpListener::bind(&config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let listen_addr = listener.local_addr()?;
    let (stop, stop_rx) = watch::channel(false);
    let shared = Arc::new(Shared {
        config: RwLock::new(config.clone()),
        registry,
        stats: RelayStats::default(),
        throttle: RwLock::new(None),
        psk,
        budgets: Arc::default(),
        refused_log: Aggregated::new(WARN_INTERVAL, 1),
        failed_log: Aggregated::new(WARN_INTERVAL, 5),
    });
    *shared.throttle.write().unwrap_or_else(|e| e.into_inner()) = shared.new_throttle(&config);
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
                _ => *t = self.shared.new_throttle(&new),
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

    /// The accept loop is still running (it ends only at shutdown).
    pub fn is_accepting(&self) -> bool {
        !self.accept_task.is_finished()
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
    if a.allow_non_loopback != b.allow_non_loopback {
        v.push("allow_non_loopback");
    }
    if a.psk_file != b.psk_file {
        v.push("psk_file");
    }
    if a.monitor_socket != b.monitor_socket {
        v.push("monitor_socket");
    }
    if a.free_expansion_ratio != b.free_expansion_ratio {
        v.push("free_expansion_ratio");
    }
    if a.peer_expansion_bytes_per_s != b.peer_expansion_bytes_per_s {
        v.push("peer_expansion_bytes_per_s");
    }
    for (key, x, y) in [
        ("max_message", a.max_message, b.max_message),
        ("chunk_bytes", a.chunk_bytes, b.chunk_bytes),
        (
            "handshake_timeout_ms",
            a.handshake_timeout_ms,
            b.handshake_timeout_ms,
        ),
        ("idle_timeout_ms", a.idle_timeout_ms, b.idle_timeout_ms),
        ("drain_timeout_ms", a.drain_timeout_ms, b.drain_timeout_ms),
        (
            "max_connections",
            a.max_connections as u64,
            b.max_connections as u64,
        ),
    ] {
        if x != y {
            v.push(key);
        }
    }
    v
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut conns = JoinSet::new();
    let mut summary = tokio::time::interval(WARN_INTERVAL);
    summary.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            r = listener.accept() => match r {
                Ok((sock, peer)) => {
                    let cfg = shared.config();
                    if conns.len() >= cfg.max_connections {
                        shared.stats.refused.fetch_add(1, Ordering::Relaxed);
                        if shared.refused_log.allow() {
                            tracing::warn!(
                                %peer,
                                "refused: max_connections ({}) reached (further refusals are counted and logged once every {} s)",
                                cfg.max_connections,
                                WARN_INTERVAL.as_secs()
                            );
                        }
                        continue;
                    }
                    shared.stats.accepted.fetch_add(1, Ordering::Relaxed);
                    let shared = shared.clone();
                    let open = OpenGuard::new(shared.clone());
                    conns.spawn(async move {
                        let _open = open;
                        if let Err(e) = connection(sock, peer.ip(), shared.clone(), cfg).await {
                            shared.stats.failed.fetch_add(1, Ordering::Relaxed);
                            if shared.failed_log.allow() {
                                tracing::warn!(%peer, "connection ended: {e:#}");
                            }
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            _ = summary.tick() => log_summaries(&shared, false),
        }
    }
    drop(listener);
    log_summaries(&shared, true);
    // Drain: the caller bounds this with the drain timeout; dropping the set
    // (on timeout) aborts what is left.
    while conns.join_next().await.is_some() {}
}

/// The aggregated warnings of the interval that just ended (`now`: of the
/// interval so far, when stopping).
fn log_summaries(shared: &Shared, now: bool) {
    if let Some((n, d)) = shared.refused_log.take_suppressed(now) {
        tracing::warn!(
            "refused {n} more connections in the last {:.0} s: max_connections ({}) reached",
            d.as_secs_f64(),
            shared.config().max_connections
        );
    }
    if let Some((n, d)) = shared.failed_log.take_suppressed(now) {
        tracing::warn!(
            "{n} more connections ended with an error in the last {:.0} s (not logged one by one; hwqos_relay_connections_failed counts them all)",
            d.as_secs_f64()
        );
    }
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

type LinkStream = AsyncMessageStream<
    CountingReader<tokio::net::tcp::OwnedReadHalf>,
    tokio::net::tcp::OwnedWriteHalf,
>;

/// Authenticates the peer relay (with a pre-shared key) and runs the
/// message-stream handshake on a fresh link connection.
async fn link_handshake(
    mut link: TcpStream,
    role: Role,
    shared: &Shared,
    cfg: &Config,
    link_in: Arc<AtomicU64>,
) -> anyhow::Result<LinkStream> {
    link.set_nodelay(true)?;
    if let Some(key) = &shared.psk {
        auth::handshake(&mut link, key, role).await?;
    }
    // The link socket's TCP_INFO tells a backlogged sender the link's rate
    // (issue 25, docs/compression.md "Bulk streams"); the socket outlives
    // the stream's sends.
    let link_fd = std::os::fd::AsRawFd::as_raw_fd(&link);
    let (lr, lw) = link.into_split();
    let stream = AsyncMessageStream::handshake(
        CountingReader::new(lr, link_in),
        lw,
        cfg.stream_config(),
        shared.registry.clone(),
    )
    .await
    .context("handshake with the peer relay")?;
    stream
        .handle()
        .with(|ep| ep.set_transport(Some(Box::new(hwqos_compress::TcpInfo::new(link_fd)))));
    Ok(stream)
}

async fn connect(addr: &str) -> anyhow::Result<TcpStream> {
    let s = TcpStream::connect(addr)
        .await
        .with_context(|| format!("cannot connect to {addr}"))?;
    s.set_nodelay(true)?;
    Ok(s)
}

async fn connection(
    accepted: TcpStream,
    peer: IpAddr,
    shared: Arc<Shared>,
    cfg: Config,
) -> anyhow::Result<()> {
    accepted.set_nodelay(true)?;
    let link_in = Arc::new(AtomicU64::new(0));
    // Connecting onward and the whole link handshake are bounded; on the
    // decompressing side the server is connected to only after the peer
    // relay has authenticated and completed its handshake.
    let setup = async {
        match cfg.mode {
            Mode::Compress => {
                let link = connect(&cfg.connect).await?;
                let link_peer = link.peer_addr()?.ip();
                let stream =
                    link_handshake(link, Role::Connector, &shared, &cfg, link_in.clone()).await?;
                Ok::<_, anyhow::Error>((accepted, stream, link_peer))
            }
            Mode::Decompress => {
                let stream =
                    link_handshake(accepted, Role::Acceptor, &shared, &cfg, link_in.clone())
                        .await?;
                let server = connect(&cfg.connect).await?;
                Ok((server, stream, peer))
            }
        }
    };
    let (plain, stream, link_peer) =
        match tokio::time::timeout(Duration::from_millis(cfg.handshake_timeout_ms), setup).await {
            Ok(r) => r?,
            Err(_) => anyhow::bail!(
                "no connection and handshake within handshake_timeout_ms ({} ms)",
                cfg.handshake_timeout_ms
            ),
        };
    let throttle = shared
        .throttle
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    stream.handle().with(|ep| attach_throttle(ep, throttle));
    let expansion = (cfg.peer_expansion_bytes_per_s > 0).then(|| {
        Expansion::new(
            shared
                .budgets
                .get(link_peer, cfg.peer_expansion_bytes_per_s),
            cfg.free_expansion_ratio,
            link_in,
        )
    });
    let idle = (cfg.idle_timeout_ms > 0).then(|| Duration::from_millis(cfg.idle_timeout_ms));
    let id = shared.stats.add(stream.handle());
    let result = pump(plain, stream, cfg.chunk_bytes as usize, idle, expansion).await;
    shared.stats.remove(id);
    result
}

/// When a byte last moved on a connection, in ms since its start.
struct Activity {
    start: tokio::time::Instant,
    last_ms: AtomicU64,
}

impl Activity {
    fn touch(&self) {
        self.last_ms
            .store(self.start.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    /// Returns once nothing has moved for `idle`.
    async fn idle_for(&self, idle: Duration) {
        loop {
            let last = self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
            let deadline = last + idle;
            if tokio::time::Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// Carries both directions of one connection until both have ended cleanly
/// (each end's EOF is carried through as a half-close), or until either
/// fails or nothing moved for `idle`: then the other direction is cancelled
/// and every socket of the connection is closed at once. (Waiting for both,
/// as before, left a connection whose application had gone blocked for ever
/// on a full link.) `expansion` holds back decompressed messages beyond the
/// peer's budget.
async fn pump(
    plain: TcpStream,
    stream: LinkStream,
    chunk: usize,
    idle: Option<Duration>,
    mut expansion: Option<Expansion>,
) -> anyhow::Result<()> {
    let (mut pr, mut pw) = plain.into_split();
    let (mut tx, mut rx) = stream.into_split();
    let activity = Activity {
        start: tokio::time::Instant::now(),
        last_ms: AtomicU64::new(0),
    };
    let to_link = async {
        let mut size = ReadSize::new(chunk);
        let mut buf = Vec::new();
        loop {
            size.fit(&mut buf);
            let n = pr.read(&mut buf).await?;
            activity.touch();
            if n == 0 {
                tx.shutdown().await?;
                return Ok::<(), WireError>(());
            }
            tx.send_msg(&buf[..n]).await?;
            size.after_read(n);
            activity.touch();
        }
    };
    let to_plain = async {
        while let Some(m) = rx.recv_msg().await? {
            activity.touch();
            if let Some(e) = expansion.as_mut() {
                let wait = e.charge(m.len());
                if !wait.is_zero() {
                    tokio::time::sleep(wait).await;
                }
            }
            pw.write_all(&m).await?;
            activity.touch();
        }
        pw.shutdown().await?;
        Ok::<(), WireError>(())
    };
    let idle_out = async {
        match idle {
            Some(d) => activity.idle_for(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(to_link, to_plain, idle_out);
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
            _ = &mut idle_out => anyhow::bail!(
                "idle: no byte moved either way for idle_timeout_ms ({} ms)",
                idle.unwrap_or_default().as_millis()
            ),
        }
    }
    Ok(())
}
