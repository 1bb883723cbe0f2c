"""
The speed benchmark: our models against equal-sized peers on the same batches, a table per case, with the
conditions (bookkeeping/timing.py) printed above and saved beside the figures.

    python -m bench.speed                                     # every case below, on this machine's device
    python -m bench.speed --cases "encoder 6x384" --compile   # one case, eager and compiled
    python -m bench.speed --device cuda --dtype bfloat16 --nanogpt path/to/nanoGPT/model.py --json bench.json
    python -m bench.speed --cases generate [--runc path/to/llama2.c/run.c]    # greedy generation, stories260K
    python -m bench.speed --cases piglatin                    # Mamba against the encoder-decoder
    python -m bench.speed --cases mamba --rounds 3 --bench_steps 1 --mambapy path/to/mamba.py \
        --mamba_minimal path/to/mamba-minimal/model.py        # Mamba large's training step: each scan path, peers

A case is a model shape and a batch. Its contestants are our model under its switches (the attention path,
the norm path, Triton kernels on a GPU, eager or compiled) and the peers that build the same shape: Hugging
Face's BertForSequenceClassification / GPT2LMHeadModel (pip install transformers: only the benchmark needs
it) and, given the path of its model.py, nanoGPT's GPT. The contestants of a case are timed in turns, round
after round, so a slow spell of a shared machine falls on all of them; each figure is a median over rounds.

Read in order: the cases (BENCH_CASES) and their batches, the contestants (ours under each switch, the peers),
the timing of a case (time_contestants), the two cases of their own (generation: generation_bench; Pig Latin:
piglatin_bench), then run_bench, which prints the tables, and the command line. This is tooling, not the lesson:
it imports the lesson's files (model.py, data.py) and evaluation/'s option types and tokenizer lookup, and
nothing imports it but gpu_check.py.
"""

import argparse
import contextlib
import io
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

import configurator
import data
import kernels
from bench.hugging_face import import_transformers
from bookkeeping.flops import forward_flops
from bookkeeping.timing import conditions, peak_flops, sync, timed
from cli.help import HelpFormatter
from corpora.llama2c import pretrained_file
from evaluation.options import llama_tokenizer_for
from evaluation.ranges import Ranged, check_new_file, check_ranges
from export import read_llama2c, write_llama2c
from hardware import devices
from model import family_settings

# -----------------------------------------------------------------------------
# the cases, their batches and their contestants


@dataclass(frozen=True)
class BenchCase:
    name: str
    family: str  # 'encoder' (a classifier; BERT builds the same shape) | 'gpt' (a causal LM; GPT-2, nanoGPT)
    settings: dict  # our model's config fields; the peers take the same shape from them
    batch: int
    seq: int


BENCH_VOCAB = 12332  # SST-2's compact vocabulary (data.py): the encoders' embedding table
_BERT_BLOCK = dict(ffn="gelu", norm="layer", pos="learned", bias=True, emb_norm="layer", dropout=0.1)
BENCH_CASES = [
    # issue 13's four pairs: BERT's block (GELU, LayerNorm, learned positions, biases, a norm on the embedding)
    # at the baseline's and the recurrent model's widths, and the char GPT at the study's and nanoGPT's shapes
    BenchCase("encoder 6x384, BERT's block", "encoder",
              dict(n_layer=6, n_loops=1, n_embd=384, n_head=6, ffn_hidden=1536, **_BERT_BLOCK), 64, 24),
    BenchCase("encoder 3x256, BERT's block", "encoder",
              dict(n_layer=3, n_loops=1, n_embd=256, n_head=4, ffn_hidden=1024, **_BERT_BLOCK), 64, 24),
    BenchCase("char GPT 8x128, ctx 128", "gpt",
              dict(vocab_size=65, block_size=128, n_layer=8, n_embd=128, n_head=8, dropout=0.0, bias=False), 16, 128),
    BenchCase("char GPT 6x384, ctx 256", "gpt",
              dict(vocab_size=65, block_size=256, n_layer=6, n_embd=384, n_head=6, dropout=0.2, bias=False), 8, 256),
    # the study's own encoders (RoPE, SwiGLU, RMSNorm: no peer builds them, so ours only)
    BenchCase("study baseline 6x384", "encoder", dict(n_layer=6, n_loops=1, n_embd=384, n_head=6, ffn_hidden=1536),
              64, 24),
    BenchCase("study recurrent 3x256x2", "encoder", dict(), 64, 24),
]


def bench_batch(case, batch, seq, device, seed=0):
    """A fixed batch. Encoder: token ids (B, T) with [CLS] first, a key mask with lengths drawn between T/2
    and T (the longest exactly T, as in a length-bucketed batch), class labels. GPT: ids and next tokens."""
    g = torch.Generator().manual_seed(seed)
    vocab = case.settings.get("vocab_size", BENCH_VOCAB)
    idx = torch.randint(data.N_SPECIAL, vocab, (batch, seq), generator=g)
    if case.family == "gpt":
        return {"idx": idx.to(device), "targets": torch.randint(0, vocab, (batch, seq), generator=g).to(device)}
    lengths = torch.randint(seq // 2, seq + 1, (batch,), generator=g)
    lengths[0] = seq
    mask = torch.arange(seq)[None] < lengths[:, None]  # (B, T)
    idx[~mask] = data.PAD
    idx[:, 0] = data.CLS
    return {"idx": idx.to(device), "key_mask": mask.to(device),
            "targets": torch.randint(0, 2, (batch,), generator=g).to(device)}


def our_model(case, seq, **switches):
    """(our model for the case, its loss on a bench batch), with config fields (the *_impl switches,
    dropout) overridden by `switches`."""
    from model import GPT, EncoderClassifier, EncoderConfig, GPTConfig
    settings = {**case.settings, **switches}
    if case.family == "encoder":
        cfg = EncoderConfig(vocab_size=BENCH_VOCAB, block_size=max(seq, 256), **settings)
        return EncoderClassifier(cfg), lambda m, b: m(b["idx"], b["key_mask"], b["targets"])[1]
    return GPT(GPTConfig(**settings)), lambda m, b: m(b["idx"], b["targets"])[1]


def peer_models(case, seq, nanogpt=None):
    """{name: (module, loss on a bench batch)} for the peers that build the case's shape. BERT takes the
    key mask as its attention_mask; GPT-2 takes the targets as labels and shifts them itself, so it scores
    T - 1 positions where ours score T (the same work within 1/T). BERT also has a pooler (one C x C layer)
    that our classifier has not: 1 % more parameters at 6x384."""
    s, out = case.settings, {}
    transformers = import_transformers()
    if case.family == "encoder" and s.get("ffn") == "gelu" and transformers is not None:
        cfg = transformers.BertConfig(vocab_size=BENCH_VOCAB, hidden_size=s["n_embd"], num_hidden_layers=s["n_layer"],
                                      num_attention_heads=s["n_head"], intermediate_size=s["ffn_hidden"],
                                      max_position_embeddings=max(seq, 256), hidden_dropout_prob=s["dropout"],
                                      attention_probs_dropout_prob=s["dropout"], num_labels=2,
                                      attn_implementation="sdpa")
        out["HF BERT"] = (transformers.BertForSequenceClassification(cfg), lambda m, b: m(
            input_ids=b["idx"], attention_mask=b["key_mask"].long(), labels=b["targets"]).loss)
    if case.family == "gpt" and transformers is not None:
        cfg = transformers.GPT2Config(vocab_size=s["vocab_size"], n_positions=s["block_size"], n_embd=s["n_embd"],
                                      n_layer=s["n_layer"], n_head=s["n_head"], resid_pdrop=s["dropout"],
                                      embd_pdrop=s["dropout"], attn_pdrop=s["dropout"], attn_implementation="sdpa")
        out["HF GPT-2"] = (transformers.GPT2LMHeadModel(cfg),
                           lambda m, b: m(input_ids=b["idx"], labels=b["targets"]).loss)
    if case.family == "gpt" and nanogpt is not None:
        cfg = nanogpt.GPTConfig(vocab_size=s["vocab_size"], block_size=s["block_size"], n_layer=s["n_layer"],
                                n_head=s["n_head"], n_embd=s["n_embd"], dropout=s["dropout"], bias=s["bias"])
        with contextlib.redirect_stdout(io.StringIO()):  # it prints its parameter count as it builds
            out["nanoGPT"] = (nanogpt.GPT(cfg), lambda m, b: m(b["idx"], b["targets"])[1])
    return out


def load_nanogpt(path):
    """nanoGPT's model.py, imported from its path: a peer for the benchmark, nothing of it kept here."""
    import importlib.util
    if not os.path.isfile(path):
        raise configurator.ConfigError(f"--nanogpt {path}: no such file (give the path of nanoGPT's model.py)")
    spec = importlib.util.spec_from_file_location("nanogpt_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bench_contestants(case, seq, device, compile_too, nanogpt=None):
    """[(name, module, loss function)] for one case: ours under each switch, then the peers; with
    compile_too, ours and the peers again, compiled (torch.compile, default mode)."""
    settings = {**family_settings(case.family), **case.settings}  # the case's, over the family's defaults
    variants = [("ours", {}), ("ours, manual attention", {"attn_impl": "manual"}),
                ("ours, manual norms", {"norm_impl": "manual"})]
    if device.startswith("cuda") and kernels.triton_available():
        # the Triton attention has no dropout, so its row runs without dropout anywhere: about 10 % of a
        # training step's time when the others drop out (its inference figures are like for like)
        triton = {"attn_impl": "triton", "norm_impl": "triton",
                  "ffn_impl": "triton" if settings["ffn"] == "swiglu" else "torch"}
        variants.append(("ours, Triton kernels" + (", no dropout" if settings["dropout"] else ""),
                         {**triton, "dropout": 0.0}))
    rows = []
    for name, switches in variants:
        torch.manual_seed(0)
        rows.append((name, *our_model(case, seq, **switches)))
    for name, (module, loss_fn) in peer_models(case, seq, nanogpt).items():
        rows.append((name, module, loss_fn))
    rows = [(name, m.to(device), fn) for name, m, fn in rows]
    if compile_too:
        rows += [(f"{name}, compiled", torch.compile(m), fn) for name, m, fn in rows if "manual" not in name]
    return rows


def attention_kernels(module, loss_fn, batch, ctx):
    """The attention kernels one forward of `module` runs, in training and in inference, by their aten names:
    SDPA picks one per call (flash, memory-efficient, cuDNN, or the plain math), and on a GPU a key mask rules
    out flash. Read from the operators dispatched below autograd: it names what ran, not what was asked for."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Seen(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.__name__.split(".")[0]
            if "scaled_dot_product" in name or "flash" in name or "attention" in name:
                self.names.add(name.replace("_scaled_dot_product_", ""))
            return func(*args, **(kwargs or {}))

    found = []
    for training in (True, False):  # attention dropout in training may rule out a kernel
        module.train(training)
        with torch.no_grad(), ctx, Seen() as seen:
            loss_fn(module, batch)
        found.append(", ".join(sorted(seen.names)) or "math (matmul, softmax)")
    return found[0] if found[0] == found[1] else f"{found[0]} (training) / {found[1]}"


def time_contestants(rows, batch, device, ctx, rounds, steps):
    """Per contestant: median ms of a training step (forward, backward, fused AdamW step) and of an inference
    forward (no gradients, eval mode) over `rounds` rounds of `steps` steps each, taken in turns; on CUDA
    also the peak memory one training step allocates above what is resident before it."""
    cuda = device.startswith("cuda")
    work = []
    for name, module, loss_fn in rows:
        opt = torch.optim.AdamW(module.parameters(), lr=1e-4, fused=True)  # the fastest AdamW, CPU or GPU

        def train(module=module, loss_fn=loss_fn, opt=opt):
            module.train()
            with ctx:
                loss = loss_fn(module, batch)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        @torch.no_grad()
        def infer(module=module, loss_fn=loss_fn):
            module.eval()
            with ctx:
                loss_fn(module, batch)

        work.append((name, train, infer))
    for _, train, infer in work:  # warm-up: allocator, kernels picked, a compiled module's compilation
        for _ in range(3):
            train(), infer()
    times = {name: {"train": [], "infer": [], "peak_mb": 0.0} for name, _, _ in work}
    for _ in range(rounds):
        for name, train, infer in work:
            if cuda:
                sync(device)
                resident = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()
            times[name]["train"].append(timed(lambda: [train() for _ in range(steps)], device) / steps * 1e3)
            if cuda:
                peak = (torch.cuda.max_memory_allocated() - resident) / 2**20
                times[name]["peak_mb"] = max(times[name]["peak_mb"], peak)
            times[name]["infer"].append(timed(lambda: [infer() for _ in range(steps)], device) / steps * 1e3)
    return {name: {"train_ms": statistics.median(t["train"]), "infer_ms": statistics.median(t["infer"]),
                   "peak_mb": t["peak_mb"] if cuda else None} for name, t in times.items()}


# -----------------------------------------------------------------------------
# --cases generate: greedy generation from stories260K against Hugging Face and llama2.c's run.c

GEN_PROMPT, GEN_TOKENS = "Once upon a time", 256  # the case: 256 new tokens after the prompt
GEN_BATCHES = (1, 32)

# The golden text: what llama2.c's test_all.py expects of `run stories260K.bin -z tok512.bin -t 0.0 -n 200`, 200
# tokens after BOS (run.c samples one token at each of positions 0..199). tests/test_llama.py and gpu_check.py hold
# greedy decoding to it.
STORIES260K_GREEDY = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
                      "One day, she saw a big, red ball. She wanted to play with it, but it was too high.\nLily's mom "
                      "said, \"Lily, let's go to the park.\" Lily was sad and didn't know what to do. She said, \"I "
                      "want to play with your ball, but I can't find it.\"\nLily was sad and didn't know what to do. "
                      "She said, \"I'm sorry, Lily. I didn't know what to do.\"\nLily didn't want to help her mom, so "
                      "she")


def hf_llama(model):
    """Hugging Face's LlamaForCausalLM holding our Llama's weights, or None without transformers. Our RoPE
    rotates adjacent pairs (2j, 2j+1) of a head, as llama2.c does; Hugging Face's rotates the halves
    (j, j + hs/2): the query and key rows of each head are reordered to match (the permutation Hugging
    Face's own conversion of Meta's checkpoints applies)."""
    transformers = import_transformers()
    if transformers is None:
        return None
    c = model.cfg
    hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=c.vocab_size, hidden_size=c.n_embd, intermediate_size=c.ffn_hidden, num_hidden_layers=c.n_layer,
        num_attention_heads=c.n_head, num_key_value_heads=c.n_kv_head, max_position_embeddings=c.block_size,
        rms_norm_eps=c.norm_eps, tie_word_embeddings=c.tie_embeddings, attn_implementation="sdpa"))
    hs = c.n_embd // c.n_head

    def halves(w, heads):  # (heads * hs, C): rows (2j, 2j+1) of each head -> (j, j + hs/2)
        return w.view(heads, hs // 2, 2, -1).transpose(1, 2).reshape(heads * hs, -1)
    sd = model.state_dict()
    theirs = {"model.embed_tokens.weight": sd["tok_emb.weight"], "model.norm.weight": sd["norm_f.weight"],
              "lm_head.weight": sd["head.weight"]}
    for i in range(c.n_layer):
        ours, hf_layer = f"layers.{i}.", f"model.layers.{i}."
        theirs.update({hf_layer + "input_layernorm.weight": sd[ours + "norm1.weight"],
                       hf_layer + "post_attention_layernorm.weight": sd[ours + "norm2.weight"],
                       hf_layer + "self_attn.q_proj.weight": halves(sd[ours + "attn.wq.weight"], c.n_head),
                       hf_layer + "self_attn.k_proj.weight": halves(sd[ours + "attn.wk.weight"], c.n_kv_head),
                       hf_layer + "self_attn.v_proj.weight": sd[ours + "attn.wv.weight"],
                       hf_layer + "self_attn.o_proj.weight": sd[ours + "attn.wo.weight"],
                       hf_layer + "mlp.gate_proj.weight": sd[ours + "ffn.w1.weight"],
                       hf_layer + "mlp.up_proj.weight": sd[ours + "ffn.w3.weight"],
                       hf_layer + "mlp.down_proj.weight": sd[ours + "ffn.w2.weight"]})
    hf.load_state_dict(theirs, strict=False)  # (tied: lm_head is embed_tokens)
    return hf.to(model.tok_emb.weight.device).eval()


def build_run_c(path, folder):
    """llama2.c's run.c compiled with the system C compiler (cc -O3 -lm) into `folder`; its path."""
    import shutil
    if not os.path.isfile(path):
        raise configurator.ConfigError(f"--runc {path}: no such file (llama2.c's run.c: github.com/karpathy/llama2.c)")
    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None:
        raise configurator.ConfigError("--runc: no C compiler (cc) on this machine's PATH; set CC or install one")
    exe = os.path.join(folder, "run")
    done = subprocess.run([cc, "-O3", "-o", exe, path, "-lm"], capture_output=True, text=True)
    if done.returncode != 0:
        raise configurator.ConfigError(f"--runc {path}: {cc} failed: {done.stderr.strip()[-300:]}")
    return exe


def generation_bench(args, device, tokens=None, batches=None, compiled=True, peers=True):
    """Greedy generation of `tokens` tokens (GEN_TOKENS) from stories260K after GEN_PROMPT, at each batch size of
    `batches` (GEN_BATCHES: 1 and 32): ours eager, ours compiled (its compile time apart; compiled=False leaves it
    out, and the eager step is then the ratios' reference), Hugging Face's LlamaForCausalLM on the same weights
    and llama2.c's run.c (with --runc, batch 1). Contestants take turns, round after round (--rounds), after a
    warm-up each; tokens/s are medians; every contestant's tokens are checked against ours. Runs under whatever
    autocast the caller holds (gpu_check.py times bf16 so)."""
    tokens, batches = tokens or GEN_TOKENS, batches or GEN_BATCHES
    import tempfile
    path = pretrained_file("stories260K")
    model = read_llama2c(path).to(device)
    _, tok = llama_tokenizer_for(model, path, None)
    ids = tok.encode(GEN_PROMPT, bos=True)
    hf = hf_llama(model) if peers else None  # (peers=False: ours alone)
    results = {"prompt": GEN_PROMPT, "new_tokens": tokens, "tables": {}}
    with tempfile.TemporaryDirectory() as folder:
        run_c = None
        if args.runc:
            run_c = build_run_c(args.runc, folder)
            write_llama2c(model, os.path.join(folder, "model.bin"), 0)
            tok_file = os.path.join(os.path.dirname(path), "tok512.bin")
        for batch in batches:
            prompts = [ids] * batch

            def ours(mode):
                return lambda: model.generate(prompts, tokens, temperature=0, mode=mode)

            def hugging_face():
                x = torch.tensor(prompts, device=device)
                with torch.no_grad():
                    out = hf.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=tokens,
                                      min_new_tokens=tokens, do_sample=False, use_cache=True, pad_token_id=0)
                return out[:, len(ids):].tolist()

            def llama2c():  # its own clock: tokens/s over every position after the first
                done = subprocess.run([run_c, os.path.join(folder, "model.bin"), "-z", tok_file, "-t", "0", "-n",
                                       str(len(ids) + tokens - 1), "-i", GEN_PROMPT], capture_output=True, text=True)
                rate = float(done.stderr.split("achieved tok/s:")[1].split()[0])
                return done.stdout, rate
            contestants = {"ours, eager": ours("eager"), **({"ours, compiled": ours("compiled")} if compiled else {})}
            if hf is not None:
                contestants["Hugging Face LlamaForCausalLM"] = hugging_face
            if run_c and batch == 1:
                contestants["llama2.c run.c (cc -O3)"] = llama2c
            reference = ours("eager")()
            figures, first = {}, {}
            for name, fn in contestants.items():  # warm-up: a compiled step compiles here
                start = time.perf_counter()
                out = fn()
                first[name] = time.perf_counter() - start
                if name.startswith("llama2.c"):  # its text: the prompt and what followed, then a newline
                    same = out[0].rstrip("\n") == tok.decode(ids + reference[0])
                else:
                    same = out == reference
                figures[name] = {"rates": [], "same_tokens": bool(same)}
            for _ in range(args.rounds):
                for name, fn in contestants.items():
                    start = time.perf_counter()
                    out = fn()
                    secs = time.perf_counter() - start
                    rate = out[1] if name.startswith("llama2.c") else batch * tokens / secs
                    figures[name]["rates"].append(rate)
            for name, f in figures.items():
                f["tokens_per_s"] = statistics.median(f["rates"])
                if name == "ours, compiled":
                    f["compile_s"] = max(0.0, first[name] - batch * tokens / f["tokens_per_s"])
            base = "ours, compiled" if compiled else "ours, eager"
            ours_rate = figures[base]["tokens_per_s"]
            print(f"\ngeneration, stories260K, greedy, {tokens} new tokens after {GEN_PROMPT!r}, batch {batch} "
                  f"(tokens/s in aggregate; ratio = {base} / the row: > 1, ours is faster)")
            print(f"{'contestant':<34} {'tokens/s':>10} {'ratio':>7}  same tokens as ours")
            for name, f in figures.items():
                f["ratio"] = ours_rate / f["tokens_per_s"]
                extra = f"  (compile {f['compile_s']:.1f} s, once)" if "compile_s" in f else ""
                print(f"{name:<34} {f['tokens_per_s']:10,.0f} {f['ratio']:7.2f}  {'yes' if f['same_tokens'] else 'NO'}{extra}")
            if hf is None:
                print("(Hugging Face: transformers is not installed, no row)")
            results["tables"][batch] = figures
    return results


# -----------------------------------------------------------------------------
# --cases piglatin: Mamba against the encoder-decoder at about equal parameters

def saved_for_backward(loss_fn):
    """(loss, bytes of the distinct tensors autograd saves for the backward of loss_fn()): the activation
    memory of a training step, measured the same way on any device."""
    seen = {}

    def pack(t):
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = loss_fn()
    return loss, sum(seen.values())


def piglatin_bench(args, device, lengths=(32, 128), batch=128):
    """The Pig Latin models at about 62 K parameters, on random batches of the write-up's vocabulary: Mamba
    (config/piglatin_mamba.py's shape) with every state materialized, with the chunked scan, and with each
    chunk compiled, against the small encoder-decoder (config/piglatin_transformer_small.py: source and
    target T/2 each). Per sequence length T: the training step (forward, backward, AdamW) in turns,
    medians, and what autograd saves for the backward; then greedy translation of `batch` words, with the
    decoder's cache (KV cache / Mamba's recurrent state) and without."""
    from model import EncDecConfig, EncoderDecoder, Mamba, MambaConfig
    V = 30
    mamba_shape = dict(vocab_size=V, n_layer=2, n_embd=64, d_state=8, discretization="bilinear", scan="sequential")
    results = []
    for T in lengths:
        g = torch.Generator().manual_seed(0)
        rand = lambda *shape: torch.randint(3, V, shape, generator=g).to(device)  # noqa: E731
        idx, tgt, src, dec, dec_tgt = rand(batch, T), rand(batch, T), rand(batch, T // 2), rand(batch, T // 2), \
            rand(batch, T // 2)
        rows = {}
        for name, chunk, comp in [("Mamba, every state", 0, False), ("Mamba, chunked 16", 16, False),
                                  ("Mamba, chunked 16, compiled", 16, True)]:
            torch.manual_seed(0)
            m = Mamba(MambaConfig(**mamba_shape, block_size=max(64, T), scan_chunk=chunk, scan_compile=comp)).to(device)
            rows[name] = (m, lambda m=m: m(idx, tgt)[1])
        torch.manual_seed(0)
        e = EncoderDecoder(EncDecConfig(vocab_size=V, block_size=max(64, T), n_embd=42, n_head=6, ffn_hidden=42)).to(device)
        rows["encoder-decoder (transformer_small)"] = (e, lambda: e(src, dec, None, dec_tgt)[1])
        opts = {n: torch.optim.AdamW(m.parameters(), 1e-3) for n, (m, _) in rows.items()}
        saved, times = {}, {n: [] for n in rows}
        for n, (m, fn) in rows.items():  # warm-up (a compiled chunk compiles here) and the memory
            loss, saved[n] = saved_for_backward(fn)
            loss.backward()
        for _ in range(args.rounds):
            for n, (m, fn) in rows.items():
                opts[n].zero_grad()
                times[n].append(timed(lambda: (fn().backward(), opts[n].step()), device))
        base = statistics.median(times["encoder-decoder (transformer_small)"])
        print(f"\nPig Latin models, training step, B={batch}, T={T} (the encoder-decoder: source and target T/2 "
              f"each); ratio = the row's time / the encoder-decoder's")
        print(f"{'model':<38} {'params':>8} {'step ms':>9} {'ratio':>6} {'saved for backward MiB':>23}")
        table = {}
        for n, (m, _) in rows.items():
            t = statistics.median(times[n]) * 1e3
            table[n] = {"params": sum(p.numel() for p in m.parameters()), "step_ms": t, "ratio": t / base / 1e3,
                        "saved_mib": saved[n] / 2 ** 20}
            print(f"{n:<38} {table[n]['params']:8,} {t:9.1f} {table[n]['ratio']:6.2f} {table[n]['saved_mib']:23.1f}")
        results.append({"T": T, "batch": batch, "training": table})
    words = torch.randint(3, V, (batch, 9), generator=torch.Generator().manual_seed(1)).to(device)
    words[:, -1] = data.EOS
    print(f"\ngreedy translation of {batch} random 8-letter words, 14 characters each (words/s, median of "
          f"{args.rounds})")
    translation = {}
    for n in ("Mamba, every state", "encoder-decoder (transformer_small)"):
        m = rows[n][0]  # (the last length's models)
        for cache in (True, False):
            secs = statistics.median(timed(lambda: m.translate(words, 14, data.SOS, -1, use_cache=cache), device)
                                     for _ in range(args.rounds))
            translation[f"{n}, {'cache' if cache else 'no cache'}"] = batch / secs
            print(f"{n + (', decoder cache' if cache else ', no cache'):<52} {batch / secs:10,.0f}")
    results.append({"translation_words_per_s": translation})
    return results


# -----------------------------------------------------------------------------
# --cases mamba: the training step of Mamba large (config/piglatin_mamba_large.py's shape) under each scan path,
# against mamba.py's and mamba-minimal's Mamba at that shape, with the step's matmuls timed alone as the floor

MAMBA_LARGE = dict(vocab_size=30, n_layer=8, n_embd=64, d_state=16, d_conv=16, expand=2, discretization="bilinear",
                   dt_div_sqrt=True)  # config/piglatin_mamba_large.py (its Pig Latin batches: 128 x about 40)
MAMBA_PATHS = [  # (row, our config's scan and convolution fields): every scan path, the chunked one eager and
    # compiled (its hand-written backward too), and the convolution as a matmul; the config's row last (the ratios')
    ("ours, sequential, every state", dict(scan="sequential")),
    ("ours, parallel, every state", dict(scan="parallel")),
    ("ours, logspace, every state", dict(scan="logspace")),
    ("ours, chunked 8, eager", dict(scan="sequential", scan_chunk=8)),
    ("ours, chunked 16, compiled", dict(scan="sequential", scan_chunk=16, scan_compile=True)),
    ("ours, chunked 8, compiled", dict(scan="sequential", scan_chunk=8, scan_compile=True)),
    ("ours, chunked 8, compiled, conv as matmul (config)",
     dict(scan="sequential", scan_chunk=8, scan_compile=True, conv_impl="matmul")),
]


def mamba_peers(mambapy_dir, minimal_path):
    """{row: module} of the peers found: mamba.py's LM (github.com/alxndrTL/mamba.py, its parallel scan, pscan=True;
    `mambapy_dir` holds its mambapy/ package) and mamba-minimal's Mamba (github.com/johnma2006/mamba-minimal, its
    sequential loop; `minimal_path` is its model.py, which needs einops), each built from its own config class at
    Mamba large's shape. Their discretization is Mamba's exp(Delta A), Delta B (ours: bilinear, one more division);
    mamba-minimal pads the vocabulary to 32. A peer not given or not importable is left out with one line."""
    import importlib.util
    c, out = MAMBA_LARGE, {}
    try:
        if not mambapy_dir or not os.path.isdir(os.path.join(mambapy_dir, "mambapy")):
            raise ImportError(f"no mambapy/ package in --mambapy {mambapy_dir!r}")
        sys.path.insert(0, mambapy_dir)
        from mambapy.lm import LM
        from mambapy.mamba import MambaConfig as PeerConfig
        out["mamba.py, parallel scan"] = LM(PeerConfig(d_model=c["n_embd"], n_layers=c["n_layer"], d_state=c["d_state"],
                                                       expand_factor=c["expand"], d_conv=c["d_conv"], pscan=True),
                                            vocab_size=c["vocab_size"])
    except ImportError as e:
        print(f"(mamba.py: no row: {e})")
    try:
        if not minimal_path or not os.path.isfile(minimal_path):
            raise ImportError(f"no file at --mamba_minimal {minimal_path!r}")
        spec = importlib.util.spec_from_file_location("mamba_minimal_model", minimal_path)
        module = sys.modules["mamba_minimal_model"] = importlib.util.module_from_spec(spec)  # (its dataclass looks)
        spec.loader.exec_module(module)
        out["mamba-minimal, sequential loop"] = module.Mamba(module.ModelArgs(
            d_model=c["n_embd"], n_layer=c["n_layer"], vocab_size=c["vocab_size"], d_state=c["d_state"],
            expand=c["expand"], d_conv=c["d_conv"]))
    except ImportError as e:
        print(f"(mamba-minimal: no row: {e})")
    return out


def matmul_floor(model, batch, seq):
    """A function doing a training step's matmuls alone, on random tensors of their shapes: for every nn.Linear of
    `model` (the projections of each layer and the head), the forward x W^T and the backward's dL/dx = g W and
    dL/dW = g^T x, over batch * seq rows. What no scan path can go below."""
    shapes = [m.weight.shape for m in model.modules() if isinstance(m, torch.nn.Linear)]  # (out, in) each
    M = batch * seq
    ops = [(torch.randn(M, i), torch.randn(o, i), torch.randn(M, o)) for o, i in shapes]
    return lambda: [(x @ w.t(), g @ w, g.t() @ x) for x, w, g in ops]


def mamba_bench(args, device, batch=128, seq=40):
    """A training step (forward, backward, AdamW) of Mamba large on one random batch (`batch` x `seq`, the Pig Latin
    batches' size), per scan path of ours and per peer, in turns over --rounds rounds after one warm-up step each
    (a compiled chunk compiles in it), medians; and the same step's matmuls alone (matmul_floor)."""
    from model import Mamba, MambaConfig
    g = torch.Generator().manual_seed(0)
    idx, tgt = (torch.randint(3, MAMBA_LARGE["vocab_size"], (batch, seq), generator=g).to(device) for _ in range(2))
    rows = {}
    for name, fields in MAMBA_PATHS:
        torch.manual_seed(0)
        rows[name] = Mamba(MambaConfig(**MAMBA_LARGE, **fields)).to(device)
    ours = len(rows)
    rows.update({n: m.to(device) for n, m in mamba_peers(args.mambapy, args.mamba_minimal).items()})
    steps = {}
    for name, m in rows.items():
        opt = torch.optim.AdamW(m.parameters(), lr=1e-4, fused=True)

        def step(m=m, opt=opt, ours=len(steps) < ours):
            out = m(idx, tgt) if ours else m(idx)
            loss = out[1] if ours else F.cross_entropy(out.flatten(0, 1), tgt.flatten())
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        steps[name] = step
    steps["matmuls alone (the floor)"] = matmul_floor(rows[MAMBA_PATHS[0][0]], batch, seq)
    times = {n: [] for n in steps}
    for fn in steps.values():  # warm-up
        fn()
    for _ in range(args.rounds):
        for n, fn in steps.items():
            times[n].append(timed(lambda: [fn() for _ in range(args.bench_steps)], device) / args.bench_steps)
    base = statistics.median(times[MAMBA_PATHS[-1][0]])
    print(f"\nMamba large training step (forward, backward, AdamW), B={batch}, T={seq}: seconds, median of "
          f"{args.rounds} rounds of {args.bench_steps} step(s) after 1 warm-up; ratio = the row / ours compiled (config)")
    print(f"{'contestant':<40} {'params':>9} {'step s':>8} {'ratio':>6}")
    table = {}
    for n, t in times.items():
        params = sum(p.numel() for p in rows[n].parameters()) if n in rows else None
        table[n] = {"step_s": statistics.median(t), "ratio": statistics.median(t) / base, "params": params,
                    "runs_s": t}
        print(f"{n:<40} {params or '':>9} {table[n]['step_s']:8.3f} {table[n]['ratio']:6.2f}")
    return {"batch": batch, "seq": seq, "training": table}


def run_bench(args, device):
    """Every case (or those whose name contains --cases), a table each, with the conditions."""
    dtype = args.dtype
    ctx = devices.autocast_context(device.split(":")[0], dtype)
    cases = [c for c in BENCH_CASES if not args.cases or any(s in c.name for s in args.cases)]
    generate = args.cases is not None and any("generate" in s for s in args.cases)
    piglatin = args.cases is not None and any("piglatin" in s for s in args.cases)
    mamba = args.cases is not None and any("mamba" in s for s in args.cases)
    if not cases and not generate and not piglatin and not mamba:
        raise configurator.ConfigError(f"--cases {args.cases}: no case matches; cases: "
                                       f"{[c.name for c in BENCH_CASES] + ['generate', 'piglatin', 'mamba']}")
    nanogpt = load_nanogpt(args.nanogpt) if args.nanogpt else None
    peak = peak_flops(device, dtype)
    cond = conditions(device, dtype)
    transformers = import_transformers()
    cond["transformers"] = transformers and transformers.__version__
    print(f"benchmark on {cond['device_name']} ({device}, {cond['threads']} threads), {dtype}, torch {cond['torch']}, "
          f"python {cond['python']}, transformers {cond['transformers'] or 'not installed (no HF peers)'}; "
          f"{args.rounds} rounds of {args.bench_steps} steps, medians; fused AdamW; ratio = the row's time / ours "
          f"(> 1: ours is faster)" + (f"; MFU against {peak[1]}" if peak else ""))
    if not device.startswith("cuda"):
        print("(Triton rows need a GPU: the interpreter's timings mean nothing; peak memory is measured on CUDA only)")
    results = []
    for case in cases:
        batch_size, seq = args.bench_batch or case.batch, args.bench_seq or case.seq
        batch = bench_batch(case, batch_size, seq, device)
        rows = bench_contestants(case, seq, device, args.compile, nanogpt)
        figures = time_contestants(rows, batch, device, ctx, args.rounds, args.bench_steps)
        base = figures["ours"]
        flops = 3 * forward_flops(rows[0][1], seq, batch_size)  # the analytic training FLOPs of a step
        tokens = batch_size * seq
        for name, module, _ in rows:
            f = figures[name]
            f.update(params=sum(p.numel() for p in module.parameters()), tokens=tokens,
                     train_ratio=f["train_ms"] / base["train_ms"], infer_ratio=f["infer_ms"] / base["infer_ms"])
        print(f"\n{case.name}: B={batch_size}, T={seq}, {base['params']:,} parameters (ours)")
        header = (f"{'contestant':<34} {'train ms':>9} {'tok/s':>9} {'ratio':>6} "
                  f"{'infer ms':>9} {'tok/s':>10} {'ratio':>6}")
        header += "  peak MB" if device.startswith("cuda") else ""
        header += "   MFU" if peak else ""
        print(header + "  attention kernel")
        for name, module, loss_fn in rows:
            f = figures[name]
            line = (f"{name:<34} {f['train_ms']:9.2f} {tokens / f['train_ms'] * 1e3:9,.0f} {f['train_ratio']:6.2f} "
                    f"{f['infer_ms']:9.2f} {tokens / f['infer_ms'] * 1e3:10,.0f} {f['infer_ratio']:6.2f}")
            if f["peak_mb"] is not None:
                line += f" {f['peak_mb']:8.0f}"
            if peak:
                f["mfu"] = flops / (f["train_ms"] / 1e3) / peak[0]
                line += f" {f['mfu']:5.1%}"
            f["attention"] = attention_kernels(module, loss_fn, batch, ctx) if "compiled" not in name else "-"
            print(f"{line}  {f['attention']}")
        results.append({"case": case.name, "batch": batch_size, "seq": seq, "train_flops_per_step": flops,
                        "contestants": figures})
    if generate:
        results.append({"case": "generate", **generation_bench(args, device)})
    if piglatin:
        results.append({"case": "piglatin", "results": piglatin_bench(args, device)})
    if mamba:
        results.append({"case": "mamba", **mamba_bench(args, device)})
    if args.json:
        data.write_json(args.json, {"conditions": {**cond, "rounds": args.rounds, "steps": args.bench_steps,
                                                   "peak": peak}, "cases": results}, indent=2)
    return results


# -----------------------------------------------------------------------------
# the command line


def parser():
    p = argparse.ArgumentParser(prog="python -m bench.speed", formatter_class=HelpFormatter,
                                description="The speed benchmark: our models (eager, compiled, each attention and "
                                "norm path) against Hugging Face's BERT and GPT-2 (and nanoGPT, with --nanogpt) on the "
                                "same batches; --cases generate and piglatin time generation and the Pig Latin models")
    p.add_argument("--cases", nargs="+", default=None, help="only the cases whose name contains one of these "
                   "(generate, piglatin, mamba: those cases, which run only when named)")
    p.add_argument("--bench_batch", type=Ranged(int, lambda v: v >= 0, "an integer >= 0 (0: each case's own)"),
                   default=0, help="batch size for every case (0: each case's own)")
    p.add_argument("--bench_seq", type=Ranged(int, lambda v: v >= 0, "an integer >= 0 (0: each case's own)"),
                   default=0, help="sequence length for every case (0: each case's)")
    p.add_argument("--bench_steps", type=Ranged(int, lambda v: v >= 1, "an integer >= 1"), default=3,
                   help="steps per contestant per round")
    p.add_argument("--rounds", type=Ranged(int, lambda v: v >= 1, "an integer >= 1"), default=5,
                   help="rounds (the median is reported)")
    p.add_argument("--compile", action="store_true", help="also time every model compiled")
    p.add_argument("--runc", default=None, help="--cases generate: the path of llama2.c's run.c, compiled here with "
                   "cc -O3 and timed beside ours (batch 1)")
    p.add_argument("--nanogpt", default=None, help="the path of nanoGPT's model.py, a peer for the char GPT")
    p.add_argument("--mambapy", default=os.environ.get("MAMBAPY"), help="--cases mamba: the folder holding mamba.py's "
                   "mambapy/ package (github.com/alxndrTL/mamba.py), a peer (default: $MAMBAPY; none: no row)")
    p.add_argument("--mamba_minimal", default=os.environ.get("MAMBA_MINIMAL"), help="--cases mamba: the path of "
                   "mamba-minimal's model.py (github.com/johnma2006/mamba-minimal; needs einops), a peer (default: "
                   "$MAMBA_MINIMAL; none: no row)")
    p.add_argument("--device", default="auto", help="'auto' (cuda, then mps, then cpu), 'cpu', 'cuda', 'cuda:N' or "
                   "'mps'")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                   help="the models' precision (bfloat16, float16: autocast)")
    p.add_argument("--json", help="write the figures and the conditions to this new file (one already there is "
                   "refused)")
    return p


def main(argv=None):
    """The command line. Bad input (configurator.UserError) ends in one line, `error: ...`, and exit status 1;
    any other exception is a bug and keeps its traceback."""
    try:
        p = parser()
        args = p.parse_args(argv)
        check_ranges(p, args)
        if args.json:
            check_new_file(args.json, "--json")
        return run_bench(args, devices.resolve_device(args.device))
    except configurator.UserError as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    main()
