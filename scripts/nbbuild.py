"""Build a notebook from a compact Python description (cells separated by '# %%' markers).

    python scripts/nbbuild.py notebooks/src/NAME.py notebooks/NAME.ipynb

'# %% [markdown]' starts a markdown cell (lines prefixed with '# ' are unprefixed);
'# %% parameters' starts the papermill parameters cell; '# %% hidden' a code cell whose source is
collapsed in Jupyter (metadata jupyter.source_hidden: an exercise's answer). Outputs are always empty.
"""
import sys

import nbformat


def build(src: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    blocks = src.split("# %%")
    for block in blocks[1:]:
        header, _, body = block.partition("\n")
        header = header.strip()
        body = body.strip("\n")
        if header.startswith("[markdown]"):
            text = "\n".join(line[2:] if line.startswith("# ") else line.lstrip("#") for line in body.splitlines())
            nb.cells.append(nbformat.v4.new_markdown_cell(text))
        else:
            cell = nbformat.v4.new_code_cell(body)
            if header == "parameters":
                cell.metadata["tags"] = ["parameters"]
            elif header == "hidden":
                cell.metadata["jupyter"] = {"source_hidden": True}
            nb.cells.append(cell)
    for i, cell in enumerate(nb.cells):  # stable ids: rebuilding an unchanged source changes nothing
        cell.id = f"cell-{i}"
    return nb


if __name__ == "__main__":
    src, dst = sys.argv[1], sys.argv[2]
    nbformat.write(build(open(src).read()), dst)
    print(f"wrote {dst}")
