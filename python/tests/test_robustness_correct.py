"""``correct`` against the issue-52 inputs (items 4, 5, 7): BatchNorm pairs
with inputs, ``torch.compile``d and meta-device models, ``torch.jit.script``
of a corrected model, and user hooks registered before ``correct``."""

import warnings

import pytest
import torch
import torch.nn as nn

import dropmc.torch

torch.set_num_threads(1)


def _trained_batchnorm_model():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.1), nn.BatchNorm1d(8))
    model.train()
    with torch.no_grad():
        for _ in range(5):
            model(torch.randn(32, 8) + 1.0)
    return model.eval()


def test_with_inputs_the_dropout_batchnorm_pair_is_folded_as_without():
    # Before: with inputs, "no site to correct ... not a LayerNorm or RMSNorm
    # ... pass norms=" though docs/correct.md says the pairs are added.
    with_inputs, without = _trained_batchnorm_model(), _trained_batchnorm_model()
    dropmc.torch.correct(with_inputs, torch.randn(16, 8))
    dropmc.torch.correct(without)
    assert with_inputs._dropmc_correction.folded == [("1", "2")]
    assert without._dropmc_correction.folded == [("1", "2")]
    assert torch.equal(with_inputs[2].running_var, without[2].running_var)


def _layer_norm_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.1), nn.LayerNorm(8)).eval()


def test_a_compiled_model_is_corrected_through_its_original_module_with_a_warning():
    model = _layer_norm_model()
    compiled = torch.compile(model)
    x = torch.randn(16, 8)
    with pytest.warns(UserWarning, match=r"torch.compile wrapper; correct acts on its original module"):
        out = dropmc.torch.correct(compiled, x)
    assert out is model and (model._dropmc_correction.sites or model._dropmc_correction.network)  # network: default
    with pytest.warns(UserWarning, match="uncorrect acts on its original module"):
        dropmc.torch.uncorrect(compiled)
    assert getattr(model, "_dropmc_correction", None) is None


def test_a_compiled_model_is_audited_through_its_original_module():
    compiled = torch.compile(_layer_norm_model())
    with pytest.warns(UserWarning, match="audit acts on its original module"):
        a = dropmc.torch.audit(compiled, torch.randn(16, 8), samples=1024, progress=False)
    assert a.coverage["audited"] == 1


@pytest.mark.parametrize("call", ["audit", "correct"])
def test_a_meta_model_is_refused_up_front_naming_the_device(call):
    # Before: torch's "Cannot copy out of meta tensor" after 34 s.
    model = _layer_norm_model().to("meta")
    with pytest.raises(ValueError, match="'0.weight' is on the meta device"):
        getattr(dropmc.torch, call)(model, torch.randn(16, 8))


def test_scripting_a_corrected_model_names_the_correction():
    # Before: AttributeError: '_FreshForward' object has no attribute '__name__'.
    model = _layer_norm_model()
    dropmc.torch.correct(model, torch.randn(16, 8))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit.script's deprecation
        with pytest.raises(TypeError, match="torch.jit.script: the model is corrected by dropmc.correct"):
            torch.jit.script(model)
        with pytest.raises(TypeError, match="module '2' is corrected by dropmc.correct"):
            torch.jit.script(model[2])
        dropmc.torch.uncorrect(model)
        scripted = torch.jit.script(model)  # uncorrected: scripts as before
    x = torch.randn(4, 8)
    assert torch.equal(scripted(x), model(x))


def _seen_by_a_user_hook(model, norm, x, **kwargs):
    """The norm's output a forward hook registered BEFORE ``correct`` sees,
    and the model's corrected output."""
    seen = []
    handle = norm.register_forward_hook(lambda m, a, out: seen.append(out.detach().clone()))
    dropmc.torch.correct(model, x, **kwargs)
    with torch.no_grad():
        out = model(x)
    handle.remove()
    dropmc.torch.uncorrect(model)
    with torch.no_grad():
        plain = model(x)
    return seen[-1], out, plain


def test_a_user_hook_before_correct_sees_the_corrected_output_at_a_class_swapped_site():
    model, x = _layer_norm_model(), torch.randn(16, 8)
    seen, out, plain = _seen_by_a_user_hook(model, model[2], x)
    assert not torch.equal(out, plain)  # the correction changes the output
    assert torch.equal(seen, out)


def test_a_user_hook_before_correct_sees_the_corrected_output_at_a_hooked_site():
    # An RMSNorm site keeps the hook path (only an exact nn.LayerNorm is
    # class-swapped): before, the user's earlier hook ran first.
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.1), nn.RMSNorm(8)).eval(), torch.randn(16, 8)
    seen, out, plain = _seen_by_a_user_hook(model, model[2], x)
    assert not torch.equal(out, plain)
    assert torch.equal(seen, out)


def test_a_user_hook_before_correct_sees_the_corrected_output_at_a_linear_path_site():
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Dropout(0.1), nn.Linear(8, 8), nn.LayerNorm(8)).eval(), torch.randn(16, 8)
    seen, out, plain = _seen_by_a_user_hook(model, model[2], x, linear=True)
    assert not torch.equal(out, plain)
    assert torch.equal(seen, out)
