"""Helpers shared by the correct tests (and benchmarks/correct_coverage.py):
a tiny Swin, and one site's corrected gap to the audit's truth."""

import torch


def build_swin(hidden_p, drop_path, dtype=torch.float32):
    """A tiny ``SwinModel`` (16 × 16 images, patch 2, two stages of two
    blocks, window 2; random weights, attention dropout 0) in eval mode,
    and its keyword inputs (one image)."""
    import transformers as T

    torch.manual_seed(0)
    c = T.SwinConfig(image_size=16, patch_size=2, embed_dim=24, depths=[2, 2], num_heads=[2, 2], window_size=2,
                     hidden_dropout_prob=hidden_p, attention_probs_dropout_prob=0.0, drop_path_rate=drop_path)
    c._attn_implementation = "eager"
    x = torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(1), dtype=dtype)
    return T.SwinModel(c).to(dtype).eval(), {"pixel_values": x}


def one_site_gap(model, kw, audit, i):
    """The RMS gap of audit site ``i``'s norm output, ``model`` corrected at
    that site alone, to the audit's truth."""
    import dropmc._dropmc as _rs
    import dropmc.correct as C
    import dropmc.torch as dt

    s = audit.sites[i]
    site = tuple(s["name"].split("->"))
    dt.correct(model, kw, sites=[site])
    try:
        out = C.norm_outputs(model, kw, [site[-1]])[site[-1]]
    finally:
        dt.uncorrect(model)
    truth, se = audit.truth(i)
    rows = out.numpy().reshape(-1, s["d"])
    assert rows.shape[0] == s["tokens_total"], "a padded site: select its unpadded rows first"
    rows = rows[audit.token_indices(i)]  # the audited tokens (a sample when the site has many)
    return _rs.gap_to_truth(truth.ravel(), se.ravel(), rows.ravel().copy(), s["d"])["rms"]
