# Bag of words + logistic regression on SST-2 (model.BagOfWords): the encoder study's non-neural anchor, trained on
# the transformers' splits and tokens. About 0.82 on GLUE dev and 0.92 on the standard test, 2 minutes on a CPU core.
# python train.py config/sst2_bow.py  [--protocol=standard --out_dir=out/sst2_bow_standard]
# Every choice below was made on validation loss, both protocols; the test sets were not looked at to choose.
# On held-out validation accuracy (the cells heldout_bow_lr and heldout_bow_wd of config/encoders_study.py) the
# rate 3e-3 and the L2 penalty 0.03 won, and the study's held-out cells train at those; they stay 1e-2 and 0.01
# here because the earlier cells' records were trained at these values (a changed default would unfinish them).
# To train as heldout_compute does: --learning_rate=3e-3 --weight_decay=0.03
out_dir = "out/sst2_bow"
model = "bow"
protocol = "glue_heldout"  # validation: 872 whole GLUE train sentences held out of training; test: GLUE dev (872).
# 'glue' validates on 5 % of GLUE train's phrases (pieces of training sentences: phrase recall); 'standard' is
# the source paper's pooled 80/10/10 split
select_on = "accuracy"  # the checkpoint kept is the one of best validation accuracy, the figure the study reports
ngrams = 2  # unigrams and adjacent pairs, as the usual TF-IDF baseline's ngram_range=(1, 2)
n_buckets = 1048576  # 2^20 rows for SST-2's 77,092 training bigrams: about 7 % share a row (2^18: 26 %, a slightly
# higher validation loss, in less than half the time: AdamW updates every row at every step)
tf = "binary"  # 'log' (sublinear tf) and ngrams=3 came within 0.003 of its validation loss (under beta2 0.98)
doc_norm = "l2"
# The weights start at zero and most features occur in a few batches an epoch: steps larger than a transformer's.
batch_size = 64  # 256 with lr 4e-2 is 4x faster, and 0.002 to 0.003 worse in validation loss
learning_rate = 1e-2  # 3e-3 and 3e-2 ended at higher validation losses
beta2 = 0.999  # Adam's own default. train.py's 0.98 (a transformer's) stops at validation losses of 0.227 (GLUE)
# and 0.236 (standard); 0.999 reaches 0.202 and 0.214, near the exact L2-penalized optimum on the same features
# unhashed (scipy's L-BFGS, C = 30: 0.197 and 0.209)
weight_decay = 0.01  # the L2 penalty: AdamW decays the whole table (BagOfWords.no_weight_decay). 0 and 0.03 came
# within 0.0025 of it, 0.1 was 0.05 worse (under beta2 0.98): early stopping does most of the regularizing
grad_clip = 0.0  # a convex loss with small gradients: nothing to clip
max_epochs = 10  # an upper bound: early stopping ends SST-2 runs after 6-9 epochs
# the defaults: evaluation once an epoch, the plateau schedule halving lr after 2 evaluations without improvement,
# early stopping after 3
