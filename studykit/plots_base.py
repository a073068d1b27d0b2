"""One look for every figure (seaborn theme)."""
from __future__ import annotations


def theme() -> None:
    """Apply the kit's plotting theme."""
    import seaborn as sns

    sns.set_theme(context="notebook", style="whitegrid", palette="colorblind")
