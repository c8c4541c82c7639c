"""The tools warm start's data: gold episodes as the environment really answers them, and labels on the
agent's turns only (the split an episode's GRPO row has)."""

from __future__ import annotations

import json
import random

from synco.core.records import TaskCard
from synco.domains.tools.domain import ToolsDomain
from synco.domains.tools.syntax import parse_turn
from synco.learn.charlm import char_tokenizer
from synco.learn.pretrain_tools import encode_segments, gold_segments, synthesizer_pair


def test_gold_segments_replay_to_a_winning_episode() -> None:
    domain = ToolsDomain()
    rng = random.Random(3)
    for family in domain.families:
        task = domain.sample_task(rng, family)
        segments = gold_segments(domain, task)
        assert segments[0] == (domain.reasoner_prompt(task.instruction), False)
        card = domain.format_card(task.instruction, task.actions, task.outputs, family)
        tc = TaskCard(**json.loads(card))
        env = domain.environment(tc, domain.oracle(tc))
        for text, target in segments[1:]:
            if target:  # an agent turn: the environment answers with the next (non-target) segment
                step = env.step(text)
                assert step.error is None, (family, text)
            else:
                assert text == step.observation
        assert env.grade().correct, family


def test_labels_cover_agent_turns_and_their_eos_only() -> None:
    tok = char_tokenizer()
    rows = [[("T:go\n", False), ("find_user(bob)", True), ("\n=u2,24\n", False), ("done()", True)]]
    ids, mask, labels = encode_segments(tok, rows)
    text_ids = tok("T:go\nfind_user(bob)", add_special_tokens=False)["input_ids"]
    eos = tok.eos_token_id
    n_prompt = len("T:go\n")
    assert labels[0, :n_prompt].tolist() == [-100] * n_prompt
    call = len("find_user(bob)")
    assert labels[0, n_prompt:n_prompt + call].tolist() == text_ids[n_prompt:]
    assert labels[0, n_prompt + call].item() == eos
    obs_at = n_prompt + call + 1
    assert labels[0, obs_at:obs_at + len("\n=u2,24\n")].tolist() == [-100] * len("\n=u2,24\n")
    assert int(mask.sum()) == len(ids[0])
    assert labels[0, -1].item() == eos and (labels[0] != -100).sum().item() == call + 1 + len("done()") + 1


def test_synthesizer_targets_name_the_cards_own_pattern() -> None:
    domain = ToolsDomain()
    rng = random.Random(0)
    pattern = next(d for d in domain.factor_defs() if d.name == "pattern")
    seen = 0
    for _ in range(40):
        prompt, card = synthesizer_pair(domain, rng)
        c = json.loads(card)
        if "\nDO:" in prompt:
            seen += 1
            target = prompt.split("\nDO:")[1].split("\n")[0]
            assert target == f"pattern={pattern.value(c['problem'] + chr(10) + c['solution'])}"
        assert parse_turn(c["solution"].split(";")[0]).call.name  # the card's actions parse as agent turns
    assert seen > 20


def test_the_warm_start_is_deterministic_in_its_seed(tmp_path) -> None:  # noqa: ANN001 - a path
    import torch
    from safetensors.torch import load_file

    from synco.learn.pretrain_tools import _Role, _train_role

    for run in ("a", "b"):
        _train_role(_Role("reasoner", 3, 3, 4, 1e-3, tmp_path / run, progress=False))
    a = load_file(str(tmp_path / "a" / "reasoner" / "model.safetensors"))
    b = load_file(str(tmp_path / "b" / "reasoner" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    _train_role(_Role("reasoner", 4, 3, 4, 1e-3, tmp_path / "c", progress=False))
    c = load_file(str(tmp_path / "c" / "reasoner" / "model.safetensors"))
    assert not all(torch.equal(a[k], c[k]) for k in a)  # another seed, other weights


def test_the_shipped_warm_start_is_the_recorded_one() -> None:
    """The shipped tools agents load, and their meta records the recipe that made them."""
    import json

    from synco.learn.pretrain_tools import ASSET_DIR, load_tools_warm_start

    assert load_tools_warm_start() == ASSET_DIR
    meta = json.loads((ASSET_DIR / "meta.json").read_text())
    assert meta["seed"] == 0 and meta["reasoner_steps"] == 2000 and set(meta["heldout_success"]) == {"w0", "w1", "w2", "w3+"}
