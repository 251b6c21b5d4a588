"""PII redaction learned without human annotation (``../shared/papers/wikipii-pii-extraction-federated.txt``).

* :mod:`.annotate`: auto-annotation of documents from their known PII fields (noisy BIO labels);
* :mod:`.recognizers`: regex recognizers (e-mail, phone, SSN, card numbers with Luhn, dates);
* :mod:`.tagger`: a PII tagger (BiLSTM, or all-MiniLM-L6-v2) trained on the noisy labels, centrally,
  federated over K sites, or with client DP-SGD (imports torch: not imported here);
* :mod:`.redact`: redaction with typed placeholders or consistent surrogates;
* :mod:`.mechanism`: the registered mechanism ``pii_redaction`` and its leaky twin.
"""

from __future__ import annotations

from .annotate import (
    AnnotatedDoc,
    AutoAnnotator,
    degrade_fields,
    evaluate_annotation,
    name_variants,
)
from .mechanism import LeakyPIIRedactionFirstMention, PIIRedaction
from .recognizers import PIISpan, luhn_ok, recognize
from .redact import PIIRedactor, RedactionResult, redact_file

__all__ = [
    "AutoAnnotator",
    "AnnotatedDoc",
    "evaluate_annotation",
    "degrade_fields",
    "name_variants",
    "PIISpan",
    "recognize",
    "luhn_ok",
    "PIIRedaction",
    "LeakyPIIRedactionFirstMention",
    "PIIRedactor",
    "RedactionResult",
    "redact_file",
]
