# The recurrent-vs-baseline encoder study: every cell and claim of RESULTS.md (a plan for study.py).
# python study.py --plan config/encoders_study.py                # trains what is missing, cell by cell, then
#                                                                # measures the checkpoints and writes RESULTS.md
# python study.py --plan config/encoders_study.py --collect_only # only reads the finished runs
#
# The budget is this CPU session's (2 cores, no GPU): 300 optimizer steps of 64 examples per SST-2 run, not
# our configs' full 2 epochs (recurrent) / 1 epoch (baseline). On a GPU, drop BUDGET from the cells to run
# the configs as they are.
out_root = "out/encoders"
seeds = [1, 2, 3]
_BUDGET = ["max_iters=300", "warmup_iters=30", "eval_interval=100", "max_epochs=100"]
_PAIR = ["config/sst2_recurrent.py", "config/sst2_baseline.py"]
_GLUE, _STANDARD = "SST-2 GLUE dev (872)", "SST-2 standard test (6,823)"
cells = [
    dict(name="sst2_glue", configs=_PAIR, set=_BUDGET, test_set=_GLUE,
         what="SST-2, GLUE protocol (train = GLUE train less 5 %, test = GLUE dev)"),
    dict(name="sst2_standard", configs=_PAIR, set=_BUDGET + ["protocol=standard"], test_set=_STANDARD,
         what="SST-2, the seed's standard protocol (GLUE train + dev pooled, 80/10/10)"),
    dict(name="multidomain_uci", configs=_PAIR, test_set="UCI three-domain test (300)",
         set=["max_iters=150", "warmup_iters=30", "eval_interval=50", "max_epochs=100", "dataset=multidomain_uci"],
         what="three-domain task (movie / local business / online shopping) from the UCI sentences, 2,400 train"),
    dict(name="sst2_standard_short30", configs=_PAIR, set=_BUDGET + ["protocol=standard", "subset=short30"],
         test_set="SST-2 standard test, shortest 30 %", what="SST-2 standard, the shortest 30 % of every split"),
    dict(name="sst2_standard_long30", configs=_PAIR, set=_BUDGET + ["protocol=standard", "subset=long30"],
         test_set="SST-2 standard test, longest 30 %", what="SST-2 standard, the longest 30 % of every split"),
    dict(name="sst2_standard_frac10", configs=_PAIR, set=_BUDGET + ["protocol=standard", "subset=frac10"],
         test_set=_STANDARD, what="SST-2 standard, 10 % of train (5,458 examples), full val and test"),
    dict(name="sst2_standard_frac50", configs=_PAIR, set=_BUDGET + ["protocol=standard", "subset=frac50"],
         test_set=_STANDARD, what="SST-2 standard, 50 % of train (27,288 examples; holds frac10's), full val and test"),
    dict(name="width_depth", configs=["config/sst2_deep_recurrent.py", "config/sst2_wide.py"], test_set=_GLUE,
         set=["max_iters=150", "warmup_iters=15", "eval_interval=50", "max_epochs=100"],
         what="width vs depth: 384 wide, 3 layers x 2 loops against 512 wide, 6 layers (SST-2 GLUE)"),
    dict(name="paper", configs=["config/sst2_recurrent_paper.py"], test_set=_STANDARD,
         set=["max_iters=1200", "eval_interval=300", "max_epochs=100"],
         what="the seed paper's recipe (lr 3e-5, batch 16, plateau schedule): 1,200 steps of 16 = the same "
              "19,200 examples as 300 steps of 64"),
    dict(name="mlm_pretrain", configs=["config/sst2_mlm.py"], seeds=[1], set=["max_iters=300", "warmup_iters=30",
         "eval_interval=100"], test_set="none (pretraining)",
         what="masked-language-model pretraining of the recurrent encoder on SST-2 GLUE train + IMDB train reviews"),
    dict(name="mlm_finetune", configs=["config/sst2_recurrent_pretrained.py"], test_set=_GLUE,
         set=_BUDGET + ["init_from=out/encoders/mlm_pretrain/sst2_mlm/seed1/ckpt.pt"],
         what="the recurrent encoder fine-tuned from the MLM checkpoint, the same budget as sst2_glue"),
    dict(name="imdb", configs=_PAIR, test_set="IMDB test, 1,000 of 25,000 reviews cut to 128 tokens",
         set=["dataset=imdb", "max_len=128", "subset=sample1000", "batch_size=32", "max_iters=80", "warmup_iters=10",
              "eval_interval=40", "max_epochs=100"],
         what="IMDB reviews (long texts), a seeded 1,000 per split, cut to 128 tokens"),
    dict(name="yelp_polarity", configs=_PAIR, set=_BUDGET + ["dataset=yelp_polarity"],
         test_set="Yelp polarity test (6,823)", what="Yelp polarity at the seed's sizes (its 166 MB archive is "
         "downloaded; it is not in this machine's mirror)"),
    dict(name="multidomain", configs=_PAIR, set=_BUDGET + ["dataset=multidomain"], test_set="three-domain test (6,823)",
         what="the seed's three-domain task from IMDB, Yelp and Amazon polarity (downloads 850 MB)"),
]
labels = {"sst2_recurrent": "recurrent 3×256, 2 loops", "sst2_baseline": "baseline 6×384",
          "sst2_deep_recurrent": "recurrent 3×384, 2 loops", "sst2_wide": "wide 6×512",
          "sst2_recurrent_paper": "recurrent, paper recipe", "sst2_recurrent_pretrained": "recurrent, MLM-pretrained",
          "sst2_mlm": "MLM pretraining (recurrent 3×256)"}
_R, _B = "sst2_recurrent", "sst2_baseline"
verdicts = [
    *[dict(claim=f"recurrent beats baseline: {cell}", a=f"{cell}/{_R}", b=f"{cell}/{_B}")
      for cell in ("sst2_glue", "sst2_standard", "multidomain_uci", "imdb", "yelp_polarity", "multidomain",
                   "sst2_standard_frac50", "sst2_standard_frac10", "sst2_standard_short30", "sst2_standard_long30")],
    dict(claim="data size: recurrent's edge over baseline is larger on 10 % of train than on all of it",
         a=f"sst2_standard_frac10/{_R} - sst2_standard_frac10/{_B}", b=f"sst2_standard/{_R} - sst2_standard/{_B}"),
    dict(claim="data size: the recurrent model loses accuracy on 10 % of train (all beats 10 %)",
         a=f"sst2_standard/{_R}", b=f"sst2_standard_frac10/{_R}"),
    dict(claim="length: recurrent's edge over baseline is larger on long sentences than on short ones",
         a=f"sst2_standard_long30/{_R} - sst2_standard_long30/{_B}",
         b=f"sst2_standard_short30/{_R} - sst2_standard_short30/{_B}"),
    dict(claim="width vs depth: 384×3×2 (recurrent) beats 512×6", a="width_depth/sst2_deep_recurrent",
         b="width_depth/sst2_wide"),
    dict(claim="our tuned recipe beats the seed paper's (recurrent, standard protocol)", a=f"sst2_standard/{_R}",
         b="paper/sst2_recurrent_paper"),
    dict(claim="MLM pretraining beats training from scratch (recurrent, GLUE dev)",
         a="mlm_finetune/sst2_recurrent_pretrained", b=f"sst2_glue/{_R}", cost="mlm_pretrain/sst2_mlm"),
]
depth = [f"sst2_glue/{_R}", "width_depth/sst2_deep_recurrent"]
depth_loops = [1, 2, 3, 4]
targets = [
    dict(what="recurrent ≥ 0.84 on GLUE dev (TF-IDF + logistic regression: 0.822)", term=f"sst2_glue/{_R}",
         at_least=0.84),
    dict(what="recurrent, MLM-pretrained, ≥ 0.84 on GLUE dev", term="mlm_finetune/sst2_recurrent_pretrained",
         at_least=0.84),
    dict(what="recurrent ≥ 0.93 on the standard split (TF-IDF + logistic regression: 0.922)",
         term=f"sst2_standard/{_R}", at_least=0.93),
]
budget_note = ("this session's CPU budget, not the configs' full one: every SST-2 cell trains 300 optimizer steps "
               "of 64 examples (19,200 examples, 0.3 epoch of GLUE train; 30 steps of linear warm-up, then cosine "
               "decay to min_lr; validation every 100 steps, the best validation loss kept); the other cells' "
               "overrides are listed with them. Both models of a cell see the same examples; the baseline spends "
               "2.2× the recurrent model's FLOPs on them.")
notes = [
    "Two SST-2 protocols. *GLUE*: train on GLUE train (less a 5 % validation split), test on GLUE dev, whose "
    "sentences never occur in train. *Standard* (the seed paper's): GLUE train (phrases of every sentence, with "
    "their sub-phrases) and dev pooled and split 80/10/10 at random, so phrases of one sentence land in both train "
    "and test. The standard split is much easier: TF-IDF + logistic regression scores 0.922 there and 0.822 on "
    "GLUE dev. Both are reported; only GLUE dev measures generalization to unseen sentences.",
    "Subsets (`subset=`): frac10 takes 10 % of train by a seeded permutation (frac50 would take a superset of it); "
    "short30 / long30 take the 30 % shortest / longest of every split by word count, so train and test come from "
    "the same length regime. Truncation: 256 tokens (incl. [CLS]) unless a cell says otherwise (IMDB: 128).",
    "Offline, the multi-domain task is built from the UCI sentiment sentences (1,000 per domain); the seed's "
    "version (`multidomain`) and Yelp polarity need archives this machine cannot download.",
]
