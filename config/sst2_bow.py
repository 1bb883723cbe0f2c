# Bag of words + logistic regression on SST-2: the study's non-neural anchor (model.BagOfWords).
# python train.py config/sst2_bow.py  [--protocol=standard --out_dir=out/sst2_bow_standard]
out_dir = "out/sst2_bow"
model = "bow"
protocol = "glue"  # test = GLUE dev (872); 'standard' is the seed's pooled 80/10/10 split
ngrams = 2
n_buckets = 1048576
tf = "binary"
doc_norm = "l2"
batch_size = 64
learning_rate = 1e-2
weight_decay = 0.01
grad_clip = 0.0
max_epochs = 10
