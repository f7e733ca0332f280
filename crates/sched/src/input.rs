//! Reading contracts, models and configurations safely: only regular files,
//! never more than a bound, and never blocking on a FIFO (opened
//! `O_NONBLOCK`, refused before any read).

use crate::SchedError;
use std::path::Path;

/// Default bound for a contract or configuration file.
pub const MAX_INPUT_BYTES: u64 = 16 << 20;

/// Reads `path` as UTF-8 text: a regular file of at most `max` bytes
/// ([`hwqos_core::fs::read_text_bounded`]). Devices (`/dev/zero`), FIFOs,
/// sockets and directories are refused with an error naming the path and
/// what it is.
pub fn read_regular(path: &Path, max: u64) -> Result<String, SchedError> {
    hwqos_core::fs::read_text_bounded(path, max).map_err(|e| match e.kind() {
        std::io::ErrorKind::InvalidInput | std::io::ErrorKind::InvalidData => {
            SchedError::invalid(format!("file {}", path.display()), e.to_string())
        }
        _ => SchedError::File {
            path: path.to_path_buf(),
            source: e,
        },
    })
}

/// Checks that no JSON object in `text` has a key twice (serde_json keeps
/// the last one silently, so `{"quota": 5, "quota": 100}` would mean 100).
/// The error names the key, with serde_json's line and column.
pub fn check_no_duplicate_keys(text: &str) -> Result<(), serde_json::Error> {
    use serde::Deserialize as _;
    let mut de = serde_json::Deserializer::from_str(text);
    NoDuplicateKeys::deserialize(&mut de)?;
    de.end()
}

struct NoDuplicateKeys;

impl<'de> serde::Deserialize<'de> for NoDuplicateKeys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NoDuplicateKeysVisitor)
    }
}

struct NoDuplicateKeysVisitor;

impl<'de> serde::de::Visitor<'de> for NoDuplicateKeysVisitor {
    type Value = NoDuplicateKeys;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(NoDuplicateKeys)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(NoDuplicateKeys)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(NoDuplicateKeys)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(NoDuplicateKeys)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(NoDuplicateKeys)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(NoDuplicateKeys)
    }
    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(NoDuplicateKeys)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
        while a.next_element::<NoDuplicateKeys>()?.is_some() {}
        Ok(NoDuplicateKeys)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(key) = m.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                return Err(serde::de::Error::custom(format!("duplicate key `{key}`")));
            }
            m.next_value::<NoDuplicateKeys>()?;
        }
        Ok(NoDuplicateKeys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_devices_fifos_directories_and_big_files() {
        let dir = tempfile::tempdir().unwrap();
        let e = read_regular(Path::new("/dev/zero"), 1024)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/dev/zero") && e.contains("a character device, not a regular file"),
            "{e}"
        );
        let fifo = dir.path().join("f");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: `c` is a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // Would block forever without O_NONBLOCK (no writer).
        let e = read_regular(&fifo, 1024).unwrap_err().to_string();
        assert!(e.contains("a FIFO"), "{e}");
        let e = read_regular(dir.path(), 1024).unwrap_err().to_string();
        assert!(e.contains("a directory"), "{e}");
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'x'; 2000]).unwrap();
        let e = read_regular(&big, 1024).unwrap_err().to_string();
        assert!(e.contains("larger than 1024 bytes"), "{e}");
        std::fs::write(&big, "{}").unwrap();
        assert_eq!(read_regular(&big, 1024).unwrap(), "{}");
    }

    #[test]
    fn duplicate_keys_are_found_at_any_depth() {
        assert!(check_no_duplicate_keys(r#"{"a": [1, {"b": null, "c": "x"}], "d": 1.5}"#).is_ok());
        let e = check_no_duplicate_keys(r#"{"a": [{"q": {"x": 1, "x": 2}}]}"#)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("duplicate key `x`") && e.contains("column"),
            "{e}"
        );
        let e = check_no_duplicate_keys(r#"{"a": 1, "a": 1}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("duplicate key `a`"), "{e}");
        assert!(check_no_duplicate_keys("[1,2").is_err());
        assert!(check_no_duplicate_keys("{} x").is_err());
    }
}
