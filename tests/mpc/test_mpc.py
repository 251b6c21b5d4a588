"""crypten_textcnn: correctness vs plaintext, bad input, import hygiene, party-view audit."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from privnlp.core.errors import InvalidArgument

LOGIT_TOL = 5e-3  # 16-bit fixed point: observed max |error| ~1e-4 on these models


def _py(code, timeout=120):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout)


def test_import_is_lazy_registers_and_missing_crypten_is_clear():
    r = _py("""
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
            print('MSG', e)""")
    assert r.returncode == 0 and "MSG" in r.stdout and "crypten" in r.stdout, r.stdout + r.stderr


def test_maxpool1d_matches_torch(alice):
    r = _py("""
        import torch; torch.set_num_threads(1)
        from privnlp.mechanisms.mpc._crypten_shim import import_crypten
        crypten = import_crypten(); crypten.init()
        from privnlp.mechanisms.mpc.crypten_model import MaxPool1d
        x = torch.randn(2, 3, 23)
        for k, s, meth in [(4, None, 'tournament'), (3, None, 'tournament'), (5, 2, 'tournament'), (4, None, 'max_pool2d')]:
            got = MaxPool1d(k, s, meth).encrypt()(crypten.cryptensor(x)).get_plain_text()
            ref = torch.nn.functional.max_pool1d(x, k, s)
            assert got.shape == ref.shape, (k, s, got.shape, ref.shape)
            assert (got - ref).abs().max() < 1e-3, (k, s, meth)
        print('ok')""")
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-2000:]


def test_batched_ttp_matches_plaintext_on_heldout(alice, heldout):
    from privnlp.mechanisms.mpc import CryptenTextCNN

    model = alice[0].model
    ref = model(torch.tensor(heldout)).detach().numpy()
    res = CryptenTextCNN(provider="TTP", mode="batched", timeout=240).classify(model, heldout, reveal="logits")
    assert len(res.labels) == 1000
    agree = float((res.labels == (ref > 0)).mean())
    assert agree >= 0.999, agree
    assert np.abs(res.logits - ref).max() < LOGIT_TOL
    assert res.comm["bob"]["rounds"] > 0 and res.comm["bob"]["bytes"] > 0


def test_sequential_tfp_label_only(alice):
    from privnlp.mechanisms.mpc import CryptenTextCNN

    model, xt = alice[0].model, alice[1]
    x = xt[:4]
    res = CryptenTextCNN(provider="TFP", mode="sequential", timeout=120).classify(model, x)
    assert res.logits is None
    assert np.array_equal(res.labels, model.predict(torch.tensor(x)).numpy())


@pytest.mark.parametrize("bad, msg", [(np.zeros((3, 7), np.float32), "embed_dim=64"),
                                      (np.zeros((0, 64), np.float32), "at least one row"),
                                      (np.full((2, 64), np.nan, np.float32), "finite")])
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
