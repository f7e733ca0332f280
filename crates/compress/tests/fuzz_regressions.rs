//! Replays the fuzz corpus (`fuzz/corpus/<target>/`) through the same checks
//! as the cargo-fuzz targets, so every checked-in input — the seeds and any
//! crash cargo-fuzz found, added here as a file — runs in the ordinary test
//! suite without cargo-fuzz.

use hwqos_compress::fuzz_checks;
use std::path::Path;

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "empty corpus {}", dir.display());
    files.iter().map(|f| std::fs::read(f).unwrap()).collect()
}

#[test]
fn decode_frame_corpus() {
    let decoded: usize = corpus("decode_frame")
        .iter()
        .map(|data| fuzz_checks::decode_frame(data))
        .sum();
    assert!(decoded > 0, "the seeds hold valid messages");
}

#[test]
fn stream_parser_corpus() {
    for data in corpus("stream_parser") {
        fuzz_checks::stream_parser(&data);
    }
}

#[test]
fn codecs_corpus() {
    let ok = corpus("codecs")
        .iter()
        .filter(|data| fuzz_checks::codecs(data))
        .count();
    assert!(ok > 0, "the seeds hold valid compressed messages");
}

#[cfg(feature = "zstd")] // the stream codecs
#[test]
fn stream_contexts_corpus() {
    let decoded: usize = corpus("stream_contexts")
        .iter()
        .map(|data| fuzz_checks::stream_contexts(data))
        .sum();
    assert!(decoded > 0, "the seeds hold valid stream frames");
}
