# Mamba at the Pig Latin write-up's large size: its table's width 64, expansion 2 and convolution kernel 16,
# with 8 layers and d_state 16: 275,904 parameters (the write-up: "Mamba large (276 K)", 0.983 validation word
# accuracy). Bilinear discretization and its stabilizer, Delta divided by sqrt(hidden size) (dt_div_sqrt);
# the write-up's recipe otherwise (batch 128, lr 3e-3, 100 epochs).
# python train.py config/piglatin_mamba_large.py     (about 40 s an epoch on one CPU core, chunked and compiled)
import pathlib

exec(pathlib.Path(__file__).with_name("piglatin_mamba.py").read_text())
out_dir = "out/piglatin_mamba_large"
n_layer = 8
d_state = 16
d_conv = 16
dt_div_sqrt = True
conv_impl = "matmul"  # d_conv 16: the convolution as a Toeplitz matmul per channel; with the chunked scan (8 steps,
#                       compiled, its backward by hand, from piglatin_mamba.py) a step 2.4x faster than chunks of 16
#                       compiled by autograd (python -m bench.speed --cases mamba; one core, CPU time)
eval_interval = 430  # every 10 epochs (each evaluation translates the validation words greedily)
