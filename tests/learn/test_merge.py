"""``synco merge``: a saved LoRA adapter merged into its base equals the live peft model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from synco.cli import build_parser, main
from synco.learn.merge import MergeError, merge_adapter, read_adapter_config
from synco.learn.hf_policy import HFPolicy
from synco.core.policy import GRPOConfig, LoraSettings, PolicyConfig
from synco.core.sampling import Experience
from synco.learn.shared_base import SharedBase
from synco.learn.charlm import char_tokenizer, tiny_llama

EOS = 2


@pytest.fixture()
def base_dir(tmp_path: Path) -> Path:
    tok = char_tokenizer()
    d = tmp_path / "base"
    tiny_llama(tok, seed=0, hidden_size=32, num_layers=2).save_pretrained(d)
    tok.save_pretrained(d)
    return d


def trained(policy: HFPolicy) -> HFPolicy:
    ids = lambda s: list(policy.tokenizer(s, add_special_tokens=False)["input_ids"]) + [EOS]  # noqa: E731
    batch = [Experience(policy.encode_prompt("2+2="), ids("4"), 1.0), Experience(policy.encode_prompt("2+2="), ids("five"), -1.0)]
    for _ in range(2):  # lora_B starts at zero: two steps make both A and B non-trivial
        assert policy.update(batch).stepped
    return policy


def lora_policy(base_dir: Path) -> HFPolicy:
    lora = LoraSettings(rank=4, alpha=8)
    return trained(HFPolicy.from_config(PolicyConfig(model_path=str(base_dir), device="cpu", lora=lora, grpo=GRPOConfig(lr=1e-2))))


def same_logits(merged_dir: Path, policy: HFPolicy) -> None:
    merged = AutoModelForCausalLM.from_pretrained(merged_dir)
    assert not any("lora" in n for n, _ in merged.named_parameters())
    tok = AutoTokenizer.from_pretrained(merged_dir)
    assert tok("a+b", add_special_tokens=False)["input_ids"] == policy.tokenizer("a+b", add_special_tokens=False)["input_ids"]
    ids = torch.tensor([policy.encode_prompt("2+2=4 and more")])
    if hasattr(policy, "activate"):
        policy.activate()  # type: ignore[attr-defined]
    with torch.no_grad():
        assert torch.allclose(merged(input_ids=ids).logits, policy.model(input_ids=ids).logits, atol=1e-5)


def test_merge_equals_the_peft_model(tmp_path: Path, base_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pol = lora_policy(base_dir)
    pol.save(tmp_path / "adapter")
    assert read_adapter_config(tmp_path / "adapter")["base_model_name_or_path"] == str(base_dir)
    assert main(["merge", str(tmp_path / "adapter"), "--out", str(tmp_path / "merged")]) == 0
    assert "merged" in capsys.readouterr().out
    assert (tmp_path / "merged" / "config.json").is_file()
    same_logits(tmp_path / "merged", pol)
    # an existing non-empty --out is refused unless --overwrite
    assert main(["merge", str(tmp_path / "adapter"), "--out", str(tmp_path / "merged")]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert main(["merge", str(tmp_path / "adapter"), "--out", str(tmp_path / "merged"), "--overwrite"]) == 0


def test_merge_with_explicit_base(tmp_path: Path, base_dir: Path) -> None:
    pol = lora_policy(base_dir)
    pol.save(tmp_path / "adapter")
    cfg_file = tmp_path / "adapter" / "adapter_config.json"
    data = json.loads(cfg_file.read_text())
    data["base_model_name_or_path"] = None  # an adapter that does not record its base
    cfg_file.write_text(json.dumps(data))
    with pytest.raises(MergeError, match="--base"):
        merge_adapter(tmp_path / "adapter", tmp_path / "m1")
    merge_adapter(tmp_path / "adapter", tmp_path / "m2", base=str(base_dir), dtype="float32")
    same_logits(tmp_path / "m2", pol)


def test_merge_works_on_shared_base_checkpoints(tmp_path: Path, base_dir: Path) -> None:
    cfg = PolicyConfig(model_path=str(base_dir), device="cpu", lora=LoraSettings(rank=4, alpha=8), grpo=GRPOConfig(lr=1e-2))
    sb = SharedBase.from_configs(cfg, cfg)
    for role, pol in sb.views.items():
        trained(pol)
        pol.save(tmp_path / "ckpt" / role)
    for role, pol in sb.views.items():
        assert main(["merge", str(tmp_path / "ckpt" / role), "--out", str(tmp_path / f"merged_{role}")]) == 0
        same_logits(tmp_path / f"merged_{role}", pol)


def test_merge_errors(tmp_path: Path, base_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = ["--out", str(tmp_path / "out")]
    assert main(["merge", str(tmp_path / "nowhere"), *out]) == 2
    assert "adapter directory not found" in capsys.readouterr().err
    assert main(["merge", str(base_dir), *out]) == 2  # a full model, not an adapter
    assert "no adapter_config.json" in (err := capsys.readouterr().err) and "full model" in err
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "adapter_config.json").write_text("{not json")
    assert main(["merge", str(bad), *out]) == 2
    assert "not valid JSON" in capsys.readouterr().err
    (bad / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "base_model_name_or_path": str(base_dir)}))
    assert main(["merge", str(bad), *out]) == 2
    assert "no adapter weights" in capsys.readouterr().err
    (bad / "adapter_config.json").write_text(json.dumps({"peft_type": "PREFIX_TUNING"}))
    assert main(["merge", str(bad), *out]) == 2
    assert "only LoRA" in capsys.readouterr().err
    pol = lora_policy(base_dir)
    pol.save(tmp_path / "adapter")
    assert main(["merge", str(tmp_path / "adapter"), *out, "--base", str(tmp_path / "no_base")]) == 2
    assert "cannot load the base model" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_merge_help_documents_every_option() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    merge = sub.choices["merge"]  # type: ignore[attr-defined]
    text = merge.format_help()
    for action in merge._actions:
        assert action.help, action.dest
        for opt in action.option_strings:
            assert opt in text
    assert "ADAPTER_DIR" in text and "adapter_config.json" in text
