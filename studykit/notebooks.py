"""``python -m studykit notebooks``: run every notebook headless with papermill.

Parameters come from a profile YAML (``params/smoke.yaml``: CPU, seconds;
``params/full.yaml``: GPUs) whose top-level keys are notebook names. Executed
copies (and HTML) go to ``reports/`` with an ``index.html`` linking them.
"""
from __future__ import annotations

import argparse
import html
import json
import sys
import time
from pathlib import Path

import yaml

from studykit import paths


def discover(directory: Path = paths.NOTEBOOKS) -> list[Path]:
    """The kit's notebooks, in name order (``tour`` first when present)."""
    nbs = sorted(p for p in directory.glob("*.ipynb") if not p.name.startswith("_"))
    return sorted(nbs, key=lambda p: (p.stem != "tour", p.stem))


def load_profile(path: Path | str) -> dict[str, dict]:
    """Read a profile: ``{notebook_stem: {parameter: value}}``."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"parameter profile {path} not found; profiles: "
                                f"{', '.join(str(p) for p in sorted(paths.PARAMS.glob('*.yaml')))}")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise ValueError(f"{path}: expected a mapping of notebook name -> mapping of parameters")
    return data


class NotebookFailed(RuntimeError):
    pass


def run_one(nb: Path, parameters: dict, out_dir: Path, html_copy: bool = True, timeout_s: int = 1800) -> dict:
    """Execute one notebook; returns a summary dict. Raises :class:`NotebookFailed` naming the cell."""
    import papermill as pm

    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / nb.name
    t0 = time.perf_counter()
    try:
        pm.execute_notebook(str(nb), str(out), parameters=parameters, cwd=str(nb.parent),
                            kernel_name="python3", progress_bar=False, execution_timeout=timeout_s)
    except pm.PapermillExecutionError as exc:
        raise NotebookFailed(f"notebook {nb.name} failed in cell {exc.exec_count} "
                             f"({exc.ename}: {exc.evalue}); executed copy: {out}") from None
    elapsed = time.perf_counter() - t0
    if html_copy:
        _to_html(out)
    return {"notebook": nb.stem, "output": out.name, "seconds": round(elapsed, 2), "parameters": parameters}


def _to_html(ipynb: Path) -> None:
    import nbformat
    from nbconvert import HTMLExporter

    body, _ = HTMLExporter().from_notebook_node(nbformat.read(str(ipynb), as_version=4))
    ipynb.with_suffix(".html").write_text(body)


def write_index(summaries: list[dict], out_dir: Path, profile: str) -> Path:
    rows = "\n".join(
        f"<tr><td><a href='{html.escape(Path(s['output']).with_suffix('.html').name)}'>{html.escape(s['notebook'])}</a>"
        f" (<a href='{html.escape(s['output'])}'>ipynb</a>)</td><td>{s['seconds']:.1f}</td>"
        f"<td><code>{html.escape(json.dumps(s['parameters']))}</code></td></tr>" for s in summaries)
    page = (f"<html><head><meta charset='utf-8'><title>studykit reports</title></head><body>"
            f"<h1>studykit reports</h1><p>profile: <code>{html.escape(profile)}</code>, "
            f"{time.strftime('%Y-%m-%d %H:%M:%S')}</p><table border=1 cellpadding=4>"
            f"<tr><th>notebook</th><th>run time (s)</th><th>parameters</th></tr>{rows}</table></body></html>")
    index = out_dir / "index.html"
    index.write_text(page)
    return index


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m studykit notebooks", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", default=str(paths.PARAMS / "smoke.yaml"), help="profile YAML (default: smoke)")
    ap.add_argument("--only", nargs="*", default=None, help="notebook names to run (default: all)")
    ap.add_argument("--out", default=str(paths.REPORTS), help="output folder (default: reports/)")
    ap.add_argument("--no-html", action="store_true", help="skip the HTML copies")
    args = ap.parse_args((argv or [])[1:] if argv and argv[0] == "notebooks" else argv)

    profile = load_profile(args.params)
    nbs = discover()
    if args.only:
        known = {p.stem for p in nbs}
        bad = sorted(set(args.only) - known)
        if bad:
            print(f"unknown notebook(s) {bad}; available: {', '.join(sorted(known))}", file=sys.stderr)
            return 2
        nbs = [p for p in nbs if p.stem in args.only]
    from tqdm.auto import tqdm

    summaries = []
    out_dir = Path(args.out)
    bar = tqdm(nbs, desc="notebooks", unit="nb")
    for nb in bar:
        bar.set_postfix_str(nb.stem)
        try:
            summaries.append(run_one(nb, profile.get(nb.stem, {}), out_dir, html_copy=not args.no_html))
        except NotebookFailed as exc:
            print(f"\nstudykit notebooks: {exc}", file=sys.stderr)
            write_index(summaries, out_dir, args.params)
            return 1
    index = write_index(summaries, out_dir, args.params)
    print(f"ran {len(summaries)} notebooks; index: {index}")
    return 0
