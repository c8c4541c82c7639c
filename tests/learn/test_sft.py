"""The supervised loss (pure, on hand-computed tokens) and the supervised update of every learner."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from synco.learn.hf_policy import HFPolicy
from synco.core.policy import GRPOConfig, LoraSettings, Policy, PolicyConfig
from synco.learn.sft import IGNORE, completion_loss, shift_labels
from synco.core.sampling import SFTExample
from synco.learn.shared_base import SharedBase
from synco.learn.charlm import char_tokenizer, tiny_llama

torch.set_num_threads(1)
EOS = 2


# --------------------------------------------------------------------------- the pure loss


def test_completion_loss_on_hand_computed_tokens() -> None:
    # vocabulary of 3; row 0 predicts uniformly (-log 1/3 each), row 1 puts logit log 2 on token 1:
    # p(1) = 2/4, p(0) = p(2) = 1/4
    logits = torch.tensor([[[0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [5.0, 5.0, 5.0]],
                           [[0.0, math.log(2), 0.0], [0.0, math.log(2), 0.0], [9.0, 0.0, 0.0]]])
    targets = torch.tensor([[1, 2, IGNORE],  # two trained tokens, the padding position skipped
                            [1, 0, IGNORE]])
    by_hand = [math.log(3), math.log(3), math.log(2), math.log(4)]
    assert completion_loss(logits, targets).item() == pytest.approx(sum(by_hand) / 4)
    assert completion_loss(logits, targets, normalizer=10).item() == pytest.approx(sum(by_hand) / 10)
    # micro-batches against the whole batch's token count add up to the whole batch's mean
    parts = [completion_loss(logits[i:i + 1], targets[i:i + 1], normalizer=4).item() for i in range(2)]
    assert sum(parts) == pytest.approx(completion_loss(logits, targets).item())
    # only trained positions matter: changing the ignored position's logits changes nothing
    other = logits.clone()
    other[:, 2] = torch.tensor([0.0, -7.0, 3.0])
    assert torch.equal(completion_loss(other, targets), completion_loss(logits, targets))
    with pytest.raises(ValueError, match="normalizer must be positive, got 0"):
        completion_loss(logits, targets, normalizer=0)


def test_completion_loss_gradient_is_softmax_minus_one_hot() -> None:
    logits = torch.tensor([[[0.0, math.log(2), 0.0]]], requires_grad=True)
    completion_loss(logits, torch.tensor([[0]])).backward()
    assert logits.grad[0, 0].tolist() == pytest.approx([0.25 - 1, 0.5, 0.25])


def test_shift_labels_aligns_next_token_targets() -> None:
    labels = torch.tensor([[IGNORE, IGNORE, 7, 8, 2], [IGNORE, 5, 6, 2, IGNORE]])
    assert shift_labels(labels).tolist() == [[IGNORE, 7, 8, 2, IGNORE], [5, 6, 2, IGNORE, IGNORE]]


def test_warm_start_loss_is_the_models_own_loss_bit_for_bit() -> None:
    """pretrain.train_sft's loss through completion_loss equals the HF loss it replaced, to the last bit."""
    from synco.learn.pretrain import encode_pairs

    tok = char_tokenizer()
    model = tiny_llama(tok, seed=1, hidden_size=32, num_layers=2)
    ids, mask, labels = encode_pairs(tok, [("Q:12+3\nA:", "\\boxed{15}"), ("Q:7*8\nA:", "\\boxed{56}")])
    ours = completion_loss(model(input_ids=ids, attention_mask=mask).logits, shift_labels(labels))
    theirs = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    assert torch.equal(ours, theirs)
    ours.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    theirs = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    theirs.backward()
    assert all(torch.equal(a, p.grad) for a, p in zip(grads, model.parameters()))


# --------------------------------------------------------------------------- the policy's supervised update


def make_policy(seed: int = 0, lora: LoraSettings | None = None, micro: int = 16, lr: float = 1e-2,
                trainable: bool = True) -> HFPolicy:
    tok = char_tokenizer()
    model = tiny_llama(tok, seed=seed, hidden_size=32, num_layers=2)
    cfg = PolicyConfig(model_path="tiny", device="cpu", lora=lora, trainable=trainable,
                       grpo=GRPOConfig(lr=lr, micro_batch_size=micro))
    return HFPolicy(model, tok, cfg)


BATCH = [SFTExample("Q:12+3\nA:\\boxed{", "15}"), SFTExample("Q:7*8\nA:\\boxed{", "56}"),
         SFTExample("a much longer prompt than the others", "x"), SFTExample("Q:1+1\nA:\\boxed{", "2}")]


def unpadded_loss(policy: HFPolicy, batch: list[SFTExample]) -> float:
    """The token-mean completion NLL from plain one-row forward passes (independent of the policy's layout)."""
    total, n = 0.0, 0
    with torch.no_grad():
        for e in batch:
            row = policy.encode_sft(e)
            ids = torch.tensor([row.prompt_ids + row.completion_ids])
            logp = torch.log_softmax(policy.model(input_ids=ids).logits[0, :-1].float(), -1)
            targets = ids[0, 1:]
            lp = logp.gather(-1, targets[:, None])[:, 0][len(row.prompt_ids) - 1:]
            total, n = total - lp.sum().item(), n + len(row.completion_ids)
    return total / n


def params(policy: HFPolicy) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in policy.model.named_parameters()}


def changed(before: dict[str, torch.Tensor], policy: HFPolicy) -> set[str]:
    return {n for n, p in policy.model.named_parameters() if not torch.equal(p.detach(), before[n])}


def test_sft_update_is_the_completion_loss_with_eos_and_moves_every_weight() -> None:
    pol = make_policy()
    assert isinstance(pol, Policy)
    row = pol.encode_sft(BATCH[0])
    assert row.prompt_ids == pol.encode_prompt(BATCH[0].prompt)  # the prompt exactly as generate encodes it
    assert row.completion_ids == list(pol.tokenizer("15}", add_special_tokens=False)["input_ids"]) + [EOS]
    expected = unpadded_loss(pol, BATCH)
    before = params(pol)
    stats = pol.sft_update(BATCH)
    assert stats.stepped and not stats.nan_skipped and pol.step == 1
    assert stats.loss == pytest.approx(expected, rel=1e-5)  # padding and positions do not change it
    assert stats.n_sequences == 4 and stats.n_tokens == sum(len(pol.encode_sft(e).completion_ids) for e in BATCH)
    assert changed(before, pol) == set(before)
    for _ in range(5):
        pol.sft_update(BATCH)
    assert unpadded_loss(pol, BATCH) < expected - 0.5


def test_sampled_ids_are_trained_as_they_are() -> None:
    pol = make_policy()
    tok = pol.tokenizer
    sampled = tuple(tok("15}", add_special_tokens=False)["input_ids"]) + (EOS,)
    # a completion sampled with a token its decoded text drops (the pad id, 0): tokenising the text again cannot
    # give these ids back, so the example trains them as they are, and no second EOS is appended
    odd = (sampled[0], 0, *sampled[1:])
    assert tok.decode(list(odd), skip_special_tokens=True) == "15}"
    for ids in (sampled, odd):
        row = pol.encode_sft(SFTExample("Q:12+3\nA:\\boxed{", "15}", ids))
        assert row.prompt_ids == pol.encode_prompt("Q:12+3\nA:\\boxed{") and row.completion_ids == list(ids)
    unstopped = pol.encode_sft(SFTExample("Q:12+3\nA:\\boxed{", "15}", sampled[:-1]))
    assert unstopped.completion_ids == list(sampled[:-1])  # EOS exactly as sampled: none here
    batch = [SFTExample("Q:12+3\nA:\\boxed{", "15}", odd), BATCH[1]]
    expected = unpadded_loss(pol, batch)
    stats = pol.sft_update(batch)
    assert stats.n_tokens == len(odd) + len(pol.encode_sft(BATCH[1]).completion_ids)
    assert stats.loss == pytest.approx(expected, rel=1e-5)
    # the same text without ids is another example: its loss is over other tokens
    assert unpadded_loss(pol, [SFTExample(batch[0].prompt, "15}")]) != pytest.approx(unpadded_loss(pol, batch[:1]))


def test_an_example_validates_its_ids() -> None:
    assert SFTExample("p", "c", [3, 4]).completion_ids == (3, 4)  # a list becomes a tuple: examples stay hashable
    assert len({SFTExample("p", "c", [3, 4]), SFTExample("p", "c", (3, 4))}) == 1
    with pytest.raises(ValueError, match="completion_ids is empty for completion 'c'"):
        SFTExample("p", "c", ())
    assert SFTExample("p", "c", [3, 4], [1, 0]).completion_mask == (1, 0)
    with pytest.raises(ValueError, match="completion_mask has 1 entries for completion_ids of 2"):
        SFTExample("p", "c", [3, 4], [1])
    with pytest.raises(ValueError, match="completion_mask has 2 entries for completion_ids of None"):
        SFTExample("p", "c", None, [1, 1])
    with pytest.raises(ValueError, match="completion_mask marks no id to train"):
        SFTExample("p", "c", [3, 4], [0, 0])


def test_an_episode_trains_the_agents_ids_only() -> None:
    """An episode's SFT example (agent ids, then the environment's, then the agent's again): the loss is the mean
    over the agent's ids alone, the environment's ids get exactly no gradient of their own, and every weight
    still moves."""
    pol = make_policy()
    tok = pol.tokenizer
    agent1 = tuple(tok("ab(1)", add_special_tokens=False)["input_ids"]) + (EOS,)
    env = tuple(tok("=x9", add_special_tokens=False)["input_ids"])
    agent2 = tuple(tok("done()", add_special_tokens=False)["input_ids"]) + (EOS,)
    ids, mask = agent1 + env + agent2, (1,) * len(agent1) + (0,) * len(env) + (1,) * len(agent2)
    episode = SFTExample("T:do it\n", "ab(1)=x9done()", ids, mask)
    row = pol.encode_sft(episode)
    assert row.completion_ids == list(ids) and row.loss_mask == list(mask) and row.n_trainable == len(agent1) + len(agent2)
    with torch.no_grad():  # the agent ids' mean NLL from one plain forward pass
        full = torch.tensor([row.prompt_ids + row.completion_ids])
        logp = torch.log_softmax(pol.model(input_ids=full).logits[0, :-1].float(), -1)
        lp = logp.gather(-1, full[0, 1:, None])[:, 0][len(row.prompt_ids) - 1:]
        expected = -(lp * torch.tensor(mask, dtype=lp.dtype)).sum().item() / sum(mask)
    # the environment's ids are no targets: other ones after the agent's turn leave its loss exactly as it was
    other_env = tuple(tok("=q7", add_special_tokens=False)["input_ids"])
    first = SFTExample(episode.prompt, "ab(1)=x9", agent1 + env, (1,) * len(agent1) + (0,) * len(env))
    first_other = SFTExample(episode.prompt, "ab(1)=q7", agent1 + other_env, (1,) * len(agent1) + (0,) * len(other_env))
    assert unpadded_masked_loss(pol, first) == pytest.approx(unpadded_masked_loss(pol, first_other), abs=0)
    before = params(pol)
    stats = pol.sft_update([episode, BATCH[1]])
    assert stats.n_tokens == sum(mask) + len(pol.encode_sft(BATCH[1]).completion_ids)
    n_episode, n_other = sum(mask), len(pol.encode_sft(BATCH[1]).completion_ids)
    pol2 = make_policy()
    other = unpadded_loss(pol2, [BATCH[1]])
    assert stats.loss == pytest.approx((expected * n_episode + other * n_other) / (n_episode + n_other), rel=1e-5)
    assert changed(before, pol) == set(before)


def unpadded_masked_loss(policy: HFPolicy, example: SFTExample) -> float:
    row = policy.encode_sft(example)
    with torch.no_grad():
        full = torch.tensor([row.prompt_ids + row.completion_ids])
        logp = torch.log_softmax(policy.model(input_ids=full).logits[0, :-1].float(), -1)
        lp = logp.gather(-1, full[0, 1:, None])[:, 0][len(row.prompt_ids) - 1:]
        m = torch.tensor(row.loss_mask, dtype=lp.dtype)
    return float(-(lp * m).sum() / m.sum())


def test_micro_batches_change_memory_not_the_step() -> None:
    one, all_at_once = make_policy(micro=1), make_policy(micro=16)
    s1, s2 = one.sft_update(BATCH), all_at_once.sft_update(BATCH)
    assert s1.loss == pytest.approx(s2.loss, rel=1e-6) and s1.grad_norm == pytest.approx(s2.grad_norm, rel=1e-5)
    p1, p2 = params(one), params(all_at_once)
    # Adam's first step is ~lr * sign(grad): summation-order noise in tiny gradients moves a weight by far less
    assert all(torch.allclose(p1[n], p2[n], atol=1e-4) for n in p1)  # than the step (lr 1e-2)


def test_lr_replaces_the_scheduled_rate_for_that_step_only() -> None:
    pol = make_policy(lr=1e-3)
    assert pol.sft_update(BATCH, lr=0.05).lr == 0.05
    assert pol.optimizer.param_groups[0]["lr"] == pytest.approx(1e-3)  # the scheduler's rate is back
    assert pol.sft_update(BATCH).lr == pytest.approx(1e-3)


def test_frozen_policy_refuses_and_an_empty_batch_is_no_step() -> None:
    with pytest.raises(RuntimeError, match="trainable=False"):
        make_policy(trainable=False).sft_update(BATCH)
    pol = make_policy()
    before = params(pol)
    stats = pol.sft_update([])
    assert not stats.stepped and pol.step == 0 and changed(before, pol) == set()


def test_lora_sft_trains_only_the_adapter() -> None:
    pol = make_policy(lora=LoraSettings(rank=4, alpha=8))
    before = params(pol)
    for _ in range(2):  # lora_B starts at zero, so lora_A first moves on the second step
        assert pol.sft_update(BATCH).stepped
    moved = changed(before, pol)
    assert moved == {n for n, _ in pol.trainable_parameters()} and all("lora_" in n for n in moved)


def test_shared_base_sft_changes_only_its_own_adapter() -> None:
    tok = char_tokenizer()
    lora = LoraSettings(rank=4, alpha=8)
    cfg = PolicyConfig(model_path="tiny", device="cpu", lora=lora, grpo=GRPOConfig(lr=1e-2))
    shared = SharedBase(tiny_llama(tok, seed=0, hidden_size=32, num_layers=2), tok,
                        {"synthesizer": cfg, "reasoner": cfg})
    before = {n: p.detach().clone() for n, p in shared.model.named_parameters()}
    shared.synthesizer.activate()  # the other adapter is active: sft_update must switch itself
    for _ in range(2):
        assert shared.reasoner.sft_update(BATCH).stepped
    moved = {n for n, p in shared.model.named_parameters() if not torch.equal(p.detach(), before[n])}
    assert moved == {n for n, _ in shared.adapter_parameters("reasoner")}


def test_saved_state_resumes_sft_exactly(tmp_path: Path) -> None:
    first, second = BATCH[:2], BATCH[2:]
    a = make_policy(lr=1e-3)
    a.sft_update(first)
    a.sft_update(second)

    b = make_policy(lr=1e-3)
    b.sft_update(first)
    b.save(tmp_path / "ckpt")
    b.save_state(tmp_path / "ckpt")
    cfg = PolicyConfig(model_path=str(tmp_path / "ckpt"), device="cpu", grpo=GRPOConfig(lr=1e-3))
    c = HFPolicy.from_config(cfg)
    c.load_state(tmp_path / "ckpt")
    c.sft_update(second)
    pa = params(a)
    assert all(torch.allclose(pa[n], p.detach(), atol=1e-7) for n, p in c.model.named_parameters())
    d = HFPolicy.from_config(cfg)  # without the optimizer state the step differs (Adam moments matter)
    d.sft_update(second)
    assert any(not torch.allclose(pa[n], p.detach(), atol=1e-7) for n, p in d.model.named_parameters())
