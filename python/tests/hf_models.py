"""Small Hugging Face models built from configs with random weights (no
downloads) and, per architecture, the sites their modeling source
(transformers 5.x) says they have — written by hand from that source, not
from dropmc's discovery.
"""

import torch

P = 0.1  # every dropout rate of the test models


def build(arch, impl="eager", layers=2, d=64, heads=4, p=P, seed=0, positions=64):
    import transformers as T

    torch.manual_seed(seed)
    if arch == "bert":
        c = T.BertConfig(hidden_size=d, num_hidden_layers=layers, num_attention_heads=heads,
                         intermediate_size=2 * d, vocab_size=100, max_position_embeddings=positions,
                         hidden_dropout_prob=p, attention_probs_dropout_prob=p)
        cls = T.BertModel
    elif arch == "gpt2":
        c = T.GPT2Config(n_embd=d, n_layer=layers, n_head=heads, vocab_size=100, n_positions=positions,
                         resid_pdrop=p, embd_pdrop=p, attn_pdrop=p, bos_token_id=0, eos_token_id=0)
        cls = T.GPT2Model
    elif arch == "esm":
        c = T.EsmConfig(hidden_size=d, num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=2 * d, vocab_size=33, max_position_embeddings=64,
                        hidden_dropout_prob=p, attention_probs_dropout_prob=p, pad_token_id=1,
                        position_embedding_type="rotary")
        cls = T.EsmModel
    elif arch == "vit":
        c = T.ViTConfig(hidden_size=d, num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=2 * d, image_size=16, patch_size=4, hidden_dropout_prob=p,
                        attention_probs_dropout_prob=p)
        cls = T.ViTModel
    elif arch == "t5":
        c = T.T5Config(d_model=d, d_kv=d // heads, d_ff=2 * d, num_layers=layers, num_heads=heads,
                       vocab_size=100, dropout_rate=p)
        cls = T.T5EncoderModel
    elif arch == "llama":
        c = T.LlamaConfig(hidden_size=d, intermediate_size=2 * d, num_hidden_layers=layers,
                          num_attention_heads=heads, num_key_value_heads=heads // 2, vocab_size=100,
                          max_position_embeddings=positions, attention_dropout=p)
        cls = T.LlamaModel
    else:
        raise ValueError(arch)
    c._attn_implementation = impl
    return cls(c)


def inputs(arch, batch=2, length=8, pad=True):
    """Keyword inputs; with ``pad`` the second sequence's last 3 tokens are
    padding (attention_mask 0)."""
    g = torch.Generator().manual_seed(1)
    if arch == "vit":
        return {"pixel_values": torch.randn(batch, 3, 16, 16, generator=g)}
    ids = torch.randint(4, 30, (batch, length), generator=g)
    mask = torch.ones(batch, length, dtype=torch.long)
    if pad:
        mask[-1, length - 3:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def expected_sites(arch, layers=2):
    """``{(dropout_call, norm_call): form}`` from the modeling source."""
    s = {}
    if arch == "bert":  # post-LN: LayerNorm(dropout(dense(x)) + input_tensor) twice per layer
        for i in range(layers):
            s[(f"encoder.layer.{i}.attention.output.dropout",
               f"encoder.layer.{i}.attention.output.LayerNorm")] = "bypass"
            s[(f"encoder.layer.{i}.output.dropout", f"encoder.layer.{i}.output.LayerNorm")] = "bypass"
        # the embeddings' dropout is the first residual, and the attention's input too
        s[("embeddings.dropout", "encoder.layer.0.attention.output.LayerNorm")] = "entangled"
    elif arch == "gpt2":  # pre-LN; drop(embeddings) is the first residual
        s[("drop", "h.0.ln_1")] = "plain"
        s[("drop", "h.0.ln_2")] = "entangled"
        for i in range(layers):
            s[(f"h.{i}.attn.resid_dropout", f"h.{i}.ln_2")] = "bypass"
            s[(f"h.{i}.mlp.dropout", f"h.{i + 1}.ln_1" if i + 1 < layers else "ln_f")] = "bypass"
    elif arch == "esm":  # pre-LN; the embeddings' dropout is commented out in the source
        for i in range(layers):
            s[(f"encoder.layer.{i}.attention.output.dropout", f"encoder.layer.{i}.LayerNorm")] = "bypass"
            nxt = f"encoder.layer.{i + 1}.attention.LayerNorm" if i + 1 < layers else "encoder.emb_layer_norm_after"
            s[(f"encoder.layer.{i}.output.dropout", nxt)] = "bypass"
    elif arch == "vit":  # pre-LN; one nn.Dropout per layer, called after attention and after the MLP
        s[("embeddings.dropout", "layers.0.layernorm_before")] = "plain"
        s[("embeddings.dropout", "layers.0.layernorm_after")] = "entangled"
        for i in range(layers):
            s[(f"layers.{i}.dropout", f"layers.{i}.layernorm_after")] = "bypass"
            s[(f"layers.{i}.dropout#1", f"layers.{i + 1}.layernorm_before" if i + 1 < layers else "layernorm")] = "bypass"
    elif arch == "t5":  # pre-RMSNorm (T5LayerNorm); encoder.dropout on the embeddings (and after the final norm)
        s[("encoder.dropout", "encoder.block.0.layer.0.layer_norm")] = "plain"
        s[("encoder.dropout", "encoder.block.0.layer.1.layer_norm")] = "entangled"
        for i in range(layers):
            s[(f"encoder.block.{i}.layer.0.dropout", f"encoder.block.{i}.layer.1.layer_norm")] = "bypass"
            nxt = f"encoder.block.{i + 1}.layer.0.layer_norm" if i + 1 < layers else "encoder.final_layer_norm"
            s[(f"encoder.block.{i}.layer.1.dropout", nxt)] = "bypass"
    elif arch == "llama":  # no hidden dropout; attention_dropout only
        pass
    return s


def expected_attention(arch, impl, layers=2):
    """The attention-dropout calls, from the modeling source."""
    owner = {"bert": "encoder.layer.{}.attention.self", "gpt2": "h.{}.attn",
             "esm": "encoder.layer.{}.attention.self", "vit": "layers.{}.attention",
             "t5": "encoder.block.{}.layer.0.SelfAttention", "llama": "layers.{}.self_attn"}[arch]
    kind = "dropout" if impl == "eager" else "sdpa"
    return [f"{owner.format(i)}:{kind}" for i in range(layers)]


# --------------------------------------------------------------------------
# Issue 40: architectures whose paths need identity-per-token ops (OPT),
# attention through bmm after a view (DeBERTa-v2, BLOOM), LayerDrop
# (Wav2Vec2) and mask-product dropouts (ESMFold).


def build40(arch, d=32, layers=2, heads=4, p=P, seed=0, layerdrop=0.1):
    import transformers as T

    torch.manual_seed(seed)
    if arch == "opt":
        c = T.OPTConfig(hidden_size=d, num_hidden_layers=layers, ffn_dim=2 * d, num_attention_heads=heads,
                        vocab_size=100, max_position_embeddings=64, word_embed_proj_dim=d, dropout=p,
                        attention_dropout=p)
        cls = T.OPTModel
    elif arch == "deberta-v2":
        c = T.DebertaV2Config(hidden_size=d, num_hidden_layers=layers, num_attention_heads=heads,
                              intermediate_size=2 * d, vocab_size=100, max_position_embeddings=64,
                              hidden_dropout_prob=p, attention_probs_dropout_prob=p)
        cls = T.DebertaV2Model
    elif arch == "bloom":
        c = T.BloomConfig(hidden_size=d, n_layer=layers, n_head=heads, vocab_size=100, hidden_dropout=p,
                          attention_dropout=p)
        cls = T.BloomModel
    elif arch == "wav2vec2":
        c = T.Wav2Vec2Config(hidden_size=d, num_hidden_layers=layers, num_attention_heads=heads,
                             intermediate_size=2 * d, conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3),
                             num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, layerdrop=layerdrop,
                             hidden_dropout=p, attention_dropout=p, activation_dropout=p, feat_proj_dropout=p,
                             final_dropout=p, mask_time_prob=0.0)
        cls = T.Wav2Vec2Model
    else:
        raise ValueError(arch)
    c._attn_implementation = "eager"
    return cls(c)


def expected40(arch, layers=2):
    """``{(dropout_call, norm_call): form}`` written from the modeling
    sources (transformers 5.x)."""
    s = {}
    if arch == "opt":  # pre-LN decoder; both residual adds are reshaped to (-1, d) or read directly
        for i in range(layers):
            s[(f"decoder.layers.{i}:dropout", f"decoder.layers.{i}.final_layer_norm")] = "bypass"
            nxt = f"decoder.layers.{i + 1}.self_attn_layer_norm" if i + 1 < layers else "decoder.final_layer_norm"
            s[(f"decoder.layers.{i}:dropout#1", nxt)] = "bypass"
    elif arch == "deberta-v2":  # post-LN, as BERT; the embeddings' dropout is the first residual
        for i in range(layers):
            s[(f"encoder.layer.{i}.attention.output.dropout",
               f"encoder.layer.{i}.attention.output.LayerNorm")] = "bypass"
            s[(f"encoder.layer.{i}.output.dropout", f"encoder.layer.{i}.output.LayerNorm")] = "bypass"
        s[("embeddings.dropout", "encoder.layer.0.attention.output.LayerNorm")] = "entangled"
    elif arch == "bloom":  # pre-LN; dropout_add(x, residual) is F.dropout(x) + residual
        for i in range(layers):
            s[(f"h.{i}.self_attention:dropout", f"h.{i}.post_attention_layernorm")] = "bypass"
            s[(f"h.{i}.mlp:dropout", f"h.{i + 1}.input_layernorm" if i + 1 < layers else "ln_f")] = "bypass"
    elif arch == "wav2vec2":  # post-LN encoder (layer_norm after each residual add)
        s[("feature_projection.dropout", "encoder.layer_norm")] = "entangled"  # + pos_conv(itself)
        s[("encoder.dropout", "encoder.layers.0.layer_norm")] = "entangled"  # the attention's residual
        for i in range(layers):
            s[(f"encoder.layers.{i}.dropout", f"encoder.layers.{i}.layer_norm")] = "bypass"
            s[(f"encoder.layers.{i}.feed_forward.output_dropout", f"encoder.layers.{i}.final_layer_norm")] = "bypass"
    return s


def build_esmfold(c_z=32, blocks=2, seed=0, p=P):
    """A tiny ``EsmForProteinFolding`` (random weights, ``fp16_esm=False``):
    ESM-2 stem of 2 layers (d = 64), trunk ``blocks`` blocks (c_s = 32,
    c_z), structure module 2 blocks."""
    import transformers as T

    torch.manual_seed(seed)
    sm = dict(sequence_dim=32, pairwise_dim=c_z, ipa_dim=16, resnet_dim=16, num_heads_ipa=2, num_qk_points=2,
              num_v_points=2, num_blocks=2, num_transition_layers=1, num_resnet_blocks=1, dropout_rate=p)
    trunk = dict(num_blocks=blocks, sequence_state_dim=32, pairwise_state_dim=c_z, sequence_head_width=16,
                 pairwise_head_width=8, max_recycles=2, dropout=p, structure_module=sm)
    c = T.EsmConfig(vocab_size=33, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=128, max_position_embeddings=64, hidden_dropout_prob=p,
                    attention_probs_dropout_prob=p, pad_token_id=1, position_embedding_type="rotary",
                    is_folding_model=True, token_dropout=False, mask_token_id=32,
                    vocab_list=["<cls>", "<pad>", "<eos>", "<unk>", *"LAGVSERTIDPKQNFYMHWCXBUZO", ".", "-",
                                "<null_1>", "<mask>"],
                    esmfold_config={"trunk": trunk, "fp16_esm": False, "embed_aa": True, "bypass_lm": False,
                                    "lddt_head_hid_dim": 16})
    return T.EsmForProteinFolding(c)


def expected_esmfold(blocks=2, iterations=2, sm_blocks=2):
    """``{(dropout_call, norm_call): form}`` of :func:`build_esmfold` over
    ``iterations`` trunk passes (recycles + 1), from modeling_esmfold.py:
    the stem as ESM's; per block ``seq + drop(attn)`` → ``mlp_seq``'s
    LayerNorm, ``mlp_seq`` (``x + mlp(x)``, its dropout ``mlp.4``) → the
    block's ``sequence_to_pair.layernorm`` and the next block's
    ``layernorm_1``, four triangle updates ``z + {row,col}_drop(f(z))`` each
    into the next update's LayerNorm, ``mlp_pair`` → the next block's
    ``pair_to_sequence.layernorm``; the last block's states reach the next
    pass's ``recycle_s_norm``/``recycle_z_norm`` through ``.detach()``; the
    structure module's ``ipa_dropout`` and ``transition.dropout`` feed
    their LayerNorms directly."""
    s = {}
    for i in range(2):
        s[(f"esm.encoder.layer.{i}.attention.output.dropout", f"esm.encoder.layer.{i}.LayerNorm")] = "bypass"
        nxt = f"esm.encoder.layer.{i + 1}.attention.LayerNorm" if i < 1 else "esm.encoder.emb_layer_norm_after"
        s[(f"esm.encoder.layer.{i}.output.dropout", nxt)] = "bypass"

    def k(name, j):
        return name if j == 0 else f"{name}#{j}"

    for it in range(iterations):
        for b in range(blocks):
            pre = f"trunk.blocks.{b}."
            s[(k(pre + "drop", it), k(pre + "mlp_seq.mlp.0", it))] = "bypass"
            s[(k(pre + "mlp_seq.mlp.4", it), k(pre + "sequence_to_pair.layernorm", it))] = "bypass"
            s[(k(pre + "row_drop.dropout", 2 * it), k(pre + "tri_mul_in.layer_norm_in", it))] = "bypass"
            s[(k(pre + "col_drop.dropout", 2 * it), k(pre + "tri_att_start.layer_norm", it))] = "bypass"
            s[(k(pre + "row_drop.dropout", 2 * it + 1), k(pre + "tri_att_end.layer_norm", it))] = "bypass"
            s[(k(pre + "col_drop.dropout", 2 * it + 1), k(pre + "mlp_pair.mlp.0", it))] = "bypass"
            if b + 1 < blocks:
                nb = f"trunk.blocks.{b + 1}."
                s[(k(pre + "mlp_seq.mlp.4", it), k(nb + "layernorm_1", it))] = "bypass"
                s[(k(pre + "mlp_pair.mlp.4", it), k(nb + "pair_to_sequence.layernorm", it))] = "bypass"
            elif it + 1 < iterations:
                s[(k(pre + "mlp_seq.mlp.4", it), k("trunk.recycle_s_norm", it + 1))] = "bypass"
                s[(k(pre + "mlp_pair.mlp.4", it), k("trunk.recycle_z_norm", it + 1))] = "bypass"
        for j in range(sm_blocks):
            n = it * sm_blocks + j
            s[(k("trunk.structure_module.ipa_dropout", n), k("trunk.structure_module.layer_norm_ipa", n))] = "plain"
            s[(k("trunk.structure_module.transition.dropout", n),
               k("trunk.structure_module.transition.layer_norm", n))] = "plain"
    return s
