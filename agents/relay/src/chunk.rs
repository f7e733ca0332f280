//! How many bytes the compressing side reads from the application as one
//! message.
//!
//! A larger message compresses better (each message is compressed on its
//! own unless a stream codec carries a history, and 16 KiB pieces of text
//! put 1.13× the bytes of 256 KiB pieces on the link with zstd-1,
//! docs/compression.md) but costs its buffer per connection and waits for
//! more bytes. A read returns what the socket holds, so the size only
//! matters when the application is ahead of the relay: then the read
//! fills the buffer. [`ReadSize`] starts small and doubles while reads
//! fill it (a bulk transfer), up to `chunk_bytes`, and halves again after
//! a run of reads that used little of it, so request/response connections
//! keep a small buffer and a bulk one gets large messages within a few
//! reads.

/// The first read size (or `chunk_bytes`, if smaller).
pub const FIRST_READ: usize = 16 * 1024;
/// Reads in a row that used at most a quarter of the buffer before it halves.
pub const SHRINK_AFTER: u32 = 64;

/// The read size of one connection's application-to-link direction.
///
/// Invariant: `min <= current <= max`, and `current` is `min` times a power
/// of two or `max`.
#[derive(Debug, Clone)]
pub struct ReadSize {
    current: usize,
    min: usize,
    max: usize,
    small_in_row: u32,
}

impl ReadSize {
    /// Starts at [`FIRST_READ`] (at most `max`, at least 1); grows to `max`.
    pub fn new(max: usize) -> Self {
        let max = max.max(1);
        let min = FIRST_READ.min(max);
        ReadSize {
            current: min,
            min,
            max,
            small_in_row: 0,
        }
    }

    /// The size of the next read.
    pub fn current(&self) -> usize {
        self.current
    }

    /// Records a read of `n` bytes into a buffer of [`Self::current`]
    /// bytes and returns the size of the next read.
    pub fn after_read(&mut self, n: usize) -> usize {
        if n >= self.current {
            self.small_in_row = 0;
            self.current = (self.current * 2).min(self.max);
        } else if n <= self.current / 4 && self.current > self.min {
            self.small_in_row += 1;
            if self.small_in_row >= SHRINK_AFTER {
                self.small_in_row = 0;
                self.current = (self.current / 2).max(self.min);
            }
        } else {
            self.small_in_row = 0;
        }
        self.current
    }

    /// Resizes `buf` to the next read's size; a shrink gives the memory back.
    pub fn fit(&self, buf: &mut Vec<u8>) {
        if buf.len() != self.current {
            buf.resize(self.current, 0);
            if buf.capacity() > 2 * self.current {
                buf.shrink_to_fit();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_reads_double_up_to_the_maximum() {
        let mut r = ReadSize::new(256 * 1024);
        let sizes: Vec<usize> = (0..6).map(|_| r.after_read(r.current())).collect();
        assert_eq!(
            sizes,
            [32, 64, 128, 256, 256, 256].map(|k| k * 1024).to_vec()
        );
    }

    #[test]
    fn small_reads_keep_the_first_size() {
        let mut r = ReadSize::new(256 * 1024);
        for _ in 0..1000 {
            assert_eq!(r.after_read(300), FIRST_READ);
        }
    }

    #[test]
    fn a_run_of_small_reads_halves_a_grown_buffer() {
        let mut r = ReadSize::new(256 * 1024);
        while r.current() < 256 * 1024 {
            r.after_read(r.current());
        }
        for _ in 0..SHRINK_AFTER - 1 {
            assert_eq!(r.after_read(1000), 256 * 1024);
        }
        assert_eq!(r.after_read(1000), 128 * 1024);
        // A read using more than a quarter of the buffer restarts the run.
        for _ in 0..SHRINK_AFTER - 1 {
            r.after_read(1000);
        }
        r.after_read(64 * 1024);
        assert_eq!(r.after_read(1000), 128 * 1024);
    }

    #[test]
    fn a_maximum_below_the_first_size_is_used_as_is() {
        let mut r = ReadSize::new(1000);
        assert_eq!(r.current(), 1000);
        assert_eq!(r.after_read(1000), 1000);
        assert_eq!(ReadSize::new(0).current(), 1);
    }

    #[test]
    fn fit_resizes_and_releases_memory() {
        let mut r = ReadSize::new(256 * 1024);
        let mut buf = Vec::new();
        r.fit(&mut buf);
        assert_eq!(buf.len(), FIRST_READ);
        while r.current() < 256 * 1024 {
            r.after_read(r.current());
        }
        r.fit(&mut buf);
        assert_eq!(buf.len(), 256 * 1024);
        for _ in 0..3 * SHRINK_AFTER {
            r.after_read(10);
        }
        r.fit(&mut buf);
        assert_eq!(buf.len(), 32 * 1024);
        assert!(buf.capacity() <= 64 * 1024, "{}", buf.capacity());
    }
}
