import privnlp
import torch
from privnlp.data import generate_corpus
from privnlp.models import lm_batch, tiny_gpt2, train_bpe_tokenizer
from torch.utils.data import DataLoader, TensorDataset

texts = generate_corpus(n_users=10, records_per_user=4, seed=0).texts()   # synthetic private text with PII
tok = train_bpe_tokenizer(texts, vocab_size=400)
model, b = tiny_gpt2(len(tok), n_layer=1, n_embd=32, n_head=2), lm_batch(tok, texts, max_length=32)
loader = DataLoader(TensorDataset(b.input_ids, b.position_ids, b.labels), batch_size=8)
pt = privnlp.make_private(model, torch.optim.SGD(model.parameters(), lr=0.5), loader, target_epsilon=4.0,
                          steps=5, max_grad_norm=1.0, accountant="rdp", rng=0,  # refuses any step past eps 4
                          expected_batch_size=8, public_dataset_size=64)  # public q = 8/64: add/remove claim
privnlp.train_private(pt, steps=5)   # the loss of the model's own head (causal LM here), per example
print(pt.privacy_statement())
