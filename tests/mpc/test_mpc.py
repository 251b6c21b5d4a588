"""crypten_textcnn: correctness vs plaintext, bad input, import hygiene, party-view audit."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from privnlp.core.errors import InvalidArgument

LOGIT_TOL = 5e-3  # 16-bit fixed point: observed max |error| ~1e-4 on these models


@pytest.mark.parametrize("which", ["paper", "fast"])
def test_batched_ttp_matches_plaintext_on_heldout(request, heldout, which):
    from privnlp.mechanisms.mpc import CryptenTextCNN

    model = request.getfixturevalue("alice" if which == "paper" else "alice_fast")[0].model
    ref = model(torch.tensor(heldout)).detach().numpy()
    res = CryptenTextCNN(provider="TTP", mode="batched", timeout=240).classify(
        model, heldout, reveal="logits"
    )
    assert len(res.labels) == 1000
    agree = float((res.labels == (ref > 0)).mean())
    assert agree >= 0.999, agree
    assert np.abs(res.logits - ref).max() < LOGIT_TOL
    assert res.comm["bob"]["rounds"] > 0 and res.comm["bob"]["bytes"] > 0


def test_sequential_ttp_offline_phase(alice):
    """Sequential TTP: the first text is traced, the others get their triples in one TTP request
    each (offline phase). Same labels/logits; Alice's rounds (she talks to the TTP) drop from ~4x
    Bob's (one TTP round trip per AND gate) to < 2.5x."""
    from privnlp.mechanisms.mpc import CryptenTextCNN

    model, x = alice[0].model, alice[1][:6]
    ref = model(torch.tensor(x)).detach().numpy()
    res = CryptenTextCNN(provider="TTP", mode="sequential", timeout=120).classify(
        model, x, reveal="logits"
    )
    assert np.array_equal(res.labels, (ref > 0).astype(np.int64))
    assert np.abs(res.logits - ref).max() < LOGIT_TOL
    assert res.comm["alice"]["rounds"] < 2.5 * res.comm["bob"]["rounds"], res.comm


def test_sequential_tfp_label_only(alice_fast):
    from privnlp.mechanisms.mpc import CryptenTextCNN

    model, xt = alice_fast[0].model, alice_fast[1]
    x = xt[:3]
    res = CryptenTextCNN(provider="TFP", mode="sequential", timeout=120).classify(model, x)
    assert res.logits is None
    assert np.array_equal(res.labels, model.predict(torch.tensor(x)).numpy())


def test_presets_config_and_input_scale_roundtrip(alice_fast, tmp_path):
    from privnlp.mechanisms.mpc import load_alice_model, save_alice_model
    from privnlp.models.cnn import PRESETS, TextCNN

    m = alice_fast[0].model
    assert m.stride == 2 and m.pool_relu is False and m.input_scale != 1.0
    assert "input_scale" not in m.public_config() and "dropout" not in m.public_config()
    save_alice_model(m, str(tmp_path / "m.pt"))
    m2 = load_alice_model(str(tmp_path / "m.pt"))
    x = torch.tensor(alice_fast[1][:8])
    assert torch.allclose(m(x), m2(x)) and m2.config() == m.config()
    # the input scale folded into the fused conv weights gives the same features
    w, b = m.fused_conv_weight()
    z = torch.nn.functional.conv1d(x.unsqueeze(1), w, b, stride=m.stride)[..., : m.conv_length]
    z = torch.nn.functional.max_pool1d(z, m.pool).flatten(1)
    assert torch.allclose(z, m.features(x), atol=1e-5)
    with pytest.raises(InvalidArgument, match="stride"):
        TextCNN(64, **dict(PRESETS["fast"], stride=0))


@pytest.mark.parametrize(
    "bad, msg",
    [
        (np.zeros((3, 7), np.float32), "embed_dim=64"),
        (np.zeros((0, 64), np.float32), "at least one row"),
        (np.full((2, 64), np.nan, np.float32), "finite"),
    ],
)
def test_bad_input_is_rejected(alice, bad, msg):
    from privnlp.mechanisms.mpc import CryptenTextCNN

    with pytest.raises(InvalidArgument, match=msg):
        CryptenTextCNN().classify(alice[0].model, bad)


def test_bad_constructor_args():
    from privnlp.mechanisms.mpc import CryptenTextCNN

    with pytest.raises(InvalidArgument, match="provider"):
        CryptenTextCNN(provider="nope")
    with pytest.raises(InvalidArgument, match="timeout"):
        CryptenTextCNN(timeout=0)


def test_claim_is_cryptographic():
    from privnlp.mechanisms.mpc import CryptenTextCNN

    c = CryptenTextCNN.example().claim()
    assert c.kind.value == "cryptographic" and "semi-honest" in c.statement()
    assert "Testing only" in CryptenTextCNN(provider="TFP").claim().statement()


_LAZY_AND_MAXPOOL = textwrap.dedent("""
        import sys, privnlp.mechanisms as M, privnlp.attacks as A
        from privnlp.core.registry import LEAKY_TWINS, SCENARIOS
        M.get('crypten_textcnn'); A.get('party_view'); LEAKY_TWINS.get('crypten_textcnn'); SCENARIOS.get('mpc.inference')
        assert 'crypten' not in sys.modules, 'crypten imported eagerly'
        sys.modules['crypten'] = None  # simulate CrypTen not installed
        from privnlp.core.errors import MissingDependency
        from privnlp.mechanisms.mpc._crypten_shim import import_crypten, crypten_available
        assert not crypten_available()
        try:
            import_crypten()
        except MissingDependency as e:
            print('MSG', e)
        del sys.modules['crypten']
        import torch; torch.set_num_threads(1)
        crypten = import_crypten(); crypten.init()
        from privnlp.mechanisms.mpc.crypten_model import MaxPool1d
        x = torch.randn(2, 3, 23)
        for k, s, meth in [(4, None, 'tournament'), (3, None, 'tournament'), (5, 2, 'tournament'), (2, None, 'tournament'),
                           (4, None, 'max_pool2d')]:
            got = MaxPool1d(k, s, meth).encrypt()(crypten.cryptensor(x)).get_plain_text()
            ref = torch.nn.functional.max_pool1d(x, k, s)
            assert got.shape == ref.shape, (k, s, got.shape, ref.shape)
            assert (got - ref).abs().max() < 1e-3, (k, s, meth)
        print('ok')""")


@pytest.fixture(scope="module")
def lazy_and_maxpool():
    """One fresh interpreter for both checks (start-up dominates): lazy import + clear
    MissingDependency, then CrypTen for real (single process) and MaxPool1d against torch.
    Started with the module's first test, so that it runs while the MPC tests run."""
    p = subprocess.Popen(
        [sys.executable, "-c", _LAZY_AND_MAXPOOL],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    yield p
    if p.poll() is None:
        p.kill()
        p.wait(5)


pytestmark = pytest.mark.usefixtures("lazy_and_maxpool")


def test_import_is_lazy_missing_crypten_is_clear_and_maxpool1d_matches_torch(lazy_and_maxpool):
    out, err = lazy_and_maxpool.communicate(timeout=120)
    r = subprocess.CompletedProcess(lazy_and_maxpool.args, lazy_and_maxpool.returncode, out, err)
    assert r.returncode == 0 and "MSG" in r.stdout and "crypten" in r.stdout, (
        r.stdout + r.stderr[-2000:]
    )
    assert "ok" in r.stdout, r.stderr[-2000:]
