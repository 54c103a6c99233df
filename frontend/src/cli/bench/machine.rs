//! The machine a benchmark ran on: CPU model, logical cores and the ISA extensions that
//! matter for tensor kernels, read from `/proc/cpuinfo` (with a fallback to run-time feature
//! detection where that file does not exist).

use serde::Serialize;

/// ISA flags worth recording, in the spelling of `/proc/cpuinfo`'s `flags` (x86) and
/// `Features` (aarch64) lines.
const RELEVANT: &[&str] = &[
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx_vnni",
    "avx512f",
    "avx512dq",
    "avx512cd",
    "avx512bw",
    "avx512vl",
    "avx512ifma",
    "avx512vbmi",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "asimd",
    "asimdhp",
    "sve",
    "sve2",
];

/// The CPU model, the number of logical cores kiln's thread pool uses, and ISA flags.
#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    /// the CPU model (`model name` of /proc/cpuinfo), or `unknown`
    pub cpu: String,
    /// logical cores used (the size of rayon's global pool, which kiln's kernels run on)
    pub cores: usize,
    /// the relevant ISA flags present, in [`RELEVANT`]'s order
    pub isa: Vec<String>,
}

impl Machine {
    /// Describes this machine.
    pub fn detect() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let (cpu, isa) = parse_cpuinfo(&cpuinfo);
        Machine {
            cpu: cpu.unwrap_or_else(|| "unknown".into()),
            cores: rayon::current_num_threads().max(1),
            isa: if isa.is_empty() {
                detected_features()
            } else {
                isa
            },
        }
    }

    /// One line for the terminal: `CPU, N cores, isa: a b c`.
    pub fn line(&self) -> String {
        format!(
            "{}, {} cores, isa: {}",
            self.cpu,
            self.cores,
            if self.isa.is_empty() {
                "-".to_string()
            } else {
                self.isa.join(" ")
            }
        )
    }
}

/// The CPU model and the relevant flags of the first processor listed in `text`.
fn parse_cpuinfo(text: &str) -> (Option<String>, Vec<String>) {
    let mut cpu = None;
    let mut flags: Vec<&str> = Vec::new();
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let (key, value) = (key.trim(), value.trim());
        match key {
            "model name" | "Model" | "cpu model" if cpu.is_none() && !value.is_empty() => {
                cpu = Some(value.to_string())
            }
            "flags" | "Features" if flags.is_empty() => flags = value.split_whitespace().collect(),
            _ => {}
        }
    }
    let isa = RELEVANT
        .iter()
        .filter(|f| flags.contains(f))
        .map(|f| f.to_string())
        .collect();
    (cpu, isa)
}

/// The relevant flags by run-time detection (where /proc/cpuinfo is missing).
fn detected_features() -> Vec<String> {
    #[allow(unused_mut)]
    let mut found: Vec<&str> = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        macro_rules! probe {
            ($($feature:tt => $name:literal),* $(,)?) => {
                $(if std::arch::is_x86_feature_detected!($feature) { found.push($name); })*
            };
        }
        probe!(
            "sse4.2" => "sse4_2",
            "avx" => "avx",
            "avx2" => "avx2",
            "fma" => "fma",
            "f16c" => "f16c",
            "avx512f" => "avx512f",
            "avx512dq" => "avx512dq",
            "avx512cd" => "avx512cd",
            "avx512bw" => "avx512bw",
            "avx512vl" => "avx512vl",
        );
    }
    found.into_iter().map(String::from).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_model_and_flags() {
        let text = "processor\t: 0\nmodel name\t: Test CPU @ 3GHz\n\
                    flags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512bw\n\n\
                    processor\t: 1\nmodel name\t: Other\nflags\t\t: fpu\n";
        let (cpu, isa) = parse_cpuinfo(text);
        assert_eq!(cpu.as_deref(), Some("Test CPU @ 3GHz"));
        assert_eq!(isa, ["sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw"]);
    }

    #[test]
    fn detects_this_machine() {
        let m = Machine::detect();
        assert!(m.cores >= 1);
        assert!(!m.cpu.is_empty());
    }
}
