"""The papers the kit is built on and every compressor's source, with links a reader can follow.

``REFERENCES`` maps a short key to a :class:`Reference`; ``cite(key)`` gives the short form used in
docstrings, notebooks and command output ("Agarwal et al. 2022"), ``full(key)`` the whole entry. The
README's "References" section is generated from this table (a test checks it).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

__all__ = ["Reference", "REFERENCES", "COMPRESSOR_SOURCES", "cite", "full", "markdown"]


@dataclass(frozen=True)
class Reference:
    authors: str  # "Agarwal, Wang, Venkataraman, Papailiopoulos"
    short: str  # "Agarwal et al. 2022"
    title: str
    venue: str
    year: Optional[int]
    url: Optional[str]  # arXiv or DOI link; None where the kit knows no public one
    role: str  # what the kit takes from it


REFERENCES: dict[str, Reference] = {
    "agarwal2022": Reference(
        "Saurabh Agarwal, Hongyi Wang, Shivaram Venkataraman, Dimitris Papailiopoulos", "Agarwal et al. 2022",
        "On the Utility of Gradient Compression in Distributed Training Systems", "MLSys 2022", 2022,
        "https://arxiv.org/abs/2103.00543",
        "the study the kit reproduces: compressors (Tables 2-3), the performance model (Sec. 4.1, Eq. 1; "
        "App. B), how its constants are measured (App. C), the what-if analyses (Sec. 4.2, App. D)"),
    "tirupati": Reference(
        "Yashwanth Kumar Tirupati, Raghavendra Rao Suresh, Akschat Arya", "Tirupati et al.",
        "Distributed Model Training With Dynamic Gradient Compression", "Arizona State University (preprint)",
        None, None,
        "dynamic compression: the quantization level moved by validation accuracy and loss; the none / "
        "static 8-bit / dynamic comparison with data-transferred accounting (Table I)"),
    "han2024": Reference(
        "Wenchen Han, Shay Vargaftik, Michael Mitzenmacher, Brad Karp, Ran Ben Basat", "Han et al. 2024",
        "Beyond Throughput and Compression Ratios: Towards High End-to-end Utility of Gradient Compression",
        "arXiv preprint", 2024, "https://arxiv.org/abs/2407.01378",
        "time-to-accuracy as the metric, FP16 as the baseline to beat, TopK-chunked, THC with saturation and "
        "partial rotation, low-overhead PowerSGD, all-reduce compatibility"),
    "vogels2019": Reference(
        "Thijs Vogels, Sai Praneeth Karimireddy, Martin Jaggi", "Vogels et al. 2019",
        "PowerSGD: Practical Low-Rank Gradient Compression for Distributed Optimization", "NeurIPS 2019", 2019,
        "https://arxiv.org/abs/1905.13727", "powersgd"),
    "wang2018": Reference(
        "Hongyi Wang, Scott Sievert, Zachary Charles, Shengchao Liu, Stephen Wright, Dimitris Papailiopoulos",
        "Wang et al. 2018", "ATOMO: Communication-efficient Learning via Atomic Sparsification", "NeurIPS 2018",
        2018, "https://arxiv.org/abs/1806.04090", "atomo"),
    "alistarh2017": Reference(
        "Dan Alistarh, Demjan Grubic, Jerry Li, Ryota Tomioka, Milan Vojnovic", "Alistarh et al. 2017",
        "QSGD: Communication-Efficient SGD via Gradient Quantization and Encoding", "NeurIPS 2017", 2017,
        "https://arxiv.org/abs/1610.02132", "qsgd"),
    "wen2017": Reference(
        "Wei Wen, Cong Xu, Feng Yan, Chunpeng Wu, Yandan Wang, Yiran Chen, Hai Li", "Wen et al. 2017",
        "TernGrad: Ternary Gradients to Reduce Communication in Distributed Deep Learning", "NeurIPS 2017", 2017,
        "https://arxiv.org/abs/1705.07878", "terngrad"),
    "bernstein2018": Reference(
        "Jeremy Bernstein, Yu-Xiang Wang, Kamyar Azizzadenesheli, Anima Anandkumar", "Bernstein et al. 2018",
        "signSGD: Compressed Optimisation for Non-Convex Problems", "ICML 2018", 2018,
        "https://arxiv.org/abs/1802.04434", "signsgd"),
    "karimireddy2019": Reference(
        "Sai Praneeth Karimireddy, Quentin Rebjock, Sebastian U. Stich, Martin Jaggi", "Karimireddy et al. 2019",
        "Error Feedback Fixes SignSGD and other Gradient Compression Schemes", "ICML 2019", 2019,
        "https://arxiv.org/abs/1901.09847", "ef_signsgd; error feedback"),
    "lin2018": Reference(
        "Yujun Lin, Song Han, Huizi Mao, Yu Wang, William J. Dally", "Lin et al. 2018",
        "Deep Gradient Compression: Reducing the Communication Bandwidth for Distributed Training", "ICLR 2018",
        2018, "https://arxiv.org/abs/1712.01887", "dgc"),
    "aji2017": Reference(
        "Alham Fikri Aji, Kenneth Heafield", "Aji and Heafield 2017",
        "Sparse Communication for Distributed Gradient Descent", "EMNLP 2017", 2017,
        "https://arxiv.org/abs/1704.05021", "topk"),
    "stich2018": Reference(
        "Sebastian U. Stich, Jean-Baptiste Cordonnier, Martin Jaggi", "Stich et al. 2018",
        "Sparsified SGD with Memory", "NeurIPS 2018", 2018, "https://arxiv.org/abs/1809.07599",
        "randomk, topk with memory"),
    "shi2021": Reference(
        "Shaohuai Shi, Xianhao Zhou, Shutao Song, et al. (24 authors)", "Shi et al. 2021", "Towards Scalable Distributed Training of Deep Learning on Public Cloud Clusters",
        "MLSys 2021", 2021, "https://arxiv.org/abs/2010.10458", "mstopk"),
    "horvath2019": Reference(
        "Samuel Horváth, Chen-Yu Ho, Ľudovít Horváth, Atal Narayan Sahu, Marco Canini, Peter Richtárik",
        "Horváth et al. 2019", "Natural Compression for Distributed Deep Learning", "MSML 2022 (arXiv 2019)", 2019,
        "https://arxiv.org/abs/1905.10988", "natural"),
    "li2024": Reference(
        "Minghao Li, Ran Ben Basat, Shay Vargaftik, ChonLam Lao, Kevin Xu, Michael Mitzenmacher, Minlan Yu",
        "Li et al. 2024", "THC: Accelerating Distributed Deep Learning Using Tensor Homomorphic Compression",
        "NSDI 2024", 2024, "https://arxiv.org/abs/2302.08545", "thc"),
    "xu2021": Reference(
        "Hang Xu, Chen-Yu Ho, Ahmed M. Abdelmoniem, Aritra Dutta, El Houcine Bergou, Konstantinos Karatsenidis, "
        "Marco Canini, Panos Kalnis", "Xu et al. 2021",
        "GRACE: A Compressed Communication Framework for Distributed Machine Learning", "ICDCS 2021", 2021,
        None, "the compressor API's shape (compress, decompress, memory)"),
}

#: compressor name -> the key of its source paper (fp16, bf16, quantize and none are plain casts or
#: uniform quantization, with no single source)
COMPRESSOR_SOURCES: dict[str, str] = {
    "powersgd": "vogels2019", "atomo": "wang2018", "qsgd": "alistarh2017", "terngrad": "wen2017",
    "signsgd": "bernstein2018", "ef_signsgd": "karimireddy2019", "dgc": "lin2018", "topk": "aji2017",
    "randomk": "stich2018", "mstopk": "shi2021", "natural": "horvath2019", "thc": "li2024",
    "topk_chunked": "han2024", "topk_chunked_allreduce": "han2024",
}


def cite(key: str) -> str:
    """The short citation, with its link where there is one: 'Agarwal et al. 2022 (https://...)'."""
    if key not in REFERENCES:
        raise KeyError(f"unknown reference {key!r}; known: {', '.join(sorted(REFERENCES))}")
    r = REFERENCES[key]
    return f"{r.short} ({r.url})" if r.url else r.short


def full(key: str) -> str:
    """The whole entry: authors, title, venue, year, link."""
    if key not in REFERENCES:
        raise KeyError(f"unknown reference {key!r}; known: {', '.join(sorted(REFERENCES))}")
    r = REFERENCES[key]
    year = f", {r.year}" if r.year and str(r.year) not in r.venue else ""
    link = f". {r.url}" if r.url else ". (No public link known to the kit.)"
    return f"{r.authors}. *{r.title}*. {r.venue}{year}{link}"


def markdown() -> str:
    """The README's references list (the three papers first, then the compressors' sources)."""
    lines = []
    for key, r in REFERENCES.items():
        lines.append(f"* **{r.short}**: {full(key)} ({r.role})")
    return "\n".join(lines) + "\n"
