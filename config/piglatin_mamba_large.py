# Mamba at the Pig Latin write-up's large size: its table's width 64, expansion 2 and convolution kernel 16,
# with 8 layers and d_state 16: 275,904 parameters (the write-up: "Mamba large (276 K)", 0.983 validation word
# accuracy). Bilinear discretization and its stabilizer, Delta divided by sqrt(hidden size) (dt_div_sqrt);
# the write-up's recipe otherwise (batch 128, lr 3e-3, 100 epochs).
# python train.py config/piglatin_mamba_large.py     (about 40 s an epoch on one CPU core before issue 42's path,
#                                                     which halves the training step: see conv_impl below)
import pathlib

exec(pathlib.Path(__file__).with_name("piglatin_mamba.py").read_text())
out_dir = "out/piglatin_mamba_large"
n_layer = 8
d_state = 16
d_conv = 16
dt_div_sqrt = True
conv_impl = "matmul"  # d_conv 16: the convolution as a Toeplitz matmul per channel; with the chunked scan (8 steps,
#                       compiled, its backward by hand: piglatin_mamba.py's) a training step 2.0-2.4x faster than
#                       before issue 42 (chunks of 16 under autograd): 0.95 s vs 1.9-2.4 s on one quiet CPU core
eval_interval = 430  # every 10 epochs (each evaluation translates the validation words greedily)
