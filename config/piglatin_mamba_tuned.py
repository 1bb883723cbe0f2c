# mamba as the tuning plan chose it: written by `python study.py --tune` from results/piglatin/tuning/choices.json
# (seed 301, max_epochs=30 eval_interval=86; chosen by val_word_accuracy). The full budget is piglatin_mamba_large.py's own.
import pathlib

exec((pathlib.Path(__file__).parent / 'piglatin_mamba_large.py').read_text())
out_dir = 'out/piglatin_mamba_tuned'
scheduler = 'plateau'  # schedule: val_word_accuracy 0.8842, val_loss 0.1085
plateau_patience = 2  # schedule: val_word_accuracy 0.8842, val_loss 0.1085
eval_interval = 86  # schedule: val_word_accuracy 0.8842, val_loss 0.1085
learning_rate = 0.01  # learning_rate: val_word_accuracy 0.9531, val_loss 0.0398
dropout = 0.0  # dropout: val_word_accuracy 0.9531, val_loss 0.0398
weight_decay = 0.1  # weight_decay: val_word_accuracy 0.9575, val_loss 0.0368
n_layer = 4  # size: val_word_accuracy 0.9721, val_loss 0.0224
n_embd = 96  # size: val_word_accuracy 0.9721, val_loss 0.0224
