"""dropmc.audit's attention-dropout sites on architectures built here.

Each site's closed forms are z-tested against a direct Monte Carlo of the
model's own train-mode forward with only that attention's dropout active:
the input batch repeated ``RUNS`` times, so each copy draws its own masks
(``nn.MultiheadAttention`` drops the ``(B, H, L, S)`` weights elementwise).
Per copy ``f`` the statistic is ``D_f = mean over rows and coordinates of
(out_f − μ)²`` with ``μ`` the model's eval output, which is the exact mean
(inverted dropout keeps every weight's mean; E[out] is linear in them); so
``E[D_f]`` is exactly the mean output variance, the ``D_f`` are independent
and identically distributed, and at ``RUNS = 20 000`` their mean's standard
error is ``sd(D)/√RUNS`` by the central limit theorem (Student-t at 19 999
degrees of freedom is the normal). The same for the row sums
``Σ_s b_s`` of the dropped weights (``need_weights=True`` returns them after
the dropout). Each z is compared with the suite's per-assertion critical
value, ``dropmc.critical_z()``. Planted faults (a wrong p, the key padding
mask ignored) must fail the same test. Models run in float64.
"""

import json
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
import dropmc  # noqa: E402
import dropmc.audit as A  # noqa: E402
from dropmc.model.discovery import discover  # noqa: E402
from test_audit import engine_json  # noqa: E402

torch.set_num_threads(1)
RUNS = 20_000
CHUNK = 5_000

#: Roundings allowed between dropmc's float64 E[out] and the float64 eval
#: forward: each is a sum over at most S·J + E products (here < 64) of
#: softmax weights, values and W_o; Higham's γ_n bounds each side by
#: n u Σ|terms|, and both sides together by twice that.
ROUNDINGS = 2 * 64

#: Roundings between two means of the same 80 non-negative variances
#: (dropmc's and numpy's, summed in different orders): each is within γ_80
#: relative (Higham 4.4, one sign), both together within 2 · 80 u.
MEAN_ROUNDINGS = 2 * 80


def _z(stat, target):
    stat = np.asarray(stat)
    return (stat.mean() - target) / (stat.std(ddof=1) / math.sqrt(stat.size))


def _mha(p=0.3, e=8, heads=2):
    torch.manual_seed(11)
    return nn.MultiheadAttention(e, heads, dropout=p, batch_first=True).double()


def _mha_inputs(batch=2, queries=5, keys=6, e=8):
    torch.manual_seed(12)
    q = torch.randn(batch, queries, e, dtype=torch.float64)
    kv = torch.randn(batch, keys, e, dtype=torch.float64)
    pad = torch.zeros(batch, keys, dtype=torch.bool)
    pad[1, -2:] = True  # the last two keys of batch 1 are padding
    return q, kv, kv, pad


def _mc_mha(mha, inputs, seed=0):
    """Per copy: D for the output and for the row sums (see the module doc)."""
    q, k, v, pad = inputs
    mha.eval()
    with torch.no_grad():
        mu, a = mha(q, k, v, key_padding_mask=pad, need_weights=True, average_attn_weights=False)
    mha.train()
    torch.manual_seed(seed)
    out_d, row_d = [], []
    try:
        with torch.no_grad():
            for _ in range(RUNS // CHUNK):
                rep = lambda t: t.repeat(CHUNK, *([1] * (t.dim() - 1)))  # noqa: E731
                out, w = mha(rep(q), rep(k), rep(v), key_padding_mask=rep(pad), need_weights=True,
                             average_attn_weights=False)
                out = out.reshape(CHUNK, *mu.shape)
                out_d.append(((out - mu) ** 2).mean(dim=(1, 2, 3)))
                sums = w.sum(-1).reshape(CHUNK, *a.shape[:-1])
                row_d.append(((sums - a.sum(-1)) ** 2).mean(dim=(1, 2, 3)))
    finally:
        mha.eval()
    return mu, torch.cat(out_d).numpy(), torch.cat(row_d).numpy()


def test_multihead_attention_site_matches_its_train_mode_forward():
    mha, inputs = _mha(), _mha_inputs()
    audit = A.audit_torch(mha, inputs, seed=3)
    assert audit.sites == []
    [s] = audit.attention_sites
    assert (s["name"], s["heads"], s["keys"], s["queries"], s["embed"]) == ("MultiheadAttention", 2, 6, 10, 8)
    mu, out_d, row_d = _mc_mha(mha, inputs)
    mean, var = audit.attention_moments(0)
    # E[out] is the eval output (the module's own forward, not dropmc's).
    scale = np.abs(mu.numpy()).max() + 1.0
    assert np.abs(mean - mu.reshape(-1, 8).numpy()).max() <= ROUNDINGS * np.finfo(float).eps * scale
    u = np.finfo(float).eps / 2
    assert var.shape == (10, 8)
    assert abs(var.mean() - s["mean_output_variance"]) <= MEAN_ROUNDINGS * u * var.mean()
    z_out = _z(out_d, s["mean_output_variance"])
    z_row = _z(row_d, s["mean_row_sum_variance"])
    assert abs(z_out) < dropmc.critical_z(), z_out
    assert abs(z_row) < dropmc.critical_z(), z_row
    # The engine's own sampled check agrees with its closed forms.
    for check in (s["row_sum_check"], s["output_check"]):
        assert abs(check["z"]) < dropmc.critical_z(), check


@pytest.mark.parametrize("fault", ["wrong p", "mask ignored"])
def test_planted_fault_fails_the_z_test(fault):
    mha, inputs = _mha(), _mha_inputs()
    q, k, v, pad = inputs
    if fault == "wrong p":
        caps = A.capture_attention_sites(mha, inputs, [""])
        caps[0]["p"] = 0.4
    else:
        caps = A.capture_attention_sites(mha, (q, k, v), [""])
    audit = A.audit_captures([], attention_captures=caps, seed=3)
    _, out_d, _ = _mc_mha(mha, inputs)
    assert abs(_z(out_d, audit.attention_sites[0]["mean_output_variance"])) > dropmc.critical_z()


def _encoder(d=8, layers=2):
    torch.manual_seed(13)
    layer = nn.TransformerEncoderLayer(d, 2, 16, dropout=0.2, batch_first=True)
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False).double()


def _mc_attention_output(model, x, name, seed=0):
    """D per copy for the output of attention `name`, with every other
    dropout (and every other attention's dropout) off."""
    modules = dict(model.named_modules())
    target = modules[name]
    model.eval()
    got = []
    hook = target.register_forward_hook(lambda m, a, out: got.append(out[0].detach()))
    with torch.no_grad():
        model(x)
    mu = got.pop()
    model.train()
    for n, m in modules.items():
        if isinstance(m, (nn.Dropout, nn.MultiheadAttention)) and m is not target:
            m.eval()
    torch.manual_seed(seed)
    ds = []
    try:
        with torch.no_grad():
            for _ in range(RUNS // CHUNK):
                model(x.repeat(CHUNK, 1, 1))
                out = got.pop().reshape(CHUNK, *mu.shape)
                ds.append(((out - mu) ** 2).mean(dim=(1, 2, 3)))
    finally:
        hook.remove()
        model.eval()
    return torch.cat(ds).numpy()


def test_encoder_attention_sites_match_the_model():
    # nn.TransformerEncoder: its layers' self_attn are found among the
    # modules and kept because the traced forward reaches them.
    model = _encoder()
    torch.manual_seed(14)
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    audit = A.audit_torch(model, x, seed=5)
    assert len(audit.sites) == 4
    names = [s["name"] for s in audit.attention_sites]
    assert names == ["layers.0.self_attn", "layers.1.self_attn"]
    for i, s in enumerate(audit.attention_sites):
        assert s["p"] == 0.2 and s["heads"] == 2 and s["keys"] == 5 and s["queries"] == 10
        z = _z(_mc_attention_output(model, x, s["name"], seed=i), s["mean_output_variance"])
        assert abs(z) < dropmc.critical_z(), (s["name"], z)
    text = str(audit)
    assert text.index("gap eval") < text.index("attention site") < text.index("layers.1.self_attn")
    data = json.loads(audit.to_json())
    assert [s["name"] for s in data["attention_sites"]] == names and len(data["sites"]) == 4


def test_discovery_finds_the_attention_of_an_encoder_layer():
    torch.manual_seed(15)
    x = torch.randn(2, 3, 4)
    for p in (0.1, 0.0):
        model = nn.Sequential(nn.Linear(4, 8), nn.TransformerEncoderLayer(8, 2, 16, dropout=p,
                                                                         batch_first=True))
        att = discover(model, x).attention
        assert [(a.call, a.kind, a.p) for a in att] == [("1.self_attn", "mha", p)]


def test_one_hot_rows_warn():
    # Keys far apart along the query direction make the softmax one-hot:
    # (p/q) Σ a² → p/q = 1.5 at p = 0.6.
    mha = nn.MultiheadAttention(4, 1, dropout=0.6, batch_first=True, bias=False).double()
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([100 * torch.eye(4)] * 3))
    q = torch.tensor([[[1.0, 0, 0, 0]]], dtype=torch.float64)
    kv = torch.tensor([[[1.0, 0, 0, 0], [0, 1.0, 0, 0]]], dtype=torch.float64)
    audit = A.audit_torch(mha, (q, kv, kv))
    s = audit.attention_sites[0]
    assert s["max_row_sum_variance"] == pytest.approx(1.5)
    assert any("one-hot" in w for w in s["warnings"]) and "one-hot" in str(audit)


def test_bad_attention_input_is_a_python_error():
    mha, inputs = _mha(), _mha_inputs()
    with pytest.raises(ValueError, match="not an nn.MultiheadAttention"):
        A.capture_attention_sites(mha, inputs, ["out_proj"])
    q, k, v, _ = inputs
    every_key = torch.ones(2, 6, dtype=torch.bool)
    with pytest.raises(ValueError, match="not finite"):
        A.capture_attention_sites(mha, (q, k, v, every_key), [""])
    with pytest.raises(ValueError, match="attention_samples"):
        A.audit_torch(mha, inputs, attention_samples=10)
    kv = nn.MultiheadAttention(8, 2, dropout=0.1, add_bias_kv=True)
    with pytest.raises(ValueError, match="add_bias_kv"):
        A.audit_torch(kv, (torch.randn(3, 8),) * 3)


def test_save_load_and_the_cli_round_trip_attention_sites(tmp_path, dropmc_binary):
    # Audit.save writes the attention captures (npz version 2); Python's
    # load/load_attention and `dropmc audit --activations` audit them to the
    # same table and JSON, bit for bit.
    import subprocess

    model = _encoder()
    torch.manual_seed(16)
    x = torch.randn(1, 4, 8, dtype=torch.float64)
    audit = A.audit_torch(model, x, samples=4096, seed=7, attention_samples=512)
    path = tmp_path / "caps.npz"
    audit.save(str(path))
    again = A.audit_captures(A.load(str(path)), samples=4096, seed=7,
                             attention_captures=A.load_attention(str(path)), attention_samples=512)
    assert json.loads(again.to_json()) == engine_json(audit) and again.engine_text() == audit.engine_text()
    run = [dropmc_binary, "audit", "--activations", str(path), "--samples", "4096", "--seed", "7",
           "--attention-samples", "512"]
    out = subprocess.run(run + ["--json"], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == engine_json(audit)
    table = subprocess.run(run, capture_output=True, text=True, check=True)
    assert table.stdout == audit.engine_text()
    only_attention = tmp_path / "attention.npz"
    A.save_captures(str(only_attention), [], A.load_attention(str(path)))
    r = subprocess.run([dropmc_binary, "audit", "--activations", str(only_attention), "--json"],
                       capture_output=True, text=True, check=True)
    assert json.loads(r.stdout)["sites"] == [] and len(json.loads(r.stdout)["attention_sites"]) == 2
    future = tmp_path / "future.npz"
    np.savez(future, version=np.array(3), count=np.array(1), attention_count=np.array(0))
    r = subprocess.run([dropmc_binary, "audit", "--activations", str(future)], capture_output=True, text=True)
    assert r.returncode == 2 and "layout version 3" in r.stderr and "panicked" not in r.stderr
