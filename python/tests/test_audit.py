"""dropmc.audit on architectures built here (random weights, no downloads).

Each site's truth E[norm(h + dropout(v))] (exact: d ≤ 16) is z-tested
against a direct Monte Carlo of the model's own forward in train mode with
only that site's dropout active: one statistic per site, Σ z² over its
units and tokens, a χ² with k = tokens·d degrees of freedom under the null
(the per-unit MC means are independent across tokens — each row of the
repeated batch has its own mask — and across units given the exact truth
only approximately: the units of one token share the norm's M and V, so
Σ z² is compared after the Wilson–Hilferty transform at the suite's
per-assertion level, dropmc.critical_z()). Planted faults (a wrong p, a
lost bypass h) must fail the same test.
"""

import json
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
import dropmc  # noqa: E402
import dropmc.audit as A  # noqa: E402
from mc_checks import mean_and_se, train_mode_outputs  # noqa: E402

torch.set_num_threads(1)
MC_RUNS = 4000


def _only_site_active(model, dropout_name):
    """Train mode with every dropout but `dropout_name` off (and the
    attention dropout of every MultiheadAttention at 0)."""
    model.train()
    saved = []
    for name, m in model.named_modules():
        if isinstance(m, nn.Dropout) and name != dropout_name:
            m.eval()
        if isinstance(m, nn.MultiheadAttention):
            saved.append((m, m.dropout))
            m.dropout = 0.0
    return saved


def _mc_norm_output(model, x, dropout_name, norm_name, runs=MC_RUNS, seed=0):
    """Mean and SE over `runs` train-mode forwards of the norm's output
    (the batch repeated `runs` times: one independent mask per copy)."""
    saved = _only_site_active(model, dropout_name)
    try:
        runs = train_mode_outputs(model, norm_name, x, runs, seed, train=False)
    finally:
        for m, p in saved:
            m.dropout = p
    return mean_and_se(runs)


def engine_json(audit):
    """The audit's JSON without what only a model's audit has (coverage and
    listed calls): what an audit of its saved captures prints."""
    return {k: v for k, v in json.loads(audit.to_json()).items() if k not in ("coverage", "other_sites")}


def _chi2_z(z):
    """Σ z² over k components, as a standard normal by Wilson–Hilferty."""
    k = z.size
    s = float((z * z).sum())
    return ((s / k) ** (1 / 3) - (1 - 2 / (9 * k))) / math.sqrt(2 / (9 * k))


def _site_z(model, x, audit, i):
    name = audit.sites[i]["name"]
    dname, nname = name.split("->")
    truth, _ = audit.truth(i)
    mean, se = _mc_norm_output(model, x, dname, nname)
    return _chi2_z((mean - truth) / se)


def _assert_truth_matches_model(model, x, audit):
    for i in range(len(audit.sites)):
        z = _site_z(model, x, audit, i)
        assert z < dropmc.critical_z(), (audit.sites[i]["name"], z)


def _encoder(norm_first, d=8, layers=2, final_norm=False):
    torch.manual_seed(1)
    layer = nn.TransformerEncoderLayer(d, 2, 16, dropout=0.2, batch_first=True, norm_first=norm_first)
    return nn.TransformerEncoder(layer, layers, norm=nn.LayerNorm(d) if final_norm else None,
                                 enable_nested_tensor=False)


def test_post_ln_encoder_sites_and_truth():
    model = _encoder(norm_first=False)
    x = torch.randn(1, 4, 8)
    audit = A.audit_torch(model, x, seed=3)
    names = [s["name"] for s in audit.sites]
    assert names == [f"layers.{i}.dropout{j}->layers.{i}.norm{j}" for i in range(2) for j in (1, 2)]
    assert all(s["form"] == "bypass" and s["exact"] for s in audit.sites)
    _assert_truth_matches_model(model, x, audit)


def test_pre_ln_encoder_sites_cross_blocks():
    # Pre-LN: x + dropout1(sa(norm1 x)) feeds norm2 inside the block;
    # x + dropout2(ff(norm2 x)) feeds the next block's norm1 (or the final norm).
    model = _encoder(norm_first=True, final_norm=True)
    x = torch.randn(1, 4, 8)
    audit = A.audit_torch(model, x, seed=4)
    names = [s["name"] for s in audit.sites]
    assert names == [
        "layers.0.dropout1->layers.0.norm2",
        "layers.0.dropout2->layers.1.norm1",
        "layers.1.dropout1->layers.1.norm2",
        "layers.1.dropout2->norm",
    ]
    _assert_truth_matches_model(model, x, audit)


class _Residual(nn.Module):
    """RMSNorm(x + dropout(W x)): a bypass site."""

    def __init__(self, d, p):
        super().__init__()
        self.lin = nn.Linear(d, d)
        self.drop = nn.Dropout(p)
        self.norm = nn.RMSNorm(d, eps=1e-6)

    def forward(self, x):
        return self.norm(x + self.drop(self.lin(x)))


def _mlp(d=12, p=0.3):
    torch.manual_seed(2)
    return nn.Sequential(nn.Linear(6, d), nn.ReLU(), nn.Dropout(p), nn.LayerNorm(d))


def test_mlp_plain_site_from_the_traced_forward():
    model = _mlp()
    x = torch.randn(5, 6)
    audit = A.audit_torch(model, x, seed=5)
    assert [(s["name"], s["form"], s["norm"]) for s in audit.sites] == [("2->3", "plain", "LayerNorm")]
    _assert_truth_matches_model(model, x, audit)


def test_a_site_reports_the_masks_it_drew():
    """Issue 52: an enumerated truth (d ≤ 16) draws no mask, whatever was
    asked; its row said the samples asked for (10**9). It says 0; a sampled
    site (d = 32) the masks it drew."""
    x = torch.randn(5, 6)
    audit = A.audit_torch(_mlp(), x, samples=10**9, seed=5)
    assert [(s["exact"], s["samples"]) for s in audit.sites] == [(True, 0)]
    assert json.loads(audit.to_json())["sites"][0]["samples"] == 0
    sampled = A.audit_torch(_mlp(d=32), x, samples=256, seed=5)
    assert [(s["exact"], s["samples"]) for s in sampled.sites] == [(False, 256)]


def test_rmsnorm_bypass_site_from_the_traced_forward():
    torch.manual_seed(3)
    model = _Residual(10, 0.25)
    x = torch.randn(6, 10)
    audit = A.audit_torch(model, x, seed=6)
    assert [(s["name"], s["form"], s["norm"]) for s in audit.sites] == [("drop->norm", "bypass", "RMSNorm")]
    _assert_truth_matches_model(model, x, audit)


@pytest.mark.parametrize("fault", ["wrong p", "lost h"])
def test_planted_fault_fails_the_z_test(fault):
    torch.manual_seed(3)
    model = _Residual(10, 0.25)
    x = torch.randn(6, 10)
    caps = A.capture(model, x, sites=[("drop", "norm")])
    if fault == "wrong p":
        caps[0]["p"] = 0.35
    else:
        caps[0]["h"] = np.zeros_like(caps[0]["h"])
    audit = A.audit_captures(caps, seed=6)
    assert _site_z(model, x, audit, 0) > dropmc.critical_z()


def test_explicit_sites_and_corrections_shrink_the_gap():
    # Exact truth at d = 16 (no noise): the first order beats eval on each site.
    torch.manual_seed(4)
    model = _Residual(16, 0.1)
    x = torch.randn(8, 16)
    audit = A.audit_torch(model, x, sites=[("drop", "norm")])
    s = audit.sites[0]
    assert s["exact"] and s["uncorrected"]["resolved"]
    assert s["first_order"]["rms"] < s["uncorrected"]["rms"]
    model = _mlp(d=16, p=0.1)
    s = A.audit_torch(model, torch.randn(8, 6)).sites[0]
    assert s["first_order"]["rms"] < s["uncorrected"]["rms"]


def test_sampled_truth_at_d_512_resolves_the_correction():
    # The fast sampler (d > 16): the uncorrected gap is resolved and the
    # first order's upper bound lies below it.
    torch.manual_seed(5)
    model = _Residual(512, 0.1)
    audit = A.audit_torch(model, torch.randn(8, 512), samples=16384, seed=7)
    s = audit.sites[0]
    assert not s["exact"] and s["uncorrected"]["resolved"]
    assert s["first_order"]["upper"] < s["uncorrected"]["rms"]


def test_table_json_save_load_roundtrip(tmp_path):
    model = _mlp()
    x = torch.randn(5, 6)
    audit = A.audit_torch(model, x, seed=5)
    assert "2->3" in str(audit) and "plain" in str(audit)
    assert json.loads(audit.to_json())["sites"][0]["d"] == 12
    path = tmp_path / "caps.npz"
    audit.save(str(path))
    again = A.audit_captures(A.load(str(path)), seed=5)
    assert json.loads(again.to_json()) == engine_json(audit)


def test_bad_input_is_a_python_error():
    with pytest.raises(TypeError):
        A.audit_torch("not a model", None)
    model = _mlp()
    with pytest.raises(ValueError, match="samples"):
        A.audit_torch(model, torch.randn(2, 6), samples=10)
    with pytest.raises(ValueError, match="not an nn.Dropout"):
        A.audit_torch(model, torch.randn(2, 6), sites=[("0", "3")])
    nodrop = nn.Sequential(nn.Linear(6, 4), nn.LayerNorm(4))
    with pytest.raises(ValueError, match="no dropout"):
        A.audit_torch(nodrop, torch.randn(2, 6))


def test_the_cli_audits_a_saved_capture_as_python_does(tmp_path, dropmc_binary):
    # `dropmc audit --activations` reads Audit.save's npz and runs the same
    # engine: the same rows, bit for bit, for an exact site (d = 12) and a
    # sampled one (d = 512, 16 384 masks per token).
    import subprocess

    binary = dropmc_binary
    torch.manual_seed(5)
    for model, x, name in ((_mlp(), torch.randn(5, 6), "exact"),
                           (_Residual(512, 0.1), torch.randn(4, 512), "sampled")):
        audit = A.audit_torch(model, x, samples=16384, seed=7)
        path = tmp_path / f"{name}.npz"
        audit.save(str(path))
        run = [binary, "audit", "--activations", str(path), "--samples", "16384", "--seed", "7"]
        out = subprocess.run(run + ["--json"], capture_output=True, text=True, check=True)
        assert json.loads(out.stdout) == engine_json(audit), name
        table = subprocess.run(run, capture_output=True, text=True, check=True)
        assert table.stdout == audit.engine_text(), name


def test_the_cli_refuses_a_bad_capture_by_name(tmp_path, dropmc_binary):
    import subprocess

    binary = dropmc_binary
    not_zip = tmp_path / "text.npz"
    not_zip.write_text("hello")
    compressed = tmp_path / "compressed.npz"
    np.savez_compressed(compressed, version=np.array(1), count=np.array(1))
    partial = tmp_path / "partial.npz"
    np.savez(partial, version=np.array(2), count=np.array(1), attention_count=np.array(0))
    for path, message in ((not_zip, "not an .npz"), (compressed, "savez_compressed"),
                          (partial, "array site0_name: missing"),
                          (tmp_path / "absent.npz", "cannot open")):
        r = subprocess.run([binary, "audit", "--activations", str(path)], capture_output=True, text=True)
        assert r.returncode == 2 and message in r.stderr, (path, r.stderr)
        assert "panicked" not in r.stderr
