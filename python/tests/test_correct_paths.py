"""dropmc.torch.correct where the path from a dropout to its norm is not
the identity on the tensor (dropmc.correct.tapes): Swin's shifted windows.
A block's attention output ``dropout`` runs on window-partitioned tokens
(``(batch · windows, window², C)``) and reaches ``layernorm_after`` through
the window reverse (views, permute), the reverse roll, the unpadding slice
and a view back to ``(batch, H·W, C)``; the steps are replayed on the
captured ``v``, each token's ``x`` meeting its own ``v``.

Tiny Swin (float64, random weights, hidden dropout 0.1, attention dropout
and drop-path 0). Checks: ``correct(model, inputs)`` corrects the 8 clean
sites (the embeddings' entangled one refused); one site at a time, the
corrected output within the uncorrected audit's first-order bound of the
audit's truth; the corrected model, built on a batch of 1, runs a batch of
3 (a view's traced leading size is freed); with drop-path too, it saves, loads and
deep-copies. Planted: the steps not replayed
(``v`` in window layout: ``correct``'s rehearsal refuses it), and the
leading size kept (the batch of 3 fails).
"""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
import dropmc.audit as A  # noqa: E402
import dropmc.correct.tapes as CT  # noqa: E402
import dropmc.torch as dt  # noqa: E402
from correct_checks import build_swin, one_site_gap  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def swin():
    return build_swin(0.1, 0.0, torch.float64)


def test_windowed_sites_are_corrected_and_run_at_another_batch_size(swin):
    model, kw = swin
    dt.correct(model, kw, scope="site")
    try:
        corr = model._dropmc_correction
        assert len(corr.sites) == 8 and list(corr.refused) == [
            "embeddings.dropout->encoder.layers.0.blocks.0.layernorm_after"]
        with torch.no_grad():
            out = model(pixel_values=torch.randn(3, 3, 16, 16, dtype=torch.float64)).last_hidden_state
        assert out.shape[0] == 3 and torch.isfinite(out).all()
    finally:
        dt.uncorrect(model)


def test_each_site_within_the_first_order_bound(swin):
    model, kw = swin
    audit = A.audit_torch(model, kw, seed=3, attention=False)
    assert len(audit.sites) == 8
    for i, s in enumerate(audit.sites):
        gap = one_site_gap(model, kw, audit, i)
        assert gap <= s["first_order"]["upper"], (s["name"], gap, s["first_order"])


def test_planted_steps_not_replayed_fail(swin, monkeypatch):
    model, kw = swin
    monkeypatch.setattr(CT, "replay", lambda steps, v: v)
    with pytest.raises(ValueError, match="differ in shape"):
        dt.correct(model, kw, sites=[("encoder.layers.0.blocks.0.dropout", "encoder.layers.0.blocks.0.layernorm_after")])


def test_planted_leading_size_kept_fails(swin, monkeypatch):
    model, kw = swin
    monkeypatch.setattr(CT, "_free_leading", lambda name, args, pos: args)
    dt.correct(model, kw, scope="site")
    try:
        with pytest.raises(RuntimeError):
            with torch.no_grad():
                model(pixel_values=torch.randn(3, 3, 16, 16, dtype=torch.float64))
    finally:
        dt.uncorrect(model)


def test_save_load_and_deepcopy_keep_replayed_and_token_level_sites():
    """A corrected Swin with windowed (replayed) and drop-path (token-level)
    sites pickles and deep-copies: each copy outputs the corrected output
    bit for bit."""
    import copy
    import io

    model, kw = build_swin(0.1, 0.2)
    dt.correct(model, kw, scope="site")
    with torch.no_grad():
        ref = model(**kw).last_hidden_state
    buf = io.BytesIO()
    torch.save(model, buf)
    buf.seek(0)
    for other in (torch.load(buf, weights_only=False), copy.deepcopy(model)):
        assert len(other._dropmc_correction.sites) == 8
        with torch.no_grad():
            assert torch.equal(other(**kw).last_hidden_state, ref)
