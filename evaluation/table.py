"""
The table evaluate.py prints: a line of the conditions, then one column per checkpoint, named by its folder
(run_names), one row per figure that any of them has (ROWS), then each task's lines beneath (print_table): a
classifier's confusion matrix and test-time depth, a zero-shot prompt and its cut texts, a seq2seq model's word
accuracy by rule and by length and its wrong translations (print_word_breakdown), a language model's sample.
Read in that order.
"""

import os

ROWS = [  # (key, label, format)
    ("word_accuracy", "word accuracy", "{:.4f}"), ("unseen_word_accuracy", "word accuracy, unseen words", "{:.4f}"),
    ("unseen_loss", "loss per character, unseen words", "{:.4f}"),
    ("char_accuracy", "char accuracy (teacher-forced)", "{:.4f}"),
    ("accuracy", "accuracy", "{:.4f}"), ("precision", "precision", "{:.4f}"), ("recall", "recall", "{:.4f}"),
    ("f1", "F1", "{:.4f}"), ("mcc", "MCC", "{:.4f}"), ("loss", "loss", "{:.4f}"), ("ppl", "perplexity", "{:.3f}"),
    ("emb_norm", "mean ||X|| (block 1 input)", "{:.3f}"), ("n", "examples (LM: tokens, MLM: masked)", "{:,}"),
    ("params_total", "params total", "{:,}"), ("params_embedding", "params embedding", "{:,}"),
    ("params_non_embedding", "params non-embedding", "{:,}"), ("size_mb", "size fp32 (MB)", "{:.2f}"),
    ("ckpt_bytes", "checkpoint bytes", "{:,}"), ("effective_depth", "effective depth", "{}"),
    ("flops_per_sample", "FLOPs/sample (fwd)", "{:.3e}"), ("flops_per_token", "FLOPs/token (fwd)", "{:.3e}"),
    ("latency_ms", "latency bs=1 (ms; LM: per token, seq2seq: per word)", "{:.3f}"),
    ("throughput", "throughput (samples|tokens|words/s)", "{:,.0f}"),
    ("texts_cut_at_preparation", "texts cut at data preparation", "{:,}"),
    ("texts_cut", "texts cut again to fit the context", "{:,}"),
    ("new_tokens", "generated tokens", "{:,}"), ("decode", "decode step", "{}"),
    ("compile_s", "decode step compile time (s)", "{:.1f}"),
    ("tokens_per_s", "generation, batch 1 (tokens/s)", "{:,.0f}"),
    ("tokens_per_s_batch", "generation, --gen_batch (tokens/s)", "{:,.0f}"),
    ("tokens_per_s_no_cache", "generation, batch 1, no cache", "{:,.0f}"),
    ("tokens_per_s_batch_no_cache", "generation, --gen_batch, no cache", "{:,.0f}"),
]


def run_names(paths):
    """Short column names: each checkpoint's folder, with as many parent folders as it takes to tell
    them apart (out/study/A/seed1/ckpt.pt and out/study/B/seed1/ckpt.pt -> A/seed1, B/seed1)."""
    parts = [os.path.dirname(os.path.abspath(p)).split(os.sep) for p in paths]
    for depth in range(1, max(len(p) for p in parts) + 1):
        names = ["/".join(p[-depth:]) for p in parts]
        if len(set(names)) == len(names):
            return names
    return list(paths)  # the same file given twice


def print_table(results, conditions, max_errors=50):
    """The checkpoints' figures side by side, under a line saying what they were measured on (conditions: the
    device, dtype, torch version, threads, split and repeats that --json stores beside them)."""
    c, first = conditions, results[0]
    where = {"lm": "the validation windows" if "loss" in first else "a prompt", "generate": "a prompt",
             "mlm": "the validation split, masked",
             "zero-shot": f"{first.get('dataset')} {first.get('split')}"}.get(first["task"], c["split"])
    timed = any(k in r for r in results for k in ("latency_ms", "tokens_per_s"))  # a sample or a --file: if asked
    threads = f"{c['threads']} thread{'s' * (c['threads'] != 1)}"
    print(f"evaluated on {where}: device {c['device']} ({threads}), {c['dtype']}, "
          f"torch {c['torch']}; " + (f"timing: median of {c['repeats']} repeats" if timed else "not timed"))
    names = run_names([r["ckpt"] for r in results])
    width = max(12, *(len(n) for n in names)) + 2
    print(f"{'':34s}" + "".join(f"{n:>{width}s}" for n in names))
    for key, label, fmt in ROWS:
        if any(key in r for r in results):
            print(f"{label:34s}" + "".join(f"{fmt.format(r[key]) if key in r else '-':>{width}s}" for r in results))
    for name, r in zip(names, results):
        if "confusion_matrix" in r:
            print(f"confusion matrix of {name} (rows true {r['label_names']}, columns predicted): "
                  f"{r['confusion_matrix']}")
        if "loops" in r:
            print(f"test-time depth of {name} (trained with {r['loops'][0]['trained_loops']} loops): " +
                  ", ".join(f"{row['n_loops']} loops acc {row['accuracy']:.4f}" for row in r["loops"]))
        if "prompt" in r:
            print(f"zero-shot prompt of {name} ({r['dataset']} {r['split']}, {r['tokenizer']} tokens): {r['prompt']!r}")
            prepared = r.get("texts_cut_at_preparation", "an unrecorded number")
            print(f"texts of {name}: {prepared} of {r['n']} cut to {r['prepared_max_len']} tokens when the data was "
                  f"prepared, {r['texts_cut']} cut again to fit the prompt in its context of {r['context']}")
        if "splits" in r:
            print_word_breakdown(name, r["splits"], max_errors)
            for p in r.get("plots", []):
                print(f"wrote {p}")
        if "sample" in r:
            print(f"--- sample from {name} (temperature {r['sample_args']['temperature']}, top_k "
                  f"{r['sample_args']['top_k']}, seed {r['sample_args']['seed']}):\n{r['sample']}\n---")


def print_word_breakdown(name, splits, max_errors):
    """A seq2seq report's word accuracy by rule and by length, its splits side by side (test | unseen),
    then each split's wrong translations (the first max_errors)."""
    heads = [f"{s} (n={v['n']:,})" for s, v in splits.items()]
    width = max(18, *map(len, heads)) + 2
    for what in ("by_rule", "by_length"):
        print(f"word accuracy of {name} {what.replace('_', ' ')}:" + " " * 4 + "".join(f"{h:>{width}s}" for h in heads))
        keys = sorted({k for v in splits.values() for k in v[what]})
        for k in keys:
            cells = [f"{v[what][k]['accuracy']:.3f} ({v[what][k]['n']:,})" if k in v[what] else "-"
                     for v in splits.values()]
            print(f"  {k:{len(name) + len(what) + 20}s}" + "".join(f"{c:>{width}s}" for c in cells))
        overall = [f"{v['word_accuracy']:.3f} ({v['n']:,})" for v in splits.values()]
        print(f"  {'all':{len(name) + len(what) + 20}s}" + "".join(f"{c:>{width}s}" for c in overall))
    for s, v in splits.items():
        print(f"wrong translations of {name} on {s} ({len(v['errors'])}; word: truth / predicted):")
        for e in v["errors"][:max_errors]:
            print(f"  {e['word']}: {e['truth']} / {e['predicted']}")

