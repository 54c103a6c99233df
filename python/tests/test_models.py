"""Real models through torch.compile(backend="kiln"): Hugging Face BERT built from a config
(no download) for inference and an AdamW training step, and all-MiniLM-L6-v2 through
sentence-transformers from the published files (`scripts/fetch-minilm.sh` sets
KILN_MINILM; the test skips without it unless KILN_REQUIRE_MINILM is set)."""

import copy
import os

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

import kiln
from kiln.backend import ExplainReport

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("fresh_dynamo")

TOL = dict(rtol=1e-4, atol=1e-5)


def bert_config(**kw):
    return transformers.BertConfig(
        vocab_size=97, hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=96, max_position_embeddings=64, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, **kw)


def inputs(batch=3, seq=11, vocab=97):
    ids = torch.randint(0, vocab, (batch, seq))
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[1, 7:] = 0  # padding in one sequence
    return ids, mask


def test_bert_inference_equals_eager_in_one_graph():
    model = transformers.BertModel(bert_config()).eval()
    ids, mask = inputs()
    counter = CompileCounterWithBackend("kiln")
    report = ExplainReport()
    compiled = torch.compile(model, backend=kiln.backend(_report=report), fullgraph=True)
    counted = torch.compile(model, backend=counter, fullgraph=True)
    with torch.no_grad():
        expect = model(input_ids=ids, attention_mask=mask)
        got = compiled(input_ids=ids, attention_mask=mask)
        counted(input_ids=ids, attention_mask=mask)
    torch.testing.assert_close(got.last_hidden_state, expect.last_hidden_state, **TOL)
    torch.testing.assert_close(got.pooler_output, expect.pooler_output, **TOL)
    assert counter.frame_count == 1
    assert report.eager_nodes == 0, str(report)


def test_bert_training_step_with_adamw_equals_eager():
    lr = 1e-3
    model = transformers.BertForSequenceClassification(bert_config(num_labels=3))
    ref = copy.deepcopy(model)
    report = ExplainReport()
    compiled = torch.compile(model, backend=kiln.backend(_report=report))
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=lr)
    ids, mask = inputs()
    labels = torch.tensor([0, 2, 1])
    loss = compiled(input_ids=ids, attention_mask=mask, labels=labels).loss
    expect = ref(input_ids=ids, attention_mask=mask, labels=labels).loss
    torch.testing.assert_close(loss, expect, **TOL)
    loss.backward()
    expect.backward()
    grads = {}
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        if q.grad is None:
            assert p.grad is None, name
            continue
        torch.testing.assert_close(p.grad, q.grad, **TOL, msg=name)
        grads[name] = q.grad.clone()
    opt.step()
    ref_opt.step()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        if name not in grads:
            continue
        # AdamW's first step moves every element by lr·g/(|g| + eps): ±lr once |g| is well
        # above eps, lr·g/eps where it is well below (the key bias, whose exact gradient is
        # zero: softmax ignores a shift along the keys, so both sides hold rounding noise).
        # Near and below eps the step turns the gradients' rounding difference into a step
        # difference (an output weight's gradient of -9.9e-9, equal within 9e-11, moved it
        # by 2.3e-6), so each element may differ by twice that amplification of the
        # gradients' measured difference, lr·eps·|Δg|/(|g| + eps)², on top of the tolerance.
        eps = opt.defaults["eps"]
        g = grads[name]
        amplified = 2 * lr * eps * (p.grad - g).abs() / (g.abs() + eps) ** 2
        bound = 1e-6 + 1e-5 * q.abs() + amplified
        over = (p - q).abs() - bound
        worst = int(over.argmax())
        assert over.max() <= 0, (
            f"{name}: element {worst} differs by {(p - q).abs().flatten()[worst]:.3g} > "
            f"{bound.flatten()[worst]:.3g} (gradients {p.grad.flatten()[worst]:.6g} and "
            f"{g.flatten()[worst]:.6g})")
        assert (p - q).abs().max() <= 2 * lr + 1e-6, name
    # the forward and the backward graph both ran in kiln
    assert report.graphs == 2 and report.eager_nodes == 0, str(report)


def minilm_dir():
    path = os.environ.get("KILN_MINILM")
    if not path:
        if os.environ.get("KILN_REQUIRE_MINILM"):
            pytest.fail("KILN_REQUIRE_MINILM is set but KILN_MINILM is not")
        pytest.skip("KILN_MINILM is not set: eval \"$(bash scripts/fetch-minilm.sh)\"")
    return path


def test_minilm_sentence_embeddings_equal_eager():
    st = pytest.importorskip("sentence_transformers")
    model = st.SentenceTransformer(minilm_dir(), device="cpu")
    sentences = ["kiln compiles tensor programs", "a JIT for tensors",
                 "The quick brown fox jumps over the lazy dog."]
    expect = model.encode(sentences, convert_to_tensor=True)
    report = ExplainReport()
    # the Hugging Face model inside (`model` since sentence-transformers 6, `auto_model` before)
    attr = "model" if hasattr(model[0], "model") else "auto_model"
    setattr(model[0], attr, torch.compile(getattr(model[0], attr),
                                          backend=kiln.backend(_report=report)))
    got = model.encode(sentences, convert_to_tensor=True)
    torch.testing.assert_close(got, expect, **TOL)
    assert report.graphs >= 1 and report.eager_nodes == 0, str(report)
