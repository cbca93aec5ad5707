"""alphafold3-pytorch's model module, imported alone, and small random-weight
builders of its ``PairformerStack`` and ``MSAModule`` (issues 49, 50).

The package's ``__init__`` imports its whole data pipeline (rdkit, gemmi,
polars, pdbeccdutils, fair-esm, lightning …), none of which the trunk's
modules use. :func:`load` imports only ``alphafold3_pytorch.alphafold3``:
an empty ``alphafold3_pytorch`` package whose ``__path__`` is the installed
folder (its ``__init__`` not run), and placeholder modules for the four
data-pipeline modules the model module imports names from
(``inputs``, ``common.biomolecule``, ``nlm``, ``plm``): each name they are
asked for is a :class:`_Placeholder`, used by the model module only as
default arguments of classes the builders below do not build (``Alphafold3``,
``InputFeatureEmbedder`` …), as decorators of their methods (the identity
here) and in type annotations that are never evaluated (``TYPECHECK`` is
off by default).

What it needs, each installed with ``pip install --no-deps`` (all from
PyPI, pure Python but biopython): ``alphafold3-pytorch`` 0.8.3, beartype,
jaxtyping, wadler-lindig, einx, frozendict, einops, environs, marshmallow,
python-dotenv, loguru, sh, frame-averaging-pytorch,
taylor-series-linear-attention, rotary-embedding-torch, colt5-attention,
local-attention, hyper-connections, torch-einops-utils and biopython (a
3 MB wheel: ``tensor_typing`` and the model module import ``Bio.PDB``
classes for type aliases); sympy, packaging, numpy, tqdm and
huggingface-hub come with torch and transformers. :func:`load` returns
None when any of it is missing (the tests skip).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types

import torch

#: The data-pipeline modules the model module imports names from (module docs).
_PIPELINE = ("inputs", "common.biomolecule", "nlm", "plm")
_MODULE = None


class _Placeholder:
    """A name of a data-pipeline module the trunk never uses (module docs)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<alphafold3_pytorch data-pipeline placeholder {self.name}>"

    def __call__(self, *args, **kwargs):
        """As a decorator (``@remove_nlms`` on ``Alphafold3``'s methods) the
        identity; any other call is the data pipeline's: not here."""
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        raise RuntimeError(f"{self.name} belongs to alphafold3-pytorch's data pipeline, not loaded here")


class _PipelineStub(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder(f"{self.__name__}.{name}")


def load():
    """``alphafold3_pytorch.alphafold3`` (module docs), or None when the
    package or one of its model module's imports is missing."""
    global _MODULE
    if _MODULE is not None:
        return _MODULE
    spec = importlib.util.find_spec("alphafold3_pytorch")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = list(spec.submodule_search_locations)[0]
    if "alphafold3_pytorch" not in sys.modules:
        package = types.ModuleType("alphafold3_pytorch")
        package.__path__ = [root]
        package.__spec__ = spec
        sys.modules["alphafold3_pytorch"] = package
        common = types.ModuleType("alphafold3_pytorch.common")
        common.__path__ = [f"{root}/common"]
        sys.modules["alphafold3_pytorch.common"] = common
        for name in _PIPELINE:
            sys.modules[f"alphafold3_pytorch.{name}"] = _PipelineStub(f"alphafold3_pytorch.{name}")
    try:
        from loguru import logger

        logger.disable("alphafold3_pytorch")  # its import logs "Type checking is disabled."
        _MODULE = importlib.import_module("alphafold3_pytorch.alphafold3")
    except ImportError:
        return None
    return _MODULE


def build_pairformer(blocks=2, d_single=16, d_pair=16, p=0.25, seed=0):
    """A ``PairformerStack`` of ``blocks`` blocks, row/column dropout ``p``
    (its pair-bias attention's dropout too), small dims: pair width
    ``d_pair`` (triangle attention 2 heads of 8), single width ``d_single``
    (pair-bias attention 2 heads of 8)."""
    af3 = load()
    torch.manual_seed(seed)
    return af3.PairformerStack(dim_single=d_single, dim_pairwise=d_pair, depth=blocks, pair_bias_attn_dim_head=8,
                               pair_bias_attn_heads=2, dropout_row_prob=p,
                               pairwise_block_kwargs=dict(tri_attn_dim_head=8, tri_attn_heads=2,
                                                          dropout_row_prob=p, dropout_col_prob=p))


def pairformer_inputs(n=6, d_single=16, d_pair=16, seed=1, dtype=torch.float32):
    """Keyword inputs of :func:`build_pairformer`: one complex of ``n``
    tokens, unit-normal single and pair states."""
    g = torch.Generator().manual_seed(seed)
    return {"single_repr": torch.randn(1, n, d_single, generator=g, dtype=dtype),
            "pairwise_repr": torch.randn(1, n, n, d_pair, generator=g, dtype=dtype)}


def build_msa_module(d_single=16, d_pair=16, d_msa=16, p=0.25, seed=0):
    """An ``MSAModule`` of one layer: outer product mean, pair-weighted
    averaging (row dropout ``p``), MSA transition and one pairwise block
    (row/column dropout ``p``); no layer scale (its zero init would hide
    the output)."""
    af3 = load()
    torch.manual_seed(seed)
    return af3.MSAModule(dim_single=d_single, dim_pairwise=d_pair, depth=1, dim_msa=d_msa, dim_msa_input=4,
                         dim_additional_msa_feats=0, outer_product_mean_dim_hidden=4, msa_pwa_dropout_row_prob=p,
                         msa_pwa_heads=2, msa_pwa_dim_head=8, layerscale_output=False,
                         pairwise_block_kwargs=dict(tri_attn_dim_head=8, tri_attn_heads=2, dropout_row_prob=p,
                                                    dropout_col_prob=p))


def msa_inputs(n=5, s=3, d_single=16, d_pair=16, seed=1, dtype=torch.float32):
    """Keyword inputs of :func:`build_msa_module`: ``s`` sequences of ``n``
    tokens, 4 input features each."""
    g = torch.Generator().manual_seed(seed)
    return {"single_repr": torch.randn(1, n, d_single, generator=g, dtype=dtype),
            "pairwise_repr": torch.randn(1, n, n, d_pair, generator=g, dtype=dtype),
            "msa": torch.randn(1, s, n, 4, generator=g, dtype=dtype)}
