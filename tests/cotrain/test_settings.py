"""What a mode means, declared once (``MODE_TRAITS``): the step's settings, the card source and the config read it."""

from __future__ import annotations

import typing

from synco.config import load_config
from synco.cotrain.cards import CorpusCards, DesignerCards, SynthesizerCards, card_source
from synco.cotrain.settings import MODE_TRAITS, Mode, StepSettings


def test_every_mode_declares_its_traits_and_the_settings_read_them() -> None:
    assert set(MODE_TRAITS) == set(typing.get_args(Mode))
    table = {mode: (s.trains_synthesizer, s.revisits_corpus, s.reads_report, s.cells_decide_cards)
             for mode in MODE_TRAITS for s in [StepSettings(mode=mode)]}  # type: ignore[arg-type]
    assert table == {"cotrain": (True, False, True, True), "frozen": (False, False, True, True),
                     "static": (False, True, False, False), "uniform": (False, False, False, False),
                     "designer": (False, False, False, True)}


def test_the_card_source_follows_the_traits() -> None:
    assert isinstance(card_source("uniform", True, None), CorpusCards)
    static = card_source("static", True, ["1+2"])
    assert isinstance(static, CorpusCards) and static.corpus == ["1+2"]
    assert isinstance(card_source("designer", True, None), DesignerCards)
    for mode, designer in (("cotrain", True), ("frozen", False)):
        source = card_source(mode, designer, None)
        assert type(source) is SynthesizerCards and source.designer is designer


def test_the_config_asks_the_traits_who_trains() -> None:
    assert not load_config("arith").frozen("synthesizer")
    assert load_config("arith", overrides=["mode=frozen"]).frozen("synthesizer")
    assert load_config("arith", overrides=["protocol=rft"]).frozen("synthesizer")  # rft runs static
    assert not load_config("arith", overrides=["mode=frozen"]).frozen("reasoner")
