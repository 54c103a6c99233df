//! `kiln embed [--compile] [--json FILE] "sentence" ...`: all-MiniLM-L6-v2 sentence
//! embeddings from the published files (`KILN_MINILM`, see `scripts/fetch-minilm.sh`): each
//! embedding's first values and the pairwise cosine similarities; `--json` writes the full
//! embeddings and token ids in the shape of `shared/data/minilm/reference.json`.

use super::CliError;
use kiln::nn::MiniLm;
use kiln::{Backend, CompileOptions};
use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

/// How many leading values of each embedding are printed.
const SHOWN: usize = 6;

/// Runs the command.
pub fn embed(texts: &[String], compile: bool, json: Option<&Path>) -> Result<(), CliError> {
    if texts.is_empty() {
        return Err("give at least one sentence, e.g. kiln embed \"hello world\"".into());
    }
    let t0 = Instant::now();
    let model = MiniLm::from_env()?;
    let load_ms = t0.elapsed().as_secs_f64() * 1e3;
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let batch = model.tokenize(&refs)?;
    let args = [
        batch.input_ids.clone(),
        batch.attention_mask.clone(),
        batch.position_ids.clone(),
    ];
    let t1 = Instant::now();
    let emb = if compile {
        let f = model.compile(CompileOptions::default().backend(Backend::Cpu));
        f.call(&args)?
    } else {
        model.forward(&args[0], &args[1], &args[2])?
    };
    let run_ms = t1.elapsed().as_secs_f64() * 1e3;
    let d = emb.shape()[1];
    let values = emb.to_vec::<f32>()?;
    let rows: Vec<&[f32]> = values.chunks(d).collect();
    let mut out = String::new();
    writeln!(
        out,
        "all-MiniLM-L6-v2: {} sentence(s), padded to {} tokens; loaded in {load_ms:.0} ms, \
         {} in {run_ms:.1} ms",
        texts.len(),
        batch.input_ids.shape()[1],
        if compile {
            "compiled (cpu) and ran"
        } else {
            "ran eagerly"
        }
    )?;
    for (i, (text, row)) in texts.iter().zip(&rows).enumerate() {
        let head: Vec<String> = row.iter().take(SHOWN).map(|v| format!("{v:+.5}")).collect();
        writeln!(
            out,
            "[{i}] {text:?} ({} tokens): [{}, ...]",
            batch.ids[i].len(),
            head.join(", ")
        )?;
    }
    if rows.len() > 1 {
        writeln!(out, "cosine similarity:")?;
        for (i, a) in rows.iter().enumerate() {
            let sims: Vec<String> = rows
                .iter()
                .map(|b| format!("{:6.3}", a.iter().zip(*b).map(|(x, y)| x * y).sum::<f32>()))
                .collect();
            writeln!(out, "  [{i}] {}", sims.join(" "))?;
        }
    }
    print!("{out}");
    if let Some(path) = json {
        let cases: Vec<serde_json::Value> = texts
            .iter()
            .zip(&rows)
            .zip(&batch.ids)
            .map(|((text, row), ids)| {
                serde_json::json!({ "text": text, "input_ids": ids, "embedding": row })
            })
            .collect();
        let doc = serde_json::json!({ "model": "all-MiniLM-L6-v2", "cases": cases });
        std::fs::write(path, serde_json::to_string_pretty(&doc)?)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
