//! `hwqos-dist-assets` behaves like a command-line tool: `--help` and
//! `--version` print and write nothing, a missing argument is a usage error.

use std::process::Command;

const ASSETS: &str = env!("CARGO_BIN_EXE_hwqos-dist-assets");

#[test]
fn help_and_version_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    for flag in ["--help", "-h", "--version"] {
        let o = Command::new(ASSETS)
            .arg(flag)
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(o.status.success(), "{flag}");
        assert!(!o.stdout.is_empty(), "{flag} prints");
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert!(left.is_empty(), "{flag} created {left:?}");
    }
    let o = Command::new(ASSETS)
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("OUT_DIR"));
}

#[test]
fn assets_are_written_into_the_directory_given() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("assets");
    let o = Command::new(ASSETS).arg(&out).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.join("man/hwqos.1").is_file());
    assert!(out.join("completions/bash/hwqos").is_file());
}
