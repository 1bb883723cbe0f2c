# transformer as the tuning plan chose it: written by `python study.py --tune` from results/piglatin/tuning/choices.json
# (seed 301, max_epochs=30 eval_interval=86; chosen by val_word_accuracy). The full budget is piglatin_transformer.py's own.
import pathlib

exec((pathlib.Path(__file__).parent / 'piglatin_transformer.py').read_text())
out_dir = 'out/piglatin_transformer_tuned'
scheduler = 'cosine'  # schedule: val_word_accuracy 0.9370, val_loss 0.0412
warmup_iters = 100  # schedule: val_word_accuracy 0.9370, val_loss 0.0412
learning_rate = 0.003  # learning_rate: val_word_accuracy 0.9370, val_loss 0.0412
dropout = 0.0  # dropout: val_word_accuracy 0.9457, val_loss 0.0400
weight_decay = 0.01  # weight_decay: val_word_accuracy 0.9457, val_loss 0.0400
n_layer = 2  # size: val_word_accuracy 0.9487, val_loss 0.0396
n_embd = 96  # size: val_word_accuracy 0.9487, val_loss 0.0396
ffn_hidden = 96  # size: val_word_accuracy 0.9487, val_loss 0.0396
