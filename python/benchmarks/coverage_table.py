"""Coverage of dropmc.torch.audit per architecture (issue 40's closing
note): dropout calls / audited / listed (reasons) / missed, before (the
`main` branch's Python package) and after (this checkout), and the wall
time of each whole audit. A call is audited when a norm site, an
attention site or a linear-path row of it has numbers.

The number of dropout calls is this checkout's data-flow count (every
F.dropout call, SDPA call with dropout_p > 0, nn.MultiheadAttention, mask
product) on the same forward; "before" counts a call audited when one of
its sites or its attention site has numbers, listed when it is a row of
`other_sites`, missed otherwise (or the error when the audit raised).

Models: small configs, random weights (transformers; no download), two
sequences of 8 tokens (the second with 3 padded) or the modality's small
input; one torch thread; samples = 1024, attention_samples = 256.

    python python/benchmarks/coverage_table.py [--main /work/main] [--ref COMMIT] [arch ... | issue50]

``issue50``: the architectures of issue 50 (:data:`ISSUE50`), eager and
SDPA where the model has both (``gpt2/sdpa``); their column "linear-path
rows" counts the rows of ``audit.linear_sites`` (attention → output
projection → norm paths among them).

Measured (``--ref 172d877 issue50``, load 11-12 on 2 cores): every call of
the 12 models audited or listed, 0 missed, before and after; the
linear-path rows before → after: gpt2 eager 0 → 2, sdpa 0 → 2; modernbert
eager 4 → 4, sdpa 2 → 4; olmo2 eager 2 → 2, sdpa 0 → 2; gpt-neox,
convnext, beit, sew-d 0 → 0 (GPT-NeoX's parallel residual: a sum of three
terms, which the linear-path tracer does not read).

Measured (``beit/eager beit/sdpa swin``, before = main a6ba837, load 2-4):
the dropouts under drop-path's mask audited — beit 6 / 3 → 7 / 2 (eager and
sdpa; the 2 left reach only the pooler's norm through a mean over tokens,
"through mean", where one read "through mul" before), swin 12 / 4 → 15 / 1.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import torch

torch.set_num_threads(1)
D, LAYERS, HEADS, P = 32, 2, 4, 0.1


def _text(batch=2, length=8):
    g = torch.Generator().manual_seed(1)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[-1, length - 3:] = 0
    return {"input_ids": torch.randint(4, 90, (batch, length), generator=g), "attention_mask": mask}


def _hf_models():
    """The test suite's model builders (python/tests/hf_models.py)."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
    import hf_models

    return hf_models


def model(arch):
    """``(model, inputs)`` of one architecture."""
    import transformers as T

    torch.manual_seed(0)
    common = dict(vocab_size=100, max_position_embeddings=64)
    bert = dict(hidden_size=D, num_hidden_layers=LAYERS, num_attention_heads=HEADS, intermediate_size=2 * D,
                hidden_dropout_prob=P, attention_probs_dropout_prob=P, **common)
    text = _text()
    if arch in ("roberta", "electra", "xlm-r", "mpnet", "deberta-v2"):
        cfg, cls = {"roberta": (T.RobertaConfig, T.RobertaModel), "electra": (T.ElectraConfig, T.ElectraModel),
                    "xlm-r": (T.XLMRobertaConfig, T.XLMRobertaModel), "mpnet": (T.MPNetConfig, T.MPNetModel),
                    "deberta-v2": (T.DebertaV2Config, T.DebertaV2Model)}[arch]
        extra = {"embedding_size": D} if arch == "electra" else {}
        c = cfg(**bert, **extra, pad_token_id=1)
    elif arch == "albert":
        c, cls = T.AlbertConfig(embedding_size=16, **bert), T.AlbertModel
    elif arch == "distilbert":
        c = T.DistilBertConfig(dim=D, n_layers=LAYERS, n_heads=HEADS, hidden_dim=2 * D, dropout=P,
                               attention_dropout=P, **common)
        cls = T.DistilBertModel
    elif arch == "bart":
        c = T.BartConfig(d_model=D, encoder_layers=LAYERS, decoder_layers=LAYERS, encoder_attention_heads=HEADS,
                         decoder_attention_heads=HEADS, encoder_ffn_dim=2 * D, decoder_ffn_dim=2 * D, dropout=P,
                         attention_dropout=P, activation_dropout=P, **common)
        cls = T.BartModel
        text = dict(text, decoder_input_ids=text["input_ids"].flip(1))
    elif arch in ("opt", "bloom"):
        return _hf_models().build40(arch, d=D, layers=LAYERS, heads=HEADS, p=P), text
    elif arch == "gpt-neo":
        c = T.GPTNeoConfig(hidden_size=D, num_layers=LAYERS, num_heads=HEADS, attention_types=[[["global"], LAYERS]],
                           embed_dropout=P, attention_dropout=P, resid_dropout=P, **common)
        cls = T.GPTNeoModel
    elif arch == "falcon":
        c = T.FalconConfig(hidden_size=D, num_hidden_layers=LAYERS, num_attention_heads=HEADS, vocab_size=100,
                           hidden_dropout=P, attention_dropout=P, new_decoder_architecture=False)
        cls = T.FalconModel
    elif arch in ("mistral", "qwen2"):
        cfg, cls = (T.MistralConfig, T.MistralModel) if arch == "mistral" else (T.Qwen2Config, T.Qwen2Model)
        c = cfg(hidden_size=D, intermediate_size=2 * D, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                num_key_value_heads=2, attention_dropout=P, **common)
    elif arch == "whisper":
        c = T.WhisperConfig(d_model=D, encoder_layers=LAYERS, decoder_layers=LAYERS, encoder_attention_heads=HEADS,
                            decoder_attention_heads=HEADS, encoder_ffn_dim=2 * D, decoder_ffn_dim=2 * D, num_mel_bins=8,
                            max_source_positions=8, max_target_positions=16, vocab_size=100, dropout=P,
                            attention_dropout=P, activation_dropout=P, pad_token_id=0, bos_token_id=1,
                            eos_token_id=2, decoder_start_token_id=1)
        cls = T.WhisperModel
        text = {"input_features": torch.randn(2, 8, 16, generator=torch.Generator().manual_seed(1)),
                "decoder_input_ids": text["input_ids"]}
    elif arch == "wav2vec2":
        audio = {"input_values": torch.randn(2, 400, generator=torch.Generator().manual_seed(1))}
        return _hf_models().build40("wav2vec2", d=D, layers=LAYERS, heads=HEADS, p=P), audio
    elif arch in ("clip-text", "clip-vision"):
        if arch == "clip-text":
            c = T.CLIPTextConfig(hidden_size=D, intermediate_size=2 * D, num_hidden_layers=LAYERS,
                                 num_attention_heads=HEADS, attention_dropout=P, **common)
            cls = T.CLIPTextModel
        else:
            c = T.CLIPVisionConfig(hidden_size=D, intermediate_size=2 * D, num_hidden_layers=LAYERS,
                                   num_attention_heads=HEADS, image_size=16, patch_size=4, attention_dropout=P)
            cls = T.CLIPVisionModel
            text = {"pixel_values": torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1))}
    elif arch == "swin":
        c = T.SwinConfig(image_size=16, patch_size=2, embed_dim=16, depths=[2, 2], num_heads=[2, 2], window_size=2,
                         hidden_dropout_prob=P, attention_probs_dropout_prob=P, drop_path_rate=P)
        cls = T.SwinModel
        text = {"pixel_values": torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1))}
    elif arch == "esmfold":
        ids = torch.randint(0, 20, (1, 12), generator=torch.Generator().manual_seed(3))
        return _hf_models().build_esmfold(), {"input_ids": ids}
    elif arch.split("/")[0] in ISSUE50:
        return _issue50(*arch.split("/")), issue50_inputs(arch.split("/")[0])
    else:
        raise ValueError(arch)
    c._attn_implementation = "eager"
    return cls(c), text


#: Issue 50's architectures, ``name/impl`` (``eager``, or ``sdpa`` where the
#: model has it): parallel residual, Conv1D, SDPA, channels-first, layer
#: scale, a custom autograd dropout.
ISSUE50 = {"gpt2": ("eager", "sdpa"), "modernbert": ("eager", "sdpa"), "olmo2": ("eager", "sdpa"),
           "gpt-neox": ("eager", "sdpa"), "convnext": ("eager",), "beit": ("eager", "sdpa"), "sew-d": ("eager",)}


def _issue50(name, impl="eager"):
    """A model of :data:`ISSUE50` (its inputs are :func:`issue50_inputs`)."""
    import transformers as T

    torch.manual_seed(0)
    if name == "gpt2":
        c = T.GPT2Config(n_embd=D, n_layer=LAYERS, n_head=HEADS, vocab_size=100, n_positions=64, resid_pdrop=P,
                         embd_pdrop=P, attn_pdrop=P, bos_token_id=0, eos_token_id=0)
        cls = T.GPT2Model
    elif name == "modernbert":
        c = T.ModernBertConfig(vocab_size=100, hidden_size=D, intermediate_size=2 * D, num_hidden_layers=LAYERS,
                               num_attention_heads=HEADS, attention_dropout=P, embedding_dropout=P, mlp_dropout=P,
                               pad_token_id=0, eos_token_id=1, bos_token_id=2, cls_token_id=2, sep_token_id=1)
        cls = T.ModernBertModel
    elif name == "olmo2":
        c = T.Olmo2Config(vocab_size=100, hidden_size=D, intermediate_size=2 * D, num_hidden_layers=LAYERS,
                          num_attention_heads=HEADS, num_key_value_heads=2, attention_dropout=P, pad_token_id=0)
        cls = T.Olmo2Model
    elif name == "gpt-neox":
        c = T.GPTNeoXConfig(vocab_size=100, hidden_size=D, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                            intermediate_size=2 * D, hidden_dropout=P, attention_dropout=P, use_parallel_residual=True)
        cls = T.GPTNeoXModel
    elif name == "convnext":
        c = T.ConvNextConfig(num_channels=3, num_stages=2, hidden_sizes=[8, 16], depths=[2, 2], drop_path_rate=P,
                             image_size=32)
        cls = T.ConvNextModel
    elif name == "beit":
        c = T.BeitConfig(hidden_size=D, num_hidden_layers=LAYERS, num_attention_heads=HEADS, intermediate_size=2 * D,
                         image_size=32, patch_size=8, hidden_dropout_prob=P, attention_probs_dropout_prob=P,
                         layer_scale_init_value=0.1, use_mask_token=False, drop_path_rate=P)
        cls = T.BeitModel
    else:
        c = T.SEWDConfig(hidden_size=D, num_hidden_layers=LAYERS, num_attention_heads=HEADS, intermediate_size=2 * D,
                         conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
                         num_conv_pos_embedding_groups=4, squeeze_factor=1, hidden_dropout=P, attention_dropout=P,
                         activation_dropout=P, feat_proj_dropout=P, final_dropout=P, mask_time_prob=0.0)
        cls = T.SEWDModel
    c._attn_implementation = impl
    return cls(c)


def issue50_inputs(name):
    g = torch.Generator().manual_seed(1)
    if name in ("convnext", "beit"):
        return {"pixel_values": torch.randn(2, 3, 32, 32, generator=g)}
    if name == "sew-d":
        return {"input_values": torch.randn(2, 400, generator=g)}
    return _text()


ISSUE50_ARCHS = [f"{n}/{impl}" for n, impls in ISSUE50.items() for impl in impls]
ARCHS = ["roberta", "distilbert", "albert", "electra", "xlm-r", "mpnet", "deberta-v2", "bart", "opt", "bloom",
         "gpt-neo", "falcon", "whisper", "wav2vec2", "clip-text", "clip-vision", "swin", "mistral", "qwen2",
         "esmfold"]


def row(arch):
    """One architecture audited by the importable dropmc (this checkout, or
    main's package when run by :func:`before`)."""
    import dropmc.audit as A

    m, kw = model(arch)
    t = time.perf_counter()
    try:
        audit = A.audit_torch(m, kw, samples=1024, attention_samples=256)
    except Exception as e:  # the "before" package raises on some models
        return {"error": f"{type(e).__name__}: {str(e)[:80]}", "seconds": time.perf_counter() - t}
    seconds = time.perf_counter() - t
    audited = {s["name"].split("->")[0] for s in audit.sites} | {a["name"] for a in audit.attention_sites}
    listed = {}
    for o in audit.other_sites:
        call = o["name"].split("->")[0]
        if call not in audited:
            listed[call] = o.get("kind", o["form"])
    linear = sorted(r["name"] for r in getattr(audit, "linear_sites", []) or [])
    audited |= {r["dropout"] for r in getattr(audit, "linear_sites", []) or []}  # a linear-path row's call
    return {"audited": sorted(audited), "listed": listed, "seconds": seconds, "linear": linear,
            "coverage": getattr(audit, "coverage", None)}


def before(arch, main, ref="HEAD"):
    """:func:`row` with the Python package of commit ``ref`` of the
    repository ``main`` (its files beside this checkout's compiled engine)
    in a subprocess."""
    import dropmc

    tmp = tempfile.mkdtemp()
    files = subprocess.run(["git", "-C", main, "ls-tree", "-r", "--name-only", ref, "python/dropmc"],
                           capture_output=True, text=True, check=True).stdout.split()
    for f in files:
        target = os.path.join(tmp, os.path.relpath(f, "python"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as out:
            out.write(subprocess.run(["git", "-C", main, "show", f"{ref}:{f}"], capture_output=True,
                                     check=True).stdout)
    here = os.path.dirname(dropmc.__file__)
    for f in os.listdir(here):
        if f.startswith("_dropmc") and f.endswith(".so"):
            shutil.copy(os.path.join(here, f), os.path.join(tmp, "dropmc"))
    env = dict(os.environ, PYTHONPATH=tmp + os.pathsep + os.path.dirname(__file__))
    code = f"import json, coverage_table as c; print(json.dumps(c.row({arch!r})))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp)
    shutil.rmtree(tmp)
    if out.returncode:
        return {"error": out.stderr.strip().split("\n")[-1][:80], "seconds": float("nan")}
    return json.loads(out.stdout.strip().split("\n")[-1])


def _cell(r, calls):
    if "error" in r:
        return f"raised ({r['error']})", ""
    kinds = {}
    for k in r["listed"].values():
        kinds[k] = kinds.get(k, 0) + 1
    missed = len(calls - set(r["audited"]) - set(r["listed"]))
    reasons = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
    return f"{len(r['audited'])} / {len(r['listed'])} / {missed}", reasons


def main():
    args = sys.argv[1:]
    main_dir, ref = "/work/main", "HEAD"
    while args[:1] in (["--main"], ["--ref"]):
        if args[0] == "--main":
            main_dir = args[1]
        else:
            ref = args[1]
        args = args[2:]
    if args == ["issue50"]:
        args = ISSUE50_ARCHS
    from dropmc.model.discovery import discover

    print("| arch | dropout calls | before: audited / listed / missed | linear-path rows before | before s | after: "
          "audited / listed / missed | linear-path rows after | after reasons | after s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for arch in args or ARCHS:
        try:
            m, kw = model(arch)
        except Exception as e:  # a config this transformers does not take
            print(f"| {arch} | not built: {type(e).__name__}: {str(e)[:60]} | | | | | | | |", flush=True)
            continue
        found = discover(m, **kw)
        calls = set(found.dropouts) | {a.call for a in found.attention}
        b, a = before(arch, main_dir, ref), row(arch)
        bc, _ = _cell(b, calls)
        ac, reasons = _cell(a, calls)
        print(f"| {arch} | {len(calls)} | {bc} | {len(b.get('linear', []))} | {b['seconds']:.1f} | {ac} | "
              f"{len(a.get('linear', []))} | {reasons} | {a['seconds']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
