import torch
from torch.utils.data import DataLoader, TensorDataset
from privnlp.data import generate_corpus
from privnlp.models import lm_batch, tiny_gpt2, train_bpe_tokenizer
from privnlp.mechanisms.training import make_private, per_sample_lm_loss, train_private

texts = generate_corpus(n_users=10, records_per_user=4, seed=0).texts()   # synthetic private text with PII
tok = train_bpe_tokenizer(texts, vocab_size=400)
model, b = tiny_gpt2(len(tok), n_layer=1, n_embd=32, n_head=2), lm_batch(tok, texts, max_length=32)
loader = DataLoader(TensorDataset(b.input_ids, b.position_ids, b.labels), batch_size=8)
pt = make_private(model, torch.optim.SGD(model.parameters(), lr=0.5), loader, target_epsilon=4.0, steps=5,
                  max_grad_norm=1.0, accountant="rdp", rng=0,   # refuses any step past epsilon = 4
                  expected_batch_size=8, public_dataset_size=64)  # public q = 8/64: add/remove claim
train_private(pt, lambda m, x: per_sample_lm_loss(m(input_ids=x[0], position_ids=x[1]).logits, x[2]), steps=5)
print(pt.privacy_statement())
