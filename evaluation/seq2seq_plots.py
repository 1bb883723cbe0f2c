"""
A seq2seq model's pictures, as PNG files (evaluate.py --plots; matplotlib is imported here and nowhere else that
evaluate.py reaches). seq2seq_plots draws them all: each word's attention maps, every head of every layer
(attention_maps, from the weights evaluate.attention_weights recorded while the model translated the word), then
the character embeddings projected on their first two principal components (embedding_projection).
"""

import os

import torch


def pyplot():
    """matplotlib's pyplot, drawing to files (the Agg backend: no display needed)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def seq2seq_plots(out_dir, translations, embeddings, itos):
    """The write-up's pictures, as PNG files in out_dir: for an encoder-decoder, each word's encoder
    self-attention and cross-attention maps (translations: [(word, its greedy translation, the attention
    weights while it was translated)], empty for a model without an encoder); for any model, a 2-D
    projection (PCA) of the character embeddings (embeddings: the (V, C) table, itos its characters).
    Returns the files written."""
    os.makedirs(out_dir, exist_ok=True)
    written = [attention_maps(out_dir, word, out, weights) for word, out, weights in translations]
    return [path for pair in written for path in pair] + [embedding_projection(out_dir, embeddings, itos)]


def attention_maps(out_dir, word, out, weights):
    """One word's two pictures, encoder self-attention and cross-attention: a grid of heatmaps, a row per layer
    and a column per head. weights: {'encoder': [(1, n_head, T_src, T_src)], 'cross': [(1, n_head, T_out,
    T_src)]}, one per layer. Returns the files written."""
    plt = pyplot()
    written = []
    src_labels = [*word, "EOS"]
    tgt_labels = ["SOS", *out]
    for kind, maps, rows, cols in (("encoder", weights["encoder"], src_labels, src_labels),
                                   ("cross", weights["cross"], tgt_labels, src_labels)):
        n_layer, n_head = len(maps), maps[0].size(1)
        fig, axes = plt.subplots(n_layer, n_head, figsize=(1.6 * n_head + 1, 1.6 * n_layer + 0.6), squeeze=False)
        for li, w in enumerate(maps):
            for hi in range(n_head):
                ax = axes[li][hi]
                ax.imshow(w[0, hi].float().cpu().numpy(), cmap="viridis", vmin=0, vmax=1)
                ax.set_xticks(range(len(cols)), cols, fontsize=5, rotation=90)
                ax.set_yticks(range(len(rows)), rows, fontsize=5)
                ax.set_title(f"layer {li} head {hi}", fontsize=6)
        what = "encoder self-attention (rows: queries)" if kind == "encoder" else \
            "cross-attention (rows: output so far, columns: the word)"
        fig.suptitle(f"{word} -> {out}: {what}", fontsize=8)
        fig.tight_layout()
        path = os.path.join(out_dir, f"attention_{kind}_{word}.png")
        fig.savefig(path, dpi=150)
        plt.close(fig)
        written.append(path)
    return written


@torch.no_grad()
def embedding_projection(out_dir, embeddings, itos):
    """The character embeddings on their first two principal components, vowels, y, consonants and specials
    coloured apart. Returns the file written."""
    plt = pyplot()
    # [PAD] is never read; its row moves only through the tied output head, far from the rest, so it
    # would be the first principal direction by itself: it is left out
    shown = [i for i, name in enumerate(itos) if name != "[PAD]"]
    emb = embeddings.float().cpu()[shown]
    centred = emb - emb.mean(0)
    _, _, v = torch.linalg.svd(centred, full_matrices=False)
    xy = (centred @ v[:2].T).numpy()  # (V - 1, 2): the two principal directions
    fig, ax = plt.subplots(figsize=(5, 5))
    for i, name in enumerate(itos[j] for j in shown):
        colour = "tab:red" if name in "aeiou" else "tab:orange" if name == "y" else "tab:blue" if len(name) == 1 \
            else "tab:gray"
        ax.scatter(xy[i, 0], xy[i, 1], c=colour, s=12)
        ax.annotate(name, xy[i], fontsize=8)
    ax.set_title("character embeddings, first two principal components\n(red: vowels, orange: y, blue: "
                 "consonants and '-', grey: specials)", fontsize=8)
    fig.tight_layout()
    path = os.path.join(out_dir, "embeddings_pca.png")
    fig.savefig(path, dpi=150)
    plt.close(fig)
    return path
