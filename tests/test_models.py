"""The tiny local model: built without downloads, cached, deterministic, loadable like any
checkpoint, with a ChatML template."""

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agentgym.models import (  # noqa: E402
    MANIFEST,
    TinyModelSpec,
    build_tiny_model,
    copy_accuracy,
    copy_token_ids,
    env_corpus,
    file_texts,
    load_model,
    load_tokenizer,
)

SPEC = TinyModelSpec(
    vocab_size=350, hidden_size=32, intermediate_size=64, num_hidden_layers=1, seed=5
)
CORPUS = [
    "Your goal: open the blue door. There is a blue closed door 1 2 steps in front of you.",
    "Thought: open it.\nAction: toggle and go through blue closed door 1",
    "craft 4 oak planks using 1 oak log. Got 1 oak log. Inventory: [oak planks] (4)",
] * 4


def weights(path):
    model, _ = load_model(path)
    return model.state_dict()


def test_build_writes_a_loadable_checkpoint_with_chatml(tmp_path) -> None:
    path = build_tiny_model(tmp_path / "tiny", CORPUS, SPEC)
    model, tokenizer = load_model(path)
    assert model.config.model_type == "qwen2"
    assert model.config.hidden_size == 32 and model.config.num_hidden_layers == 1
    assert model.config.vocab_size == len(tokenizer) <= SPEC.vocab_size
    text = tokenizer.apply_chat_template(
        [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert (
        text
        == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"
    )
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert tokenizer.eos_token_id == im_end
    assert tokenizer.encode("<|im_start|>user", add_special_tokens=False)[0] == (
        tokenizer.convert_tokens_to_ids("<|im_start|>")
    )
    ids = tokenizer.encode("go to the blue door", add_special_tokens=False)
    assert tokenizer.decode(ids) == "go to the blue door"
    assert len(ids) < len("go to the blue door")  # merges were learned from the corpus
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits
    assert logits.shape == (1, len(ids), len(tokenizer))


def test_second_build_reuses_the_directory_without_reading_the_corpus(tmp_path) -> None:
    path = build_tiny_model(tmp_path / "tiny", CORPUS, SPEC)
    stamp = (path / "model.safetensors").stat().st_mtime_ns

    def corpus_must_not_be_read():
        raise AssertionError("cached build read its corpus")

    assert build_tiny_model(tmp_path / "tiny", corpus_must_not_be_read, SPEC) == path
    assert (path / "model.safetensors").stat().st_mtime_ns == stamp
    assert json.loads((path / MANIFEST).read_text())["spec"]["seed"] == 5


def test_directory_with_another_spec_is_refused(tmp_path) -> None:
    build_tiny_model(tmp_path / "tiny", CORPUS, SPEC)
    other = TinyModelSpec(vocab_size=350, hidden_size=64, intermediate_size=64)
    with pytest.raises(ValueError, match="tiny model built with"):
        build_tiny_model(tmp_path / "tiny", CORPUS, other)


def test_text_files_train_the_tokenizer_and_are_recorded(tmp_path) -> None:
    """A name that only the text files hold becomes one token; a build is reused only with
    the same files."""
    world = tmp_path / "world.jsonl"
    record = {"contents": "Zindmou Company is a firm.", "id": "0", "tags": ["Zindmou", 3]}
    world.write_text((json.dumps(record) + "\n") * 8)
    notes = tmp_path / "notes.txt"
    notes.write_text("Zindmou\n\nmore Zindmou\n")
    assert file_texts(world)[:3] == ["Zindmou Company is a firm.", "0", "Zindmou"]
    assert file_texts(notes) == ["Zindmou", "more Zindmou"]
    files = [str(world)]
    plain = load_tokenizer(build_tiny_model(tmp_path / "plain", CORPUS, SPEC))
    path = build_tiny_model(tmp_path / "tiny", CORPUS, SPEC, text_files=files)
    tokenizer = load_tokenizer(path)
    assert len(tokenizer.tokenize("Zindmou")) == 1 < len(plain.tokenize("Zindmou"))
    assert json.loads((path / MANIFEST).read_text())["tokenizer_texts"] == files
    assert build_tiny_model(path, CORPUS, SPEC, text_files=files) == path
    for other in ([], [str(notes)]):
        with pytest.raises(ValueError, match="tokenizer texts"):
            build_tiny_model(path, CORPUS, SPEC, text_files=other)
    with pytest.raises(ValueError, match="tokenizer texts"):
        build_tiny_model(tmp_path / "plain", CORPUS, SPEC, text_files=files)


def test_text_files_compare_by_absolute_path_and_bad_lines_name_the_line(
    tmp_path, monkeypatch
) -> None:
    (tmp_path / "names.txt").write_text("Zindmou\n")
    monkeypatch.chdir(tmp_path)
    path = build_tiny_model(tmp_path / "tiny", CORPUS, SPEC, text_files=["names.txt"])
    assert json.loads((path / MANIFEST).read_text())["tokenizer_texts"] == [
        str(tmp_path / "names.txt")
    ]
    assert build_tiny_model(path, CORPUS, SPEC, text_files=[str(tmp_path / "names.txt")]) == path
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"contents": "ok"}\n{"contents": \n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: not a JSON record"):
        file_texts(bad)


def test_build_is_deterministic(tmp_path) -> None:
    a = build_tiny_model(tmp_path / "a", CORPUS, SPEC)
    b = build_tiny_model(tmp_path / "b", lambda: iter(CORPUS), SPEC)
    assert (a / "tokenizer.json").read_text() == (b / "tokenizer.json").read_text()
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_seed_changes_the_weights(tmp_path) -> None:
    a = build_tiny_model(tmp_path / "a", CORPUS, SPEC)
    b = build_tiny_model(
        tmp_path / "b",
        CORPUS,
        TinyModelSpec(vocab_size=350, hidden_size=32, intermediate_size=64, num_hidden_layers=1),
    )
    wa, wb = weights(a), weights(b)
    assert not torch.equal(wa["model.embed_tokens.weight"], wb["model.embed_tokens.weight"])


def test_build_leaves_global_rng_alone(tmp_path) -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    build_tiny_model(tmp_path / "tiny", CORPUS, SPEC)
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize("env", ["babyai", "textcraft"])
def test_env_corpus_is_env_text_and_deterministic(env) -> None:
    pytest.importorskip("agentgym._envserver")
    texts = env_corpus(env, episodes=4, max_steps=3, seed=1)
    assert texts == env_corpus(env, episodes=4, max_steps=3, seed=1)
    replies = [t for t in texts if t.startswith("Thought: ")]
    assert 4 <= len(replies) <= 12
    assert len(texts) > len(replies) + 4  # first observations plus step observations
    if env == "textcraft":
        assert any(t.startswith("Crafting commands:") for t in texts)
        assert any(t.startswith(("Got ", "Crafted ", "Could not", "Inventory")) for t in texts)


def test_loading_draws_no_third_party_progress_bar(tmp_path, capfd) -> None:
    path = build_tiny_model(tmp_path / "tiny", CORPUS, SPEC)
    capfd.readouterr()
    load_model(path)
    out, err = capfd.readouterr()
    assert "Loading weights" not in out + err


COPY_STEPS = 300
COPIER = TinyModelSpec(
    vocab_size=350, hidden_size=64, intermediate_size=128, num_hidden_layers=2, seed=5
)


def copy_skill(path, seed=99) -> float:
    """Greedy accuracy on the repeat of fresh random spans (the warm-up's task)."""
    model, tokenizer = load_model(path)
    return copy_accuracy(model, copy_token_ids(tokenizer), torch.Generator().manual_seed(seed))


def test_copy_warmup_makes_the_model_continue_repeated_spans(tmp_path) -> None:
    """Without the warm-up the model is at chance on a span's repeat; with it, it copies."""
    plain = build_tiny_model(tmp_path / "plain", CORPUS, COPIER)
    warm = build_tiny_model(tmp_path / "warm", CORPUS, COPIER, copy_warmup_steps=COPY_STEPS)
    assert copy_skill(plain) < 0.05
    assert copy_skill(warm) > 0.9
    recorded = json.loads((warm / MANIFEST).read_text())["copy_warmup"]
    assert recorded["steps"] == COPY_STEPS and recorded["copy_accuracy"] > 0.9
    assert "copy_warmup" not in json.loads((plain / MANIFEST).read_text())


def test_copy_warmup_is_part_of_the_build(tmp_path) -> None:
    """Same seed, same warmed weights; a build with other warm-up steps is not reused."""
    a = build_tiny_model(tmp_path / "a", CORPUS, SPEC, copy_warmup_steps=3)
    b = build_tiny_model(tmp_path / "b", CORPUS, SPEC, copy_warmup_steps=3)
    wa, wb = weights(a), weights(b)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    plain = weights(build_tiny_model(tmp_path / "plain", CORPUS, SPEC))
    assert not all(torch.equal(wa[k], plain[k]) for k in wa)
    assert build_tiny_model(a, CORPUS, SPEC, copy_warmup_steps=3) == a
    for steps in (0, 4):
        with pytest.raises(ValueError, match=f"3 copy warm-up steps, not {steps}"):
            build_tiny_model(a, CORPUS, SPEC, copy_warmup_steps=steps)
    with pytest.raises(ValueError, match="0 copy warm-up steps, not 3"):
        build_tiny_model(tmp_path / "plain", CORPUS, SPEC, copy_warmup_steps=3)
