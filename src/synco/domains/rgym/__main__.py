"""``python -m synco.domains.rgym``: the families a card may name, with their fields and curriculum levels.

Each family: whether its partial scores are trusted (``partial``), then each curriculum attribute with the config
field(s) it bounds and its levels, then the fields outside the curriculum a card may set (synco's table). Any other
field is refused, ``seed`` and ``size`` always (synco owns them).
"""

from __future__ import annotations

import sys

from synco.domains.rgym.catalog import SYNCO_FIELDS, families_from
from synco.domains.rgym.gym import Gym


def listing() -> str:
    gym = Gym()
    try:
        families = families_from(gym.describe())
    finally:
        gym.close()
    out = []
    for family in families.values():
        out.append(f"{family.name}  ({family.n_levels} levels; reward: "
                   f"{'the score (partial credit audited)' if family.partial_credit else '1 on a full score only'})")
        for attr in family.attributes:
            out.append(f"  {attr.name}: {' / '.join(attr.fields)} in levels {list(attr.levels)}"
                       + ("  (lower < upper)" if attr.interval else ""))
        for name, values in family.extra.items():
            out.append(f"  {name}: one of {list(values)}")
        fixed = sorted(set(family.defaults) - SYNCO_FIELDS - {f for a in family.attributes for f in a.fields}
                       - set(family.extra))
        if fixed:
            out.append(f"  (not steerable: {', '.join(fixed)})")
    return "\n".join(out)


if __name__ == "__main__":
    print(__doc__.split("\n\n")[0])
    print(listing())
    sys.exit(0)
