"""``audit``'s input validation and one-token sequences (issue 52, items 2
and 3): bad inputs are refused once, before any site-specific check,
naming the argument; a one-token sequence is audited with the true reason
for what cannot be resolved."""

import pytest
import torch
import torch.nn as nn

import dropmc.torch

torch.set_num_threads(1)


def _encoder():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.1, batch_first=True)
    return nn.TransformerEncoder(layer, 1, enable_nested_tensor=False).eval()


def test_a_nan_in_an_encoders_input_is_named_before_the_attention_path_looks():
    # Before: "attention site ... a softmax row is not finite (a query whose
    # every key is masked)".
    x = torch.randn(2, 6, 32)
    x[1, 3, 5] = float("nan")
    with pytest.raises(ValueError, match=r"^inputs: NaN, 1 non-finite value\(s\) of 384"):
        dropmc.torch.audit(_encoder(), x, samples=1024, progress=False)


def test_a_nan_in_a_keyword_input_is_named_by_its_key_and_a_masks_minus_inf_is_not():
    model = _encoder()
    mask = torch.zeros(2, 6)
    mask[0, 0] = float("-inf")  # an additive padding mask hides key 0 of sequence 0: legitimate
    src = torch.randn(2, 6, 32)
    a = dropmc.torch.audit(model, {"src": src, "src_key_padding_mask": mask}, samples=1024, progress=False)
    assert a.sites
    mask[1, 2] = float("nan")
    with pytest.raises(ValueError, match=r"^inputs\['src_key_padding_mask'\]: NaN, 1 non-finite"):
        dropmc.torch.audit(model, {"src": src, "src_key_padding_mask": mask}, samples=1024, progress=False)
    src[0, 0, 0] = float("-inf")
    with pytest.raises(ValueError, match=r"^inputs\['src'\]: infinity"):  # the data itself: refused
        dropmc.torch.audit(model, {"src": src}, samples=1024, progress=False)


@pytest.mark.parametrize("bad, error, message", [
    (torch.randn(2, 0, 32), ValueError, r"^inputs is empty \(shape \(2, 0, 32\)\)"),
    (torch.randn(2, 6, 32, dtype=torch.complex64), TypeError, "^inputs has the complex dtype"),
    (torch.randn(2, 6, 32, device="meta"), ValueError, "^inputs is on the meta device"),
])
def test_empty_complex_and_meta_inputs_are_refused_naming_inputs(bad, error, message):
    with pytest.raises(error, match=message):
        dropmc.torch.audit(_encoder(), bad, samples=1024, progress=False)


def test_a_one_token_sequence_is_audited_with_the_true_reason():
    # Before: TypeError "'>' not supported between 'NoneType' and 'int'" in
    # dropmc/audit/linear.py; with linear=False "< inf" bounds with no reason.
    x = torch.randn(1, 1, 32)
    a = dropmc.torch.audit(_encoder(), x, samples=1024, progress=False)
    rows = a.sites + a.linear_sites
    assert a.sites and a.linear_sites
    for row in rows:
        assert row["tokens"] == 1
        assert any(w.startswith("one token audited: no second token") for w in row["warnings"]), row
    plain = dropmc.torch.audit(_encoder(), x, samples=1024, linear=False, progress=False)
    assert all(any("one token audited" in w for w in r["warnings"]) for r in plain.sites)
    assert "one token audited" in str(plain)
