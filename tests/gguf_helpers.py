"""Tiny GGUF files written in the tests (nothing is downloaded): a random Llama with a byte-level
BPE tokenizer and SmolLM2's ChatML chat template, laid out as llama.cpp's converter writes it
(query/key rows permuted for its rotary layout, numpy shapes reversed in the header)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

# SmolLM2-Instruct's chat template: ChatML with a default system message.
SMOLLM_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ROPE_THETA = 10000.0
CORPUS = [
    "Your goal: go to the red ball. There is a red ball 1 right in front of you 3 steps away.",
    "Available actions: turn left, turn right, move forward, go to red ball 1, toggle",
    "Thought: the ball is ahead.\nAction: move forward",
    "Crafting commands: craft 1 blue dye using 1 lapis lazuli. Goal: craft blue dye.",
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face",
] * 4


def bpe_tokenizer():
    """A byte-level BPE tokenizer (``tokenizers``) with ChatML's special tokens at ids 0-2."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )  # fmt: skip
    tok.train_from_iterator(CORPUS, trainer)
    return tok


def permute_rotary(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's converter layout of query/key rows: (heads, 2, d/2) -> (heads, d/2, 2)."""
    rows = w.shape[0]
    return w.reshape(heads, 2, rows // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def tiny_llama(vocab: int, seed: int = 0, context: int = 512):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=context,
        rms_norm_eps=1e-5, rope_theta=ROPE_THETA, tie_word_embeddings=True,
        bos_token_id=1, eos_token_id=2, pad_token_id=2,
    )  # fmt: skip
    return LlamaForCausalLM(cfg).eval()


_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def gguf_name(name: str) -> str:
    if name == "model.embed_tokens.weight":
        return "token_embd.weight"
    if name == "model.norm.weight":
        return "output_norm.weight"
    _, _, layer, rest = name.split(".", 3)
    return f"blk.{layer}.{_NAMES[rest]}"


def write_gguf(
    path: Path,
    *,
    architecture: str = "llama",
    quantize: dict[str, str] | None = None,
    raw_types: dict[str, str] | None = None,
    seed: int = 0,
    context: int = 512,
    poison: str | None = None,
):
    """Write a tiny Llama GGUF to ``path``; returns (model, tokenizer) it was made from.

    quantize: GGUF tensor name -> a type ``gguf.quants`` can quantize to (e.g. "Q8_0").
    raw_types: GGUF tensor name -> a type written as bytes of the right size without real
    quantization (for types the importer must refuse).
    poison: a GGUF tensor name whose first weight is written as NaN.
    """
    import gguf

    tok = bpe_tokenizer()
    model = tiny_llama(tok.get_vocab_size(), seed, context)
    cfg = model.config
    vocab = tok.get_vocab()
    tokens = sorted(vocab, key=vocab.get)
    merges = [" ".join(pair) for pair in _merges(tok)]
    w = gguf.GGUFWriter(str(path), architecture)
    w.add_name("tiny-test-llama")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_freq_base(ROPE_THETA)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([3 if t in SPECIALS else 1 for t in tokens])
    w.add_token_merges(merges)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_pad_token_id(2)
    w.add_add_bos_token(False)
    w.add_chat_template(SMOLLM_TEMPLATE)
    for name, t in model.state_dict().items():
        if name == "lm_head.weight":  # tied: llama.cpp writes no output.weight
            continue
        arr = t.detach().numpy().astype(np.float32)
        target = gguf_name(name)
        if target.endswith("attn_q.weight"):
            arr = permute_rotary(arr, cfg.num_attention_heads)
        elif target.endswith("attn_k.weight"):
            arr = permute_rotary(arr, cfg.num_key_value_heads)
        if target == poison:
            arr.flat[0] = np.nan
        kind = (quantize or {}).get(target)
        raw = (raw_types or {}).get(target)
        if kind:
            qtype = gguf.GGMLQuantizationType[kind]
            w.add_tensor(target, gguf.quants.quantize(arr, qtype), raw_dtype=qtype)
        elif raw:
            qtype = gguf.GGMLQuantizationType[raw]
            block, size = gguf.GGML_QUANT_SIZES[qtype]
            data = np.zeros((arr.shape[0], arr.shape[1] // block * size), dtype=np.uint8)
            w.add_tensor(target, data, raw_dtype=qtype)
        else:
            w.add_tensor(target, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return model, tok


def _merges(tok) -> list[tuple[str, str]]:
    import json

    merges = json.loads(tok.to_str())["model"]["merges"]
    return [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in merges]


# GGUF metadata value types (the spec's numbering)
UINT32, STRING, ARRAY, UINT64 = 4, 8, 9, 10
F32 = 0


def _value(kind: int, value) -> bytes:
    import struct

    if kind == UINT32:
        return struct.pack("<I", value)
    if kind == UINT64:
        return struct.pack("<Q", value)
    if kind == STRING:
        raw = value.encode()
        return struct.pack("<Q", len(raw)) + raw
    inner, items = value  # ARRAY: (inner kind, items) or (inner kind, (count, bytes of all))
    if isinstance(items, tuple):
        return struct.pack("<IQ", inner, items[0]) + items[1]
    return struct.pack("<IQ", inner, len(items)) + b"".join(_value(inner, v) for v in items)


LLAMA_SIZES = [
    ("general.architecture", STRING, "llama"), ("llama.embedding_length", UINT32, 64),
    ("llama.attention.head_count", UINT32, 4), ("llama.attention.head_count_kv", UINT32, 2),
    ("llama.feed_forward_length", UINT32, 96), ("llama.block_count", UINT32, 2),
    ("llama.context_length", UINT32, 512),
]  # fmt: skip
"""The metadata keys of a tiny Llama's sizes, for ``raw_gguf``."""


def raw_gguf(
    path: Path,
    kvs: list[tuple[str, int, object]],
    tensors: list[tuple[str, list[int], int, int]],
    data_bytes: int = 0,
    *,
    kv_count: int | None = None,
    alignment: int = 32,
) -> Path:
    """Write a GGUF file byte by byte, whatever it is told (overlapping tensors, absurd counts),
    as ``gguf.GGUFWriter`` would not: metadata ``kvs`` (key, kind, value), a tensor table
    (name, dims, ggml type, offset), then ``data_bytes`` zero bytes after the table, aligned.
    ``kv_count``: the key count the header claims (default: ``len(kvs)``)."""
    import struct

    head = b"GGUF" + struct.pack(
        "<IQQ", 3, len(tensors), len(kvs) if kv_count is None else kv_count
    )
    body = b"".join(
        _value(STRING, k) + struct.pack("<I", kind) + _value(kind, v) for k, kind, v in kvs
    )
    table = b"".join(
        _value(STRING, name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, kind, offset)
        for name, dims, kind, offset in tensors
    )
    header = head + body + table
    pad = -len(header) % alignment
    path.write_bytes(header + b"\0" * pad + b"\0" * data_bytes)
    return path
