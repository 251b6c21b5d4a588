"""A binary sentiment-style classification set (reviews and comments) from templates.

Used by the private-classification parts (DP fine-tuning of a BERT classifier, the MPC text
classifier of ``../shared/papers/mpc-cnn-private-text-classification.txt``). Sentences are
natural-looking reviews built from templates and the hand-written :data:`LEXICON`. The label is
the overall polarity; sentences mix in a contrasting clause and negations ("not great"), so no
single word decides the label, but a bag-of-words model learns it (> 85% accuracy).
Deterministic per ``seed`` (a seeded ``random.Random``; no global RNG).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from ..core.errors import check_range

__all__ = ["LEXICON", "LabeledDataset", "generate_sentiment"]

LEXICON: dict[str, list[str]] = {
    "positive": [
        "great",
        "excellent",
        "wonderful",
        "fantastic",
        "amazing",
        "delightful",
        "superb",
        "lovely",
        "pleasant",
        "reliable",
        "impressive",
        "friendly",
        "helpful",
        "comfortable",
        "charming",
        "outstanding",
        "brilliant",
        "enjoyable",
        "perfect",
        "solid",
        "tasty",
        "fresh",
        "spotless",
        "generous",
        "smooth",
        "sturdy",
        "elegant",
        "affordable",
        "cozy",
        "attentive",
        "fast",
        "clean",
        "beautiful",
        "satisfying",
        "refreshing",
        "memorable",
        "thoughtful",
        "welcoming",
        "flawless",
        "durable",
        "polished",
        "gorgeous",
        "stellar",
        "good",
    ],
    "negative": [
        "terrible",
        "awful",
        "horrible",
        "disappointing",
        "mediocre",
        "rude",
        "dirty",
        "broken",
        "slow",
        "bland",
        "overpriced",
        "noisy",
        "flimsy",
        "unreliable",
        "useless",
        "frustrating",
        "boring",
        "stale",
        "greasy",
        "cramped",
        "confusing",
        "unpleasant",
        "dreadful",
        "shoddy",
        "careless",
        "cold",
        "soggy",
        "faulty",
        "sloppy",
        "tedious",
        "clumsy",
        "poor",
        "lousy",
        "filthy",
        "unhelpful",
        "annoying",
        "dull",
        "cheap",
        "defective",
        "inedible",
        "uncomfortable",
        "buggy",
        "sticky",
        "bad",
    ],
}

_SUBJECTS = {
    "restaurant": (
        "food",
        "service",
        "waiter",
        "dessert",
        "menu",
        "atmosphere",
        "soup",
        "pasta",
        "coffee",
    ),
    "hotel": ("room", "staff", "bed", "breakfast", "lobby", "bathroom", "view", "pool", "check-in"),
    "product": (
        "battery",
        "screen",
        "design",
        "packaging",
        "manual",
        "charger",
        "handle",
        "material",
        "price",
    ),
    "movie": (
        "plot",
        "acting",
        "soundtrack",
        "ending",
        "script",
        "pacing",
        "cast",
        "dialogue",
        "visuals",
    ),
    "app": (
        "interface",
        "update",
        "login",
        "search",
        "layout",
        "notifications",
        "support team",
        "checkout",
    ),
    "course": (
        "lectures",
        "instructor",
        "assignments",
        "slides",
        "exam",
        "readings",
        "tutor",
        "schedule",
    ),
}
_NAMES = {
    "restaurant": "restaurant",
    "hotel": "hotel",
    "product": "blender",
    "movie": "movie",
    "app": "app",
    "course": "course",
}
_INTENS = ("", "", "really ", "very ", "quite ", "truly ", "pretty ", "incredibly ", "rather ")
_OPEN_POS = (
    "I would come back again.",
    "Highly recommended.",
    "Five stars from me.",
    "Will buy again.",
    "My friends loved it too.",
    "Worth every penny.",
)
_OPEN_NEG = (
    "I will not come back.",
    "Save your money.",
    "One star.",
    "I asked for a refund.",
    "Never again.",
    "What a waste of time.",
)
_NEUTRAL = (
    "We went there last weekend.",
    "I tried it for a month.",
    "This was my second visit.",
    "I bought it on sale.",
    "We watched it on Friday night.",
    "I signed up in spring.",
    "",
    "My sister recommended it.",
    "It arrived on Tuesday.",
)


@dataclass(frozen=True)
class LabeledDataset:
    """Texts with integer labels (1 = positive, 0 = negative).

    Attributes:
        texts: the texts.
        labels: one label per text (1 = positive, 0 = negative).
    """

    texts: tuple[str, ...]
    labels: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.texts)

    def split(self, test_fraction: float = 0.2) -> tuple[LabeledDataset, LabeledDataset]:
        """Deterministic head/tail split (the data are already shuffled)."""
        k = len(self.texts) - int(round(len(self.texts) * test_fraction))
        return (
            LabeledDataset(self.texts[:k], self.labels[:k]),
            LabeledDataset(self.texts[k:], self.labels[k:]),
        )


def _phrase(r: random.Random, polarity: str) -> str:
    """An adjective phrase with the given polarity (sometimes a negated opposite)."""
    other = "negative" if polarity == "positive" else "positive"
    if r.random() < 0.12:
        return f"not {r.choice(('very ', '', '', 'exactly '))}{r.choice(LEXICON[other])}"
    return r.choice(_INTENS) + r.choice(LEXICON[polarity])


def _sentence(r: random.Random, label: int) -> str:
    pol = "positive" if label else "negative"
    opp = "negative" if label else "positive"
    dom = r.choice(tuple(_SUBJECTS))
    subj = _SUBJECTS[dom]
    a1, a2, a3 = r.sample(subj, 3)
    name = _NAMES[dom]
    parts = [r.choice(_NEUTRAL)]
    form = r.randrange(5)
    if form == 0:
        parts.append(f"The {a1} was {_phrase(r, pol)} and the {a2} was {_phrase(r, pol)}.")
    elif form == 1:
        parts.append(
            f"Although the {a1} was {_phrase(r, opp)}, the {a2} was {_phrase(r, pol)} "
            f"and the {a3} felt {_phrase(r, pol)}."
        )
    elif form == 2:
        parts.append(
            f"Overall a {r.choice(_INTENS)}{r.choice(LEXICON[pol])} {name}. The {a1} was {_phrase(r, pol)}."
        )
    elif form == 3:
        parts.append(
            f"The {a1} seemed {_phrase(r, opp)} at first, but honestly the whole {name} "
            f"turned out {_phrase(r, pol)}, and the {a2} was {_phrase(r, pol)}."
        )
    else:
        parts.append(f"I found the {a1} {_phrase(r, pol)}.")
    if r.random() < 0.5:
        parts.append(r.choice(_OPEN_POS if label else _OPEN_NEG))
    return " ".join(p for p in parts if p)


def generate_sentiment(n: int = 2000, *, seed: int = 0) -> LabeledDataset:
    """``n`` review-style sentences with balanced binary labels (deterministic per ``seed``).

    Args:
        n: the number of sentences, an integer in [1, 10**7].
        seed: the generator seed, an integer in [0, 2**63 - 1] (keyword-only).

    Returns:
        The dataset, labels balanced (``i % 2``) and shuffled.

    Raises:
        InvalidArgument: ``n`` or ``seed`` out of range.
    """
    check_range("n", n, 1, 10**7, integer=True)
    check_range("seed", seed, 0, 2**63 - 1, integer=True)
    r = random.Random(f"privnlp-sentiment-v1:{seed}")
    labels = [i % 2 for i in range(int(n))]
    r.shuffle(labels)
    texts = tuple(_sentence(r, y) for y in labels)
    return LabeledDataset(texts, tuple(labels))
