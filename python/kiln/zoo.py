"""`python -m kiln.zoo`: a model zoo measured the way PyTorch measures Inductor on its
TorchBench, Hugging Face and timm dashboards: real architectures, built in code from their
configs with random weights (nothing is downloaded), compiled with
``torch.compile(backend="kiln")`` and judged and timed against eager PyTorch and Inductor.

The models (:data:`MODELS`, at least 30): Hugging Face ``transformers`` encoders (a masked-LM
head: the output judged is its logits), causal decoders (a causal-LM head), encoder-decoders
(a conditional-generation head, fed decoder ids) and vision transformers (an image
classification head), with transformers' default attention (SDPA where the model has it);
timm ResNet, MobileNet, EfficientNet, ConvNeXt, RegNet and ViT classifiers
(``timm.create_model(name, pretrained=False)``). Every dropout probability is set to 0, so a
compiled and an eager run compute the same function in training mode too.

Sizes (:data:`SIZES`):

* ``small``: hidden 128, 2 layers, 4 heads (2 key/value heads where the family groups them),
  intermediate 512, vocabulary 1000, batch 4, sequence 64; images 64×64, batch 4 (the timm
  models at that size, with fewer blocks where the model takes a depth, ``img_size`` where it
  takes one).
* ``base``: each family's published base configuration (bert-base-uncased, gpt2,
  t5-base, vit-base-patch16-224, resnet50 as timm defines it, ...), batch 8, sequence 128;
  images 224×224, batch 8. Families whose smallest published model is far above base size
  (Llama, Mistral, Qwen2, Phi, GPT-J, BLOOM; mBART and Pegasus, published large only) take
  bert-base's dimensions (768 wide, 12 layers of 12 heads) with their own layer design; each
  entry's ``base_from`` says which.

Modes: ``inference`` (``model.eval()``, ``torch.no_grad()``) and ``training``
(``model.train()``, forward, the loss ``sum(out * w)`` over the main output with a fixed
random ``w``, backward, ``torch.optim.SGD`` step). Batch norm in training mode updates its
running statistics, as it does for any user.

Each (model, size, mode) row is measured in fresh processes, one per side (eager, kiln,
inductor), so that a crash is that row's failure, and each side's peak memory is its own:

* accuracy (the kiln process): the compiled float32 model's main output (and in training,
  after one backward and before any optimizer step, every parameter's gradient) judged by
  :func:`kiln.accuracy.judge` against eager float32 and float64 runs of deep copies of the
  same initial model;
* graphs and graph breaks: Dynamo's counters (``torch._dynamo.utils.counters``);
* the ops that ran in kiln and those that fell back to eager PyTorch, named: a
  :class:`kiln.backend.ExplainReport` passed as ``kiln.backend(_report=...)`` (forward and
  backward graphs alike);
* speed (unless ``--accuracy-only``): the first call timed alone (trace, compile and run;
  in training the whole first step), then warm-up rounds of ``--seconds`` (and 3 calls)
  until a round's median is within 10% of the last's and, for kiln, as
  ``python -m kiln.bench`` waits, no more of its kernels moved to the C tier (at most 6
  rounds), then at least ``--min-runs`` calls and ``--seconds`` seconds: the median.
  Speedups are eager's (inductor's) median over kiln's. Each process runs with 2 threads,
  glibc's default malloc settings (``--nf``: ``python -m kiln.bench``'s, which keep freed
  memory; they made eager training steps of timm's ViT 100x slower here) and a fresh, empty
  kiln C-tier cache and inductor cache, so both first calls are cold compiles. The share
  of the machine other processes took while a side was timed is reported with it;
* peak memory: the process's peak resident set size (``VmHWM``, reset through
  ``/proc/self/clear_refs``; else ``ru_maxrss``) less its resident size once torch, the
  model libraries and both compilers are imported: weights, activations, gradients,
  optimizer state and compiler state, from the model's construction to the last timed call
  (the accuracy pass comes after).

The report goes to ``--out`` (markdown: one row per model, size and mode, then geometric
means per size and mode, the pass rate and the share of rows with no fallback) and
``--json``. ``--preset ci`` is a quick subset (a few small models, accuracy only) whose exit
status is 1 on any accuracy failure.

    python -m kiln.zoo [--models a,b] [--sizes small,base] [--modes inference,training]
                       [--preset ci] [--no-inductor] [--accuracy-only] [--seconds S]
                       [--min-runs N] [--timeout S] [--nf] [--out PATH] [--json PATH]
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any, Callable, Optional

import torch

from .bench import NF_ENV, THREADS, cpu_busy_s
from .workloads import timed_runs

SIZES = ("small", "base")
"""The sizes each model is built at (see the module doc)."""
MODES = ("inference", "training")
"""The modes each model is run in (see the module doc)."""
SIDES = ("eager", "kiln", "inductor")
"""The ways a model runs: eager PyTorch, ``torch.compile`` with kiln, with inductor."""

FAMILIES = {
    "hf-encoder": "transformers encoder (masked-LM head)",
    "hf-decoder": "transformers causal decoder (causal-LM head)",
    "hf-seq2seq": "transformers encoder-decoder (conditional generation)",
    "hf-vision": "transformers vision transformer (image classification)",
    "timm-resnet": "timm ResNet",
    "timm-mobilenet": "timm MobileNet",
    "timm-efficientnet": "timm EfficientNet",
    "timm-convnext": "timm ConvNeXt",
    "timm-regnet": "timm RegNet",
    "timm-vit": "timm ViT / DeiT",
}
"""Every family of the zoo, with what it stands for."""

TEXT = {"small": dict(batch=4, seq=64, vocab=1000), "base": dict(batch=8, seq=128)}
"""Text inputs per size (base keeps each config's own vocabulary)."""
IMAGE = {"small": dict(batch=4, pixels=64, labels=10),
         "base": dict(batch=8, pixels=224, labels=1000)}
"""Image inputs per size, and the classes of a transformers vision head."""

CI_MODELS = ("bert", "gpt2", "t5", "resnet18", "vit_tiny")
"""``--preset ci``'s models (small size, both modes, accuracy only)."""

SEED = 0
"""torch's seed before a model is built: the same weights in every process."""
LR = 1e-3
"""The SGD learning rate of a training step."""
CHILD_TIMEOUT_S = 1800
"""How long one side of one row may take by default (``--timeout``)."""
WARM_UP_ROUNDS = 6
"""The most warm-up rounds (of ``--seconds`` each) before timing."""
STEADY = 0.1
"""Warm-up ends when a round's median is within this share of the round's before."""


# ---------------------------------------------------------------------------------------
# The model table


@dataclasses.dataclass
class Case:
    """A built model and its inputs, ready to run."""

    model: torch.nn.Module
    inputs: dict[str, torch.Tensor]
    """Keyword arguments of ``model``'s forward."""


@dataclasses.dataclass(frozen=True)
class ZooModel:
    """One architecture of the zoo."""

    name: str
    """Its name on the command line (``--models``)."""
    family: str
    """A key of :data:`FAMILIES`."""
    make: Callable[[str], Case]
    """Builds it at a size of :data:`SIZES` (random weights from torch's global generator)."""
    base_from: str
    """Where its base size comes from (a published configuration, or whose dimensions)."""

    def build(self, size: str) -> Case:
        """The model at ``size``, its weights drawn after ``torch.manual_seed(SEED)``: the
        same weights on every call, in every process."""
        if size not in SIZES:
            raise ValueError(f"size {size!r} is not one of {SIZES}")
        torch.manual_seed(SEED)
        return self.make(size)


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def text_inputs(size: str, vocab: int) -> dict[str, torch.Tensor]:
    """Token ids (avoiding the first ids, where special tokens live) and an attention mask
    with the last sequence's final quarter padded."""
    b, s = TEXT[size]["batch"], TEXT[size]["seq"]
    ids = torch.randint(3, vocab, (b, s), generator=_generator(1))
    mask = torch.ones(b, s, dtype=torch.long)
    mask[-1, s - s // 4:] = 0
    return dict(input_ids=ids, attention_mask=mask)


def seq2seq_inputs(size: str, vocab: int) -> dict[str, torch.Tensor]:
    """:func:`text_inputs` plus decoder ids of the same length."""
    inputs = text_inputs(size, vocab)
    inputs["decoder_input_ids"] = torch.randint(3, vocab, inputs["input_ids"].shape,
                                                generator=_generator(2))
    return inputs


def image_inputs(size: str) -> torch.Tensor:
    """A batch of standard-normal images, NCHW."""
    b, p = IMAGE[size]["batch"], IMAGE[size]["pixels"]
    return torch.randn(b, 3, p, p, generator=_generator(3))


_DROPOUT_WORDS = ("dropout", "pdrop", "drop_prob", "drop_path", "layerdrop")
_SPECIAL_TOKENS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id",
                   "sep_token_id", "cls_token_id", "forced_bos_token_id",
                   "forced_eos_token_id")


def zero_dropout(config: Any) -> Any:
    """Sets every float dropout probability of a transformers config (and its sub-configs)
    to 0; returns it."""
    for key, value in config.to_dict().items():
        if isinstance(value, float) and any(w in key for w in _DROPOUT_WORDS):
            setattr(config, key, 0.0)
    for sub in getattr(config, "sub_configs", {}) or {}:
        inner = getattr(config, sub, None)
        if inner is not None and hasattr(inner, "to_dict"):
            zero_dropout(inner)
    return config


def clamp_special_tokens(config: Any) -> Any:
    """Special token ids past a small vocabulary's end moved inside it (pad 1, others 2), so
    that embeddings with a padding index build."""
    vocab = getattr(config, "vocab_size", None)
    for key in _SPECIAL_TOKENS:
        value = getattr(config, key, None)
        if isinstance(value, int) and vocab is not None and value >= vocab:
            setattr(config, key, 1 if key == "pad_token_id" else 2)
    return config


def _hf_class(name: str) -> Any:
    import transformers
    return getattr(transformers, name)


def _hf(name: str, family: str, config: str, head: str, small: dict, base: dict,
        base_from: str, inputs: str = "text") -> ZooModel:
    """A transformers model: ``head(config(**dims))`` with dropout 0 and no KV cache;
    ``inputs`` is "text", "seq2seq" or "image"."""

    def make(size: str) -> Case:
        cfg = _hf_class(config)(**(small if size == "small" else base))
        zero_dropout(cfg)
        clamp_special_tokens(cfg)
        if hasattr(cfg, "use_cache"):
            cfg.use_cache = False
        model = _hf_class(head)(cfg)
        if inputs == "image":
            return Case(model, dict(pixel_values=image_inputs(size)))
        vocab = cfg.vocab_size
        made = seq2seq_inputs(size, vocab) if inputs == "seq2seq" else text_inputs(size, vocab)
        return Case(model, made)

    return ZooModel(name, family, make, base_from)


def _timm(name: str, family: str, small: dict, alias: Optional[str] = None) -> ZooModel:
    """A timm model, ``timm.create_model(name, pretrained=False)`` with drop rates 0; at the
    small size with the ``small`` keyword arguments too (fewer blocks, ``img_size``); named
    ``alias`` on the command line where given."""

    def make(size: str) -> Case:
        import timm
        kwargs = dict(small) if size == "small" else {}
        model = timm.create_model(name, pretrained=False, drop_rate=0.0, drop_path_rate=0.0,
                                  **kwargs)
        return Case(model, dict(x=image_inputs(size)))

    return ZooModel(alias or name, family, make, f"timm {name}")


def _bert_dims(hidden: int, layers: int, heads: int, inter: int, **extra: Any) -> dict:
    """BERT-style config keywords."""
    return dict(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                intermediate_size=inter, **extra)


_VOCAB = TEXT["small"]["vocab"]
_S = dict(vocab_size=_VOCAB, max_position_embeddings=128)
"""The small size's vocabulary and positions, in BERT-style keywords."""
_BERT_BASE = _bert_dims(768, 12, 12, 3072)
_GQA_SMALL = _bert_dims(128, 2, 4, 512, num_key_value_heads=2, head_dim=32, **_S)
"""A grouped-query decoder at the small size."""
_GQA_BASE = _bert_dims(768, 12, 12, 2048, num_key_value_heads=4, head_dim=64,
                       vocab_size=32000, max_position_embeddings=2048)
"""A grouped-query decoder at bert-base's width and depth (SwiGLU: intermediate 2048)."""


def _seq2seq_dims(d: int, layers: int, heads: int, ffn: int, **extra: Any) -> dict:
    """BART-style config keywords (the same depth, heads and width on both sides)."""
    return dict(d_model=d, encoder_layers=layers, decoder_layers=layers,
                encoder_attention_heads=heads, decoder_attention_heads=heads,
                encoder_ffn_dim=ffn, decoder_ffn_dim=ffn, **extra)


_BEIT = dict(use_relative_position_bias=True, use_mean_pooling=True,
             layer_scale_init_value=0.1, use_absolute_position_embeddings=False)
"""microsoft/beit-base-patch16-224's layer design."""
_DEBERTA_V3 = dict(relative_attention=True, position_buckets=256, max_relative_positions=-1,
                   pos_att_type=["p2c", "c2p"], norm_rel_ebd="layer_norm",
                   share_att_key=True, position_biased_input=False, type_vocab_size=0)
"""microsoft/deberta-v3-base's layer design."""


def _vision_small(**extra: Any) -> dict:
    return _bert_dims(128, 2, 4, 512, image_size=64, patch_size=8,
                      num_labels=IMAGE["small"]["labels"], **extra)


def _vision_base(**extra: Any) -> dict:
    return dict(_BERT_BASE, image_size=224, patch_size=16, num_labels=IMAGE["base"]["labels"],
                **extra)


def _models() -> list[ZooModel]:
    """Every entry of the zoo (built lazily: nothing is imported or constructed here)."""
    enc, dec, s2s, vis = "hf-encoder", "hf-decoder", "hf-seq2seq", "hf-vision"
    small = _bert_dims(128, 2, 4, 512, **_S)
    rows = [
        # encoders, masked-LM heads
        _hf("bert", enc, "BertConfig", "BertForMaskedLM", small, _BERT_BASE,
            "bert-base-uncased"),
        _hf("distilbert", enc, "DistilBertConfig", "DistilBertForMaskedLM",
            dict(dim=128, n_layers=2, n_heads=4, hidden_dim=512, **_S),
            dict(dim=768, n_layers=6, n_heads=12, hidden_dim=3072),
            "distilbert-base-uncased"),
        _hf("roberta", enc, "RobertaConfig", "RobertaForMaskedLM", small,
            dict(_BERT_BASE, max_position_embeddings=514), "roberta-base"),
        _hf("albert", enc, "AlbertConfig", "AlbertForMaskedLM",
            dict(small, embedding_size=64),
            dict(_BERT_BASE, embedding_size=128, vocab_size=30000), "albert-base-v2"),
        _hf("electra", enc, "ElectraConfig", "ElectraForMaskedLM",
            dict(small, embedding_size=128), dict(_BERT_BASE, embedding_size=768),
            "google/electra-base-discriminator"),
        _hf("deberta_v2", enc, "DebertaV2Config", "DebertaV2ForMaskedLM",
            dict(small, **dict(_DEBERTA_V3, position_buckets=32)),
            dict(_BERT_BASE, vocab_size=128100, **_DEBERTA_V3), "microsoft/deberta-v3-base"),
        _hf("mpnet", enc, "MPNetConfig", "MPNetForMaskedLM", small,
            dict(_BERT_BASE, max_position_embeddings=514), "microsoft/mpnet-base"),
        # causal decoders, causal-LM heads
        _hf("gpt2", dec, "GPT2Config", "GPT2LMHeadModel",
            dict(n_embd=128, n_layer=2, n_head=4, n_inner=512, vocab_size=_VOCAB,
                 n_positions=128),
            dict(n_embd=768, n_layer=12, n_head=12), "gpt2 (124M)"),
        _hf("gpt_neo", dec, "GPTNeoConfig", "GPTNeoForCausalLM",
            dict(hidden_size=128, num_layers=2, num_heads=4, intermediate_size=512,
                 attention_types=[[["global", "local"], 1]], window_size=32, **_S),
            dict(hidden_size=768, num_layers=12, num_heads=12,
                 attention_types=[[["global", "local"], 6]], window_size=256),
            "EleutherAI/gpt-neo-125M"),
        _hf("llama", dec, "LlamaConfig", "LlamaForCausalLM", _GQA_SMALL, _GQA_BASE,
            "bert-base dims, 4 KV heads (smallest published Llama is far larger)"),
        _hf("qwen2", dec, "Qwen2Config", "Qwen2ForCausalLM",
            {k: v for k, v in _GQA_SMALL.items() if k != "head_dim"},
            {k: v for k, v in _GQA_BASE.items() if k != "head_dim"},
            "bert-base dims, 4 KV heads, vocab 32000 (Qwen2-0.5B is 5x larger)"),
        _hf("mistral", dec, "MistralConfig", "MistralForCausalLM",
            dict(_GQA_SMALL, sliding_window=None), dict(_GQA_BASE, sliding_window=None),
            "bert-base dims, 4 KV heads (Mistral is published at 7B)"),
        _hf("phi", dec, "PhiConfig", "PhiForCausalLM", small,
            dict(_BERT_BASE, vocab_size=51200, max_position_embeddings=2048),
            "bert-base dims, phi-1's vocabulary (phi-1 is 1.3B)"),
        _hf("opt", dec, "OPTConfig", "OPTForCausalLM",
            dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, ffn_dim=512,
                 word_embed_proj_dim=128, **_S),
            dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, ffn_dim=3072,
                 word_embed_proj_dim=768), "facebook/opt-125m"),
        _hf("gptj", dec, "GPTJConfig", "GPTJForCausalLM",
            dict(n_embd=128, n_layer=2, n_head=4, n_inner=512, rotary_dim=16,
                 vocab_size=_VOCAB, n_positions=128),
            dict(n_embd=768, n_layer=12, n_head=12, rotary_dim=32, vocab_size=50400),
            "bert-base dims, GPT-J's rotary share and vocabulary (GPT-J is 6B)"),
        _hf("bloom", dec, "BloomConfig", "BloomForCausalLM",
            dict(hidden_size=128, n_layer=2, n_head=4, vocab_size=_VOCAB),
            dict(hidden_size=768, n_layer=12, n_head=12, vocab_size=32000),
            "bert-base dims, vocab 32000 (bloom-560m's is 250880)"),
        # encoder-decoders, conditional-generation heads
        _hf("t5", s2s, "T5Config", "T5ForConditionalGeneration",
            dict(d_model=128, d_kv=32, d_ff=512, num_layers=2, num_decoder_layers=2,
                 num_heads=4, vocab_size=_VOCAB),
            dict(d_model=768, d_kv=64, d_ff=3072, num_layers=12, num_decoder_layers=12,
                 num_heads=12), "t5-base", "seq2seq"),
        _hf("bart", s2s, "BartConfig", "BartForConditionalGeneration",
            _seq2seq_dims(128, 2, 4, 512, **_S), _seq2seq_dims(768, 6, 12, 3072),
            "facebook/bart-base", "seq2seq"),
        _hf("marian", s2s, "MarianConfig", "MarianMTModel",
            _seq2seq_dims(128, 2, 4, 512, decoder_vocab_size=_VOCAB, **_S),
            _seq2seq_dims(512, 6, 8, 2048, max_position_embeddings=512),
            "Helsinki-NLP/opus-mt-en-de", "seq2seq"),
        _hf("mbart", s2s, "MBartConfig", "MBartForConditionalGeneration",
            _seq2seq_dims(128, 2, 4, 512, **_S), _seq2seq_dims(768, 6, 12, 3072),
            "bart-base dims (mBART is published large only)", "seq2seq"),
        _hf("pegasus", s2s, "PegasusConfig", "PegasusForConditionalGeneration",
            _seq2seq_dims(128, 2, 4, 512, **_S),
            _seq2seq_dims(768, 6, 12, 3072, vocab_size=96103),
            "bart-base dims, Pegasus' vocabulary (published large only)", "seq2seq"),
        # vision transformers, image-classification heads
        _hf("vit", vis, "ViTConfig", "ViTForImageClassification", _vision_small(),
            _vision_base(), "google/vit-base-patch16-224", "image"),
        _hf("deit", vis, "DeiTConfig", "DeiTForImageClassification", _vision_small(),
            _vision_base(), "facebook/deit-base-patch16-224", "image"),
        _hf("swin", vis, "SwinConfig", "SwinForImageClassification",
            dict(image_size=64, patch_size=4, embed_dim=64, depths=[2, 2], num_heads=[2, 4],
                 window_size=4, num_labels=IMAGE["small"]["labels"]),
            dict(embed_dim=128, depths=[2, 2, 18, 2], num_heads=[4, 8, 16, 32],
                 window_size=7, num_labels=IMAGE["base"]["labels"]),
            "microsoft/swin-base-patch4-window7-224", "image"),
        _hf("beit", vis, "BeitConfig", "BeitForImageClassification", _vision_small(**_BEIT),
            _vision_base(**_BEIT), "microsoft/beit-base-patch16-224", "image"),
        # timm
        _timm("resnet18", "timm-resnet", dict(layers=[1, 1, 1, 1])),
        _timm("resnet50", "timm-resnet", dict(layers=[1, 1, 1, 1])),
        _timm("mobilenetv3_small_100", "timm-mobilenet", {}),
        _timm("mobilenetv2_100", "timm-mobilenet", {}),
        _timm("efficientnet_b0", "timm-efficientnet", {}),
        _timm("convnext_atto", "timm-convnext", dict(depths=(1, 1, 2, 1))),
        _timm("convnext_tiny", "timm-convnext", dict(depths=(1, 1, 1, 1))),
        _timm("regnetx_002", "timm-regnet", {}),
        _timm("vit_tiny_patch16_224", "timm-vit",
              dict(img_size=64, patch_size=8, depth=2), "vit_tiny"),
        _timm("deit_tiny_patch16_224", "timm-vit",
              dict(img_size=64, patch_size=8, depth=2), "deit_tiny"),
    ]
    return rows


MODELS: dict[str, ZooModel] = {m.name: m for m in _models()}
"""The zoo, by name."""


# ---------------------------------------------------------------------------------------
# Running one model (in a child process)


def main_output(out: Any) -> torch.Tensor:
    """The output a model is judged and trained on: the tensor itself, else ``logits``,
    else ``last_hidden_state``, else the first element."""
    if isinstance(out, torch.Tensor):
        return out
    for key in ("logits", "last_hidden_state"):
        value = getattr(out, key, None)
        if isinstance(value, torch.Tensor):
            return value
    return out[0]


def loss_weights(out: torch.Tensor) -> torch.Tensor:
    """The fixed random ``w`` of the loss ``sum(out * w)`` (the same for every side)."""
    return torch.randn(out.shape, generator=_generator(4), dtype=out.dtype)


def as_double(inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The floating inputs in float64, the rest as they are."""
    return {k: v.double() if v.is_floating_point() else v for k, v in inputs.items()}


class Runner:
    """One model in one mode, as a callable step: an inference forward under no_grad, or a
    training step (zero the gradients, forward, weighted loss, backward, SGD step)."""

    def __init__(self, fn: Callable, model: torch.nn.Module, inputs: dict, mode: str):
        self.fn, self.model, self.inputs, self.mode = fn, model, inputs, mode
        self.w: Optional[torch.Tensor] = None
        self.opt = torch.optim.SGD(model.parameters(), lr=LR) if mode == "training" else None

    def __call__(self) -> None:
        if self.mode == "inference":
            with torch.no_grad():
                self.fn(**self.inputs)
            return
        self.opt.zero_grad(set_to_none=True)
        out = main_output(self.fn(**self.inputs))
        if self.w is None:
            self.w = loss_weights(out)
        (out * self.w).sum().backward()
        self.opt.step()


def set_mode(model: torch.nn.Module, mode: str) -> torch.nn.Module:
    """``model.eval()`` for inference, ``model.train()`` for training; returns the model."""
    return model.eval() if mode == "inference" else model.train()


def compiler(side: str, report: Any = None) -> Callable[[torch.nn.Module], Callable]:
    """How ``side`` wraps a model: as it is (eager), or ``torch.compile`` with kiln (its
    :class:`ExplainReport` filled in) or inductor."""
    if side == "eager":
        return lambda m: m
    if side == "kiln":
        from .backend import backend
        return lambda m: torch.compile(m, backend=backend(_report=report))
    return lambda m: torch.compile(m, backend="inductor")


def warm_up(step: Callable[[], None], seconds: float, kiln: bool) -> int:
    """Calls ``step`` in rounds (at least 3 calls and ``seconds`` each) until it runs at
    steady state: a round's median within :data:`STEADY` of the round's before and, for
    kiln, no more kernels moved to its C tier since (it moves hot kernels in the
    background; ``python -m kiln.bench`` waits the same way). At most
    :data:`WARM_UP_ROUNDS` rounds; returns how many ran."""
    from . import _native
    last, on_c = None, None
    for rounds in range(1, WARM_UP_ROUNDS + 1):
        median = statistics.median(timed_runs(step, 3, seconds))
        settled = last is not None and abs(median - last) <= STEADY * last
        if kiln:
            _native.wait_for_c_tier(300.0)
            now = len(_native.c_tier_swap_ages())
            settled, on_c = settled and now == on_c, now
        if settled:
            return rounds
        last = median
    return WARM_UP_ROUNDS


def _status_mb(key: str) -> Optional[float]:
    """A ``kB`` line of /proc/self/status in MiB; None where there is none."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return None


def reset_peak_rss() -> float:
    """Resets this process's peak resident set size to its current size where Linux allows
    (``/proc/self/clear_refs``); returns the current size in MiB."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    now = _status_mb("VmRSS")
    return now if now is not None else peak_rss_mb()


def peak_rss_mb() -> float:
    """This process's peak resident set size since the last :func:`reset_peak_rss` (since
    its start where that cannot reset it), in MiB."""
    peak = _status_mb("VmHWM")
    return peak if peak is not None else resource.getrusage(
        resource.RUSAGE_SELF).ru_maxrss / 1024


def preload_compilers() -> None:
    """Imports what torch.compile imports on its first call, with kiln's backend and
    inductor's compiler, so that every side's memory baseline holds them."""
    import torch._dynamo  # noqa: F401
    import torch._inductor.compile_fx  # noqa: F401
    from . import backend  # noqa: F401


def dynamo_graphs() -> dict:
    """Dynamo's graphs and graph breaks so far, with the breaks' reasons (most common
    first)."""
    counters = torch._dynamo.utils.counters
    breaks = counters.get("graph_break", {})
    return dict(graphs=int(counters.get("stats", {}).get("unique_graphs", 0)),
                breaks=int(sum(breaks.values())),
                break_reasons=[str(r)[:200] for r, _ in
                               sorted(breaks.items(), key=lambda kv: -kv[1])[:5]])


def time_side(entry: ZooModel, size: str, mode: str, side: str, seconds: float,
              min_runs: int, report: Any) -> dict:
    """Builds the model, compiles it for ``side``, times its first call, warms it up and
    times steady calls; returns the times, the peak memory and, compiled, Dynamo's graphs."""
    preload_compilers()
    base = reset_peak_rss()
    case = entry.build(size)
    model = set_mode(case.model, mode)
    torch._dynamo.utils.counters.clear()
    step = Runner(compiler(side, report)(model), model, case.inputs, mode)
    t = time.perf_counter()
    step()
    first = time.perf_counter() - t
    rounds = warm_up(step, seconds, side == "kiln")
    busy, own, wall = cpu_busy_s(), time.process_time(), time.perf_counter()
    times = timed_runs(step, min_runs, seconds)
    others = None if busy is None else max(0.0, (cpu_busy_s() - busy) - (
        time.process_time() - own)) / ((time.perf_counter() - wall) * os.cpu_count())
    graphs = dynamo_graphs() if side != "eager" else {}  # after every call: recompiles too
    return dict(first_call_s=first, median_ms=statistics.median(times) * 1e3,
                min_ms=min(times) * 1e3, runs=len(times), warm_up_rounds=rounds,
                peak_mb=peak_rss_mb() - base, others_cpu=others, **graphs)


def accuracy(entry: ZooModel, size: str, mode: str, report: Any) -> dict:
    """Judges kiln against eager float32 and float64 on three copies of the same initial
    model: the main output, and in training every parameter's gradient after one backward.
    Returns the verdict counts, the failures, Dynamo's graphs and the first call's time."""
    from .accuracy import judge
    case = entry.build(size)
    model = set_mode(case.model, mode)
    ref32 = copy.deepcopy(model)
    ref64 = copy.deepcopy(model).double()
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = compiler("kiln", report)(model)
    grad = mode == "training"
    runs = []
    for fn, m, inputs in ((compiled, model, case.inputs), (ref32, ref32, case.inputs),
                          (ref64, ref64, as_double(case.inputs))):
        t = time.perf_counter()
        with torch.set_grad_enabled(grad):
            out = main_output(fn(**inputs))
            if grad:
                (out * loss_weights(out)).sum().backward()
        runs.append((out.detach(), time.perf_counter() - t, m))
    graphs = dynamo_graphs()
    verdicts = [judge("output", runs[0][0], runs[1][0], runs[2][0])]
    if grad:
        params = [dict(m.named_parameters()) for _, _, m in runs]
        verdicts += [judge(f"grad {name}", p.grad, params[1][name].grad, params[2][name].grad)
                     for name, p in params[0].items()]
    bad = [v for v in verdicts if not v.ok]
    return dict(checked=len(verdicts), failed=len(bad),
                failures=[str(v) for v in bad[:8]], first_call_s=runs[0][1], **graphs)


def report_fields(report: Any) -> dict:
    """An ExplainReport as JSON: graphs, kiln graphs, op nodes in kiln and in eager, and
    each fallback ``op: reason`` with its count."""
    return dict(aot_graphs=report.graphs, kiln_graphs=report.kiln_graphs,
                kiln_nodes=report.kiln_nodes, eager_nodes=report.eager_nodes,
                fallbacks={f"{op}: {reason}": n
                           for (op, reason), n in report.unsupported.most_common()})


def measure_here(name: str, size: str, mode: str, side: str, timing: bool, seconds: float,
                 min_runs: int) -> dict:
    """Measures one model, size and mode on one side in this process: timed (with
    ``timing``), and for kiln judged, its ops and graphs listed. A stage that raises ends it
    with ``error`` (and ``traceback``); the stages before it are kept."""
    from .backend import ExplainReport
    result: dict = {}
    report = ExplainReport()
    try:
        if timing:
            result.update(time_side(MODELS[name], size, mode, side, seconds, min_runs, report))
        if side == "kiln":
            # untimed, the accuracy pass's compile is the only one: its report names the ops
            # and its graphs are the row's
            acc = accuracy(MODELS[name], size, mode, ExplainReport() if timing else report)
            result["accuracy"] = acc
            for key in ("graphs", "breaks", "break_reasons"):
                result.setdefault(key, acc[key])
    except Exception as e:  # one model's failure is its row, never the run's end
        result["error"] = f"{type(e).__name__}: {e}".strip()[:600]
        result["traceback"] = traceback.format_exc()[-3000:]
    if side == "kiln":
        result.update(report_fields(report))
    return result


def child(name: str, size: str, mode: str, side: str, timing: bool, seconds: float,
          min_runs: int, out: str) -> None:
    """:func:`measure_here` in a fresh process (2 threads, library warnings and kiln's
    fallback log quiet); writes its JSON object to ``out``."""
    import logging
    import warnings
    torch.set_num_threads(THREADS)
    warnings.filterwarnings("ignore")
    logging.getLogger("kiln").setLevel(logging.ERROR)
    try:
        import transformers
        transformers.logging.set_verbosity_error()
    except ImportError:
        pass
    result = measure_here(name, size, mode, side, timing, seconds, min_runs)
    with open(out, "w") as f:
        json.dump(result, f)


# ---------------------------------------------------------------------------------------
# The parent: one child process per side, the rows, the report


def run_child(name: str, size: str, mode: str, side: str, args: argparse.Namespace) -> dict:
    """Runs :func:`child` in a fresh process (2 threads, glibc's malloc settings as asked,
    fresh kiln and inductor caches); returns its JSON, or an ``error`` with the output's tail
    when the process failed."""
    tmp = tempfile.mkdtemp(prefix="kiln-zoo-")
    env = {k: v for k, v in os.environ.items() if k not in NF_ENV}
    env.update(KILN_CACHE_DIR=os.path.join(tmp, "kiln"),
               TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, "inductor"),
               **(NF_ENV if args.nf else {}))
    out = os.path.join(tmp, "result.json")
    cmd = [sys.executable, "-m", "kiln.zoo", "--child", name, size, mode, side, out,
           "--seconds", str(args.seconds), "--min-runs", str(args.min_runs)]
    if not args.accuracy_only:
        cmd.append("--timing")
    try:
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=args.timeout)
        if os.path.exists(out):
            with open(out) as f:
                return json.load(f)
        tail = " | ".join(p.stdout.strip().splitlines()[-4:])
        return dict(error=f"exit {p.returncode}: {tail}"[:600])
    except subprocess.TimeoutExpired:
        return dict(error=f"timed out after {args.timeout} s")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def measure(name: str, size: str, mode: str, args: argparse.Namespace) -> dict:
    """One row: the kiln side (accuracy, ops, graphs; timed unless ``--accuracy-only``), and
    when timed the eager and inductor sides."""
    entry = MODELS[name]
    row = dict(model=name, family=entry.family, size=size, mode=mode,
               base_from=entry.base_from)
    sides = ["kiln"]
    if not args.accuracy_only:
        sides = ["eager", "kiln"] + ([] if args.no_inductor else ["inductor"])
    for side in sides:
        row[side] = run_child(name, size, mode, side, args)
    row["passed"] = passed(row)
    return row


def passed(row: dict) -> bool:
    """Whether kiln ran without error and every judged tensor passed."""
    k = row.get("kiln", {})
    acc = k.get("accuracy")
    return "error" not in k and acc is not None and acc["failed"] == 0


def ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    """``a / b`` where both are positive numbers, else None."""
    if a is None or b is None or not (a > 0 and b > 0):
        return None
    return a / b


def speedups(row: dict) -> dict:
    """A row's ratios: eager's and inductor's median over kiln's, kiln's first call over
    inductor's, kiln's peak memory over eager's (None where a side is missing)."""
    def get(side: str, key: str) -> Optional[float]:
        return row.get(side, {}).get(key)

    return dict(vs_eager=ratio(get("eager", "median_ms"), get("kiln", "median_ms")),
                vs_inductor=ratio(get("inductor", "median_ms"), get("kiln", "median_ms")),
                first_call=ratio(get("kiln", "first_call_s"), get("inductor", "first_call_s")),
                memory=ratio(get("kiln", "peak_mb"), get("eager", "peak_mb")))


def geomean(values: list) -> Optional[float]:
    """The geometric mean of the positive numbers among ``values``; None if there are none."""
    xs = [v for v in values if v is not None and v > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def _x(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _s(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:.1f}"


def status_cell(row: dict) -> str:
    """``pass``, ``FAIL n/m`` (judged tensors) or ``ERROR`` (kiln raised or crashed)."""
    k = row.get("kiln", {})
    acc = k.get("accuracy")
    if acc is None or "error" in k:
        return "ERROR"
    return "pass" if acc["failed"] == 0 else f"FAIL {acc['failed']}/{acc['checked']}"


def ops_cell(k: dict) -> str:
    """``kiln ops / eager ops``, with the fallen-back ops named."""
    if "kiln_nodes" not in k:
        return "-"
    ops = {}
    for key, n in k.get("fallbacks", {}).items():
        op = key.split(":")[0].removeprefix("aten.")
        ops[op] = ops.get(op, 0) + n
    names = ", ".join(f"{op}×{n}" for op, n in ops.items())
    return f"{k['kiln_nodes']} / {k['eager_nodes']}" + (f" ({names})" if names else "")


def graphs_cell(k: dict) -> str:
    """``graphs / breaks`` from Dynamo's counters."""
    return f"{k['graphs']} / {k['breaks']}" if "graphs" in k else "-"


def markdown_row(row: dict) -> str:
    """One row of the model table."""
    k, e, i = row.get("kiln", {}), row.get("eager", {}), row.get("inductor", {})
    r = speedups(row)
    kiln_first = k.get("first_call_s", k.get("accuracy", {}).get("first_call_s"))
    first = f"{_s(kiln_first)} / {_s(i.get('first_call_s'))}"
    mem = f"{_s(k.get('peak_mb'))} / {_s(e.get('peak_mb'))}"
    others = [s.get("others_cpu") for s in (k, e, i) if s.get("others_cpu") is not None]
    cells = [row["model"], row["family"], row["size"], row["mode"], status_cell(row),
             graphs_cell(k), ops_cell(k), _x(r["vs_eager"]), _x(r["vs_inductor"]), first, mem,
             f"{max(others):.0%}" if others else "-"]
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def summary(rows: list[dict]) -> list[dict]:
    """Per size and mode, then over every row (size and mode ``all``): geometric means of
    the ratios, the rows that passed, the rows with no fallback to eager PyTorch."""
    groups: dict = {}
    for row in rows:
        groups.setdefault((row["size"], row["mode"]), []).append(row)
    if len(groups) > 1:
        groups[("all", "all")] = rows
    out = []
    for (size, mode), group in groups.items():
        ratios = [speedups(r) for r in group]
        clean = [r for r in group if r.get("kiln", {}).get("eager_nodes") == 0
                 and "error" not in r.get("kiln", {})]
        out.append(dict(size=size, mode=mode, rows=len(group),
                        passed=sum(r["passed"] for r in group),
                        no_fallback=len(clean),
                        **{f"geomean_{key}": geomean([x[key] for x in ratios])
                           for key in ("vs_eager", "vs_inductor", "first_call", "memory")}))
    return out


def markdown(rows: list[dict], meta: dict) -> str:
    """The report: how it was made, the model table, the summary, the failures and the
    fallbacks."""
    lines = ["# kiln's model zoo", "",
             "Generated by `python -m kiln.zoo` (see `python/kiln/zoo.py` for the method): "
             "models built from configs with random weights, compiled with "
             "`torch.compile(backend=\"kiln\")`, judged against float64 eager "
             "(`kiln.accuracy.judge`) and timed against eager and Inductor, each side in a "
             "fresh process.", "",
             f"{meta['versions']}; command `{meta['command']}`; {meta['elapsed_s']:.0f} s.", "",
             "| model | family | size | mode | accuracy | graphs / breaks | kiln ops / eager "
             "ops (fallbacks) | vs eager | vs inductor | 1st call s kiln / inductor | "
             "peak MiB kiln / eager | others' CPU |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [markdown_row(r) for r in rows]
    lines += ["", "`vs eager`, `vs inductor`: their steady-state median time over kiln's "
              "(above 1: kiln is faster). `1st call`: compile and first run (in training the "
              "first step; without timing, kiln's from the accuracy pass). `peak MiB`: the "
              "process's peak resident memory over its memory once torch, the model "
              "libraries and the compilers are imported. `others' CPU`: the most other "
              "processes took of the machine while a side was timed (over 5%: the times are "
              "noisy; rerun on a quiet machine).", "", "## Summary", "",
              "| size | mode | rows | pass | no fallback | geomean vs eager | geomean vs "
              "inductor | geomean 1st call kiln / inductor | geomean peak memory kiln / eager |",
              "|---|---|---|---|---|---|---|---|---|"]
    for s in summary(rows):
        lines.append(
            f"| {s['size']} | {s['mode']} | {s['rows']} | {s['passed']}/{s['rows']} "
            f"({s['passed'] / s['rows']:.0%}) | {s['no_fallback']}/{s['rows']} "
            f"({s['no_fallback'] / s['rows']:.0%}) | {_x(s['geomean_vs_eager'])} | "
            f"{_x(s['geomean_vs_inductor'])} | {_x(s['geomean_first_call'])} | "
            f"{_x(s['geomean_memory'])} |")
    problems = problem_lines(rows)
    if problems:
        lines += ["", "## Failures and errors", ""] + problems
    fallbacks = fallback_lines(rows)
    if fallbacks:
        lines += ["", "## Fallbacks to eager PyTorch", "",
                  "| op: reason | nodes | rows |", "|---|---|---|"] + fallbacks
    return "\n".join(lines) + "\n"


def fallback_lines(rows: list[dict]) -> list[str]:
    """A table line per op and reason that fell back: its nodes over every row, and the
    rows (model, size, mode) it fell back in."""
    seen: dict = {}
    for r in rows:
        for key, n in r.get("kiln", {}).get("fallbacks", {}).items():
            nodes, where = seen.setdefault(key, [0, []])
            seen[key][0] = nodes + n
            where.append(f"{r['model']} {r['size']} {r['mode']}")
    return [f"| {key.replace('|', '/')} | {n} | {', '.join(where)} |".replace("\n", " ")
            for key, (n, where) in sorted(seen.items(), key=lambda kv: -kv[1][0])]


def problem_lines(rows: list[dict]) -> list[str]:
    """A line per failed or erroring row and side: the error, or the failing tensors."""
    lines = []
    for r in rows:
        label = f"{r['model']} {r['size']} {r['mode']}"
        for side in SIDES:
            res = r.get(side)
            if res and "error" in res:
                lines.append(f"* {label} ({side}): {res['error']}")
        acc = r.get("kiln", {}).get("accuracy")
        if acc and acc["failed"]:
            lines.append(f"* {label}: {acc['failed']} of {acc['checked']} tensors fail: "
                         + "; ".join(acc["failures"][:3]))
    return lines


def versions() -> str:
    """torch, transformers, timm and kiln's versions and build, and the machine."""
    found = [f"torch {torch.__version__}"]
    for mod in ("transformers", "timm"):
        try:
            found.append(f"{mod} {__import__(mod).__version__}")
        except ImportError:
            found.append(f"{mod} missing")
    from . import _native
    found.append(f"kiln {_native.version} ({_native.build_profile} build)")
    found.append(f"{THREADS} threads of {os.cpu_count()} CPUs")
    return ", ".join(found)


PRESETS = {"ci": dict(models=",".join(CI_MODELS), sizes="small", modes="inference,training",
                      accuracy_only=True, no_inductor=True)}
"""Named option sets (``--preset``); explicit options override them."""


def parse_args(argv: Optional[list] = None) -> tuple[argparse.Namespace,
                                                     argparse.ArgumentParser]:
    """The command line (a preset's options fill in those not given), and its parser."""
    ap = argparse.ArgumentParser(
        prog="python -m kiln.zoo",
        description="kiln against eager and inductor on a zoo of real model architectures")
    ap.add_argument("--models", help=f"comma-separated, of: {', '.join(MODELS)} (default all)")
    ap.add_argument("--sizes", help="comma-separated, of small,base (default small)")
    ap.add_argument("--modes", help="comma-separated, of inference,training (default both)")
    ap.add_argument("--preset", choices=sorted(PRESETS),
                    help=f"ci: {', '.join(CI_MODELS)}; small; accuracy only")
    ap.add_argument("--no-inductor", action="store_true", default=None,
                    help="do not time inductor")
    ap.add_argument("--accuracy-only", action="store_true", default=None,
                    help="judge accuracy and list ops only: no timing, eager or inductor runs")
    ap.add_argument("--seconds", type=float, default=1.0,
                    help="warm-up budget: seconds per warm-up round (at most "
                         f"{WARM_UP_ROUNDS}), and the least time timed per side (default 1)")
    ap.add_argument("--min-runs", type=int, default=10,
                    help="time at least this many calls per side (default 10)")
    ap.add_argument("--nf", action="store_true",
                    help="run with MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1e12, as "
                         "python -m kiln.bench does (default: glibc's defaults)")
    ap.add_argument("--timeout", type=float, default=CHILD_TIMEOUT_S,
                    help=f"seconds one side of one row may take (default {CHILD_TIMEOUT_S})")
    ap.add_argument("--out", help="markdown report (default python/ZOO.md from the repository "
                                  "root, else ZOO.md; not written by --preset ci unless given)")
    ap.add_argument("--json", help="also write the rows and the summary to this JSON file")
    ap.add_argument("--allow-debug-build", action="store_true",
                    help="time kiln even when its native module is a debug build")
    ap.add_argument("--child", nargs=5, metavar=("MODEL", "SIZE", "MODE", "SIDE", "OUT"),
                    help=argparse.SUPPRESS)
    ap.add_argument("--timing", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    for key, value in PRESETS.get(args.preset, {}).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.sizes = args.sizes or "small"
    args.modes = args.modes or ",".join(MODES)
    args.no_inductor = bool(args.no_inductor)
    args.accuracy_only = bool(args.accuracy_only)
    if args.out is None and args.preset is None:
        args.out = "python/ZOO.md" if os.path.isdir("python/kiln") else "ZOO.md"
    return args, ap


def selection(args: argparse.Namespace, ap: argparse.ArgumentParser) -> list[tuple]:
    """The (model, size, mode) rows asked for; an unknown name is a usage error."""
    names = args.models.split(",") if args.models else list(MODELS)
    sizes, modes = args.sizes.split(","), args.modes.split(",")
    for given, known, what in ((names, MODELS, "model"), (sizes, SIZES, "size"),
                               (modes, MODES, "mode")):
        unknown = [g for g in given if g not in known]
        if unknown:
            ap.error(f"unknown {what}(s) {unknown}; known: {', '.join(known)}")
    return [(n, s, m) for n in names for s in sizes for m in modes]


def main(argv: Optional[list] = None) -> int:
    """Runs the zoo as the command line asks; returns the exit status (1 when a row's
    accuracy failed or kiln raised)."""
    args, ap = parse_args(argv)
    if args.child:
        name, size, mode, side, out = args.child
        child(name, size, mode, side, args.timing, args.seconds, args.min_runs, out)
        return 0
    todo = selection(args, ap)
    from . import _native
    if not args.accuracy_only and _native.build_profile != "release":
        message = (f"kiln's native module is a {_native.build_profile} build: its times say "
                   "nothing about kiln's speed")
        if not args.allow_debug_build:
            ap.error(message + "; install a release build, pass --accuracy-only or "
                     "--allow-debug-build")
        print(f"warning: {message}", file=sys.stderr)
    meta = dict(versions=versions() + (", NF malloc settings" if args.nf else
                                       ", glibc's default malloc settings"),
                command="python -m kiln.zoo " + " ".join(sys.argv[1:] if argv is None
                                                         else argv))
    print(meta["versions"], flush=True)
    start, rows = time.perf_counter(), []
    for name, size, mode in todo:
        row = measure(name, size, mode, args)
        rows.append(row)
        print(f"  {name} {size} {mode}: {status_cell(row)}, "
              f"{ops_cell(row.get('kiln', {}))}; vs eager {_x(speedups(row)['vs_eager'])}"
              + "".join(f"; {s}: {row[s]['error'][:200]}" for s in SIDES
                        if "error" in row.get(s, {})), flush=True)
    meta["elapsed_s"] = time.perf_counter() - start
    text = markdown(rows, meta)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(meta=meta, rows=rows, summary=summary(rows)), f, indent=2)
    return 0 if all(r["passed"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
