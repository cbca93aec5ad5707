"""dropmc.torch.correct where the path from a dropout to its norm is not
the identity on the tensor (dropmc.correct_tapes): Swin's shifted windows.
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
3 (a view's traced leading size is freed). Planted: the steps not replayed
(``v`` in window layout: ``correct``'s rehearsal refuses it), and the
leading size kept (the batch of 3 fails).
"""

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
import dropmc._dropmc as _rs  # noqa: E402
import dropmc.audit as A  # noqa: E402
import dropmc.correct as C  # noqa: E402
import dropmc.correct_tapes as CT  # noqa: E402
import dropmc.torch as dt  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def swin():
    torch.manual_seed(0)
    c = T.SwinConfig(image_size=16, patch_size=2, embed_dim=24, depths=[2, 2], num_heads=[2, 2], window_size=2,
                     hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.0, drop_path_rate=0.0)
    c._attn_implementation = "eager"
    x = torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    return T.SwinModel(c).double().eval(), {"pixel_values": x}


def test_windowed_sites_are_corrected_and_run_at_another_batch_size(swin):
    model, kw = swin
    dt.correct(model, kw)
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
        site = tuple(s["name"].split("->"))
        dt.correct(model, kw, sites=[site])
        try:
            out = C.norm_outputs(model, kw, [site[-1]])[site[-1]]
        finally:
            dt.uncorrect(model)
        truth, se = audit.truth(i)
        gap = _rs.gap_to_truth(truth.ravel(), se.ravel(), out.numpy().ravel().copy(), s["d"])
        assert gap["rms"] <= s["first_order"]["upper"], (site, gap, s["first_order"])


def test_planted_steps_not_replayed_fail(swin, monkeypatch):
    model, kw = swin
    monkeypatch.setattr(CT, "replay", lambda steps, v: v)
    with pytest.raises(ValueError, match="differ in shape"):
        dt.correct(model, kw, sites=[("encoder.layers.0.blocks.0.dropout", "encoder.layers.0.blocks.0.layernorm_after")])


def test_planted_leading_size_kept_fails(swin, monkeypatch):
    model, kw = swin
    monkeypatch.setattr(CT, "_free_leading", lambda name, args, pos: args)
    dt.correct(model, kw)
    try:
        with pytest.raises(RuntimeError):
            with torch.no_grad():
                model(pixel_values=torch.randn(3, 3, 16, 16, dtype=torch.float64))
    finally:
        dt.uncorrect(model)
