"""Issue 40 on the source paper's own model family: transformers'
``EsmForProteinFolding`` (tiny config, random weights, ``fp16_esm=False``;
hf_models.build_esmfold), one recycle (two trunk passes).

* The discovered sites equal the paths written by hand from
  modeling_esmfold.py (hf_models.expected_esmfold): 42 dropout→norm paths,
  the 16 triangle-update row/column dropouts (``x · dropout(ones(shape))``)
  and the two ``.detach()`` paths into the recycling norms among them.
* The audit accounts for every dropout call: each of the 42 paths is
  audited with numbers; the one call with no site (the last pass's
  ``mlp_pair`` dropout, read by ``trunk2sm_z``) is listed with that linear.
* The truth of a row-dropout site (its mask shared along a residue axis,
  independent over the channels the pair LayerNorm normalizes) agrees
  with the model's own train-mode Monte Carlo with only that call active:
  per token a z on a fixed random projection, the largest |z| against the
  suite's per-assertion level split by Bonferroni over the tokens (valid
  though tokens sharing a mask are correlated).
"""


import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
import dropmc.audit as A  # noqa: E402
from dropmc.model.discovery import discover  # noqa: E402
from hf_models import build_esmfold, expected_esmfold  # noqa: E402
from mc_checks import bonferroni_z, projected_z  # noqa: E402

torch.set_num_threads(1)
L = 12  # residues
RUNS = 1500  # train-mode copies of the sequence in the Monte Carlo batch
SAMPLES = 16384  # masks per token of the audited truth
ROW_SITE = ("trunk.blocks.0.row_drop.dropout", "trunk.blocks.0.tri_mul_in.layer_norm_in")


def _ids():
    return torch.randint(0, 20, (1, L), generator=torch.Generator().manual_seed(3))



@pytest.fixture(scope="module")
def esmfold():
    return build_esmfold()


def test_every_esmfold_path_is_found_and_accounted(esmfold):
    kw = {"input_ids": _ids(), "num_recycles": 1}
    found = discover(esmfold, **kw)
    truth = expected_esmfold()
    assert len(truth) == 42
    assert {(s.dropout, s.norm): s.form for s in found.sites} == truth
    masked = [s for s in found.sites if s.mask is not None]
    assert len(masked) == 16 and all(s.mask.kind == "elementwise" and len(s.mask.shared) == 1 for s in masked)
    assert all("correlated" in s.mask.text for s in masked)
    audit = A.audit_torch(esmfold, kw, samples=1024, attention_samples=256)
    assert len(audit.sites) == 42  # every path with numbers
    rows = [s for s in audit.sites if s.get("mask")]
    assert len(rows) == 16 and all(s["mask"] == "elementwise" and "correlated" in s["mask_sharing"] for s in rows)
    assert "16 sites are mask products" in str(audit)
    assert {s["name"] for s in audit.sites} == {f"{d}->{n}" for d, n in truth}
    assert audit.coverage == {"calls": 42, "audited": 41, "listed": 1,
                              "reasons": {"through a linear layer": 1}}
    (row,) = audit.other_sites
    assert row["name"] == "trunk.blocks.1.mlp_pair.mlp.4#1" and "linear:trunk.trunk2sm_z" in row["reason"]


class _Stop(Exception):
    pass


def _monte_carlo(model, ids, runs):
    """The norm's output over ``runs`` copies of the sequence in one batch,
    only the site's first dropout call in train mode (its mask independent
    per copy); the forward stops at the norm."""
    drop = model.get_submodule(ROW_SITE[0])
    norm = model.get_submodule(ROW_SITE[1])
    got = []

    def hook(module, args, out):
        got.append(out.detach().to(torch.float64))
        raise _Stop

    calls = []
    real = drop.forward

    def first_only(x):  # the site is the module's first call of the pass
        calls.append(1)
        return torch.nn.functional.dropout(x, drop.p, training=len(calls) == 1)

    model.eval()
    handle = norm.register_forward_hook(hook)
    drop.forward = first_only
    torch.manual_seed(11)
    try:
        with torch.no_grad():
            model(input_ids=ids.repeat(runs, 1), num_recycles=0)
    except _Stop:
        pass
    finally:
        handle.remove()
        drop.forward = real
    out = got[0]
    return out.reshape(runs, -1, out.shape[-1]).numpy()


def test_row_dropout_truth_matches_the_models_monte_carlo(esmfold):
    ids = _ids()
    audit = A.audit_torch(esmfold, {"input_ids": ids, "num_recycles": 0}, sites=[ROW_SITE], attention=False,
                          samples=SAMPLES, seed=2, tokens="all")
    (site,) = audit.sites
    assert site["name"] == "->".join(ROW_SITE) and site["d"] == 32
    truth, se = audit.truth(0)
    runs = _monte_carlo(esmfold, ids, RUNS)
    z = projected_z(truth, se, runs)
    assert z.size == L * L
    assert np.abs(z).max() < bonferroni_z(z.size), np.abs(z).max()
