"""Issue 52's closing tally: hostile inputs to ``dropmc.torch.audit`` (per
site and ``network=True``), ``dropmc.torch.correct`` (network and
``scope="site"``), ``dropmc.torch.assess``, ``dropmc.check_dropout`` /
``dropmc.torch.check_dropout`` and the CLI, each classified.

Acceptable: a ValueError/TypeError (or TimeoutError for a time budget; CLI
exit 2) whose message names the offending argument (one of the case's
``names``), or a result whose text prints no NaN. Not acceptable: any other
exception (IndexError, KeyError, AttributeError, RuntimeError, AssertionError,
OverflowError, ...), a message naming none of ``names``, a hang past the
per-case timeout (``signal.alarm``; the CLI runs under subprocess's timeout),
a NaN printed as a result, a crash.

    PYTHONPATH=python DROPMC_BIN=target/release/dropmc python python/benchmarks/hostile_tally.py

Measured (load 3-4 on 2 cores, 4-5 s a run): main d13d901 + the ImportError fix 112 / 119;
with this branch's fixes (merged with main 3a170e5) 117 / 119;
the two left are the model's own forward rejecting the inputs (torch's RuntimeError, unchanged).
"""

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter

import numpy as np
import torch
import torch.nn as nn

import dropmc
import dropmc.torch as dt

torch.set_num_threads(1)
CASE_SECONDS = 20
CLI_SECONDS = 20
BIN = os.environ.get("DROPMC_BIN", "dropmc")
NAN = re.compile(r"(?<![A-Za-z])nan(?![A-Za-z])", re.IGNORECASE)
CASES = []


class Hang(BaseException):
    pass


REFUSE = set()  # cases whose argument is nonsense: a returned result is not acceptable either


def case(category, names=(), refuse=False):
    def register(fn):
        if refuse:
            REFUSE.add(fn.__name__)
        CASES.append((category, fn.__name__, tuple(names), fn))
        return fn
    return register


def plain(d=8, p=0.1):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(d, d), nn.Dropout(p), nn.LayerNorm(d)).eval()


def x8(*shape):
    torch.manual_seed(1)
    return torch.randn(*(shape or (4, 8)))


def encoder(d=16):
    torch.manual_seed(0)
    return nn.TransformerEncoder(nn.TransformerEncoderLayer(d, 2, 2 * d, dropout=0.1, batch_first=True),
                                 num_layers=1, enable_nested_tensor=False).eval()


S = dict(samples=2_000)

# ---- audit (per site) ----
for label, bad in [("nan", float("nan")), ("inf", float("inf"))]:
    def _f(bad=bad):
        x = x8(); x[0, 0] = bad
        return dt.audit(plain(), x, **S)
    CASES.append(("audit", f"input_{label}", ("inputs", "finite", "nan", "inf"), _f))


@case("audit", ["inputs", "empty", "zero"])
def input_empty():
    return dt.audit(plain(), torch.empty(0, 8), **S)


@case("audit", ["inputs", "complex", "dtype", "real"])
def input_complex():
    return dt.audit(plain(), torch.randn(4, 8, dtype=torch.cfloat), **S)


@case("audit", ["inputs", "dtype", "float", "integer"])
def input_int():
    return dt.audit(plain(), torch.ones(4, 8, dtype=torch.long), **S)


@case("audit", ["inputs", "meta", "device"])
def input_meta():
    return dt.audit(plain().to("meta"), torch.empty(4, 8, device="meta"), **S)


@case("audit", ["inputs", "shape", "forward", "mat1"])
def input_wrong_shape():
    return dt.audit(plain(), torch.randn(4, 5), **S)


@case("audit", ["samples"])
def samples_negative():
    return dt.audit(plain(), x8(), samples=-5)


@case("audit", ["samples"])
def samples_float():
    return dt.audit(plain(), x8(), samples=100.5)


@case("audit", ["samples"])
def samples_2_70():
    return dt.audit(plain(), x8(), samples=2**70)


@case("audit", ["samples", "time_budget"])
def samples_huge_budget():
    return dt.audit(plain(64), torch.randn(4, 64), samples=10**9, time_budget=2)


@case("audit", ["seed"])
def seed_negative():
    return dt.audit(plain(), x8(), seed=-1, **S)


@case("audit", ["seed"])
def seed_float():
    return dt.audit(plain(), x8(), seed=1.5, **S)


@case("audit", ["time_budget"])
def time_budget_negative():
    return dt.audit(plain(), x8(), time_budget=-1, **S)


@case("audit", ["time_budget"])
def time_budget_nan():
    return dt.audit(plain(), x8(), time_budget=float("nan"), **S)


@case("audit", ["time_budget"])
def time_budget_string():
    return dt.audit(plain(), x8(), time_budget="5", **S)


@case("audit", ["dropout", "site", "norm"])
def no_dropout():
    return dt.audit(nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8)).eval(), x8(), **S)


@case("audit", ["dropout", "site", "norm"])
def no_norm():
    return dt.audit(nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.1)).eval(), x8(), **S)


@case("audit", ["p", "dropout"])
def p_zero():
    return dt.audit(plain(p=0.0), x8(), **S)


@case("audit", ["p", "dropout"])
def p_one():
    return dt.audit(plain(p=1.0), x8(), **S)


@case("audit", ["train", "mode"])
def train_mode():
    return dt.audit(plain().train(), x8(), **S)


@case("audit", ["compile", "_orig_mod"])
def compiled():
    return dt.audit(torch.compile(plain()), x8(), **S)


@case("audit", ["correct"])
def already_corrected():
    return dt.audit(dt.correct(plain(), x8()), x8(), **S)


@case("audit", ["token", "inputs"])
def one_token_encoder():
    return dt.audit(encoder(), torch.randn(1, 1, 16), **S)


@case("audit", ["token", "inputs", "constant"])
def constant_tokens_encoder():
    return dt.audit(encoder(), torch.ones(1, 6, 16), **S)


@case("audit", ["inputs", "finite", "nan"])
def nan_encoder():
    x = torch.randn(1, 6, 16); x[0, 2, 3] = float("nan")
    return dt.audit(encoder(), x, **S)


@case("audit", ["tokens"])
def tokens_zero():
    return dt.audit(plain(), x8(), tokens=0, **S)


@case("audit", ["sites", "site 'nope'"])
def sites_unknown():
    return dt.audit(plain(), x8(), sites=["nope"], **S)


@case("audit", ["attention_samples"])
def attention_samples_negative():
    return dt.audit(encoder(), torch.randn(1, 4, 16), attention_samples=-1, **S)


@case("audit", ["samples", "time_budget"])
def samples_1e12_encoder32():
    return dt.audit(encoder(32), torch.randn(1, 8, 32), samples=10**12)


@case("audit", ["samples", "time_budget"])
def samples_1e12_encoder32_budget():
    return dt.audit(encoder(32), torch.randn(1, 8, 32), samples=10**12, time_budget=5)


@case("audit", ["progress"])
def progress_string():
    return dt.audit(plain(), x8(), progress="yes", **S)


@case("audit", ["linear"])
def linear_string():
    return dt.audit(plain(), x8(), linear="yes", **S)


@case("audit", ["inputs", "dtype"])
def input_half():
    return dt.audit(plain().half(), x8().half(), **S)


@case("audit", ["attention"], refuse=True)
def attention_string():
    return dt.audit(encoder(), torch.randn(1, 4, 16), attention="no", **S)


# ---- audit network=True ----
@case("audit_network", ["inputs", "finite", "nan"])
def net_input_nan():
    x = x8(); x[1, 1] = float("nan")
    return dt.audit(plain(), x, network=True, **S)


@case("audit_network", ["forwards"])
def net_forwards_zero():
    return dt.audit(plain(), x8(), network=True, forwards=0, **S)


@case("audit_network", ["forwards"])
def net_forwards_float():
    return dt.audit(plain(), x8(), network=True, forwards=2.5, **S)


@case("audit_network", ["time_budget"])
def net_time_budget_zero():
    return dt.audit(plain(), x8(), network=True, time_budget=0, **S)


@case("audit_network", ["network"])
def net_network_string():
    return dt.audit(plain(), x8(), network="yes", **S)


@case("audit_network", ["dropout", "site"])
def net_no_dropout():
    return dt.audit(nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8)).eval(), x8(), network=True, **S)


@case("audit_network", ["token", "inputs"])
def net_one_token():
    return dt.audit(encoder(), torch.randn(1, 1, 16), network=True, **S)


@case("audit_network", ["inputs"])
def net_no_inputs():
    return dt.audit(plain(), None, network=True, **S)


# ---- correct (network scope, the default) ----
@case("correct", ["inputs", "finite", "nan"])
def correct_input_nan():
    x = x8(); x[0, 0] = float("nan")
    return dt.correct(plain(), x)


@case("correct", ["inputs", "empty"])
def correct_input_empty():
    return dt.correct(plain(), torch.empty(0, 8))


@case("correct", ["inputs", "complex", "real", "dtype"])
def correct_input_complex():
    return dt.correct(plain(), torch.randn(4, 8, dtype=torch.cfloat))


@case("correct", ["order"])
def correct_order_zero():
    return dt.correct(plain(), x8(), order=0)


@case("correct", ["order"])
def correct_order_float():
    return dt.correct(plain(), x8(), order=1.5)


@case("correct", ["scope"])
def correct_scope_bad():
    return dt.correct(plain(), x8(), scope="everything")


@case("correct", ["dropout", "site"])
def correct_no_dropout():
    return dt.correct(nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8)).eval(), x8())


@case("correct", ["p", "dropout"])
def correct_p_one():
    return dt.correct(plain(p=1.0), x8())


@case("correct", ["correct", "already"])
def correct_twice():
    m = dt.correct(plain(), x8())
    return dt.correct(m, x8())


@case("correct", ["compile", "_orig_mod"])
def correct_compiled():
    return dt.correct(torch.compile(plain()), x8())


@case("correct", ["batchnorm", "norms", "inputs"])
def correct_batchnorm_inputs():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.1), nn.BatchNorm1d(8)).eval()
    return dt.correct(m, x8())


@case("correct", ["token", "inputs"])
def correct_one_token():
    return dt.correct(encoder(), torch.randn(1, 1, 16))


@case("correct", ["exclude"])
def correct_exclude_unknown():
    return dt.correct(plain(), x8(), exclude=["nope"])


@case("correct", ["model", "module"])
def correct_not_a_module():
    return dt.correct("model", x8())


@case("correct", ["jit", "script", "correct"])
def correct_then_jit_script():
    return torch.jit.script(dt.correct(plain(), x8()))


@case("correct", ["inputs", "token", "constant"])
def correct_one_constant_token():
    return dt.correct(encoder(), torch.ones(1, 1, 16))


@case("correct", ["inplace"], refuse=True)
def correct_inplace_string():
    return dt.correct(plain(), x8(), inplace="no")


@case("correct", ["linear"], refuse=True)
def correct_linear_string():
    return dt.correct(plain(), x8(), linear="no")


# ---- correct scope="site" ----
@case("correct_site", ["inputs", "finite", "nan"])
def site_input_nan():
    x = x8(); x[0, 0] = float("inf")
    return dt.correct(plain(), x, scope="site")


@case("correct_site", ["sites", "site 'nope'"])
def site_unknown():
    return dt.correct(plain(), x8(), sites=["nope"], scope="site")


@case("correct_site", ["correct", "already"])
def site_twice():
    m = dt.correct(plain(), x8(), scope="site")
    return dt.correct(m, x8(), scope="site")


@case("correct_site", ["token", "inputs"])
def site_constant_tokens():
    return dt.correct(encoder(), torch.ones(1, 5, 16), scope="site")


@case("correct_site", ["train", "mode"])
def site_train_mode():
    return dt.correct(plain().train(), x8(), scope="site")


# ---- assess ----
def data(n=4, bad=None):
    torch.manual_seed(2)
    out = [(torch.randn(8, 8), torch.randn(8, 8)) for _ in range(n)]
    if bad is not None:
        out[0] = (bad, out[0][1])
    return out


def mse(y, t):
    return ((y - t) ** 2).mean(dim=1)


@case("assess", ["data", "empty"])
def assess_empty_data():
    return dt.assess(plain(), [], mse, time_budget=10)


@case("assess", ["metric", "scalar", "per"])
def assess_metric_scalar():
    return dt.assess(plain(), data(), lambda y, t: ((y - t) ** 2).mean(), time_budget=10)


@case("assess", ["metric", "length", "values"])
def assess_metric_wrong_length():
    return dt.assess(plain(), data(), lambda y, t: mse(y, t)[:3], time_budget=10)


@case("assess", ["metric", "finite", "nan"])
def assess_metric_nan():
    return dt.assess(plain(), data(), lambda y, t: mse(y, t) * float("nan"), time_budget=10)


@case("assess", ["alpha"])
def assess_alpha_bad():
    return dt.assess(plain(), data(), mse, alpha=1.5, time_budget=10)


@case("assess", ["time_budget"])
def assess_time_budget_negative():
    return dt.assess(plain(), data(), mse, time_budget=-3)


@case("assess", ["metric", "callable"])
def assess_metric_not_callable():
    return dt.assess(plain(), data(), "mse", time_budget=10)


@case("assess", ["dropout", "site"])
def assess_no_dropout():
    return dt.assess(nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8)).eval(), data(), mse, time_budget=10)


@case("assess", ["inputs", "finite", "nan", "data"])
def assess_nan_input():
    x = torch.randn(8, 8); x[0, 0] = float("nan")
    return dt.assess(plain(), data(bad=x), mse, time_budget=10)


@case("assess", ["train", "mode"])
def assess_train_mode():
    return dt.assess(plain().train(), data(), mse, time_budget=10)


@case("assess", ["data", "batch", "units"])
def assess_one_batch_one_unit():
    return dt.assess(plain(), [(torch.randn(1, 8), torch.randn(1, 8))], mse, time_budget=10)


@case("assess", ["data", "batch", "tuple", "target"])
def assess_data_not_pairs():
    return dt.assess(plain(), [torch.randn(8, 8)], mse, time_budget=10)


@case("assess", ["progress"], refuse=True)
def assess_progress_string():
    return dt.assess(plain(), data(), mse, progress="no", time_budget=10)


@case("assess", ["seed"])
def assess_seed_negative():
    return dt.assess(plain(), data(), mse, seed=-2, time_budget=10)


# ---- check_dropout ----
def fwd(x, training):
    return x


@case("check_dropout", ["p"])
def cd_p_negative():
    return dropmc.check_dropout(fwd, -0.1)


@case("check_dropout", ["p"])
def cd_p_one():
    return dropmc.check_dropout(fwd, 1.0)


@case("check_dropout", ["p"])
def cd_p_nan():
    return dropmc.check_dropout(fwd, float("nan"))


@case("check_dropout", ["samples"])
def cd_samples_negative():
    return dropmc.check_dropout(fwd, 0.1, samples=-1)


@case("check_dropout", ["samples"])
def cd_samples_float():
    return dropmc.check_dropout(fwd, 0.1, samples=1e4)


@case("check_dropout", ["samples"])
def cd_samples_fraction():
    return dropmc.check_dropout(fwd, 0.1, samples=1000.5)


@case("check_dropout", ["seed"])
def cd_seed_negative():
    return dropmc.check_dropout(fwd, 0.1, seed=-1, samples=1000)


@case("check_dropout", ["x"])
def cd_x_nan():
    return dropmc.check_dropout(fwd, 0.1, x=np.array([1.0, float("nan")]), samples=1000)


@case("check_dropout", ["x"])
def cd_x_empty():
    return dropmc.check_dropout(fwd, 0.1, x=np.array([]), samples=1000)


@case("check_dropout", ["forward", "shape"])
def cd_forward_wrong_shape():
    return dropmc.check_dropout(lambda x, t: x[:1], 0.1, samples=1000)


@case("check_dropout", ["forward", "finite", "nan"])
def cd_forward_nan():
    return dropmc.check_dropout(lambda x, t: x * float("nan"), 0.1, samples=1000)


@case("check_dropout", ["p"])
def torch_cd_p_big():
    return dt.check_dropout(nn.Dropout(0.1), 2.0, samples=1000)


@case("check_dropout", ["layer", "module", "callable"])
def torch_cd_not_layer():
    return dt.check_dropout(5, 0.1, samples=1000)


@case("check_dropout", ["device"])
def torch_cd_meta():
    return dt.check_dropout(nn.Dropout(0.1), 0.1, device="meta", samples=1000)


@case("check_dropout", ["samples"])
def torch_cd_samples_2_70():
    return dt.check_dropout(nn.Dropout(0.1), 0.1, samples=2**70)


# ---- CLI ----
TMP = tempfile.mkdtemp(prefix="hostile_tally_")


def capture_file(edit=None):
    path = os.path.join(TMP, "cap.npz")
    if not os.path.exists(path):
        dt.audit(plain(), x8(), samples=1_000).save(path)
    if edit is None:
        return path
    arrays = dict(np.load(path))
    edit(arrays)
    out = os.path.join(TMP, f"edited{len(os.listdir(TMP))}.npz")
    np.savez(out, **arrays)
    return out


def cli(*args, names=()):
    def run():
        argv = [BIN, *[a() if callable(a) else a for a in args]]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=CLI_SECONDS)
        except subprocess.TimeoutExpired:
            raise Hang(f"CLI past {CLI_SECONDS} s")
        return done
    return run


def set_gamma5(a):
    a["site0_gamma"] = a["site0_gamma"][:5]


def set_nan_v(a):
    v = a["site0_v"].copy(); v[0, 0] = np.nan; a["site0_v"] = v


CLI_CASES = [
    ("report_samples_negative", ["report", "--samples", "-3"], ["samples"]),
    ("report_samples_float", ["report", "--samples", "1.5"], ["samples"]),
    ("report_samples_1e12", ["report", "--samples", "1000000000000"], ["samples"]),
    ("report_seed_negative", ["report", "--seed", "-5"], ["seed"]),
    ("report_family_unknown", ["report", "--family", "nope"], ["family"]),
    ("calibrate_seeds_negative", ["calibrate", "--seeds", "-3"], ["seeds"]),
    ("calibrate_seeds_zero", ["calibrate", "--seeds", "0"], ["seeds"]),
    ("calibrate_subject_unknown", ["calibrate", "--seeds", "2", "--subject", "nope"], ["subject"]),
    ("audit_missing_file", ["audit", "--activations", "/nonexistent.npz"], ["activations", "nonexistent"]),
    ("audit_seed_negative", ["audit", "--activations", capture_file, "--seed", "-5"], ["seed"]),
    ("audit_samples_zero", ["audit", "--activations", capture_file, "--samples", "0"], ["samples"]),
    ("audit_gamma5", ["audit", "--activations", lambda: capture_file(set_gamma5)], ["gamma"]),
    ("audit_nan_v", ["audit", "--activations", lambda: capture_file(set_nan_v)], ["site0_v", " v "]),
    ("eval_p_one", ["eval", "moments", "--x", "1,2", "--p", "1"], ["p"]),
    ("eval_p_negative", ["eval", "ln", "--x", "1,2,3", "--p=-0.1"], ["p"]),
    ("eval_x_nan", ["eval", "ln", "--x", "1,nan,3", "--p", "0.1"], ["x"]),
    ("eval_x_empty", ["eval", "ln", "--x", "", "--p", "0.1"], ["x"]),
    ("eval_gamma_length", ["eval", "ln", "--x", "1,2,3", "--p", "0.1", "--gamma", "1,2"], ["gamma"]),
    ("eval_eps_negative", ["eval", "ln", "--x", "1,2,3", "--p", "0.1", "--eps=-1"], ["eps"]),
    ("eval_constant_x", ["eval", "ln", "--x", "2,2,2", "--p", "0.1", "--samples", "1000"], ["x"]),
    ("calibrate_samples_zero", ["calibrate", "--seeds", "2", "--samples", "0"], ["samples"]),
    ("eval_bn_negative_var", ["eval", "bn", "--running-mean", "0,1", "--running-var", "1,-2", "--p", "0.1"],
     ["running_var", "running-var", "var"]),
    ("eval_bn_length", ["eval", "bn", "--running-mean", "0,1,2", "--running-var", "1,2", "--p", "0.1"],
     ["running_var", "running-var", "running_mean", "running-mean"]),
    ("eval_one_unit", ["eval", "ln", "--x", "2", "--p", "0.1", "--samples", "1000"], ["x", "d = 1"]),
]
for name, argv, names in CLI_CASES:
    CASES.append(("cli", name, tuple(names), cli(*argv)))


def _names(text, names):
    low = text.lower()
    return any(n.lower() in low for n in names)


def classify(names, fn, refuse=False):
    """(acceptable, one-line note); ``refuse``: a returned result is not
    acceptable (the case's argument has no meaning)."""
    def alarm(signum, frame):
        raise Hang(f"past {CASE_SECONDS} s")
    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(CASE_SECONDS)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = fn()
    except Hang as e:
        return False, f"hang: {e}"
    except (ValueError, TypeError, TimeoutError) as e:
        msg = f"{type(e).__name__}: {str(e).splitlines()[0][:150] if str(e) else ''}"
        return _names(str(e), names), msg
    except BaseException as e:  # noqa: BLE001 -- every other exception is the finding
        return False, f"{type(e).__name__}: {str(e).splitlines()[0][:150] if str(e) else ''}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    if isinstance(out, subprocess.CompletedProcess):
        err = (out.stderr.strip().splitlines() or [""])[-1][:150]
        if out.returncode == 2:
            return _names(out.stderr, names), f"exit 2: {err}"
        if out.returncode < 0 or out.returncode > 3:
            return False, f"crash exit {out.returncode}: {err}"
        if NAN.search(out.stdout):
            return False, f"exit {out.returncode}, NaN printed"
        return True, f"exit {out.returncode} (ran){': ' + err if err else ''}"
    if refuse:
        return False, f"accepted: returned {type(out).__name__}"
    text = str(out)
    if NAN.search(text):
        return False, "result prints NaN"
    return True, f"result {type(out).__name__}"


def main():
    start = time.time()
    tally = Counter(); good = Counter(); bad = []
    only = sys.argv[1:]
    for category, name, names, fn in CASES:
        if only and name not in only:
            continue
        t = time.time()
        ok, note = classify(names, fn, name in REFUSE)
        tally[category] += 1; good[category] += ok
        if not ok:
            bad.append(f"{category}/{name}")
        print(f"{'OK ' if ok else 'BAD'} {category:14s} {name:28s} {time.time() - t:5.1f}s  {note}", flush=True)
    print()
    for c in tally:
        print(f"{c:14s} {good[c]:3d} / {tally[c]:3d} acceptable")
    print(f"{'total':14s} {sum(good.values()):3d} / {sum(tally.values()):3d} acceptable "
          f"({time.time() - start:.0f} s)")
    print("not acceptable:", ", ".join(bad) or "none")


if __name__ == "__main__":
    main()
