//! The on-disk PTX cache's entries: one file per kernel, source, target and NVRTC version
//! (the caller names it), holding a header line with the PTX's length and checksum, then the
//! PTX. An entry is trusted only when the header, the length, the checksum and the kernel's
//! entry point all match: a truncated, corrupted or foreign file is compiled again and
//! rewritten. Entries are written to a temporary file and renamed, so a concurrent reader
//! never sees half of one. A cache that cannot be written (a read-only or full disk, a path
//! that is not a directory) costs a compile per process, one warning, never an error.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

/// The header's first words; the version changed when the checksum was added (v1 entries,
/// which had none, are compiled again).
const MAGIC: &str = "// kiln ptx cache v2";

/// FNV-1a, 64 bits: stable across Rust releases and platforms (unlike `DefaultHasher`), so
/// an entry's checksum means the same to every build that reads it.
fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// An entry's text: the header line, then `ptx`.
fn entry_text(ptx: &str) -> String {
    format!(
        "{MAGIC} {} {:016x}\n{ptx}",
        ptx.len(),
        checksum(ptx.as_bytes())
    )
}

/// The PTX of the entry in `file`, when it is whole and holds `.entry <kernel>`.
fn read_entry(file: &Path, kernel: &str) -> Option<String> {
    let text = std::fs::read_to_string(file).ok()?;
    let (header, ptx) = text.split_once('\n')?;
    let mut words = header.strip_prefix(MAGIC)?.split_whitespace();
    let len: usize = words.next()?.parse().ok()?;
    let sum = u64::from_str_radix(words.next()?, 16).ok()?;
    let whole = words.next().is_none()
        && ptx.len() == len
        && checksum(ptx.as_bytes()) == sum
        && ptx.contains(&format!(".entry {kernel}"));
    whole.then(|| ptx.to_string())
}

/// Writes `ptx` as the entry `file` (a temporary file renamed into place).
fn write_entry(file: &Path, ptx: &str, tmp_id: u64) -> std::io::Result<()> {
    let dir = file.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".{}-{tmp_id}.tmp", std::process::id()));
    let written = std::fs::write(&tmp, entry_text(ptx)).and_then(|()| std::fs::rename(&tmp, file));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Whether a failed cache write has been reported in this process.
static WARNED: AtomicBool = AtomicBool::new(false);

/// Where the PTX came from.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// a whole entry of the cache
    Cache,
    /// compiled and stored in the cache
    Stored,
    /// compiled; the cache could not be written (the reason)
    Unstored(String),
}

/// The PTX for `kernel` from the entry `file`, or else from `compile`, then stored there.
pub(crate) fn through_cache<E>(
    file: &Path,
    kernel: &str,
    tmp_id: u64,
    compile: impl FnOnce() -> Result<String, E>,
) -> Result<(String, Source), E> {
    if let Some(ptx) = read_entry(file, kernel) {
        return Ok((ptx, Source::Cache));
    }
    let ptx = compile()?;
    match write_entry(file, &ptx, tmp_id) {
        Ok(()) => Ok((ptx, Source::Stored)),
        Err(e) => {
            let reason = format!("cannot write {}: {e}", file.display());
            if !WARNED.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    target: "kiln::code",
                    "the PTX cache is not used: {reason} (kernels are compiled each run)"
                );
            }
            Ok((ptx, Source::Unstored(reason)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::path::PathBuf;

    const PTX: &str = "//\n.version 8.5\n.target sm_90\n.visible .entry kiln_k0(\n  .param .u64 p0\n)\n{\n  ret;\n}\n";

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("kiln-ptx-cache-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    /// `through_cache` with a compiler that counts its calls.
    fn get(file: &Path, compiles: &Cell<usize>) -> (String, Source) {
        through_cache(file, "kiln_k0", 0, || {
            compiles.set(compiles.get() + 1);
            Ok::<_, ()>(PTX.to_string())
        })
        .unwrap()
    }

    #[test]
    fn an_entry_is_written_once_then_read() {
        let d = dir("hit");
        let file = d.join("kiln_k0-1.ptx");
        let n = Cell::new(0);
        assert_eq!(get(&file, &n), (PTX.to_string(), Source::Stored));
        assert_eq!(get(&file, &n), (PTX.to_string(), Source::Cache));
        assert_eq!(n.get(), 1);
        // no temporary file is left behind
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn truncated_corrupted_and_foreign_entries_are_compiled_again() {
        let d = dir("bad");
        let file = d.join("kiln_k0-1.ptx");
        let n = Cell::new(0);
        get(&file, &n);
        let whole = std::fs::read(&file).unwrap();
        let mut bad: Vec<Vec<u8>> = Vec::new();
        // every truncation, including those that keep the entry point
        for cut in 0..whole.len() {
            bad.push(whole[..cut].to_vec());
        }
        // every single-bit flip past the header
        let body = whole.iter().position(|&b| b == b'\n').unwrap() + 1;
        for i in body..whole.len() {
            let mut w = whole.clone();
            w[i] ^= 0x04;
            bad.push(w);
        }
        bad.push(b"garbage".to_vec());
        bad.push(format!("// kiln ptx cache v1\n{PTX}").into_bytes());
        bad.push(entry_text(&PTX.replace("kiln_k0", "kiln_k1")).into_bytes());
        bad.push([&whole[..], b"extra"].concat());
        for (i, b) in bad.iter().enumerate() {
            std::fs::write(&file, b).unwrap();
            let before = n.get();
            let (ptx, source) = get(&file, &n);
            assert_eq!(ptx, PTX, "case {i}");
            assert_eq!(
                source,
                Source::Stored,
                "case {i}: {:?}",
                String::from_utf8_lossy(b)
            );
            assert_eq!(n.get(), before + 1, "case {i}");
            // and the entry is whole again
            assert_eq!(std::fs::read(&file).unwrap(), whole, "case {i}");
        }
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn an_unwritable_cache_compiles_every_time_without_an_error() {
        let d = dir("unwritable");
        std::fs::create_dir_all(&d).unwrap();
        // the cache directory is a regular file: nothing can be created under it (this
        // holds for root too, unlike a read-only mode)
        let not_a_dir = d.join("file");
        std::fs::write(&not_a_dir, "x").unwrap();
        let n = Cell::new(0);
        for round in 1..=2 {
            let (ptx, source) = get(&not_a_dir.join("kiln_k0-1.ptx"), &n);
            assert_eq!(ptx, PTX);
            assert!(
                matches!(&source, Source::Unstored(r) if r.contains("cannot write")),
                "{source:?}"
            );
            assert_eq!(n.get(), round);
        }
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_failing_compile_is_returned_and_nothing_is_stored() {
        let d = dir("failing");
        let file = d.join("kiln_k0-1.ptx");
        let r = through_cache(&file, "kiln_k0", 0, || Err::<String, _>("nvrtc failed"));
        assert_eq!(r.unwrap_err(), "nvrtc failed");
        assert!(!file.exists());
        let _ = std::fs::remove_dir_all(&d);
    }
}
