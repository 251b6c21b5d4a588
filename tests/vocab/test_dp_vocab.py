"""DP WordPiece (dp-bert-and-dp-wordpiece.txt Sec. 3.2): calibration, statistics, build, attack."""

from __future__ import annotations

import json
import math
from collections import Counter

import numpy as np
import pytest
from scipy import stats

from privnlp.core.errors import InvalidArgument, InvalidPrivacyParameter, MalformedInput
from privnlp.mechanisms.vocab import (
    DPWordPiece,
    LeakyOccurrenceWordPiece,
    analytic_gaussian_sigma,
    bound_contributions,
    build_nonprivate_wordpiece,
    contributor_histogram,
    gaussian_threshold,
    laplace_threshold,
    paper_calibration,
    release_histogram,
    single_contributor_release_probability,
    tokenizer_utility,
    train_wordpiece_from_histogram,
)
from privnlp.mechanisms.vocab import wordpiece as wp_mod
from privnlp.mechanisms.vocab.calibration import analytic_gaussian_delta

TEXTS = [
    f"the patient {w} was seen by doctor smith on monday ."
    for w in ["alpha", "beta", "gamma", "delta", "omega"] * 40
] + ["the rare word zyxwvq appears once ."]


# ----------------------------------------------------------------------------- calibration
def test_laplace_threshold_formula_add_remove():
    for eps, delta, k in [(1.0, 1e-6, 1), (0.5, 1e-5, 8), (4.0, 1e-8, 32)]:
        cal = laplace_threshold(eps, delta, k)
        assert cal.scale == pytest.approx(k / eps)
        assert cal.threshold == pytest.approx(1 + (k / eps) * math.log(k / (2 * delta)))
        # union bound over the k single-contributor words gives exactly delta
        assert k * single_contributor_release_probability(cal) == pytest.approx(delta, rel=1e-9)


def test_replace_one_doubles_scale_and_paper_params_are_conservative():
    for eps, delta in [(1.0, 1e-6), (0.1, 1e-5), (8.0, 1e-9)]:
        ours = laplace_threshold(eps, delta, 1, "replace-one")
        paper = paper_calibration(eps, delta)
        assert ours.scale == pytest.approx(paper.scale) == pytest.approx(2 / eps)
        # the paper's ln(2/delta) exceeds our ln(1/(2 delta)) by ln 4: valid, conservative
        assert paper.threshold - ours.threshold == pytest.approx((2 / eps) * math.log(4))
        assert single_contributor_release_probability(paper) <= delta / 4 * (1 + 1e-9)


def test_matches_opendp_privacy_map():
    dp = pytest.importorskip("opendp.prelude")
    dp.enable_features("contrib")
    dom = dp.map_domain(dp.atom_domain(T=str), dp.atom_domain(T=int))
    met = dp.l01inf_distance(dp.absolute_distance(T=int))
    for eps, delta, k in [(1.0, 1e-6, 1), (1.0, 1e-6, 4), (2.0, 1e-5, 16)]:
        cal = laplace_threshold(eps, delta, k)
        m = dp.m.make_laplace_threshold(
            dom, met, scale=cal.scale, threshold=math.ceil(cal.threshold)
        )
        e, d = m.map((k, k, 1))
        assert e <= eps * (1 + 1e-9) and d <= delta * (1 + 1e-9)


def test_gaussian_calibration():
    for eps, delta, k in [(1.0, 1e-6, 1), (1.0, 1e-5, 16)]:
        cal = gaussian_threshold(eps, delta, k)
        assert cal.l2 == pytest.approx(math.sqrt(k))
        assert analytic_gaussian_delta(cal.scale, eps, math.sqrt(k)) <= delta / 2 * (1 + 1e-6)
        assert analytic_gaussian_delta(cal.scale * 0.99, eps, math.sqrt(k)) > delta / 2
        assert k * single_contributor_release_probability(cal) == pytest.approx(delta / 2, rel=1e-6)
    # classic bound sigma = sqrt(2 ln(1.25/delta))/eps is looser than the analytic one
    assert analytic_gaussian_sigma(0.5, 1e-5, 1.0) < math.sqrt(2 * math.log(1.25 / 1e-5)) / 0.5


# ----------------------------------------------------------------------------- statistics
def test_single_contributor_word_released_with_prob_at_most_delta_over_k():
    """20,000 independent single-contributor words: empirical release rate vs delta/k (4 sd)."""
    for noise in ("laplace", "gaussian"):
        cal = (
            laplace_threshold(1.0, 0.02, 2)
            if noise == "laplace"
            else gaussian_threshold(1.0, 0.02, 2)
        )
        n = 20000
        h = release_histogram({f"w{i}": 1 for i in range(n)}, cal, rng=np.random.default_rng(1))
        p = single_contributor_release_probability(cal)
        rate = len(h) / n
        sd = math.sqrt(p * (1 - p) / n)
        assert rate <= 0.02 / 2 + 4 * sd, (noise, rate)
        assert abs(rate - p) <= 4 * sd, (noise, rate, p)


def test_pipeline_single_document_word_release_rate_le_delta():
    """End to end over 2000 seeded runs: a word used by one document is released with
    probability <= delta (= 0.015 for n=61 contributors); tolerance: binomial 99.9% upper bound."""
    mech = DPWordPiece(epsilon=1.0, delta=0.015, max_words_per_contributor=3, vocab_size=200)
    runs = 2000
    word_sets = wp_mod._split_corpus(
        TEXTS[-61:], None, True
    )  # split once; the DP part runs per seed
    assert mech.release_histogram(TEXTS[-61:], rng=0).n_contributors == 61
    hits = sum("zyxwvq" in mech._histogram(word_sets, rng=s).counts for s in range(runs))
    upper = stats.binom.ppf(0.999, runs, 0.015)
    assert hits <= upper, (hits, upper)


def test_noise_scale_matches_ks():
    for cal in (laplace_threshold(2.0, 1e-6, 4), gaussian_threshold(2.0, 1e-6, 4)):
        big = 10**7
        h = release_histogram(
            {f"w{i}": big for i in range(5000)}, cal, rng=np.random.default_rng(2)
        )
        noise = np.array([v - big for v in h.counts.values()])
        dist = (
            stats.laplace(scale=cal.scale)
            if cal.noise == "laplace"
            else stats.norm(scale=cal.scale)
        )
        assert stats.kstest(noise, dist.cdf).pvalue > 1e-3
        assert np.std(noise) == pytest.approx(dist.std(), rel=0.06)


def test_contribution_bounding_counts_distinct_contributors():
    sets = [["a", "a", "b", "c", "d", "e"], ["a"], ["a", "b"]]
    bounded = bound_contributions(sets, 2, rng=0)
    assert all(len(b) <= 2 and len(set(b)) == len(b) for b in bounded)
    assert bounded == bound_contributions(sets, 2, rng=0)  # seeded
    hist = contributor_histogram([["a", "b"], ["a"], ["a", "b"]])
    assert hist == Counter({"a": 3, "b": 2})
    # a word repeated 50 times in one document still counts 1
    mech = DPWordPiece(epsilon=1.0, delta=1e-3, max_words_per_contributor=100, vocab_size=200)
    ws = wp_mod._split_corpus(["spam " * 50, "eggs"], None, True)
    assert contributor_histogram(bound_contributions(ws, 100, rng=0))["spam"] == 1
    del mech


# ----------------------------------------------------------------------------- build
@pytest.fixture(scope="module")
def built():
    mech = DPWordPiece(epsilon=4.0, delta=1e-4, max_words_per_contributor=16, vocab_size=200)
    return mech, mech.build(TEXTS, rng=0)


def test_build_reads_only_released_histogram(built, monkeypatch):
    mech, _ = built
    fed: Counter = Counter()
    seen_counts = []
    orig_iter, orig_train = wp_mod.histogram_iterator, wp_mod.train_wordpiece_from_histogram

    def spy_iter(counts, count_scale=1.0, chunk=512):
        for s in orig_iter(counts, count_scale, chunk):
            fed.update(s.split(" "))
            yield s

    def spy_train(counts, *a, **kw):
        seen_counts.append(dict(counts))
        return orig_train(counts, *a, **kw)

    monkeypatch.setattr(wp_mod, "histogram_iterator", spy_iter)
    monkeypatch.setattr(wp_mod, "train_wordpiece_from_histogram", spy_train)
    res = mech.build(TEXTS, rng=7)
    assert seen_counts == [dict(res.histogram.counts)]
    assert fed == Counter({w: max(1, round(c)) for w, c in res.histogram.counts.items()})
    assert "zyxwvq" not in fed and "zyxwvq" not in res.vocab


def test_outputs_load_in_transformers(built, tmp_path):
    from transformers import BertTokenizer, PreTrainedTokenizerFast

    _, res = built
    paths = res.save(tmp_path)
    hf = PreTrainedTokenizerFast(tokenizer_file=str(paths["tokenizer"]))
    toks = hf.convert_ids_to_tokens(hf("The patient was seen")["input_ids"])
    assert toks[0] == "[CLS]" and toks[-1] == "[SEP]" and "patient" in toks
    vocab = paths["vocab"].read_text().splitlines()
    assert vocab == res.vocab and vocab[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    # transformers 5: the vocab.txt path goes in `vocab=` (`vocab_file=` is silently ignored)
    bert = BertTokenizer(vocab=str(paths["vocab"]))
    assert "patient" in bert.tokenize("The patient")
    claim = json.loads(paths["claim"].read_text())["claim"]
    assert claim["kind"] == "dp" and claim["unit"] == "document" and claim["epsilon"] == 4.0
    assert res.hf_tokenizer().mask_token == "[MASK]"


def test_reproducible_builds(built):
    """The released histogram is bit-for-bit reproducible from the seed, and so is the vocabulary:
    the merges run through the deterministic BPE trainer (tokenizers#1794 affects the WordPiece
    trainer's tie breaking); ids are canonical (specials first, then sorted)."""
    mech, res = built
    again = mech.build(TEXTS, rng=0)
    assert dict(again.histogram.counts) == dict(res.histogram.counts)
    assert list(again.vocab) == list(res.vocab)
    assert again.vocab[:5] == res.vocab[:5] and sorted(again.vocab[5:]) == again.vocab[5:]
    # retraining from the saved histogram with the same counts gives the same-size vocabulary
    t = train_wordpiece_from_histogram(res.histogram.counts, 200)
    assert t.get_vocab_size() == len(res.vocab)


def test_claim_units_and_paper_composition():
    c = DPWordPiece(epsilon=2.0, delta=1e-6, max_words_per_contributor=4, unit="user").claim()
    assert c.unit.value == "user" and c.neighbouring == "add/remove" and c.epsilon == 2.0
    assert c.extra["paper_example256_epsilon"] == pytest.approx(256 * 2.0 / 4)
    with pytest.raises(InvalidArgument, match="contributor_ids"):
        DPWordPiece(unit="user", vocab_size=200).build(TEXTS, rng=0)
    users = [i % 7 for i in range(len(TEXTS))]
    h = DPWordPiece(epsilon=8.0, delta=1e-3, unit="user", vocab_size=200).release_histogram(
        TEXTS, contributor_ids=users, rng=0
    )
    assert h.n_contributors == 7


def test_secure_mode_opendp():
    pytest.importorskip("opendp")
    mech = DPWordPiece(
        epsilon=4.0, delta=1e-4, max_words_per_contributor=16, vocab_size=200, secure=True
    )
    res = mech.build(TEXTS, rng=0)
    assert (
        res.histogram.secure
        and "patient" in res.histogram.counts
        and "zyxwvq" not in res.histogram.counts
    )
    assert all(float(v).is_integer() for v in res.histogram.counts.values())


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(epsilon=0.0), r"epsilon must be in \(0"),
        (dict(epsilon=-1.0), "epsilon"),
        (dict(delta=0.0), r"delta must be in \(0"),
        (dict(delta=1.5), "delta"),
        (dict(max_words_per_contributor=0), r"max_words_per_contributor \(k\) must be"),
        (dict(vocab_size=10), "vocab_size must be in"),
        (dict(noise="cauchy"), "noise"),
        (dict(unit="sentence"), "unit"),
        (dict(secure=True, noise="gaussian"), "secure"),
    ],
)
def test_bad_constructor_args(kw, match):
    with pytest.raises(InvalidArgument, match=match):
        DPWordPiece(**kw)


def test_bad_build_inputs():
    mech = DPWordPiece(epsilon=1.0, delta=0.1, vocab_size=200)
    with pytest.raises(InvalidPrivacyParameter, match=r"delta must be in \(0, 1/n\)"):
        mech.build(TEXTS, rng=0)
    ok = DPWordPiece(epsilon=1.0, delta=1e-6, vocab_size=200)
    with pytest.raises(MalformedInput, match="empty corpus"):
        ok.build([], rng=0)
    with pytest.raises(MalformedInput, match="empty corpus"):
        ok.build(["   ", ""], rng=0)
    with pytest.raises(InvalidArgument, match="vocab_size must be >="):
        train_wordpiece_from_histogram({"ωψχφυτσ": 5.0}, 150)


# ----------------------------------------------------------------------------- attack + scenario
@pytest.fixture(scope="module")
def scenario_runs():
    from privnlp.attacks.text.vocab_membership import VocabMembership
    from privnlp.evaluation.scenarios.vocab import VocabMembershipScenario

    sc = VocabMembershipScenario("quick")
    out = {}
    for label, mech in [
        ("none", None),
        ("dp1", DPWordPiece.example("quick")),
        ("leaky", LeakyOccurrenceWordPiece(**DPWordPiece.example("quick").params())),
    ]:
        run = sc.run(mech, rng=0)
        t = run.trials[0]
        out[label] = (
            VocabMembership().run(t.observation, rng=0).score(t.ground_truth),
            run.utility,
        )
    return out


def test_attack_succeeds_undefended_fails_on_dp(scenario_runs):
    none, _ = scenario_runs["none"]
    dp1, _ = scenario_runs["dp1"]
    assert none["inclusion_rate@n=64"] == 1.0 and none["inclusion_rate"] >= 0.5
    assert dp1["inclusion_rate"] <= 0.1 and dp1["inclusion_rate@n=1"] == 0.0
    assert none["false_positive_rate"] == dp1["false_positive_rate"] == 0.0


def test_leaky_twin_caught(scenario_runs):
    leaky, _ = scenario_runs["leaky"]
    dp1, _ = scenario_runs["dp1"]
    # a canary in ONE document: the real mechanism releases it w.p. <= delta; the twin ~1/2
    assert leaky["inclusion_rate@n=1"] >= 0.25 > dp1["inclusion_rate@n=1"]


def test_utility_metrics(scenario_runs):
    _, u_none = scenario_runs["none"]
    _, u_dp = scenario_runs["dp1"]
    assert u_none["vocab_overlap"] == 1.0 and u_none["unk_rate"] == 0.0
    assert 0.0 < u_dp["vocab_overlap"] < 1.0 and u_dp["fertility"] > u_none["fertility"]
    assert u_dp["unk_rate"] == 0.0  # the public alphabet and its '##' forms are always in


def test_registry_and_plot(tmp_path):
    # look up without Registry.load_all (it imports every area's modules, slow)
    import privnlp.attacks.text.vocab_membership  # noqa: F401
    import privnlp.evaluation.scenarios.vocab  # noqa: F401
    from privnlp.core.registry import ATTACKS, LEAKY_TWINS, MECHANISMS, SCENARIOS
    from privnlp.evaluation.scenarios.vocab import plot_inclusion

    m = dict.__getitem__(MECHANISMS, "dp_wordpiece")
    assert (
        m is DPWordPiece
        and m.paired_attacks == ("vocab_membership",)
        and m.scenario == "vocab.membership"
    )
    assert dict.__getitem__(ATTACKS, "vocab_membership").headline_metric == "inclusion_rate"
    assert dict.__getitem__(LEAKY_TWINS, "dp_wordpiece") is LeakyOccurrenceWordPiece
    assert dict.__getitem__(SCENARIOS, "vocab.membership") is not None
    p = plot_inclusion(
        {"non-private": {1: 0.0, 16: 1.0}, "DP eps=1": {1: 0.0, 16: 0.0}}, tmp_path / "incl.png"
    )
    assert p.read_bytes()[:4] == b"\x89PNG"


def test_nonprivate_utility_self():
    b = build_nonprivate_wordpiece(TEXTS, 200)
    u = tokenizer_utility(b.tokenizer, TEXTS[:10], b.tokenizer)
    assert u["vocab_overlap"] == 1.0 and u["fertility"] >= 1.0


def test_cli_build(tmp_path):
    from typer.testing import CliRunner

    from privnlp.cli.main import app

    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(TEXTS))
    r = CliRunner().invoke(
        app,
        [
            "vocab",
            "build",
            str(corpus),
            "--out",
            str(tmp_path / "o"),
            "--epsilon",
            "4",
            "--delta",
            "1e-4",
            "--k",
            "16",
            "--vocab-size",
            "200",
            "--seed",
            "0",
        ],
    )
    assert r.exit_code == 0, r.output
    assert (tmp_path / "o" / "tokenizer.json").exists() and (tmp_path / "o" / "claim.json").exists()
    r = CliRunner().invoke(
        app, ["vocab", "build", str(corpus), "--out", str(tmp_path / "p"), "--epsilon", "0"]
    )
    assert r.exit_code == 2 and "epsilon" in r.output
    assert not (tmp_path / "p" / "tokenizer.json").exists()


def test_laplace_threshold_large_delta_branch_releases_a_singleton_with_probability_delta():
    # delta/k > 1/2 takes the other branch of the Laplace tail; the release probability of a count of 1 must
    # still be exactly delta/k (closed form of the Laplace survival function)
    import math

    cal = laplace_threshold(1.0, 0.6, 1)
    x = cal.threshold - 1.0
    p_release = 1.0 - 0.5 * math.exp(x / cal.scale) if x < 0 else 0.5 * math.exp(-x / cal.scale)
    assert abs(p_release - 0.6) < 1e-12


def test_cli_ledger_composes_releases_and_refuses_over_budget(tmp_path):
    from typer.testing import CliRunner

    from privnlp.accounting import DPLedger
    from privnlp.cli.main import app

    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(TEXTS))
    led = tmp_path / "ledger.json"

    def run(out: str, *extra: str):
        args = ["vocab", "build", str(corpus), "--out", str(tmp_path / out), "--epsilon", "1"]
        args += ["--delta", "1e-4", "--k", "4", "--vocab-size", "200", "--seed", "0", *extra]
        return CliRunner().invoke(app, args)

    for out in ("a", "b"):
        r = run(out, "--ledger", str(led), "--target-epsilon", "2.5")
        assert r.exit_code == 0, r.output
    assert DPLedger.from_dict(json.loads(led.read_text())).release_epsilon() == pytest.approx(2.0)
    before = led.read_text()
    r = run("c", "--ledger", str(led), "--target-epsilon", "2.5")
    assert r.exit_code == 2 and "refusing DP vocabulary release 3" in r.output
    assert led.read_text() == before and not (tmp_path / "c").exists()
    r = run("d", "--target-epsilon", "2.5")
    assert r.exit_code == 2 and "--target-epsilon needs --ledger" in r.output
    (tmp_path / "bad.json").write_text("[1]")
    r = run("e", "--ledger", str(tmp_path / "bad.json"))
    assert r.exit_code == 2 and "not a ledger object" in r.output
