//! The relay agent: a compressing side and a decompressing side that carry
//! unmodified TCP traffic across a link with adaptive compression.
