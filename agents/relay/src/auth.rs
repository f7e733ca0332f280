//! The pre-shared-key handshake of the link side: both relays prove they hold
//! the same key before a single message is exchanged (and, on the
//! decompressing side, before the server is connected to).
//!
//! ```text
//! connector (mode=compress)                acceptor (mode=decompress)
//!   MAGIC ‖ nonce_c  ───────────────▶
//!                    ◀───────────────  MAGIC ‖ nonce_a
//!   HMAC(K, "…connector" ‖ nonce_c ‖ nonce_a)  ───▶  verified, else closed
//!                    ◀───  HMAC(K, "…acceptor" ‖ nonce_c ‖ nonce_a)
//!   verified, else closed
//! ```
//!
//! HMAC-SHA256 (RustCrypto `hmac` + `sha2`), 32-byte nonces from the OS
//! generator (`getrandom`), tags compared in constant time. Both nonces
//! make every tag fresh (no replay); the role labels keep a tag from being
//! reflected back. The acceptor answers only after the connector proved the
//! key, so a prober learns nothing but the magic and a nonce. The handshake
//! authenticates the peer; it does not encrypt: the traffic after it is
//! readable and (on its own) modifiable on the path — see docs/compression.md.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use std::path::Path;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The first bytes each end sends (protocol name and version).
pub const MAGIC: &[u8; 16] = b"hwqos-relay-psk1";
const NONCE: usize = 32;
const TAG: usize = 32;
/// Shortest key accepted (after trimming whitespace).
pub const MIN_KEY_BYTES: usize = 32;
/// Largest key file read.
pub const MAX_KEY_FILE_BYTES: u64 = 4096;

/// A pre-shared key.
#[derive(Clone)]
pub struct Psk(Vec<u8>);

impl std::fmt::Debug for Psk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Psk({} bytes)", self.0.len())
    }
}

impl Psk {
    /// A key from its bytes (leading and trailing ASCII whitespace trimmed,
    /// so `base64 > file` works); at least [`MIN_KEY_BYTES`].
    pub fn from_bytes(b: &[u8]) -> Result<Psk, String> {
        let key = b.trim_ascii();
        if key.len() < MIN_KEY_BYTES {
            return Err(format!(
                "the key has {} bytes, fewer than {MIN_KEY_BYTES} (make one with `head -c 32 /dev/urandom | base64 > FILE`)",
                key.len()
            ));
        }
        Ok(Psk(key.to_vec()))
    }

    /// Reads a key file: a regular file of at most 4 KiB that neither other
    /// users nor the group may write and other users may not read.
    pub fn load(path: &Path) -> Result<Psk, String> {
        use std::os::unix::fs::MetadataExt;
        let p = path.display();
        let meta = std::fs::metadata(path).map_err(|e| format!("{p}: {e}"))?;
        let mode = meta.mode() & 0o7777;
        if mode & 0o027 != 0 {
            return Err(format!(
                "{p}: mode {mode:04o} lets other users read or change the key; `chmod 600` it (or 640 for a group)"
            ));
        }
        let bytes = hwqos_agent::read_file_bounded(path, MAX_KEY_FILE_BYTES)
            .map_err(|e| format!("{p}: {e}"))?;
        Psk::from_bytes(&bytes).map_err(|e| format!("{p}: {e}"))
    }

    fn tag(&self, label: &[u8], nonce_c: &[u8], nonce_a: &[u8]) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.0)
            .expect("HMAC takes keys of any length");
        mac.update(label);
        mac.update(nonce_c);
        mac.update(nonce_a);
        mac
    }
}

/// Which end of the handshake this relay is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The compressing side, which connects to its peer.
    Connector,
    /// The decompressing side, which accepts its peer.
    Acceptor,
}

const LABEL_CONNECTOR: &[u8] = b"hwqos-relay psk1 connector";
const LABEL_ACCEPTOR: &[u8] = b"hwqos-relay psk1 acceptor";

/// Why the handshake failed.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// Reading from or writing to the connection failed.
    #[error("pre-shared-key handshake: {0}")]
    Io(#[from] std::io::Error),
    /// The peer closed the connection during the handshake; the text says
    /// at which step (typically a peer without `psk_file` or with another key).
    #[error("pre-shared-key handshake: the peer closed the connection{0} (is `psk_file` set on both relays, with the same key?)")]
    Closed(&'static str),
    /// The peer's first bytes are not the handshake's greeting (a peer
    /// without `psk_file`).
    #[error(
        "pre-shared-key handshake: the peer did not start it (is `psk_file` set on both relays?)"
    )]
    NotPsk,
    /// The peer's proof of the key does not match (the relays hold different
    /// keys), or our own greeting came back reflected.
    #[error("pre-shared-key handshake: the peer's proof does not match (the relays hold different keys)")]
    BadKey,
    /// The operating system's random source gave no nonce.
    #[error("pre-shared-key handshake: no random nonce: {0}")]
    Random(String),
}

async fn read_exact<S: AsyncRead + Unpin>(
    io: &mut S,
    buf: &mut [u8],
    what: &'static str,
) -> Result<(), AuthError> {
    match io.read_exact(buf).await {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(AuthError::Closed(what)),
        Err(e) => Err(e.into()),
    }
}

/// Runs the handshake on a fresh link connection. The caller bounds it with
/// its handshake timeout.
pub async fn handshake<S: AsyncRead + AsyncWrite + Unpin>(
    io: &mut S,
    key: &Psk,
    role: Role,
) -> Result<(), AuthError> {
    let mut own = [0u8; NONCE];
    getrandom::fill(&mut own).map_err(|e| AuthError::Random(e.to_string()))?;
    let mut hello = Vec::with_capacity(MAGIC.len() + NONCE);
    hello.extend_from_slice(MAGIC);
    hello.extend_from_slice(&own);
    io.write_all(&hello).await?;
    io.flush().await?;
    let mut peer = [0u8; MAGIC.len() + NONCE];
    read_exact(io, &mut peer[..MAGIC.len()], " before its greeting").await?;
    if &peer[..MAGIC.len()] != MAGIC {
        return Err(AuthError::NotPsk);
    }
    read_exact(io, &mut peer[MAGIC.len()..], " during its greeting").await?;
    let theirs = &peer[MAGIC.len()..];
    if theirs == own {
        // Our own greeting reflected back.
        return Err(AuthError::BadKey);
    }
    let (nonce_c, nonce_a): (&[u8], &[u8]) = match role {
        Role::Connector => (&own, theirs),
        Role::Acceptor => (theirs, &own),
    };
    let mut tag = [0u8; TAG];
    match role {
        Role::Connector => {
            let mine = key
                .tag(LABEL_CONNECTOR, nonce_c, nonce_a)
                .finalize()
                .into_bytes();
            io.write_all(&mine).await?;
            io.flush().await?;
            read_exact(io, &mut tag, " instead of proving the key").await?;
            key.tag(LABEL_ACCEPTOR, nonce_c, nonce_a)
                .verify_slice(&tag)
                .map_err(|_| AuthError::BadKey)?;
        }
        Role::Acceptor => {
            read_exact(io, &mut tag, " instead of proving the key").await?;
            key.tag(LABEL_CONNECTOR, nonce_c, nonce_a)
                .verify_slice(&tag)
                .map_err(|_| AuthError::BadKey)?;
            let mine = key
                .tag(LABEL_ACCEPTOR, nonce_c, nonce_a)
                .finalize()
                .into_bytes();
            io.write_all(&mine).await?;
            io.flush().await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> Psk {
        Psk::from_bytes(s.as_bytes()).unwrap()
    }

    async fn pair(a: Psk, b: Psk) -> (Result<(), AuthError>, Result<(), AuthError>) {
        let (mut x, mut y) = tokio::io::duplex(1024);
        let c = tokio::spawn(async move { handshake(&mut x, &a, Role::Connector).await });
        let r = handshake(&mut y, &b, Role::Acceptor).await;
        drop(y);
        (c.await.unwrap(), r)
    }

    #[tokio::test]
    async fn the_same_key_passes_and_different_keys_fail_on_both_ends() {
        let k = key("0123456789abcdef0123456789abcdef-one");
        let (c, a) = pair(k.clone(), k).await;
        c.unwrap();
        a.unwrap();
        let (c, a) = pair(
            key("0123456789abcdef0123456789abcdef-one"),
            key("0123456789abcdef0123456789abcdef-two"),
        )
        .await;
        assert!(matches!(a, Err(AuthError::BadKey)), "{a:?}");
        // The acceptor closed without proving anything.
        assert!(matches!(c, Err(AuthError::Closed(_))), "{c:?}");
    }

    #[tokio::test]
    async fn a_peer_without_the_handshake_is_named() {
        let (mut x, mut y) = tokio::io::duplex(1024);
        x.write_all(b"HWQ\x00 something else entirely")
            .await
            .unwrap();
        let k = key("0123456789abcdef0123456789abcdef");
        let e = handshake(&mut y, &k, Role::Acceptor).await.unwrap_err();
        assert!(matches!(e, AuthError::NotPsk), "{e:?}");
        assert!(e.to_string().contains("psk_file"), "{e}");
    }

    #[test]
    fn short_keys_and_loose_modes_are_refused() {
        use std::os::unix::fs::PermissionsExt;
        assert!(Psk::from_bytes(b"  short\n")
            .unwrap_err()
            .contains("fewer than 32"));
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("k");
        std::fs::write(&p, "0123456789abcdef0123456789abcdef\n").unwrap();
        for (mode, ok) in [
            (0o600, true),
            (0o400, true),
            (0o640, true),
            (0o644, false),
            (0o660, false),
            (0o606, false),
        ] {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            let r = Psk::load(&p);
            assert_eq!(r.is_ok(), ok, "{mode:o}: {r:?}");
            if let Err(e) = r {
                assert!(e.contains("chmod 600"), "{e}");
            }
        }
        assert!(Psk::load(&d.path().join("missing")).is_err());
        let sub = d.path().join("dir");
        std::fs::create_dir(&sub).unwrap();
        std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o700)).unwrap();
        let e = Psk::load(&sub).unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
    }
}
