"""Organisation, business and venue names: the words that make a capitalised phrase a company, not a person
or a town (issue 32, sixth round).

A name built from a surname or a place and a business noun (``Ridge Dental``, ``Harbourside Lettings``,
``Hartley Green Food Bank``, ``Studio Legale Bellandi``, ``Palestra Olimpia``) looks like a person or a town
to the CRF and to the gazetteers. The annotation table (``benchmarks/pii_eval/README.md``) says company and
product names are not PII, while a named place tied to a person (``St. Mary's Hospital``) is a LOC: so the
nouns of places of care (hospital, clinic, surgery, health centre) are *not* in these lists.

* :data:`ORG_TAILS`: business nouns and legal forms that end an organisation's name (``... Dental``,
  ``... Lettings``, ``... GmbH``, ``... & Sons``) in the supported languages;
* :data:`ORG_HEADS`: nouns that open one (``Agence ...``, ``Studio Legale ...``, ``Trattoria da ...``,
  ``Kita ...``).

:func:`is_org_span` tells whether a PERSON / LOC span is (part of) such a name; :mod:`.crf` drops those.
"""

from __future__ import annotations

import re

from .context import fold

__all__ = ["ORG_TAILS", "ORG_HEADS", "LEGAL_FORMS", "is_org_span", "is_org_word"]

#: legal forms (matched case-sensitively, with their dots)
LEGAL_FORMS = (
    "Ltd Limited LLC Inc Corp Co. Company GmbH AG KG OHG SE S.A. SA S.L. SL B.V. BV N.V. NV S.p.A. SpA "
    "S.r.l. Srl SRL Pty Pte PLC plc LLP SARL SAS SPRL Oy AB ApS A/S AS Lda Ltda Lda. Bhd Sdn ASD Coop. "
    "e.V. eG mbH L.P. LP"
).split()

#: business nouns that end an organisation's name (folded; a capitalised word of the text is folded first)
ORG_TAILS = frozenset(
    fold(w)
    for w in
    # English
    "dental dentistry dentists lettings estates realty properties property homes housing bank banking "
    "credit union post motors autos garage bakery bakeries cafe coffee restaurant bistro grill diner "
    "pizzeria hotel hotels hostel resort salon barbers hairdressers beauty fitness gym studios gallery "
    "pharmacy chemist chemists opticians optometrists vets veterinary diagnostics laboratories labs "
    "medical healthcare solicitors lawyers legal attorneys associates partners accountants accounting "
    "consulting consultants consultancy services solutions systems technologies software digital media "
    "group holdings industries enterprises ventures capital finance financial insurance logistics freight "
    "transport haulage removals couriers express airlines airways travel tours supplies supply trading "
    "wholesale retail stores foods farms dairy brewery winery joinery plumbing heating electrical "
    "roofing builders construction cleaning catering printing designs agency management support charity "
    "trust foundation society association federation club library museum theatre cinema summit "
    "conference festival expo sons brothers bros mobile telecom energy water utilities analytics"
    # Dutch / German / Nordic
    " verhuizingen verhuisbedrijf installatietechniek makelaars makelaardij bakkerij tandartsen apotheek "
    "advocaten notarissen immobilien bäckerei apotheke autohaus versicherung versicherungen reisen "
    "steuerberatung rechtsanwälte söhne zonen forening foreningen fonden"
    # Romance languages
    " abogados asesores asociados inmobiliaria farmacia panadería ferretería seguros viajes transportes "
    "construcciones hijos avocats associés immobilier pharmacie boulangerie assurances transports "
    "voyages fils avvocati associati immobiliare panificio assicurazioni trasporti viaggi figli "
    "advogados imobiliária padaria filhos"
    # Polish
    " apteka piekarnia ubezpieczenia nieruchomości przeprowadzki".split()
)

#: nouns that open an organisation's / venue's name (folded)
ORG_HEADS = frozenset(
    fold(w)
    for w in "agence agencia agenzia studio bufete despacho kancelaria cabinet laboratoires laboratorio "
    "laboratório hotel hôtel pousada hostal restaurant restaurante ristorante trattoria osteria pizzeria tabac "
    "boulangerie bäckerei farmacia pharmacie apotheke apteka oficina taller palestra gimnasio kita stadt "
    "comune ayuntamiento grupo gruppo groupe coop cooperativa banco banca banque fundación fondazione "
    "fondation stiftung fonden dierenkliniek huisartsenpraktijk tandartspraktijk praxis kuaför espaço "
    "coworking vårdcentralen parkrun immo bilhyra".split()
)

_LEGAL_RE = "|".join(re.escape(x) for x in sorted(LEGAL_FORMS, key=len, reverse=True))
#: the next capitalised word after a name, past an "&" / "and" / "y" / "e" / "et" / "und" ("Dunne & Moran")
#: (one space between words: a column gap or a line break ends the name; a word before ":" is a form label)
_NEXT_WORD = re.compile(
    r" (?:(?:&|and|y|e|et|und|en|i) |&)?([A-ZÀ-Þ][\w'’.-]*)(?![\w'’.-]*[ \t]*:)"
)
_LEGAL_AFTER = re.compile(r"(?: (?:& )?[A-ZÀ-Þ][\w&'’-]*){0,3}? (?:" + _LEGAL_RE + r")(?!\w)")
#: before a name on its line: a head noun, then optionally a particle ("Trattoria da Nino", "Studio Legale")
#: ("Hotel Granvia Kyoto", "Huisartsenpraktijk De Linde": up to two capitalised words between)
_HEAD_BEFORE = re.compile(
    r"([A-ZÀ-Þ][\w'’-]*)((?: (?:Legale|Legal|da|de|del|di|do|la|le|el|the|des|du))?)"
    r"(?: [A-ZÀ-Þ][\w'’-]*){0,2} \Z"
)


_LEGAL_FOLDED = frozenset(fold(x.rstrip(".")) for x in LEGAL_FORMS) | {
    "corporation",
    "incorporated",
}


def is_org_word(w: str) -> bool:
    """A capitalised business noun or legal form (``Ltd.``, ``Inc``, ``Corporation``, ``Lettings``)."""
    f = fold(w.rstrip(".,"))
    return w[:1].isupper() and (f in ORG_TAILS or (f in _LEGAL_FOLDED and len(f) > 2))


def _tail(w: str) -> bool:
    return w[:1].isupper() and fold(w.rstrip(".")) in ORG_TAILS


def is_org_span(text: str, start: int, end: int, label: str = "PERSON") -> bool:
    """Whether ``text[start:end]`` (a PERSON / LOC span) names an organisation: a word of it is a business
    noun (a head anywhere but its end, a tail anywhere but its start: ``Palestra Olimpia``, ``Ridge Dental``),
    the words after it on its line end in one or in a legal form within three capitalised words
    (``Arrieta`` in ``Arrieta & Solís Abogados``), or a head noun comes before it, at most two capitalised
    words earlier (``Trattoria da Nino``, ``Hotel Granvia Kyoto``; a ``label`` LOC right after ``Agence de``
    is the branch's town and stays)."""
    words = text[start:end].split()
    if not words:
        return False
    if any(_tail(w) for w in words[1:]) or any(fold(w) in ORG_HEADS for w in words[:-1]):
        return True
    if fold(words[0]) in ORG_HEADS and re.match(r" [A-ZÀ-Þ]", text[end : end + 2]):
        return True  # "Kita" of "Kita Sonnenblume"
    if _LEGAL_AFTER.match(text, end):
        return True
    pos = end  # the words after it on its line: up to three capitalised words, then a business noun
    for _ in range(4):
        m = _NEXT_WORD.match(text, pos)
        if m is None:
            break
        if _tail(m.group(1)):
            return True
        pos = m.end()
    line_start = text.rfind("\n", 0, start) + 1
    h = _HEAD_BEFORE.search(text[max(line_start, start - 60) : start])
    if not h or fold(h.group(1)) not in ORG_HEADS:
        return False
    # a town after "Agence de" is where the branch is ("Agence de Saint-Herblain"): a place, kept
    return not (
        label == "LOC"
        and h.group(2)
        and h.end(2) == len(text[max(line_start, start - 60) : start]) - 1
    )
