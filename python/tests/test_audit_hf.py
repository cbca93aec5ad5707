"""dropmc.torch.audit on Hugging Face architectures (issue 32): BERT,
GPT-2, ESM, ViT, T5 encoder and Llama, built from small configs with random
weights (python/tests/hf_models.py; no downloads), eager and SDPA
attention.

* The discovered sites and attention sites are compared with a ground
  truth written by hand from each modeling source (hf_models.py).
* One site of each form — bypass LayerNorm (BERT), plain LayerNorm
  (GPT-2), RMSNorm (T5), attention (BERT eager, Llama SDPA with grouped
  query heads and a causal + padding mask) — has its audited truth z-tested
  against a direct Monte Carlo of the model's own train-mode forward with
  only that dropout active (every other module in eval mode; the batch
  repeated RUNS times, one independent mask per copy). Per component
  ``z = (MC − truth) / sqrt(SE_MC² + SE_truth²)``; the test fails beyond
  the suite's per-assertion level split by Bonferroni over the components.
* An entangled site is refused (listed without numbers), and the same
  site captured as an ordinary bypass (the planted fault: a bypass that
  secretly contains the dropout) fails the Monte Carlo test.
"""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
import dropmc  # noqa: E402
import dropmc.torch  # noqa: E402
import dropmc.audit as A  # noqa: E402
from dropmc.audit.capture_eval import capture_traced  # noqa: E402
from dropmc.model.discovery import Site, discover  # noqa: E402
from hf_models import build, expected_attention, expected_sites, inputs  # noqa: E402
from mc_checks import bonferroni_z, mean_and_se, train_mode_outputs  # noqa: E402

torch.set_num_threads(1)
ARCHS = ["bert", "gpt2", "esm", "vit", "t5", "llama"]
RUNS = 2000  # train-mode copies per Monte Carlo
SAMPLES = 16384  # masks per token of the audited truths



@pytest.mark.parametrize("impl", ["eager", "sdpa"])
@pytest.mark.parametrize("arch", ARCHS)
def test_sites_match_the_modeling_source(arch, impl):
    model = build(arch, impl)
    found = discover(model, **inputs(arch))
    got = {(s.dropout, s.norm): s.form for s in found.sites}
    assert got == expected_sites(arch)
    assert [a.call for a in found.attention] == expected_attention(arch, impl)
    assert all(a.p == pytest.approx(0.1) for a in found.attention)
    # T5LayerNorm and LlamaRMSNorm are read as RMSNorms by what they compute
    assert {s.kind for s in found.norms.values()} == ({"rms"} if arch in ("t5", "llama") else {"layer"})
    assert not found.refused
    if arch == "vit":  # the second call of a reused module
        assert found.module_of("layers.0.dropout#1") == "layers.0.dropout"


@pytest.mark.parametrize("arch", ARCHS)
def test_the_default_call_audits_every_site(arch):
    impl = "sdpa" if arch in ("gpt2", "t5") else "eager"
    model = build(arch, impl)
    if arch == "llama":  # keyword inputs, as the forward's own keyword arguments
        audit = dropmc.torch.audit(model, samples=4096, attention_samples=256, **inputs(arch))
    else:  # a dict of keyword inputs
        audit = dropmc.torch.audit(model, inputs(arch), samples=4096, attention_samples=256)
    truth = expected_sites(arch)
    assert {s["name"] for s in audit.sites} == {f"{d}->{n}" for (d, n), f in truth.items() if f != "entangled"}
    entangled = [o for o in audit.other_sites if o["form"] == "entangled"]
    assert {o["name"] for o in entangled} == {f"{d}->{n}" for (d, n), f in truth.items() if f == "entangled"}
    assert all("also depends" in o["reason"] for o in entangled)
    # every other row is a dropout call with no site, listed with its reason
    assert all(o["form"] == "call" and o["reason"] for o in audit.other_sites if o["form"] != "entangled")
    assert [a["name"] for a in audit.attention_sites] == expected_attention(arch, impl)
    assert "entangled" in str(audit) or not audit.other_sites
    if arch != "vit":  # 3 of 16 tokens are padding
        assert audit.tokens == {"audited": 13, "total": 16} or not audit.sites
        assert not audit.sites or "13 of 16" in str(audit)


def _only(model, module_name):
    """Eval mode everywhere but ``module_name`` (train mode)."""
    model.eval()
    dict(model.named_modules())[module_name].train()


def _repeat(kw, runs):
    return {k: v.repeat(runs, *([1] * (v.dim() - 1))) for k, v in kw.items()}


def _mc_norm(model, kw, dropout_module, norm_module, runs=RUNS, seed=0):
    """Mean and SE over ``runs`` train-mode copies of the norm's output with
    only ``dropout_module`` active; rows (batch·length, d)."""
    _only(model, dropout_module)
    return mean_and_se(train_mode_outputs(model, norm_module, kw, runs, seed, train=False))


def _max_z(audit, i, mean, se, kw):
    truth, tse = audit.truth(i)
    mask = kw.get("attention_mask")
    if mask is not None:
        keep = mask.reshape(-1).numpy() != 0
        mean, se = mean[keep], se[keep]
    z = (mean - truth) / np.sqrt(se ** 2 + tse ** 2)
    return float(np.abs(z).max()), z.size


@pytest.mark.parametrize("arch, dropout, norm, form, kind", [
    ("bert", "encoder.layer.1.output.dropout", "encoder.layer.1.output.LayerNorm", "bypass", "LayerNorm"),
    ("gpt2", "drop", "h.0.ln_1", "plain", "LayerNorm"),
    ("t5", "encoder.block.1.layer.0.dropout", "encoder.block.1.layer.1.layer_norm", "bypass", "RMSNorm"),
])
def test_a_site_of_each_form_matches_its_train_mode_forward(arch, dropout, norm, form, kind):
    model, kw = build(arch, "eager"), inputs(arch)
    audit = dropmc.torch.audit(model, kw, sites=[(dropout, norm)], samples=SAMPLES, seed=2)
    s = audit.sites[0]
    assert (s["form"], s["norm"]) == (form, kind)
    mean, se = _mc_norm(model, kw, dropout, norm)
    z, k = _max_z(audit, 0, mean, se, kw)
    print(f"{arch}: max |z| {z:.2f} over {k} components (limit {bonferroni_z(k):.2f})")
    assert z < bonferroni_z(k), (arch, z, bonferroni_z(k))


def test_an_entangled_site_is_refused_and_auditing_it_as_bypass_fails():
    model, kw = build("gpt2", "eager"), inputs("gpt2")
    audit = dropmc.torch.audit(model, kw, sites=[("drop", "h.0.ln_2")], samples=SAMPLES)
    assert audit.sites == [] and audit.other_sites[0]["form"] == "entangled"
    assert "h.0.ln_2" in str(audit) and "also depends on drop" in str(audit)
    # The planted fault: the same site captured as an ordinary bypass row.
    found = discover(model, **kw)
    caps = capture_traced(model, (), kw, found, [Site("drop", "h.0.ln_2", "bypass", 0.1)], [])[0]
    planted = A.audit_captures(caps, samples=SAMPLES, seed=2)
    mean, se = _mc_norm(model, kw, "drop", "h.0.ln_2")
    z, k = _max_z(planted, 0, mean, se, kw)
    assert z > bonferroni_z(k), (z, bonferroni_z(k))


def _mc_attention_variance(model, kw, attention_module, context_consumer, runs=RUNS, seed=0):
    """Per copy the mean over rows and coordinates of (context − eval
    context)², with only ``attention_module``'s dropout active: its mean
    over copies estimates the mean Var(out), its SE from their spread."""
    modules = dict(model.named_modules())
    got = []
    h = modules[context_consumer].register_forward_pre_hook(lambda m, a: got.append(a[0].detach()))
    try:
        model.eval()
        with torch.no_grad():
            model(**kw)
        _only(model, attention_module)
        torch.manual_seed(seed)
        with torch.no_grad():
            model(**_repeat(kw, runs))
    finally:
        h.remove()
        model.eval()
    base = got[0].to(torch.float64)
    runs_out = got[1].to(torch.float64).reshape(runs, *base.shape)
    dev = ((runs_out - base) ** 2).reshape(runs, -1).mean(1).numpy()
    return dev.mean(), dev.std(ddof=1) / math.sqrt(runs)


@pytest.mark.parametrize("arch, impl, attention, consumer", [
    ("bert", "eager", "encoder.layer.0.attention.self", "encoder.layer.0.attention.output.dense"),
    ("llama", "sdpa", "layers.1.self_attn", "layers.1.self_attn.o_proj"),
])
def test_an_attention_site_matches_its_train_mode_forward(arch, impl, attention, consumer):
    model, kw = build(arch, impl), inputs(arch)
    audit = dropmc.torch.audit(model, kw, attention_samples=256)
    i = [a["name"].split(":")[0] for a in audit.attention_sites].index(attention)
    _, var = audit.attention_moments(i)
    mc, se = _mc_attention_variance(model, kw, attention, consumer)
    z = (mc - var.mean()) / se
    assert abs(z) < bonferroni_z(1), (z, mc, var.mean(), se)


def test_messages_a_user_can_act_on():
    nn = torch.nn
    nodrop = nn.Sequential(nn.Linear(6, 4), nn.LayerNorm(4))
    with pytest.raises(ValueError, match=r"norm calls: 1 \(layer\)"):
        dropmc.torch.audit(nodrop, torch.randn(2, 6))
    model = build("bert", "eager", p=0.0)
    audit = dropmc.torch.audit(model, inputs("bert"), samples=4096)
    assert audit.sites == [] and audit.attention_sites == []
    assert {o["reason"] for o in audit.other_sites} == {"no dropout at this rate (p = 0)"}
    with pytest.raises(ValueError, match=r"Its sites: sites=\[\('encoder.layer.0.attention.output.dropout'"):
        dropmc.torch.audit(model, inputs("bert"), sites=[("embeddings.dropout", "encoder.layer.1.output.LayerNorm")])


class _GemmaNorm(torch.nn.Module):
    """Gemma's RMSNorm: ``x / sqrt(mean x² + ε) · (1 + weight)``."""

    def __init__(self, d):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(d, generator=torch.Generator().manual_seed(3)))
        self.eps = 1e-6

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * (1.0 + self.weight)


class _ScaleNorm(torch.nn.Module):
    """Named like a norm, computes ``weight * x / max|x|``: neither formula."""

    def __init__(self, d):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(d))
        self.eps = 1e-6

    def forward(self, x):
        return self.weight * x / x.abs().amax(-1, keepdim=True)


def test_norms_are_recognised_by_what_they_compute():
    from dropmc.model.norms import NormSpec, recognize_norm

    x = torch.randn(5, 16)
    gemma = _GemmaNorm(16)
    spec = recognize_norm(gemma, x)
    assert (spec.kind, spec.weight_offset) == ("rms", 1.0)
    assert np.array_equal(spec.gamma, 1.0 + gemma.weight.detach().double().numpy())
    torch_rms = torch.nn.RMSNorm(16, eps=1e-6)
    assert (recognize_norm(torch_rms, x).kind, recognize_norm(torch_rms, x).weight_offset) == ("rms", 0.0)
    with pytest.raises(ValueError, match="'odd' \\(_ScaleNorm\\) is not a LayerNorm or RMSNorm"):
        recognize_norm(_ScaleNorm(16), x, "odd")
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Dropout(0.1), _ScaleNorm(16))
    found = discover(model, x)
    assert found.sites == [] and "2" in found.refused
    declared = NormSpec("rms", np.ones(16), np.zeros(16), 1e-6)
    assert [s.name for s in discover(model, x, norms={"2": declared}).sites] == ["1->2"]
