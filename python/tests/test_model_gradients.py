"""Training gradients of real Hugging Face architectures through torch.compile(backend="kiln"),
with the defaults users get (scaled-dot-product attention, no `attn_implementation`), judged
against a float64 eager run.

Each model is built from a small config with random weights (no download), in train mode
with dropout 0. The loss is `sum(out * w)` over the model's main output with a fixed random
`w`, so every output entry moves it; the output and every parameter's gradient must pass
`kiln.accuracy.judge` (error against float64 within 3× eager float32's own, plus 1e-6 of the
gradient's scale), and every op must run in kiln. Before the attention fix GPT-2's
`wte.weight` gradient was off by 100× its size here while the loss still went down."""

from __future__ import annotations

import copy

import pytest
import torch

import kiln
from kiln.accuracy import judge
from kiln.backend import ExplainReport

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("fresh_dynamo")

VOCAB = 101


def _models():
    t = transformers
    no_drop = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return {
        "gpt2": (t.GPT2LMHeadModel, t.GPT2Config(
            vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64,
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0,
            eos_token_id=0), "ids"),
        "bert": (t.BertModel, t.BertConfig(
            vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64, **no_drop), "ids_and_padding"),
        "llama_gqa": (t.LlamaForCausalLM, t.LlamaConfig(
            vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, intermediate_size=64), "ids"),
        "vit": (t.ViTModel, t.ViTConfig(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            image_size=16, patch_size=4, **no_drop), "image"),
        "t5": (t.T5Model, t.T5Config(
            vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
            dropout_rate=0.0), "encoder_decoder"),
        "bart": (t.BartModel, t.BartConfig(
            vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2,
            encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
            decoder_ffn_dim=64, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
            max_position_embeddings=64), "encoder_decoder"),
    }


def _inputs(kind: str, g: torch.Generator) -> dict:
    if kind == "image":
        return {"pixel_values": torch.randn(3, 3, 16, 16, generator=g)}
    ids = torch.randint(0, VOCAB, (3, 11), generator=g)
    out = {"input_ids": ids}
    if kind == "ids_and_padding":
        mask = torch.ones(3, 11, dtype=torch.long)
        mask[1, 7:] = 0
        out["attention_mask"] = mask
    if kind == "encoder_decoder":
        out["decoder_input_ids"] = torch.randint(0, VOCAB, (3, 7), generator=g)
    return out


def _main_output(o) -> torch.Tensor:
    return o.logits if hasattr(o, "logits") else o.last_hidden_state


@pytest.mark.parametrize("name", list(_models()))
def test_training_gradients_match_float64(name):
    cls, config, kind = _models()[name]
    torch.manual_seed(0)
    model = cls(config).train()
    runs = {"kiln": model, "eager": copy.deepcopy(model), "eager64": copy.deepcopy(model).double()}
    g = torch.Generator().manual_seed(1)
    inputs = _inputs(kind, g)
    report = ExplainReport()
    compiled = torch.compile(model, backend=kiln.backend(_report=report))
    results = {}
    w = None
    for key, m in runs.items():
        dtype = torch.float64 if key == "eager64" else torch.float32
        x = {k: v.to(dtype) if v.is_floating_point() else v for k, v in inputs.items()}
        out = _main_output((compiled if key == "kiln" else m)(**x))
        if w is None:
            w = torch.randn(out.shape, generator=g, dtype=torch.float64)
        (out * w.to(dtype)).sum().backward()
        results[key] = (out.detach(), {n: p.grad for n, p in m.named_parameters()})
    verdicts = [judge("output", *(results[k][0] for k in runs))]
    for pname in results["eager"][1]:
        verdicts.append(judge(pname, *(results[k][1][pname] for k in runs)))
    bad = [str(v) for v in verdicts if not v.ok]
    assert not bad, f"{name}: {len(bad)} of {len(verdicts)} fail:\n" + "\n".join(bad)
    assert report.eager_nodes == 0, str(report)
    # the check is not vacuous: the gradients are far from rounding noise
    scale = max(results["eager64"][1][n].abs().max().item() for n in results["eager64"][1]
                if results["eager64"][1][n] is not None)
    assert scale > 1e-2
