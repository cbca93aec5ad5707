"""dropmc's pytest plugin (the pytest11 entry point), run through pytester."""

from importlib.metadata import entry_points

import pytest

pytest_plugins = ["pytester"]

LAYERS = '''
import numpy as np

P = 0.3

class Layer:
    def __init__(self, scale, seed):
        self.rng = np.random.default_rng(seed)
        self.scale = scale

    def forward(self, x, training):
        if not training:
            return x
        return np.where(self.rng.random(x.shape) >= P, x * self.scale, 0.0)

def test_correct(dropmc_check):
    result = dropmc_check(Layer(1 / (1 - P), 1).forward, P, backward=False)
    print("SAMPLES", result.claim("dropout.mean")["samples"], "SEED", result.to_dict()["seed"])

def test_divides_by_p(dropmc_check):
    dropmc_check(Layer(1 / P, 2).forward, P, backward=False)
'''


def test_the_plugin_is_registered_as_a_pytest11_entry_point():
    names = {e.value for e in entry_points(group="pytest11")}
    assert "dropmc.pytest_plugin" in names


def test_the_fixture_passes_a_correct_layer_and_prints_the_table_for_a_wrong_one(pytester):
    pytester.makepyfile(LAYERS)
    run = pytester.runpytest("-s", "--dropmc-samples=50000", "--dropmc-seed=7")
    run.assert_outcomes(passed=1, failed=1)
    out = run.stdout.str()
    # The options reach the check.
    assert "SAMPLES 50000 SEED 7" in out
    # The failure is the claim table: claim, verdict, estimate, analytic, z.
    run.stdout.fnmatch_lines(
        [
            "*dropout at p = 0.3 did not pass dropmc's claims:*",
            "*claim*verdict*estimate*analytic*z*",
            "*semantics.survivors_exact*FAIL*",
            "*likely cause: the kept values are not x/q*",
        ]
    )


def test_without_options_each_claim_keeps_its_budget(pytester):
    pytester.makepyfile(LAYERS)
    run = pytester.runpytest("-s", "-k", "correct")
    run.assert_outcomes(passed=1)
    assert "SAMPLES 1000000 SEED 1" in run.stdout.str()


def test_a_bad_option_value_is_a_usage_error(pytester):
    pytester.makepyfile(LAYERS)
    run = pytester.runpytest("--dropmc-samples=1")
    assert run.ret == pytest.ExitCode.USAGE_ERROR
    assert "--dropmc-samples" in run.stderr.str()


def test_a_cap_below_the_minimum_budget_skips_a_correct_layer_saying_so(pytester):
    pytester.makepyfile(LAYERS)
    run = pytester.runpytest("-rs", "-k", "test_correct", "--dropmc-samples=10000")
    run.assert_outcomes(skipped=1)
    run.stdout.fnmatch_lines(["*--dropmc-samples 10000 is below the minimum budget of*inconclusive*"])


def test_a_wrong_layer_still_fails_at_a_cap_below_the_minimum_budget(pytester):
    # Its survivors are wrong on every row: decided at any cap.
    pytester.makepyfile(LAYERS)
    run = pytester.runpytest_subprocess("-k", "divides", "--dropmc-samples=10000")
    run.assert_outcomes(failed=1)
