"""The bundled synthetic private corpus: emails, clinical-style notes and chat messages.

Text is written by many synthetic users, each with a persona (own name, greeting and
sign-off style, favourite topics, typical contacts, punctuation habits), so that per-user
splits are non-IID as in federated learning (see ``../shared/papers/unintended-memorization-under-fl.txt``
and ``../shared/papers/record-level-privacy-leakage-in-fl.txt``). Records contain PII
(PERSON, SSN, PHONE, ADDRESS, DATE, ORG, EMAIL, LOC) with gold character spans, in the spirit
of the PII-extraction setting of ``../shared/papers/wikipii-pii-extraction-federated.txt``.

Texts are built by concatenating template pieces while recording offsets, so every gold span is
exact by construction. Generation is deterministic per ``seed``: a seeded ``random.Random`` per
user and per record, and one ``Faker`` instance reseeded with ``seed_instance`` (never the global
``Faker.seed``); user ``u`` gets the same persona and records whatever ``n_users`` is.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import random
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import InvalidArgument, MalformedInput, check_range
from ..core.report import atomic_write_text

__all__ = [
    "Span",
    "Record",
    "PrivateCorpus",
    "generate_corpus",
    "KINDS",
    "LABELS",
    "tokenize",
    "spans_to_bio",
    "read_jsonl_corpus",
]

KINDS = ("email", "note", "chat")
LABELS = ("PERSON", "SSN", "PHONE", "ADDRESS", "DATE", "ORG", "EMAIL", "LOC")

_TOKEN_RE = re.compile(r"\w+|[^\w\s]", re.UNICODE)


@dataclass(frozen=True)
class Span:
    """A gold entity: ``text[start:end]`` has label ``label``.

    Attributes:
        start: first character offset (inclusive).
        end: last character offset (exclusive).
        label: the entity label (one of :data:`LABELS` in the generated corpus).
    """

    start: int
    end: int
    label: str

    def to_dict(self) -> dict:
        return {"start": self.start, "end": self.end, "label": self.label}


def tokenize(text: str) -> list[tuple[str, int, int]]:
    """Words and punctuation marks with their character offsets (``\\w+|[^\\w\\s]``).

    Args:
        text: the text to split.

    Returns:
        ``(token, start, end)`` triples with character offsets into ``text``.
    """
    return [(m.group(), m.start(), m.end()) for m in _TOKEN_RE.finditer(text)]


def spans_to_bio(text: str, spans: Sequence[Span]) -> tuple[list[str], list[str]]:
    """Tokenize ``text`` and align BIO tags from character ``spans``.

    A token belongs to a span when it overlaps it; the first such token gets ``B-``.

    Args:
        text: the text to tokenize with :func:`tokenize`.
        spans: character-offset entity spans.

    Returns:
        ``(tokens, tags)``: the tokens and one BIO tag per token (``"O"`` outside every span).
    """
    toks = tokenize(text)
    tags = ["O"] * len(toks)
    for sp in sorted(spans, key=lambda s: s.start):
        first = True
        for i, (_, s, e) in enumerate(toks):
            if e <= sp.start or s >= sp.end:
                continue
            tags[i] = ("B-" if first else "I-") + sp.label
            first = False
    return [t for t, _, _ in toks], tags


@dataclass(frozen=True)
class Record:
    """One private text written by ``user_id``, with gold PII spans.

    Attributes:
        id: unique record id.
        user_id: the author (the unit of user-level privacy).
        kind: ``"email"``, ``"note"`` or ``"chat"`` in the generated corpus.
        text: the text.
        spans: the gold PII spans in ``text``.
    """

    id: str
    user_id: str
    kind: str
    text: str
    spans: tuple[Span, ...] = ()

    def entities(self) -> list[tuple[str, str]]:
        """``(entity text, label)`` for every gold span."""
        return [(self.text[s.start : s.end], s.label) for s in self.spans]

    def tokens_and_tags(self) -> tuple[list[str], list[str]]:
        """Word/punctuation tokens and their BIO tags (aligned from the character spans)."""
        return spans_to_bio(self.text, self.spans)

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "user_id": self.user_id,
            "kind": self.kind,
            "text": self.text,
            "spans": [s.to_dict() for s in self.spans],
        }

    @classmethod
    def from_dict(cls, d: dict) -> Record:
        return cls(
            id=str(d["id"]),
            user_id=str(d["user_id"]),
            kind=str(d["kind"]),
            text=str(d["text"]),
            spans=tuple(
                Span(int(s["start"]), int(s["end"]), str(s["label"])) for s in d.get("spans", ())
            ),
        )


@dataclass(frozen=True)
class PrivateCorpus:
    """A frozen collection of :class:`Record` (ordered by user, then record).

    Attributes:
        records: the records, ordered by user, then record.
        seed: the generator seed (``None`` for a corpus read from a file).
        config: the generator settings (not part of equality).
        known_fields: record id -> {label: [values]}, the PII fields an institution holds for each record
            (see the field comment); not part of equality.
    """

    records: tuple[Record, ...]
    seed: int | None = None
    config: dict = field(default_factory=dict, compare=False, hash=False)
    #: record id -> {label: [values]}: the PII fields an institution holds for each record (the author's
    #: profile, the author's address book, a note's patient), *not* where they occur in the text; filled
    #: by :func:`generate_corpus` (used by ``privnlp.mechanisms.pii`` auto-annotation). Not part of
    #: equality, ``to_jsonl`` or the texts.
    known_fields: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self):
        return iter(self.records)

    def __getitem__(self, i):
        return self.records[i]

    @property
    def users(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for r in self.records:
            seen.setdefault(r.user_id, None)
        return tuple(seen)

    def texts(self) -> list[str]:
        return [r.text for r in self.records]

    def by_user(self) -> dict[str, list[Record]]:
        out: dict[str, list[Record]] = {}
        for r in self.records:
            out.setdefault(r.user_id, []).append(r)
        return out

    def label_set(self) -> tuple[str, ...]:
        return tuple(sorted({s.label for r in self.records for s in r.spans}))

    def to_jsonl(self, path: str | os.PathLike) -> Path:
        """Write one JSON object per record (atomically)."""
        text = "".join(json.dumps(r.to_dict(), ensure_ascii=False) + "\n" for r in self.records)
        return atomic_write_text(path, text)

    def to_conll(self, path: str | os.PathLike) -> Path:
        """Write ``token TAG`` lines, one blank line between records (atomically)."""
        lines: list[str] = []
        for r in self.records:
            toks, tags = r.tokens_and_tags()
            lines.append(f"# id = {r.id}")
            lines.extend(f"{t} {g}" for t, g in zip(toks, tags))
            lines.append("")
        return atomic_write_text(path, "\n".join(lines) + "\n")


def read_jsonl_corpus(path: str | os.PathLike) -> PrivateCorpus:
    """Read a corpus written by :meth:`PrivateCorpus.to_jsonl`.

    Args:
        path: a JSON Lines file, one record object (``id``, ``user_id``, ``kind``, ``text``, ``spans``) per line;
            blank lines are skipped.

    Returns:
        The corpus (``seed=None``, no ``known_fields``).

    Raises:
        MalformedInput: the file is not UTF-8, or a line is not a record.
        OSError: the file cannot be read.
    """
    path = Path(path)
    recs = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise MalformedInput(f"{path}: not valid UTF-8 ({e})") from None
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            recs.append(Record.from_dict(json.loads(line)))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise MalformedInput(f"{path}, line {i}: not a corpus record ({e})") from None
    return PrivateCorpus(tuple(recs))


# --------------------------------------------------------------------------------------
# vocabulary for the templates
# --------------------------------------------------------------------------------------

TOPICS = ("work", "health", "finance", "travel", "family", "shopping", "housing", "legal")

_GREETINGS = ("Hi", "Hello", "Dear", "Hey", "Good morning", "Hi there", "Greetings", "Morning")
_SIGNOFFS = (
    "Best,",
    "Thanks,",
    "Cheers,",
    "Regards,",
    "Kind regards,",
    "Warmly,",
    "Talk soon,",
    "Sincerely,",
    "All the best,",
    "Thank you,",
    "Many thanks,",
    "Take care,",
)
_CHAT_OPENERS = (
    "hey",
    "ok so",
    "lol",
    "omg",
    "btw",
    "quick question",
    "yo",
    "hmm",
    "fyi",
    "so",
    "guess what",
    "ugh",
    "heads up",
    "wait",
)
_EMOJI = (":)", ":D", ";)", ":(", ":P", "<3", ":-)", "xD")

_ITEMS = (
    "laptop",
    "blender",
    "winter jacket",
    "running shoes",
    "coffee maker",
    "bookshelf",
    "phone case",
    "vacuum cleaner",
    "desk lamp",
    "backpack",
    "air fryer",
    "headphones",
    "mattress",
    "rain boots",
    "toaster",
    "monitor",
    "printer",
    "sofa",
    "bicycle helmet",
    "water filter",
    "kettle",
    "rug",
    "camera",
    "tablet",
    "microwave",
    "garden hose",
    "sewing machine",
    "guitar strings",
    "duvet",
    "office chair",
    "dishwasher",
    "smartwatch",
    "yoga mat",
    "suitcase",
    "crib",
    "stroller",
)
_SYMPTOMS = (
    "persistent cough",
    "lower back pain",
    "migraine headaches",
    "chest tightness",
    "shortness of breath",
    "intermittent fever",
    "fatigue",
    "dizziness",
    "joint swelling",
    "abdominal pain",
    "skin rash",
    "insomnia",
    "nausea",
    "sore throat",
    "blurred vision",
    "palpitations",
    "numbness in the left hand",
    "elevated blood pressure",
    "seasonal allergies",
    "knee pain",
    "anxiety",
    "heartburn",
    "ear infection",
    "sinus congestion",
    "ankle sprain",
    "wrist fracture",
    "high cholesterol",
)
_MEDICATIONS = (
    "amoxicillin",
    "ibuprofen",
    "lisinopril",
    "metformin",
    "atorvastatin",
    "albuterol",
    "omeprazole",
    "sertraline",
    "levothyroxine",
    "prednisone",
    "cetirizine",
    "gabapentin",
    "amlodipine",
    "losartan",
    "naproxen",
    "azithromycin",
    "fluticasone",
    "melatonin",
    "hydrochlorothiazide",
    "montelukast",
    "acetaminophen",
    "doxycycline",
)
_PROCEDURES = (
    "blood panel",
    "chest X-ray",
    "MRI",
    "ECG",
    "ultrasound",
    "physical therapy",
    "allergy test",
    "colonoscopy",
    "vaccination",
    "follow-up visit",
    "CT scan",
    "urinalysis",
    "biopsy",
    "stress test",
    "eye exam",
    "dental cleaning",
)
_TASKS = (
    "quarterly report",
    "budget review",
    "client presentation",
    "project timeline",
    "hiring plan",
    "contract draft",
    "sales forecast",
    "team offsite",
    "product launch",
    "code review",
    "audit checklist",
    "marketing brief",
    "vendor invoice",
    "board deck",
    "onboarding schedule",
    "performance review",
    "inventory count",
    "grant proposal",
    "training session",
    "press release",
)
_PLACES = (
    "the airport",
    "the hotel",
    "the train station",
    "the conference center",
    "the beach house",
    "the museum",
    "the lake",
    "the ski lodge",
    "the campsite",
    "the old town",
    "the harbor",
    "the national park",
    "the vineyard",
    "the market",
)
_FOODS = (
    "lasagna",
    "tacos",
    "pancakes",
    "curry",
    "sushi",
    "apple pie",
    "soup",
    "barbecue",
    "pizza",
    "dumplings",
    "salad",
    "risotto",
    "brownies",
    "chili",
    "bagels",
    "paella",
    "ramen",
    "casserole",
)
_RELATIVES = (
    "mom",
    "dad",
    "sister",
    "brother",
    "aunt",
    "uncle",
    "grandma",
    "grandpa",
    "cousin",
    "son",
    "daughter",
    "niece",
    "nephew",
    "wife",
    "husband",
    "partner",
)
_FIN_THINGS = (
    "mortgage payment",
    "credit card statement",
    "tax return",
    "loan application",
    "savings account",
    "insurance claim",
    "wire transfer",
    "retirement account",
    "car loan",
    "student loan",
    "bank statement",
    "refund",
    "pay stub",
    "direct deposit",
)
_HOUSE_THINGS = (
    "lease",
    "security deposit",
    "leaking faucet",
    "broken heater",
    "rent",
    "moving truck",
    "roof repair",
    "parking permit",
    "utility bill",
    "key pickup",
    "noise complaint",
    "window replacement",
    "inspection",
    "storage unit",
)
_LEGAL_THINGS = (
    "custody agreement",
    "power of attorney",
    "will",
    "settlement offer",
    "court date",
    "deposition",
    "name change",
    "small claims filing",
    "notarized letter",
    "immigration paperwork",
    "divorce filing",
    "background check",
)
_ADJ = (
    "great",
    "quick",
    "long",
    "busy",
    "strange",
    "lovely",
    "stressful",
    "productive",
    "quiet",
    "hectic",
    "relaxing",
    "exhausting",
    "wonderful",
    "awkward",
    "rainy",
    "sunny",
    "slow",
    "crazy",
)
_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_TIMES = (
    "9am",
    "10:30",
    "noon",
    "2pm",
    "3:15",
    "4pm",
    "5:30",
    "7pm",
    "8 in the morning",
    "lunchtime",
)
_DATE_FORMATS = ("%B %d, %Y", "%m/%d/%Y", "%Y-%m-%d", "%d %B %Y", "%b %d, %Y", "%m-%d-%Y")
_PHONE_FORMATS = ("({a}) {b}-{c}", "{a}-{b}-{c}", "{a}.{b}.{c}", "+1 {a} {b} {c}", "+1-{a}-{b}-{c}")
_EMAIL_DOMAINS = (
    "gmail.com",
    "yahoo.com",
    "outlook.com",
    "hotmail.com",
    "protonmail.com",
    "icloud.com",
    "aol.com",
    "mail.com",
)

# Topic sentence templates. Slots: {contact} {contact_first} {me} {phone} {contact_phone} {ssn}
# {address} {date} {dob} {org} {other_org} {hospital} {email} {contact_email} {city} + fillers.
_EMAIL_SENTENCES: dict[str, tuple[str, ...]] = {
    "work": (
        "I finished the {task} for {org} and sent it to {contact} this morning{end}",
        "Could you review the {task} before our meeting on {date}{q}",
        "The team at {other_org} asked whether we can move the {task} to {weekday}{end}",
        "Please call me at {phone} if anything in the {task} looks off{end}",
        "I will be working from {city} until {date}, so ping me on my cell {phone}{end}",
        "Our new manager {person} starts on {date} and wants a summary of the {task}{end}",
        "{bs_cap} is the focus for next quarter, according to {person} at {other_org}{end}",
        "HR at {org} needs my SSN {ssn} again for the payroll update, can you believe it{end}",
        "Forward the {task} to {contact_email} and copy me at {email}{end}",
        "We are hiring a {job} and {person} recommended someone from {other_org}{end}",
    ),
    "health": (
        "My appointment at {hospital} is on {date} at {time}{end}",
        "Dr. {person} thinks the {symptom} might be related to stress{end}",
        "They prescribed {medication} twice a day for two weeks{end}",
        "The clinic asked for my date of birth, {dob}, and my insurance ID again{end}",
        "If they call, my number is {phone} and my SSN is {ssn}{end}",
        "I had a {procedure} at {hospital} and the results came back normal{end}",
        "Still dealing with {symptom}, so I might miss {weekday}{end}",
    ),
    "finance": (
        "The {fin} from {other_org} is due on {date}{end}",
        "I sent the {fin} documents to {contact} at {contact_email}{end}",
        "The bank needs my SSN {ssn} and current address {address} to finish the {fin}{end}",
        "Can you check whether the {fin} cleared before {date}{q}",
        "My accountant {person} said the {fin} looks fine this year{end}",
        "Please mail the forms to {address} before {weekday}{end}",
    ),
    "travel": (
        "I land in {city} on {date} and will head straight to {place}{end}",
        "The booking is under {me}, confirmation sent to {email}{end}",
        "We are staying near {place} in {city} until {date}{end}",
        "If the flight is delayed I will text you from {phone}{end}",
        "{person} recommended a small place near {place} with amazing {food}{end}",
        "My passport renewal asks for my date of birth {dob} and SSN {ssn}{end}",
    ),
    "family": (
        "My {relative} is visiting from {city} on {date}{end}",
        "We are making {food} for {relative_cap}'s birthday on {date}{end}",
        "Can you pick up {person} from school on {weekday}{q}",
        "{contact_first} said the kids loved the {food} last time{end}",
        "Send the photos to my {relative} at {contact_email}{end}",
        "The party is at our place, {address}, around {time}{end}",
    ),
    "shopping": (
        "I ordered a new {item} from {other_org} and it should arrive by {date}{end}",
        "The {item} broke after a week, so I am returning it to {other_org}{end}",
        "Deliver the {item} to {address}, please call {phone} on arrival{end}",
        "{other_org} charged me twice for the {item}{end}",
        "Do you still want my old {item}{q}",
    ),
    "housing": (
        "The landlord, {person}, says the {house} will be sorted by {date}{end}",
        "Our new address is {address}, starting {date}{end}",
        "I called {other_org} about the {house} but nobody picked up{end}",
        "The {house} at {address} still is not fixed{end}",
        "You can reach the property manager at {contact_phone}{end}",
    ),
    "legal": (
        "My lawyer {person} at {other_org} is preparing the {legal}{end}",
        "The {legal} hearing is scheduled for {date}{end}",
        "They need my full name, {me}, my SSN {ssn} and date of birth {dob} for the {legal}{end}",
        "Please send the signed {legal} to {address} by {date}{end}",
        "{contact} agreed to be a witness for the {legal}{end}",
    ),
}

_CHAT_SENTENCES: dict[str, tuple[str, ...]] = {
    "work": (
        "running late for the {task} meeting{end}",
        "did {person} send the {task} yet{q}",
        "call me {phone}{end}",
        "stuck at {org} till {time}{end}",
        "{other_org} moved the deadline to {date}{end}",
        "can u send it to {email}{q}",
    ),
    "health": (
        "doc appointment at {hospital} on {weekday}{end}",
        "this {symptom} is killing me{end}",
        "picked up the {medication}{end}",
        "results back from {hospital}, all good{end}",
        "they want my ssn {ssn} for the form again{end}",
    ),
    "finance": (
        "did the {fin} go through{q}",
        "venmo me for the {food}{end}",
        "bank called about the {fin}{end}",
        "my card number ends in {digits4}, the {fin} is due {date}{end}",
    ),
    "travel": (
        "just landed in {city}{end}",
        "flight to {city} on {date}{end}",
        "heading to {place} now{end}",
        "text me at {phone} when u get there{end}",
    ),
    "family": (
        "{relative} says hi{end}",
        "dinner at {time}? making {food}{end}",
        "can u grab {contact_first} from practice{q}",
        "{relative}'s bday is {date}{end}",
        "come over, we're at {address}{end}",
    ),
    "shopping": (
        "the {item} finally arrived{end}",
        "found a {item} on sale at {other_org}{end}",
        "should i get the {item}{q}",
        "returning the {item} tmrw{end}",
    ),
    "housing": (
        "landlord still hasn't fixed the {house}{end}",
        "new place is {address}{end}",
        "moving on {date}, need help{q}",
        "the {house} thing is a nightmare{end}",
    ),
    "legal": (
        "court date is {date}{end}",
        "lawyer {person} wants the {legal} signed{end}",
        "the {legal} is finally done{end}",
    ),
}

_NOTE_TEMPLATES = (
    "Patient: {patient}. DOB: {pdob}. SSN: {pssn}.\nSeen at {hospital} on {date} for {symptom}. "
    "Prescribed {medication}; follow-up {procedure} scheduled.\nContact: {pphone}. Address: {paddress}.\n"
    "Signed, Dr. {me}",
    "Clinical note ({date}). {patient} (DOB {pdob}) presents with {symptom} and {symptom2}. "
    "History of {symptom3}. Plan: start {medication}, order {procedure}. Emergency contact {pcontact}, phone {pphone}.",
    "Visit summary - {hospital}\nName: {patient}\nDate of birth: {pdob}\nPhone: {pphone}\n"
    "Chief complaint: {symptom}. Assessment: likely {symptom2}. Referred to Dr. {person} at {hospital2} on {date2}.",
    "{patient}, SSN {pssn}, lives at {paddress}. Reports {symptom} since {date}. "
    "Employer: {porg}. Continue {medication}; recheck on {date2}. - Dr. {me_last}",
    "Discharge note for {patient} ({pdob}). Admitted to {hospital} on {date} with {symptom}. "
    "Discharged on {date2} on {medication}. Questions to {email} or {phone}.",
    "Phone consult {date}: {patient} called from {pphone} about {symptom}. Advised {medication} and "
    "a {procedure} at {hospital}. Insurance via {porg}.",
    "Intake form. Name: {patient}. SSN: {pssn}. DOB: {pdob}. Address: {paddress}. Email: {pemail}. "
    "Referred by {person} from {hospital2} for {procedure}.",
)


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:]


@dataclass
class _Person:
    first: str
    last: str
    email: str
    phone: str
    ssn: str
    address: str
    dob: _dt.date
    org: str

    @property
    def full(self) -> str:
        return f"{self.first} {self.last}"


@dataclass
class _Persona:
    me: _Person
    contacts: list
    greeting: str
    signoff: str
    topics: list
    topic_weights: list
    kind_weights: dict
    date_format: str
    phone_format: str
    exclaim: float
    lowercase_chat: bool
    emoji: str | None
    ellipsis: bool
    uses_first_names: bool
    signature_block: bool
    home_city: str


class _Builder:
    """Concatenate pieces while recording entity offsets."""

    _SLOT = re.compile(r"\{([a-z_0-9]+)\}")

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.n = 0
        self.spans: list[Span] = []

    def add(self, text: str, label: str | None = None) -> None:
        if not text:
            return
        if label is not None:
            self.spans.append(Span(self.n, self.n + len(text), label))
        self.parts.append(text)
        self.n += len(text)

    def template(
        self,
        tpl: str,
        slots: Callable[[str], tuple[str, str | None]],
        literal: Callable[[str], str] = lambda s: s,
    ) -> None:
        pos = 0
        for m in self._SLOT.finditer(tpl):
            self.add(literal(tpl[pos : m.start()]))
            value, label = slots(m.group(1))
            self.add(value, label)
            pos = m.end()
        self.add(literal(tpl[pos:]))

    def text(self) -> str:
        return "".join(self.parts)


def _fmt_phone(r: random.Random, fmt: str) -> str:
    a = f"{r.randint(201, 989)}"
    b = f"{r.randint(200, 999)}"
    c = f"{r.randint(0, 9999):04d}"
    return fmt.format(a=a, b=b, c=c)


def _ssn(r: random.Random) -> str:
    area = r.choice([x for x in range(1, 900) if x != 666])
    return f"{area:03d}-{r.randint(1, 99):02d}-{r.randint(1, 9999):04d}"


def _address(fake, r: random.Random) -> str:
    return f"{fake.street_address()}, {fake.city()}, {fake.state_abbr(include_territories=False)} {fake.postcode()}"


def _date(r: random.Random, lo: _dt.date, hi: _dt.date) -> _dt.date:
    return lo + _dt.timedelta(days=r.randint(0, (hi - lo).days))


_ORG_SUFFIX_RE = re.compile(r"[^A-Za-z0-9&' .,-]")


def _company(fake) -> str:
    return _ORG_SUFFIX_RE.sub("", fake.company())


def _person(fake, r: random.Random, phone_format: str) -> _Person:
    first, last = fake.first_name(), fake.last_name()
    style = r.randrange(4)
    local = [
        f"{first}.{last}",
        f"{first[0]}{last}",
        f"{first}{r.randint(1, 99)}",
        f"{first}_{last}",
    ][style].lower()
    local = re.sub(r"[^a-z0-9._]", "", local)
    return _Person(
        first=first,
        last=last,
        email=f"{local}@{r.choice(_EMAIL_DOMAINS)}",
        phone=_fmt_phone(r, phone_format),
        ssn=_ssn(r),
        address=_address(fake, r),
        dob=_date(r, _dt.date(1940, 1, 1), _dt.date(2004, 12, 31)),
        org=_company(fake),
    )


def _make_persona(fake, r: random.Random) -> _Persona:
    phone_format = r.choice(_PHONE_FORMATS)
    me = _person(fake, r, phone_format)
    contacts = [_person(fake, r, r.choice(_PHONE_FORMATS)) for _ in range(r.randint(2, 5))]
    k = r.randint(2, 3)
    topics = r.sample(TOPICS, k)
    weights = sorted((r.random() + 0.2 for _ in range(k)), reverse=True)
    kw = {kd: r.random() ** 2 + 0.05 for kd in KINDS}
    return _Persona(
        me=me,
        contacts=contacts,
        greeting=r.choice(_GREETINGS),
        signoff=r.choice(_SIGNOFFS),
        topics=topics,
        topic_weights=weights,
        kind_weights=kw,
        date_format=r.choice(_DATE_FORMATS),
        phone_format=phone_format,
        exclaim=r.choice((0.0, 0.1, 0.5, 0.8)),
        lowercase_chat=r.random() < 0.5,
        emoji=r.choice(_EMOJI) if r.random() < 0.5 else None,
        ellipsis=r.random() < 0.25,
        uses_first_names=r.random() < 0.6,
        signature_block=r.random() < 0.5,
        home_city=fake.city(),
    )


_BASE_LO = _dt.date(2018, 1, 1)
_BASE_HI = _dt.date(2024, 12, 31)


def _record(
    fake, p: _Persona, r: random.Random, kind: str, known: dict | None = None
) -> tuple[str, tuple[Span, ...]]:
    contact = r.choice(p.contacts)
    patient = _person(fake, r, r.choice(_PHONE_FORMATS))
    if known is not None:  # no random draw: the texts are the same with or without it
        known["patient"] = patient
    is_chat = kind == "chat"

    def fmt_date(d: _dt.date) -> str:
        s = d.strftime(p.date_format)
        return s

    def end() -> str:
        x = r.random()
        if x < p.exclaim:
            return "!"
        if p.ellipsis and x > 0.85:
            return "..."
        if is_chat:
            return "" if x > 0.7 else (f" {p.emoji}" if p.emoji and x > 0.5 else ".")
        return "."

    def slots(name: str) -> tuple[str, str | None]:
        f = {
            "me": lambda: (p.me.full, "PERSON"),
            "me_first": lambda: (p.me.first, "PERSON"),
            "me_last": lambda: (p.me.last, "PERSON"),
            "contact": lambda: (contact.full, "PERSON"),
            "contact_first": lambda: (
                contact.first if p.uses_first_names else contact.full,
                "PERSON",
            ),
            "person": lambda: (
                (fake.first_name() + " " if r.random() < 0.7 else "") + fake.last_name(),
                "PERSON",
            ),
            "phone": lambda: (p.me.phone, "PHONE"),
            "contact_phone": lambda: (contact.phone, "PHONE"),
            "ssn": lambda: (p.me.ssn, "SSN"),
            "address": lambda: (p.me.address, "ADDRESS"),
            "dob": lambda: (fmt_date(p.me.dob), "DATE"),
            "date": lambda: (fmt_date(_date(r, _BASE_LO, _BASE_HI)), "DATE"),
            "date2": lambda: (fmt_date(_date(r, _BASE_LO, _BASE_HI)), "DATE"),
            "org": lambda: (p.me.org, "ORG"),
            "other_org": lambda: (_company(fake), "ORG"),
            "hospital": lambda: (
                r.choice(
                    (
                        f"{p.home_city} General Hospital",
                        f"St. {contact.last} Medical Center",
                        f"{p.home_city} Family Clinic",
                    )
                ),
                "ORG",
            ),
            "hospital2": lambda: (
                f"{fake.city()} {r.choice(('Medical Center', 'Clinic', 'Hospital'))}",
                "ORG",
            ),
            "email": lambda: (p.me.email, "EMAIL"),
            "contact_email": lambda: (contact.email, "EMAIL"),
            "city": lambda: (r.choice((p.home_city, fake.city())), "LOC"),
            "patient": lambda: (patient.full, "PERSON"),
            "pdob": lambda: (fmt_date(patient.dob), "DATE"),
            "pssn": lambda: (patient.ssn, "SSN"),
            "pphone": lambda: (patient.phone, "PHONE"),
            "paddress": lambda: (patient.address, "ADDRESS"),
            "pemail": lambda: (patient.email, "EMAIL"),
            "porg": lambda: (patient.org, "ORG"),
            "pcontact": lambda: (fake.first_name() + " " + patient.last, "PERSON"),
            "digits4": lambda: (f"{r.randint(0, 9999):04d}", None),
            "task": lambda: (r.choice(_TASKS), None),
            "symptom": lambda: (r.choice(_SYMPTOMS), None),
            "symptom2": lambda: (r.choice(_SYMPTOMS), None),
            "symptom3": lambda: (r.choice(_SYMPTOMS), None),
            "medication": lambda: (r.choice(_MEDICATIONS), None),
            "procedure": lambda: (r.choice(_PROCEDURES), None),
            "item": lambda: (r.choice(_ITEMS), None),
            "place": lambda: (r.choice(_PLACES), None),
            "food": lambda: (r.choice(_FOODS), None),
            "relative": lambda: (r.choice(_RELATIVES), None),
            "relative_cap": lambda: (_cap(r.choice(_RELATIVES)), None),
            "fin": lambda: (r.choice(_FIN_THINGS), None),
            "house": lambda: (r.choice(_HOUSE_THINGS), None),
            "legal": lambda: (r.choice(_LEGAL_THINGS), None),
            "weekday": lambda: (r.choice(_WEEKDAYS), None),
            "time": lambda: (r.choice(_TIMES), None),
            "job": lambda: (fake.job().lower(), None),
            "bs_cap": lambda: (_cap(fake.bs()), None),
            "end": lambda: (end(), None),
            "q": lambda: (
                "?" if not (is_chat and p.lowercase_chat and r.random() < 0.4) else "",
                None,
            ),
        }.get(name)
        if f is None:  # pragma: no cover - template bug
            raise KeyError(f"unknown template slot {{{name}}}")
        return f()

    lower = (lambda s: s.lower()) if (is_chat and p.lowercase_chat) else (lambda s: s)
    b = _Builder()
    if kind == "note":
        b.template(r.choice(_NOTE_TEMPLATES), slots)
        if r.random() < 0.5:
            b.add(" ")
            b.template(
                _EMAIL_SENTENCES["health"][r.randrange(len(_EMAIL_SENTENCES["health"]))], slots
            )
        return b.text(), tuple(b.spans)

    topic = r.choices(p.topics, weights=p.topic_weights)[0]
    if kind == "email":
        b.add(p.greeting + " ")
        b.template("{contact_first}", slots)
        b.add(",\n\n")
        pool = _EMAIL_SENTENCES[topic]
        n = r.randint(2, 4)
        for i, s in enumerate(r.sample(pool, min(n, len(pool)))):
            if i:
                b.add(" ")
            b.template(s, slots)
        if r.random() < 0.3:
            other = r.choice([t for t in TOPICS if t != topic])
            b.add(" Also, ")
            s = r.choice(_EMAIL_SENTENCES[other])
            b.template(s if s.startswith(("{", "I ", "Dr.")) else s[:1].lower() + s[1:], slots)
        b.add("\n\n" + p.signoff + "\n")
        b.template("{me_first}" if p.uses_first_names else "{me}", slots)
        if p.signature_block:
            b.add("\n")
            b.template("{org} | {phone} | {email}", slots)
        return b.text(), tuple(b.spans)

    # chat
    if r.random() < 0.6:
        b.add(lower(r.choice(_CHAT_OPENERS)) + " ")
    pool = _CHAT_SENTENCES[topic]
    for i, s in enumerate(r.sample(pool, min(r.randint(1, 2), len(pool)))):
        if i:
            b.add(" ")
        b.template(s, slots, literal=lower)
    return b.text(), tuple(b.spans)


def _known_fields(p: _Persona, kind: str, patient: _Person) -> dict[str, list[str]]:
    """What an institution's database holds for one record, normalised as a database stores it (phones
    as digits, dates ISO): the author's profile and address book, and a note's patient."""
    people = [p.me, *p.contacts] + ([patient] if kind == "note" else [])
    out: dict[str, list[str]] = {lab: [] for lab in LABELS}
    for q in people:
        out["PERSON"].append(q.full)
        out["EMAIL"].append(q.email)
        out["PHONE"].append(re.sub(r"\D", "", q.phone)[-10:])
    for q in [p.me] + ([patient] if kind == "note" else []):
        out["SSN"].append(q.ssn)
        out["DATE"].append(q.dob.isoformat())
        out["ADDRESS"].append(q.address)
        out["ORG"].append(q.org)
    out["LOC"].append(p.home_city)
    return {k: list(dict.fromkeys(v)) for k, v in out.items() if v}


def _rng(*parts: object) -> random.Random:
    return random.Random(":".join(str(x) for x in ("privnlp-corpus-v1", *parts)))


def generate_corpus(
    n_users: int = 20, records_per_user: int = 10, *, seed: int = 0, kinds: Iterable[str] = KINDS
) -> PrivateCorpus:
    """Generate the bundled synthetic private corpus (deterministic per ``seed``).

    ``n_users`` users each write ``records_per_user`` records whose kind is drawn from the
    user's own preferences restricted to ``kinds``.

    Args:
        n_users: number of users (authors), in [1, 10**6].
        records_per_user: records each user writes, in [1, 10**6].
        seed: the corpus seed, in [0, 2**63 - 1]; same seed, same corpus on any machine (Faker-based).
        kinds: a non-empty subset of :data:`KINDS` (``"email"``, ``"note"``, ``"chat"``, ...).

    Returns:
        A :class:`PrivateCorpus`: ``records`` with gold PII ``spans`` (PERSON, SSN, PHONE, ADDRESS, DATE,
        ORG, EMAIL, ...) and ``known_fields`` (what each record's institution knows).

    Raises:
        InvalidArgument: a count or the seed out of range, or an unknown kind.
    """
    check_range("n_users", n_users, 1, 10**6, integer=True)
    check_range("records_per_user", records_per_user, 1, 10**6, integer=True)
    check_range("seed", seed, 0, 2**63 - 1, integer=True)
    kinds = tuple(kinds)
    if not kinds or any(k not in KINDS for k in kinds):
        raise InvalidArgument(f"kinds must be a non-empty subset of {KINDS}; got {kinds!r}")
    from faker import Faker  # deferred: faker: only generate_corpus needs it (data is a light path)

    fake = Faker("en_US")
    records: list[Record] = []
    known_fields: dict[str, dict[str, list[str]]] = {}
    for u in range(int(n_users)):
        ru = _rng(seed, "user", u)
        fake.seed_instance(ru.getrandbits(63))
        persona = _make_persona(fake, ru)
        uid = f"user{u:04d}"
        weights = [persona.kind_weights[k] for k in kinds]
        for j in range(int(records_per_user)):
            rr = _rng(seed, "record", u, j)
            fake.seed_instance(rr.getrandbits(63))
            kind = rr.choices(kinds, weights=weights)[0]
            known: dict = {}
            text, spans = _record(fake, persona, rr, kind, known)
            known_fields[f"{uid}-r{j:04d}"] = _known_fields(persona, kind, known["patient"])
            records.append(
                Record(id=f"{uid}-r{j:04d}", user_id=uid, kind=kind, text=text, spans=spans)
            )
    return PrivateCorpus(
        tuple(records),
        seed=int(seed),
        config={
            "n_users": int(n_users),
            "records_per_user": int(records_per_user),
            "kinds": list(kinds),
            "seed": int(seed),
        },
        known_fields=known_fields,
    )
