"""dropmc.torch.assess (issue 51): its paired statistics against a direct
computation, a planted harmful correction, a planted no-op site, the
false-alarm rate under a null metric, bad input and Ctrl-C.

The model: token embedding → dropout → LayerNorm (a plain site) → linear
→ dropout → add → LayerNorm (a bypass site) → linear head, d = 16, random
weights. Its "truth" for the metric that correcting should serve is the
train-mode expectation of the output (the mean of ``ENSEMBLE`` train-mode
forwards): the correction moves each norm's eval output to the first-order
estimate of its train-mode expectation, so it brings the eval output
closer to it, and a factor inverted at a site pushes it away.
"""

import math
import os

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import dropmc  # noqa: E402
import dropmc.torch as dt  # noqa: E402
from dropmc.correct import hooks as correct_hooks  # noqa: E402
from dropmc.assess import MIN_UNITS  # noqa: E402

D, VOCAB, T = 16, 11, 6
ENSEMBLE = 256  # train-mode forwards averaged into the expected output (the metric's target)
SITE_1, SITE_2 = ("drop1", "ln1"), ("drop2", "ln2")

#: Δ and SE of assess against the direct paired computation: both sum the
#: same float64 values (from the same float32 forwards), in another order
#: at most; the rounding of a sum of n ≤ 64 terms is below n·2⁻⁵³ ≈ 7e-15
#: of the terms' scale, so 1e-12 relative leaves a wide margin.
SUM_TOLERANCE = 1e-12


class TwoSites(nn.Module):
    def __init__(self, p1=0.3, p2=0.3):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.drop1, self.ln1 = nn.Dropout(p1), nn.LayerNorm(D)
        self.lin = nn.Linear(D, D)
        self.drop2, self.ln2 = nn.Dropout(p2), nn.LayerNorm(D)
        self.head = nn.Linear(D, VOCAB)

    def forward(self, x):
        h = self.ln1(self.drop1(self.emb(x)))
        h = self.ln2(h + self.drop2(self.lin(h)))
        return self.head(h)


def _setup(seed, windows=32, batch=8, ensemble=ENSEMBLE):
    """A seeded model and data batches ``(tokens, expected output)``, the
    expectation the mean of ``ensemble`` train-mode forwards."""
    torch.manual_seed(seed)
    model = TwoSites()
    x = torch.randint(0, VOCAB, (windows, T))
    model.train()
    with torch.no_grad():
        expected = sum(model(x) for _ in range(ensemble)) / ensemble
    model.eval()
    return model, [(x[i:i + batch], expected[i:i + batch]) for i in range(0, windows, batch)]


def squared_gap(output, target):
    """Per window: the mean squared gap of the output to its train-mode expectation."""
    return (output.double() - target.double()).square().mean(dim=(1, 2))


@pytest.fixture(autouse=True)
def one_thread():
    with dt.one_thread():
        yield


def _eval(model, x):
    with torch.no_grad():
        return model(x)


def test_delta_and_se_equal_a_direct_paired_computation():
    model, data = _setup(0)
    result = dt.assess(model, data, squared_gap, alpha=0.05, progress=False)
    plain = torch.cat([squared_gap(_eval(model, x), y) for x, y in data])
    rows = (("corrected (network scope)", None, "network"), ("corrected (site scope)", None, "site"),
            ("drop2->ln2 alone", [SITE_2], "site"))
    for label, sites, scope in rows:
        with dt.corrected(model, data[0][0], sites=sites, scope=scope):
            variant = torch.cat([squared_gap(_eval(model, x), y) for x, y in data])
        d = (variant - plain).tolist()
        n = len(d)
        mean = math.fsum(d) / n
        se = math.sqrt(math.fsum((v - mean) ** 2 for v in d) / (n - 1) / n)
        row = result.row(label)["all"]
        assert row["n"] == n == 32
        assert math.isclose(row["delta"], mean, rel_tol=SUM_TOLERANCE), (label, row, mean)
        assert math.isclose(row["se"], se, rel_tol=SUM_TOLERANCE), (label, row, se)
    # a one-shot iterator: read once, the same units for every variant, the same numbers
    once = dt.assess(model, iter(data), squared_gap, alpha=0.05, progress=False)
    assert [r["all"] for r in once.rows] == [r["all"] for r in result.rows]
    # the halves partition the units, and the cost is (distinct variants) x batches: plain, all at
    # network scope, all at site scope, drop1 alone, drop2 alone (all-but-one of two sites is the other alone)
    assert result.halves == (16, 16)
    assert result.forwards == 5 * len(data)
    # the labels name the scope: the site scope's row alone when it is the scope asked for
    assert [r["label"] for r in dt.assess(model, data, squared_gap, scope="site", progress=False).rows][0] == \
        "corrected (site scope)"
    assert "corrected (network scope)" not in [r["label"] for r in dt.assess(
        model, data, squared_gap, sites=[SITE_1, SITE_2], progress=False).rows]
    assert getattr(model, "_dropmc_correction", None) is None


def _invert_factor_at(monkeypatch, site):
    """Plant: the LayerNorm factor ``c`` of ``site`` applied as ``1 / c``."""
    apply = correct_hooks._LayerNormSite._apply

    def inverted(self, x, c, out):
        return apply(self, x, 1.0 / c if tuple(self.site) == site else c, out)

    monkeypatch.setattr(correct_hooks._LayerNormSite, "_apply", inverted)


def test_a_planted_harmful_correction_is_flagged_worse(monkeypatch):
    """``ln2`` feeds the linear head, so the expected output is the head of
    ln2's expected output: ln2's correction (alone) moves the output towards
    it ("better" at the suite's level), its factor inverted away from it."""
    model, data = _setup(1, windows=64)
    honest = dt.assess(model, data, squared_gap, progress=False)
    assert honest.row("drop2->ln2 alone")["verdict"] == "better", str(honest)
    assert SITE_2 in honest.recommended, str(honest)
    _invert_factor_at(monkeypatch, SITE_2)
    result = dt.assess(model, data, squared_gap, progress=False)
    assert result.row("drop2->ln2 alone")["verdict"] == "worse", str(result)
    assert SITE_2 not in result.recommended


def _noisy(metric, generator):
    """The metric measured with noise of its own (each call draws fresh
    noise of about the metric's scale): ``d_u`` is then never exactly 0."""

    def measured(output, target):
        values = metric(output, target)
        return values + 0.5 * values.mean() * torch.randn(values.shape, generator=generator, dtype=values.dtype)

    return measured


def _no_op_at(monkeypatch, site):
    """Plant: ``site``'s correction applied with ``c = 1`` (no effect)."""
    apply = correct_hooks._LayerNormSite._apply

    def unchanged(self, x, c, out):
        return apply(self, x, torch.ones_like(c) if tuple(self.site) == site else c, out)

    monkeypatch.setattr(correct_hooks._LayerNormSite, "_apply", unchanged)


def test_a_planted_no_op_site_gets_no_effect(monkeypatch):
    """40 seeds at the suite's level: the no-op site's row is "no effect"
    in at least 95 % of them (38); a false "better"/"worse" has chance at
    most α = 1e-10 per run. 64 units: the critical t at 63 df is near the
    normal's, so a test whose SE is too small (z inflated) is caught."""
    _no_op_at(monkeypatch, SITE_1)
    no_effect = 0
    for seed in range(40):
        model, data = _setup(100 + seed, windows=64, batch=32, ensemble=4)  # any target: the site changes nothing
        g = torch.Generator().manual_seed(seed)
        result = dt.assess(model, data, _noisy(squared_gap, g), progress=False, seed=seed)
        row = result.row("drop1->ln1 alone")
        assert row["all"]["se"] > 0  # the noise makes d_u vary: not the degenerate SE = 0 path
        no_effect += row["verdict"] == "no effect"
    assert no_effect >= 38, no_effect


def test_the_t_tail_and_holm_against_hand_values():
    """Tabulated Student t values and a Holm family worked by hand."""
    from dropmc.assess.stats import holm, t_quantile, t_two_sided

    assert math.isclose(t_two_sided(2.0, 10), 0.073388, rel_tol=1e-4)  # tables: P(|T_10| > 2) = 0.07339
    assert math.isclose(t_two_sided(12.706, 1), 0.05, rel_tol=1e-4)  # t_{0.975, 1} = 12.706
    assert math.isclose(t_quantile(0.975, 5), 2.5706, rel_tol=1e-4)
    assert math.isclose(t_quantile(0.8, 30), 0.8538, rel_tol=1e-3)
    # deep tail, many df: the normal's two-sided 1e-10 point, z = 6.4670
    assert math.isclose(t_two_sided(6.4670, 1e9), 1e-10, rel_tol=1e-3)
    # p = (0.01, 0.04, 0.03, 0.5), α = 0.05: 0.01 ≤ 0.05/4 rejected; 0.03 > 0.05/3 stops.
    # adjusted: 4·0.01, max(0.04, 3·0.03), max(0.09, 2·0.04), max(0.09, 0.5)
    got = holm([0.01, 0.04, 0.03, 0.5], 0.05)
    want = [(True, 0.04), (False, 0.09), (False, 0.09), (False, 0.5)]
    assert [r for r, _ in got] == [r for r, _ in want]
    assert all(math.isclose(a, b, rel_tol=1e-12) for (_, a), (_, b) in zip(got, want))


#: Level of the null-metric check: a user's usual α, so that false alarms
#: occur and the count can be compared with it (at the suite's 1e-10 none would).
NULL_ALPHA = 0.1


def _binomial_upper(runs: int, rate: float, level: float) -> int:
    """The smallest ``c`` with ``P(Bin(runs, rate) > c) ≤ level``: more
    than ``c`` false alarms in ``runs`` rejects "the rate is at most ``rate``"."""
    tail, c = 1.0, -1
    while tail > level:
        c += 1
        tail -= math.comb(runs, c) * rate ** c * (1 - rate) ** (runs - c)
    return c


def _false_alarms(runs: int):
    """Runs with a metric the variant cannot change (the target's values
    with fresh noise per call): how many give any "better"/"worse" verdict
    on all units, and how many recommend a site."""
    model, data = _setup(7, windows=16, ensemble=4)  # the null metric reads the target only
    g = torch.Generator().manual_seed(2024)

    def null(output, target):
        return target.double().square().mean(dim=(1, 2)) + torch.randn(target.shape[0], generator=g,
                                                                        dtype=torch.float64)

    alarms = recommended = 0
    for seed in range(runs):
        result = dt.assess(model, data, null, alpha=NULL_ALPHA, progress=False, seed=seed)
        alarms += any(r["verdict"] != "no effect" for r in result.rows)
        recommended += bool(result.recommended)
    return alarms, recommended


def test_false_alarms_under_a_null_metric_stay_at_the_level():
    """40 runs (200 with DROPMC_ASSESS_NULL_RUNS=200): the family's false
    alarms are Bin(runs, ≤ α); the count may exceed its binomial upper
    bound at the suite's critical level only by chance of 1e-10."""
    runs = int(os.environ.get("DROPMC_ASSESS_NULL_RUNS", "40"))
    alarms, recommended = _false_alarms(runs)
    level = math.erfc(dropmc.critical_z() / math.sqrt(2))
    bound = _binomial_upper(runs, NULL_ALPHA, level)
    print(f"null metric: {alarms}/{runs} runs with a false verdict, {recommended} recommending a site "
          f"(α = {NULL_ALPHA}, bound {bound})")
    assert alarms <= bound, (alarms, runs, bound)
    assert recommended <= bound, (recommended, runs, bound)


def test_bad_input_is_a_value_error_naming_the_argument():
    model, data = _setup(3, windows=8, batch=4)
    per_window = squared_gap
    cases = [
        (data, lambda o, t: per_window(o, t).mean(), "metric"),  # a scalar
        (data, lambda o, t: per_window(o, t)[:-1], "metric"),  # wrong length
        (data, lambda o, t: per_window(o, t) * float("nan"), "metric"),  # NaN
        ([], per_window, "data"),  # empty
        ([data[0][0]], per_window, "data"),  # not (inputs, target) pairs
        ([(data[0][0][:3], data[0][1][:3])], per_window, "data"),  # 3 units < MIN_UNITS
    ]
    assert MIN_UNITS == 4
    for batches, metric, name in cases:
        with pytest.raises(ValueError, match=name):
            dt.assess(model, batches, metric, progress=False)
        assert getattr(model, "_dropmc_correction", None) is None
    for kwargs, name in (({"alpha": 0.0}, "alpha"), ({"alpha": 1.5}, "alpha"), ({"time_budget": -1}, "time_budget"),
                         ({"seed": -1}, "seed")):
        with pytest.raises(ValueError, match=name):
            dt.assess(model, data, per_window, progress=False, **kwargs)
    for kwargs in ({"scope": "everywhere"}, {"scope": "network", "sites": [SITE_1]}):
        with pytest.raises(ValueError, match="scope"):
            dt.assess(model, data, per_window, progress=False, **kwargs)
    with dt.corrected(model, data[0][0]):
        with pytest.raises(ValueError, match="model is already corrected"):
            dt.assess(model, data, per_window, progress=False)


def test_ctrl_c_leaves_the_model_uncorrected_and_in_its_mode():
    model, data = _setup(4, windows=8, batch=4)
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    calls = [0]

    def interrupted(output, target):
        calls[0] += 1
        if calls[0] == 4:  # the second batch of the first corrected variant
            raise KeyboardInterrupt
        return squared_gap(output, target)

    with pytest.raises(KeyboardInterrupt):
        dt.assess(model, data, interrupted, progress=False)
    assert calls[0] == 4
    assert getattr(model, "_dropmc_correction", None) is None
    assert model.training
    model.eval()
    x = data[0][0]
    plain = _eval(model, x)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    with dt.corrected(model, x):  # correct works again: nothing of the interrupted run is left
        assert not torch.equal(_eval(model, x), plain)
    assert torch.equal(_eval(model, x), plain)


def test_time_budget_caps_the_batches():
    """Each forward sleeps 50 ms: 20 batches × 4 passes need over 4 s, so a
    1 s budget must stop early, yet keep at least the 4 units a test needs."""
    import time

    model, data = _setup(6, windows=40, batch=2, ensemble=4)

    def slow(output, target):
        time.sleep(0.05)
        return squared_gap(output, target)

    result = dt.assess(model, data, slow, progress=False, time_budget=1.0)
    assert 2 <= result.batches < len(data), result.batches
    assert any("time_budget" in n for n in result.notes)
    assert result.units == 2 * result.batches


def test_print_plot_and_json(tmp_path):
    import json

    model, data = _setup(5, windows=16)
    result = dt.assess(model, data, squared_gap, progress=False, time_budget=60)
    text = str(result)
    assert "Holm" in text and "[1] alone" in text and "[1] drop1->ln1" in text and "metric forwards" in text
    assert "nan" not in text.lower()
    json.dumps(result.to_dict(), allow_nan=False)
    pytest.importorskip("matplotlib")
    result.plot(str(tmp_path / "assess.png"))
    assert (tmp_path / "assess.png").stat().st_size > 0
