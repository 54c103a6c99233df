//! The on-disk cache of compiled C kernels: one shared object per key (a SHA-256 of the
//! source, the compiler's identity and the flags), stored with a SHA-256 of its own bytes.
//! An entry is used only when its bytes hash to the stored checksum; a missing, truncated
//! or corrupt entry is a miss (the kernel is compiled again and the entry rewritten). Files
//! are written under temporary names and renamed into place, so a reader never sees half a
//! file of a writer, and several processes may share the directory.

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The SHA-256 (hex) of the concatenation of `parts`, each prefixed by its length.
pub fn key(parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p);
    }
    hex(&h.finalize())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn checksum(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// A cache directory.
#[derive(Clone, Debug)]
pub struct Cache {
    dir: PathBuf,
}

impl Cache {
    /// The cache in `dir` (created if missing), or `None` when it cannot be created.
    pub fn open(dir: &Path) -> Option<Cache> {
        std::fs::create_dir_all(dir).ok()?;
        Some(Cache {
            dir: dir.to_path_buf(),
        })
    }

    /// The default directory: `KILN_CACHE_DIR`, else `$XDG_CACHE_HOME/kiln/c`, else
    /// `$HOME/.cache/kiln/c`, else the temporary directory's `kiln-cache/c`.
    pub fn default_dir() -> PathBuf {
        if let Some(d) = std::env::var_os("KILN_CACHE_DIR").filter(|d| !d.is_empty()) {
            return PathBuf::from(d).join("c");
        }
        if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
            return PathBuf::from(d).join("kiln").join("c");
        }
        if let Some(h) = std::env::var_os("HOME").filter(|d| !d.is_empty()) {
            return PathBuf::from(h).join(".cache").join("kiln").join("c");
        }
        std::env::temp_dir().join("kiln-cache").join("c")
    }

    /// Whether `dir` holds any entry (read once per directory and process): kernels look
    /// for their object at their first call only where there can be one.
    pub fn has_entries(dir: &Path) -> bool {
        static SEEN: std::sync::Mutex<Vec<(PathBuf, bool)>> = std::sync::Mutex::new(Vec::new());
        let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, any)) = seen.iter().find(|(d, _)| d == dir) {
            return *any;
        }
        let any = std::fs::read_dir(dir).is_ok_and(|mut entries| {
            entries.any(|e| e.is_ok_and(|e| e.path().extension().is_some_and(|x| x == "so")))
        });
        seen.push((dir.to_path_buf(), any));
        any
    }

    /// The path of an entry's object.
    pub fn object_path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.so"))
    }

    fn sum_path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.sha256"))
    }

    /// The object stored for `key`, if its bytes match their checksum.
    pub fn get(&self, key: &str) -> Option<Vec<u8>> {
        let bytes = std::fs::read(self.object_path(key)).ok()?;
        let sum = std::fs::read_to_string(self.sum_path(key)).ok()?;
        (!bytes.is_empty() && sum.trim() == checksum(&bytes)).then_some(bytes)
    }

    /// Stores `bytes` as the object of `key` (the checksum first, then the object: a reader
    /// between the two renames finds a mismatch and compiles).
    pub fn put(&self, key: &str, bytes: &[u8]) -> std::io::Result<()> {
        static N: AtomicU64 = AtomicU64::new(0);
        let tmp = |ext: &str| {
            self.dir.join(format!(
                "{key}.{ext}.tmp-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ))
        };
        let (ts, to) = (tmp("sha256"), tmp("so"));
        std::fs::write(&ts, checksum(bytes))?;
        std::fs::write(&to, bytes)?;
        std::fs::rename(&ts, self.sum_path(key))?;
        std::fs::rename(&to, self.object_path(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_damaged_ones_are_misses() {
        let dir = tempfile::tempdir().expect("tempdir");
        let c = Cache::open(dir.path()).expect("cache");
        let k = key(&[b"source", b"cc 1.0", b"-O3"]);
        assert_eq!(k.len(), 64);
        assert_ne!(k, key(&[b"source", b"cc 1.1", b"-O3"]));
        // the length prefix keeps part boundaries apart
        assert_ne!(key(&[b"ab", b"c"]), key(&[b"a", b"bc"]));
        assert!(c.get(&k).is_none());
        let obj = b"\x7fELF not really an object".to_vec();
        c.put(&k, &obj).expect("put");
        assert_eq!(c.get(&k).as_deref(), Some(obj.as_slice()));
        // truncated
        std::fs::write(c.object_path(&k), &obj[..5]).expect("write");
        assert!(c.get(&k).is_none());
        // one byte changed
        let mut bad = obj.clone();
        bad[3] ^= 1;
        std::fs::write(c.object_path(&k), &bad).expect("write");
        assert!(c.get(&k).is_none());
        // empty
        std::fs::write(c.object_path(&k), b"").expect("write");
        assert!(c.get(&k).is_none());
        // rewritten: good again
        c.put(&k, &obj).expect("put");
        assert_eq!(c.get(&k).as_deref(), Some(obj.as_slice()));
        // the checksum file lost
        std::fs::remove_file(dir.path().join(format!("{k}.sha256"))).expect("rm");
        assert!(c.get(&k).is_none());
    }
}
