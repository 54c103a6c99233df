//! Helpers shared by the tests that run the `kiln` binary.
#![allow(dead_code)] // each test file uses some of them

use std::path::PathBuf;
use std::process::Command;

/// Runs `kiln args` with `KILN_LOGS` set to `logs` (unset when `None`); returns success,
/// stdout and stderr.
pub fn kiln_with_logs(args: &[&str], logs: Option<&str>) -> (bool, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kiln"));
    cmd.args(args).env_remove("KILN_LOGS");
    if let Some(l) = logs {
        cmd.env("KILN_LOGS", l);
    }
    let out = cmd.output().expect("run kiln");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// Runs `kiln args` without logs.
pub fn kiln(args: &[&str]) -> (bool, String, String) {
    kiln_with_logs(args, None)
}

/// Writes `text` to `name` in this test process's temporary folder.
pub fn tmp(name: &str, text: &str) -> PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("kiln-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}
