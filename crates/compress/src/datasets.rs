//! The experiments' data sets (thesis 7.4): D0 (zeros), D1 (ones: every
//! byte 0xFF, all bits set) and Dp, realistic control-plane messages of a few
//! hundred bytes — generated SIP requests and responses, Diameter-style binary
//! AVP messages and JSON control messages, interleaved with pieces of real
//! text files found on the machine (`/usr/share/doc/*/copyright`) — and Dr,
//! pseudo-random bytes that no codec can shrink (encrypted or already
//! compressed payloads). Generation is deterministic for a seed.

use crate::policy::Rng;
use std::path::Path;

/// Which data set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataSet {
    /// D0: every byte 0x00 (compresses best).
    Zeros,
    /// D1: every byte 0xFF.
    Ones,
    /// Dp: realistic control-plane messages (SIP, Diameter-style AVPs, JSON, text).
    Realistic,
    /// Pseudo-random bytes (incompressible).
    Random,
}

impl std::str::FromStr for DataSet {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "d0" | "D0" | "zeros" => Ok(DataSet::Zeros),
            "d1" | "D1" | "ones" => Ok(DataSet::Ones),
            "dp" | "Dp" | "DP" | "realistic" => Ok(DataSet::Realistic),
            "dr" | "Dr" | "DR" | "random" => Ok(DataSet::Random),
            _ => Err(format!("unknown data set `{s}` (d0, d1, dp, dr)")),
        }
    }
}

/// A deterministic source of messages.
pub struct MessageSource {
    set: DataSet,
    rng: Rng,
    size: usize,
    texts: Vec<Vec<u8>>,
    n: u64,
}

fn pick<'a>(rng: &mut Rng, items: &[&'a str]) -> &'a str {
    items[(rng.next_f64() * items.len() as f64) as usize % items.len()]
}

fn num(rng: &mut Rng, max: u64) -> u64 {
    (rng.next_f64() * max as f64) as u64
}

/// Pieces of 200–800 bytes of the text files under `dir` (at most `limit` files).
pub fn real_text_pieces(dir: &Path, limit: usize) -> Vec<Vec<u8>> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("copyright"))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    let mut pieces = Vec::new();
    for f in files.into_iter().take(limit) {
        let Ok(text) = std::fs::read(&f) else {
            continue;
        };
        let mut at = 0;
        let mut len = 200;
        while at + len <= text.len() {
            pieces.push(text[at..at + len].to_vec());
            at += len;
            len = 200 + (len * 7 + 113) % 600;
        }
    }
    pieces
}

impl MessageSource {
    /// `size` is the message size of D0, D1 and Dr; Dp messages vary (about
    /// 150–900 bytes).
    pub fn new(set: DataSet, size: usize, seed: u64) -> Self {
        let texts = if set == DataSet::Realistic {
            real_text_pieces(Path::new("/usr/share/doc"), 200)
        } else {
            Vec::new()
        };
        MessageSource {
            set,
            rng: Rng::new(seed),
            size,
            texts,
            n: 0,
        }
    }

    /// How many real-file pieces Dp draws from.
    pub fn real_pieces(&self) -> usize {
        self.texts.len()
    }

    /// The next message of the data set (deterministic for the seed).
    pub fn next_message(&mut self) -> Vec<u8> {
        self.n += 1;
        match self.set {
            DataSet::Zeros => vec![0u8; self.size],
            DataSet::Ones => vec![0xffu8; self.size],
            DataSet::Realistic => self.realistic(),
            DataSet::Random => {
                let mut v = Vec::with_capacity(self.size + 8);
                while v.len() < self.size {
                    v.extend_from_slice(&self.rng.next_u64().to_le_bytes());
                }
                v.truncate(self.size);
                v
            }
        }
    }

    fn realistic(&mut self) -> Vec<u8> {
        let r = &mut self.rng;
        let kind = num(r, 10);
        match kind {
            0..=3 => sip(r, self.n),
            4..=5 => diameter(r, self.n),
            6..=7 => json(r, self.n),
            _ if !self.texts.is_empty() => {
                let i = num(r, self.texts.len() as u64) as usize;
                self.texts[i].clone()
            }
            _ => json(r, self.n),
        }
    }
}

fn sip(r: &mut Rng, n: u64) -> Vec<u8> {
    let method = pick(r, &["INVITE", "REGISTER", "BYE", "OPTIONS", "ACK"]);
    let user = pick(r, &["alice", "bob", "carol", "dave", "erin", "frank"]);
    let host = pick(
        r,
        &[
            "ims.example.invalid",
            "pcscf1.example.invalid",
            "scscf.example.invalid",
        ],
    );
    let ip = format!("10.{}.{}.{}", num(r, 255), num(r, 255), num(r, 255));
    let branch = num(r, u64::MAX >> 12);
    let tag = num(r, 1 << 40);
    let call = num(r, u64::MAX >> 8);
    let mut m = if num(r, 3) == 0 {
        "SIP/2.0 200 OK\r\n".to_string()
    } else {
        format!("{method} sip:{user}@{host} SIP/2.0\r\n")
    };
    m += &format!(
        "Via: SIP/2.0/TCP {ip}:5060;branch=z9hG4bK{branch:x}\r\nMax-Forwards: 70\r\n\
From: <sip:{user}@{host}>;tag={tag:x}\r\nTo: <sip:{user}@{host}>\r\n\
Call-ID: {call:x}@{ip}\r\nCSeq: {n} {method}\r\nContact: <sip:{user}@{ip}:5060;transport=tcp>\r\n\
User-Agent: hwqos-node/1.0\r\n"
    );
    if method == "INVITE" {
        let port = 10000 + num(r, 50000);
        let sdp = format!(
            "v=0\r\no=- {n} {n} IN IP4 {ip}\r\ns=-\r\nc=IN IP4 {ip}\r\nt=0 0\r\n\
m=audio {port} RTP/AVP 0 8 96\r\na=rtpmap:96 AMR-WB/16000\r\na=ptime:20\r\n"
        );
        m += &format!(
            "Content-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{sdp}",
            sdp.len()
        );
    } else {
        m += "Content-Length: 0\r\n\r\n";
    }
    m.into_bytes()
}

fn avp(out: &mut Vec<u8>, code: u32, data: &[u8]) {
    out.extend_from_slice(&code.to_be_bytes());
    out.push(0x40);
    let len = 8 + data.len() as u32;
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.extend_from_slice(data);
    while out.len() % 4 != 0 {
        out.push(0);
    }
}

fn diameter(r: &mut Rng, n: u64) -> Vec<u8> {
    let mut body = Vec::new();
    let session = format!("pgw.example.invalid;{};{}", num(r, 1 << 32), n);
    avp(&mut body, 263, session.as_bytes());
    avp(&mut body, 264, b"pgw.example.invalid");
    avp(&mut body, 296, b"example.invalid");
    avp(&mut body, 258, &(num(r, 16) as u32).to_be_bytes());
    avp(&mut body, 416, &(1 + num(r, 3) as u32).to_be_bytes());
    avp(&mut body, 415, &(n as u32).to_be_bytes());
    for _ in 0..(1 + num(r, 6)) {
        avp(
            &mut body,
            1000 + num(r, 60) as u32,
            &num(r, u64::MAX).to_be_bytes(),
        );
    }
    let imsi = format!("24001{:010}", num(r, 10_000_000_000));
    avp(&mut body, 1, imsi.as_bytes());
    let mut m = vec![1u8];
    m.extend_from_slice(&(20 + body.len() as u32).to_be_bytes()[1..]);
    m.push(0x80);
    m.extend_from_slice(&272u32.to_be_bytes()[1..]);
    m.extend_from_slice(&16_777_238u32.to_be_bytes());
    m.extend_from_slice(&(n as u32).to_be_bytes());
    m.extend_from_slice(&(num(r, 1 << 32) as u32).to_be_bytes());
    m.extend_from_slice(&body);
    m
}

fn json(r: &mut Rng, n: u64) -> Vec<u8> {
    let op = pick(
        r,
        &[
            "bearer.update",
            "session.create",
            "node.heartbeat",
            "alarm.clear",
            "stats.report",
        ],
    );
    let node = pick(r, &["mme-1", "sgw-2", "pgw-1", "hss-3", "pcrf-1"]);
    let mut s = format!(
        "{{\"seq\":{n},\"op\":\"{op}\",\"node\":\"{node}\",\"ts\":{},\"session\":\"{:016x}\",\"params\":{{",
        1_700_000_000_000u64 + n * 7,
        num(r, u64::MAX)
    );
    let k = 2 + num(r, 8);
    for i in 0..k {
        if i > 0 {
            s.push(',');
        }
        let key = pick(
            r,
            &[
                "qci", "arp", "mbr_ul", "mbr_dl", "apn", "cell", "tac", "rat", "load",
            ],
        );
        s += &format!("\"{key}_{i}\":{}", num(r, 100_000));
    }
    s += "},\"status\":\"ok\"}";
    s.into_bytes()
}
