"""Generate the three tutorial notebooks in notebooks/ (unexecuted; CI executes them).

Edit the cells here, then run `python scripts/make_notebooks.py`.
"""

from __future__ import annotations

from pathlib import Path

import nbformat as nbf

ROOT = Path(__file__).resolve().parents[1]


def nb(cells: list[tuple[str, str]]) -> nbf.NotebookNode:
    book = nbf.v4.new_notebook()
    book.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    for kind, src in cells:
        book.cells.append(
            nbf.v4.new_markdown_cell(src) if kind == "md" else nbf.v4.new_code_cell(src)
        )
    return book


TRAINING = [
    (
        "md",
        "# (a) Wrap a training loop with a private optimizer and read epsilon\n\n"
        "DP-SGD on opacus (Abadi et al.; DP-BERT paper `dp-bert-and-dp-wordpiece.txt`): per-example clipping to "
        "`max_grad_norm`, Gaussian noise `sigma * C`, Poisson sampling, and an accountant that turns the steps into "
        "epsilon. A tiny GPT-2 is trained on the bundled synthetic private corpus (built here in seconds, no download).",
    ),
    (
        "code",
        "import numpy as np, torch\n"
        "torch.set_num_threads(1)\n"
        "from privnlp.data import generate_corpus\n"
        "from privnlp.models import train_bpe_tokenizer, tiny_gpt2, lm_batch\n"
        "texts = generate_corpus(n_users=20, records_per_user=5, seed=0).texts()\n"
        "tok = train_bpe_tokenizer(texts, vocab_size=600)\n"
        "model = tiny_gpt2(len(tok), n_layer=1, n_embd=32, n_head=2, seed=0)\n"
        "batch = lm_batch(tok, texts, max_length=48)\n"
        "dataset = torch.utils.data.TensorDataset(batch.input_ids, batch.attention_mask, batch.position_ids, batch.labels)\n"
        "loader = torch.utils.data.DataLoader(dataset, batch_size=16)\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.5)\n"
        "len(dataset)",
    ),
    (
        "md",
        "`make_private` returns the private model/optimizer/loader plus a ledger. With `target_epsilon` the noise is "
        "calibrated for the planned steps, and the budget is *hard*: the step that would exceed it raises "
        "`PrivacyBudgetExceeded` before it is taken.",
    ),
    (
        "code",
        "from privnlp.mechanisms.training import make_private, train_private, per_sample_lm_loss\n"
        "pt = make_private(model, optimizer, loader, target_epsilon=8.0, steps=12, max_grad_norm=1.0,\n"
        "                  accountant='rdp', rng=0)\n"
        "def loss_fn(m, b):\n"
        "    ids, mask, pos, labels = b\n"
        "    logits = m(input_ids=ids, attention_mask=mask, position_ids=pos).logits\n"
        "    return per_sample_lm_loss(logits, labels)\n"
        "result = train_private(pt, loss_fn, steps=12)\n"
        "print(f'noise multiplier {pt.optimizer.noise_multiplier:.3f}, steps {result.steps}, epsilon {pt.epsilon():.3f}')\n"
        "print(pt.privacy_statement())",
    ),
    (
        "code",
        "from privnlp.core.errors import PrivacyBudgetExceeded\n"
        "try:\n"
        "    train_private(pt, loss_fn, steps=50)\n"
        "except PrivacyBudgetExceeded as e:\n"
        "    print('refused:', e)\n"
        "print(f'epsilon after refusal: {pt.epsilon():.3f} (never above the target)')\n"
        "assert pt.epsilon() <= 8.0 + 1e-9",
    ),
]

SANITIZE = [
    (
        "md",
        "# (b) Sanitize a dataset with Vickrey and pick (epsilon, t) on the privacy-utility curve\n\n"
        "The Vickrey mechanism (`vickrey-mechanism-metric-dp.txt`) adds metric-DP noise to a word's embedding "
        "and releases the first or second nearest neighbour of the *noisy vector*. The embeddings here are a "
        "word2vec model trained on the bundled corpus (cached).",
    ),
    (
        "code",
        "import numpy as np\n"
        "from privnlp.mechanisms.text import Vickrey, LaplaceMetric, bundled_embeddings\n"
        "emb = bundled_embeddings()\n"
        "mech = Vickrey(epsilon=20.0, t=0.5, embeddings=emb)\n"
        "rng = np.random.default_rng(0)\n"
        "for s in ['The nurse called me about the appointment tomorrow.', 'This product was great and the service friendly.']:\n"
        "    out = mech.sanitize(s, rng=rng)\n"
        "    print(out.text)\n"
        "print(mech.claim().statement())",
    ),
    (
        "md",
        "The Bayesian adversary of Section 3.1 estimates the mechanism's channel f_M(w'|w) by Monte Carlo and "
        "reports its expected inference error E_M; the utility loss L_M here is the sentiment-flip rate on the "
        "bundled lexicon. Algorithm 2 doubles epsilon until L_M < C, then scans t.",
    ),
    (
        "code",
        "from privnlp.data.sentiment import LEXICON\n"
        "from privnlp.attacks.text.bayesian import sentiment_flip_loss\n"
        "from privnlp.mechanisms.text.tuning import select_parameters, tradeoff_points, plot_tradeoff\n"
        "lex = emb.restrict(words=list(LEXICON['positive']) + list(LEXICON['negative']))\n"
        "loss = sentiment_flip_loss(lex.words, LEXICON)\n"
        "prior = lex.counts / lex.counts.sum() if lex.counts is not None else None\n"
        "choice = select_parameters(lex, loss=loss, max_loss=0.05, prior=prior, n_samples=100, rng=np.random.default_rng(0))\n"
        "print(f'chosen epsilon={choice.epsilon:g}, t={choice.t:g}: E_M={choice.inference_error:.3f}, L_M={choice.utility_loss:.3f}')",
    ),
    (
        "code",
        "pts = tradeoff_points(lex, [5, 20, 80], loss=loss, prior=prior, n_samples=100, rng=np.random.default_rng(1))\n"
        "path = plot_tradeoff(pts, 'tradeoff.png', title='Bayesian adversary vs utility loss')\n"
        "from IPython.display import Image\n"
        "Image(path)",
    ),
]

EVALUATE = [
    (
        "md",
        "# (c) Evaluate a defense against the bundled attacks\n\n"
        "`privnlp.evaluation.audit` runs a defense's paired attacks on its scenario, once per seed, with and "
        "without the defense (and optionally its deliberately leaky twin), and returns a `LeakageReport`.",
    ),
    ("code", "import privnlp\nprint(privnlp.mechanisms.names())\nprint(privnlp.attacks.names())"),
    (
        "code",
        "from privnlp.evaluation import audit\n"
        "report = audit('dp_wordpiece', seeds=[0, 1], leaky_twin=True, progress=False)\n"
        "print(report.claim.statement()[:200])\n"
        "report.headline()",
    ),
    ("code", "from IPython.display import HTML, Markdown\nMarkdown(report.to_markdown())"),
    (
        "md",
        "## Bring your own defense\n\nAny object with `claim()` and the methods the scenario calls can be "
        "audited (a plain callable is wrapped in `FunctionMechanism`). The `text.perturbation` scenario calls "
        "`perturb_words(words, rng=...)`, and the Bayesian adversary estimates the channel through "
        "`perturb_ids(ids, rng=...)` over `resolve_embeddings()`. Here: keep a word with probability `keep`, "
        "else release a uniformly random vocabulary word.",
    ),
    (
        "code",
        "import numpy as np\n"
        "from privnlp.core import PrivacyClaim\n"
        "from privnlp.core.rng import as_numpy\n"
        "from privnlp.mechanisms.text import bundled_embeddings\n"
        "emb = bundled_embeddings()\n"
        "class RandomSwap:\n"
        "    name = 'random_swap'; paired_attacks = ('bayesian_inversion',); scenario = 'text.perturbation'\n"
        "    def __init__(self, keep=0.3):\n"
        "        self.keep = keep\n"
        "    def claim(self):\n"
        "        return PrivacyClaim.heuristic('keeps each word with probability keep, else a random vocabulary word')\n"
        "    def params(self):\n"
        "        return {'keep': self.keep}\n"
        "    def resolve_embeddings(self):\n"
        "        return emb\n"
        "    def perturb_ids(self, ids, *, rng):\n"
        "        g, ids = as_numpy(rng), np.asarray(ids)\n"
        "        return np.where(g.random(ids.size) < self.keep, ids, g.integers(0, len(emb), ids.size))\n"
        "    def perturb_words(self, words, *, rng):\n"
        "        return [emb.words[i] for i in self.perturb_ids(emb.ids(words), rng=rng)]\n"
        "mine = audit(RandomSwap(keep=0.3), seeds=[0], progress=False)\n"
        "mine.headline()",
    ),
]


REDACT = [
    (
        "md",
        "# (d) Redact PII from your own records\n\n"
        "You hold documents and, for some of them, the PII you already know (a patient's name and birth date, a "
        "customer's phone). privnlp locates those fields in the text (name variants, any date format, fuzzy "
        "matching: `wikipii-pii-extraction-federated.txt` section 2), adds regex recognizers (e-mail, phone, SSN, "
        "card numbers with a Luhn check, dates) and, optionally, a PII tagger trained on the auto-annotated "
        "labels, then replaces every mention by a typed placeholder or a consistent surrogate.",
    ),
    (
        "code",
        "import json, pathlib\n"
        "rows = [\n"
        "    {'id': 'n1', 'text': 'Patient Jane Doe (DOB 03/02/1975) called from (415) 555-0123. Jane asked about her refill; call Jane at 415-555-0123.'},\n"
        "    {'id': 'n2', 'text': 'Card 4111 1111 1111 1111 was charged; receipt sent to bill.smith@example.com. Smith, Bill signed.'},\n"
        "    {'id': 'n3', 'text': ''},\n"
        "]\n"
        "pathlib.Path('records.jsonl').write_text(''.join(json.dumps(r) + '\\n' for r in rows))\n"
        "known = {'n1': {'PERSON': ['Doe, Jane'], 'DATE': ['1975-03-02']}, 'n2': {'PERSON': ['William Smith']}}",
    ),
    (
        "md",
        "Placeholders, with the spans in Presidio's shape (`entity_type`, `start`, `end`, `score`):",
    ),
    (
        "code",
        "from privnlp.mechanisms.pii import PIIRedactor, redact_file\n"
        "red = PIIRedactor(tagger=None, mode='placeholder')   # regex + your known fields\n"
        "r = red.redact(rows[0]['text'], known['n1'])\n"
        "print(r.text)\n"
        "print(r.presidio()[:3])",
    ),
    (
        "md",
        "Consistent surrogates: a keyed HMAC (your secret key) maps the same real value to the same fake one "
        "of the same type, format and locale across the whole corpus (`Jane Doe` -> one fake full name, `Jane` "
        "alone -> its first name). A whole file is redacted atomically, with a sidecar of counts per type; "
        "empty documents and documents without known fields are kept.",
    ),
    (
        "code",
        "import warnings\n"
        "with warnings.catch_warnings():\n"
        "    warnings.simplefilter('ignore')\n"
        "    summary = redact_file('records.jsonl', 'redacted.jsonl', field='text', known_fields=known,\n"
        "                          redactor=PIIRedactor(mode='surrogate', key=b'my secret key, 16+ bytes'))\n"
        "print(pathlib.Path('redacted.jsonl').read_text())\n"
        "print(summary.counts, summary.warnings)",
    ),
    (
        "md",
        "The same from the shell: `privnlp redact records.jsonl -o redacted.jsonl --known-fields known.json "
        "--mode surrogate --key-file key.hex --report` (`--field` defaults to `text`; `--tagger crf`, the default, "
        "adds the CRF tagger trained on multi-locale synthetic records in real prose; `--tagger none` uses the "
        "recognizers + known fields only).\n\n"
        "How good is the auto-annotation? On the bundled corpus, against its gold spans:",
    ),
    (
        "code",
        "from privnlp.data import generate_corpus\n"
        "from privnlp.mechanisms.pii import AutoAnnotator, evaluate_annotation, degrade_fields\n"
        "corpus = generate_corpus(12, 5, seed=0)\n"
        "with warnings.catch_warnings():\n"
        "    warnings.simplefilter('ignore')\n"
        "    clean = evaluate_annotation(corpus.records, corpus.known_fields, AutoAnnotator())\n"
        "    noisy = evaluate_annotation(corpus.records, degrade_fields(corpus.known_fields, rng=0), AutoAnnotator())\n"
        "print(clean.to_markdown('known fields'))\n"
        "print(noisy.to_markdown('degraded fields'))",
    ),
]


def main() -> None:
    out = ROOT / "notebooks"
    out.mkdir(exist_ok=True)
    for name, cells in (
        ("a_private_training", TRAINING),
        ("b_sanitize_with_vickrey", SANITIZE),
        ("c_evaluate_a_defense", EVALUATE),
        ("d_redact_pii_from_your_records", REDACT),
    ):
        nbf.write(nb(cells), out / f"{name}.ipynb")


if __name__ == "__main__":
    main()
